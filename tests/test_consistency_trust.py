"""The consistency trust (`trust="consistency"`): the credit estimator's gradient
against A2C's, checked against autograd and on the known-answer bandit, where the
exact posterior is known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hca_rllib import HCAConfig
from hca_rllib import credit as C
from hca_rllib.envs.known_answer import bandit_exact_posterior, bandit_q_values

F64 = torch.float64


def test_policy_logit_gradients_are_autograds():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 4, generator=gen, dtype=F64, requires_grad=True)
    weights = torch.randn(7, 4, generator=gen, dtype=F64)
    (torch.log_softmax(logits, -1) * weights).sum().backward()
    pi = torch.softmax(logits.detach(), -1)
    torch.testing.assert_close(C.policy_logit_gradients(weights, pi), logits.grad)


def test_consistency_evidence_is_the_last_layers_per_chunk_gradient():
    """`u` from the per-chunk gradients of a linear policy head (features -> logits,
    with bias), taken by autograd chunk by chunk."""
    gen = torch.Generator().manual_seed(1)
    steps, num_actions, width = 23, 3, 5
    features = torch.randn(steps, width, generator=gen, dtype=F64)
    head = torch.nn.Linear(width, num_actions).double()
    chunks = torch.tensor([0] * 6 + [1] * 9 + [2] * 8)
    a2c, credit = (torch.randn(steps, num_actions, generator=gen, dtype=F64) for _ in range(2))
    per_chunk = []
    for c in range(3):
        rows = chunks == c
        head.zero_grad()
        log_pi = torch.log_softmax(head(features[rows]), -1)
        ((a2c[rows] - credit[rows]) * log_pi).sum().backward()
        per_chunk.append(torch.cat([head.weight.grad.flatten(), head.bias.grad]))
    per_chunk = torch.stack(per_chunk)
    expected_u = float((per_chunk.sum(0) ** 2).sum() / (per_chunk ** 2).sum() - 1.0)
    pi = torch.softmax(head(features), -1).detach()
    out = C.consistency_evidence(a2c, credit, pi, features, chunks)
    assert out[0] == 1.0
    assert float(out[1]) == pytest.approx(expected_u, rel=1e-10)
    assert float(out[2]) == pytest.approx(expected_u ** 2, rel=1e-10)


def test_no_evidence_from_one_chunk_or_no_difference():
    pi = torch.full((4, 2), 0.5, dtype=F64)
    w = torch.ones(4, 2, dtype=F64)
    features = torch.ones(4, 1, dtype=F64)
    assert C.consistency_evidence(w, w + 1, pi, features, torch.zeros(4, dtype=torch.long)).eq(0).all()
    assert C.consistency_evidence(w, w, pi, features, torch.tensor([0, 0, 1, 1])).eq(0).all()
    assert float(C.consistency_trust(torch.tensor([1.0, 5.0, 25.0]))["trust"]) == 0.0  # one batch: as A2C


def _bandit_batches(classifier, num_batches=300, chunks=8, length=16, p=0.5, seed=0, noise_reward=False):
    """Accumulated `consistency_evidence` over batches of the known-answer bandit, each
    step one independent decision (features constant). `classifier`: `exact` (the
    closed-form posterior), `pi` (untrained: q == pi). `noise_reward`: the return is
    drawn without regard to the action, where q == pi is the exact posterior."""
    rng = np.random.default_rng(seed)
    q_a, q_b = bandit_q_values()
    value = 1.5 if noise_reward else p * q_a + (1 - p) * q_b
    state, accumulated = torch.zeros(3, dtype=F64), []
    n = chunks * length
    for _ in range(num_batches):
        took_a = rng.random(n) < p
        hi = rng.random(n) < np.where(noise_reward, 0.5, np.where(took_a, 0.9, 0.1))
        z = rng.normal(np.where(hi, 2.0, 1.0), 1.5)
        h = np.full(n, p) if (classifier == "pi" or noise_reward) else bandit_exact_posterior(z, p)
        pi = torch.stack([torch.full((n,), p, dtype=F64), torch.full((n,), 1 - p, dtype=F64)], -1)
        q = torch.stack([torch.as_tensor(h), torch.as_tensor(1 - h)], -1)
        actions = torch.as_tensor(np.where(took_a, 0, 1))
        returns, values = torch.as_tensor(z), torch.full((n,), value, dtype=F64)
        a2c = C.one_hot_weights(returns - values, actions, 2)
        credit = C.expected_hca_weights(returns, values, q, pi)
        ev = C.consistency_evidence(a2c, credit, pi, torch.ones(n, 1, dtype=F64),
                                    torch.arange(chunks).repeat_interleave(length))
        accumulated.append(ev)
        state = C.accumulate_evidence(state, ev)
    return torch.stack(accumulated), C.consistency_trust(state)


def test_the_exact_posterior_is_consistent_with_a2c():
    """Rao-Blackwell: with the exact posterior, the difference of the two gradients has
    mean 0, so `u` has mean about 0 and the trust stays with the credit estimator."""
    batches, out = _bandit_batches("exact")
    u = batches[:, 1].numpy()
    assert abs(u.mean()) < 4 * u.std(ddof=1) / np.sqrt(len(u))
    assert float(out["trust"]) > 0.5


def test_an_untrained_classifier_is_handed_back_to_a2c():
    """q == pi on a return that depends on the action: the credit estimator drops the
    signal (zero gradient), the difference is A2C's mean, `u` is clearly positive."""
    batches, out = _bandit_batches("pi")
    u = batches[:, 1].numpy()
    assert u.mean() > 10 * u.std(ddof=1) / np.sqrt(len(u))
    assert float(out["z"]) > C.Z_FULL_TRUST and float(out["trust"]) == 0.0


def test_noise_the_classifier_rightly_drops_keeps_the_trust():
    """The return is noise unrelated to the action: q == pi is the exact posterior, and
    the estimator's dropping it is no bias (the evidence trust reads it as no
    evidence and falls back)."""
    batches, out = _bandit_batches("pi", noise_reward=True)
    u = batches[:, 1].numpy()
    assert abs(u.mean()) < 4 * u.std(ddof=1) / np.sqrt(len(u))
    assert float(out["trust"]) > 0.5


def test_a_noise_difference_rarely_loses_the_trust():
    """Under no bias, z is about N(0, 1): the trust is below 1 (z > 1) about 16% of the
    time and 0 (z > 2) about 2%."""
    zero = 0
    for seed in range(60):
        _, out = _bandit_batches("exact", num_batches=40, seed=100 + seed)
        zero += float(out["trust"]) == 0.0
    assert zero / 60 < 0.12


@pytest.mark.parametrize("credit_mode", ["hca", "c2a2c"])
def test_one_hot_modes_refuse_the_consistency_trust_in_one_line(credit_mode):
    with pytest.raises(ValueError) as error:
        HCAConfig().training(credit=credit_mode, trust="consistency").validate()
    message = str(error.value)
    assert "\n" not in message and message.startswith("trust='consistency' takes credit='expected_hca'")
    assert credit_mode in message
    HCAConfig().training(credit="expected_hca", trust="consistency").validate()
