"""`trust="bias"`: trust in the classifier while the estimator's update shows a mean of its
own and is not shown to differ from A2C's in expectation (method note, section 2.4). The
statistic against brute force and autograd, its null distribution, the exact bandit
posterior as the oracle of an unbiased estimator, and the learner connector falling back
to A2C's weights exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ray.rllib.core.columns import Columns

from hca_rllib import HCAConfig, credit
from hca_rllib.envs.known_answer import bandit_exact_posterior, bandit_q_values
from hca_rllib.module import CREDIT_WEIGHTS

from test_connectors import MID, _a2c_weights, make_batch, run

F64 = torch.float64


def test_head_gradients_are_the_last_layers_gradient_per_unit():
    g = torch.Generator().manual_seed(0)
    n, hidden, actions = 9, 4, 3
    layer = torch.nn.Linear(hidden, actions).double()
    latent = torch.randn(n, hidden, generator=g, dtype=F64)
    weights = torch.randn(n, actions, generator=g, dtype=F64)
    units = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    pi = torch.softmax(layer(latent), -1).detach()
    out = credit.head_gradients(weights, pi, latent, units)
    assert out.shape == (3, actions * (hidden + 1))
    for u in range(3):
        layer.zero_grad()
        rows = units == u
        (weights[rows] * torch.log_softmax(layer(latent[rows]), -1)).sum().backward()
        expected = torch.cat([layer.weight.grad, layer.bias.grad.unsqueeze(-1)], dim=-1)
        torch.testing.assert_close(out[u].reshape(actions, hidden + 1), expected)


def test_bias_evidence_is_the_u_statistic_and_its_null_variance():
    g = torch.Generator().manual_seed(1)
    grads = torch.randn(6, 5, generator=g, dtype=F64)
    pairs = [(u, v) for u in range(6) for v in range(6) if u != v]
    t = sum(float(grads[u] @ grads[v]) for u, v in pairs)
    var = 2.0 * sum(float(grads[u] @ grads[v]) ** 2 for u, v in pairs)
    torch.testing.assert_close(credit.bias_evidence(grads), torch.tensor([t, var], dtype=F64))


def _z(evidence: torch.Tensor) -> float:
    return float(credit.bias_trust(torch.cat([evidence, evidence]))["z"])


def test_the_z_score_is_standard_without_a_mean_and_grows_with_one():
    g = torch.Generator().manual_seed(2)
    z0 = [_z(credit.bias_evidence(torch.randn(20, 10, generator=g, dtype=F64))) for _ in range(2000)]
    assert abs(np.mean(z0)) < 0.1 and 0.8 < np.std(z0) < 1.2
    assert np.mean(np.array(z0) > 1.0) < 0.25  # the onset: about 0.16 of unbiased batches
    shifted = [_z(credit.bias_evidence(torch.randn(20, 10, generator=g, dtype=F64) + 0.5)) for _ in range(200)]
    assert min(shifted) > 2.0


def test_accumulation_decays_each_statistic_and_its_variance():
    state = torch.tensor([3.0, 8.0, -1.0, 4.0], dtype=F64)
    out = credit.accumulate_bias_evidence(state, torch.tensor([1.0, 2.0, 5.0, 6.0], dtype=F64), decay=0.5)
    torch.testing.assert_close(out, torch.tensor([0.5 * 3.0 + 1.0, 0.25 * 8.0 + 2.0, -0.5 + 5.0, 1.0 + 6.0],
                                                 dtype=F64))


@pytest.mark.parametrize("z_d, z_h, trust", [
    (-3.0, 5.0, 1.0), (1.0, 3.0, 1.0), (1.5, 3.0, 0.5), (2.0, 9.0, 0.0), (7.0, 9.0, 0.0),  # consistency
    (0.0, 1.0, 0.0), (0.0, 2.0, 0.0), (0.0, 2.5, 0.5), (0.0, -4.0, 0.0),  # signal
    (1.5, 2.5, 0.25),  # both
])
def test_the_trust_is_the_consistency_times_the_signal(z_d, z_h, trust):
    out = credit.bias_trust(torch.tensor([z_d * 2.0, 4.0, z_h * 3.0, 9.0], dtype=F64))  # z = T / sqrt(V)
    assert float(out["z"]) == pytest.approx(z_d) and float(out["signal_z"]) == pytest.approx(z_h)
    assert float(out["trust"]) == pytest.approx(trust)


def test_a_credit_without_a_mean_is_seldom_trusted_over_many_updates():
    """The trust reads the accumulated evidence at every update. Hindsight credit whose
    gradient has no mean (and a bias test at its null) gets a trust above 0 at about 2%
    of the updates (40 runs of 300 updates, the first 100 left out), where a signal with
    its onset at `z_H = 1`, as the consistency's, would trust it at about 15%."""
    g = torch.Generator().manual_seed(0)
    trusted, signal_z = [], []
    for _ in range(40):
        state = torch.zeros(4, dtype=F64)
        for update in range(300):
            batch = torch.cat([credit.bias_evidence(torch.randn(16, 8, generator=g, dtype=F64)) for _ in range(2)])
            state = credit.accumulate_bias_evidence(state, batch)
            if update >= 100:
                out = credit.bias_trust(state)
                trusted.append(float(out["trust"]) > 0.0)
                signal_z.append(float(out["signal_z"]))
    assert 0.8 < np.std(signal_z) < 1.2  # the accumulated z_H is standard
    assert np.mean(trusted) < 0.05
    assert np.mean(np.array(signal_z) > 1.0) > 0.1  # what an onset at 1 would trust


def test_no_evidence_is_no_trust():
    out = credit.bias_trust(torch.zeros(4, dtype=F64))
    assert float(out["trust"]) == 0.0 and float(out["z"]) == 0.0 and float(out["signal_z"]) == 0.0


def _bandit_batch_evidence(rng, posterior: bool, units: int = 64):
    """One batch of the ambiguous bandit under pi = (1/2, 1/2), expected HCA with the
    exact posterior (or with q = pi): `bias_evidence` of the head gradients of
    `W_sampled - W` and of `W`, one unit per episode, the latent a constant 1."""
    actions = (rng.random(units) >= 0.5).astype(np.int64)  # 0 = a, 1 = b
    hi = rng.random(units) < np.where(actions == 0, 0.9, 0.1)  # a: mean 2 w.p. 0.9
    z = np.where(hi, 2.0, 1.0) + rng.normal(0.0, 1.5, units)
    centred = torch.as_tensor(z - 0.5 * sum(bandit_q_values()), dtype=F64)
    pi = torch.full((units, 2), 0.5, dtype=F64)
    h_a = torch.as_tensor(bandit_exact_posterior(z, 0.5), dtype=F64)
    q = torch.stack([h_a, 1.0 - h_a], -1) if posterior else pi
    onehot = torch.nn.functional.one_hot(torch.as_tensor(actions), 2).to(F64)
    pure = credit.expected_hca_weights(centred, torch.zeros(units, dtype=F64), q, pi)
    latent, unit_ids = torch.ones(units, 1, dtype=F64), torch.arange(units)
    return torch.cat([credit.bias_evidence(credit.head_gradients(w, pi, latent, unit_ids))
                      for w in (centred.unsqueeze(-1) * onehot - pure, pure)])


@pytest.mark.parametrize("posterior", [True, False], ids=["exact_posterior", "q_equals_pi"])
def test_the_exact_posterior_is_trusted_and_a_classifier_that_learned_nothing_is_not(posterior):
    """With the exact hindsight posterior expected HCA is unbiased, its expected update
    is A2C's: over 100 batches `z_D` stays at the null, and its own credit shows (trust 1
    from early on). With `q = pi` it drops the whole credit: `z_D` sees it, and there is
    no signal (trust 0 throughout)."""
    rng = np.random.default_rng(3)
    state = torch.zeros(4, dtype=F64)
    out = []
    for _ in range(100):
        state = credit.accumulate_bias_evidence(state, _bandit_batch_evidence(rng, posterior))
        out.append({k: float(v) for k, v in credit.bias_trust(state).items()})
    if posterior:
        assert max(abs(o["z"]) for o in out[20:]) < 2.0
        assert min(o["signal_z"] for o in out[20:]) > 4.0 and min(o["trust"] for o in out[20:]) == 1.0
    else:
        assert min(o["z"] for o in out[20:]) > 4.0
        assert max(o["trust"] for o in out) == 0.0 and max(o["signal_z"] for o in out) == 0.0


def _action_dependent_batch(chunks=16, seed=0):
    """Many chunks whose rewards reward action 0 and punish action 1."""
    rows = [make_batch(seed=seed + i) for i in range(chunks // 2)]
    batch = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
    batch[Columns.REWARDS] = torch.where(batch[Columns.ACTIONS] == 0, 1.0, -1.0) * batch[Columns.LOSS_MASK]
    return batch


@pytest.mark.parametrize("credit_mode", ["expected_hca", "hca", "c2a2c"])
def test_an_untrained_classifier_is_never_trusted_and_its_dropped_credit_is_seen(credit_mode):
    """Untrained (q == pi), every mode's pure weights are 0 (expected HCA's `q - pi`,
    HCA's `1 - pi/q`, the gate): the pure estimator would drop the credit. Without
    evidence the trust is 0 (A2C's weights exactly); the dropped credit is A2C's policy
    gradient, which `z_D` finds, and the classifier's own credit shows nothing: the trust
    stays 0."""
    config = HCAConfig().training(credit=credit_mode, trust="bias")
    batch = _action_dependent_batch()
    real = batch[Columns.LOSS_MASK]
    module = None
    for _ in range(10):
        out, module, metrics = run(config, dict(batch), module=module)
        reduced = metrics.reduce()[MID]
        assert reduced["credit/trust"].peek() == 0.0
        torch.testing.assert_close(out[CREDIT_WEIGHTS][real], _a2c_weights(module, batch, config))
    assert reduced["credit/trust_z"].peek() > 2.0 and reduced["credit/trust_signal_z"].peek() == 0.0
