"""The known-answer tasks of docs/method.md section 5 and their closed forms.

Monte Carlo checks use fixed seeds and a tolerance of a few standard errors, so they
test the numbers, not just that the code runs.
"""

from __future__ import annotations

import re
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from scipy import integrate

from hca_rllib.envs import (
    KNOWN_ANSWER_ENV_IDS,
    AmbiguousBandit,
    DelayedEffect,
    DelayedRewardWrapper,
    Shortcut,
    bandit_advantages,
    bandit_exact_posterior,
    bandit_mutual_information,
    bandit_q_values,
    bandit_return_density,
    make_delayed_reward,
    register_known_answer_envs,
)

STANDARD_ERRORS = 4.0  # tolerance of the Monte Carlo checks


def assert_close_in_standard_errors(samples: np.ndarray, expected: float) -> None:
    """The sample mean lies within STANDARD_ERRORS standard errors of ``expected``."""
    standard_error = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(samples.mean() - expected) <= STANDARD_ERRORS * standard_error, (
        f"mean {samples.mean():.4f} vs expected {expected:.4f} "
        f"(standard error {standard_error:.4f})"
    )


def assert_variance_close_in_standard_errors(samples: np.ndarray, expected: float) -> None:
    """The sample variance lies within STANDARD_ERRORS standard errors of ``expected``."""
    squared_deviations = (samples - samples.mean()) ** 2
    standard_error = squared_deviations.std(ddof=1) / np.sqrt(samples.size)
    assert abs(squared_deviations.mean() - expected) <= STANDARD_ERRORS * standard_error, (
        f"variance {squared_deviations.mean():.4f} vs expected {expected:.4f} "
        f"(standard error {standard_error:.4f})"
    )


def sample_bandit_returns(rng: np.random.Generator, actions: np.ndarray) -> np.ndarray:
    """Returns of the default bandit for the given actions, drawn with numpy directly."""
    p_hi = np.where(actions == AmbiguousBandit.ACTION_A, 0.9, 0.1)
    hi = rng.random(actions.size) < p_hi
    return rng.normal(np.where(hi, 2.0, 1.0), 1.5)


def integrate_over_returns(function) -> float:
    value, _ = integrate.quad(function, -25.0, 25.0, points=[1.0, 2.0], limit=200)
    return value


def run_episode(env: gymnasium.Env, actions, seed: int | None = None):
    """Step through ``actions`` (cycled) until the episode ends; return the transitions."""
    observation, _ = env.reset(seed=seed)
    observations, rewards, infos = [observation], [], []
    terminated = truncated = False
    step = 0
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(actions[step % len(actions)])
        observations.append(observation)
        rewards.append(reward)
        infos.append(info)
        step += 1
    return observations, np.array(rewards), terminated, truncated, infos


# ---------------------------------------------------------------------------------------
# Ambiguous bandit: closed forms.
# ---------------------------------------------------------------------------------------


def test_bandit_q_values_and_advantages_match_the_note():
    assert bandit_q_values() == pytest.approx((1.9, 1.1))
    assert bandit_advantages(0.5) == pytest.approx((0.4, -0.4))
    for p in (0.0, 0.2, 0.7, 1.0):
        advantage_a, advantage_b = bandit_advantages(p)
        assert (advantage_a, advantage_b) == pytest.approx((0.8 * (1 - p), -0.8 * p))
        # Advantages average to zero under the policy.
        assert p * advantage_a + (1 - p) * advantage_b == pytest.approx(0.0, abs=1e-12)


def test_bandit_empirical_q_values_match_closed_form():
    env = AmbiguousBandit()
    env.reset(seed=123)
    episodes_per_action = 20_000
    both_actions = (AmbiguousBandit.ACTION_A, AmbiguousBandit.ACTION_B)
    for action, expected_q in zip(both_actions, bandit_q_values()):
        rewards = np.empty(episodes_per_action)
        hi_count = 0
        for episode in range(episodes_per_action):
            env.reset()
            _, rewards[episode], terminated, truncated, info = env.step(action)
            assert terminated and not truncated
            hi_count += info["hi"]
        assert_close_in_standard_errors(rewards, expected_q)
        # Var = 0.9 * 0.1 * (2 - 1)^2 + 1.5^2 for either action.
        assert_variance_close_in_standard_errors(rewards, 0.09 + 1.5**2)
        expected_hi = 0.9 if action == AmbiguousBandit.ACTION_A else 0.1
        hi_rate_error = np.sqrt(expected_hi * (1 - expected_hi) / episodes_per_action)
        assert abs(hi_count / episodes_per_action - expected_hi) <= STANDARD_ERRORS * hi_rate_error


def test_bandit_same_seed_same_episode():
    first, second = AmbiguousBandit(), AmbiguousBandit()
    first.reset(seed=7)
    second.reset(seed=7)
    assert first.step(0)[1] == second.step(0)[1]


def test_bandit_return_densities_are_normalised_mirrors():
    z = np.linspace(-3.0, 6.0, 7)
    assert integrate_over_returns(lambda x: bandit_return_density(x, 0)) == pytest.approx(1.0)
    assert integrate_over_returns(lambda x: bandit_return_density(x, 1)) == pytest.approx(1.0)
    # Mirror: f_b(z) = f_a(3 - z) because the means 1 and 2 are symmetric about 1.5.
    np.testing.assert_allclose(bandit_return_density(z, 1), bandit_return_density(3.0 - z, 0))


def test_exact_posterior_is_calibrated_by_numerical_integration():
    # E_z[h(a|z)] = P(A = a) = p under the mixture p f_a + (1 - p) f_b.
    for p in (0.1, 0.5, 0.8):
        def mixture_times_posterior(z, p=p):
            mixture = p * bandit_return_density(z, 0) + (1 - p) * bandit_return_density(z, 1)
            return mixture * bandit_exact_posterior(z, p)

        assert integrate_over_returns(mixture_times_posterior) == pytest.approx(p, abs=1e-8)


def test_exact_posterior_is_calibrated_by_monte_carlo():
    rng = np.random.default_rng(0)
    p = 0.3
    actions = np.where(rng.random(200_000) < p, 0, 1)
    posterior = bandit_exact_posterior(sample_bandit_returns(rng, actions), p)
    assert_close_in_standard_errors(posterior, p)
    # Calibration holds per action too: E[1{A = a} | z] = h(a|z).
    assert_close_in_standard_errors((actions == 0) - posterior, 0.0)


def test_exact_posterior_values():
    assert bandit_exact_posterior(1.5, 0.5) == pytest.approx(0.5)
    assert bandit_exact_posterior(1.5, 0.2) == pytest.approx(0.2)  # f_a(1.5) = f_b(1.5)
    z = np.array([[-200.0, 0.0], [3.0, 200.0]])
    posterior = bandit_exact_posterior(z, 0.5)
    assert posterior.shape == z.shape
    # Far tails: the likelihood ratio tends to 0.1/0.9 and 0.9/0.1, with no underflow.
    assert posterior[0, 0] == pytest.approx(0.1)
    assert posterior[1, 1] == pytest.approx(0.9)
    grid = np.linspace(-10.0, 10.0, 201)
    assert np.all(np.diff(bandit_exact_posterior(grid, 0.5)) > 0)  # higher return, likelier a
    assert np.all(bandit_exact_posterior(grid, 0.0) == 0.0)
    assert np.all(bandit_exact_posterior(grid, 1.0) == 1.0)


def test_mutual_information_known_values():
    assert bandit_mutual_information(0.5) == pytest.approx(0.033, abs=0.001)
    assert bandit_mutual_information(0.0) == 0.0
    assert bandit_mutual_information(1.0) == 0.0
    # Relabelling a <-> b mirrors the task, so I(p) = I(1 - p); I is largest at p = 0.5.
    assert bandit_mutual_information(0.3) == pytest.approx(bandit_mutual_information(0.7))
    assert bandit_mutual_information(0.3) < bandit_mutual_information(0.5)
    # Actions with identical outcome distributions carry no information.
    assert bandit_mutual_information(0.5, p_hi_a=0.5) == pytest.approx(0.0, abs=1e-10)


def test_mutual_information_matches_the_pointwise_estimate():
    # Section 4 estimates I(A;Z) as mean[log h(A|Z) - log pi(A)]; with the exact h that
    # estimate is unbiased.
    rng = np.random.default_rng(1)
    p = 0.5
    actions = np.where(rng.random(200_000) < p, 0, 1)
    posterior_a = bandit_exact_posterior(sample_bandit_returns(rng, actions), p)
    posterior_taken = np.where(actions == 0, posterior_a, 1 - posterior_a)
    prior_taken = np.where(actions == 0, p, 1 - p)
    pointwise_information = np.log(posterior_taken) - np.log(prior_taken)
    assert_close_in_standard_errors(pointwise_information, bandit_mutual_information(p))


def test_exact_hca_advantage_is_unbiased_for_any_policy():
    # E[(1 - pi/h) Z | a] = A(a) (Harutyunyan et al. 2019), and E[pi/h | a] = 1 because
    # both actions reach every return.
    for p in (0.2, 0.5, 0.9):
        def hca_term(z, p=p):
            ratio = p / bandit_exact_posterior(z, p)
            return bandit_return_density(z, 0) * (1 - ratio) * z

        def ratio_term(z, p=p):
            return bandit_return_density(z, 0) * p / bandit_exact_posterior(z, p)

        assert integrate_over_returns(hca_term) == pytest.approx(bandit_advantages(p)[0], abs=1e-7)
        assert integrate_over_returns(ratio_term) == pytest.approx(1.0, abs=1e-8)


def test_exact_hca_advantage_has_far_lower_variance_than_return_minus_value():
    rng = np.random.default_rng(2)
    p = 0.5
    value = 1.5  # V = p Q(a) + (1 - p) Q(b)
    returns = sample_bandit_returns(rng, np.zeros(200_000, dtype=int))  # action a only
    hca_advantage = (1 - p / bandit_exact_posterior(returns, p)) * returns
    monte_carlo_advantage = returns - value

    assert_close_in_standard_errors(hca_advantage, 0.40)
    assert_close_in_standard_errors(monte_carlo_advantage, 0.40)

    # Brute-force oracle for the HCA variance (~0.3226); Var(Z - V | a) = 0.09 + 1.5^2.
    second_moment = integrate_over_returns(
        lambda z: bandit_return_density(z, 0) * ((1 - p / bandit_exact_posterior(z, p)) * z) ** 2
    )
    hca_variance = second_moment - 0.40**2
    assert hca_variance == pytest.approx(0.32, abs=0.005)
    assert_variance_close_in_standard_errors(hca_advantage, hca_variance)
    assert_variance_close_in_standard_errors(monte_carlo_advantage, 2.34)
    assert hca_advantage.var() < monte_carlo_advantage.var() / 7


# ---------------------------------------------------------------------------------------
# Delayed effect.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("first_action, expected_final", [(0, 1.0), (1, -1.0)])
def test_delayed_effect_episode_length_and_final_reward(first_action, expected_final):
    length = 4
    env = DelayedEffect(length=length)
    observations, rewards, terminated, truncated, infos = run_episode(env, [first_action], seed=0)
    assert len(rewards) == length + 1
    assert terminated and not truncated
    np.testing.assert_array_equal(rewards[:-1], 0.0)
    assert rewards[-1] == expected_final
    assert all(info["first_action_good"] == (first_action == 0) for info in infos)


def test_delayed_effect_other_good_action_and_more_actions():
    env = DelayedEffect(length=2, good_action=2, num_actions=3)
    assert env.action_space.n == 3
    assert run_episode(env, [2, 0], seed=0)[1].sum() == 1.0
    assert run_episode(env, [0, 2], seed=0)[1].sum() == -1.0


def test_delayed_effect_chain_states_look_the_same():
    env = DelayedEffect(length=5, noise_std=1.0)
    good_observations = run_episode(env, [0], seed=0)[0]
    bad_observations = run_episode(env, [1, 0, 1], seed=1)[0]
    start, *chain = good_observations
    np.testing.assert_array_equal(start, [1.0, 0.0])
    # Neither the first choice nor the time shows in the chain observations.
    for observation in chain + bad_observations[1:]:
        np.testing.assert_array_equal(observation, [0.0, 1.0])
        assert observation.dtype == np.float32


def test_delayed_effect_noise_has_the_right_variance():
    length, noise_std, episodes = 4, 2.0, 4000
    env = DelayedEffect(length=length, noise_std=noise_std)
    env.reset(seed=3)
    noise_sums = np.empty(episodes)
    for episode in range(episodes):
        first_action = episode % 2
        _, rewards, _, _, infos = run_episode(env, [first_action])
        final_reward = 1.0 if infos[-1]["first_action_good"] else -1.0
        assert rewards[0] == 0.0  # the decision step itself pays nothing
        noise_sums[episode] = rewards.sum() - final_reward
    expected_variance = length * noise_std**2
    assert_close_in_standard_errors(noise_sums, 0.0)
    # Standard error of a normal sample's variance: var * sqrt(2 / (n - 1)).
    variance_error = expected_variance * np.sqrt(2.0 / (episodes - 1))
    assert abs(noise_sums.var(ddof=1) - expected_variance) <= STANDARD_ERRORS * variance_error


def test_delayed_effect_through_gymnasium_make():
    env = gymnasium.make("HCA/DelayedEffect-v0", length=3)
    _, rewards, terminated, truncated, _ = run_episode(env, [0], seed=0)
    assert len(rewards) == 4 and terminated and not truncated
    assert rewards.sum() == 1.0
    long_chain = gymnasium.make("HCA/DelayedEffect-v0", length=200)
    assert len(run_episode(long_chain, [1], seed=0)[1]) == 201  # the time limit does not cut it


# ---------------------------------------------------------------------------------------
# Shortcut.
# ---------------------------------------------------------------------------------------


def test_shortcut_jump_ends_in_one_step():
    env = Shortcut(length=6)
    observations, rewards, terminated, truncated, infos = run_episode(env, [Shortcut.JUMP], seed=0)
    assert len(rewards) == 1 and terminated and not truncated
    assert rewards[0] == 0.0  # -1 for the step, +1 for reaching the end
    np.testing.assert_array_equal(observations[-1], np.zeros(6))


def test_shortcut_walk_without_slips_takes_length_steps():
    length = 6
    env = Shortcut(length=length, slip_prob=0.0)
    observations, rewards, terminated, _, infos = run_episode(env, [Shortcut.WALK], seed=0)
    assert len(rewards) == length and terminated
    assert rewards.sum() == 1 - length
    np.testing.assert_array_equal(np.stack(observations[:-1]), np.eye(length))
    assert [info["position"] for info in infos] == list(range(1, length + 1))
    assert not any(info["slipped"] for info in infos)


def test_shortcut_walk_slips_at_the_configured_rate():
    slip_prob, episodes = 0.3, 4000
    env = Shortcut(length=3, slip_prob=slip_prob)
    env.reset(seed=4)
    # With length 3 the first walk step slips to the end with probability slip_prob.
    ended_after_one_step = np.array(
        [len(run_episode(env, [Shortcut.WALK])[1]) == 1 for _ in range(episodes)], dtype=float
    )
    assert_close_in_standard_errors(ended_after_one_step, slip_prob)


def test_shortcut_through_gymnasium_make():
    env = gymnasium.make("HCA/Shortcut-v0", length=4, slip_prob=0.0)
    assert env.observation_space.shape == (4,)
    assert len(run_episode(env, [Shortcut.WALK], seed=0)[1]) == 4


# ---------------------------------------------------------------------------------------
# Delayed reward wrapper.
# ---------------------------------------------------------------------------------------


def test_delayed_reward_pays_the_unwrapped_total_on_the_last_step():
    actions = np.random.default_rng(5).integers(0, 2, size=1000)
    _, plain_rewards, *_ = run_episode(gymnasium.make("CartPole-v1"), actions, seed=11)
    for wrapped in (DelayedRewardWrapper(gymnasium.make("CartPole-v1")),
                    gymnasium.make("HCA/DelayedReward-v0")):
        for _ in range(2):  # the second episode checks that reset clears the pending sum
            episode = run_episode(wrapped, actions, seed=11)
            _, delayed_rewards, terminated, truncated, infos = episode
            assert terminated or truncated
            assert len(delayed_rewards) == len(plain_rewards) > 1
            np.testing.assert_array_equal(delayed_rewards[:-1], 0.0)
            assert delayed_rewards[-1] == pytest.approx(plain_rewards.sum())
            assert [info["undelayed_reward"] for info in infos] == list(plain_rewards)


def test_delayed_reward_pays_on_truncation():
    env = make_delayed_reward("CartPole-v1", max_episode_steps=5)
    # Alternating pushes keep the pole up for 5 steps, so the time limit ends the episode.
    _, rewards, terminated, truncated, _ = run_episode(env, [0, 1], seed=0)
    assert truncated and not terminated
    assert list(rewards) == [0.0, 0.0, 0.0, 0.0, 5.0]


def test_delayed_reward_wraps_known_answer_envs():
    env = make_delayed_reward("HCA/DelayedEffect-v0", length=3, noise_std=1.0)
    _, plain_rewards, *_ = run_episode(DelayedEffect(length=3, noise_std=1.0), [0], seed=2)
    _, delayed_rewards, *_ = run_episode(env, [0], seed=2)
    assert delayed_rewards[-1] == pytest.approx(plain_rewards.sum())


# ---------------------------------------------------------------------------------------
# Registration, API conformance and parameter errors.
# ---------------------------------------------------------------------------------------


def test_registration_is_idempotent_and_complete():
    register_known_answer_envs()  # already registered at import: must not raise or warn
    assert set(KNOWN_ANSWER_ENV_IDS) == {
        "HCA/AmbiguousBandit-v0",
        "HCA/DelayedEffect-v0",
        "HCA/KeyToDoor-v0",
        "HCA/Shortcut-v0",
        "HCA/DelayedReward-v0",
    }
    for env_id in KNOWN_ANSWER_ENV_IDS:
        assert env_id in gymnasium.envs.registry
        env = gymnasium.make(env_id)
        assert isinstance(env.action_space, gymnasium.spaces.Discrete)
        assert isinstance(env.observation_space, gymnasium.spaces.Box)
        assert env.observation_space.dtype == np.float32


@pytest.mark.parametrize(
    "env_id", ["HCA/AmbiguousBandit-v0", "HCA/DelayedEffect-v0", "HCA/Shortcut-v0"]
)
def test_envs_pass_the_gymnasium_checker(env_id):
    env = gymnasium.make(env_id, **({"noise_std": 1.0} if env_id == "HCA/DelayedEffect-v0" else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        check_env(env.unwrapped)


def test_delayed_reward_wrapper_passes_the_gymnasium_checker():
    inner = gymnasium.make("HCA/DelayedEffect-v0", noise_std=1.0).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version")
        check_env(DelayedRewardWrapper(inner))


def test_step_before_reset_and_invalid_actions_are_refused():
    env = Shortcut()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("action must be in [0, 1], got 2")):
        env.step(2)
    env.step(Shortcut.JUMP)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step(0)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AmbiguousBandit(p_hi_a=1.5), "p_hi_a must be in [0, 1], got 1.5"),
        (lambda: AmbiguousBandit(reward_std=0.0), "reward_std must be > 0, got 0.0"),
        (lambda: DelayedEffect(length=0), "length must be >= 1, got 0"),
        (lambda: DelayedEffect(noise_std=-1.0), "noise_std must be >= 0, got -1.0"),
        (lambda: DelayedEffect(num_actions=1), "num_actions must be >= 2, got 1"),
        (
            lambda: DelayedEffect(good_action=2),
            "good_action must be in [0, num_actions - 1] = [0, 1], got 2",
        ),
        (lambda: Shortcut(length=0), "length must be >= 1, got 0"),
        (lambda: Shortcut(length=2.5), "length must be an integer >= 1, got 2.5"),
        (lambda: Shortcut(slip_prob=-0.1), "slip_prob must be in [0, 1], got -0.1"),
        (lambda: bandit_advantages(1.2), "p must be in [0, 1], got 1.2"),
        (lambda: bandit_exact_posterior(0.0, -0.5), "p must be in [0, 1], got -0.5"),
        (lambda: bandit_mutual_information(2.0), "p must be in [0, 1], got 2.0"),
        (lambda: bandit_return_density(0.0, action=2), "action must be 0 (a) or 1 (b), got 2"),
        (
            lambda: make_delayed_reward("HCA/DelayedReward-v0"),
            "env_id must name the environment to wrap",
        ),
        (lambda: gymnasium.make("HCA/Shortcut-v0", length=-3), "length must be >= 1, got -3"),
    ],
)
def test_bad_parameters_raise_clear_errors(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()
