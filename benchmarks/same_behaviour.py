"""Does a change keep the training arithmetic? Two versions of the package, one machine, one run.

For each case (CartPole and MinAtar Breakout x `a2c` and the default credit mode, the
package's default settings, seed 0, one torch thread), each version trains in its own
process and records:

* the first update's batch: the advantages and the credit weights the loss saw;
* the weights after that update;
* the weights after `--iterations` updates (default 10).

The first two must agree within `--rtol` (default 1e-6, relative to the largest
magnitude); the last must be bitwise equal where the arithmetic is unchanged (reported
as equal or not, with the largest difference). Usage:

    python benchmarks/same_behaviour.py --base 7503d9a          # base commit vs this tree
    python benchmarks/same_behaviour.py --base HEAD --quick     # CartPole only, 3 iterations

The base is checked out with `git worktree` into a temporary directory; both versions
run on this checkout's virtual environment. Exit status 1 when a case differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CASES = [("CartPole-v1", "a2c"), ("CartPole-v1", "default"), ("minatar/Breakout", "a2c"),
         ("minatar/Breakout", "default")]
QUICK_CASES = CASES[:2]

# Runs inside the version under test (its tree first on sys.path): records one case.
RECORD = r'''
import json, sys
import numpy as np
import torch

env, credit, iterations, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
import ray
try:  # the retrying start, where the version has it
    from hca_rllib.runner import start_local_ray
except ImportError:
    start_local_ray = ray.init
start_local_ray(address="local", num_cpus=1, include_dashboard=False, object_store_memory=200 * 2**20,
                log_to_driver=False, logging_level="ERROR")
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
import hca_rllib
from hca_rllib import A2CConfig, HCAConfig
if not hca_rllib.__file__.startswith(sys.argv[5]):
    raise SystemExit(f"hca_rllib imported from {hca_rllib.__file__}, not from {sys.argv[5]}")
try:
    from hca_rllib.module import CREDIT_WEIGHTS
except ImportError:
    CREDIT_WEIGHTS = "credit_weights"

config = (A2CConfig() if credit == "a2c" else HCAConfig()).environment(env).debugging(seed=0)
algo = config.build_algo()
seen = []

def spy(learner):
    compute = learner.compute_loss_for_module

    def recorded(**kwargs):
        loss = compute(**kwargs)  # the lean path adds the credit columns to the batch here
        batch = kwargs["batch"]
        if not seen:
            mask = batch[Columns.LOSS_MASK].bool() if Columns.LOSS_MASK in batch else None
            row = {}
            for key in (Postprocessing.ADVANTAGES, CREDIT_WEIGHTS):
                if key in batch:
                    value = batch[key].detach()
                    row[key] = (value[mask] if mask is not None else value).double().numpy().tolist()
            seen.append(row)
        return loss

    learner.compute_loss_for_module = recorded
    return True

algo.learner_group.foreach_learner(spy)

def weights():  # the learner's module (the one the updates change)
    def read(learner):
        state = learner.module["default_policy"].state_dict()
        return {k: v.detach().cpu().numpy().copy() for k, v in sorted(state.items())}
    return [result.get() for result in algo.learner_group.foreach_learner(read)][0]

algo.train()
first = weights()
batch = seen[0]
for _ in range(iterations - 1):
    algo.train()
last = weights()
algo.stop()
np.savez(out, **{f"first/{k}": v for k, v in first.items()}, **{f"last/{k}": v for k, v in last.items()},
         **{f"batch/{k}": np.asarray(v) for k, v in batch.items()})
'''


def record(tree: Path, env: str, credit: str, iterations: int, out: Path) -> None:
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run([sys.executable, "-c", RECORD, env, credit, str(iterations), str(out), str(tree)],
                          cwd=tree, env=environment, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"same_behaviour: recording {env} {credit} in {tree} failed:\n{proc.stderr[-3000:]}")


def compare(base: dict, new: dict, rtol: float) -> dict:
    """Per group (batch, first, last): the largest difference relative to the largest
    magnitude, whether it is within `rtol`, and whether the arrays are bitwise equal."""
    report = {}
    for group in ("batch", "first", "last"):
        keys = sorted(k for k in base if k.startswith(group + "/"))
        if keys != sorted(k for k in new if k.startswith(group + "/")):
            report[group] = {"same_keys": False, "base": keys, "new": sorted(k for k in new if k.startswith(group))}
            continue
        worst, bitwise = 0.0, True
        for key in keys:
            a, b = np.asarray(base[key], np.float64), np.asarray(new[key], np.float64)
            if a.shape != b.shape:
                worst, bitwise = float("inf"), False
                break
            scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-12)
            worst = max(worst, float(np.max(np.abs(a - b))) / scale if a.size else 0.0)
            bitwise = bitwise and np.array_equal(base[key], new[key])
        report[group] = {"same_keys": True, "max_relative_difference": worst, "within_rtol": worst <= rtol,
                         "bitwise_equal": bitwise, "arrays": len(keys)}
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the git revision to compare this tree against")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rtol", type=float, default=1e-6)
    parser.add_argument("--quick", action="store_true", help="CartPole only, 3 iterations")
    parser.add_argument("--out", type=Path, default=None, help="write the comparison as JSON here")
    args = parser.parse_args(argv)
    if args.iterations < 1 or not args.rtol > 0:
        parser.error("--iterations must be >= 1 and --rtol > 0")
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{args.base}^{{commit}}"], cwd=REPO,
                            capture_output=True, text=True)
    if commit.returncode != 0:
        parser.error(f"--base {args.base!r} is not a revision of this repository")
    cases, iterations = (QUICK_CASES, 3) if args.quick else (CASES, args.iterations)
    results, failed = [], False
    with tempfile.TemporaryDirectory() as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), commit.stdout.strip()], cwd=REPO,
                       check=True, capture_output=True)
        try:
            for env, credit in cases:
                files = {}
                for name, tree in (("base", base_tree), ("new", REPO)):
                    files[name] = Path(scratch) / f"{name}.npz"
                    record(tree, env, credit, iterations, files[name])
                with np.load(files["base"]) as base, np.load(files["new"]) as new:
                    report = compare(dict(base), dict(new), args.rtol)
                ok = all(r.get("same_keys") for r in report.values()) and report["batch"]["within_rtol"] \
                    and report["first"]["within_rtol"]
                failed |= not ok
                results.append({"env": env, "credit": credit, "iterations": iterations, "ok": ok, **report})
                last = report["last"]
                print(f"{env:18s} {credit:8s} batch {report['batch'].get('max_relative_difference', 'keys differ')!s:>10.10s}  "
                      f"first update {report['first'].get('max_relative_difference', 'keys differ')!s:>10.10s}  "
                      f"after {iterations}: {'bitwise equal' if last.get('bitwise_equal') else 'differs'} "
                      f"({last.get('max_relative_difference', 'keys differ')!s:.10s})  {'ok' if ok else 'DIFFERS'}",
                      flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPO, capture_output=True)
    if args.out:
        args.out.write_text(json.dumps({"base": args.base, "rtol": args.rtol, "cases": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
