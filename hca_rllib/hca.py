"""HCA and A2C: configs, validation and the training step (one full-batch gradient
step per iteration, as A2C does). A2C is the `credit="a2c"` member of the family."""

from __future__ import annotations

import copy
import logging
import math
import numbers
import os
import time
from typing import Any, Dict, Optional

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.utils.annotations import override
from ray.util.debug import log_once
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

from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
from ray.rllib.utils import force_list

from hca_rllib import compat
from hca_rllib.callbacks import STATS_CLS_LOOKUP, GameScoreCallback
from hca_rllib.connectors import (DEFAULT_LEARNER_PATH, LEARNER_PATHS, LeanEpisodesToBatch,
                                  flatten_observations_if_needed, lean_learner_blocker)
from hca_rllib.credit import CALIBRATIONS, CREDIT_MODES, HINDSIGHT_CREDIT_MODES, TRUST_MODES
from hca_rllib.env_runner import (AUTO, DEFAULT_SAMPLER, DEFAULT_SAMPLER_OVERLAP, SAMPLERS, LeanEnvRunner,
                                   lean_sampler_blocker)
from hca_rllib.envs.resolver import EnvResolutionError, env_family, resolve_env
from hca_rllib.module import HINDSIGHT_CHOICES, HINDSIGHT_DEFAULTS, hindsight_option_error

OPTIMIZERS = ("rmsprop", "adam")
RETURN_MODES = ("bootstrap", "monte_carlo")
# The largest count (batch sizes, envs, epochs, seeds) taken: beyond it a value is a typo.
MAX_COUNT = 2**31 - 1
MAX_FRAME_STACK = 1024
# Project fields that are True or False.
BOOL_FIELDS = ("normalize_advantages", "hca_baseline", "c2a2c_soft", "c2a2c_normalize", "hindsight_overlap")
# Fields whose value must be a dict (merged into the current one, or RLlib's).
DICT_FIELDS = ("hindsight", "env_config", "model_config")

# Fields renamed: `optimizer` is RLlib's own (old API stack) optimizer dict and `returns`
# a train-batch column, so ours would collide; the trust in the classifier has one name
# (`trust`), not also "reliability". The old names are refused with a one-line error
# that names the new field.
RENAMED_FIELDS: Dict[str, str] = {
    "optimizer": "optimizer_type",
    "returns": "return_mode",
    "reliability_z": "trust_z",
    "reliability_information": "trust_information",
    "reliability_decay": "trust_decay",
}
# RLlib's own fields among the old names (a value of theirs is RLlib's, not ours).
_RLLIB_FIELDS = ("optimizer", "returns")
RENAME_REASONS: Dict[str, str] = {
    old: ("so as not to collide with RLlib's names" if old in _RLLIB_FIELDS
          else "one name for the trust in the classifier")
    for old in RENAMED_FIELDS
}

# The fields `HCAConfig.training()` accepts on top of RLlib's, with their defaults.
HCA_TRAINING_DEFAULTS: Dict[str, Any] = {
    # Credit estimator (method note, section 2): a2c, hca, c2a2c, mix or expected_hca.
    # The defaults (credit, trust, classifier) were chosen on the benchmarks
    # (benchmarks/common.DEFAULT_CREDIT; docs/method.md, "Defaults and why").
    "credit": "expected_hca",
    # `bootstrap`: n-step returns bootstrapped with V at fragment ends;
    # `monte_carlo`: full-episode returns (needs batch_mode="complete_episodes").
    "return_mode": "bootstrap",
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.0,
    # Standardise advantages over the batch (RLlib's GAE always does; A2C does not).
    "normalize_advantages": False,
    # `hca`: clip of rho = pi/q to [0, hca_ratio_clip]; subtract b = V when hca_baseline.
    "hca_ratio_clip": 10.0,
    "hca_baseline": True,
    # `c2a2c`: gate threshold delta on |log q - log pi| (nats); soft gate
    # min(1, |log q - log pi| / delta) if c2a2c_soft, else the hard 0/1 gate. Soft is
    # the default: on CartPole the hard gate's cut of small-information steps slowed
    # learning most (benchmarks/credit_modes.py, benchmarks/README.md).
    "c2a2c_delta": 0.1,
    "c2a2c_soft": True,
    # Divide the gate by its batch mean: re-weight toward informative steps rather
    # than shrink the whole update (a gate of all zeros falls back to A2C).
    "c2a2c_normalize": False,
    # `mix`: weight eta of the HCA advantage.
    "mix_eta": 0.5,
    # How far to trust the classifier, degrading each mode toward A2C where its held-out
    # evidence is weak (method note, section 2.5): `evidence` (per decision, from
    # evidence accumulated over batches, the episode chunk as the unit), `batch` (one
    # weight per batch from its mean held-out information) or None (pure estimators).
    "trust": "evidence",
    # Full trust at this z-score of the held-out evidence (`evidence`: none below half
    # of it; `batch`: linear from 0).
    "trust_z": 2.0,
    # Information (nats per step) at which trust is full, below it in proportion:
    # `evidence`: the information the classifier claims at each decision,
    # KL(q || pi); `batch`: the batch's mean held-out information. None: off.
    "trust_information": None,
    # `evidence`: decay of the accumulated evidence per batch (memory 1 / (1 - decay)
    # batches); `batch`: of the moving average of the trust (0: this batch only).
    "trust_decay": 0.99,
    # `expected_hca` with `evidence` trust: the largest calibration scale applied to
    # q - pi (1 / alpha for a classifier shrunk toward pi by alpha).
    "trust_max_scale": 4.0,
    # `evidence`: where a calibration scale below 1 goes: `weights` (it shrinks the
    # expected-HCA weights) or `blend` (it lowers the trust, toward A2C: it keeps the
    # default no worse than A2C on MinAtar; docs/method.md, "Defaults and why").
    "trust_calibration": "blend",
    # `evidence`: edges (nats, increasing) of the bins of claimed information
    # KL(q || pi) whose evidence is kept apart; each decision takes its bin's trust and
    # scale. []: one bin for all decisions.
    "trust_bins": [],
    # Hindsight classifier architecture (method note, section 3).
    "hindsight": copy.deepcopy(HINDSIGHT_DEFAULTS),
    "hindsight_loss_coeff": 1.0,
    # Extra classifier-only passes over each train batch.
    "hindsight_epochs": 4,
    # Classifier learning rate (3x the default `lr`); None: same as `lr`.
    "hindsight_lr": 2.1e-3,
    # The extra passes also train on the last `hindsight_memory` train batches (their
    # real steps: observations, actions, returns and the behaviour policy's logits), one
    # step per pass on the union. Needs hindsight_epochs >= 1 when > 0.
    "hindsight_memory": 0,
    # Run the extra passes (and the memory's bookkeeping) of each update in a background
    # thread, overlapping the next `sample()`: they touch only the classifier, which the
    # EnvRunners do not have, and the Learner waits for them before anything reads its
    # module again (the next update, get_state, weight syncs), so the numbers are the same
    # either way. Their loss (`hindsight_loss_extra_passes`) then shows one iteration later.
    # Off by default: with a local EnvRunner on MinAtar it bought nothing (0.83x A2C
    # with and without, benchmarks/results/credit_cost_overlap/): the passes' many small
    # ops and the sampling loop contend for the interpreter lock.
    "hindsight_overlap": False,
    # `rmsprop` (A2C's usual, with `rmsprop_alpha`) or `adam`; `optimizer_eps` for both.
    # (Not `optimizer`: that name is RLlib's own optimizer dict.)
    "optimizer_type": "rmsprop",
    "rmsprop_alpha": 0.99,
    "optimizer_eps": 1e-5,
}



def integer_error(name: str, value: Any, low: int, high: int = MAX_COUNT, note: str = "") -> Optional[str]:
    """The one-line error for a value that must be an integer in [low, high] (any
    `numbers.Integral`, numpy's included, but not a bool), or None when it is one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        return f"{name} must be an integer in [{low}, {high}]{note}, got {value!r}"
    return None

def renamed_field_message(old: str, value: Any = NotProvided) -> str:
    """The one-line error for a field under its old name (`RENAMED_FIELDS`)."""
    new = RENAMED_FIELDS[old]
    if old == "reliability_z" and value is None:
        return "'reliability_z' was renamed 'trust_z'; the pure estimator (no trust) is trust=None"
    example = f"{new}={value!r}" if value is not NotProvided else new
    return f"{old!r} was renamed {new!r} ({RENAME_REASONS[old]}): use {example}"


def _is_rllib_value(old: str, value: Any) -> bool:
    """Whether `value` under the old name `old` is RLlib's own field, not ours: RLlib's
    `optimizer` is a dict (old API stack, {} by default); `returns` is no RLlib field
    (None: not set). Any value under the other old names is ours."""
    if old == "optimizer":
        return value is None or isinstance(value, dict)
    return old in _RLLIB_FIELDS and value is None


# Which paths a new config takes by default: "auto" (the lean path where the config uses
# only what it supports, RLlib's otherwise), or with HCA_RLLIB_PATHS=rllib RLlib's own
# (the whole test suite runs on either: `make test-rllib-paths`), or "lean" (refusing
# what the lean paths do not support).
PATHS_ENV = "HCA_RLLIB_PATHS"
PATHS_ENV_VALUES = (AUTO, "lean", "rllib")

logger = logging.getLogger(__name__)


def default_paths() -> tuple:
    """(sampler, learner_path) a new `HCAConfig` starts with: ("auto", "auto"), or
    ("lean", "lean") / ("rllib", "rllib") when the environment variable HCA_RLLIB_PATHS
    is "lean" / "rllib"."""
    value = os.environ.get(PATHS_ENV, AUTO)
    if value == AUTO:
        return DEFAULT_SAMPLER, DEFAULT_LEARNER_PATH
    if value in SAMPLERS:
        return value, value
    raise ValueError(f"{PATHS_ENV} must be one of {list(PATHS_ENV_VALUES)}, got {value!r}")


class HCAConfig(AlgorithmConfig):
    """Hindsight credit assignment on RLlib's new API stack.

    .. code-block:: python

        from hca_rllib import HCAConfig
        config = HCAConfig().environment("CartPole-v1").training(credit="c2a2c")
        algo = config.build_algo()
        algo.train()
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
        # The EnvRunner's timestep loop: "lean" (`hca_rllib.env_runner.LeanEnvRunner`,
        # installed through RLlib's `env_runner_cls` hook), "rllib" (RLlib's
        # SingleAgentEnvRunner with its connector pipelines) or "auto" (the default: lean
        # unless the config uses something only RLlib's runner does, see
        # `resolved_sampler`); docs/method.md, "Sampling". HCA_RLLIB_PATHS=rllib (or lean)
        # starts both `sampler` and `learner_path` there.
        self.sampler, self.learner_path = default_paths()
        # The (path, value, reason) lines "auto" has logged for this config (its copies
        # and serialized forms carry it, so a resolution is logged once, not per copy).
        self._auto_paths_logged = []
        # sampler="lean" only: the envs as two groups, the policy's forward pass on one
        # group's observations while the other group's envs step (ale-py's C++ threads;
        # a worker thread for Python envs). The same batch; docs/method.md, "Sampling".
        self.sampler_overlap = DEFAULT_SAMPLER_OVERLAP
        # The learner's path from episodes to the update ("auto", the default: lean unless
        # the config uses something only RLlib's pieces do, see `resolved_learner_path`):
        # "lean" (one concatenating connector piece, no artificial bootstrap rows, the
        # credit from the gradient pass when the batch gets one gradient step) or
        # "rllib" (RLlib's learner connector pieces after AddOneTsToEpisodesAndTruncate,
        # credit from a no-grad pass); docs/method.md, section 3.4. Set above, with
        # `sampler`.
        # An iteration ends only once it has sampled: while every remote EnvRunner is
        # lost (its node gone, Ray restarting it elsewhere), RLlib's iteration loop keeps
        # restoring EnvRunners and retrying the step instead of returning one empty
        # iteration after another (what RLlib's default, 0, does: results.jsonl lines with
        # no env steps). A normal step samples a whole batch, so this changes nothing else.
        self.min_sample_timesteps_per_iteration = 1

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
        "rllib" (see `LEARNER_PATHS`, `resolved_learner_path`)."""
        super().learners(**kwargs)
        if learner_path is not NotProvided:
            self.learner_path = learner_path
        return self

    @override(AlgorithmConfig)
    def env_runners(self, *, sampler=NotProvided, sampler_overlap=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's EnvRunner settings; `sampler`: "auto" (the default), "lean" or "rllib"
        (see `SAMPLERS`, `resolved_sampler`);
        `sampler_overlap` (lean only): step one half of the envs while the policy runs
        on the other half's observations."""
        super().env_runners(**kwargs)
        if sampler is not NotProvided:
            self.sampler = sampler
        if sampler_overlap is not NotProvided:
            self.sampler_overlap = sampler_overlap
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

    @property
    def resolved_frame_stack(self) -> int:
        """Frames stacked for the RLModule: `frame_stack`, or the env family's default."""
        if self.frame_stack is not None:
            return int(self.frame_stack)
        return env_family(self.env).frame_stack

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

    @property
    def resolved_sampler(self) -> str:
        """The sampler this config runs: `sampler`, or for "auto" "lean" when everything
        the config uses is on the lean runner's allow-list, "rllib" otherwise."""
        if self.sampler != AUTO:
            return self.sampler
        return "rllib" if lean_sampler_blocker(self) else "lean"

    @property
    def resolved_learner_path(self) -> str:
        """The learner path this config runs: `learner_path`, or for "auto" "lean" when
        everything the config uses is on the lean path's allow-list, "rllib" otherwise."""
        if self.learner_path != AUTO:
            return self.learner_path
        return "rllib" if lean_learner_blocker(self) else "lean"

    @property
    def uses_lean_learner(self) -> bool:
        """Whether the Learner takes the lean path (`resolved_learner_path` "lean")."""
        return self.resolved_learner_path == "lean"

    @override(AlgorithmConfig)
    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        if self.uses_lean_learner:
            from ray.rllib.connectors.learner import LearnerConnectorPipeline

            return LearnerConnectorPipeline(
                connectors=[LeanEpisodesToBatch(num_frames=self.resolved_frame_stack, device=device)],
                input_observation_space=input_observation_space,
                input_action_space=input_action_space,
            )
        pipeline = super().build_learner_connector(input_observation_space, input_action_space, device)
        if self.resolved_frame_stack > 1:
            pipeline.prepend(FrameStackingLearner(num_frames=self.resolved_frame_stack))
        return pipeline

    @override(AlgorithmConfig)
    def training(self, *, lambda_=NotProvided, **kwargs) -> "HCAConfig":
        """RLlib's training settings plus those in `HCA_TRAINING_DEFAULTS`."""
        for old in RENAMED_FIELDS:
            if old in kwargs and not _is_rllib_value(old, kwargs[old]):
                raise ValueError(renamed_field_message(old, kwargs[old]))
        ours = {k: kwargs.pop(k) for k in list(kwargs) if k in HCA_TRAINING_DEFAULTS}
        super().training(**kwargs)
        if lambda_ is not NotProvided:
            self.lambda_ = lambda_
        for key, value in ours.items():
            if value is NotProvided:
                continue
            if key == "hindsight":
                if not isinstance(value, dict):
                    raise ValueError(f"hindsight must be a dict of options, e.g. {{'torso': 'shared'}}, "
                                     f"got {value!r}; allowed options: {sorted(HINDSIGHT_DEFAULTS)}")
                unknown = set(value) - set(HINDSIGHT_DEFAULTS)
                if unknown:
                    raise ValueError(
                        f"hindsight: unknown option(s) {sorted(unknown)}; "
                        f"allowed: {sorted(HINDSIGHT_DEFAULTS)}"
                    )
                value = {**self.hindsight, **value}
            setattr(self, key, value)
        return self

    @override(AlgorithmConfig)
    def update_from_dict(self, config_dict: Dict[str, Any]) -> "HCAConfig":
        """Like RLlib's, but a partial `hindsight` dict merges into the current one
        (Tune's `param_space` and `Algorithm(config={...})` come through here)."""
        config_dict = dict(config_dict)
        for old in RENAMED_FIELDS:
            if old in config_dict and not _is_rllib_value(old, config_dict[old]):
                raise ValueError(renamed_field_message(old, config_dict[old]))
        for key in DICT_FIELDS:
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

    @property
    def uses_hindsight(self) -> bool:
        """Whether the classifier is evaluated and trained (always, unless A2C with
        `hindsight_loss_coeff=0`)."""
        return self.credit in HINDSIGHT_CREDIT_MODES or self.hindsight_loss_coeff > 0

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
            "trust_evidence_bins": len(self.trust_bins) + 1,
        }

    @override(AlgorithmConfig)
    def validate(self) -> None:
        self._validate_rllib_fields()  # first: RLlib's own checks assume these types
        super().validate()
        self._validate_hca()
        self._validate_env()
        self._validate_sampler()
        self._validate_learner_path()

    def _validate_rllib_fields(self) -> None:
        """Types and ranges of the RLlib fields users set (`--set`, `update_from_dict`),
        which RLlib itself checks little or not before its workers start: a one-line
        error naming the field instead of a traceback, or a run that trains on nonsense."""
        def fail(message: str) -> None:
            self._value_error(message)

        def is_number(value) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        def count(name: str, low: int) -> None:
            error = integer_error(name, getattr(self, name), low)
            if error:
                fail(error)

        if self.train_batch_size_per_learner is not None:  # None: from train_batch_size
            count("train_batch_size_per_learner", 1)
        count("num_env_runners", 0)
        count("num_envs_per_env_runner", 1)
        count("num_learners", 0)
        if self.rollout_fragment_length != "auto":
            count("rollout_fragment_length", 1)
        if self.seed is not None:
            count("seed", 0)
        if self.grad_clip is not None and not (is_number(self.grad_clip) and self.grad_clip > 0):
            fail(f"grad_clip must be a number > 0 (None: no clipping), got {self.grad_clip!r}")
        if self.grad_clip_by not in ("value", "norm", "global_norm"):
            fail(f"grad_clip_by must be one of ['value', 'norm', 'global_norm'], got {self.grad_clip_by!r}")
        if self.batch_mode not in ("truncate_episodes", "complete_episodes"):
            fail(f"batch_mode must be one of ['truncate_episodes', 'complete_episodes'], got {self.batch_mode!r}")
        cpus = self.num_cpus_per_env_runner
        if not (is_number(cpus) and cpus >= 0):
            fail(f"num_cpus_per_env_runner must be a number >= 0, got {cpus!r}")
        if isinstance(self.lr, list):  # a schedule: [[timestep, lr], ...], from timestep 0
            ok = len(self.lr) > 0 and all(
                isinstance(p, (list, tuple)) and len(p) == 2 and is_number(p[0]) and p[0] >= 0
                and is_number(p[1]) and p[1] > 0 for p in self.lr) and self.lr[0][0] == 0
            if not ok:
                fail(f"lr must be a number > 0 or a schedule [[0, lr0], [timestep, lr], ...] "
                     f"with lrs > 0, got {self.lr!r}")
        if self.env is not None and not isinstance(self.env, str) and not callable(self.env):
            fail(f"env must be an environment id (a string) or an env class, got {self.env!r}")
        if not isinstance(self.env_config, dict):
            fail(f"env_config must be a dict, got {self.env_config!r}")
        for name in BOOL_FIELDS:
            if not isinstance(getattr(self, name), bool):
                fail(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.hindsight, dict):
            fail(f"hindsight must be a dict of options, got {self.hindsight!r}")
        if self.frame_stack is not None:
            error = integer_error("frame_stack", self.frame_stack, 1, MAX_FRAME_STACK,
                                  " (None: the env family's default)")
            if error:
                fail(error)

    def _announce_auto(self, path: str, value: str, reason: Optional[str]) -> None:
        """One log line when "auto" resolves `path` to RLlib's, naming the feature; once
        per config (its copies, Tune's and checkpoints' serialized forms included)."""
        if reason is None:
            return
        entry = [path, value, reason]
        logged = getattr(self, "_auto_paths_logged", None)
        if not isinstance(logged, list):
            logged = []
        if entry in logged:
            return
        what = ("RLlib's SingleAgentEnvRunner" if path == "sampler"
                else "RLlib's learner connector pieces")
        logger.info(f"{path}: {what} for this run: {reason}")
        self._auto_paths_logged = logged + [entry]

    def _validate_sampler(self) -> None:
        """Check `sampler`, resolve "auto" and install its EnvRunner class (RLlib's
        `env_runner_cls` hook). A class the user set there is kept; recording (`output`)
        keeps RLlib's offline runner."""
        if self.sampler not in (AUTO,) + SAMPLERS:
            self._value_error(f"sampler must be one of {[AUTO, *SAMPLERS]}, got {self.sampler!r}")
        if not isinstance(self.sampler_overlap, bool):
            self._value_error(f"sampler_overlap must be True or False, got {self.sampler_overlap!r}")
        own_class = self.env_runner_cls in (None, LeanEnvRunner)
        reason = lean_sampler_blocker(self) if own_class and not self.output else None
        if self.sampler == "lean" and reason:
            self._value_error(f"sampler='lean' cannot run this config: {reason}; use sampler='auto' "
                              f"(the default) or 'rllib'")
        sampler = self.resolved_sampler
        if self.sampler == AUTO:
            self._announce_auto("sampler", sampler, reason)
        if self.sampler_overlap:
            if sampler != "lean":
                why = f" ({reason})" if self.sampler == AUTO and reason else ""
                self._value_error(f"sampler_overlap=True needs sampler='lean', got "
                                  f"sampler={self.sampler!r}{why}")
            if self.num_envs_per_env_runner < 2:
                self._value_error(f"sampler_overlap=True needs num_envs_per_env_runner >= 2 (two groups "
                                  f"of envs), got {self.num_envs_per_env_runner}")
        if sampler == "lean" and not self.output and own_class:
            self.env_runner_cls = LeanEnvRunner
        elif self.env_runner_cls is LeanEnvRunner:
            self.env_runner_cls = None

    def _validate_learner_path(self) -> None:
        """Check `learner_path` and resolve "auto"; the lean path builds the whole train
        batch itself."""
        if self.learner_path not in (AUTO,) + LEARNER_PATHS:
            self._value_error(f"learner_path must be one of {[AUTO, *LEARNER_PATHS]}, "
                              f"got {self.learner_path!r}")
        reason = lean_learner_blocker(self)
        if self.learner_path == "lean" and reason:
            self._value_error(f"learner_path='lean' cannot run this config: {reason}; use "
                              f"learner_path='auto' (the default) or 'rllib'")
        if self.learner_path == AUTO:
            self._announce_auto("learner_path", self.resolved_learner_path, reason)

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
            self._value_error(str(error))
        # A stack at the start of a fragment reaches back frame_stack - 1 steps into the
        # previous fragment: keep them in the episode's lookback buffer.
        if self.resolved_frame_stack - 1 > self.episode_lookback_horizon:
            self.episode_lookback_horizon = self.resolved_frame_stack - 1

    def _validate_hca(self) -> None:
        def fail(message: str) -> None:
            self._value_error(message)

        def choice(name: str, value: Any, allowed) -> None:
            if value not in allowed:
                fail(f"{name} must be one of {list(allowed)}, got {value!r}")

        def in_range(name, value, low, high, low_open=False, high_open=False) -> None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            ok = ok and (value > low if low_open else value >= low)
            ok = ok and (value < high if high_open else value <= high)
            if not ok:
                left, right = "(" if low_open else "[", ")" if high_open else "]"
                fail(f"{name} must be in {left}{low}, {high}{right}, got {value!r}")

        if self.framework_str != "torch":
            fail(f"framework must be 'torch', got {self.framework_str!r}")
        if not self.enable_rl_module_and_learner or not self.enable_env_runner_and_connector_v2:
            fail("HCA runs on RLlib's new API stack only (api_stack must stay enabled)")
        choice("credit", self.credit, CREDIT_MODES)
        for old in RENAMED_FIELDS:  # set as attributes, or from an old config dict
            if old in _RLLIB_FIELDS:
                if not _is_rllib_value(old, getattr(self, old, None)):
                    fail(renamed_field_message(old, getattr(self, old)))
            elif old in vars(self):
                fail(renamed_field_message(old, vars(self)[old]))
        choice("return_mode", self.return_mode, RETURN_MODES)
        choice("optimizer_type", self.optimizer_type, OPTIMIZERS)
        in_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        in_range("lambda_", self.lambda_, 0.0, 1.0)
        if not callable(self.lr) and not isinstance(self.lr, list):
            in_range("lr", self.lr, 0.0, math.inf, low_open=True, high_open=True)
        for name in ("vf_loss_coeff", "entropy_coeff", "hindsight_loss_coeff"):
            in_range(name, getattr(self, name), 0.0, math.inf, high_open=True)
        in_range("hca_ratio_clip", self.hca_ratio_clip, 1.0, math.inf, high_open=True)
        in_range("c2a2c_delta", self.c2a2c_delta, 0.0, math.inf, low_open=True, high_open=True)
        in_range("mix_eta", self.mix_eta, 0.0, 1.0)
        in_range("rmsprop_alpha", self.rmsprop_alpha, 0.0, 1.0, low_open=True, high_open=True)
        in_range("optimizer_eps", self.optimizer_eps, 0.0, 1.0, low_open=True)
        if self.trust is not None:
            choice("trust", self.trust, TRUST_MODES + (None,))
        in_range("trust_z", self.trust_z, 0.0, math.inf, low_open=True, high_open=True)
        if self.trust_information is not None:
            in_range("trust_information", self.trust_information, 0.0, math.inf,
                     low_open=True, high_open=True)
        in_range("trust_decay", self.trust_decay, 0.0, 1.0, high_open=True)
        in_range("trust_max_scale", self.trust_max_scale, 0.0, math.inf, low_open=True, high_open=True)
        choice("trust_calibration", self.trust_calibration, CALIBRATIONS)
        bins = self.trust_bins
        if (not isinstance(bins, (list, tuple)) or any(
                isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e <= 0
                for e in bins) or list(bins) != sorted(set(bins))):
            fail(f"trust_bins must be a list of increasing positive numbers (nats), got {bins!r}")
        if self.hindsight_lr is not None:
            in_range("hindsight_lr", self.hindsight_lr, 0.0, math.inf, low_open=True, high_open=True)
        if self.credit in HINDSIGHT_CREDIT_MODES and self.hindsight_loss_coeff == 0 and self.hindsight_epochs == 0:
            fail(f"credit={self.credit!r} needs a trained classifier: hindsight_loss_coeff "
                 f"must be > 0 (or hindsight_epochs >= 1), got 0")
        for name in ("hindsight_epochs", "hindsight_memory"):
            error = integer_error(name, getattr(self, name), 0)
            if error:
                fail(error)
        if self.hindsight_memory > 0 and self.hindsight_epochs == 0:
            fail(f"hindsight_memory={self.hindsight_memory} is used by the extra classifier "
                 f"passes only: set hindsight_epochs >= 1")
        for option, allowed in HINDSIGHT_CHOICES.items():
            choice(f"hindsight.{option}", self.hindsight.get(option), allowed)
        error = hindsight_option_error(self.hindsight)
        if error:
            fail(error)
        hiddens = self.hindsight.get("hiddens")
        if not isinstance(hiddens, (list, tuple)) or any(
                integer_error("", h, 1) for h in hiddens):
            fail(f"hindsight.hiddens must be a list of layer sizes (integers >= 1), got {hiddens!r}")
        if self.hindsight["return_encoding"] == "bins":
            num_bins = self.hindsight["num_bins"]
            error = integer_error("hindsight.num_bins", num_bins, 2)
            if error:
                fail(error)
            bins_range = self.hindsight["bins_range"]
            if (not isinstance(bins_range, (list, tuple)) or len(bins_range) != 2
                    or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)
                               for b in bins_range)
                    or not bins_range[0] < bins_range[1]):
                fail(f"hindsight.bins_range must be [low, high] with low < high (finite numbers), "
                     f"got {bins_range!r}")
        if self.return_mode == "monte_carlo" and self.batch_mode != "complete_episodes":
            fail('return_mode="monte_carlo" needs batch_mode="complete_episodes" '
                 f"(env_runners(batch_mode=...)), got {self.batch_mode!r}")
        if self.model_config.get("use_lstm"):
            fail("model_config.use_lstm: recurrent models are not supported by HCA")
        action_space = self.action_space
        if action_space is not None:
            import gymnasium as gym

            if not isinstance(action_space, gym.spaces.Discrete):
                fail(f"action_space must be gymnasium.spaces.Discrete (HCA needs action "
                     f"probabilities), got {action_space}")


class A2CConfig(HCAConfig):
    """Advantage actor-critic: the `credit="a2c"` case, classifier off by default."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or A2C)
        self.credit = "a2c"
        self.hindsight_loss_coeff = 0.0
        self.hindsight_epochs = 0
        self.hindsight_memory = 0


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
