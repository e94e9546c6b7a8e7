"""`hca-rllib sweep`: Ray Tune over environments x credit modes x seeds (`hca_rllib.sweep`)."""

from __future__ import annotations

import argparse

from hca_rllib.cli.arguments import (MAX_COUNT, UsageError, address_argument, float_argument, int_argument,
                                     unknown_keys_error,
                                     name_argument, parse_overrides, storage_argument, wandb_project_argument)
from hca_rllib.credit import CREDIT_MODES
from hca_rllib.fields import HCA_TRAINING_DEFAULTS
from hca_rllib.sweep import MAX_CPUS_PER_ENV_RUNNER

HELP = "Ray Tune over envs x credit modes x seeds, with retries and a report"


def sweep_name_argument(text: str) -> str:
    """argparse `type` for --name: one plain directory name."""
    if not text.strip() or "/" in text or "\\" in text or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"must be a plain directory name (no '/', not '.' or '..'), got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `hca-rllib sweep` to `parser` (a subparser)."""
    parser.add_argument("--envs", required=True, help="comma-separated env ids, e.g. atari/Pong,atari/Breakout")
    parser.add_argument("--credits", default=f"a2c,{HCA_TRAINING_DEFAULTS['credit']}",
                        help=f"comma-separated, from {','.join(CREDIT_MODES)} (default: A2C against the "
                             f"default credit mode)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    parser.add_argument("--stop-timesteps", type=int_argument(1), default=100_000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config field for every trial; KEY=[v1,v2] with KEY prefixed "
                             "'grid:' sweeps it (e.g. --set 'grid:lr=[3e-4,7e-4]')")
    parser.add_argument("--num-env-runners", type=int_argument(0), default=0)
    parser.add_argument("--num-envs-per-env-runner", type=int_argument(1), default=8)
    parser.add_argument("--cpus-per-env-runner", type=float_argument(0.0, MAX_CPUS_PER_ENV_RUNNER), default=0.5)
    parser.add_argument("--scheduler", default="none", choices=["none", "asha", "pbt"])
    parser.add_argument("--metric", type=name_argument, default="env_runners/episode_return_window_mean",
                        help="what ASHA/PBT maximise, a number every trial reports: the mean over the "
                             "last 100 episodes (Atari: env_runners/game_return_window_mean, the last "
                             "100 games), or another of `Algorithm.train()`'s results, e.g. "
                             "env_runners/episode_return_mean, learners/default_policy/vf_explained_var; "
                             "an unknown name is refused, naming the closest")
    parser.add_argument("--max-failures", type=int_argument(-1), default=2,
                        help="retries per trial, from its checkpoint (-1: no limit)")
    parser.add_argument("--max-concurrent", type=int_argument(1), default=None,
                        help="trials at once (default: what fits the cluster's CPUs now; set it on an "
                             "autoscaling cluster, whose nodes appear as trials ask for them)")
    parser.add_argument("--checkpoint-every", type=int_argument(0), default=5)
    parser.add_argument("--output", default="runs/sweeps", type=storage_argument,
                        help="storage path: a directory (relative, absolute or ~) or a URI (s3://...)")
    parser.add_argument("--name", type=sweep_name_argument, default="sweep",
                        help="the experiment directory under --output")
    parser.add_argument("--resume", action="store_true", help="continue the sweep --output/--name")
    parser.add_argument("--wandb", default="auto", choices=["auto", "online", "offline", "off"])
    parser.add_argument("--wandb-project", type=wandb_project_argument, default="hca-rllib")
    parser.add_argument("--address", type=address_argument, default=None,
                        help="Ray cluster address (default: RAY_ADDRESS or embedded Ray)")
    return parser


def _split(text: str) -> list:
    return [x.strip() for x in text.split(",") if x.strip()]


def _seeds(text: str) -> list:
    """--seeds as integers; UsageError unless each is in [0, MAX_COUNT]."""
    try:
        seeds = [int(s) for s in _split(text)]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or not all(0 <= seed <= MAX_COUNT for seed in seeds):
        raise UsageError(f"--seeds must be comma-separated integers in [0, {MAX_COUNT}], got {text!r}")
    return seeds


def run(args: argparse.Namespace) -> int:
    """Run `hca-rllib sweep` from parsed arguments; 0 when no trial errored, else 1."""
    from hca_rllib import HCAConfig
    from hca_rllib.sweep import check_sweep_config, run_sweep

    seeds = _seeds(args.seeds)
    if not _split(args.envs):
        raise UsageError(f"--envs must name at least one environment, got {args.envs!r}")
    for flag, values in (("--envs", _split(args.envs)), ("--credits", _split(args.credits)), ("--seeds", seeds)):
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:  # the same trials twice, under one name
            raise UsageError(f"{flag} lists {', '.join(twice)} more than once")
    credits = _split(args.credits)
    bad = [c for c in credits if c not in CREDIT_MODES]
    if not credits or bad:
        raise UsageError(f"--credits must be comma-separated credit modes from {list(CREDIT_MODES)}, "
                         f"got {args.credits!r}")
    overrides = parse_overrides(args.set)
    default = HCAConfig()
    error = unknown_keys_error(default, list(overrides))
    if error:
        raise UsageError(error)
    try:
        check_sweep_config(overrides, args.num_env_runners, args.num_envs_per_env_runner,
                           args.cpus_per_env_runner)
    except ValueError as error:
        raise UsageError(str(error)) from None
    try:
        results, page = run_sweep(
            envs=_split(args.envs), credits=credits, seeds=seeds,
            stop_timesteps=args.stop_timesteps, storage_path=args.output, name=args.name,
            overrides=overrides, num_env_runners=args.num_env_runners,
            num_envs_per_env_runner=args.num_envs_per_env_runner,
            cpus_per_env_runner=args.cpus_per_env_runner, scheduler=args.scheduler, metric=args.metric,
            max_failures=args.max_failures, checkpoint_every=args.checkpoint_every, wandb=args.wandb,
            wandb_project=args.wandb_project, address=args.address, resume=args.resume,
            max_concurrent=args.max_concurrent,
        )
    except ValueError as error:
        raise UsageError(str(error).splitlines()[0]) from None
    errors = len(results.errors)
    print(f"sweep done: {len(results)} trials, {errors} errored; report: {page}")
    return 1 if errors else 0
