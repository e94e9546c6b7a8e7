"""Training throughput: agent steps per second of A2C, HCA, RLlib's PPO and SB3's A2C.

Everything is measured in ONE run of this script, on one machine, and reported as ratios
measured in the same round (the project's machines are shared and noisy, so absolute
speeds are not compared across runs).

Setting (all methods): MinAtar Breakout (``minatar/Breakout``: 10x10x4 ``uint8`` planes),
8 envs x 64-step rollouts = 512 env steps and one update per iteration, training (not
just sampling), torch with ONE thread in every process (the driver sets
``torch.set_num_threads(1)``; remote EnvRunner actors get ``OMP_NUM_THREADS=1`` from
Ray, which torch follows). Methods:

* ``a2c``: ``hca_rllib.A2CConfig().environment("minatar/Breakout")`` with
  ``num_envs_per_env_runner=8`` (one local EnvRunner, local learner; MinAtar's default
  network: 3x3 conv, 16 channels, 128-unit dense). The denominator of every ratio.
* ``hca``, ``c2a2c``, ``mix``: ``HCAConfig().training(credit=...)``, same setting, with
  the hindsight classifier trained every iteration (its defaults).
* ``ppo_1epoch``: RLlib's ``PPOConfig`` on the same env, ``num_env_runners=0`` (its default is 2),
  ``rollout_fragment_length=64``,
  ``train_batch_size_per_learner=512, num_epochs=1, minibatch_size=512`` (one gradient
  step on the same batch), ``model_config={"conv_filters": [[16, 3, 1, "valid"]]}``
  (RLlib's default CNN does not fit 10x10 images); its env casts the observations to
  float32 in [0, 1] (``TransformObservation``; RLlib's default module does not cast
  ``uint8``, ours does).
* ``sb3_a2c``: Stable-Baselines3's default ``A2C("MlpPolicy")`` on
  ``MinAtarEnv("Breakout")`` (uint8 observations, flattened by SB3's MLP policy: 64x64
  tanh networks, not the conv net above), ``make_vec_env`` = ``DummyVecEnv`` of 8
  ``Monitor``-wrapped envs, ``n_steps=64``.
* ``a2c_runners1``, ``a2c_runners2``: A2C with ``num_env_runners`` 1 and 2 remote
  EnvRunners (``num_cpus_per_env_runner=0.5``, 8 envs each, so 64- and 32-step
  fragments), learner in the driver. Their ratio is also given to ``a2c`` (0 runners).

Procedure: for each round (``--rounds``, default 2), for each method in turn: build,
two warm-up ``train()`` calls, then ``train()`` repeatedly until ``--seconds`` (default
20) of wall time have passed; steps/s = increase of ``num_env_steps_sampled_lifetime``
over the wall time of those timed calls (SB3: ``model.num_timesteps`` over the wall time
of ``learn()``, stopped by a callback after ``--seconds``, after a 1,024-step warm-up
``learn()``). Build and warm-up are not timed. Per method: median over rounds of the
steps/s, and median over rounds of the ratio to ``a2c`` of the same round.

For the RLlib runs the iteration's time split is read from the last result's
``timers`` (RLlib's moving averages of ``env_runner_sampling_timer``,
``learner_update_timer``, ``synch_weights`` and ``training_iteration``): fraction of
the iteration spent sampling and in the learner update. The forward / hindsight /
backward split inside the learner update is not measured (it would need timers inside
``HCATorchLearner``); the ratio HCA/A2C of the learner-update time is the cost of the
classifier (its forward and backward pass and the hindsight advantages).

Reproduce (from the repository root):

    .venv/bin/python benchmarks/throughput.py              # ~6 min (--seconds 15: ~5), in
                                                           # benchmarks/results/throughput/
    .venv/bin/python benchmarks/throughput.py --quick      # 1 round, 4 s each, temp dir

Writes ``results.json`` (every measurement, the command line, the machine) and
``summary.md`` (the table and the targets of the throughput issue: HCA >= 0.9 x A2C,
A2C >= RLlib PPO with one epoch, A2C against SB3's A2C) into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import RAY_INIT_KWARGS, command_line, lifetime_env_steps, machine_note, write_json  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "throughput"
ENV_ID = "minatar/Breakout"
N_ENVS = 8
N_STEPS = 64
BATCH = N_ENVS * N_STEPS
WARMUP_ITERS = 2
METHODS = ("a2c", "hca", "c2a2c", "mix", "ppo_1epoch", "sb3_a2c", "a2c_runners1", "a2c_runners2")
LABELS = {
    "a2c": "A2C (hca_rllib), 0 remote runners",
    "hca": "HCA credit=hca",
    "c2a2c": "HCA credit=c2a2c",
    "mix": "HCA credit=mix",
    "ppo_1epoch": "RLlib PPO, 1 epoch, 1 minibatch",
    "sb3_a2c": "SB3 A2C (MlpPolicy, DummyVecEnv)",
    "a2c_runners1": "A2C, 1 remote EnvRunner",
    "a2c_runners2": "A2C, 2 remote EnvRunners",
}
TIMER_KEYS = ("env_runner_sampling_timer", "learner_update_timer", "synch_weights",
              "training_iteration")


# ------------------------------------------------------------------------ configs


PPO_ENV_ID = "minatar/Breakout-float32"


def make_breakout_float(env_config: Optional[dict] = None):
    """`minatar/Breakout` with observations cast to float32 in [0, 1], for RLlib's
    default PPO module (its CNN encoder does not cast uint8 inputs)."""
    import gymnasium as gym
    import numpy as np

    from hca_rllib.envs.minatar import MinAtarEnv

    env = MinAtarEnv("Breakout")
    space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
    return gym.wrappers.TransformObservation(
        env, lambda obs: (obs > 0).astype(np.float32), space)


def rllib_config(method: str):
    import hca_rllib  # noqa: F401  (registers the env ids)
    from hca_rllib import A2CConfig, HCAConfig

    if method == "ppo_1epoch":
        from ray.rllib.algorithms.ppo import PPOConfig

        from ray.tune.registry import register_env

        register_env(PPO_ENV_ID, make_breakout_float)
        return (PPOConfig().environment(PPO_ENV_ID)
                .env_runners(num_env_runners=0, num_envs_per_env_runner=N_ENVS,
                             rollout_fragment_length=N_STEPS)
                .training(train_batch_size_per_learner=BATCH, num_epochs=1, minibatch_size=BATCH)
                .rl_module(model_config={"conv_filters": [[16, 3, 1, "valid"]]}))
    if method in ("hca", "c2a2c", "mix"):
        config = HCAConfig().training(credit=method)
    else:
        config = A2CConfig()
    config = config.environment(ENV_ID).env_runners(num_envs_per_env_runner=N_ENVS)
    if method.startswith("a2c_runners"):
        config = config.env_runners(num_env_runners=int(method[-1]), num_cpus_per_env_runner=0.5)
    return config


# ----------------------------------------------------------------------- measuring


def time_rllib(method: str, seconds: float) -> Dict[str, Any]:
    t0 = time.perf_counter()
    algo = rllib_config(method).build_algo()
    try:
        setup_s = time.perf_counter() - t0
        result = None
        for _ in range(WARMUP_ITERS):
            result = algo.train()
        steps0 = lifetime_env_steps(result)
        iters = 0
        start = time.perf_counter()
        while True:
            result = algo.train()
            iters += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        steps = lifetime_env_steps(result) - steps0
        timers = {k: float(v) for k, v in (result.get("timers") or {}).items()
                  if isinstance(v, (int, float))}
    finally:
        algo.stop()
    out = {"env_steps": int(steps), "wall_s": elapsed, "iterations": iters,
           "steps_per_s": steps / elapsed, "setup_s": setup_s,
           "iteration_s": elapsed / iters, "timers_s": timers}
    it = timers.get("training_iteration")
    if it:
        for key, name in (("env_runner_sampling_timer", "fraction_sampling"),
                          ("learner_update_timer", "fraction_learner_update")):
            out[name] = timers[key] / it if key in timers else None
    return out


def time_sb3(seconds: float) -> Dict[str, Any]:
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from hca_rllib.envs.minatar import MinAtarEnv

    class StopAfter(BaseCallback):
        def __init__(self, deadline: float):
            super().__init__()
            self.deadline = deadline

        def _on_step(self) -> bool:
            return time.perf_counter() < self.deadline

    t0 = time.perf_counter()
    env = make_vec_env(lambda: MinAtarEnv("Breakout"), n_envs=N_ENVS, seed=0)
    model = A2C("MlpPolicy", env, n_steps=N_STEPS, seed=0, device="cpu", verbose=0)
    setup_s = time.perf_counter() - t0
    model.learn(total_timesteps=WARMUP_ITERS * BATCH)
    steps0 = model.num_timesteps
    start = time.perf_counter()
    model.learn(total_timesteps=10**9, reset_num_timesteps=False,
                callback=StopAfter(start + seconds))
    elapsed = time.perf_counter() - start
    steps = model.num_timesteps - steps0
    env.close()
    return {"env_steps": int(steps), "wall_s": elapsed, "iterations": steps // BATCH,
            "steps_per_s": steps / elapsed, "setup_s": setup_s}


def measure(method: str, seconds: float) -> Dict[str, Any]:
    return time_sb3(seconds) if method == "sb3_a2c" else time_rllib(method, seconds)


# ------------------------------------------------------------------------ summary


def median(values: List[float]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


def summarise(rounds: List[Dict[str, Dict[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    summary: Dict[str, Dict[str, Any]] = {}
    for method in METHODS:
        runs = [r[method] for r in rounds if method in r]
        if not runs:
            continue
        ratios = [r[method]["steps_per_s"] / r["a2c"]["steps_per_s"] for r in rounds
                  if method in r and "a2c" in r]
        entry = {"steps_per_s_median": median([x["steps_per_s"] for x in runs]),
                 "steps_per_s_rounds": [x["steps_per_s"] for x in runs],
                 "ratio_to_a2c_median": median(ratios), "ratio_to_a2c_rounds": ratios}
        if "fraction_sampling" in runs[0]:
            entry["fraction_sampling_median"] = median([x.get("fraction_sampling") for x in runs])
            entry["fraction_learner_update_median"] = median(
                [x.get("fraction_learner_update") for x in runs])
            entry["learner_update_s_median"] = median(
                [x["timers_s"].get("learner_update_timer") for x in runs])
            entry["sampling_s_median"] = median(
                [x["timers_s"].get("env_runner_sampling_timer") for x in runs])
        summary[method] = entry
    return summary


def fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def targets(summary: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []

    def ratio(m: str) -> Optional[float]:
        return summary.get(m, {}).get("ratio_to_a2c_median")

    for mode in ("hca", "c2a2c", "mix"):
        r = ratio(mode)
        if r is not None:
            out.append({"target": f"{mode} >= 0.9 x A2C", "value": f"{r:.2f} x A2C",
                        "met": r >= 0.9})
    r = ratio("ppo_1epoch")
    if r is not None:
        out.append({"target": "A2C >= RLlib PPO (1 epoch)", "value": f"A2C = {1 / r:.2f} x PPO",
                    "met": r <= 1.0})
    r = ratio("sb3_a2c")
    if r is not None:
        out.append({"target": "A2C vs SB3 A2C (>= 1 to match)", "value": f"A2C = {1 / r:.2f} x SB3",
                    "met": r <= 1.0})
    return out


def write_summary(out: Path, data: Dict[str, Any]) -> str:
    summary = data["summary"]
    lines = [
        "# Training throughput, MinAtar Breakout (8 envs x 64 steps, torch 1 thread)",
        "",
        f"Command: `{data['command']}`  ",
        f"{data['rounds']} round(s) x {data['seconds']} s of timed `train()` per method, "
        "methods interleaved within each round; steps/s and ratio to A2C of the same round, "
        "median over rounds.",
        "",
        "| method | steps/s | ratio to A2C | sampling / learner update (fraction of iteration) "
        "| learner update ms |",
        "|---|---|---|---|---|",
    ]
    for method in METHODS:
        if method not in summary:
            continue
        s = summary[method]
        split = "-"
        if s.get("fraction_sampling_median") is not None:
            split = (f"{s['fraction_sampling_median']:.2f} / "
                     f"{s['fraction_learner_update_median']:.2f}")
        upd = s.get("learner_update_s_median")
        lines.append(f"| {method}: {LABELS[method]} | {fmt(s['steps_per_s_median'], ',.0f')} "
                     f"| {fmt(s['ratio_to_a2c_median'], '.2f')} | {split} "
                     f"| {fmt(None if upd is None else 1000 * upd, '.1f')} |")
    lines += ["", "Scaling (A2C, `num_cpus_per_env_runner=0.5`, ratio to 0 remote runners): "
              + ", ".join(f"{m[-1] if m != 'a2c' else '0'} runners "
                          f"{fmt(summary[m]['ratio_to_a2c_median'], '.2f')}"
                          for m in ("a2c", "a2c_runners1", "a2c_runners2") if m in summary),
              "", "## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for t in data["targets"]:
        lines.append(f"| {t['target']} | {t['value']} | {'met' if t['met'] else 'not met'} |")
    lines += ["", "The forward / hindsight / backward split inside the learner update is not "
              "measured (no timers inside the learner); the learner-update column shows the "
              "classifier's total cost against A2C.", "",
              f"Machine: `{data['machine']}`", ""]
    text = "\n".join(lines)
    (out / "summary.md").write_text(text)
    return text


# --------------------------------------------------------------------------- main


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=None,
                        help="timed train() wall time per method and round (20; --quick 4)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (2; --quick 1)")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    parser.add_argument("--quick", action="store_true", help="smoke test")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (4.0 if args.quick else 20.0)
    n_rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)
    out = args.out or (Path(tempfile.mkdtemp(prefix="throughput_")) if args.quick else DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)
    methods = [m for m in METHODS if m in args.methods]
    if "a2c" not in methods:
        methods.insert(0, "a2c")

    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(**RAY_INIT_KWARGS)
    t_start = time.perf_counter()
    rounds: List[Dict[str, Dict[str, Any]]] = []
    data: Dict[str, Any] = {}
    try:
        for k in range(n_rounds):
            this: Dict[str, Dict[str, Any]] = {}
            rounds.append(this)
            for method in methods:
                this[method] = measure(method, seconds)
                print(f"round {k} {method:13s} {this[method]['steps_per_s']:8.0f} steps/s "
                      f"({this[method]['iterations']} iters, setup "
                      f"{this[method]['setup_s']:.1f} s)", flush=True)
    finally:
        ray.shutdown()
        summary = summarise(rounds)
        data = {"command": command_line(), "machine": machine_note(), "env": ENV_ID,
                "n_envs": N_ENVS, "n_steps": N_STEPS, "seconds": seconds,
                "rounds": n_rounds, "warmup_iters": WARMUP_ITERS,
                "total_wall_s": time.perf_counter() - t_start,
                "measurements": rounds, "summary": summary, "targets": targets(summary)}
        write_json(out / "results.json", data)
        print(write_summary(out, data))
        print(f"written to {out}")


if __name__ == "__main__":
    main()
