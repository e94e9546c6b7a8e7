"""The reward outcome's pieces: the (decision, reward event) pairs, their weights, and the
probe's own outcome classifier `h(a | s, u, k)` with its fit.

The reward outcome conditions on each reward `u = r_{t+k}` within a window of `W` steps
after the decision `t` (`k = 0 .. W-1`, the rewards the `W`-step return sums), not on
their sum. A zero reward adds no weight to the credit estimator's sum over rewards
(`W[t, a] = sum_k gamma^k r_{t+k} (h_k(a | s_t, u_{t+k}) - pi(a | s_t))`), so only the
pairs with `r_{t+k} != 0` in the same episode are needed. `u` is the reward itself (a
scalar that fixes it exactly; never bins). One classifier is pooled over `k`, which
enters as a one-hot input.

The classifier is the hindsight head's architecture, built here so that it can take any
outcome: its own torso of the training network's shape (`module.Torso` with the env
family's model config), an MLP `f` on `[latent, outcome features]`, and
`logits = log pi(.|s) + f` with `f`'s last layer at zero, so that `h == pi` before the
fit (an unfitted classifier reads 0 nats). The `W`-step return, read beside the reward
outcome on the same decisions, goes through the same class with one feature (the
standardised return).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from hca_rllib.probe.classifier import fit_early_stopped

HIDDENS = (128, 128)
CLIP = 10.0  # standardised features are clipped to +-CLIP, as the module's return encoder


def reward_pairs(rewards, episode_ids, window: int) -> Dict[str, np.ndarray]:
    """Every (decision `t`, reward event `t + k`) with `0 <= k < window`, both in one
    episode (episodes contiguous, as `collect_rollouts` returns them) and `r_{t+k} != 0`.
    Returns int64 arrays `decision`, `event`, `k`, sorted by decision then `k`."""
    r = np.asarray(rewards, dtype=np.float64)
    ids = np.asarray(episode_ids)
    if r.ndim != 1 or r.shape != ids.shape:
        raise ValueError(f"rewards {r.shape} and episode_ids {ids.shape} must be 1-d of one length")
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    n = len(r)
    decisions, lags = [], []
    for k in range(min(int(window), n)):
        t = np.arange(n - k)
        keep = (ids[t] == ids[t + k]) & (r[t + k] != 0.0)
        decisions.append(t[keep])
        lags.append(np.full(int(keep.sum()), k))
    decision = np.concatenate(decisions) if decisions else np.zeros(0, np.int64)
    k = np.concatenate(lags) if lags else np.zeros(0, np.int64)
    order = np.lexsort((k, decision))
    decision, k = decision[order].astype(np.int64), k[order].astype(np.int64)
    return {"decision": decision, "event": decision + k, "k": k}


def pair_weights(rewards, pairs: Dict[str, np.ndarray], gamma: float) -> np.ndarray:
    """`gamma^k |r_{t+k}|`: each pair's weight in the estimator's sum over the window."""
    return gamma ** pairs["k"].astype(np.float64) * np.abs(np.asarray(rewards, np.float64)[pairs["event"]])


def standardiser(values: np.ndarray) -> Dict[str, float]:
    """Mean and std (floored at 1e-6) of the fit rows' values."""
    values = np.asarray(values, dtype=np.float64)
    return {"mean": float(values.mean()) if len(values) else 0.0,
            "std": max(float(values.std()) if len(values) > 1 else 1.0, 1e-6)}


def outcome_features(values: np.ndarray, scale: Dict[str, float], k: Optional[np.ndarray] = None,
                     window: int = 0) -> np.ndarray:
    """The classifier's outcome input: the standardised value, clipped, beside a one-hot
    of `k` (width `window`) when `k` is given. float32 `[n, 1 + window]`."""
    z = np.clip((np.asarray(values, np.float64) - scale["mean"]) / scale["std"], -CLIP, CLIP)
    columns = [z[:, None]]
    if k is not None:
        columns.append(np.eye(window)[np.asarray(k)])
    return np.concatenate(columns, axis=1).astype(np.float32)


def build_outcome_classifier(observation_space, action_space, model_config: Dict[str, Any], num_features: int,
                             hiddens=HIDDENS):
    """A fresh `OutcomeClassifier` (torch is imported on first use)."""
    import torch

    from hca_rllib.module import Torso, default_model_config

    class OutcomeClassifier(torch.nn.Module):
        """`h(a | s, u) = softmax(log pi(.|s) + f([torso(s), features(u)]))`."""

        def __init__(self):
            super().__init__()
            config = {**default_model_config(observation_space, model_config), **model_config}
            self.torso = Torso(observation_space, config)
            layers, width = [], self.torso.output_dim + num_features
            for hidden in hiddens:
                layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
                width = hidden
            layers.append(torch.nn.Linear(width, int(action_space.n)))
            self.f = torch.nn.Sequential(*layers)
            for layer in self.f:
                if isinstance(layer, torch.nn.Linear):
                    torch.nn.init.orthogonal_(layer.weight, 2 ** 0.5)
                    torch.nn.init.zeros_(layer.bias)
            torch.nn.init.zeros_(self.f[-1].weight)  # h == pi before the fit

        def forward(self, obs, log_pi, features):
            return log_pi + self.f(torch.cat([self.torso(obs), features], dim=-1))

    return OutcomeClassifier()


class OutcomeRows:
    """The classifier's rows: row `j` is decision `decision[j]` (its frame, `log pi` and
    action) with outcome features `features[j]`. Frames are gathered per batch, never
    copied per row (an Atari frame stack is 28 KB)."""

    def __init__(self, data: Dict[str, Any], decision: np.ndarray, features: np.ndarray):
        self.data, self.decision, self.features = data, np.asarray(decision), features

    def logits(self, classifier, rows: np.ndarray):
        import torch

        d = self.decision[rows]
        return classifier(torch.as_tensor(self.data["obs"][d]), torch.as_tensor(self.data["log_pi"][d]).float(),
                          torch.as_tensor(self.features[rows]))

    def actions(self, rows: np.ndarray):
        import torch

        return torch.as_tensor(self.data["actions"][self.decision[rows]])

    def pointwise(self, classifier, rows: np.ndarray, batch_size: int = 2048) -> np.ndarray:
        """`log h(a_t | s_t, u) - log pi(a_t | s_t)` of the taken actions, no gradient. `pi`
        is read in the classifier's own precision (float32 logits), so that an unfitted
        classifier (`f == 0`) gives exactly 0, not float noise."""
        import torch

        out = []
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                part = rows[start:start + batch_size]
                actions = self.actions(part).unsqueeze(-1)
                log_h = torch.log_softmax(self.logits(classifier, part).double(), -1).gather(-1, actions)
                prior = torch.as_tensor(self.data["log_pi"][self.decision[part]]).float().double()
                log_pi = torch.log_softmax(prior, -1).gather(-1, actions)
                out.append((log_h - log_pi).squeeze(-1).numpy())
        return np.concatenate(out) if out else np.zeros(0)


def fit_outcome_classifier(classifier, rows: OutcomeRows, fit_rows: np.ndarray, val_rows: np.ndarray,
                           seed: int = 0, fit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Cross-entropy on the fit rows, early stopping on the validation rows' mean
    information (`classifier.fit_early_stopped`)."""
    import torch

    def batch_loss(batch: np.ndarray):
        return torch.nn.functional.cross_entropy(rows.logits(classifier, batch), rows.actions(batch))

    def validation_information() -> float:
        return float(np.mean(rows.pointwise(classifier, val_rows))) if len(val_rows) else 0.0

    return fit_early_stopped(classifier, list(classifier.parameters()), batch_loss, validation_information,
                             fit_rows, seed=seed, fit=fit)
