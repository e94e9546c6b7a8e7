"""The return outcome's report: `probe.md`, `probe.json` and the plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np


def _plots(result: Dict[str, Any], data_pointwise: Optional[Dict[str, np.ndarray]], out: Path) -> Dict[str, str]:
    from hca_rllib.report import make_figure

    files: Dict[str, str] = {}
    figure = make_figure(6.5, 4.0)
    ax = figure.add_subplot(1, 1, 1)
    names = [r["horizon"] for r in result["horizons"]]
    x = np.arange(len(names))
    mean = np.array([r["information"] for r in result["horizons"]])
    low = np.array([r["ci"][0] for r in result["horizons"]])
    high = np.array([r["ci"][1] for r in result["horizons"]])
    ax.errorbar(x, mean, yerr=[mean - low, high - mean], marker="o", capsize=4, label="all decisions")
    start = np.array([r["start_state"]["information"] for r in result["horizons"]])
    ax.plot(x, start, marker="s", linestyle="--", label="start state (t = 0)")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(x, names)
    ax.set_xlabel("return horizon K (steps; end: episode end)")
    ax.set_ylabel("I(A; Z | S), nats per decision")
    ax.set_title(f"{result['env']}: information against horizon")
    ax.grid(True, alpha=0.3)
    ax.legend()
    figure.tight_layout()
    figure.savefig(out / "information_horizon.png")
    files["horizon"] = "information_horizon.png"
    if data_pointwise is not None:
        values = data_pointwise[result["peak_horizon"]]
        figure = make_figure(6.5, 4.0)
        ax = figure.add_subplot(1, 1, 1)
        ax.hist(values, bins=60, log=True)
        ax.axvline(result["threshold"], color="tab:red", linestyle="--", label=f"threshold {result['threshold']:g}")
        ax.set_xlabel("pointwise information log q(a|s,Z) - log pi(a|s), nats")
        ax.set_ylabel("held-out decisions")
        ax.set_title(f"{result['env']}: pointwise information (horizon {result['peak_horizon']})")
        ax.legend()
        figure.tight_layout()
        figure.savefig(out / "pointwise_information.png")
        files["pointwise"] = "pointwise_information.png"
    return files


def fmt(x: Optional[float], digits: int = 4) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def ci_text(mean: Optional[float], ci, digits: int = 4) -> str:
    return f"{fmt(mean, digits)} [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def _share(share: Optional[float]) -> str:
    return "n/a" if share is None else f"{100 * share:.0f}%"


def _header(r: Dict[str, Any]) -> List[str]:
    lines = [f"# hca-rllib probe: {r['env']}", "",
             f"Policy: {r['policy']}. {r['episodes']:,} complete episodes ({r['decisions']:,} decisions, mean "
             f"length {r['mean_episode_length']:.1f}, mean return {r['mean_episode_return']:.3f}); "
             f"gamma {r['gamma']}; seed {r['seed']}; {r['split']['held_out_fraction']:.0%} of the episodes held "
             f"out ({r['split']['held_out_decisions']:,} decisions). {r['seconds']['total']:.0f} s.", ""]
    pr = r.get("policy_record")
    if pr is not None:
        lines += [f"Policy at the start state (t = 0, {pr['start_decisions']:,} decisions): mean probabilities "
                  + "[" + ", ".join(f"{v:.4f}" for v in pr["start_mean_probabilities"]) + "], actions taken "
                  + "[" + ", ".join(f"{v:.4f}" for v in pr["start_action_frequencies"]) + "].", ""]
    return lines


def _reading_section(r: Dict[str, Any]) -> List[str]:
    lines = ["## Reading", ""] + [f"- {t}" for t in r["reading"]["text"]]
    rows = r["reading"]["benchmark_rows"]
    if not rows:
        return lines
    modes = sorted({m for row in rows for m in row.get("credit_minus_a2c", {})})
    lines += ["", "Supporting benchmark rows (this probe, uniform policy; credit mode minus A2C from the "
              "learning benchmarks, normalised score, mean over paired seeds [95% CI]):", "",
              "| task | I (nats/decision) | " + " | ".join(modes) + " |", "|---|---:|" + "---:|" * len(modes)]
    for row in rows:
        cells = []
        for m in modes:
            d = row.get("credit_minus_a2c", {}).get(m)
            cells.append("n/a" if not d else f"{d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")
        lines.append(f"| {row['task']} | {fmt(row['information'])} | " + " | ".join(cells) + " |")
    return lines


def _horizon_section(r: Dict[str, Any]) -> List[str]:
    lines = ["", "## Information against the return horizon", "", r["bound"] + ".", "",
             "| horizon K | I(A; Z \\| S) [95% CI] | start state (t = 0) [95% CI] | on fit episodes | "
             f"share > {r['threshold']:g} nats | top 10% hold | fit epochs |",
             "|---|---|---|---:|---:|---:|---:|"]
    for h in r["horizons"]:
        c, s = h["concentration"], h["start_state"]
        top = "n/a" if c["top_share"] != c["top_share"] else f"{100 * c['top_share']:.0f}%"
        lines.append(f"| {h['horizon']} | {ci_text(h['information'], h['ci'])} | "
                     f"{ci_text(s['information'], s['ci'])} | "
                     f"{fmt(h['information_on_fit_episodes'])} | {100 * c['share_above_threshold']:.1f}% | "
                     f"{top} | {h['fit']['epochs']} |")
    return lines + ["", "![information against horizon](information_horizon.png)", ""]


def _end_section(end: Optional[Dict[str, Any]]) -> List[str]:
    if end is None:
        return []
    s = end["start_state"]
    lines = ["## Long horizon: the return to the episode's end", "",
             f"I(A; Z | S) with Z the return to the episode's end: {ci_text(end['information'], end['ci'])} "
             f"nats per decision; at the start state {ci_text(s['information'], s['ci'])}."]
    best, d = end.get("best_fragment"), end.get("end_minus_fragment")
    if best is not None and d is not None:
        lines += ["", f"Best fragment horizon K = {best['horizon']}: {ci_text(best['information'], best['ci'])}; "
                  f"end minus fragment, paired on the same held-out decisions: {d['mean']:+.4f} "
                  f"[{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}]."]
    lines += ["", "Against the steps left until the episode ends (the reach of the return to the end):", "",
              "| steps to the end | decisions | I, return to the end [95% CI] |"
              + (f" I, K = {best['horizon']} |" if best is not None else ""),
              "|---|---:|---|" + ("---:|" if best is not None else "")]
    for item in end["by_steps_to_end"]:
        lines.append(f"| {item['steps']} | {item['decisions']:,} | {ci_text(item['information'], item['ci'])} |"
                     + (f" {fmt(item.get('best_fragment_information'))} |" if best is not None else ""))
    return lines + [""]


def _where_section(r: Dict[str, Any]) -> List[str]:
    w = r["where"]
    lines = [f"## Where it lives (horizon {r['peak_horizon']})", "",
             "Time steps holding the most information (sum of pointwise information over held-out decisions):", "",
             "| time step | decisions | mean [95% CI] | share of the information |", "|---:|---:|---|---:|"]
    for item in w["time_steps"]:
        lines.append(f"| {item['key']} | {item['decisions']:,} | {ci_text(item['mean'], item['ci'])} | "
                     f"{_share(item['share_of_information'])} |")
    if w["states"]:
        lines += ["", f"States ({w['distinct_states']:,} distinct among the held-out decisions):", "",
                  "| state | decisions | mean [95% CI] | share of the information |", "|---|---:|---|---:|"]
        for item in w["states"]:
            lines.append(f"| `{item['key']}` | {item['decisions']:,} | {ci_text(item['mean'], item['ci'])} | "
                         f"{_share(item['share_of_information'])} |")
    else:
        lines += ["", f"States: {w['distinct_states']:,} distinct among "
                  f"{r['split']['held_out_decisions']:,} held-out decisions (they rarely repeat: no per-state table)."]
    return lines + ["", "![pointwise information](pointwise_information.png)", ""]


def markdown(result: Dict[str, Any]) -> str:
    return "\n".join(_header(result) + _reading_section(result) + _horizon_section(result)
                     + _end_section(result.get("episode_end")) + _where_section(result))


def _figure_row(name: str, figure: Optional[Dict[str, Any]], unit: str) -> str:
    if figure is None:
        return f"| {name} | n/a | n/a | n/a | 0 |"
    return (f"| {name} | {fmt(figure['information'])} | [{fmt(figure['ci'][0])}, {fmt(figure['ci'][1])}] | "
            f"[{fmt(figure['ci_bonferroni'][0])}, {fmt(figure['ci_bonferroni'][1])}] | {figure['n']:,} {unit} |")


def reward_markdown(r: Dict[str, Any]) -> str:
    """The reward outcome's report: the figures beside the return's, then per k."""
    lines = _header(r) + ["## Reading", ""] + [f"- {t}" for t in r["reading"]["text"]]
    p, reward, window = r["pairs"], r.get("reward"), r["window"]
    lines += ["", f"## The reward outcome beside the {window}-step return", "", r["bound"] + ".", "",
              f"Pairs (decision t, reward event t + k, r != 0, 0 <= k < {window}, one episode): {p['total']:,} in all, "
              f"{p['held_out']:,} held out ({p['held_out_per_decision']:.2f} per held-out decision).", "",
              f"| figure | nats | 95% CI | {100 * r['levels']['ci_bonferroni']:g}% CI (Bonferroni) | over |",
              "|---|---:|---|---|---:|",
              _figure_row(f"return over {window} steps, per decision", r["return"]["per_decision"], "decisions")]
    if reward is not None:
        lines += [_figure_row("reward outcome, per decision", reward["per_decision"], "decisions"),
                  _figure_row("reward outcome, per decision, k >= 1", reward["per_decision_delayed"], "decisions"),
                  _figure_row("reward outcome, per pair", reward["per_pair"], "pairs"),
                  _figure_row("reward outcome, per pair, k >= 1", reward["per_pair_delayed"], "pairs"),
                  _figure_row("reward outcome, reward-weighted (gamma^k abs(r))", reward["reward_weighted"], "pairs"),
                  _figure_row("reward minus return, per decision", r["reward_minus_return"], "decisions"),
                  "", f"Fits: reward outcome {reward['fit']['epochs']} epochs, {reward['fit']['updates']} updates, "
                  f"{fmt(reward['fit']['information_on_fit_rows'])} nats per pair on its fit pairs; return "
                  f"{r['return']['fit']['epochs']} epochs, {fmt(r['return']['fit']['information_on_fit_rows'])} "
                  "on its fit decisions.", "", "Per decision by lag band (the sum over a decision's pairs with "
                  "k in the band [95% CI]):", "", "| lags | pairs | information per decision |", "|---|---:|---|"]
        lines += [f"| {lo}-{hi - 1} | {row['pairs']:,} | {ci_text(row['information'], row['ci'])} |"
                  for row in reward.get("per_lag_band", []) for lo, hi in [row["lags"]]]
        lines += ["", "Per k (mean per pair [95% CI]):", "", "| k | pairs | information |", "|---:|---:|---|"]
        lines += [f"| {row['k']} | {row['pairs']:,} | {ci_text(row['information'], row['ci'])} |"
                  for row in reward["per_k"]]
    return "\n".join(lines + [""])


def write_probe_report(result: Dict[str, Any], out) -> Path:
    """`probe.md`, `probe.json` and the plots into directory `out`; returns probe.md's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if result.get("outcome") == "reward":
        serialisable = {k: v for k, v in result.items() if k != "data"}
        (out / "probe.json").write_text(json.dumps(serialisable, indent=1))
        (out / "probe.md").write_text(reward_markdown(serialisable))
        return out / "probe.md"
    data = result.get("data")
    files = _plots(result, None if data is None else data["pointwise"], out)
    serialisable = {k: v for k, v in result.items() if k != "data"}
    serialisable["figures"] = files
    (out / "probe.json").write_text(json.dumps(serialisable, indent=1))
    text = markdown(serialisable)
    if "pointwise" not in files:
        text = text.replace("![pointwise information](pointwise_information.png)\n", "")
    (out / "probe.md").write_text(text)
    return out / "probe.md"
