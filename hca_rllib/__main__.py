import sys

from hca_rllib.cli import main

sys.exit(main())
