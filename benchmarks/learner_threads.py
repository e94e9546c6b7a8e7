"""Do torch intra-op threads pay in the learner update? (issue 12, "use the second core")

For each setting of ``throughput.py`` (MinAtar Breakout 8 x 64, MinAtar's conv net; Atari
Pong 16 x 5, the Nature CNN; A2C, local EnvRunner and learner in one process, which is
the setup where the EnvRunner is idle during the update): build the algorithm, train
once, then ``--reps`` times: sample one train batch from the local EnvRunner and run
``learner_group.update`` on a fresh deep copy of it once with ``torch.set_num_threads(1)``
and once with ``torch.set_num_threads(2)`` (order alternating). Wall time and the
process's CPU time (``time.process_time``: all its threads) of each update; medians, and
the median of the per-repetition ratios (1 thread / 2 threads: above 1, threads pay).

OpenMP's wait policy matters on a busy machine: by default torch's OpenMP threads spin
at the end of every parallel region, which on oversubscribed cores burns the time slice
another thread of the same update needs. Run once as is and once with
``OMP_WAIT_POLICY=PASSIVE`` in the environment (it is read at process start), e.g.

    .venv/bin/python benchmarks/learner_threads.py --out benchmarks/results/throughput_core/learner_threads.json
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/learner_threads.py \\
        --out benchmarks/results/throughput_core/learner_threads_passive.json
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
for _path in (str(BENCH_DIR.parent), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import RAY_INIT_KWARGS, command_line, machine_note, write_json  # noqa: E402


def measure(env: str, reps: int) -> dict:
    import torch

    import throughput

    algo = throughput.rllib_config(env, "a2c", False).build_algo()
    try:
        algo.train()
        runner = algo.env_runner_group.local_env_runner
        wall = {1: [], 2: []}
        cpu = {1: [], 2: []}
        load = [os.getloadavg()[0]]
        for r in range(reps):
            episodes = runner.sample()
            for k in ((1, 2) if r % 2 == 0 else (2, 1)):
                batch = copy.deepcopy(episodes)
                torch.set_num_threads(k)
                c0, t0 = time.process_time(), time.perf_counter()
                algo.learner_group.update(episodes=batch)
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
                torch.set_num_threads(1)
        load.append(os.getloadavg()[0])
    finally:
        algo.stop()
    return {
        "reps": reps, "load1_start_end": load,
        "wall_ms_median": {k: 1e3 * statistics.median(v) for k, v in wall.items()},
        "cpu_ms_median": {k: 1e3 * statistics.median(v) for k, v in cpu.items()},
        "wall_ratio_1_over_2": statistics.median(a / b for a, b in zip(wall[1], wall[2])),
        "cpu_ratio_2_over_1": statistics.median(b / a for a, b in zip(cpu[1], cpu[2])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="*", default=["minatar", "atari"], choices=["minatar", "atari"])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import ray
    from hca_rllib.runner import start_local_ray
    import torch

    torch.set_num_threads(1)
    start_local_ray(**RAY_INIT_KWARGS)
    try:
        out = {"command": command_line(), "machine": machine_note(),
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default: active)"),
               "envs": {env: measure(env, args.reps) for env in args.env}}
    finally:
        ray.shutdown()
    write_json(args.out, out)
    for env, m in out["envs"].items():
        print(env, {k: m[k] for k in ("wall_ms_median", "cpu_ms_median", "wall_ratio_1_over_2",
                                      "cpu_ratio_2_over_1")})


if __name__ == "__main__":
    main()
