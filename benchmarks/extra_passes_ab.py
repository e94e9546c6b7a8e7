"""The classifier's extra passes of one update, as written now against the plain
per-pass loop (`tests/test_classifier_passes.py` `reference_passes`), on the same batch in
one process: MinAtar Breakout, `DEFAULT_CREDIT` (`benchmarks/common.py`), one torch
thread. The two take turns (order alternating) on the batch and behaviour policy of one
training iteration after a 3-iteration warm-up; both step the same classifier, so the
weights drift alike. Prints and writes the min, lower quartile and median per call and
the ratio of the medians (new / old).

    .venv/bin/python benchmarks/extra_passes_ab.py --calls 200 --out benchmarks/results/credit_cost_lean
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR), str(REPO / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import DEFAULT_CREDIT, command_line, write_json  # noqa: E402


def measure(calls: int):
    import ray
    import torch

    from hca_rllib.learner import HCATorchLearner
    from test_classifier_passes import reference_passes
    from tuned_examples.common import minatar_config

    torch.set_num_threads(1)
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=300 * 2**20, log_to_driver=False)
    algo = minatar_config("Breakout").training(**DEFAULT_CREDIT).debugging(seed=0).build_algo()
    try:
        for _ in range(3):
            algo.train()
        learner = algo.learner_group._learner
        new = learner._extra_hindsight_passes
        captured = {}

        def grab(batch, behaviour):
            captured["args"] = (batch, behaviour)
            return new(batch, behaviour)

        learner._extra_hindsight_passes = grab
        algo.train()
        learner._extra_hindsight_passes = new
        old = reference_passes.__get__(learner, HCATorchLearner)
        times = {"old": [], "new": []}
        for i in range(calls):
            for name, f in ((("old", old), ("new", new)) if i % 2 else (("new", new), ("old", old))):
                start = time.perf_counter()
                f(*captured["args"])
                times[name].append(time.perf_counter() - start)
    finally:
        algo.stop()
        ray.shutdown()
    out = {name: {"min_ms": 1000 * min(t), "p25_ms": 1000 * statistics.quantiles(t, n=4)[0],
                  "median_ms": 1000 * statistics.median(t)} for name, t in times.items()}
    out["ratio_new_to_old_median"] = out["new"]["median_ms"] / out["old"]["median_ms"]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = {"command": command_line(), **measure(args.calls)}
    print(result)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "extra_passes_ab.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
