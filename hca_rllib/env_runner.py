"""A lean EnvRunner for the single-agent, discrete-action case (``sampler="lean"``).

Installed through RLlib's ``env_runner_cls`` hook by :class:`hca_rllib.HCAConfig` when
the sampler resolves to "lean" (``sampler="lean"``, or ``"auto"``, the default, for a
config that uses nothing off the allow-list: `lean_sampler_blocker`). It subclasses
RLlib's ``SingleAgentEnvRunner`` and replaces only the timestep loop of ``_sample``
(``sample()``'s framing, weight sync, state, checkpoints, ``make_env``/``make_module`` and
fault handling are RLlib's). Its parts, one job each (:mod:`hca_rllib.lean_sampler`):

* The policy's step (`LeanPolicy`, here): observations (or the stacked frames) to a
  tensor, the policy logits under ``torch.inference_mode``, an action sampled from them
  as ``torch.distributions.Categorical`` does (what RLlib's ``GetActions`` does, the same
  random stream). No connector pipelines, no per-step dicts, episode objects or metrics.
  For the stock module the logits and the draw come from :mod:`hca_rllib.fast_policy`
  (flat torch calls, each conv layer's kernel picked by its shape, Categorical's draw in
  fewer ops; a finite-logits check per fragment); other modules get their own
  ``_forward_exploration`` and ``Categorical`` (``PlainLeanEnvRunner`` forces that path).
* The env's step: the sub-envs of a gymnasium ``SyncVectorEnv`` (NEXT_STEP autoreset,
  Box observations: what RLlib's ``make_env`` builds for a registered env) are stepped
  by the runner itself into the fragment buffers (`lean_sampler.vector_step`); any other
  vector env through its own ``step``.
* One fragment's buffers and bookkeeping (`lean_sampler.fragment`): preallocated numpy
  rows; the episodes that end and the autoresets after each step.
* The episodes (`lean_sampler.episodes`): each env's running episode keeps only the
  lookback steps the next fragment needs; the ``SingleAgentEpisode`` chunks are built
  once per ``sample()`` from the buffers, with what RLlib's path stores. Episodes are
  always numpy (finalized) ones: ``episodes_to_numpy=False`` is not honoured.
* What RLlib's env-to-module pieces would do (`lean_sampler.observations`): flattening
  of non-Box observations (``FlattenObservations``) once per vector step, and frame
  stacking (``FrameStackingEnvToModule``) as one rolling stack per env.
* Metrics: episode metrics aggregated per ``sample()`` and logged under RLlib's keys
  (``episode_return_mean``, ``episode_len_mean``, ...; ``GameScoreCallback``'s
  ``game_return_mean`` through ``on_episode_end``).

Callbacks: ``on_episode_end`` is called once per completed episode, at the step where it
ended, with the episode's last chunk and, as ``prev_episode_chunks``, one
:class:`PreviousChunks` summary standing for all its earlier chunks (return, length,
duration; no data). ``on_sample_end`` and ``on_environment_created`` are called as RLlib
does. Per-step callbacks (``on_episode_created``, ``on_episode_start``,
``on_episode_step``) are not: a config that defines them takes RLlib's runner with
``sampler="auto"`` (the default) and is refused with ``sampler="lean"``
(`lean_sampler_blocker`), as are user connector pieces.

What goes to RLlib's own loop instead (the same runner object, after a reset of the
envs): ``sample(num_episodes=...)`` and ``batch_mode="complete_episodes"``, and
``random_actions=True``. ``explore=False`` stays lean (greedy action, log-prob 0 as
RLlib's deterministic distribution gives).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from gymnasium.wrappers.vector import DictInfoToList

from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env.env_errors import StepFailedRecreateEnvError
from ray.rllib.env.env_runner import ENV_STEP_FAILURE, NUM_ENV_STEP_FAILURES_LIFETIME
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.util.debug import log_once

from hca_rllib import compat
from hca_rllib.fast_policy import ConvBackends, policy_plan, sample_actions
from hca_rllib.lean_sampler import vector_step
from hca_rllib.lean_sampler.episodes import EpisodeEnd, PreviousChunks, RunningEpisodes
from hca_rllib.lean_sampler.fragment import Fragment, FragmentBuffers, rows_needed
from hca_rllib.lean_sampler.observations import LeanObservations
from hca_rllib.lean_sampler.support import (AUTO, DEFAULT_SAMPLER, SAMPLERS, lean_sampler_blocker,
                                            unsupported_pieces)
from hca_rllib.lean_sampler.vector_step import SYNC_VECTOR_REWARD_DTYPE

__all__ = ["LeanEnvRunner", "PlainLeanEnvRunner", "StockStepLeanEnvRunner", "LeanPolicy", "PreviousChunks",
           "lean_sampler_blocker", "SAMPLERS", "AUTO", "DEFAULT_SAMPLER"]

logger = logging.getLogger(__name__)

# One vector step of a fragment, of one kind (`LeanEnvRunner._sub_envs_step`,
# `_vector_env_step`): `step(v, actions)` steps the envs with `actions`, row `v`'s results
# written into the fragment's buffers, and returns the step's per-env infos as
# `Fragment.after_step` asks for them (a callable), or ENV_STEP_FAILURE.
VectorStep = Callable[[int, np.ndarray], Any]


class LeanPolicy:
    """The policy's step in the lean loop: logits for a batch of observations, the action
    drawn from them and its log-prob (greedy, log-prob 0, without exploration).

    With a plan (`prepare`'s `fast`, and a module whose forward passes are the stock
    ones): `fast_policy.policy_plan`'s logits and `fast_policy.sample_actions`' draw.
    Without: the module's own forward pass and `torch.distributions.Categorical`."""

    def __init__(self, conv_backends: ConvBackends):
        # The conv kernel chosen per layer and input shape (`fast_policy.ConvBackends`).
        self.conv_backends = conv_backends
        self.explore = True
        self.forward = None
        self.plan = None
        self._plan_cache = None  # (module, (explore, shape, dtype), plan)

    def prepare(self, module, explore: bool, example: np.ndarray, fast: bool) -> None:
        """For one fragment of `module` (`example`: a batch of what it will see)."""
        self.explore = explore
        self.forward = module._forward_exploration if explore else module._forward_inference
        self.plan = self._policy_plan(module, explore, example) if fast else None

    def _policy_plan(self, module, explore: bool, example: np.ndarray):
        """`fast_policy.policy_plan` for this fragment, or None: a module whose forward
        passes are not the stock ones."""
        name = "_forward_exploration" if explore else "_forward_inference"
        if getattr(type(module), name, None) is not getattr(TorchRLModule, name):
            return None
        # Built once per module and batch shape, not per fragment: the plan holds the
        # module's layers (weight syncs copy into them in place), and building it runs a
        # CNN's conv layers once on the example batch (on Pong's 16 x 5 fragments, a
        # fifth more sampling forward work when it was rebuilt every sample()).
        key = (explore, example.shape, example.dtype)
        cached = self._plan_cache
        if cached is not None and cached[0] is module and cached[1] == key:
            return cached[2]
        plan = policy_plan(module, self.conv_backends, torch.from_numpy(np.ascontiguousarray(example)))
        self._plan_cache = (module, key, plan)
        return plan

    def act(self, obs: np.ndarray) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(actions, their log-probs, the logits) for the observations `obs`."""
        plan = self.plan
        with torch.inference_mode():
            if plan is not None:
                logits = plan(torch.from_numpy(obs))
            else:
                logits = self.forward({Columns.OBS: torch.from_numpy(obs)})[Columns.ACTION_DIST_INPUTS]
            if not self.explore:
                actions = torch.argmax(logits, dim=-1)
                logp = torch.zeros(actions.shape, dtype=logits.dtype)
            elif plan is not None:
                actions, logp = sample_actions(logits)
            else:
                dist = torch.distributions.Categorical(logits=logits, validate_args=False)
                actions = dist.sample()
                logp = dist.log_prob(actions)
        return actions, logp, logits


class LeanEnvRunner(SingleAgentEnvRunner):
    """RLlib's SingleAgentEnvRunner with a fused, buffered timestep loop (module docs)."""

    # The inference pass of `hca_rllib.fast_policy` (flat torch calls, conv kernel by
    # shape, fewer-op action draw); False: the module's `_forward_exploration` and
    # `torch.distributions.Categorical` (the comparison `benchmarks/throughput.py` runs).
    fast_policy = True
    # Step the sub-envs of a gymnasium `SyncVectorEnv` (NEXT_STEP autoreset, Box
    # observations) into the fragment buffers (`vector_step`); False: its own `step`.
    direct_vector_step = True

    @override(SingleAgentEnvRunner)
    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        reason = lean_sampler_blocker(self.config) or unsupported_pieces(
            self._env_to_module, self._module_to_env,
            self.env.single_action_space if self.env is not None else None)
        # What the lean loop cannot run: refused with sampler="lean"; with "auto" (a case
        # only the built env shows, e.g. the action space of an env given as a callable),
        # this runner samples with RLlib's own loop (`_sample`), said in one log line.
        self._rllib_loop_reason = None
        if reason:
            if getattr(self.config, "sampler", "lean") != AUTO:
                raise ValueError(f"sampler='lean' cannot run this config: {reason}; use "
                                 f"sampler='auto' (the default) or 'rllib'")
            self._rllib_loop_reason = reason
            if log_once(f"hca_lean_runner_falls_back:{reason}"):
                logger.info(f"sampler: RLlib's SingleAgentEnvRunner loop for this run: {reason}")
        self._observations = LeanObservations.from_pipeline(self._env_to_module)
        self._lookback = int(self.config.episode_lookback_horizon)
        # The lean loop's state across sample() calls; None: the envs need a reset.
        # "obs": the observations the next fragment starts from; "needs_reset": whether
        # each env's next step is its autoreset; "stack": the frame stacks (or None);
        # "episodes": the running episodes (RunningEpisodes, with their carried lookback
        # steps: `held_steps`); "own_step": whether the sub-envs were stepped by the
        # runner (`vector_step`).
        self._lean: Optional[Dict[str, Any]] = None
        self._buffers: Optional[FragmentBuffers] = None
        # The totals of the episodes completed since get_metrics().
        self._lean_episode_stats: List[EpisodeEnd] = []
        self._policy = LeanPolicy(ConvBackends())

    # ------------------------------------------------------------------ env access

    def _vector_env(self):
        """The vector env under RLlib's DictInfoToList (infos stay dicts of arrays)."""
        env = self.env
        return env.env if isinstance(env, DictInfoToList) else env

    def steps_sub_envs(self) -> bool:
        """Whether the lean loop steps the vector env's sub-envs itself (`vector_step`)."""
        return self.direct_vector_step and vector_step.can_step_directly(self._vector_env())

    def _lean_env_call(self, method, *args):
        """`method(*args)` (an env step) with RLlib's failure handling (`_try_env_step`,
        no per-step metrics): ENV_STEP_FAILURE after re-creating the envs, or
        RuntimeError."""
        try:
            return method(*args)
        except Exception as e:
            self.metrics.log_value(NUM_ENV_STEP_FAILURES_LIFETIME, 1, reduce="lifetime_sum")
            if self.config.restart_failed_sub_environments:
                if not isinstance(e, StepFailedRecreateEnvError):
                    logger.exception(f"{type(self).__name__}: environment step failed; "
                                     f"re-creating and resetting the envs. The error: {e}")
                self.make_env()
                return ENV_STEP_FAILURE
            logger.exception(f"{type(self).__name__}: environment step failed and "
                             f"restart_failed_sub_environments is False: {e}")
            raise RuntimeError from e

    def _lean_reset(self) -> None:
        """Reset all envs (seeded on the first reset, as RLlib does); new episodes."""
        obs, _infos = self._try_env_reset(
            seed=self._seed if self._needs_initial_reset else None, options=None)
        self._needs_initial_reset = False
        obs = self._observations.convert(obs)
        episodes = RunningEpisodes(
            self.num_envs, self._lookback,
            self._observations.observation_space(self.env.single_observation_space),
            self.env.single_action_space)
        self._lean = {"obs": obs.copy(), "needs_reset": np.zeros(self.num_envs, dtype=bool),
                      "stack": self._observations.new_stack(obs), "episodes": episodes}

    # -------------------------------------------------------------------- sampling

    @override(SingleAgentEnvRunner)
    def _sample(self, *, num_timesteps=None, num_episodes=None, explore: bool,
                random_actions: bool = False, force_reset: bool = False):
        if (num_timesteps is None or random_actions or self.module is None
                or self._rllib_loop_reason is not None):
            # RLlib's loop on its own episode objects; the lean state restarts afterwards.
            lean_was_running = self._lean is not None
            self._lean = None
            return super()._sample(num_timesteps=num_timesteps, num_episodes=num_episodes,
                                   explore=explore, random_actions=random_actions,
                                   force_reset=force_reset or lean_was_running)
        if (force_reset or self._lean is None or self._needs_initial_reset
                or (self._lean.get("own_step") and not self.steps_sub_envs())):
            # (The last: the runner stepped the sub-envs itself, and the vector env's own
            # `step` would go on from its stale state.)
            self._lean_reset()
        while True:
            episodes = self._lean_sample(int(num_timesteps), explore)
            if episodes is not None:
                return episodes
            self._lean_reset()  # an env step failed and the envs were re-created

    def _lean_sample(self, num_timesteps: int, explore: bool) -> Optional[List[SingleAgentEpisode]]:
        """One fragment of at least `num_timesteps` env steps from the lean state; None
        when an env step failed and the envs were re-created."""
        s = self._lean
        rows = rows_needed(num_timesteps, self.num_envs)
        b = self._buffers
        if b is None or not b.fits(rows, s["obs"]):
            b = self._buffers = FragmentBuffers(rows, s["obs"], int(self.env.single_action_space.n))
        module = self.module
        module.eval()
        example = s["stack"] if s["stack"] is not None else s["obs"]
        self._policy.prepare(module, explore, example, self.fast_policy)
        fragment = Fragment(b, s["episodes"], s["needs_reset"], s["stack"], self._weights_seq_no,
                            self._on_episode_end)
        b.obs[0] = s["obs"]
        if self.steps_sub_envs():
            s["own_step"] = True
            step = self._sub_envs_step(fragment)
        else:
            step = self._vector_env_step(fragment)
        stepped = self._step_fragment(fragment, num_timesteps, step)
        if stepped is None:
            return None
        rows, env_steps = stepped
        s["needs_reset"] = fragment.needs_reset
        if self._policy.plan is not None and explore and not np.isfinite(b.logits[:rows]).all():
            # What torch.multinomial (Categorical.sample) refuses at the step itself.
            raise ValueError("sampler='lean': the policy's logits are not all finite "
                             "(probability tensor contains either inf, nan or element < 0)")
        running = fragment.running_chunks(rows)
        s["obs"] = b.obs[rows].copy()
        self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=env_steps)
        self._increase_sampled_metrics(env_steps, len(fragment.done_episodes))
        return fragment.done_episodes + running

    def _act(self, fragment: Fragment, v: int) -> np.ndarray:
        """The policy's actions at row `v`, stored with their log-probs and logits."""
        return fragment.store_actions(v, *self._policy.act(fragment.module_obs(v)))

    def _step_fragment(self, fragment: Fragment, num_timesteps: int, step: VectorStep
                       ) -> Optional[Tuple[int, int]]:
        """Vector steps by `step` until `num_timesteps` env steps: (rows, env steps), or
        None when a step failed."""
        n = self.num_envs
        # `needs_reset` (the envs whose episode ended at the last step) is the vector
        # env's autoreset state (an autoreset is no env step); `Fragment.after_step`
        # updates it.
        needs_reset = fragment.needs_reset
        env_steps = v = 0
        while env_steps < num_timesteps:
            env_steps += n - int(needs_reset.sum())
            infos_of = step(v, self._act(fragment, v))
            if infos_of is ENV_STEP_FAILURE:
                return None
            fragment.after_step(v, infos_of)
            v += 1
        return v, env_steps

    def _sub_envs_step(self, fragment: Fragment) -> VectorStep:
        """The vector step of `fragment` with the sub-envs stepped by the runner straight
        into the buffers (`vector_step.step_sub_envs`)."""
        env, n, b = self._vector_env(), self.num_envs, fragment.buffers
        b.allocate_rewards(SYNC_VECTOR_REWARD_DTYPE)
        env_infos: List[Any] = [None] * n  # the last step's per-env info dicts
        wrapped = isinstance(self.env, DictInfoToList)
        needs_reset = fragment.needs_reset

        def infos_of() -> List[dict]:
            return vector_step.sub_env_infos(env, env_infos) if wrapped else [{} for _ in range(n)]

        def step(v: int, actions: np.ndarray):
            if self._lean_env_call(vector_step.step_sub_envs, env.envs, needs_reset, b, v, actions,
                                   env_infos) is ENV_STEP_FAILURE:
                return ENV_STEP_FAILURE
            return infos_of

        return step

    def _vector_env_step(self, fragment: Fragment) -> VectorStep:
        """The vector step of `fragment` through the vector env's own `step`."""
        env, n = self._vector_env(), self.num_envs
        wrapped = isinstance(self.env, DictInfoToList)
        step_info: List[Any] = [None]  # the last step's infos (a dict of per-key arrays)

        def infos_of() -> List[dict]:
            if wrapped:
                return compat.vector_infos_to_list(step_info[0], self.env.num_envs)
            return [{} for _ in range(n)]

        def step(v: int, actions: np.ndarray):
            results = self._lean_env_call(env.step, actions)
            if results is ENV_STEP_FAILURE:
                return ENV_STEP_FAILURE
            obs, rew, term, trunc, step_info[0] = results
            fragment.store_step(v, self._observations.convert(obs), rew, term, trunc)
            return infos_of

        return step

    # -------------------------------------------------------------------- metrics

    def _on_episode_end(self, i: int, episode: SingleAgentEpisode, end: EpisodeEnd) -> None:
        """Env `i`'s episode ended with `episode`: its totals for the metrics, and
        `on_episode_end`."""
        self._lean_episode_stats.append(end)
        make_callback(
            "on_episode_end",
            callbacks_objects=self._callbacks,
            callbacks_functions=self.config.callbacks_on_episode_end,
            kwargs=dict(episode=episode, prev_episode_chunks=end.previous, env_runner=self,
                        metrics_logger=self.metrics, env=self.env.unwrapped,
                        rl_module=self.module, env_index=i),
        )

    @override(SingleAgentEnvRunner)
    def get_metrics(self):
        for end in self._lean_episode_stats:
            self._log_episode_metrics(end.length, end.ret, end.duration_s)
        self._lean_episode_stats.clear()
        return super().get_metrics()

    def held_steps(self) -> int:
        """Steps held for the running episodes between sample() calls (their lookback)."""
        return 0 if self._lean is None else self._lean["episodes"].held_steps()


class PlainLeanEnvRunner(LeanEnvRunner):
    """The lean runner with the module's own forward pass and `Categorical` per step
    (`fast_policy = False`): what `benchmarks/throughput.py`'s `a2c_plain_act` runs."""

    fast_policy = False


class StockStepLeanEnvRunner(LeanEnvRunner):
    """The lean runner stepping a `SyncVectorEnv` through its own `step`
    (`direct_vector_step = False`): what `benchmarks/throughput.py`'s `a2c_stock_step`
    runs, and the reference of tests/test_env_runner.py's direct-step tests."""

    direct_vector_step = False
