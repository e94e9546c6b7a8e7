"""What `trust="bias"` sees: the size and the direction of the estimator's bias against
its hindsight credit, along each run.

`trust="bias"` accumulates, over the episode chunks of recent batches, `T_D` and `T_H`:
unbiased estimates (up to the same factor) of `||E G_D||^2` and `||E G_H||^2`, the squared
norms of the mean head gradients of `D = W_sampled - W` (A2C's form of the in-window credit
less the estimator's) and of `H` (the estimator's hindsight credit); method note, section
2.4. This script runs a benchmark with two more statistics logged at every update, from the
same accumulated sums:

* `bias_ratio` `rho = T_D / T_H`: the bias's squared norm against the credit's (0 with the
  exact posterior, where `E G_D = 0`);
* `bias_cosine` `T_DH / sqrt(T_D T_H)`, `T_DH` the same sum of cross products between the
  units' `G_D` and `G_H`: the cosine between the two means (noisy: it can leave [-1, 1]).

`rho` near 1 with the cosine near -1 says `E G_D = -E G_H`, so the sampled in-window
credit `S = D + H` has a mean small against the estimator's: the classifier's credit has a
mean of its own that A2C's form of the same rewards does not show.

Run (the benchmark's own arguments after its name; the trust itself is unchanged, so the
runs are the benchmark's runs, bit for bit):

    python benchmarks/bias_anatomy.py credit_analysis --methods reward_w64_across_bias --seeds 5 6 --out runs/anatomy_ka
    python benchmarks/bias_anatomy.py learning --tasks minatar_Breakout ... --seeds 5 6 --methods reward_w64_across_bias --out runs/anatomy_minatar
    python benchmarks/bias_anatomy.py --read runs/anatomy_ka runs/anatomy_minatar --method reward_w64_across_bias
"""

from __future__ import annotations

import argparse
import math
import runpy
import sys
from pathlib import Path
from typing import List

HERE = Path(__file__).resolve().parent
KEYS = {"bias_ratio": "credit/bias_ratio", "bias_cosine": "credit/bias_cosine"}


def instrument() -> None:
    """Log `bias_ratio` and `bias_cosine` under `trust="bias"` (module docstring)."""
    import torch

    from hca_rllib import connectors, credit, runner

    pieces = connectors.ComputeCreditWeights
    evidence, trust = pieces._bias_evidence, pieces._trust
    gradients: List[torch.Tensor] = []
    head_gradients = credit.head_gradients

    def recorded_head_gradients(*args, **kwargs):
        out = head_gradients(*args, **kwargs)
        gradients.append(out)
        return out

    def bias_evidence(self, s):
        gradients.clear()
        out = evidence(self, s)
        g_d, g_h = gradients[-2], gradients[-1]
        cross = g_d @ g_h.T
        self.cross_evidence = (credit.EVIDENCE_DECAY * getattr(self, "cross_evidence", 0.0)
                               + float(cross.sum() - torch.diagonal(cross).sum()))
        return out

    def logged_trust(self, module, s, diagnostics):
        out = trust(self, module, s, diagnostics)
        if self.config.trust == "bias":
            accumulated = module.trust_evidence[0].to(torch.float64)
            t_d, t_h = float(accumulated[0]), float(accumulated[2])
            cross = getattr(self, "cross_evidence", 0.0)
            diagnostics[KEYS["bias_ratio"]] = torch.tensor(t_d / t_h if t_h else math.nan)
            diagnostics[KEYS["bias_cosine"]] = torch.tensor(
                cross / math.sqrt(t_d * t_h) if t_d > 0 and t_h > 0 else math.nan)
        return out

    credit.head_gradients = recorded_head_gradients
    pieces._bias_evidence, pieces._trust = bias_evidence, logged_trust
    for name, key in KEYS.items():
        runner.RESULT_KEYS[name] = ("learners", "default_policy", key)


def score(data) -> float:
    """The benchmark's score: pi(optimal first action) on the known-answer tasks, else the final return."""
    return data["final_score"] if data.get("p_good_action_final") is None else data["p_good_action_final"]


def read(directories: List[str], method: str) -> str:
    """A markdown table: per run, the medians of `rho` and the cosine over its second half
    and their last values, the trust's mean over the run, and `z_D`, `z_H` at the end."""
    import numpy as np

    from common import load_raw

    lines = ["| task | seed | score | trust (mean) | rho: median of the 2nd half, end | "
             "cosine: median of the 2nd half, end | z_D, z_H at the end |",
             "|---|---|---|---|---|---|---|"]
    for directory in directories:
        for path in sorted(Path(directory).glob(f"*/{method}_seed*.json")):
            data = load_raw(path)
            results = data["results"]
            column = lambda key: np.array([np.nan if r.get(key) is None else r[key] for r in results], float)  # noqa: E731
            rho, cos, trust = column("bias_ratio"), column("bias_cosine"), column("trust")
            late = slice(len(results) // 2, len(results))
            lines.append(
                f"| {data['task']} | {data['seed']} | {score(data):.2f} | {np.nanmean(trust):.2f} | "
                f"{np.nanmedian(rho[late]):.2f}, {rho[-1]:.2f} | {np.nanmedian(cos[late]):.2f}, {cos[-1]:.2f} "
                f"| {results[-1]['trust_z']:.1f}, {results[-1]['trust_signal_z']:.1f} |")
    return "\n".join(lines)


def main(argv: List[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--read":
        parser = argparse.ArgumentParser(description="read the runs of an instrumented benchmark")
        parser.add_argument("--read", nargs="+", required=True)
        parser.add_argument("--method", default="reward_w64_across_bias")
        args = parser.parse_args(argv)
        print(read(args.read, args.method))
        return
    if not argv or argv[0] not in ("credit_analysis", "learning", "credit_horizon"):
        raise SystemExit("usage: bias_anatomy.py {credit_analysis,learning,credit_horizon} <its arguments> "
                         "| --read DIR... [--method NAME]")
    instrument()
    script = HERE / f"{argv[0]}.py"
    sys.argv = [str(script)] + argv[1:]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    main()
