"""Credit modes benchmark: every `credit=` mode of `HCAConfig` against A2C, paired.

Methods (name -> `HCAConfig().training(...)` overrides, `common.CREDIT_METHODS`):
  * a2c                       credit="a2c", hindsight_loss_coeff=1.0 (a small classifier
                              is trained for the diagnostics only: its own optimizer,
                              detached torso; it does not touch the policy update)
  * expected_hca_blend_nomem  the package default (`common.DEFAULT_CREDIT`)
  * hca_blend_nomem           the same with credit="hca"
  * c2a2c_blend_nomem         the same with credit="c2a2c"
  * *_pure_nomem              the three without the trust (trust=None: no fallback toward A2C)

Tasks (name -> env id, env_config, env-step budget, final-score window):
  * bandit            HCA/AmbiguousBandit-v0, defaults,                  30k, last 100 episodes
  * delayed_effect    HCA/DelayedEffect-v0 {length: 10, noise_std: 1.0}, 60k, last 100
  * delayed_effect_noisy  HCA/DelayedEffect-v0 {length: 20, noise_std: 2.0}, 60k, last 100
  * shortcut          HCA/Shortcut-v0 {length: 8, slip_prob: 0.1},      30k, last 100
  * cartpole          CartPole-v1,                                      100k, last 20
  * delayed_cartpole  HCA/DelayedReward-v0 {env_id: CartPole-v1},       100k, last 20

Setting (the package defaults): one local EnvRunner (`num_env_runners=0`) with 8
environments, `train_batch_size_per_learner=512` (64-step rollouts, one gradient step
per iteration), seeds 0..4. RLlib hands `env_config` to gymnasium as keyword arguments
(`gym.make_vec(id, num_envs=8, **env_config)` in `SingleAgentEnvRunner.make_env`); every
run checks this on the built environment and stores what it saw (`env_check`).

Final score of a run: mean undiscounted return of its last 100 (known-answer tasks) or
20 (CartPole tasks) completed episodes, from exact per-episode returns recorded by an
`RLlibCallback.on_episode_end` that sums all chunks of an episode (`hca_rllib/callbacks.py`). The
learning curve has one point per iteration: env steps so far and the mean return of the
episodes completed in that iteration (None if none completed). Per iteration the run
also stores the learner diagnostics (`info/mutual_information`, `credit/trust`,
`c2a2c/mask_fraction`, `hca/clip_fraction`, `hca/advantage_correlation`; None where a
mode does not log one) and, on the known-answer tasks, the learned policy's probability
of the optimal first action (bandit: a; delayed_effect: the good first action 0;
shortcut: JUMP) at the start observation.

Runs are ordered task, seed, method, so that each seed's methods run back to back (paired
in time) in one process with one embedded Ray. Each finished run is written to
`<out>/<task>/<method>_seed<k>.json`; stored runs are skipped (resume), and
`--time-limit-min` stops cleanly between runs. At the end (or with `--report-only`) the
stored runs are aggregated into `<out>/summary.md`, `summary.json`, `curves_<task>.png`
and `final_scores.png`: per task and method the IQM of the final scores over seeds with
a 95% bootstrap CI, the last-10-iteration means of the diagnostics, the IQM ratio to a2c,
the probability of improvement over a2c and the paired per-seed difference to a2c with
a bootstrap CI.

Reproduce (from the repository root):

    .venv/bin/python benchmarks/credit_modes.py            # full benchmark, results in
                                                           # benchmarks/results/credit_modes/
    .venv/bin/python benchmarks/credit_modes.py --quick    # smoke test: bandit + cartpole,
                                                           # a2c + hca, 1 seed, 5k steps,
                                                           # temp dir (or --out)
    .venv/bin/python benchmarks/credit_modes.py --report-only   # re-aggregate stored runs
    .venv/bin/python benchmarks/credit_modes.py --tasks bandit --methods a2c hca c2a2c

Needs matplotlib and scipy (the `bench` extra).
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from hca_rllib.runner import RESULT_KEYS, training_iterations  # noqa: E402

from common import (  # noqa: E402  (benchmarks/common.py, found via BENCH_DIR)
    CREDIT_METHODS,
    DIAGNOSTICS_LAST,
    EpisodeLog,
    apply_method,
    cell_path,
    check_grid_args,
    code_version,
    command_line,
    fmt,
    grid_parser,
    grid_selection,
    iqm_ci,
    load_runs,
    machine_summary,
    machine_note,
    matplotlib_pyplot,
    nan_mean,
    paired_difference,
    plot_mean_band,
    probability_of_improvement,
    ordered,
    run_grid,
    setting_mismatch,
    smoothing_points,
    stack_curves,
    window_mean,
    write_json,
)

DEFAULT_OUT = REPO / "benchmarks" / "results" / "credit_modes"
RESULTS_ROOT = REPO / "benchmarks" / "results"
N_ENVS = 8
BATCH = 512
FULL_SEEDS = 5
QUICK_STEPS = 5_000
QUICK_TASKS = ("bandit", "cartpole")
QUICK_METHODS = ("a2c", "expected_hca_blend_nomem")
DIAGNOSTICS_WINDOW = DIAGNOSTICS_LAST  # summary: mean of the last 10 iterations (stored per run)
SMOOTH_ITERATIONS = 5  # plots only: trailing mean over this many iterations per seed
BASELINE = "a2c"

# Method name -> `.training(...)` overrides (and `.env_runners(...)` ones: `common.apply_method`).
METHODS: Dict[str, Dict[str, Any]] = dict(CREDIT_METHODS)

def _delayed_effect_task(length: int, noise_std: float, noise_note: str) -> Dict[str, Any]:
    return {
        "env_id": "HCA/DelayedEffect-v0", "env_config": {"length": length, "noise_std": noise_std},
        "steps": 60_000, "last_k": 100,
        "probe": {"obs": [1.0, 0.0], "good_action": 0,
                  "what": "pi(good first action 0 | start obs [1, 0])"},
        "reference": f"optimal +1, uniform policy 0 (per-episode noise sd {noise_note})",
    }


# Task name -> env id, env_config, budget, final-score window, optional probe of the
# policy at the start state (observation, optimal action), reference returns.
TASKS: Dict[str, Dict[str, Any]] = {
    "bandit": {
        "env_id": "HCA/AmbiguousBandit-v0", "env_config": {}, "steps": 30_000, "last_k": 100,
        "probe": {"obs": [1.0], "good_action": 0, "what": "pi(a), a = action 0 (Q 1.9 vs 1.1)"},
        "reference": "optimal 1.9 (always a), uniform policy 1.5",
    },
    "delayed_effect": _delayed_effect_task(length=10, noise_std=1.0, noise_note="sqrt(10) = 3.2"),
    "delayed_effect_noisy": _delayed_effect_task(length=20, noise_std=2.0, noise_note="2 sqrt(20) = 8.9"),
    "shortcut": {
        "env_id": "HCA/Shortcut-v0", "env_config": {"length": 8, "slip_prob": 0.1},
        "steps": 30_000, "last_k": 100,
        "probe": {"obs": [1.0] + [0.0] * 7, "good_action": 0,
                  "what": "pi(JUMP | position 0)"},
        "reference": "optimal 0 (JUMP at once), always walking -4.70",
    },
    "cartpole": {
        "env_id": "CartPole-v1", "env_config": {}, "steps": 100_000, "last_k": 20,
        "probe": None, "reference": "maximum 500",
    },
    "delayed_cartpole": {
        "env_id": "HCA/DelayedReward-v0", "env_config": {"env_id": "CartPole-v1"},
        "steps": 100_000, "last_k": 20, "probe": None,
        "reference": "maximum 500 (all reward paid on the last step)",
    },
}

DIAGNOSTICS = (
    "info/mutual_information",
    "credit/trust",
    "credit/trust_scale",
    "credit/trust_z",
    "credit/trust_signal_z",
    "credit/decision_trust",
    "credit/history_kl",
    "c2a2c/mask_fraction",
    "hca/clip_fraction",
    "hca/advantage_correlation",
)
# A diagnostic's name in RLlib's learner results -> its name in a results.jsonl line.
DIAGNOSTIC_LINE_KEYS = {path[-1]: name for name, path in RESULT_KEYS.items()
                        if path[-1] in DIAGNOSTICS}
DIAGNOSTIC_LABELS = {
    "info/mutual_information": "MI (nats)",
    "credit/trust": "trust w",
    "credit/trust_scale": "calibration scale",
    "credit/trust_z": "trust z-score",
    "credit/trust_signal_z": "trust signal z-score",
    "credit/decision_trust": "per-decision trust (mean)",
    "credit/history_kl": "KL(pi_b || pi), carried rows",
    "c2a2c/mask_fraction": "mask fraction",
    "hca/clip_fraction": "clip fraction",
    "hca/advantage_correlation": "corr(A, A_GAE)",
}
COLORS = {
    "a2c": "black", "expected_hca_blend_nomem": "tab:red", "hca_blend_nomem": "tab:blue",
    "c2a2c_blend_nomem": "tab:orange", "expected_hca_pure_nomem": "tab:pink", "hca_pure_nomem": "tab:cyan",
    "c2a2c_pure_nomem": "tab:brown",
}


def _json_roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def final_score_definition(task: str) -> str:
    return (f"mean undiscounted return of the last {TASKS[task]['last_k']} completed "
            "episodes of the run")


# ---------------------------------------------------------------------------- run


def _env_check(algo, env_id: str, env_config: Dict[str, Any]) -> Dict[str, Any]:
    """What the EnvRunner actually built: did `env_config` reach the environment?"""
    vector_env = algo.env_runner.env.unwrapped  # SyncVectorEnv under DictInfoToList
    sub_env = vector_env.envs[0]
    spec = getattr(sub_env, "spec", None)
    spec_kwargs = dict(spec.kwargs) if spec is not None else {}
    base = sub_env.unwrapped
    attributes = {k: getattr(base, k) for k in env_config if hasattr(base, k)}
    reached = all(spec_kwargs.get(k) == v for k, v in env_config.items())
    reached = reached and all(attributes[k] == v for k, v in env_config.items() if k in attributes)
    if env_id == "HCA/DelayedReward-v0":
        reached = reached and "DelayedRewardWrapper" in str(sub_env)
    check = {
        "env_config_reached": bool(reached),
        "num_envs": int(vector_env.num_envs),
        "sub_env": str(sub_env),
        "spec_kwargs": {k: _json_roundtrip(v) for k, v in spec_kwargs.items()
                        if isinstance(v, (int, float, str, bool, type(None), list, dict))},
        "attributes": _json_roundtrip(attributes),
    }
    if not reached:
        raise RuntimeError(f"env_config {env_config} did not reach the environment: {check}")
    return check


def _probe(algo, probe: Optional[Dict[str, Any]]) -> Optional[float]:
    """Probability of the optimal action at the start observation, from the learner's
    module: softmax(pi(pi_torso(obs)))[good_action]."""
    if probe is None:
        return None
    import torch

    from hca_rllib import training_module

    obs = torch.tensor([probe["obs"]], dtype=torch.float32)
    with torch.no_grad():
        probs = torch.softmax(training_module(algo).policy_outputs(obs)[1], dim=-1)
    return float(probs[0, probe["good_action"]])


def default_base_config(spec: Dict[str, Any]):
    """The package defaults on `spec`'s env: one local EnvRunner with `N_ENVS` envs and
    `BATCH` env steps (one gradient step) per iteration."""
    from hca_rllib import HCAConfig

    return (
        HCAConfig()
        .environment(spec["env_id"], env_config=copy.deepcopy(spec["env_config"]))
        .env_runners(num_env_runners=0, num_envs_per_env_runner=N_ENVS)
        .training(train_batch_size_per_learner=BATCH)
    )


def run_one(task: str, method: str, seed: int, total_steps: int) -> Dict[str, Any]:
    return run_spec(task, TASKS[task], method, METHODS[method], seed, total_steps)


def run_spec(task: str, spec: Dict[str, Any], method: str, overrides: Dict[str, Any],
             seed: int, total_steps: int,
             base_config: Optional[Callable[[Dict[str, Any]], Any]] = None,
             settings_note: str = "hca_rllib defaults") -> Dict[str, Any]:
    """Train `base_config(spec)` (default: `default_base_config`) with the `.training()`
    `overrides` of `method` and seed `seed` for `total_steps` env steps on one local
    EnvRunner; returns the run's record (final score, curve, diagnostics, timings).

    `spec`: `env_id`, `env_config`, `last_k` (final-score window in episodes) and
    `probe` (None, or the start observation and optimal action to read pi at)."""
    import ray
    import torch

    last_k = spec["last_k"]
    load_start = machine_note().get("loadavg_1_5_15")
    t_start = time.perf_counter()
    config = apply_method((base_config or default_base_config)(spec), overrides).debugging(seed=seed)
    algo = config.build_algo()
    episode_log = EpisodeLog(algo.env_runner)
    env_check = _env_check(algo, spec["env_id"], spec["env_config"])
    returns: List[float] = []
    lengths: List[int] = []
    curve: Dict[str, List[Any]] = {
        "env_steps": [], "return_mean_iteration": [], "episodes_iteration": [],
        f"return_mean_last{last_k}": [], "p_good_action": [],
    }
    diagnostics: Dict[str, List[Optional[float]]] = {key: [] for key in DIAGNOSTICS}
    lines: List[Dict[str, Any]] = []
    skipped_updates = None
    env_steps = 0
    t_train = time.perf_counter()
    try:
        for _, line, _ in training_iterations(algo, total_steps):
            lines.append(line)
            env_steps = line["env_steps"]
            fresh = episode_log.new()
            returns += [r for r, _ in fresh]
            lengths += [n for _, n in fresh]
            curve["env_steps"].append(env_steps)
            curve["return_mean_iteration"].append(
                float(np.mean([r for r, _ in fresh])) if fresh else None)
            curve["episodes_iteration"].append(len(fresh))
            curve[f"return_mean_last{last_k}"].append(window_mean(returns, last_k))
            curve["p_good_action"].append(_probe(algo, spec["probe"]))
            for key in DIAGNOSTICS:
                diagnostics[key].append(line[DIAGNOSTIC_LINE_KEYS[key]])
            if line["num_skipped_updates"] is not None:
                skipped_updates = line["num_skipped_updates"]
        t_end = time.perf_counter()
        p_good_final = _probe(algo, spec["probe"])
        last_rewards = episode_log.last_rewards()
    finally:
        algo.stop()
    train_s = t_end - t_train
    return {
        "task": task, "method": method, "seed": seed,
        "env_id": spec["env_id"], "env_config": _json_roundtrip(spec["env_config"]),
        "overrides": _json_roundtrip(overrides),
        "target_env_steps": total_steps,
        "final_score": window_mean(
            last_rewards if spec.get("score") == "terminal_reward" else returns, last_k),
        "final_score_definition": (
            f"mean reward of the last step of the last {last_k} completed episodes"
            if spec.get("score") == "terminal_reward" else
            f"mean undiscounted return of the last {last_k} completed episodes of the run"),
        "final_return": window_mean(returns, last_k),
        "final_score_num_episodes": min(last_k, len(returns)),
        "num_episodes": len(returns),
        "env_steps": env_steps,
        "iterations": len(curve["env_steps"]),
        "p_good_action_final": p_good_final,
        "p_good_action_definition": spec["probe"]["what"] if spec["probe"] else None,
        "num_skipped_updates": skipped_updates,
        "setup_s": t_train - t_start,
        "train_s": train_s,
        "wall_s": t_end - t_start,
        "env_steps_per_s": env_steps / train_s,
        "env_steps_per_s_definition": "env_steps / train_s (training loop only; setup "
                                      "= env + model construction excluded)",
        "curve": curve,
        "diagnostics": diagnostics,
        # per episode and per iteration (results.jsonl lines): kept beside the compact
        # record, outside git (`common.store_run`)
        "episodes": {"return": returns, "length": lengths, "last_reward": last_rewards},
        "results": lines,
        "env_check": env_check,
        "settings": {"config": type(config).__name__,
                     "num_env_runners": config.num_env_runners,
                     "num_envs_per_env_runner": config.num_envs_per_env_runner,
                     "train_batch_size_per_learner": config.train_batch_size_per_learner,
                     "rollout_fragment_length": config.get_rollout_fragment_length(),
                     "other": settings_note},
        "versions": {"ray": ray.__version__, "torch": torch.__version__},
        "code": code_version(),
        "torch_num_threads": torch.get_num_threads(),
        "machine": {**machine_note(), "loadavg_at_start": load_start},
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command_line(),
    }


def result_path(out: Path, task: str, method: str, seed: int) -> Path:
    return cell_path(out, task, method, seed)


def plan(tasks: Sequence[str], seeds: Sequence[int], methods: Sequence[str]
         ) -> List[Tuple[str, int, str]]:
    """Run order: per task, per seed, every method (paired in time)."""
    return [(task, seed, method) for task in tasks for seed in seeds for method in methods]


def _stored_mismatch(item: Tuple[str, int, str], stored: Dict[str, Any]) -> Optional[str]:
    task, _, method = item
    return setting_mismatch(stored, METHODS[method], TASKS[task]["env_id"], TASKS[task]["env_config"])


def run_all(args, out: Path, tasks, seeds, methods, steps: Dict[str, int]) -> None:
    run_grid(plan(tasks, seeds, methods), out,
             run_cell=lambda item: run_one(item[0], item[2], item[1], steps[item[0]]),
             steps_of=steps.__getitem__, args=args, stored_mismatch=_stored_mismatch)


# ---------------------------------------------------------------------- aggregate


def aggregate(out: Path) -> Dict[str, Any]:
    runs = load_runs(out, "*/*_seed*.json", ("task", "method", "seed"))
    summary: Dict[str, Any] = {
        "command": command_line(), "out": str(out), "tasks": {},
        "diagnostics_definition": f"per run: mean over the last {DIAGNOSTICS_WINDOW} "
                                  "iterations (finite values only); then mean over seeds",
        "machine": machine_summary(runs),
    }
    for task in ordered(runs, TASKS):
        by_method = runs[task]
        task_summary: Dict[str, Any] = {
            "env_id": TASKS.get(task, {}).get("env_id"),
            "env_config": TASKS.get(task, {}).get("env_config"),
            "final_score_definition": final_score_definition(task) if task in TASKS else None,
            "reference": TASKS.get(task, {}).get("reference"),
            "methods": {},
        }
        scores_by_method: Dict[str, Dict[int, float]] = {}
        for method in ordered(by_method, METHODS):
            datas = {s: by_method[method][s] for s in sorted(by_method[method])
                     if by_method[method][s].get("final_score") is not None}
            if not datas:
                continue
            seeds = sorted(datas)
            finals = np.array([datas[s]["final_score"] for s in seeds], dtype=np.float64)
            scores_by_method[method] = dict(zip(seeds, finals.tolist()))
            point, low, high, ci_method = iqm_ci(finals)
            diag = {key: nan_mean(d["diagnostics_last10"].get(key) for d in datas.values())
                    for key in DIAGNOSTICS}
            task_summary["methods"][method] = {
                "seeds": seeds,
                "final_scores": finals.tolist(),
                "iqm": point, "ci_low": low, "ci_high": high, "ci_method": ci_method,
                "mean": float(finals.mean()),
                "std": float(finals.std(ddof=1)) if len(finals) > 1 else 0.0,
                "env_steps": sorted({d["env_steps"] for d in datas.values()}),
                "diagnostics_last10": diag,
                "p_good_action_final": nan_mean(d.get("p_good_action_final")
                                                for d in datas.values()),
                "num_skipped_updates": sum(int(d.get("num_skipped_updates") or 0)
                                           for d in datas.values()),
                "mean_env_steps_per_s": float(np.mean([d["env_steps_per_s"] for d in datas.values()])),
                "mean_train_s": float(np.mean([d["train_s"] for d in datas.values()])),
                "mean_setup_s": float(np.mean([d["setup_s"] for d in datas.values()])),
                "total_wall_s": float(np.sum([d["wall_s"] for d in datas.values()])),
            }
        base = task_summary["methods"].get(BASELINE)
        for method, stats in task_summary["methods"].items():
            if base is None or method == BASELINE:
                stats["vs_a2c"] = None
                continue
            ratio = stats["iqm"] / base["iqm"] if base["iqm"] > 0 else None
            stats["vs_a2c"] = {
                "iqm_ratio": ratio,
                "iqm_ratio_note": None if ratio is not None else
                "undefined: a2c IQM <= 0 (returns of this task can be <= 0); "
                "use the paired difference",
                "probability_of_improvement": probability_of_improvement(
                    stats["final_scores"], base["final_scores"]),
                "probability_of_improvement_definition":
                    "fraction of seed pairs (i, j) with score_method_i > score_a2c_j, "
                    "ties count half",
                "paired_difference": paired_difference(scores_by_method[method],
                                                        scores_by_method[BASELINE]),
            }
        summary["tasks"][task] = task_summary
    write_json(out / "summary.json", summary)
    (out / "summary.md").write_text(summary_markdown(summary, runs))
    plot_curves(out, runs)
    plot_final_scores(out, summary)
    return summary


def summary_markdown(summary: Dict[str, Any], runs) -> str:
    machine = summary["machine"]
    lines = [
        "# Credit modes vs A2C (hca_rllib on RLlib's new API stack)",
        "",
        f"Produced by: `{summary['command']}`",
        "",
        "Reproduce the full benchmark (from the repository root): "
        "`.venv/bin/python benchmarks/credit_modes.py`; re-aggregate stored runs: "
        "`.venv/bin/python benchmarks/credit_modes.py --report-only`; smoke test: "
        "`.venv/bin/python benchmarks/credit_modes.py --quick`.",
        "",
        f"Setting: `HCAConfig` defaults, one local EnvRunner with {N_ENVS} envs, "
        f"{BATCH} env steps and one gradient step per iteration; methods differ only in "
        "the `.training()` overrides below; all methods run on the same seeds, budget and "
        "machine, one process, ordered task > seed > method (paired in time).",
        "",
        "Methods: " + "; ".join(f"`{m}` = {json.dumps(o)}" for m, o in METHODS.items()) + ".",
        "",
        "Final score = mean undiscounted return of the last 100 (bandit, delayed_effect(_noisy), "
        "shortcut) or last 20 (cartpole, delayed_cartpole) completed episodes of a run "
        "(exact per-episode returns, all chunks summed). IQM = 25% trimmed mean over "
        "seeds, CI = 95% bootstrap over seeds. IQM / a2c is given only where the a2c IQM "
        "is > 0. P(> a2c) = fraction of seed pairs (i, j) with score_method_i > "
        "score_a2c_j (ties half). Paired diff = mean over seeds of score_method_s - "
        "score_a2c_s with a 95% percentile-bootstrap CI over seeds; 'excl. 0' = the CI "
        "excludes 0. steps/s = env steps / training-loop seconds.",
        "",
    ]
    if machine:
        lines += [
            f"Machine: {', '.join(machine['hosts'])}; {machine['cpu_count']} CPUs; "
            f"{'; '.join(machine['platform'])}; {'; '.join(machine['versions'])}; torch "
            f"threads {machine['torch_num_threads']}; 1-min load average at run starts "
            f"{machine['loadavg_1min_at_run_start']} (a shared machine: steps/s are "
            f"indicative only). {machine['num_runs']} runs, {machine['total_wall_s'] / 60:.1f} "
            f"min of run wall time, finished {machine['first_finished']} .. "
            f"{machine['last_finished']}; code {', '.join(machine.get('code', []))}.",
            "",
        ]
    ci_methods = set()
    lines += [
        "## Final scores",
        "",
        "| task | method | seeds | IQM final (95% CI) | mean +- sd | IQM / a2c | P(> a2c) | "
        "paired diff vs a2c (95% CI) | excl. 0 | steps/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, task_summary in summary["tasks"].items():
        for method, s in task_summary["methods"].items():
            ci_methods.add(s["ci_method"])
            vs = s["vs_a2c"]
            if vs is None:
                ratio = poi = diff = excl = "—"
            else:
                ratio = fmt(vs["iqm_ratio"])
                poi = fmt(vs["probability_of_improvement"])
                pd = vs["paired_difference"]
                if pd is None:
                    diff, excl = "—", "—"
                else:
                    diff = f"{pd['mean']:+.2f} [{pd['ci_low']:+.2f}, {pd['ci_high']:+.2f}]"
                    excl = "yes" if pd["excludes_zero"] else "no"
            lines.append(
                f"| {task} | {method} | {len(s['seeds'])} | "
                f"{s['iqm']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}] | "
                f"{s['mean']:.2f} +- {s['std']:.2f} | {ratio} | {poi} | {diff} | {excl} | "
                f"{s['mean_env_steps_per_s']:.0f} |")
    lines += ["", "CI method (IQM): " + "; ".join(sorted(ci_methods)), ""]
    lines += [
        "## Diagnostics",
        "",
        f"Per run the mean over the last {DIAGNOSTICS_WINDOW} iterations, then the mean "
        "over seeds ('—': not logged by that mode). p(good) = the learned policy's "
        "probability of the optimal action at the start state at the end of training "
        "(bandit: a; delayed_effect: first action 0; shortcut: JUMP). Skipped = updates "
        "skipped for non-finite loss/gradients, summed over seeds.",
        "",
        "| task | method | " + " | ".join(DIAGNOSTIC_LABELS[k] for k in DIAGNOSTICS)
        + " | p(good) | skipped |",
        "|---|---|" + "---|" * (len(DIAGNOSTICS) + 2),
    ]
    for task, task_summary in summary["tasks"].items():
        for method, s in task_summary["methods"].items():
            diag = " | ".join(fmt(s["diagnostics_last10"][k], 3) for k in DIAGNOSTICS)
            lines.append(f"| {task} | {method} | {diag} | {fmt(s['p_good_action_final'], 3)} "
                         f"| {s['num_skipped_updates']} |")
    lines += ["", "## Tasks", ""]
    for task, task_summary in summary["tasks"].items():
        env_steps = sorted({v for s in task_summary["methods"].values() for v in s["env_steps"]})
        lines.append(
            f"- {task}: `{task_summary['env_id']}` env_config "
            f"`{json.dumps(task_summary['env_config'])}`, env steps "
            f"{env_steps[0]}..{env_steps[-1]}; final score = "
            f"{task_summary['final_score_definition']}; reference: {task_summary['reference']}.")
    lines += ["", "Per-seed final scores:", ""]
    for task, task_summary in summary["tasks"].items():
        for method, s in task_summary["methods"].items():
            per_seed = ", ".join(f"s{seed}: {score:.2f}"
                                 for seed, score in zip(s["seeds"], s["final_scores"]))
            lines.append(f"- {task} {method}: {per_seed}")
    lines += ["", "Plots: " + ", ".join(f"`curves_{t}.png`" for t in summary["tasks"])
              + ", `final_scores.png`.", ""]
    return "\n".join(lines)


def _smooth(values: np.ndarray, window: int = SMOOTH_ITERATIONS) -> np.ndarray:
    """Trailing NaN-aware mean over `window` iterations, per row (seed)."""
    if window <= 1 or values.shape[1] == 0:
        return values
    finite = np.isfinite(values)
    filled = np.where(finite, values, 0.0)
    kernel = np.ones(window)
    sums = np.array([np.convolve(row, kernel)[: values.shape[1]] for row in filled])
    counts = np.array([np.convolve(row, kernel)[: values.shape[1]] for row in finite.astype(float)])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def plot_curves(out: Path, runs) -> None:
    plt = matplotlib_pyplot()
    for task in ordered(runs, TASKS):
        probe = TASKS.get(task, {}).get("probe")
        panels = 2 if probe else 1
        fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.6), squeeze=False)
        ax_ret = axes[0][0]
        for method in ordered(runs[task], METHODS):
            datas = [runs[task][method][s] for s in sorted(runs[task][method])]
            label = f"{method} ({len(datas)} seed{'s' if len(datas) != 1 else ''})"
            color = COLORS.get(method)
            steps, values = stack_curves(datas, "return_mean_iteration")
            plot_mean_band(ax_ret, steps, _smooth(values, smoothing_points(SMOOTH_ITERATIONS, datas)),
                           color=color, label=label, band="sem",
                           alpha=0.12, linewidth=1.2)
            if probe:
                steps, values = stack_curves(datas, "p_good_action")
                plot_mean_band(axes[0][1], steps, values, color=color, label=label,
                               band="sem", alpha=0.12, linewidth=1.2)
        spec = TASKS.get(task, {})
        title = f"{task}: {spec.get('env_id', '')} {json.dumps(spec.get('env_config', {}))}"
        ax_ret.set_title(title, fontsize=9)
        ax_ret.set_xlabel(f"environment steps (summed over {N_ENVS} envs)")
        ax_ret.set_ylabel("undiscounted episode return\n(mean of the episodes ending in an "
                          f"iteration,\ntrailing mean over {SMOOTH_ITERATIONS} iterations)")
        ax_ret.grid(alpha=0.3)
        ax_ret.legend(loc="best", fontsize=7)
        if probe:
            ax = axes[0][1]
            ax.set_title(probe["what"], fontsize=9)
            ax.set_xlabel(f"environment steps (summed over {N_ENVS} envs)")
            ax.set_ylabel("probability of the optimal action")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        fig.suptitle("Credit modes vs A2C: mean over seeds, band = +-1 standard error across "
                     f"seeds; one point per {BATCH}-step iteration, returns smoothed per seed by "
                     f"a trailing mean over {SMOOTH_ITERATIONS} iterations", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / f"curves_{task}.png", dpi=110)
        plt.close(fig)


def plot_final_scores(out: Path, summary: Dict[str, Any]) -> None:
    tasks = list(summary["tasks"])
    if not tasks:
        return
    plt = matplotlib_pyplot()
    ncols = min(3, len(tasks))
    nrows = math.ceil(len(tasks) / ncols)
    width = max(4.2, 0.5 * max(len(summary["tasks"][t]["methods"]) for t in tasks) + 1.5)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, 4.4 * nrows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(flat, tasks):
        methods = summary["tasks"][task]["methods"]
        names = list(methods)
        for x, method in enumerate(names):
            s = methods[method]
            color = COLORS.get(method, "gray")
            ax.errorbar([x], [s["iqm"]], yerr=[[s["iqm"] - s["ci_low"]], [s["ci_high"] - s["iqm"]]],
                        fmt="o", color=color, capsize=4, markersize=6)
            jitter = np.linspace(-0.15, 0.15, len(s["final_scores"])) if len(s["final_scores"]) > 1 else [0.0]
            ax.scatter(x + np.asarray(jitter), s["final_scores"], s=9, color=color, alpha=0.45)
        if BASELINE in methods:
            ax.axhline(methods[BASELINE]["iqm"], color="black", linestyle="--", linewidth=0.8,
                       label="a2c IQM")
            ax.legend(loc="best", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        k = TASKS.get(task, {}).get("last_k", "?")
        ax.set_title(task, fontsize=10)
        ax.set_ylabel(f"final score: mean return of last {k} episodes")
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Final scores: IQM over seeds with 95% bootstrap CI; dots = seeds",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "final_scores.png", dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = grid_parser(
        __doc__.split("\n\n")[0],
        epilog="Reproduce: .venv/bin/python benchmarks/credit_modes.py (full); "
               "add --quick for the smoke test.",
        quick_help=f"tasks {'/'.join(QUICK_TASKS)}, methods {'/'.join(QUICK_METHODS)}, "
                   f"1 seed, {QUICK_STEPS} steps; writes to --out or a fresh temp "
                   "dir, never to benchmarks/results",
        out_help=f"results directory (default: {DEFAULT_OUT.relative_to(REPO)})",
        report_help="only aggregate stored runs (summary.md/json, plots)",
        subset="tasks", subset_choices=TASKS, methods=METHODS, explicit_seeds=True,
        subset_help="subset of tasks (default: all; --quick: bandit cartpole)",
        methods_help="subset of methods (default: all; --quick: a2c hca)",
        steps_help="override every task's env-step budget (use another --out)")
    return check_grid_args(parser, parser.parse_args(argv), default_out=DEFAULT_OUT,
                           results_root=RESULTS_ROOT, quick_prefix="credit_modes_quick_")


def main(argv=None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    tasks, methods, seeds = grid_selection(
        args, subset="tasks", names=TASKS, quick_names=QUICK_TASKS, methods=METHODS,
        quick_methods=QUICK_METHODS, full_seeds=FULL_SEEDS, quick_seeds=1)
    budget = args.steps or (QUICK_STEPS if args.quick else None)
    steps = {task: budget or TASKS[task]["steps"] for task in TASKS}
    if not args.report_only:
        run_all(args, out, tasks, seeds, methods, steps)
    summary = aggregate(out)
    print((out / "summary.md").read_text())
    written = [out / "summary.md", out / "summary.json"]
    written += [out / f"curves_{t}.png" for t in summary["tasks"]]
    written += [out / "final_scores.png"] if summary["tasks"] else []
    print("wrote " + ", ".join(str(p) for p in written)
          + ("" if summary["tasks"] else " (no runs stored yet)"))
    return 0 if summary["tasks"] else 1


if __name__ == "__main__":
    sys.exit(main())
