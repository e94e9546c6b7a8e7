"""MinAtar Seaquest, A2C or HCA: ``python tuned_examples/minatar/seaquest.py --help``.

Its facts (budget, expected scores with their sources) are a row of
``tuned_examples/games.py``; the config and the command line are ``tuned_examples/common.py``.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tuned_examples` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tuned_examples.common import tuned_example  # noqa: E402

ENV, BUDGET, EXPECTED, config, main = tuned_example(__file__)

if __name__ == "__main__":
    main()
