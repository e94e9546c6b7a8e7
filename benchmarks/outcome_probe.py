"""The probe on every outcome, under trained policies: is there information for a per-reward credit mode?

For each task (the five MinAtar games, then Atari Breakout and Pong) and each policy (uniform
random, and A2C's checkpoints along its learning curve from `benchmarks/policy_checkpoints.py`:
MinAtar at 50k, 200k, 500k and 1M env steps, Atari at 100k, 400k, 1M and 2M agent steps),
`hca_rllib.probe.probe(outcome="reward", window=32)`: the held-out information of the
reward outcome `h(a | s_t, u_{t+k}, k)` per (decision, reward event) pair, per decision and
per k, beside the 32-step return's per decision on the same decisions (`docs/method.md`;
`hca_rllib/probe/rewards.py`). One JSON per reading under `--out`; a reading already there is
not run again (a killed run resumes).

`--floor`: the probe's detection floor. On two known-answer families with closed-form
information, at several budgets (held-out pairs) and seeds, the smallest per-pair
information whose Bonferroni CI excludes 0:

- `bandit`: the ambiguous bandit (one step, one reward event per decision, every pair
  informative alike; `p_hi_a` set for the level, `bandit_mutual_information`);
- `delayed`: the delayed effect of length 8 (44 pairs per episode, one informative: the
  final reward's sign against the first action, `binary_shift_information(2, noise)`),
  window 32; the level is the mean over all pairs, `I / 44`.

The summary (`summary.md`, `summary.json`) states each reading beside the floor at its
number of held-out pairs, and a verdict: information in the reward outcome above the floor
where the return carries none.

    nice -n 10 .venv/bin/python benchmarks/outcome_probe.py --tasks minatar_breakout --policies uniform,50000
    nice -n 10 .venv/bin/python benchmarks/outcome_probe.py                 # every task and policy available
    nice -n 10 .venv/bin/python benchmarks/outcome_probe.py --floor         # the detection floor
    .venv/bin/python benchmarks/outcome_probe.py --report-only
    .venv/bin/python benchmarks/outcome_probe.py --quick                    # smoke test: a temp dir
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# The probe's own window and held-out fraction (--report-only imports the package anyway, through common).
from hca_rllib.probe import DEFAULT_WINDOW as WINDOW, HELD_OUT_FRACTION, probe  # noqa: E402
from hca_rllib.probe.reading import detected  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
DEFAULT_OUT = RESULTS / "outcome_probe"
CHECKPOINTS = REPO / "runs" / "policy_checkpoints"
SEED = 0
MINATAR = ("Breakout", "SpaceInvaders", "Asterix", "Freeway", "Seaquest")
ATARI = ("Breakout", "Pong")
# Budgets: steps of the policy per reading (complete episodes only). Freeway's episodes are
# 2,500 steps, so it gets more; Atari's frames are 28 KB a decision (60k: 1.7 GB), and an
# update of the Nature CNN takes ~0.2 s at batch 128 on one core: fewer, smaller updates.
TASKS: Dict[str, Dict[str, Any]] = {
    **{f"minatar_{g.lower()}": {"env": f"minatar/{g}", "max_steps": 100_000, "fit": {}} for g in MINATAR},
    **{f"atari_{g.lower()}": {"env": f"atari/{g}", "max_steps": 40_000, "fit": {"max_updates": 1000, "batch_size": 128}}
       for g in ATARI},
}
TASKS["minatar_freeway"]["max_steps"] = 200_000
TASKS["atari_pong"]["max_steps"] = 60_000  # a game is one episode of ~1,000 agent steps
MAX_EPISODES = 1_000_000  # the step budget binds
# The floor: per-pair information levels, held-out pair budgets and seeds.
FLOOR_LEVELS = {"bandit": (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05),
                "delayed": (0.0005, 0.001, 0.002, 0.005, 0.01)}
FLOOR_BUDGETS = (1_000, 4_000, 16_000)
FLOOR_SEEDS = (0, 1)
DELAYED_LENGTH = 8
DELAYED_PAIRS_PER_EPISODE = DELAYED_LENGTH + DELAYED_LENGTH * (DELAYED_LENGTH + 1) // 2  # start's + the chain's
# Variants of chosen readings (`--variant`), stored apart: a gentler fit than the default
# (`hca_rllib.probe.settings.FIT`: Adam 1e-3, patience 4), so that an outcome that reads 0
# because its fit stopped at h = pi gets a second chance; and a longer collection.
# `long`: three times the steps (Atari: the default budget's floor is 0.01 nats per pair; 120k
# Breakout steps hold 3.4 GB of frames, twice that while they are stacked).
# `window128`: a window of 128 steps (twice MinAtar's 64-step fragments, 25 Atari fragments of
# 5 steps), what a credit window kept across fragments would see; its lag bands say what the
# lags past 32 add.
GENTLE_FIT = {"lr": 3e-4, "patience": 8}
VARIANTS = {"default": {}, "gentle": {"fit": GENTLE_FIT}, "long": {"steps": 3},
            "window128": {"window": 128}, "window128_gentle": {"window": 128, "fit": GENTLE_FIT}}
# --quick: one task, the uniform policy, a tiny budget; one floor cell.
QUICK = {"task": "minatar_breakout", "max_steps": 3_000, "fit": {"max_updates": 40},
         "floor": ("bandit", 0.05, 1_000, 0)}


# ------------------------------------------------------------------ the readings


def policies(task: str, root: Path = CHECKPOINTS) -> Dict[str, Dict[str, Any]]:
    """`uniform` and each mark A2C's checkpoint job has finished for the task (marks.json)."""
    out: Dict[str, Dict[str, Any]] = {"uniform": {"checkpoint": None, "env_steps": 0, "score": None}}
    marks = root / f"{task}_seed0" / "marks.json"
    if marks.exists():
        for mark, entry in sorted(json.loads(marks.read_text())["marks"].items(), key=lambda item: int(item[0])):
            path = marks.parent / entry["checkpoint"]
            if path.exists():
                out[mark] = {"checkpoint": str(path), "env_steps": entry["env_steps"], "score": entry.get("score")}
    return out


def compact(result: Dict[str, Any]) -> Dict[str, Any]:
    """The probe's result without the episode id lists."""
    return {**result, "split": {k: v for k, v in result["split"].items() if not k.endswith("_episodes")}}


def run_reading(task: str, policy: str, spec: Dict[str, Any], entry: Dict[str, Any], variant: str,
                torch_threads: int) -> Dict[str, Any]:
    started = time.time()
    fit = {**spec["fit"], **VARIANTS[variant].get("fit", {})}
    max_steps = spec["max_steps"] * VARIANTS[variant].get("steps", 1)
    window = VARIANTS[variant].get("window", WINDOW)
    result = probe(spec["env"] if entry["checkpoint"] is None else None, checkpoint=entry["checkpoint"],
                   outcome="reward", window=window, episodes=MAX_EPISODES, max_steps=max_steps,
                   fit=fit or None, seed=SEED, torch_threads=torch_threads,
                   progress=lambda m: print(f"[{task} {policy}] {m}", flush=True))
    cell = {"task": task, "policy": policy, "env": spec["env"], "policy_entry": entry, "variant": variant,
            "budget": {"max_steps": max_steps, "window": window, "fit": fit},
            "probe": compact(result), "wall_s": time.time() - started}
    return cell


def write(path: Path, data: Any) -> None:
    """`data` as indented JSON, written atomically (a kill leaves the previous file)."""
    from common import write_json

    write_json(path, data, indent=1, allow_nan=True)


# ------------------------------------------------------------------ the floor


def bandit_p_hi(level: float) -> float:
    """The ambiguous bandit's `p_hi_a` whose I(A; R) under the uniform policy is `level`."""
    from scipy.optimize import brentq

    from hca_rllib.envs.known_answer import bandit_mutual_information

    return float(brentq(lambda p: bandit_mutual_information(0.5, p_hi_a=p) - level, 0.5 + 1e-9, 1.0 - 1e-9,
                        xtol=1e-10))


def delayed_noise(level: float) -> float:
    """The delayed effect's noise sd whose mean per-pair information (`I / 44`) is `level`."""
    from scipy.optimize import brentq

    from credit_analysis import binary_shift_information

    target = level * DELAYED_PAIRS_PER_EPISODE
    return float(brentq(lambda sd: binary_shift_information(2.0, sd) - target, 1e-3, 100.0, xtol=1e-10))


def floor_spec(family: str, level: float, budget: int) -> Dict[str, Any]:
    """The env, its config and the episodes that give `budget` held-out pairs."""
    if family == "bandit":
        return {"env": "HCA/AmbiguousBandit-v0", "env_config": {"p_hi_a": bandit_p_hi(level)},
                "episodes": int(math.ceil(budget / HELD_OUT_FRACTION)), "window": 4}
    return {"env": "HCA/DelayedEffect-v0", "env_config": {"length": DELAYED_LENGTH, "noise_std": delayed_noise(level)},
            "episodes": int(math.ceil(budget / HELD_OUT_FRACTION / DELAYED_PAIRS_PER_EPISODE)), "window": WINDOW}


def run_floor_cell(family: str, level: float, budget: int, seed: int, out: Path, torch_threads: int
                   ) -> Dict[str, Any]:
    spec = floor_spec(family, level, budget)
    started = time.time()
    result = probe(spec["env"], env_config=spec["env_config"], outcome="reward", window=spec["window"],
                   episodes=spec["episodes"], max_steps=10 * spec["episodes"] * (DELAYED_LENGTH + 1), seed=seed,
                   benchmark_summary=None, torch_threads=torch_threads)
    reward = result["reward"]
    cell = {"family": family, "level": level, "budget": budget, "seed": seed, "spec": spec,
            "held_out_pairs": result["pairs"]["held_out"], "per_pair": reward["per_pair"],
            "detected": detected(reward["per_pair"], reward["fit"]), "fit": reward["fit"],
            "return_per_decision": result["return"]["per_decision"], "wall_s": time.time() - started}
    store_floor_cell(out, floor_key(family, level, budget, seed), cell)
    return cell


def floor_key(family: str, level: float, budget: int, seed: int) -> str:
    return f"{family}__{level:g}__{budget}__seed{seed}"


def load_floor(out: Path) -> Dict[str, Any]:
    """The floor cells stored so far (`floor.json`, one entry per cell), by `floor_key`."""
    path = out / "floor.json"
    return json.loads(path.read_text())["cells"] if path.exists() else {}


def store_floor_cell(out: Path, key: str, cell: Dict[str, Any]) -> None:
    """Add one cell to `floor.json`, rewritten whole and atomically (a kill loses that cell only)."""
    cells = load_floor(out)
    cells[key] = cell
    write(out / "floor.json", {"cells": dict(sorted(cells.items()))})


def floor_table(out: Path) -> Dict[str, Any]:
    """Per family and budget: the smallest level detected in every seed with every higher
    level detected too (None: none detected), the measured held-out pairs, and each cell."""
    cells = list(load_floor(out).values())
    table: Dict[str, Any] = {}
    for family in FLOOR_LEVELS:
        for budget in FLOOR_BUDGETS:
            mine = [c for c in cells if c["family"] == family and c["budget"] == budget]
            if not mine:
                continue
            levels = sorted({c["level"] for c in mine})
            ok = {lv: all(c["detected"] for c in mine if c["level"] == lv) for lv in levels}
            floor = None
            for lv in reversed(levels):
                if not ok[lv]:
                    break
                floor = lv
            table.setdefault(family, {})[str(budget)] = {
                "floor": floor, "held_out_pairs": sorted({c["held_out_pairs"] for c in mine}),
                "cells": [{"level": c["level"], "seed": c["seed"], "estimate": c["per_pair"]["information"],
                           "ci_bonferroni": c["per_pair"]["ci_bonferroni"], "detected": c["detected"]}
                          for c in sorted(mine, key=lambda c: (c["level"], c["seed"]))]}
    return table


def floor_at(table: Dict[str, Any], family: str, pairs: int) -> Optional[Dict[str, Any]]:
    """The floor of the largest measured budget at or below `pairs` held-out pairs (the
    smallest budget's, marked, when `pairs` is below every budget)."""
    rows = table.get(family) or {}
    budgets = sorted(int(b) for b in rows)
    if not budgets:
        return None
    below = [b for b in budgets if b <= pairs]
    budget = below[-1] if below else budgets[0]
    return {"floor": rows[str(budget)]["floor"], "budget": budget, "below_smallest_budget": not below}


# ------------------------------------------------------------------ the summary


def verdict(reward: Optional[Dict[str, Any]], ret: Dict[str, Any], floor: Optional[float]) -> str:
    """Yes: the reward outcome's per-pair Bonferroni CI excludes 0 (from a fitted
    classifier), its estimate is at or above the floor, and the return's per-decision
    Bonferroni CI reaches 0 (or its classifier never beat h = pi): the probe's reading's
    rule (`detected`), applied to the stored figures."""
    if reward is None:
        return "no (no reward events)"
    if floor is None:
        return "n/a (floor not measured)"
    reward_on = detected(reward["per_pair"], reward["fit"])
    above = reward["per_pair"]["information"] >= floor
    return_on = detected(ret["per_decision"], ret["fit"])
    if reward_on and above and not return_on:
        return "yes"
    if not reward_on:
        return "no (reward outcome: none detected)"
    if return_on:
        return "no (the return carries information too)"
    return "no (below the floor)"


def summary_rows(out: Path, table: Dict[str, Any], folder: str = "readings") -> List[Dict[str, Any]]:
    rows = []
    for path in sorted((out / folder).glob("*.json")):
        cell = json.loads(path.read_text())
        p = cell["probe"]
        reward, ret = p.get("reward"), p["return"]
        floor = floor_at(table, "bandit", p["pairs"]["held_out"])
        floor_delayed = floor_at(table, "delayed", p["pairs"]["held_out"])
        rows.append({
            "task": cell["task"], "policy": cell["policy"], "env_steps": cell["policy_entry"]["env_steps"],
            "score": cell["policy_entry"]["score"], "episodes": p["episodes"], "decisions": p["decisions"],
            "held_out_decisions": p["split"]["held_out_decisions"], "held_out_pairs": p["pairs"]["held_out"],
            "return_per_decision": ret["per_decision"],
            "reward_per_decision": None if reward is None else reward["per_decision"],
            "reward_per_pair": None if reward is None else reward["per_pair"],
            "reward_per_pair_delayed": None if reward is None else reward["per_pair_delayed"],
            "reward_minus_return": p.get("reward_minus_return"),
            "floor_spread": floor, "floor_concentrated": floor_delayed,
            "verdict": ("n/a (fewer held-out pairs than the floor was measured at)"
                        if floor is not None and floor["below_smallest_budget"]
                        else verdict(reward, ret, None if floor is None else floor["floor"])),
            "reward_fit_improved": None if reward is None else reward["fit"]["improved"],
            "return_fit_improved": ret["fit"]["improved"],
            "per_lag_band": None if reward is None else reward.get("per_lag_band"),
            "mean_episode_return": p["mean_episode_return"], "seconds": p["seconds"]["total"],
            "command": cell.get("command")})
    order = {name: i for i, name in enumerate(TASKS)}
    return sorted(rows, key=lambda r: (order.get(r["task"], 99), r["env_steps"]))


def _ci(figure: Optional[Dict[str, Any]], improved: Optional[bool] = True, key: str = "ci_bonferroni") -> str:
    """`mean [low, high]`; `*` where the classifier never beat its initial state (h = pi)."""
    if figure is None:
        return "n/a"
    lo, hi = figure[key]
    return f"{figure['information']:+.4f} [{lo:+.4f}, {hi:+.4f}]" + (" *" if improved is False else "")


def _floor_text(floor: Optional[Dict[str, Any]]) -> str:
    if floor is None:
        return "not measured"
    value = "none detected" if floor["floor"] is None else f"{floor['floor']:g}"
    return value + (" (<)" if floor["below_smallest_budget"] else "")


TABLE_HEAD = ["| task | policy (env steps, score) | held-out pairs | return / decision | reward / decision | "
              "reward - return / decision | reward / pair | reward / pair, k >= 1 | floor spread / concentrated | "
              "verdict |",
              "|---|---|---:|---|---|---|---|---|---|---|"]


def table_lines(rows: List[Dict[str, Any]]) -> List[str]:
    lines = list(TABLE_HEAD)
    for r in rows:
        policy = "uniform" if r["policy"] == "uniform" else (
            f"A2C {r['env_steps']:,}" + ("" if r["score"] is None else f", {r['score']:.2f}"))
        ret, reward = r["return_fit_improved"], r["reward_fit_improved"]
        lines.append(f"| {r['task']} | {policy} | {r['held_out_pairs']:,} | {_ci(r['return_per_decision'], ret)} | "
                     f"{_ci(r['reward_per_decision'], reward)} | {_ci(r['reward_minus_return'])} | "
                     f"{_ci(r['reward_per_pair'], reward)} | {_ci(r['reward_per_pair_delayed'], reward)} | "
                     f"{_floor_text(r['floor_spread'])} / "
                     f"{_floor_text(r['floor_concentrated'])} | {r['verdict']} |")
    return lines


def band_lines(rows: List[Dict[str, Any]]) -> List[str]:
    """Per reading, the reward outcome's information per decision by lag band [95% CI]."""
    bands = max((r["per_lag_band"] for r in rows if r.get("per_lag_band")), key=len)
    names = [f"k {lo}" if hi == lo + 1 else f"k {lo}-{hi - 1}" for lo, hi in (b["lags"] for b in bands)]
    lines = ["| task | policy | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in rows:
        if not r.get("per_lag_band"):
            continue
        policy = "uniform" if r["policy"] == "uniform" else f"A2C {r['env_steps']:,}"
        cells = [f"{b['information']:+.4f} [{b['ci'][0]:+.4f}, {b['ci'][1]:+.4f}]" for b in r["per_lag_band"]]
        lines.append(f"| {r['task']} | {policy} | " + " | ".join(cells) + " |")
    return lines


def floor_lines(floor: Dict[str, Any]) -> List[str]:
    lines = ["", "## The detection floor", "",
             "Per family and budget (held-out pairs): the smallest per-pair level detected (Bonferroni CI above "
             f"0) in every seed ({', '.join(map(str, FLOOR_SEEDS))}), every higher level detected too; each "
             "cell's estimate [Bonferroni CI].", "",
             "| family | budget | floor | cells: level seed: estimate [CI] |", "|---|---:|---:|---|"]
    for family, budgets in floor.items():
        for budget, row in budgets.items():
            cells = "; ".join(f"{c['level']:g} s{c['seed']}: {c['estimate']:+.4f} [{c['ci_bonferroni'][0]:+.4f}, "
                              f"{c['ci_bonferroni'][1]:+.4f}]" for c in row["cells"])
            value = "none" if row["floor"] is None else f"{row['floor']:g}"
            lines.append(f"| {family} | {int(budget):,} | {value} | {cells} |")
    return lines


def markdown(summary: Dict[str, Any]) -> str:
    lines = ["# The probe on every outcome, under trained policies", "",
             f"Window {WINDOW}, gamma 0.99, seed {SEED}, {100 * HELD_OUT_FRACTION:g}% of the episodes held out; "
             "nats; [CI]: the Bonferroni interval over the 2 outcomes (97.5%), by a bootstrap over held-out episodes. "
             f"Return: the {WINDOW}-step return per decision. Reward: the reward outcome per decision and per "
             f"(decision, reward event) pair, all k < {WINDOW} and k >= 1. Floor: the smallest per-pair information "
             "the probe detected on known-answer tasks at no more held-out pairs (spread: every pair informative "
             "alike, the bandit; concentrated: 1 pair in 44, the delayed effect; `(<)`: fewer pairs than the "
             "smallest budget measured). Verdict: yes when the reward outcome's per-pair CI excludes 0 at or above "
             "the spread floor and the return's reaches 0. `*`: that classifier never beat its initial state (h = "
             "pi) on the validation episodes, a reading of 0 by construction (a lower bound of 0, not a measured "
             "0).", ""]
    lines += table_lines(summary["rows"])
    lines += ["", "![information against A2C's training steps](information_by_steps.png)", "",
              "Commands:", ""] + [f"- `{c}`" for c in summary["commands"]]
    titles = {"gentle": ("Fit sensitivity: the same readings with a gentler fit",
                         f"Both classifiers fitted with {VARIANTS['gentle']['fit']} over the default fit (same data, "
                         "split and seed), for the readings where one outcome read 0 by construction or the verdict "
                         "turned on the return's zero."),
              "long": ("More data: three times the steps",
                       "The same policies and settings with three times the steps (Atari: the default budget's floor "
                       "is 0.01 nats per pair)."),
              "window128": ("A longer window: 128 steps",
                            "The same policies, steps and fit with a window of 128 steps for both outcomes (the "
                            "return is the 128-step return). The second table spreads the reward outcome's "
                            "information per decision over the lags of its pairs: what the lags past 32 add is "
                            "what a credit window longer than the fragment could use. A2C's checkpoints were "
                            "trained again for these readings (the same script and seed on another machine: "
                            "their steps and scores differ a little from the readings above)."),
              "window128_gentle": ("A longer window with the gentler fit",
                                   f"The window of 128 steps with the gentler fit ({VARIANTS['gentle']['fit']}), "
                                   "for the readings where the 128-step classifier never beat h = pi.")}
    for name, variant in summary.get("variants", {}).items():
        title, text = titles[name]
        lines += ["", f"## {title}", "", text, ""] + table_lines(variant["rows"])
        if any(r.get("per_lag_band") for r in variant["rows"]):
            lines += [""] + band_lines(variant["rows"])
        lines += ["", "Commands:", ""] + [f"- `{c}`" for c in variant["commands"]]
    if summary["floor"]:
        lines += floor_lines(summary["floor"])
    return "\n".join(lines) + "\n"


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    """Per task, the reward outcome per decision and the return per decision for each policy
    (uniform, then A2C's checkpoints in order), with their Bonferroni CIs."""
    from common import matplotlib_pyplot

    plt = matplotlib_pyplot()
    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    if not tasks:
        return
    figure, axes = plt.subplots(1, len(tasks), figsize=(3.0 * len(tasks), 2.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        mine = [r for r in rows if r["task"] == task and r["reward_per_decision"] is not None]
        x = np.arange(len(mine), dtype=float)
        for key, label, color in (("reward_per_decision", "reward", "tab:blue"),
                                  ("return_per_decision", "return", "tab:orange")):
            y = np.array([r[key]["information"] for r in mine])
            lo = np.array([r[key]["ci_bonferroni"][0] for r in mine])
            hi = np.array([r[key]["ci_bonferroni"][1] for r in mine])
            ax.errorbar(x, y, yerr=[y - lo, hi - y], marker="o", capsize=3, label=label, color=color)
        ax.set_xticks(x, ["unif." if r["policy"] == "uniform" else f"{r['env_steps'] / 1e3:.0f}k" for r in mine])
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("policy: uniform, A2C at env steps", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("nats per decision", fontsize=8)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def summarise(out: Path) -> Dict[str, Any]:
    table = floor_table(out)
    rows = summary_rows(out, table) if (out / "readings").exists() else []
    variants = {}
    for name in VARIANTS:
        if name != "default" and (out / f"readings_{name}").exists():
            vrows = summary_rows(out, table, f"readings_{name}")
            variants[name] = {"rows": vrows, "commands": sorted({r["command"] for r in vrows if r.get("command")})}
    summary = {"window": WINDOW, "rows": rows, "floor": table,
               "commands": sorted({r["command"] for r in rows if r.get("command")}), "variants": variants}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    if rows:
        plot(rows, out / "information_by_steps.png")
    return summary


# ------------------------------------------------------------------ main


def job_done(out: Path, job: tuple) -> bool:
    """Whether a job's result is stored: a floor cell in `floor.json`, a reading in its JSON."""
    if job[0] == "floor":
        return floor_key(*job[1:]) in load_floor(out)
    return job_path(out, job).exists()


def job_path(out: Path, job: tuple) -> Path:
    """A reading's JSON: `readings/<task>__<policy>.json` (`readings_<variant>/` for a
    fit variant)."""
    variant = job[5]
    folder = "readings" if variant == "default" else f"readings_{variant}"
    return out / folder / f"{job[1]}__{job[2]}.json"


def _plan(args) -> List[tuple]:
    """(kind, ...) jobs, in order, not yet stored."""
    jobs: List[tuple] = []
    if args.quick:
        task = QUICK["task"]
        spec = {**TASKS[task], "max_steps": QUICK["max_steps"], "fit": QUICK["fit"]}
        jobs = [("reading", task, "uniform", spec, policies(task, Path("/nonexistent"))["uniform"], "default"),
                ("floor", *QUICK["floor"])]
    elif args.floor:
        jobs = [("floor", family, level, budget, seed) for budget in FLOOR_BUDGETS
                for family, levels in FLOOR_LEVELS.items() for level in levels for seed in FLOOR_SEEDS]
    else:
        for task in args.tasks or list(TASKS):
            available = policies(task)
            jobs += [("reading", task, policy, TASKS[task], available[policy], args.variant)
                     for policy in args.policies or list(available) if policy in available]
    return [job for job in jobs if not job_done(args.out, job)]


def main(argv=None) -> int:
    from common import benchmark_parser, check_out, command_line

    parser = benchmark_parser(__doc__.splitlines()[0], quick_help="MinAtar Breakout, uniform, 3,000 steps; one "
                              "floor cell; into --out or a temp dir")
    parser.add_argument("--tasks", type=lambda s: s.split(","), default=None, help=f"of {', '.join(TASKS)}")
    parser.add_argument("--policies", type=lambda s: s.split(","), default=None,
                        help="uniform and/or marks (env steps, e.g. 50000); default: all available")
    parser.add_argument("--floor", action="store_true", help="measure the detection floor instead")
    parser.add_argument("--variant", choices=list(VARIANTS), default="default",
                        help="default; gentle: the classifiers fitted with Adam 3e-4, patience 8 (default 1e-3, 4); "
                             "long: three times the steps; a variant is stored apart, under readings_<variant>/")
    args = parser.parse_args(argv)
    check_out(parser, args, default_out=DEFAULT_OUT, results_root=RESULTS, quick_prefix="hca_outcome_probe_quick_")
    unknown = [t for t in args.tasks or [] if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {list(TASKS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    command = command_line(argv if argv is None else ["benchmarks/outcome_probe.py", *argv])
    started = time.time()
    if not args.report_only:
        for job in _plan(args):
            if args.time_limit_min is not None and time.time() - started > 60 * args.time_limit_min:
                print("time limit: stopping before", job[:3])
                break
            if job[0] == "floor":
                cell = run_floor_cell(*job[1:], args.out, args.torch_threads)
                print(f"floor {job[1:]}: {cell['per_pair']['information']:+.4f} detected={cell['detected']} "
                      f"({cell['wall_s']:.0f} s)", flush=True)
                continue
            cell = {**run_reading(*job[1:], args.torch_threads), "command": command}
            write(job_path(args.out, job), cell)
            print(f"{job[1]} {job[2]}: done ({cell['wall_s']:.0f} s)", flush=True)
    summary = summarise(args.out)
    print(f"summary: {args.out / 'summary.md'} ({len(summary['rows'])} readings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
