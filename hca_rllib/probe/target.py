"""What the probe runs: the environment (as the resolver builds it) and the stated policy
(uniform random, a checkpoint's module, or a module given directly), and its rollouts."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, Optional

from hca_rllib.probe.rollouts import ModulePolicy, UniformPolicy, collect_rollouts
from hca_rllib.probe.settings import ProbeError, ProbeSettings


@dataclasses.dataclass
class ProbeTarget:
    env: str
    env_config: Optional[Dict[str, Any]]
    info: Any  # hca_rllib.envs.EnvInfo
    model_config: Dict[str, Any]  # the family's network overlaid with the caller's or checkpoint's
    policy: Any  # UniformPolicy or ModulePolicy


def _from_checkpoint(checkpoint, env, env_config, frame_stack, model_config):
    from hca_rllib.evaluation import checkpoint_config, find_checkpoint, load_checkpoint_module

    path = find_checkpoint(checkpoint)
    state = checkpoint_config(path)
    env = env if env is not None else state["env"]
    if env != state["env"]:
        raise ProbeError(f"--env {env!r} is not the checkpoint's env {state['env']!r}")
    env_config = dict(state.get("env_config") or {}) if env_config is None else env_config
    frame_stack = state.get("frame_stack") if frame_stack is None else frame_stack
    model_config = model_config if model_config is not None else dict(state.get("model_config") or {})
    return path, env, env_config, frame_stack, model_config, load_checkpoint_module(path)


def resolve_target(env: Optional[str], *, env_config=None, checkpoint=None, module=None, frame_stack=None,
                   model_config=None) -> ProbeTarget:
    """The env and policy the probe runs (see `probe()`); `ProbeError` on a bad pairing."""
    from hca_rllib.envs import resolve_env

    if checkpoint is not None and module is not None:
        raise ProbeError("give a checkpoint or a module as the policy, not both")
    source = None
    if checkpoint is not None:
        source, env, env_config, frame_stack, model_config, module = _from_checkpoint(
            checkpoint, env, env_config, frame_stack, model_config)
    info = resolve_env(env, env_config or {}, frame_stack=frame_stack, model_config=model_config or {})
    if info is None:
        raise ProbeError(f"environment {env!r}: the probe needs an id the resolver can build (a gymnasium id)")
    family_config = {**info.family.model_config, **(model_config or {})}
    if module is None:
        return ProbeTarget(env, env_config, info, family_config, UniformPolicy(int(info.action_space.n)))
    from hca_rllib.module import HCATorchRLModule

    if not isinstance(module, HCATorchRLModule):
        raise ProbeError(f"module must be an HCATorchRLModule, got {type(module).__name__}")
    if module.observation_space.shape != info.module_observation_space.shape:
        raise ProbeError(f"the policy's observations have shape {module.observation_space.shape}, env "
                         f"{env!r} gives {info.module_observation_space.shape}")
    description = f"trained policy (checkpoint {source})" if source is not None else "trained policy (module)"
    return ProbeTarget(env, env_config, info, family_config, ModulePolicy(module, description))


def collect(target: ProbeTarget, settings: ProbeSettings, say: Callable[[str], None]) -> Dict[str, Any]:
    """`collect_rollouts` of the target's policy under `settings`, with progress lines."""
    say(f"collecting rollouts of {target.env} under the {target.policy.description} policy")
    last = [0.0]

    def collect_progress(done: int, steps: int) -> None:
        if time.time() - last[0] > 5.0:
            last[0] = time.time()
            say(f"  {done:,}/{settings.episodes:,} episodes, {steps:,}/{settings.max_steps:,} steps")

    return collect_rollouts(target.env, target.policy, env_config=target.env_config, episodes=settings.episodes,
                            max_steps=settings.max_steps, num_envs=settings.num_envs, seed=settings.seed,
                            frame_stack=target.info.frame_stack, progress=collect_progress)
