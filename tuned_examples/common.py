"""Shared pieces of the tuned examples: the Atari and MinAtar configs, and `main()`.

Every script in `tuned_examples/atari/` and `tuned_examples/minatar/` is a few lines that
call `tuned_example(__file__)`: its per-game facts are a row of `tuned_examples/games.py`.
Each is both

* a module whose `config(algo, credit)` returns a ready `HCAConfig` / `A2CConfig`
  (importable: ``from tuned_examples.atari.pong import config``), and
* a runnable script (``python tuned_examples/atari/pong.py --algo A2C``) that trains it with
  `hca_rllib.runner.run_training`, the same loop as ``hca-rllib train``: results.jsonl,
  checkpoints every 10 iterations, TensorBoard, W&B (offline unless WANDB_API_KEY is set),
  and ``--resume``.

`credit=None` means the algorithm's own credit: the package default
(``HCA_TRAINING_DEFAULTS["credit"]``, ``"expected_hca"``) for HCA, ``"a2c"`` for A2C
(A2C is the ``credit="a2c"`` member of the family with the hindsight classifier off).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from hca_rllib.credit import CREDIT_MODES
from hca_rllib.fields import HCA_TRAINING_DEFAULTS
from hca_rllib.hca import ALGORITHMS

# Stable-Baselines3 zoo A2C on Atari (hyperparams/a2c.yml, `atari:` entry): 16 envs,
# n_steps 5, RMSprop(TF-like) lr 7e-4 eps 1e-5 alpha 0.99, ent_coef 0.01, vf_coef 0.25,
# gamma 0.99, gae_lambda 1, max_grad_norm 0.5, no advantage normalisation, 10M steps.
ATARI_NUM_ENVS = 16
ATARI_ROLLOUT = 5
ATARI_BUDGET = 10_000_000  # agent steps (= 40M frames at frameskip 4)
# One reported iteration = at least this many env steps (25 updates of 80): results lines,
# checkpoints (every 10 iterations) and Tune reports stay cheap next to the training.
ATARI_STEPS_PER_ITERATION = 2000

# The project's A2C defaults on vector / small-image tasks: 8 envs x 64-step rollouts.
MINATAR_NUM_ENVS = 8
MINATAR_ROLLOUT = 64
MINATAR_BUDGET = 2_000_000  # env steps: a full run takes minutes on a 2-core machine

BUDGETS = {"atari": ATARI_BUDGET, "minatar": MINATAR_BUDGET}


def _base_config(algo: str, credit: Optional[str]):
    from hca_rllib import A2CConfig, HCAConfig
    from hca_rllib.credit import CREDIT_MODES

    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algo!r}; choose one of {list(ALGORITHMS)}")
    if credit is not None and credit not in CREDIT_MODES:
        raise ValueError(f"unknown credit mode {credit!r}; choose one of {list(CREDIT_MODES)}")
    if algo == "A2C":
        if credit not in (None, "a2c"):
            raise ValueError(f"A2C is credit='a2c'; for credit={credit!r} use algo='HCA'")
        return A2CConfig()
    config = HCAConfig()
    if credit is not None:
        config.training(credit=credit)
    return config


def _batch(config, num_envs: int, rollout: int, num_env_runners: int):
    """`num_envs` per runner, `rollout`-step fragments, one train batch = every runner's
    fragment of every env (the local runner samples when `num_env_runners` is 0)."""
    return config.env_runners(
        num_env_runners=num_env_runners,
        num_envs_per_env_runner=num_envs,
        rollout_fragment_length=rollout,
    ).training(train_batch_size_per_learner=max(num_env_runners, 1) * num_envs * rollout)


def _a2c_training(config, vf_loss_coeff: float):
    """A2C's loss settings, shared by both families (SB3's A2C: lr 7e-4, gamma 0.99,
    lambda 1, entropy 0.01, grad clip 0.5; its RMSprop with alpha 0.99 and eps 1e-5 and no
    advantage normalisation are the package's own); only the value coefficient differs."""
    return config.training(
        lr=7e-4,
        gamma=0.99,
        lambda_=1.0,
        entropy_coeff=0.01,
        vf_loss_coeff=vf_loss_coeff,
        grad_clip=0.5,
        grad_clip_by="global_norm",
    )


def atari_config(game: str, algo: str = "HCA", credit: Optional[str] = None, *,
                 num_env_runners: int = 0):
    """`atari/<game>` (classic protocol) with the SB3 zoo's A2C Atari hyperparameters."""
    config = _base_config(algo, credit)
    config.environment(f"atari/{game}", frame_stack=4)
    # ale-py's C++ vector env steps all of a runner's envs (threads: ale-py decides).
    config.env_runners(gym_env_vectorize_mode="vector_entry_point")
    config.reporting(min_sample_timesteps_per_iteration=ATARI_STEPS_PER_ITERATION)
    _batch(config, ATARI_NUM_ENVS, ATARI_ROLLOUT, num_env_runners)
    return _a2c_training(config, vf_loss_coeff=0.25)


def minatar_config(game: str, algo: str = "HCA", credit: Optional[str] = None, *,
                   num_env_runners: int = 0):
    """`minatar/<game>` with the project's A2C defaults (8 envs x 64 steps, RMSprop lr 7e-4,
    vf 0.5, grad clip 0.5) and entropy 0.01; MinAtar's own network (the env's default)."""
    config = _base_config(algo, credit)
    config.environment(f"minatar/{game}")
    _batch(config, MINATAR_NUM_ENVS, MINATAR_ROLLOUT, num_env_runners)
    return _a2c_training(config, vf_loss_coeff=0.5)


def make_parser(budget: int, default_output: str, description: str = ""):
    from hca_rllib.cli.arguments import (SEED, TORCH_THREADS, OneLineParser, address_argument, int_argument,
                                         output_directory_argument)

    lines = description.strip().splitlines()
    # The first line is the description; the rest (the game's facts) comes after the options.
    # A bad argument: one line and exit status 2, before Ray starts (as `hca-rllib train`).
    parser = OneLineParser(description=lines[0] if lines else None,
                                     epilog="\n".join(lines[1:]).strip() or None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="HCA", choices=list(ALGORITHMS))
    parser.add_argument("--credit", default=None, choices=list(CREDIT_MODES), metavar="CREDIT",
                        help=f"{', '.join(CREDIT_MODES)} (default: {HCA_TRAINING_DEFAULTS['credit']} "
                             f"for HCA, a2c for A2C)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--stop-timesteps", type=int_argument(1), default=None,
                        help=f"env (agent) steps to train (default: the budget, {budget:,})")
    parser.add_argument("--output", type=output_directory_argument, default=None,
                        help=f"run directory (default: "
                             f"{default_output}_<algo>_<credit>_seed<seed>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output from its newest valid checkpoint")
    parser.add_argument("--num-env-runners", type=int_argument(0), default=0,
                        help="remote EnvRunners (0: sample in the driver); the train batch "
                             "grows with them (runners x envs x rollout)")
    parser.add_argument("--checkpoint-every", type=int_argument(0), default=10, metavar="N",
                        help="checkpoint every N iterations (and at the end); 0: only at the end")
    parser.add_argument("--torch-threads", type=TORCH_THREADS, default=1,
                        help="torch threads in this process (the driver's EnvRunner and learner "
                             "when --num-env-runners is 0); 1 is several times faster than "
                             "torch's default on a small, busy machine ('auto': torch's default)")
    parser.add_argument("--wandb", default="auto", choices=["auto", "online", "offline", "off"],
                        help="auto: online if WANDB_API_KEY is set, else offline")
    parser.add_argument("--address", type=address_argument, default=None,
                        help="Ray cluster address (default: RAY_ADDRESS or an embedded local Ray)")
    return parser


RUN_ARGS = ("algo", "credit", "seed", "num_env_runners")


def main(make_config: Callable[..., Any], *, budget: int, expected: Dict[str, Any],
         default_output: str, argv=None, description: str = "") -> Dict[str, Any]:
    """Parse the command line, build `make_config(algo, credit, num_env_runners=...)`,
    seed it and train it with `hca_rllib.runner.run_training`; returns the last results line."""
    from hca_rllib.cli.arguments import directory_error
    from hca_rllib.runner import EXIT_DISK, DiskWriteError, restore_run_args, run_training, user_path

    parser = make_parser(budget, default_output, description)
    args = parser.parse_args(argv)
    if args.output is None:
        credit = args.credit or ("a2c" if args.algo == "A2C" else HCA_TRAINING_DEFAULTS["credit"])
        args.output = user_path(f"{default_output}_{args.algo.lower()}_{credit}_seed{args.seed}")
        error = directory_error(args.output, must_exist=False)
        if error:
            parser.error(f"argument --output (default): {error}")
    output = Path(args.output)
    try:
        restore_run_args(args, output, RUN_ARGS, f"python {sys.argv[0]}", default_stop_timesteps=budget)
    except ValueError as error:
        parser.error(str(error))
    try:
        config = make_config(args.algo, args.credit, num_env_runners=args.num_env_runners)
        config.debugging(seed=args.seed)
        config.validate()
    except ValueError as error:
        parser.error(str(error).splitlines()[0])
    run_info = {
        "algo": args.algo,
        "credit": config.credit,
        "env": config.env,
        "seed": args.seed,
        "stop_timesteps": args.stop_timesteps,
        "budget": budget,
        "expected": expected,
        "command": shlex.join([sys.executable, *sys.argv]),
        "args": {key: getattr(args, key) for key in RUN_ARGS},
    }
    try:
        last = run_training(
            config, output, args.stop_timesteps, run_info=run_info, resume=args.resume,
            checkpoint_every=args.checkpoint_every, wandb=args.wandb, address=args.address,
            torch_threads=args.torch_threads,
        )
    except DiskWriteError as error:  # a full disk: one line, as `hca-rllib train` says it
        print(f"{parser.prog}: error: {error}; resume with --resume once space is freed", file=sys.stderr)
        raise SystemExit(EXIT_DISK) from None
    print(f"done: {last['env_steps']:,} env steps, {last['iteration']} iterations, "
          f"score {last.get('score')}; run in {output}", flush=True)
    return last


def tuned_example(script: str):
    """What a tuned-example script defines, from its own path
    (`tuned_examples/<family>/<module>.py`) and its row in `tuned_examples/games.py`:
    `(ENV, BUDGET, EXPECTED, config, main)`. `config(algo="HCA", credit=None, *,
    num_env_runners=0)` builds the tuned config; `main(argv=None)` trains it."""
    from tuned_examples import games

    path = Path(script)
    family, module = path.parent.name, path.stem
    row = games.game_row(family, module)
    make = atari_config if family == "atari" else minatar_config
    budget = BUDGETS[family]
    expected = games.expected(family, module)

    def config(algo: str = "HCA", credit: Optional[str] = None, *, num_env_runners: int = 0):
        """The config for `algo` ("HCA" or "A2C"); `credit` None: the algorithm's own."""
        return make(row["game"], algo, credit, num_env_runners=num_env_runners)

    def run(argv=None) -> Dict[str, Any]:
        return main(config, budget=budget, expected=expected,
                    default_output=f"runs/tuned/{family}_{module}", argv=argv,
                    description=games.describe(family, module, budget))

    return f"{family}/{row['game']}", budget, expected, config, run
