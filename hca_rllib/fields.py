"""The fields HCAConfig adds to RLlib's: their defaults, one table of the checks that
`HCAConfig.validate()` runs on them and on the RLlib fields users set, and the fields of
0.1.0 that are gone.

Every bad value gets one line, `<field> must be <what is allowed>, got <value>`. A removed
field given to `training()`, `update_from_dict()` or `--set` gets one line saying it was
removed and what replaces it; in a 0.1.0 checkpoint it loads where it holds the value
every 0.1.0 run had by default (whose behaviour is the one kept), and fails in one line
naming it where not (`upgrade_state`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from typing import Any, Callable, Dict, Optional, Tuple

from hca_rllib.connectors import lean_learner_blocker
from hca_rllib.credit import CREDIT_MODES, TRUST_MODES
from hca_rllib.module import (HINDSIGHT_DEFAULTS, HindsightSpec, drop_removed, hindsight_error, removed_error,
                              removed_hindsight_error, removed_value_error, upgrade_hindsight_options)
from hca_rllib.paths import LEARNER_PATH_CHOICES, SAMPLER_CHOICES

# The fields `HCAConfig.training()` takes on top of RLlib's, with their defaults (what
# each buys, with the benchmark that shows it: docs/guide.md, "Config reference").
# The credit defaults were chosen on the benchmarks (docs/method.md, "Defaults and why").
HCA_TRAINING_DEFAULTS: Dict[str, Any] = {
    # The credit estimator (method note, section 2): a2c, hca, c2a2c or expected_hca.
    "credit": "expected_hca",
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.0,
    # `c2a2c`: the gate min(1, |log q - log pi| / delta) is full from delta nats.
    "c2a2c_delta": 0.1,
    # How far to trust the classifier, degrading each mode toward A2C (method note,
    # section 2.4): "evidence" (trust what held-out evidence shows the classifier knows),
    # "bias" (trust until the estimator's update is shown to differ from A2C's in
    # expectation), or None (pure estimators).
    "trust": "evidence",
    # The hindsight classifier (module.HindsightSpec), its loss weight in the main step,
    # its extra classifier-only passes over each batch and its learning rate (3x the
    # default `lr`; None: `lr`).
    "hindsight": copy.deepcopy(HINDSIGHT_DEFAULTS),
    "hindsight_loss_coeff": 1.0,
    "hindsight_epochs": 4,
    "hindsight_lr": 2.1e-3,
}
# The other fields HCAConfig adds, set where RLlib's kind of setting lives:
# `env_runners(sampler=)`, `learners(learner_path=)`, `environment(frame_stack=)`.
PATH_FIELDS = ("sampler", "learner_path")
OTHER_FIELDS = (*PATH_FIELDS, "frame_stack")
# The training fields a user sets, each counted (each option of `hindsight` too).
FIELD_COUNT = len(HCA_TRAINING_DEFAULTS) - 1 + len(HINDSIGHT_DEFAULTS) + len(OTHER_FIELDS)

# The credit modes the reward outcome takes: its estimator is the all-action one (method
# note, section 2.8); `a2c` trains its classifier beside A2C for the diagnostics.
REWARD_OUTCOME_CREDIT_MODES = ("a2c", "expected_hca")

# The largest count (batch sizes, envs, epochs, seeds) taken: beyond it a value is a typo.
MAX_COUNT = 2**31 - 1
MAX_FRAME_STACK = 1024

# 0.1.0's fields that are gone: field -> (its default, whose behaviour is kept; what
# there is instead).
_OPTIMIZER = ("RMSprop with alpha 0.99 and eps 1e-5, as A2C; for another optimizer override "
              "HCATorchLearner.configure_optimizers_for_module")
REMOVED_FIELDS: Dict[str, Tuple[Any, str]] = {
    "sampler_overlap": (False, "the lean sampler steps all of a runner's envs together"),
    "hindsight_overlap": (False, "the extra classifier passes run inside the update"),
    "hindsight_memory": (0, "the extra classifier passes train on the current batch"),
    "return_mode": ("bootstrap", "returns are bootstrapped with V where a fragment is cut"),
    "normalize_advantages": (False, "advantages are not standardised, as in A2C"),
    "hca_ratio_clip": (10.0, "credit='hca' clips pi/q at credit.HCA_RATIO_CLIP = 10"),
    "hca_baseline": (True, "credit='hca' always subtracts V"),
    "c2a2c_soft": (True, "credit='c2a2c' uses the soft gate"),
    "c2a2c_normalize": (False, "credit='c2a2c' does not normalise its gate"),
    "mix_eta": (0.5, "credit='mix' was removed"),
    "trust_z": (2.0, "full trust at z = credit.Z_FULL_TRUST = 2"),
    "trust_information": (None, "the trust is not capped by the information's size"),
    "trust_decay": (0.99, "the evidence decays by credit.EVIDENCE_DECAY = 0.99 per batch"),
    "trust_max_scale": (4.0, "the calibration scale is capped at credit.MAX_CALIBRATION_SCALE = 4"),
    "trust_calibration": ("blend", "a calibration scale below 1 lowers the trust"),
    "trust_bins": ([], "one pool of evidence for all decisions"),
    "optimizer_type": ("rmsprop", _OPTIMIZER),
    "rmsprop_alpha": (0.99, _OPTIMIZER),
    "optimizer_eps": (1e-5, _OPTIMIZER),
}
# Values of kept fields that are gone, with what to use instead.
REMOVED_VALUES: Dict[Tuple[str, Any], str] = {
    ("credit", "mix"): "credit='mix' was removed in 0.2.0: use 'hca' or 'expected_hca'",
    ("trust", "batch"): "trust='batch' was removed in 0.2.0: use 'evidence' (the default) or None",
}


def removed_field_error(field: str) -> str:
    """The one-line error for a removed field (`REMOVED_FIELDS`) given to a setter."""
    return removed_error([field], REMOVED_FIELDS)


def refuse_removed(settings: Dict[str, Any]) -> None:
    """ValueError (one line) for the first removed field or `hindsight` option among
    `settings` (a setter's keyword arguments or a config dict)."""
    hindsight = settings.get("hindsight")
    error = removed_error(settings, REMOVED_FIELDS) or (
        removed_hindsight_error(hindsight) if isinstance(hindsight, dict) else None)
    if error:
        raise ValueError(error)


def upgrade_state(state: Dict[str, Any]) -> Dict[str, Any]:
    """A config state or dict (a checkpoint's, an old config.json's) without 0.1.0's
    removed fields and `hindsight` options where they hold their defaults; ValueError
    (one line, naming the field) where one holds another value."""
    state = drop_removed(state, REMOVED_FIELDS)
    if isinstance(state.get("hindsight"), dict):
        state["hindsight"] = upgrade_hindsight_options(state["hindsight"])
    return state


def drop_removed_fields(config) -> None:
    """A removed field set on `config` as an attribute (or by RLlib's own `from_state` of
    a 0.1.0 config) is dropped where it holds its default; otherwise ValueError names it."""
    upgraded = upgrade_state(vars(config))
    for field in REMOVED_FIELDS:
        vars(config).pop(field, None)
    if isinstance(config.hindsight, dict) and upgraded["hindsight"] != config.hindsight:
        vars(config)["hindsight"] = upgraded["hindsight"]


def merged_hindsight(current: Dict[str, Any], options) -> Dict[str, Any]:
    """The `hindsight` options after `training(hindsight=options)`: a `HindsightSpec`
    replaces them all, a dict sets the options it names; ValueError (one line) for a bad one."""
    if isinstance(options, HindsightSpec):
        return options.as_dict()
    # The options with the ones they keep: some depend on each other (across_fragments on
    # the outcome).
    error = hindsight_error({**current, **options} if isinstance(options, dict) else options)
    if error:
        raise ValueError(error)
    return {**current, **copy.deepcopy(options)}


# ------------------------------------------------------------------ the check table


@dataclasses.dataclass(frozen=True)
class Check:
    """One field's check: `ok(value)`, and `allowed`, what the message says it must be."""

    ok: Callable[[Any], bool]
    allowed: str


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def number(low: float, high: float = math.inf, *, low_open=False, high_open=None, none: str = "") -> Check:
    """A finite number in the interval (`high_open` defaults to open at infinity); `none`:
    None is allowed too, and means this."""
    high_open = high == math.inf if high_open is None else high_open

    def ok(value) -> bool:
        if value is None and none:
            return True
        return (_is_number(value) and (value > low if low_open else value >= low)
                and (value < high if high_open else value <= high))

    interval = f"{'(' if low_open else '['}{float(low)}, {float(high)}{')' if high_open else ']'}"
    return Check(ok, f"in {interval}" + (f" (None: {none})" if none else ""))


def integer(low: int, high: int = MAX_COUNT, *, none: str = "", also: Tuple = ()) -> Check:
    """An integer (any `numbers.Integral`, numpy's included, but not a bool) in [low, high];
    `none`: None is allowed too; `also`: other values allowed."""
    def ok(value) -> bool:
        return (value is None and bool(none)) or any(type(value) is type(v) and value == v for v in also) or (
            _is_integer(value) and low <= value <= high)

    extra = "".join(f" or {v!r}" for v in also) + (f" (None: {none})" if none else "")
    return Check(ok, f"an integer in [{low}, {high}]{extra}")


def one_of(*values) -> Check:
    return Check(lambda value: any(type(value) is type(v) and value == v for v in values),
                 f"one of {list(values)}")


def _lr_ok(value) -> bool:
    """A number > 0, a schedule `[[0, lr0], [timestep, lr], ...]` (lrs > 0) or a callable."""
    if isinstance(value, list):
        return len(value) > 0 and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and _is_number(p[0]) and p[0] >= 0
            and _is_number(p[1]) and p[1] > 0 for p in value) and value[0][0] == 0
    return callable(value) or (_is_number(value) and value > 0)


# field -> its check, in the order they run. RLlib's fields first: RLlib's own checks
# assume their types, and checks little of them before its workers start.
CHECKS: Dict[str, Check] = {
    "train_batch_size_per_learner": integer(1, none="from train_batch_size"),
    "num_env_runners": integer(0),
    "num_envs_per_env_runner": integer(1),
    "num_learners": integer(0),
    "rollout_fragment_length": integer(1, also=("auto",)),
    "seed": integer(0, none="not seeded"),
    "grad_clip": number(0, low_open=True, none="no clipping"),
    "grad_clip_by": one_of("value", "norm", "global_norm"),
    "batch_mode": one_of("truncate_episodes", "complete_episodes"),
    "num_cpus_per_env_runner": number(0),
    "lr": Check(_lr_ok, "a number > 0 or a schedule [[0, lr0], [timestep, lr], ...] with lrs > 0"),
    "gamma": number(0, 1, low_open=True),
    "lambda_": number(0, 1),
    "env": Check(lambda v: v is None or isinstance(v, str) or callable(v),
                 "an environment id (a string) or an env class"),
    "env_config": Check(lambda v: isinstance(v, dict), "a dict"),
    "credit": one_of(*CREDIT_MODES),
    "trust": one_of(*TRUST_MODES, None),
    "vf_loss_coeff": number(0),
    "entropy_coeff": number(0),
    "c2a2c_delta": number(0, low_open=True),
    "hindsight_loss_coeff": number(0),
    "hindsight_epochs": integer(0),
    "hindsight_lr": number(0, low_open=True, none="the same as lr"),
    "frame_stack": integer(1, MAX_FRAME_STACK, none="the env family's default"),
    "sampler": one_of(*SAMPLER_CHOICES),
    "learner_path": one_of(*LEARNER_PATH_CHOICES),
}


def check_error(config, field: str) -> Optional[str]:
    """The one-line error for `config`'s value of `field` (`CHECKS`), or None."""
    value = getattr(config, field)
    if CHECKS[field].ok(value):
        return None
    return (removed_value_error(REMOVED_VALUES, field, value)
            or f"{field} must be {CHECKS[field].allowed}, got {value!r}")


def config_errors(config):
    """The one-line errors of `config`'s fields, in `CHECKS` order, then the rules that
    join fields; a generator (the first is what `validate()` raises)."""
    if config.framework_str != "torch":
        yield f"framework must be 'torch', got {config.framework_str!r}"
    if not config.enable_rl_module_and_learner or not config.enable_env_runner_and_connector_v2:
        yield "HCA runs on RLlib's new API stack only (api_stack must stay enabled)"
    for field in CHECKS:
        error = check_error(config, field)
        if error:
            yield error
    yield from filter(None, [hindsight_error(config.hindsight)])
    if isinstance(config.hindsight, dict) and config.hindsight.get("outcome") == "reward" \
            and config.credit not in REWARD_OUTCOME_CREDIT_MODES:
        yield (f"hindsight.outcome='reward' takes credit in {list(REWARD_OUTCOME_CREDIT_MODES)} "
               f"(its weights are all-action), got credit={config.credit!r}")
    yield from filter(None, [_window_error(config), _across_fragments_error(config)])
    if config.credit != "a2c" and config.hindsight_loss_coeff == 0 and config.hindsight_epochs == 0:
        yield (f"credit={config.credit!r} needs a trained classifier: hindsight_loss_coeff "
               f"must be > 0 (or hindsight_epochs >= 1), got 0")
    if (config.model_config or {}).get("use_lstm"):
        yield "model_config.use_lstm: recurrent models are not supported by HCA"
    yield from filter(None, [_action_space_error(config.action_space)])


def _window_error(config) -> Optional[str]:
    """The reward outcome's window longer than a rollout fragment: (step, reward) pairs
    never cross a fragment, so the steps past the fragment would credit nothing."""
    hindsight = config.hindsight if isinstance(config.hindsight, dict) else {}
    if hindsight.get("outcome") != "reward" or config.batch_mode != "truncate_episodes" \
            or hindsight.get("across_fragments") is True:
        return None
    window = hindsight.get("window", HINDSIGHT_DEFAULTS["window"])
    try:
        fragment = config.get_rollout_fragment_length()
    except Exception:  # RLlib's own check names a fragment length it cannot work out
        return None
    if isinstance(window, int) and isinstance(fragment, int) and window > fragment:
        return (f"hindsight.window={window} is longer than the rollout fragment ({fragment} steps): "
                f"a reward credits only the steps of its own fragment; set window <= {fragment}, "
                f"a longer rollout_fragment_length, or hindsight.across_fragments=True")
    return None


def _across_fragments_error(config) -> Optional[str]:
    """The window across fragments where the learner path cannot carry it: the rows it
    carries from earlier fragments are built by the lean learner path's batch."""
    hindsight = config.hindsight if isinstance(config.hindsight, dict) else {}
    if hindsight.get("across_fragments") is not True:
        return None
    if config.learner_path == "rllib":
        return "hindsight.across_fragments needs learner_path='lean' or 'auto', got 'rllib'"
    blocker = lean_learner_blocker(config) if config.learner_path == "auto" else None
    if blocker:
        return f"hindsight.across_fragments needs the lean learner path, which cannot run this config: {blocker}"
    return None


def _action_space_error(action_space) -> Optional[str]:
    import gymnasium as gym

    if action_space is None or isinstance(action_space, gym.spaces.Discrete):
        return None
    return f"action_space must be gymnasium.spaces.Discrete (HCA needs action probabilities), got {action_space}"
