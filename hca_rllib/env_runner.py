"""A lean EnvRunner for the single-agent, discrete-action case (``sampler="lean"``).

Installed through RLlib's ``env_runner_cls`` hook by :class:`hca_rllib.HCAConfig` when
the sampler resolves to "lean" (``sampler="lean"``, or ``"auto"``, the default, for a
config that uses nothing off the allow-list: `lean_sampler_blocker`). It subclasses RLlib's ``SingleAgentEnvRunner`` and replaces only the
timestep loop of ``_sample`` (``sample()``'s framing, weight sync, state, checkpoints,
``make_env``/``make_module`` and fault handling are RLlib's):

* One fused path per vector step: observations (or the stacked frames) to a tensor, the
  policy logits under ``torch.inference_mode``, an action sampled from them as
  ``torch.distributions.Categorical`` does (what RLlib's ``GetActions`` does, the same
  random stream), ``env.step``. No connector pipelines, no per-step dicts, episode
  objects or metrics. For the stock module the logits and the draw come from
  :mod:`hca_rllib.fast_policy` (flat torch calls, each conv layer's kernel picked by
  its shape, Categorical's draw in fewer ops; a finite-logits check per fragment); other
  modules get their own ``_forward_exploration`` and ``Categorical``
  (``PlainLeanEnvRunner`` forces that path).
* The sub-envs of a gymnasium ``SyncVectorEnv`` (NEXT_STEP autoreset, Box observations:
  what RLlib's ``make_env`` builds for a registered env) are stepped by the runner itself
  into the fragment buffers: the same sub-env calls in the same order as the vector
  env's ``step``, without its observation stacking, deep copy and per-step info arrays
  (``_direct_step``; the same episodes, tests/test_env_runner.py).
* Preallocated numpy buffers per fragment; the ``SingleAgentEpisode`` chunks are built
  once per ``sample()`` from them, with what RLlib's path stores: observations including
  the last one, actions, rewards, terminated/truncated, the extra model outputs
  ``action_dist_inputs``, ``action_logp`` and ``weights_seq_no``, the same episode ids
  across fragments and the same lookback buffer (``episode_lookback_horizon`` steps:
  the frames the learner's frame stacking reaches back to). Infos are kept at the steps
  where an episode ends (the full-game score lives there) and are empty elsewhere.
  Episodes are always numpy (finalized) ones: ``episodes_to_numpy=False`` is not honoured.
* Frame stacking (RLlib's ``FrameStackingEnvToModule``, which HCAConfig installs for
  Atari) as one rolling ``uint8`` stack per env: the last ``num_frames`` frames of the
  episode, zeros before its first frame, as RLlib's connector builds them.
* Episode metrics aggregated per ``sample()`` and logged under RLlib's keys
  (``episode_return_mean``, ``episode_len_mean``, ...; ``GameScoreCallback``'s
  ``game_return_mean`` through ``on_episode_end``).
* Running episodes keep only what the next fragment needs (the lookback steps), not
  every earlier chunk: RLlib's runner keeps all chunks of a running episode for its
  metrics, about 1.5 GiB per runner for an Atari game at the 27k-step cap.

Callbacks: ``on_episode_end`` is called once per completed episode, at the end of the
``sample()`` in which it ended, with the episode's last chunk and, as
``prev_episode_chunks``, one :class:`PreviousChunks` summary standing for all its earlier
chunks (return, length, duration; no data). ``on_sample_end`` and
``on_environment_created`` are called as RLlib does. Per-step callbacks
(``on_episode_created``, ``on_episode_start``, ``on_episode_step``) are not: a config
that defines them takes RLlib's runner with ``sampler="auto"`` (the default) and is
refused with ``sampler="lean"`` (`lean_sampler_blocker`), as are user connector pieces.
* Observations of a non-Box space (Discrete, MultiDiscrete, Dict, Tuple) are flattened
  (one-hot for the discrete parts) as RLlib's ``FlattenObservations``, which HCAConfig
  adds to the pipeline for them, does: once per vector step, the same function.

What goes to RLlib's own loop instead (the same runner object, after a reset of the
envs): ``sample(num_episodes=...)`` and ``batch_mode="complete_episodes"``, and
``random_actions=True``. ``explore=False`` stays lean (greedy action, log-prob 0 as
RLlib's deterministic distribution gives).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from gymnasium.spaces import Box
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import DictInfoToList

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.env.env_errors import StepFailedRecreateEnvError
from ray.rllib.env.env_runner import ENV_STEP_FAILURE, NUM_ENV_STEP_FAILURES_LIFETIME
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.numpy import flatten_inputs_to_1d_tensor
from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space
from ray.util.debug import log_once

from ray.rllib.core.rl_module.torch import TorchRLModule

from hca_rllib import compat
from hca_rllib.envs.groups import EnvGroups, split_vector_env
from hca_rllib.fast_policy import ConvBackends, policy_plan, sample_actions

logger = logging.getLogger(__name__)

SAMPLERS = ("lean", "rllib")
# `sampler` and `learner_path`: the lean path where the config uses only what it
# supports, RLlib's otherwise (`HCAConfig.resolved_sampler`, `resolved_learner_path`).
AUTO = "auto"
# The default of `HCAConfig.sampler` (the lean runner's speed-up:
# benchmarks/results/throughput_lean/summary.md).
DEFAULT_SAMPLER = AUTO
# The default of `HCAConfig.sampler_overlap` (benchmarks/results/throughput_core/summary.md).
DEFAULT_SAMPLER_OVERLAP = False
# Groups of envs `sampler_overlap` steps in turn.
OVERLAP_GROUPS = 2
# The dtype of the rewards `SyncVectorEnv.step` returns (float64 whatever the sub-envs
# give): the lean runner's own stepping of its sub-envs stores them so.
SYNC_VECTOR_REWARD_DTYPE = np.float64

# Connector pieces the lean loop does itself (RLlib's defaults, and frame stacking).
_ENV_TO_MODULE_OK = (
    "AddObservationsFromEpisodesToBatch", "AddTimeDimToBatchAndZeroPad",
    "AddStatesFromEpisodesToBatch", "AgentToModuleMapping", "BatchIndividualItems",
    "NumpyToTensor", "FrameStacking",  # RLlib's FrameStackingEnvToModule
    # RLlib's FlattenObservations as HCAConfig adds it for non-Box observation spaces
    # (one-hot Discrete and MultiDiscrete, flattened Dict and Tuple): the lean loop
    # flattens each vector step's observations at once, with the same function.
    "FlattenObservations",
)
_MODULE_TO_ENV_OK = (
    "GetActions", "TensorToNumpy", "UnBatchToIndividualItems", "ModuleToAgentUnmapping",
    "RemoveSingleTsTimeRankFromBatch", "NormalizeAndClipActions", "ListifyDataForVectorEnv",
)
# Per-step episode callbacks the lean loop does not make.
PER_STEP_CALLBACKS = ("on_episode_created", "on_episode_start", "on_episode_step")


def unsupported_callbacks(config) -> Optional[str]:
    """What in `config`'s callbacks needs RLlib's loop (a per-step episode callback), as
    "<what> is defined (the lean sampler makes no per-step episode callbacks)", or None."""
    from ray.rllib.utils import force_list

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
    checked by the runner itself (`LeanEnvRunner`)."""
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


class PreviousChunks:
    """What the lean runner keeps of a running episode's earlier chunks: their sums.

    Passed to ``on_episode_end`` as the one item of ``prev_episode_chunks``; it answers
    what callbacks read of those chunks (``get_return()``, ``len()``,
    ``get_duration_s()``, ``id_``, ``t_started``, ``t``) and holds no data."""

    __slots__ = ("id_", "t_started", "t", "_return", "_duration_s")

    def __init__(self, id_: str, t: int, ret: float, duration_s: float):
        self.id_, self.t_started, self.t = id_, 0, int(t)
        self._return, self._duration_s = float(ret), float(duration_s)

    def get_return(self) -> float:
        return self._return

    def get_duration_s(self) -> float:
        return self._duration_s

    def __len__(self) -> int:
        return self.t


class LeanEnvRunner(SingleAgentEnvRunner):
    """RLlib's SingleAgentEnvRunner with a fused, buffered timestep loop (module docs)."""

    # The inference pass of `hca_rllib.fast_policy` (flat torch calls, conv kernel by
    # shape, fewer-op action draw); False: the module's `_forward_exploration` and
    # `torch.distributions.Categorical` (the comparison `benchmarks/throughput.py` runs).
    fast_policy = True
    # Step the sub-envs of a gymnasium `SyncVectorEnv` (NEXT_STEP autoreset, Box
    # observations) into the fragment buffers (`_direct_step`); False: its own `step`.
    direct_vector_step = True

    @override(SingleAgentEnvRunner)
    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        reason = lean_sampler_blocker(self.config) or self._unsupported_connectors()
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
        self._num_frames = 1
        # RLlib's FlattenObservations in the pipeline: (the struct of the env's
        # observation space, the flattened space episodes are stored in), else None.
        self._flatten = None
        for piece in self._env_to_module.connectors:
            if type(piece).__name__ == "FrameStacking":
                self._num_frames = int(piece.num_frames)
            if type(piece).__name__ == "FlattenObservations":
                self._flatten = (get_base_struct_from_space(piece.input_observation_space),
                                 piece.observation_space)
        self._lookback = int(self.config.episode_lookback_horizon)
        # The lean loop's state across sample() calls; None: the envs need a reset.
        self._lean: Optional[Dict[str, Any]] = None
        self._buffers: Optional[Dict[str, np.ndarray]] = None
        # (length, return, duration) of the episodes completed since get_metrics().
        self._lean_episode_stats: List[tuple] = []
        # The conv kernel chosen per layer and input shape (`fast_policy.ConvBackends`).
        self._conv_backends = ConvBackends()
        self._plan_cache = None  # (module, (explore, shape, dtype), plan)

    def _unsupported_connectors(self) -> Optional[str]:
        for pipeline, allowed, what in ((self._env_to_module, _ENV_TO_MODULE_OK, "env-to-module"),
                                        (self._module_to_env, _MODULE_TO_ENV_OK, "module-to-env")):
            for piece in pipeline.connectors:
                if type(piece).__name__ not in allowed:
                    return (f"the {what} connector piece {type(piece).__name__} is in the "
                            f"pipeline (the lean sampler does frame stacking and flattening only)")
        import gymnasium as gym

        space = self.env.single_action_space if self.env is not None else None
        if space is not None and not isinstance(space, gym.spaces.Discrete):
            return f"the action space is {space} (the lean sampler needs a Discrete one)"
        return None

    def _lean_obs(self, obs) -> np.ndarray:
        """A vector step's observations as the episodes store them: flattened (one-hot
        for Discrete parts) as RLlib's FlattenObservations does, when it is in the
        pipeline; else as an array."""
        if self._flatten is None:
            return np.asarray(obs)
        return np.asarray(flatten_inputs_to_1d_tensor(obs, self._flatten[0], batch_axis=True),
                          dtype=np.float32)

    # ------------------------------------------------------------------ env access

    @override(SingleAgentEnvRunner)
    def make_env(self) -> None:
        """RLlib's `make_env`; with `sampler_overlap`, the vector env split into
        `EnvGroups` (`on_environment_created` sees the split env)."""
        if not getattr(self.config, "sampler_overlap", False):
            return super().make_env()
        callbacks, functions = self._callbacks, self.config.callbacks_on_environment_created
        self._callbacks = []
        self.config.callbacks_on_environment_created = None
        try:
            super().make_env()
        finally:
            self._callbacks = callbacks
            self.config.callbacks_on_environment_created = functions
        self.env = DictInfoToList(split_vector_env(self._vector_env(), OVERLAP_GROUPS))
        make_callback(
            "on_environment_created",
            callbacks_objects=self._callbacks,
            callbacks_functions=self.config.callbacks_on_environment_created,
            kwargs=dict(env_runner=self, metrics_logger=self.metrics, env=self.env.unwrapped,
                        env_context=self.config.env_config),
        )

    def _vector_env(self):
        """The vector env under RLlib's DictInfoToList (infos stay dicts of arrays)."""
        env = self.env
        return env.env if isinstance(env, DictInfoToList) else env

    def _lean_env_step(self, actions):
        """`env.step` with RLlib's failure handling (`_try_env_step`), no per-step metrics."""
        return self._lean_env_call(self._vector_env().step, actions)

    def _lean_env_call(self, method, *args):
        """`method(*args)` of the env (a step, or a group's send/recv) with RLlib's failure
        handling: ENV_STEP_FAILURE after re-creating the envs, or RuntimeError."""
        try:
            return method(*args)
        except Exception as e:
            env = self._vector_env()
            if isinstance(env, EnvGroups):
                env.drain()  # the other groups' steps in flight
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
        obs = self._lean_obs(obs)
        n = self.num_envs
        now = time.perf_counter()
        state: Dict[str, Any] = {
            "obs": obs.copy(),
            "needs_reset": np.zeros(n, dtype=bool),  # this env's next step is its autoreset
            "ids": [uuid.uuid4().hex for _ in range(n)],
            "t": np.zeros(n, dtype=np.int64),  # steps since the episode's reset
            # The last `lookback` steps of each running episode (what the next chunk's
            # lookback buffer holds): obs before the current one, actions, rewards, extras.
            "carry": [None] * n,
            # Sums over the running episode's earlier chunks (for metrics and callbacks).
            "ret": np.zeros(n, dtype=np.float64),
            "duration": np.zeros(n, dtype=np.float64),
            "start": np.full(n, now),
        }
        if self._num_frames > 1:
            stack = np.zeros(obs.shape[:-1] + (obs.shape[-1] * self._num_frames,), obs.dtype)
            stack[..., -obs.shape[-1]:] = obs
            state["stack"] = stack
        self._lean = state

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
                or (self._lean.get("own_step") and not self._direct_ok(self._vector_env()))):
            # (The last: the runner stepped the sub-envs itself, and the vector env's own
            # `step` would go on from its stale state.)
            self._lean_reset()
        while True:
            episodes = self._lean_sample(int(num_timesteps), explore)
            if episodes is not None:
                return episodes
            self._lean_reset()  # an env step failed and the envs were re-created

    def _fragment_buffers(self, rows: int, obs: np.ndarray) -> Dict[str, np.ndarray]:
        b = self._buffers
        n = self.num_envs
        if b is None or b["act"].shape[0] < rows or b["obs"].dtype != obs.dtype:
            num_actions = int(self.env.single_action_space.n)
            b = self._buffers = {
                "obs": np.zeros((rows + 1,) + obs.shape, obs.dtype),
                # int32 and float32, as RLlib's TensorToNumpy reduces them.
                "act": np.zeros((rows, n), np.int32),
                "logp": np.zeros((rows, n), np.float32),
                "logits": np.zeros((rows, n, num_actions), np.float32),
                "rew": None,  # allocated at the first step, with the env's reward dtype
                "term": np.zeros((rows, n), bool),
                "trunc": np.zeros((rows, n), bool),
            }
        return b

    def _lean_sample(self, num_timesteps: int, explore: bool) -> Optional[List[SingleAgentEpisode]]:
        s = self._lean
        n = self.num_envs
        # Every other vector step of an env can be its autoreset: at most this many rows.
        rows = 2 * (-(-num_timesteps // n)) + 2
        b = self._fragment_buffers(rows, s["obs"])
        module = self.module
        module.eval()
        # What one fragment's steps share (`_lean_act`, `_lean_record`).
        f = {
            "b": b, "explore": explore, "stack": s.get("stack"), "frame": s["obs"].shape[-1],
            "forward": module._forward_exploration if explore else module._forward_inference,
            "logits": self._policy_plan(module, explore, s),
            "needs_reset": s["needs_reset"].copy(),
            # Row of the first real step of each env's current chunk in this fragment.
            "seg_start": np.where(s["needs_reset"], 1, 0),
            "done_episodes": [],
        }
        b["obs"][0] = s["obs"]
        needs_reset = f["needs_reset"]
        env = self._vector_env()
        ts = 0
        v = 0
        if isinstance(env, EnvGroups):
            # Double buffering: while one group's envs step, the policy runs on the next
            # group's fresh observations. Whether row v + 1 is sampled depends only on
            # the autoresets at row v (known before row v is stepped), so every group
            # stops at the same row as the loop below would.
            for g, sl in enumerate(env.slices):
                if self._lean_env_call(env.send, g, self._lean_act(f, 0, sl)) is ENV_STEP_FAILURE:
                    return None
            while True:
                ts += n - int(needs_reset.sum())
                more = ts < num_timesteps
                for g, sl in enumerate(env.slices):
                    results = self._lean_env_call(env.recv, g)
                    if results is ENV_STEP_FAILURE:
                        return None
                    self._lean_record(f, v, sl, results, env.sizes[g])
                    if more and self._lean_env_call(
                            env.send, g, self._lean_act(f, v + 1, sl)) is ENV_STEP_FAILURE:
                        return None
                v += 1
                if not more:
                    break
        elif self._direct_ok(env):
            # The sub-envs stepped by the runner, straight into the buffers (`_direct_step`).
            s["own_step"] = True
            everything = slice(0, n)
            if b["rew"] is None:
                b["rew"] = np.zeros(b["act"].shape, SYNC_VECTOR_REWARD_DTYPE)
            env_infos: List[Any] = [None] * n  # this step's per-env info dicts
            infos_of = lambda: self._direct_infos(env, env_infos)  # noqa: E731
            while ts < num_timesteps:
                ts += n - int(needs_reset.sum())
                actions = self._lean_act(f, v, everything)
                # `needs_reset` (the envs whose episode ended at the last step) is the
                # vector env's autoreset state; `_lean_after_step` updates it.
                if self._lean_env_call(self._direct_step, env.envs, needs_reset, b, v, actions,
                                       env_infos) is ENV_STEP_FAILURE:
                    return None
                self._lean_after_step(f, v, everything, infos_of)
                v += 1
        else:
            everything = slice(0, n)
            while ts < num_timesteps:
                ts += n - int(needs_reset.sum())
                results = self._lean_env_step(self._lean_act(f, v, everything))
                if results is ENV_STEP_FAILURE:
                    return None
                self._lean_record(f, v, everything, results, None)
                v += 1
        s["needs_reset"] = needs_reset
        if f["logits"] is not None and explore and not np.isfinite(b["logits"][:v]).all():
            # What torch.multinomial (Categorical.sample) refuses at the step itself.
            raise ValueError("sampler='lean': the policy's logits are not all finite "
                             "(probability tensor contains either inf, nan or element < 0)")
        seg_start = f["seg_start"]
        running: List[SingleAgentEpisode] = []
        for i in range(n):
            # An env that ended at the last row starts its next episode next fragment;
            # one whose chunk has no step yet (autoreset at the last row) returns nothing.
            if not needs_reset[i] and seg_start[i] <= v - 1:
                running.append(self._chunk(i, int(seg_start[i]), v - 1, None))
        s["obs"] = b["obs"][v].copy()
        done_episodes = f["done_episodes"]
        self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=ts)
        self._increase_sampled_metrics(ts, len(done_episodes))
        return done_episodes + running

    def _policy_plan(self, module, explore: bool, s: Dict[str, Any]):
        """`fast_policy.policy_plan` for this fragment, or None: the module's own forward
        pass and `Categorical` (`fast_policy = False`, or a module whose forward passes
        are not the stock ones)."""
        if not self.fast_policy:
            return None
        name = "_forward_exploration" if explore else "_forward_inference"
        if getattr(type(module), name, None) is not getattr(TorchRLModule, name):
            return None
        example = s["stack"] if s.get("stack") is not None else s["obs"]
        env = self._vector_env()
        if isinstance(env, EnvGroups):  # the policy runs on one group's envs at a time
            example = example[env.slices[0]]
        # Built once per module and batch shape, not per fragment: the plan holds the
        # module's layers (weight syncs copy into them in place), and building it runs a
        # CNN's conv layers once on the example batch (on Pong's 16 x 5 fragments, a
        # fifth more sampling forward work when it was rebuilt every sample()).
        key = (explore, example.shape, example.dtype)
        cached = self._plan_cache
        if cached is not None and cached[0] is module and cached[1] == key:
            return cached[2]
        plan = policy_plan(module, self._conv_backends, torch.from_numpy(np.ascontiguousarray(example)))
        self._plan_cache = (module, key, plan)
        return plan

    def _lean_act(self, f: Dict[str, Any], v: int, sl: slice) -> np.ndarray:
        """The actions of envs `sl` at row `v` from the policy (logits, log-probs stored)."""
        b, stack = f["b"], f["stack"]
        module_obs = stack[sl] if stack is not None else b["obs"][v, sl]
        plan = f["logits"]
        with torch.inference_mode():
            if plan is not None:
                logits = plan(torch.from_numpy(module_obs))
            else:
                logits = f["forward"]({Columns.OBS: torch.from_numpy(module_obs)})[Columns.ACTION_DIST_INPUTS]
            if not f["explore"]:
                actions = torch.argmax(logits, dim=-1)
                logp = torch.zeros(actions.shape, dtype=logits.dtype)
            elif plan is not None:
                actions, logp = sample_actions(logits)
            else:
                dist = torch.distributions.Categorical(logits=logits, validate_args=False)
                actions = dist.sample()
                logp = dist.log_prob(actions)
        b["act"][v, sl] = actions.numpy()
        b["logp"][v, sl] = logp.numpy()
        b["logits"][v, sl] = logits.numpy()
        return b["act"][v, sl]

    def _lean_record(self, f: Dict[str, Any], v: int, sl: slice, results, group_size) -> None:
        """Store the step of envs `sl` at row `v`: its results, the episodes that ended,
        the autoresets, the frame stack. `group_size`: `results` are a group's (its own
        info), None: the whole vector env's."""
        b = f["b"]
        obs, rew, term, trunc, info = results
        if b["rew"] is None:
            b["rew"] = np.zeros(b["act"].shape, np.asarray(rew).dtype)
        b["obs"][v + 1, sl] = obs if self._flatten is None else self._lean_obs(obs)
        b["rew"][v, sl] = rew
        b["term"][v, sl] = term
        b["trunc"][v, sl] = trunc

        def infos_of() -> List[dict]:
            if group_size is not None:
                return compat.vector_infos_to_list(info, group_size)
            if isinstance(self.env, DictInfoToList):
                return compat.vector_infos_to_list(info, self.env.num_envs)
            return [{} for _ in range(self.num_envs)]

        self._lean_after_step(f, v, sl, infos_of)

    def _lean_after_step(self, f: Dict[str, Any], v: int, sl: slice, infos_of) -> None:
        """After envs `sl`'s step at row `v` is in the buffers: the episodes that ended,
        the autoresets, the frame stack. `infos_of()`: the step's per-env info dicts (asked
        for only when an episode ended)."""
        b, stack, frame = f["b"], f["stack"], f["frame"]
        needs_reset, seg_start = f["needs_reset"][sl], f["seg_start"][sl]
        done = (b["term"][v, sl] | b["trunc"][v, sl]) & ~needs_reset
        if done.any():
            infos = infos_of()
            for j in np.flatnonzero(done).tolist():
                f["done_episodes"].append(self._chunk(sl.start + j, int(seg_start[j]), v, infos[j]))
        if needs_reset.any():
            # These envs' step was their autoreset: a new episode from obs_buf[v + 1].
            for j in np.flatnonzero(needs_reset).tolist():
                self._start_episode(sl.start + j)
            seg_start[needs_reset] = v + 1
        if stack is not None:
            st = stack[sl]
            st[..., :-frame] = st[..., frame:]
            st[..., -frame:] = b["obs"][v + 1, sl]
            if needs_reset.any():  # a new episode: no frames before its first one
                st[needs_reset, ..., :-frame] = 0
        needs_reset[:] = done

    # ------------------------------------------------------- own SyncVectorEnv step
    #
    # gymnasium's `SyncVectorEnv.step` (1.x, NEXT_STEP autoreset) loops over its envs
    # (an env that ended at the last step gets `reset()`, reward 0, not terminated or
    # truncated; the others `step(action)`), then stacks the observations into its own
    # array (`concatenate`, singledispatch), deep-copies that array, copies rewards,
    # terminations and truncations, and builds a dict of per-key arrays from the infos
    # that RLlib's `DictInfoToList` turns back into per-env dicts. The lean loop copies
    # all of that into its fragment buffers once more. Instead, the runner runs that loop
    # itself over the vector env's public `envs`, with the same calls in the same order
    # and its own autoreset flags (the fragment's `needs_reset`), and writes each env's
    # results straight into the buffer rows; the infos stay the envs' own dicts and are
    # converted as the stock step and `DictInfoToList` would (`hca_rllib.compat`) only
    # at a step where an episode ended, the one place the lean loop keeps them. The
    # vector env's own state is not kept up to date, so anything that steps it
    # afterwards resets it first: RLlib's loop (`_sample` resets after lean sampling)
    # and the lean loop through the env's own `step` (`_sample` resets when the lean
    # state was sampled by this step). Only for `type(env) is SyncVectorEnv` (no
    # subclass, no vector wrapper under DictInfoToList) with NEXT_STEP autoreset and a
    # Box observation space; anything else, or `direct_vector_step = False`, steps
    # through the env's own `step`. tests/test_env_runner.py checks the episodes (infos
    # included) are the same as through `SyncVectorEnv.step`;
    # benchmarks/results/sync_step has the measured gain.

    def _direct_ok(self, env) -> bool:
        return (self.direct_vector_step and type(env) is SyncVectorEnv
                and env.autoreset_mode == AutoresetMode.NEXT_STEP
                and type(env.single_observation_space) is Box)

    @staticmethod
    def _direct_step(envs, autoreset: np.ndarray, b: Dict[str, np.ndarray], v: int,
                     actions: np.ndarray, env_infos: List[Any]) -> None:
        """What `SyncVectorEnv.step(actions)` (NEXT_STEP) does to its sub-`envs`, with
        `autoreset` its autoreset flags, the results written into row `v` of the buffers
        (observations into row `v + 1`) and the infos into `env_infos`."""
        if len(actions) != len(envs):  # SyncVectorEnv.step's zip(..., strict=True)
            raise ValueError(f"{len(actions)} actions for {len(envs)} envs")
        obs, rew, term, trunc = b["obs"][v + 1], b["rew"][v], b["term"][v], b["trunc"][v]
        for i, sub in enumerate(envs):
            if autoreset[i]:
                obs[i], env_infos[i] = sub.reset()
                rew[i] = 0.0
                term[i] = False
                trunc[i] = False
            else:
                obs[i], rew[i], term[i], trunc[i], env_infos[i] = sub.step(actions[i])

    def _direct_infos(self, env, env_infos: List[Any]) -> List[dict]:
        """The per-env infos of a direct step as the stock step and RLlib's
        DictInfoToList give them (the same conversions, `hca_rllib.compat`)."""
        if not isinstance(self.env, DictInfoToList):
            return [{} for _ in range(self.num_envs)]
        infos: Dict[str, Any] = {}
        for i, info in enumerate(env_infos):
            infos = compat.add_vector_info(env, infos, info, i)
        return compat.vector_infos_to_list(infos, env.num_envs)

    def _start_episode(self, i: int) -> None:
        s = self._lean
        s["ids"][i] = uuid.uuid4().hex
        s["t"][i] = 0
        s["carry"][i] = None
        s["ret"][i] = 0.0
        s["start"][i] = time.perf_counter()

    def _chunk(self, i: int, first: int, last: int, end_info: Optional[dict]) -> SingleAgentEpisode:
        """Env `i`'s episode chunk of rows `first..last` (real steps) of this fragment,
        with the carried lookback in front. `end_info`: the episode ended at `last` with
        this info (then metrics and `on_episode_end`); None: it goes on (carry updated)."""
        s, b = self._lean, self._buffers
        k = last - first + 1
        obs = b["obs"][first:last + 2, i]
        extras = {
            Columns.ACTION_DIST_INPUTS: b["logits"][first:last + 1, i],
            Columns.ACTION_LOGP: b["logp"][first:last + 1, i],
        }
        actions = b["act"][first:last + 1, i]
        rewards = b["rew"][first:last + 1, i]
        carry = s["carry"][i]
        if carry is not None:
            lb = len(carry["actions"])
            obs = np.concatenate([carry["obs"], obs])
            actions = np.concatenate([carry["actions"], actions])
            rewards = np.concatenate([carry["rewards"], rewards])
            extras = {key: np.concatenate([carry[key], value]) for key, value in extras.items()}
        else:
            lb = 0
            obs, actions, rewards = obs.copy(), actions.copy(), rewards.copy()
            extras = {key: value.copy() for key, value in extras.items()}
        extras[WEIGHTS_SEQ_NO] = np.full(len(actions), self._weights_seq_no, np.int64)
        if carry is not None:
            extras[WEIGHTS_SEQ_NO][:lb] = carry[WEIGHTS_SEQ_NO]
        t_started = int(s["t"][i])
        infos = [{} for _ in range(len(obs))]
        terminated = truncated = False
        if end_info is not None:
            infos[-1] = end_info
            terminated = bool(b["term"][last, i])
            truncated = bool(b["trunc"][last, i])
        episode = SingleAgentEpisode(
            id_=s["ids"][i], observations=obs,
            observation_space=(self.env.single_observation_space if self._flatten is None
                               else self._flatten[1]),
            infos=infos, actions=actions,
            action_space=self.env.single_action_space, rewards=rewards,
            terminated=terminated, truncated=truncated, extra_model_outputs=extras,
            t_started=t_started, len_lookback_buffer=lb)
        chunk_return = float(rewards[lb:].sum())
        if end_info is not None:
            self._end_episode(i, episode, chunk_return)
        else:
            m = min(self._lookback, len(actions))
            s["carry"][i] = {
                "obs": obs[len(obs) - 1 - m:len(obs) - 1].copy(),
                "actions": actions[len(actions) - m:].copy(),
                "rewards": rewards[len(rewards) - m:].copy(),
                **{key: value[len(value) - m:].copy() for key, value in extras.items()},
            }
            s["t"][i] = t_started + k
            s["ret"][i] += chunk_return
        return episode

    def _end_episode(self, i: int, episode: SingleAgentEpisode, chunk_return: float) -> None:
        s = self._lean
        ret = float(s["ret"][i]) + chunk_return
        duration = time.perf_counter() - float(s["start"][i])
        self._lean_episode_stats.append((int(episode.t), ret, duration))
        previous = ([PreviousChunks(episode.id_, episode.t_started, float(s["ret"][i]), 0.0)]
                    if episode.t_started > 0 else [])
        make_callback(
            "on_episode_end",
            callbacks_objects=self._callbacks,
            callbacks_functions=self.config.callbacks_on_episode_end,
            kwargs=dict(episode=episode, prev_episode_chunks=previous, env_runner=self,
                        metrics_logger=self.metrics, env=self.env.unwrapped,
                        rl_module=self.module, env_index=i),
        )
        # The env's next step is its autoreset; `_start_episode` then opens the next one.
        s["carry"][i] = None

    @override(SingleAgentEnvRunner)
    def get_metrics(self):
        for length, ret, duration in self._lean_episode_stats:
            self._log_episode_metrics(length, ret, duration)
        self._lean_episode_stats.clear()
        return super().get_metrics()


class PlainLeanEnvRunner(LeanEnvRunner):
    """The lean runner with the module's own forward pass and `Categorical` per step
    (`fast_policy = False`): what `benchmarks/throughput.py`'s `a2c_plain_act` runs."""

    fast_policy = False


class StockStepLeanEnvRunner(LeanEnvRunner):
    """The lean runner stepping a `SyncVectorEnv` through its own `step`
    (`direct_vector_step = False`): what `benchmarks/throughput.py`'s `a2c_stock_step`
    runs, and the reference of tests/test_env_runner.py's direct-step tests."""

    direct_vector_step = False
