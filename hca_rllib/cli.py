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
import sys
from pathlib import Path
from typing import Any, Dict, List

from hca_rllib.hca import ALGORITHMS


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


def int_argument(low: int, high: int = MAX_COUNT):
    """argparse `type`: an integer in [low, high], else a one-line error saying so."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {value}")
        return value

    parse.__name__ = "int"
    return parse


def float_argument(low: float, high: float = math.inf, *, allow_inf: bool = False):
    """argparse `type`: a number in [low, high] (no NaN; inf only if `allow_inf`)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number >= {low:g}, got {text!r}") from None
        if math.isnan(value) or (math.isinf(value) and not allow_inf) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a finite number in [{low:g}, {high:g}], got {text!r}")
        return value

    parse.__name__ = "float"
    return parse


def name_argument(text: str) -> str:
    """argparse `type` for a non-empty name."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


SEED = int_argument(0)


def storage_argument(text: str) -> str:
    """argparse `type` for a storage path: a URI (s3://...) as given, else an absolute path."""
    return text if "://" in text else str(path_argument(text))


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


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (no usage block), status 2."""

    def error(self, message):
        self.exit(2, f"hca-rllib: error: {message} (see {self.prog} --help)\n")


def make_parser() -> argparse.ArgumentParser:
    from hca_rllib.runner import PROGRESS_EVERY_S

    parser = _Parser(prog="hca-rllib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = commands.add_parser("train", help="train A2C or an HCA credit mode")
    t.add_argument("--algo", default="HCA", help="HCA or A2C")
    t.add_argument("--credit", default=None, help="a2c, hca, c2a2c or mix")
    t.add_argument("--env", default="CartPole-v1",
                   help="atari/<Game>, atari-machado/<Game>, minatar/<Game>, "
                        "bsuite/<experiment>-<setting>, HCA/<Task>-v0, any gymnasium id or 'module:Env-v0'")
    t.add_argument("--seed", type=SEED, default=0)
    t.add_argument("--stop-timesteps", type=int, default=None, help="env steps (default 100,000)")
    t.add_argument("--num-env-runners", type=int_argument(0), default=0)
    t.add_argument("--num-envs-per-env-runner", type=int_argument(1), default=8)
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config field, e.g. --set lr=3e-4 --set hca_ratio_clip=5")
    t.add_argument("--output", type=path_argument, default="runs/train", help="run directory")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --output from its newest valid checkpoint")
    t.add_argument("--checkpoint-every", type=int_argument(0), default=10, metavar="N",
                   help="checkpoint every N iterations (and at the end); 0: only at the end")
    t.add_argument("--keep-checkpoints", type=int_argument(0), default=3,
                   help="checkpoints kept (0: all)")
    t.add_argument("--wandb", default="auto", choices=["auto", "online", "offline", "off"],
                   help="auto: online if WANDB_API_KEY is set, else offline")
    t.add_argument("--wandb-project", type=name_argument, default="hca-rllib")
    t.add_argument("--no-tensorboard", action="store_true")
    t.add_argument("--torch-threads", type=int_argument(0, 4096), default=1,
                   help="torch threads in this process (default 1, as Ray's workers; 0: torch's default)")
    t.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or embedded Ray)")
    t.add_argument("--progress-every", type=float, default=PROGRESS_EVERY_S, metavar="SECONDS",
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
    e.add_argument("--video", type=path_argument, default=None, help="write one game as .gif or .mp4 here")
    e.add_argument("--output", type=path_argument, default=None, help="write evaluation.json here (default: beside the checkpoint)")

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


if __name__ == "__main__":
    sys.exit(main())
