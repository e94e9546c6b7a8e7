"""Environments for hca_rllib, behind one resolver (:mod:`hca_rllib.envs.resolver`).

Importing this package registers, with gymnasium, every id the resolver knows whose
package is installed: ``atari/<Game>`` and ``atari-machado/<Game>`` (ale-py),
``minatar/<Game>``, ``bsuite/<experiment>-<setting>`` and the known-answer tasks
``HCA/<Task>-v0``. Ray workers import it when they unpickle an ``HCAConfig``; any other
process can use ``gymnasium.make("hca_rllib.envs:atari/Pong")``.
"""

from hca_rllib.envs.known_answer import (
    KNOWN_ANSWER_ENV_IDS,
    KNOWN_ANSWER_MAX_EPISODE_STEPS,
    AmbiguousBandit,
    DelayedEffect,
    DelayedRewardWrapper,
    KeyToDoor,
    Shortcut,
    bandit_advantages,
    bandit_exact_posterior,
    bandit_mutual_information,
    bandit_q_values,
    bandit_return_density,
    key_to_door_values,
    make_delayed_reward,
    register_known_answer_envs,
)
from hca_rllib.envs.resolver import EnvInfo, EnvResolutionError, env_family, register_all, resolve_env

register_all()

__all__ = [
    "KNOWN_ANSWER_ENV_IDS",
    "KNOWN_ANSWER_MAX_EPISODE_STEPS",
    "AmbiguousBandit",
    "DelayedEffect",
    "DelayedRewardWrapper",
    "EnvInfo",
    "EnvResolutionError",
    "KeyToDoor",
    "Shortcut",
    "bandit_advantages",
    "bandit_exact_posterior",
    "bandit_mutual_information",
    "bandit_q_values",
    "bandit_return_density",
    "env_family",
    "key_to_door_values",
    "make_delayed_reward",
    "register_all",
    "register_known_answer_envs",
    "resolve_env",
]
