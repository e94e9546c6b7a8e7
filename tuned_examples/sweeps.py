"""The paper-style comparisons as Ray Tune sweeps: A2C against the credit modes.

    python tuned_examples/sweeps.py atari   [--stop-timesteps N] [--num-env-runners K] [--output DIR|URI]
    python tuned_examples/sweeps.py minatar [--stop-timesteps N] ...

`atari`: Pong, Breakout, BeamRider, Qbert, Seaquest, SpaceInvaders and Enduro (classic
protocol) x {a2c, hca, c2a2c, expected_hca} x 3 seeds, 10M agent steps each, with the tuned examples'
SB3-zoo A2C settings (16 envs per EnvRunner, 5-step rollouts, entropy 0.01, value 0.25):
84 trials, weeks of one machine, hours on a cluster. `minatar`: the five MinAtar games x
{a2c, hca, c2a2c, expected_hca} x 5 seeds, 2M steps. Both run `hca_rllib.sweep.run_sweep` (resources
sized to the cluster, retries from checkpoints, the report at the end); on a cluster,
submit this script with `ray job submit --working-dir . -- python tuned_examples/sweeps.py atari
--num-env-runners 4 --cpus-per-env-runner 1` (see cluster/README.md). `--credits a2c,expected_hca
--seeds 0,1,2,3,4` picks the methods and seeds.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tuned_examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hca_rllib.credit import CREDIT_MODES  # noqa: E402
from tuned_examples.common import (  # noqa: E402
    ATARI_BUDGET,
    ATARI_NUM_ENVS,
    ATARI_ROLLOUT,
    ATARI_STEPS_PER_ITERATION,
    MINATAR_BUDGET,
    MINATAR_NUM_ENVS,
    MINATAR_ROLLOUT,
)
from tuned_examples.games import ATARI, MINATAR  # noqa: E402

# The games of the tuned examples (tuned_examples/games.py), in its order.
ATARI_GAMES = [row["game"] for row in ATARI.values()]
MINATAR_GAMES = [row["game"] for row in MINATAR.values()]
# A2C against every credit mode.
CREDITS = list(CREDIT_MODES)

SWEEPS = {
    "atari": {
        "envs": [f"atari/{game}" for game in ATARI_GAMES],
        "seeds": [0, 1, 2],
        "stop_timesteps": ATARI_BUDGET,
        "num_envs_per_env_runner": ATARI_NUM_ENVS,
        "rollout": ATARI_ROLLOUT,
        "metric": "env_runners/game_return_window_mean",  # the last 100 games
        "overrides": {"gym_env_vectorize_mode": "vector_entry_point", "entropy_coeff": 0.01,
                      "vf_loss_coeff": 0.25,
                      "min_sample_timesteps_per_iteration": ATARI_STEPS_PER_ITERATION},
    },
    "minatar": {
        "envs": [f"minatar/{game}" for game in MINATAR_GAMES],
        "seeds": [0, 1, 2, 3, 4],
        "stop_timesteps": MINATAR_BUDGET,
        "num_envs_per_env_runner": MINATAR_NUM_ENVS,
        "rollout": MINATAR_ROLLOUT,
        "metric": "env_runners/episode_return_window_mean",  # the last 100 episodes
        "overrides": {"entropy_coeff": 0.01},
    },
}


def sweep_kwargs(which: str, num_env_runners: int = 0, stop_timesteps=None, credits=None, seeds=None) -> dict:
    """The arguments of `run_sweep` for sweep `which` (train batch = runners x envs x rollout);
    `credits` and `seeds` replace the sweep's own lists."""
    spec = SWEEPS[which]
    overrides = dict(spec["overrides"])
    overrides["rollout_fragment_length"] = spec["rollout"]
    overrides["train_batch_size_per_learner"] = max(num_env_runners, 1) * spec["num_envs_per_env_runner"] * spec["rollout"]
    return {
        "envs": spec["envs"], "credits": list(credits or CREDITS), "seeds": list(spec["seeds"] if seeds is None else seeds),
        "stop_timesteps": stop_timesteps or spec["stop_timesteps"], "overrides": overrides,
        "num_env_runners": num_env_runners, "num_envs_per_env_runner": spec["num_envs_per_env_runner"],
        "metric": spec["metric"], "name": f"{which}-credit",
    }


def main(argv=None):
    from hca_rllib.cli.arguments import (MAX_COUNT, OneLineParser, address_argument, float_argument, int_argument,
                                         storage_argument)
    from hca_rllib.sweep import MAX_CPUS_PER_ENV_RUNNER

    # A bad argument: one line and exit status 2, before Ray starts (as `hca-rllib sweep`).
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=sorted(SWEEPS))
    parser.add_argument("--stop-timesteps", type=int_argument(1), default=None,
                        help="env steps per trial (default: the sweep's budget)")
    parser.add_argument("--num-env-runners", type=int_argument(0), default=0)
    parser.add_argument("--cpus-per-env-runner", type=float_argument(0.0, MAX_CPUS_PER_ENV_RUNNER), default=0.5)
    parser.add_argument("--output", type=storage_argument, default="runs/sweeps",
                        help="storage path: a directory (relative, absolute or ~) or a URI (s3://...)")
    parser.add_argument("--scheduler", default="none", choices=["none", "asha", "pbt"])
    parser.add_argument("--max-failures", type=int_argument(-1), default=3,
                        help="retries per trial, from its checkpoint (-1: no limit)")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--wandb", default="auto", choices=["auto", "online", "offline", "off"])
    parser.add_argument("--address", type=address_argument, default=None)
    parser.add_argument("--credits", default=None, help=f"comma-separated credit modes, from "
                        f"{','.join(CREDIT_MODES)} (default {','.join(CREDITS)})")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the sweep's own)")
    args = parser.parse_args(argv)
    credits = None if args.credits is None else [c.strip() for c in args.credits.split(",") if c.strip()]
    bad = [c for c in credits or [] if c not in CREDIT_MODES]
    if bad or credits == [] or (credits and len(set(credits)) < len(credits)):
        parser.error(f"--credits must be distinct credit modes from {','.join(CREDIT_MODES)}, got {args.credits!r}")
    try:
        seeds = None if args.seeds is None else [int(x) for x in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds expects comma-separated integers, got {args.seeds!r}")
    if seeds is not None and (not all(0 <= seed <= MAX_COUNT for seed in seeds) or len(set(seeds)) < len(seeds)):
        parser.error(f"--seeds must be distinct integers in [0, {MAX_COUNT}], got {args.seeds!r}")

    from hca_rllib.sweep import check_sweep_config, run_sweep

    kwargs = sweep_kwargs(args.which, args.num_env_runners, args.stop_timesteps, credits, seeds)
    try:  # every trial's config, before Ray starts; run_sweep checks the rest before it starts Ray
        check_sweep_config(kwargs["overrides"], args.num_env_runners, kwargs["num_envs_per_env_runner"],
                           args.cpus_per_env_runner)
        results, page = run_sweep(
            **kwargs, storage_path=args.output, cpus_per_env_runner=args.cpus_per_env_runner,
            scheduler=args.scheduler, max_failures=args.max_failures, wandb=args.wandb,
            address=args.address, resume=args.resume,
        )
    except ValueError as error:
        parser.error(str(error).splitlines()[0])
    print(f"{len(results)} trials, {len(results.errors)} errored; report: {page}")
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
