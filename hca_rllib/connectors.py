"""The credit path as learner-connector pieces, after RLlib's `AddOneTsToEpisodesAndTruncate`
(one artificial step per episode chunk, carrying the bootstrap observation, masked out by
`LOSS_MASK`), like RLlib's `GeneralAdvantageEstimation`:

1. `ComputeReturnsAndAdvantages`: the policy and value forward pass (no gradient), the
   returns `Z`, GAE and the value targets.
2. `ComputeHindsightLogProbs`: the classifier `q(a|s,Z)` and its held-out diagnostics.
3. `ComputeCreditWeights`: the trust in the classifier and the per-action policy-gradient
   weights `W[t, a]` of the credit mode (`credit.credit_weights`).

On the lean learner path (`learner_path="lean"`, the default) one piece,
`LeanEpisodesToBatch`, replaces RLlib's episode-to-batch pieces: it concatenates the
episodes' real steps into tensors (no artificial rows) and gets the bootstrap values
from one small no-grad pass on the observations after each cut (`BOOTSTRAP_VALUES`).
The same pieces 1-3 then run in the Learner (`HCATorchLearner`), on the outputs of its
gradient pass, detached, when the batch gets one gradient step (A2C's update), or on a
no-grad pass before the update otherwise (several epochs or minibatches, or several
learners), as here.

`credit` takes one layout, real steps only; `credit_steps` reads a batch in either
layout into it (RLlib's artificial rows get returns and GAE of 0, masked out).

The pieces of one pipeline call share one `CreditState` per module, under
`shared_data[CREDIT_STATE]`. The classifier is evaluated, without gradient, on a batch it
has never trained on: its diagnostics and the trust built on them are held-out by
construction (the Learner trains the classifier on this batch only after these pieces).
The maths is in `hca_rllib.credit`; the pieces only route tensors and reduce over learners.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np
import torch
import tree

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.spaces import space_utils
from ray.rllib.utils.torch_utils import convert_to_torch_tensor
from ray.rllib.utils.typing import EpisodeType

from hca_rllib import compat, credit
from hca_rllib.module import (BEHAVIOUR_LOGITS, CREDIT_WEIGHTS, HISTORY_OFFSETS, REMAINDER_TARGETS, REMAINDER_VALUES,
                              RETURNS, WINDOW_REWARDS, classifier_base_logits, hindsight_spec, history_rows)

# Key of the per-module `CreditState`s in the pipeline's `shared_data`.
CREDIT_STATE = "hca_credit_state"
# The learner paths (`HCAConfig.learners(learner_path=...)`): "lean" (`LeanEpisodesToBatch`,
# credit from the gradient pass where the maths allows) or "rllib" (RLlib's pieces after
# `AddOneTsToEpisodesAndTruncate`, credit in the connector); docs/method.md, section 3.4.
LEARNER_PATHS = ("lean", "rllib")
# "auto": the lean path unless the config uses what only RLlib's pieces run
# (`lean_learner_blocker`, `HCAConfig.resolved_learner_path`).
DEFAULT_LEARNER_PATH = "auto"
# Lean layout: V(s_{t+1}) on the last step of a chunk that was cut (not terminated), 0
# elsewhere; its presence marks a batch in the lean layout.
BOOTSTRAP_VALUES = "hca_bootstrap_values"


def lean_learner_blocker(config) -> Optional[str]:
    """The first feature `config` uses that the lean learner path does not support, as
    one phrase naming it and why, or None. Several epochs, minibatches and learners are
    supported (the credit is then fixed before the first step)."""
    if config.is_multi_agent:
        return "the config is multi-agent (the lean learner path is single-agent)"
    if not config.add_default_connectors_to_learner_pipeline:
        return ("add_default_connectors_to_learner_pipeline is False (the lean learner path "
                "replaces RLlib's default pieces)")
    return None


def user_learner_pieces(config, input_observation_space, input_action_space) -> List[ConnectorV2]:
    """The pieces of the user's `learners(learner_connector=...)` builder (a piece, a
    pipeline or a list of them, as RLlib's `build_learner_connector` takes), or []."""
    builder = compat.user_connector(config, "learner")
    if builder is None:
        return []
    pieces = builder(input_observation_space, input_action_space)
    if isinstance(pieces, ConnectorV2):
        return [pieces]
    if isinstance(pieces, (list, tuple)) and all(isinstance(p, ConnectorV2) for p in pieces):
        return list(pieces)
    raise ValueError(f"learner_connector must return a ConnectorV2 or a list of them, got {pieces!r}")


def flatten_observations_if_needed(pipeline, multi_agent: bool = False) -> None:
    """Prepend RLlib's `FlattenObservations` to an env-to-module `pipeline` whose
    observation space is not a Box (Discrete and MultiDiscrete parts one-hot, Dict and
    Tuple concatenated: what the module's MLP takes), unless a piece of the pipeline
    already flattens. The flattened observations are written into the episodes, so
    both learner paths train on them as they are. (Single-agent only: a multi-agent
    pipeline's space holds one space per agent.)"""
    import gymnasium as gym
    from ray.rllib.connectors.common.flatten_observations import FlattenObservations

    space = pipeline.input_observation_space
    if multi_agent or space is None or isinstance(space, gym.spaces.Box):
        return
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary,
                              gym.spaces.Dict, gym.spaces.Tuple)):
        return
    if any(isinstance(piece, FlattenObservations) for piece in pipeline.connectors):
        return
    pipeline.prepend(FlattenObservations(as_learner_connector=False))


def is_distributed() -> bool:
    """Whether this learner is one rank of a torch.distributed process group (RLlib starts
    one, DDP's, for every `num_learners >= 1`, a group of one rank included)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def num_learner_ranks() -> int:
    """The learner ranks this learner reduces over: the process group's size, 1 without one."""
    return torch.distributed.get_world_size() if is_distributed() else 1


def _sum_over_learners(values: torch.Tensor) -> torch.Tensor:
    """Sum over the learner ranks (DDP's process group)."""
    values = values.clone()
    torch.distributed.all_reduce(values)
    return values


@dataclasses.dataclass
class CreditState:
    """What the credit pieces compute for one module's batch, passed from piece to piece."""

    mask: torch.Tensor
    actions: torch.Tensor
    policy_logits: torch.Tensor
    log_pi_all: torch.Tensor
    values: torch.Tensor
    returns: torch.Tensor
    gae: torch.Tensor
    policy_latent: Optional[torch.Tensor] = None
    log_q_all: Optional[torch.Tensor] = None
    # log pi(a_t|s_t) and log q(a_t|s_t,Z_t) of the taken actions (set with log_q_all).
    log_pi_taken: Optional[torch.Tensor] = None
    log_q_taken: Optional[torch.Tensor] = None
    hindsight_logits: Optional[torch.Tensor] = None
    # The episode chunk of every real row (`credit.chunk_ids`), for the evidence trust.
    chunks: Optional[torch.Tensor] = None
    # The reward outcome (else None): the remainder head's values and the window rewards
    # (batch rows), the chunk of every batch row, and the (decision row, lag index) of
    # each (decision, reward event) pair the classifier's rows stand for.
    remainder_values: Optional[torch.Tensor] = None
    window_rewards: Optional[torch.Tensor] = None
    row_chunks: Optional[torch.Tensor] = None
    pair_rows: Optional[torch.Tensor] = None
    pair_lags: Optional[torch.Tensor] = None
    # Across fragments (else None): the rows carried from earlier fragments (batch rows),
    # each one's steps to its chunk's first new row, `V(s_{t+1})` of every batch row, and
    # which pairs are the new rows' (the diagnostics' and the evidence's).
    history: Optional[torch.Tensor] = None
    history_offsets: Optional[torch.Tensor] = None
    behaviour_logits: Optional[torch.Tensor] = None
    next_values: Optional[torch.Tensor] = None
    pair_real: Optional[torch.Tensor] = None
    # Credit from the Learner's gradient pass: its latent and logits (with gradient), for
    # the classifier's forward with gradient, kept in `hindsight_logits_grad`.
    grad_latent: Optional[torch.Tensor] = None
    grad_logits: Optional[torch.Tensor] = None
    hindsight_logits_grad: Optional[torch.Tensor] = None
    # False when the batch's returns, values or classifier outputs are not finite: the
    # running statistics and the trust are then left as they were.
    finite: bool = True
    # Every row real (`mask` all True: always on the lean layout): `real` then returns
    # the tensor itself instead of a masked copy of all of it (the same values).
    all_real: bool = False
    # exp(log_pi_all), exp(log_q_all), once for the trust and the weights (`probs`).
    pi_probs: Optional[torch.Tensor] = None
    q_probs: Optional[torch.Tensor] = None
    parts: Dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    diagnostics: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def real(self, x: torch.Tensor) -> torch.Tensor:
        """`x[mask]`: the real rows of `x`."""
        return x if self.all_real else x[self.mask]

    @property
    def diagnostic_mask(self) -> Optional[torch.Tensor]:
        """The `mask` argument for `credit`'s diagnostics: None (all rows) when every row is real."""
        return None if self.all_real else self.mask

    def probs(self):
        """`(pi_probs, q_probs)`: the policy's and the classifier's probabilities (the
        classifier's per pair under the reward outcome)."""
        if self.pi_probs is None:
            self.pi_probs, self.q_probs = self.log_pi_all.exp(), self.log_q_all.exp()
        return self.pi_probs, self.q_probs


class _CreditPiece(ConnectorV2):
    """A learner-connector piece of the credit path: `_process` per module batch."""

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
        shared_data: Optional[dict] = None,
        metrics=None,
        **kwargs,
    ):
        states = (shared_data if shared_data is not None else {}).setdefault(CREDIT_STATE, {})
        for module_id, module_batch in batch.items():
            self.run(rl_module[module_id].unwrapped(), module_batch, states, module_id, metrics)
        return batch

    def run(self, module, module_batch, states, module_id, metrics=None) -> None:
        """This piece on one module's batch, without gradient; diagnostics to `metrics`."""
        with torch.no_grad():
            diagnostics = self._process(module, module_batch, states, module_id)
        if metrics is not None:
            for key, value in (diagnostics or {}).items():
                metrics.log_value((module_id, key), float(value), window=1)

    def _process(self, module, b, states, module_id) -> Optional[Dict[str, Any]]:
        raise NotImplementedError

    @staticmethod
    def _state(states, module_id) -> CreditState:
        if module_id not in states:
            raise RuntimeError(
                f"{module_id}: no credit state; ComputeReturnsAndAdvantages must run first "
                f"in the learner connector pipeline")
        return states[module_id]


class ComputeReturnsAndAdvantages(_CreditPiece):
    """Returns `Z` (n-step, bootstrapped with `V` where a chunk was cut), GAE advantages
    and value targets, from one no-grad forward pass of the policy and value heads."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, config):
        super().__init__(input_observation_space, input_action_space, config=config)
        spec = hindsight_spec(config.hindsight)
        self.window = spec.window if config.uses_hindsight and spec.outcome == "reward" else None

    def _process(self, module, b, states, module_id):
        obs = b[Columns.OBS]
        latent, logits = module.policy_outputs(obs)
        if self.window is None:
            values, remainder = module.compute_values({Columns.OBS: obs}, latent), None
        else:
            values, remainder = module.values_and_remainder(obs, latent)
        states[module_id] = self.from_outputs(b, latent, logits, values, remainder)
        return None

    def from_outputs(self, b, latent, logits, values, remainder_values=None) -> CreditState:
        """The returns, GAE and value targets (into `b`) from the policy's latent and
        logits and the values of `b`'s rows, in either layout (`credit_steps`); with the
        reward outcome also the window rewards and the remainder head's targets (into
        `b`), from its values `remainder_values`."""
        config = self.config
        mask = b[Columns.LOSS_MASK].bool()
        steps = credit_steps(b, values)
        chunks = credit.chunk_ids(steps.terminateds, steps.truncateds)
        returns, gae = credit.returns_and_gae(steps.rewards, steps.values, steps.next_values, steps.terminateds,
                                              steps.truncateds, config.gamma, config.lambda_, chunks=chunks)
        if steps.rows is not None:  # back onto RLlib's rows, 0 on the artificial ones
            returns, gae = (values.new_zeros(len(mask)).index_copy_(0, steps.rows, x) for x in (returns, gae))
        b[Postprocessing.VALUE_TARGETS] = gae + values
        b[Postprocessing.ADVANTAGES] = gae
        all_real = bool(mask.all())
        state = CreditState(
            mask=mask, actions=b[Columns.ACTIONS].long(), policy_logits=logits,
            log_pi_all=torch.log_softmax(logits, dim=-1), values=values, returns=returns, gae=gae,
            policy_latent=latent,
            # One chunk id per real step (the lean layout's carried rows are not real).
            chunks=chunks if steps.rows is not None or all_real else chunks[mask],
            all_real=all_real,
        )
        if HISTORY_OFFSETS in b:
            state.history, state.history_offsets = history_rows(b), b[HISTORY_OFFSETS]
            state.behaviour_logits, state.next_values = b[BEHAVIOUR_LOGITS], steps.next_values
        if self.window is not None:
            self._reward_outcome(b, state, steps, chunks, remainder_values)
        return state

    def _reward_outcome(self, b, state: CreditState, steps: "CreditSteps", chunks, remainder_values) -> None:
        """The reward outcome's window rewards and remainder targets `Z_t - S_t` (into
        `b`, on its rows), and the chunk of every row, onto `state`."""
        window = credit.window_rewards(steps.rewards, chunks, self.window)
        if state.history is not None:
            # A carried row's pairs with the rewards of its earlier fragments were credited
            # there: only this fragment's (lags k >= d_t) remain.
            lags = torch.arange(1, self.window + 1, device=window.device)
            window = torch.where(lags.unsqueeze(0) >= state.history_offsets.unsqueeze(-1), window,
                                 torch.zeros_like(window))
        row_chunks = chunks
        if steps.rows is not None:  # onto RLlib's rows: zeros (no reward events) on the artificial ones
            window = window.new_zeros(len(state.mask), self.window).index_copy_(0, steps.rows, window)
            row_chunks = chunks.new_zeros(len(state.mask)).index_copy_(0, steps.rows, chunks)
        window = window.to(state.returns.dtype)
        b[WINDOW_REWARDS] = window
        if remainder_values is not None:  # the credit modes that use the remainder head
            b[REMAINDER_TARGETS] = state.returns - credit.in_window_returns(window, self.config.gamma)
        state.window_rewards, state.row_chunks, state.remainder_values = window, row_chunks, remainder_values


class CreditSteps(NamedTuple):
    """A batch's steps in `credit`'s layout: real steps only, `terminateds`/`truncateds`
    on each chunk's last step, `next_values[t] = V(s_{t+1})`; `rows`: the batch rows they
    come from (None: all of them, in order)."""

    rewards: torch.Tensor
    values: torch.Tensor
    next_values: torch.Tensor
    terminateds: torch.Tensor
    truncateds: torch.Tensor
    rows: Optional[torch.Tensor]


def credit_steps(b, values: torch.Tensor) -> CreditSteps:
    """`b`'s steps, with `values` of its rows, in `credit`'s layout.

    The lean layout (`BOOTSTRAP_VALUES` present) is that layout already: `V(s_{t+1})` is
    the next row's value, or the bootstrap value on a chunk's last step. RLlib's layout
    (after `AddOneTsToEpisodesAndTruncate`) follows each chunk with one artificial row,
    `LOSS_MASK` False, whose observation is the one after the chunk's last step: its real
    rows are the steps, and `V(s_{t+1})` is always the next row's value (the artificial
    row's on a chunk's last step; not read after a terminal one)."""
    rewards, terminateds, truncateds = b[Columns.REWARDS], b[Columns.TERMINATEDS], b[Columns.TRUNCATEDS]
    if BOOTSTRAP_VALUES in b:
        next_values = credit.next_values(values, b[BOOTSTRAP_VALUES], terminateds, truncateds)
        return CreditSteps(rewards, values, next_values, terminateds, truncateds, None)
    rows = b[Columns.LOSS_MASK].bool().nonzero().squeeze(-1)
    next_values = torch.cat([values[1:], values.new_zeros(1)])
    return CreditSteps(rewards[rows], values[rows], next_values[rows], terminateds[rows], truncateds[rows], rows)


class ComputeHindsightLogProbs(_CreditPiece):
    """`log q(a|s,Z)` for every action on this (held-out) batch, the running return
    statistics the classifier's input uses, and the held-out diagnostics."""

    def _process(self, module, b, states, module_id):
        if not self.config.uses_hindsight:
            return None
        s = self._state(states, module_id)
        obs = b[Columns.OBS]
        reward_outcome = s.window_rewards is not None
        outcome = s.window_rewards if reward_outcome else s.returns
        if reward_outcome:
            s.pair_rows, s.pair_lags = module.outcome_pairs(outcome)
            encoded = outcome[s.pair_rows, s.pair_lags]
            if s.history is not None:
                s.pair_real = s.mask[s.pair_rows]
        else:
            encoded = s.real(s.returns)
        s.finite = self._update_return_statistics(module, encoded, s.real(s.values))
        if s.grad_latent is not None:
            # Credit from the Learner's gradient pass: the classifier's forward with
            # gradient, after the statistics update (as in the module's forward_train),
            # before any training on this batch: held-out all the same.
            with torch.enable_grad():
                s.hindsight_logits_grad = module.hindsight_logits(
                    obs, s.grad_latent, classifier_base_logits(b, s.grad_logits), outcome)
            s.hindsight_logits = s.hindsight_logits_grad.detach()
        else:
            s.hindsight_logits = module.hindsight_logits(obs, s.policy_latent,
                                                         classifier_base_logits(b, s.policy_logits), outcome)
        s.log_q_all = torch.log_softmax(s.hindsight_logits, dim=-1)
        if reward_outcome:
            return self._pair_diagnostics(s)
        s.log_pi_taken = log_pi = s.log_pi_all.gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
        s.log_q_taken = log_q = s.log_q_all.gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
        s.finite = s.finite and bool(torch.isfinite(s.real(s.log_q_all)).all())
        b[RETURNS] = s.returns
        mask = s.diagnostic_mask
        return {
            "info/mutual_information": credit.mutual_information(log_q, log_pi, mask),
            "hindsight/accuracy": credit.argmax_accuracy(s.hindsight_logits, s.actions, mask),
            "policy/accuracy": credit.argmax_accuracy(s.policy_logits, s.actions, mask),
        }

    @staticmethod
    def _pair_diagnostics(s: CreditState) -> Dict[str, Any]:
        """The reward outcome's held-out diagnostics, over the (decision, reward event)
        pairs of the new rows (the carried rows' pairs are counted apart)."""
        actions = s.actions[s.pair_rows].unsqueeze(-1)
        s.log_q_taken = s.log_q_all.gather(-1, actions).squeeze(-1)
        s.log_pi_taken = s.log_pi_all[s.pair_rows].gather(-1, actions).squeeze(-1)
        s.finite = s.finite and bool(torch.isfinite(s.log_q_all).all())
        real = s.pair_real
        n_real = len(s.pair_rows) if real is None else int(real.sum())
        out = {"info/reward_pairs": float(n_real),
               "policy/accuracy": credit.argmax_accuracy(s.policy_logits, s.actions, s.diagnostic_mask)}
        if real is not None:
            out["info/history_reward_pairs"] = float(len(s.pair_rows) - n_real)
        if n_real:
            out["info/mutual_information"] = credit.mutual_information(s.log_q_taken, s.log_pi_taken, real)
            out["hindsight/accuracy"] = credit.argmax_accuracy(s.hindsight_logits, actions.squeeze(-1), real)
        return out

    @staticmethod
    def _update_return_statistics(module, real_returns, real_values) -> bool:
        """Merge this batch's returns into the running statistics; False (and no update)
        if anything is non-finite. A non-finite batch must not poison the statistics;
        the Learner skips the update it would make. With several learners each sees a
        shard: the moments are summed over ranks, and a non-finite shard anywhere stops
        the update everywhere."""
        real = real_returns.double()
        finite = bool(torch.isfinite(real).all() and torch.isfinite(real_values).all())
        if num_learner_ranks() == 1:
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


class ComputeCreditWeights(_CreditPiece):
    """The trust in the classifier (`trust`: evidence or None) and the per-action
    weights `W[t, a]` of the credit mode, into `CREDIT_WEIGHTS` (and the taken action's
    weight into `ADVANTAGES`)."""

    def _process(self, module, b, states, module_id):
        config = self.config
        s = self._state(states, module_id)
        num_actions = s.log_pi_all.shape[-1]
        if s.log_q_all is None:  # A2C without a classifier
            s.parts = {"advantages": s.gae, "weights": credit.one_hot_weights(s.gae, s.actions, num_actions)}
            self._write(b, s)
            return None
        diagnostics: Dict[str, Any] = {}
        trust, scale = self._trust(module, s, diagnostics)
        if s.window_rewards is not None:
            s.parts = self._reward_outcome_weights(s, trust, scale)
        else:
            pi_probs, q_probs = s.probs() if config.credit == "expected_hca" else (None, None)
            s.parts = credit.credit_weights(
                config.credit,
                actions=s.actions, gae=s.gae, log_pi_all=s.log_pi_all, log_q_all=s.log_q_all,
                returns=s.returns, values=s.values, trust=trust, scale=scale, gate_delta=config.c2a2c_delta,
                pi_probs=pi_probs, q_probs=q_probs,
            )
        self._write(b, s)
        if config.trust is not None:  # this batch's evidence serves the next (`_trust`)
            self._update_evidence(module, s)
        if s.window_rewards is None:
            diagnostics.update(self._diagnostics(s))
        if s.history is not None:
            diagnostics.update(self._history_diagnostics(b, s))
        return diagnostics

    @staticmethod
    def _history_diagnostics(b, s: CreditState) -> Dict[str, Any]:
        """The carried rows: how many, and `KL(pi_b || pi)` by their lag in updates (the
        weights that sampled them against the newest in the batch): 1, and 2 or more."""
        history = s.history
        out: Dict[str, Any] = {"credit/history_rows": float(history.sum())}
        if not bool(history.any()):
            return out
        kl = credit.behaviour_kl(s.behaviour_logits[history], s.log_pi_all[history])
        out["credit/history_kl"] = kl.mean()
        if WEIGHTS_SEQ_NO in b:  # every chunk has a new row: the newest weights are a new row's
            seq = b[WEIGHTS_SEQ_NO]
            lag = seq[s.mask].max() - seq[history]
            for name, rows in (("lag1", lag <= 1), ("lag2plus", lag >= 2)):
                if bool(rows.any()):
                    out[f"credit/history_kl_{name}"] = kl[rows].mean()
        return out

    def _reward_outcome_weights(self, s: CreditState, trust, scale) -> Dict[str, torch.Tensor]:
        """The reward outcome's weights (`credit.reward_outcome_weights`; `a2c`: A2C's,
        the classifier trained beside it for its diagnostics)."""
        num_actions = s.log_pi_all.shape[-1]
        if self.config.credit == "a2c":  # the carried rows (not real) add nothing
            gae = s.gae if s.history is None else torch.where(s.history, 0.0, s.gae)
            return {"advantages": gae, "weights": credit.one_hot_weights(gae, s.actions, num_actions)}
        pi_probs, h_pairs = s.probs()
        parts = credit.reward_outcome_weights(
            actions=s.actions, gae=s.gae, returns=s.returns, remainder_values=s.remainder_values,
            window_rewards=s.window_rewards, pi_probs=pi_probs, pairs=(s.pair_rows, s.pair_lags, h_pairs),
            gamma=self.config.gamma, trust=trust, scale=scale)
        if s.history is not None:  # the carried rows: this fragment's credit, importance-weighted
            shift = credit.history_shift(s.values, s.next_values, s.row_chunks, s.history_offsets,
                                         s.window_rewards.shape[-1], self.config.gamma)
            carried = credit.history_weights(
                actions=s.actions, history=s.history, shift=shift, pi_probs=pi_probs,
                behaviour_probs=torch.softmax(s.behaviour_logits, dim=-1), window_rewards=s.window_rewards,
                pairs=(s.pair_rows, s.pair_lags, h_pairs), gamma=self.config.gamma, trust=trust, scale=scale)
            weights = torch.where(s.history.unsqueeze(-1), carried["weights"].to(parts["weights"].dtype),
                                  parts["weights"])
            parts = {**parts, "weights": weights,
                     "advantages": weights.gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)}
        return parts

    @staticmethod
    def _write(b, s: CreditState) -> None:
        b[CREDIT_WEIGHTS] = s.parts["weights"]
        b[Postprocessing.ADVANTAGES] = s.parts["advantages"]

    def _trust(self, module, s: CreditState, diagnostics):
        """`(trust, scale)`: trust None (the pure estimator) or a scalar tensor."""
        if self.config.trust is None:
            return None, 1.0
        # The trust applied to this batch comes from the batches before it: evidence that
        # includes this batch would favour a noise classifier exactly where its deviations
        # happen to point at this batch's actions. This batch's evidence serves the next.
        accumulated = module.trust_evidence[0].to(torch.float64, copy=True)
        if self.config.trust == "bias":
            trust = credit.bias_trust(accumulated)
            module.trust.fill_(float(trust["trust"]))
            diagnostics.update({"credit/trust": trust["trust"], "credit/trust_z": trust["z"],
                                "credit/trust_signal_z": trust["signal_z"], "credit/decision_trust": trust["trust"]})
            return trust["trust"], 1.0
        trust = credit.evidence_trust(accumulated)
        module.trust.fill_(float(trust["trust"]))
        diagnostics.update({
            "credit/trust": trust["trust"],
            "credit/trust_z": trust["z"],
            "credit/trust_scale": trust["scale"],
            # The mean trust over the batch's decisions (one trust for all of them).
            "credit/decision_trust": trust["trust"],
        })
        return trust["trust"], (trust["scale"] if self.config.credit == "expected_hca" else 1.0)

    @staticmethod
    def _evidence(s: CreditState) -> torch.Tensor:
        """This batch's `credit.calibration_evidence`: per decision under the return
        outcome; per (decision, reward event) pair under the reward outcome, the chunks
        holding a reward event its units."""
        pi_probs, q_probs = s.probs()
        if s.pair_rows is None:
            return credit.calibration_evidence(s.real(s.actions), s.real(pi_probs), s.real(q_probs), s.chunks)
        rows = s.pair_rows
        if s.pair_real is not None:  # the new rows' pairs
            rows, q_probs = rows[s.pair_real], q_probs[s.pair_real]
        units = torch.unique(s.row_chunks[rows], return_inverse=True)[1]
        return credit.calibration_evidence(s.actions[rows], pi_probs[rows], q_probs, units)

    def _bias_evidence(self, s: CreditState) -> torch.Tensor:
        """This batch's `credit.bias_evidence` of two gradients in the policy's last
        layer, the episode chunks its units: `[T_D, V_D, T_H, V_H]`.

        `D`: of `W_sampled - W`, the pure estimator's weights `W` against A2C's form of
        the same credit (`A^GAE onehot(a_t)`; under the reward outcome the replaced
        in-window terms alone, `S_t onehot(a_t)` against the `k` terms, the baselines'
        zero-mean noise left out). `H`: of the estimator's hindsight
        credit (the reward outcome's `k` terms; the whole of the other modes' `W`)."""
        parts, num_actions = s.parts, s.log_pi_all.shape[-1]
        if "hindsight_weights" in parts:
            hindsight = parts["hindsight_weights"]
            difference = credit.one_hot_weights(parts["in_window"], s.actions, num_actions) - hindsight
        else:
            if "expected_weights" in parts:
                pure = parts["expected_weights"]
            else:  # one-hot modes: the advantage at trust 1
                pure = credit.one_hot_weights(parts["hca_advantages"] if "hca_advantages" in parts
                                              else parts["raw_gate"] * s.gae, s.actions, num_actions)
            difference = credit.one_hot_weights(s.gae.to(pure.dtype), s.actions, num_actions) - pure
            hindsight = pure
        latent = s.real(s.policy_latent if s.policy_latent is not None else s.grad_latent)
        pi_probs = s.real(s.probs()[0])
        return torch.cat([credit.bias_evidence(credit.head_gradients(s.real(w), pi_probs, latent, s.chunks))
                          for w in (difference, hindsight)])

    def _update_evidence(self, module, s: CreditState) -> None:
        """Fold this batch's evidence (`_evidence` or, under `trust="bias"`,
        `_bias_evidence`; summed over learner ranks) into the accumulated evidence; a
        non-finite batch on any rank leaves it unchanged."""
        if self.config.trust == "bias":
            if self.config.credit == "a2c":  # A2C's weights: no estimator to test
                return
            evidence, accumulate = self._bias_evidence(s), credit.accumulate_bias_evidence
        else:
            evidence, accumulate = self._evidence(s), credit.accumulate_evidence
        finite = s.finite
        if num_learner_ranks() > 1:
            flags = evidence.new_tensor([float(finite), 1.0])
            flat = evidence if finite else torch.zeros_like(evidence)
            shared = _sum_over_learners(torch.cat([flat, flags]))
            evidence, finite = shared[:-2], bool(shared[-2] == shared[-1])
        if finite and bool(torch.isfinite(evidence).all()):
            module.update_trust_evidence(evidence, accumulate)

    def _diagnostics(self, s: CreditState) -> Dict[str, Any]:
        """Method note, section 4, measured on this (held-out) batch."""
        mask, parts = s.diagnostic_mask, s.parts
        log_pi, log_q = s.log_pi_taken, s.log_q_taken
        # The credit estimator itself (before any blending toward A2C) against GAE.
        if "expected_weights" in parts:
            estimator = parts["expected_weights"].gather(-1, s.actions.unsqueeze(-1)).squeeze(-1)
        else:
            estimator = parts.get("hca_advantages", parts.get("raw_gate", 1.0) * s.gae)
        out = {"hca/advantage_correlation": credit.correlation(estimator, s.gae, mask)}
        ratio = credit.hindsight_ratio(log_pi, log_q)
        for key, value in credit.ratio_statistics(ratio, credit.HCA_RATIO_CLIP, mask).items():
            out[f"hca/{key}"] = value
        if "raw_gate" in parts:
            # Share of the policy update the gate of the note removes (hard gate: the
            # share of steps skipped).
            out["c2a2c/mask_fraction"] = 1.0 - s.real(parts["raw_gate"]).mean()
        return out


def credit_pieces(config) -> List[ConnectorV2]:
    """The credit path's pieces for `config`, in pipeline order."""
    return [ComputeReturnsAndAdvantages(config=config), ComputeHindsightLogProbs(config=config),
            ComputeCreditWeights(config=config)]


class LeanEpisodesToBatch(ConnectorV2):
    """`learner_path="lean"`: the whole learner connector before the credit pieces.

    Concatenates the episode chunks' real steps into tensors in one pass: observations
    (with `num_frames` frames stacked as RLlib's `FrameStackingLearner` stacks them,
    zeros before an episode's first frame), actions, rewards, `terminateds`/`truncateds`
    on each chunk's last step as RLlib's `AddOneTsToEpisodesAndTruncate` sets them, an
    all-True `LOSS_MASK` and the sampler's `weights_seq_no`. No artificial rows: the
    values of the observations after the cut chunks come from one no-grad value pass on
    those observations only, into `BOOTSTRAP_VALUES` on each cut chunk's last step. The
    episodes are read, not changed. Single-agent (validated).

    `history` > 0 (the reward outcome across fragments): in front of each chunk, up to
    `history` steps of its lookback buffer (its episode's earlier fragments) as rows of
    the same chunk, `LOSS_MASK` False, with their steps to the chunk's first new row in
    `HISTORY_OFFSETS` (0 on new rows), and every row's sampling logits in
    `BEHAVIOUR_LOGITS`.

    The user's learner connector pieces (`learners(learner_connector=...)`) run before
    this one, on the episodes as sampled (RLlib's path runs them on episodes already
    extended by its artificial step). What they change in the episodes (rewards,
    observations) is what this piece reads; a column they add per step
    (`ConnectorV2.add_n_batch_items` with the episode, one item per step) comes into the
    batch in its rows (zeros on carried rows) and replaces a column of the same name.
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, num_frames: int = 1,
                 history: int = 0, device=None):
        super().__init__(input_observation_space, input_action_space)
        self.num_frames = int(num_frames)
        self.history = int(history)
        self.device = device

    def _carried(self, episode) -> int:
        """How many lookback steps of `episode` come in front of its rows."""
        if not self.history:
            return 0
        return min(self.history, episode.actions.lookback, episode.rewards.lookback)

    def _observations(self, episode, carried: int = 0) -> np.ndarray:
        """The `carried + len(episode) + 1` (stacked) observations of a chunk: `carried`
        lookback steps', its own, and the observation after its last step."""
        length, k = len(episode), self.num_frames
        if k == 1:
            if not carried:
                return np.asarray(episode.get_observations(slice(0, length + 1)))
            return np.asarray(episode.get_observations(slice(-carried, length + 1), neg_index_as_lookback=True))
        rows = carried + length + 1
        frames = np.asarray(episode.get_observations(
            indices=slice(-carried - k + 1, length + 1), neg_index_as_lookback=True, fill=0.0))
        frames = np.squeeze(frames, axis=-1)
        view = np.lib.stride_tricks.as_strided(
            frames, shape=(rows, k) + frames.shape[1:], strides=(frames.strides[0],) + frames.strides)
        return np.transpose(view, axes=[0, 2, 3, 1])

    @staticmethod
    def _steps(episode, carried: int, get, *args) -> np.ndarray:
        """An episode's per-step column (`get`: its getter) with `carried` lookback steps first."""
        if not carried:
            return np.asarray(get(*args))
        return np.asarray(get(*args, slice(-carried, len(episode)), neg_index_as_lookback=True))

    @override(ConnectorV2)
    def __call__(self, *, rl_module, batch, episodes, shared_data=None, metrics=None, **kwargs):
        episodes = [e for e in episodes if len(e) > 0]
        if not episodes:
            return batch
        carried = [self._carried(e) for e in episodes]
        observations = [self._observations(e, c) for e, c in zip(episodes, carried)]
        lengths = np.array([c + len(e) for e, c in zip(episodes, carried)])
        ends = np.cumsum(lengths) - 1
        terminated = np.array([bool(e.is_terminated) for e in episodes])
        n = int(lengths.sum())
        terminateds = np.zeros(n, dtype=bool)
        truncateds = np.zeros(n, dtype=bool)
        terminateds[ends[terminated]] = True
        truncateds[ends[~terminated]] = True

        def tensor(array):
            return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

        steps = self._steps
        module_batch = {
            Columns.OBS: tensor(np.concatenate([o[:-1] for o in observations])),
            Columns.ACTIONS: tensor(np.concatenate([steps(e, c, e.get_actions) for e, c in zip(episodes, carried)])),
            Columns.REWARDS: tensor(np.concatenate(
                [steps(e, c, e.get_rewards).astype(np.float32) for e, c in zip(episodes, carried)])),
            Columns.TERMINATEDS: tensor(terminateds),
            Columns.TRUNCATEDS: tensor(truncateds),
        }
        if all(WEIGHTS_SEQ_NO in e.extra_model_outputs for e in episodes):
            module_batch[WEIGHTS_SEQ_NO] = tensor(np.concatenate(
                [steps(e, c, e.get_extra_model_outputs, WEIGHTS_SEQ_NO) for e, c in zip(episodes, carried)]))
        if not self.history:
            module_batch[Columns.LOSS_MASK] = torch.ones(n, dtype=torch.bool, device=self.device)
        else:
            offsets = np.concatenate([np.concatenate([np.arange(c, 0, -1), np.zeros(len(e), np.int64)])
                                      for e, c in zip(episodes, carried)]).astype(np.int64)
            module_batch[HISTORY_OFFSETS] = tensor(offsets)
            module_batch[Columns.LOSS_MASK] = tensor(offsets == 0)
            module_batch[BEHAVIOUR_LOGITS] = tensor(np.concatenate(
                [steps(e, c, e.get_extra_model_outputs, Columns.ACTION_DIST_INPUTS)
                 for e, c in zip(episodes, carried)]).astype(np.float32))
        bootstrap = torch.zeros(n, dtype=torch.float32, device=self.device)
        cut = np.flatnonzero(~terminated)
        if len(cut):
            module = rl_module[DEFAULT_MODULE_ID].unwrapped()
            last_obs = tensor(np.stack([observations[i][-1] for i in cut]))
            with torch.no_grad():
                values = module.compute_values({Columns.OBS: last_obs})
            bootstrap[tensor(ends[cut])] = values.to(bootstrap.dtype)
        module_batch[BOOTSTRAP_VALUES] = bootstrap
        for column, values in self._user_columns(batch, episodes, carried).items():
            if any(carried) and column in module_batch:
                raise ValueError(f"learner connector column {column!r} replaces the lean batch's own, which "
                                 f"has rows carried from earlier fragments (hindsight.across_fragments)")
            module_batch[column] = convert_to_torch_tensor(values, device=self.device)
        batch[DEFAULT_MODULE_ID] = module_batch
        return batch

    @staticmethod
    def _user_columns(batch, episodes, carried) -> Dict[str, Any]:
        """The per-step columns the user's pieces added to `batch` (keyed by episode id,
        one item per step of each chunk), taken out of `batch` and laid out as the lean
        batch's rows, with zeros on each chunk's `carried` rows."""
        columns = {}
        for column in [key for key in batch if key != DEFAULT_MODULE_ID]:
            items = batch.pop(column)
            if not isinstance(items, dict) or not all(isinstance(k, tuple) and len(k) == 1 for k in items):
                raise ValueError(f"learner connector column {column!r} is not per episode step (the lean learner "
                                 f"path takes items added with their single-agent episode); use learner_path='rllib'")
            used = dict.fromkeys(items, 0)
            parts = []
            for episode, c in zip(episodes, carried):
                key = (episode.id_,)
                start = used.get(key, 0)
                steps = items.get(key, [])[start:start + len(episode)]
                if len(steps) != len(episode):
                    raise ValueError(f"learner connector column {column!r} has {len(steps)} items for an episode "
                                     f"chunk of {len(episode)} steps (the lean learner path takes one per step)")
                used[key] = start + len(episode)
                part = space_utils.batch(steps)
                if c:
                    part = tree.map_structure(lambda x: np.concatenate([np.zeros((c,) + x.shape[1:], x.dtype), x]), part)
                parts.append(part)
            extra = {key: len(items[key]) - n for key, n in used.items() if len(items[key]) != n}
            if extra:
                key, n = next(iter(extra.items()))
                raise ValueError(f"learner connector column {column!r} has {n} more item{'s' * (n != 1)} than "
                                 f"episode {key[0]!r} has steps (the lean learner path takes one per step)")
            columns[column] = tree.map_structure(lambda *xs: np.concatenate(xs), *parts)
        return columns
