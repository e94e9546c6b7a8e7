import sys

from hca_rllib.cli import run

sys.exit(run())
