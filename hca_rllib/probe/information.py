"""The information estimates from held-out pointwise values `log q - log pi`: per return
horizon (mean, bootstrap CI, the start state, concentration), where it lives (time steps,
repeated states), and the return to the episode's end beside the fragment horizons."""

from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from hca_rllib import credit, stats


def mean_ci(values: np.ndarray, episodes: np.ndarray, reps: int = stats.BOOTSTRAP_REPS) -> Dict[str, Any]:
    """`{"information": mean, "ci": [low, high]}`, the CI by a bootstrap over episodes."""
    mean, low, high = stats.cluster_bootstrap_mean_ci(values, episodes, reps=reps)
    return {"information": mean, "ci": [low, high]}


def horizon_estimate(pointwise: np.ndarray, episodes: np.ndarray, time_steps: np.ndarray,
                     pointwise_fit: np.ndarray, threshold: float) -> Dict[str, Any]:
    """One horizon's row: the held-out mean with its CI, the same on the fit episodes (to see
    overfitting), the concentration, and the start state's (t = 0) mean with its CI."""
    row = {**mean_ci(pointwise, episodes), "information_on_fit_episodes": float(np.mean(pointwise_fit)),
           "concentration": credit.information_concentration(pointwise, threshold)}
    start = time_steps == 0
    row["start_state"] = {**mean_ci(pointwise[start], episodes[start], reps=4000), "decisions": int(start.sum())}
    return row


def describe_state(obs: np.ndarray) -> str:
    flat = obs.ravel()
    if flat.size <= 16:
        return "[" + ", ".join(f"{v:g}" for v in flat.tolist()) + "]"
    return f"obs #{zlib.crc32(obs.tobytes()) % 10**8:08d}"


def _group_rows(pointwise: np.ndarray, episodes: np.ndarray, keys: np.ndarray, describe, top: int,
                positive_total: float) -> List[Dict[str, Any]]:
    """The `top` groups of `keys` holding the most information (sum), each with its mean and CI."""
    unique, index = np.unique(keys, return_inverse=True)
    sums = np.bincount(index, weights=pointwise)
    items = []
    for g in np.argsort(-sums)[:top]:
        members = index == g
        mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise[members], episodes[members], reps=2000)
        items.append({"key": describe(unique[g], members), "decisions": int(members.sum()),
                      "mean": mean, "ci": [low, high],
                      "share_of_information": (float(sums[g]) / positive_total if positive_total > 0 else None)})
    return items


def where(pointwise: np.ndarray, data: Dict[str, Any], rows: np.ndarray, top: int = 5) -> Dict[str, Any]:
    """The time steps and (repeated) states that hold most of the held-out information."""
    episodes, t = data["episode_ids"][rows], data["time_steps"][rows]
    positive_total = float(np.clip(pointwise, 0, None).sum())
    out: Dict[str, Any] = {"time_steps": [], "states": [], "distinct_states": None}
    out["time_steps"] = _group_rows(pointwise, episodes, t, lambda key, members: int(key), top, positive_total)
    flat = data["obs"][rows].reshape(len(rows), -1)
    keys = np.array([row.tobytes() for row in flat], dtype=object)
    distinct = len(set(keys.tolist()))
    out["distinct_states"] = distinct
    if distinct <= 0.5 * len(rows):  # states repeat: a per-state table means something
        first: Dict[bytes, int] = {}
        for i, k in enumerate(keys.tolist()):
            first.setdefault(k, i)
        codes = np.array([first[k] for k in keys.tolist()])
        out["states"] = _group_rows(pointwise, episodes, codes,
                                    lambda key, members: describe_state(data["obs"][rows][int(key)]), top,
                                    positive_total)
    return out


def episode_end_information(per_horizon: Sequence[Dict[str, Any]], pointwise: Dict[str, np.ndarray],
                            episodes: np.ndarray, steps_to_end: np.ndarray) -> Optional[Dict[str, Any]]:
    """The long horizon apart from the fragment horizons: the information in the return to
    the episode's end (horizon `end`), the best fragment horizon K beside it, their paired
    difference (the same held-out decisions; bootstrap over episodes), and the end
    horizon's information against the steps left until the episode ends (bins 1, 2-3,
    4-7, ...; the return to the end reaches that far). None without an `end` horizon."""
    end = next((r for r in per_horizon if r["horizon"] == "end"), None)
    if end is None:
        return None
    fragments = [r for r in per_horizon if r["horizon"] != "end"]
    best = max(fragments, key=lambda r: r["information"]) if fragments else None
    out: Dict[str, Any] = {"information": end["information"], "ci": end["ci"], "start_state": end["start_state"],
                           "best_fragment": None, "end_minus_fragment": None, "by_steps_to_end": []}
    if best is not None:
        out["best_fragment"] = {"horizon": best["horizon"], "information": best["information"], "ci": best["ci"]}
        mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise["end"] - pointwise[best["horizon"]], episodes)
        out["end_minus_fragment"] = {"mean": mean, "ci": [low, high]}
    bins = credit.power_of_two_bins(steps_to_end)
    for b in np.unique(bins):
        members = bins == b
        lo, hi = 2 ** int(b), min(2 ** (int(b) + 1) - 1, int(steps_to_end[members].max()))
        mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise["end"][members], episodes[members], reps=1000)
        item = {"steps": str(lo) if lo == hi else f"{lo}-{hi}", "low": lo, "high": hi,
                "decisions": int(members.sum()), "information": mean, "ci": [low, high]}
        if best is not None:
            item["best_fragment_information"] = float(np.mean(pointwise[best["horizon"]][members]))
        out["by_steps_to_end"].append(item)
    return out
