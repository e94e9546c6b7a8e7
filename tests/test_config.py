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
from hca_rllib.hca import HCA_TRAINING_DEFAULTS, RENAMED_FIELDS
from hca_rllib.module import HINDSIGHT_DEFAULTS


def cartpole(**training) -> HCAConfig:
    return HCAConfig().environment("CartPole-v1").training(**training)


# --------------------------------------------------------------------------------------
# Validation: one case per rule. Each message must name the field and what is allowed.
# --------------------------------------------------------------------------------------

INVALID = [
    # (id, training kwargs, regex the message must match)
    ("credit", {"credit": "bogus"}, r"credit must be one of \['a2c', 'hca', 'c2a2c', 'mix', 'expected_hca'\].*'bogus'"),
    ("trust", {"trust": "bogus"}, r"trust must be one of \['evidence', 'batch', None\], got 'bogus'"),
    ("trust_max_scale", {"trust_max_scale": 0.0}, r"trust_max_scale must be in \(0\.0, inf\)"),
    ("trust_calibration", {"trust_calibration": "x"}, r"trust_calibration must be one of \['weights', 'blend'\], got 'x'"),
    ("trust_information", {"trust_information": -1.0}, r"trust_information must be in \(0\.0, inf\)"),
    ("return_mode", {"return_mode": "td"}, r"return_mode must be one of \['bootstrap', 'monte_carlo'\].*'td'"),
    ("optimizer_type", {"optimizer_type": "sgd"}, r"optimizer_type must be one of \['rmsprop', 'adam'\].*'sgd'"),
    ("gamma_0", {"gamma": 0.0}, r"gamma must be in \(0\.0, 1\.0\]"),
    ("gamma_1.5", {"gamma": 1.5}, r"gamma must be in \(0\.0, 1\.0\]"),
    ("gamma_nan", {"gamma": math.nan}, r"gamma must be in \(0\.0, 1\.0\]"),
    ("lambda_neg", {"lambda_": -0.1}, r"lambda_ must be in \[0\.0, 1\.0\]"),
    ("lambda_big", {"lambda_": 1.1}, r"lambda_ must be in \[0\.0, 1\.0\]"),
    ("vf_loss_coeff", {"vf_loss_coeff": -0.5}, r"vf_loss_coeff must be in \[0\.0, inf\)"),
    ("entropy_coeff", {"entropy_coeff": -0.01}, r"entropy_coeff must be in \[0\.0, inf\)"),
    ("hindsight_loss_coeff", {"hindsight_loss_coeff": -1.0}, r"hindsight_loss_coeff must be in \[0\.0, inf\)"),
    ("hca_ratio_clip", {"hca_ratio_clip": 0.5}, r"hca_ratio_clip must be in \[1\.0, inf\)"),
    ("c2a2c_delta", {"c2a2c_delta": 0.0}, r"c2a2c_delta must be in \(0\.0, inf\)"),
    ("mix_eta", {"mix_eta": 1.5}, r"mix_eta must be in \[0\.0, 1\.0\]"),
    ("trust_z", {"trust_z": 0.0}, r"trust_z must be in \(0\.0, inf\)"),
    ("trust_decay", {"trust_decay": 1.0}, r"trust_decay must be in \[0\.0, 1\.0\)"),
    ("hindsight_epochs_neg", {"hindsight_epochs": -1}, r"hindsight_epochs must be an integer in \[0, "),
    ("hindsight_epochs_float", {"hindsight_epochs": 1.5}, r"hindsight_epochs must be an integer in \[0, "),
    ("rmsprop_alpha", {"rmsprop_alpha": 1.0}, r"rmsprop_alpha must be in \(0\.0, 1\.0\)"),
    ("optimizer_eps", {"optimizer_eps": 0.0}, r"optimizer_eps must be in \(0\.0, 1\.0\]"),
    ("hindsight_lr", {"hindsight_lr": 0.0}, r"hindsight_lr must be in \(0\.0, inf\)"),
    (
        "parameterization",
        {"hindsight": {"parameterization": "absolute"}},
        r"hindsight\.parameterization must be one of \['policy_relative', 'independent'\]",
    ),
    (
        "return_encoding",
        {"hindsight": {"return_encoding": "raw"}},
        r"hindsight\.return_encoding must be one of \['standardize', 'symlog', 'bins'\]",
    ),
    (
        "torso",
        {"hindsight": {"torso": "frozen"}},
        r"hindsight\.torso must be one of \['shared_detached', 'shared', 'separate'\]",
    ),
    (
        "num_bins",
        {"hindsight": {"return_encoding": "bins", "num_bins": 1}},
        r"hindsight\.num_bins must be an integer in \[2, ",
    ),
    (
        "bins_range",
        {"hindsight": {"return_encoding": "bins", "bins_range": [1.0, 0.0]}},
        r"hindsight\.bins_range must be \[low, high\] with low < high",
    ),
    (
        "monte_carlo",
        {"return_mode": "monte_carlo"},
        r'return_mode="monte_carlo" needs batch_mode="complete_episodes"',
    ),
    ("lr_nan", {"lr": math.nan}, r"lr must be in \(0\.0, inf\)"),
    ("lr_inf", {"lr": math.inf}, r"lr must be in \(0\.0, inf\)"),
]


@pytest.mark.parametrize("kwargs,match", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_setting_raises(kwargs, match):
    config = cartpole(**kwargs)
    with pytest.raises(ValueError, match=match):
        config.validate()


VALID = [
    ("gamma_1", {"gamma": 1.0}),
    ("lambda_0", {"lambda_": 0.0}),
    ("lambda_1", {"lambda_": 1.0}),
    ("coeffs_0", {"vf_loss_coeff": 0.0, "entropy_coeff": 0.0}),
    ("hindsight_coeff_0_with_extra_passes", {"hindsight_loss_coeff": 0.0, "hindsight_epochs": 1}),
    ("hca_ratio_clip_1", {"hca_ratio_clip": 1.0}),
    ("mix_eta_edges", {"mix_eta": 0.0}),
    ("trust_none", {"trust": None}),
    ("trust_decay_0", {"trust_decay": 0.0}),
    ("hindsight_epochs_3", {"hindsight_epochs": 3}),
    ("hindsight_lr", {"hindsight_lr": 1e-3}),
    ("adam", {"optimizer_type": "adam"}),
    ("bins", {"hindsight": {"return_encoding": "bins", "num_bins": 2, "bins_range": [-1.0, 1.0]}}),
    # num_bins / bins_range only matter with the bins encoding.
    ("num_bins_unused", {"hindsight": {"return_encoding": "symlog", "num_bins": 1}}),
] + [(f"credit_{c}", {"credit": c}) for c in CREDIT_MODES]


@pytest.mark.parametrize("kwargs", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_setting_accepted(kwargs):
    cartpole(**kwargs).validate()


# The fields renamed so as not to collide with RLlib's names: each old name gives one line
# naming the new field, however it comes in.
RENAMES = [("optimizer", "optimizer_type", "adam"), ("returns", "return_mode", "monte_carlo"),
           ("reliability_z", "trust_z", 3.0), ("reliability_information", "trust_information", 0.1),
           ("reliability_decay", "trust_decay", 0.5)]
REASON = {"optimizer": "so as not to collide with RLlib's names",
          "returns": "so as not to collide with RLlib's names"}


def _reason(old):
    return REASON.get(old, "one name for the trust in the classifier")


def test_renamed_fields_are_all_tested_and_not_rllib_fields():
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    assert RENAMED_FIELDS == {old: new for old, new, _ in RENAMES}
    rllib = AlgorithmConfig()
    for old, new, _ in RENAMES:
        assert not hasattr(rllib, new), new  # the new names collide with nothing in RLlib
        assert new in HCA_TRAINING_DEFAULTS and old not in HCA_TRAINING_DEFAULTS
    # `optimizer` really is RLlib's (an old-API-stack dict): the reason for the rename.
    assert rllib.optimizer == {}


def test_reliability_z_none_points_at_trust_none():
    with pytest.raises(ValueError, match=r"^'reliability_z' was renamed 'trust_z'; the pure estimator \(no trust\) is trust=None$"):
        HCAConfig().training(reliability_z=None)


@pytest.mark.parametrize("old,new,value", RENAMES)
def test_old_field_name_in_training_names_the_new_one(old, new, value):
    with pytest.raises(ValueError) as error:
        HCAConfig().training(**{old: value})
    message = str(error.value)
    assert "\n" not in message
    assert message == f"{old!r} was renamed {new!r} ({_reason(old)}): use {new}={value!r}"
    # The new name works and sets the field.
    assert getattr(HCAConfig().training(**{new: value}), new) == value


@pytest.mark.parametrize("old,new,value", RENAMES)
def test_old_field_name_in_a_config_dict_names_the_new_one(old, new, value):
    with pytest.raises(ValueError, match=rf"^'{old}' was renamed '{new}' .*use {new}={value!r}$"):
        HCAConfig().update_from_dict({old: value})
    with pytest.raises(ValueError, match=rf"^'{old}' was renamed '{new}'"):
        HCAConfig.from_dict({"env": "CartPole-v1", old: value})
    # Set as an attribute (bypassing training()), validation catches it.
    config = cartpole()
    setattr(config, old, value)
    with pytest.raises(ValueError, match=rf"^'{old}' was renamed '{new}'"):
        config.validate()


@pytest.mark.parametrize("old,new,value", RENAMES)
def test_old_field_name_in_cli_set_is_one_line_exit_2(old, new, value, tmp_path, capsys):
    from hca_rllib.cli import main

    code = main(["train", "--set", f"{old}={value}", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"hca-rllib: error: {old!r} was renamed {new!r} ({_reason(old)}): use {new}={value!r}\n"
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_rllib_own_optimizer_dict_still_passes():
    # RLlib's `optimizer` field (a dict, old API stack) is RLlib's: to_dict / from_dict
    # round trips carry it, and it is not mistaken for the old name.
    config = cartpole(optimizer_type="adam")
    assert config.to_dict()["optimizer"] == {}
    again = HCAConfig.from_dict(config.to_dict())
    assert again.optimizer_type == "adam" and again.optimizer == {}
    again.validate()
    cartpole(optimizer={"type": "ignored"}).validate()


def test_unknown_hindsight_option_raises_in_training():
    with pytest.raises(ValueError, match=r"hindsight: unknown option\(s\) \['bogus'\].*allowed"):
        HCAConfig().training(hindsight={"bogus": 1})


def test_monte_carlo_accepted_with_complete_episodes():
    config = cartpole(return_mode="monte_carlo").env_runners(batch_mode="complete_episodes")
    config.validate()


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

    (Regression: a shallow copy once shared `hiddens` and `bins_range` with
    `HINDSIGHT_DEFAULTS`.)
    """
    a, b = HCAConfig(), HCAConfig()
    assert a.hindsight is not b.hindsight
    assert a.hindsight is not HINDSIGHT_DEFAULTS
    saved_hiddens = list(HINDSIGHT_DEFAULTS["hiddens"])
    saved_range = list(HINDSIGHT_DEFAULTS["bins_range"])
    try:
        a.hindsight["hiddens"].append(32)
        a.hindsight["bins_range"][0] = -1.0
        assert b.hindsight["hiddens"] == saved_hiddens
        assert HCAConfig().hindsight["hiddens"] == saved_hiddens
        assert HINDSIGHT_DEFAULTS["hiddens"] == saved_hiddens
        assert HINDSIGHT_DEFAULTS["bins_range"] == saved_range
    finally:  # undo the leak, if any, so that other tests see the real defaults
        HINDSIGHT_DEFAULTS["hiddens"][:] = saved_hiddens
        HINDSIGHT_DEFAULTS["bins_range"][:] = saved_range


# --------------------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------------------


def _custom_config() -> HCAConfig:
    return cartpole(
        credit="c2a2c",
        c2a2c_soft=True,
        hindsight={"return_encoding": "bins", "num_bins": 7},
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
    assert restored.credit == "c2a2c" and restored.c2a2c_soft is True
    assert restored.hindsight["return_encoding"] == "bins" and restored.hindsight["num_bins"] == 7
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
    config.training(hindsight={"num_bins": 5})
    assert config.hindsight["torso"] == "separate" and config.hindsight["num_bins"] == 5
    # The module defaults are untouched.
    assert HINDSIGHT_DEFAULTS["torso"] == "shared_detached"
    assert HINDSIGHT_DEFAULTS["num_bins"] == 21


def test_hindsight_options_reach_model_config():
    config = HCAConfig().training(hindsight={"torso": "separate", "return_encoding": "symlog"})
    hindsight = config.model_config["hindsight"]
    assert hindsight["torso"] == "separate" and hindsight["return_encoding"] == "symlog"


def test_hindsight_options_reach_the_module():
    config = HCAConfig().environment("CartPole-v1").training(
        hindsight={"torso": "separate", "return_encoding": "bins", "num_bins": 5}
    )
    module = config.get_rl_module_spec(env=gymnasium.make("CartPole-v1")).build()
    assert module.hindsight_torso is not None
    assert module.return_encoder.encoding == "bins" and module.return_encoder.output_dim == 5
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


@pytest.mark.parametrize("credit", ["hca", "c2a2c", "mix", "expected_hca"])
def test_credit_mode_without_a_trained_classifier_is_rejected(credit):
    config = HCAConfig().environment("CartPole-v1").training(credit=credit, hindsight_loss_coeff=0.0, hindsight_epochs=0, hindsight_memory=0)
    with pytest.raises(ValueError, match=rf"credit='{credit}' needs a trained classifier: hindsight_loss_coeff must be > 0"):
        config.validate()


@pytest.mark.parametrize("value, ok", [
    (0, True), (5, True), (np.int64(5), True), (np.uint8(3), True), (2**31 - 1, True),
    (2**31, False), (-1, False), (True, False), (np.bool_(True), False), (5.0, False),
    (np.float64(5), False), ("5", False), (None, False), (float("nan"), False)])
def test_integer_error_accepts_every_integral_but_bool(value, ok):
    from hca_rllib.hca import integer_error

    error = integer_error("hindsight_epochs", value, 0)
    assert (error is None) == ok, error
    if not ok:
        assert error == f"hindsight_epochs must be an integer in [0, 2147483647], got {value!r}"


def test_numpy_integers_configure_the_classifier():
    """One helper checks every count: numpy integers (as from a numpy grid) are counts."""
    config = HCAConfig().environment("CartPole-v1").training(
        hindsight_epochs=np.int64(2), hindsight={"hiddens": [np.int64(16)]})
    config.validate()
    with pytest.raises(ValueError, match=r"hindsight\.hiddens must be a list of layer sizes"):
        HCAConfig().environment("CartPole-v1").training(hindsight={"hiddens": [True]}).validate()
