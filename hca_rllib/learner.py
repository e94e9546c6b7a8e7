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
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import threading
from typing import Any, Deque, Dict, Optional

import torch
from torch.nn.utils import get_total_norm

from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate
from ray.rllib.core.columns import Columns
from ray.rllib.core import COMPONENT_METRICS_LOGGER, COMPONENT_OPTIMIZER
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES
from ray.rllib.utils.typing import ModuleID, ParamDict, TensorType

from hca_rllib import credit
from hca_rllib.connectors import CreditState, credit_pieces
from hca_rllib.module import CREDIT_WEIGHTS, HINDSIGHT_LOGITS, RETURNS

logger = logging.getLogger(__name__)

HINDSIGHT_OPTIMIZER = "hindsight"
NUM_SKIPPED_UPDATES = "num_skipped_updates"


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


class HCATorchLearner(TorchLearner):
    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        # module id -> the last `hindsight_memory` batches' real steps (`_remember`); not
        # checkpointed: a restored run refills it within `hindsight_memory` updates.
        self._hindsight_memory: Dict[Any, Deque[Dict[str, torch.Tensor]]] = {}
        # The behaviour policy's (latent, logits) per module, taken from the gradient
        # pass of this update (`compute_loss_for_module`), for the extra classifier passes.
        self._behaviour: Dict[Any, Any] = {}
        # `hindsight_overlap` (`_background` and the flags: the class attributes below).
        self._background_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._background_thread_ids: set = set()
        # Learning rates RLlib's schedule set while the passes ran: applied after them.
        self._pending_lrs: list = []
        # The last background passes' losses, for the next update's results.
        self._unlogged_losses: Dict[Any, torch.Tensor] = {}
        # Lean path: the credit pieces run here, on the batch (`learner_path="lean"`).
        self._lean = bool(getattr(self.config, "uses_lean_learner", False))
        self._credit_pieces = credit_pieces(self.config) if self._lean else []
        self._single_pass = True
        if self._learner_connector is not None and self.config.add_default_connectors_to_learner_pipeline \
                and not self._lean:
            self._learner_connector.prepend(AddOneTsToEpisodesAndTruncate())
            for piece in credit_pieces(self.config):
                self._learner_connector.append(piece)

    # Class defaults, as RLlib's `Learner.__init__` reads `module` before `build`:
    # `_background`: the extra classifier passes of the last update, running in one
    # background thread while the next batch is sampled (`_finish_background`);
    # `_in_update`: inside `update()`, after this update's passes were started, RLlib
    # reads only its bookkeeping through `self.module` (module ids, is_stateful), so no
    # wait there; `_reading_policy`: `get_state` of the inference-only weights.
    _background: Optional[concurrent.futures.Future] = None
    _reading_policy = False
    _in_update = False
    _background_thread_ids: set = frozenset()

    def _hindsight_optimizers(self) -> list:
        return [optimizer for name, optimizer in self._named_optimizers.items()
                if name.endswith("_" + HINDSIGHT_OPTIMIZER)]

    @property
    def module(self):
        """RLlib's `Learner.module`, once the background classifier passes (if any) have
        finished: whatever reads or writes the module from outside the update (the
        next update, `get_state` beyond the policy's weights, `set_state`, tests and
        analysis code) sees it settled."""
        if (self._background is not None and not self._in_update
                and not self._reading_policy and threading.get_ident() not in self._background_thread_ids):
            self._finish_background()
        return self._module

    def _finish_background(self) -> None:
        """Wait for the background classifier passes; re-raise their error, if any.
        Their losses are logged by the next `_update` (with its results: RLlib keeps only
        what is logged inside the update loop)."""
        future, self._background = self._background, None
        if future is None:
            return
        try:
            self._unlogged_losses.update(future.result())
        finally:
            pending, self._pending_lrs = self._pending_lrs, []
            for optimizer, lr in pending:
                TorchLearner._set_optimizer_lr(optimizer, lr)

    def _log_extra_pass_losses(self, losses: Dict[Any, torch.Tensor]) -> None:
        for module_id, loss in losses.items():
            self.metrics.log_value((module_id, "hindsight_loss_extra_passes"), loss, window=1)

    def _set_optimizer_lr(self, optimizer, lr: float) -> None:
        """RLlib's, except that the classifier's optimizer gets its scheduled learning
        rate only after the background passes (which step it) are done, as it would
        without `hindsight_overlap`."""
        if self._background is not None and any(optimizer is o for o in self._hindsight_optimizers()):
            self._pending_lrs.append((optimizer, lr))
            return
        TorchLearner._set_optimizer_lr(optimizer, lr)

    def _get_optimizer_lr(self, optimizer) -> float:
        for pending, lr in reversed(self._pending_lrs):
            if pending is optimizer:
                return lr
        return TorchLearner._get_optimizer_lr(optimizer)

    @override(TorchLearner)
    def update(self, *args, **kwargs):
        self._finish_background()
        self._in_update = True
        try:
            return super().update(*args, **kwargs)
        finally:
            self._in_update = False

    @override(TorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        """RLlib's. The weight sync after each update asks for the inference-only
        module state (the policy: the classifier is not in it), which the background
        passes do not write: that read does not wait for them; any other does."""
        policy_only = kwargs.get("inference_only") and not any(
            self._check_component(c, components, not_components)
            for c in (COMPONENT_OPTIMIZER, COMPONENT_METRICS_LOGGER))
        if not policy_only:
            self._finish_background()
        self._reading_policy = bool(policy_only)
        try:
            return super().get_state(components, not_components=not_components, **kwargs)
        finally:
            self._reading_policy = False

    @override(TorchLearner)
    def set_state(self, *args, **kwargs):
        self._finish_background()
        return super().set_state(*args, **kwargs)

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
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if self._lean and training_data.episodes is not None and (distributed or not self._single_pass):
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
            with torch.no_grad():
                state = first.from_outputs(module_batch, latent.detach(), logits.detach(),
                                           fwd_out[Columns.VF_PREDS].detach())
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

    @classmethod
    @override(TorchLearner)
    def rl_module_required_apis(cls) -> list:
        return [ValueFunctionAPI]

    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config=None) -> None:
        """Policy and value in one optimizer, the classifier in its own.

        The classifier gets its own optimizer so that `hindsight_epochs` extra passes
        can step it alone without touching the policy's optimizer state.
        """
        module = self._module[module_id]
        hindsight_names = ("hindsight.", "hindsight_torso.")
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        hindsight_params = [p for n, p in named if n.removeprefix("module.").startswith(hindsight_names)]
        hindsight_ids = {id(p) for p in hindsight_params}
        main_params = [p for _, p in named if id(p) not in hindsight_ids]
        self.register_optimizer(
            module_id=module_id,
            optimizer=self._make_optimizer(main_params, config),
            params=main_params,
            lr_or_lr_schedule=config.lr,
        )
        if hindsight_params:
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=HINDSIGHT_OPTIMIZER,
                optimizer=self._make_optimizer(hindsight_params, config),
                params=hindsight_params,
                lr_or_lr_schedule=config.hindsight_lr or config.lr,
            )

    @staticmethod
    def _make_optimizer(params, config) -> torch.optim.Optimizer:
        if config.optimizer_type == "rmsprop":
            # Stable-Baselines3's A2C: alpha 0.99, eps 1e-5 (torch's default eps 1e-8
            # gives much larger first steps).
            return torch.optim.RMSprop(params, alpha=config.rmsprop_alpha, eps=config.optimizer_eps)
        return torch.optim.Adam(params, eps=config.optimizer_eps)

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

        policy_loss = credit.policy_gradient_loss(batch[CREDIT_WEIGHTS], log_probs, mask)
        values = fwd_out[Columns.VF_PREDS]
        targets = batch[Postprocessing.VALUE_TARGETS]
        vf_loss = _masked_mean((values - targets) ** 2, mask)
        total = policy_loss + config.vf_loss_coeff * vf_loss - config.entropy_coeff * entropy
        # The policy before this update's step: what the extra classifier passes fit.
        self._behaviour[module_id] = (fwd_out[Columns.EMBEDDINGS].detach(),
                                      fwd_out[Columns.ACTION_DIST_INPUTS].detach())

        metrics = {
            POLICY_LOSS_KEY: policy_loss,
            VF_LOSS_KEY: vf_loss,
            ENTROPY_KEY: entropy,
            "vf_explained_var": credit.explained_variance(targets, values, mask),
            "advantage_mean": _masked_mean(batch[Postprocessing.ADVANTAGES], mask),
        }
        if HINDSIGHT_LOGITS in fwd_out:
            hindsight_loss = self._classifier_loss(
                self.module[module_id].unwrapped(), fwd_out[HINDSIGHT_LOGITS],
                fwd_out[Columns.ACTION_DIST_INPUTS], actions, mask)
            total = total + config.hindsight_loss_coeff * hindsight_loss
            metrics["hindsight_loss"] = hindsight_loss
        metrics["total_loss"] = total
        self.metrics.log_dict(
            {k: v.detach() for k, v in metrics.items()}, key=module_id, window=1
        )
        return total

    @staticmethod
    def _hindsight_loss(hindsight_logits, actions, mask) -> torch.Tensor:
        log_q = torch.log_softmax(hindsight_logits, dim=-1).gather(-1, actions).squeeze(-1)
        return -_masked_mean(log_q, mask)

    @classmethod
    def _classifier_loss(cls, module, hindsight_logits, policy_logits, actions, mask) -> torch.Tensor:
        """The classifier's loss: the cross-entropy of q (`_hindsight_loss`) or, under
        `hindsight.balanced`, that of softmax(f) alone, f = logits_q - stopgrad(logits_pi),
        weighted by `credit.balanced_weights` of the behaviour policy `policy_logits`
        (see the derivation above `credit.balanced_weights`)."""
        h = module.hindsight_config
        if not h["balanced"]:
            return cls._hindsight_loss(hindsight_logits, actions, mask)
        policy_logits = policy_logits.detach()
        log_pi = torch.log_softmax(policy_logits, dim=-1).gather(-1, actions).squeeze(-1)
        weights = credit.balanced_weights(log_pi, policy_logits.shape[-1], h["balanced_clip"])
        return credit.weighted_cross_entropy(hindsight_logits - policy_logits, actions, weights, mask)

    @classmethod
    def _pass_loss(cls, module, policy_logits, actions, mask):
        """`_classifier_loss` as a function of the classifier's logits alone, for passes
        over the same rows: the real rows are found once (all of them on the lean path:
        no indexing), and the same ops run on the same values."""
        if module.hindsight_config["balanced"]:
            return lambda logits: cls._classifier_loss(module, logits, policy_logits, actions, mask)
        count = mask.sum().clamp(min=1)
        rows = None if bool(mask.all()) else mask.nonzero().squeeze(-1)

        def loss(logits):
            log_q = torch.log_softmax(logits, dim=-1).gather(-1, actions).squeeze(-1)
            return -(torch.sum(log_q if rows is None else log_q[rows]) / count)

        return loss

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        """Skip the whole update if any gradient is non-finite (a NaN loss gives NaN
        gradients, so this also covers non-finite losses and advantages)."""
        finite = all_finite(list(gradients_dict.values()))
        self._last_update_skipped = not finite
        if not finite:
            logger.warning("Non-finite loss or gradient: skipping this update.")
            self.metrics.log_value((ALL_MODULES, NUM_SKIPPED_UPDATES), 1, reduce="lifetime_sum")
            for optimizer in self._optimizer_parameters:
                optimizer.zero_grad(set_to_none=True)
            return
        self.metrics.log_value((ALL_MODULES, NUM_SKIPPED_UPDATES), 0, reduce="lifetime_sum")
        super().apply_gradients(gradients_dict)

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        self._finish_background()
        extra_passes = self.config.uses_hindsight and self.config.hindsight_epochs > 0
        self._last_update_skipped = False
        self._behaviour = {}
        result = super()._update(batch)
        if extra_passes and not self._last_update_skipped:
            # The classifier must keep fitting the policy that produced the data, so the
            # extra passes use the policy as it was before this update: the detached
            # latent and logits of its gradient pass.
            behaviour = self._behaviour
            if self.config.hindsight_overlap:
                if self._background_pool is None:
                    self._background_pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="hca-classifier",
                        initializer=lambda: self._background_thread_ids.add(threading.get_ident()))
                for optimizer in self._hindsight_optimizers():
                    for group in optimizer.param_groups:
                        if torch.is_tensor(group["lr"]):
                            # RLlib's schedule may update its lr tensor in place while
                            # the passes run: they keep this update's value.
                            group["lr"] = group["lr"].clone()
                self._background = self._background_pool.submit(
                    self._classifier_passes, batch, behaviour)
            else:
                self._log_extra_pass_losses(self._classifier_passes(batch, behaviour))
        self._behaviour = {}
        losses, self._unlogged_losses = self._unlogged_losses, {}
        self._log_extra_pass_losses(losses)
        return result

    def _classifier_passes(self, batch: Dict[str, Any], behaviour: Dict[str, Any]) -> Dict[Any, torch.Tensor]:
        """The extra passes and the memory of one update (in the background thread under
        `hindsight_overlap`): the last pass's loss per module."""
        losses = self._extra_hindsight_passes(batch, behaviour)
        if self.config.hindsight_memory > 0:
            self._remember(batch, behaviour)
        return losses

    @torch.no_grad()
    def _remember(self, batch: Dict[str, Any], behaviour: Dict[str, Any]) -> None:
        """Keep the real steps of this batch (observations, actions, returns and the
        behaviour policy's logits) for the extra passes of the next `hindsight_memory`
        updates. The behaviour logits are what keeps replay consistent: under
        `policy_relative` (and by construction under `balanced`) the loss on a replayed
        batch, with its own behaviour logits, has the same minimiser f = log P(Z|s,a) + c
        as on fresh data."""
        memory = self._hindsight_memory
        for module_id, module_batch in batch.items():
            mask = module_batch[Columns.LOSS_MASK].bool()
            _, logits = behaviour[module_id]
            store = memory.setdefault(
                module_id, collections.deque(maxlen=self.config.hindsight_memory))
            store.append({
                "obs": module_batch[Columns.OBS][mask].detach().clone(),
                "actions": module_batch[Columns.ACTIONS][mask].detach().clone(),
                "returns": module_batch[RETURNS][mask].detach().clone(),
                "logits": logits[mask].detach().clone(),
            })

    def _extra_hindsight_passes(self, batch: Dict[str, Any], behaviour: Dict[str, Any]) -> Dict[Any, torch.Tensor]:
        """`hindsight_epochs` more classifier-only steps on the same batch (plus the real
        steps of the last `hindsight_memory` batches, one step on the union per pass),
        with the same gradient clipping as the main step; a pass whose gradient norm is
        not finite is not applied and ends the passes. Returns the last pass's loss per
        module. Touches only the classifier's parameters and optimizer (`self._module`:
        it may run in the background thread)."""
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        losses = {}
        for module_id, module_batch in batch.items():
            module = self._module[module_id].unwrapped()
            mask = module_batch[Columns.LOSS_MASK].bool()
            actions = module_batch[Columns.ACTIONS].long().unsqueeze(-1)
            optimizer = self.get_optimizer(module_id, HINDSIGHT_OPTIMIZER)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            obs = module_batch[Columns.OBS]
            latent, logits = behaviour[module_id]
            returns = module_batch[RETURNS]
            remembered = list(self._hindsight_memory.get(module_id, ()))
            if remembered:
                # Remembered steps: the current torso's latent (as the held-out check
                # sees them), their own behaviour logits.
                old_obs = torch.cat([m["obs"] for m in remembered])
                with torch.no_grad():
                    old_latent = module.pi_torso(old_obs)
                obs = torch.cat([obs, old_obs])
                latent = torch.cat([latent, old_latent])
                logits = torch.cat([logits] + [m["logits"] for m in remembered])
                returns = torch.cat([returns] + [m["returns"] for m in remembered])
                actions = torch.cat([actions] + [m["actions"].long().unsqueeze(-1) for m in remembered])
                mask = torch.cat([mask, torch.ones(len(old_obs), dtype=torch.bool, device=mask.device)])
            # What every pass recomputed the same (the classifier's input under a shared
            # torso, the loss's real rows): once. Same ops on the same values as
            # `hindsight_logits` and `_classifier_loss`: the same weights, bitwise
            # (tests/test_learner_path.py).
            inputs = None
            if module.hindsight_config["torso"] != "separate":
                with torch.no_grad():
                    inputs = module.hindsight_input(obs, latent, returns)
            pass_loss = self._pass_loss(module, logits, actions, mask)
            need_grads = distributed or not self.config.grad_clip
            for _ in range(self.config.hindsight_epochs):
                optimizer.zero_grad(set_to_none=True)
                if inputs is None:
                    hindsight_logits = module.hindsight_logits(obs, latent, logits, returns)
                else:
                    hindsight_logits = module.hindsight_head(inputs, logits)
                loss = pass_loss(hindsight_logits)
                loss.backward()
                if need_grads:
                    grads = [p.grad for p in params if p.grad is not None]
                if distributed:
                    # Outside DDP's forward: average the classifier's gradients by hand.
                    for grad in grads:
                        torch.distributed.all_reduce(grad)
                        grad /= torch.distributed.get_world_size()
                # One norm serves the finite check (the norm of gradients with a NaN or
                # inf is not finite) and the clipping.
                if self.config.grad_clip:
                    norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
                else:
                    norm = torch.nn.utils.get_total_norm(grads)
                if not torch.isfinite(norm):
                    break
                optimizer.step()
                losses[module_id] = loss.detach()
        return losses
