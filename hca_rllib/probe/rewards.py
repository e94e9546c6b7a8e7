"""The reward outcome, measured beside the return on the same decisions.

Per held-out (decision, reward event) pair, the pointwise information `log h(a_t | s_t,
u_{t+k}, k) - log pi(a_t | s_t)`, and from it:

- per pair: its mean over the held-out pairs (all `k`, and the delayed ones, `k >= 1`,
  the terms a per-reward credit estimator would take from `h`; `k = 0` is the immediate
  reward, which it samples);
- per `k`;
- per decision by lag band (`lag_bands`: k = 0, 1-7, 8-31, 32-63, ...): how the
  information a decision holds spreads over the window, so that a reading at a long
  window says what the lags past a shorter one add;
- reward-weighted over the window: `sum w i / sum w` with `w = gamma^k |r_{t+k}|`, each
  pair's weight in the estimator's sum;
- per decision: the sum over a decision's pairs divided by the number of held-out
  decisions (a decision without a reward event in its window adds 0), comparable with
- the `W`-step return's information per decision, from a classifier of the same class
  fitted on the same fit episodes and read on the same held-out decisions, and the
  paired difference of the two per decision.

Every figure carries a 95% CI by a bootstrap over held-out episodes, and a second one at
the Bonferroni level over the outcomes tried (`1 - 0.05 / 2`: the return and the reward).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import numpy as np

from hca_rllib import credit, stats
from hca_rllib.probe.outcomes import (OutcomeRows, build_outcome_classifier, fit_outcome_classifier, outcome_features,
                                      pair_weights, reward_pairs, standardiser)
from hca_rllib.probe.settings import ProbeSettings
from hca_rllib.probe.target import ProbeTarget

OUTCOMES_TRIED = 2  # the return and the reward: the Bonferroni correction's count
LEVEL = 0.95
BONFERRONI_LEVEL = 1.0 - (1.0 - LEVEL) / OUTCOMES_TRIED
PER_K_REPS = 1000
BOUND = ("held-out mean of log h(a|s,u,k) - log pi(a|s) over (decision, reward event) pairs: a variational "
         "lower bound, low by E[KL(posterior || h)]; CIs: percentile bootstrap over held-out episodes, 95% and "
         f"{100 * BONFERRONI_LEVEL:g}% (Bonferroni over {OUTCOMES_TRIED} outcomes)")


def estimate(values: np.ndarray, clusters: np.ndarray, weights=None, reps: int = 10_000) -> Dict[str, Any]:
    """Mean (or `weights`-weighted mean) with its 95% and Bonferroni CIs over episodes."""
    weights = np.ones(len(values)) if weights is None else weights
    point, (ci, bonferroni) = stats.cluster_bootstrap_ratio_ci(np.asarray(values) * weights, weights, clusters,
                                                               levels=(LEVEL, BONFERRONI_LEVEL), reps=reps)
    return {"information": point, "ci": list(ci), "ci_bonferroni": list(bonferroni), "n": int(len(values))}


def lag_bands(window: int) -> list:
    """`[(lo, hi), ...]`: the lags `lo <= k < hi` of each band, `k = 0` alone, then `1-7`,
    `8-31` and bands doubling from 32, the last ending at `window`."""
    edges = [0, 1, 8, 32]
    while edges[-1] < window:
        edges.append(2 * edges[-1])
    edges = [e for e in edges if e < window] + [window]
    return list(zip(edges[:-1], edges[1:]))


def _fit_and_read(target: ProbeTarget, settings: ProbeSettings, rows: OutcomeRows, fit_rows, val_rows, held_rows,
                  num_features: int) -> Tuple[np.ndarray, Dict[str, Any]]:
    """A fresh classifier fitted on `fit_rows`; the held-out pointwise values and the record
    (with the mean on the fit rows, to see overfitting)."""
    import torch

    torch.manual_seed(settings.seed)
    classifier = build_outcome_classifier(target.info.module_observation_space, target.info.action_space,
                                          target.model_config, num_features)
    record = fit_outcome_classifier(classifier, rows, fit_rows, val_rows, seed=settings.seed, fit=settings.fit)
    record.pop("validation_history")
    record["information_on_fit_rows"] = float(np.mean(rows.pointwise(classifier, fit_rows))) if len(fit_rows) else 0.0
    return rows.pointwise(classifier, held_rows), record


def _split_pairs(pairs: Dict[str, np.ndarray], episode_ids: np.ndarray, split) -> Dict[str, np.ndarray]:
    """The pair rows of the fit, validation and held-out episodes (by the decision's episode)."""
    episode = episode_ids[pairs["decision"]]
    return {part: np.flatnonzero(np.isin(episode, split[f"{part}_ids"]))
            for part in ("fit", "validation", "held_out")}


def measure_reward_pairs(target, settings, data, split, say) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """The reward outcome's classifier and its held-out pointwise values per pair."""
    rewards, ep = data["rewards"], data["episode_ids"]
    pairs = reward_pairs(rewards, ep, settings.window)
    parts = _split_pairs(pairs, ep, split)
    if len(parts["fit"]) == 0 or len(parts["held_out"]) == 0:
        return {"pairs": pairs, "parts": parts, "fit": None}, {"pointwise": np.zeros(0)}
    scale = standardiser(rewards[pairs["event"][parts["fit"]]])
    features = outcome_features(rewards[pairs["event"]], scale, pairs["k"], settings.window)
    rows = OutcomeRows(data, pairs["decision"], features)
    say(f"reward outcome: {len(pairs['k']):,} (decision, reward event) pairs in a window of {settings.window}, "
        f"fit {len(parts['fit']):,}, validation {len(parts['validation']):,}, held out {len(parts['held_out']):,}")
    pointwise, record = _fit_and_read(target, settings, rows, parts["fit"], parts["validation"], parts["held_out"],
                                      features.shape[1])
    return {"pairs": pairs, "parts": parts, "fit": record, "scale": scale}, {"pointwise": pointwise}


def measure_window_return(target, settings, data, split) -> Tuple[np.ndarray, Dict[str, Any]]:
    """The `W`-step return through the same classifier class, on the same split."""
    returns = credit.horizon_returns(data["rewards"], data["episode_ids"], settings.gamma, settings.window)
    features = outcome_features(returns, standardiser(returns[split["fit"]]))
    rows = OutcomeRows(data, np.arange(len(returns)), features)
    return _fit_and_read(target, settings, rows, split["fit"], split["validation"], split["held_out"], 1)


def reward_estimates(settings: ProbeSettings, data, split, measured, pointwise
                     ) -> Tuple[Dict[str, Any], np.ndarray]:
    """Per pair (all k; k >= 1), reward-weighted, per decision (all k; k >= 1) and per k;
    and the per-decision values (all k) on the held-out decisions."""
    pairs, held = measured["pairs"], measured["parts"]["held_out"]
    decision, k = pairs["decision"][held], pairs["k"][held]
    clusters = data["episode_ids"][decision]
    out: Dict[str, Any] = {"per_pair": estimate(pointwise, clusters)}
    delayed = k >= 1
    out["per_pair_delayed"] = estimate(pointwise[delayed], clusters[delayed]) if delayed.any() else None
    weights = pair_weights(data["rewards"], {"k": k, "event": pairs["event"][held]}, settings.gamma)
    out["reward_weighted"] = estimate(pointwise, clusters, weights=weights)
    rows = split["held_out"]
    position = np.searchsorted(rows, decision)  # held-out decision rows are sorted
    per_decision = np.bincount(position, weights=pointwise, minlength=len(rows))
    out["per_decision"] = estimate(per_decision, data["episode_ids"][rows])
    delayed_per_decision = np.bincount(position[delayed], weights=pointwise[delayed], minlength=len(rows))
    out["per_decision_delayed"] = estimate(delayed_per_decision, data["episode_ids"][rows])
    out["per_lag_band"] = []
    for lo, hi in lag_bands(settings.window):
        members = (k >= lo) & (k < hi)
        band = np.bincount(position[members], weights=pointwise[members], minlength=len(rows))
        out["per_lag_band"].append({"lags": [lo, hi], "pairs": int(members.sum()),
                                    **estimate(band, data["episode_ids"][rows], reps=PER_K_REPS)})
    out["per_k"] = []
    for lag in range(settings.window):
        members = k == lag
        if members.any():
            e = estimate(pointwise[members], clusters[members], reps=PER_K_REPS)
            out["per_k"].append({"k": lag, "pairs": int(members.sum()), "information": e["information"],
                                 "ci": e["ci"]})
    return out, per_decision


def _reward_values(values: np.ndarray) -> Dict[str, Any]:
    """How many distinct reward values the pairs hold, and the values when at most 10."""
    distinct = np.unique(values)
    return {"distinct_rewards": int(len(distinct)),
            "reward_values": [float(v) for v in distinct] if len(distinct) <= 10 else None}


def reward_outcome(target: ProbeTarget, settings: ProbeSettings, data: Dict[str, Any], split: Dict[str, np.ndarray],
                   say: Callable[[str], None]) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """The reward outcome's figures beside the `W`-step return's (the result's own part:
    `run_probe` adds what every outcome's result holds), and the held-out values."""
    measured, values = measure_reward_pairs(target, settings, data, split, say)
    return_pointwise, return_record = measure_window_return(target, settings, data, split)
    rows = split["held_out"]
    pairs, parts = measured["pairs"], measured["parts"]
    result: Dict[str, Any] = {
        "outcome": "reward", "window": settings.window, "outcomes_tried": OUTCOMES_TRIED,
        "levels": {"ci": LEVEL, "ci_bonferroni": BONFERRONI_LEVEL},
        "pairs": {"total": int(len(pairs["k"])), **{part: int(len(r)) for part, r in parts.items()},
                  "held_out_per_decision": float(len(parts["held_out"]) / max(len(rows), 1)),
                  **_reward_values(data["rewards"][pairs["event"]])}}
    returns = {"horizon": settings.window, "per_decision": estimate(return_pointwise, data["episode_ids"][rows]),
               "fit": return_record}
    result["return"] = returns
    if measured["fit"] is None:
        result["reward"] = None
        say("reward outcome: no reward event in a held-out or fit window: nothing to measure")
    else:
        reward, per_decision = reward_estimates(settings, data, split, measured, values["pointwise"])
        reward["fit"], reward["scale"] = measured["fit"], measured["scale"]
        result["reward"] = reward
        result["reward_minus_return"] = estimate(per_decision - return_pointwise, data["episode_ids"][rows])
        values["per_decision"] = per_decision
    values["return"] = return_pointwise
    return result, values
