"""What the benchmark scripts share (`a2c_parity.py`, `credit_modes.py`, `learning.py`,
`credit_analysis.py`).

* Recording: `window_mean`, and `EpisodeLog` (from `hca_rllib.callbacks`): the exact
  return and length of every completed episode on the local EnvRunner, recorded by the
  package's one episode-end callback (all chunks of an episode summed).
* Statistics, re-exported from `hca_rllib.stats` (which calls rliable): `iqm`, `iqm_ci`
  (IQM over seeds and its 95% stratified bootstrap CI), `bootstrap_ci` (any statistic,
  percentile bootstrap over seeds), `probability_of_improvement`, `paired_difference`.
* Run store and control: one compact JSON record per finished run (`compact_record`,
  `store_run`; the full record with every episode goes beside it, gzipped and ignored by
  git, `load_raw`), `run_plan` (skips runs already stored, refuses to mix stored runs of
  another setting, stops cleanly between runs after `--time-limit-min`), `load_runs`,
  `command_line`, `machine_note`.
* Plotting: `stack_curves`, `curve_stride` and `plot_mean_band` (mean over seeds with a
  band).

Everything heavy (ray, torch, matplotlib, scipy) is imported lazily, so
`--report-only` and the unit tests stay cheap.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import platform
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The statistics live in the package (hca_rllib.stats, which calls rliable); re-exported
# here under their old names for the benchmark scripts.
from hca_rllib.stats import (  # noqa: E402,F401
    BOOTSTRAP_REPS,
    BOOTSTRAP_SEED,
    bootstrap_ci,
    iqm,
    iqm_ci,
    paired_difference,
    probability_of_improvement,
)

RAY_INIT_KWARGS = dict(address="local", num_cpus=2, include_dashboard=False,
                       object_store_memory=300 * 2**20, log_to_driver=False,
                       logging_level="ERROR")


# --------------------------------------------------------------------- recording


def window_mean(returns: Sequence[float], k: int) -> Optional[float]:
    """Mean of the last `k` values, None when there are none."""
    if not returns:
        return None
    return float(np.mean(returns[-k:]))


# The one episode recorder: HCAConfig's default callback fills an `EpisodeLog` attached
# to the local EnvRunner (re-exported here for the benchmark scripts).
from hca_rllib.callbacks import EpisodeLog  # noqa: E402,F401
from hca_rllib.fields import upgrade_state  # noqa: E402


def lifetime_env_steps(result: Dict[str, Any]) -> int:
    """Env steps sampled so far, from an `algo.train()` result (ray 2.60)."""
    lifetime = result.get("num_env_steps_sampled_lifetime")
    if lifetime is None:
        lifetime = result["env_runners"]["num_env_steps_sampled_lifetime"]
    return int(lifetime)


# -------------------------------------------------------------------- statistics


def nan_mean(values: Iterable[Optional[float]]) -> Optional[float]:
    """Mean of the finite values (None counts as missing); None when there are none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.mean(finite)) if finite else None


# ---------------------------------------------------------------- run store/control


# The package's default credit mode, written out so that its stored runs stay what they
# were whatever the defaults become (the benchmarks' `expected_hca_blend_nomem` method:
# expected HCA with the evidence trust, the calibration scale in the trust, no memory).
DEFAULT_CREDIT: Dict[str, Any] = {
    "credit": "expected_hca", "trust": "evidence", "hindsight": {"hiddens": [128, 128]},
    "hindsight_lr": 2.1e-3, "hindsight_epochs": 4,
}
# A2C, with a small classifier ([64], trained once per batch at the policy's learning
# rate, as in the earlier runs) beside it for the diagnostics only: its own optimizer and
# a detached torso, so the policy's update is A2C's (the benchmarks' `a2c` method).
A2C_WITH_CLASSIFIER: Dict[str, Any] = {
    "credit": "a2c", "hindsight_loss_coeff": 1.0, "hindsight_lr": None, "hindsight_epochs": 0,
    "hindsight": {"hiddens": [64]},
}
# The credit modes at the default's trust and classifier (the `_blend_nomem` suffix: the
# calibration scale in the trust, no classifier memory) and without the trust (`_pure`).
CREDIT_METHODS: Dict[str, Dict[str, Any]] = {
    "a2c": A2C_WITH_CLASSIFIER,
    "expected_hca_blend_nomem": DEFAULT_CREDIT,
    "hca_blend_nomem": {**DEFAULT_CREDIT, "credit": "hca"},
    "c2a2c_blend_nomem": {**DEFAULT_CREDIT, "credit": "c2a2c"},
    "expected_hca_pure_nomem": {**DEFAULT_CREDIT, "trust": None},
    "hca_pure_nomem": {**DEFAULT_CREDIT, "credit": "hca", "trust": None},
    "c2a2c_pure_nomem": {**DEFAULT_CREDIT, "credit": "c2a2c", "trust": None},
    # The default with fewer extra classifier passes per batch (the cost routes).
    "expected_hca_blend_e1": {**DEFAULT_CREDIT, "hindsight_epochs": 1},
    "expected_hca_blend_e0": {**DEFAULT_CREDIT, "hindsight_epochs": 0},
    # The reward outcome (one classifier input per (step, reward event) in a window of
    # 32 or 64 steps), with the evidence trust and without it (`_pure`).
    "reward_w32": {**DEFAULT_CREDIT, "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 32}},
    "reward_w64": {**DEFAULT_CREDIT, "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 64}},
    # The reward outcome's classifier with fewer extra passes, or at the policy's lr.
    "reward_w32_e1": {**DEFAULT_CREDIT, "hindsight_epochs": 1,
                      "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 32}},
    "reward_w32_lr1x": {**DEFAULT_CREDIT, "hindsight_lr": None,
                        "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 32}},
    "reward_w32_pure": {**DEFAULT_CREDIT, "trust": None,
                        "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 32}},
    "reward_w64_pure": {**DEFAULT_CREDIT, "trust": None,
                        "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 64}},
    # The trust that holds until the estimator's update is shown biased (`trust="bias"`),
    # on the reward outcome and on the default's return outcome.
    "reward_w32_bias": {**DEFAULT_CREDIT, "trust": "bias",
                        "hindsight": {"hiddens": [128, 128], "outcome": "reward", "window": 32}},
    "expected_hca_bias": {**DEFAULT_CREDIT, "trust": "bias"},
}
# A credit window longer than the 64-step fragment: 2 envs x 256-step fragments (the same
# 512-step batch), A2C at that sampling too (`_f256`), and the reward outcome with a window
# of 128 steps; `env_runners` holds a method's `.env_runners()` overrides.
LONG_FRAGMENTS = {"num_envs_per_env_runner": 2, "rollout_fragment_length": 256}
_REWARD_W128 = {"hiddens": [128, 128], "outcome": "reward", "window": 128}
CREDIT_METHODS.update({
    "a2c_f256": {**A2C_WITH_CLASSIFIER, "env_runners": LONG_FRAGMENTS},
    "reward_w32_bias_f256": {**CREDIT_METHODS["reward_w32_bias"], "env_runners": LONG_FRAGMENTS},
    "reward_w128_bias_f256": {**DEFAULT_CREDIT, "trust": "bias", "hindsight": _REWARD_W128,
                              "env_runners": LONG_FRAGMENTS},
    "reward_w128_pure_f256": {**DEFAULT_CREDIT, "trust": None, "hindsight": _REWARD_W128,
                              "env_runners": LONG_FRAGMENTS},
})
# The reward outcome with its window carried across fragments (A2C's 64-step fragments
# kept): a window of 32 (the default's, no longer cut at the fragment's end) or of 64.
for _window in (32, 64):
    _across = {"hiddens": [128, 128], "outcome": "reward", "window": _window, "across_fragments": True}
    CREDIT_METHODS[f"reward_w{_window}_across_bias"] = {**DEFAULT_CREDIT, "trust": "bias", "hindsight": _across}
    CREDIT_METHODS[f"reward_w{_window}_across_pure"] = {**DEFAULT_CREDIT, "trust": None, "hindsight": _across}
# The learning-rate control: A2C, the default and the pure estimators (return and
# reward outcome) at multiples of the learning rate every other method runs at
# (HCAConfig's 7e-4), `<stem>_<tag>`; a credit mode's gain might be a larger effective
# step rather than better credit. A2C also at 1.5x, for its own curve; 5x and the reward
# outcome with the default trust (`reward_w32_blend`) for the 10k-step comparison
# (results/short_budget).
BASE_LR = 7e-4
LEARNING_RATE_SCALES: Dict[str, float] = {"lr15": 1.5, "lr2x": 2.0, "lr3x": 3.0, "lr5x": 5.0}
_LR_CONTROL_STEMS = {"a2c": "a2c", "expected_hca_blend": "expected_hca_blend_nomem",
                     "expected_hca_pure": "expected_hca_pure_nomem", "reward_w32_pure": "reward_w32_pure",
                     "reward_w32_blend": "reward_w32", "reward_w32_bias": "reward_w32_bias",
                     "expected_hca_bias": "expected_hca_bias", "reward_w64_across_bias": "reward_w64_across_bias",
                     "reward_w64_across_pure": "reward_w64_across_pure"}
CREDIT_METHODS.update({
    f"{stem}_{tag}": {**CREDIT_METHODS[method], "lr": factor * BASE_LR}
    for stem, method in _LR_CONTROL_STEMS.items() for tag, factor in LEARNING_RATE_SCALES.items()
    if stem == "a2c" or tag != "lr15"})


def apply_method(config, overrides: Dict[str, Any]):
    """`config` with a method's overrides (`CREDIT_METHODS`): `.training(...)`, and under
    `"env_runners"` its `.env_runners(...)` settings."""
    training = dict(overrides)
    env_runners = training.pop("env_runners", None)
    if env_runners:
        config.env_runners(**env_runners)
    return config.training(**training) if training else config


def write_json(path: Path, data: Any, *, indent: Optional[int] = None, allow_nan: bool = False) -> None:
    """Write JSON atomically (temp file + rename), so a killed run leaves no half file:
    compact, or indented by `indent` (`json.dumps`'s layout). `allow_nan`: write NaN and
    infinities as `json.dumps` does by default (not strict JSON; refused by default)."""
    text = (json.dumps(data, separators=(",", ":"), allow_nan=allow_nan) if indent is None
            else json.dumps(data, indent=indent, allow_nan=allow_nan))
    _write_atomic(path, text.encode())


def _write_atomic(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two processes may race
    tmp.write_bytes(payload)
    os.replace(tmp, path)


# ------------------------------------------------------------------ compact records

RECORD_FORMAT = "compact-1"
CURVE_POINTS = 200  # at most this many points per stored curve
DIAGNOSTICS_POINTS = 100  # and per stored diagnostic curve (no report plots them)
CURVE_DIGITS = 4  # significant digits of a stored curve point
DIAGNOSTICS_LAST = 10  # `diagnostics_last10`: mean over the last 10 iterations
PEAK_ITERATIONS = 5  # `diagnostics_peak5`: largest trailing 5-iteration mean
RAW_SUFFIX = ".raw.json.gz"  # the full record beside the compact one; not in git
# Curve columns reduced by their last value in a bin (running windows, step counts) or
# summed (counts); `return_mean_iteration` by the episode-weighted mean; others by mean.
_LAST_OF_BIN = ("env_steps", "return_mean_last", "library_window_mean")
_SUM_OF_BIN = ("episodes_iteration",)


def raw_path(path: Path) -> Path:
    """Where `store_run` keeps the full record of the compact record at `path`."""
    return path.with_name(path.name[: -len(".json")] + RAW_SUFFIX)


def peak_mean(values: Sequence[Optional[float]], window: int = PEAK_ITERATIONS
              ) -> Optional[float]:
    """Largest trailing mean over `window` iterations of a diagnostic curve (None and
    non-finite values skipped), None when fewer values are there."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if len(finite) < window:
        return None
    means = np.convolve(finite, np.ones(window) / window, mode="valid")
    return float(means.max())


def _round(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{CURVE_DIGITS}g}")
    return value


def _reduce_bin(key: str, values: List[Any], weights: Optional[List[Any]]) -> Any:
    if key.startswith(_LAST_OF_BIN):
        return values[-1]
    if key in _SUM_OF_BIN:
        return sum(v for v in values if v is not None)
    pairs = [(float(v), 1.0 if weights is None else float(w or 0))
             for v, w in zip(values, weights or values)
             if v is not None and math.isfinite(float(v))]
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    return sum(v * w for v, w in pairs) / total


def downsample_columns(columns: Dict[str, List[Any]], stride: int,
                       weights: Optional[List[Any]] = None) -> Dict[str, List[Any]]:
    """Per-iteration columns cut into bins of `stride` consecutive iterations, one point
    per bin (see `_LAST_OF_BIN`, `_SUM_OF_BIN`; `return_mean_iteration` weighted by
    `weights`, the episodes per iteration), floats rounded to `CURVE_DIGITS` digits. A
    column without any value (a diagnostic the mode does not log) becomes None."""
    out: Dict[str, Optional[List[Any]]] = {}
    for key, values in columns.items():
        values = list(values)
        if all(v is None for v in values):
            out[key] = None
            continue
        if stride == 1:
            out[key] = [_round(v) for v in values]
            continue
        weighted = weights if key == "return_mean_iteration" else None
        out[key] = [_round(_reduce_bin(key, values[i:i + stride],
                                       None if weighted is None else list(weighted[i:i + stride])))
                    for i in range(0, len(values), stride)]
    return out


def compact_record(data: Dict[str, Any], max_points: int = CURVE_POINTS) -> Dict[str, Any]:
    """The record of one run as stored in git: everything but the per-episode data
    (`episodes`) and the per-iteration lines, with the curve and the diagnostics cut to at
    most `max_points` and `DIAGNOSTICS_POINTS` points (`curve_stride` and
    `diagnostics_stride` iterations each) and, at full precision,
    what the reports read of the diagnostics: `diagnostics_last10` (mean over the last
    `DIAGNOSTICS_LAST` iterations) and `diagnostics_peak5` (`peak_mean`). Scores,
    settings, timings, machine and versions are kept as they are. A compact record is
    returned unchanged."""
    if data.get("record_format") == RECORD_FORMAT:
        return data
    record = {k: v for k, v in data.items()
              if k not in ("episodes", "curve", "diagnostics", "results")}
    curve = data.get("curve") or {}
    iterations = max((len(v) for v in curve.values()), default=0)
    stride = max(1, math.ceil(iterations / max_points))
    weights = curve.get("episodes_iteration")
    record["curve"] = downsample_columns(curve, stride, weights)
    diagnostics = data.get("diagnostics")
    if diagnostics is not None:
        record["diagnostics_last10"] = {
            key: nan_mean(list(values)[-DIAGNOSTICS_LAST:]) for key, values in diagnostics.items()}
        record["diagnostics_peak5"] = {key: peak_mean(values) for key, values in diagnostics.items()}
        diagnostics_stride = max(1, math.ceil(
            max((len(v) for v in diagnostics.values()), default=0) / DIAGNOSTICS_POINTS))
        record["diagnostics"] = downsample_columns(diagnostics, diagnostics_stride)
        record["diagnostics_stride"] = diagnostics_stride
    record["curve_stride"] = stride
    record["record_format"] = RECORD_FORMAT
    return record


def store_run(path: Path, data: Dict[str, Any]) -> Dict[str, Any]:
    """Write the compact record of `data` to `path` and, when `data` holds more (the
    episodes, every iteration), the full `data` gzipped to `raw_path(path)` (ignored by
    git: `benchmarks/results/.gitignore`). Returns the compact record."""
    record = compact_record(data)
    if record is not data:
        payload = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
        _write_atomic(raw_path(path), gzip.compress(payload, mtime=0))
    write_json(path, record)
    return record


def load_raw(path: Path) -> Dict[str, Any]:
    """The full record `store_run` kept beside the compact record at `path`."""
    return json.loads(gzip.decompress(raw_path(path).read_bytes()))


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The invocation as a copy-pasteable command run from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    try:
        argv[0] = os.path.relpath(argv[0], REPO)
    except ValueError:
        pass
    return " ".join([".venv/bin/python"] + [shlex.quote(a) for a in argv])


def code_version() -> str:
    """The commit measured (short hash), with " + uncommitted changes" where the package
    or the tuned examples differ from it; "unknown" outside a git checkout."""
    import subprocess

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = head != "unknown" and git("status", "--porcelain", "hca_rllib", "tuned_examples")
    return head + (" + uncommitted changes" if dirty else "")


def machine_note() -> Dict[str, Any]:
    """Where a run happened: host, CPUs, load, versions."""
    note: Dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        note["loadavg_1_5_15"] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    return note


class TimeLimit:
    """`reached()` once `minutes` have passed since construction (None: never)."""

    def __init__(self, minutes: Optional[float]) -> None:
        self.minutes = minutes
        self.t0 = time.perf_counter()

    @property
    def elapsed_min(self) -> float:
        return (time.perf_counter() - self.t0) / 60

    def reached(self) -> bool:
        return self.minutes is not None and self.elapsed_min >= self.minutes


def describe_finished(data: Dict[str, Any]) -> str:
    return (f"    final score {data['final_score']:.2f} over {data['num_episodes']} episodes, "
            f"{data['env_steps']} steps in {data['train_s']:.1f} s "
            f"({data['env_steps_per_s']:.0f} steps/s), setup {data['setup_s']:.1f} s")


def run_plan(
    todo: Sequence[Any],
    *,
    path_of: Callable[[Any], Path],
    target_of: Callable[[Any], int],
    label_of: Callable[[Any], str],
    run_one: Callable[[Any], Dict[str, Any]],
    time_limit_min: Optional[float] = None,
    stored_mismatch: Optional[Callable[[Any, Dict[str, Any]], Optional[str]]] = None,
    describe: Callable[[Dict[str, Any]], str] = describe_finished,
) -> int:
    """Run `todo` in order, one JSON file per run at `path_of(item)`.

    A run already stored is skipped (resume), unless it was made for another step
    budget (`target_env_steps`) or `stored_mismatch(item, stored)` returns a reason:
    then the process exits, so that runs of different settings never mix in one
    directory. After `time_limit_min` minutes no new run starts. `run_one(item)`
    returns the run's data, stored by `store_run` (the compact record, and the full data
    beside it outside git). Returns the number of runs made.
    """
    limit = TimeLimit(time_limit_min)
    made = 0
    for index, item in enumerate(todo, 1):
        path = path_of(item)
        target = target_of(item)
        if path.exists():
            stored = json.loads(path.read_text())
            if stored.get("target_env_steps") != target:
                sys.exit(f"{path} was run for {stored.get('target_env_steps')} steps, this "
                         f"invocation wants {target}: use another --out")
            reason = stored_mismatch(item, stored) if stored_mismatch else None
            if reason:
                sys.exit(f"{path}: {reason}: use another --out")
            print(f"[{index}/{len(todo)}] skip {label_of(item)} (stored)", flush=True)
            continue
        if limit.reached():
            print(f"time limit of {time_limit_min} min reached after {limit.elapsed_min:.1f} "
                  f"min; stopping before {label_of(item)}. Re-run to resume.", flush=True)
            break
        print(f"[{index}/{len(todo)}] run {label_of(item)} ({target} steps)", flush=True)
        data = store_run(path, run_one(item))
        made += 1
        print(describe(data), flush=True)
    return made


def run_plan_with_ray(todo: Sequence[Any], *, run_one: Callable[[Any], Dict[str, Any]],
                      torch_threads: int = 1, **run_plan_kwargs: Any) -> int:
    """`run_plan` with one embedded Ray (`RAY_INIT_KWARGS`), started before the first run
    that is not stored yet (so a fully stored plan starts none) and shut down at the end,
    and torch's intra-op threads set to `torch_threads` before every run."""
    ray_started = False

    def run_item(item: Any) -> Dict[str, Any]:
        nonlocal ray_started
        import torch

        if not ray_started:
            from hca_rllib.runner import start_local_ray

            start_local_ray(**RAY_INIT_KWARGS)
            ray_started = True
        torch.set_num_threads(torch_threads)
        return run_one(item)

    try:
        return run_plan(todo, run_one=run_item, **run_plan_kwargs)
    finally:
        if ray_started:
            import ray

            ray.shutdown()


def inside(path: Path, root: Path) -> bool:
    """Whether `path` lies under `root` (both resolved)."""
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def benchmark_parser(description: str, *, quick_help: str, epilog: Optional[str] = None,
                     out_help: Optional[str] = None, report_help: Optional[str] = None,
                     torch_help: str = "torch intra-op threads (default 1)",
                     out_type: Callable[[str], Any] = Path):
    """The options every learning benchmark has: `--quick`, `--out` (parsed by
    `out_type`), `--time-limit-min`, `--report-only`, `--torch-threads`. Add a script's
    own, parse, then `check_out`."""
    import argparse

    parser = argparse.ArgumentParser(description=description, epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", type=out_type, default=None, help=out_help)
    parser.add_argument("--time-limit-min", type=float, default=None,
                        help="do not start a new run after this many minutes (resume later)")
    parser.add_argument("--report-only", action="store_true",
                        help=report_help or "only aggregate the stored runs")
    parser.add_argument("--torch-threads", type=int, default=1, help=torch_help)
    return parser


def check_out(parser, args, *, default_out: Path, results_root: Path, quick_prefix: str):
    """`--quick` writes to `--out` or a fresh temp dir, never under `results_root`;
    `--out` defaults to `default_out`. Returns `args`."""
    import tempfile

    if args.quick and args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix=quick_prefix))
    if args.quick and inside(args.out, results_root):
        parser.error("--quick must not write into benchmarks/results")
    args.out = args.out or default_out
    return args


def grid_parser(description: str, *, quick_help: str, subset: str,
                subset_choices: Sequence[str], methods: Sequence[str],
                steps_help: Optional[str] = None, subset_help: Optional[str] = None,
                methods_help: Optional[str] = None, explicit_seeds: bool = False,
                **parser_kwargs: Any):
    """The command line the grid benchmarks (`credit_modes.py`, `learning.py`,
    `credit_analysis.py`) share: `benchmark_parser`'s options and `--<subset>` (tasks /
    settings), `--methods`, `--num-seeds` (with `explicit_seeds`, or `--seeds`), `--steps`.
    Add a script's own options, parse, then call `check_grid_args`."""
    parser = benchmark_parser(description, quick_help=quick_help, **parser_kwargs)
    parser.add_argument(f"--{subset}", nargs="+", choices=list(subset_choices), default=None,
                        help=subset_help)
    parser.add_argument("--methods", nargs="+", choices=list(methods), default=None,
                        help=methods_help)
    seeds = parser.add_mutually_exclusive_group() if explicit_seeds else parser
    if explicit_seeds:
        seeds.add_argument("--seeds", nargs="+", type=int, default=None, help="explicit seeds")
    seeds.add_argument("--num-seeds", type=int, default=None, help="seeds 0..N-1")
    parser.add_argument("--steps", type=int, default=None, help=steps_help)
    return parser


def check_grid_args(parser, args, *, default_out: Path, results_root: Path,
                    quick_prefix: str):
    """`check_out`; `--num-seeds` and `--steps` must be >= 1. Returns `args`."""
    check_out(parser, args, default_out=default_out, results_root=results_root,
              quick_prefix=quick_prefix)
    if args.num_seeds is not None and args.num_seeds < 1:
        parser.error("--num-seeds must be >= 1")
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be >= 1")
    return args


def grid_selection(args, *, subset: str, names: Sequence[str], quick_names: Sequence[str],
                   methods: Sequence[str], quick_methods: Sequence[str], full_seeds: int,
                   quick_seeds: int) -> Tuple[List[str], List[str], List[int]]:
    """The cells a grid invocation asks for: `--<subset>` or all `names` (`--quick`:
    `quick_names`), `--methods` or `methods` (`quick_methods`), and `--seeds` (where the
    script has it) or seeds `0..--num-seeds-1` (default `full_seeds`, `--quick`:
    `quick_seeds`). Creates `args.out` and says where the results go."""
    chosen = getattr(args, subset) or list(quick_names if args.quick else names)
    chosen_methods = args.methods or list(quick_methods if args.quick else methods)
    if getattr(args, "seeds", None) is not None:
        seeds = list(dict.fromkeys(args.seeds))
    else:
        seeds = list(range(args.num_seeds or (quick_seeds if args.quick else full_seeds)))
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"results: {args.out}", flush=True)
    return chosen, chosen_methods, seeds


def cell_path(out: Path, name: str, method: str, seed: int) -> Path:
    """Where a grid stores the run of `method` on task/setting `name` with `seed`."""
    return out / name / f"{method}_seed{seed}.json"


def run_grid(todo: Sequence[Tuple[str, int, str]], out: Path, *,
             run_cell: Callable[[Tuple[str, int, str]], Dict[str, Any]],
             steps_of: Callable[[str], int], args,
             stored_mismatch: Optional[Callable[[Any, Dict[str, Any]], Optional[str]]] = None
             ) -> int:
    """`run_plan_with_ray` over `(name, seed, method)` cells stored at `cell_path`, with
    the budget `steps_of(name)` and `args.time_limit_min`, `args.torch_threads`."""
    return run_plan_with_ray(
        todo, run_one=run_cell, torch_threads=args.torch_threads,
        path_of=lambda item: cell_path(out, item[0], item[2], item[1]),
        target_of=lambda item: steps_of(item[0]),
        label_of=lambda item: f"{item[0]} {item[2]} seed{item[1]}",
        time_limit_min=args.time_limit_min, stored_mismatch=stored_mismatch)


def setting_mismatch(stored: Dict[str, Any], overrides: Dict[str, Any], env_id: str,
                     env_config: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """Why a stored run is not the run of `overrides` on `env_id` (and `env_config`, when
    given), or None: the check that keeps runs of different settings out of one `--out`."""
    overrides = json.loads(json.dumps(overrides))
    stored_overrides = stored.get("overrides")
    try:  # a run stored by 0.1.0 names removed fields: the same run where they hold their defaults
        stored_overrides = upgrade_state(stored_overrides) if isinstance(stored_overrides, dict) else stored_overrides
    except ValueError as error:
        return f"stored overrides {stored.get('overrides')}: {error}"
    if stored_overrides != overrides:
        return f"stored overrides {stored.get('overrides')} differ from {overrides}"
    if stored.get("env_id") != env_id or (
            env_config is not None and stored.get("env_config") != json.loads(json.dumps(env_config))):
        shown = "" if env_config is None else f" {env_config}"
        return (f"stored env {stored.get('env_id')}"
                + ("" if env_config is None else f" {stored.get('env_config')}")
                + f" differs from {env_id}{shown}")
    return None


def ordered(keys: Iterable[str], reference: Iterable[str]) -> List[str]:
    """`keys` in the order of `reference`, those not in it after them, sorted."""
    keys, reference = list(keys), list(reference)
    return [k for k in reference if k in keys] + sorted(k for k in keys if k not in reference)


def fmt(value: Optional[float], digits: int = 2) -> str:
    """A table cell: the number with `digits` decimals, or a dash for None."""
    return "—" if value is None else f"{value:.{digits}f}"


def machine_summary(runs) -> Dict[str, Any]:
    """Where and when the stored runs (`load_runs`) were made: hosts, CPUs, platforms,
    versions, torch threads, the load at their starts, their wall time and finish times."""
    datas = [d for by_method in runs.values() for by_seed in by_method.values()
             for d in by_seed.values()]
    if not datas:
        return {}
    loads = [d["machine"]["loadavg_at_start"][0] for d in datas
             if d.get("machine", {}).get("loadavg_at_start")]
    return {
        "hosts": sorted({d["machine"]["host"] for d in datas if "machine" in d}),
        "cpu_count": sorted({d["machine"]["cpu_count"] for d in datas if "machine" in d}),
        "platform": sorted({d["machine"]["platform"] for d in datas if "machine" in d}),
        "versions": sorted({f"ray {d['versions']['ray']}, torch {d['versions']['torch']}"
                            for d in datas if "versions" in d}),
        "torch_num_threads": sorted({d.get("torch_num_threads") for d in datas}),
        # Runs made before records carried their commit count as "not recorded".
        "code": sorted({d.get("code", "not recorded") for d in datas}),
        "loadavg_1min_at_run_start": [min(loads), max(loads)] if loads else None,
        "num_runs": len(datas),
        "total_wall_s": float(sum(d["wall_s"] for d in datas)),
        "first_finished": min(d["finished_at"] for d in datas),
        "last_finished": max(d["finished_at"] for d in datas),
    }


def load_runs(out: Path, pattern: str, keys: Tuple[str, str, str]
              ) -> Dict[str, Dict[str, Dict[int, Dict[str, Any]]]]:
    """Stored runs as `runs[data[keys[0]]][data[keys[1]]][data[keys[2]]] = data`."""
    runs: Dict[str, Dict[str, Dict[int, Dict[str, Any]]]] = {}
    outer, inner, seed = keys
    for path in sorted(out.glob(pattern)):
        data = json.loads(path.read_text())
        runs.setdefault(data[outer], {}).setdefault(data[inner], {})[data[seed]] = data
    return runs


# ----------------------------------------------------------------------- plotting


def matplotlib_pyplot():
    """pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def stack_curves(datas: List[Dict[str, Any]], key: str,
                 steps_key: str = "env_steps") -> Tuple[np.ndarray, np.ndarray]:
    """Curves of several seeds as (steps, values[seed, point]), cut to the shortest.

    RLlib's iterations are 512-519 env steps, so the seeds' step counts differ
    slightly: they are averaged. Missing values (None, or a column stored as None) become
    NaN."""
    length = min(len(d["curve"][steps_key]) for d in datas)
    steps = np.mean([d["curve"][steps_key][:length] for d in datas], axis=0, dtype=np.float64)
    values = np.array(
        [[np.nan if v is None else v for v in (d["curve"][key] or [None] * length)[:length]]
         for d in datas], dtype=np.float64)
    return steps, values


def curve_stride(datas: List[Dict[str, Any]]) -> int:
    """Iterations per stored curve point, the same for every run in `datas` (else they
    cannot be averaged point by point)."""
    strides = {int(d.get("curve_stride", 1)) for d in datas}
    if len(strides) > 1:
        raise ValueError(f"runs stored with different curve strides {sorted(strides)}")
    return strides.pop() if strides else 1


def smoothing_points(iterations: int, datas: List[Dict[str, Any]]) -> int:
    """A smoothing window of `iterations` iterations in stored curve points."""
    return max(1, round(iterations / curve_stride(datas)))


def plot_mean_band(ax, steps: np.ndarray, values: np.ndarray, *, color, label: str,
                   band: str = "std", alpha: float = 0.2, linewidth: float = 1.5) -> None:
    """Mean over seeds (rows of `values`, NaN-aware) with a band of +-1 std across
    seeds (`band="std"`) or +-1 standard error of the mean (`band="sem"`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        mean = np.nanmean(values, axis=0)
        spread = np.nanstd(values, axis=0)
        if band == "sem":
            count = np.sum(np.isfinite(values), axis=0)
            spread = spread * np.sqrt(count / np.maximum(count - 1, 1)) / np.sqrt(np.maximum(count, 1))
    ax.plot(steps, mean, color=color, label=label, linewidth=linewidth)
    ax.fill_between(steps, mean - spread, mean + spread, color=color, alpha=alpha, linewidth=0)
