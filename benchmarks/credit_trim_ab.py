"""The credit pieces of one update as written now against those of an earlier commit
(`--base`, read with `git show`), on the same batch in one process: MinAtar Breakout,
`DEFAULT_CREDIT` (`benchmarks/common.py`), one torch thread, the lean learner path. After
a 3-iteration warm-up, the Learner's update on one captured batch runs `--calls` times
per side, the sides alternating (order alternating too), the Learner's credit pieces
swapped between the two versions; both step the same module, so its weights and credit
statistics drift alike. Prints and writes the min, lower quartile and median of the whole
update and of its credit pieces (`_run_credit`) per call, and the ratios of the medians
(new / old).

    .venv/bin/python benchmarks/credit_trim_ab.py --calls 100 --out benchmarks/results/credit_cost_trim
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import DEFAULT_CREDIT, command_line, write_json  # noqa: E402


def old_pieces(base: str, config):
    """`credit_pieces(config)` of `hca_rllib/connectors.py` at commit `base`."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{base}:hca_rllib/connectors.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="hca_old_connectors_")) / "old_connectors.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_connectors", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.credit_pieces(config)


def summary(times):
    return {"min_ms": 1000 * min(times), "p25_ms": 1000 * statistics.quantiles(times, n=4)[0],
            "median_ms": 1000 * statistics.median(times)}


def measure(calls: int, base: str):
    import ray
    import torch
    from ray.rllib.core.learner.training_data import TrainingData

    from tuned_examples.common import minatar_config

    torch.set_num_threads(1)
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=300 * 2**20, log_to_driver=False)
    algo = minatar_config("Breakout").training(**DEFAULT_CREDIT).debugging(seed=0).build_algo()
    try:
        for _ in range(3):
            algo.train()
        learner = algo.learner_group._learner
        captured = {}
        update = learner.update

        def grab(*args, **kwargs):
            captured["kwargs"] = kwargs
            return update(*args, **kwargs)

        learner.update = grab
        algo.train()
        del learner.update
        pieces = {"new": learner._credit_pieces, "old": old_pieces(base, learner.config)}
        run_credit = learner._run_credit
        credit_times = []

        def timed_credit(*args):
            start = time.perf_counter()
            try:
                return run_credit(*args)
            finally:
                credit_times.append(time.perf_counter() - start)

        learner._run_credit = timed_credit
        kwargs = captured["kwargs"]
        times = {name: {"update": [], "credit": []} for name in pieces}
        for i in range(calls):
            for name in (("old", "new") if i % 2 else ("new", "old")):
                learner._credit_pieces = pieces[name]
                episodes = copy.deepcopy(kwargs["training_data"].episodes)
                credit_times.clear()
                start = time.perf_counter()
                learner.update(**{**kwargs, "training_data": TrainingData(episodes=episodes)})
                times[name]["update"].append(time.perf_counter() - start)
                times[name]["credit"].append(sum(credit_times))
        learner._credit_pieces = pieces["new"]
    finally:
        algo.stop()
        ray.shutdown()
    out = {name: {part: summary(t) for part, t in parts.items()} for name, parts in times.items()}
    for part in ("update", "credit"):
        out[f"ratio_new_to_old_median_{part}"] = out["new"][part]["median_ms"] / out["old"][part]["median_ms"]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--base", default="6bad2ec", help="the commit whose credit pieces are 'old'")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = {"command": command_line(), "base": args.base, **measure(args.calls, args.base)}
    print(result)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "credit_trim_ab.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
