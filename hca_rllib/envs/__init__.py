"""Environments for hca_rllib.

Importing this package registers the known-answer tasks with gymnasium
(``HCA/AmbiguousBandit-v0``, ``HCA/DelayedEffect-v0``, ``HCA/Shortcut-v0``,
``HCA/DelayedReward-v0``).
"""

from hca_rllib.envs.known_answer import (
    KNOWN_ANSWER_ENV_IDS,
    KNOWN_ANSWER_MAX_EPISODE_STEPS,
    AmbiguousBandit,
    DelayedEffect,
    DelayedRewardWrapper,
    Shortcut,
    bandit_advantages,
    bandit_exact_posterior,
    bandit_mutual_information,
    bandit_q_values,
    bandit_return_density,
    make_delayed_reward,
    register_known_answer_envs,
)

register_known_answer_envs()

__all__ = [
    "KNOWN_ANSWER_ENV_IDS",
    "KNOWN_ANSWER_MAX_EPISODE_STEPS",
    "AmbiguousBandit",
    "DelayedEffect",
    "DelayedRewardWrapper",
    "Shortcut",
    "bandit_advantages",
    "bandit_exact_posterior",
    "bandit_mutual_information",
    "bandit_q_values",
    "bandit_return_density",
    "make_delayed_reward",
    "register_known_answer_envs",
]
