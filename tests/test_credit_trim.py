"""The credit pieces (`hca_rllib/connectors.py`) give the weights, optimizer state and
logged metrics of 0.1.0's pieces, bitwise, for the same seed and episodes: on both
learner paths (lean: every row real; RLlib's: artificial rows masked out), for every
credit mode, with the evidence trust and without. 0.1.0 had knobs since removed
(`trust_bins`, `trust_calibration`, `trust_max_scale`, `trust_z`, `trust_decay`,
`trust_information`, `hca_ratio_clip`, `hca_baseline`, `c2a2c_soft`, ...); the
`reference_*` functions below are its pieces and its `credit` functions as they ran at
those knobs' defaults (one evidence bin, the blend calibration, scale cap 4, full trust
at z = 2, decay 0.99, no information cap, clip 10, the V baseline, the soft gate), with
the per-decision trust and scale 0.1.0 computed. A second test shows the comparison can
fail."""

import copy
from typing import Any, Dict

import pytest
import torch

from ray.rllib.core.columns import Columns

from hca_rllib import credit
from hca_rllib.connectors import ComputeCreditWeights, CreditState
from hca_rllib.learner import HINDSIGHT_OPTIMIZER

from test_learner_path import MID, build, make_config, make_episodes, module_state

# --- 0.1.0's credit functions, at the removed knobs' defaults -------------------------


def reference_chunk_ids(mask):
    """0.1.0's chunks on RLlib's layout: the artificial row belongs to the chunk it closes."""
    ends = (~mask.bool()).long()
    return torch.cumsum(ends, 0) - ends


def reference_calibration_evidence(actions, pi_probs, q_probs, mask, chunks, bins, num_bins=1):
    mask = mask.bool()
    chunks = reference_chunk_ids(mask) if chunks is None else chunks
    deviation = (q_probs - pi_probs).to(torch.float64)
    taken = deviation.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    x = (taken - (pi_probs.to(torch.float64) * deviation).sum(-1)) * mask
    d = (deviation * deviation).sum(-1) * mask
    num_chunks = int(chunks.max()) + 1 if chunks.numel() else 0
    unit = chunks * num_bins + bins
    size = num_chunks * num_bins
    zeros = lambda: torch.zeros(size, dtype=torch.float64, device=x.device)  # noqa: E731
    per_x, per_d = zeros().index_add_(0, unit, x), zeros().index_add_(0, unit, d)
    real = zeros().index_add_(0, unit, mask.to(torch.float64)) > 0
    unit_bin = torch.arange(size, device=x.device) % num_bins
    out = torch.zeros(num_bins, 4, dtype=torch.float64, device=x.device)
    out[:, 0].index_add_(0, unit_bin, real.to(torch.float64))
    out[:, 1].index_add_(0, unit_bin, per_x * real)
    out[:, 2].index_add_(0, unit_bin, per_x * per_x * real)
    out[:, 3].index_add_(0, unit_bin, per_d * real)
    return out


def reference_evidence_trust(evidence, z_full_trust=2.0, max_scale=4.0):
    ev = evidence.to(torch.float64)
    n, sx, sxx, sd = ev[..., 0], ev[..., 1], ev[..., 2], ev[..., 3]
    usable = (n >= 2.0) & (sd > 1e-12)
    safe_n = torch.where(usable, n, torch.full_like(n, 2.0))
    variance = torch.clamp((sxx - sx * sx / safe_n) / (safe_n - 1.0), min=0.0)
    z = torch.where(usable, sx / torch.clamp(torch.sqrt(safe_n * variance), min=1e-12), torch.zeros_like(n))
    onset = 0.5 * z_full_trust
    trust = torch.clamp((z - onset) / (z_full_trust - onset), 0.0, 1.0)
    scale = torch.where(usable, torch.clamp(sx / torch.where(usable, sd, torch.ones_like(sd)), 0.0, max_scale),
                        torch.zeros_like(n))
    trust = trust * torch.clamp(scale, max=1.0)  # calibration="blend"
    scale = torch.where(usable, torch.clamp(scale, min=1.0), torch.zeros_like(n))
    return {"trust": trust.float(), "scale": scale.float(), "z": z.float()}


def reference_credit_weights(mode, *, actions, gae, log_pi_all, log_q_all, returns, values, trust, scale,
                             gate_delta, pi_probs=None, q_probs=None):
    num_actions = log_pi_all.shape[-1]
    if mode == "expected_hca":
        expected = credit.expected_hca_weights(returns, values, q_probs, pi_probs, scale)
        w = torch.ones((), device=gae.device) if trust is None else trust
        if w.dim() == 1:
            w = w.unsqueeze(-1)
        weights = (1.0 - w) * credit.one_hot_weights(gae, actions, num_actions) + w * expected
        return {"weights": weights, "expected_weights": expected,
                "advantages": weights.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)}
    log_pi = log_pi_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    log_q = log_q_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    out: Dict[str, torch.Tensor] = {}
    if mode == "a2c":
        out["advantages"] = gae
    elif mode == "c2a2c":
        gate = torch.clamp(torch.abs(log_q - log_pi) / gate_delta, max=1.0)  # the soft gate
        out["raw_gate"] = gate
        if trust is not None:
            gate = (1.0 - trust) + trust * gate
        out["gate"], out["advantages"] = gate, gate * gae
    else:  # hca: clip 10, baseline V
        rho = torch.clamp(torch.exp(log_pi - log_q), 0.0, 10.0)
        out["hca_advantages"] = hca = (1.0 - rho) * (returns - values)
        eta = 1.0 if trust is None else 1.0 * trust
        out["advantages"] = (1.0 - eta) * gae + eta * hca
    out["weights"] = credit.one_hot_weights(out["advantages"], actions, num_actions)
    return out


# --- 0.1.0's pieces -------------------------------------------------------------------


def reference_weights_process(self, module, b, states, module_id):
    config = self.config
    s = self._state(states, module_id)
    num_actions = s.log_pi_all.shape[-1]
    if s.log_q_all is None:  # A2C without a classifier
        s.parts = {"advantages": s.gae, "weights": credit.one_hot_weights(s.gae, s.actions, num_actions)}
        self._write(b, s)
        return None
    diagnostics: Dict[str, Any] = {}
    trust, scale = self._trust(module, s, diagnostics)
    pi_probs, q_probs = s.probs() if config.credit == "expected_hca" else (None, None)
    s.parts = reference_credit_weights(
        config.credit, actions=s.actions, gae=s.gae, log_pi_all=s.log_pi_all, log_q_all=s.log_q_all,
        returns=s.returns, values=s.values, trust=trust, scale=scale, gate_delta=config.c2a2c_delta,
        pi_probs=pi_probs, q_probs=q_probs)
    self._write(b, s)
    diagnostics.update(self._diagnostics(s))
    return diagnostics


def reference_trust(self, module, s: CreditState, diagnostics):
    """0.1.0's evidence trust: one trust per decision (`trust[bins]`, all bin 0) and, for
    expected_hca, one scale per decision."""
    config = self.config
    if config.trust is None:
        return None, 1.0
    pi_probs, q_probs = s.probs()
    bins = torch.zeros(q_probs.shape[:-1], dtype=torch.long)
    # 0.1.0 numbered the chunks of the lean layout's rows, and left RLlib's to the mask.
    chunks = s.chunks if s.all_real else None
    evidence = reference_calibration_evidence(s.actions, pi_probs, q_probs, s.mask, chunks, bins)
    accumulated = module.trust_evidence.to(torch.float64, copy=True)
    if s.finite and bool(torch.isfinite(evidence).all()):
        module.trust_evidence.copy_(0.99 * module.trust_evidence.to(torch.float64) + evidence)
    per_bin = reference_evidence_trust(accumulated)
    per_decision = per_bin["trust"][bins]
    module.trust.fill_(float(per_bin["trust"][0]))
    diagnostics.update({
        "credit/trust": per_bin["trust"][0],
        "credit/trust_z": per_bin["z"][0],
        "credit/trust_scale": per_bin["scale"][0],
        "credit/decision_trust": s.real(per_decision).mean(),
    })
    if config.credit != "expected_hca":
        return per_decision, 1.0
    return per_decision, per_bin["scale"][bins]


REFERENCES = {"_process": reference_weights_process, "_trust": reference_trust}
# 0.1.0 logged the mean of its per-decision trusts, all equal to the trust, which a float32
# sum of many copies need not give back exactly; the trust itself is compared.
APPROXIMATE_METRICS = ("credit/decision_trust",)


def credit_pieces_of(learner):
    """The learner's credit pieces: its own list (lean path) or its connector's (RLlib's)."""
    if learner._credit_pieces:
        return list(learner._credit_pieces)
    return list(learner._learner_connector.connectors)


def use_reference_pieces(learner) -> int:
    """Bind the reference methods on this learner's weights piece; how many were bound."""
    bound = 0
    for piece in credit_pieces_of(learner):
        if isinstance(piece, ComputeCreditWeights):
            for name, function in REFERENCES.items():
                setattr(piece, name, function.__get__(piece, type(piece)))
                bound += 1
    return bound


CONFIGS = {
    "default": lambda: make_config("expected_hca").training(hindsight_epochs=1),
    "expected_hca_no_trust": lambda: make_config("expected_hca").training(trust=None),
    "hca": lambda: make_config("hca"),
    "hca_no_trust": lambda: make_config("hca").training(trust=None),
    "c2a2c": lambda: make_config("c2a2c_options"),
    "a2c_classifier": lambda: make_config("a2c_classifier"),
}


def _metrics(results) -> Dict[str, Any]:
    return {k: v for k, v in results[MID].items()}


def _same(value, other) -> bool:
    if torch.is_tensor(value):
        return torch.equal(torch.as_tensor(value), torch.as_tensor(other))
    return value == other or (value != value and other != other)


def _run(config, path, reference_on_slow=True, updates=3):
    fast, _ = build(config, path, 1)
    slow, _ = build(config, path, 1, state=fast.module[MID].get_state())
    if reference_on_slow:
        assert use_reference_pieces(slow) == 2
    for update in range(updates):
        episodes = make_episodes(100 * update + 11)
        out_fast = fast.update(episodes=copy.deepcopy(episodes))
        out_slow = slow.update(episodes=copy.deepcopy(episodes))
        metrics_fast, metrics_slow = _metrics(out_fast), _metrics(out_slow)
        assert metrics_fast.keys() == metrics_slow.keys()
        for key, value in metrics_fast.items():
            other = metrics_slow[key]
            if key in APPROXIMATE_METRICS:
                assert abs(float(value) - float(other)) < 1e-6, key
            else:
                assert _same(value, other), f"update {update}: metric {key}: {value!r} != {other!r}"
    return fast, slow


@pytest.mark.parametrize("path", ["lean", "rllib"])
@pytest.mark.parametrize("case", list(CONFIGS))
def test_credit_pieces_give_the_0_1_0_results_bitwise(case, path):
    fast, slow = _run(CONFIGS[case](), path)
    fast_state, slow_state = module_state(fast), module_state(slow)
    assert fast_state.keys() == slow_state.keys()
    for name, tensor in fast_state.items():
        assert torch.equal(tensor, slow_state[name]), f"{case}, {path}: {name} differs"
    for name in ("default_optimizer", HINDSIGHT_OPTIMIZER):
        try:
            pair = fast.get_optimizer(MID, name), slow.get_optimizer(MID, name)
        except KeyError:
            continue
        for a, b in zip(pair[0].state.values(), pair[1].state.values()):
            for key in a:
                assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), f"{name} {key}"


def test_the_reference_comparison_can_fail():
    """The comparison sees a change in the credit: a reference whose trust is off by one
    ulp gives other weights (or metrics) after the same updates."""
    config = CONFIGS["default"]()
    fast, _ = build(config, "lean", 1)
    slow, _ = build(config, "lean", 1, state=fast.module[MID].get_state())
    use_reference_pieces(slow)
    weights = next(p for p in credit_pieces_of(slow) if isinstance(p, ComputeCreditWeights))
    trust = weights._trust

    def nudged(module, s, diagnostics):
        per_decision, scale = trust(module, s, diagnostics)
        return torch.nextafter(per_decision, torch.full_like(per_decision, 2.0)), scale

    weights._trust = nudged
    differs = False
    for update in range(3):
        episodes = make_episodes(100 * update + 11)
        out_fast = fast.update(episodes=copy.deepcopy(episodes))
        out_slow = slow.update(episodes=copy.deepcopy(episodes))
        differs = differs or _metrics(out_fast) != _metrics(out_slow)
    a, b = module_state(fast), module_state(slow)
    differs = differs or not all(torch.equal(a[k], b[k]) for k in a)
    assert differs
