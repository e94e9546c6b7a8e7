"""The argument types every command line of the project shares: `hca-rllib`'s commands,
the tuned examples and the benchmark scripts.

Each `*_argument` is an argparse `type`: it returns the parsed value or raises
`argparse.ArgumentTypeError` with the one line the parser prints. `OneLineParser` prints
that line alone (no usage block) and exits with status 2; `UsageError` is the same kind
of error found after parsing.
"""

from __future__ import annotations

import argparse
import ast
import math
from pathlib import Path
from typing import Any, Dict, List, Optional


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2, no traceback."""


def path_argument(text: str) -> Path:
    """argparse `type` for a path: absolute, `~` expanded (see runner.user_path); an
    empty string is refused (it would silently mean the working directory)."""
    from hca_rllib.runner import user_path

    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    try:
        return user_path(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# The largest count or seed taken (as the config's `MAX_COUNT`): beyond it, a typo.
MAX_COUNT = 2**31 - 1


def int_argument(low: int, high: int = MAX_COUNT, *, names: Dict[str, int] | None = None):
    """argparse `type`: an integer in [low, high], else a one-line error saying so.
    `names`: words taken besides the numbers (e.g. {"all": 0}), as the value they stand for."""
    names = dict(names or {})
    also = "".join(f" or {word!r}" for word in names)

    def parse(text: str) -> int:
        if text.strip() in names:
            return names[text.strip()]
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{also}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]{also}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def float_argument(low: float, high: float = math.inf, *, allow_inf: bool = False, low_open: bool = False):
    """argparse `type`: a number in [low, high] ((low, high] with `low_open`); no NaN, inf
    only if `allow_inf`."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number in {interval}, got {text!r}") from None
        if (math.isnan(value) or (math.isinf(value) and not allow_inf) or not low <= value <= high
                or (low_open and value == low)):
            raise argparse.ArgumentTypeError(f"must be a finite number in {interval}, got {text!r}")
        return value

    parse.__name__ = "float"
    return parse


def name_argument(text: str) -> str:
    """argparse `type` for a non-empty name."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


# What W&B refuses in a project name (at `wandb.init`, long after Ray started).
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"
WANDB_PROJECT_MAX = 128


def wandb_project_argument(text: str) -> str:
    """argparse `type` for a W&B project name: non-empty, at most 128 characters, none of
    the characters W&B refuses (/ \\ # ? % :)."""
    name_argument(text)
    bad = sorted({c for c in text if c in WANDB_PROJECT_FORBIDDEN})
    if bad or len(text) > WANDB_PROJECT_MAX or text != text.strip():
        raise argparse.ArgumentTypeError(
            f"must be a W&B project name (at most {WANDB_PROJECT_MAX} characters, no spaces around it, "
            f"none of {' '.join(WANDB_PROJECT_FORBIDDEN)}), got {text[:60]!r}")
    return text


def address_argument(text: str) -> str:
    """argparse `type` for a Ray address: 'auto', 'local', HOST[:PORT] or ray://HOST[:PORT]
    (PORT in 1..65535)."""
    if text in ("auto", "local"):
        return text
    rest = text[len("ray://"):] if text.startswith("ray://") else text
    host, colon, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    ok = bool(host.strip()) and "://" not in rest and " " not in text and "/" not in host
    if ok and colon:
        ok = port.isdigit() and 1 <= int(port) <= 65535
    if not ok:
        raise argparse.ArgumentTypeError(
            f"must be 'auto', 'local', HOST:PORT or ray://HOST:PORT (PORT in 1..65535), got {text!r}")
    return text


def directory_error(path: Path, *, must_exist: bool) -> str | None:
    """Why `path` cannot be the directory it is given as, or None. `must_exist`: a
    directory to read (it exists and is a directory); else one to write into (a directory
    already, or one that can be created: the nearest existing folder above it takes a
    new entry, tried with a temporary directory removed at once, so that root's
    permissions, a read-only mount and a regular file on the way all count)."""
    import tempfile

    if path.exists() and not path.is_dir():
        return f"{str(path)!r} is a file, not a directory"
    if must_exist:
        return None if path.is_dir() else f"no such directory: {path}"
    above = path
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        return f"{str(path)!r} cannot be created: {str(above)!r} is a file"
    try:
        tempfile.TemporaryDirectory(dir=above, prefix=".hca-rllib-write-test-").cleanup()
    except OSError as error:
        return f"{str(path)!r} cannot be written: {error.strerror or error} in {str(above)!r}"
    return None


def input_directory_argument(text: str) -> Path:
    """argparse `type`: an existing directory (path_argument, then checked)."""
    path = path_argument(text)
    error = directory_error(path, must_exist=True)
    if error:
        raise argparse.ArgumentTypeError(error)
    return path


def output_directory_argument(text: str) -> Path:
    """argparse `type`: a directory to write into, existing or creatable (not a file)."""
    path = path_argument(text)
    error = directory_error(path, must_exist=False)
    if error:
        raise argparse.ArgumentTypeError(error)
    return path


def output_file_argument(text: str) -> Path:
    """argparse `type`: a file to write (not an existing directory), in a directory that
    exists or can be created."""
    path = path_argument(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{str(path)!r} is a directory, not a file")
    error = directory_error(path.parent, must_exist=False)
    if error:
        raise argparse.ArgumentTypeError(error)
    return path


SEED = int_argument(0)
# torch's intra-op threads; 'auto' (0 to the runner): torch's own default.
TORCH_THREADS = int_argument(1, 4096, names={"auto": 0})


def storage_argument(text: str) -> str:
    """argparse `type` for a storage path: a URI (s3://...) as given, else an absolute
    path to a directory that exists or can be created."""
    return text if "://" in text else str(output_directory_argument(text))


def _parse_value(text: str) -> Any:
    if text.strip().lower() in ("nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
        return float(text)  # so that validation sees the number, not a string
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_overrides(pairs: List[str], flag: str = "--set") -> Dict[str, Any]:
    """`KEY=VALUE` pairs (of `flag`, named in the error) as a dict, each value a Python
    literal where it reads as one (`3e-4`, `[1, 2]`, `nan`), else the text."""
    out: Dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"{flag} expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        if not key.strip():
            raise UsageError(f"{flag} expects key=value with a key, got {pair!r}")
        out[key.strip()] = _parse_value(value)
    return out


def unknown_keys_error(config, keys, flag: str = "--set") -> Optional[str]:
    """The one-line error for `keys` that are no field of `config`: a removed one (what
    replaces it) or an unknown one; None when every key is a field. A `grid:` prefix (a
    sweep's grid) is looked through."""
    from hca_rllib.fields import REMOVED_FIELDS, removed_field_error

    names = [key.removeprefix("grid:") for key in keys]
    removed = [name for name in names if name in REMOVED_FIELDS]
    if removed:
        return f"{flag}: {removed_field_error(removed[0])}"
    unknown = [key for key, name in zip(keys, names) if not hasattr(config, name)]
    return f"unknown config key(s) in {flag}: {unknown}" if unknown else None


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (no usage block), status 2:
    `<name>: error: <message> (see <prog> --help)`; `name` is the command's (its `prog`
    by default; "hca-rllib" for the CLI and all its subcommands)."""

    def __init__(self, *args, name: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = name or self.prog

    def error(self, message):
        self.exit(2, f"{self.name}: error: {message} (see {self.prog} --help)\n")
