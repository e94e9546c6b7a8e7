"""The loss: policy gradient with the credit path's per-action weights,
`-sum_a W[t, a] log pi(a|s_t)`, value regression, hindsight cross-entropy and an entropy
bonus, all as means over the real (unmasked) steps.

An update whose loss or gradients are not finite never reaches the weights: it is
skipped, counted under `num_skipped_updates` and warned about.

The credit (returns, GAE, value targets, classifier diagnostics, trust, `W`) is fixed
before the loss differentiates anything. `learner_path="rllib"`: RLlib's connector
pieces after `AddOneTsToEpisodesAndTruncate`, with the credit pieces' own no-grad pass.
`learner_path="lean"` (`connectors.LeanEpisodesToBatch`): when the batch gets one
gradient step (one epoch, no minibatches, one learner: A2C's `training_step`), the
no-grad pass would see the same weights and inputs as the gradient pass, so the credit
pieces run on the gradient pass's outputs, detached, inside `compute_loss_for_module`
(`_credit_from_train_pass`); the classifier's forward with gradient comes after its
statistics update there and before any step on the batch, so its diagnostics stay
held-out. Otherwise (several epochs or minibatches: the weights change between steps;
several learners: DDP must see every differentiated parameter in its one forward call)
the credit pieces run on a no-grad pass over the whole batch before the first step
(`_make_batch_if_necessary`), as on RLlib's path.

After the gradient steps of an update, RLlib's `after_gradient_based_update` hook runs
`hindsight_epochs` more classifier-only passes over each batch that took a step, fitting
the policy that collected it.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, List, Optional

import torch
from torch.nn.utils import get_total_norm

from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES
from ray.rllib.utils.typing import ModuleID, ParamDict, TensorType

from hca_rllib import credit
from hca_rllib.connectors import CreditState, credit_pieces, is_distributed, num_learner_ranks
from hca_rllib.module import (CREDIT_WEIGHTS, HINDSIGHT_LOGITS, REMAINDER_TARGETS, REMAINDER_VALUES,
                              classifier_base_logits, history_rows)

logger = logging.getLogger(__name__)

HINDSIGHT_OPTIMIZER = "hindsight"
REMAINDER_OPTIMIZER = "remainder"
NUM_SKIPPED_UPDATES = "num_skipped_updates"
# A2C's optimizer, as Stable-Baselines3 has it: RMSprop with alpha 0.99 and eps 1e-5
# (torch's default eps, 1e-8, gives much larger first steps), for the policy and value
# and, in its own optimizer, the classifier.
RMSPROP_ALPHA = 0.99
RMSPROP_EPS = 1e-5


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.sum(x[mask]) / mask.sum().clamp(min=1)


def all_finite(tensors) -> bool:
    """Whether every tensor (None: skipped) is finite: the largest |x| over all of them,
    in one fused call per device and dtype, then one check (a NaN or inf anywhere makes
    the max-norm non-finite)."""
    tensors = [t.detach() for t in tensors if t is not None]
    if not tensors:
        return True
    return bool(torch.isfinite(get_total_norm(tensors, math.inf, foreach=True)))


def hindsight_loss(hindsight_logits, actions, mask) -> torch.Tensor:
    """The classifier's cross-entropy `-mean_t log q(a_t | s_t, Z_t)` over the real steps
    (`actions` of shape [B, 1]): `pass_loss` for one pass."""
    return pass_loss(actions, mask)(hindsight_logits)


def classifier_rows(mask: torch.Tensor, history: Optional[torch.Tensor]) -> torch.Tensor:
    """The rows whose pairs the classifier fits: the real rows and, across fragments, the
    carried ones (their pairs with this fragment's rewards are new)."""
    return mask if history is None else mask | history.bool()


def pass_loss(actions, mask):
    """The classifier's cross-entropy (`hindsight_loss`) as a function of its logits alone,
    for passes over the same rows: the real rows are found once (all of them on the lean
    path: no indexing)."""
    count = mask.sum().clamp(min=1)
    rows = None if bool(mask.all()) else mask.nonzero().squeeze(-1)

    def loss(logits):
        log_q = torch.log_softmax(logits, dim=-1).gather(-1, actions).squeeze(-1)
        return -(torch.sum(log_q if rows is None else log_q[rows]) / count)

    return loss


class HCATorchLearner(TorchLearner):
    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        # (module id, batch, latent, logits) of this gradient step, and of the steps of
        # this update that were applied: the extra classifier passes' work
        # (`after_gradient_based_update`), with the policy that collected each batch.
        self._step_batches: List[tuple] = []
        self._pass_batches: List[tuple] = []
        self._extra_passes = bool(self.config.uses_hindsight and self.config.hindsight_epochs > 0)
        # Lean path: the credit pieces run here, on the batch (`learner_path="lean"`).
        self._lean = bool(getattr(self.config, "uses_lean_learner", False))
        self._credit_pieces = credit_pieces(self.config) if self._lean else []
        self._single_pass = True
        if self._learner_connector is not None and self.config.add_default_connectors_to_learner_pipeline \
                and not self._lean:
            self._learner_connector.prepend(AddOneTsToEpisodesAndTruncate())
            for piece in credit_pieces(self.config):
                self._learner_connector.append(piece)

    # --- the lean path's credit (module docstring) -------------------------------------

    @override(TorchLearner)
    def _create_iterator_if_necessary(self, *, training_data, num_total_minibatches=0, num_epochs=1,
                                      minibatch_size=None, shuffle_batch_per_epoch=False, **kwargs):
        # One gradient step on the whole batch: the credit can come from its own pass.
        self._single_pass = (num_epochs == 1 and not minibatch_size and not num_total_minibatches
                             and not training_data.data_iterators)
        return super()._create_iterator_if_necessary(
            training_data=training_data, num_total_minibatches=num_total_minibatches,
            num_epochs=num_epochs, minibatch_size=minibatch_size,
            shuffle_batch_per_epoch=shuffle_batch_per_epoch, **kwargs)

    @override(TorchLearner)
    def _make_batch_if_necessary(self, training_data):
        batch = super()._make_batch_if_necessary(training_data)
        if self._lean and training_data.episodes is not None and (is_distributed() or not self._single_pass):
            # The maths needs the credit fixed before several steps (or outside DDP's
            # forward): one no-grad pass over the whole batch, as RLlib's path does.
            for module_id, module_batch in batch.policy_batches.items():
                self._run_credit(module_id, module_batch, None)
        return batch

    def _run_credit(self, module_id, module_batch, fwd_out) -> CreditState:
        """The credit pieces on one module's lean batch: on their own no-grad pass
        (`fwd_out` None) or on the gradient pass's outputs `fwd_out`, detached."""
        module = self.module[module_id].unwrapped()
        states: Dict[Any, CreditState] = {}
        first, rest = self._credit_pieces[0], self._credit_pieces[1:]
        if fwd_out is None:
            first.run(module, module_batch, states, module_id, self.metrics)
        else:
            latent, logits = fwd_out[Columns.EMBEDDINGS], fwd_out[Columns.ACTION_DIST_INPUTS]
            remainder = fwd_out.get(REMAINDER_VALUES)
            with torch.no_grad():
                state = first.from_outputs(module_batch, latent.detach(), logits.detach(),
                                           fwd_out[Columns.VF_PREDS].detach(),
                                           None if remainder is None else remainder.detach())
            state.grad_latent, state.grad_logits = latent, logits
            states[module_id] = state
        for piece in rest:
            piece.run(module, module_batch, states, module_id, self.metrics)
        return states[module_id]

    def _credit_from_train_pass(self, module_id, batch, fwd_out) -> Dict[str, Any]:
        """Lean path, one gradient step: the credit from this pass's outputs (detached);
        the classifier's logits with gradient join `fwd_out`."""
        state = self._run_credit(module_id, batch, fwd_out)
        if state.hindsight_logits_grad is not None:
            fwd_out = {**fwd_out, HINDSIGHT_LOGITS: state.hindsight_logits_grad}
        return fwd_out

    # --- optimizers and the loss --------------------------------------------------------

    @classmethod
    @override(TorchLearner)
    def rl_module_required_apis(cls) -> list:
        return [ValueFunctionAPI]

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        """Policy and value in one RMSprop optimizer, the classifier in its own (so that
        the `hindsight_epochs` extra passes step it alone, at `hindsight_lr`, without
        touching the policy's optimizer state), the reward outcome's remainder head in a
        third. RLlib clips the gradients per optimizer, so the policy's and the value's
        are clipped as A2C's, whatever the credit heads' gradients are. For another
        optimizer, subclass this Learner, override this method and set
        `training(learner_class=...)`."""
        module = self.module[module_id]
        named = [(n.removeprefix("module."), p) for n, p in module.named_parameters() if p.requires_grad]
        hindsight_params = [p for n, p in named if n.startswith(("hindsight.", "hindsight_torso."))]
        remainder_params = [p for n, p in named if n.startswith("remainder_vf.")]
        credit_ids = {id(p) for p in hindsight_params + remainder_params}
        main_params = [p for _, p in named if id(p) not in credit_ids]
        groups = [({}, main_params, config.lr),
                  ({"optimizer_name": HINDSIGHT_OPTIMIZER}, hindsight_params, config.hindsight_lr or config.lr),
                  ({"optimizer_name": REMAINDER_OPTIMIZER}, remainder_params, config.lr)]
        for name, params, lr in groups:
            if params:
                self.register_optimizer(
                    module_id=module_id, **name, params=params, lr_or_lr_schedule=lr,
                    optimizer=torch.optim.RMSprop(params, alpha=RMSPROP_ALPHA, eps=RMSPROP_EPS))

    @override(TorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        if CREDIT_WEIGHTS not in batch:  # lean path, one gradient step
            fwd_out = self._credit_from_train_pass(module_id, batch, fwd_out)
        mask = batch[Columns.LOSS_MASK].bool()
        actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
        log_probs = torch.log_softmax(fwd_out[Columns.ACTION_DIST_INPUTS], dim=-1)
        entropy = _masked_mean(-(log_probs.exp() * log_probs).sum(-1), mask)

        history = history_rows(batch)
        policy_loss = credit.policy_gradient_loss(batch[CREDIT_WEIGHTS], log_probs, mask, history)
        values = fwd_out[Columns.VF_PREDS]
        targets = batch[Postprocessing.VALUE_TARGETS]
        vf_loss = _masked_mean((values - targets) ** 2, mask)
        total = policy_loss + config.vf_loss_coeff * vf_loss - config.entropy_coeff * entropy
        remainder_loss = None
        if REMAINDER_TARGETS in batch:  # the reward outcome's remainder head, a value head too
            remainder_loss = _masked_mean((fwd_out[REMAINDER_VALUES] - batch[REMAINDER_TARGETS]) ** 2, mask)
            total = total + config.vf_loss_coeff * remainder_loss
        if self._extra_passes:
            # The policy before this update's step: what the extra classifier passes fit.
            self._step_batches.append((module_id, batch, fwd_out[Columns.EMBEDDINGS].detach(),
                                       fwd_out[Columns.ACTION_DIST_INPUTS].detach()))

        metrics = {
            POLICY_LOSS_KEY: policy_loss,
            VF_LOSS_KEY: vf_loss,
            ENTROPY_KEY: entropy,
            "vf_explained_var": credit.explained_variance(targets, values, mask),
            "advantage_mean": _masked_mean(batch[Postprocessing.ADVANTAGES], mask),
        }
        if remainder_loss is not None:
            metrics["remainder_vf_loss"] = remainder_loss
        if HINDSIGHT_LOGITS in fwd_out:
            module = self.module[module_id].unwrapped()
            rows, _ = module.outcome_pairs(batch[module.outcome_column])
            fit_rows = classifier_rows(mask, history)
            classifier_loss = (hindsight_loss(fwd_out[HINDSIGHT_LOGITS], actions, fit_rows) if rows is None
                               else hindsight_loss(fwd_out[HINDSIGHT_LOGITS], actions[rows], fit_rows[rows]))
            total = total + config.hindsight_loss_coeff * classifier_loss
            metrics["hindsight_loss"] = classifier_loss
        metrics["total_loss"] = total
        self.metrics.log_dict(
            {k: v.detach() for k, v in metrics.items()}, key=module_id, window=1
        )
        return total

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        """Skip the whole update if any gradient is non-finite (a NaN loss gives NaN
        gradients, so this also covers non-finite losses and advantages)."""
        step, self._step_batches = self._step_batches, []
        if not all_finite(list(gradients_dict.values())):
            logger.warning("Non-finite loss or gradient: skipping this update.")
            self.metrics.log_value((ALL_MODULES, NUM_SKIPPED_UPDATES), 1, reduce="lifetime_sum")
            for module_id in self.module.keys():
                for _, optimizer in self.get_optimizers_for_module(module_id):
                    optimizer.zero_grad(set_to_none=True)
            return
        self.metrics.log_value((ALL_MODULES, NUM_SKIPPED_UPDATES), 0, reduce="lifetime_sum")
        super().apply_gradients(gradients_dict)
        self._pass_batches.extend(step)

    # --- the extra classifier passes ----------------------------------------------------

    @override(TorchLearner)
    def before_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self._step_batches, self._pass_batches = [], []

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        """The extra classifier passes over each batch of this update that took a step
        (before RLlib's learning-rate schedules move on)."""
        batches, self._pass_batches = self._pass_batches, []
        for module_id, batch, latent, logits in batches:
            loss = self._classifier_passes(module_id, batch, latent, logits)
            if loss is not None:
                self.metrics.log_value((module_id, "hindsight_loss_extra_passes"), loss, window=1)
        super().after_gradient_based_update(timesteps=timesteps)

    def _classifier_passes(self, module_id, batch: Dict[str, Any], latent, logits) -> Optional[torch.Tensor]:
        """`hindsight_epochs` classifier-only steps on one module's batch, given the
        behaviour policy's detached `latent` and `logits` there, with the same gradient
        clipping as the main step; a pass whose gradient norm is not finite is not
        applied and ends the passes. Returns the last applied pass's loss (None: none)."""
        distributed = is_distributed()
        module = self.module[module_id].unwrapped()
        mask = classifier_rows(batch[Columns.LOSS_MASK].bool(), history_rows(batch))
        logits = classifier_base_logits(batch, logits)
        actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
        optimizer = self.get_optimizer(module_id, HINDSIGHT_OPTIMIZER)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        obs, outcome = batch[Columns.OBS], batch[module.outcome_column]
        rows, _ = module.outcome_pairs(outcome)
        if rows is not None and len(rows) == 0 and not distributed:
            return None  # no reward event: nothing to fit (ranks of DDP step together)
        # One classifier row per (decision, outcome) pair: the decisions' rows.
        pair_actions, pair_mask, pair_logits = ((actions, mask, logits) if rows is None
                                                else (actions[rows], mask[rows], logits[rows]))
        # What every pass would recompute the same (the classifier's input under a shared
        # torso, the loss's real rows): once. Same ops on the same values as
        # `hindsight_logits` and `hindsight_loss`: the same weights, bitwise
        # (tests/test_classifier_passes.py).
        inputs = None
        if module.hindsight_spec.torso != "separate":
            with torch.no_grad():
                inputs = module.hindsight_input(obs, latent, outcome)
        loss_of = pass_loss(pair_actions, pair_mask)
        last = None
        for _ in range(self.config.hindsight_epochs):
            optimizer.zero_grad(set_to_none=True)
            if inputs is None:
                hindsight_logits = module.hindsight_logits(obs, latent, logits, outcome)
            else:
                hindsight_logits = module.hindsight_head(inputs, pair_logits)
            loss = loss_of(hindsight_logits)
            loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
            if distributed:
                # Outside DDP's forward: average the classifier's gradients by hand.
                for grad in grads:
                    torch.distributed.all_reduce(grad)
                    grad /= num_learner_ranks()
            # One norm serves the finite check (the norm of gradients with a NaN or
            # inf is not finite) and the clipping.
            if self.config.grad_clip:
                norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
            else:
                norm = get_total_norm(grads)
            if not torch.isfinite(norm):
                break
            optimizer.step()
            last = loss.detach()
        return last
