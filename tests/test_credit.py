"""Tests for the pure maths in `hca_rllib.credit` (method note: docs/method.md).

References are written as plain per-chunk Python loops straight from the definitions,
not as the backward recursions that the module uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List

import numpy as np
import pytest
import torch
from scipy.stats import norm

from hca_rllib import credit as C


# --------------------------------------------------------------------------------------
# Random episode chunks in `credit`'s layout: real steps only, the flags on each chunk's
# last step, `next_values[t] = V(s_{t+1})`.
# --------------------------------------------------------------------------------------


@dataclass
class Chunk:
    rewards: np.ndarray
    values: np.ndarray
    terminated: bool
    bootstrap: float  # V(s_T) for a truncated chunk; garbage for a terminated one


@dataclass
class Steps:
    chunks: List[Chunk]
    rewards: np.ndarray
    values: np.ndarray
    next_values: np.ndarray
    terminateds: np.ndarray
    truncateds: np.ndarray

    def tensors(self, dtype=torch.float32):
        """`(rewards, values, next_values, terminateds, truncateds)` as tensors."""
        return (_t(self.rewards, dtype), _t(self.values, dtype), _t(self.next_values, dtype),
                _t(self.terminateds, torch.bool), _t(self.truncateds, torch.bool))


def make_chunks(rng: np.random.Generator, n_chunks: int) -> List[Chunk]:
    chunks = []
    for _ in range(n_chunks):
        n = int(rng.integers(1, 21))
        chunks.append(
            Chunk(
                rewards=rng.normal(0.0, 1.0, n),
                values=rng.normal(0.0, 2.0, n),
                terminated=bool(rng.random() < 0.5),
                # For a terminated chunk this is what `next_values` happens to hold after
                # the terminal step: it must not leak into anything.
                bootstrap=float(rng.normal(0.0, 5.0)),
            )
        )
    return chunks


def layout(chunks: List[Chunk]) -> Steps:
    rewards, values, next_values, terms, truncs = [], [], [], [], []
    for c in chunks:
        n = len(c.rewards)
        rewards += list(c.rewards)
        values += list(c.values)
        next_values += list(c.values[1:]) + [c.bootstrap]
        terms += [False] * (n - 1) + [c.terminated]
        truncs += [False] * (n - 1) + [not c.terminated]
    return Steps(chunks, *(np.asarray(x, dtype=np.float64) for x in (rewards, values, next_values)),
                 np.asarray(terms, dtype=bool), np.asarray(truncs, dtype=bool))


def ref_returns(chunks: List[Chunk], gamma: float, use_values: bool = True) -> np.ndarray:
    """Z_t = sum_k gamma^k r_{t+k} (+ gamma^{T-t} V(s_T) if truncated)."""
    out = []
    for c in chunks:
        n = len(c.rewards)
        for t in range(n):
            z = sum(gamma**k * c.rewards[t + k] for k in range(n - t))
            if not c.terminated and use_values:
                z += gamma ** (n - t) * c.bootstrap
            out.append(z)
    return np.asarray(out)


def ref_gae(chunks: List[Chunk], gamma: float, lam: float) -> np.ndarray:
    """A_t = sum_k (gamma lambda)^k delta_{t+k} by the explicit sum."""
    out = []
    for c in chunks:
        n = len(c.rewards)
        next_values = list(c.values[1:]) + [0.0 if c.terminated else c.bootstrap]
        deltas = [c.rewards[t] + gamma * next_values[t] - c.values[t] for t in range(n)]
        for t in range(n):
            out.append(sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t)))
    return np.asarray(out)


def _t(x, dtype=torch.float32) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x), dtype=dtype)


SEEDS = [0, 1, 2, 3, 4]


def _random_setting(seed: int):
    rng = np.random.default_rng(seed)
    steps = layout(make_chunks(rng, n_chunks=int(rng.integers(3, 9))))
    gamma = float(rng.choice([0.5, 0.9, 0.99, 1.0]))
    lam = float(rng.uniform(0.0, 1.0))
    return steps, gamma, lam


def test_generator_convention():
    """The generator itself: real steps only, one flag on each chunk's last step,
    `next_values` the next step's value inside a chunk."""
    steps, _, _ = _random_setting(0)
    assert len(steps.rewards) == sum(len(c.rewards) for c in steps.chunks)
    assert not (steps.terminateds & steps.truncateds).any()
    ends = np.flatnonzero(steps.terminateds | steps.truncateds)
    assert len(ends) == len(steps.chunks) and ends[-1] == len(steps.rewards) - 1
    inside = np.setdiff1d(np.arange(len(steps.rewards)), ends)
    np.testing.assert_array_equal(steps.next_values[inside], steps.values[inside + 1])
    np.testing.assert_array_equal(C.chunk_ids(*steps.tensors()[3:]),
                                  np.repeat(np.arange(len(steps.chunks)), [len(c.rewards) for c in steps.chunks]))


@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_returns_match_brute_force(seed):
    steps, gamma, _ = _random_setting(seed)
    r, _, nv, term, trunc = steps.tensors()
    z = C.discounted_returns(r, nv, term, trunc, gamma)
    assert isinstance(z, torch.Tensor) and z.shape == (len(steps.rewards),) and z.dtype == torch.float32
    np.testing.assert_allclose(z.numpy(), ref_returns(steps.chunks, gamma), atol=1e-4, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_returns_with_zero_values_are_monte_carlo(seed):
    steps, gamma, _ = _random_setting(seed)
    r, _, nv, term, trunc = steps.tensors()
    z = C.discounted_returns(r, torch.zeros_like(nv), term, trunc, gamma)
    np.testing.assert_allclose(z.numpy(), ref_returns(steps.chunks, gamma, use_values=False), atol=1e-4, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_explicit_sum(seed):
    steps, gamma, lam = _random_setting(seed)
    for lam_ in (lam, 0.0, 1.0):
        adv = C.gae_advantages(*steps.tensors(), gamma, lam_)
        np.testing.assert_allclose(adv.numpy(), ref_gae(steps.chunks, gamma, lam_), atol=1e-4, rtol=0,
                                   err_msg=f"lambda={lam_}")


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_lambda_one_is_return_minus_value(seed):
    steps, gamma, _ = _random_setting(seed)
    r, v, nv, term, trunc = steps.tensors()
    adv = C.gae_advantages(r, v, nv, term, trunc, gamma, 1.0)
    z = C.discounted_returns(r, nv, term, trunc, gamma)
    np.testing.assert_allclose(adv.numpy(), (z - v).numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_rllib_compute_value_targets(seed):
    """Against RLlib's own GAE, on RLlib's layout: each chunk followed by one artificial
    step whose value is the bootstrap value."""
    from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets

    steps, gamma, lam = _random_setting(seed)
    values, rewards, terms, truncs, real = [], [], [], [], []
    for c in steps.chunks:
        n = len(c.rewards)
        values += list(c.values) + [c.bootstrap]
        rewards += list(c.rewards) + [0.0]
        terms += [False] * (n - 1) + [c.terminated, False]
        truncs += [False] * (n - 1) + [not c.terminated, False]
        real += [True] * n + [False]
    values, real = np.asarray(values, np.float32), np.asarray(real)
    targets = compute_value_targets(values, np.asarray(rewards, np.float32), np.asarray(terms, np.float32),
                                    np.asarray(truncs, np.float32), gamma, lam)
    adv = C.gae_advantages(*steps.tensors(), gamma, lam)
    np.testing.assert_allclose(adv.numpy(), (targets - values)[real], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_returns_and_gae_keep_dtype_and_device(dtype):
    steps, gamma, lam = _random_setting(7)
    r, v, nv, term, trunc = steps.tensors(dtype)
    z = C.discounted_returns(r, nv, term, trunc, gamma)
    adv = C.gae_advantages(r, v, nv, term, trunc, gamma, lam)
    assert z.dtype == adv.dtype == dtype and z.device == adv.device == r.device
    assert len(C.discounted_returns(r[:0], nv[:0], term[:0], trunc[:0], gamma)) == 0


# --------------------------------------------------------------------------------------
# Brute-force references: a plain Python loop over every step, on random chunk layouts
# (chunks of 1 to 12 steps, some terminated, the batch's last chunk possibly unflagged).
# --------------------------------------------------------------------------------------


def _random_layout(rng, n):
    ends = rng.random(n) < rng.choice([0.05, 0.3, 0.8])
    if rng.random() < 0.8:
        ends[-1] = True
    term = ends & (rng.random(n) < 0.5)
    return term, ends & ~term


def brute_force_returns(r, nv, term, trunc, gamma):
    """Z_t = sum_k gamma^k r_{t+k} to the chunk's end, plus gamma^(k+1) V(s_{t+k+1}) there
    if it was cut; the batch's last row ends an unflagged chunk (bootstrapped with 0)."""
    n, out = len(r), []
    for t in range(n):
        z, k = 0.0, 0
        while True:
            z += gamma**k * r[t + k]
            if term[t + k] or trunc[t + k] or t + k == n - 1:
                if trunc[t + k]:
                    z += gamma ** (k + 1) * nv[t + k]
                break
            k += 1
        out.append(z)
    return np.asarray(out)


def brute_force_gae(r, v, nv, term, trunc, gamma, lam):
    """A_t = sum_k (gamma lambda)^k delta_{t+k} to the chunk's end."""
    n, out = len(r), []
    delta = [r[t] + (0.0 if term[t] else gamma * nv[t]) - v[t] for t in range(n)]
    for t in range(n):
        a, k = 0.0, 0
        while True:
            a += (gamma * lam) ** k * delta[t + k]
            if term[t + k] or trunc[t + k] or t + k == n - 1:
                break
            k += 1
        out.append(a)
    return np.asarray(out)


@pytest.mark.parametrize("seed", range(20))
def test_returns_and_gae_match_brute_force_loops_in_float64(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    term, trunc = _random_layout(rng, n)
    r, v, nv = (rng.normal(size=n) for _ in range(3))
    gamma, lam = float(rng.choice([0.5, 0.9, 0.99, 1.0])), float(rng.choice([0.0, 0.7, 0.95, 1.0]))
    f64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    z = C.discounted_returns(f64(r), f64(nv), torch.tensor(term), torch.tensor(trunc), gamma)
    adv = C.gae_advantages(f64(r), f64(v), f64(nv), torch.tensor(term), torch.tensor(trunc), gamma, lam)
    assert z.dtype == adv.dtype == torch.float64
    np.testing.assert_allclose(z.numpy(), brute_force_returns(r, nv, term, trunc, gamma), rtol=0, atol=1e-12)
    np.testing.assert_allclose(adv.numpy(), brute_force_gae(r, v, nv, term, trunc, gamma, lam), rtol=0, atol=1e-12)


def recursion_loop(r, v, nv, term, trunc, gamma, lam):
    """The recursions as a plain backward loop in float64, in the order of operations of
    the method note (`Z_t = r_t + gamma Z_{t+1}`, `A_t = delta_t + gamma lambda A_{t+1}`):
    float32 after the cast, bitwise what `credit` must give."""
    z, a = np.zeros(len(r)), np.zeros(len(r))
    running_z = running_a = 0.0
    for t in reversed(range(len(r))):
        rt, nvt = float(r[t]), float(nv[t])
        delta = rt + gamma * (0.0 if term[t] else 1.0) * nvt - float(v[t])
        if term[t]:
            running_z, running_a = rt, delta + 0.0
        elif trunc[t]:
            running_z, running_a = rt + gamma * nvt, delta + 0.0
        else:
            running_z, running_a = rt + gamma * running_z, delta + gamma * lam * running_a
        z[t], a[t] = running_z, running_a
    return torch.tensor(z, dtype=torch.float32), torch.tensor(a, dtype=torch.float32)


@pytest.mark.parametrize("seed", range(20))
def test_returns_and_gae_are_the_float64_loop_bitwise(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 300))
    term, trunc = _random_layout(rng, n)
    r, v, nv = (torch.tensor(rng.normal(size=n) * 10, dtype=torch.float32) for _ in range(3))
    gamma, lam = float(rng.choice([0.9, 0.99, 0.997])), float(rng.choice([0.0, 0.8, 0.95, 1.0]))
    z_ref, a_ref = recursion_loop(r, v, nv, term, trunc, gamma, lam)
    T, Tr = torch.tensor(term), torch.tensor(trunc)
    assert torch.equal(C.discounted_returns(r, nv, T, Tr, gamma), z_ref)
    assert torch.equal(C.gae_advantages(r, v, nv, T, Tr, gamma, lam), a_ref)
    z, a = C.returns_and_gae(r, v, nv, T, Tr, gamma, lam)
    assert torch.equal(z, z_ref) and torch.equal(a, a_ref)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtypes", [(torch.float32,) * 3, (torch.float64,) * 3,
                                    (torch.float32, torch.float64, torch.float32), (torch.float16,) * 3])
def test_returns_and_gae_in_one_scan_are_the_two_scans_bitwise(seed, dtypes):
    """`returns_and_gae` (one scan for both) is `discounted_returns` and `gae_advantages`
    (a scan each), bitwise and in their dtypes, with the chunk ids given or not."""
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 200))
    T, Tr = (torch.tensor(x) for x in _random_layout(rng, n))
    r, v, nv = (torch.tensor(rng.normal(size=n) * 10).to(dtype) for dtype in dtypes)
    gamma, lam = float(rng.choice([0.9, 0.99])), float(rng.choice([0.0, 0.95, 1.0]))
    z_ref, a_ref = C.discounted_returns(r, nv, T, Tr, gamma), C.gae_advantages(r, v, nv, T, Tr, gamma, lam)
    for chunks in (None, C.chunk_ids(T, Tr)):
        z, a = C.returns_and_gae(r, v, nv, T, Tr, gamma, lam, chunks=chunks)
        assert z.dtype == z_ref.dtype and a.dtype == a_ref.dtype
        assert torch.equal(z, z_ref) and torch.equal(a, a_ref)
    z, a = C.returns_and_gae(r[:0], v[:0], nv[:0], T[:0], Tr[:0], gamma, lam)
    assert len(z) == len(a) == 0


# --------------------------------------------------------------------------------------
# Closed forms.
# --------------------------------------------------------------------------------------


def _single_chunk(rewards, terminated: bool, bootstrap: float, values=None):
    n = len(rewards)
    values = np.zeros(n) if values is None else np.asarray(values, dtype=np.float64)
    return layout([Chunk(np.asarray(rewards, float), values, terminated, bootstrap)])


def _returns(steps, gamma):
    r, _, nv, term, trunc = steps.tensors()
    return C.discounted_returns(r, nv, term, trunc, gamma).numpy()


@pytest.mark.parametrize("n", [1, 5, 20])
@pytest.mark.parametrize("gamma", [0.5, 0.9, 0.99])
def test_constant_reward_terminated_closed_form(n, gamma):
    z = _returns(_single_chunk(np.ones(n), terminated=True, bootstrap=123.0), gamma)
    expected = [(1 - gamma ** (n - t)) / (1 - gamma) for t in range(n)]
    np.testing.assert_allclose(z, expected, rtol=1e-6)
    assert math.isclose(z[0], (1 - gamma**n) / (1 - gamma), rel_tol=1e-6)


def test_constant_reward_truncated_closed_form():
    n, gamma, v_boot = 7, 0.9, 4.0
    z = _returns(_single_chunk(np.ones(n), terminated=False, bootstrap=v_boot), gamma)
    assert math.isclose(z[0], (1 - gamma**n) / (1 - gamma) + gamma**n * v_boot, rel_tol=1e-6)


def test_gamma_one_sums():
    rewards = np.array([1.0, -2.0, 3.5, 0.25])
    z = _returns(_single_chunk(rewards, terminated=True, bootstrap=99.0), 1.0)
    np.testing.assert_allclose(z, [2.75, 1.75, 3.75, 0.25], atol=1e-6)
    z = _returns(_single_chunk(rewards, terminated=False, bootstrap=10.0), 1.0)
    np.testing.assert_allclose(z, [12.75, 11.75, 13.75, 10.25], atol=1e-6)


def test_terminated_chunk_ignores_next_value_after_its_end():
    """A terminated chunk followed by another chunk: the value `next_values` holds after
    the terminal step must not leak."""
    rng = np.random.default_rng(11)
    chunks = [
        Chunk(rng.normal(size=4), rng.normal(size=4), True, 1e3),
        Chunk(rng.normal(size=3), rng.normal(size=3), False, -7.0),
    ]
    steps = layout(chunks)
    for bogus in (1e3, -1e3):
        steps.next_values[3] = bogus  # after the terminal step
        r, v, nv, term, trunc = steps.tensors()
        z = C.discounted_returns(r, nv, term, trunc, 0.9)
        adv = C.gae_advantages(r, v, nv, term, trunc, 0.9, 0.8)
        np.testing.assert_allclose(z.numpy(), ref_returns(chunks, 0.9), atol=1e-4)
        np.testing.assert_allclose(adv.numpy(), ref_gae(chunks, 0.9, 0.8), atol=1e-4)


# --------------------------------------------------------------------------------------
# HCA advantage and the C2A2C gate.
# --------------------------------------------------------------------------------------


def _random_logs(seed: int, n: int = 64, n_actions: int = 4):
    g = torch.Generator().manual_seed(seed)
    log_pi = torch.log_softmax(torch.randn(n, n_actions, generator=g), -1)[:, 0]
    log_q = torch.log_softmax(torch.randn(n, n_actions, generator=g), -1)[:, 0]
    returns = 5.0 * torch.randn(n, generator=g)
    values = 3.0 * torch.randn(n, generator=g)
    return log_pi, log_q, returns, values


@pytest.mark.parametrize("seed", [0, 1])
def test_hca_zero_when_q_equals_pi(seed):
    log_pi, _, returns, values = _random_logs(seed)
    for baseline in (torch.zeros_like(returns), values):
        for clip in (10.0, 1e6):
            adv = C.hca_advantage(log_pi, log_pi.clone(), returns, baseline, clip)
            assert (adv == 0).all()


def test_hca_ratio_is_clipped():
    pi, q = 0.5, 0.01  # pi/q = 50
    log_pi = torch.log(torch.tensor([pi, pi], dtype=torch.float64))
    log_q = torch.log(torch.tensor([q, q], dtype=torch.float64))
    returns = torch.tensor([3.0, -2.0], dtype=torch.float64)
    baseline = torch.tensor([1.0, 0.5], dtype=torch.float64)
    clipped = C.hca_advantage(log_pi, log_q, returns, baseline, ratio_clip=10.0)
    torch.testing.assert_close(clipped, (1 - 10.0) * (returns - baseline))
    unclipped = C.hca_advantage(log_pi, log_q, returns, baseline, ratio_clip=100.0)
    torch.testing.assert_close(unclipped, (1 - 50.0) * (returns - baseline))
    torch.testing.assert_close(
        C.hindsight_ratio(log_pi, log_q), torch.full((2,), 50.0, dtype=torch.float64)
    )


def test_hca_formula_and_zero_baseline():
    log_pi, log_q, returns, values = _random_logs(3)
    clip = 2.0
    rho = np.clip(np.exp(log_pi.numpy() - log_q.numpy()), 0.0, clip)
    assert (rho == clip).any() and (rho < 1).any()  # both regimes are exercised
    np.testing.assert_allclose(
        C.hca_advantage(log_pi, log_q, returns, values, clip).numpy(),
        (1 - rho) * (returns.numpy() - values.numpy()),
        rtol=1e-5, atol=1e-5,
    )
    plain = C.hca_advantage(log_pi, log_q, returns, torch.zeros_like(returns), clip)
    np.testing.assert_allclose(plain.numpy(), (1 - rho) * returns.numpy(), rtol=1e-5, atol=1e-5)
    # The default clip is the package's constant.
    torch.testing.assert_close(C.hca_advantage(log_pi, log_q, returns, values),
                               C.hca_advantage(log_pi, log_q, returns, values, C.HCA_RATIO_CLIP))


def test_gate_masks_everything_when_q_equals_pi():
    log_pi, _, _, _ = _random_logs(4)
    for delta in (1e-6, 0.1, 1.0):
        assert (C.c2a2c_gate(log_pi, log_pi.clone(), delta) == 0).all()


def test_gate_is_full_from_delta():
    # Exactly at delta (0.5 and the logs are exact in binary) the gate is 1.
    for dtype in (torch.float32, torch.float64):
        log_pi = torch.tensor([-1.0, -1.0, -1.0], dtype=dtype)
        log_q = torch.tensor([-0.5, -1.5, -0.75], dtype=dtype)
        assert C.c2a2c_gate(log_pi, log_q, 0.5).tolist() == [1.0, 1.0, 0.5]


def test_soft_gate_is_min_one_ratio():
    delta = 0.3
    log_pi, log_q, _, _ = _random_logs(5)
    gate = C.c2a2c_gate(log_pi, log_q, delta)
    expected = np.minimum(1.0, np.abs(log_q.numpy() - log_pi.numpy()) / delta)
    assert (expected < 1).any() and (expected == 1).any()
    np.testing.assert_allclose(gate.numpy(), expected, rtol=1e-6)
    assert (gate >= 0).all() and (gate <= 1).all()


# --------------------------------------------------------------------------------------
# credit_advantage: every mode, graceful degradation.
# --------------------------------------------------------------------------------------


def _credit_inputs(seed: int = 6):
    log_pi, log_q, returns, values = _random_logs(seed)
    g = torch.Generator().manual_seed(seed + 100)
    gae = 2.0 * torch.randn(log_pi.shape, generator=g)
    return dict(gae=gae, log_pi_taken=log_pi, log_q_taken=log_q, returns=returns,
                values=values)


def test_credit_a2c_returns_gae_unchanged():
    inp = _credit_inputs()
    out = C.credit_advantage("a2c", **inp)
    assert torch.equal(out["advantages"], inp["gae"])
    out = C.credit_advantage("a2c", **inp, trust=torch.tensor(0.3))
    assert torch.equal(out["advantages"], inp["gae"])


def test_credit_hca_mode():
    inp = _credit_inputs()
    out = C.credit_advantage("hca", **inp)
    expected = C.hca_advantage(inp["log_pi_taken"], inp["log_q_taken"], inp["returns"], inp["values"])
    torch.testing.assert_close(out["advantages"], expected)
    torch.testing.assert_close(out["hca_advantages"], expected)
    same = dict(inp, log_q_taken=inp["log_pi_taken"].clone())
    out = C.credit_advantage("hca", **same)
    assert (out["advantages"] == 0).all()


def test_credit_c2a2c_mode():
    inp = _credit_inputs()
    out = C.credit_advantage("c2a2c", **inp, gate_delta=0.2)
    gate = C.c2a2c_gate(inp["log_pi_taken"], inp["log_q_taken"], 0.2)
    torch.testing.assert_close(out["gate"], gate)
    torch.testing.assert_close(out["advantages"], gate * inp["gae"])
    same = dict(inp, log_q_taken=inp["log_pi_taken"].clone())
    out = C.credit_advantage("c2a2c", **same, gate_delta=0.2)
    assert (out["advantages"] == 0).all()
    assert (out["gate"] == 0).all()


@pytest.mark.parametrize("mode", C.ONE_HOT_CREDIT_MODES)
def test_zero_trust_degrades_to_gae_exactly(mode):
    inp = _credit_inputs()
    out = C.credit_advantage(mode, **inp, trust=torch.tensor(0.0))
    assert torch.equal(out["advantages"], inp["gae"]), mode
    # Also when the classifier is exactly uninformative (q == pi).
    same = dict(inp, log_q_taken=inp["log_pi_taken"].clone())
    out = C.credit_advantage(mode, **same, trust=torch.tensor(0.0))
    assert torch.equal(out["advantages"], inp["gae"]), mode


@pytest.mark.parametrize("mode", C.ONE_HOT_CREDIT_MODES)
def test_full_trust_is_pure_estimator(mode):
    inp = _credit_inputs()
    kw = dict(gate_delta=0.2)
    pure = C.credit_advantage(mode, **inp, **kw)
    trusted = C.credit_advantage(mode, **inp, **kw, trust=torch.tensor(1.0))
    assert pure.keys() == trusted.keys()
    for key in pure:
        torch.testing.assert_close(trusted[key], pure[key])


def test_partial_trust_interpolates():
    inp = _credit_inputs()
    w = torch.tensor(0.4)
    kw = dict(gate_delta=0.2)
    hca = C.hca_advantage(inp["log_pi_taken"], inp["log_q_taken"], inp["returns"], inp["values"])
    gae = inp["gae"]
    out = C.credit_advantage("hca", **inp, **kw, trust=w)
    torch.testing.assert_close(out["advantages"], w * hca + (1 - w) * gae)
    gate = C.c2a2c_gate(inp["log_pi_taken"], inp["log_q_taken"], 0.2)
    out = C.credit_advantage("c2a2c", **inp, **kw, trust=w)
    torch.testing.assert_close(out["gate"], (1 - w) + w * gate)
    torch.testing.assert_close(out["advantages"], ((1 - w) + w * gate) * gae)


def test_unknown_credit_raises_naming_allowed_values():
    inp = _credit_inputs()
    with pytest.raises(ValueError) as info:
        C.credit_advantage("ppo", **inp)
    message = str(info.value)
    assert "ppo" in message
    for mode in ("a2c", "hca", "c2a2c"):
        assert mode in message


# --------------------------------------------------------------------------------------
# Ambiguous bandit oracle (method note, section 5).
# --------------------------------------------------------------------------------------


def _bandit(p: float, n: int = 200_000, seed: int = 2024):
    rng = np.random.default_rng(seed)
    took_a = rng.random(n) < p
    hi = np.where(took_a, rng.random(n) < 0.9, rng.random(n) < 0.1)
    z = rng.normal(np.where(hi, 2.0, 1.0), 1.5)
    log_n_hi, log_n_lo = norm.logpdf(z, 2.0, 1.5), norm.logpdf(z, 1.0, 1.5)
    log_fa = np.logaddexp(np.log(0.9) + log_n_hi, np.log(0.1) + log_n_lo)
    log_fb = np.logaddexp(np.log(0.1) + log_n_hi, np.log(0.9) + log_n_lo)
    log_num_a, log_num_b = np.log(p) + log_fa, np.log(1 - p) + log_fb
    log_evidence = np.logaddexp(log_num_a, log_num_b)
    log_h = np.where(took_a, log_num_a, log_num_b) - log_evidence
    log_pi = np.where(took_a, np.log(p), np.log(1 - p))
    f64 = torch.float64
    adv = C.hca_advantage(
        torch.as_tensor(log_pi, dtype=f64), torch.as_tensor(log_h, dtype=f64),
        torch.as_tensor(z, dtype=f64), baseline=torch.zeros(n, dtype=f64), ratio_clip=1e6,
    ).numpy()
    return took_a, z, adv, log_h, log_pi


def _within(sample: np.ndarray, target: float, k: float = 4.0) -> bool:
    se = sample.std(ddof=1) / np.sqrt(len(sample))
    return abs(sample.mean() - target) < k * se


@pytest.fixture(scope="module")
def bandit_half():
    return _bandit(0.5)


def test_bandit_hca_mean_and_variance_at_half(bandit_half):
    took_a, z, adv, _, _ = bandit_half
    a, b = adv[took_a], adv[~took_a]
    assert _within(a, 0.40), a.mean()
    assert _within(b, -0.40), b.mean()
    assert abs(a.var() - 0.32) < 0.03, a.var()
    # Z - V with V = 1.5: Var[Z | a] = 1.5^2 + 0.9 * 0.1 = 2.34, far noisier.
    za = z[took_a] - 1.5
    assert abs(za.var() - 2.34) < 0.05, za.var()
    assert za.var() > 5 * a.var()


def test_bandit_mutual_information(bandit_half):
    _, _, _, log_h, log_pi = bandit_half
    pointwise = log_h - log_pi
    mi = C.mutual_information(torch.as_tensor(log_h), torch.as_tensor(log_pi)).item()
    assert math.isclose(mi, pointwise.mean(), rel_tol=1e-9)
    assert _within(pointwise, 0.033), mi  # exact I(A;Z) = 0.0331 by quadrature


def test_bandit_hca_unbiased_at_p03():
    p = 0.3
    took_a, _, adv, _, _ = _bandit(p, seed=7)
    assert _within(adv[took_a], 0.8 * (1 - p)), adv[took_a].mean()
    assert _within(adv[~took_a], -0.8 * p), adv[~took_a].mean()


# --------------------------------------------------------------------------------------
# Diagnostics.
# --------------------------------------------------------------------------------------


def test_ratio_statistics_against_numpy():
    rng = np.random.default_rng(4)
    ratio = np.exp(rng.normal(0.0, 1.5, 1000))
    mask = rng.random(1000) < 0.7
    for m in (None, mask):
        r = ratio if m is None else ratio[m]
        stats = C.ratio_statistics(
            torch.as_tensor(ratio, dtype=torch.float32), 5.0,
            None if m is None else torch.as_tensor(m),
        )
        assert set(stats) == {"ratio_mean", "ratio_median", "ratio_max", "ratio_p99", "clip_fraction"}
        np.testing.assert_allclose(stats["ratio_mean"].item(), r.mean(), rtol=1e-5)
        np.testing.assert_allclose(stats["ratio_median"].item(), np.median(r), rtol=1e-5)
        np.testing.assert_allclose(stats["ratio_max"].item(), r.max(), rtol=1e-6)
        np.testing.assert_allclose(stats["ratio_p99"].item(), np.quantile(r, 0.99), rtol=1e-5)
        np.testing.assert_allclose(stats["clip_fraction"].item(), (r > 5.0).mean(), atol=1e-7)
    empty = C.ratio_statistics(torch.ones(3), 5.0, torch.zeros(3, dtype=torch.bool))
    assert len(empty) == 5 and all(v.item() == 0.0 for v in empty.values())
    # One near-zero q: the mean is that step's ratio, the median the typical step's.
    spiked = C.ratio_statistics(torch.tensor([0.9, 1.0, 1.1, 1e30]), 5.0)
    assert spiked["ratio_mean"].item() > 1e29 and spiked["ratio_median"].item() == pytest.approx(1.05)


def test_correlation_against_numpy():
    rng = np.random.default_rng(5)
    x = rng.normal(size=300)
    y = 0.6 * x + rng.normal(size=300)
    mask = rng.random(300) < 0.5
    c = C.correlation(torch.as_tensor(x), torch.as_tensor(y)).item()
    assert math.isclose(c, np.corrcoef(x, y)[0, 1], abs_tol=1e-6)
    c = C.correlation(torch.as_tensor(x), torch.as_tensor(y), torch.as_tensor(mask)).item()
    assert math.isclose(c, np.corrcoef(x[mask], y[mask])[0, 1], abs_tol=1e-6)
    assert C.correlation(torch.full((50,), 0.1), torch.as_tensor(y[:50])).item() == 0.0
    assert C.correlation(torch.as_tensor(x[:50]), torch.full((50,), 3.0)).item() == 0.0
    assert math.isclose(
        C.correlation(torch.as_tensor(x), torch.as_tensor(-2 * x + 1)).item(), -1.0,
        abs_tol=1e-6,
    )


def test_argmax_accuracy():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 1.0, 5.0], [4.0, 0.0, 0.0]])
    actions = torch.tensor([0, 1, 0, 2])
    assert C.argmax_accuracy(logits, actions).item() == 0.5
    mask = torch.tensor([True, True, False, False])
    assert C.argmax_accuracy(logits, actions, mask).item() == 1.0
    rng = np.random.default_rng(6)
    big = rng.normal(size=(500, 5))
    acts = rng.integers(0, 5, 500)
    assert math.isclose(
        C.argmax_accuracy(torch.as_tensor(big), torch.as_tensor(acts)).item(),
        (big.argmax(-1) == acts).mean(), abs_tol=1e-7,
    )


def test_explained_variance():
    rng = np.random.default_rng(7)
    t = rng.normal(2.0, 3.0, 500)
    tt = torch.as_tensor(t)
    assert math.isclose(C.explained_variance(tt, tt.clone()).item(), 1.0, abs_tol=1e-9)
    mean_pred = torch.full_like(tt, t.mean())
    assert abs(C.explained_variance(tt, mean_pred).item()) < 1e-9
    p = t + rng.normal(0.0, 1.0, 500)
    assert math.isclose(
        C.explained_variance(tt, torch.as_tensor(p)).item(), 1 - np.var(t - p) / np.var(t),
        abs_tol=1e-9,
    )
    mask = rng.random(500) < 0.5
    assert math.isclose(
        C.explained_variance(tt, torch.as_tensor(p), torch.as_tensor(mask)).item(),
        1 - np.var(t[mask] - p[mask]) / np.var(t[mask]),
        abs_tol=1e-9,
    )
    assert C.explained_variance(torch.full((10,), 4.0), torch.zeros(10)).item() == 0.0


def test_mutual_information_with_mask():
    rng = np.random.default_rng(8)
    log_q = np.log(rng.uniform(0.05, 1.0, 200))
    log_pi = np.log(rng.uniform(0.05, 1.0, 200))
    mask = rng.random(200) < 0.3
    mi = C.mutual_information(torch.as_tensor(log_q), torch.as_tensor(log_pi)).item()
    assert math.isclose(mi, (log_q - log_pi).mean(), abs_tol=1e-9)
    mi = C.mutual_information(
        torch.as_tensor(log_q), torch.as_tensor(log_pi), torch.as_tensor(mask)
    ).item()
    assert math.isclose(mi, (log_q[mask] - log_pi[mask]).mean(), abs_tol=1e-9)
    same = torch.as_tensor(log_pi)
    assert C.mutual_information(same, same.clone()).item() == 0.0
