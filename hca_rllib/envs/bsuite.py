"""bsuite's credit-assignment experiments (Osband et al. 2020), ``bsuite/<experiment>-<setting>``.

``bsuite/umbrella_length-3`` is bsuite's ``umbrella_length/3`` (chain length 4, 20
distractor bits), ``bsuite/umbrella_distract-5`` its ``umbrella_distract/5`` and
``bsuite/discounting_chain-0`` its ``discounting_chain/0``: the setting index is the one
in ``bsuite.sweep.SETTINGS``. The dm_env is wrapped for gymnasium by
``shimmy.BSuiteCompatibilityV0`` and its ``(1, n)`` observation is flattened to ``(n,)``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["BSUITE_EXPERIMENTS", "make_bsuite", "register_bsuite_envs"]

# Experiment -> number of settings in bsuite 0.3's sweep.
BSUITE_EXPERIMENTS = {"umbrella_length": 23, "umbrella_distract": 23, "discounting_chain": 20}


class _FlattenObservation(gym.ObservationWrapper):
    def __init__(self, env: gym.Env):
        super().__init__(env)
        size = int(np.prod(env.observation_space.shape))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def observation(self, observation):
        return np.asarray(observation, dtype=np.float32).reshape(-1)


def make_bsuite(experiment: str, setting: int, render_mode=None) -> gym.Env:
    import bsuite  # optional dependency: hca_rllib[bsuite]
    from bsuite import sweep
    from shimmy import BSuiteCompatibilityV0

    if experiment not in BSUITE_EXPERIMENTS:
        raise ValueError(f"unknown bsuite experiment {experiment!r}; one of {sorted(BSUITE_EXPERIMENTS)}")
    bsuite_id = f"{experiment}/{setting}"
    if bsuite_id not in sweep.SETTINGS:
        raise ValueError(f"bsuite has no setting {bsuite_id!r}; settings 0..{BSUITE_EXPERIMENTS[experiment] - 1}")
    env = bsuite.load(experiment, sweep.SETTINGS[bsuite_id])
    return _FlattenObservation(BSuiteCompatibilityV0(env, render_mode=render_mode))


def register_bsuite_envs():
    ids = []
    for experiment, count in BSUITE_EXPERIMENTS.items():
        for setting in range(count):
            env_id = f"bsuite/{experiment}-{setting}"
            if env_id not in gym.envs.registry:
                gym.register(
                    id=env_id,
                    entry_point="hca_rllib.envs.bsuite:make_bsuite",
                    kwargs={"experiment": experiment, "setting": setting},
                )
            ids.append(env_id)
    return ids
