"""Atari Enduro (classic protocol), A2C or HCA, with the SB3 zoo's A2C hyperparameters.

Protocol: ``atari/Enduro``: noop reset (up to 30), fire reset, frameskip 4 with max-pool,
84x84 grey, life loss ends the *training* episode, rewards clipped to their sign, sticky
actions 0; 4 frames stacked by RLlib's frame-stacking connectors. The score reported
(``score`` in results.jsonl, ``env_runners/game_return_mean``) is the unclipped return
of the whole game (all lives), the figure the reference tables use.

Hyperparameters (Stable-Baselines3 zoo, ``a2c.yml``, ``atari``): 16 envs per EnvRunner
(ale-py's C++ vector env, ``gym_env_vectorize_mode="vector_entry_point"``), 5-step
rollouts (train batch 80 = 16 x 5 per runner), RMSprop lr 7e-4 eps 1e-5 alpha 0.99,
gamma 0.99, lambda 1, entropy 0.01, value coefficient 0.25, gradient clip 0.5 (global
norm), no advantage normalisation; Nature CNN (the default for 84x84 images). SB3 uses
TensorFlow-style RMSprop (epsilon inside the square root); this is torch's RMSprop. HCA
keeps these and adds its hindsight classifier with the project's defaults.

Budget: 10M agent steps (40M frames), the standard A2C budget.

Expected: A2C 0 (A2C fails on Enduro) (SB3 zoo benchmark, 10M steps, one run: see
``shared/docs/benchmarks.md``). HCA: not measured yet.

Run::

    python tuned_examples/atari/enduro.py --algo A2C
    python tuned_examples/atari/enduro.py --algo HCA --seed 1 --output runs/hca1
    python tuned_examples/atari/enduro.py --num-env-runners 8 --address auto   # a cluster
    python tuned_examples/atari/enduro.py --output runs/hca1 --resume

Time: about 11 hours for the full budget on a 2-core machine. This is an extrapolation,
not a measured run: ``python tuned_examples/atari/pong.py --stop-timesteps 20000`` ran at
about 260 agent steps/s (HCA 264, A2C 274, steady state, 60-80 s of training, torch
with one thread, on a shared machine with a load average of 4-10), and 10M steps at
260 steps/s is 10.7 h.
Use several EnvRunners on a cluster for anything more than a smoke test.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tuned_examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tuned_examples.common import ATARI_BUDGET, atari_config, main  # noqa: E402

ENV = "atari/Enduro"
BUDGET = ATARI_BUDGET  # 10M agent steps = 40M frames
EXPECTED = {
    "A2C": {
        "score": 0,
        "source": "Stable-Baselines3 zoo benchmark, EnduroNoFrameskip-v4, 10M steps, 1 run "
                  "(shared/docs/benchmarks.md); A2C fails on Enduro",
    },
    "HCA": {
        "score": None,
        "source": "not measured yet (the HCA paper's tables are not available here)",
    },
}


def config(algo="HCA", credit=None, *, num_env_runners=0):
    """The config for `algo` ("HCA" or "A2C"); `credit` None: the algorithm's own."""
    return atari_config("Enduro", algo, credit, num_env_runners=num_env_runners)


if __name__ == "__main__":
    main(config, budget=BUDGET, expected=EXPECTED,
         default_output="runs/tuned/atari_enduro", description=__doc__)
