"""Credit horizon: how much of the outcome the return `Z` contains, and what that is worth.

`Z` carries the information about an action only if the outcome falls inside it. With
bootstrapped returns (the default) `Z` is cut at the end of each rollout fragment and
bootstrapped with `V(s)`; on the credit-analysis tasks `V` cannot see the decision (every
chain state looks the same), so only the share `fragment_visible_fraction(episode length,
fragment)` of decisions can be credited through the return. This benchmark trains A2C and
the credit modes at one batch size (512 env steps per update, so the same number of
updates) with four horizons:

  * `H64`: 8 envs x 64-step fragments (the package default),
  * `H128`: 4 envs x 128 steps,
  * `H256`: 2 envs x 256 steps,
  * `episodes`: 8 envs, `batch_mode="complete_episodes"` (every return runs to the end of
    its episode; a batch is at least 512 steps of complete episodes).

on three settings of `benchmarks/credit_analysis.py` where the fragment cuts the outcome
(delayed effect length 30 and 60 at noise 1; key-to-door with 40 apples), seeds 0..4,
30k env steps. Score: pi(optimal first action | start) at the end, as in credit_analysis.

The reward outcome's methods `reward_fragment`, `reward_fragment_bias` and
`reward_fragment_pure` (with the evidence trust, with the bias trust and without a trust)
take a credit window as long as the horizon's fragment
(256 steps with complete episodes): a reward then credits every earlier step of its
fragment, and the horizon decides how far back that reaches.

Reproduce (from the repository root):

    .venv/bin/python benchmarks/credit_horizon.py --time-limit-min 60   # resumable
    .venv/bin/python benchmarks/credit_horizon.py --report-only
    .venv/bin/python benchmarks/credit_horizon.py --quick               # smoke test
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import (  # noqa: E402
    LEARNING_RATE_SCALES,
    bootstrap_ci,
    check_grid_args,
    command_line,
    fmt,
    grid_parser,
    grid_selection,
    load_runs,
    paired_difference,
    run_grid,
    setting_mismatch,
    write_json,
)
from credit_analysis import METHODS, SETTINGS, decision_information, fragment_visible_fraction  # noqa: E402
from credit_modes import BATCH, run_spec  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "credit_horizon"
RESULTS_ROOT = REPO / "benchmarks" / "results"
STEPS = 30_000
QUICK_STEPS = 2_000
FULL_SEEDS = 5
BASELINE = "a2c"
BASE_SETTINGS = ("delayed_effect_L30_sd1", "delayed_effect_L60_sd1", "key_to_door_L40_sd1")
# Horizon -> (envs per EnvRunner, fragment length or None for complete episodes).
HORIZONS: Dict[str, tuple] = {"H64": (8, 64), "H128": (4, 128), "H256": (2, 256), "episodes": (8, None)}
CELLS = {f"{s}__{h}": (s, h) for s in BASE_SETTINGS for h in HORIZONS}
# The reward outcome with its credit window as long as the horizon's fragment (a reward
# credits every earlier step of its fragment; with complete episodes, 256 steps, longer
# than these tasks' episodes), with the evidence trust, the bias trust (`_bias`) and
# without a trust (`_pure`): the methods `reward_w32(_bias, _pure)` with the window
# replaced (`method_overrides`).
FRAGMENT_WINDOW_METHODS = {"reward_fragment": METHODS["reward_w32"],
                           "reward_fragment_bias": METHODS["reward_w32_bias"],
                           "reward_fragment_pure": METHODS["reward_w32_pure"]}
ALL_METHODS: Dict[str, Dict[str, Any]] = {**METHODS, **FRAGMENT_WINDOW_METHODS}
EPISODES_WINDOW = 256
QUICK_CELLS = ("delayed_effect_L30_sd1__H64", "delayed_effect_L30_sd1__episodes")
QUICK_METHODS = ("a2c",)
DEFAULT_METHODS = ("a2c", "hca_blend_nomem", "expected_hca_blend_nomem")


def method_overrides(method: str, cell: str) -> Dict[str, Any]:
    """The `.training()` overrides of `method` in `cell` (the fragment-window methods take
    the horizon's fragment length as their window)."""
    overrides = copy.deepcopy(ALL_METHODS[method])
    if method in FRAGMENT_WINDOW_METHODS:
        overrides["hindsight"]["window"] = HORIZONS[CELLS[cell][1]][1] or EPISODES_WINDOW
    return overrides


def base_config(cell: str):
    def build(spec: Dict[str, Any]):
        from hca_rllib import HCAConfig

        _, horizon = CELLS[cell]
        envs, fragment = HORIZONS[horizon]
        config = (HCAConfig()
                  .environment(spec["env_id"], env_config=copy.deepcopy(spec["env_config"]))
                  .training(train_batch_size_per_learner=BATCH))
        if fragment is None:
            return config.env_runners(num_env_runners=0, num_envs_per_env_runner=envs,
                                      batch_mode="complete_episodes")
        return config.env_runners(num_env_runners=0, num_envs_per_env_runner=envs,
                                  rollout_fragment_length=fragment)
    return build


def visible(cell: str) -> float:
    setting, horizon = CELLS[cell]
    length = decision_information(SETTINGS[setting]["task"], SETTINGS[setting]["env_config"])["episode_length"]
    fragment = HORIZONS[horizon][1]
    return 1.0 if fragment is None else fragment_visible_fraction(length, fragment)


def run_all(args, out: Path, cells, seeds, methods, steps: int) -> None:
    def run_item(item):
        cell, seed, method = item
        setting_name, horizon = CELLS[cell]
        setting = SETTINGS[setting_name]
        data = run_spec(cell, setting, method, method_overrides(method, cell), seed, steps,
                        base_config=base_config(cell), settings_note=f"horizon {horizon}")
        data.update(setting=setting_name, horizon=horizon, cell=cell, visible_fraction=visible(cell))
        return data

    def mismatch(item, stored):
        cell, _, method = item
        return setting_mismatch(stored, method_overrides(method, cell), SETTINGS[CELLS[cell][0]]["env_id"],
                                SETTINGS[CELLS[cell][0]]["env_config"])

    todo = [(c, s, m) for s in seeds for c in cells for m in methods]
    run_grid(todo, out, run_cell=run_item, steps_of=lambda _: steps, args=args, stored_mismatch=mismatch)


def aggregate(out: Path) -> Dict[str, Any]:
    runs = load_runs(out, "*/*_seed*.json", ("cell", "method", "seed"))
    summary: Dict[str, Any] = {"command": command_line(), "cells": {}}
    for cell in [c for c in CELLS if c in runs]:
        entry: Dict[str, Any] = {"setting": CELLS[cell][0], "horizon": CELLS[cell][1],
                                 "visible_fraction": visible(cell), "methods": {}}
        p_by = {m: {s: d["p_good_action_final"] for s, d in runs[cell][m].items()}
                for m in ALL_METHODS if m in runs[cell]}
        for method, p in p_by.items():
            mean, low, high = bootstrap_ci(list(p.values()))
            entry["methods"][method] = {
                "seeds": sorted(p), "p_good": [p[s] for s in sorted(p)], "p_good_mean": mean,
                "p_good_ci": [low, high],
                "env_steps_per_s": sum(d["env_steps_per_s"] for d in runs[cell][method].values())
                / len(runs[cell][method]),
                "vs_a2c": (None if method == BASELINE or BASELINE not in p_by
                           else paired_difference(p, p_by[BASELINE])),
            }
            same_rate = same_rate_baseline(method)
            if same_rate in p_by and same_rate != method:
                entry["methods"][method]["vs_a2c_same_rate"] = {"baseline": same_rate,
                                                               **paired_difference(p, p_by[same_rate])}
        summary["cells"][cell] = entry
    write_json(out / "summary.json", summary)
    (out / "summary.md").write_text(summary_markdown(summary))
    return summary


def same_rate_baseline(method: str) -> Optional[str]:
    """A2C at the learning rate of `method` (`<stem>_<tag>`, `common.LEARNING_RATE_SCALES`),
    or None for a method at the base rate."""
    for tag in LEARNING_RATE_SCALES:
        if method.endswith(f"_{tag}"):
            return f"{BASELINE}_{tag}"
    return None


def _same_rate_lines(summary: Dict[str, Any]) -> List[str]:
    """Each method at a raised learning rate against A2C at that rate (paired, 95% CI)."""
    rows = [(e, m, s["vs_a2c_same_rate"]) for e in summary["cells"].values()
            for m, s in e["methods"].items() if "vs_a2c_same_rate" in s]
    if not rows:
        return []
    lines = ["", "At a raised learning rate, against A2C at the same rate (paired per seed, 95% CI; **bold** "
             "when it excludes 0):", "", "| setting | horizon | method | A2C at its rate | difference |",
             "|---|---|---|---|---|"]
    for e, m, d in rows:
        a2c = e["methods"][d["baseline"]]["p_good_mean"]
        diff = f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
        lines.append(f"| {e['setting']} | {e['horizon']} | {m} | {d['baseline']} {fmt(a2c)} | "
                     + (f"**{diff}**" if d["excludes_zero"] else diff) + " |")
    return lines


def summary_markdown(summary: Dict[str, Any]) -> str:
    methods = [m for m in ALL_METHODS if any(m in e["methods"] for e in summary["cells"].values())]
    lines = [
        "# Credit horizon: the same batch, longer returns",
        "",
        f"Produced by: `{summary['command']}`; settings: the docstring of "
        "`benchmarks/credit_horizon.py`.",
        "",
        "Score = pi(optimal first action | start) at the end of training (mean over seeds, "
        "95% bootstrap CI); below it the paired difference to a2c at the same horizon "
        "(**bold** when its CI excludes 0). visible = share of decisions whose return "
        "contains the outcome.",
        "",
        "| setting | horizon | visible | " + " | ".join(methods) + " |",
        "|---|---|---|" + "---|" * len(methods),
    ]
    for cell, e in summary["cells"].items():
        cells = []
        for m in methods:
            s = e["methods"].get(m)
            if s is None:
                cells.append("—")
                continue
            text = f"{fmt(s['p_good_mean'])} [{fmt(s['p_good_ci'][0])}, {fmt(s['p_good_ci'][1])}] (n={len(s['seeds'])})"
            d = s["vs_a2c"]
            if d is not None:
                diff = f"{d['mean']:+.2f}"
                text += "<br>" + (f"**{diff}**" if d["excludes_zero"] else diff)
            cells.append(text)
        lines.append(f"| {e['setting']} | {e['horizon']} | {e['visible_fraction']:.2f} | " + " | ".join(cells) + " |")
    lines += _same_rate_lines(summary)
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = grid_parser(
        __doc__.splitlines()[0], quick_help=f"{'/'.join(QUICK_CELLS)}, a2c, 1 seed, {QUICK_STEPS} steps",
        subset="cells", subset_choices=CELLS, methods=ALL_METHODS)
    args = parser.parse_args(argv)
    return check_grid_args(parser, args, default_out=DEFAULT_OUT, results_root=RESULTS_ROOT,
                           quick_prefix="hca_credit_horizon_quick_")


def main(argv=None) -> int:
    args = parse_args(argv)
    cells, methods, seeds = grid_selection(
        args, subset="cells", names=list(CELLS), quick_names=QUICK_CELLS, methods=DEFAULT_METHODS,
        quick_methods=QUICK_METHODS, full_seeds=FULL_SEEDS, quick_seeds=1)
    steps = args.steps or (QUICK_STEPS if args.quick else STEPS)
    if not args.report_only:
        run_all(args, args.out, cells, seeds, methods, steps)
    summary = aggregate(args.out)
    print((args.out / "summary.md").read_text())
    return 0 if summary["cells"] else 1


if __name__ == "__main__":
    sys.exit(main())
