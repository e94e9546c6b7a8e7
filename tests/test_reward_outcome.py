"""The reward outcome (`hindsight={"outcome": "reward", "window": W}`) in the module, the
config and the learner: one classifier row per (decision, reward event) pair, the
remainder's value head, the weights of `credit.reward_outcome_weights` on the batch, and
A2C's weights exactly while the trust is 0. The estimator's maths: tests/test_reward_credit.py;
both learner paths on the same episodes: tests/test_learner_path.py."""

from __future__ import annotations

import copy

import gymnasium
import numpy as np
import pytest
import torch

from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing

from hca_rllib import A2CConfig, HCAConfig, credit
from hca_rllib.module import (CREDIT_WEIGHTS, HINDSIGHT_LOGITS, REMAINDER_TARGETS, REMAINDER_VALUES, RETURNS,
                              WINDOW_REWARDS, HCATorchRLModule)

from test_learner_path import MID, NUM_ACTIONS, Recorder, build, make_episodes

OBS = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
WINDOW = 3


def make_module(inference_only=False, **hindsight):
    torch.manual_seed(0)
    return HCATorchRLModule(observation_space=OBS, action_space=gymnasium.spaces.Discrete(NUM_ACTIONS),
                            inference_only=inference_only,
                            model_config={"hindsight": {"outcome": "reward", "window": WINDOW, "hiddens": [8],
                                                        **hindsight}})


def window_batch(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 4, generator=g) * 2 - 1
    window = torch.zeros(n, WINDOW)
    window[0, 0], window[0, 2], window[3, 1], window[5, 0] = 1.0, -2.0, 0.5, 3.0
    return obs, window


# --------------------------------------------------------------------------- module


def test_one_classifier_row_per_reward_event_with_its_reward_and_lag():
    module = make_module()
    obs, window = window_batch()
    rows, lags = module.outcome_pairs(window)
    assert rows.tolist() == [0, 0, 3, 5] and lags.tolist() == [0, 2, 1, 0]
    latent, logits = module.policy_outputs(obs)
    inputs = module.hindsight_input(obs, latent, window)
    width = latent.shape[1]
    assert inputs.shape == (4, width + 1 + WINDOW)
    torch.testing.assert_close(inputs[:, :width], latent[rows].detach())
    # The lag one-hot over the window, after the encoded reward.
    assert torch.equal(inputs[:, width + 1:], torch.nn.functional.one_hot(lags, WINDOW).float())
    # Each event's reward as the outcome encoder codes it (standardised by the running
    # statistics of the event rewards: the zeros of the window are not events).
    module.update_return_statistics(window[rows, lags])
    events = torch.tensor([1.0, -2.0, 0.5, 3.0])
    coded = module.hindsight_input(obs, latent, window)[:, width]
    torch.testing.assert_close(coded, (events - events.mean()) / events.std())
    h = module.hindsight_logits(obs, latent, logits, window)
    # policy_relative: h == pi exactly until the classifier learns.
    assert h.shape == (4, NUM_ACTIONS) and torch.equal(h, logits[rows].detach())


def test_remainder_head_is_training_only_and_only_for_the_reward_outcome():
    full, light = make_module(), make_module(inference_only=True)
    assert full.remainder_vf is not None and getattr(light, "remainder_vf", None) is None
    assert "remainder_vf" in full.get_non_inference_attributes()
    assert not any(k.startswith("remainder_vf") for k in light.state_dict())
    returns_module = HCATorchRLModule(observation_space=OBS, action_space=gymnasium.spaces.Discrete(NUM_ACTIONS),
                                      model_config={})
    assert returns_module.remainder_vf is None and returns_module.outcome_column == RETURNS
    obs, window = window_batch()
    out = full.forward_train({Columns.OBS: obs, WINDOW_REWARDS: window})
    assert out[REMAINDER_VALUES].shape == (6,) and out[HINDSIGHT_LOGITS].shape == (4, NUM_ACTIONS)
    assert full.outcome_column == WINDOW_REWARDS
    assert REMAINDER_VALUES not in returns_module.forward_train({Columns.OBS: obs, RETURNS: torch.ones(6)})
    # A2C's module builds no classifier and no remainder head; its values are V alone
    plain = HCATorchRLModule(observation_space=OBS, action_space=gymnasium.spaces.Discrete(NUM_ACTIONS),
                             model_config={"uses_hindsight": False})
    values, remainder = plain.values_and_remainder(obs)
    assert plain.hindsight is None and remainder is None
    torch.testing.assert_close(values, plain.compute_values({Columns.OBS: obs}))
    with pytest.raises(RuntimeError, match="inference-only copy"):
        light.values_and_remainder(obs)


def test_no_reward_event_gives_no_classifier_rows():
    module = make_module()
    obs, _ = window_batch()
    latent, logits = module.policy_outputs(obs)
    assert module.hindsight_logits(obs, latent, logits, torch.zeros(6, WINDOW)).shape == (0, NUM_ACTIONS)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("credit_mode", ["hca", "c2a2c"])
def test_one_hot_credit_modes_refuse_the_reward_outcome_in_one_line(credit_mode):
    config = HCAConfig().training(credit=credit_mode, hindsight={"outcome": "reward"})
    with pytest.raises(ValueError) as error:
        config.validate()
    message = str(error.value)
    assert "\n" not in message and "hindsight.outcome='reward'" in message and credit_mode in message


@pytest.mark.parametrize("window", [0, -1, True, 2.5, "8", 5000])
def test_bad_window_is_one_line(window):
    with pytest.raises(ValueError, match=r"^hindsight.window must be an integer in \[1, 4096\], got [^\n]*$"):
        HCAConfig().training(hindsight={"outcome": "reward", "window": window})


def test_a_window_longer_than_the_fragment_is_one_line():
    """Pairs do not cross a fragment unless the window is carried across: a window past it
    would silently credit nothing."""
    config = (HCAConfig().environment("CartPole-v1")
              .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16)
              .training(hindsight={"outcome": "reward", "window": 17}))
    with pytest.raises(ValueError, match=r"^hindsight.window=17 is longer than the rollout fragment "
                                         r"\(16 steps\): [^\n]*hindsight.across_fragments=True$"):
        config.validate()
    config.training(hindsight={"window": 16}).validate()  # the whole fragment is fine
    config.training(hindsight={"window": 17, "across_fragments": True}).learners(learner_path="auto").validate()
    # "auto": the fragment RLlib derives from the batch (64 / 2 envs = 32 steps)
    auto = (HCAConfig().environment("CartPole-v1")
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length="auto")
            .training(train_batch_size_per_learner=64, hindsight={"outcome": "reward", "window": 33}))
    with pytest.raises(ValueError, match=r"\(32 steps\)"):
        auto.validate()
    # whole episodes per fragment: no fragment boundary to cross
    auto.env_runners(batch_mode="complete_episodes").validate()


def test_bad_outcome_is_one_line():
    with pytest.raises(ValueError, match=r"^hindsight.outcome must be one of \['return', 'reward'\], got 'rewards'$"):
        HCAConfig().training(hindsight={"outcome": "rewards"})


# --------------------------------------------------------------------------- learner


def reward_config(**training):
    config = HCAConfig().training(credit="expected_hca", gamma=0.9, lr=3e-3, hindsight_lr=3e-3,
                                  hindsight={"hiddens": [16], "outcome": "reward", "window": WINDOW},
                                  **training)
    return config.rl_module(model_config={"fcnet_hiddens": [16, 16]}).debugging(seed=3)


@pytest.mark.parametrize("path", ["lean", "rllib"])
def test_trust_zero_gives_a2c_weights_exactly(path):
    # A trained classifier (h != pi) whose evidence is wiped: the update's trust is 0, and
    # its weights are A2C's, `gae * onehot(a_t)`, with the GAE from the value targets and
    # the values before the update (not from the weights themselves).
    learner, recorder = build(reward_config(hindsight_epochs=3), path, 1)
    for seed in range(3):
        learner.update(episodes=make_episodes(seed))
    module = learner.module[MID].unwrapped()
    module.trust_evidence.zero_()
    before = copy.deepcopy(module)
    results = learner.update(episodes=make_episodes(3))
    assert float(results[MID]["credit/trust"].peek()) == 0.0
    batch = recorder.batches[-1]
    with torch.no_grad():
        obs, window = batch[Columns.OBS], batch[WINDOW_REWARDS]
        latent, logits = before.policy_outputs(obs)
        values, _ = before.values_and_remainder(obs, latent)
        before.update_return_statistics(window[window != 0])
        h = torch.softmax(before.hindsight_logits(obs, latent, logits, window), -1)
    rows, _ = before.outcome_pairs(window)
    assert (h - torch.softmax(logits, -1)[rows]).abs().max() > 1e-3  # the classifier has moved
    gae = batch[Postprocessing.VALUE_TARGETS] - values
    expected = credit.one_hot_weights(gae, batch[Columns.ACTIONS], NUM_ACTIONS)
    torch.testing.assert_close(batch[CREDIT_WEIGHTS], expected, atol=1e-5, rtol=1e-5)
    # And bit for bit A2C's weights of the batch's own advantages (the blend at 0).
    assert torch.equal(batch[CREDIT_WEIGHTS], credit.one_hot_weights(
        batch[Postprocessing.ADVANTAGES], batch[Columns.ACTIONS], NUM_ACTIONS))


def test_weights_on_the_batch_are_the_estimators_given_the_held_out_classifier():
    # Trust off (the pure estimator): the batch's W is reward_outcome_weights of the
    # classifier as it was before training on the batch, with its remainder head's values.
    config = reward_config(trust=None, hindsight_epochs=3)
    learner, recorder = build(config, "lean", 1)
    learner.update(episodes=make_episodes(0))  # the classifier and remainder head move
    module = learner.module[MID].unwrapped()
    before = copy.deepcopy(module)
    episodes = make_episodes(1)
    learner.update(episodes=copy.deepcopy(episodes))
    batch = recorder.batches[1]
    obs, actions, window = batch[Columns.OBS], batch[Columns.ACTIONS].long(), batch[WINDOW_REWARDS]
    assert int((window != 0).sum()) > 5
    with torch.no_grad():
        latent, logits = before.policy_outputs(obs)
        values, remainder = before.values_and_remainder(obs, latent)
        before.update_return_statistics(window[window != 0])
        rows, lags = before.outcome_pairs(window)
        h = torch.softmax(before.hindsight_logits(obs, latent, logits, window), -1)
    pi = torch.softmax(logits, -1)
    h_probs = pi.unsqueeze(1).expand(-1, WINDOW, -1).clone()
    h_probs[rows, lags] = h
    gae = batch[Postprocessing.ADVANTAGES]
    # lambda 1: the value targets are the returns Z (the remainder targets are Z - S).
    returns = batch[Postprocessing.VALUE_TARGETS]
    torch.testing.assert_close(batch[REMAINDER_TARGETS], returns - credit.in_window_returns(window, 0.9))
    expected = credit.reward_outcome_weights(
        actions=actions, gae=gae, returns=returns,
        remainder_values=remainder, window_rewards=window, pi_probs=pi, h_probs=h_probs, gamma=0.9)
    torch.testing.assert_close(batch[CREDIT_WEIGHTS], expected["weights"], atol=1e-5, rtol=1e-5)
    # The pure estimator differs from A2C's once the classifier has moved.
    assert not torch.allclose(batch[CREDIT_WEIGHTS], credit.one_hot_weights(gae, actions, NUM_ACTIONS), atol=1e-4)


def test_pairs_give_the_dense_weights():
    g = torch.Generator().manual_seed(0)
    n, actions_n = 40, 4
    window = torch.randn(n, WINDOW, generator=g, dtype=torch.float64) * (torch.rand(n, WINDOW, generator=g) < 0.3)
    pi = torch.softmax(torch.randn(n, actions_n, generator=g, dtype=torch.float64), -1)
    h = torch.softmax(torch.randn(n, WINDOW, actions_n, generator=g, dtype=torch.float64), -1)
    rows, lags = window.nonzero().unbind(-1)
    common = dict(actions=torch.randint(0, actions_n, (n,), generator=g), gae=torch.randn(n, generator=g),
                  returns=torch.randn(n, generator=g), remainder_values=torch.randn(n, generator=g),
                  window_rewards=window, pi_probs=pi, gamma=0.95, trust=torch.tensor(0.4), scale=1.7)
    dense = credit.reward_outcome_weights(h_probs=h, **common)
    sparse = credit.reward_outcome_weights(pairs=(rows, lags, h[rows, lags]), **common)
    for key in dense:
        torch.testing.assert_close(sparse[key], dense[key], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="exactly one"):
        credit.reward_outcome_weights(h_probs=h, pairs=(rows, lags, h[rows, lags]), **common)


def test_the_probe_reads_a_reward_outcome_run_with_its_return_classifier():
    from hca_rllib.probe.classifier import build_classifier

    module = build_classifier(OBS, gymnasium.spaces.Discrete(NUM_ACTIONS),
                              {"hindsight": {"outcome": "reward", "window": 8}})
    assert module.hindsight_spec.outcome == "return" and module.outcome_column == RETURNS
    with pytest.raises(ValueError, match=r"^the reward outcome takes window rewards of shape \[B, 3\], got \(6,\)$"):
        make_module().outcome_pairs(torch.ones(6))


def test_a2c_trains_the_reward_classifier_beside_an_unchanged_update():
    config = A2CConfig().training(hindsight_loss_coeff=1.0, hindsight={"hiddens": [16], "outcome": "reward",
                                                                      "window": WINDOW})
    config = config.rl_module(model_config={"fcnet_hiddens": [16, 16]}).debugging(seed=3)
    learner, recorder = build(config, "lean", 1)
    for seed in range(3):
        results = learner.update(episodes=make_episodes(seed))
    batch = recorder.batches[-1]
    assert torch.equal(batch[CREDIT_WEIGHTS], credit.one_hot_weights(
        batch[Postprocessing.ADVANTAGES], batch[Columns.ACTIONS], NUM_ACTIONS))
    assert float(results[MID]["hindsight_loss"].peek()) > 0
    # A2C's update: no remainder head, no remainder loss.
    assert learner.module[MID].unwrapped().remainder_vf is None and "remainder_vf_loss" not in results[MID]
    assert REMAINDER_TARGETS not in batch


@pytest.mark.parametrize("path", ["lean", "rllib"])
@pytest.mark.parametrize("share", [True, False], ids=["shared_torso", "separate_value_torso"])
def test_at_trust_zero_the_policy_and_value_learn_exactly_as_under_a2c(share, path):
    """Trust 0 is A2C in the update, not only in the weights: the classifier reads a
    detached latent and the remainder head V's features detached, so neither reaches the
    policy or the value (with a torso shared by both, as on images, included), and the
    gradient clipping (tight here, so that it acts on every step) sees A2C's gradients
    alone."""
    model = {"fcnet_hiddens": [16, 16], "vf_share_layers": share}
    reward = reward_config(hindsight_epochs=2, grad_clip=0.05).rl_module(model_config=model)
    a2c = A2CConfig().training(gamma=0.9, lr=3e-3, grad_clip=0.05).rl_module(model_config=model).debugging(seed=3)
    (learner, _), (a2c_learner, _) = build(reward, path, 1), build(a2c, path, 1)
    module, a2c_module = learner.module[MID].unwrapped(), a2c_learner.module[MID].unwrapped()
    start = {k: v.clone() for k, v in a2c_module.state_dict().items()}
    module.load_state_dict(start, strict=False)  # A2C's parameters; the credit heads as built
    for seed in range(4):
        module.trust_evidence.zero_()  # no evidence: this update's trust is 0
        learner.update(episodes=make_episodes(seed))
        a2c_learner.update(episodes=make_episodes(seed))
        assert float(module.trust) == 0.0
    params = dict(module.named_parameters())
    for name, value in a2c_module.named_parameters():
        assert torch.equal(params[name], value), name
        assert not torch.equal(value, start[name]), name  # it did learn


@pytest.mark.parametrize("path", ["lean", "rllib"])
def test_the_bias_trust_starts_at_zero_and_accumulates_its_statistics(path):
    """`trust="bias"` on the reward outcome: the first update has no evidence (trust 0:
    A2C's weights); each update adds its two statistics and their variances."""
    learner, recorder = build(reward_config(trust="bias", hindsight_epochs=2), path, 1)
    module = learner.module[MID].unwrapped()
    results = learner.update(episodes=make_episodes(0))
    assert float(results[MID]["credit/trust"].peek()) == 0.0
    batch = recorder.batches[-1]
    assert torch.equal(batch[CREDIT_WEIGHTS], credit.one_hot_weights(
        batch[Postprocessing.ADVANTAGES], batch[Columns.ACTIONS], NUM_ACTIONS))
    assert "credit/trust_scale" not in results[MID]
    first = module.trust_evidence.clone()
    assert float(first[0, 1]) > 0  # the difference's variance; the untrained classifier's credit is 0
    assert float(first[0, 2]) == 0.0 and float(first[0, 3]) == 0.0
    learner.update(episodes=make_episodes(1))
    second = module.trust_evidence.clone()
    assert float(second[0, 1]) > credit.EVIDENCE_DECAY ** 2 * float(first[0, 1])
    assert float(second[0, 3]) > 0  # the classifier has trained: its credit has a spread


@pytest.mark.parametrize("credit_mode", ["a2c", "expected_hca", "across_fragments"])
def test_at_trust_zero_a_run_is_a2cs_run(ray_local, credit_mode):
    """The credit heads take their initial weights from a generator of their own, so a run
    whose trust stays 0 samples the same actions as A2C's run with the same seed and ends
    with the same weights: A2C with the reward classifier trained beside it, and the
    reward outcome with `trust="bias"` over its first two updates (the first batch's
    evidence holds no hindsight credit: the classifier was untrained), also with its
    window carried across fragments (the second update's batch carries earlier rows,
    which pass through the module apart from the fragments' own)."""
    def run(config):
        config = (config.environment("CartPole-v1")
                  .env_runners(num_env_runners=0, num_envs_per_env_runner=2, rollout_fragment_length=16)
                  .training(train_batch_size_per_learner=32).debugging(seed=11))
        if credit_mode == "across_fragments":  # on the learner path that carries the window, both
            config.learners(learner_path="lean")
        algo = config.build_algo()
        try:
            trusts = []
            for _ in range(2):
                result = algo.train()
                trusts.append(result["learners"]["default_policy"].get("credit/trust", 0.0))
            module = algo.learner_group._learner.module["default_policy"].unwrapped()
            return {n: p.detach().clone() for n, p in module.named_parameters()}, trusts
        finally:
            algo.stop()

    hindsight = {"outcome": "reward", "window": 8}
    if credit_mode == "across_fragments":
        hindsight = {"outcome": "reward", "window": 24, "across_fragments": True}
    other = (A2CConfig().training(hindsight_loss_coeff=1.0, hindsight=hindsight) if credit_mode == "a2c"
             else HCAConfig().training(trust="bias", hindsight=hindsight))
    a2c_params, _ = run(A2CConfig())
    params, trusts = run(other)
    assert trusts == [0.0, 0.0]
    for name, value in a2c_params.items():
        assert torch.equal(params[name], value), name
