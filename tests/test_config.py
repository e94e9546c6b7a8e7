"""Tests for `HCAConfig` / `A2CConfig`: validation, defaults, serialisation, registration.

No Ray cluster is started: `validate()` and the registries work without `ray.init`.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest

import hca_rllib
from hca_rllib import A2C, HCA, A2CConfig, HCAConfig
from hca_rllib.credit import CREDIT_MODES
from hca_rllib.fields import FIELD_COUNT, REMOVED_FIELDS, REMOVED_VALUES, OTHER_FIELDS
from hca_rllib.hca import HCA_TRAINING_DEFAULTS
from hca_rllib.module import HINDSIGHT_DEFAULTS, REMOVED_HINDSIGHT_OPTIONS, HindsightSpec


def cartpole(**training) -> HCAConfig:
    return HCAConfig().environment("CartPole-v1").training(**training)


# --------------------------------------------------------------------------------------
# Validation: one case per rule. Each message must name the field and what is allowed.
# --------------------------------------------------------------------------------------

INVALID = [
    # (id, training kwargs, regex the message must match)
    ("credit", {"credit": "bogus"}, r"credit must be one of \['a2c', 'hca', 'c2a2c', 'expected_hca'\].*'bogus'"),
    ("credit_mix", {"credit": "mix"}, r"^credit='mix' was removed in 0\.2\.0: use 'hca' or 'expected_hca'$"),
    ("trust", {"trust": "bogus"}, r"trust must be one of \['evidence', 'bias', None\], got 'bogus'"),
    ("trust_batch", {"trust": "batch"}, r"^trust='batch' was removed in 0\.2\.0"),
    ("gamma_0", {"gamma": 0.0}, r"gamma must be in \(0\.0, 1\.0\]"),
    ("gamma_1.5", {"gamma": 1.5}, r"gamma must be in \(0\.0, 1\.0\]"),
    ("gamma_nan", {"gamma": math.nan}, r"gamma must be in \(0\.0, 1\.0\]"),
    ("lambda_neg", {"lambda_": -0.1}, r"lambda_ must be in \[0\.0, 1\.0\]"),
    ("lambda_big", {"lambda_": 1.1}, r"lambda_ must be in \[0\.0, 1\.0\]"),
    ("vf_loss_coeff", {"vf_loss_coeff": -0.5}, r"vf_loss_coeff must be in \[0\.0, inf\)"),
    ("entropy_coeff", {"entropy_coeff": -0.01}, r"entropy_coeff must be in \[0\.0, inf\)"),
    ("hindsight_loss_coeff", {"hindsight_loss_coeff": -1.0}, r"hindsight_loss_coeff must be in \[0\.0, inf\)"),
    ("c2a2c_delta", {"c2a2c_delta": 0.0}, r"c2a2c_delta must be in \(0\.0, inf\)"),
    ("hindsight_epochs_neg", {"hindsight_epochs": -1}, r"hindsight_epochs must be an integer in \[0, "),
    ("hindsight_epochs_float", {"hindsight_epochs": 1.5}, r"hindsight_epochs must be an integer in \[0, "),
    ("hindsight_lr", {"hindsight_lr": 0.0}, r"hindsight_lr must be in \(0\.0, inf\) \(None: the same as lr\)"),
    ("lr_nan", {"lr": math.nan}, r"lr must be a number > 0 or a schedule"),
    ("lr_inf", {"lr": math.inf}, r"lr must be a number > 0 or a schedule"),
]


@pytest.mark.parametrize("kwargs,match", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_setting_raises(kwargs, match):
    config = cartpole(**kwargs)
    with pytest.raises(ValueError, match=match):
        config.validate()


HINDSIGHT_INVALID = [
    ("parameterization", {"parameterization": "absolute"},
     r"hindsight\.parameterization must be one of \['policy_relative', 'independent'\]"),
    ("return_encoding", {"return_encoding": "raw"}, r"hindsight\.return_encoding must be one of \['standardize', 'symlog'\]"),
    ("bins", {"return_encoding": "bins"}, r"^hindsight\.return_encoding='bins' was removed in 0\.2\.0"),
    ("torso", {"torso": "frozen"}, r"hindsight\.torso must be one of \['shared_detached', 'shared', 'separate'\]"),
    ("hiddens", {"hiddens": [0]}, r"hindsight\.hiddens must be a list of layer sizes"),
]


@pytest.mark.parametrize("options,match", [c[1:] for c in HINDSIGHT_INVALID], ids=[c[0] for c in HINDSIGHT_INVALID])
def test_invalid_hindsight_option_raises_when_set(options, match):
    with pytest.raises(ValueError, match=match):
        HCAConfig().training(hindsight=options)


VALID = [
    ("gamma_1", {"gamma": 1.0}),
    ("lambda_0", {"lambda_": 0.0}),
    ("lambda_1", {"lambda_": 1.0}),
    ("coeffs_0", {"vf_loss_coeff": 0.0, "entropy_coeff": 0.0}),
    ("hindsight_coeff_0_with_extra_passes", {"hindsight_loss_coeff": 0.0, "hindsight_epochs": 1}),
    ("trust_none", {"trust": None}),
    ("trust_bias", {"trust": "bias"}),
    ("hindsight_epochs_3", {"hindsight_epochs": 3}),
    ("hindsight_lr", {"hindsight_lr": 1e-3}),
    ("hindsight_lr_none", {"hindsight_lr": None}),
    ("symlog", {"hindsight": {"return_encoding": "symlog"}}),
    ("spec", {"hindsight": HindsightSpec(torso="separate", hiddens=(16,))}),
    ("lr_schedule", {"lr": [[0, 1e-3], [1000, 1e-4]]}),
] + [(f"credit_{c}", {"credit": c}) for c in CREDIT_MODES]


@pytest.mark.parametrize("kwargs", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_setting_accepted(kwargs):
    cartpole(**kwargs).validate()


# --------------------------------------------------------------------------------------
# The field count, and the fields 0.1.0 had that are gone
# --------------------------------------------------------------------------------------


def test_at_most_20_training_fields():
    """The fields a user can set on top of RLlib's, each `hindsight` option counted: the
    top-level training fields, the classifier's options, `sampler`, `learner_path` and
    `frame_stack`."""
    top_level = [k for k in HCA_TRAINING_DEFAULTS if k != "hindsight"]
    assert FIELD_COUNT == len(top_level) + len(HINDSIGHT_DEFAULTS) + len(OTHER_FIELDS) == 18
    assert FIELD_COUNT <= 20
    config = HCAConfig()
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    # `lambda_` is RLlib's own GAE field (its PPOConfig's), not in the base AlgorithmConfig.
    ours = set(vars(config)) - set(vars(AlgorithmConfig())) - {"_auto_paths_logged", "lambda_"}
    assert ours == set(HCA_TRAINING_DEFAULTS) | set(OTHER_FIELDS)


def test_removed_fields_are_gone_from_the_config():
    config = HCAConfig()
    for field in REMOVED_FIELDS:
        assert not hasattr(config, field), field
    assert set(HINDSIGHT_DEFAULTS) == {"parameterization", "return_encoding", "torso", "hiddens", "outcome", "window",
                                       "across_fragments"}


@pytest.mark.parametrize("field", sorted(REMOVED_FIELDS))
def test_removed_field_in_training_is_one_line(field):
    default, instead = REMOVED_FIELDS[field]
    with pytest.raises(ValueError) as error:
        HCAConfig().training(**{field: default})
    assert str(error.value) == f"{field} was removed in 0.2.0 ({instead})"


@pytest.mark.parametrize("field", sorted(REMOVED_FIELDS))
def test_removed_field_in_a_config_dict_is_one_line(field):
    default, _ = REMOVED_FIELDS[field]
    with pytest.raises(ValueError, match=rf"^{field} was removed in 0\.2\.0 \(.*\)$"):
        HCAConfig().update_from_dict({field: default})
    with pytest.raises(ValueError, match=rf"^{field} was removed"):
        HCAConfig.from_dict({"env": "CartPole-v1", field: default})


def test_removed_field_as_attribute_loads_at_its_default_and_names_itself_otherwise():
    """A 0.1.0 config state (a checkpoint's, RLlib's `from_state`) carries every removed
    field: at its default it is dropped, with another value validation names it."""
    config = cartpole()
    for field, (default, _) in REMOVED_FIELDS.items():
        setattr(config, field, default)
    config.validate()
    assert not any(hasattr(config, field) for field in REMOVED_FIELDS)
    config = cartpole()
    config.hindsight_memory = 4
    with pytest.raises(ValueError, match=r"^hindsight_memory=4 was removed in 0\.2\.0 \(.*\); only its default 0 loads$"):
        config.validate()


def test_removed_hindsight_options():
    for option, (default, instead) in REMOVED_HINDSIGHT_OPTIONS.items():
        with pytest.raises(ValueError) as error:
            HCAConfig().training(hindsight={option: default})
        assert str(error.value) == f"hindsight.{option} was removed in 0.2.0 ({instead})"
        with pytest.raises(ValueError, match=rf"hindsight\.{option} was removed"):
            HCAConfig().update_from_dict({"hindsight": {option: default}})


def test_removed_field_in_from_state_loads_at_its_default():
    old = cartpole().get_state()
    old.update({field: default for field, (default, _) in REMOVED_FIELDS.items()})
    old["hindsight"] = {**old["hindsight"], **{k: d for k, (d, _) in REMOVED_HINDSIGHT_OPTIONS.items()}}
    config = HCAConfig.from_state(old)
    assert config.hindsight == HINDSIGHT_DEFAULTS and not hasattr(config, "trust_bins")
    config.validate()
    old["trust_bins"] = [0.1]
    with pytest.raises(ValueError, match=r"^trust_bins=\[0\.1\] was removed in 0\.2\.0"):
        HCAConfig.from_state(old)


def test_removed_values_name_what_replaces_them():
    assert set(REMOVED_VALUES) == {("credit", "mix"), ("trust", "batch")}


@pytest.mark.parametrize("field", ["hindsight_memory", "trust_calibration"])
def test_removed_field_in_cli_set_is_one_line_exit_2(field, tmp_path, capsys):
    from hca_rllib.cli import main

    code = main(["train", "--set", f"{field}=0", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"hca-rllib: error: --set: {field} was removed in 0.2.0 ({REMOVED_FIELDS[field][1]})\n"
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_rllib_own_optimizer_dict_still_passes():
    # RLlib's `optimizer` field (a dict, old API stack) is RLlib's: to_dict / from_dict
    # round trips carry it.
    config = cartpole()
    assert config.to_dict()["optimizer"] == {}
    again = HCAConfig.from_dict(config.to_dict())
    assert again.optimizer == {}
    again.validate()
    cartpole(optimizer={"type": "ignored"}).validate()


def test_unknown_hindsight_option_raises_in_training():
    with pytest.raises(ValueError, match=r"hindsight: unknown option\(s\) \['bogus'\].*allowed"):
        HCAConfig().training(hindsight={"bogus": 1})


def test_continuous_action_space_rejected():
    config = HCAConfig().environment(
        action_space=gymnasium.spaces.Box(-1.0, 1.0, (2,)),
        observation_space=gymnasium.spaces.Box(-1.0, 1.0, (4,)),
    )
    with pytest.raises(ValueError, match=r"action_space must be gymnasium\.spaces\.Discrete"):
        config.validate()


def test_discrete_action_space_from_spaces_accepted():
    HCAConfig().environment(
        action_space=gymnasium.spaces.Discrete(3),
        observation_space=gymnasium.spaces.Box(-1.0, 1.0, (4,)),
    ).validate()


# --------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------


def test_defaults_validate():
    HCAConfig().environment("CartPole-v1").validate()
    A2CConfig().environment("CartPole-v1").validate()


def test_default_fields():
    config = HCAConfig()
    for key, value in HCA_TRAINING_DEFAULTS.items():
        assert getattr(config, key) == value, key
    assert config.hindsight == HINDSIGHT_DEFAULTS
    assert config.algo_class is HCA
    assert config.lr == 7e-4 and config.gamma == 0.99 and config.lambda_ == 1.0


def test_a2c_config():
    config = A2CConfig()
    assert config.credit == "a2c"
    assert config.hindsight_loss_coeff == 0
    assert config.uses_hindsight is False
    assert config.algo_class is A2C
    assert HCAConfig().uses_hindsight is True
    # A2C with a classifier trained alongside (for diagnostics) uses it.
    assert A2CConfig().training(hindsight_loss_coeff=1.0).uses_hindsight is True
    # Every other credit mode needs the classifier even at zero loss weight.
    assert HCAConfig().training(credit="c2a2c", hindsight_loss_coeff=0.0).uses_hindsight is True


def test_default_hindsight_not_shared_between_configs():
    """Mutating one config's hindsight options in place must not leak into other
    configs or into the module defaults, nested lists included.

    (Regression: a shallow copy once shared `hiddens` with `HINDSIGHT_DEFAULTS`.)
    """
    a, b = HCAConfig(), HCAConfig()
    assert a.hindsight is not b.hindsight
    assert a.hindsight is not HINDSIGHT_DEFAULTS
    saved_hiddens = list(HINDSIGHT_DEFAULTS["hiddens"])
    try:
        a.hindsight["hiddens"].append(32)
        assert b.hindsight["hiddens"] == saved_hiddens
        assert HCAConfig().hindsight["hiddens"] == saved_hiddens
        assert HINDSIGHT_DEFAULTS["hiddens"] == saved_hiddens
    finally:  # undo the leak, if any, so that other tests see the real defaults
        HINDSIGHT_DEFAULTS["hiddens"][:] = saved_hiddens


# --------------------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------------------


def _custom_config() -> HCAConfig:
    return cartpole(
        credit="c2a2c",
        c2a2c_delta=0.2,
        hindsight={"return_encoding": "symlog", "hiddens": [7]},
        trust=None,
        hindsight_epochs=2,
        lambda_=0.95,
    )


def _assert_same_hca_fields(a: HCAConfig, b: HCAConfig) -> None:
    for key in HCA_TRAINING_DEFAULTS:
        assert getattr(a, key) == getattr(b, key), key
    assert a.lambda_ == b.lambda_


def test_to_dict_from_dict_round_trip():
    config = _custom_config()
    restored = HCAConfig.from_dict(config.to_dict())
    assert type(restored) is HCAConfig
    _assert_same_hca_fields(config, restored)
    assert restored.credit == "c2a2c" and restored.c2a2c_delta == 0.2
    assert restored.hindsight["return_encoding"] == "symlog" and restored.hindsight["hiddens"] == [7]
    assert restored.trust is None and restored.hindsight_epochs == 2
    assert restored.lambda_ == 0.95
    restored.validate()


def test_copy():
    config = _custom_config()
    clone = config.copy()
    _assert_same_hca_fields(config, clone)
    clone.hindsight["torso"] = "separate"
    assert config.hindsight["torso"] == "shared_detached"


# --------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------


def test_tune_registration():
    from ray.tune.registry import get_trainable_cls

    assert get_trainable_cls("HCA") is hca_rllib.HCA
    assert get_trainable_cls("A2C") is hca_rllib.A2C


def test_rllib_registry():
    from ray.rllib.algorithms import registry

    # ray 2.60 has no public `get_algorithm_class`; the ALGORITHMS table is the API.
    for name, cls, config_cls in (("HCA", HCA, HCAConfig), ("A2C", A2C, A2CConfig)):
        algo_class, default_config = registry.ALGORITHMS[name]()
        assert algo_class is cls
        assert type(default_config) is config_cls
        assert registry.ALGORITHMS_CLASS_TO_NAME[cls.__name__] == name
        if hasattr(registry, "_get_algorithm_class"):
            assert registry._get_algorithm_class(name) is cls
    assert type(HCA.get_default_config()) is HCAConfig
    assert type(A2C.get_default_config()) is A2CConfig


# --------------------------------------------------------------------------------------
# The hindsight sub-dict
# --------------------------------------------------------------------------------------


def test_hindsight_options_merge_into_defaults():
    config = HCAConfig().training(hindsight={"torso": "separate"})
    assert config.hindsight == {**HINDSIGHT_DEFAULTS, "torso": "separate"}
    # A second call merges into the first.
    config.training(hindsight={"hiddens": [5]})
    assert config.hindsight["torso"] == "separate" and config.hindsight["hiddens"] == [5]
    # The module defaults are untouched.
    assert HINDSIGHT_DEFAULTS["torso"] == "shared_detached"
    assert HINDSIGHT_DEFAULTS["hiddens"] == [128, 128]
    # A HindsightSpec sets them all.
    config.training(hindsight=HindsightSpec(return_encoding="symlog"))
    assert config.hindsight == {**HINDSIGHT_DEFAULTS, "return_encoding": "symlog"}


def test_hindsight_options_reach_model_config():
    config = HCAConfig().training(hindsight={"torso": "separate", "return_encoding": "symlog"})
    hindsight = config.model_config["hindsight"]
    assert hindsight["torso"] == "separate" and hindsight["return_encoding"] == "symlog"


def test_hindsight_options_reach_the_module():
    config = HCAConfig().environment("CartPole-v1").training(
        hindsight={"torso": "separate", "return_encoding": "symlog", "hiddens": [5]}
    )
    module = config.get_rl_module_spec(env=gymnasium.make("CartPole-v1")).build()
    assert module.hindsight_torso is not None
    assert module.return_encoder.encoding == "symlog" and module.hindsight[0].out_features == 5
    assert module.hindsight_spec == HindsightSpec(torso="separate", return_encoding="symlog", hiddens=(5,))
    assert module.resolved_model_config["fcnet_hiddens"] == [64, 64]


def test_partial_hindsight_dict_merges_in_update_from_dict():
    """A legacy dict (Tune's `param_space`, `Algorithm(config={...})`) goes through
    `update_from_dict`; a partial `hindsight` there must merge like `.training()` does.

    (Regression: RLlib's `update_from_dict` alone would `setattr` the partial dict,
    replacing the defaults.)
    """
    config = HCAConfig.from_dict({"env": "CartPole-v1", "hindsight": {"torso": "separate"}})
    assert config.hindsight == {**HINDSIGHT_DEFAULTS, "torso": "separate"}
    config.validate()
    with pytest.raises(ValueError, match=r"hindsight: unknown option"):
        HCAConfig().update_from_dict({"hindsight": {"bogus": 1}})


@pytest.mark.parametrize("credit", ["hca", "c2a2c", "expected_hca"])
def test_credit_mode_without_a_trained_classifier_is_rejected(credit):
    config = HCAConfig().environment("CartPole-v1").training(credit=credit, hindsight_loss_coeff=0.0, hindsight_epochs=0)
    with pytest.raises(ValueError, match=rf"credit='{credit}' needs a trained classifier: hindsight_loss_coeff must be > 0"):
        config.validate()


@pytest.mark.parametrize("value, ok", [
    (0, True), (5, True), (np.int64(5), True), (np.uint8(3), True), (2**31 - 1, True),
    (2**31, False), (-1, False), (True, False), (np.bool_(True), False), (5.0, False),
    (np.float64(5), False), ("5", False), (None, False), (float("nan"), False)])
def test_integer_check_accepts_every_integral_but_bool(value, ok):
    from hca_rllib.fields import check_error

    config = HCAConfig()
    config.hindsight_epochs = value
    error = check_error(config, "hindsight_epochs")
    assert (error is None) == ok, error
    if not ok:
        assert error == f"hindsight_epochs must be an integer in [0, 2147483647], got {value!r}"


@pytest.mark.parametrize("field", ["sampler", "learner_path"])
def test_paths_are_checked_in_the_table(field):
    """`sampler` and `learner_path` are checked with the other fields (`fields.CHECKS`),
    in one line naming what is allowed; "auto", "lean" and "rllib" pass."""
    from hca_rllib.fields import CHECKS, check_error

    assert field in CHECKS
    config = HCAConfig()
    for value in ("auto", "lean", "rllib"):
        setattr(config, field, value)
        assert check_error(config, field) is None
    for value in ("fast", None, ["lean"]):
        setattr(config, field, value)
        assert check_error(config, field) == f"{field} must be one of ['auto', 'lean', 'rllib'], got {value!r}"


def test_removed_hindsight_values_and_options_are_refused_before_other_errors():
    """A removed `hindsight` option, then a removed value ('bins'), is what a setter
    refuses, ahead of an unknown option in the same dict; a bad value that was never an
    option's is left to validation."""
    from hca_rllib.fields import refuse_removed
    from hca_rllib.module import REMOVED_HINDSIGHT_VALUES, hindsight_error

    assert set(REMOVED_HINDSIGHT_VALUES) == {("return_encoding", "bins")}
    bins = "hindsight.return_encoding='bins' was removed in 0.2.0: use 'standardize' or 'symlog'"
    for options, error in (({"return_encoding": "bins", "bogus": 1}, bins),
                           ({"bogus": 1, "balanced": False, "return_encoding": "bins"},
                            f"hindsight.balanced was removed in 0.2.0 ({REMOVED_HINDSIGHT_OPTIONS['balanced'][1]})")):
        assert hindsight_error(options) == error
        with pytest.raises(ValueError) as raised:
            refuse_removed({"hindsight": options})
        assert str(raised.value) == error
    refuse_removed({"hindsight": {"bogus": 1, "hiddens": [8], "torso": "frozen"}})  # no removed one: no error here
    refuse_removed({"hindsight": "not a dict"})


def test_numpy_integers_configure_the_classifier():
    """One helper checks every count: numpy integers (as from a numpy grid) are counts."""
    config = HCAConfig().environment("CartPole-v1").training(
        hindsight_epochs=np.int64(2), hindsight={"hiddens": [np.int64(16)]})
    config.validate()
    with pytest.raises(ValueError, match=r"hindsight\.hiddens must be a list of layer sizes"):
        HCAConfig().environment("CartPole-v1").training(hindsight={"hiddens": [True]}).validate()


def test_credit_help_lists_every_mode_and_the_defaults(capsys):
    """`hca-rllib train --help` (and a tuned example's) names every credit mode, from the
    one list of them, and the default of each algorithm."""
    from hca_rllib.cli import main
    from tuned_examples.minatar.breakout import main as tuned_main

    for run in (lambda: main(["train", "--help"]), lambda: tuned_main(["--help"])):
        with pytest.raises(SystemExit):
            run()
        text = " ".join(capsys.readouterr().out.split())
        assert f"{', '.join(CREDIT_MODES)} (default: {HCA_TRAINING_DEFAULTS['credit']} for HCA, a2c for A2C)" in text
