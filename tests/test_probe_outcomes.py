"""`hca-rllib probe --outcome reward`: the (decision, reward event) pairs against a brute
force, closed forms on known-answer tasks (the delayed effect's final reward, a bandit
whose action does nothing), the window, the report and the command line (its bad input:
tests/test_bad_input.py; the weighted bootstrap: tests/test_stats.py)."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from hca_rllib.probe import ProbeError, ProbeSettings, probe, write_probe_report
from hca_rllib.probe.outcomes import (OutcomeRows, build_outcome_classifier, outcome_features, pair_weights,
                                      reward_pairs, standardiser)
from hca_rllib.probe.reading import reward_reading
from hca_rllib.probe.rewards import lag_bands

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from credit_analysis import binary_shift_information, decision_information  # noqa: E402

DELAYED = "HCA/DelayedEffect-v0"
BANDIT = "HCA/AmbiguousBandit-v0"


# ------------------------------------------------------------------- the pairs


def _brute_pairs(rewards, ids, window):
    out = []
    for t in range(len(rewards)):
        for k in range(window):
            if t + k < len(rewards) and ids[t + k] == ids[t] and rewards[t + k] != 0:
                out.append((t, t + k, k))
    return out


@pytest.mark.parametrize("window", [1, 2, 7, 40])
def test_pairs_equal_a_brute_force_enumeration(window):
    rng = np.random.default_rng(window)
    lengths = rng.integers(1, 25, size=40)
    ids = np.repeat(np.arange(40), lengths)
    rewards = rng.choice([0.0, 0.0, 0.0, 1.0, -1.0, 0.5], size=len(ids))
    pairs = reward_pairs(rewards, ids, window)
    got = list(zip(pairs["decision"].tolist(), pairs["event"].tolist(), pairs["k"].tolist()))
    assert got == _brute_pairs(rewards, ids, window)
    # Never across an episode boundary, never a zero reward, always inside the window.
    assert (ids[pairs["decision"]] == ids[pairs["event"]]).all()
    assert (rewards[pairs["event"]] != 0).all()
    assert ((pairs["k"] >= 0) & (pairs["k"] < window)).all()
    assert (pairs["event"] - pairs["decision"] == pairs["k"]).all()


def test_pairs_edge_cases_and_refusals():
    none = reward_pairs(np.zeros(10), np.zeros(10, int), 5)
    assert all(len(v) == 0 for v in none.values())
    # One reward at the end of episode 0: the decisions of episode 0 within the window only.
    rewards = np.array([0, 0, 0, 2.0, 0, 0])
    ids = np.array([0, 0, 0, 0, 1, 1])
    p = reward_pairs(rewards, ids, 3)
    assert p["decision"].tolist() == [1, 2, 3] and p["k"].tolist() == [2, 1, 0]
    np.testing.assert_allclose(pair_weights(rewards, p, 0.5), [2 * 0.25, 2 * 0.5, 2.0])
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        reward_pairs(rewards, ids, 0)
    with pytest.raises(ValueError, match="1-d of one length"):
        reward_pairs(rewards, ids[:3], 2)


def test_outcome_features_standardise_and_one_hot():
    values = np.array([1.0, 3.0, 5.0])
    scale = standardiser(values)
    x = outcome_features(values, scale, np.array([0, 2, 1]), window=3)
    assert x.shape == (3, 4) and x.dtype == np.float32
    np.testing.assert_allclose(x[:, 0], (values - 3.0) / values.std(), rtol=1e-6)
    np.testing.assert_array_equal(x[:, 1:], np.eye(3)[[0, 2, 1]])
    constant = outcome_features(np.ones(4), standardiser(np.ones(4)))
    np.testing.assert_array_equal(constant, np.zeros((4, 1)))


def test_an_unfitted_classifier_reads_exactly_zero():
    """h == pi before the fit (f's last layer at 0): every pointwise value is exactly 0, not
    float noise that a CI could read as a detection."""
    import gymnasium

    rng = np.random.default_rng(0)
    log_pi = np.log(rng.dirichlet(np.ones(3), size=50))
    data = {"obs": rng.random((50, 4)).astype(np.float32), "log_pi": log_pi,
            "actions": rng.integers(0, 3, size=50)}
    classifier = build_outcome_classifier(gymnasium.spaces.Box(0.0, 1.0, (4,), np.float32),
                                          gymnasium.spaces.Discrete(3), {}, 2)
    rows = OutcomeRows(data, np.arange(50), rng.normal(size=(50, 2)).astype(np.float32))
    assert (rows.pointwise(classifier, np.arange(50)) == 0.0).all()


def test_a_classifier_that_never_beat_pi_is_no_detection():
    figure = {"information": 1e-9, "ci": [1e-10, 2e-9], "ci_bonferroni": [1e-10, 2e-9], "n": 10}
    result = {"window": 4, "return": {"per_decision": figure, "fit": {"improved": False}},
              "reward": {"per_pair": figure, "per_decision": figure, "per_pair_delayed": None,
                         "reward_weighted": figure, "fit": {"improved": False}},
              "reward_minus_return": figure}
    r = reward_reading(result)
    assert not r["reward_detected"] and not r["return_detected"]
    assert any("0 by construction" in line for line in r["text"])
    result["reward"]["fit"]["improved"] = True
    assert reward_reading(result)["reward_detected"]


# ------------------------------------------------------------------- closed forms


def test_the_reward_outcome_finds_the_final_rewards_closed_form():
    """Delayed effect, L = 5, noise 1, window 8: the first action sets the sign of the final
    reward u = +-1 + N(0, 1), 5 steps later. Only the pair (start, k = 5) carries
    information, I(A; U) = 0.337 nats (a binary shift of 2 in unit noise); the chain's
    noise rewards (k < 5) and the chain decisions (actions that do nothing) carry none. Per
    decision that is 0.337 / 6; the 8-step return, which sums the 5 noise rewards into
    the sign, holds only 0.088 / 6."""
    exact_pair = binary_shift_information(2.0, 1.0)
    exact_return = decision_information("delayed_effect", {"length": 5, "noise_std": 1.0})["information"]
    result = probe(DELAYED, env_config={"length": 5, "noise_std": 1.0}, episodes=1500, max_steps=100_000,
                   outcome="reward", window=8, benchmark_summary=None)
    reward, per_k = result["reward"], {row["k"]: row for row in result["reward"]["per_k"]}
    assert set(per_k) == set(range(6))  # no pair beyond the episode's 5 chain steps
    assert abs(per_k[5]["information"] - exact_pair) < 0.06, per_k[5]
    assert per_k[5]["ci"][0] > 0.2
    for k in range(5):
        assert abs(per_k[k]["information"]) < 0.01 and per_k[k]["ci"][0] < 0.002, per_k[k]
    assert reward["per_decision"]["information"] == pytest.approx(exact_pair / 6, abs=0.012)
    assert reward["per_decision"]["ci_bonferroni"][0] > 0.02
    assert result["return"]["per_decision"]["information"] < exact_return / 6 + 0.01
    assert result["reward_minus_return"]["ci"][0] > 0.0  # the reward outcome sees more, same decisions
    assert result["reading"]["reward_detected"]
    # 1500 episodes of 6 decisions: 5 pairs from the start, 5 + 4 + ... + 1 from the chain.
    assert result["pairs"]["total"] == 1500 * (5 + 15)
    # By lag band: k = 5 sits in 1-7, which holds the decision's information; k = 0 none.
    bands = {tuple(row["lags"]): row for row in reward["per_lag_band"]}
    assert list(bands) == [(0, 1), (1, 8)]
    assert bands[(1, 8)]["information"] == pytest.approx(exact_pair / 6, abs=0.012)
    assert bands[(1, 8)]["ci"][0] > 0.02 and abs(bands[(0, 1)]["information"]) < 0.002
    assert sum(row["information"] for row in bands.values()) == pytest.approx(reward["per_decision"]["information"])
    assert sum(row["pairs"] for row in bands.values()) == result["pairs"]["held_out"]


def test_lag_bands_tile_the_window():
    assert lag_bands(1) == [(0, 1)]
    assert lag_bands(8) == [(0, 1), (1, 8)]
    assert lag_bands(32) == [(0, 1), (1, 8), (8, 32)]
    assert lag_bands(128) == [(0, 1), (1, 8), (8, 32), (32, 64), (64, 128)]
    assert lag_bands(100) == [(0, 1), (1, 8), (8, 32), (32, 64), (64, 100)]


def test_an_action_that_does_not_move_the_reward_reads_zero():
    """The bandit with both actions alike (p_hi_a = 0.5): every step pays a reward whose law
    does not depend on the action. The reward outcome reads 0 within its CI."""
    result = probe(BANDIT, env_config={"p_hi_a": 0.5}, episodes=4000, max_steps=4000, outcome="reward", window=4,
                   benchmark_summary=None)
    per_pair = result["reward"]["per_pair"]
    assert per_pair["ci"][0] <= 0.0 <= per_pair["ci"][1] + 1e-4, per_pair
    assert abs(per_pair["information"]) < 0.005
    assert not result["reading"]["reward_detected"]
    assert result["pairs"]["total"] == 4000 and result["reward"]["per_pair_delayed"] is None


def test_the_window_bounds_what_the_reward_outcome_sees(tmp_path):
    """The same delayed effect with a window of 4: the final reward, 5 steps after the
    decision, makes no pair with it, and the information is gone; the report says so."""
    result = probe(DELAYED, env_config={"length": 5, "noise_std": 1.0}, episodes=600, max_steps=100_000,
                   outcome="reward", window=4, benchmark_summary=None)
    assert max(row["k"] for row in result["reward"]["per_k"]) == 3
    assert result["reward"]["per_pair"]["ci"][0] < 0.002
    text = write_probe_report(result, tmp_path).read_text()
    assert "## The reward outcome beside the 4-step return" in text and "| reward outcome, per pair |" in text
    saved = json.loads((tmp_path / "probe.json").read_text())
    assert saved["outcome"] == "reward" and saved["window"] == 4 and "data" not in saved


def test_settings_refuse_bad_outcomes_and_windows():
    with pytest.raises(ProbeError, match="outcome must be one of return, reward"):
        ProbeSettings(outcome="rewards").validate()
    with pytest.raises(ProbeError, match="window must be an integer >= 1"):
        ProbeSettings(window=0).validate()
    with pytest.raises(TypeError, match="unexpected keyword"):
        probe(DELAYED, windo=3)


# ------------------------------------------------------------------- command line


def test_help_lists_the_outcomes_and_the_window(capsys):
    from hca_rllib.cli import main

    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "{return,reward}" in out and "--window" in out and "integer 1-4096" in out


def test_command_line_reward_outcome_writes_the_report(tmp_path, capsys):
    from hca_rllib.cli import main

    assert main(["probe", "--env", DELAYED, "--set-env", "length=3", "--set-env", "noise_std=1.0",
                 "--episodes", "200", "--outcome", "reward", "--window", "6", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Reward outcome" in out and "Return over 6 steps" in out
    assert json.loads((tmp_path / "probe.json").read_text())["window"] == 6
    assert not math.isnan(json.loads((tmp_path / "probe.json").read_text())["reward"]["per_pair"]["information"])
