"""The reward outcome (method note, section 2.8): one hindsight classifier per later
reward, `credit.window_rewards`, `in_window_returns` and `reward_outcome_weights`.

The layout helpers are checked against plain per-row Python loops. The estimator is
checked on small tasks enumerated exactly: one decision at step t, later rewards
r_{t+1}, r_{t+2} drawn from finite distributions given the action, terminal after t+2.
Every (action, outcome) is listed with its probability, the posteriors h_k(a | r_{t+k})
come from Bayes' rule, and the means and variances are exact sums (float64). Gradients
are with respect to the softmax logits (`credit.logit_gradient`); a variance is the
trace of the covariance of that gradient vector unless said otherwise.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from hca_rllib import credit as C

F64 = torch.float64


# ------------------------------------------------------------------ layout, brute force


def _random_batch(seed: int, dtype=F64):
    """Chunks of 1-8 steps, each ending terminated or truncated, and sometimes a last
    chunk cut with neither flag (the batch's end). Returns rewards, flags, the chunk of
    every row as built, and the bootstrap value of each row's chunk."""
    rng = np.random.default_rng(seed)
    rewards, terms, truncs, owner, boots = [], [], [], [], []
    n_chunks = int(rng.integers(1, 7))
    for c in range(n_chunks):
        n = int(rng.integers(1, 9))
        end = rng.choice(["terminated", "truncated", "none"] if c == n_chunks - 1 else ["terminated", "truncated"])
        # Some exact zeros among the rewards, as in sparse-reward tasks.
        r = np.where(rng.random(n) < 0.3, 0.0, rng.normal(0.0, 1.0, n))
        rewards += list(r)
        terms += [False] * (n - 1) + [end == "terminated"]
        truncs += [False] * (n - 1) + [end == "truncated"]
        owner += [c] * n
        boots += [0.0 if end == "terminated" else float(rng.normal(0.0, 3.0))] * n
    t = lambda x, d: torch.as_tensor(np.asarray(x), dtype=d)  # noqa: E731
    return (t(rewards, dtype), t(terms, torch.bool), t(truncs, torch.bool), np.asarray(owner),
            np.asarray(boots))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("window", [1, 3, 12])
def test_window_rewards_and_in_window_returns_against_loops(seed, window):
    """Entry [t, k-1] is r_{t+k} inside t's chunk and 0 past its end (window 12 is longer
    than every chunk); S_t is the discounted sum of the row. With a window longer than
    the chunk, Z_t - S_t is the immediate reward plus the bootstrap."""
    rewards, terms, truncs, owner, boots = _random_batch(seed)
    gamma = [0.5, 0.9, 1.0][seed % 3]
    chunks = C.chunk_ids(terms, truncs)
    assert chunks.tolist() == owner.tolist()
    got = C.window_rewards(rewards, chunks, window)
    n = len(rewards)
    ref = np.zeros((n, window))
    for t in range(n):
        for k in range(1, window + 1):
            if t + k < n and owner[t + k] == owner[t]:
                ref[t, k - 1] = float(rewards[t + k])
    assert got.shape == (n, window) and got.dtype == rewards.dtype
    assert np.array_equal(got.numpy(), ref)

    s = C.in_window_returns(got, gamma)
    ref_s = [sum(gamma ** k * ref[t, k - 1] for k in range(1, window + 1)) for t in range(n)]
    np.testing.assert_allclose(s.numpy(), ref_s, rtol=1e-13, atol=1e-13)
    assert s.dtype == F64

    # S_t straight from the rewards: sum_{k=1..K_t} gamma^k r_{t+k}, K_t = min(window, steps left).
    left = [sum(owner[t + 1:] == owner[t]) for t in range(n)]
    direct = [sum(gamma ** k * float(rewards[t + k]) for k in range(1, min(window, left[t]) + 1)) for t in range(n)]
    np.testing.assert_allclose(s.numpy(), direct, rtol=1e-13, atol=1e-13)

    if window == 12:
        # The remainder R_t = Z_t - S_t: the immediate reward plus what lies past the
        # chunk (the bootstrap of a truncated chunk; nothing after a terminal or a cut
        # without a flag).
        next_v = torch.as_tensor(boots)
        z = C.discounted_returns(rewards, next_v, terms, truncs, gamma)
        truncated_chunk = np.array([bool(truncs[t + left[t]]) for t in range(n)])
        ref_rem = [float(rewards[t]) + (gamma ** (left[t] + 1) * boots[t] if truncated_chunk[t] else 0.0)
                   for t in range(n)]
        np.testing.assert_allclose((z - s).numpy(), ref_rem, rtol=1e-12, atol=1e-12)


def test_window_rewards_dtypes_and_small_batches():
    chunks = torch.tensor([0, 0, 1])
    for dtype in (torch.float32, F64, torch.int64):
        r = torch.tensor([1, 2, 3], dtype=dtype)
        out = C.window_rewards(r, chunks, 2)
        assert out.dtype == dtype
        assert out.tolist() == [[2, 0], [0, 0], [0, 0]]
    assert C.in_window_returns(torch.tensor([[2, 4]]), 0.5).dtype == torch.float32
    assert C.in_window_returns(torch.tensor([[2, 4]]), 0.5).tolist() == [2.0]
    assert C.in_window_returns(torch.tensor([[2.0, 4.0]], dtype=torch.float32), 0.5).dtype == torch.float32
    assert C.window_rewards(torch.tensor([5.0]), torch.tensor([0]), 3).tolist() == [[0.0, 0.0, 0.0]]
    assert C.window_rewards(torch.zeros(0), torch.zeros(0, dtype=torch.long), 2).shape == (0, 2)


@pytest.mark.parametrize("window", [0, -1, True, 1.5, "2", None])
def test_bad_window_is_refused(window):
    with pytest.raises(ValueError, match="window"):
        C.window_rewards(torch.zeros(3), torch.zeros(3, dtype=torch.long), window)


# ------------------------------------------------------------------ exact enumeration


def _marginal(dist, value):
    return sum(p for v, p in dist if v == value)


def enumerate_task(pi, r0, r1, r2, gamma):
    """Every (action, r_t, r_{t+1}, r_{t+2}) of the task with its probability; `r0`, `r1`,
    `r2`: per action a list of (value, probability), independent given the action.
    Each outcome is a 3-step terminated chunk, and the decision's row of each goes
    through `window_rewards` (window 2) and `discounted_returns` as a learner's batch
    would. Returns the tensors of the decision rows and the exact quantities."""
    pi = np.asarray(pi, dtype=np.float64)
    rows = []
    for a in range(len(pi)):
        for (v0, p0), (v1, p1), (v2, p2) in itertools.product(r0[a], r1[a], r2[a]):
            rows.append((a, v0, v1, v2, pi[a] * p0 * p1 * p2))
    prob = np.array([row[4] for row in rows])
    assert abs(prob.sum() - 1.0) < 1e-14
    actions = torch.tensor([row[0] for row in rows])
    flat = torch.tensor([v for row in rows for v in row[1:4]], dtype=F64)
    m = len(rows)
    terms = torch.tensor([False, False, True] * m)
    truncs = torch.zeros(3 * m, dtype=torch.bool)
    first = slice(0, 3 * m, 3)
    wr = C.window_rewards(flat, C.chunk_ids(terms, truncs), 2)[first]
    z = C.discounted_returns(flat, torch.zeros(3 * m, dtype=F64), terms, truncs, gamma)[first]

    def posterior(dist_of, value):  # h_k(. | r_{t+k} = value), Bayes
        joint = pi * np.array([_marginal(dist_of[a], value) for a in range(len(pi))])
        return joint / joint.sum()

    h = torch.tensor(np.stack([np.stack([posterior(r1, row[2]), posterior(r2, row[3])]) for row in rows]))
    mean = lambda dist: sum(v * p for v, p in dist)  # noqa: E731
    q = np.array([mean(r0[a]) + gamma * mean(r1[a]) + gamma ** 2 * mean(r2[a]) for a in range(len(pi))])
    v = float(pi @ q)
    expected_s = float(sum(pi[a] * (gamma * mean(r1[a]) + gamma ** 2 * mean(r2[a])) for a in range(len(pi))))
    return {"actions": actions, "window_rewards": wr, "returns": z, "h": h, "prob": torch.tensor(prob),
            "pi": torch.tensor(pi).expand(m, len(pi)), "q": q, "v": v, "v_rem": v - expected_s,
            "gradient": pi * (q - v), "gamma": gamma, "m": m}


def _moments(weights, task):
    """Exact mean and trace of the covariance of the logit gradient of `weights`."""
    g = C.logit_gradient(weights, task["pi"])
    p = task["prob"].unsqueeze(-1)
    mean = (p * g).sum(0)
    return mean, float((p * (g - mean) ** 2).sum()), g


def _reward_outcome(task, *, remainder_values=None, window_rewards=None, returns=None, h=None, **kw):
    m = task["m"]
    returns = task["returns"] if returns is None else returns
    vrem = torch.full((m,), task["v_rem"], dtype=F64) if remainder_values is None else remainder_values
    return C.reward_outcome_weights(
        actions=task["actions"], gae=returns - task["v"], returns=returns, remainder_values=vrem,
        window_rewards=task["window_rewards"] if window_rewards is None else window_rewards,
        pi_probs=task["pi"], h_probs=task["h"] if h is None else h, gamma=task["gamma"], **kw)


def _a2c(task):
    return C.one_hot_weights(task["returns"] - task["v"], task["actions"], task["pi"].shape[-1])


# Three actions; r_t depends on the action; r_{t+1} tells a lot about the action,
# r_{t+2} a little (and never for actions 0 and 1 apart); both can be 0.
PI = (0.5, 0.3, 0.2)
R0 = [[(0.0, 0.5), (1.0, 0.5)], [(-0.5, 1.0)], [(0.2, 0.4), (0.0, 0.6)]]
R1 = [[(2.0, 0.8), (0.0, 0.2)], [(2.0, 0.3), (0.0, 0.5), (-1.0, 0.2)], [(0.0, 0.6), (-1.0, 0.4)]]
R2 = [[(1.0, 0.5), (3.0, 0.5)], [(1.0, 0.5), (3.0, 0.5)], [(1.0, 0.2), (3.0, 0.6), (0.0, 0.2)]]


@pytest.mark.parametrize("gamma", [0.9, 1.0])
def test_unbiased_exactly_on_two_reward_events(gamma):
    """E[gradient] of the reward-outcome weights (exact h_k, exact Vrem) equals A2C's
    with exact V and the analytic policy gradient pi(b) (Q(b) - V)."""
    task = enumerate_task(PI, R0, R1, R2, gamma)
    out = _reward_outcome(task)
    mean_r, _, _ = _moments(out["weights"], task)
    mean_a2c, _, _ = _moments(_a2c(task), task)
    analytic = torch.tensor(task["gradient"])
    torch.testing.assert_close(mean_a2c, analytic, rtol=0, atol=1e-12)
    torch.testing.assert_close(mean_r, analytic, rtol=0, atol=1e-12)
    assert float(analytic.abs().min()) > 0.05  # a gradient worth matching
    # The variances (trace) the method note quotes for gamma = 0.9 (not guaranteed in
    # general: see the counterexample below).
    if gamma == 0.9:
        assert _moments(out["weights"], task)[1] == pytest.approx(0.22689308230, abs=1e-10)
        assert _moments(_a2c(task), task)[1] == pytest.approx(1.19101648, abs=1e-10)
    # The parts are what they say: S_t, R_t = Z_t - S_t = r_t here (terminal after t+2).
    wr = task["window_rewards"]
    torch.testing.assert_close(out["in_window"], gamma * wr[:, 0] + gamma ** 2 * wr[:, 1], rtol=0, atol=1e-14)
    torch.testing.assert_close(out["remainder"], task["returns"] - out["in_window"], rtol=0, atol=0)
    assert torch.equal(out["weights"], out["reward_weights"])  # trust None: the pure estimator
    assert torch.equal(out["advantages"], out["weights"].gather(-1, task["actions"].unsqueeze(-1)).squeeze(-1))


@pytest.mark.parametrize("gamma", [0.9, 1.0])
def test_each_reward_term_has_the_mean_and_at_most_the_variance_of_its_sampled_form(gamma):
    """Term k alone, gamma^k r_{t+k} (h_k - pi), against gamma^k r_{t+k} onehot(a_t): the
    same mean, a variance no higher (Rao-Blackwell per reward), strictly lower here where
    the reward carries information about the action (per logit as well as in trace)."""
    task = enumerate_task(PI, R0, R1, R2, gamma)
    for k in (1, 2):
        only_k = torch.zeros_like(task["window_rewards"])
        only_k[:, k - 1] = task["window_rewards"][:, k - 1]
        s_k = C.in_window_returns(only_k, gamma)
        # Returns = S (the remainder is 0) and Vrem = 0: the weights are term k alone.
        out = _reward_outcome(task, window_rewards=only_k, returns=s_k,
                              remainder_values=torch.zeros(task["m"], dtype=F64))
        assert torch.equal(out["remainder"], torch.zeros(task["m"], dtype=F64))
        sampled = C.one_hot_weights(gamma ** k * only_k[:, k - 1], task["actions"], 3)
        mean_t, var_t, g_t = _moments(out["reward_weights"], task)
        mean_s, var_s, g_s = _moments(sampled, task)
        torch.testing.assert_close(mean_t, mean_s, rtol=0, atol=1e-12)
        assert var_t < var_s - 1e-3
        p = task["prob"].unsqueeze(-1)
        per_logit_t, per_logit_s = (p * (g_t - mean_t) ** 2).sum(0), (p * (g_s - mean_s) ** 2).sum(0)
        assert bool((per_logit_t < per_logit_s).all())


def test_the_total_variance_is_not_guaranteed_below_a2c():
    """gamma = 1, pi = (1/2, 1/2), r_t = 0, r_{t+1} = 2 * 1[a_t = 0], r_{t+2} = -1: Z = +-1
    and V = 0, so A2C's logit gradient is (1/2, -1/2) whatever the action (variance 0).
    The per-reward form puts the whole first reward on a_t = 0 (h_1 = onehot(0) given
    r_{t+1} = 2; r_{t+1} = 0 adds nothing) and nothing on a_t = 1; the constant r_{t+2}
    cancels exactly. Its gradient is (1, -1) or (0, 0): the same mean, variance 1/4 per
    logit (1/2 in trace)."""
    task = enumerate_task((0.5, 0.5), [[(0.0, 1.0)]] * 2, [[(2.0, 1.0)], [(0.0, 1.0)]], [[(-1.0, 1.0)]] * 2, 1.0)
    assert task["v"] == 0.0 and task["v_rem"] == 0.0
    out = _reward_outcome(task)
    mean_r, var_r, g_r = _moments(out["weights"], task)
    mean_a, var_a, g_a = _moments(_a2c(task), task)
    assert torch.equal(g_a, torch.tensor([[0.5, -0.5], [0.5, -0.5]], dtype=F64))
    assert torch.equal(g_r, torch.tensor([[1.0, -1.0], [0.0, 0.0]], dtype=F64))
    assert torch.equal(mean_r, mean_a)
    assert var_a == 0.0
    assert var_r == 0.5  # trace: 1/4 for each of the two logits
    per_logit = (task["prob"].unsqueeze(-1) * (g_r - mean_r) ** 2).sum(0)
    assert per_logit.tolist() == [0.25, 0.25]


def test_a_constant_reward_carries_nothing_and_the_remainder_baseline_removes_it():
    """r_{t+1} = r_{t+2} = c whatever the action: h_k == pi, so every k term is exactly 0,
    and with Vrem = V - E[S] the weights are A2C's. Centring the remainder by V instead
    leaves -E[S] in every weight: still unbiased (V is a function of the state), but of
    strictly higher variance."""
    c, gamma = 1.0, 0.5
    pi = (0.5, 0.25, 0.25)  # dyadic: Bayes' rule gives pi back to the bit
    r0 = [[(0.0, 0.5), (2.0, 0.5)], [(-1.0, 1.0)], [(1.0, 0.25), (0.0, 0.75)]]
    task = enumerate_task(pi, r0, [[(c, 1.0)]] * 3, [[(c, 1.0)]] * 3, gamma)
    assert torch.equal(task["h"], task["pi"].unsqueeze(1).expand(-1, 2, -1))
    out = _reward_outcome(task)
    # The k terms alone (the remainder's weight subtracted) are exactly 0.
    remainder_w = C.one_hot_weights(out["remainder"] - task["v_rem"], task["actions"], 3)
    assert torch.equal(out["reward_weights"] - remainder_w, torch.zeros(task["m"], 3, dtype=F64))
    torch.testing.assert_close(out["weights"], _a2c(task), rtol=0, atol=1e-14)
    mean_r, var_r, _ = _moments(out["weights"], task)
    mean_a, var_a, _ = _moments(_a2c(task), task)
    assert var_r == pytest.approx(var_a, abs=1e-14)

    by_v = _reward_outcome(task, remainder_values=torch.full((task["m"],), task["v"], dtype=F64))
    mean_v, var_v, _ = _moments(by_v["weights"], task)
    torch.testing.assert_close(mean_v, torch.tensor(task["gradient"]), rtol=0, atol=1e-12)
    torch.testing.assert_close(mean_r, mean_v, rtol=0, atol=1e-12)
    assert var_v > var_r + 0.05
    assert (var_r, var_v) == (pytest.approx(0.46875, abs=1e-14), pytest.approx(1.078125, abs=1e-14))


def test_terms_are_exactly_zero_where_h_equals_pi_whatever_the_rewards():
    g = torch.Generator().manual_seed(3)
    n, window, a = 40, 4, 5
    pi = torch.softmax(torch.randn(n, a, generator=g, dtype=F64), -1)
    wr = torch.randn(n, window, generator=g, dtype=F64) * (torch.rand(n, window, generator=g) < 0.7)
    actions = torch.randint(0, a, (n,), generator=g)
    returns, vrem = torch.randn(n, generator=g, dtype=F64), torch.randn(n, generator=g, dtype=F64)
    out = C.reward_outcome_weights(actions=actions, gae=returns - 1.0, returns=returns, remainder_values=vrem,
                                   window_rewards=wr, pi_probs=pi, h_probs=pi.unsqueeze(1).expand(-1, window, -1),
                                   gamma=0.97, scale=torch.rand(n, generator=g, dtype=F64) * 3)
    remainder_w = C.one_hot_weights(out["remainder"] - vrem, actions, a)
    assert torch.equal(out["reward_weights"] - remainder_w, torch.zeros(n, a, dtype=F64))


# ------------------------------------------------------------------ trust, masking, shapes


def _random_inputs(seed, n=30, window=3, a=4, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    pi = torch.softmax(torch.randn(n, a, generator=g, dtype=F64), -1)
    h = torch.softmax(torch.randn(n, window, a, generator=g, dtype=F64), -1)
    wr = torch.randn(n, window, generator=g, dtype=F64) * (torch.rand(n, window, generator=g) < 0.6)
    returns = torch.randn(n, generator=g, dtype=F64)
    values = torch.randn(n, generator=g, dtype=F64)
    kw = dict(actions=torch.randint(0, a, (n,), generator=g), gae=returns - values, returns=returns,
              remainder_values=torch.randn(n, generator=g, dtype=F64), window_rewards=wr, pi_probs=pi, h_probs=h,
              gamma=0.9, scale=1.7)
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kw.items()}


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_trust_zero_is_a2c_exactly_none_is_pure_and_partial_is_the_blend(dtype):
    kw = _random_inputs(0, dtype=dtype)
    n, a = kw["pi_probs"].shape
    a2c = C.one_hot_weights(kw["gae"], kw["actions"], a)
    pure = C.reward_outcome_weights(**kw)
    assert not torch.allclose(pure["weights"], a2c)
    for zero in (torch.tensor(0.0, dtype=dtype), torch.zeros(n, dtype=dtype), torch.zeros(n, dtype=F64), 0.0):
        out = C.reward_outcome_weights(trust=zero, **kw)
        assert out["weights"].dtype == dtype
        assert torch.equal(out["weights"], a2c)
        assert torch.equal(out["advantages"], kw["gae"])
        assert torch.equal(out["reward_weights"], pure["reward_weights"])
    assert torch.equal(pure["weights"], pure["reward_weights"])
    for w in (torch.tensor(0.3, dtype=dtype), torch.full((n,), 0.3, dtype=dtype)):
        mixed = C.reward_outcome_weights(trust=w, **kw)
        torch.testing.assert_close(mixed["weights"], 0.7 * a2c + 0.3 * pure["reward_weights"])
    per_step = torch.rand(n, generator=torch.Generator().manual_seed(9), dtype=F64).to(dtype)
    mixed = C.reward_outcome_weights(trust=per_step, **kw)
    torch.testing.assert_close(mixed["weights"],
                               (1 - per_step[:, None]) * a2c + per_step[:, None] * pure["reward_weights"])


def test_scale_multiplies_only_the_reward_terms():
    kw = _random_inputs(1)
    n = len(kw["returns"])
    base = C.reward_outcome_weights(**{**kw, "scale": 0.0})["reward_weights"]
    one = C.reward_outcome_weights(**{**kw, "scale": 1.0})["reward_weights"]
    per_step = torch.linspace(0.0, 2.0, n, dtype=F64)
    for scale in (2.5, torch.tensor(2.5, dtype=F64)):
        got = C.reward_outcome_weights(**{**kw, "scale": scale})["reward_weights"]
        torch.testing.assert_close(got, base + 2.5 * (one - base))
    got = C.reward_outcome_weights(**{**kw, "scale": per_step})["reward_weights"]
    torch.testing.assert_close(got, base + per_step[:, None] * (one - base))
    remainder_w = C.one_hot_weights(
        C.reward_outcome_weights(**kw)["remainder"] - kw["remainder_values"], kw["actions"], 4)
    assert torch.equal(base, remainder_w)


def test_zero_rewards_ignore_garbage_in_the_classifier():
    """Where r_{t+k} = 0 the classifier's entry is not read: garbage there (large, then
    not finite) changes no output bit."""
    kw = _random_inputs(2)
    zero = kw["window_rewards"] == 0
    assert 0 < int(zero.sum()) < zero.numel()
    clean = C.reward_outcome_weights(**{**kw, "h_probs": torch.where(zero.unsqueeze(-1), kw["pi_probs"].unsqueeze(1),
                                                                     kw["h_probs"])})
    garbage = torch.randn(kw["h_probs"].shape, generator=torch.Generator().manual_seed(4), dtype=F64) * 1e6
    dirty = C.reward_outcome_weights(**{**kw, "h_probs": torch.where(zero.unsqueeze(-1), garbage, kw["h_probs"])})
    for key in clean:
        assert torch.equal(clean[key], dirty[key]), key
    # Masked, not multiplied by 0: not even a NaN or an infinity there gets through.
    garbage[0, 0] = float("nan")
    garbage[1::2] = float("inf")
    dirty = C.reward_outcome_weights(**{**kw, "h_probs": torch.where(zero.unsqueeze(-1), garbage, kw["h_probs"])})
    for key in clean:
        assert torch.equal(clean[key], dirty[key]), key
    # Without the zero rewards' entries, the hindsight terms are those of h where r != 0.
    as_given = C.reward_outcome_weights(**kw)
    for key in clean:
        assert torch.equal(clean[key], as_given[key]), key


def test_shapes_and_dtypes():
    for dtype in (torch.float32, F64):
        kw = _random_inputs(5, n=7, window=2, a=3, dtype=dtype)
        out = C.reward_outcome_weights(**kw)
        assert set(out) == {"weights", "reward_weights", "hindsight_weights", "advantages", "in_window", "remainder"}
        for key, shape in (("weights", (7, 3)), ("reward_weights", (7, 3)), ("hindsight_weights", (7, 3)), ("advantages", (7,)),
                           ("in_window", (7,)), ("remainder", (7,))):
            assert out[key].shape == shape and out[key].dtype == dtype, key
        torch.testing.assert_close(out["in_window"], C.in_window_returns(kw["window_rewards"], 0.9))
    kw = _random_inputs(6)
    with pytest.raises(ValueError, match="h_probs"):
        C.reward_outcome_weights(**{**kw, "h_probs": kw["h_probs"][:, :2]})


def test_the_sampled_form_differs_from_the_estimator_by_the_replaced_terms_alone():
    """A2C's form of the `k` terms, `S_t onehot(a_t)`, minus `hindsight_weights` (what
    `trust="bias"` tests) has the logit gradient `sum_k gamma^k r_{t+k} (onehot(a_t) -
    h_k)`; `hindsight_weights` is `reward_weights` less the remainder's sampled term."""
    g = torch.Generator().manual_seed(5)
    n, window, a, gamma = 30, 4, 3, 0.9
    pi = torch.softmax(torch.randn(n, a, generator=g, dtype=F64), -1)
    h = torch.softmax(torch.randn(n, window, a, generator=g, dtype=F64), -1)
    wr = torch.randn(n, window, generator=g, dtype=F64) * (torch.rand(n, window, generator=g) < 0.6)
    actions = torch.randint(0, a, (n,), generator=g)
    returns, vrem = torch.randn(n, generator=g, dtype=F64), torch.randn(n, generator=g, dtype=F64)
    out = C.reward_outcome_weights(actions=actions, gae=returns - 1.0, returns=returns, remainder_values=vrem,
                                   window_rewards=wr, pi_probs=pi, h_probs=h, gamma=gamma)
    onehot = torch.nn.functional.one_hot(actions, a).to(F64)
    powers = torch.tensor([gamma ** k for k in range(1, window + 1)], dtype=F64)
    expected = ((wr * powers).unsqueeze(-1) * (onehot.unsqueeze(1) - h)).sum(1)
    sampled = C.one_hot_weights(out["in_window"], actions, a)
    torch.testing.assert_close(C.logit_gradient(sampled - out["hindsight_weights"], pi), expected)
    torch.testing.assert_close(out["reward_weights"] - out["hindsight_weights"],
                               C.one_hot_weights(out["remainder"] - vrem, actions, a))
