"""The reward outcome's policy gradient at the decision of a noisy delayed effect, against
A2C's and the exact one, seed by seed: how much noise it removes and how far its mean
is off.

Task: `HCA/DelayedEffect-v0` at length 30 with N(0, 2^2) noise on every chain step
(`credit_analysis.py` delayed_effect_L30_sd2). The first action pays +-1 thirty steps
later; the return carries 0.003 nats about it, every reward in between is noise. Method:
the reward outcome (`hindsight={"outcome": "reward", "window": 32}`, `trust=None`, the
package's classifier otherwise). After `--steps` env steps (the first action still
uncertain at 10k), over 8 more training iterations, on the learner's own batches, at
every decision (the chain's first state):

* `ratio`: the mean squared logit gradient of the reward outcome's weights against A2C's
  (`(Z - V)(onehot(a) - pi)` on the same batch);
* `mean`: its component toward the good action, with `se` its standard error over the
  run's decisions, beside the exact policy gradient's `p (1 - p) * 2 gamma^30`.

Per variant, over the seeds: the pooled mean with its standard error between seeds, the
spread of the per-seed means (sd between seeds) against the median within-run `se`, and
the seeds where the mean points away from the good action. A between-seed sd well above
the within-run `se` says the classifier's error persists over a run's iterations: a
bias within the run that changes from run to run. The variants change the classifier's
fit (passes, learning rate, width, input encoding, parameterisation), the steps before
the measurement (`at_30k`), and, at 30k, hold the policy at its 10k-step weights
(`policy_held_30k`): three times the pairs under the same policy.

    python benchmarks/decision_gradient.py --seeds 0 1 2 3 4 5 --out benchmarks/results/decision_gradient
    HCA_RLLIB_PATHS=rllib python benchmarks/decision_gradient.py --variants default --out runs/decision_rllib
    python benchmarks/decision_gradient.py --quick    # one seed, 2k steps, 1 iteration, a temp dir
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import RAY_INIT_KWARGS, code_version, command_line, write_json  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "decision_gradient"
NOISY_DELAY = dict(length=30, noise_std=2.0)
REWARD_OUTCOME = {"hindsight": {"outcome": "reward", "window": 32}, "trust": None}
ITERATIONS = 8


class Variant(NamedTuple):
    overrides: Dict[str, Any]  # the training overrides
    steps: int  # env steps before the measurement
    hold_policy_from: Optional[int] = None  # see `decision_gradients`


_H = REWARD_OUTCOME["hindsight"]
VARIANTS: Dict[str, Variant] = {
    "default": Variant(REWARD_OUTCOME, 10_000),
    "epochs_2": Variant({**REWARD_OUTCOME, "hindsight_epochs": 2}, 10_000),
    "epochs_8": Variant({**REWARD_OUTCOME, "hindsight_epochs": 8}, 10_000),
    "epochs_12": Variant({**REWARD_OUTCOME, "hindsight_epochs": 12}, 10_000),
    "lr_third": Variant({**REWARD_OUTCOME, "hindsight_lr": 7e-4}, 10_000),
    "lr_3x": Variant({**REWARD_OUTCOME, "hindsight_lr": 6.3e-3}, 10_000),
    "hiddens_256": Variant({**REWARD_OUTCOME, "hindsight": {**_H, "hiddens": [256, 256]}}, 10_000),
    "symlog": Variant({**REWARD_OUTCOME, "hindsight": {**_H, "return_encoding": "symlog"}}, 10_000),
    "independent": Variant({**REWARD_OUTCOME, "hindsight": {**_H, "parameterization": "independent"}}, 10_000),
    "at_30k": Variant(REWARD_OUTCOME, 30_000),
    # 30k steps of pairs under the policy held at its 10k-step weights: more data, the
    # same policy (what separates the two changes of `at_30k`).
    "policy_held_30k": Variant(REWARD_OUTCOME, 30_000, hold_policy_from=10_000),
}


def decision_gradients(seed: int, steps: int = 10_000, overrides: Dict[str, Any] = REWARD_OUTCOME,
                       iterations: int = ITERATIONS, hold_policy_from: Optional[int] = None):
    """After `steps` env steps of the reward outcome (`overrides`) on the noisy delay, over
    `iterations` more iterations, one row per decision: the reward outcome's and A2C's
    squared logit gradients, their components toward the good action, and the exact
    policy gradient's (four-plus-one float tensors). `hold_policy_from`: from that many
    steps on, the policy (its torso and head) is put back to its weights there after
    every iteration, so the classifier and the value keep learning under one policy (the
    env runners sample with it up to one update). Needs a running Ray."""
    import torch
    from ray.rllib.core.columns import Columns
    from ray.rllib.evaluation.postprocessing import Postprocessing

    from hca_rllib import HCAConfig, credit
    from hca_rllib.module import CREDIT_WEIGHTS

    config = (HCAConfig().training(credit="expected_hca", **overrides)
              .environment("HCA/DelayedEffect-v0", env_config=NOISY_DELAY).debugging(seed=seed))
    algo = config.build_algo()
    learner = algo.learner_group._learner
    module = learner.module["default_policy"]
    policy = [*module.pi_torso.parameters(), *module.pi.parameters()]
    held: List[torch.Tensor] = []

    def hold_policy(sampled: int) -> None:
        if hold_policy_from is None or sampled < hold_policy_from:
            return
        if not held:
            held.extend(p.detach().clone() for p in policy)
        with torch.no_grad():
            for p, h in zip(policy, held):
                p.copy_(h)

    try:
        while True:
            sampled = algo.train()["num_env_steps_sampled_lifetime"]
            hold_policy(sampled)
            if sampled >= steps:
                break
        seen = []
        compute_loss = learner.compute_loss_for_module

        def spy(**kwargs):
            loss = compute_loss(**kwargs)  # the lean path writes the credit into the batch here
            batch, fwd_out = kwargs["batch"], kwargs["fwd_out"]
            decision = batch[Columns.OBS][:, 0] > 0.5
            pi = torch.softmax(fwd_out[Columns.ACTION_DIST_INPUTS].detach(), -1)[decision]
            ours = credit.logit_gradient(batch[CREDIT_WEIGHTS][decision], pi)
            gae = (batch[Postprocessing.VALUE_TARGETS] - fwd_out[Columns.VF_PREDS].detach())[decision]
            a2c = credit.logit_gradient(credit.one_hot_weights(gae, batch[Columns.ACTIONS][decision], 2), pi)
            exact = pi[:, 0] * (1 - pi[:, 0]) * 2 * config.gamma ** NOISY_DELAY["length"]
            seen.append(((ours ** 2).sum(-1), (a2c ** 2).sum(-1), ours[:, 0], a2c[:, 0], exact))
            return loss

        learner.compute_loss_for_module = spy
        for _ in range(iterations):
            hold_policy(algo.train()["num_env_steps_sampled_lifetime"])
    finally:
        algo.stop()
    return [torch.cat(parts) for parts in zip(*seen)]


def seed_row(seed: int, variant: Variant, iterations: int) -> Dict[str, float]:
    ours, a2c, toward, a2c_toward, exact = decision_gradients(seed, variant.steps, variant.overrides, iterations,
                                                              variant.hold_policy_from)
    return {"seed": seed, "decisions": len(toward), "ratio": float(ours.mean() / a2c.mean()),
            "mean": float(toward.mean()), "se": float(toward.std() / len(toward) ** 0.5),
            "a2c_mean": float(a2c_toward.mean()), "exact": float(exact.mean())}


def summarise(rows: List[Dict[str, float]]) -> Dict[str, float]:
    means = [r["mean"] for r in rows]
    between = statistics.stdev(means) if len(means) > 1 else None  # one seed: no spread
    return {"seeds": len(rows), "pooled_mean": statistics.mean(means),
            "pooled_se": None if between is None else between / len(means) ** 0.5,
            "exact": statistics.mean(r["exact"] for r in rows), "between_seed_sd": between, "within_run_se": statistics.median(r["se"] for r in rows),
            "wrong_sign": sum(m < 0 for m in means),
            "ratio_min": min(r["ratio"] for r in rows), "ratio_max": max(r["ratio"] for r in rows)}


def render(summary: Dict[str, Any]) -> str:
    lines = [
        "# The reward outcome's gradient at the decision of a noisy delay",
        "",
        f"Produced by: `{summary['command']}` (code {summary['code']}); method: the docstring of "
        "`benchmarks/decision_gradient.py`. Per variant over the seeds: the mean toward the good "
        "action pooled over the seeds (+- its standard error between seeds) against the exact "
        "policy gradient's; the sd of the per-seed means against the median within-run standard "
        "error; the seeds whose mean points away from the good action; the range of the squared "
        "gradient's ratio to A2C's.",
        "",
        "| variant | steps | seeds | mean toward the good action | exact | sd between seeds | "
        "within-run se | wrong sign | squared gradient / A2C's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def num(x) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    for name, v in summary["variants"].items():
        s = v["summary"]
        lines.append(
            f"| `{name}` | {v['steps']:,} | {s['seeds']} | {s['pooled_mean']:+.3f} +- {num(s['pooled_se'])} | "
            f"{s['exact']:+.3f} | {num(s['between_seed_sd'])} | {s['within_run_se']:.3f} | {s['wrong_sign']} | "
            f"{s['ratio_min']:.3f}-{s['ratio_max']:.3f} |")
    lines += ["", "Per seed (mean toward the good action, its within-run se; A2C's mean):", ""]
    for name, v in summary["variants"].items():
        cells = ", ".join(f"{r['seed']}: {r['mean']:+.2f} ({r['se']:.2f}; {r['a2c_mean']:+.2f})" for r in v["rows"])
        lines.append(f"- `{name}`: {cells}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="one seed, 2k steps, 1 iteration, a temp dir")
    args = parser.parse_args(argv)
    import ray
    import torch

    from hca_rllib.runner import start_local_ray

    torch.set_num_threads(1)  # seeded runs repeat exactly only with one intra-op thread
    variants = {name: VARIANTS[name] for name in args.variants}
    seeds, iterations = args.seeds, ITERATIONS
    if args.quick:
        variants = {"default": Variant(REWARD_OUTCOME, 2_000)}
        seeds, iterations = [0], 1
    out = args.out or (Path(tempfile.mkdtemp()) if args.quick else DEFAULT_OUT)
    out.mkdir(parents=True, exist_ok=True)
    start_local_ray(**RAY_INIT_KWARGS)
    try:
        summary: Dict[str, Any] = {"command": command_line(), "code": code_version(), "variants": {}}
        for name, variant in variants.items():
            rows = []
            for seed in seeds:
                rows.append(seed_row(seed, variant, iterations))
                print(json.dumps({"variant": name, **rows[-1]}), flush=True)
            summary["variants"][name] = {"steps": variant.steps, "overrides": variant.overrides, "rows": rows,
                                         "summary": summarise(rows)}
            write_json(out / "summary.json", summary)  # each finished variant is kept
            (out / "summary.md").write_text(render(summary))
    finally:
        ray.shutdown()
    print(render(summary))


if __name__ == "__main__":
    main()
