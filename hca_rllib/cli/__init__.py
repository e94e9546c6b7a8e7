"""Command line: `hca-rllib train | evaluate | report | sweep | probe` (also `python -m hca_rllib ...`).

`train` runs on an embedded local Ray (loopback only, sized to this machine) unless
`--address` or `RAY_ADDRESS` points at a cluster. It writes a run directory (see
`hca_rllib.runner`): the resolved config, one JSON line per iteration, TensorBoard and
W&B logs, and checkpoints that `--resume` continues from. `evaluate` plays a checkpoint;
`report` turns run directories into learning curves, tables and a Markdown page; `probe`
measures a task's information I(A; Z | S) before training (`hca_rllib.probe`).
Bad arguments exit with status 2 and a one-line message; a write into the run directory
that fails (a full disk) exits with status 74 (EX_IOERR) and one line naming the file or
directory and the free space, the previous checkpoint kept for `--resume`. Every path argument may be
relative (to the working directory) or start with `~`; it is made absolute once, here.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List

from hca_rllib.credit import CREDIT_MODES
from hca_rllib.hca import ALGORITHMS, HCA_TRAINING_DEFAULTS

# `--credit`'s help: every mode, from the constant, and the defaults.
CREDIT_HELP = (f"{', '.join(CREDIT_MODES)} (default: {HCA_TRAINING_DEFAULTS['credit']} for HCA, "
               f"a2c for A2C)")


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
MAX_PROGRESS_EVERY_S = 86_400.0  # a progress line less than once a day: a typo


def video_argument(text: str) -> Path:
    """argparse `type` for `evaluate --video`: a .gif or .mp4 file to write."""
    path = output_file_argument(text)
    if path.suffix.lower() not in (".gif", ".mp4"):
        raise argparse.ArgumentTypeError(f"must end in .gif or .mp4, got {text!r}")
    return path


def evaluation_output_argument(text: str) -> Path:
    """argparse `type` for `evaluate --output`: a .json file, else a directory (for
    evaluation.json)."""
    path = path_argument(text)
    return output_file_argument(text) if path.suffix == ".json" else output_directory_argument(text)


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
    out: Dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"{flag} expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        if not key.strip():
            raise UsageError(f"{flag} expects key=value with a key, got {pair!r}")
        out[key.strip()] = _parse_value(value)
    return out


def build_config(args: argparse.Namespace):
    from hca_rllib import A2CConfig, HCAConfig
    from hca_rllib.credit import CREDIT_MODES
    from hca_rllib.hca import RENAMED_FIELDS

    if args.algo not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {args.algo!r}; choose one of {list(ALGORITHMS)}")
    config = A2CConfig() if args.algo == "A2C" else HCAConfig()
    if args.credit is not None:
        if args.credit not in CREDIT_MODES:
            raise UsageError(f"unknown credit mode {args.credit!r}; choose one of {list(CREDIT_MODES)}")
        config.training(credit=args.credit)
    overrides = parse_overrides(args.set)
    unknown = [key for key in overrides if not hasattr(config, key) and key not in RENAMED_FIELDS]
    if unknown:
        raise UsageError(f"unknown config key(s) in --set: {unknown}")
    try:
        config.environment(args.env)
        config.env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.num_envs_per_env_runner,
        )
        config.debugging(seed=args.seed)
        config.update_from_dict(overrides)  # an old field name fails here, naming the new one
        config.validate()
    except ValueError as error:
        raise UsageError(str(error).splitlines()[0]) from None
    return config


TRAIN_ARGS = ("algo", "credit", "env", "seed", "num_env_runners", "num_envs_per_env_runner", "set")


def train(args: argparse.Namespace) -> int:
    from hca_rllib.runner import DiskWriteError, newest_valid_checkpoint, restore_run_args, run_training

    output = args.output  # absolute (path_argument)
    try:
        restore_run_args(args, output, TRAIN_ARGS, "hca-rllib train", default_stop_timesteps=100_000)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.resume:  # a damaged results.jsonl is found before Ray starts, not after
        from hca_rllib.runner import read_results

        read_results(output / "results.jsonl")
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {str(output)!r} is a file, not a run directory")
    if args.checkpoint_every < 0:
        raise UsageError(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if not args.progress_every >= 0:
        raise UsageError(f"--progress-every must be >= 0 seconds, got {args.progress_every}")
    config = build_config(args)
    stored_args = {key: getattr(args, key) for key in TRAIN_ARGS}
    stored_args["stop_timesteps"] = args.stop_timesteps
    run_info = {
        "algo": args.algo,
        "credit": config.credit,
        "env": args.env,
        "seed": args.seed,
        "stop_timesteps": args.stop_timesteps,
        "set": parse_overrides(args.set),
        "command": shlex.join(["hca-rllib", *sys.argv[1:]]),
        "args": stored_args,
    }
    try:
        last = run_training(
            config, output, args.stop_timesteps, run_info=run_info, resume=args.resume,
            checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints,
            wandb=args.wandb, wandb_project=args.wandb_project, tensorboard=not args.no_tensorboard,
            address=args.address, torch_threads=args.torch_threads, progress_every=args.progress_every,
        )
    except DiskWriteError as error:  # say what --resume will continue from
        newest = newest_valid_checkpoint(output, lambda _: None)
        then = (f"--resume continues from {newest.name}" if newest is not None
                else "no checkpoint yet: --resume starts over")
        raise DiskWriteError(f"{error}; {then} once space is freed", error.errno) from None
    print(f"done: {last['env_steps']:,} env steps, {last['iteration']} iterations; run in {output}")
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from hca_rllib.evaluation import evaluate_checkpoint

    summary = evaluate_checkpoint(
        args.checkpoint, episodes=args.episodes, greedy=args.greedy, seed=args.seed,
        video=args.video, output=args.output,
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "returns"}, indent=1))
    return 0


def report(args: argparse.Namespace) -> int:
    from hca_rllib.report import report_command

    return report_command(args)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (no usage block), status 2:
    `<name>: error: <message> (see <prog> --help)`; `name` is the command's (its `prog`
    by default; "hca-rllib" for the CLI and all its subcommands)."""

    def __init__(self, *args, name: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = name or self.prog

    def error(self, message):
        self.exit(2, f"{self.name}: error: {message} (see {self.prog} --help)\n")


class _Parser(OneLineParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, name="hca-rllib", **kwargs)


def make_parser() -> argparse.ArgumentParser:
    from hca_rllib.runner import PROGRESS_EVERY_S

    parser = _Parser(prog="hca-rllib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = commands.add_parser("train", help="train A2C or an HCA credit mode")
    t.add_argument("--algo", default="HCA", help=" or ".join(ALGORITHMS))
    t.add_argument("--credit", default=None, help=CREDIT_HELP)
    t.add_argument("--env", default="CartPole-v1",
                   help="atari/<Game>, atari-machado/<Game>, minatar/<Game>, "
                        "bsuite/<experiment>-<setting>, HCA/<Task>-v0, any gymnasium id or 'module:Env-v0'")
    t.add_argument("--seed", type=SEED, default=0)
    t.add_argument("--stop-timesteps", type=int_argument(1), default=None,
                   help="env steps (default 100,000; with --resume, the run's)")
    t.add_argument("--num-env-runners", type=int_argument(0), default=0)
    t.add_argument("--num-envs-per-env-runner", type=int_argument(1), default=8)
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config field, e.g. --set lr=3e-4 --set hca_ratio_clip=5")
    t.add_argument("--output", type=output_directory_argument, default="runs/train", help="run directory")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --output from its newest valid checkpoint")
    t.add_argument("--checkpoint-every", type=int_argument(0), default=10, metavar="N",
                   help="checkpoint every N iterations (and at the end); 0: only at the end")
    t.add_argument("--keep-checkpoints", type=int_argument(1, names={"all": 0}), default=3,
                   help="the newest N checkpoints kept (default 3), or 'all'")
    t.add_argument("--wandb", default="auto", choices=["auto", "online", "offline", "off"],
                   help="auto: online if WANDB_API_KEY is set, else offline")
    t.add_argument("--wandb-project", type=wandb_project_argument, default="hca-rllib")
    t.add_argument("--no-tensorboard", action="store_true")
    t.add_argument("--torch-threads", type=TORCH_THREADS, default=1,
                   help="torch threads in this process (default 1, as Ray's workers; 'auto': torch's default)")
    t.add_argument("--address", type=address_argument, default=None,
                   help="Ray cluster address (default: RAY_ADDRESS or embedded Ray)")
    t.add_argument("--progress-every", type=float_argument(0.0, MAX_PROGRESS_EVERY_S), default=PROGRESS_EVERY_S,
                   metavar="SECONDS",
                   help="without a terminal (logs, pipes): a progress line per iteration, at most one "
                        f"every SECONDS (default {PROGRESS_EVERY_S:g}; 0: every iteration); "
                        "a terminal gets one updating bar")

    e = commands.add_parser("evaluate", help="play a checkpoint and report its full-game return")
    e.add_argument("checkpoint", type=path_argument, help="a checkpoint directory, or a run directory (its newest valid checkpoint)")
    e.add_argument("--episodes", type=int_argument(1), default=10, help="games to play")
    mode = e.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="take the most likely action")
    mode.add_argument("--stochastic", action="store_true", help="sample actions (the default)")
    e.add_argument("--seed", type=SEED, default=0)
    e.add_argument("--video", type=video_argument, default=None, help="write one game as .gif or .mp4 here")
    e.add_argument("--output", type=evaluation_output_argument, default=None,
                   help="a .json file, or a directory for evaluation.json (default: beside the checkpoint)")

    from hca_rllib.report import add_report_arguments
    from hca_rllib.sweep import add_sweep_arguments

    add_sweep_arguments(commands.add_parser(
        "sweep", help="Ray Tune over envs x credit modes x seeds, with retries and a report"))

    add_report_arguments(commands.add_parser(
        "report", help="learning curves, IQM tables and diagnostics from run directories"))

    from hca_rllib.probe import add_probe_arguments

    add_probe_arguments(commands.add_parser(
        "probe", help="measure I(A; Z | S) of a task before training, and read it against the benchmarks"))
    return parser


def main(argv: List[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    from hca_rllib.envs import EnvResolutionError
    from hca_rllib.runner import EXIT_DISK, CheckpointError, DiskWriteError, RayStartError, ResultsError

    try:
        from hca_rllib.hca import default_paths

        try:  # HCA_RLLIB_PATHS: read by every config a command builds
            default_paths()
        except ValueError as error:
            raise UsageError(str(error)) from None
        if args.command == "train":
            return train(args)
        if args.command == "evaluate":
            return evaluate(args)
        if args.command == "report":
            return report(args)
        if args.command == "sweep":
            from hca_rllib.sweep import sweep_command

            return sweep_command(args)
        if args.command == "probe":
            from hca_rllib.probe import probe_command

            return probe_command(args)
    except (UsageError, CheckpointError, EnvResolutionError, ResultsError) as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return 2
    except DiskWriteError as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return EXIT_DISK
    except RayStartError as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hca-rllib: interrupted; the last checkpoint is kept (resume with --resume)", file=sys.stderr)
        return 130
    return 1



def _terminate_as_interrupt(signum, frame) -> None:
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)  # Tune's, during a sweep: it stops and saves the experiment
    else:
        raise KeyboardInterrupt


def run(argv: List[str] | None = None) -> int:
    """The `hca-rllib` command: `main`, with SIGTERM (`ray job stop`, a pod's termination,
    `kill`) taking Ctrl-C's path: a run closes its logs and keeps its last checkpoint, a
    sweep lets Tune save the experiment; either continues with `--resume`."""
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
