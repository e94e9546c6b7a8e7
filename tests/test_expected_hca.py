"""Expected (all-action) HCA and the evidence trust, against closed forms.

The ambiguous bandit (method note, section 5): action a pays N(2, 1.5^2) with
probability 0.9 and N(1, 1.5^2) otherwise, b the mirror; the exact posterior h(a|z)
is `bandit_exact_posterior`. The policy gradient is taken with respect to the logit
of a (pi(a) = sigmoid(logit)), as in the issue's Monte Carlo check: A2C's per-sample
gradient is (Z - V)(1[a] - p), expected HCA's (Z - V)(h(a|Z) - p).
"""

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from hca_rllib import credit as C
from hca_rllib.envs.known_answer import bandit_exact_posterior, bandit_q_values, bandit_return_density

F64 = torch.float64


def _mixture(z, p):
    return p * bandit_return_density(z, 0) + (1 - p) * bandit_return_density(z, 1)


def _quad(f):
    value, _ = integrate.quad(f, -25.0, 28.0, points=[1.0, 2.0], limit=400)
    return value


def closed_forms(p, alpha=1.0):
    """Mean and variance of the A2C and expected-HCA logit gradients, by quadrature;
    the classifier q = p + alpha (h - p) (alpha = 1: exact posterior)."""
    q_a, q_b = bandit_q_values()
    v = p * q_a + (1 - p) * q_b
    a2c_mean = p * (1 - p) * (q_a - q_b)
    a2c_second = _quad(lambda z: (z - v) ** 2 * (
        p * bandit_return_density(z, 0) * (1 - p) ** 2 + (1 - p) * bandit_return_density(z, 1) * p ** 2))

    def g(z):
        return (z - v) * alpha * (bandit_exact_posterior(z, p) - p)

    exp_mean = _quad(lambda z: _mixture(z, p) * g(z))
    exp_second = _quad(lambda z: _mixture(z, p) * g(z) ** 2)
    return {"a2c_mean": a2c_mean, "a2c_var": a2c_second - a2c_mean ** 2,
            "expected_mean": exp_mean, "expected_var": exp_second - exp_mean ** 2, "v": v}


def bandit_samples(p, n=400_000, seed=11):
    rng = np.random.default_rng(seed)
    took_a = rng.random(n) < p
    hi = np.where(took_a, rng.random(n) < 0.9, rng.random(n) < 0.1)
    z = rng.normal(np.where(hi, 2.0, 1.0), 1.5)
    h = bandit_exact_posterior(z, p)
    return took_a, z, h


def _probs(p_a):
    p_a = torch.as_tensor(p_a, dtype=F64)
    return torch.stack([p_a, 1 - p_a], dim=-1)


def _logit_gradient_of_a(weights, pi):
    # Two-action softmax: the logit of a against a fixed logit of b.
    return C.logit_gradient(weights, pi)[:, 0]


# ------------------------------------------------------------------ closed forms


def test_closed_forms_match_the_issue_monte_carlo():
    cf = closed_forms(0.5)
    assert cf["a2c_mean"] == pytest.approx(0.2)
    assert cf["expected_mean"] == pytest.approx(0.2, abs=1e-9)  # Rao-Blackwell: same mean
    assert cf["a2c_var"] == pytest.approx(0.585, abs=1e-3)       # issue: 0.584 (2M samples)
    assert cf["expected_var"] == pytest.approx(0.066, abs=2e-3)  # issue: 0.066
    shrunk = closed_forms(0.5, alpha=0.5)
    assert shrunk["expected_mean"] == pytest.approx(0.1, abs=1e-9)  # half the signal


@pytest.mark.parametrize("p", [0.5, 0.3])
def test_expected_hca_weights_give_a2c_mean_with_lower_variance(p):
    took_a, z, h = bandit_samples(p)
    n = len(z)
    cf = closed_forms(p)
    pi = _probs(np.full(n, p))
    actions = torch.as_tensor(np.where(took_a, 0, 1))
    returns, values = torch.as_tensor(z), torch.full((n,), cf["v"], dtype=F64)
    a2c = _logit_gradient_of_a(C.one_hot_weights(returns - values, actions, 2), pi).numpy()
    expected = _logit_gradient_of_a(C.expected_hca_weights(returns, values, _probs(h), pi), pi).numpy()
    se = lambda x: x.std(ddof=1) / math.sqrt(n)  # noqa: E731
    assert abs(a2c.mean() - cf["a2c_mean"]) < 4 * se(a2c)
    assert abs(expected.mean() - cf["a2c_mean"]) < 4 * se(expected)
    assert expected.var() == pytest.approx(cf["expected_var"], rel=0.03)
    assert a2c.var() == pytest.approx(cf["a2c_var"], rel=0.03)
    assert expected.var() < 0.2 * a2c.var()


@pytest.mark.parametrize("alpha", [0.25, 0.5])
def test_shrunk_posterior_bias_is_what_the_closed_form_says(alpha):
    p = 0.5
    took_a, z, h = bandit_samples(p, seed=12)
    n = len(z)
    q = p + alpha * (h - p)
    pi = _probs(np.full(n, p))
    values = torch.full((n,), 1.5, dtype=F64)
    g = _logit_gradient_of_a(C.expected_hca_weights(torch.as_tensor(z), values, _probs(q), pi), pi).numpy()
    target = closed_forms(p, alpha)["expected_mean"]
    assert target == pytest.approx(alpha * 0.2, abs=1e-9)
    assert abs(g.mean() - target) < 4 * g.std(ddof=1) / math.sqrt(n)
    # The calibration scale of the evidence trust recovers 1 / alpha on held-out data.
    actions = torch.as_tensor(np.where(took_a, 0, 1))
    chunks = torch.arange(n)  # one decision per episode
    evidence = C.calibration_evidence(actions, pi, _probs(q), chunks)
    assert float(evidence[1] / evidence[3]) == pytest.approx(1 / alpha, rel=0.05)
    # With that scale, expected HCA is unbiased again.
    scaled = g * float(evidence[1] / evidence[3])
    assert abs(scaled.mean() - 0.2) < 4 * scaled.std(ddof=1) / math.sqrt(n)


def test_an_overconfident_classifier_makes_the_blended_step_larger_than_a2c():
    """A classifier more confident than the posterior, `q = pi + alpha (h - pi)` with
    alpha = 1.25 (h stays in (0.1, 0.9) here, so q is a distribution): its raw calibration
    scale r = 1 / alpha = 0.8 goes into the trust (w = r at full z), and the blended
    gradient's mean is `(1 - r) g + r * alpha g = (2 - r) g` = 1.2 times A2C's, not A2C's."""
    alpha, p = 1.25, 0.5
    took_a, z, h = bandit_samples(p, seed=14)
    n = len(z)
    assert 0.1 < h.min() and h.max() < 0.9
    q, pi = _probs(p + alpha * (h - p)), _probs(np.full(n, p))
    actions = torch.as_tensor(np.where(took_a, 0, 1))
    out = C.evidence_trust(C.calibration_evidence(actions, pi, q, torch.arange(n)))
    assert float(out["z"]) > 10 and float(out["scale"]) == 1.0
    assert float(out["trust"]) == pytest.approx(1 / alpha, rel=0.03)
    cf = closed_forms(p)
    returns, values = torch.as_tensor(z), torch.full((n,), cf["v"], dtype=F64)
    weights = C.credit_weights("expected_hca", actions=actions, gae=returns - values, log_pi_all=torch.log(pi),
                               log_q_all=torch.log(q), returns=returns, values=values,
                               trust=out["trust"].to(F64), scale=out["scale"].to(F64))["weights"]
    g = _logit_gradient_of_a(weights, pi).numpy()
    r = float(out["trust"])
    assert abs(g.mean() - (2 - r) * cf["a2c_mean"]) < 4 * g.std(ddof=1) / math.sqrt(n)
    assert g.mean() > 1.15 * cf["a2c_mean"]


def test_expected_hca_is_exactly_zero_when_q_equals_pi():
    g = torch.Generator().manual_seed(0)
    pi = torch.softmax(torch.randn(50, 4, generator=g, dtype=F64), -1)
    w = C.expected_hca_weights(torch.randn(50, generator=g, dtype=F64), torch.randn(50, generator=g, dtype=F64),
                               pi.clone(), pi)
    assert torch.count_nonzero(w) == 0


def test_policy_gradient_loss_gradient_is_the_logit_gradient():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(30, 5, generator=g, dtype=F64, requires_grad=True)
    weights = torch.randn(30, 5, generator=g, dtype=F64)
    mask = torch.rand(30, generator=g) < 0.8
    loss = C.policy_gradient_loss(weights, torch.log_softmax(logits, -1), mask)
    loss.backward()
    pi = torch.softmax(logits.detach(), -1)
    expected = -C.logit_gradient(weights, pi) * mask.unsqueeze(-1) / mask.sum()
    torch.testing.assert_close(logits.grad, expected)


def test_one_hot_loss_is_the_a2c_loss():
    g = torch.Generator().manual_seed(2)
    log_probs = torch.log_softmax(torch.randn(40, 3, generator=g, dtype=F64), -1)
    actions = torch.randint(0, 3, (40,), generator=g)
    adv = torch.randn(40, generator=g, dtype=F64)
    mask = torch.rand(40, generator=g) < 0.7
    loss = C.policy_gradient_loss(C.one_hot_weights(adv, actions, 3), log_probs, mask)
    taken = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(loss, -(adv * taken)[mask].mean())


# ------------------------------------------------------------------ evidence trust


def _classifier_batch(kind, n_chunks=400, length=5, seed=0, num_actions=3, peak=0.8):
    """`(actions, pi, q, chunks)`: chunks of `length` decisions. Decision 0 of each chunk
    is informative: given its return, the posterior h puts 0.8 on one action (the one
    the return points at), and the action was drawn from h (so h is the exact
    posterior); other decisions have h == pi. `kind` picks the classifier. (The draws
    are made with one more row per chunk, dropped, so the samples stay those the
    tests were sized on.)"""
    rng = np.random.default_rng(seed)
    rows = n_chunks * (length + 1)
    pi = np.full((rows, num_actions), 1.0 / num_actions)
    h = pi.copy()
    informative = np.zeros(rows, bool)
    informative[0::length + 1] = True
    h[informative] = (1.0 - peak) / (num_actions - 1)
    h[informative, rng.integers(0, num_actions, int(informative.sum()))] = peak
    actions = (rng.random((rows, 1)) > np.cumsum(h, -1)).sum(-1)
    mask = np.ones(rows, bool)
    mask[length::length + 1] = False
    if kind == "exact":
        q = h
    elif kind == "untrained":
        q = pi.copy()
    elif kind == "wrong":  # deviates away from the taken action where the information is
        q = np.clip(pi - (h - pi), 1e-3, None)
        q /= q.sum(-1, keepdims=True)
    elif kind == "noise":  # deviates at random, unrelated to the action
        logits = np.log(pi) + rng.normal(0, 0.3, pi.shape)
        q = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    else:
        raise ValueError(kind)
    t = lambda x: torch.as_tensor(x[mask])  # noqa: E731
    return t(actions), t(pi), t(q), torch.arange(n_chunks).repeat_interleave(length)


def test_evidence_trust_falls_back_to_a2c_with_an_untrained_classifier():
    actions, pi, q, chunks = _classifier_batch("untrained")
    ev = C.calibration_evidence(actions, pi, q, chunks)
    out = C.evidence_trust(ev)
    assert float(out["trust"]) == 0.0 and float(out["scale"]) == 0.0


def test_evidence_trust_falls_back_to_a2c_with_a_wrong_classifier():
    actions, pi, q, chunks = _classifier_batch("wrong")
    ev = C.calibration_evidence(actions, pi, q, chunks)
    out = C.evidence_trust(ev)
    assert float(out["z"]) < -10
    # Its scale (clipped at 0) goes into the trust; the scale applied is 1.
    assert float(out["trust"]) == 0.0 and float(out["scale"]) == 1.0


def test_evidence_trust_is_full_for_the_exact_posterior_with_scale_one():
    actions, pi, q, chunks = _classifier_batch("exact")
    ev = C.calibration_evidence(actions, pi, q, chunks)
    out = C.evidence_trust(ev)
    # z is far above full trust; a calibrated classifier's scale is about 1, and its
    # part below 1 (sampling noise) goes into the trust.
    raw = float(ev[1] / ev[3])
    assert raw == pytest.approx(1.0, abs=0.1)
    assert float(out["trust"]) == pytest.approx(min(1.0, raw), rel=1e-6)
    assert float(out["scale"]) == pytest.approx(max(1.0, raw), rel=1e-6)


def test_evidence_trust_rarely_trusts_a_classifier_of_noise():
    full, means = 0, []
    for seed in range(400):
        actions, pi, q, chunks = _classifier_batch("noise", n_chunks=50, seed=seed)
        trust = float(C.evidence_trust(C.calibration_evidence(actions, pi, q, chunks))["trust"])
        full += trust == 1.0
        means.append(trust)
    # z ~ N(0, 1): P(z > 2) = 0.023 (full trust), E[clip(z - 1, 0, 1)] = 0.08.
    assert full / 400 < 0.05
    assert np.mean(means) < 0.13


def test_calibration_evidence_sums_per_chunk_brute_force():
    actions, pi, q, chunks = _classifier_batch("noise", n_chunks=7, seed=3)
    ev = C.calibration_evidence(actions, pi, q, chunks)
    xs, ds = {}, {}
    for t in range(len(actions)):
        dev = (q[t] - pi[t]).numpy()
        e = np.zeros(3)
        e[int(actions[t])] = 1.0
        c = int(chunks[t])
        xs[c] = xs.get(c, 0.0) + float(np.dot(e - pi[t].numpy(), dev))
        ds[c] = ds.get(c, 0.0) + float(np.dot(dev, dev))
    x = np.array(list(xs.values()))
    np.testing.assert_allclose(ev.numpy(), [len(x), x.sum(), (x * x).sum(), sum(ds.values())], rtol=1e-10)
    assert torch.equal(torch.bincount(chunks), torch.full((7,), 5))


def test_chunks_not_steps_are_the_unit():
    """Copies of a decision inside its chunk (perfectly correlated steps) add no
    evidence: z is that of one decision per chunk. Counting steps as independent would
    inflate it by sqrt(copies)."""
    actions, pi, q, chunks = _classifier_batch("exact", n_chunks=80, length=1, seed=8)
    z_one = float(C.evidence_trust(C.calibration_evidence(actions, pi, q, chunks))["z"])
    rows = torch.arange(len(actions)).repeat_interleave(5)
    copies = (actions[rows], pi[rows], q[rows])
    z_chunks = float(C.evidence_trust(C.calibration_evidence(*copies, chunks[rows]))["z"])
    z_steps = float(C.evidence_trust(C.calibration_evidence(*copies, torch.arange(len(rows))))["z"])
    assert z_chunks == pytest.approx(z_one, rel=1e-6)
    assert z_steps > 2.0 * z_one  # sqrt(5) = 2.24 times, with the spread of the copies


def test_accumulated_evidence_grows_significance_across_batches():
    """Weak but real information: one batch is not enough for full trust, ten are."""
    # Little information (h = 0.4 against pi = 1/3), and a classifier that learned 15%
    # of the way to it.
    actions, pi, q, _ = _classifier_batch("exact", n_chunks=4000, seed=5, peak=0.4)
    weak = pi + 0.15 * (q - pi)
    rng = np.random.default_rng(6)
    state = torch.zeros(4, dtype=F64)
    single, accumulated, scales = [], [], []
    for _ in range(40):  # batches of 40 chunks
        perm = torch.as_tensor(rng.permutation(len(actions) // 5))
        rows = (perm[:40].unsqueeze(-1) * 5 + torch.arange(5)).flatten()
        ev = C.calibration_evidence(actions[rows], pi[rows], weak[rows], torch.arange(40).repeat_interleave(5))
        single.append(float(C.evidence_trust(ev)["trust"]))
        state = C.accumulate_evidence(state, ev, 0.95)
        out = C.evidence_trust(state)
        accumulated.append(float(out["trust"]))
        scales.append(float(out["scale"]))
    # Expected z: 0.14 per chunk, so 0.9 for one batch, 4 for the ~800 chunks remembered.
    assert np.mean(single) < 0.3
    assert all(t == 1.0 for t in accumulated[-15:])
    # The scale that undoes the shrinkage (1 / 0.15) is capped.
    assert all(s == C.MAX_CALIBRATION_SCALE for s in scales[-15:])


def test_credit_weights_expected_mode_blends_with_per_decision_trust():
    g = torch.Generator().manual_seed(7)
    n = 12
    log_pi = torch.log_softmax(torch.randn(n, 3, generator=g, dtype=F64), -1)
    log_q = torch.log_softmax(torch.randn(n, 3, generator=g, dtype=F64), -1)
    actions = torch.randint(0, 3, (n,), generator=g)
    returns, values = torch.randn(n, generator=g, dtype=F64), torch.randn(n, generator=g, dtype=F64)
    gae = returns - values
    common = dict(actions=actions, gae=gae, log_pi_all=log_pi, log_q_all=log_q, returns=returns, values=values)
    a2c = C.one_hot_weights(gae, actions, 3)
    zero = C.credit_weights("expected_hca", trust=torch.zeros(n, dtype=F64), scale=2.0, **common)
    torch.testing.assert_close(zero["weights"], a2c)
    pure = C.credit_weights("expected_hca", scale=2.0, **common)
    torch.testing.assert_close(pure["weights"], C.expected_hca_weights(returns, values, log_q.exp(), log_pi.exp(), 2.0))
    w = torch.rand(n, generator=g, dtype=F64)
    mixed = C.credit_weights("expected_hca", trust=w, scale=2.0, **common)
    torch.testing.assert_close(mixed["weights"], (1 - w[:, None]) * a2c + w[:, None] * pure["weights"])
    # One-hot modes through the same function: A_t * onehot(a_t).
    hca = C.credit_weights("hca", trust=torch.tensor(0.5, dtype=F64), **common)
    torch.testing.assert_close(hca["weights"], C.one_hot_weights(hca["advantages"], actions, 3))


def test_a_noisy_classifier_is_handed_back_to_a2c():
    """Real but mostly-noise deviations: many chunks make z large, the calibration scale
    is small, and the scale goes into the trust: the gradient stays mostly A2C's rather
    than a small multiple of the classifier's."""
    actions, pi, q, chunks = _classifier_batch("exact", n_chunks=2000, seed=11, peak=0.6)
    rng = np.random.default_rng(12)
    noisy = torch.softmax(torch.log(q) + torch.as_tensor(rng.normal(0, 1.0, q.shape)), -1)
    ev = C.calibration_evidence(actions, pi, noisy, chunks)
    out = C.evidence_trust(ev)
    raw = float(ev[1] / ev[3])
    assert float(out["z"]) > 4 and raw < 0.5  # significant, and mostly noise
    assert float(out["trust"]) == pytest.approx(raw, rel=1e-5) and float(out["scale"]) == 1.0
    # A calibrated classifier keeps full trust, and a scale of about 1 (never below).
    actions, pi, q, chunks = _classifier_batch("exact", n_chunks=400, seed=13)
    ev = C.calibration_evidence(actions, pi, q, chunks)
    out = C.evidence_trust(ev)
    assert float(out["trust"]) == 1.0
    assert float(out["scale"]) == pytest.approx(max(1.0, float(ev[1] / ev[3])), rel=1e-5)
