"""Atari Q*bert (classic protocol), A2C or HCA, with the SB3 zoo's A2C hyperparameters.

Protocol and hyperparameters: ``tuned_examples/common.py`` (``atari_config``) and
``tuned_examples/README.md``; the score is the unclipped full-game return.

Budget: 10M agent steps (40M frames), the standard A2C budget.

Expected: A2C 3882 (SB3 zoo benchmark, 10M steps, one run: see
``shared/docs/benchmarks.md``). HCA: not measured yet.

Run::

    python tuned_examples/atari/qbert.py --algo A2C
    python tuned_examples/atari/qbert.py --algo HCA --seed 1 --output runs/hca1
    python tuned_examples/atari/qbert.py --num-env-runners 8 --address auto   # a cluster
    python tuned_examples/atari/qbert.py --output runs/hca1 --resume

Time: about 11 hours on 2 cores, extrapolated (see ``tuned_examples/README.md``).
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tuned_examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tuned_examples.common import ATARI_BUDGET, atari_config, main  # noqa: E402

ENV = "atari/Qbert"
BUDGET = ATARI_BUDGET  # 10M agent steps = 40M frames
EXPECTED = {
    "A2C": {
        "score": 3882,
        "source": "Stable-Baselines3 zoo benchmark, QbertNoFrameskip-v4, 10M steps, 1 run "
                  "(shared/docs/benchmarks.md)",
    },
    "HCA": {
        "score": None,
        "source": "not measured yet (the HCA paper's tables are not available here)",
    },
}


def config(algo="HCA", credit=None, *, num_env_runners=0):
    """The config for `algo` ("HCA" or "A2C"); `credit` None: the algorithm's own."""
    return atari_config("Qbert", algo, credit, num_env_runners=num_env_runners)


if __name__ == "__main__":
    main(config, budget=BUDGET, expected=EXPECTED,
         default_output="runs/tuned/atari_qbert", description=__doc__)
