"""What `sampler="auto"` costs per feature: A2C training throughput (env steps per
wall-second and per driver CPU-second, `train()` with a local EnvRunner and learner) of
the path "auto" picks for each RLlib feature, next to the lean path without it.

Configurations, alternated round by round in one process (8 envs x 64 steps):

* ``cartpole_lean``: CartPole, the defaults (auto -> lean sampler and learner).
* ``cartpole_rllib``: CartPole with ``sampler="rllib"``: the price of RLlib's runner alone.
* ``cartpole_mean_std``: ``env_to_module_connector=MeanStdFilter()`` (auto -> RLlib's runner).
* ``cartpole_step_callback``: ``callbacks(on_episode_step=...)`` (auto -> RLlib's runner).
* ``cartpole_learner_piece``: a pass-through user learner connector piece (auto -> lean:
  the lean learner path runs the user's pieces before its own).
* ``cartpole_learner_piece_rllib``: the same piece with ``learner_path="rllib"`` (RLlib's
  learner pieces, lean sampler).
* ``frozenlake_lean``: FrozenLake 4x4 (Discrete(16) observations), the defaults (auto ->
  lean, one-hot in the lean loop).
* ``frozenlake_rllib``: the same with ``sampler="rllib"`` (RLlib's FlattenObservations
  piece in its connector pipeline).

``python benchmarks/auto_paths.py [--seconds 8] [--rounds 3]``; prints a markdown table
(medians over rounds, min-max) and the ratio of each to its lean reference.
``--quick``: one round of about half a second each (a check that every configuration
builds, takes the path stated above and trains; tests/test_auto_paths.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Dict, List

from ray.rllib.connectors.connector_v2 import ConnectorV2


class PassThrough(ConnectorV2):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        return batch


def build(name: str):
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    from hca_rllib import A2CConfig

    env, kwargs = ("FrozenLake-v1", {"is_slippery": False}) if name.startswith("frozenlake") \
        else ("CartPole-v1", {})
    config = (A2CConfig().environment(env, env_config=kwargs)
              .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=64)
              .training(train_batch_size_per_learner=512).debugging(seed=0))
    if name in ("cartpole_rllib", "frozenlake_rllib"):
        config.env_runners(sampler="rllib")
    elif name == "cartpole_mean_std":
        config.env_runners(env_to_module_connector=lambda env=None, spaces=None, device=None: MeanStdFilter())
    elif name == "cartpole_step_callback":
        config.callbacks(on_episode_step=lambda **kw: None)
    elif name == "cartpole_learner_piece":
        config.learners(learner_connector=lambda obs_space, act_space: PassThrough())
    elif name == "cartpole_learner_piece_rllib":
        config.learners(learner_connector=lambda obs_space, act_space: PassThrough(), learner_path="rllib")
    config.validate()
    return config


METHODS = ["cartpole_lean", "cartpole_rllib", "cartpole_mean_std", "cartpole_step_callback",
           "cartpole_learner_piece", "cartpole_learner_piece_rllib", "frozenlake_lean", "frozenlake_rllib"]


def measure(name: str, seconds: float) -> Dict[str, Any]:
    config = build(name)
    algo = config.build_algo()
    try:
        algo.train()  # warm-up
        steps0 = algo.train()["env_runners"]["num_env_steps_sampled_lifetime"]
        wall0, cpu0 = time.perf_counter(), time.process_time()
        steps = steps0
        while time.perf_counter() - wall0 < seconds:
            steps = algo.train()["env_runners"]["num_env_steps_sampled_lifetime"]
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        return {"sampler": config.resolved_sampler, "learner_path": config.resolved_learner_path,
                "steps_per_s": (steps - steps0) / wall, "steps_per_cpu_s": (steps - steps0) / cpu}
    finally:
        algo.stop()


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", nargs="*", default=METHODS, choices=METHODS)
    parser.add_argument("--quick", action="store_true", help="one round of 0.5 s each: a check, not a measurement")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 0.5, 1
    import os

    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    runs: Dict[str, List[Dict[str, Any]]] = {m: [] for m in args.methods}
    for k in range(args.rounds):
        order = args.methods[k % len(args.methods):] + args.methods[:k % len(args.methods)]
        for name in order:
            m = measure(name, args.seconds)
            runs[name].append(m)
            print(f"round {k} {name:24s} {m['steps_per_s']:8.0f} steps/s {m['steps_per_cpu_s']:8.0f} "
                  f"steps/cpu-s (load {os.getloadavg()[0]:.1f})", flush=True)
    ray.shutdown()
    print("\n| config | sampler | learner path | steps/s (median, min-max) | steps/CPU-s (median, min-max) "
          "| ratio to lean (CPU-s) |\n|---|---|---|---|---|---|")
    for name, rs in runs.items():
        ref = runs.get("frozenlake_lean" if name.startswith("frozenlake") else "cartpole_lean")
        wall = [r["steps_per_s"] for r in rs]
        cpu = [r["steps_per_cpu_s"] for r in rs]
        ratio = statistics.median(cpu) / statistics.median([r["steps_per_cpu_s"] for r in ref]) if ref else float("nan")
        print(f"| {name} | {rs[0]['sampler']} | {rs[0]['learner_path']} | {statistics.median(wall):,.0f} "
              f"({min(wall):,.0f}-{max(wall):,.0f}) | {statistics.median(cpu):,.0f} ({min(cpu):,.0f}-"
              f"{max(cpu):,.0f}) | {ratio:.2f} |")


if __name__ == "__main__":
    main()
