"""The credit pieces with their repeated work trimmed (`hca_rllib/connectors.py`: every
row real on the lean layout, so no masked copies of whole tensors; the probabilities
`exp(log_pi)`, `exp(log_q)` computed once for the trust and the weights) give the same
weights, optimizer state and logged metrics, bitwise, as the pieces written before that
change (the `reference_*` functions below, copied verbatim from commit 6bad2ec), for the
same seed and episodes: on both learner paths (lean: every row real; RLlib's: artificial
rows masked out), for every credit mode, both trust modes, both calibrations, with and
without `normalize_advantages`. A second test shows the comparison can fail."""

import copy
from typing import Any, Dict

import pytest
import torch

from ray.rllib.core.columns import Columns

from hca_rllib import credit
from hca_rllib.connectors import (ComputeCreditWeights, ComputeHindsightLogProbs, CreditState,
                                  NormalizeCreditWeights)
from hca_rllib.learner import HINDSIGHT_OPTIMIZER
from hca_rllib.module import RETURNS

from test_learner_path import MID, build, make_config, make_episodes, module_state

# --- The pieces as written before the change (6bad2ec), verbatim. ----------------------


def reference_hindsight_process(self, module, b, states, module_id):
    if not self.config.uses_hindsight:
        return None
    s = self._state(states, module_id)
    obs = b[Columns.OBS]
    s.finite = self._update_return_statistics(module, s.returns[s.mask], s.values[s.mask])
    if s.grad_latent is not None:
        # Credit from the Learner's gradient pass: the classifier's forward with
        # gradient, after the statistics update (as in the module's forward_train),
        # before any training on this batch: held-out all the same.
        with torch.enable_grad():
            s.hindsight_logits_grad = module.hindsight_logits(obs, s.grad_latent, s.grad_logits, s.returns)
        s.hindsight_logits = s.hindsight_logits_grad.detach()
    else:
        s.hindsight_logits = module.hindsight_logits(obs, s.policy_latent, s.policy_logits, s.returns)
    s.log_q_all = torch.log_softmax(s.hindsight_logits, dim=-1)
    s.log_pi_taken = log_pi = s.log_pi_all.gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
    s.log_q_taken = log_q = s.log_q_all.gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
    s.finite = s.finite and bool(torch.isfinite(s.log_q_all[s.mask]).all())
    b[RETURNS] = s.returns
    return {
        "info/mutual_information": credit.mutual_information(log_q, log_pi, s.mask),
        "hindsight/accuracy": credit.argmax_accuracy(s.hindsight_logits, s.actions, s.mask),
        "policy/accuracy": credit.argmax_accuracy(s.policy_logits, s.actions, s.mask),
    }


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
    s.parts = credit.credit_weights(
        config.credit,
        actions=s.actions, gae=s.gae, log_pi_all=s.log_pi_all, log_q_all=s.log_q_all,
        returns=s.returns, values=s.values, trust=trust, scale=scale, mask=s.mask,
        **({} if config.credit in ("expected_hca", "a2c") else dict(
            ratio_clip=config.hca_ratio_clip, use_baseline=config.hca_baseline,
            gate_delta=config.c2a2c_delta, soft_gate=config.c2a2c_soft,
            mix_eta=config.mix_eta, normalize_gate=config.c2a2c_normalize)),
    )
    self._write(b, s)
    diagnostics.update(self._diagnostics(s))
    return diagnostics


def reference_trust(self, module, s: CreditState, diagnostics):
    """`(trust, scale)`: trust None (pure estimator), a scalar or one per step."""
    config = self.config
    if config.trust is None:
        return None, 1.0
    pi_probs, q_probs = s.log_pi_all.exp(), s.log_q_all.exp()
    if config.trust == "batch":
        batch = credit.batch_trust(s.log_q_taken - s.log_pi_taken, s.mask, config.trust_z, config.trust_information)
        trust = self._update_batch_trust(module, batch, s.finite)
        diagnostics["credit/trust"] = trust
        return trust, 1.0
    bins = credit.evidence_bins(pi_probs, q_probs, config.trust_bins)
    num_bins = len(config.trust_bins) + 1
    evidence = credit.calibration_evidence(s.actions, pi_probs, q_probs, s.mask, chunks=s.chunks,
                                           bins=bins, num_bins=num_bins)
    # The trust applied to this batch comes from the batches before it: evidence that
    # includes this batch would favour a noise classifier exactly where its deviations
    # happen to point at this batch's actions. This batch's evidence serves the next.
    accumulated = module.trust_evidence.clone().double()
    self._update_evidence(module, evidence, s.finite)
    per_bin = credit.evidence_trust(accumulated, config.trust_z, config.trust_max_scale,
                                    config.trust_calibration)
    per_decision = credit.decision_trust(per_bin["trust"], pi_probs, q_probs, config.trust_information, bins)
    # The headline numbers are those of the most informative bin that has evidence.
    top = int(torch.nonzero(accumulated[:, 0] >= 2.0).max()) if bool((accumulated[:, 0] >= 2.0).any()) else 0
    module.trust.fill_(float(per_bin["trust"][top]))
    diagnostics.update({
        "credit/trust": per_bin["trust"][top],
        "credit/trust_z": per_bin["z"][top],
        "credit/trust_scale": per_bin["scale"][top],
        "credit/decision_trust": per_decision[s.mask].mean(),
    })
    if config.credit != "expected_hca":
        return per_decision, 1.0
    return per_decision, per_bin["scale"][bins]


def reference_diagnostics(self, s: CreditState) -> Dict[str, Any]:
    """Method note, section 4, measured on this (held-out) batch."""
    config, mask, parts = self.config, s.mask, s.parts
    log_pi, log_q = s.log_pi_taken, s.log_q_taken
    # The credit estimator itself (before any blending toward A2C) against GAE.
    if "expected_weights" in parts:
        estimator = parts["expected_weights"].gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
    else:
        estimator = parts.get("hca_advantages", parts.get("raw_gate", 1.0) * s.gae)
    out = {"hca/advantage_correlation": credit.correlation(estimator, s.gae, mask)}
    ratio = credit.hindsight_ratio(log_pi, log_q)
    for key, value in credit.ratio_statistics(ratio, config.hca_ratio_clip, mask).items():
        out[f"hca/{key}"] = value
    if "raw_gate" in parts:
        # Share of the policy update the gate of the note removes (hard gate: the
        # share of steps skipped).
        out["c2a2c/mask_fraction"] = 1.0 - parts["raw_gate"][mask].mean()
    return out


def reference_normalize_process(self, module, b, states, module_id):
    s = self._state(states, module_id)
    if self.config.credit == "expected_hca":
        s.parts["weights"] = s.parts["weights"] / s.gae[s.mask].std().clamp(min=1e-8)
        s.parts["advantages"] = s.parts["weights"].gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
    else:
        real = s.parts["advantages"][s.mask]
        s.parts["advantages"] = (s.parts["advantages"] - real.mean()) / real.std().clamp(min=1e-8)
        s.parts["weights"] = credit.one_hot_weights(s.parts["advantages"], s.actions, s.log_pi_all.shape[-1])
    ComputeCreditWeights._write(b, s)
    return None


REFERENCES = {
    ComputeHindsightLogProbs: {"_process": reference_hindsight_process},
    ComputeCreditWeights: {"_process": reference_weights_process, "_trust": reference_trust,
                           "_diagnostics": reference_diagnostics},
    NormalizeCreditWeights: {"_process": reference_normalize_process},
}


def credit_pieces_of(learner):
    """The learner's credit pieces: its own list (lean path) or its connector's (RLlib's)."""
    if learner._credit_pieces:
        return list(learner._credit_pieces)
    return [p for p in learner._learner_connector.connectors
            if isinstance(p, tuple(REFERENCES))]


def use_reference_pieces(learner) -> int:
    """Bind the reference methods on this learner's credit pieces; how many were bound."""
    bound = 0
    for piece in credit_pieces_of(learner):
        for name, function in REFERENCES.get(type(piece), {}).items():
            setattr(piece, name, function.__get__(piece, type(piece)))
            bound += 1
    return bound


CONFIGS = {
    "default": lambda: make_config("expected_hca").training(
        trust_bins=[], normalize_advantages=False, trust_calibration="blend", hindsight_epochs=1),
    "expected_hca_bins_normalized_weights": lambda: make_config("expected_hca").training(
        trust_calibration="weights", trust_information=0.05),
    "expected_hca_batch_trust": lambda: make_config("expected_hca").training(trust="batch"),
    "expected_hca_no_trust": lambda: make_config("expected_hca").training(trust=None),
    "hca": lambda: make_config("hca"),
    "c2a2c_normalized": lambda: make_config("c2a2c_normalized"),
    "mix": lambda: make_config("mix").training(trust="evidence"),
    "a2c_classifier": lambda: make_config("a2c_classifier"),
}


def _metrics(results) -> Dict[str, Any]:
    return {k: v for k, v in results[MID].items()}


def _run(config, path, reference_on_slow=True, updates=3):
    fast, _ = build(config, path, 1)
    slow, _ = build(config, path, 1, state=fast.module[MID].get_state())
    if reference_on_slow:
        assert use_reference_pieces(slow) >= 1
    for update in range(updates):
        episodes = make_episodes(100 * update + 11)
        out_fast = fast.update(episodes=copy.deepcopy(episodes))
        out_slow = slow.update(episodes=copy.deepcopy(episodes))
        metrics_fast, metrics_slow = _metrics(out_fast), _metrics(out_slow)
        assert metrics_fast.keys() == metrics_slow.keys()
        for key, value in metrics_fast.items():
            other = metrics_slow[key]
            same = (torch.equal(torch.as_tensor(value), torch.as_tensor(other)) if torch.is_tensor(value)
                    else value == other or (value != value and other != other))
            assert same, f"update {update}: metric {key}: {value!r} != {other!r}"
    return fast, slow


@pytest.mark.parametrize("path", ["lean", "rllib"])
@pytest.mark.parametrize("case", list(CONFIGS))
def test_trimmed_credit_pieces_give_the_reference_results_bitwise(case, path):
    fast, slow = _run(CONFIGS[case](), path)
    fast_state, slow_state = module_state(fast), module_state(slow)
    assert fast_state.keys() == slow_state.keys()
    for name, tensor in fast_state.items():
        assert torch.equal(tensor, slow_state[name]), f"{case}, {path}: {name} differs"
    for name in ("default_policy", "default_policy_" + HINDSIGHT_OPTIMIZER):
        if name not in fast._named_optimizers:
            continue
        for a, b in zip(fast._named_optimizers[name].state.values(), slow._named_optimizers[name].state.values()):
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
