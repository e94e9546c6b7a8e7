"""Small tasks whose answers are known in closed form (docs/method.md, section 5).

They exist so that tests and benchmarks can check credit-assignment code against exact
values instead of against intuition:

- ``AmbiguousBandit``: one noisy decision; the exact hindsight posterior, advantages and
  mutual information ``I(A; Z)`` are given by the ``bandit_*`` functions below.
- ``DelayedEffect``: the first action decides a final +1/-1; the actions in between do
  nothing and only add noise.
- ``Shortcut``: a chain where jumping to the end is optimal; walking sometimes slips to
  the end by chance.
- ``KeyToDoor``: a key picked up at the start opens a door at the end; noisy apple
  rewards in between act as distractors.
- ``DelayedRewardWrapper``: pays any environment's rewards as one lump sum at the end.

All environments follow the gymnasium 1.x API, have ``Discrete`` actions and
``Box(float32)`` observations, and draw every random number from ``self.np_random``
so that ``reset(seed=...)`` makes episodes reproducible.

``register_known_answer_envs()`` registers them with gymnasium under the ``HCA/``
namespace. Processes that have not imported ``hca_rllib.envs`` (for example Ray
workers) can still build them with ``gymnasium.make("hca_rllib.envs:HCA/Shortcut-v0")``,
which imports the module (and so registers the ids) first.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from scipy import integrate, special, stats

__all__ = [
    "AmbiguousBandit",
    "DelayedEffect",
    "Shortcut",
    "KeyToDoor",
    "key_to_door_values",
    "DelayedRewardWrapper",
    "make_delayed_reward",
    "bandit_q_values",
    "bandit_advantages",
    "bandit_return_density",
    "bandit_exact_posterior",
    "bandit_mutual_information",
    "register_known_answer_envs",
    "KNOWN_ANSWER_ENV_IDS",
    "KNOWN_ANSWER_MAX_EPISODE_STEPS",
]


# ---------------------------------------------------------------------------------------
# Parameter checks: every message names the parameter and the allowed range.
# ---------------------------------------------------------------------------------------


def _require_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def _require_positive(name: str, value: float) -> None:
    if not value > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")


def _require_non_negative(name: str, value: float) -> None:
    if not value >= 0.0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _require_finite(name: str, value: float) -> None:
    if not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")


def _require_int_at_least(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_bandit_parameters(
    p_hi_a: float, mean_hi: float, mean_lo: float, reward_std: float
) -> None:
    _require_probability("p_hi_a", p_hi_a)
    _require_finite("mean_hi", mean_hi)
    _require_finite("mean_lo", mean_lo)
    _require_positive("reward_std", reward_std)


# ---------------------------------------------------------------------------------------
# Ambiguous bandit: the closed forms.
# ---------------------------------------------------------------------------------------


def bandit_q_values(
    p_hi_a: float = 0.9, mean_hi: float = 2.0, mean_lo: float = 1.0
) -> tuple[float, float]:
    """``(Q(a), Q(b))``: expected reward of each action (1.9 and 1.1 at the defaults)."""
    _require_probability("p_hi_a", p_hi_a)
    q_a = p_hi_a * mean_hi + (1.0 - p_hi_a) * mean_lo
    q_b = (1.0 - p_hi_a) * mean_hi + p_hi_a * mean_lo
    return float(q_a), float(q_b)


def bandit_advantages(
    p: float, p_hi_a: float = 0.9, mean_hi: float = 2.0, mean_lo: float = 1.0
) -> tuple[float, float]:
    """``(A(a), A(b))`` under the policy ``pi(a) = p``.

    ``A(a) = (1 - p) (Q(a) - Q(b))`` and ``A(b) = -p (Q(a) - Q(b))``, i.e.
    ``0.8 (1 - p)`` and ``-0.8 p`` at the defaults.
    """
    _require_probability("p", p)
    q_a, q_b = bandit_q_values(p_hi_a, mean_hi, mean_lo)
    gap = q_a - q_b
    return float((1.0 - p) * gap), float(-p * gap)


def _bandit_log_densities(
    z: Any, p_hi_a: float, mean_hi: float, mean_lo: float, reward_std: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(log f_a(z), log f_b(z))``, the return densities after each action.

    Computed in log space because far in the tails both mixture densities underflow to
    0 while their ratio stays between (1 - p_hi_a)/p_hi_a and its inverse.
    """
    z = np.asarray(z, dtype=np.float64)
    log_hi = stats.norm.logpdf(z, loc=mean_hi, scale=reward_std)
    log_lo = stats.norm.logpdf(z, loc=mean_lo, scale=reward_std)
    # np.log(0) = -inf is the right weight when p_hi_a is 0 or 1.
    with np.errstate(divide="ignore"):
        log_p_hi, log_p_lo = np.log(p_hi_a), np.log1p(-p_hi_a)
    log_f_a = np.logaddexp(log_p_hi + log_hi, log_p_lo + log_lo)
    log_f_b = np.logaddexp(log_p_lo + log_hi, log_p_hi + log_lo)
    return log_f_a, log_f_b


def bandit_return_density(
    z: Any,
    action: int,
    p_hi_a: float = 0.9,
    mean_hi: float = 2.0,
    mean_lo: float = 1.0,
    reward_std: float = 1.5,
) -> np.ndarray:
    """``p(z | action)``: ``f_a = p_hi_a N(mean_hi) + (1 - p_hi_a) N(mean_lo)``, ``f_b`` the mirror.

    ``action`` is 0 for ``a`` and 1 for ``b``; vectorised over ``z``.
    """
    _check_bandit_parameters(p_hi_a, mean_hi, mean_lo, reward_std)
    if action not in (AmbiguousBandit.ACTION_A, AmbiguousBandit.ACTION_B):
        raise ValueError(f"action must be 0 (a) or 1 (b), got {action!r}")
    log_f_a, log_f_b = _bandit_log_densities(z, p_hi_a, mean_hi, mean_lo, reward_std)
    return np.exp(log_f_a if action == AmbiguousBandit.ACTION_A else log_f_b)


def bandit_exact_posterior(
    z: Any,
    p: float,
    p_hi_a: float = 0.9,
    mean_hi: float = 2.0,
    mean_lo: float = 1.0,
    reward_std: float = 1.5,
) -> np.ndarray:
    """The exact hindsight posterior ``h(a | z) = p f_a(z) / (p f_a(z) + (1 - p) f_b(z))``.

    ``p = pi(a)``. Vectorised over ``z``; returns an array of ``z``'s shape (a 0-d array
    for a scalar ``z``). ``h(b | z) = 1 - h(a | z)``.
    """
    _require_probability("p", p)
    _check_bandit_parameters(p_hi_a, mean_hi, mean_lo, reward_std)
    log_f_a, log_f_b = _bandit_log_densities(z, p_hi_a, mean_hi, mean_lo, reward_std)
    # Logistic of the log-odds: stable where both densities underflow.
    with np.errstate(divide="ignore"):
        prior_log_odds = np.log(p) - np.log1p(-p)
    return special.expit(prior_log_odds + log_f_a - log_f_b)


def bandit_mutual_information(
    p: float,
    p_hi_a: float = 0.9,
    mean_hi: float = 2.0,
    mean_lo: float = 1.0,
    reward_std: float = 1.5,
) -> float:
    """``I(A; Z)`` in nats under ``pi(a) = p``, by numerical integration.

    ``I = sum_x pi(x) int f_x(z) log(f_x(z) / m(z)) dz`` with the mixture
    ``m = p f_a + (1 - p) f_b``. About 0.033 nats at ``p = 0.5`` and the defaults.
    """
    _require_probability("p", p)
    _check_bandit_parameters(p_hi_a, mean_hi, mean_lo, reward_std)
    if p in (0.0, 1.0):
        return 0.0  # a deterministic action carries no information about the return
    log_p, log_1mp = np.log(p), np.log1p(-p)

    def integrand(z: float) -> float:
        log_f_a, log_f_b = _bandit_log_densities(z, p_hi_a, mean_hi, mean_lo, reward_std)
        log_m = np.logaddexp(log_p + log_f_a, log_1mp + log_f_b)
        return float(
            p * np.exp(log_f_a) * (log_f_a - log_m)
            + (1.0 - p) * np.exp(log_f_b) * (log_f_b - log_m)
        )

    # Integrate over a finite window: outside +-15 standard deviations of both
    # components the integrand is below 1e-48, and a finite range keeps quad accurate.
    low = min(mean_hi, mean_lo) - 15.0 * reward_std
    high = max(mean_hi, mean_lo) + 15.0 * reward_std
    value, _ = integrate.quad(integrand, low, high, points=[mean_lo, mean_hi], limit=200)
    return float(max(value, 0.0))  # clamp the tiny negative roundoff when I is ~0


# ---------------------------------------------------------------------------------------
# Environments.
# ---------------------------------------------------------------------------------------


class _KnownAnswerEnv(gymnasium.Env):
    """Shared bookkeeping: refuse to step before reset or after the episode ended."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self._episode_over = True

    def _start_episode(self, seed: int | None) -> None:
        super().reset(seed=seed)
        self._episode_over = False

    def _check_step(self, action: Any) -> int:
        if self._episode_over:
            raise RuntimeError(
                f"{type(self).__name__}.step() called before reset() or after the "
                "episode ended; call reset() first"
            )
        if not self.action_space.contains(action):
            raise ValueError(
                f"action must be in [0, {self.action_space.n - 1}], got {action!r}"
            )
        return int(action)


class AmbiguousBandit(_KnownAnswerEnv):
    """One decision between two actions whose outcomes overlap.

    Action ``a`` (0) reaches HI with probability ``p_hi_a``, else LO; action ``b`` (1)
    the mirror. The only reward is paid on arrival, ``N(mean_hi, reward_std^2)`` at HI
    and ``N(mean_lo, reward_std^2)`` at LO, and the episode terminates after that step.
    The observation is the constant ``[1.0]``. ``info["hi"]`` says which outcome occurred.
    """

    ACTION_A = 0
    ACTION_B = 1

    def __init__(
        self,
        p_hi_a: float = 0.9,
        mean_hi: float = 2.0,
        mean_lo: float = 1.0,
        reward_std: float = 1.5,
    ) -> None:
        _check_bandit_parameters(p_hi_a, mean_hi, mean_lo, reward_std)
        super().__init__()
        self.p_hi_a = float(p_hi_a)
        self.mean_hi = float(mean_hi)
        self.mean_lo = float(mean_lo)
        self.reward_std = float(reward_std)
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)

    def _observation(self) -> np.ndarray:
        return np.ones(1, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._start_episode(seed)
        return self._observation(), {}

    def step(self, action):
        action = self._check_step(action)
        p_hi = self.p_hi_a if action == self.ACTION_A else 1.0 - self.p_hi_a
        hi = bool(self.np_random.random() < p_hi)
        mean = self.mean_hi if hi else self.mean_lo
        reward = float(self.np_random.normal(mean, self.reward_std))
        self._episode_over = True
        return self._observation(), reward, True, False, {"hi": hi}


class DelayedEffect(_KnownAnswerEnv):
    """The first action decides a final reward of +1 or -1, paid ``length`` steps later.

    Step 1 (the only decision, reward 0): ``good_action`` earns +1 at the end, any other
    action -1. Then ``length`` chain steps in which actions do nothing, each paying
    ``N(0, noise_std^2)``; the last one also pays the +1/-1 and terminates. An episode
    is ``length + 1`` steps long.

    Observation: one-hot ``[at_start, in_chain]``. It deliberately hides the first
    choice and the time, so the chain states all look the same and only the return
    tells the first action apart. ``info["first_action_good"]`` is set from step 1 on.
    """

    def __init__(
        self,
        length: int = 5,
        noise_std: float = 0.0,
        good_action: int = 0,
        num_actions: int = 2,
    ) -> None:
        _require_int_at_least("length", length, 1)
        _require_non_negative("noise_std", noise_std)
        _require_finite("noise_std", noise_std)
        _require_int_at_least("num_actions", num_actions, 2)
        if not 0 <= good_action < num_actions:
            raise ValueError(
                f"good_action must be in [0, num_actions - 1] = [0, {num_actions - 1}], "
                f"got {good_action}"
            )
        super().__init__()
        self.length = int(length)
        self.noise_std = float(noise_std)
        self.good_action = int(good_action)
        self.num_actions = int(num_actions)
        self.action_space = spaces.Discrete(self.num_actions)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self._chain_step = 0  # 0 at the start, 1..length inside the chain
        self._first_action_good: bool | None = None

    def _observation(self) -> np.ndarray:
        at_start = self._chain_step == 0
        return np.array([at_start, not at_start], dtype=np.float32)

    def _info(self) -> dict:
        if self._first_action_good is None:
            return {}
        return {"first_action_good": self._first_action_good}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._start_episode(seed)
        self._chain_step = 0
        self._first_action_good = None
        return self._observation(), self._info()

    def step(self, action):
        action = self._check_step(action)
        if self._chain_step == 0:
            self._first_action_good = action == self.good_action
            self._chain_step = 1
            return self._observation(), 0.0, False, False, self._info()

        reward = float(self.np_random.normal(0.0, self.noise_std))
        terminated = self._chain_step == self.length
        if terminated:
            reward += 1.0 if self._first_action_good else -1.0
            self._episode_over = True
        else:
            self._chain_step += 1
        return self._observation(), reward, terminated, False, self._info()


class KeyToDoor(_KnownAnswerEnv):
    """A key picked up early opens a door at the end; noisy apples in between.

    Three phases (after Hung et al. 2019 and Arumugam et al. 2021):

    1. Key room, one step: action ``PICK`` (1) takes the key, ``WAIT`` (0) does not.
       Reward 0.
    2. Apple room, ``distractor_length`` steps: each step an apple is present with
       probability ``apple_prob`` (visible in the observation); ``PICK`` collects it for
       ``N(apple_reward, apple_noise_std^2)``, ``WAIT`` leaves it.
    3. Door, one step: reward ``door_reward`` if the key is held, else 0; the episode
       terminates.

    An episode is ``distractor_length + 2`` steps. Observation: ``[in_key_room,
    in_apple_room, at_door, apple_present]``. It hides whether the key is held (as the
    memoryless agent would forget it), so no state value can carry the key's effect
    forward: only the return links the key to the door. The apple rewards are real but
    unrelated to the key: they are the distractor that makes the key's credit hard (they
    add variance to the return, so the key's information ``I(A; Z | S)`` shrinks).
    ``info["has_key"]`` says whether the key is held.
    :func:`key_to_door_values` gives the exact values.
    """

    WAIT = 0
    PICK = 1

    def __init__(
        self,
        distractor_length: int = 10,
        apple_prob: float = 0.3,
        apple_reward: float = 1.0,
        apple_noise_std: float = 0.0,
        door_reward: float = 5.0,
    ) -> None:
        _require_int_at_least("distractor_length", distractor_length, 0)
        _require_probability("apple_prob", apple_prob)
        _require_finite("apple_reward", apple_reward)
        _require_non_negative("apple_noise_std", apple_noise_std)
        _require_finite("apple_noise_std", apple_noise_std)
        _require_finite("door_reward", door_reward)
        super().__init__()
        self.distractor_length = int(distractor_length)
        self.apple_prob = float(apple_prob)
        self.apple_reward = float(apple_reward)
        self.apple_noise_std = float(apple_noise_std)
        self.door_reward = float(door_reward)
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)
        self._t = 0
        self._has_key = False
        self._apple = False

    def _observation(self) -> np.ndarray:
        phase = 0 if self._t == 0 else (1 if self._t <= self.distractor_length else 2)
        obs = np.zeros(4, dtype=np.float32)
        obs[phase] = 1.0
        obs[3] = float(self._apple)
        return obs

    def _next_room(self) -> None:
        self._t += 1
        in_apple_room = 1 <= self._t <= self.distractor_length
        self._apple = bool(in_apple_room and self.np_random.random() < self.apple_prob)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._start_episode(seed)
        self._t, self._has_key, self._apple = 0, False, False
        return self._observation(), {}

    def step(self, action):
        action = self._check_step(action)
        reward, terminated = 0.0, False
        if self._t == 0:
            self._has_key = action == self.PICK
        elif self._t <= self.distractor_length:
            if self._apple and action == self.PICK:
                reward = float(self.np_random.normal(self.apple_reward, self.apple_noise_std))
        else:
            reward = self.door_reward if self._has_key else 0.0
            terminated = True
            self._episode_over = True
        if not terminated:
            self._next_room()
        return self._observation(), reward, terminated, False, {"has_key": self._has_key}


def key_to_door_values(
    distractor_length: int = 10,
    apple_prob: float = 0.3,
    apple_reward: float = 1.0,
    door_reward: float = 5.0,
    p_pick_key: float = 0.5,
    p_pick_apple: float = 1.0,
) -> dict:
    """Exact values of :class:`KeyToDoor` for a policy that picks the key with
    probability ``p_pick_key`` and a present apple with ``p_pick_apple``.

    Returns ``q_key`` (Q of WAIT and PICK in the key room), ``advantage_key``,
    ``value_start`` and ``optimal_return``.
    """
    apples = distractor_length * apple_prob * apple_reward
    q_wait = p_pick_apple * apples
    q_pick = q_wait + door_reward
    value = p_pick_key * q_pick + (1.0 - p_pick_key) * q_wait
    return {
        "q_key": (q_wait, q_pick),
        "advantage_key": (q_wait - value, q_pick - value),
        "value_start": value,
        "optimal_return": apples + max(door_reward, 0.0),
    }


class Shortcut(_KnownAnswerEnv):
    """A chain of ``length`` states; jumping to the end is optimal.

    Action ``JUMP`` (0) goes straight to the end. Action ``WALK`` (1) moves one state
    forward and, with probability ``slip_prob``, also jumps to the end. Every step pays
    -1 and the step that reaches the end pays an extra +1, so jumping at once earns 0
    and walking the whole chain earns ``1 - length``.

    Observation: one-hot of the position (shape ``(length,)``); the end state, which is
    only seen as the terminal observation, is all zeros. ``info`` has ``position`` and
    ``slipped``.
    """

    JUMP = 0
    WALK = 1

    def __init__(self, length: int = 6, slip_prob: float = 0.1) -> None:
        _require_int_at_least("length", length, 1)
        _require_probability("slip_prob", slip_prob)
        super().__init__()
        self.length = int(length)
        self.slip_prob = float(slip_prob)
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.length,), dtype=np.float32)
        self._position = 0  # ``length`` is the end

    def _observation(self) -> np.ndarray:
        observation = np.zeros(self.length, dtype=np.float32)
        if self._position < self.length:
            observation[self._position] = 1.0
        return observation

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._start_episode(seed)
        self._position = 0
        return self._observation(), {"position": 0, "slipped": False}

    def step(self, action):
        action = self._check_step(action)
        slipped = False
        if action == self.JUMP:
            self._position = self.length
        else:
            self._position += 1
            if self._position < self.length and self.np_random.random() < self.slip_prob:
                slipped = True
                self._position = self.length
        terminated = self._position == self.length
        reward = -1.0 + (1.0 if terminated else 0.0)
        self._episode_over = terminated
        info = {"position": self._position, "slipped": slipped}
        return self._observation(), reward, terminated, False, info


class DelayedRewardWrapper(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Pays the sum of the wrapped environment's rewards on the episode's last step.

    Every other step pays 0. The last step is the one that terminates or truncates, so
    put this wrapper outside any ``TimeLimit`` (``gymnasium.make`` already does that for
    the wrapped id); a time limit applied outside it would drop the pending sum.
    ``info["undelayed_reward"]`` keeps the wrapped environment's reward of each step.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        self._pending_reward = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._pending_reward = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._pending_reward += float(reward)
        if terminated or truncated:
            paid, self._pending_reward = self._pending_reward, 0.0
        else:
            paid = 0.0
        info = {**info, "undelayed_reward": float(reward)}
        return observation, paid, terminated, truncated, info


def make_delayed_reward(env_id: str = "CartPole-v1", **kwargs: Any) -> DelayedRewardWrapper:
    """``gymnasium.make(env_id, **kwargs)`` with all its rewards paid at the end."""
    if env_id == DELAYED_REWARD_ENV_ID:
        raise ValueError(f"env_id must name the environment to wrap, not {DELAYED_REWARD_ENV_ID}")
    return DelayedRewardWrapper(gymnasium.make(env_id, **kwargs))


# ---------------------------------------------------------------------------------------
# Registration.
# ---------------------------------------------------------------------------------------

DELAYED_REWARD_ENV_ID = "HCA/DelayedReward-v0"

# Episodes of DelayedEffect and Shortcut end by construction (length + 1 and at most
# length steps), so the limit is only a declared horizon. It is a generous constant
# rather than a multiple of the default length: gymnasium fixes it at registration, and
# a small one would silently truncate a longer chain made with make(..., length=n).
KNOWN_ANSWER_MAX_EPISODE_STEPS = 1000

_REGISTRATIONS: dict[str, dict[str, Any]] = {
    "HCA/AmbiguousBandit-v0": {
        "entry_point": "hca_rllib.envs.known_answer:AmbiguousBandit",
    },
    "HCA/DelayedEffect-v0": {
        "entry_point": "hca_rllib.envs.known_answer:DelayedEffect",
        "max_episode_steps": KNOWN_ANSWER_MAX_EPISODE_STEPS,
    },
    "HCA/KeyToDoor-v0": {
        "entry_point": "hca_rllib.envs.known_answer:KeyToDoor",
        "max_episode_steps": KNOWN_ANSWER_MAX_EPISODE_STEPS,
    },
    "HCA/Shortcut-v0": {
        "entry_point": "hca_rllib.envs.known_answer:Shortcut",
        "max_episode_steps": KNOWN_ANSWER_MAX_EPISODE_STEPS,
    },
    # The wrapped env brings its own time limit through the inner gymnasium.make.
    DELAYED_REWARD_ENV_ID: {
        "entry_point": "hca_rllib.envs.known_answer:make_delayed_reward",
    },
}

KNOWN_ANSWER_ENV_IDS: tuple[str, ...] = tuple(_REGISTRATIONS)


def register_known_answer_envs() -> None:
    """Register the known-answer envs with gymnasium; ids already registered are kept."""
    for env_id, registration in _REGISTRATIONS.items():
        if env_id not in gymnasium.envs.registry:
            gymnasium.register(id=env_id, **registration)
