"""A training run on disk: results, checkpoints that survive a crash, resume, logging.

Layout of a run directory::

    run.json              what was asked (algorithm, env, credit, seed, budget) and the command
    config.json           the resolved AlgorithmConfig (every field)
    results.jsonl         one JSON line per training iteration (see RESULT_KEYS)
    checkpoints/iter_000010/   RLlib checkpoint + rng.pkl + hca_checkpoint.json (written last)
    tensorboard/          TensorBoard event files
    wandb/                the Weights & Biases run (offline unless WANDB_API_KEY is set)

Checkpoints are written into a temporary directory and renamed into place, and carry the
SHA-256 of every file they hold; ``--resume`` loads the newest one whose files all match,
skipping (with a warning) any that a kill or a disk error left damaged, restores the
step counter, optimizer state and the driver's RNG state, and cuts ``results.jsonl`` back
to that checkpoint's iteration, so a killed run loses only the iterations since its last
checkpoint and no result line is duplicated.

A write into the run directory that fails (a full disk, ``ENOSPC``; a quota, ``EDQUOT``;
any other ``OSError``) removes what it half wrote (the temporary checkpoint directory, a
torn results line) and raises :class:`DiskWriteError`: one line naming the file or
directory and the space left on its file system. The previous checkpoint stays the newest
valid one, so ``--resume`` continues from it once space is freed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import pickle
import random
import shutil
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
CHECKPOINT_META = "hca_checkpoint.json"
RNG_STATE = "rng.pkl"

# results.jsonl: the name in the line -> where it is in RLlib's result dict.
RESULT_KEYS = {
    "episode_return_mean": ("env_runners", "episode_return_mean"),
    "game_return_mean": ("env_runners", "game_return_mean"),
    # The last 100 (metrics_num_episodes_for_smoothing) episodes / games, across iterations
    # (callbacks.WindowMeanStats); the two above hold one iteration's.
    "episode_return_window_mean": ("env_runners", "episode_return_window_mean"),
    "game_return_window_mean": ("env_runners", "game_return_window_mean"),
    "episode_len_mean": ("env_runners", "episode_len_mean"),
    "num_episodes": ("env_runners", "num_episodes"),
    "mutual_information": ("learners", "default_policy", "info/mutual_information"),
    "hindsight_accuracy": ("learners", "default_policy", "hindsight/accuracy"),
    "policy_accuracy": ("learners", "default_policy", "policy/accuracy"),
    "trust": ("learners", "default_policy", "credit/trust"),
    "trust_z": ("learners", "default_policy", "credit/trust_z"),
    "trust_signal_z": ("learners", "default_policy", "credit/trust_signal_z"),
    "trust_scale": ("learners", "default_policy", "credit/trust_scale"),
    "history_kl": ("learners", "default_policy", "credit/history_kl"),
    "decision_trust": ("learners", "default_policy", "credit/decision_trust"),
    "hca_ratio_mean": ("learners", "default_policy", "hca/ratio_mean"),
    "hca_ratio_median": ("learners", "default_policy", "hca/ratio_median"),
    "hca_clip_fraction": ("learners", "default_policy", "hca/clip_fraction"),
    "c2a2c_mask_fraction": ("learners", "default_policy", "c2a2c/mask_fraction"),
    "advantage_correlation": ("learners", "default_policy", "hca/advantage_correlation"),
    "policy_loss": ("learners", "default_policy", "policy_loss"),
    "vf_loss": ("learners", "default_policy", "vf_loss"),
    "hindsight_loss": ("learners", "default_policy", "hindsight_loss"),
    "entropy": ("learners", "default_policy", "entropy"),
    "vf_explained_var": ("learners", "default_policy", "vf_explained_var"),
    "num_skipped_updates": ("learners", "__all_modules__", "num_skipped_updates"),
    # Fault tolerance: EnvRunners that failed and were replaced, and those healthy now
    # (`env_runners_lost`, every runner lost so far, follows from these: `result_line`).
    "env_runner_restarts": ("fault_tolerance", "num_remote_worker_restarts"),
    "env_runners_dropped": ("fault_tolerance", "num_env_runners_dropped_lifetime"),
    "healthy_env_runners": ("fault_tolerance", "num_healthy_workers"),
}


class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, damaged), with the reason."""


# ------------------------------------------------------------------ failed writes

# The exit status of `hca-rllib train` when a write into the run directory fails (a full
# disk): sysexits.h's EX_IOERR, distinct from a bad argument (2) and a crash (1).
EXIT_DISK = 74


class DiskWriteError(Exception):
    """A write into the run directory that failed (a full disk, a quota, an I/O error):
    one line naming what was written, where, why, and the space left there. Whatever the
    write left half done has been removed; the previous checkpoint is intact."""

    def __init__(self, message: str, errno_: Optional[int] = None):
        super().__init__(message)
        self.errno = errno_


def _os_error(error: BaseException) -> Optional[OSError]:
    """The OSError behind `error`: itself, or one it was raised from (`raise ... from`;
    a Ray task error holds the remote one as `cause`). An error merely raised while
    another was handled (`__context__`) is not taken for it."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError):
            return error
        error = getattr(error, "cause", None) or error.__cause__
    return None


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def free_space(path) -> str:
    """'<free> free on <mount point>' for the file system holding `path` (or its nearest
    existing parent), from shutil.disk_usage; 'free space unknown' where that fails."""
    path = Path(path)
    while not path.exists() and path.parent != path:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return "free space unknown"
    mount = path.resolve()
    while not os.path.ismount(mount) and mount.parent != mount:
        mount = mount.parent
    return f"{_size(free)} free on {mount}"


def disk_error(what: str, path, error: BaseException) -> DiskWriteError:
    """The one-line DiskWriteError for `error` (an OSError, or one raised from one) met
    while doing `what` ('checkpoint write') to `path`."""
    os_error = _os_error(error) or error
    code = getattr(os_error, "errno", None)
    text = str(os_error)
    if code is None:  # an error that only says it in words (pyarrow's may)
        for known in (errno.ENOSPC, errno.EDQUOT):
            if os.strerror(known).lower() in text.lower():
                code = known
    reason = os.strerror(code) if code else (text.splitlines()[0] if text.strip() else type(os_error).__name__)
    reason = reason[:1].lower() + reason[1:]
    return DiskWriteError(f"{what} to {str(path)!r} failed: {reason} ({free_space(path)})", code)


@contextmanager
def writing(what: str, path):
    """Turn an OSError raised inside into `disk_error(what, path, ...)`."""
    try:
        yield
    except DiskWriteError:
        raise
    except Exception as error:
        if _os_error(error) is None:
            raise
        raise disk_error(what, path, error) from None


def write_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (a temporary beside it, synced, renamed over
    it, then the directory synced, so that the rename itself survives a power loss): a
    failed write leaves the old file as it was and no temporary behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    try:
        _fsync_directory(path.parent)
    except OSError:
        # Some filesystems (network ones) refuse a directory fsync. The data itself was
        # synced, and a lost rename leaves the old, whole file.
        pass


class ResultsFile:
    """results.jsonl opened for appending, a line at a time, each line synced to disk
    before `append` returns (a crash or a power loss keeps every row reported). A line
    that fails to write (a full disk) is cut off again, so the file ends on a whole line,
    and raises DiskWriteError; were the cut to fail too, the torn last line is what
    `read_results` skips."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with writing("results write", self.path):
            self.handle = open(self.path, "ab", buffering=0)

    def append(self, line: Dict[str, Any]) -> None:
        data = memoryview((json.dumps(line) + "\n").encode())
        start = self.handle.tell()
        try:
            while data:
                written = self.handle.write(data)
                data = data[written:]
            os.fsync(self.handle.fileno())
        except Exception as error:
            try:
                self.handle.truncate(start)
            except OSError:
                pass
            if _os_error(error) is None:
                raise
            raise disk_error("results write", self.path, error) from None

    def close(self) -> None:
        self.handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------ paths


def user_path(path) -> Path:
    """A path as a user types it (relative to the working directory, or with `~`) made
    absolute, once, where it enters: RLlib hands checkpoint paths to pyarrow, which reads
    a relative path as a URI without a scheme, and Ray Tune wants absolute storage paths.
    Raises ValueError for a `~user` that does not exist."""
    try:
        return Path(path).expanduser().resolve()
    except RuntimeError as error:  # Path('~nosuchuser').expanduser()
        raise ValueError(f"cannot expand {str(path)!r}: {error}") from None


# ------------------------------------------------------------------ results


def _get(result: Dict[str, Any], path) -> Any:
    for key in path:
        if not isinstance(result, dict) or key not in result:
            return None
        result = result[key]
    return result


def _number(value: Any) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def result_line(result: Dict[str, Any], elapsed_s: float, steps_per_s: float) -> Dict[str, Any]:
    """One results.jsonl line from RLlib's result dict; `score` is the full-game return
    where the env reports one (Atari), else the episode return: of the episodes that ended
    in the iteration. `score_window`: the same over the last 100 games (or episodes),
    across iterations (None where the config has no window stats)."""
    line: Dict[str, Any] = {
        "iteration": int(result["training_iteration"]),
        "env_steps": int(result["num_env_steps_sampled_lifetime"]),
        "time_s": round(elapsed_s, 3),
        "steps_per_s": round(steps_per_s, 1),
    }
    for name, path in RESULT_KEYS.items():
        line[name] = _number(_get(result, path))
    line["env_runners_lost"] = env_runners_lost(line["env_runner_restarts"], line["healthy_env_runners"],
                                                _configured_env_runners(result.get("config")))
    line["score"] = line["game_return_mean"] if line["game_return_mean"] is not None else line["episode_return_mean"]
    line["score_window"] = (line["game_return_window_mean"] if line["game_return_window_mean"] is not None
                            else line["episode_return_window_mean"])
    return line


def _configured_env_runners(config) -> Optional[int]:
    """`num_env_runners` of the result's config (the AlgorithmConfig itself, or a dict under Tune)."""
    value = config.get("num_env_runners") if isinstance(config, dict) else getattr(config, "num_env_runners", None)
    return value if isinstance(value, int) else None


def env_runners_lost(restarts, healthy, configured) -> Optional[int]:
    """Remote EnvRunners lost so far (their process or node died): each one lost is either
    back (counted in RLlib's restarts) or still out (configured minus healthy). None where
    RLlib reports no fault-tolerance figures."""
    if restarts is None or healthy is None or configured is None:
        return None
    return int(restarts) + max(int(configured) - int(healthy), 0)


class ResultsError(ValueError):
    """A results.jsonl with a damaged line that no crash can explain (not the last one)."""


def read_results(path, on_torn: Optional[Callable[[str], None]] = None) -> List[Dict[str, Any]]:
    """The iterations of a results.jsonl, one dict per line: the one reader of the format,
    for the CLI's resume, the sweep, the report and the benchmarks.

    A missing file has no lines and blank lines are skipped. A last line that does not
    parse is what a kill mid-write leaves: it is dropped (and `on_torn`, if given, is told
    so in one line). Any other line that is not a JSON object raises ResultsError naming
    the file and the line number: the file was damaged, and guessing would hide it."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        numbered = [(number, text) for number, text in enumerate(handle, start=1) if text.strip()]
    rows: List[Dict[str, Any]] = []
    for index, (number, text) in enumerate(numbered):
        try:
            row = json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as error:
            if index == len(numbered) - 1:
                if on_torn is not None:
                    on_torn(f"{path}: skipped its torn last line {number} (a kill mid-write)")
                break
            raise ResultsError(f"{path}, line {number}: not valid JSON ({error.msg}); "
                               f"only a torn last line is skipped") from None
        if not isinstance(row, dict):
            raise ResultsError(f"{path}, line {number}: a JSON {type(row).__name__}, not an object")
        rows.append(row)
    return rows


# ------------------------------------------------------------------ checkpoints


def file_hashes(directory: Path) -> Dict[str, str]:
    """SHA-256 of every file below `directory` but CHECKPOINT_META, by relative path: what
    CHECKPOINT_META records and `verify_checkpoint` checks."""
    hashes = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != CHECKPOINT_META:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            hashes[str(path.relative_to(directory))] = digest.hexdigest()
    return hashes


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(algo, run_dir: Path, iteration: int, env_steps: int, keep: int = 3,
                    warn: Optional[Callable[[str], None]] = None) -> Path:
    """Write a checkpoint atomically: into a temporary directory, verified by hashes,
    synced, then renamed to `checkpoints/iter_NNNNNN`. Keeps the newest `keep` checkpoints.

    A write that fails (RLlib's files, the RNG state, the hashes, the sync or the rename;
    a full disk) removes the temporary directory and raises DiskWriteError naming the
    checkpoint and the free space: the previous checkpoint stays the newest valid one.
    A failure while pruning old checkpoints is only a warning (`warn`): the new one is
    complete."""
    root = Path(run_dir) / CHECKPOINTS
    final = root / f"iter_{iteration:06d}"
    tmp = root / f".tmp_iter_{iteration:06d}_{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        algo.save_to_path(str(tmp.resolve()))
        with open(tmp / RNG_STATE, "wb") as f:
            pickle.dump(_rng_state(), f)
        from hca_rllib import __version__

        meta = {"iteration": iteration, "env_steps": env_steps, "time": time.time(),
                "package_version": __version__, "files": file_hashes(tmp)}
        with open(tmp / CHECKPOINT_META, "w") as f:
            f.write(json.dumps(meta, indent=1))
        _fsync_tree(tmp)
        _rename_into_place(tmp, final)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, Exception) and _os_error(error) is not None:
            raise disk_error("checkpoint write", final, error) from None
        raise
    for old in _checkpoints_to_prune(root, final, iteration, keep):
        try:
            _remove(old)
        except OSError as error:
            if warn is not None:
                warn(f"could not remove old checkpoint {str(old)!r}: {error}")
    return final


def _checkpoints_to_prune(root: Path, final: Path, iteration: int, keep: int) -> List[Path]:
    """What a save of `final` (at `iteration`) removes: the checkpoints of iterations past
    it (a resume went back past them because they were damaged: newest_valid_checkpoint
    takes the newest valid one, so any newer one is), and all but the newest `keep - 1`
    older ones. Never `final` itself, which a plain "all but the newest `keep`" did delete
    (with `keep=1` and a damaged newer checkpoint, it kept only the damaged one).
    `keep <= 0`: none."""
    if keep <= 0:
        return []
    others = [path for path in _checkpoints_oldest_first(root) if path != final]
    newer = [path for path in others if _checkpoint_iteration(path) > iteration]
    older = [path for path in others if _checkpoint_iteration(path) <= iteration]
    return newer + older[:max(len(older) - (keep - 1), 0)]


def _rename_into_place(tmp: Path, final: Path) -> None:
    """`tmp` renamed to `final` and the rename synced; on a failure, `final` is as it was
    (an old checkpoint of that name is put back) and `tmp` holds the new files."""
    old = final.with_name(f".trash_{final.name}_{os.getpid()}")
    if final.exists():
        os.rename(final, old)
    try:
        os.rename(tmp, final)
        try:
            _fsync_directory(final.parent)
        except BaseException:
            os.rename(final, tmp)
            raise
    except BaseException:
        if old.exists():
            os.rename(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _remove(path: Path) -> None:
    """Rename out of the `iter_*` namespace first, so a kill mid-delete never leaves a
    half-deleted directory that looks like a checkpoint."""
    trash = path.with_name(f".trash_{path.name}_{os.getpid()}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def remove_partial_checkpoints(run_dir: Path) -> None:
    """Temporary and half-deleted directories that a kill left behind."""
    for path in list((Path(run_dir) / CHECKPOINTS).glob(".tmp_iter_*")) + list(
            (Path(run_dir) / CHECKPOINTS).glob(".trash_*")):
        shutil.rmtree(path, ignore_errors=True)


def verify_checkpoint(path: Path, require_meta: bool = False) -> Dict[str, Any]:
    """The checkpoint's metadata if every file it lists is there and unchanged. A plain
    RLlib checkpoint (no hashes) passes unless `require_meta` (as in a run directory,
    where every checkpoint has them)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    meta_path = path / CHECKPOINT_META
    if not meta_path.exists():
        if (path / "rllib_checkpoint.json").exists() and not require_meta:
            return {"iteration": None, "env_steps": None, "files": None}  # a plain RLlib checkpoint
        raise CheckpointError(f"{str(path)!r} is not a complete checkpoint (no {CHECKPOINT_META})")
    try:
        meta = json.loads(meta_path.read_text())
        files = dict(meta["files"])
        int(meta["iteration"]), int(meta["env_steps"])
    except (ValueError, OSError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {str(path)!r}: unreadable {CHECKPOINT_META} ({error!r})") from None
    actual = file_hashes(path)
    for name, digest in files.items():
        if name not in actual:
            raise CheckpointError(f"checkpoint {str(path)!r}: file {name} is missing")
        if actual[name] != digest:
            raise CheckpointError(f"checkpoint {str(path)!r}: file {name} is damaged (checksum mismatch)")
    return meta


# Config fields that shape the RLModule's weights: a checkpoint restores only into a
# module built with the same values.
MODULE_FIELDS = ("hindsight", "frame_stack", "_model_config")


def checkpoint_algorithm(path: Path) -> Tuple[type, Dict[str, Any]]:
    """The algorithm class and config state an RLlib checkpoint was made with (read from
    its `class_and_ctor_args.pkl`: a pickle, so only for checkpoints you trust)."""
    try:
        with open(Path(path) / "class_and_ctor_args.pkl", "rb") as f:
            ctor = pickle.load(f)
        algo_class = ctor["class"]
        state = ctor["ctor_args_and_kwargs"][0][0]
        if not isinstance(state, dict):
            raise TypeError(f"config state is a {type(state).__name__}")
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} is not an algorithm checkpoint "
                              f"(no class_and_ctor_args.pkl)") from None
    except Exception as error:  # an unpickling error names a module or class it lacks
        raise CheckpointError(f"checkpoint {str(path)!r}: unreadable class_and_ctor_args.pkl "
                              f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
                              ) from None
    from hca_rllib.fields import upgrade_state

    try:  # a 0.1.0 checkpoint: its removed fields load where they hold their defaults
        state = upgrade_state(state)
    except ValueError as error:
        raise CheckpointError(f"checkpoint {str(path)!r}: {error}") from None
    return algo_class, state


def _algo_name(algo_class) -> str:
    return getattr(algo_class, "__name__", repr(algo_class))


def check_checkpoint_fits(path: Path, config) -> None:
    """Raise CheckpointError (one line) when the checkpoint at `path` cannot restore into
    an algorithm built from `config`: another algorithm, another environment, or other
    values of the fields that shape the module (`MODULE_FIELDS`)."""
    from hca_rllib.hca import ALGORITHMS

    algo_class, state = checkpoint_algorithm(path)
    if algo_class not in ALGORITHMS.values():
        raise CheckpointError(f"checkpoint {str(path)!r} is of algorithm {_algo_name(algo_class)}, "
                              f"not one of {list(ALGORITHMS)}")
    if algo_class is not config.algo_class:
        raise CheckpointError(f"checkpoint {str(path)!r} is of algorithm {_algo_name(algo_class)}; "
                              f"this run is {_algo_name(config.algo_class)}")
    if state.get("env") != config.env:
        raise CheckpointError(f"checkpoint {str(path)!r} was made for env {state.get('env')!r}; "
                              f"this run is for env {config.env!r}")
    if (state.get("env_config") or {}) != (config.env_config or {}):
        raise CheckpointError(f"checkpoint {str(path)!r} was made with env_config="
                              f"{state.get('env_config')!r}; this run has {config.env_config!r}")
    differ = [f"{key}={state.get(key)!r} (this run: {getattr(config, key, None)!r})"
              for key in MODULE_FIELDS
              if key in state and _module_value(key, state.get(key)) != _module_value(key, getattr(config, key, None))]
    if differ:
        raise CheckpointError(f"checkpoint {str(path)!r} was made with a module of other shape: "
                              + "; ".join(differ))


def _module_value(key: str, value):
    """A module field's value as the module sees it: `hindsight` with every option, an
    option a checkpoint predates at its default (a 0.1.0 `hindsight` has no `outcome`)."""
    if key == "hindsight" and isinstance(value, dict):
        from hca_rllib.module import hindsight_spec

        try:
            return hindsight_spec(value).as_dict()
        except ValueError:
            return value
    return value


def restore_algorithm(algo, path: Path) -> None:
    """`algo.restore_from_path`, with a failure (a module that does not fit, a checkpoint
    of another package version) as a one-line CheckpointError."""
    from hca_rllib import __version__

    try:
        algo.restore_from_path(str(Path(path).resolve()))
    except Exception as error:
        version = checkpoint_version(path)
        made = (f" (made by hca_rllib {version}; this is {__version__})"
                if version is not None and version != __version__ else "")
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"checkpoint {str(path)!r} does not restore into this "
                              f"{_algo_name(type(algo))}{made}: {type(error).__name__}: {first[:300]}") from None


def checkpoint_version(path: Path) -> Optional[str]:
    """The hca_rllib version that made the checkpoint at `path` (from its CHECKPOINT_META),
    or None where that file is missing or unreadable."""
    try:
        return json.loads((Path(path) / CHECKPOINT_META).read_text()).get("package_version")
    except (OSError, ValueError, AttributeError):
        return None


def _checkpoint_iteration(path: Path) -> int:
    """The iteration an `iter_*` directory's name gives (-1: a name without a number)."""
    digits = path.name[len("iter_"):]
    return int(digits) if digits.isdigit() else -1


def _checkpoints_oldest_first(root: Path) -> List[Path]:
    """The `iter_*` directories of `root` by iteration (by number: `iter_1000000` has
    seven digits and comes after `iter_999999`); a name without a number first."""
    return sorted(Path(root).glob("iter_*"), key=lambda path: (_checkpoint_iteration(path), path.name))


def checkpoints_newest_first(run_dir: Path) -> List[Path]:
    return _checkpoints_oldest_first(Path(run_dir) / CHECKPOINTS)[::-1]


def newest_valid_checkpoint(run_dir: Path, warn: Callable[[str], None]) -> Optional[Path]:
    for path in checkpoints_newest_first(run_dir):
        try:
            verify_checkpoint(path, require_meta=True)
            return path
        except CheckpointError as error:
            warn(f"skipping checkpoint {path.name}: {error}")
    return None


def _rng_state() -> Dict[str, Any]:
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng_state(path: Path) -> None:
    import torch

    rng_file = Path(path) / RNG_STATE
    if not rng_file.exists():
        return
    with open(rng_file, "rb") as f:
        state = pickle.load(f)
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


# ------------------------------------------------------------------ loggers


class TensorBoardLogger:
    """Scalars against env steps. On resume, `purge_step` (the first step after the
    checkpoint) tells TensorBoard to hide the killed run's points from there on, so the
    curves do not overlap where iterations are run again.

    Events are written synchronously (tensorboardX's `EventsWriter`, flushed and synced
    every iteration), not through `SummaryWriter`'s writer thread and exit hook: a write
    that fails (a full disk) raises here, as DiskWriteError, rather than in a thread
    whose queue then blocks the run, or at interpreter exit with a traceback."""

    def __init__(self, directory: Path, purge_step: Optional[int] = None):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.directory = Path(directory)
        with writing("TensorBoard write", self.directory):
            self.directory.mkdir(parents=True, exist_ok=True)
            # EventsWriter names its file by the second and host and opens it with "wb":
            # a second writer within the same second (a quick resume) would truncate the
            # first one's file, so it gets a suffix.
            stem = f"events.out.tfevents.{str(time.time())[:10]}.{socket.gethostname()}"
            suffix, n = "", 0
            while (self.directory / (stem + suffix)).exists():
                n += 1
                suffix = f".{n}"
            self.writer = EventsWriter(str(self.directory / "events"), filename_suffix=suffix)
            if purge_step is not None:  # as SummaryWriter(purge_step=...) writes it
                self.writer.write_event(Event(step=purge_step, file_version="brain.Event:2"))
                self.writer.write_event(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))
            self.writer.flush()

    def log(self, line: Dict[str, Any]) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        with writing("TensorBoard write", self.directory):
            for key, value in line.items():
                if key not in ("iteration", "env_steps") and isinstance(value, (int, float)):
                    summary = Summary(value=[Summary.Value(tag=key, simple_value=float(value))])
                    self.writer.write_event(Event(wall_time=time.time(), step=int(line["env_steps"]),
                                                  summary=summary))
            self.writer.flush()

    def close(self) -> None:
        with writing("TensorBoard write", self.directory):
            self.writer.close()


def wandb_mode(requested: str = "auto") -> Optional[str]:
    """`auto`: online when WANDB_API_KEY is set, else offline; `off`: no W&B."""
    if requested == "off":
        return None
    if requested == "auto":
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"
    if requested not in ("online", "offline"):
        raise ValueError(f"wandb mode must be auto, online, offline or off, got {requested!r}")
    return requested


class WandbLogger:
    """Plain `wandb.log` per iteration (the Tune path uses Ray's WandbLoggerCallback,
    see `wandb_logger_callback`). The key is read by wandb from the environment and
    never passed, printed or stored here."""

    def __init__(self, directory: Path, mode: str, project: str, group: str, name: str,
                 config: Dict[str, Any], resume_id: Optional[str] = None):
        import wandb

        self.directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project, group=group, name=name, job_type="train", config=config,
            dir=str(directory), mode=mode, id=resume_id, resume="allow" if resume_id else None,
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.id = self.run.id

    def log(self, line: Dict[str, Any]) -> None:
        # wandb writes from its own service process: a full disk there does not reach
        # this call; what does (a local OSError) is the same one-line error.
        with writing("W&B write", self.directory):
            self.run.log({k: v for k, v in line.items() if v is not None}, step=line["env_steps"])

    def close(self) -> None:
        self.run.finish()


def wandb_logger_callback(project: str = "hca-rllib", group: Optional[str] = None, **kwargs):
    """Ray Tune's `WandbLoggerCallback` (as `hca_rllib.wandb_tune.HCAWandbLoggerCallback`,
    which needs no key when offline), offline unless WANDB_API_KEY is set.

    The runs go to `dir` (a `wandb.init` argument), else to the driver's `WANDB_DIR` where
    it is set, else into each trial's directory (Ray's default). Ray's logging actor does
    not inherit the driver's environment, so `WANDB_DIR` is passed on here as `dir`;
    without that, a `WANDB_DIR` set after `ray.init` was ignored and the offline runs went
    to the trial's working directory, reaching the storage path only if Tune's last sync
    ran after the actor finished."""
    from hca_rllib.wandb_tune import HCAWandbLoggerCallback

    mode = wandb_mode(kwargs.pop("mode", "auto"))
    directory = kwargs.pop("dir", None) or os.environ.get("WANDB_DIR")
    if directory:
        directory = os.path.abspath(os.path.expanduser(directory))
        os.makedirs(directory, exist_ok=True)
        kwargs["dir"] = directory
    return HCAWandbLoggerCallback(project=project, group=group, mode=mode, **kwargs)


def flat_config(config) -> Dict[str, Any]:
    """The config as JSON-safe values (for config.json and W&B)."""
    return json.loads(json.dumps(config.to_dict(), default=repr))


# ------------------------------------------------------------------ progress


PROGRESS_EVERY_S = 10.0


class Progress:
    """What `train` shows while it runs: env steps of the budget, steps/s, return (the
    full-game score where the env has one), mutual information and the time left.

    On a terminal, one tqdm bar updated in place. Elsewhere (a log file, a pipe, CI), plain
    lines, one per iteration but at most one every `every_s` seconds (default 10; 0: every
    iteration), so that thousands of short iterations (Atari) do not flood the log; the
    first iteration is shown at once and the last one always (at `close` if it was held
    back). `clock` is for tests."""

    def __init__(self, budget_steps: int, stream=None, *, every_s: float = PROGRESS_EVERY_S,
                 tty: Optional[bool] = None, clock: Callable[[], float] = time.monotonic):
        self.budget = budget_steps
        self.stream = stream or sys.stdout
        self.tty = (hasattr(self.stream, "isatty") and self.stream.isatty()) if tty is None else tty
        self.every_s = every_s
        self.clock = clock
        self.bar = None
        self.shown_at: Optional[float] = None
        self.held: Optional[str] = None

    def _figures(self, line: Dict[str, Any], rate: float, pad: bool = True):
        left = max(self.budget - line["env_steps"], 0) / max(rate, 1e-9)
        # The last 100 games/episodes where the run has the window, else the iteration's.
        score = line.get("score_window")
        score = line["score"] if score is None else score
        mi = line["mutual_information"]
        score = "n/a" if score is None else f"{score:.2f}"
        mi = "n/a" if mi is None else f"{mi:+.4f}"
        if pad:
            return (f"{rate:7.0f} steps/s", f"return {score:>7}", f"MI {mi:>7} nats", f"left {_duration(left)}")
        return f"{rate:.0f} steps/s", f"return {score}", f"MI {mi} nats", f"left {_duration(left)}"

    def text(self, line: Dict[str, Any], rate: float) -> str:
        """The plain line for logs."""
        speed, score, mi, left = self._figures(line, rate)
        return (f"iter {line['iteration']:>5}  steps {line['env_steps']:>10,}/{self.budget:,}  "
                f"{speed}  {score}  {mi}  {left}")

    def show(self, line: Dict[str, Any], rate: float) -> None:
        if self.tty:
            self._update_bar(line, rate)
            return
        text = self.text(line, rate)
        now = self.clock()
        if self.shown_at is None or now - self.shown_at >= self.every_s or line["env_steps"] >= self.budget:
            self.stream.write(text + "\n")
            self.stream.flush()
            self.shown_at, self.held = now, None
        else:
            self.held = text

    def _update_bar(self, line: Dict[str, Any], rate: float) -> None:
        from tqdm import tqdm

        speed, score, mi, left = self._figures(line, rate, pad=False)
        steps = min(line["env_steps"], self.budget)  # past the budget: a full bar
        text = (f"{line['env_steps']:,}/{self.budget:,} steps, {speed}, {left}, "
                f"iter {line['iteration']}, {score}, {mi}")
        if self.bar is None:
            self.bar = tqdm(total=self.budget, initial=steps, desc=text, file=self.stream,
                            dynamic_ncols=True, mininterval=0,
                            bar_format="{percentage:3.0f}%|{bar}| {desc} [{elapsed}]")
            return
        self.bar.n = steps
        self.bar.set_description_str(text, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.held is not None:
            self.stream.write(self.held + "\n")
            self.stream.flush()
            self.held = None


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


# ------------------------------------------------------------------ the loop


def read_run_json(run_json: Path) -> Dict[str, Any]:
    """A run's `run.json` as a dict; ValueError with one line when it is not one (cut
    short by a full disk, edited by hand)."""
    try:
        data = json.loads(run_json.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{str(run_json)!r} is not valid JSON ({error.msg} at line {error.lineno}, "
                         f"column {error.colno}): repair it or start a new run") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {str(run_json)!r}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{str(run_json)!r} holds a JSON {type(data).__name__}, not the run's settings "
                         f"(an object): repair it or start a new run")
    return data


def stored_run_settings(run_dir: Path, resume: bool, keys, made_by: str) -> Dict[str, Any]:
    """The settings a start in `run_dir` must reuse, for the CLI and the tuned examples.

    Without `resume`: none, and a directory that already holds a run is refused. With it:
    the run's own `keys` from `run.json` (written by `made_by`) and its `stop_timesteps`;
    only the budget may change. Raises ValueError with a one-line reason."""
    run_dir = user_path(run_dir)
    run_json = run_dir / "run.json"
    if not resume:
        if run_json.exists() and (run_dir / "results.jsonl").exists():
            raise ValueError(f"{str(run_dir)!r} already holds a run: pass --resume to continue it, "
                             f"or choose another --output")
        return {}
    if not run_json.exists():
        raise ValueError(f"nothing to resume in {str(run_dir)!r}: it has no run.json")
    data = read_run_json(run_json)
    stored = data.get("args") or {}
    missing = [key for key in keys if key not in stored]
    if missing:
        raise ValueError(f"{str(run_dir)!r} was not made by `{made_by}` (its run.json lacks "
                         f"{missing}): resume it with the script that made it")
    return {**{key: stored[key] for key in keys}, "stop_timesteps": data.get("stop_timesteps")}


def restore_run_args(args, run_dir: Path, keys, made_by: str, default_stop_timesteps: int) -> None:
    """Set on `args` (an argparse namespace with `resume` and `stop_timesteps`) the settings
    a start in `run_dir` must reuse (`stored_run_settings`), and the budget: the command
    line's `stop_timesteps`, else the run's, else `default_stop_timesteps`. One function
    for the CLI and the tuned examples. Raises ValueError with a one-line reason."""
    stored = stored_run_settings(run_dir, args.resume, keys, made_by)
    stop = stored.pop("stop_timesteps", None)
    for key, value in stored.items():  # the run's own settings; only the budget may change
        setattr(args, key, value)
    if args.stop_timesteps is None:
        args.stop_timesteps = default_stop_timesteps if stop is None else stop
    if args.stop_timesteps <= 0:
        raise ValueError(f"--stop-timesteps must be > 0, got {args.stop_timesteps}")



def init_ray(address: Optional[str] = None) -> None:
    """Connect to `address` (or RAY_ADDRESS); else start an embedded Ray bound to loopback,
    with this machine's CPUs and an object store of a tenth of its memory (0.3-2 GiB).

    A SIGTERM handler the program installed (the CLI's: SIGTERM takes Ctrl-C's path) is
    kept: `ray.init` replaces it with Ray's own, which aborts the process."""
    import ray

    if ray.is_initialized():
        return
    on_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        _start_ray(ray, address)
    finally:
        if callable(on_sigterm) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_sigterm)


def _start_ray(ray, address: Optional[str]) -> None:
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
        return
    try:
        import psutil

        memory = psutil.virtual_memory().total
    except ImportError:
        memory = 8 * 2**30
    start_local_ray(
        address="local",
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        object_store_memory=int(min(max(memory // 10, 300 * 2**20), 2 * 2**30)),
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )


# What Ray (2.60, `ray._private.node`) raises when its raylet does not register within
# its fixed 30 s: a loaded machine, not a broken install, so an embedded start is retried.
NODE_START_TIMEOUT = "timed out during startup"


def start_local_ray(**init_kwargs) -> None:
    """`ray.init(**init_kwargs)` for a Ray started here (not one to connect to), tried
    once more when the node does not start within Ray's limit (`NODE_START_TIMEOUT`),
    after `ray.shutdown()` stops what the failed start left running. A second time-out
    is `RayStartError`, one line."""
    import ray

    for attempt in (1, 2):
        try:
            ray.init(**init_kwargs)
            return
        except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception here
            if NODE_START_TIMEOUT not in str(error):
                raise
            ray.shutdown()
            if attempt == 2:
                raise RayStartError(f"Ray's node did not start within Ray's limit, twice ({error}); "
                                    f"the machine may be overloaded") from None
            print("warning: Ray's node did not start within Ray's limit; trying once more", file=sys.stderr)


class RayStartError(RuntimeError):
    """The embedded Ray did not start (one line, for the CLI)."""


def training_iterations(algo, stop_timesteps: int, start: Optional[Dict[str, Any]] = None
                        ) -> Iterator[Tuple[Dict[str, Any], Dict[str, Any], float]]:
    """The training loop of every run (`run_training`, so the CLI and the tuned examples,
    and the benchmarks): `algo.train()` until `stop_timesteps` env steps, yielding
    `(result, line, rate)` per iteration, where `line` is the iteration's results.jsonl
    line (`result_line`) and `rate` the env steps per second since the loop started.
    `start`: the last line of a resumed run, whose env steps and `time_s` it continues
    (default: a fresh run)."""
    line = start or {"env_steps": 0, "iteration": 0}
    start_time, start_steps = time.time(), line["env_steps"]
    elapsed_before = line.get("time_s", 0.0)
    while line["env_steps"] < stop_timesteps:
        result = algo.train()
        now = time.time() - start_time
        rate = (int(result["num_env_steps_sampled_lifetime"]) - start_steps) / max(now, 1e-9)
        line = result_line(result, elapsed_before + now, rate)
        yield result, line, rate


class CheckpointSchedule:
    """When the training loop checkpoints: after every `every` iterations (0: never by
    count), and, with `every_s`, after an iteration that ends `every_s` seconds or more
    after the last checkpoint (or the start). `clock` is for tests."""

    def __init__(self, every: int, every_s: Optional[float], iteration: int,
                 clock: Callable[[], float] = time.monotonic):
        self.every, self.every_s, self.clock = every, every_s, clock
        # The iteration of the last checkpoint (the start's: the one resumed from) and when.
        self.last_iteration, self.saved_at = iteration, clock()

    def due(self, iteration: int) -> bool:
        """Whether the iteration that just ended is checkpointed."""
        due = self.every > 0 and iteration % self.every == 0
        if self.every_s is not None and self.clock() - self.saved_at >= self.every_s:
            due = True
        return due

    def saved(self, iteration: int) -> None:
        self.last_iteration, self.saved_at = iteration, self.clock()


def run_training(
    config,
    run_dir: Path,
    stop_timesteps: int,
    *,
    run_info: Dict[str, Any],
    resume: bool = False,
    checkpoint_every: int = 10,
    keep_checkpoints: int = 3,
    wandb: str = "auto",
    wandb_project: str = "hca-rllib",
    tensorboard: bool = True,
    address: Optional[str] = None,
    progress: bool = True,
    progress_every: float = PROGRESS_EVERY_S,
    torch_threads: Optional[int] = 1,
    warn: Callable[[str], None] = lambda message: print(f"warning: {message}", file=sys.stderr),
    checkpoint_every_s: Optional[float] = None,
    stop_when: Optional[Callable[[Dict[str, Any]], Optional[str]]] = None,
) -> Dict[str, Any]:
    """Train `config` until `stop_timesteps` env steps, writing the run directory above.

    Returns the last results line. With `resume`, continues from the newest valid
    checkpoint in `run_dir` (or starts over, with a warning, if there is none). `progress`
    shows a bar on a terminal, else a line per iteration, at most one every
    `progress_every` seconds (see Progress). A write into `run_dir` that fails (a full
    disk) stops the run with DiskWriteError (one line) and leaves the previous checkpoint
    as the newest valid one (see `save_checkpoint`, `ResultsFile`, `TensorBoardLogger`).

    `checkpoint_every_s`: also checkpoint after an iteration that ends this many seconds
    or more after the last checkpoint (or the start), so that a kill loses at most about
    that much training whatever an iteration's length. `stop_when(line)`, called after each
    iteration's line is written: a reason (a string) ends the run there, before the
    budget; its last checkpoint is then that iteration's, as at the budget's end (the
    returned line is then short of `stop_timesteps`).
    """
    _set_torch_threads(torch_threads)
    run_dir = user_path(run_dir)
    made_run_dir = _make_run_dir(run_dir)
    info = _run_info(run_dir, run_info, resume, stop_timesteps)
    mode = wandb_mode(wandb)
    # Before Ray starts: a checkpoint that does not fit is named at once.
    checkpoint = _checkpoint_to_resume(run_dir, config, warn) if resume else None
    _init_ray_for(run_dir, made_run_dir, address)
    algo = config.build_algo()
    loggers: List[Any] = []
    display: Optional[Progress] = None
    disk_failed = False
    try:
        kept = _restore_or_start(algo, config, run_dir, checkpoint, resume)
        _write_run_files(run_dir, kept, info)
        purge = kept[-1]["env_steps"] + 1 if (checkpoint is not None and kept) else None
        _open_loggers(loggers, run_dir, config, info, tensorboard=tensorboard, purge_step=purge,
                      wandb_mode=mode, wandb_project=wandb_project)
        display = Progress(stop_timesteps, every_s=progress_every) if progress else None

        def save(line: Dict[str, Any]) -> None:
            save_checkpoint(algo, run_dir, line["iteration"], line["env_steps"], keep_checkpoints, warn)

        line = kept[-1] if kept else {"env_steps": 0, "iteration": 0}
        schedule = CheckpointSchedule(checkpoint_every, checkpoint_every_s, line["iteration"])
        line = _train_and_record(algo, run_dir / "results.jsonl", stop_timesteps, line, loggers, display,
                                 schedule, save, stop_when)
        if display:
            display.close()
        if line["iteration"] != schedule.last_iteration or not checkpoints_newest_first(run_dir):
            save(line)
        return line
    except DiskWriteError:
        disk_failed = True  # the one line says it all: loggers close quietly below
        raise
    finally:
        _close_run(display, loggers, algo, warn, quiet=disk_failed)


def _set_torch_threads(torch_threads: Optional[int]) -> None:
    if torch_threads:
        # The driver holds the local EnvRunner and learner; Ray's own workers run torch
        # with one thread (OMP_NUM_THREADS=1). More threads here fight the EnvRunners
        # for the cores: measured 2-9x slower on 2 busy cores (tuned_examples/README.md).
        import torch

        torch.set_num_threads(torch_threads)


def _make_run_dir(run_dir: Path) -> bool:
    """Create `run_dir` (and its parents); whether it was made here."""
    made = not run_dir.exists()
    with writing("creating the run directory", run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    return made


def _init_ray_for(run_dir: Path, made_run_dir: bool, address: Optional[str]) -> None:
    """`init_ray(address)`; when it fails, a run directory made for this run is removed
    again (no half-made run directory for the next try to trip over)."""
    try:
        init_ray(address)
    except BaseException:
        if made_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run_info(run_dir: Path, run_info: Dict[str, Any], resume: bool, stop_timesteps: int) -> Dict[str, Any]:
    """What run.json will hold: `run_info`, or on a resume the stored one (with the new
    budget)."""
    run_json = run_dir / "run.json"
    info = read_run_json(run_json) if resume and run_json.exists() else dict(run_info)
    info["stop_timesteps"] = stop_timesteps
    return info


def _checkpoint_to_resume(run_dir: Path, config, warn: Callable[[str], None]) -> Optional[Path]:
    """The newest valid checkpoint of `run_dir`, checked to fit `config`; None (with a
    warning): start from scratch."""
    checkpoint = newest_valid_checkpoint(run_dir, warn)
    if checkpoint is None:
        warn(f"no valid checkpoint in {str(run_dir)!r}: starting from scratch")
    else:
        check_checkpoint_fits(checkpoint, config)
    return checkpoint


def _restore_or_start(algo, config, run_dir: Path, checkpoint: Optional[Path], resume: bool
                      ) -> List[Dict[str, Any]]:
    """Restore `algo` (and the driver's RNG) from `checkpoint`, or write config.json for a
    fresh start; returns the results lines the run keeps (those the checkpoint covers)."""
    if resume:
        remove_partial_checkpoints(run_dir)
    if checkpoint is None:
        with writing("config.json write", run_dir / "config.json"):
            write_file(run_dir / "config.json", json.dumps(flat_config(config), indent=1).encode())
        return []
    restore_algorithm(algo, checkpoint)
    restore_rng_state(checkpoint)
    meta = verify_checkpoint(checkpoint, require_meta=True)
    kept = [line for line in read_results(run_dir / "results.jsonl") if line["iteration"] <= meta["iteration"]]
    print(f"resuming from {checkpoint} (iteration {meta['iteration']}, "
          f"{meta['env_steps']:,} env steps)", flush=True)
    return kept


def _write_run_files(run_dir: Path, kept: List[Dict[str, Any]], info: Dict[str, Any]) -> None:
    """results.jsonl cut back to the `kept` lines, and run.json (each atomically)."""
    results_path = run_dir / "results.jsonl"
    with writing("results write", results_path):
        write_file(results_path, "".join(json.dumps(line) + "\n" for line in kept).encode())
    _write_run_json(run_dir, info)


def _write_run_json(run_dir: Path, info: Dict[str, Any]) -> None:
    run_json = run_dir / "run.json"
    with writing("run.json write", run_json):
        write_file(run_json, json.dumps(info, indent=1, default=repr).encode())


def _open_loggers(loggers: List[Any], run_dir: Path, config, info: Dict[str, Any], *, tensorboard: bool,
                  purge_step: Optional[int], wandb_mode: Optional[str], wandb_project: str) -> None:
    """Append to `loggers` the run's TensorBoard and W&B loggers, one at a time (those
    opened before a failure are in the list, for the caller to close). A new W&B run id
    goes into run.json (`info`), so a resume continues that W&B run."""
    if tensorboard:
        loggers.append(TensorBoardLogger(run_dir / "tensorboard", purge_step=purge_step))
    if wandb_mode is not None:
        group = f"{info.get('env')}:{info.get('credit')}"
        name = f"{info.get('env')}:{info.get('credit')}:seed{info.get('seed')}"
        wandb_logger = WandbLogger(run_dir / "wandb", wandb_mode, wandb_project, group, name,
                                   {**flat_config(config), "run": info}, resume_id=info.get("wandb_id"))
        if info.get("wandb_id") != wandb_logger.id:
            info["wandb_id"] = wandb_logger.id
            _write_run_json(run_dir, info)
        loggers.append(wandb_logger)


def _train_and_record(algo, results_path: Path, stop_timesteps: int, start: Dict[str, Any], loggers: List[Any],
                      display: Optional[Progress], schedule: CheckpointSchedule,
                      save: Callable[[Dict[str, Any]], None],
                      stop_when: Optional[Callable[[Dict[str, Any]], Optional[str]]]) -> Dict[str, Any]:
    """The iteration loop (`training_iterations` from the `start` line): each line
    appended to results.jsonl, logged and shown, a checkpoint when `schedule` says so;
    returns the last line."""
    line = start
    with ResultsFile(results_path) as results:
        for _, line, rate in training_iterations(algo, stop_timesteps, start=start):
            results.append(line)
            for log in loggers:
                log.log(line)
            if display:
                display.show(line, rate)
            if schedule.due(line["iteration"]):
                save(line)
                schedule.saved(line["iteration"])
            if stop_when is not None and stop_when(line):
                break
    return line


def _close_run(display: Optional[Progress], loggers: List[Any], algo, warn: Callable[[str], None],
               quiet: bool) -> None:
    """End the progress display, close the loggers and stop `algo`, also after an error
    or Ctrl-C; a failure there is a warning (none for the loggers when `quiet`: a failed
    disk write said it all), never hiding the run's own outcome."""
    if display:  # end the bar's line, show a held-back line
        display.close()
    for log in loggers:
        try:
            log.close()
        except Exception as error:  # a logger must not hide the run's own outcome
            if not quiet:
                warn(f"closing {type(log).__name__} failed: {error}")
    try:
        algo.stop()
    except Exception as error:  # noqa: BLE001 - nor must stopping (the checkpoint is saved)
        warn(f"stopping the algorithm failed: {type(error).__name__}: {error}")
