"""Test scaffolding, never imported by ``import hca_rllib``.

Importing this package registers, with gymnasium, the fault-injection env ``FailOnce-v0``
(:mod:`hca_rllib.testing.faults`). Reach it through gymnasium's ``module:id`` form,
``"hca_rllib.testing:FailOnce-v0"``: every process that builds it (a remote EnvRunner, a
Tune trial) imports this package first, so nothing else needs registering, and a default
``import hca_rllib`` leaves the id out of the user's registry.
"""

import gymnasium as gym

from hca_rllib.testing.faults import FailOnce, InjectedFailure, make_fail_once

__all__ = ["FAIL_ONCE_ENV_ID", "FailOnce", "InjectedFailure", "make_fail_once"]

# The id as a user of gymnasium.make / config.environment() writes it.
FAIL_ONCE_ENV_ID = "hca_rllib.testing:FailOnce-v0"

if "FailOnce-v0" not in gym.envs.registry:
    gym.register(id="FailOnce-v0", entry_point="hca_rllib.testing.faults:make_fail_once")
