"""A2C parity benchmark: Stable-Baselines3's `A2C` against `hca_rllib.A2CConfig`.

Both libraries run the same setting: 8 environments (SB3: `DummyVecEnv` from
`make_vec_env`, each wrapped in `Monitor`; ours: one local EnvRunner with
`num_envs_per_env_runner=8`, `num_env_runners=0`), 64-step rollouts (512 env steps and
one gradient step per iteration), library defaults otherwise (ours are SB3's A2C
defaults: RMSprop lr 7e-4 alpha 0.99 eps 1e-5, gamma 0.99, GAE lambda 1, vf coef 0.5,
ent coef 0, grad clip 0.5, no advantage normalisation, separate 64x64 tanh MLPs).

Environments and budgets (seeds 0..4 each):
  * CartPole-v1, 100k env steps;
  * MinAtar Breakout (`MinAtar/Breakout-v1`), 300k env steps. Observations (10x10x4
    booleans) are flattened and cast to float32 for BOTH libraries, so both use the
    same 64x64 MLP.

Final score of a run: mean return of its last 20 completed episodes, computed from
per-episode returns recorded by this script (SB3: the `Monitor` "episode" infos seen in
a callback; ours: the package's episode-end callback, `hca_rllib.callbacks`, which sums
the returns of all chunks of the episode, read with an `EpisodeLog` on `algo.env_runner`). Learning curves use the same
definition at every iteration boundary (every 512 env steps). Each library's own
reported running mean is stored next to it as a cross-check: SB3's `ep_info_buffer`
(last 100 episodes) and RLlib's `result["env_runners"]["episode_return_mean"]`, which
with `num_env_runners=0` on ray 2.60 turned out to be the mean over the episodes that
completed in that iteration only, not a 100-episode window.

RLlib counts env steps slightly differently: gymnasium's next-step autoreset costs a
vector step that RLlib does not count, and `sample()` stops at the first vector step at
or past 512 counted steps, so an iteration is 512-519 counted env steps (SB3: exactly
512). Both libraries stop at the first iteration boundary at or past the budget; the
stored `env_steps` are the actual counts.

Runs are interleaved per seed (sb3 seed0, ours seed0, sb3 seed1, ...), so the steps/s
ratio ours/SB3 is a paired, same-session measurement. Each finished run is written to
`<out>/<env>/<library>_seed<k>.json`; runs already stored are skipped (resume), and
`--time-limit-min` stops cleanly between runs. At the end (or with `--report-only`) the
runs are aggregated into `<out>/summary.md`, `<out>/summary.json` and `<out>/curves.png`.

Reproduce (from the repository root):

    .venv/bin/python benchmarks/a2c_parity.py            # full benchmark, results in
                                                         # benchmarks/results/a2c_parity/
    .venv/bin/python benchmarks/a2c_parity.py --quick    # smoke test: CartPole, 2 seeds,
                                                         # 5k steps, temp dir (or --out)
    .venv/bin/python benchmarks/a2c_parity.py --report-only   # re-aggregate stored runs

Needs the `bench` extra: `.venv/bin/pip install -e '.[bench]'` (stable-baselines3 2.9.2,
matplotlib, the environments; keep torch at 2.13.0). rliable, which the statistics
come from, is a core dependency. The episode recorder, statistics, run store
and plotting helpers live in `benchmarks/common.py` (shared with `credit_modes.py`).
"""

from __future__ import annotations

import math
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# benchmarks/common.py, found via BENCH_DIR. BOOTSTRAP_*, iqm, iqm_ci, window_mean and
# write_json stay importable from this module, as before the split.
from common import (  # noqa: E402,F401
    BOOTSTRAP_REPS,
    BOOTSTRAP_SEED,
    RAY_INIT_KWARGS,
    EpisodeLog,
    benchmark_parser,
    check_out,
    command_line,
    iqm,
    iqm_ci,
    load_runs as _load_runs,
    matplotlib_pyplot,
    plot_mean_band,
    run_plan,
    stack_curves,
    window_mean,
    write_json,
)

DEFAULT_OUT = REPO / "benchmarks" / "results" / "a2c_parity"
LIBRARIES = ("sb3", "ours")
LIBRARY_LABELS = {"sb3": "Stable-Baselines3 A2C", "ours": "hca_rllib A2C (RLlib)"}
N_ENVS = 8
N_STEPS = 64
BATCH = N_ENVS * N_STEPS  # 512 env steps per iteration
LAST_K = 20  # final score: mean return of the last 20 completed episodes
FULL_SEEDS = 5
QUICK_SEEDS = 2
QUICK_STEPS = 5_000
BREAKOUT_FLAT_ID = "MinAtarBreakoutFlat-v1"

# Environment key (also the results sub-folder) -> settings.
ENVS: Dict[str, Dict[str, Any]] = {
    "CartPole-v1": {"steps": 100_000, "description": "gymnasium CartPole-v1"},
    "MinAtarBreakout-v1": {
        "steps": 300_000,
        "description": "MinAtar/Breakout-v1, FlattenObservation + float32 (400 inputs)",
    },
}


# --------------------------------------------------------------------------- envs


class Float32Observation(gym.ObservationWrapper):
    """Cast a (flattened, boolean) Box observation to float32 in [low, high]."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            low=space.low.astype(np.float32),
            high=space.high.astype(np.float32),
            shape=space.shape,
            dtype=np.float32,
        )

    def observation(self, observation):
        return np.asarray(observation, dtype=np.float32)


def make_breakout_flat(env_config: Optional[dict] = None) -> gym.Env:
    """MinAtar Breakout with 10x10x4 booleans flattened to 400 float32 inputs."""
    import minatar.gym

    if "MinAtar/Breakout-v1" not in gym.registry:
        minatar.gym.register_envs()
    env = gym.make("MinAtar/Breakout-v1")
    env = gym.wrappers.FlattenObservation(env)
    return Float32Observation(env)


def make_cartpole(env_config: Optional[dict] = None) -> gym.Env:
    return gym.make("CartPole-v1")


ENV_MAKERS = {"CartPole-v1": make_cartpole, "MinAtarBreakout-v1": make_breakout_flat}


def rllib_env_id(env_key: str) -> str:
    if env_key == "CartPole-v1":
        return "CartPole-v1"
    from ray.tune.registry import register_env

    register_env(BREAKOUT_FLAT_ID, make_breakout_flat)
    return BREAKOUT_FLAT_ID


# --------------------------------------------------------------------- recording


class Recorder:
    """Completed episodes and the learning curve, identical for both libraries."""

    def __init__(self) -> None:
        self.episode_returns: List[float] = []
        self.episode_lengths: List[int] = []
        self.episode_end_steps: List[int] = []
        self.curve_steps: List[int] = []
        self.curve_last20: List[Optional[float]] = []
        self.curve_last100: List[Optional[float]] = []
        self.curve_library_window: List[Optional[float]] = []
        self.lines: List[Dict[str, Any]] = []  # ours: the results.jsonl line of each iteration

    def add_episode(self, ret: float, length: int, step: int) -> None:
        self.episode_returns.append(float(ret))
        self.episode_lengths.append(int(length))
        self.episode_end_steps.append(int(step))

    def add_point(self, step: int, library_window_mean: Optional[float]) -> None:
        self.curve_steps.append(int(step))
        self.curve_last20.append(window_mean(self.episode_returns, LAST_K))
        self.curve_last100.append(window_mean(self.episode_returns, 100))
        if library_window_mean is not None and not math.isfinite(library_window_mean):
            library_window_mean = None
        self.curve_library_window.append(library_window_mean)


def run_sb3(env_key: str, seed: int, total_steps: int) -> Dict[str, Any]:
    import stable_baselines3
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    rec = Recorder()

    class RecordCallback(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                episode = info.get("episode")
                if episode is not None:  # added by Monitor when an episode ends
                    rec.add_episode(episode["r"], episode["l"], self.num_timesteps)
            return True

        def _on_rollout_end(self) -> None:
            buffer = self.model.ep_info_buffer  # SB3's own 100-episode window
            lib_mean = float(np.mean([e["r"] for e in buffer])) if buffer else None
            rec.add_point(self.num_timesteps, lib_mean)

    t_start = time.perf_counter()
    venv = make_vec_env(ENV_MAKERS[env_key], n_envs=N_ENVS, seed=seed, vec_env_cls=DummyVecEnv)
    model = A2C("MlpPolicy", venv, n_steps=N_STEPS, seed=seed, device="cpu", verbose=0)
    t_train = time.perf_counter()
    model.learn(total_timesteps=total_steps, callback=RecordCallback())
    t_end = time.perf_counter()
    env_steps = int(model.num_timesteps)
    venv.close()
    return _result(
        rec, env_steps, t_start, t_train, t_end,
        {"library_version": f"stable-baselines3 {stable_baselines3.__version__}",
         "library_window_mean": "mean of model.ep_info_buffer (last 100 Monitor episodes)",
         "settings": {"policy": "MlpPolicy", "n_envs": N_ENVS, "n_steps": N_STEPS,
                      "vec_env": "DummyVecEnv", "device": "cpu", "other": "SB3 defaults"}},
    )


def run_ours(env_key: str, seed: int, total_steps: int) -> Dict[str, Any]:
    import ray

    from hca_rllib import A2CConfig
    from hca_rllib.runner import training_iterations

    rec = Recorder()
    t_start = time.perf_counter()
    config = (
        A2CConfig()
        .environment(rllib_env_id(env_key))
        .env_runners(num_env_runners=0, num_envs_per_env_runner=N_ENVS)
        .training(train_batch_size_per_learner=BATCH)
        .debugging(seed=seed)
    )
    algo = config.build_algo()
    episode_log = EpisodeLog(algo.env_runner)
    env_steps = 0
    iteration_steps: List[int] = []
    t_train = time.perf_counter()
    try:
        for _, line, _ in training_iterations(algo, total_steps):
            rec.lines.append(line)
            iteration_steps.append(line["env_steps"] - env_steps)
            env_steps = line["env_steps"]
            for ret, length in episode_log.new():
                rec.add_episode(ret, length, env_steps)
            rec.add_point(env_steps, line["episode_return_mean"])
        t_end = time.perf_counter()
    finally:
        algo.stop()
    return _result(
        rec, env_steps, t_start, t_train, t_end,
        {"library_version": f"hca_rllib on ray {ray.__version__}",
         "library_window_mean": 'result["env_runners"]["episode_return_mean"] '
                                "(observed: mean over the episodes completed in that "
                                "iteration, despite metrics_num_episodes_for_smoothing=100)",
         "env_steps_per_iteration": sorted(set(iteration_steps)),
         "settings": {"config": "A2CConfig", "num_env_runners": 0,
                      "num_envs_per_env_runner": N_ENVS,
                      "train_batch_size_per_learner": BATCH,
                      "rollout_fragment_length": config.get_rollout_fragment_length(),
                      "env": rllib_env_id(env_key), "other": "hca_rllib A2C defaults"}},
    )


def _result(rec: Recorder, env_steps: int, t_start: float, t_train: float, t_end: float,
            extra: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    train_s = t_end - t_train
    final = window_mean(rec.episode_returns, LAST_K)
    return {
        "final_score": final,
        "final_score_definition": f"mean return of the last {LAST_K} completed episodes",
        "final_score_num_episodes": min(LAST_K, len(rec.episode_returns)),
        "num_episodes": len(rec.episode_returns),
        "env_steps": env_steps,
        "setup_s": t_train - t_start,
        "train_s": train_s,
        "wall_s": t_end - t_start,
        "env_steps_per_s": env_steps / train_s,
        "env_steps_per_s_definition": "env_steps / train_s (training loop only; setup "
                                      "= env + model construction excluded)",
        "torch_num_threads": torch.get_num_threads(),
        "curve": {
            "env_steps": rec.curve_steps,
            "return_mean_last20": rec.curve_last20,
            "return_mean_last100": rec.curve_last100,
            "library_window_mean": rec.curve_library_window,
        },
        # kept beside the compact record, outside git (`common.store_run`)
        "episodes": {
            "return": rec.episode_returns,
            "length": rec.episode_lengths,
            "env_steps_at_end": rec.episode_end_steps,
        },
        **({"results": rec.lines} if rec.lines else {}),
        **extra,
    }


# ------------------------------------------------------------------ run control


def result_path(out: Path, env_key: str, library: str, seed: int) -> Path:
    return out / env_key / f"{library}_seed{seed}.json"


def plan(env_keys: Sequence[str], seeds: Sequence[int]) -> List[Tuple[str, int, str]]:
    """Interleaved run order: per env, per seed, sb3 then ours."""
    return [(env_key, seed, lib) for env_key in env_keys for seed in seeds for lib in LIBRARIES]


def run_all(args, out: Path, env_keys, seeds, steps: Dict[str, int]) -> None:
    import torch

    ray_started = False

    def run_one(item: Tuple[str, int, str]) -> Dict[str, Any]:
        nonlocal ray_started
        env_key, seed, library = item
        if library == "ours" and not ray_started:
            from hca_rllib.runner import start_local_ray

            start_local_ray(**RAY_INIT_KWARGS)
            ray_started = True
        torch.set_num_threads(args.torch_threads)
        runner = run_sb3 if library == "sb3" else run_ours
        data = runner(env_key, seed, steps[env_key])
        data.update(env=env_key, env_description=ENVS[env_key]["description"],
                    library=library, seed=seed, target_env_steps=steps[env_key],
                    finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    host=platform.node(), python=platform.python_version(),
                    command=command_line())
        return data

    try:
        run_plan(
            plan(env_keys, seeds),
            path_of=lambda item: result_path(out, item[0], item[2], item[1]),
            target_of=lambda item: steps[item[0]],
            label_of=lambda item: f"{item[0]} {item[2]} seed{item[1]}",
            run_one=run_one,
            time_limit_min=args.time_limit_min,
        )
    finally:
        if ray_started:
            import ray

            ray.shutdown()


# --------------------------------------------------------------------- aggregate


def load_runs(out: Path) -> Dict[str, Dict[str, Dict[int, Dict[str, Any]]]]:
    return _load_runs(out, "*/*_seed*.json", ("env", "library", "seed"))


def aggregate(out: Path) -> Dict[str, Any]:
    runs = load_runs(out)
    summary: Dict[str, Any] = {"envs": {}, "command": command_line(), "out": str(out)}
    for env_key in [k for k in ENVS if k in runs] + [k for k in runs if k not in ENVS]:
        by_lib = runs[env_key]
        env_summary: Dict[str, Any] = {"libraries": {}}
        for library in LIBRARIES:
            seeds = sorted(by_lib.get(library, {}))
            if not seeds:
                continue
            datas = [by_lib[library][s] for s in seeds]
            finals = np.array([d["final_score"] for d in datas], dtype=np.float64)
            point, low, high, method = iqm_ci(finals)
            sps = np.array([d["env_steps_per_s"] for d in datas])
            env_summary["libraries"][library] = {
                "seeds": seeds,
                "final_scores": finals.tolist(),
                "iqm": point, "ci_low": low, "ci_high": high, "ci_method": method,
                "mean": float(finals.mean()),
                "std": float(finals.std(ddof=1)) if len(finals) > 1 else 0.0,
                "env_steps": sorted({d["env_steps"] for d in datas}),
                "mean_env_steps_per_s": float(sps.mean()),
                "mean_train_s": float(np.mean([d["train_s"] for d in datas])),
                "mean_setup_s": float(np.mean([d["setup_s"] for d in datas])),
            }
        libs = env_summary["libraries"]
        if "sb3" in libs and "ours" in libs:
            paired = sorted(set(libs["sb3"]["seeds"]) & set(libs["ours"]["seeds"]))
            ratios = [by_lib["ours"][s]["env_steps_per_s"] / by_lib["sb3"][s]["env_steps_per_s"]
                      for s in paired]
            ours, sb3 = libs["ours"], libs["sb3"]
            if ours["iqm"] > sb3["ci_high"]:
                verdict = "above"
            elif ours["iqm"] >= sb3["ci_low"]:
                verdict = "inside"
            else:
                verdict = "below"
            env_summary.update(
                paired_seeds=paired,
                steps_per_s_ratios=ratios,
                steps_per_s_ratio_median=float(np.median(ratios)) if ratios else None,
                ours_iqm_vs_sb3_ci=verdict,
                cis_overlap=bool(ours["ci_low"] <= sb3["ci_high"] and sb3["ci_low"] <= ours["ci_high"]),
            )
        summary["envs"][env_key] = env_summary
    write_json(out / "summary.json", summary)
    (out / "summary.md").write_text(summary_markdown(summary, runs))
    plot_curves(out, runs)
    return summary


def summary_markdown(summary: Dict[str, Any], runs) -> str:
    lines = [
        "# A2C parity: Stable-Baselines3 vs hca_rllib (RLlib new API stack)",
        "",
        f"Produced by: `{summary['command']}`",
        "",
        "Reproduce the full benchmark (from the repository root): "
        "`.venv/bin/python benchmarks/a2c_parity.py`; re-aggregate stored runs: "
        "`.venv/bin/python benchmarks/a2c_parity.py --report-only`; smoke test: "
        "`.venv/bin/python benchmarks/a2c_parity.py --quick`.",
        "",
        f"Setting: {N_ENVS} envs x {N_STEPS}-step rollouts ({BATCH} env steps, one gradient "
        "step per iteration), library defaults otherwise. Final score = mean return of the "
        f"last {LAST_K} completed episodes of a run (per-episode returns recorded by the "
        "script: SB3 `Monitor` infos; ours `RLlibCallback.on_episode_end`, all chunks "
        "summed). IQM = 25% trimmed mean over seeds; CI = 95% bootstrap over seeds. "
        "steps/s = env steps / training-loop seconds (setup excluded); ratio = median "
        "over seeds of the paired per-seed ratio ours/SB3 (runs interleaved per seed).",
        "",
        "| env | library | seeds | env steps | IQM final (95% CI) | mean +- sd | "
        "steps/s | ratio ours/SB3 | ours IQM vs SB3 CI |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    methods = set()
    for env_key, env_summary in summary["envs"].items():
        for library, s in env_summary["libraries"].items():
            methods.add(s["ci_method"])
            ratio = env_summary.get("steps_per_s_ratio_median")
            ratio_text = f"{ratio:.2f}" if (library == "ours" and ratio is not None) else ""
            verdict = env_summary.get("ours_iqm_vs_sb3_ci", "") if library == "ours" else ""
            lines.append(
                f"| {env_key} | {library} | {len(s['seeds'])} | "
                f"{'/'.join(str(v) for v in s['env_steps'])} | "
                f"{s['iqm']:.1f} [{s['ci_low']:.1f}, {s['ci_high']:.1f}] | "
                f"{s['mean']:.1f} +- {s['std']:.1f} | {s['mean_env_steps_per_s']:.0f} | "
                f"{ratio_text} | {verdict} |"
            )
    lines += ["", "CI method: " + "; ".join(sorted(methods)), ""]
    lines.append("Per-seed final scores and steps/s:")
    lines.append("")
    for env_key, env_summary in summary["envs"].items():
        for library, s in env_summary["libraries"].items():
            per_seed = ", ".join(
                f"s{seed}: {runs[env_key][library][seed]['final_score']:.1f} "
                f"({runs[env_key][library][seed]['env_steps_per_s']:.0f}/s)"
                for seed in s["seeds"])
            lines.append(f"- {env_key} {library}: {per_seed}")
    lines += ["", "Learning curves: `curves.png`.", ""]
    return "\n".join(lines)


def _stack_curves(datas: List[Dict[str, Any]]) -> Tuple[np.ndarray, np.ndarray]:
    return stack_curves(datas, "return_mean_last20")


def plot_curves(out: Path, runs) -> None:
    plt = matplotlib_pyplot()
    env_keys = list(runs)
    if not env_keys:
        return
    fig, axes = plt.subplots(1, len(env_keys), figsize=(6 * len(env_keys), 4.2), squeeze=False)
    for ax, env_key in zip(axes[0], env_keys):
        for library, color in (("sb3", "tab:blue"), ("ours", "tab:orange")):
            datas = [runs[env_key][library][s] for s in sorted(runs[env_key].get(library, {}))]
            if not datas:
                continue
            steps, values = _stack_curves(datas)
            plot_mean_band(ax, steps, values, color=color, band="std",
                           label=f"{LIBRARY_LABELS[library]} ({len(datas)} seeds)")
        ax.set_title(env_key)
        ax.set_xlabel("environment steps (summed over 8 envs)")
        ax.set_ylabel(f"episode return (mean of last {LAST_K} episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle("A2C parity: undiscounted return, mean over seeds, band = +-1 std across "
                 "seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)


# -------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = benchmark_parser(
        __doc__.split("\n\n")[0],
        epilog="Reproduce: .venv/bin/python benchmarks/a2c_parity.py (full); "
               "add --quick for the smoke test.",
        quick_help=f"CartPole only, {QUICK_SEEDS} seeds, {QUICK_STEPS} steps; writes "
                   "to --out or a fresh temp dir, never to benchmarks/results",
        out_help=f"results directory (default: {DEFAULT_OUT.relative_to(REPO)})",
        report_help="only aggregate stored runs (summary.md/json, curves.png)",
        torch_help="torch intra-op threads for both libraries (default 1)")
    return check_out(parser, parser.parse_args(argv), default_out=DEFAULT_OUT,
                     results_root=DEFAULT_OUT.parent, quick_prefix="a2c_parity_quick_")


def main(argv=None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        env_keys, seeds = ["CartPole-v1"], list(range(QUICK_SEEDS))
        steps = {"CartPole-v1": QUICK_STEPS}
    else:
        env_keys, seeds = list(ENVS), list(range(FULL_SEEDS))
        steps = {k: ENVS[k]["steps"] for k in ENVS}
    print(f"results: {out}", flush=True)
    if not args.report_only:
        run_all(args, out, env_keys, seeds, steps)
    summary = aggregate(out)
    print((out / "summary.md").read_text())
    print(f"wrote {out / 'summary.md'}, {out / 'summary.json'}, {out / 'curves.png'}")
    return 0 if summary["envs"] else 1


if __name__ == "__main__":
    sys.exit(main())
