"""The reward outcome across fragments (`hindsight={"outcome": "reward", "across_fragments":
True}`): each chunk carries its episode's last `window` steps, and this fragment's rewards
credit them by an importance-weighted correction (method note, section 2.9).

- the maths (`credit.history_shift`, `credit.history_weights`) against loops and an exact
  oracle: the carried credit is the gradient of the reward under the current policy;
- the whole path on one episode cut into fragments: every (step, reward event) pair once,
  and every step's return cut at the end of its window;
- the batch (`LeanEpisodesToBatch`), the learner (trust 0 changes nothing) and the config.
"""

from __future__ import annotations

import copy
import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from hca_rllib import A2CConfig, HCAConfig, credit
from hca_rllib.connectors import (BOOTSTRAP_VALUES, ComputeCreditWeights, ComputeReturnsAndAdvantages,
                                  LeanEpisodesToBatch)
from hca_rllib.module import BEHAVIOUR_LOGITS, CREDIT_WEIGHTS, HISTORY_OFFSETS, WINDOW_REWARDS, history_rows

from test_learner_path import MID, NUM_ACTIONS

GAMMA = 0.9


# --------------------------------------------------------------------------- the maths


def _chunks_and_offsets():
    """Three chunks: 2 carried rows then 3 new; none carried then 4 new; 3 carried then 2 new."""
    offsets = torch.tensor([2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 2, 1, 0, 0])
    chunks = torch.tensor([0] * 5 + [1] * 4 + [2] * 5)
    return offsets, chunks


@pytest.mark.parametrize("window", [1, 2, 4, 9])
def test_the_shift_against_a_loop(window):
    offsets, chunks = _chunks_and_offsets()
    g = torch.Generator().manual_seed(0)
    values = torch.randn(14, generator=g, dtype=torch.float64)
    next_values = torch.randn(14, generator=g, dtype=torch.float64)
    shift = credit.history_shift(values, next_values, chunks, offsets, window, GAMMA)
    for t in range(14):
        d = int(offsets[t])
        if d == 0:
            assert shift[t] == 0.0
            continue
        last = max(i for i in range(14) if chunks[i] == chunks[t])
        m = min(last, t + window)
        expected = GAMMA ** (m + 1 - t) * next_values[m] - GAMMA ** d * values[t + d]
        assert float(shift[t]) == pytest.approx(float(expected), abs=1e-12), t


def _random_probs(g, n, a=NUM_ACTIONS):
    return torch.softmax(torch.randn(n, a, generator=g, dtype=torch.float64), -1)


def test_the_carried_credit_is_zero_where_the_classifier_knows_no_more_than_the_behaviour_policy():
    offsets, _ = _chunks_and_offsets()
    history = offsets > 0
    g = torch.Generator().manual_seed(1)
    pi, behaviour = _random_probs(g, 14), _random_probs(g, 14)
    window = torch.zeros(14, 4, dtype=torch.float64)
    window[0, 1], window[1, 0], window[9, 2], window[10, 3], window[3, 0] = 1.0, -2.0, 0.5, 3.0, 7.0
    rows, lags = window.nonzero(as_tuple=True)
    actions = torch.randint(0, NUM_ACTIONS, (14,), generator=g)
    shift = torch.zeros(14, dtype=torch.float64)
    out = credit.history_weights(actions=actions, history=history, shift=shift, pi_probs=pi,
                                 behaviour_probs=behaviour, window_rewards=window,
                                 pairs=(rows, lags, behaviour[rows]), gamma=GAMMA)
    assert torch.equal(out["weights"], torch.zeros_like(pi))  # h = pi_b: no pull toward pi_b
    h = _random_probs(g, len(rows))
    shift = torch.randn(14, generator=g, dtype=torch.float64)
    out = credit.history_weights(actions=actions, history=history, shift=shift, pi_probs=pi,
                                 behaviour_probs=behaviour, window_rewards=window, pairs=(rows, lags, h),
                                 gamma=GAMMA)
    assert bool((out["weights"][~history] == 0).all())  # the new rows are the fragment's own
    assert bool((out["weights"][history] != 0).any())
    # Row 3 is new: its pair adds nothing here. Row 0's lag-2 pair: r gamma^2 pi (h/pi_b - 1).
    expected0 = 1.0 * GAMMA ** 2 * pi[0] * (h[0] / behaviour[0] - 1.0)
    rho = pi[0, actions[0]] / behaviour[0, actions[0]]
    expected0[actions[0]] += rho * shift[0]
    torch.testing.assert_close(out["weights"][0], expected0)
    zero = credit.history_weights(actions=actions, history=history, shift=shift, pi_probs=pi,
                                  behaviour_probs=behaviour, window_rewards=window, pairs=(rows, lags, h),
                                  gamma=GAMMA, trust=torch.tensor(0.0))
    assert torch.equal(zero["weights"], torch.zeros_like(pi))


def test_the_carried_credit_is_the_gradient_of_the_reward_under_the_current_policy():
    """Exact oracle. An action `a ~ pi_b` (the older policy) sets the law of a reward event
    `u` three steps later, `p(u | a)`; `h = p(a | u)` under `pi_b` (Bayes). The expected
    logit gradient of the carried term, over `a ~ pi_b` and `u ~ p(u|a)`, is the gradient of
    `gamma^3 E[u]` under the current `pi`: `sum_a pi(a) E[u|a] (onehot(a) - pi)`."""
    g = torch.Generator().manual_seed(2)
    pi, behaviour = _random_probs(g, 1)[0], _random_probs(g, 1)[0]
    u_values = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)
    p_u = torch.softmax(torch.randn(NUM_ACTIONS, 3, generator=g, dtype=torch.float64), -1)  # p(u | a)
    expected = torch.zeros(NUM_ACTIONS, dtype=torch.float64)
    for a in range(NUM_ACTIONS):
        mean_u = float((p_u[a] * u_values).sum())
        expected += pi[a] * GAMMA ** 3 * mean_u * (torch.eye(NUM_ACTIONS, dtype=torch.float64)[a] - pi)
    got = torch.zeros(NUM_ACTIONS, dtype=torch.float64)
    for a, j in itertools.product(range(NUM_ACTIONS), range(3)):
        posterior = behaviour * p_u[:, j] / (behaviour * p_u[:, j]).sum()
        window = torch.zeros(2, 4, dtype=torch.float64)
        window[0, 2] = u_values[j]
        out = credit.history_weights(
            actions=torch.tensor([a, 0]), history=torch.tensor([True, False]),
            shift=torch.zeros(2, dtype=torch.float64), pi_probs=torch.stack([pi, pi]),
            behaviour_probs=torch.stack([behaviour, behaviour]), window_rewards=window,
            pairs=(torch.tensor([0]), torch.tensor([2]), posterior.unsqueeze(0)), gamma=GAMMA)
        got += behaviour[a] * p_u[a, j] * credit.logit_gradient(out["weights"][0], pi)
    torch.testing.assert_close(got, expected)


# --------------------------------------------------------------------------- one episode, cut


class _Values:
    """A stand-in for the module's value head: V(s) a fixed function of the observation."""

    def __init__(self, fn):
        self.fn = fn

    def unwrapped(self):
        return self

    def compute_values(self, batch):
        return self.fn(batch[Columns.OBS])


def _value(obs):
    return torch.as_tensor(obs)[..., 0].double() * 0.7 + 0.1


def _episode(length, terminated, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": [rng.normal(size=2).astype(np.float32) for _ in range(length + 1)],
            "actions": rng.integers(0, NUM_ACTIONS, length),
            "rewards": rng.normal(size=length) + 3.0 * np.sign(rng.normal(size=length)),  # never 0
            "logits": rng.normal(size=(length, NUM_ACTIONS)).astype(np.float32), "terminated": terminated}


def _fragments(ep, fragment, lookback):
    """The episode as the samplers cut it: chunks of `fragment` steps, each carrying up to
    `lookback` earlier steps in its lookback buffer."""
    n = len(ep["actions"])
    space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    for start in range(0, n, fragment):
        end = min(start + fragment, n)
        lb = min(lookback, start)
        a, b = start - lb, end
        yield start - lb, SingleAgentEpisode(
            observations=ep["obs"][a:b + 1], actions=[int(x) for x in ep["actions"][a:b]],
            rewards=[float(x) for x in ep["rewards"][a:b]],
            extra_model_outputs={Columns.ACTION_DIST_INPUTS: list(ep["logits"][a:b])},
            terminated=ep["terminated"] and end == n, truncated=not ep["terminated"] and end == n,
            len_lookback_buffer=lb, t_started=start, observation_space=space,
            action_space=gym.spaces.Discrete(NUM_ACTIONS))


def _config(window):
    return HCAConfig().training(gamma=GAMMA, lambda_=1.0, trust=None,
                                hindsight={"outcome": "reward", "window": window, "across_fragments": True})


@pytest.mark.parametrize("terminated", [True, False], ids=["terminated", "time_limit"])
@pytest.mark.parametrize("fragment,window", [(4, 5), (4, 3), (3, 7), (5, 1)])
def test_each_pair_is_credited_once_and_each_return_is_cut_at_its_window(fragment, window, terminated):
    """One 14-step episode cut into fragments, through the lean batch and the credit path:
    over all fragments every (step, reward event) pair within the window is credited
    exactly once, and with the classifier that knows the action (`h_k = onehot(a_t)`,
    the sampled form) and the current policy the behaviour one, the weights a step gets in
    all fragments add up to the reward outcome with its window whole:

        W_t = onehot(a_t) (r_t + rewards past the window in its own fragment + the
              bootstrap at the window's end (or its fragment's) - Vrem(s_t))
              + sum_{k=1..window} gamma^k r_{t+k} (onehot(a_t) - pi(s_t))."""
    ep = _episode(14, terminated)
    n = 14
    config = _config(window)
    to_batch = LeanEpisodesToBatch(history=window)
    returns = ComputeReturnsAndAdvantages(config=config)
    weights_piece = ComputeCreditWeights(config=config)
    values_module = {DEFAULT_MODULE_ID: _Values(_value)}
    seen, totals = [], torch.zeros(n, NUM_ACTIONS, dtype=torch.float64)
    for first, chunk in _fragments(ep, fragment, window):
        b = to_batch(rl_module=values_module, batch={}, episodes=[chunk])[DEFAULT_MODULE_ID]
        logits = b[BEHAVIOUR_LOGITS].double()
        values = _value(b[Columns.OBS])
        state = returns.from_outputs(b, None, logits, values, 0.5 * values)
        rows, lags = b[WINDOW_REWARDS].nonzero(as_tuple=True)
        seen += [(first + int(r), int(k) + 1) for r, k in zip(rows, lags)]
        # The classifier that knows the action: h_k = onehot(a_t), under any base policy.
        state.pair_rows, state.pair_lags = rows, lags
        state.pi_probs = torch.softmax(logits, -1)
        state.q_probs = torch.nn.functional.one_hot(state.actions[rows], NUM_ACTIONS).double()
        parts = weights_piece._reward_outcome_weights(state, None, 1.0)
        for i in range(len(b[Columns.ACTIONS])):
            totals[first + i] += parts["weights"][i]
    expected_pairs = [(t, k) for t in range(n) for k in range(1, window + 1) if t + k < n]
    assert sorted(seen) == expected_pairs  # each pair once, none past the episode
    values = _value(np.stack(ep["obs"]))
    pi = torch.softmax(torch.as_tensor(ep["logits"]).double(), -1)
    for t in range(n):
        end_own = min((t // fragment + 1) * fragment, n)  # t's fragment ends before row end_own
        m = min(n - 1, t + window)

        def value_after(j):  # V(s_{j+1}); 0 after the terminal step
            return 0.0 if (j == n - 1 and terminated) else float(values[j + 1])

        if m < end_own:  # the window ends in t's own fragment: A2C's remainder there
            sampled = ep["rewards"][t] + sum(GAMMA ** (j - t) * ep["rewards"][j] for j in range(m + 1, end_own))
            sampled += GAMMA ** (end_own - t) * value_after(end_own - 1)
        else:
            sampled = ep["rewards"][t] + GAMMA ** (m + 1 - t) * value_after(m)
        onehot = torch.nn.functional.one_hot(torch.tensor(int(ep["actions"][t])), NUM_ACTIONS).double()
        expected = onehot * (sampled - 0.5 * float(values[t]))
        for k in range(1, m - t + 1):
            expected = expected + GAMMA ** k * ep["rewards"][t + k] * (onehot - pi[t])
        torch.testing.assert_close(totals[t], expected, atol=1e-5, rtol=1e-5, msg=f"step {t}")  # float32 rewards


# --------------------------------------------------------------------------- the batch


def test_the_carried_rows_come_from_the_lookback_and_are_not_real():
    ep = _episode(9, True)
    (_, first), (_, second), (_, third) = list(_fragments(ep, 4, 3))
    b = LeanEpisodesToBatch(history=3)(rl_module={DEFAULT_MODULE_ID: _Values(_value)}, batch={},
                                       episodes=[first, second, third])[DEFAULT_MODULE_ID]
    # 4 new; 3 carried + 4 new; 3 carried + 1 new.
    assert b[HISTORY_OFFSETS].tolist() == [0, 0, 0, 0, 3, 2, 1, 0, 0, 0, 0, 3, 2, 1, 0]
    assert torch.equal(history_rows(b), b[HISTORY_OFFSETS] > 0)
    assert torch.equal(b[Columns.LOSS_MASK], b[HISTORY_OFFSETS] == 0)
    steps = [0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 5, 6, 7, 8]
    assert b[Columns.ACTIONS].tolist() == [int(ep["actions"][t]) for t in steps]
    torch.testing.assert_close(b[Columns.REWARDS], torch.tensor([ep["rewards"][t] for t in steps], dtype=torch.float32))
    torch.testing.assert_close(b[Columns.OBS], torch.as_tensor(np.stack([ep["obs"][t] for t in steps])))
    torch.testing.assert_close(b[BEHAVIOUR_LOGITS], torch.as_tensor(np.stack([ep["logits"][t] for t in steps])))
    # One chunk each: the terminal flag on the last, the bootstrap on the cut ones.
    assert b[Columns.TRUNCATEDS].nonzero().squeeze(-1).tolist() == [3, 10]
    assert b[Columns.TERMINATEDS].nonzero().squeeze(-1).tolist() == [14]
    assert float(b[BOOTSTRAP_VALUES][10]) == pytest.approx(float(_value(ep["obs"][8][None])[0]))
    # Without the window: the rows of old.
    plain = LeanEpisodesToBatch()(rl_module={DEFAULT_MODULE_ID: _Values(_value)}, batch={},
                                  episodes=[first, second, third])[DEFAULT_MODULE_ID]
    assert history_rows(plain) is None and plain[Columns.ACTIONS].tolist() == [int(a) for a in ep["actions"]]


class _StepIndex(ConnectorV2):
    """A user's learner piece: a per-step column (the step's index in its episode), or
    one that replaces the rewards."""

    def __init__(self, column="step"):
        super().__init__()
        self.column = column

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        for e in episodes:
            steps = [float(e.t_started + i) for i in range(len(e))]
            self.add_n_batch_items(batch, self.column, steps, len(e), single_agent_episode=e)
        return batch


def test_a_users_column_is_zero_on_the_carried_rows():
    ep = _episode(9, True)
    chunks = [c for _, c in _fragments(ep, 4, 3)]
    batch = _StepIndex()(rl_module=None, batch={}, episodes=chunks)
    b = LeanEpisodesToBatch(history=3)(rl_module={DEFAULT_MODULE_ID: _Values(_value)}, batch=batch,
                                       episodes=chunks)
    assert list(b) == [DEFAULT_MODULE_ID]  # the user's column moved into the module's batch
    assert b[DEFAULT_MODULE_ID]["step"].tolist() == [0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 7, 0, 0, 0, 8]
    batch = _StepIndex(Columns.REWARDS)(rl_module=None, batch={}, episodes=chunks)
    with pytest.raises(ValueError, match=r"^learner connector column 'rewards' replaces the lean batch's own, which "
                                         r"has rows carried from earlier fragments \(hindsight.across_fragments\)$"):
        LeanEpisodesToBatch(history=3)(rl_module={DEFAULT_MODULE_ID: _Values(_value)}, batch=batch, episodes=chunks)


# --------------------------------------------------------------------------- the learner


def _reward_config(trust=None, across=True, **training):
    hindsight = {"outcome": "reward", "window": 4, "hiddens": [8], "across_fragments": across}
    return (HCAConfig().training(gamma=0.9, lr=3e-3, grad_clip=0.05, trust=trust, hindsight=hindsight, **training)
            .rl_module(model_config={"fcnet_hiddens": [16, 16]}).debugging(seed=3))


def _chunks(seed):
    """Chunks of 2-dimensional observations, some carrying up to 4 earlier steps."""
    chunks = []
    for i, (length, fragment, terminated) in enumerate(((10, 4, False), (7, 3, True), (5, 5, True))):
        ep = _episode(length, terminated, seed=100 * seed + i)
        chunks += [c for _, c in _fragments(ep, fragment, 4)]
    return chunks


def _build(config, spaces_dim=2):
    config = copy.deepcopy(config).learners(learner_path="lean")
    config.validate()
    space = gym.spaces.Box(-1e6, 1e6, (spaces_dim,), np.float32)
    return config.build_learner(spaces={MID: (space, gym.spaces.Discrete(NUM_ACTIONS))})


@pytest.mark.parametrize("carried", [True, False], ids=["a2c_same_rows", "a2c_plain"])
def test_at_trust_zero_the_carried_rows_change_nothing(carried):
    """Trust 0 (no evidence yet): the carried rows' weights are 0, they count in no mean
    and they pass through the module apart from the fragments' own rows, so the policy and
    the value learn as under A2C on the same chunks, to the bit: against A2C whose batch
    carries the same rows (its classifier, trained beside it, takes the carried pairs
    too) and against plain A2C."""
    learner = _build(_reward_config(trust="bias"))
    a2c_config = A2CConfig().training(gamma=0.9, lr=3e-3, grad_clip=0.05)
    if carried:
        a2c_config = a2c_config.training(hindsight_loss_coeff=1.0, hindsight={
            "outcome": "reward", "window": 4, "hiddens": [8], "across_fragments": True})
    a2c = _build(a2c_config.rl_module(model_config={"fcnet_hiddens": [16, 16]}).debugging(seed=3))
    module, a2c_module = learner.module[MID].unwrapped(), a2c.module[MID].unwrapped()
    start = {k: v.clone() for k, v in a2c_module.state_dict().items() if not k.startswith(("hindsight", "return_"))}
    module.load_state_dict(start, strict=False)
    for seed in range(3):
        module.trust_evidence.zero_()
        results = learner.update(episodes=_chunks(seed))
        a2c.update(episodes=_chunks(seed))
        assert float(module.trust) == 0.0 and float(results[MID]["credit/history_rows"].peek()) > 0
    params = dict(module.named_parameters())
    for name, value in a2c_module.named_parameters():
        if name.startswith(("hindsight", "return_")):
            continue
        assert torch.equal(params[name], value), name
        assert not torch.equal(value, start[name]), name


def test_the_carried_rows_get_credit_and_train_the_classifier():
    """Without a trust: the carried rows' weights are the correction (not 0), their pairs
    with this fragment's rewards train the classifier, and their KL to the behaviour
    policy is reported."""
    learner = _build(_reward_config(trust=None, hindsight_epochs=1))
    seen = {}
    compute = learner.compute_loss_for_module

    def spy(**kwargs):
        loss = compute(**kwargs)  # the lean path writes the credit into the batch here
        seen["batch"] = {k: v.detach().clone() for k, v in kwargs["batch"].items() if isinstance(v, torch.Tensor)}
        return loss

    learner.compute_loss_for_module = spy
    for seed in range(2):
        results = learner.update(episodes=_chunks(seed))
    batch = seen["batch"]
    history = history_rows(batch)
    assert bool(history.any()) and bool((batch[CREDIT_WEIGHTS][history] != 0).any())
    assert float(results[MID]["info/history_reward_pairs"].peek()) > 0
    assert float(results[MID]["credit/history_kl"].peek()) >= 0.0
    assert float(results[MID]["hindsight_loss"].peek()) > 0


# --------------------------------------------------------------------------- the config


def test_the_config_sizes_the_lookback_and_refuses_what_cannot_carry_it():
    config = HCAConfig().environment("CartPole-v1").training(
        hindsight={"outcome": "reward", "window": 100, "across_fragments": True}).learners(learner_path="auto")
    config.validate()  # a window past the 64-step fragment is what it is for
    assert config.episode_lookback_horizon >= 100 and config.history_window == 100
    assert HCAConfig().environment("CartPole-v1").history_window == 0
    with pytest.raises(ValueError, match=r"^hindsight.across_fragments needs outcome='reward' [^\n]*$"):
        HCAConfig().training(hindsight={"across_fragments": True})
    with pytest.raises(ValueError, match=r"^hindsight.across_fragments must be True or False, got 1$"):
        HCAConfig().training(hindsight={"outcome": "reward", "across_fragments": 1})
    rllib = copy.deepcopy(config).learners(learner_path="rllib")
    with pytest.raises(ValueError, match=r"^hindsight.across_fragments needs learner_path='lean' or 'auto'"):
        rllib.validate()
    with_piece = copy.deepcopy(config).learners(learner_connector=lambda o, a: _StepIndex())
    with_piece.validate()  # the user's learner pieces run on the lean path that carries it
    assert with_piece.uses_lean_learner
    plain = HCAConfig().environment("CartPole-v1").training(hindsight={"outcome": "reward", "window": 100})
    with pytest.raises(ValueError, match="hindsight.across_fragments=True"):
        plain.validate()


def test_a_users_learner_piece_trains_with_the_carried_window(ray_local):
    """`algo.train()` with a user's learner piece that adds a column: the window is carried
    (carried rows in the batch) and the column reaches the loss, row for row."""
    seen = []

    class Spy(HCAConfig().get_default_learner_class()):
        def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
            seen.append((batch["step"].clone(), batch[HISTORY_OFFSETS].clone()))
            return super().compute_loss_for_module(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)

    config = (HCAConfig().environment("HCA/DelayedEffect-v0", env_config={"length": 9, "noise_std": 1.0})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=3, rollout_fragment_length=4)
              .training(hindsight={"outcome": "reward", "window": 6, "across_fragments": True},
                        train_batch_size_per_learner=12, learner_class=Spy)
              .learners(learner_connector=lambda obs_space, act_space: _StepIndex(), learner_path="lean")
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        for _ in range(3):
            results = algo.train()
    finally:
        algo.stop()
    assert float(results["learners"][MID]["credit/history_rows"]) > 0
    step, offsets = seen[-1]
    carried = offsets > 0
    assert bool(carried.any()) and bool((step[carried] == 0).all())
    # A chunk's new rows count on from its first step: +1 row after row within a chunk.
    new = step[~carried]
    assert bool(((new[1:] - new[:-1] == 1) | (new[1:] < new[:-1]) | (new[1:] == 0)).all())


# --------------------------------------------------------------------------- the samplers


@pytest.mark.parametrize("sampler", ["lean", "rllib"])
def test_both_samplers_carry_the_window(ray_local, sampler):
    """What each sampler hands the learner: a chunk that goes on from the last fragment
    carries that fragment's last steps (the window's), with their actions, rewards and
    sampling logits, in front of its own."""
    config = (HCAConfig().environment("HCA/DelayedEffect-v0", env_config={"length": 9, "noise_std": 1.0})
              .env_runners(num_env_runners=0, num_envs_per_env_runner=3, rollout_fragment_length=4, sampler=sampler)
              .training(hindsight={"outcome": "reward", "window": 6, "across_fragments": True},
                        train_batch_size_per_learner=12)
              .learners(learner_path="lean")  # the one that carries the window
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        runner = algo.env_runner
        before = {e.id_: e for e in runner.sample(num_timesteps=12, random_actions=False)}
        after = runner.sample(num_timesteps=12, random_actions=False)
        to_batch = LeanEpisodesToBatch(history=6)
        going_on = [e for e in after if e.id_ in before and len(before[e.id_]) > 0]
        assert going_on, "no chunk went on from the last fragment"
        for chunk in going_on:
            old = before[chunk.id_]
            b = to_batch(rl_module={DEFAULT_MODULE_ID: _Values(lambda o: torch.zeros(len(o)))}, batch={},
                         episodes=[chunk])[DEFAULT_MODULE_ID]
            carried = int(history_rows(b).sum())
            assert carried == min(6, old.t)  # the episode's steps so far, up to the window
            tail = slice(len(old) - carried, len(old))
            assert b[Columns.ACTIONS][:carried].tolist() == np.asarray(old.get_actions(tail, neg_index_as_lookback=True)).tolist()
            torch.testing.assert_close(b[Columns.REWARDS][:carried],
                                       torch.as_tensor(np.asarray(old.get_rewards(tail, neg_index_as_lookback=True)), dtype=torch.float32))
            torch.testing.assert_close(b[BEHAVIOUR_LOGITS][:carried], torch.as_tensor(np.asarray(
                old.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS, tail, neg_index_as_lookback=True)), dtype=torch.float32))
        result = algo.train()
        assert float(result["learners"][MID]["credit/history_rows"]) > 0
    finally:
        algo.stop()


def test_carried_rows_stack_their_frames_as_the_new_rows_do():
    """With frame stacking the carried rows' observations are the stacks of their own steps
    (zeros before the episode's first frame), as in the fragment that sampled them."""
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (5, 5, 1)).astype(np.uint8) for _ in range(10)]
    space = gym.spaces.Box(0, 255, (5, 5, 1), np.uint8)

    def chunk(start, end, lookback):
        return SingleAgentEpisode(
            observations=frames[start - lookback:end + 1], actions=list(range(start - lookback, end)),
            rewards=[1.0] * (end - start + lookback),
            extra_model_outputs={Columns.ACTION_DIST_INPUTS: [np.zeros(NUM_ACTIONS, np.float32)] * (end - start + lookback)},
            len_lookback_buffer=lookback, t_started=start, observation_space=space,
            action_space=gym.spaces.Discrete(10))

    def stack(t):  # the 3 frames up to step t, zeros before the first
        return np.concatenate([frames[j] if j >= 0 else np.zeros_like(frames[0]) for j in (t - 2, t - 1, t)], axis=-1)

    to_batch = LeanEpisodesToBatch(num_frames=3, history=3)
    module = {DEFAULT_MODULE_ID: _Values(lambda o: torch.zeros(len(o)))}
    # Steps 5..8, carrying 3 (2..4) with the 2 frames the stack reaches back to (0, 1).
    b = to_batch(rl_module=module, batch={}, episodes=[chunk(5, 9, 5)])[DEFAULT_MODULE_ID]
    assert b[Columns.ACTIONS].tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert b[HISTORY_OFFSETS].tolist() == [3, 2, 1, 0, 0, 0, 0]
    for row, t in enumerate(range(2, 9)):
        assert np.array_equal(b[Columns.OBS][row].numpy(), stack(t)), t
    # Early in the episode: 1 step to carry, its stack padded with zeros.
    b = to_batch(rl_module=module, batch={}, episodes=[chunk(1, 3, 1)])[DEFAULT_MODULE_ID]
    assert b[HISTORY_OFFSETS].tolist() == [1, 0, 0]
    for row, t in enumerate(range(0, 3)):
        assert np.array_equal(b[Columns.OBS][row].numpy(), stack(t)), t
