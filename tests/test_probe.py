"""`hca-rllib probe` / `hca_rllib.probe.probe`: the information I(A; Z | S) of a task,
checked against closed forms (benchmarks/credit_analysis.py), brute-force references, a
real held-out split, a policy that is never trained, and one-line errors."""

import math
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

from hca_rllib import credit, stats
from hca_rllib.probe import (ProbeError, information_level, parse_horizons, probe, reading, split_episodes,
                             write_probe_report)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from credit_analysis import decision_information  # noqa: E402

DELAYED = "HCA/DelayedEffect-v0"
KEY_TO_DOOR = "HCA/KeyToDoor-v0"


# ------------------------------------------------------------------- pure maths


def _brute_horizon_returns(rewards, ids, gamma, horizon):
    out = np.zeros(len(rewards))
    for t in range(len(rewards)):
        k, total = 0, 0.0
        while t + k < len(rewards) and ids[t + k] == ids[t] and (horizon is None or k < horizon):
            total += gamma ** k * rewards[t + k]
            k += 1
        out[t] = total
    return out


@pytest.mark.parametrize("horizon", [1, 2, 5, 40, None])
def test_horizon_returns_equal_a_brute_force_sum(horizon):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 12, size=30)
    ids = np.repeat(np.arange(30), lengths)
    rewards = rng.normal(size=len(ids))
    got = credit.horizon_returns(rewards, ids, 0.9, horizon)
    np.testing.assert_allclose(got, _brute_horizon_returns(rewards, ids, 0.9, horizon), rtol=1e-10, atol=1e-12)


def test_horizon_returns_refuse_bad_input():
    with pytest.raises(ValueError, match="horizon must be an integer >= 1"):
        credit.horizon_returns([1.0], [0], 0.9, 0)
    with pytest.raises(ValueError, match="1-d of one length"):
        credit.horizon_returns([1.0, 2.0], [0], 0.9, None)


def test_information_concentration_closed_values():
    x = np.array([0.0] * 18 + [1.0, 3.0])  # 20 decisions: the top 10% (2) hold all of it
    c = credit.information_concentration(x, threshold=0.5)
    assert c["share_above_threshold"] == pytest.approx(0.1)
    assert c["top_share"] == pytest.approx(1.0)
    even = credit.information_concentration(np.ones(20), threshold=0.5)
    assert even["top_share"] == pytest.approx(0.1) and even["share_above_threshold"] == 1.0
    assert math.isnan(credit.information_concentration(-np.ones(5), 0.1)["top_share"])


def test_cluster_bootstrap_resamples_episodes_not_decisions():
    rng = np.random.default_rng(0)
    # 40 episodes of 50 decisions sharing one episode-level value: 40 independent units.
    per_episode = rng.normal(size=40)
    ids = np.repeat(np.arange(40), 50)
    values = per_episode[ids] + 0.01 * rng.normal(size=len(ids))
    mean, low, high = stats.cluster_bootstrap_mean_ci(values, ids, reps=4000)
    assert mean == pytest.approx(values.mean())
    # The CI is that of a mean of 40 values (half-width ~ 1.96 / sqrt(40) = 0.31), not of
    # 2000 (0.044), which resampling decisions would give.
    assert 0.2 < (high - low) / 2 < 0.45
    assert stats.cluster_bootstrap_mean_ci(values, ids, reps=4000) == (mean, low, high)  # seeded
    assert stats.cluster_bootstrap_mean_ci([1.0, 2.0], [0, 0]) == (1.5, 1.5, 1.5)


def test_parse_horizons():
    assert parse_horizons("64,1,end,16,1") == [1, 16, 64, None]
    with pytest.raises(ProbeError, match="must be >= 1"):
        parse_horizons("0")
    with pytest.raises(ProbeError, match="neither an integer"):
        parse_horizons("5,x")


def test_split_is_disjoint_covering_and_seeded():
    ids = np.repeat(np.arange(100), 3)
    fit, val, held = split_episodes(ids, 0.3, seed=4)
    assert len(held) == 30 and len(val) == 14 and len(fit) == 56
    assert not set(fit) & set(held) and not set(val) & set(held) and not set(fit) & set(val)
    assert set(fit) | set(val) | set(held) == set(range(100))
    again = split_episodes(ids, 0.3, seed=4)
    assert all((a == b).all() for a, b in zip(again, (fit, val, held)))
    assert not (split_episodes(ids, 0.3, seed=5)[2] == held).all()


def test_steps_to_episode_end_and_their_bins_equal_a_count():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 40, size=25)
    ids = np.repeat(np.arange(25), lengths)
    got = credit.steps_to_episode_end(ids)
    expected = [int((ids[t:] == ids[t]).sum()) for t in range(len(ids))]  # episodes contiguous
    np.testing.assert_array_equal(got, expected)
    bins = credit.power_of_two_bins(got)
    assert ((2 ** bins <= got) & (got < 2 ** (bins + 1))).all()
    np.testing.assert_array_equal(credit.power_of_two_bins([1, 2, 3, 4, 7, 8, 1000]), [0, 1, 1, 2, 2, 3, 9])
    with pytest.raises(ValueError, match=">= 1"):
        credit.power_of_two_bins([0, 3])


# ------------------------------------------------------------------- the probe


def _start(result, horizon="end"):
    return next(h for h in result["horizons"] if h["horizon"] == horizon)["start_state"]


def test_held_out_split_is_real_and_the_estimate_is_on_it_only():
    result = probe(DELAYED, env_config={"length": 3, "noise_std": 1.0}, episodes=300, horizons=[None],
                   benchmark_summary=None, keep_data=True)
    data, split = result["data"], result["split"]
    fit, val, held = (set(split[k]) for k in ("fit_episodes", "validation_episodes", "held_out_episodes"))
    assert not fit & held and not val & held and not fit & val
    assert fit | val | held == set(range(result["episodes"]))
    ep = data["episode_ids"]
    assert set(ep[data["held_out_rows"]]) == held and set(ep[data["fit_rows"]]) == fit
    assert not set(data["held_out_rows"]) & (set(data["fit_rows"]) | set(data["validation_rows"]))
    # The estimate is the mean over exactly the held-out decisions.
    pointwise = data["pointwise"]["end"]
    assert len(pointwise) == len(data["held_out_rows"]) == result["split"]["held_out_decisions"]
    assert result["horizons"][0]["information"] == pytest.approx(pointwise.mean())


def test_delayed_effect_short_agrees_with_the_closed_form():
    """L = 3, noise 1: I(A; Z | S0) = 0.141 nats (credit_analysis.decision_information).
    An unfitted classifier (q = pi) gives exactly 0; the estimate must be within 0.04 of
    the closed form, and its CI must exclude 0 and include the closed form."""
    config = {"length": 3, "noise_std": 1.0}
    exact = decision_information("delayed_effect", config)["information"]
    result = probe(DELAYED, env_config=config, episodes=1500, horizons=[2, None], benchmark_summary=None)
    start = _start(result)
    assert abs(start["information"] - exact) < 0.04, (start, exact)
    assert start["ci"][0] > 0.05 and start["ci"][0] <= exact <= start["ci"][1] + 0.01
    # Horizon 2 sees only the chain's noise: I = 0, and its CI covers 0.
    zero = _start(result, "2")
    assert zero["ci"][0] <= 0.0 <= zero["ci"][1], zero
    # The chain steps carry nothing: per decision, the information is the start's / 4.
    end = result["horizons"][-1]
    assert end["information"] == pytest.approx(start["information"] / 4, abs=0.01)


def test_the_policy_is_never_trained():
    """A module as the stated policy: its weights, buffers, gradients and train/eval mode
    are the same after the probe, and the rollouts follow its probabilities."""
    from hca_rllib.module import HCATorchRLModule

    torch.manual_seed(1)
    module = HCATorchRLModule(observation_space=gymnasium.spaces.Box(0.0, 1.0, (2,), np.float32),
                              action_space=gymnasium.spaces.Discrete(2), inference_only=False, model_config={})
    with torch.no_grad():  # a policy that takes action 0 at the start with probability ~0.88
        module.pi.bias.copy_(torch.tensor([1.0, -1.0]))
    module.train()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    result = probe(DELAYED, env_config={"length": 3, "noise_std": 1.0}, module=module, episodes=300,
                   horizons=[None], benchmark_summary=None, keep_data=True)
    after = module.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in module.parameters())
    assert module.training
    assert result["policy"].startswith("trained policy")
    data = result["data"]
    start = data["time_steps"] == 0
    expected = torch.softmax(module.pi(module.pi_torso(torch.tensor([[1.0, 0.0]]))), -1)[0, 0].item()
    np.testing.assert_allclose(np.exp(data["log_pi"][start, 0]), expected, rtol=1e-5)
    assert abs((data["actions"][start] == 0).mean() - expected) < 0.06


def test_report_writes_markdown_json_and_plots(tmp_path):
    result = probe(DELAYED, env_config={"length": 3, "noise_std": 1.0}, episodes=200, horizons=[1, None],
                   benchmark_summary=None, keep_data=True)
    path = write_probe_report(result, tmp_path)
    text = path.read_text()
    assert "## Reading" in text and "information against horizon" in text
    for name in ("probe.json", "information_horizon.png", "pointwise_information.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_the_episode_end_is_reported_apart_from_the_fragment_horizons(tmp_path):
    """L = 3, noise 1: the return over the next step (K = 1) tells nothing about the first
    action, the return to the episode's end does (I(A; Z | S0) = 0.141 nats, a quarter of it
    per decision). The end horizon is reported on its own: its paired difference to the best
    fragment excludes 0, and by steps to the end the information sits at 4 steps (the start
    state, the same decisions as `start_state`)."""
    result = probe(DELAYED, env_config={"length": 3, "noise_std": 1.0}, episodes=800, horizons=[1, None],
                   benchmark_summary=None, keep_data=True)
    end, rows = result["episode_end"], {h["horizon"]: h for h in result["horizons"]}
    assert end["information"] == rows["end"]["information"] and end["ci"] == rows["end"]["ci"]
    assert end["best_fragment"]["horizon"] == "1"
    pointwise, held = result["data"]["pointwise"], result["data"]["held_out_rows"]
    assert end["end_minus_fragment"]["mean"] == pytest.approx(np.mean(pointwise["end"] - pointwise["1"]))
    assert end["end_minus_fragment"]["ci"][0] > 0.0
    assert rows["end"]["fit"]["improved"]
    by_steps = {item["steps"]: item for item in end["by_steps_to_end"]}
    assert list(by_steps) == ["1", "2-3", "4"]
    n_held = len(result["split"]["held_out_episodes"])
    assert [item["decisions"] for item in by_steps.values()] == [n_held, 2 * n_held, n_held]
    assert sum(item["decisions"] for item in by_steps.values()) == len(held)
    assert by_steps["4"]["information"] == pytest.approx(rows["end"]["start_state"]["information"])
    assert by_steps["4"]["ci"][0] > 0.05 and abs(by_steps["1"]["information"]) < 0.02
    assert any(line.startswith("Long horizon:") and "no fragment of 1 steps sees" in line
               for line in result["reading"]["text"])
    text = write_probe_report(result, tmp_path).read_text()
    assert "## Long horizon: the return to the episode's end" in text and "| 2-3 |" in text
    saved = __import__("json").loads((tmp_path / "probe.json").read_text())
    assert saved["episode_end"]["by_steps_to_end"][2]["steps"] == "4"
    # Without an end horizon there is no long-horizon block.
    short = probe(DELAYED, env_config={"length": 3, "noise_std": 1.0}, episodes=100, horizons=[1],
                  benchmark_summary=None)
    assert short["episode_end"] is None and not any(t.startswith("Long horizon") for t in short["reading"]["text"])


def test_a_fit_that_never_beat_q_equal_pi_is_read_as_a_bound_of_zero():
    h = {"horizon": "end", "information": 0.0, "ci": [0.0, 0.0],
         "concentration": {"share_above_threshold": 0.0, "top_share": float("nan"), "threshold": 0.05},
         "fit": {"improved": False}}
    r = reading({"horizons": [h], "peak_horizon": "end"}, [])
    assert r["level"] == "none detectable" and r["fit_never_improved"]
    assert any("0 by construction" in line for line in r["text"])
    h["fit"]["improved"] = True
    assert "fit_never_improved" not in reading({"horizons": [h], "peak_horizon": "end"}, [])


def test_reading_rules_are_measured_not_per_env():
    def result(info, low):
        h = {"horizon": "end", "information": info, "ci": [low, info + 0.01],
             "concentration": {"share_above_threshold": 0.02, "top_share": 0.9, "threshold": 0.05}}
        return {"horizons": [h], "peak_horizon": "end"}

    assert information_level(0.2, -0.001) == "none detectable"
    assert information_level(5e-4, 1e-4) == "very sparse" and information_level(0.2, 0.1) == "dense"
    rows = [{"task": f"t{i}", "information": v, "credit_minus_a2c": {"mix": {"mean": d, "ci": [d, d]},
                                                                      "hca_batch": {"mean": -d, "ci": [-d, -d]}}}
            for i, (v, d) in enumerate([(1e-4, -0.5), (2e-4, -0.4), (0.05, 0.3), (0.1, 0.2), (0.2, 0.1),
                                        (0.3, 0.4)])]
    r = reading(result(0.08, 0.05), rows)
    assert [row["task"] for row in r["benchmark_rows"]] == ["t3", "t2", "t4", "t5"]
    assert r["best_mode"] == "mix" and r["level"] == "moderate"
    low = reading(result(1e-4, 1e-5), rows)
    assert low["best_mode"] == "hca_batch"  # over t0-t3: +0.1 against mix's -0.1


# ------------------------------------------------------------------- command line


@pytest.mark.parametrize("args, message", [
    (["probe"], "probe: give --env (or --checkpoint)"),
    (["probe", "--env", "CartPol-v1"], "unknown environment id 'CartPol-v1'"),
    (["probe", "--env", "Pendulum-v1"], "Discrete action space"),
    (["probe", "--env", "CartPole-v1", "--horizons", "0,end"], "horizons: 0 must be >= 1"),
    (["probe", "--env", "CartPole-v1", "--held-out-fraction", "1.5"], "--held-out-fraction"),
    (["probe", "--env", "CartPole-v1", "--episodes", "3"], "--episodes"),
    (["probe", "--checkpoint", "/no/such/checkpoint"], "argument --checkpoint: no such directory: /no/such/checkpoint"),
    (["probe", "--env", "CartPole-v1", "--max-steps", "20"], "complete episode(s)"),
])
def test_bad_input_is_one_line_exit_2(args, message, tmp_path, capsys):
    from hca_rllib.cli import main

    try:
        code = main([*args, "--output", str(tmp_path / "out")])
    except SystemExit as exit:  # argparse
        code = exit.code
    assert code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("hca-rllib: error:") and len(stderr.strip().splitlines()) == 1, stderr
    assert message in stderr


def test_command_line_probe_writes_the_report(tmp_path, capsys):
    from hca_rllib.cli import main

    code = main(["probe", "--env", DELAYED, "--set-env", "length=3", "--set-env", "noise_std=1.0",
                 "--episodes", "200", "--horizons", "end", "--output", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "Information:" in out and (tmp_path / "probe.md").exists()


# ------------------------------------------------------------------- oracles (slow)

# Tolerance on the start state's information against the closed form I(A; Z | S0):
# |probe - closed| <= 0.03 + 0.1 * closed nats (key-to-door: 0.25 * closed) (the bound's bias and the noise of ~450
# held-out decisions at the start state; benchmarks/results/probe/summary.json gives the
# measured bias of every setting).
ORACLES = [
    ("delayed_effect", {"length": 10, "noise_std": 1.0}),
    ("delayed_effect", {"length": 30, "noise_std": 0.0}),
    ("delayed_effect", {"length": 30, "noise_std": 4.0}),
    ("delayed_effect", {"length": 60, "noise_std": 1.0}),
    ("key_to_door", {"distractor_length": 5, "apple_noise_std": 1.0}),
    ("key_to_door", {"distractor_length": 20, "apple_noise_std": 6.0}),
]


@pytest.mark.slow
@pytest.mark.parametrize("task, config", ORACLES, ids=lambda v: str(v))
def test_oracle_settings_agree_with_the_closed_form(task, config):
    exact = decision_information(task, config)["information"]
    env, env_config = (DELAYED, config) if task == "delayed_effect" else (
        KEY_TO_DOOR, {"apple_prob": 0.3, "apple_reward": 1.0, "door_reward": 5.0, **config})
    result = probe(env, env_config=env_config, episodes=1500, max_steps=100_000, horizons=[None],
                   benchmark_summary=None)
    start = _start(result)
    # Key-to-door's closed form is a Gaussian approximation of the apple sum (exact only in
    # the limit), which the probe exceeds by up to 0.07 nats: a wider relative tolerance.
    relative = 0.1 if task == "delayed_effect" else 0.25
    assert abs(start["information"] - exact) <= 0.03 + relative * exact, (start, exact)
    if exact > 0.1:  # clearly informative: the CI excludes 0
        assert start["ci"][0] > 0.0
    else:  # nearly none: the CI reaches down to a small value, or to the closed form
        assert start["ci"][0] <= max(0.02, exact)


# --------------------------------------------------------- a checkpoint's policy (slow)


def _files(root):
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.slow  # trains a short run (embedded Ray) before probing it
def test_probe_of_a_trained_checkpoint_uses_its_policy_and_never_trains_it(ray_local, tmp_path, monkeypatch,
                                                                          capsys):
    """`hca-rllib train` a few iterations on the delayed effect, then `hca-rllib probe
    --checkpoint RUN`: the probe's recorded start-state probabilities are the checkpoint
    module's own (to float precision; a uniform or freshly initialised policy gives other
    values), the actions follow them, and neither the module the probe ran nor the
    checkpoint's files change."""
    from hca_rllib import evaluation
    from hca_rllib.cli import main

    run = tmp_path / "run"
    assert main(["train", "--env", DELAYED, "--stop-timesteps", "1024", "--checkpoint-every", "0",
                 "--wandb", "off", "--no-tensorboard", "--num-envs-per-env-runner", "4",
                 "--set", "train_batch_size_per_learner=256", "--set", "lr=0.01", "--output", str(run)]) == 0
    checkpoint = evaluation.find_checkpoint(run)
    files = _files(checkpoint)
    reference = evaluation.load_checkpoint_module(checkpoint)
    with torch.no_grad():
        _, logits = reference.policy_outputs(torch.tensor([[1.0, 0.0]]))  # the start state's observation
    expected = torch.softmax(logits.double(), -1)[0].numpy()
    assert abs(expected[0] - 0.5) > 1e-4  # trained: not the uniform policy the probe uses by default

    used = []

    def load_and_keep(path):
        module = evaluation_load(path)
        used.append((module, {k: v.clone() for k, v in module.state_dict().items()}))
        return module

    evaluation_load = evaluation.load_checkpoint_module
    monkeypatch.setattr(evaluation, "load_checkpoint_module", load_and_keep)
    capsys.readouterr()
    out = tmp_path / "probe"
    assert main(["probe", "--checkpoint", str(run), "--episodes", "400", "--horizons", "1,end",
                 "--output", str(out)]) == 0
    assert "Information:" in capsys.readouterr().out
    saved = __import__("json").loads((out / "probe.json").read_text())
    assert saved["env"] == DELAYED and saved["policy"] == f"trained policy (checkpoint {checkpoint})"
    record = saved["policy_record"]
    np.testing.assert_allclose(record["start_mean_probabilities"], expected, rtol=1e-5)
    n = record["start_decisions"]
    assert n == 400 and abs(record["start_action_frequencies"][0] - expected[0]) < 4 * math.sqrt(0.25 / n)
    # The module the probe ran: unchanged weights and buffers, no gradients; the files too.
    (module, before), = used
    after = module.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in module.parameters())
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in after.items())
    assert _files(checkpoint) == files
