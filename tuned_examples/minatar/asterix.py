"""MinAtar Asterix, A2C or HCA.

Protocol: ``minatar/Asterix``: MinAtar's 10x10 Asterix (uint8 planes, minimal action
set, sticky actions 0.1, difficulty ramping), MinAtar's network (one 3x3 conv with 16
channels and a 128-unit dense layer). No frame stack, no reward clipping; the score is the episode
return (``score`` in results.jsonl).

Hyperparameters: ``tuned_examples/common.py`` (``minatar_config``) and
``tuned_examples/README.md``.

Budget: 2M env steps, chosen to fit a 2-core machine: the two 300k-step runs under
Expected went at 3,332-3,996 env steps/s (a shared machine, one run at a time), so the
full budget takes roughly 8-10 minutes per run plus Ray's start (an extrapolation).

Expected: measured here at 300k steps, 1 seed (seed 0), mean score over the last 10% of
iterations: A2C 0.55, HCA 0.47. A single seed at 15% of the budget: a
smoke-level reference, not a result. At the full budget: not measured yet.

Run::

    python tuned_examples/minatar/asterix.py --algo A2C
    python tuned_examples/minatar/asterix.py --algo HCA --seed 1 --output runs/hca1
    python tuned_examples/minatar/asterix.py --output runs/hca1 --resume
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tuned_examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tuned_examples.common import main, minatar_config  # noqa: E402

ENV = "minatar/Asterix"
BUDGET = 2_000_000  # env steps
EXPECTED = {
    "A2C": {
        "score_300k": 0.55,
        "source": "measured here at 300k steps, 1 seed: 0.55 (seed 0, mean score over the "
                  "last 10% of iterations; "
                  "2-core machine, 3,996 steps/s)",
        "command": "nice -n 10 python tuned_examples/minatar/asterix.py --algo A2C "
                   "--seed 0 --stop-timesteps 300000 --output /tmp/tuned_minatar/asterix_A2C "
                   "--wandb off",
        "full_budget": "not measured yet",
    },
    "HCA": {
        "score_300k": 0.47,
        "source": "measured here at 300k steps, 1 seed: 0.47 (seed 0, mean score over the "
                  "last 10% of iterations; "
                  "2-core machine, 3,332 steps/s)",
        "command": "nice -n 10 python tuned_examples/minatar/asterix.py --algo HCA "
                   "--seed 0 --stop-timesteps 300000 --output /tmp/tuned_minatar/asterix_HCA "
                   "--wandb off",
        "full_budget": "not measured yet",
    },
}


def config(algo="HCA", credit=None, *, num_env_runners=0):
    """The config for `algo` ("HCA" or "A2C"); `credit` None: the algorithm's own."""
    return minatar_config("Asterix", algo, credit, num_env_runners=num_env_runners)


if __name__ == "__main__":
    main(config, budget=BUDGET, expected=EXPECTED,
         default_output="runs/tuned/minatar_asterix", description=__doc__)
