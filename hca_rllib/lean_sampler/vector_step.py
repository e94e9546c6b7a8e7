"""The lean loop's own step of a gymnasium `SyncVectorEnv`'s sub-envs.

gymnasium's `SyncVectorEnv.step` (1.x, NEXT_STEP autoreset) loops over its envs (an env
that ended at the last step gets `reset()`, reward 0, not terminated or truncated; the
others `step(action)`), then stacks the observations into its own array (`concatenate`,
singledispatch), deep-copies that array, copies rewards, terminations and truncations,
and builds a dict of per-key arrays from the infos that RLlib's `DictInfoToList` turns
back into per-env dicts. The lean loop would copy all of that into its fragment buffers
once more. Instead, `step_sub_envs` runs that loop over the vector env's public `envs`,
with the same calls in the same order and the fragment's own autoreset flags, and writes
each env's results straight into the buffer rows; the infos stay the envs' own dicts
and are converted as the stock step and `DictInfoToList` would (`sub_env_infos`, through
`hca_rllib.compat`) only at a step where an episode ended, the one place the lean loop
keeps them.

The vector env's own state is not kept up to date, so anything that steps it afterwards
resets it first: RLlib's loop (the runner resets after lean sampling) and the lean loop
through the env's own `step` (the runner resets when the lean state was sampled by this
step). Only for `type(env) is SyncVectorEnv` (no subclass, no vector wrapper under
DictInfoToList) with NEXT_STEP autoreset and a Box observation space
(`can_step_directly`). tests/test_env_runner.py checks the episodes (infos included) are
the same as through `SyncVectorEnv.step`; benchmarks/results/sync_step has the measured
gain.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
from gymnasium.spaces import Box
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from hca_rllib import compat

# The dtype of the rewards `SyncVectorEnv.step` returns (float64 whatever the sub-envs
# give): the lean runner's own stepping of its sub-envs stores them so.
SYNC_VECTOR_REWARD_DTYPE = np.float64


def can_step_directly(env) -> bool:
    """Whether `step_sub_envs` does for `env` (a vector env) what its own `step` does."""
    return (type(env) is SyncVectorEnv and env.autoreset_mode == AutoresetMode.NEXT_STEP
            and type(env.single_observation_space) is Box)


def step_sub_envs(envs, autoreset: np.ndarray, buffers, v: int, actions: np.ndarray,
                  env_infos: List[Any]) -> None:
    """What `SyncVectorEnv.step(actions)` (NEXT_STEP) does to its sub-`envs`, with
    `autoreset` its autoreset flags, the results written into row `v` of the fragment's
    `buffers` (observations into row `v + 1`) and the infos into `env_infos`."""
    if len(actions) != len(envs):  # SyncVectorEnv.step's zip(..., strict=True)
        raise ValueError(f"{len(actions)} actions for {len(envs)} envs")
    obs, rew = buffers.obs[v + 1], buffers.rew[v]
    term, trunc = buffers.term[v], buffers.trunc[v]
    for i, sub in enumerate(envs):
        if autoreset[i]:
            obs[i], env_infos[i] = sub.reset()
            rew[i] = 0.0
            term[i] = False
            trunc[i] = False
        else:
            obs[i], rew[i], term[i], trunc[i], env_infos[i] = sub.step(actions[i])


def sub_env_infos(env, env_infos: List[Any]) -> List[dict]:
    """The per-env infos of a direct step of `env` as its own step and RLlib's
    DictInfoToList give them (the same conversions, `hca_rllib.compat`)."""
    infos: Dict[str, Any] = {}
    for i, info in enumerate(env_infos):
        infos = compat.add_vector_info(env, infos, info, i)
    return compat.vector_infos_to_list(infos, env.num_envs)
