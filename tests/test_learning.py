"""Learning with fixed seeds: A2C solves CartPole, no credit mode collapses, and on the
noisy delayed-effect task the credit modes find the good first action at least as
reliably as A2C. Budgets and margins come from `benchmarks/credit_modes.py`."""

import numpy as np
import pytest
import torch

from ray.rllib.callbacks.callbacks import RLlibCallback

from hca_rllib import A2CConfig, HCAConfig
from hca_rllib.credit import HINDSIGHT_CREDIT_MODES  # the modes that train the classifier
from scripts import import_benchmark

pytestmark = pytest.mark.learning


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Seeded runs repeat exactly only with one intra-op thread (multi-threaded CPU
    kernels may sum in a different order), so the margins below are reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class FullEpisodeReturns(RLlibCallback):
    """Full-episode returns (RLlib hands `on_episode_end` only the last chunk)."""

    returns: list = []

    def on_episode_end(self, *, episode, prev_episode_chunks=(), **kwargs):
        FullEpisodeReturns.returns.append(
            episode.get_return() + sum(chunk.get_return() for chunk in prev_episode_chunks)
        )


def train(config, env_steps):
    FullEpisodeReturns.returns = []
    algo = config.callbacks(FullEpisodeReturns).build_algo()
    try:
        steps = 0
        while steps < env_steps:
            steps = algo.train()["num_env_steps_sampled_lifetime"]
        module = algo.learner_group._learner.module["default_policy"]
        return list(FullEpisodeReturns.returns), module
    finally:
        algo.stop()


def config_for(credit, env, seed, **env_config):
    config = A2CConfig() if credit == "a2c" else HCAConfig().training(credit=credit)
    return config.environment(env, env_config=env_config).debugging(seed=seed)


CARTPOLE_STEPS = 200_000
_cartpole_a2c = {}


def best_rolling_mean(returns, window=20) -> float:
    """The best mean over `window` consecutive episodes: the level a run reached within
    its budget. (A2C on CartPole is known to fall back after solving it, so the
    last-window mean at a fixed budget is mostly noise.)"""
    return float(np.convolve(returns, np.ones(window) / window, "valid").max())


def cartpole_a2c_score():
    if "score" not in _cartpole_a2c:
        returns, _ = train(config_for("a2c", "CartPole-v1", seed=0), CARTPOLE_STEPS)
        _cartpole_a2c["score"] = best_rolling_mean(returns)
    return _cartpole_a2c["score"]


def test_a2c_solves_cartpole(ray_local):
    """Mean return over 20 consecutive episodes reaches 400 within 200k env steps."""
    print(f"cartpole a2c: best 20-episode mean {cartpole_a2c_score():.1f}")
    assert cartpole_a2c_score() >= 400


@pytest.mark.parametrize("credit", HINDSIGHT_CREDIT_MODES)
def test_credit_mode_does_not_collapse_on_cartpole(ray_local, credit):
    returns, _ = train(config_for(credit, "CartPole-v1", seed=0), CARTPOLE_STEPS)
    score = best_rolling_mean(returns)
    print(f"cartpole {credit}: best 20-episode mean {score:.1f}, A2C {cartpole_a2c_score():.1f}")
    assert score >= 0.8 * cartpole_a2c_score(), (credit, score, cartpole_a2c_score())


# The noisy delayed effect of `benchmarks/credit_modes.py` (`delayed_effect_noisy`):
# +-1 decided by the first action, then 20 steps of N(0, 2^2) noise (sd 8.9 in all).
DELAY = dict(length=20, noise_std=2.0)
DELAY_STEPS = 60_000
DELAY_SEEDS = (0, 1, 2)


def good_first_action_probability(module) -> float:
    with torch.no_grad():
        logits = module.pi(module.pi_torso(torch.tensor([[1.0, 0.0]])))
    return float(torch.softmax(logits, -1)[0, 0])


_delayed = {}


def delayed_effect_probabilities(method):
    if method not in _delayed:
        credit, overrides = METHODS[method]
        probabilities = []
        for seed in DELAY_SEEDS:
            config = config_for(credit, "HCA/DelayedEffect-v0", seed, **DELAY).training(**overrides)
            probabilities.append(good_first_action_probability(train(config, DELAY_STEPS)[1]))
        _delayed[method] = probabilities
    return _delayed[method]


# A2C here trains the classifier too (for its diagnostics only; it never touches the
# policy), so that all methods share one random-number path and each seed is a paired
# comparison: with the local EnvRunner and learner in one process, building different
# networks shifts the action sampling, and that alone moves pi(good) by about 0.1 here.
METHODS = {
    "a2c": ("a2c", {"hindsight_loss_coeff": 1.0}),
    "hca": ("hca", {}),
    "c2a2c": ("c2a2c", {}),
    "expected_hca": ("expected_hca", {}),
}


@pytest.mark.parametrize("method", HINDSIGHT_CREDIT_MODES)
def test_credit_modes_find_the_delayed_effect_as_reliably_as_a2c(ray_local, method):
    a2c = delayed_effect_probabilities("a2c")
    ours = delayed_effect_probabilities(method)
    print(f"delayed effect pi(good first action): {method} {np.round(ours, 3)}, A2C {np.round(a2c, 3)}")
    # Not worse than A2C by more than 0.05 on average over three seeds.
    assert np.mean(ours) >= np.mean(a2c) - 0.05, (method, ours, a2c)


# Key-to-door with apple noise 6 (`benchmarks/credit_analysis.py` key_to_door_L20_sd6):
# the key, picked at step 1, pays 5 at the door 21 steps later; 20 rooms of apples
# (p 0.3, reward N(1, 6^2)) hide it. The benchmark (5 seeds): the default +0.074 over A2C
# at the learning rate 7e-4; -0.001 against A2C with both at twice it.
KEY_TO_DOOR = dict(distractor_length=20, apple_noise_std=6.0, apple_prob=0.3, apple_reward=1.0,
                   door_reward=5.0)
KEY_TO_DOOR_STEPS = 30_000


def key_probability(module) -> float:
    with torch.no_grad():
        logits = module.pi(module.pi_torso(torch.tensor([[1.0, 0.0, 0.0, 0.0]])))
    return float(torch.softmax(logits, -1)[0, 1])


def test_default_credit_takes_the_key_more_reliably_than_a2c(ray_local):
    """The package default (expected_hca with the evidence trust and the [128, 128]
    classifier, 4 extra passes) against A2C, both at the learning rate 7e-4, paired on
    seeds 0-9: better on at least 8 of the 10 seeds and by at least 0.03 on average. (What
    it guards is the default's behaviour, not a credit effect: A2C at twice the learning
    rate gains as much here, `benchmarks/results/lr_control/`.) Measured: +0.062 and 9 of
    10 on the lean learner path, +0.052 and 9 of 10 on RLlib's (which rounds the credit
    differently, so its runs are another draw of the same seeds). With no real difference
    (seed-to-seed sd of the paired difference about 0.06) the mean alone would clear 0.03
    with probability about 0.06 (z = 1.6), and 8 of 10 seeds with 0.055. (Five seeds held
    no margin across the two draws: +0.057 and +0.038.)"""
    a2c, ours = [], []
    for seed in range(10):
        config = config_for("a2c", "HCA/KeyToDoor-v0", seed, **KEY_TO_DOOR).training(hindsight_loss_coeff=1.0)
        a2c.append(key_probability(train(config, KEY_TO_DOOR_STEPS)[1]))
        config = HCAConfig().environment("HCA/KeyToDoor-v0", env_config=KEY_TO_DOOR).debugging(seed=seed)
        ours.append(key_probability(train(config, KEY_TO_DOOR_STEPS)[1]))
    print(f"key-to-door pi(pick key): default {np.round(ours, 3)}, A2C {np.round(a2c, 3)}")
    assert sum(o > a for o, a in zip(ours, a2c)) >= 8, (ours, a2c)
    assert np.mean(ours) >= np.mean(a2c) + 0.03, (ours, a2c)


# The delayed effect at length 30 with N(0, 2^2) noise on every chain step
# (`benchmarks/credit_analysis.py` delayed_effect_L30_sd2): the return carries 0.003 nats
# about the first action, so return-conditioned credit has nothing to work with. The
# reward outcome (`hindsight.outcome="reward"`) conditions on each reward separately:
# the noise rewards tell nothing about the action, so with `h_k == pi` their terms drop
# out of the gradient, and only the final +-1 (and its lag) credits the first action.
# Over seeds 0-4 of `credit_analysis.py` that buys +0.07 [-0.05, +0.18] in pi(good first
# action) here and +0.10 [+0.00, +0.22] at noise 1: too close to the seed noise for a
# learning test; the test below measures what it buys on the gradient itself
# (`benchmarks/decision_gradient.py`).
GRADIENT_STEPS = 10_000


def test_reward_outcome_takes_the_noise_rewards_out_of_the_decisions_gradient(ray_local):
    """What the reward outcome buys on this task, on the learner's own batches after 10k
    steps (the first action still uncertain), seeds 0-3. At the decision, A2C's logit
    gradient carries the 30 noise rewards (`Z - V` with sd about 10); the reward outcome's
    carries `sum_k gamma^k r_{t+k} (h_k - pi)`, which the classifier's `h_k == pi` on the
    noise rewards empties.

    Measured over seeds 0-5 (`benchmarks/results/decision_gradient/`): its mean squared
    logit gradient is 0.02-0.08 of A2C's on every seed (up to 0.11 on RLlib's learner
    path, another draw). Its mean toward the good action, +0.20 pooled (se 0.13 between
    seeds) against the exact +0.37, ranges from -0.20 to +0.61 seed by seed: the learned
    classifier's error persists over a run's iterations (sd between seeds 0.33, within a
    run's decisions se 0.09). The test asks a second moment below 0.15 of A2C's on each
    seed, and a mean over the seeds' decisions of at least +0.1 (lean path +0.19, RLlib's
    +0.16): an estimator that kept the noise, or dropped the credit with it, fails."""
    decision_gradient = import_benchmark("decision_gradient")
    per_seed = [decision_gradient.decision_gradients(seed, GRADIENT_STEPS) for seed in range(4)]
    for seed, (ours, a2c, ours_good, a2c_good, exact) in enumerate(per_seed):
        print(f"seed {seed}: mean squared logit gradient at the decision: reward outcome {float(ours.mean()):.4f}, "
              f"A2C {float(a2c.mean()):.4f}; toward the good action {float(ours_good.mean()):+.4f} "
              f"(A2C {float(a2c_good.mean()):+.4f}), exact {float(exact.mean()):+.4f}")
        assert len(ours_good) >= 100
        assert ours.mean() < 0.15 * a2c.mean(), (seed, float(ours.mean()), float(a2c.mean()))
    toward_good = torch.cat([parts[2] for parts in per_seed]).mean()
    assert toward_good >= 0.1, float(toward_good)
