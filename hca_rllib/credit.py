"""The maths of hindsight credit assignment: pure functions, torch tensors in and out.

Every function here can be checked line by line against `docs/method.md` (sections 1,
2 and 4), the method note that comments across the package cite. Nothing in this module
imports RLlib.

Sequence convention: a batch is a flat concatenation of episode chunks, real steps
only, each chunk's steps contiguous and in order. For every row `t`:

- `terminateds[t]` is True on the last step of a chunk whose episode ended in a
  terminal state: nothing follows, the return after it is 0.
- `truncateds[t]` is True on the last step of a chunk that did *not* terminate
  (rollout fragment end or time limit): the return is bootstrapped with `V(s_{t+1})`.
- `next_values[t] = V(s_{t+1})`: the next row's value inside a chunk, the value of the
  observation after the cut on a truncated last step (`next_values` builds it); it is
  not read after a terminal step.

A learner connector that keeps RLlib's layout (one artificial step after each chunk,
`AddOneTsToEpisodesAndTruncate`) converts it to this one before calling these functions
(`hca_rllib.connectors`).

The recursions (`discounted_returns`, `gae_advantages`, both at once: `returns_and_gae`)
are torch scans on the inputs' device: the chunks side by side in a grid, one vector step
per time position (a Python loop over at most the longest chunk's length), accumulated in
float64 in the same order of operations as the row-by-row recursion, so the results are
the same to the bit.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
import torch

# The credit estimators, the one list of them (the CLI, sweeps, tuned examples and
# benchmarks import it). All but `a2c` use the hindsight classifier. Every mode yields
# per-action policy-gradient weights `W[t, a]` (`policy_gradient_loss`); all but
# `expected_hca` are one-hot, `W = A_t * onehot(a_t)` (`one_hot_weights`).
CREDIT_MODES = ("a2c", "hca", "c2a2c", "expected_hca")
HINDSIGHT_CREDIT_MODES = tuple(mode for mode in CREDIT_MODES if mode != "a2c")
# The modes whose weights are one-hot, `W = A_t * onehot(a_t)` (`credit_advantage`).
ONE_HOT_CREDIT_MODES = tuple(mode for mode in CREDIT_MODES if mode != "expected_hca")
# How far each mode trusts the classifier (`trust=` in the config; None: not at all
# degraded, the pure estimator): `evidence`, from held-out evidence that the classifier
# knows more than the policy, accumulated over batches with the episode chunk as the unit
# (`evidence_trust`); `bias`, full trust until the estimator's update is shown to differ
# in expectation from A2C's (`bias_trust`).
TRUST_MODES = ("evidence", "bias")

# `hca`: the ratio pi/q is clipped to [0, HCA_RATIO_CLIP] (method note, section 2.2).
HCA_RATIO_CLIP = 10.0
# The evidence trust (method note, section 2.4): full trust at this z-score of the
# held-out evidence, none below half of it; the evidence of past batches decays by
# EVIDENCE_DECAY per batch (a memory of about 100 batches); the calibration scale that
# undoes a classifier shrunk toward pi is capped at MAX_CALIBRATION_SCALE.
Z_FULL_TRUST = 2.0
EVIDENCE_DECAY = 0.99
MAX_CALIBRATION_SCALE = 4.0
# The bias trust's signal (method note, section 2.4): none up to this z-score of the
# hindsight credit's mean, full at SIGNAL_FULL_Z. The trust reads the accumulated
# statistic at every update, so a credit without a mean meets the onset at many looks:
# at z = 1 about 16% of them, at z = 2 about 2%.
SIGNAL_ONSET_Z = 2.0
SIGNAL_FULL_Z = 3.0


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def chunk_ids(terminateds: torch.Tensor, truncateds: torch.Tensor) -> torch.Tensor:
    """Index of the episode chunk of every row: a chunk ends at its terminated or truncated
    step (rows after the last such step form one more chunk)."""
    ends = (terminateds.bool() | truncateds.bool()).long()
    return torch.cumsum(ends, 0) - ends


def next_values(values: torch.Tensor, bootstrap_values: torch.Tensor, terminateds: torch.Tensor,
                truncateds: torch.Tensor) -> torch.Tensor:
    """`V(s_{t+1})` per step: the next row's value inside a chunk, `bootstrap_values[t]` on
    a chunk's last step (0 there after a terminal state)."""
    ends = terminateds.bool() | truncateds.bool()
    shifted = torch.cat([values[1:], values.new_zeros(1)])
    return torch.where(ends, bootstrap_values.to(values.dtype), shifted)


def _last_rows(lengths: torch.Tensor) -> torch.Tensor:
    """The row of each chunk's last step, from the chunks' lengths (`bincount` of `chunk_ids`)."""
    return torch.cumsum(lengths, 0) - 1


def _chunk_grid(chunks: torch.Tensor):
    """Where each row sits in a `[max_len, num_chunks]` grid of the chunks aligned at their
    last steps (the last position holds every chunk's last step; shorter chunks are
    padded in front), from `chunks` (the chunk of every row: `chunk_ids`): the flat grid
    index of every row, the grid's shape and the row of each chunk's last step."""
    lengths = torch.bincount(chunks)
    last_rows = _last_rows(lengths)
    max_len, num_chunks = int(lengths.max()), len(lengths)
    steps_to_end = last_rows[chunks] - torch.arange(len(chunks), device=chunks.device)
    return (max_len - 1 - steps_to_end) * num_chunks + chunks, (max_len, num_chunks), last_rows


def _backward_scans(terms, decays, chunks: torch.Tensor):
    """For each `(x, last)` of `terms` and its `decay`: `y_t = x_t + decay * y_{t+1}`
    inside each chunk (`chunks`: `chunk_ids`), `y_t = last_t` on its last step (float64,
    in this order of operations). The chunks side by side in a grid: one vector step per
    time position, across all chunks and terms at once (each term's values are those it
    gets alone). Returns one `y` per term."""
    x = torch.stack([term[0] for term in terms])
    if x.shape[-1] == 0:
        return x.unbind(0)
    index, (max_len, num_chunks), last_rows = _chunk_grid(chunks)
    grid = x.new_zeros(len(terms), max_len * num_chunks).index_copy_(1, index, x).view(len(terms), max_len, -1)
    grid[:, -1] = torch.stack([term[1] for term in terms])[:, last_rows]
    decay = x.new_tensor(decays).unsqueeze(-1)
    positions = grid.unbind(1)
    for t in range(max_len - 2, -1, -1):
        positions[t].add_(positions[t + 1] * decay)  # x_t + decay * y_{t+1}
    return grid.view(len(terms), -1)[:, index].unbind(0)


def _returns_terms(r, nv, term, trunc, gamma: float):
    """`(x, last)` of the returns: `Z_t = r_t + gamma Z_{t+1}`; on a chunk's last step
    `r_t` (terminal), `r_t + gamma V(s_{t+1})` (truncated), `r_t + gamma 0` (neither: the
    batch's last row)."""
    return r, torch.where(term, r, r + gamma * torch.where(trunc, nv, 0.0))


def _gae_terms(r, v, nv, term, gamma: float):
    """`(x, last)` of GAE: `delta_t`, and `delta_t + 0` on a chunk's last step."""
    deltas = r + gamma * (~term).to(torch.float64) * nv - v
    return deltas, deltas + 0.0


def _float64(*tensors):
    return [t.to(torch.float64) for t in tensors]


def _out_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype if dtype.is_floating_point else torch.float32


def discounted_returns(rewards: torch.Tensor, next_values: torch.Tensor, terminateds: torch.Tensor,
                       truncateds: torch.Tensor, gamma: float) -> torch.Tensor:
    """Returns-to-go `Z_t`, bootstrapped at truncation, zero after termination.

    `Z_t = r_t + gamma * Z_{t+1}` inside a chunk; `Z_t = r_t + gamma * V(s_{t+1})`
    on a truncated last step; `Z_t = r_t` on a terminal last step. Pass
    `next_values` of zeros for pure Monte Carlo returns (no bootstrap). Accumulated in
    float64, returned in the inputs' floating dtype, on their device.
    """
    term, trunc = terminateds.bool(), truncateds.bool()
    (returns,) = _backward_scans([_returns_terms(*_float64(rewards, next_values), term, trunc, gamma)],
                                 [gamma], chunk_ids(term, trunc))
    return returns.to(_out_dtype(rewards, next_values))


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                   terminateds: torch.Tensor, truncateds: torch.Tensor, gamma: float,
                   lambda_: float) -> torch.Tensor:
    """GAE(lambda) advantages (Schulman et al. 2016), not normalised.

    `delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)` and
    `A_t = delta_t + gamma * lambda * A_{t+1}` within a chunk. With `lambda_ = 1`
    this is the n-step A2C advantage `Z_t - V(s_t)`. Accumulated in float64, returned
    in the inputs' floating dtype, on their device.
    """
    term, trunc = terminateds.bool(), truncateds.bool()
    (gae,) = _backward_scans([_gae_terms(*_float64(rewards, values, next_values), term, gamma)],
                             [gamma * lambda_], chunk_ids(term, trunc))
    return gae.to(_out_dtype(rewards, values, next_values))


def returns_and_gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                    terminateds: torch.Tensor, truncateds: torch.Tensor, gamma: float, lambda_: float,
                    *, chunks: Optional[torch.Tensor] = None):
    """`(discounted_returns(...), gae_advantages(...))` of the same steps, bitwise the same
    as the two calls, in one scan (one chunk grid, one loop over the time positions).
    `chunks`: `chunk_ids(terminateds, truncateds)` where the caller has them already."""
    term, trunc = terminateds.bool(), truncateds.bool()
    r, v, nv = _float64(rewards, values, next_values)
    returns, gae = _backward_scans(
        [_returns_terms(r, nv, term, trunc, gamma), _gae_terms(r, v, nv, term, gamma)],
        [gamma, gamma * lambda_], chunk_ids(term, trunc) if chunks is None else chunks)
    return returns.to(_out_dtype(rewards, next_values)), gae.to(_out_dtype(rewards, values, next_values))


def hindsight_ratio(log_pi_taken: torch.Tensor, log_q_taken: torch.Tensor) -> torch.Tensor:
    """`pi(a_t|s_t) / q(a_t|s_t, Z_t)`, unclipped (for diagnostics)."""
    return torch.exp(log_pi_taken - log_q_taken)


def hca_advantage(
    log_pi_taken: torch.Tensor,
    log_q_taken: torch.Tensor,
    returns: torch.Tensor,
    baseline: torch.Tensor,
    ratio_clip: float = HCA_RATIO_CLIP,
) -> torch.Tensor:
    """Return-conditional HCA advantage `(1 - clip(pi/q, 0, rho_max)) * (Z - b)`, with
    the baseline `b = V(s)` (zeros: the plain estimator). With the exact posterior and no
    clip, `E[(1 - pi/h) Z | s, a] = A(s, a)` (Harutyunyan et al. 2019).
    """
    rho = torch.clamp(hindsight_ratio(log_pi_taken, log_q_taken), 0.0, ratio_clip)
    return (1.0 - rho) * (returns - baseline)


def c2a2c_gate(log_pi_taken: torch.Tensor, log_q_taken: torch.Tensor, delta: float) -> torch.Tensor:
    """Soft credit gate `c_t = min(1, |log q - log pi| / delta)`: 1 where the action told
    at least `delta` nats about the return, 0 where it told nothing, linear between (the
    hard 0/1 gate of the note cut small-information steps and slowed learning most)."""
    return torch.clamp(torch.abs(log_q_taken - log_pi_taken) / delta, max=1.0)


def blend_toward_a2c(gae: torch.Tensor, estimator: torch.Tensor, trust) -> torch.Tensor:
    """`(1 - w) * A_GAE + w * A`: a credit estimator `A` trusted by `w` (None: 1)."""
    w = 1.0 if trust is None else trust
    return (1.0 - w) * gae + w * estimator


# --- Trust from accumulated evidence (`trust="evidence"`, method note, section 2.4) ---


def calibration_evidence(
    actions: torch.Tensor,
    pi_probs: torch.Tensor,
    q_probs: torch.Tensor,
    chunks: torch.Tensor,
) -> torch.Tensor:
    """This batch's held-out evidence that `q` knows something `pi` does not.

    Per decision, `x_t = <onehot(a_t) - pi_t, q_t - pi_t>` (does the classifier's
    deviation from the policy point at the action that was taken?) and
    `d_t = ||q_t - pi_t||^2` (how far it deviates). If `q` is the posterior `h`
    shrunk toward `pi` by `alpha` (`q = pi + alpha (h - pi)`),
    `E[x_t | s, Z] = alpha ||h - pi||^2` and `d_t = alpha^2 ||h - pi||^2`: `sum x /
    sum d` estimates `1 / alpha` (`evidence_trust`'s scale); `x_t` has mean 0 when
    the deviation is unrelated to the action (noise), and is negative when it points
    the wrong way. The steps of one episode chunk are one unit: `x` and `d` are summed
    per chunk (`chunks`, the chunk of every step, as `chunk_ids` numbers them: from 0,
    each id up to the largest holding at least one step).

    Returns `[n, sum_c x_c, sum_c x_c^2, sum_c d_c]` over the `n` chunks: float64 of
    shape `[4]`.
    """
    deviation = (q_probs - pi_probs).to(torch.float64)
    taken = deviation.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    x = taken - (pi_probs.to(torch.float64) * deviation).sum(-1)
    d = (deviation * deviation).sum(-1)
    num_chunks = int(chunks.max()) + 1 if chunks.numel() else 0
    zeros = lambda size: torch.zeros(size, dtype=torch.float64, device=x.device)  # noqa: E731
    per_x, per_d = zeros(num_chunks).index_add_(0, chunks, x), zeros(num_chunks).index_add_(0, chunks, d)
    # Summed chunk by chunk, in order (index_add_ into one slot).
    first = torch.zeros(num_chunks, dtype=torch.long, device=x.device)
    return torch.cat([zeros(1) + num_chunks] + [zeros(1).index_add_(0, first, total)
                                                for total in (per_x, per_x * per_x, per_d)])


def accumulate_evidence(state: torch.Tensor, batch_evidence: torch.Tensor,
                        decay: float = EVIDENCE_DECAY) -> torch.Tensor:
    """`decay * state + batch`: evidence over the recent batches (an effective memory
    of `1 / (1 - decay)` batches; the classifier changes, so old evidence fades)."""
    return decay * state.to(torch.float64) + batch_evidence.to(torch.float64)


def evidence_trust(evidence: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Trust and calibration scale from accumulated `calibration_evidence` (`[4]`).

    `z = sum_c x_c / SE`, the standard error from the spread of the per-chunk sums
    (chunks, not steps, are independent); the trust is 0 up to `z = Z_FULL_TRUST / 2`
    (a classifier of pure noise clears that with probability 0.16), rising linearly to 1
    at `Z_FULL_TRUST`. The calibration `scale = sum x / sum d`, clipped to
    `[0, MAX_CALIBRATION_SCALE]`, is 1 / alpha in the shrinkage model above (1 for a
    calibrated classifier). A scale below 1 goes into the trust: `trust * min(1, scale)`,
    and the scale applied is `max(1, scale)`. So a classifier whose deviation from `pi`
    is real but mostly noise (a large `z` from many chunks, a small scale) leaves the
    gradient to A2C, rather than replacing it with a small multiple of its own (this
    keeps the default no worse than A2C on MinAtar; docs/method.md, "Defaults and why").
    Both are 0 without evidence (fewer than 2 chunks, or `q == pi`: `d = 0`).

    Returns `trust`, `scale` and `z` (float32 scalars).
    """
    ev = evidence.to(torch.float64)
    n, sx, sxx, sd = ev[..., 0], ev[..., 1], ev[..., 2], ev[..., 3]
    usable = (n >= 2.0) & (sd > 1e-12)
    safe_n = torch.where(usable, n, torch.full_like(n, 2.0))
    variance = torch.clamp((sxx - sx * sx / safe_n) / (safe_n - 1.0), min=0.0)
    z = torch.where(usable, sx / torch.clamp(torch.sqrt(safe_n * variance), min=1e-12), torch.zeros_like(n))
    onset = 0.5 * Z_FULL_TRUST
    trust = torch.clamp((z - onset) / (Z_FULL_TRUST - onset), 0.0, 1.0)
    scale = torch.where(usable, torch.clamp(sx / torch.where(usable, sd, torch.ones_like(sd)), 0.0,
                                            MAX_CALIBRATION_SCALE), torch.zeros_like(n))
    trust = trust * torch.clamp(scale, max=1.0)
    scale = torch.where(usable, torch.clamp(scale, min=1.0), torch.zeros_like(n))
    return {"trust": trust.float(), "scale": scale.float(), "z": z.float()}


# --- Trust until shown biased (`trust="bias"`, method note, section 2.4) ----------------


def head_gradients(weights: torch.Tensor, pi_probs: torch.Tensor, latent: torch.Tensor,
                   units: torch.Tensor) -> torch.Tensor:
    """Per unit, the gradient that the weights `W` ([N, A]) give the policy's last linear
    layer: `G_u = sum_{t in u} (W_t - pi_t sum_a W_t[a]) [z_t, 1]^T` (`logit_gradient`
    times the layer's input `z_t`, `latent` [N, H], with its bias), flattened: float64
    `[U, A (H + 1)]`, `U = units.max() + 1` (`units`: each row's unit, numbered from 0,
    every id up to the largest holding a row; `chunk_ids` numbers them so)."""
    g = logit_gradient(weights.to(torch.float64), pi_probs.to(torch.float64))
    z = latent.detach().to(torch.float64)
    z = torch.cat([z, z.new_ones(len(z), 1)], dim=-1)
    per_row = (g.unsqueeze(-1) * z.unsqueeze(-2)).reshape(len(z), -1)
    num_units = int(units.max()) + 1 if units.numel() else 0
    return per_row.new_zeros(num_units, per_row.shape[-1]).index_add_(0, units, per_row)


def bias_evidence(unit_gradients: torch.Tensor) -> torch.Tensor:
    """This batch's evidence that independent units' gradients `G_u` ([U, D]) have a
    mean other than 0: `[T, V]`, float64, with `T = sum_{u != v} <G_u, G_v>` (mean
    `U (U - 1) ||E G||^2`, 0 under the null) and `V = 2 sum_{u != v} <G_u, G_v>^2`, its
    variance under the null (and an overestimate otherwise)."""
    g = unit_gradients.to(torch.float64)
    gram = g @ g.T
    diagonal = torch.diagonal(gram)
    return torch.stack([gram.sum() - diagonal.sum(), 2.0 * ((gram * gram).sum() - (diagonal * diagonal).sum())])


def accumulate_bias_evidence(state: torch.Tensor, batch_evidence: torch.Tensor,
                             decay: float = EVIDENCE_DECAY) -> torch.Tensor:
    """`[decay T + T_b, decay^2 V + V_b]` for each `(T, V)` pair of `bias_evidence`
    (`[2]`, or several pairs side by side, `[2 m]`): the decayed sum of the batches'
    statistics and its variance (the batches are independent under the null)."""
    state, batch_evidence = state.to(torch.float64), batch_evidence.to(torch.float64)
    factors = torch.tensor([decay, decay * decay], dtype=torch.float64, device=state.device).repeat(len(state) // 2)
    return factors * state + batch_evidence


def _z(t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    usable = v > 0
    return torch.where(usable, t / torch.sqrt(torch.where(usable, v, torch.ones_like(v))), torch.zeros_like(t))


def bias_trust(evidence: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Trust from accumulated `bias_evidence` (`[T_D, V_D, T_H, V_H]`) of two gradients in
    the policy's last layer: `D`, of the difference `W_sampled - W` between A2C's form of
    the credit and the pure estimator's, and `H`, of the estimator's hindsight credit.

    With the exact posterior the estimator is unbiased: its expected update equals A2C's,
    `D`'s mean is 0, and `z_D = T_D / sqrt(V_D)` has mean 0 and variance 1. The
    consistency `c` is 1 up to `z_D = Z_FULL_TRUST / 2` and falls linearly to 0 at
    `Z_FULL_TRUST` (an unbiased estimator crosses the onset with probability about
    0.16). A test that stops rejecting is not evidence of no bias: as the policy
    converges A2C's own gradient shrinks below the noise, and a classifier that learned
    nothing (`W` about 0, its credit dropped) would pass. So the hindsight credit must
    also show a mean of its own: the signal `s` is 0 up to `z_H = SIGNAL_ONSET_Z` (2),
    rising linearly to 1 at `SIGNAL_FULL_Z` (3). The trust reads the accumulated `z_H`
    at every update, so its onset must lie where a credit without a mean seldom goes:
    about 2% of the looks (`tests/test_bias_trust.py`). A classifier whose deviations
    from the policy are noise, or absent, stays at 0. `trust = c s`: 0 without evidence.
    Returns `trust`, `z` (`z_D`) and `signal_z` (`z_H`), float32 scalars.
    """
    ev = evidence.to(torch.float64)
    z_d, z_h = _z(ev[0], ev[1]), _z(ev[2], ev[3])
    onset = 0.5 * Z_FULL_TRUST
    consistency = torch.clamp((Z_FULL_TRUST - z_d) / (Z_FULL_TRUST - onset), 0.0, 1.0)
    signal = torch.clamp((z_h - SIGNAL_ONSET_Z) / (SIGNAL_FULL_Z - SIGNAL_ONSET_Z), 0.0, 1.0)
    return {"trust": (consistency * signal).float(), "z": z_d.float(), "signal_z": z_h.float()}


# --- Policy-gradient weights (method note, section 2) ----------------------------------


def one_hot_weights(advantages: torch.Tensor, actions: torch.Tensor, num_actions: int) -> torch.Tensor:
    """`W[t, a] = A_t * 1[a == a_t]`: the one-hot case (a2c, hca, c2a2c)."""
    onehot = torch.nn.functional.one_hot(actions.long(), num_actions).to(advantages.dtype)
    return advantages.unsqueeze(-1) * onehot


def expected_hca_weights(
    returns: torch.Tensor,
    values: torch.Tensor,
    q_probs: torch.Tensor,
    pi_probs: torch.Tensor,
    scale: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """Expected (all-action) HCA: `W[t, .] = scale * (Z_t - V(s_t)) * (q(.|s_t,Z_t) - pi(.|s_t))`.

    Its policy gradient `sum_a W[t, a] grad log pi(a|s_t)` is
    `scale * (Z - V) * sum_a q(a) grad log pi(a)` (the `- pi` term has zero gradient
    in expectation over `a ~ pi`, exactly: `sum_a pi grad log pi = 0`). With the exact
    posterior `h` and `scale = 1` it is `E[(Z - V) grad log pi(a_t) | s_t, Z_t]`, A2C's
    gradient with the action integrated out given the return: unbiased, never of
    higher variance, no ratio to clip, and exactly 0 where `q == pi`.
    """
    centred = (returns - values).unsqueeze(-1)
    scale = torch.as_tensor(scale, dtype=centred.dtype, device=centred.device)
    if scale.dim() == 1:  # one per step
        scale = scale.unsqueeze(-1)
    return scale * centred * (q_probs - pi_probs)


def policy_gradient_loss(weights: torch.Tensor, log_probs: torch.Tensor, mask: torch.Tensor,
                         history: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`-mean_t sum_a W[t, a] log pi(a|s_t)` over the real steps (`W` detached); the rows
    carried from earlier fragments (`history`) add their terms to the sum, not to the
    count: their steps were counted in their own fragment."""
    per_step = (weights.detach() * log_probs).sum(-1)
    mask = mask.bool()
    total = per_step[mask].sum()
    if history is not None:
        total = total + per_step[history.bool()].sum()
    return -total / mask.sum().clamp(min=1)


def logit_gradient(weights: torch.Tensor, pi_probs: torch.Tensor) -> torch.Tensor:
    """Gradient of `sum_a W[a] log pi(a)` with respect to the logits of a softmax policy:
    `W - pi * sum_a W[a]` (per row). For tests and analysis."""
    return weights - pi_probs * weights.sum(-1, keepdim=True)


def credit_advantage(
    credit: str,
    *,
    gae: torch.Tensor,
    log_pi_taken: torch.Tensor,
    log_q_taken: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    gate_delta: float = 0.1,
    trust: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """The advantage of a one-hot credit mode (method note, section 2), plus its parts.

    `trust=None` gives the pure estimator of the note. A trust `w` in [0, 1] (a scalar
    or one per step: see `evidence_trust`) degrades each mode toward A2C as the
    classifier's evidence vanishes: `hca` becomes `w A_HCA + (1 - w) A_GAE`, `c2a2c`
    uses the gate `(1 - w) + w c_t`.

    Returns a dict with `advantages` and, where defined, `hca_advantages`, `gate`
    (as applied) and `raw_gate` (the gate of the note, before the trust).
    `expected_hca` is not one-hot: see `credit_weights`.
    """
    if credit not in CREDIT_MODES:
        raise ValueError(f"credit must be one of {CREDIT_MODES}, got {credit!r}")
    if credit == "expected_hca":
        raise ValueError("credit='expected_hca' has per-action weights: use credit_weights")
    if credit == "a2c":
        return {"advantages": gae}
    if credit == "c2a2c":
        raw_gate = gate = c2a2c_gate(log_pi_taken, log_q_taken, gate_delta)
        if trust is not None:
            gate = (1.0 - trust) + trust * gate
        return {"raw_gate": raw_gate, "gate": gate, "advantages": gate * gae}
    hca = hca_advantage(log_pi_taken, log_q_taken, returns, values)
    return {"hca_advantages": hca, "advantages": blend_toward_a2c(gae, hca, trust)}


def credit_weights(
    credit: str,
    *,
    actions: torch.Tensor,
    gae: torch.Tensor,
    log_pi_all: torch.Tensor,
    log_q_all: Optional[torch.Tensor],
    returns: torch.Tensor,
    values: torch.Tensor,
    trust: Optional[torch.Tensor] = None,
    scale: float | torch.Tensor = 1.0,
    gate_delta: float = 0.1,
    pi_probs: Optional[torch.Tensor] = None,
    q_probs: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """Per-action policy-gradient weights `W[t, a]` of any credit mode, plus its parts.

    One-hot modes: `W = A_t * onehot(a_t)`, `A` from `credit_advantage` (`gate_delta`:
    `c2a2c`'s delta). `expected_hca`: `W = (1 - w_t) A_GAE,t onehot(a_t) +
    w_t * expected_hca_weights(Z, V, q, pi, scale)`, with the trust `w_t` (scalar or per
    step; None: 1, the pure estimator). With `lambda_ = 1`, `A_GAE = Z - V`: trust 0 is
    A2C exactly. Returns `weights`, `advantages` (the taken action's entry for one-hot
    modes; `W[t, a_t]` otherwise, for diagnostics) and the parts. `pi_probs`, `q_probs`:
    `exp(log_pi_all)`, `exp(log_q_all)` if the caller has them already (`expected_hca`).
    """
    num_actions = log_pi_all.shape[-1]
    if credit != "expected_hca":
        log_pi = log_pi_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        log_q = (log_q_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
                 if log_q_all is not None else log_pi)
        parts = credit_advantage(credit, gae=gae, log_pi_taken=log_pi, log_q_taken=log_q, returns=returns,
                                 values=values, gate_delta=gate_delta, trust=trust)
        parts["weights"] = one_hot_weights(parts["advantages"], actions, num_actions)
        return parts
    expected = expected_hca_weights(returns, values, log_q_all.exp() if q_probs is None else q_probs,
                                    log_pi_all.exp() if pi_probs is None else pi_probs, scale)
    w = torch.ones((), device=gae.device) if trust is None else trust
    if w.dim() == 1:
        w = w.unsqueeze(-1)
    weights = blend_toward_a2c(one_hot_weights(gae, actions, num_actions), expected, w)
    return {
        "weights": weights,
        "expected_weights": expected,
        "advantages": weights.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1),
    }


# --- The reward outcome (method note, section 2.8) -------------------------------------


def _check_window(window) -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    return int(window)


def window_rewards(rewards: torch.Tensor, chunks: torch.Tensor, window: int) -> torch.Tensor:
    """`[N, window]`: entry `[t, k-1] = r_{t+k}` for `1 <= k <= window` where row `t+k` is
    in `t`'s chunk (`chunks`: `chunk_ids`); 0 elsewhere. Same dtype as `rewards`."""
    window = _check_window(window)
    n = len(rewards)
    out = rewards.new_zeros((n, window))
    for k in range(1, min(window, n - 1) + 1):  # chunk ids never decrease: same id, same chunk
        out[: n - k, k - 1] = torch.where(chunks[k:] == chunks[:-k], rewards[k:], torch.zeros_like(rewards[k:]))
    return out


def _in_window_returns64(window_rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    r = window_rewards.to(torch.float64)
    total = r.new_zeros(r.shape[:-1])
    for k in range(1, r.shape[-1] + 1):
        total = total + r[..., k - 1] * (gamma ** k)
    return total


def in_window_returns(window_rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """`S_t = sum_k gamma^k R[t, k-1]` (`[N]`, `R = window_rewards`): the in-window part of
    the return, accumulated in float64 (k = 1, 2, ... in order), returned in `R`'s dtype
    (float32 if it is not floating)."""
    return _in_window_returns64(window_rewards, gamma).to(_out_dtype(window_rewards))


def reward_outcome_weights(
    *,
    actions: torch.Tensor,
    gae: torch.Tensor,
    returns: torch.Tensor,
    remainder_values: torch.Tensor,
    window_rewards: torch.Tensor,
    pi_probs: torch.Tensor,
    h_probs: Optional[torch.Tensor] = None,
    pairs: Optional[tuple] = None,
    gamma: float,
    trust=None,
    scale: float | torch.Tensor = 1.0,
) -> Dict[str, torch.Tensor]:
    """Per-action weights of the reward outcome: one hindsight classifier per later reward.

    With `S_t = in_window_returns(window_rewards, gamma)` and the remainder
    `R_t = Z_t - S_t` (`returns` = `Z_t`, `discounted_returns`):

        W_reward[t, a] = onehot(a_t)[a] (R_t - Vrem(s_t))
                         + scale sum_k gamma^k r_{t+k} (h_k(a|s_t, r_{t+k}) - pi(a|s_t))

    `remainder_values` = `Vrem(s_t)`, the remainder's baseline (`V(s_t) - E[S_t|s_t]`);
    `window_rewards` = `window_rewards(...)` (`[N, window]`); `h_probs`: `[N, window, A]`,
    the classifier's `h_k(.|s_t, r_{t+k})`, read only where the reward is not 0 (elsewhere
    anything, even not finite: a zero reward adds exactly nothing); `scale`: a float, a
    scalar or one per step. Each `k` term is exactly 0 where `h_k == pi`. The trust `w`
    (None: 1, the pure estimator; a scalar or one per step) blends toward A2C:
    `W = (1 - w) gae_t onehot(a_t) + w W_reward`, A2C's weights exactly at `w = 0`.

    Instead of the dense `h_probs`, `pairs = (rows, lags, h)` gives the classifier on the
    reward events alone (`rows`, `lags`: the row `t` and lag index `k - 1` of each nonzero
    entry of `window_rewards`; `h`: `[P, A]`), in `O(P A)` memory rather than
    `O(N window A)`: the same weights (to float64 rounding in the sum's order).

    Returns `weights` (`W`), `reward_weights` (`W_reward`), `hindsight_weights` (its `k`
    terms, `scale sum_k gamma^k r_{t+k} (h_k - pi)`: exactly 0 where `h_k == pi`; A2C's
    form of the same terms is `S_t onehot(a_t)`), `advantages` (`W[t, a_t]`), `in_window`
    (`S_t`) and `remainder` (`R_t`), in the inputs' floating dtype (computed in float64).
    """
    num_actions = pi_probs.shape[-1]
    if (h_probs is None) == (pairs is None):
        raise ValueError("reward_outcome_weights takes the classifier as h_probs or as pairs, exactly one")
    if h_probs is not None and tuple(h_probs.shape) != (*window_rewards.shape, num_actions):
        raise ValueError(f"h_probs must be [N, window, A] = {(*window_rewards.shape, num_actions)}, "
                         f"got {tuple(h_probs.shape)}")
    classifier = h_probs if pairs is None else pairs[2]
    dtype = _out_dtype(gae, returns, remainder_values, window_rewards, pi_probs, classifier)
    in_window = _in_window_returns64(window_rewards, gamma)
    remainder = returns.to(torch.float64) - in_window
    weights_r = one_hot_weights(remainder - remainder_values.to(torch.float64), actions, num_actions)
    powers = torch.tensor([gamma ** k for k in range(1, window_rewards.shape[-1] + 1)], dtype=torch.float64,
                          device=window_rewards.device)
    rewards = window_rewards.to(torch.float64)
    pi64 = pi_probs.to(torch.float64)
    if pairs is None:
        deviation = torch.where((rewards != 0).unsqueeze(-1), h_probs.to(torch.float64) - pi64.unsqueeze(-2), 0.0)
        hindsight = ((rewards * powers).unsqueeze(-1) * deviation).sum(-2)
    else:
        rows, lags, h = pairs
        terms = (rewards[rows, lags] * powers[lags]).unsqueeze(-1) * (h.to(torch.float64) - pi64[rows])
        hindsight = torch.zeros_like(pi64).index_add_(0, rows, terms)
    scale = torch.as_tensor(scale, dtype=torch.float64, device=hindsight.device)
    if scale.dim() == 1:  # one per step
        scale = scale.unsqueeze(-1)
    hindsight = scale * hindsight
    reward_weights = (weights_r + hindsight).to(dtype)
    w = None if trust is None else torch.as_tensor(trust, dtype=dtype, device=reward_weights.device)
    if w is not None and w.dim() == 1:
        w = w.unsqueeze(-1)
    weights = blend_toward_a2c(one_hot_weights(gae.to(dtype), actions, num_actions), reward_weights, w)
    return {
        "weights": weights,
        "reward_weights": reward_weights,
        "hindsight_weights": hindsight.to(dtype),
        "advantages": weights.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1),
        "in_window": in_window.to(dtype),
        "remainder": remainder.to(dtype),
    }

# --- The reward outcome across fragments (method note, section 2.9) -----------------


def history_shift(values: torch.Tensor, next_values: torch.Tensor, chunks: torch.Tensor, offsets: torch.Tensor,
                  window: int, gamma: float) -> torch.Tensor:
    """`[N]`: for each row carried from an earlier fragment (`offsets` `d_t >= 1`: steps to
    its chunk's first new row `s = t + d_t`), how far its sampled return moves when it
    runs on into this fragment, up to the end of its window:

        shift_t = gamma^(m + 1 - t) V(s_{m+1}) - gamma^(d_t) V(s_s),   m = min(last row, t + window)

    (`next_values[m]` = `V(s_{m+1})`: 0 after a terminal step, the bootstrap value on a
    cut). Its earlier update bootstrapped at `s` with `V(s_s)`; with this shift and the
    rewards `s..m` the return is cut at the window's end. 0 on new rows (`d_t = 0`).
    Computed in float64, returned in `values`' dtype."""
    window = _check_window(window)
    n = len(values)
    d = offsets.long()
    idx = torch.arange(n, device=values.device)
    last = _last_rows(torch.bincount(chunks.long()))[chunks.long()]
    m = torch.minimum(last, idx + window)
    carried = d > 0
    start = torch.where(carried, idx + d, idx).clamp(max=max(n - 1, 0))
    v64, nv64 = values.to(torch.float64), next_values.to(torch.float64)
    g = torch.tensor(gamma, dtype=torch.float64, device=values.device)
    shift = g ** (m + 1 - idx).to(torch.float64) * nv64[m] - g ** d.to(torch.float64) * v64[start]
    return torch.where(carried, shift, torch.zeros_like(shift)).to(_out_dtype(values))


def history_weights(
    *,
    actions: torch.Tensor,
    history: torch.Tensor,
    shift: torch.Tensor,
    pi_probs: torch.Tensor,
    behaviour_probs: torch.Tensor,
    window_rewards: torch.Tensor,
    pairs: tuple,
    gamma: float,
    trust=None,
    scale: float | torch.Tensor = 1.0,
) -> Dict[str, torch.Tensor]:
    """Per-action weights of the rows carried from earlier fragments (`history` True; 0
    elsewhere): the credit of this fragment's rewards inside their windows, sampled by an
    older policy `pi_b` and applied under the current `pi`:

        W[t, a] = w (scale sum_k gamma^k r_{t+k} pi(a) (h_k(a) / pi_b(a) - 1)
                     + onehot(a_t)[a] rho_t shift_t),        rho_t = pi(a_t) / pi_b(a_t)

    `pairs = (rows, lags, h)`: the (row, lag index `k - 1`) of each reward event and
    `h_k(.|s_t, r_{t+k})` under the behaviour policy (`[P, A]`); only the carried rows'
    pairs are read, which must be this fragment's (`window_rewards` 0 at the lags of the
    earlier fragments). `shift` = `history_shift`. Each `k` term is exactly 0 where
    `h_k == pi_b`: a reward the classifier cannot attribute pulls the policy toward no
    older one. `E_b[...]` of the `k` terms is `E_pi[gamma^k r_{t+k} grad log pi(a_t)]`
    with the exact posterior under `pi_b` (importance weighting of the one action, then
    the Rao-Blackwell step). The trust `w` (None: 1) multiplies everything: at `w = 0`
    the carried rows add nothing, and the update is the fragment's alone.

    Returns `weights` (`[N, A]`, the carried rows' `W`), `hindsight_weights` (its `k`
    terms, scaled, before the trust) and `ratio` (`rho_t`, 0 on new rows), in the inputs'
    floating dtype (computed in float64)."""
    rows, lags, h = pairs
    dtype = _out_dtype(pi_probs, behaviour_probs, shift, window_rewards, h)
    history = history.bool()
    pi64, b64 = pi_probs.to(torch.float64), behaviour_probs.to(torch.float64)
    keep = history[rows]
    rows, lags, h = rows[keep], lags[keep], h[keep].to(torch.float64)
    powers = torch.tensor([gamma ** k for k in range(1, window_rewards.shape[-1] + 1)], dtype=torch.float64,
                          device=window_rewards.device)
    r = window_rewards.to(torch.float64)[rows, lags] * powers[lags]
    terms = r.unsqueeze(-1) * pi64[rows] * (h / b64[rows] - 1.0)
    hindsight = torch.zeros_like(pi64).index_add_(0, rows, terms)
    scale = torch.as_tensor(scale, dtype=torch.float64, device=hindsight.device)
    if scale.dim() == 1:
        scale = scale.unsqueeze(-1)
    hindsight = scale * hindsight
    taken = actions.long().unsqueeze(-1)
    ratio = torch.where(history, (pi64.gather(-1, taken) / b64.gather(-1, taken)).squeeze(-1), 0.0)
    sampled = one_hot_weights(ratio * shift.to(torch.float64), actions, pi64.shape[-1])
    weights = torch.where(history.unsqueeze(-1), hindsight + sampled, 0.0)
    if trust is not None:
        w = torch.as_tensor(trust, dtype=torch.float64, device=weights.device)
        weights = weights * (w.unsqueeze(-1) if w.dim() == 1 else w)
    return {"weights": weights.to(dtype), "hindsight_weights": hindsight.to(dtype), "ratio": ratio.to(dtype)}


def behaviour_kl(behaviour_logits: torch.Tensor, log_pi_all: torch.Tensor) -> torch.Tensor:
    """`KL(pi_b || pi)` per row, from the behaviour policy's logits and the current
    policy's log-probabilities."""
    log_b = torch.log_softmax(behaviour_logits.to(log_pi_all.dtype), dim=-1)
    return (log_b.exp() * (log_b - log_pi_all)).sum(-1)


# --- Diagnostics (method note, section 4) -------------------------------------------


def _masked(x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    return x if mask is None else x[mask]


def mutual_information(
    log_q_taken: torch.Tensor,
    log_pi_taken: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """`mean_t[log q(a_t|s_t,Z_t) - log pi(a_t|s_t)]` in nats.

    A variational lower bound on `I(A; Z | S)` when evaluated on data the
    classifier did not train on.
    """
    return _masked(log_q_taken - log_pi_taken, mask).mean()


def argmax_accuracy(
    logits: torch.Tensor, actions: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Share of steps where the most likely action is the one taken."""
    hits = (logits.argmax(dim=-1) == actions).to(torch.float32)
    return _masked(hits, mask).mean()


def ratio_statistics(
    ratio: torch.Tensor, ratio_clip: float = HCA_RATIO_CLIP, mask: Optional[torch.Tensor] = None
) -> Dict[str, torch.Tensor]:
    """Mean, median, max, 99th percentile and clip fraction of the unclipped `pi/q`.

    The mean follows the largest ratios (one step where `q` is ~0 makes it ~1e30 while
    the clip keeps that step harmless); the median is the typical step's ratio."""
    r = _masked(ratio, mask).to(torch.float32)
    if r.numel() == 0:
        zero = torch.zeros((), device=ratio.device)
        return {"ratio_mean": zero, "ratio_median": zero, "ratio_max": zero, "ratio_p99": zero,
                "clip_fraction": zero}
    return {
        "ratio_mean": r.mean(),
        "ratio_median": torch.quantile(r, 0.5),
        "ratio_max": r.max(),
        "ratio_p99": torch.quantile(r, 0.99),
        "clip_fraction": (r > ratio_clip).to(torch.float32).mean(),
    }


def correlation(
    x: torch.Tensor, y: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Pearson correlation; 0 when either side is constant."""
    x = _masked(x, mask).to(torch.float64)
    y = _masked(y, mask).to(torch.float64)
    xc, yc = x - x.mean(), y - y.mean()
    denominator = torch.sqrt((xc * xc).sum() * (yc * yc).sum())
    if denominator <= 1e-12:
        return torch.zeros((), dtype=torch.float32, device=x.device)
    return ((xc * yc).sum() / denominator).to(torch.float32)


def explained_variance(
    targets: torch.Tensor, predictions: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """`1 - Var[target - prediction] / Var[target]` (CleanRL's definition)."""
    t = _masked(targets, mask)
    p = _masked(predictions, mask)
    variance = t.var(unbiased=False)
    if variance <= 1e-12:
        return torch.zeros((), device=t.device)
    return 1.0 - (t - p).var(unbiased=False) / variance


# --- The information probe (`hca_rllib.probe`, docs/method.md section 4.1) -------------


def horizon_returns(rewards, episode_ids, gamma: float, horizon: Optional[int] = None) -> np.ndarray:
    """`Z_t = sum_{k < K, t + k in the episode} gamma^k r_{t+k}`: the return over the next
    `horizon` (K) steps, cut at the episode's end and bootstrapped with nothing (the
    probe has no value function); `horizon=None`: to the episode's end.

    Rows are the steps of complete episodes, each episode's steps contiguous and in
    order (`episode_ids` constant within an episode, different between neighbours).
    float64 numpy array."""
    r = _as_numpy(rewards).astype(np.float64)
    ids = _as_numpy(episode_ids)
    if r.shape != ids.shape or r.ndim != 1:
        raise ValueError(f"rewards {r.shape} and episode_ids {ids.shape} must be 1-d of one length")
    if horizon is not None and (isinstance(horizon, bool) or int(horizon) != horizon or horizon < 1):
        raise ValueError(f"horizon must be an integer >= 1 or None (episode end), got {horizon!r}")
    n = len(r)
    full = np.empty(n)
    running = 0.0
    for t in range(n - 1, -1, -1):
        if t == n - 1 or ids[t + 1] != ids[t]:
            running = 0.0
        running = r[t] + gamma * running
        full[t] = running
    if horizon is None:
        return full
    k = int(horizon)
    out = full.copy()
    if k < n:
        # Z^K_t = G_t - gamma^K G_{t+K} where step t + K is in the same episode.
        same = ids[k:] == ids[:-k]
        out[:-k] -= np.where(same, gamma ** k * full[k:], 0.0)
    return out


def steps_to_episode_end(episode_ids) -> np.ndarray:
    """Per decision, the steps from it to its episode's end, itself included (`T - t` for
    step `t` of an episode of `T` steps: 1 at the last step): how far the return to the
    episode's end reaches. Rows as in `horizon_returns` (episodes contiguous). int64."""
    ids = _as_numpy(episode_ids)
    if ids.ndim != 1:
        raise ValueError(f"episode_ids must be 1-d, got shape {ids.shape}")
    n = len(ids)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    # Episode boundaries: the first row of each run of equal ids.
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    ends = np.concatenate([starts[1:], [n]])
    for a, b in zip(starts, ends):
        out[a:b] = np.arange(b - a, 0, -1)
    return out


def power_of_two_bins(values) -> np.ndarray:
    """The bin of each positive integer: `floor(log2(v))`, i.e. 1 | 2-3 | 4-7 | 8-15 | ...
    (bin `b` covers `[2^b, 2^(b+1) - 1]`). int64."""
    v = _as_numpy(values).astype(np.int64)
    if v.size and v.min() < 1:
        raise ValueError(f"values must be integers >= 1, got min {v.min()}")
    out = np.zeros(v.shape, dtype=np.int64)
    rest = v.copy()
    while (rest > 1).any():
        more = rest > 1
        out[more] += 1
        rest[more] //= 2
    return out


def pointwise_information(log_q_taken, log_pi_taken) -> np.ndarray:
    """`i_t = log q(a_t|s_t,Z_t) - log pi(a_t|s_t)` in nats, per decision (float64).

    On decisions the classifier did not train on, its mean is a variational lower bound
    on `I(A; Z | S)` (`mutual_information`): exact when `q` is the true posterior, lower
    by `E[KL(h || q)]` otherwise (the bound's bias), and noisy."""
    return _as_numpy(log_q_taken).astype(np.float64) - _as_numpy(log_pi_taken).astype(np.float64)


def information_concentration(pointwise, threshold: float, top_fraction: float = 0.1) -> Dict[str, float]:
    """Where the information lives, from pointwise information `i_t`:

    - `share_above_threshold`: the share of decisions with `i_t > threshold` nats;
    - `top_share`: the share of the positive information (`sum_t max(i_t, 0)`) held by
      the `top_fraction` of decisions with the largest `i_t` (`top_fraction` when it is
      spread evenly, 1 when a few decisions hold all of it; NaN without positive
      information)."""
    x = np.asarray(pointwise, dtype=np.float64)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"pointwise information must be a non-empty 1-d array, got shape {x.shape}")
    if not 0.0 < top_fraction <= 1.0:
        raise ValueError(f"top_fraction must be in (0, 1], got {top_fraction}")
    positive = np.clip(x, 0.0, None)
    total = positive.sum()
    top = max(1, int(math.ceil(top_fraction * len(x))))
    top_share = float(np.sort(positive)[::-1][:top].sum() / total) if total > 0 else float("nan")
    return {"share_above_threshold": float((x > threshold).mean()), "top_share": top_share,
            "threshold": float(threshold), "top_fraction": float(top_fraction)}
