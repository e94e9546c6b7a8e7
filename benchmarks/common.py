"""What the benchmark scripts share (`a2c_parity.py`, `credit_modes.py`).

* Recording: `window_mean`, and `episode_return_callback_class()`, an RLlib callback
  that records the exact return and length of every completed episode on the EnvRunner
  (all chunks of an episode summed), read back with `EpisodeLog`.
* Statistics, re-exported from `hca_rllib.stats` (numpy only): `iqm`, `iqm_ci` (IQM
  over seeds and its 95% stratified bootstrap CI), `bootstrap_ci` (any statistic,
  percentile bootstrap over seeds), `probability_of_improvement`, `paired_difference`.
* Run store and control: one JSON file per finished run (`write_json`, atomic),
  `run_plan` (skips runs already stored, refuses to mix stored runs of another
  setting, stops cleanly between runs after `--time-limit-min`), `load_runs`,
  `command_line`, `machine_note`.
* Plotting: `stack_curves` and `plot_mean_band` (mean over seeds with a band).

Everything heavy (ray, torch, matplotlib, scipy) is imported lazily, so
`--report-only` and the unit tests stay cheap.
"""

from __future__ import annotations

import functools
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

# The statistics live in the package (pure numpy); re-exported here under their old
# names for the benchmark scripts.
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


EPISODES_ATTRIBUTE = "recorded_episodes"
LAST_REWARDS_ATTRIBUTE = "recorded_last_rewards"


@functools.lru_cache(maxsize=None)
def episode_return_callback_class():
    """An `RLlibCallback` appending `(return, length)` of every completed episode to
    `env_runner.recorded_episodes` (read it with `EpisodeLog`).

    The episode passed to `on_episode_end` is only the last chunk when the episode
    spanned several `sample()` calls; earlier chunks come as `prev_episode_chunks`.
    With a local learner those earlier chunks are the very objects the learner
    connector `AddOneTsToEpisodesAndTruncate` extended in place by one artificial
    step with reward 0.0: summing their returns is still exact, summing their
    lengths is not (+1 per chunk), so the length is taken from the last chunk's
    `t` (steps since reset), which the learner has not touched yet.
    """
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class EpisodeReturnCallback(RLlibCallback):
        def on_episode_end(self, *, episode, prev_episode_chunks=None, env_runner=None,
                           **kwargs) -> None:
            chunks = list(prev_episode_chunks or []) + [episode]
            ret = float(sum(chunk.get_return() for chunk in chunks))
            length = int(episode.t)
            env_runner.__dict__.setdefault(EPISODES_ATTRIBUTE, []).append((ret, length))
            # The reward of the episode's last step (bsuite's umbrella pays its only
            # action-dependent reward there; the rest of its return is coin flips).
            env_runner.__dict__.setdefault(LAST_REWARDS_ATTRIBUTE, []).append(
                float(episode.get_rewards(-1)))

    return EpisodeReturnCallback


class EpisodeLog:
    """Reads the episodes recorded by `episode_return_callback_class()` on one
    (local) EnvRunner; `new()` returns those completed since the previous call."""

    def __init__(self, env_runner) -> None:
        self.env_runner = env_runner
        self.seen = 0

    def new(self) -> List[Tuple[float, int]]:
        episodes = self.env_runner.__dict__.get(EPISODES_ATTRIBUTE, [])
        fresh = list(episodes[self.seen:])
        self.seen = len(episodes)
        return fresh

    def last_rewards(self) -> List[float]:
        """The last-step reward of every episode recorded so far (same order as `new`)."""
        return list(self.env_runner.__dict__.get(LAST_REWARDS_ATTRIBUTE, []))


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


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temp file + rename), so a killed run leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two processes may race
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    os.replace(tmp, path)


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The invocation as a copy-pasteable command run from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    try:
        argv[0] = os.path.relpath(argv[0], REPO)
    except ValueError:
        pass
    return " ".join([".venv/bin/python"] + [shlex.quote(a) for a in argv])


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
    returns the run's data, which is written as is. Returns the number of runs made.
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
        data = run_one(item)
        write_json(path, data)
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
            import ray

            ray.init(**RAY_INIT_KWARGS)
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


def grid_parser(description: str, *, quick_help: str, subset: str,
                subset_choices: Sequence[str], methods: Sequence[str],
                steps_help: Optional[str] = None):
    """The command line the grid benchmarks (`learning.py`, `credit_analysis.py`) share:
    `--quick`, `--out`, `--<subset>` (tasks / settings), `--methods`, `--num-seeds`,
    `--steps`, `--time-limit-min`, `--report-only`, `--torch-threads`. Add a script's own
    options, parse, then call `check_grid_args`."""
    import argparse

    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(f"--{subset}", nargs="+", choices=list(subset_choices), default=None)
    parser.add_argument("--methods", nargs="+", choices=list(methods), default=None)
    parser.add_argument("--num-seeds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help=steps_help)
    parser.add_argument("--time-limit-min", type=float, default=None)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--torch-threads", type=int, default=1)
    return parser


def check_grid_args(parser, args, *, default_out: Path, results_root: Path,
                    quick_prefix: str):
    """`--quick` writes to `--out` or a fresh temp dir, never under `results_root`;
    `--out` defaults to `default_out`; `--num-seeds` must be >= 1. Returns `args`."""
    import tempfile

    if args.quick and args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix=quick_prefix))
    if args.quick and inside(args.out, results_root):
        parser.error("--quick must not write into benchmarks/results")
    args.out = args.out or default_out
    if args.num_seeds is not None and args.num_seeds < 1:
        parser.error("--num-seeds must be >= 1")
    return args


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
    slightly: they are averaged. Missing values (None) become NaN."""
    length = min(len(d["curve"][steps_key]) for d in datas)
    steps = np.mean([d["curve"][steps_key][:length] for d in datas], axis=0, dtype=np.float64)
    values = np.array(
        [[np.nan if v is None else v for v in d["curve"][key][:length]] for d in datas],
        dtype=np.float64)
    return steps, values


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
