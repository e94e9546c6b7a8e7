"""`hca-rllib probe --env ID`: how much the action tells about an outcome, before training.

Arumugam et al. (2021) locate the difficulty of credit assignment in *information
sparsity*: where `I(A; Z | S)`, what the action tells about the outcome `Z`, is small, no
credit estimator has anything to work with. The probe measures it on a task in minutes,
with the classifier training would use, and reads the result against the benchmarks.

1. Rollouts under a stated policy (`target`, `rollouts`): uniform random (default), or a
   trained policy (a checkpoint's module, or any `HCATorchRLModule` passed to `probe()`),
   actions sampled from it. Only complete episodes are kept (the ones still running when
   the step budget runs out are dropped); an environment's time limit ends an episode
   like a terminal state. Frames are stacked as in training (the family's default, zeros
   before the first frame). The policy is only run forward, never trained.
2. Returns `Z_t` over a horizon of `K` steps (`credit.horizon_returns`: discounted with
   `gamma`, cut at the episode's end, nothing bootstrapped since there is no value
   function), for each `K` in `horizons` (`None`: to the episode's end).
3. The episodes are split, seeded, into a fit part and a held-out part
   (`held_out_fraction`); a fifth of the fit episodes is kept aside for early stopping.
   For each horizon a fresh hindsight classifier is fitted by cross-entropy on the fit
   part (`classifier`): the package's own `HCATorchRLModule` head (`policy_relative`,
   `q = softmax(log pi + f(s, Z))`, with its return encoder's running statistics, its
   own torso of the training network's shape, `hindsight.torso="separate"`).
4. On the held-out episodes (`information`): pointwise information `i_t = log
   q(a_t|s_t,Z_t) - log pi(a_t|s_t)` (`credit.pointwise_information`); its mean is a
   variational lower bound on `I(A; Z | S)` in nats per decision, with a 95% bootstrap CI
   over episodes (`stats.cluster_bootstrap_mean_ci`); where it lives
   (`credit.information_concentration`, the time steps and the repeated states holding
   most of it).
5. A reading (`reading`): the information level and concentration, and the benchmark
   rows measured by this same probe that lie nearest in information, with their credit
   mode minus A2C (benchmarks/probe.py, `benchmarks/results/probe/summary.json`).

The reward outcome (`outcome="reward"`, `rewards`, `outcomes`) replaces steps 2-5: one
classifier `h(a | s_t, u_{t+k}, k)` pooled over the lags `k < window`, fitted on every
(decision, reward event) pair with `r_{t+k} != 0` in one episode (zero rewards add no
weight to a per-reward credit estimator), and read per pair, per `k`, reward-weighted and
per decision, beside the `window`-step return's information on the same held-out
decisions from a classifier of the same class; CIs at 95% and at the Bonferroni level over
the two outcomes.

`probe()` is the Python entry (notebooks, Tune); `write_probe_report` (`report`) writes
`probe.md`, `probe.json` and the plots. The settings are one `ProbeSettings`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, Optional

import numpy as np

from hca_rllib.probe.information import episode_end_information
from hca_rllib.probe.reading import BENCHMARK_SUMMARY, information_level, load_benchmark_rows, reading, reward_reading
from hca_rllib.probe.report import write_probe_report
from hca_rllib.probe.returns import BOUND as RETURN_BOUND, return_outcome
from hca_rllib.probe.rewards import BOUND as REWARD_BOUND, reward_outcome
from hca_rllib.probe.rollouts import collect_rollouts, policy_record, split_episodes, split_rows
from hca_rllib.probe.settings import (DEFAULT_EPISODES, DEFAULT_HORIZONS, DEFAULT_MAX_STEPS, DEFAULT_WINDOW, GAMMA,
                                      HELD_OUT_FRACTION, MIN_EPISODES, OUTCOMES, THRESHOLD, ProbeError, ProbeSettings,
                                      parse_horizons)
from hca_rllib.probe.target import ProbeTarget, collect, resolve_target

__all__ = ["probe", "ProbeSettings", "ProbeError", "collect_rollouts", "split_episodes", "parse_horizons",
           "reading", "information_level", "episode_end_information", "write_probe_report", "DEFAULT_HORIZONS",
           "DEFAULT_EPISODES", "DEFAULT_MAX_STEPS", "DEFAULT_WINDOW", "GAMMA", "HELD_OUT_FRACTION", "MIN_EPISODES",
           "OUTCOMES", "THRESHOLD"]


def probe(env: Optional[str], settings: Optional[ProbeSettings] = None, *, env_config: Optional[Dict[str, Any]] = None,
          checkpoint=None, module=None, frame_stack: Optional[int] = None,
          model_config: Optional[Dict[str, Any]] = None, benchmark_summary=BENCHMARK_SUMMARY,
          progress: Optional[Callable[[str], None]] = None, keep_data: bool = False, torch_threads: int = 1,
          **overrides: Any) -> Dict[str, Any]:
    """Measure the information of `env`'s actions about an outcome under a stated policy
    (see the module docstring).

    `env`: any id `resolve_env` accepts. The policy: uniform random (default), the
    policy of `checkpoint` (a checkpoint or run directory; its env is used if `env` is
    None), or `module` (an `HCATorchRLModule`, e.g. `hca_rllib.training_module(algo)`),
    run forward only. `settings`: a `ProbeSettings` (episodes, horizons, outcome, ...);
    keyword `overrides` replace its fields (`probe(env, episodes=300, horizons=[1, None])`;
    a name that is no field: TypeError).
    Returns a dict (JSON-ready): the information per horizon with its CI, where it lives
    at the peak horizon, the fit records, the split, and the `reading`. `keep_data=True`
    adds the rollouts and held-out pointwise information as numpy arrays under `"data"`.
    `torch_threads`: torch's threads while the probe runs (1, as the training runner's
    default: a small network is fastest on one; 0: leave torch's setting)."""
    import torch

    settings = dataclasses.replace(settings or ProbeSettings(), **overrides).validate()
    threads = torch.get_num_threads()
    if torch_threads:
        torch.set_num_threads(int(torch_threads))
    try:
        target = resolve_target(env, env_config=env_config, checkpoint=checkpoint, module=module,
                                frame_stack=frame_stack, model_config=model_config)
        return run_probe(target, settings, benchmark_summary=benchmark_summary, progress=progress,
                         keep_data=keep_data)
    finally:
        torch.set_num_threads(threads)


def describe_run(target: ProbeTarget, settings: ProbeSettings, data: Dict[str, Any],
                 split: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """The result's description of what ran: env, policy, settings, data and split."""
    ep = data["episode_ids"]
    return {
        "env": target.env,
        "env_config": dict(target.env_config or {}),
        "policy": target.policy.description,
        "gamma": settings.gamma,
        "seed": settings.seed,
        "threshold": settings.threshold,
        "frame_stack": target.info.frame_stack,
        "episodes": int(len(np.unique(ep))),
        "decisions": int(len(ep)),
        "steps_taken": int(data["steps"]),
        "mean_episode_length": float(len(ep) / len(np.unique(ep))),
        "mean_episode_return": float(np.mean(data["episode_returns"])),
        "split": {"fit_episodes": split["fit_ids"].tolist(), "validation_episodes": split["validation_ids"].tolist(),
                  "held_out_episodes": split["held_out_ids"].tolist(),
                  "held_out_fraction": settings.held_out_fraction, "held_out_decisions": int(len(split["held_out"]))},
    }


def run_probe(target: ProbeTarget, settings: ProbeSettings, *, benchmark_summary=BENCHMARK_SUMMARY,
              progress: Optional[Callable[[str], None]] = None, keep_data: bool = False) -> Dict[str, Any]:
    """Collect, split, measure the outcome and read it: `probe()` after its checks. The
    result: what ran (`describe_run`), the outcome's own figures, the policy's record, the
    bound's statement, the seconds, and the reading."""
    say = progress or (lambda message: None)
    started = time.time()
    data = collect(target, settings, say)
    collect_s = time.time() - started
    split = split_rows(data["episode_ids"], settings.held_out_fraction, settings.seed)
    say(f"{len(set(data['episode_ids'].tolist())):,} episodes, {len(data['episode_ids']):,} decisions: fit "
        f"{len(split['fit_ids'])}, validation {len(split['validation_ids'])}, held out "
        f"{len(split['held_out_ids'])} episodes")
    if settings.outcome == "reward":
        figures, pointwise = reward_outcome(target, settings, data, split, say)
        bound = REWARD_BOUND
    else:
        figures, pointwise = return_outcome(target, settings, data, split, say)
        bound = RETURN_BOUND
    result = {**describe_run(target, settings, data, split), **figures, "policy_record": policy_record(data),
              "bound": bound, "seconds": {"collect": collect_s, "total": None}}
    if settings.outcome == "reward":
        result["reading"] = reward_reading(result)
    else:
        result["reading"] = reading(result, load_benchmark_rows(benchmark_summary))
    result["seconds"]["total"] = time.time() - started
    if keep_data:
        result["data"] = {**data, "held_out_rows": split["held_out"], "fit_rows": split["fit"],
                          "validation_rows": split["validation"], "pointwise": pointwise}
    return result
