"""`hca-rllib train`: one training run into a run directory (see `hca_rllib.runner`)."""

from __future__ import annotations

import argparse
import shlex
import sys

from hca_rllib.cli.arguments import (SEED, TORCH_THREADS, UsageError, address_argument, float_argument, int_argument,
                                     output_directory_argument, parse_overrides, unknown_keys_error,
                                     wandb_project_argument)
from hca_rllib.credit import CREDIT_MODES
from hca_rllib.hca import ALGORITHMS, HCA_TRAINING_DEFAULTS

HELP = "train A2C or an HCA credit mode"
# `--credit`'s help: every mode, from the constant, and the defaults.
CREDIT_HELP = (f"{', '.join(CREDIT_MODES)} (default: {HCA_TRAINING_DEFAULTS['credit']} for HCA, "
               f"a2c for A2C)")
MAX_PROGRESS_EVERY_S = 86_400.0  # a progress line less than once a day: a typo
# The arguments a run stores in run.json and `--resume` takes back from it.
TRAIN_ARGS = ("algo", "credit", "env", "seed", "num_env_runners", "num_envs_per_env_runner", "set")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `hca-rllib train` to `parser` (a subparser)."""
    from hca_rllib.runner import PROGRESS_EVERY_S

    parser.add_argument("--algo", default="HCA", help=" or ".join(ALGORITHMS))
    parser.add_argument("--credit", default=None, help=CREDIT_HELP)
    parser.add_argument("--env", default="CartPole-v1",
                        help="atari/<Game>, atari-machado/<Game>, minatar/<Game>, "
                             "bsuite/<experiment>-<setting>, HCA/<Task>-v0, any gymnasium id or 'module:Env-v0'")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--stop-timesteps", type=int_argument(1), default=None,
                        help="env steps (default 100,000; with --resume, the run's)")
    parser.add_argument("--num-env-runners", type=int_argument(0), default=0)
    parser.add_argument("--num-envs-per-env-runner", type=int_argument(1), default=8)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any config field, e.g. --set lr=3e-4 --set hindsight_epochs=2")
    parser.add_argument("--output", type=output_directory_argument, default="runs/train", help="run directory")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output from its newest valid checkpoint")
    parser.add_argument("--checkpoint-every", type=int_argument(0), default=10, metavar="N",
                        help="checkpoint every N iterations (and at the end); 0: only at the end")
    parser.add_argument("--keep-checkpoints", type=int_argument(1, names={"all": 0}), default=3,
                        help="the newest N checkpoints kept (default 3), or 'all'")
    parser.add_argument("--wandb", default="auto", choices=["auto", "online", "offline", "off"],
                        help="auto: online if WANDB_API_KEY is set, else offline")
    parser.add_argument("--wandb-project", type=wandb_project_argument, default="hca-rllib")
    parser.add_argument("--no-tensorboard", action="store_true")
    parser.add_argument("--torch-threads", type=TORCH_THREADS, default=1,
                        help="torch threads in this process (default 1, as Ray's workers; 'auto': torch's default)")
    parser.add_argument("--address", type=address_argument, default=None,
                        help="Ray cluster address (default: RAY_ADDRESS or embedded Ray)")
    parser.add_argument("--progress-every", type=float_argument(0.0, MAX_PROGRESS_EVERY_S), default=PROGRESS_EVERY_S,
                        metavar="SECONDS",
                        help="without a terminal (logs, pipes): a progress line per iteration, at most one "
                             f"every SECONDS (default {PROGRESS_EVERY_S:g}; 0: every iteration); "
                             "a terminal gets one updating bar")
    return parser


def build_config(args: argparse.Namespace):
    """The A2C or HCA config the arguments ask for, validated; UsageError naming the bad one."""
    from hca_rllib import A2CConfig, HCAConfig

    if args.algo not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {args.algo!r}; choose one of {list(ALGORITHMS)}")
    config = A2CConfig() if args.algo == "A2C" else HCAConfig()
    if args.credit is not None:
        if args.credit not in CREDIT_MODES:
            raise UsageError(f"unknown credit mode {args.credit!r}; choose one of {list(CREDIT_MODES)}")
        config.training(credit=args.credit)
    overrides = parse_overrides(args.set)
    error = unknown_keys_error(config, list(overrides))
    if error:
        raise UsageError(error)
    try:
        config.environment(args.env)
        config.env_runners(
            num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.num_envs_per_env_runner,
        )
        config.debugging(seed=args.seed)
        config.update_from_dict(overrides)
        config.validate()
    except ValueError as error:
        raise UsageError(str(error).splitlines()[0]) from None
    return config


def run(args: argparse.Namespace) -> int:
    """Run `hca-rllib train` from parsed arguments; 0 when the run reaches its budget."""
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
