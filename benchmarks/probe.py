"""Information probe of the benchmark tasks, beside their learning benchmarks' credit minus A2C.

For every task of the learning benchmarks (`learning.py`: the five MinAtar games and
bsuite's four tasks; `credit_analysis.py`: the thirteen delayed-effect and key-to-door
settings) and two Atari games at a short budget, `hca_rllib.probe.probe` under the
uniform random policy: `I(A; Z | S)` per decision, held out, at horizons 1, 16, 64 and
the episode's end. Beside it, from the stored summaries
(`results/learning/summary.json`, `results/credit_analysis/summary.json`,
`results/atari_short/report.json`), each credit mode's mean paired difference to A2C:
MinAtar and bsuite in normalised score (`(score - random) / (reference - random)`, the
learning benchmark's normalisation), the known-answer tasks in the probability of the
optimal first action (their score). Does the information predict where credit helped?
Spearman's rank correlation over the tasks, per mode and for the best mode of each task.

The rows are what `hca-rllib probe`'s reading compares a new task with
(`results/probe/summary.json`, `rows`).

Reproduce (from the repository root; resumable, one JSON per task under --out):

    .venv/bin/python benchmarks/probe.py                   # all tasks
    .venv/bin/python benchmarks/probe.py --tasks minatar_Breakout --report-only
    .venv/bin/python benchmarks/probe.py --quick           # smoke test: two tasks, tiny budgets, a temp dir
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

RESULTS = REPO / "benchmarks" / "results"
DEFAULT_OUT = RESULTS / "probe"
MODES = ("hca_batch", "c2a2c", "mix", "expected_hca", "expected_hca_blend_nomem")
HORIZONS = (1, 16, 64, None)
# --quick: one known-answer setting and one MinAtar game, at budgets that finish in seconds.
QUICK_TASKS = ("delayed_effect_L3_sd1", "minatar_Breakout")
QUICK_BUDGET = {"episodes": 150, "max_steps": 3_000}
QUICK_FIT = {"max_updates": 40}


def tasks() -> Dict[str, Dict[str, Any]]:
    from credit_analysis import SETTINGS
    from learning import TASKS

    out: Dict[str, Dict[str, Any]] = {}
    # The known-answer settings first (the oracles), then bsuite, MinAtar, Atari: cheapest first.
    for name, spec in SETTINGS.items():
        out[name] = {"env": spec["env_id"], "env_config": dict(spec["env_config"]), "source": "credit_analysis",
                     "domain": "known-answer", "task": spec["task"],
                     "budget": {"episodes": 1500, "max_steps": 100_000}, "fit": {"max_updates": 1500}}
    learning = sorted(TASKS.items(), key=lambda item: item[1]["domain"] == "MinAtar")
    for name, spec in learning:
        minatar = spec["domain"] == "MinAtar"
        budget = {"episodes": 2000, "max_steps": 20_000 if minatar else 30_000}
        fit = {"max_updates": 500 if minatar else 1500}
        if spec["env_id"] == "minatar/Freeway":  # 2,500-step episodes: 32 of them on 16 envs
            budget = {"episodes": 2000, "max_steps": 80_000, "num_envs": 16}
        if not minatar:
            # bsuite's steps are cheap, and at 30,000 steps the classifier overfits umbrella's 20
            # random distractor features before it finds the start state's information (the fit
            # never beat q = pi): ten times the data.
            budget, fit = {"episodes": 20_000, "max_steps": 200_000}, {"max_updates": 4000}
        out[name] = {"env": spec["env_id"], "env_config": dict(spec.get("env_config") or {}),
                     "source": "learning", "domain": spec["domain"], "budget": budget, "fit": fit}
    for game in ("Pong", "Breakout"):
        # A random Pong game lasts ~800-1,000 agent steps: 6,000 steps on 8 envs finish none.
        budget = {"episodes": 2000, "max_steps": 15_000, "num_envs": 12} if game == "Pong" else \
            {"episodes": 2000, "max_steps": 6_000}
        out[f"atari_{game}"] = {"env": f"atari/{game}", "env_config": {}, "source": "atari_short", "domain": "Atari",
                                "budget": budget,
                                "fit": {"max_updates": 100, "batch_size": 128}, "horizons": (16, None)}
    return out


def credit_minus_a2c(name: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """Each mode's mean paired difference to A2C with its CI, in the task's score units
    (normalised for the learning benchmark), from the stored summaries; {} if none."""
    out: Dict[str, Any] = {}
    if spec["source"] == "learning":
        summary = json.loads((RESULTS / "learning" / "summary.json").read_text())
        task = summary["tasks"].get(name)
        norm = summary["normalisation"].get(name)
        if not task or not norm:
            return out
        scale = float(norm["reference"]) - float(norm["random"])
        for mode in MODES:
            vs = (task["methods"].get(mode) or {}).get("vs_a2c")
            if vs:
                d = vs["paired_difference"]
                out[mode] = {"mean": d["mean"] / scale, "ci": [d["ci_low"] / scale, d["ci_high"] / scale],
                             "seeds": len(d["seeds"]), "units": "normalised score"}
    elif spec["source"] == "credit_analysis":
        summary = json.loads((RESULTS / "credit_analysis" / "summary.json").read_text())
        setting = summary["settings"].get(name)
        for mode in MODES:
            vs = ((setting or {}).get("methods", {}).get(mode) or {}).get("vs_a2c")
            if vs:
                out[mode] = {"mean": vs["mean"], "ci": [vs["ci_low"], vs["ci_high"]], "seeds": len(vs["seeds"]),
                             "units": "P(optimal first action)"}
    else:
        path = RESULTS / "atari_short" / "report.json"
        if path.exists():
            report = json.loads(path.read_text())
            methods = (report.get("environments", {}).get(spec["env"]) or {}).get("methods", {})
            a2c, hca = methods.get("A2C"), methods.get("HCA (hca)")
            if a2c and hca and a2c.get("mean") is not None and hca.get("mean") is not None:
                out["hca_batch"] = {"mean": hca["mean"] - a2c["mean"], "ci": [None, None], "seeds": 1,
                                    "units": "raw game return (1 seed each, no CI)"}
    return out


def closed_form(name: str, spec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    if spec["source"] != "credit_analysis":
        return None
    from credit_analysis import decision_information

    return decision_information(spec["task"], spec["env_config"])


def run_task(name: str, spec: Dict[str, Any], out: Path, seed: int, torch_threads: int = 1) -> Dict[str, Any]:
    from hca_rllib.probe import probe

    started = time.time()
    result = probe(spec["env"], env_config=spec["env_config"] or None, horizons=spec.get("horizons", HORIZONS),
                   seed=seed, fit=spec.get("fit"), benchmark_summary=None, torch_threads=torch_threads,
                   progress=lambda m: print(f"[{name}] {m}", flush=True), **spec["budget"])
    result.pop("split")  # episode id lists: not needed in the summary
    cell = {"task": name, "spec": {k: v for k, v in spec.items() if k != "horizons"}, "probe": result,
            "wall_s": time.time() - started}
    (out / f"{name}.json").write_text(json.dumps(cell, indent=1))
    return cell


def spearman(x: List[float], y: List[float]) -> Optional[float]:
    if len(x) < 3:
        return None
    from scipy import stats

    rho = stats.spearmanr(x, y).statistic
    return None if rho != rho else float(rho)


def summarise(out: Path, names: List[str], command: str,
              specs: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Any]:
    specs = specs or tasks()
    rows = []
    for name in names:
        path = out / f"{name}.json"
        if not path.exists():
            continue
        cell = json.loads(path.read_text())
        p, spec = cell["probe"], specs[name]
        peak = next(h for h in p["horizons"] if h["horizon"] == p["peak_horizon"])
        end = next((h for h in p["horizons"] if h["horizon"] == "end"), None)
        diffs = credit_minus_a2c(name, spec)
        closed = closed_form(name, spec)
        fragments = [h for h in p["horizons"] if h["horizon"] != "end"]
        best = max(fragments, key=lambda h: h["information"]) if fragments else None
        # "improved": some epoch beat the classifier's initial state, q = pi (0 exactly);
        # the JSONs before that record was kept: a validation information above 0.
        never = not any(h["fit"].get("improved", h["fit"]["validation_information"] > 0) for h in p["horizons"])
        rows.append({
            "task": name, "env": spec["env"], "env_config": spec["env_config"], "domain": spec["domain"],
            "information": peak["information"], "ci": peak["ci"], "peak_horizon": p["peak_horizon"],
            "horizons": {h["horizon"]: {"information": h["information"], "ci": h["ci"],
                                        "start_state": h["start_state"]["information"],
                                        "start_state_ci": h["start_state"]["ci"]} for h in p["horizons"]},
            "start_state_end": None if end is None else end["start_state"],
            "fragment_horizon": None if best is None else best["horizon"],
            "information_fragment": None if best is None else best["information"],
            "ci_fragment": None if best is None else best["ci"],
            "information_end": None if end is None else end["information"],
            "ci_end": None if end is None else end["ci"],
            "fit_never_improved": never,
            "share_above_threshold": peak["concentration"]["share_above_threshold"],
            "top10_share": peak["concentration"]["top_share"],
            "level": p["reading"]["level"], "episodes": p["episodes"], "decisions": p["decisions"],
            "seconds": p["seconds"]["total"],
            "closed_form_start_state": None if closed is None else closed["information"],
            "credit_minus_a2c": diffs,
        })
    correlations: Dict[str, Any] = {}
    for group, members in (("learning (MinAtar + bsuite)", [r for r in rows if r["domain"] in ("MinAtar", "bsuite", "bsuite discounting")]),
                           ("known-answer", [r for r in rows if r["domain"] == "known-answer"]),
                           ("all with normalised rows", [r for r in rows if r["domain"] != "Atari"])):
        entry: Dict[str, Any] = {}
        for mode in (*MODES, "best"):
            xs, ys = [], []
            for r in members:
                d = r["credit_minus_a2c"]
                if mode == "best":
                    values = [v["mean"] for v in d.values() if v.get("mean") is not None]
                    value = max(values) if values else None
                else:
                    value = (d.get(mode) or {}).get("mean")
                if value is not None:
                    xs.append(r["information"])
                    ys.append(value)
            entry[mode] = {"tasks": len(xs), "spearman": spearman(xs, ys)}
        correlations[group] = entry
    oracle = [{"task": r["task"], "closed_form": r["closed_form_start_state"],
               "probe": r["start_state_end"]["information"], "ci": r["start_state_end"]["ci"],
               "bias": r["start_state_end"]["information"] - r["closed_form_start_state"]}
              for r in rows if r["closed_form_start_state"] is not None and r["start_state_end"]]
    summary = {"command": command, "rows": rows, "correlations": correlations, "oracle": oracle}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def _f(x, digits=4):
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def markdown(summary: Dict[str, Any]) -> str:
    lines = ["# Information probe of the benchmark tasks", "", f"`{summary['command']}`", "",
             "I: held-out I(A; Z | S) in nats per decision [95% CI], at the peak horizon, at the best fragment "
             "horizon K (return over the next K steps) and to the episode's end; `*`: no horizon's classifier "
             "beat q = pi on the validation episodes (a lower bound of 0 by construction, not a measured 0).", "",
             "| task | I at peak [95% CI] | peak horizon | best fragment K: I | to the end: I [95% CI] | share > 0.05 "
             "| top 10% hold | " + " | ".join(f"{m} - a2c" for m in MODES) + " |",
             "|---|---|---:|---|---|---:|---:|" + "---:|" * len(MODES)]
    for r in summary["rows"]:
        cells = []
        for m in MODES:
            d = r["credit_minus_a2c"].get(m)
            cells.append("n/a" if not d else f"{d['mean']:+.3f}")
        top = r["top10_share"]
        frag = ("n/a" if r.get("fragment_horizon") is None
                else f"{r['fragment_horizon']}: {_f(r['information_fragment'])}")
        end = ("n/a" if r.get("information_end") is None
               else f"{_f(r['information_end'])} [{_f(r['ci_end'][0])}, {_f(r['ci_end'][1])}]")
        star = " *" if r.get("fit_never_improved") else ""
        lines.append(f"| {r['task']} | {_f(r['information'])} [{_f(r['ci'][0])}, {_f(r['ci'][1])}]{star} | "
                     f"{r['peak_horizon']} | {frag} | {end} | {100 * r['share_above_threshold']:.1f}% | "
                     f"{'n/a' if top is None or top != top else f'{100 * top:.0f}%'} | " + " | ".join(cells) + " |")
    lines += ["", "Spearman rank correlation of the information with credit minus A2C:", "",
              "| tasks | " + " | ".join((*MODES, "best")) + " |", "|---|" + "---:|" * (len(MODES) + 1)]
    for group, entry in summary["correlations"].items():
        cells = [f"{_f(e['spearman'], 2)} (n={e['tasks']})" for e in entry.values()]
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    if summary["oracle"]:
        lines += ["", "Oracles: information at the start state (t = 0, return to the episode's end) against the "
                  "closed form I(A; Z | S0) (benchmarks/credit_analysis.py; key-to-door: its Gaussian approximation):",
                  "", "| setting | closed form | probe [95% CI] | probe - closed form |", "|---|---:|---|---:|"]
        for o in summary["oracle"]:
            lines.append(f"| {o['task']} | {_f(o['closed_form'])} | {_f(o['probe'])} [{_f(o['ci'][0])}, "
                         f"{_f(o['ci'][1])}] | {o['bias']:+.4f} |")
    return "\n".join(lines) + "\n"


def quick_spec(spec: Dict[str, Any]) -> Dict[str, Any]:
    """A task's spec at the quick budgets (its env and horizons unchanged)."""
    return {**spec, "budget": {**spec["budget"], **QUICK_BUDGET}, "fit": {**(spec.get("fit") or {}), **QUICK_FIT}}


def main(argv=None) -> int:
    from common import benchmark_parser, check_out

    parser = benchmark_parser(__doc__.splitlines()[0],
                              quick_help=f"{', '.join(QUICK_TASKS)} at {QUICK_BUDGET['episodes']} episodes / "
                                         f"{QUICK_BUDGET['max_steps']:,} steps, into --out or a temp dir")
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    check_out(parser, args, default_out=DEFAULT_OUT, results_root=RESULTS, quick_prefix="hca_probe_quick_")
    specs = tasks()
    if args.quick:
        specs = {name: quick_spec(specs[name]) for name in QUICK_TASKS}
    names = args.tasks or list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {list(specs)}")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if not args.report_only:
        for name in names:
            if (args.out / f"{name}.json").exists():
                continue
            if args.time_limit_min is not None and time.time() - started > 60 * args.time_limit_min:
                print("time limit: stopping before", name)
                break
            try:
                cell = run_task(name, specs[name], args.out, args.seed, args.torch_threads)
            except Exception as error:  # one task's failure (a budget too small) does not stop the rest
                print(f"{name}: failed: {type(error).__name__}: {error}", flush=True)
                continue
            print(f"{name}: {cell['probe']['horizons'][-1]['information']:.4f} nats ({cell['wall_s']:.0f} s)", flush=True)
    summarise(args.out, list(specs), ".venv/bin/python benchmarks/probe.py" + (" --quick" if args.quick else ""),
              specs)
    print(f"summary: {args.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
