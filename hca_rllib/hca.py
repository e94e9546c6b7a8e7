"""HCA and A2C: configs, validation and the training step (one full-batch gradient
step per iteration, as A2C does). A2C is the `credit="a2c"` member of the family."""

from __future__ import annotations

import copy
import time
from typing import Any, Dict

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.connectors.learner import LearnerConnectorPipeline
from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.utils import force_list
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)
from ray.util.debug import log_once

from hca_rllib import compat
from hca_rllib.callbacks import STATS_CLS_LOOKUP, GameScoreCallback
from hca_rllib.connectors import LeanEpisodesToBatch, flatten_observations_if_needed, user_learner_pieces
from hca_rllib.credit import HINDSIGHT_CREDIT_MODES
from hca_rllib.envs.resolver import EnvResolutionError, env_family, resolve_env
from hca_rllib.fields import (HCA_TRAINING_DEFAULTS, config_errors, drop_removed_fields, merged_hindsight,
                              refuse_removed, upgrade_state)
from hca_rllib.module import hindsight_spec
from hca_rllib.paths import default_paths, install_paths, resolved_learner_path, resolved_sampler


class HCAConfig(AlgorithmConfig):
    """Hindsight credit assignment on RLlib's new API stack.

    .. code-block:: python

        from hca_rllib import HCAConfig
        config = HCAConfig().environment("CartPole-v1").training(credit="c2a2c")
        algo = config.build_algo()
        algo.train()

    The fields it adds to RLlib's: `training(...)` takes those of
    `hca_rllib.fields.HCA_TRAINING_DEFAULTS`, `env_runners(sampler=)`,
    `learners(learner_path=)` and `environment(frame_stack=)`; docs/guide.md, "Config
    reference", says what each buys.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or HCA)
        # A2C's usual settings (Stable-Baselines3 on vector observations).
        self.lr = 7e-4
        self.gamma = 0.99
        self.lambda_ = 1.0
        self.grad_clip = 0.5
        self.grad_clip_by = "global_norm"
        self.num_envs_per_env_runner = 8
        self.train_batch_size_per_learner = 512
        # Fragment length follows from the batch: 512 / (8 envs x runners).
        self.rollout_fragment_length = "auto"
        self.num_env_runners = 0
        for key, value in HCA_TRAINING_DEFAULTS.items():
            setattr(self, key, copy.deepcopy(value))
        # Frames stacked by RLlib's frame-stacking connectors (episodes keep each frame
        # once); None: the environment family's default (4 for Atari, 1 otherwise).
        self.frame_stack = None
        # Logs the full-game, unclipped score (`env_runners/game_return_mean`) and, through
        # the "window_mean" stats it adds to RLlib's lookup, the means over the last 100
        # games and episodes across iterations (`.../game_return_window_mean`,
        # `.../episode_return_window_mean`; callbacks.WindowMeanStats).
        self.callbacks_class = [GameScoreCallback]
        self.stats_cls_lookup = dict(STATS_CLS_LOOKUP)
        # The EnvRunner's loop and the learner's path ("auto", "lean" or "rllib":
        # `hca_rllib.paths`), and the lines "auto" has logged for this config (its copies
        # carry them, so a resolution is logged once, not per copy).
        self.sampler, self.learner_path = default_paths()
        self._auto_paths_logged = []
        # An iteration ends only once it has sampled: while every remote EnvRunner is
        # lost (its node gone, Ray restarting it elsewhere), RLlib's iteration loop keeps
        # restoring EnvRunners and retrying the step instead of returning one empty
        # iteration after another (what RLlib's default, 0, does: results.jsonl lines with
        # no env steps). A normal step samples a whole batch, so this changes nothing else.
        self.min_sample_timesteps_per_iteration = 1

    # --- setters ------------------------------------------------------------------------

    @override(AlgorithmConfig)
    def training(self, *, lambda_=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's training settings plus those of `fields.HCA_TRAINING_DEFAULTS`; `hindsight`
        (a dict of `HindsightSpec`'s fields, or a `HindsightSpec`) sets the options it
        names and keeps the others."""
        refuse_removed(kwargs)
        ours = {k: kwargs.pop(k) for k in list(kwargs) if k in HCA_TRAINING_DEFAULTS}
        super().training(**kwargs)
        if lambda_ is not NotProvided:
            self.lambda_ = lambda_
        for key, value in ours.items():
            if value is NotProvided:
                continue
            setattr(self, key, merged_hindsight(self.hindsight, value) if key == "hindsight" else value)
        return self

    @override(AlgorithmConfig)
    def update_from_dict(self, config_dict: Dict[str, Any]) -> "HCAConfig":
        """Like RLlib's, but a partial `hindsight` dict merges into the current one (Tune's
        `param_space` and `Algorithm(config={...})` come through here), and a removed
        field is refused in one line."""
        config_dict = dict(config_dict)
        refuse_removed(config_dict)
        for key in ("hindsight", "env_config", "model_config"):
            if key in config_dict and not isinstance(config_dict[key], dict):
                raise ValueError(f"{key} must be a dict, got {config_dict[key]!r}")
        hindsight = config_dict.pop("hindsight", None)
        model_config = config_dict.pop("model_config", None)  # a read-only property: RLlib's setter
        super().update_from_dict(config_dict)
        if hindsight is not None:
            self.training(hindsight=hindsight)
        if model_config is not None:
            self.rl_module(model_config=model_config)
        return self

    @classmethod
    @override(AlgorithmConfig)
    def from_state(cls, state: Dict[str, Any]) -> "HCAConfig":
        """RLlib's, for the config state of this version's checkpoints or of 0.1.0's
        (`fields.upgrade_state`: a removed field loads where it holds its default)."""
        return super().from_state(upgrade_state(state))

    @override(AlgorithmConfig)
    def reporting(self, *, custom_stats_cls_lookup=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's reporting settings; a `custom_stats_cls_lookup` is added to this
        project's (RLlib's own plus "window_mean"), so the last-100 windows stay."""
        if custom_stats_cls_lookup is not NotProvided:
            custom_stats_cls_lookup = {**STATS_CLS_LOOKUP, **(custom_stats_cls_lookup or {})}
        super().reporting(custom_stats_cls_lookup=custom_stats_cls_lookup, **kwargs)
        return self

    @override(AlgorithmConfig)
    def learners(self, *, learner_path=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's Learner settings; `learner_path`: "auto" (the default), "lean" or
        "rllib" (`hca_rllib.paths`)."""
        super().learners(**kwargs)
        if learner_path is not NotProvided:
            self.learner_path = learner_path
        return self

    @override(AlgorithmConfig)
    def env_runners(self, *, sampler=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's EnvRunner settings; `sampler`: "auto" (the default), "lean" or "rllib"
        (`hca_rllib.paths`)."""
        refuse_removed(kwargs)
        super().env_runners(**kwargs)
        if sampler is not NotProvided:
            self.sampler = sampler
        return self

    @override(AlgorithmConfig)
    def environment(self, env=NotProvided, *, frame_stack=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's environment settings; `env` is any id `hca_rllib.envs.resolve_env`
        accepts (atari/Pong, minatar/Breakout, bsuite/umbrella_length-3, ...).
        `frame_stack`: frames to stack (None: the family default, 4 for Atari)."""
        super().environment(env, **kwargs)
        if frame_stack is not NotProvided:
            self.frame_stack = frame_stack
        return self

    @override(AlgorithmConfig)
    def callbacks(self, callbacks_class=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's callbacks; the game-score callback stays in front of the user's."""
        if callbacks_class is not NotProvided:
            user = [c for c in force_list(callbacks_class) if c is not GameScoreCallback]
            callbacks_class = [GameScoreCallback] + user
        super().callbacks(callbacks_class, **kwargs)
        return self

    # --- what the config resolves to ----------------------------------------------------

    @property
    def resolved_frame_stack(self) -> int:
        """Frames stacked for the RLModule: `frame_stack`, or the env family's default."""
        if self.frame_stack is not None:
            return int(self.frame_stack)
        return env_family(self.env).frame_stack

    @property
    def resolved_sampler(self) -> str:
        """The sampler this config runs ("lean" or "rllib"; `paths.resolved_sampler`)."""
        return resolved_sampler(self)

    @property
    def resolved_learner_path(self) -> str:
        """The learner path this config runs ("lean" or "rllib"; `paths.resolved_learner_path`)."""
        return resolved_learner_path(self)

    @property
    def uses_lean_learner(self) -> bool:
        """Whether the Learner takes the lean path (`resolved_learner_path` "lean")."""
        return self.resolved_learner_path == "lean"

    @property
    def uses_hindsight(self) -> bool:
        """Whether the classifier is evaluated and trained (always, unless A2C with
        `hindsight_loss_coeff=0`)."""
        return self.credit in HINDSIGHT_CREDIT_MODES or self.hindsight_loss_coeff > 0

    @override(AlgorithmConfig)
    def build_env_to_module_connector(self, env=None, spaces=None, device=None):
        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        if self.resolved_frame_stack > 1:
            pipeline.prepend(FrameStackingEnvToModule(num_frames=self.resolved_frame_stack))
        # Discrete, MultiDiscrete, Dict, Tuple observations: one-hot and flattened into
        # one vector by RLlib's FlattenObservations (as SB3 does), unless the user's
        # pieces already flatten them.
        flatten_observations_if_needed(pipeline, multi_agent=self.is_multi_agent)
        return pipeline

    @override(AlgorithmConfig)
    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        if self.uses_lean_learner:
            return LearnerConnectorPipeline(
                connectors=user_learner_pieces(self, input_observation_space, input_action_space) + [
                    LeanEpisodesToBatch(num_frames=self.resolved_frame_stack, history=self.history_window,
                                        device=device)],
                input_observation_space=input_observation_space,
                input_action_space=input_action_space,
            )
        pipeline = super().build_learner_connector(input_observation_space, input_action_space, device)
        if self.resolved_frame_stack > 1:
            pipeline.prepend(FrameStackingLearner(num_frames=self.resolved_frame_stack))
        return pipeline

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from hca_rllib.module import HCATorchRLModule

        return RLModuleSpec(module_class=HCATorchRLModule)

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        from hca_rllib.learner import HCATorchLearner

        return HCATorchLearner

    @property
    @override(AlgorithmConfig)
    def _model_config_auto_includes(self) -> Dict[str, Any]:
        return super()._model_config_auto_includes | copy.deepcopy(env_family(self.env).model_config) | {
            "hindsight": copy.deepcopy(self.hindsight),
            "uses_hindsight": self.uses_hindsight,
            # The reward outcome's remainder head, for the credit modes that use it.
            "uses_remainder_value": self.credit != "a2c",
        }

    # --- validation ---------------------------------------------------------------------

    @override(AlgorithmConfig)
    def validate(self) -> None:
        """Every field's check (`fields.CHECKS`, one line each), RLlib's own, the
        environment, then `sampler` and `learner_path` (`paths.install_paths`)."""
        drop_removed_fields(self)
        error = next(config_errors(self), None)
        if error:
            raise ValueError(error)
        super().validate()
        self._validate_env()
        install_paths(self)

    def _validate_env(self) -> None:
        """Check the environment before any worker starts (unknown id, missing extra,
        action space, network for its observations) and size the episode lookback that
        frame stacking needs."""
        if self.env is None:
            return  # RLlib allows configs without an env (e.g. offline, or set later)
        try:
            resolve_env(self.env, self.env_config, frame_stack=self.frame_stack,
                        model_config=self._model_config)
        except EnvResolutionError as error:
            raise ValueError(str(error).splitlines()[0]) from None
        # A stack at the start of a fragment reaches back frame_stack - 1 steps into the
        # previous fragment: keep them in the episode's lookback buffer.
        lookback = self.resolved_frame_stack - 1 + self.history_window
        if lookback > self.episode_lookback_horizon:
            self.episode_lookback_horizon = lookback

    @property
    def history_window(self) -> int:
        """Steps of the episode's earlier fragments each chunk carries for the credit: the
        reward outcome's window under `hindsight.across_fragments`, else 0."""
        spec = hindsight_spec(self.hindsight)
        return spec.window if self.uses_hindsight and spec.across_fragments else 0


class A2CConfig(HCAConfig):
    """Advantage actor-critic: the `credit="a2c"` case, classifier off by default."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or A2C)
        self.credit = "a2c"
        self.hindsight_loss_coeff = 0.0
        self.hindsight_epochs = 0


class HCA(Algorithm):
    """Sample from all EnvRunners, one full-batch gradient step, sync weights."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> HCAConfig:
        return HCAConfig()

    @override(Algorithm)
    def training_step(self) -> None:
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, env_runner_results = synchronous_parallel_sample(
                worker_set=self.env_runner_group,
                max_env_steps=self.config.total_train_batch_size,
                sample_timeout_s=self.config.sample_timeout_s,
                _uses_new_env_runners=True,
                _return_metrics=True,
            )
        if not episodes:
            self._refuse_if_env_runners_stay_lost()
            return
        self._all_env_runners_lost_since = None
        self.metrics.aggregate(env_runner_results, key=ENV_RUNNER_RESULTS)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            learner_results = self.learner_group.update(
                episodes=episodes,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
                    ),
                },
                # By default no `num_epochs`/`minibatch_size`: each learner takes its
                # whole shard as one batch, one gradient step (with several learners,
                # RLlib would otherwise count minibatches from `minibatch_size`). Set
                # on the config (`training(num_epochs=, minibatch_size=)`), they pass on.
                **self._epochs_and_minibatches(),
            )
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            modules_to_update = set(learner_results[0].keys()) - {ALL_MODULES}
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group,
                policies=modules_to_update,
                inference_only=True,
            )


    def _epochs_and_minibatches(self) -> Dict[str, Any]:
        """RLlib's `num_epochs`, `minibatch_size` and `shuffle_batch_per_epoch` for the
        update, when the config asks for more than one full-batch step."""
        config = self.config
        if config.num_epochs == 1 and config.minibatch_size is None:
            return {}
        return {"num_epochs": config.num_epochs, "minibatch_size": config.minibatch_size,
                "shuffle_batch_per_epoch": config.shuffle_batch_per_epoch}

    def _refuse_if_env_runners_stay_lost(self) -> None:
        """With every remote EnvRunner lost, RLlib waits for Ray to restart them (on
        another node offering their resources, or on a replacement node), retrying the
        step; if none is back after `env_runner_restore_timeout_s` (RLlib's field, 1800 s
        by default), the run stops with a one-line error instead of waiting forever."""
        group = self.env_runner_group
        if group is None or group.num_remote_env_runners() == 0 or group.num_healthy_remote_env_runners() > 0:
            self._all_env_runners_lost_since = None
            return
        now = time.monotonic()
        since = getattr(self, "_all_env_runners_lost_since", None)
        if since is None:
            self._all_env_runners_lost_since = since = now
        timeout = self.config.env_runner_restore_timeout_s
        if now - since > timeout:
            raise RuntimeError(
                f"all {group.num_remote_env_runners()} remote EnvRunners lost and none restored within "
                f"env_runner_restore_timeout_s={timeout:g} s (no node offers their resources "
                f"{self.config.custom_resources_per_env_runner or {}}, num_cpus={self.config.num_cpus_per_env_runner})")


class A2C(HCA):
    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> A2CConfig:
        return A2CConfig()


def training_module(algo: Algorithm, module_id: str = "default_policy"):
    """The learner's module, with the value head and the hindsight classifier.

    `algo.get_module()` is the EnvRunners' inference-only copy, which has neither. With a
    local learner this is the learner's own module (live: it changes as training goes
    on); with remote learners, a copy built with the first learner's weights.
    """
    group = algo.learner_group

    def first(results):  # foreach_learner's RemoteCallResults: the first learner's value
        return next(iter(results)).get()

    if group.is_local:
        return first(group.foreach_learner(lambda learner: learner.module[module_id].unwrapped()))
    from hca_rllib.module import HCATorchRLModule

    state = first(group.foreach_learner(lambda learner: learner.module[module_id].unwrapped().get_state()))
    light = algo.get_module(module_id)
    module = HCATorchRLModule(observation_space=light.observation_space, action_space=light.action_space,
                              inference_only=False, model_config=light.model_config)
    module.set_state(state)
    return module


# The algorithms by name, the one list of them: registered with Tune and RLlib
# (`hca_rllib/__init__.py`), the CLI's and the tuned examples' `--algo` choices.
ALGORITHMS: Dict[str, type] = {"HCA": HCA, "A2C": A2C}

# RLlib warns once per algorithm that it runs "on the new API stack ... if you don't want
# to"; these algorithms exist only there, so the warning is spent here, unshown.
for _name in ALGORITHMS:
    log_once(f"{_name}_on_new_api_stack")
# RLlib's RLModule.__init__ warns that `RLModule(config=...)` is deprecated for every
# module, also for the new constructor this package uses: spent too (`compat`).
compat.silence_rlmodule_config_deprecation()
