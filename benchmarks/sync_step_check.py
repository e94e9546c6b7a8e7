"""Issue 12: the lean sampler's `sample()` with the direct `SyncVectorEnv` step
(`LeanEnvRunner.direct_vector_step`, the default) and through `SyncVectorEnv.step`,
interleaved in one process (ABBA order; process CPU and wall time per sample, median
over calls), on MinAtar Breakout 8 envs x 64 steps by default. First checks that both
runners, seeded alike with the same weights and torch seed, sample the same episodes.
`--obs`: also MinAtarEnv's observation (`_obs`) against the old two-allocation one,
interleaved per call. Writes a JSON with `--out`.

    PYTHONPATH=. nice -n 19 .venv/bin/python benchmarks/sync_step_check.py \
        [--calls 40] [--env minatar/Breakout] [--envs 8] [--steps 64] [--obs] [--out x.json]
"""

import argparse
import json
import os
import platform
import time

import numpy as np
import torch


def _runner(cls, env, envs, steps):
    from hca_rllib import A2CConfig

    config = (A2CConfig().environment(env)
              .env_runners(num_envs_per_env_runner=envs, rollout_fragment_length=steps)
              .training(train_batch_size_per_learner=envs * steps).debugging(seed=0))
    config.validate()
    return cls(config=config)


def _same(eps_a, eps_b) -> bool:
    for a, b in zip(eps_a, eps_b):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if (x.t_started, x.t, x.is_terminated, x.is_truncated) != (
                    y.t_started, y.t, y.is_terminated, y.is_truncated):
                return False
            for name in ("observations", "actions", "rewards"):
                if not np.array_equal(getattr(x, name).data, getattr(y, name).data):
                    return False
            if x.get_infos() != y.get_infos():
                return False
    return True


def _obs_micro(calls: int) -> dict:
    """Per call: 20,000 `_obs()` of a Breakout env mid-game, old and new interleaved."""
    from hca_rllib.envs.minatar import MinAtarEnv

    env = MinAtarEnv("Breakout")
    env.reset(seed=0)
    for _ in range(20):
        env.game.act(1)
    old = lambda: env.game.state().astype(np.uint8) * np.uint8(255)  # noqa: E731
    new = env._obs
    assert np.array_equal(old(), new()) and old().dtype == new().dtype
    times = {"old": [], "new": []}
    for k in range(calls):
        for name in (("old", "new") if k % 2 == 0 else ("new", "old")):
            f = old if name == "old" else new
            t = time.process_time()
            for _ in range(20000):
                f()
            times[name].append((time.process_time() - t) / 20000 * 1e6)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"us_per_obs_median": med, "us_per_obs": times}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--env", default="minatar/Breakout")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--obs", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    torch.set_num_threads(1)
    from hca_rllib.env_runner import LeanEnvRunner

    class StockStep(LeanEnvRunner):
        direct_vector_step = False

    direct = _runner(LeanEnvRunner, args.env, args.envs, args.steps)
    stock = _runner(StockStep, args.env, args.envs, args.steps)
    stock.module.set_state(direct.module.get_state())
    torch.manual_seed(0)
    eps_direct = [direct.sample() for _ in range(3)]
    torch.manual_seed(0)
    eps_stock = [stock.sample() for _ in range(3)]
    same = _same(eps_direct, eps_stock)
    print("same episodes (3 samples, stochastic policy, same torch seed):", same)
    cpu = {"direct": [], "stock": []}
    wall = {"direct": [], "stock": []}
    steps = {"direct": 0, "stock": 0}
    for k in range(args.calls):
        for name in (("direct", "stock") if k % 2 == 0 else ("stock", "direct")):
            r = direct if name == "direct" else stock
            t, c = time.perf_counter(), time.process_time()
            eps = r.sample()
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - t)
            steps[name] += sum(len(e) for e in eps)
    med_cpu = {k: float(np.median(v)) * 1e3 for k, v in cpu.items()}
    med_wall = {k: float(np.median(v)) * 1e3 for k, v in wall.items()}
    print(f"CPU ms per sample(): direct {med_cpu['direct']:.1f}, stock {med_cpu['stock']:.1f}, "
          f"stock / direct {med_cpu['stock'] / med_cpu['direct']:.3f}")
    print(f"wall ms per sample(): direct {med_wall['direct']:.1f}, stock {med_wall['stock']:.1f}, "
          f"stock / direct {med_wall['stock'] / med_wall['direct']:.3f}")
    result = {
        "env": args.env, "num_envs": args.envs, "fragment": args.steps, "calls": args.calls,
        "same_episodes": same, "env_steps": steps,
        "cpu_ms_median": med_cpu, "wall_ms_median": med_wall,
        "cpu_ratio_stock_over_direct": med_cpu["stock"] / med_cpu["direct"],
        "wall_ratio_stock_over_direct": med_wall["stock"] / med_wall["direct"],
        "cpu_ms": {k: [round(x * 1e3, 3) for x in v] for k, v in cpu.items()},
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_end": list(os.getloadavg())},
    }
    if args.obs:
        result["obs"] = _obs_micro(max(6, args.calls // 4))
        m = result["obs"]["us_per_obs_median"]
        print(f"MinAtar _obs us: old {m['old']:.2f}, new {m['new']:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
