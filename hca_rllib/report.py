"""`hca-rllib report RUN_DIR... --output OUT`: learning curves, diagnostics and a results
table from training run directories.

A run directory (written by `hca_rllib.runner`) holds ``run.json`` (algorithm, credit
mode, env, seed, command) and ``results.jsonl`` (one JSON line per training iteration;
read by `hca_rllib.runner.read_results`: a torn last line from a killed run is skipped,
a run with a damaged line elsewhere is listed as skipped with the file and line). The
arguments may also be parent directories: every directory below holding both files is a
run. Paths may be relative or start with `~`.

Runs are grouped by environment and method (``A2C`` for the A2C algorithm, else
``HCA (<credit>)``); the seeds of a group are aggregated. Written into the output
directory:

* ``learning_curve_<env>.png`` per environment: score against environment steps, per
  method the mean over seeds on a common step grid (up to the shortest seed) with a 95%
  bootstrap band over seeds;
* ``diagnostics_<env>.png`` per environment with HCA diagnostics: mutual information,
  hindsight vs policy accuracy, trust in the classifier, C2A2C mask and HCA clip fractions;
* ``performance_profile_<env>.png`` per environment with 2 or more scored methods:
  rliable's performance profile of the final scores (fraction of seeds above tau);
* ``report.md``: the runs found, the results table and the images;
* ``report.json``: the same numbers.

The final score of a seed is the mean ``score`` over its last `final_fraction` of
iterations; per group the interquartile mean over seeds with a 95% stratified bootstrap
CI and, where the environment has an A2C group, the probability of improvement over
A2C (statistics from rliable, through `hca_rllib.stats`). matplotlib is imported only
when drawing, on the Agg canvas (no display; rliable's profile plot imports pyplot but
draws on the report's own figure).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from hca_rllib import stats
from hca_rllib.runner import read_results, user_path

__all__ = [
    "RunData",
    "find_run_dirs",
    "load_run",
    "method_label",
    "final_score",
    "common_grid_curves",
    "write_report",
    "make_figure",
]

RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
BASELINE = "A2C"
GRID_POINTS = 200
BAND_REPS = 2_000
DPI = 120
STEPS_LABEL = "environment steps"

# Diagnostics panels: (title, y label, [(results key, line style, legend suffix)]).
DIAGNOSTIC_PANELS: Tuple[Tuple[str, str, Tuple[Tuple[str, str, str], ...]], ...] = (
    ("Mutual information I(A; Z | S), held-out estimate", "mutual information (nats)",
     (("mutual_information", "-", ""),)),
    ("Hindsight vs policy accuracy", "argmax accuracy on taken actions (0-1)",
     (("hindsight_accuracy", "-", " hindsight"), ("policy_accuracy", "--", " policy"))),
    ("Trust in the classifier", "trust weight (0-1)",
     (("trust", "-", " global"), ("decision_trust", "--", " per decision (mean)"))),
    ("C2A2C mask fraction", "fraction of steps masked (0-1)",
     (("c2a2c_mask_fraction", "-", ""),)),
    ("HCA ratio clip fraction", "fraction of ratios clipped (0-1)",
     (("hca_clip_fraction", "-", ""),)),
)


# ------------------------------------------------------------------------ loading


@dataclass
class RunData:
    """One run directory: its `run.json`, its complete result lines, and how many lines
    of `results.jsonl` were skipped (1 for a torn last line, else 0)."""

    directory: Path
    meta: Dict[str, Any]
    rows: List[Dict[str, Any]]
    bad_lines: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def env(self) -> str:
        return str(self.meta.get("env") or "unknown env")

    @property
    def method(self) -> str:
        return method_label(self.meta)

    @property
    def seed(self) -> Any:
        return self.meta.get("seed")

    @property
    def command(self) -> Optional[str]:
        return self.meta.get("command")

    def series(self, key: str) -> Tuple[np.ndarray, np.ndarray]:
        """(env steps, values) of the iterations where `key` is a finite number."""
        steps, values = [], []
        for row in self.rows:
            value, step = _finite(row.get(key)), _finite(row.get("env_steps"))
            if value is not None and step is not None:
                steps.append(step)
                values.append(value)
        return np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)

    def has(self, key: str) -> bool:
        return any(_finite(row.get(key)) is not None for row in self.rows)

    @property
    def env_steps(self) -> Optional[int]:
        steps = [_finite(row.get("env_steps")) for row in self.rows]
        steps = [s for s in steps if s is not None]
        return int(max(steps)) if steps else None


def _finite(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def find_run_dirs(paths: Iterable[Path]) -> List[Path]:
    """Every directory at or below `paths` holding both `run.json` and `results.jsonl`,
    sorted and without duplicates. Raises FileNotFoundError for a path that does not
    exist."""
    found = set()
    for path in paths:
        path = user_path(path)
        if not path.exists():
            raise FileNotFoundError(f"no such directory: {path}")
        if path.is_file():
            path = path.parent
        candidates = [path / RUN_FILE] + sorted(path.rglob(RUN_FILE))
        for run_file in candidates:
            if run_file.is_file() and (run_file.parent / RESULTS_FILE).is_file():
                found.add(run_file.parent.resolve())
    return sorted(found)


def load_run(directory: Path) -> RunData:
    """Read one run directory. Raises ValueError when `run.json` is unreadable or
    `results.jsonl` is damaged before its last line."""
    directory = user_path(directory)
    try:
        meta = json.loads((directory / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"unreadable {RUN_FILE}: {error}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{RUN_FILE} is not a JSON object")
    torn: List[str] = []
    rows = read_results(directory / RESULTS_FILE, on_torn=torn.append)
    return RunData(directory, meta, rows, len(torn))


def method_label(meta: Dict[str, Any]) -> str:
    """`A2C` for the A2C algorithm, else `HCA (<credit>)`."""
    algo = str(meta.get("algo") or "HCA")
    if algo.upper() == "A2C":
        return "A2C"
    credit = meta.get("credit")
    return f"{algo} ({credit})" if credit else algo


# ------------------------------------------------------------------- aggregation


def final_window(num_iterations: int, final_fraction: float) -> int:
    """How many trailing iterations make the final score: `ceil(fraction * n)` (at
    least 1, and a product like 0.1 * 30 = 3.0000000000000004 counts as 3)."""
    return max(1, math.ceil(final_fraction * num_iterations - 1e-9))


def final_score(rows: Sequence[Dict[str, Any]], final_fraction: float = 0.1) -> Optional[float]:
    """Mean of the finite `score` values over the last `final_window(len(rows))`
    iterations; None when that window holds no score."""
    if not rows:
        return None
    window = rows[-final_window(len(rows), final_fraction):]
    values = [v for v in (_finite(row.get("score")) for row in window) if v is not None]
    return float(np.mean(values)) if values else None


def common_grid_curves(series: Sequence[Tuple[np.ndarray, np.ndarray]],
                       num: int = GRID_POINTS) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """Curves of several seeds, each `(steps, values)`, linearly interpolated on one
    grid of env steps from the latest first step to the earliest last step (no
    extrapolation: the grid stops at the shortest seed). Returns (grid, values[seed,
    point]); None when no seed has a point. When the seeds' step ranges do not overlap
    the grid is the single step where the shortest seed ends."""
    series = [(s, v) for s, v in series if len(s)]
    if not series:
        return None
    start = max(float(s[0]) for s, _ in series)
    end = min(float(s[-1]) for s, _ in series)
    if start >= end:
        grid = np.array([end])
    else:
        longest = max(len(s) for s, _ in series)
        grid = np.linspace(start, end, max(2, min(num, longest)))
    curves = np.array([np.interp(grid, s, v) for s, v in series])
    return grid, curves


@dataclass
class Group:
    env: str
    method: str
    runs: List[RunData]


def _method_order(method: str) -> Tuple[int, str]:
    return (0 if method == BASELINE else 1, method)


def _group_runs(runs: Sequence[RunData]) -> Dict[str, Dict[str, Group]]:
    groups: Dict[str, Dict[str, Group]] = {}
    for run in sorted(runs, key=lambda r: (r.env, _method_order(r.method), str(r.seed),
                                           str(r.directory))):
        by_method = groups.setdefault(run.env, {})
        by_method.setdefault(run.method, Group(run.env, run.method, [])).runs.append(run)
    return {env: dict(sorted(m.items(), key=lambda kv: _method_order(kv[0])))
            for env, m in sorted(groups.items())}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "env"


# ---------------------------------------------------------------------- drawing


def make_figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas, at the report's DPI (matplotlib imported here,
    lazily): every figure the report and the probe draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def _colors(methods: Sequence[str]) -> Dict[str, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {method: cmap(i % 10) for i, method in enumerate(methods)}


def _seeds_text(n: int) -> str:
    return "1 seed" if n == 1 else f"n={n} seeds"


def _draw_mean_band(ax, grid: np.ndarray, curves: np.ndarray, *, color, label: str,
                    linestyle: str = "-") -> None:
    mean, low, high = stats.bootstrap_band(curves, np.mean, reps=BAND_REPS)
    marker = "o" if len(grid) == 1 else None
    ax.plot(grid, mean, color=color, label=label, linewidth=1.8, linestyle=linestyle,
            marker=marker)
    if curves.shape[0] >= 2 and len(grid) > 1:
        ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)


def _style_axes(ax, title: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(STEPS_LABEL)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    from matplotlib.ticker import EngFormatter

    ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 20k, 1.5M


def _plot_learning_curves(path: Path, env: str, groups: Dict[str, Group], ylabel: str,
                          colors: Dict[str, Any]) -> Dict[str, Any]:
    """Draw one environment's learning curves; returns what was drawn per method."""
    figure = make_figure(7.5, 4.6)
    ax = figure.add_subplot(1, 1, 1)
    drawn: Dict[str, Any] = {}
    for method, group in groups.items():
        scored = [run for run in group.runs if run.has("score")]
        curves = common_grid_curves([run.series("score") for run in scored])
        if curves is None:
            continue
        grid, values = curves
        label = f"{method} ({_seeds_text(len(scored))})"
        _draw_mean_band(ax, grid, values, color=colors[method], label=label)
        drawn[method] = {"seeds": len(scored), "grid_end_env_steps": float(grid[-1])}
    _style_axes(ax, env, ylabel)
    if drawn:
        ax.legend(title="mean over seeds, band: 95% bootstrap CI", fontsize="small",
                  title_fontsize="small", loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return drawn


def _plot_diagnostics(path: Path, env: str, groups: Dict[str, Group],
                      colors: Dict[str, Any]) -> Optional[List[str]]:
    """Draw one environment's diagnostics; None (and nothing written) when no run of
    the environment logs any of them. Returns the panel titles drawn."""
    panels = [panel for panel in DIAGNOSTIC_PANELS
              if any(run.has(key) for group in groups.values() for run in group.runs
                     for key, _, _ in panel[2])]
    if not panels:
        return None
    ncols = 1 if len(panels) == 1 else 2
    nrows = math.ceil(len(panels) / ncols)
    figure = make_figure(6.0 * ncols, 3.6 * nrows + 0.5)
    for index, (title, ylabel, lines) in enumerate(panels):
        ax = figure.add_subplot(nrows, ncols, index + 1)
        for method, group in groups.items():
            for key, linestyle, suffix in lines:
                runs = [run for run in group.runs if run.has(key)]
                curves = common_grid_curves([run.series(key) for run in runs])
                if curves is None:
                    continue
                label = f"{method}{suffix} ({_seeds_text(len(runs))})"
                _draw_mean_band(ax, curves[0], curves[1], color=colors[method], label=label,
                                linestyle=linestyle)
        _style_axes(ax, title, ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small", loc="best")
    figure.suptitle(f"{env}: diagnostics (mean over seeds, band: 95% bootstrap CI)")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return [panel[0] for panel in panels]


def _plot_performance_profile(path: Path, env: str, summaries: Dict[str, Dict[str, Any]],
                              colors: Dict[str, Any], score_label: str
                              ) -> Optional[Dict[str, Any]]:
    """rliable's performance profile of one environment's final scores (the methods
    share the environment, so their scores are comparable): per method the fraction of
    seeds whose final score is above tau, with its 95% stratified bootstrap band, on 51
    thresholds spanning all scores plus their pooled quartiles. None (nothing written)
    with fewer than 2 scored methods."""
    scores = {m: s["final_scores"] for m, s in summaries.items() if s["n_seeds"]}
    if len(scores) < 2:
        return None
    pooled = np.concatenate([np.asarray(v, dtype=np.float64) for v in scores.values()])
    quartiles = np.percentile(pooled, [25, 50, 75])
    taus = np.unique(np.concatenate([np.linspace(pooled.min(), pooled.max(), 51), quartiles]))
    taus, profiles = stats.performance_profile(scores, taus)
    figure = make_figure(6.4, 4.2)
    ax = figure.add_subplot(1, 1, 1)
    stats.plot_performance_profile(ax, taus, profiles, {m: colors[m] for m in scores},
                                   xlabel=f"final score: {score_label} (tau)")
    ax.set_title(f"{env}: performance profile (band: 95% stratified bootstrap CI)",
                 fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    at = [int(np.searchsorted(taus, q)) for q in quartiles]
    return {
        "taus": taus.tolist(),
        "quartile_taus": quartiles.tolist(),
        "reps": stats.PROFILE_REPS,
        "methods": {m: {"profile": p.tolist(), "ci_low": lo.tolist(), "ci_high": hi.tolist(),
                        "at_quartile_taus": [[float(p[i]), float(lo[i]), float(hi[i])]
                                             for i in at]}
                    for m, (p, lo, hi) in profiles.items()},
    }


# ----------------------------------------------------------------------- report


def _fmt(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _group_summary(group: Group, final_fraction: float) -> Dict[str, Any]:
    finals: Dict[str, float] = {}
    for run in group.runs:
        value = final_score(run.rows, final_fraction)
        if value is not None:
            finals[str(run.directory)] = value
    scores = np.array(list(finals.values()), dtype=np.float64)
    scored_runs = [run for run in group.runs if str(run.directory) in finals]
    summary: Dict[str, Any] = {
        "env": group.env,
        "method": group.method,
        "n_runs": len(group.runs),
        "n_seeds": len(scores),
        "seeds": [run.seed for run in scored_runs],
        "final_scores": scores.tolist(),
        "iqm": None, "ci_low": None, "ci_high": None, "ci_method": None, "mean": None,
        "env_steps_min": min((run.env_steps for run in scored_runs
                              if run.env_steps is not None), default=None),
        "iterations": [len(run.rows) for run in scored_runs],
        "command": next((run.command for run in group.runs if run.command), None),
    }
    if len(scores):
        point, low, high, method = stats.iqm_ci(scores)
        summary.update(iqm=point, ci_low=low, ci_high=high, ci_method=method,
                       mean=float(np.mean(scores)))
    return summary


class NoRunsError(FileNotFoundError):
    """No run to report: none found, or none with a score yet."""


def write_report(run_dirs: List[Path], out: Path, *, final_fraction: float = 0.1) -> Path:
    """Write learning curves, diagnostics, `report.md` and `report.json` for the runs at
    or below `run_dirs` into `out`; returns the path of `report.md`.

    Raises FileNotFoundError when a path does not exist, NoRunsError (a
    FileNotFoundError) when no run directory is found or none has a score yet (nothing is
    written then), ValueError for a `final_fraction` outside (0, 1]."""
    if not 0 < final_fraction <= 1:
        raise ValueError(f"final_fraction must be in (0, 1], got {final_fraction}")
    run_dirs = [user_path(p) for p in run_dirs]
    directories = find_run_dirs(run_dirs)
    if not directories:
        raise NoRunsError(
            f"no run directory (with {RUN_FILE} and {RESULTS_FILE}) at or below: "
            + ", ".join(str(p) for p in run_dirs))
    out = user_path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"report output {str(out)!r} is a file, not a directory")
    runs, skipped, notes = _load_runs(directories, final_fraction)
    if not runs:  # nothing to draw or tabulate: no report rather than an empty one
        raise NoRunsError(
            f"no run with a score at or below {', '.join(str(p) for p in run_dirs)} "
            f"({len(directories)} run director{'y' if len(directories) == 1 else 'ies'}: "
            f"{skipped[0]['reason']}{' ...' if len(skipped) > 1 else ''})")
    out.mkdir(parents=True, exist_ok=True)
    environments = _report_environments(runs, out, final_fraction, notes)
    data = _report_data(run_dirs, runs, skipped, notes, environments, final_fraction)
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str))
    report = out / "report.md"
    report.write_text(_markdown(data, len(directories)))
    return report


def _load_runs(directories: List[Path], final_fraction: float
               ) -> Tuple[List[RunData], List[Dict[str, Any]], List[str]]:
    """(the runs to draw, the runs skipped with their reason, notes on what was read). A
    run without a final score yet is listed as skipped, and still drawn if it has any
    score."""
    notes: List[str] = []
    skipped: List[Dict[str, Any]] = []
    runs: List[RunData] = []
    for directory in directories:
        try:
            run = load_run(directory)
        except ValueError as error:
            skipped.append({"run_dir": str(directory), "reason": str(error)})
            continue
        if run.bad_lines:
            notes.append(f"{directory}: skipped {run.bad_lines} unreadable line(s) of "
                         f"{RESULTS_FILE} (a torn last line from a killed run)")
        if final_score(run.rows, final_fraction) is None:
            skipped.append({"run_dir": str(directory), "reason": _no_score_reason(run, final_fraction),
                            "env": run.env, "method": run.method, "seed": run.seed})
            if not run.has("score"):
                continue  # nothing to draw either
        runs.append(run)
    return runs, skipped, notes


def _no_score_reason(run: RunData, final_fraction: float) -> str:
    """Why a run has no final score."""
    if not run.rows:
        return "no results yet"
    if not run.has("score"):
        return f"no score yet ({len(run.rows)} iterations)"
    return (f"no score in its last {final_window(len(run.rows), final_fraction)} "
            f"of {len(run.rows)} iterations")


def _report_environments(runs: List[RunData], out: Path, final_fraction: float,
                         notes: List[str]) -> Dict[str, Any]:
    """Per environment: its groups' summaries and its figures (drawn into `out`); what
    the runs' settings and seeds call for goes into `notes`."""
    groups = _group_runs(runs)
    colors = _colors(sorted({run.method for run in runs}, key=_method_order))
    environments: Dict[str, Any] = {}
    used_names: set = set()
    for env, by_method in groups.items():
        slug = _slug(env)
        while slug in used_names:
            slug += "_"
        used_names.add(slug)
        full_game = any(run.has("game_return_mean") for group in by_method.values()
                        for run in group.runs)
        ylabel = "return (full game)" if full_game else "episode return"
        summaries = _method_summaries(env, by_method, final_fraction, notes)
        environments[env] = {"score_label": ylabel,
                             **_draw_environment(out, env, slug, by_method, summaries, colors, ylabel),
                             "methods": summaries}
    return environments


def _method_summaries(env: str, by_method: Dict[str, Group], final_fraction: float,
                      notes: List[str]) -> Dict[str, Dict[str, Any]]:
    """Each method's `_group_summary` and its probability of improvement over A2C; a note
    where a group's runs differ in their overrides or share a seed."""
    summaries = {method: _group_summary(group, final_fraction) for method, group in by_method.items()}
    baseline = summaries.get(BASELINE)
    for method, summary in summaries.items():
        poi = None
        if (method != BASELINE and baseline is not None and summary["n_seeds"]
                and baseline["n_seeds"]):
            poi = stats.probability_of_improvement(summary["final_scores"], baseline["final_scores"])
        summary["probability_of_improvement_over_a2c"] = poi
        settings = {json.dumps(run.meta.get("set") or {}, sort_keys=True)
                    for run in by_method[method].runs}
        if len(settings) > 1:
            notes.append(f"{env} / {method}: the runs differ in their --set overrides "
                         f"({'; '.join(sorted(settings))}) and are aggregated anyway")
        seeds = [run.seed for run in by_method[method].runs]
        if len(seeds) != len(set(map(str, seeds))):
            notes.append(f"{env} / {method}: several runs share a seed ({seeds})")
    return summaries


def _draw_environment(out: Path, env: str, slug: str, by_method: Dict[str, Group],
                      summaries: Dict[str, Dict[str, Any]], colors: Dict[str, Any],
                      ylabel: str) -> Dict[str, Any]:
    """One environment's learning curves, diagnostics and performance profile, drawn into
    `out` (a figure with nothing to show is not written, and a stale one from an earlier
    report is removed); what report.json says of them."""
    curve_name = f"learning_curve_{slug}.png"
    drawn = _plot_learning_curves(out / curve_name, env, by_method, ylabel, colors)
    diag_name = f"diagnostics_{slug}.png"
    panels = _plot_diagnostics(out / diag_name, env, by_method, colors)
    if panels is None and (out / diag_name).exists():
        (out / diag_name).unlink()
    profile_name = f"performance_profile_{slug}.png"
    profile = _plot_performance_profile(out / profile_name, env, summaries, colors, ylabel)
    if profile is None and (out / profile_name).exists():
        (out / profile_name).unlink()
    return {
        "learning_curve": curve_name,
        "learning_curve_methods": drawn,
        "diagnostics": diag_name if panels is not None else None,
        "diagnostics_panels": panels or [],
        "performance_profile": profile_name if profile is not None else None,
        "performance_profile_data": profile,
    }


def _report_data(run_dirs: List[Path], runs: List[RunData], skipped: List[Dict[str, Any]], notes: List[str],
                 environments: Dict[str, Any], final_fraction: float) -> Dict[str, Any]:
    """What report.json holds (and report.md shows)."""
    ci_method = next((s["ci_method"] for e in environments.values()
                      for s in e["methods"].values()
                      if s["ci_method"] and s["n_seeds"] >= 2), None)
    return {
        "inputs": [str(p) for p in run_dirs],
        "final_fraction": final_fraction,
        "final_score_definition": (
            f"per seed: mean of `score` over the last ceil({final_fraction} x iterations) "
            f"iterations; per group: interquartile mean over seeds"),
        "ci_method": ci_method,
        "probability_of_improvement_definition": (
            "P(X > Y) over all pairs of final scores (method seed, A2C seed), ties "
            "counting half"),
        "runs": [{"run_dir": str(run.directory), "env": run.env, "method": run.method,
                  "seed": run.seed, "iterations": len(run.rows), "env_steps": run.env_steps,
                  "bad_lines": run.bad_lines,
                  "final_score": final_score(run.rows, final_fraction),
                  "command": run.command} for run in runs],
        "skipped": skipped,
        "notes": notes,
        "environments": environments,
    }


def _markdown(data: Dict[str, Any], found: int) -> str:
    """report.md from `data` (report.json's content); `found`: the run directories found."""
    lines = ["# hca-rllib training report", ""]
    lines += _markdown_runs(data, found)
    lines += _markdown_notes(data)
    lines += _markdown_final_scores(data)
    for env, e in data["environments"].items():
        lines += _markdown_environment(env, e)
    return "\n".join(lines)


def _markdown_runs(data: Dict[str, Any], found: int) -> List[str]:
    """The runs found, a table of the groups and the command of one run per group."""
    envs = data["environments"]
    n_groups = sum(len(e["methods"]) for e in envs.values())
    lines = [
        "## Runs",
        "",
        f"{found} run director{'y' if found == 1 else 'ies'} found under "
        + ", ".join(_code(p) for p in data["inputs"])
        + f": {len(data['runs'])} with scores, in {n_groups} group(s) (environment x "
        f"method) over {len(envs)} environment(s).",
        "",
    ]
    if not envs:
        return lines
    lines += ["| environment | method | runs | iterations | env steps (shortest) |",
              "|---|---|---:|---|---:|"]
    for env, e in envs.items():
        for method, s in e["methods"].items():
            its = s["iterations"]
            span = "n/a" if not its else (f"{min(its)}" if min(its) == max(its)
                                          else f"{min(its)}-{max(its)}")
            steps = "n/a" if s["env_steps_min"] is None else f"{s['env_steps_min']:,}"
            lines.append(f"| {_cell(env)} | {_cell(method)} | {s['n_runs']} | {span} | "
                         f"{steps} |")
    lines += ["", "Command of one run per group:", ""]
    for env, e in envs.items():
        for method, s in e["methods"].items():
            command = s["command"] or "(not recorded)"
            lines.append(f"- {env} / {method}: {_code(command)}")
    lines.append("")
    return lines


def _markdown_notes(data: Dict[str, Any]) -> List[str]:
    """The runs skipped and the notes, if any."""
    if not (data["skipped"] or data["notes"]):
        return []
    lines = ["### Notes", ""]
    for item in data["skipped"]:
        lines.append(f"- skipped {_code(item['run_dir'])}: {item['reason']}")
    for note in data["notes"]:
        lines.append(f"- {note}")
    lines.append("")
    return lines


def _markdown_final_scores(data: Dict[str, Any]) -> List[str]:
    """The final-score table: IQM with its CI, mean, probability of improvement."""
    lines = [
        "## Final scores",
        "",
        f"Final score of a seed: mean of `score` over its last ceil({data['final_fraction']} x "
        "iterations) iterations. Per group: interquartile mean (IQM) of the seeds' final "
        "scores with a 95% stratified bootstrap "
        f"CI ({data['ci_method'] or 'none: fewer than 2 seeds everywhere'}). "
        "P(improvement over A2C): probability that a seed of the method ends above a seed "
        "of A2C on the same environment (ties count half).",
        "",
        "| environment | method | seeds | IQM final score [95% CI] | mean | "
        "P(improvement over A2C) |",
        "|---|---|---:|---|---:|---:|",
    ]
    for env, e in data["environments"].items():
        for method, s in e["methods"].items():
            if s["iqm"] is None:
                iqm_text = "no score yet"
            elif s["n_seeds"] < 2:
                iqm_text = f"{_fmt(s['iqm'])} (1 seed, no CI)"
            else:
                iqm_text = f"{_fmt(s['iqm'])} [{_fmt(s['ci_low'])}, {_fmt(s['ci_high'])}]"
            poi = s["probability_of_improvement_over_a2c"]
            poi_text = "baseline" if method == BASELINE else (
                "n/a" if poi is None else f"{poi:.2f}")
            lines.append(f"| {_cell(env)} | {_cell(method)} | {s['n_seeds']} | {iqm_text} | "
                         f"{_fmt(s['mean'])} | {poi_text} |")
    lines.append("")
    return lines


def _markdown_environment(env: str, e: Dict[str, Any]) -> List[str]:
    """One environment's section: its learning curves, diagnostics and performance
    profile (with the profile at the quartiles of all final scores)."""
    lines = [f"## {env}", ""]
    lines += [f"Learning curves ({e['score_label']} against {STEPS_LABEL}):", "",
              f"![{env} learning curves]({e['learning_curve']})", ""]
    if e["diagnostics"]:
        lines += ["Diagnostics: " + ", ".join(e["diagnostics_panels"]) + ".", "",
                  f"![{env} diagnostics]({e['diagnostics']})", ""]
    else:
        lines += ["No diagnostics: no run of this environment logs them (A2C only).", ""]
    profile = e.get("performance_profile_data")
    if profile:
        q = [_fmt(t) for t in profile["quartile_taus"]]
        lines += ["Performance profile (rliable): fraction of seeds whose final score is "
                  "above tau, with a 95% stratified bootstrap band; a curve above another "
                  "is better at every threshold. At the quartiles of all final scores:", "",
                  f"| method | > {q[0]} | > {q[1]} | > {q[2]} |", "|---|---|---|---|"]
        for method, m in profile["methods"].items():
            cells = [f"{p:.2f} [{lo:.2f}, {hi:.2f}]" for p, lo, hi in m["at_quartile_taus"]]
            lines.append(f"| {_cell(method)} | " + " | ".join(cells) + " |")
        lines += ["", f"![{env} performance profile]({e['performance_profile']})", ""]
    return lines
