"""Learning benchmark: A2C against the credit modes on MinAtar and bsuite's credit tasks.

Methods (name -> `.training(...)` overrides, `common.CREDIT_METHODS` as in
`credit_modes.py`): `a2c` (credit="a2c", hindsight_loss_coeff=1.0: a small classifier is
trained beside the policy for the diagnostics only; it does not touch the policy update),
the package default `expected_hca_blend_nomem`, `hca_blend_nomem` and `c2a2c_blend_nomem`;
not in the default grid (`--methods`): the `*_pure_nomem` modes (trust=None) and
`a2c_candidate_classifier` (A2C's update with the default's classifier beside it).

Tasks (name -> env id, env-step budget; `TASKS` below):
  * MinAtar, all five games (`minatar/<Game>`): `tuned_examples/common.minatar_config`
    (the settings of the tuned examples: 8 envs x 64-step rollouts, RMSprop 7e-4,
    entropy 0.01, MinAtar's conv net, sticky actions 0.1), 250k env steps each.
  * bsuite's credit-assignment experiments: `umbrella_length` at chain length 10 and 20
    with 20 distractor bits (settings 9 and 13), `umbrella_distract` with 1 distractor
    bit (setting 0; its chain is always 20 long, so its 20-bit setting would repeat
    `umbrella_length`'s) and `discounting_chain` (setting 0), with the package defaults
    (8 envs x 64 steps, entropy 0), 100k env steps each.

Final score of a run: mean undiscounted return of its last 100 completed episodes, except
on the umbrella tasks, where it is the mean reward of their last step (+1 when the
umbrella choice was right, -1 when not: the task's only action-dependent reward; the
other chain rewards are coin flips that would add a standard error of ~0.45 to a
100-episode mean of the return, which is stored too as `final_return`).
Normalised score: `(score - random) / (reference - random)`. bsuite: the exact values
(umbrella random 0, optimum 1; discounting_chain random 1.02, optimum 1.1). MinAtar has
no optimum: `random` is a uniform random policy's mean return over 100 episodes
(measured, `<task>/random.json`) and `reference` the best final score of any default
method's run among the seeds complete for all of them (so 1.0 is "as good as the best
run here", not a published level). `discounting_chain` (mapping seed 0 puts its bonus on
the 1-step chain: it tests the discount horizon, not delayed credit) is its own domain,
"bsuite discounting", so that the credit target rests on the three umbrella tasks.

Aggregates per domain (bsuite umbrella, MinAtar, bsuite discounting), as rliable
computes them: IQM and optimality gap (gamma = 1) of the normalised scores with 95%
stratified-bootstrap CIs (seeds resampled within each task), the IQM difference to a2c
with a paired stratified bootstrap CI (also at the Bonferroni level 1 - 0.05/3, used for
the credit target because it picks the best of three modes), and the probability of
improvement over a2c averaged over the tasks, over the seeds complete for every method.
Per task: IQM of the final score with its CI and the paired per-seed difference to a2c
with its CI; "significantly worse" = that CI lies below 0. Targets are decided only
once every task has 5 complete seeds. The estimators and the bootstrap are rliable's,
called through `hca_rllib.stats` (`tests/test_stats.py` checks them against rliable and
closed forms).

Order: seed > task > method, so an interrupted grid leaves every task with the same
number of seeds and each (task, seed)'s methods are run back to back by one process
(paired in time). Every finished cell (task, method, seed) is
`<out>/<task>/<method>_seed<k>.json`; stored cells are skipped (only if made with the
same env id and overrides: change `--out` when you change `minatar_config` or the package
defaults), `--time-limit-min` stops cleanly between cells, and `--shard i/n` runs every
n-th (seed, task) block so that n processes share the grid (one per core).

Reproduce (from the repository root):

    .venv/bin/python benchmarks/learning.py --time-limit-min 100 --shard 0/2 &
    .venv/bin/python benchmarks/learning.py --time-limit-min 100 --shard 1/2   # resumable
    .venv/bin/python benchmarks/learning.py --report-only    # tables and plots
    .venv/bin/python benchmarks/learning.py --quick          # smoke test, temp dir
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import (  # noqa: E402
    CREDIT_METHODS,
    DEFAULT_CREDIT,
    check_grid_args,
    cell_path,
    command_line,
    fmt,
    grid_parser,
    grid_selection,
    iqm_ci,
    load_runs,
    machine_summary,
    matplotlib_pyplot,
    nan_mean,
    paired_difference,
    plot_mean_band,
    ordered,
    run_grid,
    setting_mismatch,
    smoothing_points,
    stack_curves,
    write_json,
)
from credit_modes import DIAGNOSTICS, _smooth, run_spec  # noqa: E402

from hca_rllib.stats import (  # noqa: E402
    average_probability_of_improvement,
    iqm,
    optimality_gap,
    optimality_gap_ci,
    paired_stratified_difference_ci,
)

DEFAULT_OUT = REPO / "benchmarks" / "results" / "learning"
RESULTS_ROOT = REPO / "benchmarks" / "results"
FULL_SEEDS = 5
LAST_K = 100
RANDOM_EPISODES = 100
BASELINE = "a2c"
QUICK_STEPS = 3_000
QUICK_TASKS = ("minatar_Breakout", "umbrella_length_10")
QUICK_METHODS = ("a2c", "expected_hca_blend_nomem")
DEFAULT_METHOD = "expected_hca_blend_nomem"  # the package default (common.DEFAULT_CREDIT)

METHODS: Dict[str, Dict[str, Any]] = {
    **CREDIT_METHODS,
    # A control: A2C's update with the default's classifier trained beside it
    # (its diagnostics, its cost and its random-number path), to tell the credit from the
    # rest on a task where A2C itself is a lottery over seeds (Freeway).
    "a2c_candidate_classifier": {**DEFAULT_CREDIT, "credit": "a2c"},
}
DEFAULT_METHODS = ("a2c", "expected_hca_blend_nomem", "hca_blend_nomem", "c2a2c_blend_nomem")
COLORS = {"a2c": "black", "expected_hca_blend_nomem": "tab:red", "hca_blend_nomem": "tab:blue",
          "c2a2c_blend_nomem": "tab:orange", "expected_hca_pure_nomem": "tab:pink",
          "hca_pure_nomem": "tab:cyan", "c2a2c_pure_nomem": "tab:brown",
          "a2c_candidate_classifier": "tab:gray"}

MINATAR_GAMES = ("Breakout", "Asterix", "Freeway", "Seaquest", "SpaceInvaders")


def _minatar(game: str) -> Dict[str, Any]:
    return {"env_id": f"minatar/{game}", "env_config": {}, "steps": 250_000,
            "domain": "MinAtar", "reference": None, "game": game,
            "settings": "tuned_examples/common.minatar_config"}


def _bsuite(env_id: str, reference: float, random: float, note: str, score: str = "return",
            domain: str = "bsuite") -> Dict[str, Any]:
    return {"env_id": env_id, "env_config": {}, "steps": 100_000, "domain": domain,
            "reference": reference, "random": random, "score": score, "note": note,
            "settings": "hca_rllib defaults"}


TASKS: Dict[str, Dict[str, Any]] = {
    **{f"minatar_{game}": _minatar(game) for game in MINATAR_GAMES},
    "umbrella_length_10": _bsuite("bsuite/umbrella_length-9", 1.0, 0.0,
                                  "chain length 10, 20 distractor bits", "terminal_reward"),
    "umbrella_length_20": _bsuite("bsuite/umbrella_length-13", 1.0, 0.0,
                                  "chain length 20, 20 distractor bits", "terminal_reward"),
    # umbrella_distract's chain is always 20 long: its setting 13 (20 bits) would be the
    # very environment of umbrella_length_20; setting 0 is the same chain with 1 bit.
    "umbrella_distract_1": _bsuite("bsuite/umbrella_distract-0", 1.0, 0.0,
                                   "chain length 20, 1 distractor bit", "terminal_reward"),
    # Mapping seed 0 puts the 1.1 bonus on the 1-step chain: this tests the discount
    # horizon, not delayed credit, so it is its own domain and not in the credit target.
    "discounting_chain": _bsuite("bsuite/discounting_chain-0", 1.1, 1.02,
                                 "5 chains paying 1, the 1-step one 1.1; random 1.02",
                                 domain="bsuite discounting"),
}
DOMAINS = ("bsuite", "MinAtar", "bsuite discounting")


def base_config_for(task: str):
    spec = TASKS[task]
    if spec["domain"] == "MinAtar":
        from tuned_examples.common import minatar_config

        return lambda _spec: minatar_config(spec["game"], "HCA")
    return None  # credit_modes.default_base_config: the package defaults


def run_cell(task: str, method: str, seed: int, total_steps: int) -> Dict[str, Any]:
    spec = {**TASKS[task], "last_k": LAST_K, "probe": None}  # "score" picks the final score
    data = run_spec(task, spec, method, METHODS[method], seed, total_steps,
                    base_config=base_config_for(task), settings_note=TASKS[task]["settings"])
    data["domain"] = TASKS[task]["domain"]
    return data


def random_score(task: str, episodes: int = RANDOM_EPISODES, seed: int = 12345
                 ) -> Dict[str, Any]:
    """Mean return of a uniform random policy over `episodes` episodes (one env)."""
    import gymnasium as gym

    import hca_rllib  # noqa: F401  (registers the ids)

    env = gym.make(TASKS[task]["env_id"], **TASKS[task]["env_config"])
    env.action_space.seed(seed)
    returns = []
    t0 = time.perf_counter()
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"task": task, "env_id": TASKS[task]["env_id"], "episodes": episodes,
            "mean_return": float(np.mean(returns)), "returns": returns,
            "wall_s": time.perf_counter() - t0, "command": command_line()}


def result_path(out: Path, task: str, method: str, seed: int) -> Path:
    return cell_path(out, task, method, seed)


def plan(tasks: Sequence[str], seeds: Sequence[int], methods: Sequence[str]
         ) -> List[Tuple[str, int, str]]:
    """Run order: per seed, per task, every method."""
    return [(task, seed, method) for seed in seeds for task in tasks for method in methods]


def shard(items: List[Tuple[str, int, str]], spec: Optional[str]) -> List[Tuple[str, int, str]]:
    """`spec` "i/n": the cells of every n-th (seed, task) block starting at block i (None:
    all). Whole blocks, so that one process runs all methods of a (task, seed) back to
    back (cutting single cells would give each process a fixed subset of methods)."""
    if spec is None:
        return items
    index, count = (int(v) for v in spec.split("/"))
    blocks = list(dict.fromkeys((task, seed) for task, seed, _ in items))
    mine = {block for b, block in enumerate(blocks) if b % count == index}
    return [item for item in items if (item[0], item[1]) in mine]


def _stored_mismatch(item, stored) -> Optional[str]:
    task, _, method = item
    reason = setting_mismatch(stored, METHODS[method], TASKS[task]["env_id"])
    if reason:
        return reason
    if TASKS[task].get("score") == "terminal_reward" and "final_return" not in stored:
        return "stored cell predates the terminal-reward score of this task"
    return None


def run_all(args, out: Path, tasks, seeds, methods, steps: Dict[str, int]) -> None:
    for task in tasks:  # cheap (seconds), needed by the normalisation
        path = out / task / "random.json"
        if TASKS[task].get("random") is None and not path.exists():
            write_json(path, random_score(task, 5 if args.quick else RANDOM_EPISODES))
    run_grid(shard(plan(tasks, seeds, methods), args.shard), out,
             run_cell=lambda item: run_cell(item[0], item[2], item[1], steps[item[0]]),
             steps_of=steps.__getitem__, args=args, stored_mismatch=_stored_mismatch)


# ---------------------------------------------------------------------- aggregate


def normalisers(out: Path, runs) -> Dict[str, Dict[str, Any]]:
    """Per task: random score, reference score and where each comes from."""
    result = {}
    for task in runs:
        path = out / task / "random.json"
        random = TASKS.get(task, {}).get("random")
        random_source = "exact expected return of the uniform policy"
        if random is None:
            random = json.loads(path.read_text())["mean_return"] if path.exists() else None
            random_source = f"uniform policy, mean of {RANDOM_EPISODES} measured episodes"
        reference = TASKS.get(task, {}).get("reference")
        source = "optimal expected score"
        if reference is None:
            # best run among the default methods' complete seeds, so that the reference
            # does not move with extra methods or half-finished seeds
            methods = [m for m in DEFAULT_METHODS if m in runs[task]]
            seeds = complete_seeds(runs, [task], methods)
            finals = [runs[task][m][s]["final_score"] for m in methods for s in seeds
                      if runs[task][m][s].get("final_score") is not None]
            reference = max(finals) if finals else None
            source = ("best final score of the default methods' complete seeds in this "
                      "benchmark")
        ok = random is not None and reference is not None and reference > random
        result[task] = {"random": random, "random_source": random_source,
                        "reference": reference, "reference_source": source, "usable": bool(ok)}
    return result


def _normalise(score: float, norm: Dict[str, Any]) -> float:
    return (score - norm["random"]) / (norm["reference"] - norm["random"])


def complete_seeds(runs, tasks: Sequence[str], methods: Sequence[str]) -> List[int]:
    """Seeds for which every (task, method) cell is stored."""
    seed_sets = [set(runs.get(t, {}).get(m, {})) for t in tasks for m in methods]
    return sorted(set.intersection(*seed_sets)) if seed_sets else []


def aggregate(out: Path) -> Dict[str, Any]:
    runs = load_runs(out, "*/*_seed*.json", ("task", "method", "seed"))
    norms = normalisers(out, runs)
    commands = sorted({d.get("command", "?") for by_m in runs.values() for by_s in by_m.values()
                       for d in by_s.values()})
    summary: Dict[str, Any] = {"command": command_line(), "cell_commands": commands,
                               "out": str(out), "tasks": {},
                               "domains": {}, "pairwise": {}, "normalisation": norms,
                               "machine": machine_summary(runs)}
    for task in ordered(runs, TASKS):
        by_method = runs[task]
        entry: Dict[str, Any] = {"env_id": TASKS.get(task, {}).get("env_id"),
                                 "domain": TASKS.get(task, {}).get("domain"), "methods": {}}
        finals_by_method: Dict[str, Dict[int, float]] = {}
        for method in ordered(by_method, METHODS):
            datas = {s: d for s, d in sorted(by_method[method].items())
                     if d.get("final_score") is not None}
            if not datas:
                continue
            finals = np.array([d["final_score"] for d in datas.values()])
            finals_by_method[method] = {s: d["final_score"] for s, d in datas.items()}
            point, low, high, ci_method = iqm_ci(finals)
            entry["methods"][method] = {
                "seeds": list(datas), "final_scores": finals.tolist(),
                "iqm": point, "ci_low": low, "ci_high": high, "ci_method": ci_method,
                "env_steps": sorted({d["env_steps"] for d in datas.values()}),
                "mean_env_steps_per_s": float(np.mean([d["env_steps_per_s"] for d in datas.values()])),
                "diagnostics_last10": {
                    key: nan_mean(d["diagnostics_last10"].get(key) for d in datas.values())
                    for key in DIAGNOSTICS},
            }
        for method, stats in entry["methods"].items():
            if method == BASELINE or BASELINE not in finals_by_method:
                stats["vs_a2c"] = None
                continue
            diff = paired_difference(finals_by_method[method], finals_by_method[BASELINE])
            stats["vs_a2c"] = {
                "paired_difference": diff,
                "significantly_worse": bool(diff and diff["excludes_zero"] and diff["mean"] < 0),
                "significantly_better": bool(diff and diff["excludes_zero"] and diff["mean"] > 0),
            }
        summary["tasks"][task] = entry
    for domain in DOMAINS:
        summary["domains"][domain] = _domain_aggregate(runs, norms, domain)
        summary["pairwise"][domain] = _pairwise_aggregate(runs, norms, domain)
    write_json(out / "summary.json", summary)
    (out / "summary.md").write_text(summary_markdown(summary))
    plot_curves(out, runs)
    plot_aggregates(out, summary)
    plot_profiles(out, summary)
    return summary


def _domain_aggregate(runs, norms, domain: str) -> Dict[str, Any]:
    tasks = [t for t in ordered(runs, TASKS) if TASKS.get(t, {}).get("domain") == domain
             and norms[t]["usable"]]
    methods = ordered({m for t in tasks for m in runs[t]}, METHODS)
    methods = [m for m in methods if all(m in runs[t] for t in tasks)]
    if not tasks or not methods:
        return {"tasks": tasks, "methods": {}}
    seeds = complete_seeds(runs, tasks, methods)
    if not seeds:
        return {"tasks": tasks, "methods": {}, "seeds": []}
    matrix = {m: np.array([[_normalise(runs[t][m][s]["final_score"], norms[t]) for t in tasks]
                           for s in seeds]) for m in methods}
    result: Dict[str, Any] = {"tasks": tasks, "seeds": seeds, "methods": {}}
    for method in methods:
        scores = matrix[method]
        point, low, high, ci_method = iqm_ci(scores)
        gap, gap_low, gap_high = optimality_gap_ci(scores)
        stats: Dict[str, Any] = {
            "iqm": point, "iqm_ci": [low, high], "ci_method": ci_method,
            "optimality_gap": gap, "optimality_gap_ci": [gap_low, gap_high],
            "normalised_scores": scores.tolist(),
        }
        if method != BASELINE and BASELINE in matrix:
            d, d_low, d_high = paired_stratified_difference_ci(scores, matrix[BASELINE], iqm)
            # the credit target picks the best of the credit modes after the fact: its
            # interval is read at the Bonferroni level 1 - 0.05 / (number of modes)
            modes = max(1, len([m for m in methods if m != BASELINE]))
            _, b_low, b_high = paired_stratified_difference_ci(
                scores, matrix[BASELINE], iqm, level=1 - 0.05 / modes)
            stats["iqm_difference_vs_a2c_bonferroni"] = {
                "level": 1 - 0.05 / modes, "ci": [b_low, b_high]}
            stats["iqm_difference_vs_a2c"] = {"point": d, "ci": [d_low, d_high],
                                              "excludes_zero": bool(d_low > 0 or d_high < 0)}
            g, g_low, g_high = paired_stratified_difference_ci(
                scores, matrix[BASELINE], lambda x, axis: optimality_gap(x, axis=axis))
            stats["optimality_gap_difference_vs_a2c"] = {"point": g, "ci": [g_low, g_high]}
            stats["probability_of_improvement"] = average_probability_of_improvement(
                scores, matrix[BASELINE])
        result["methods"][method] = stats
    return result


def _pairwise_aggregate(runs, norms, domain: str) -> Dict[str, Any]:
    """Each method against a2c alone, on the seeds complete for both (the domain
    aggregate above uses the seeds complete for every method, so one method's unfinished
    grid holds back every comparison)."""
    result: Dict[str, Any] = {}
    methods = ordered({m for t in runs for m in runs[t]}, METHODS)
    for method in methods:
        if method == BASELINE:
            continue
        pair = {t: {m: by_m[m] for m in (BASELINE, method) if m in by_m} for t, by_m in runs.items()}
        agg = _domain_aggregate(pair, norms, domain)
        stats = agg.get("methods", {}).get(method)
        if stats is None or "iqm_difference_vs_a2c" not in stats:
            continue
        result[method] = {"seeds": agg["seeds"], "tasks": agg["tasks"],
                          **{k: v for k, v in stats.items() if k != "normalised_scores"},
                          "a2c_iqm": agg["methods"][BASELINE]["iqm"]}
    return result


def _ci(low: float, high: float, digits: int = 2, sign: bool = False) -> str:
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    return "[" + f.format(low) + ", " + f.format(high) + "]"


def targets(summary: Dict[str, Any]) -> Dict[str, Any]:
    """The two learning targets, read off the summary; None (undecided) until
    every task of the domain has `FULL_SEEDS` complete seeds.

    * credit tasks (bsuite's umbrella tasks): the best credit mode's IQM difference to
      a2c has a CI above 0, at the Bonferroni level for choosing the best of the modes;
    * MinAtar: no credit mode's paired difference to a2c has a CI below 0 on more than
      one game."""
    bsuite = summary["domains"].get("bsuite", {}).get("methods", {})
    best = None
    for method, stats in bsuite.items():
        if method == BASELINE or "iqm_difference_vs_a2c" not in stats:
            continue
        if best is None or stats["iqm"] > bsuite[best]["iqm"]:
            best = method
    credit_met = None
    bsuite_seeds = len(summary["domains"].get("bsuite", {}).get("seeds", []))
    if best is not None and bsuite_seeds >= FULL_SEEDS:
        credit_met = bool(bsuite[best]["iqm_difference_vs_a2c_bonferroni"]["ci"][0] > 0)
    worse: Dict[str, List[str]] = {}
    for task, entry in summary["tasks"].items():
        if entry["domain"] != "MinAtar":
            continue
        for method, stats in entry["methods"].items():
            if stats.get("vs_a2c") and stats["vs_a2c"]["significantly_worse"]:
                worse.setdefault(method, []).append(task)
    minatar_methods = [m for m in summary["domains"].get("MinAtar", {}).get("methods", {})
                       if m != BASELINE]
    minatar_seeds = len(summary["domains"].get("MinAtar", {}).get("seeds", []))
    # For the package default (DEFAULT_METHOD): never significantly worse than
    # a2c on a MinAtar game, and an aggregate IQM at least a2c's on MinAtar and on bsuite.
    # Read on the seeds complete for a2c and the default (`pairwise`).
    default: Dict[str, Any] = {"method": DEFAULT_METHOD}
    pairwise = summary.get("pairwise", {})
    minatar = pairwise.get("MinAtar", {}).get(DEFAULT_METHOD)
    if minatar and len(minatar["seeds"]) >= FULL_SEEDS:
        default["minatar_worse_games"] = worse.get(DEFAULT_METHOD, [])
        default["minatar_iqm_difference"] = minatar["iqm_difference_vs_a2c"]["point"]
        default["minatar_iqm_difference_ci"] = minatar["iqm_difference_vs_a2c"]["ci"]
        default["minatar_met"] = (not default["minatar_worse_games"]
                                  and default["minatar_iqm_difference"] >= 0)
    umbrella = pairwise.get("bsuite", {}).get(DEFAULT_METHOD)
    if umbrella and len(umbrella["seeds"]) >= FULL_SEEDS:
        default["bsuite_iqm_difference"] = umbrella["iqm_difference_vs_a2c"]["point"]
        default["bsuite_iqm_difference_ci"] = umbrella["iqm_difference_vs_a2c"]["ci"]
        default["bsuite_met"] = default["bsuite_iqm_difference"] >= 0
    # Complete once every domain that ran has FULL_SEEDS seeds (a grid of one domain, run
    # with `--tasks`, leaves the other empty).
    seeds = {"bsuite": bsuite_seeds, "MinAtar": minatar_seeds}
    ran = [n for domain, n in seeds.items() if summary["domains"].get(domain, {}).get("methods")]
    provisional = not ran or min(ran) < FULL_SEEDS
    return {
        "default": default,
        "seeds": seeds,
        "provisional": provisional,
        "credit_tasks_best_method": best,
        "credit_tasks_met": credit_met,
        "minatar_significantly_worse_games": {m: worse.get(m, []) for m in minatar_methods},
        "minatar_met": (all(len(worse.get(m, [])) <= 1 for m in minatar_methods)
                        if minatar_methods and minatar_seeds >= FULL_SEEDS else None),
    }


def summary_markdown(summary: Dict[str, Any]) -> str:
    machine = summary["machine"]
    lines = [
        "# Learning benchmark: A2C vs the credit modes (MinAtar, bsuite)",
        "",
        f"Produced by: `{summary['command']}`; the cells by "
        + ", ".join(f"`{c}`" for c in summary.get("cell_commands", [])) + ".",
        "",
        "Reproduce: `.venv/bin/python benchmarks/learning.py` (resumable; "
        "`--shard 0/2` and `--shard 1/2` in two processes use both cores); "
        "`--report-only` rebuilds this page. Settings, tasks and statistics: the "
        "docstring of `benchmarks/learning.py`.",
        "",
    ]
    if machine:
        lines += [f"Machine: {', '.join(machine['hosts'])}; {machine['cpu_count']} CPUs; "
                  f"{'; '.join(machine['versions'])}; 1-min load at run starts "
                  f"{machine['loadavg_1min_at_run_start']}. {machine['num_runs']} runs, "
                  f"{machine['total_wall_s'] / 3600:.2f} h of run wall time, finished "
                  f"{machine['first_finished']} .. {machine['last_finished']}; code "
                  f"{', '.join(machine.get('code', []))}.", ""]
    t = targets(summary)
    lines += ["## Targets", ""]
    if t["provisional"]:
        lines += [f"**Provisional**: complete seeds so far bsuite {t['seeds']['bsuite']}, "
                  f"MinAtar {t['seeds']['MinAtar']} of {FULL_SEEDS}; the grid is still "
                  "running (re-run the command to continue it).", ""]
    verdict = {True: "**met**", False: "**not met**", None: "undecided (fewer than "
               f"{FULL_SEEDS} complete seeds)"}
    best = t["credit_tasks_best_method"]
    if best is None:
        lines.append("- Credit tasks (bsuite umbrella): no complete seed of every method yet.")
    else:
        stats = summary["domains"]["bsuite"]["methods"][best]
        d, b = stats["iqm_difference_vs_a2c"], stats["iqm_difference_vs_a2c_bonferroni"]
        lines.append(
            f"- Credit tasks (bsuite umbrella, target: the best credit mode's IQM beats a2c "
            f"with a CI above 0): best mode so far `{best}`, IQM difference to a2c "
            f"{d['point']:+.3f}, 95% CI {_ci(*d['ci'], 3, True)}, Bonferroni "
            f"{100 * b['level']:.1f}% CI {_ci(*b['ci'], 3, True)} (normalised score): "
            f"{verdict[t['credit_tasks_met']]}.")
    d11 = t["default"]
    if "minatar_met" in d11:
        lines.append(
            f"- The default `{d11['method']}` on MinAtar (significantly worse than a2c on "
            f"no game, aggregate IQM at least a2c's): worse on "
            f"{', '.join(d11['minatar_worse_games']) or 'no game'}, IQM difference "
            f"{d11['minatar_iqm_difference']:+.3f} {_ci(*d11['minatar_iqm_difference_ci'], 3, True)} "
            f"(seeds complete for both): {verdict[d11['minatar_met']]}.")
    if "bsuite_met" in d11:
        lines.append(
            f"- The default `{d11['method']}` on the bsuite credit tasks (aggregate IQM at "
            f"least a2c's): IQM difference {d11['bsuite_iqm_difference']:+.3f} "
            f"{_ci(*d11['bsuite_iqm_difference_ci'], 3, True)} (seeds complete for both): "
            f"{verdict[d11['bsuite_met']]}.")
    if not t["minatar_significantly_worse_games"]:
        lines.append("- MinAtar: no complete seed of every method yet.")
    else:
        worse = "; ".join(f"`{m}`: {', '.join(g) if g else 'none'}"
                          for m, g in t["minatar_significantly_worse_games"].items())
        lines.append(f"- MinAtar (target: no credit mode significantly worse than a2c on more "
                     f"than one game; paired 95% CI below 0): {'so far ' if t['provisional'] else ''}{worse}: "
                     f"{verdict[t['minatar_met']]}.")
    lines += ["", "## Aggregates (normalised scores)", "",
              "Normalised score = (final - random) / (reference - random); random: exact "
              "(bsuite) or measured (MinAtar); reference: optimal expected score (bsuite), "
              "best final score of the default methods' complete seeds here (MinAtar). "
              "IQM and optimality gap with 95% stratified-bootstrap CIs; difference to a2c "
              "with a paired stratified bootstrap CI; P(> a2c) averaged over tasks.", "",
              "| domain | method | seeds | IQM (95% CI) | IQM - a2c (95% CI) | optimality gap "
              "(95% CI) | P(> a2c) |", "|---|---|---|---|---|---|---|"]
    for domain, agg in summary["domains"].items():
        for method, s in agg.get("methods", {}).items():
            diff = s.get("iqm_difference_vs_a2c")
            diff_text = "—" if diff is None else f"{diff['point']:+.3f} {_ci(*diff['ci'], 3, True)}"
            lines.append(
                f"| {domain} ({len(agg['tasks'])} tasks) | {method} | {len(agg['seeds'])} | "
                f"{s['iqm']:.3f} {_ci(*s['iqm_ci'], 3)} | {diff_text} | "
                f"{s['optimality_gap']:.3f} {_ci(*s['optimality_gap_ci'], 3)} | "
                f"{fmt(s.get('probability_of_improvement'))} |")
    lines += ["", "## Each method against a2c alone (seeds complete for both)", "",
              "| domain | method | seeds | IQM | a2c IQM | IQM - a2c (95% CI) | P(> a2c) |",
              "|---|---|---|---|---|---|---|"]
    for domain, by_method in summary.get("pairwise", {}).items():
        for method, s in by_method.items():
            diff = s["iqm_difference_vs_a2c"]
            lines.append(
                f"| {domain} ({len(s['tasks'])} tasks) | {method} | {len(s['seeds'])} | "
                f"{s['iqm']:.3f} | {s['a2c_iqm']:.3f} | {diff['point']:+.3f} "
                f"{_ci(*diff['ci'], 3, True)} | {fmt(s.get('probability_of_improvement'))} |")
    lines += ["", "## Per task (final score: mean return of the last 100 episodes; umbrella: mean "
              "terminal reward of the last 100 episodes)", "",
              "| task | method | seeds | IQM (95% CI) | paired diff vs a2c (95% CI) | "
              "verdict | MI (nats) | steps/s |", "|---|---|---|---|---|---|---|---|"]
    for task, entry in summary["tasks"].items():
        for method, s in entry["methods"].items():
            vs = s.get("vs_a2c")
            if vs is None or vs["paired_difference"] is None:
                diff_text, verdict = "—", "—"
            else:
                pd = vs["paired_difference"]
                diff_text = f"{pd['mean']:+.2f} {_ci(pd['ci_low'], pd['ci_high'], 2, True)}"
                verdict = ("better" if vs["significantly_better"] else
                           "worse" if vs["significantly_worse"] else "=")
            mi = s["diagnostics_last10"].get("info/mutual_information")
            lines.append(f"| {task} | {method} | {len(s['seeds'])} | {s['iqm']:.2f} "
                         f"{_ci(s['ci_low'], s['ci_high'])} | {diff_text} | {verdict} | "
                         f"{fmt(mi, 4)} | {s['mean_env_steps_per_s']:.0f} |")
    lines += ["", "Normalisation per task:", ""]
    for task, n in summary["normalisation"].items():
        lines.append(f"- {task}: random {fmt(n['random'])}, reference {fmt(n['reference'])} "
                     f"({n['reference_source']})")
    lines += ["", "Per-seed final scores:", ""]
    for task, entry in summary["tasks"].items():
        for method, s in entry["methods"].items():
            lines.append(f"- {task} {method}: " + ", ".join(
                f"s{seed}: {score:.2f}" for seed, score in zip(s["seeds"], s["final_scores"])))
    lines += ["", "Plots: `curves_minatar.png`, `curves_bsuite.png`, `aggregates.png`, "
              "`profiles.png` (rliable performance profiles of the normalised scores).", ""]
    return "\n".join(lines)


def plot_curves(out: Path, runs) -> None:
    plt = matplotlib_pyplot()
    for domain in DOMAINS:
        tasks = [t for t in ordered(runs, TASKS) if TASKS.get(t, {}).get("domain") == domain]
        if not tasks:
            continue
        ncols = min(3, len(tasks))
        nrows = math.ceil(len(tasks) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
        for ax in list(axes.flat)[len(tasks):]:
            ax.set_visible(False)
        for ax, task in zip(axes.flat, tasks):
            for method in ordered(runs[task], METHODS):
                datas = [runs[task][method][s] for s in sorted(runs[task][method])]
                steps, values = stack_curves(datas, "return_mean_iteration")
                plot_mean_band(ax, steps, _smooth(values, smoothing_points(20, datas)),
                               color=COLORS.get(method),
                               label=f"{method} ({len(datas)})", band="sem", alpha=0.15,
                               linewidth=1.2)
            ax.set_title(f"{task} ({TASKS.get(task, {}).get('env_id', '')})", fontsize=9)
            ax.set_xlabel("environment steps")
            ax.set_ylabel("episode return")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="best")
        fig.suptitle(f"{domain}: mean over seeds (count in brackets), band = +-1 s.e.; "
                     "returns smoothed per seed over 20 iterations", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / f"curves_{domain.lower().replace(' ', '_')}.png", dpi=100)
        plt.close(fig)


def plot_aggregates(out: Path, summary: Dict[str, Any]) -> None:
    domains = [d for d, agg in summary["domains"].items() if agg.get("methods")]
    if not domains:
        return
    plt = matplotlib_pyplot()
    fig, axes = plt.subplots(len(domains), 2, figsize=(10, 2.2 + 1.2 * len(domains) * 2),
                             squeeze=False)
    for row, domain in enumerate(domains):
        methods = summary["domains"][domain]["methods"]
        names = list(methods)
        for col, (key, ci_key, title) in enumerate(
                [("iqm", "iqm_ci", "IQM (higher is better)"),
                 ("optimality_gap", "optimality_gap_ci", "optimality gap (lower is better)")]):
            ax = axes[row][col]
            for y, method in enumerate(names):
                s = methods[method]
                low, high = s[ci_key]
                ax.plot([low, high], [y, y], color=COLORS.get(method, "gray"), linewidth=6,
                        alpha=0.5)
                ax.plot([s[key]], [y], "|", color="black", markersize=14)
            ax.set_yticks(range(len(names)))
            ax.set_yticklabels(names)
            ax.set_title(f"{domain} ({len(summary['domains'][domain]['tasks'])} tasks, "
                         f"{len(summary['domains'][domain]['seeds'])} seeds): {title}", fontsize=9)
            ax.set_xlabel("normalised score")
            ax.grid(alpha=0.3, axis="x")
    fig.suptitle("Normalised final scores, 95% stratified-bootstrap CIs", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "aggregates.png", dpi=100)
    plt.close(fig)


def plot_profiles(out: Path, summary: Dict[str, Any]) -> None:
    """rliable performance profiles of the normalised final scores, one panel per domain:
    per method the fraction of its runs (seeds x tasks) above each normalised score tau,
    with a 95% stratified-bootstrap band (`hca_rllib.stats.performance_profile`)."""
    from hca_rllib.stats import performance_profile, plot_performance_profile

    domains = [d for d, agg in summary["domains"].items() if agg.get("methods")]
    if not domains:
        return
    plt = matplotlib_pyplot()
    fig, axes = plt.subplots(1, len(domains), figsize=(4.8 * len(domains), 3.8), squeeze=False)
    for ax, domain in zip(axes[0], domains):
        agg = summary["domains"][domain]
        scores = {m: np.array(s["normalised_scores"]) for m, s in agg["methods"].items()}
        taus, profiles = performance_profile(scores)
        plot_performance_profile(ax, taus, profiles, {m: COLORS.get(m, "gray") for m in scores},
                                 xlabel=r"normalised score ($\tau$)")
        ax.set_title(f"{domain} ({len(agg['tasks'])} tasks, {len(agg['seeds'])} seeds)",
                     fontsize=9)
    fig.suptitle("Performance profiles (rliable): fraction of runs with a normalised score "
                 "above tau, 95% stratified-bootstrap bands", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "profiles.png", dpi=100)
    plt.close(fig)


# -------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = grid_parser(
        __doc__.split("\n\n")[0],
        quick_help=f"{'/'.join(QUICK_TASKS)}, {'/'.join(QUICK_METHODS)}, 2 seeds, "
                   f"{QUICK_STEPS} steps, into --out or a temp dir",
        subset="tasks", subset_choices=TASKS, methods=METHODS, explicit_seeds=True,
        steps_help="override every task's budget (use another --out)")
    parser.add_argument("--shard", default=None, help="i/n: run every n-th cell from i")
    args = check_grid_args(parser, parser.parse_args(argv), default_out=DEFAULT_OUT,
                           results_root=RESULTS_ROOT, quick_prefix="learning_quick_")
    if args.shard is not None:
        try:
            index, count = (int(v) for v in args.shard.split("/"))
            assert 0 <= index < count
        except (ValueError, AssertionError):
            parser.error(f"--shard must be i/n with 0 <= i < n, got {args.shard!r}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    tasks, methods, seeds = grid_selection(
        args, subset="tasks", names=TASKS, quick_names=QUICK_TASKS, methods=DEFAULT_METHODS,
        quick_methods=QUICK_METHODS, full_seeds=FULL_SEEDS, quick_seeds=2)
    budget = args.steps or (QUICK_STEPS if args.quick else None)
    steps = {task: budget or TASKS[task]["steps"] for task in TASKS}
    if not args.report_only:
        run_all(args, out, tasks, seeds, methods, steps)
    summary = aggregate(out)
    print((out / "summary.md").read_text())
    return 0 if summary["tasks"] else 1


if __name__ == "__main__":
    sys.exit(main())
