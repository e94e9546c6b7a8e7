"""Learner connector piece that puts returns, value targets and the credit advantage
into the train batch.

It runs after RLlib's `AddOneTsToEpisodesAndTruncate` (one artificial step per episode
chunk, carrying the bootstrap observation, masked out by `LOSS_MASK`), like RLlib's
`GeneralAdvantageEstimation`, but does not normalise advantages unless asked.

The classifier `q(a|s,Z)` is evaluated here, without gradient, on a batch it has
never trained on. Its diagnostics, the mutual-information estimate among them, are
therefore held-out by construction: the Learner trains the classifier on this batch
only after this piece has measured it.
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import EpisodeType

from hca_rllib import credit
from hca_rllib.module import RETURNS


def _num_learners() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def _sum_over_learners(values: torch.Tensor) -> torch.Tensor:
    """Sum over the learner ranks (DDP's process group)."""
    values = values.clone()
    torch.distributed.all_reduce(values)
    return values


class ComputeCreditAdvantages(ConnectorV2):
    """Adds `returns`, `value_targets` and `advantages` of the configured credit mode."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, config):
        super().__init__(input_observation_space, input_action_space)
        self.config = config

    @override(ConnectorV2)
    def __call__(
        self,
        *,
        rl_module,
        batch: Dict[str, Any],
        episodes: List[EpisodeType],
        metrics=None,
        **kwargs,
    ):
        for module_id, module_batch in batch.items():
            module = rl_module[module_id].unwrapped()
            diagnostics = self._add_credit(module, module_batch)
            if metrics is not None:
                for key, value in diagnostics.items():
                    metrics.log_value((module_id, key), float(value), window=1)
        return batch

    @torch.no_grad()
    def _add_credit(self, module, b: Dict[str, Any]) -> Dict[str, Any]:
        config = self.config
        obs = b[Columns.OBS]
        mask = b[Columns.LOSS_MASK].bool()
        rewards = b[Columns.REWARDS]
        terminateds, truncateds = b[Columns.TERMINATEDS], b[Columns.TRUNCATEDS]

        policy_latent = module.pi_torso(obs)
        policy_logits = module.pi(policy_latent)
        values = module._values(obs, policy_latent)

        # Both modes bootstrap where an episode was cut without a terminal state. In
        # `monte_carlo` mode batches hold complete episodes (validated), so that happens
        # only at the environment's time limit, and the value targets are the returns.
        returns = credit.discounted_returns(rewards, values, terminateds, truncateds, config.gamma)
        gae = credit.gae_advantages(
            rewards, values, terminateds, truncateds, config.gamma, config.lambda_
        )
        value_targets = returns if config.return_mode == "monte_carlo" else gae + values
        diagnostics: Dict[str, Any] = {}
        advantages = gae

        if config.uses_hindsight:
            finite = self._update_return_statistics(module, returns[mask], values[mask])
            actions = b[Columns.ACTIONS].long().unsqueeze(-1)
            log_pi_all = torch.log_softmax(policy_logits, dim=-1)
            hindsight_logits = module._hindsight_logits(obs, policy_latent, policy_logits, returns)
            log_q_all = torch.log_softmax(hindsight_logits, dim=-1)
            log_pi = log_pi_all.gather(-1, actions).squeeze(-1)
            log_q = log_q_all.gather(-1, actions).squeeze(-1)
            pointwise_information = log_q - log_pi
            finite = finite and bool(torch.isfinite(pointwise_information[mask]).all())
            reliability = None
            if config.reliability_z:
                batch_reliability = credit.classifier_reliability(
                    pointwise_information, mask, config.reliability_z, config.reliability_information
                )
                reliability = self._update_reliability(module, batch_reliability, finite)
            parts = credit.credit_advantage(
                config.credit,
                gae=gae,
                log_pi_taken=log_pi,
                log_q_taken=log_q,
                returns=returns,
                values=values,
                ratio_clip=config.hca_ratio_clip,
                use_baseline=config.hca_baseline,
                gate_delta=config.c2a2c_delta,
                soft_gate=config.c2a2c_soft,
                mix_eta=config.mix_eta,
                normalize_gate=config.c2a2c_normalize,
                reliability=reliability,
                mask=mask,
            )
            advantages = parts["advantages"]
            b[RETURNS] = returns
            diagnostics.update(
                self._diagnostics(
                    parts, gae, log_pi, log_q, policy_logits,
                    hindsight_logits, b[Columns.ACTIONS], mask, reliability,
                )
            )

        if config.normalize_advantages:
            real = advantages[mask]
            advantages = (advantages - real.mean()) / real.std().clamp(min=1e-8)
        b[Postprocessing.ADVANTAGES] = advantages
        b[Postprocessing.VALUE_TARGETS] = value_targets
        return diagnostics

    @staticmethod
    def _update_return_statistics(module, real_returns, real_values) -> bool:
        """Merge this batch's returns into the running statistics; False (and no update)
        if anything is non-finite. A non-finite batch must not poison the statistics;
        the Learner skips the update it would make. With several learners each sees a
        shard: the moments are summed over ranks, and a non-finite shard anywhere stops
        the update everywhere."""
        real = real_returns.double()
        finite = bool(torch.isfinite(real).all() and torch.isfinite(real_values).all())
        if _num_learners() == 1:
            if finite:
                module.update_return_statistics(real)
            return finite
        sums = _sum_over_learners(
            torch.stack([real.new_tensor(real.numel()), real.sum(), (real * real).sum(),
                         real.new_tensor(float(finite)), real.new_tensor(1.0)])
            if finite else real.new_tensor([0.0, 0.0, 0.0, 0.0, 1.0])
        )
        finite = bool(sums[3] == sums[4])
        if finite:
            module.return_encoder.update_from_sums(sums[0], sums[1], sums[2])
        return finite

    def _update_reliability(self, module, batch_reliability, finite: bool):
        """Fold this batch's trust into the moving average (averaged over learner ranks);
        a non-finite batch on any rank leaves it unchanged. Returns the trust to use."""
        if _num_learners() > 1:
            as_double = dict(dtype=torch.float64, device=batch_reliability.device)
            shared = _sum_over_learners(torch.stack([
                batch_reliability.double() if finite else torch.zeros((), **as_double),
                torch.tensor(float(finite), **as_double),
                torch.tensor(1.0, **as_double),
            ]))
            finite = bool(shared[1] == shared[2])
            batch_reliability = (shared[0] / shared[2]).float()
        if not finite:
            return module.reliability.clone()
        return module.update_reliability(batch_reliability, self.config.reliability_decay)

    def _diagnostics(
        self, parts, gae, log_pi, log_q, policy_logits,
        hindsight_logits, actions, mask, reliability,
    ) -> Dict[str, Any]:
        """Method note, section 4, measured on this (held-out) batch."""
        # The credit estimator itself (before any blending toward A2C) against GAE.
        estimator = parts.get("hca_advantages", parts.get("raw_gate", 1.0) * gae)
        out = {
            "info/mutual_information": credit.mutual_information(log_q, log_pi, mask),
            "hindsight/accuracy": credit.argmax_accuracy(hindsight_logits, actions, mask),
            "policy/accuracy": credit.argmax_accuracy(policy_logits, actions, mask),
            "hca/advantage_correlation": credit.correlation(estimator, gae, mask),
        }
        ratio = credit.hindsight_ratio(log_pi, log_q)
        for key, value in credit.ratio_statistics(ratio, self.config.hca_ratio_clip, mask).items():
            out[f"hca/{key}"] = value
        if "raw_gate" in parts:
            # Share of the policy update the gate of the note removes (hard gate: the
            # share of steps skipped).
            out["c2a2c/mask_fraction"] = 1.0 - parts["raw_gate"][mask].mean()
        if reliability is not None:
            out["credit/reliability"] = reliability
        return out
