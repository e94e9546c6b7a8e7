"""What the return outcome's measurements say, by fixed rules (never per env): the level,
the concentration, the horizon, the long horizon, and the benchmark rows nearest in
information with their credit modes minus A2C."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

# Information levels, nats per decision (upper edges), for the reading.
LEVELS = ((1e-3, "very sparse"), (1e-2, "sparse"), (1e-1, "moderate"), (math.inf, "dense"))
BENCHMARK_SUMMARY = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "probe" / "summary.json"
NEAREST_ROWS = 4


def information_level(information: float, ci_low: float) -> str:
    if ci_low <= 0.0:
        return "none detectable"
    for edge, name in LEVELS:
        if information < edge:
            return name
    return LEVELS[-1][1]


def load_benchmark_rows(path) -> List[Dict[str, Any]]:
    """The benchmark rows the reading compares with: tasks probed by this probe (uniform
    policy) with their learning benchmarks' credit mode minus A2C (benchmarks/probe.py)."""
    if path is None:
        return []
    path = Path(path)
    if not path.exists():
        return []
    try:
        return list(json.loads(path.read_text()).get("rows", []))
    except (OSError, ValueError):
        return []


def _level_text(result: Dict[str, Any], peak: Dict[str, Any], level: str, shortest: str,
                out: Dict[str, Any]) -> List[str]:
    """The level line, then either why there is nothing or where the information is."""
    text = [f"Information: {peak['information']:.4f} nats per decision [95% CI {peak['ci'][0]:.4f}, "
            f"{peak['ci'][1]:.4f}] at horizon {peak['horizon']}: {level}."]
    if level == "none detectable":
        text.append("The classifier finds nothing the action tells about the return on held-out episodes: a "
                    "hindsight credit mode has nothing to add to A2C here (under this policy and budget).")
        if not any((h.get("fit") or {}).get("improved", True) for h in result["horizons"]):
            out["fit_never_improved"] = True
            text.append("No horizon's classifier beat its initial state (q = pi) on the validation episodes, so "
                        "the estimate is 0 by construction: a lower bound of 0, not a measured 0. More episodes "
                        "(--episodes, --max-steps) may find information this fit missed.")
        return text
    c = peak["concentration"]
    top = c["top_share"]
    spread = ("concentrated" if top is not None and top == top and top >= 0.5 else "spread out")
    held = "n/a" if top != top else f"{100 * top:.0f}%"
    text.append(f"Concentration: {100 * c['share_above_threshold']:.1f}% of decisions clear "
                f"{c['threshold']:g} nats; the top 10% of decisions hold {held} of the positive "
                f"information ({spread}).")
    if shortest == "end":
        text.append("Horizon: the information appears only in the return to the episode's end; training sees it "
                    "only with whole episodes (batch_mode='complete_episodes') or fragments longer "
                    "than the episodes.")
    else:
        text.append(f"Horizon: 80% of the peak information is in the next {shortest} step(s) of return; "
                    f"a rollout fragment of at least {shortest} steps carries it.")
    return text


def _end_text(end: Dict[str, Any], out: Dict[str, Any]) -> str:
    """The long-horizon line: the return to the end against the best fragment horizon."""
    out["end_information"], out["end_ci"] = end["information"], end["ci"]
    line = (f"Long horizon: the return to the episode's end holds {end['information']:.4f} nats per decision "
            f"[{end['ci'][0]:.4f}, {end['ci'][1]:.4f}]")
    d, best = end.get("end_minus_fragment"), end.get("best_fragment")
    if d is None or best is None:
        return line + "."
    out["end_minus_fragment"] = d
    line += (f"; the best fragment horizon, K = {best['horizon']}, {best['information']:.4f}; end minus "
             f"fragment {d['mean']:+.4f} [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}]")
    if d["ci"][0] > 0:
        return line + (f": the episode's end holds information no fragment of {best['horizon']} steps sees "
                       "(whole episodes, batch_mode='complete_episodes', or fragments longer than the episodes, reach it).")
    if d["ci"][1] < 0:
        return line + (f": less to the end than in {best['horizon']} steps (the longer sum adds noise); a "
                       f"fragment of {best['horizon']} steps is enough.")
    return line + ": no measurable difference."


def _benchmark_text(information: float, rows: Sequence[Dict[str, Any]], out: Dict[str, Any]) -> Optional[str]:
    """The `NEAREST_ROWS` benchmark rows nearest in log information and the best mode over them."""
    def key(value: float) -> float:
        return math.log10(max(value, 1e-5))

    here = key(information)
    near = sorted(rows, key=lambda r: abs(key(r["information"]) - here))[:NEAREST_ROWS]
    out["benchmark_rows"] = near
    modes: Dict[str, List[float]] = {}
    for row in near:
        for mode, diff in (row.get("credit_minus_a2c") or {}).items():
            if diff is not None and diff.get("mean") is not None:
                modes.setdefault(mode, []).append(diff["mean"])
    means = {mode: float(np.mean(v)) for mode, v in modes.items() if len(v) == len(near)}
    if not means:
        return None
    best = max(means, key=means.get)
    out["best_mode"] = best if means[best] > 0 else "a2c"
    out["mode_means"] = means
    names = ", ".join(r["task"] for r in near)
    if means[best] > 0:
        return (f"Benchmarks at similar information ({names}): {best} did best against A2C, a mean "
                f"difference of {means[best]:+.3f} (normalised score) over those rows.")
    return (f"Benchmarks at similar information ({names}): no credit mode beat A2C on average "
            f"(best {best}, {means[best]:+.3f}); use A2C.")


def reading(result: Dict[str, Any], rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """What the measurements say, by fixed rules (never per env):

    - level: the peak horizon's information per decision, `none detectable` when its CI
      reaches 0, else by `LEVELS` (nats per decision);
    - concentration: at the peak horizon, the share of decisions above `threshold` and the
      share of the positive information held by the top 10% of decisions;
    - horizon: the shortest horizon that reaches 80% of the peak information (the return
      training's classifier sees must reach that far: `rollout_fragment_length` at least
      that, or whole episodes, `batch_mode="complete_episodes"`, for `end`);
    - benchmarks: the `NEAREST_ROWS` benchmark rows (tasks this probe measured under the
      uniform policy) nearest in log information, their credit modes minus A2C, and the
      mode with the best mean difference over them (A2C when none is above 0)."""
    peak = next(r for r in result["horizons"] if r["horizon"] == result["peak_horizon"])
    level = information_level(peak["information"], peak["ci"][0])
    threshold_value = 0.8 * peak["information"]
    shortest = next((r["horizon"] for r in result["horizons"] if r["information"] >= threshold_value),
                    peak["horizon"])
    c = peak["concentration"]
    out: Dict[str, Any] = {"level": level, "information": peak["information"], "ci": peak["ci"],
                           "peak_horizon": peak["horizon"], "shortest_horizon_80": shortest,
                           "share_above_threshold": c["share_above_threshold"], "top10_share": c["top_share"],
                           "benchmark_rows": [], "best_mode": None, "text": []}
    text = _level_text(result, peak, level, shortest, out)
    end = result.get("episode_end")
    if end is not None:
        text.append(_end_text(end, out))
    if rows:
        line = _benchmark_text(peak["information"], rows, out)
        if line is not None:
            text.append(line)
    else:
        text.append("No benchmark rows found (benchmarks/results/probe/summary.json): no comparison.")
    out["text"] = text
    return out


def detected(figure: Optional[Dict[str, Any]], fit: Optional[Dict[str, Any]] = None) -> bool:
    """Whether a figure's Bonferroni CI excludes 0 from above, from a classifier that beat
    its initial state (one that did not reads 0 by construction)."""
    return figure is not None and figure["ci_bonferroni"][0] > 0.0 and (fit is None or bool(fit["improved"]))


def _figure(figure: Dict[str, Any], unit: str) -> str:
    lo, hi = figure["ci"]
    blo, bhi = figure["ci_bonferroni"]
    return f"{figure['information']:+.4f} nats {unit} [95% CI {lo:+.4f}, {hi:+.4f}; Bonferroni {blo:+.4f}, {bhi:+.4f}]"


def reward_reading(result: Dict[str, Any]) -> Dict[str, Any]:
    """The reward outcome's reading, by fixed rules: each outcome is detected when its
    Bonferroni CI (over the outcomes tried) excludes 0; the reward outcome by its mean per
    pair, the return by its mean per decision."""
    window, ret, reward = result["window"], result["return"], result.get("reward")
    text = [f"Return over {window} steps: {_figure(ret['per_decision'], 'per decision')}."]
    out: Dict[str, Any] = {"return_detected": detected(ret["per_decision"], ret["fit"]), "reward_detected": False,
                           "text": text}
    if reward is None:
        text.append(f"Reward outcome: no (decision, reward event) pair within {window} steps in the fit or held-out "
                    "episodes: nothing to measure (more steps, or a longer window).")
        return out
    out["reward_detected"] = detected(reward["per_pair"], reward["fit"])
    text.append(f"Reward outcome (each reward event r != 0 within {window} steps): "
                f"{_figure(reward['per_pair'], 'per (decision, reward event) pair')}; "
                f"{_figure(reward['per_decision'], 'per decision')}; reward-weighted "
                f"{reward['reward_weighted']['information']:+.4f}.")
    delayed = reward.get("per_pair_delayed")
    if delayed is not None:
        out["delayed_detected"] = detected(delayed, reward["fit"])
        text.append(f"Delayed rewards only (k >= 1, the terms a per-reward credit estimator takes from h): "
                    f"{_figure(delayed, 'per pair')}.")
    d = result["reward_minus_return"]
    text.append(f"Reward minus return, per decision, paired on the same held-out decisions: {d['information']:+.4f} "
                f"[{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}].")
    if out["reward_detected"] and not out["return_detected"]:
        text.append("The reward outcome finds information the return does not show: a per-reward credit mode has "
                    "something to work with here that the return's classifier misses.")
    elif out["reward_detected"]:
        text.append("Both outcomes carry information; compare their per-decision figures.")
    elif out["return_detected"]:
        text.append("The return carries information the reward outcome does not show at this budget.")
    else:
        text.append("Neither outcome carries information detectable at this budget (a lower bound: more data or a "
                    "better classifier may find some; compare with the probe's detection floor).")
    if not reward["fit"]["improved"]:
        text.append("The reward outcome's classifier never beat its initial state (h = pi) on the validation pairs: "
                    "a lower bound of 0 by construction, not a measured 0.")
    return out
