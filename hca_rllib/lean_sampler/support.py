"""Which configs the lean EnvRunner can run, and the names of the samplers.

`lean_sampler_blocker` reads the config (what `sampler="auto"` resolves by, before any
env exists); `unsupported_pieces` reads the built runner's connector pipelines and
action space (what only the built env shows)."""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils import force_list

from hca_rllib import compat

SAMPLERS = ("lean", "rllib")
# `sampler` and `learner_path`: the lean path where the config uses only what it
# supports, RLlib's otherwise (`HCAConfig.resolved_sampler`, `resolved_learner_path`).
AUTO = "auto"
# The default of `HCAConfig.sampler` (the lean runner's speed-up:
# benchmarks/results/throughput_lean/summary.md).
DEFAULT_SAMPLER = AUTO

# Connector pieces the lean loop does itself (RLlib's defaults, and frame stacking).
ENV_TO_MODULE_OK = (
    "AddObservationsFromEpisodesToBatch", "AddTimeDimToBatchAndZeroPad",
    "AddStatesFromEpisodesToBatch", "AgentToModuleMapping", "BatchIndividualItems",
    "NumpyToTensor", "FrameStacking",  # RLlib's FrameStackingEnvToModule
    # RLlib's FlattenObservations as HCAConfig adds it for non-Box observation spaces
    # (one-hot Discrete and MultiDiscrete, flattened Dict and Tuple): the lean loop
    # flattens each vector step's observations at once, with the same function.
    "FlattenObservations",
)
MODULE_TO_ENV_OK = (
    "GetActions", "TensorToNumpy", "UnBatchToIndividualItems", "ModuleToAgentUnmapping",
    "RemoveSingleTsTimeRankFromBatch", "NormalizeAndClipActions", "ListifyDataForVectorEnv",
)
# Per-step episode callbacks the lean loop does not make.
PER_STEP_CALLBACKS = ("on_episode_created", "on_episode_start", "on_episode_step")


def unsupported_callbacks(config) -> Optional[str]:
    """What in `config`'s callbacks needs RLlib's loop (a per-step episode callback), as
    "<what> is defined (the lean sampler makes no per-step episode callbacks)", or None."""
    why = "the lean sampler makes no per-step episode callbacks"
    for cls in force_list(config.callbacks_class):
        if not isinstance(cls, type) or not issubclass(cls, RLlibCallback):
            continue
        for name in PER_STEP_CALLBACKS:
            if getattr(cls, name) is not getattr(RLlibCallback, name):
                return f"{cls.__name__}.{name} is defined ({why})"
    for name in PER_STEP_CALLBACKS:
        if getattr(config, f"callbacks_{name}", None):
            return f"config.callbacks_{name} is set ({why})"
    return None


def lean_sampler_blocker(config) -> Optional[str]:
    """The first feature `config` uses that the lean runner does not support, as one
    phrase naming it and why ("env_to_module_connector is set (the lean sampler runs no
    user connectors)"), or None: the lean runner can take the config. What only shows
    once the env exists (a non-Discrete action space of an env given as a callable) is
    checked by the runner itself (`unsupported_pieces`)."""
    for name in ("env_to_module", "module_to_env"):
        if compat.user_connector(config, name) is not None:
            return f"{name}_connector is set (the lean sampler runs no user connectors)"
    reason = unsupported_callbacks(config)
    if reason:
        return reason
    if config.is_multi_agent:
        return "the config is multi-agent (the lean sampler is single-agent)"
    if not config.add_default_connectors_to_env_to_module_pipeline or \
            not config.add_default_connectors_to_module_to_env_pipeline:
        return ("add_default_connectors_to_env_to_module_pipeline / _module_to_env_pipeline is "
                "False (the lean sampler runs RLlib's default pieces only)")
    return None


def unsupported_pieces(env_to_module, module_to_env, action_space) -> Optional[str]:
    """What a built runner has that the lean loop cannot run, as one phrase, or None: a
    connector piece off the allow-lists (`ENV_TO_MODULE_OK`, `MODULE_TO_ENV_OK`) in
    either pipeline, or an `action_space` (the env's single one; None: no env) that is
    not Discrete."""
    for pipeline, allowed, what in ((env_to_module, ENV_TO_MODULE_OK, "env-to-module"),
                                    (module_to_env, MODULE_TO_ENV_OK, "module-to-env")):
        for piece in pipeline.connectors:
            if type(piece).__name__ not in allowed:
                return (f"the {what} connector piece {type(piece).__name__} is in the "
                        f"pipeline (the lean sampler does frame stacking and flattening only)")
    if action_space is not None and not isinstance(action_space, gym.spaces.Discrete):
        return f"the action space is {action_space} (the lean sampler needs a Discrete one)"
    return None
