"""`hca-rllib probe`: measure what a task's actions tell about an outcome before training,
`I(A; Z | S)` for the return or `I(A; U | S, k)` for each reward event (`hca_rllib.probe`)."""

from __future__ import annotations

import argparse
import sys

from hca_rllib.cli.arguments import (SEED, UsageError, float_argument, input_directory_argument, int_argument,
                                     output_directory_argument, parse_overrides)
from hca_rllib.probe import (DEFAULT_EPISODES, DEFAULT_MAX_STEPS, DEFAULT_WINDOW, GAMMA, HELD_OUT_FRACTION, MIN_EPISODES,
                             OUTCOMES, THRESHOLD, ProbeError, parse_horizons, probe, write_probe_report)

HELP = "measure what a task's actions tell about an outcome (the return, or each reward) before training"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `hca-rllib probe` to `parser` (a subparser)."""
    parser.add_argument("--env", default=None,
                        help="environment id (as for train); default with --checkpoint: the checkpoint's")
    parser.add_argument("--checkpoint", type=input_directory_argument, default=None,
                        help="probe a trained policy: a checkpoint or run directory (default: uniform random)")
    parser.add_argument("--episodes", type=int_argument(MIN_EPISODES), default=DEFAULT_EPISODES,
                        help=f"complete episodes to collect (default {DEFAULT_EPISODES})")
    parser.add_argument("--max-steps", type=int_argument(1), default=DEFAULT_MAX_STEPS,
                        help=f"step budget; collection stops at whichever comes first (default {DEFAULT_MAX_STEPS:,})")
    parser.add_argument("--outcome", default="return", choices=OUTCOMES,
                        help="the hindsight outcome: 'return', the K-step return at each of --horizons; 'reward', "
                             "each reward event within --window steps, beside the --window-step return on the same "
                             "decisions (default return)")
    parser.add_argument("--window", type=int_argument(1, 4096), default=DEFAULT_WINDOW,
                        help=f"--outcome reward: the credit window W in steps, an integer 1-4096 (default "
                             f"{DEFAULT_WINDOW})")
    parser.add_argument("--horizons", default="1,4,16,64,end",
                        help="--outcome return: return horizons K, comma-separated integers >= 1; 'end': to the "
                             "episode's end (default 1,4,16,64,end)")
    parser.add_argument("--gamma", type=float_argument(1e-6, 1.0), default=GAMMA)
    parser.add_argument("--held-out-fraction", type=float_argument(0.01, 0.99), default=HELD_OUT_FRACTION)
    parser.add_argument("--threshold", type=float_argument(0.0), default=THRESHOLD,
                        help=f"nats: a decision holds information above it (default {THRESHOLD:g})")
    parser.add_argument("--num-envs", type=int_argument(1, 1024), default=8)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--set-env", action="append", default=[], metavar="KEY=VALUE",
                        help="env_config entry, e.g. --set-env length=30")
    parser.add_argument("--output", type=output_directory_argument, default="runs/probe",
                        help="directory for probe.md, probe.json and the plots")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run `hca-rllib probe` from parsed arguments: the report written, its reading printed; 0."""
    if args.env is None and args.checkpoint is None:
        raise UsageError("probe: give --env (or --checkpoint)")
    try:
        horizons = parse_horizons(args.horizons)
    except ProbeError as error:
        raise UsageError(f"--{error}") from None  # "--horizons: ..."
    env_config = parse_overrides(args.set_env, "--set-env") if args.set_env else None

    def progress(message: str) -> None:  # on stdout, as train's progress; errors alone on stderr
        print(message, file=sys.stdout, flush=True)

    try:
        result = probe(args.env, env_config=env_config, checkpoint=args.checkpoint, episodes=args.episodes,
                       max_steps=args.max_steps, horizons=horizons, gamma=args.gamma, outcome=args.outcome,
                       window=args.window,
                       held_out_fraction=args.held_out_fraction, threshold=args.threshold,
                       num_envs=args.num_envs, seed=args.seed, progress=progress, keep_data=True)
    except ProbeError as error:
        raise UsageError(str(error)) from None
    path = write_probe_report(result, args.output)
    for line in result["reading"]["text"]:
        print(line)
    print(f"probe: {path}")
    return 0
