"""`hca-rllib probe --env ID`: how much the action tells about the return, before training.

Arumugam et al. (2021) locate the difficulty of credit assignment in *information
sparsity*: where `I(A; Z | S)`, what the action tells about the return, is small, no
credit estimator has anything to work with. The probe measures it on a task in minutes,
with the classifier training would use, and reads the result against the benchmarks.

1. Rollouts under a stated policy: uniform random (default), or a trained policy (a
   checkpoint's module, or any `HCATorchRLModule` passed to `probe()`), actions sampled
   from it. Only complete episodes are kept (the ones still running when the step budget
   runs out are dropped); an environment's time limit ends an episode like a terminal
   state. Frames are stacked as in training (the family's default, zeros before the
   first frame). The policy is only run forward, never trained.
2. Returns `Z_t` over a horizon of `K` steps (`credit.horizon_returns`: discounted with
   `gamma`, cut at the episode's end, nothing bootstrapped since there is no value
   function), for each `K` in `horizons` (`None`: to the episode's end).
3. The episodes are split, seeded, into a fit part and a held-out part
   (`held_out_fraction`); a fifth of the fit episodes is kept aside for early stopping.
   For each horizon a fresh hindsight classifier is fitted by cross-entropy on the fit
   part: the package's own `HCATorchRLModule` head (`policy_relative`,
   `q = softmax(log pi + f(s, Z))`, with its return encoder's running statistics, its
   own torso of the training network's shape, `hindsight.torso="separate"`).
4. On the held-out episodes: pointwise information `i_t = log q(a_t|s_t,Z_t) -
   log pi(a_t|s_t)` (`credit.pointwise_information`); its mean is a variational lower
   bound on `I(A; Z | S)` in nats per decision, with a 95% bootstrap CI over episodes
   (`stats.cluster_bootstrap_mean_ci`); where it lives (`credit.information_concentration`,
   the time steps and the repeated states holding most of it).
5. A reading (`reading`): the information level and concentration, and the benchmark
   rows measured by this same probe that lie nearest in information, with their credit
   mode minus A2C (benchmarks/probe.py, `benchmarks/results/probe/summary.json`).

`probe()` is the Python entry (notebooks, Tune); `write_probe_report` writes
`probe.md`, `probe.json` and the plots.
"""

from __future__ import annotations

import copy
import json
import math
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from hca_rllib import credit, stats

__all__ = ["probe", "collect_rollouts", "split_episodes", "parse_horizons", "reading",
           "write_probe_report", "DEFAULT_HORIZONS"]

DEFAULT_HORIZONS = (1, 4, 16, 64, None)
DEFAULT_EPISODES = 1000
DEFAULT_MAX_STEPS = 50_000
HELD_OUT_FRACTION = 0.3
VALIDATION_FRACTION = 0.2  # of the fit episodes: early stopping, never the held-out part
THRESHOLD = 0.05  # nats: a decision "holds information" above it
GAMMA = 0.99
MIN_EPISODES = 10
# The classifier fit: Adam, minibatches, early stopping on the validation episodes.
FIT = {"lr": 1e-3, "batch_size": 256, "max_epochs": 40, "patience": 4, "max_updates": 4000}
# Information levels, nats per decision (upper edges), for the reading.
LEVELS = ((1e-3, "very sparse"), (1e-2, "sparse"), (1e-1, "moderate"), (math.inf, "dense"))
BENCHMARK_SUMMARY = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "probe" / "summary.json"
NEAREST_ROWS = 4


class ProbeError(ValueError):
    """Bad input to the probe: one line, exit status 2 from the CLI."""


def parse_horizons(text: str) -> List[Optional[int]]:
    """`"1,4,16,64,end"` -> `[1, 4, 16, 64, None]` (sorted, unique; `end`: episode end)."""
    out: List[Optional[int]] = []
    for part in str(text).split(","):
        part = part.strip().lower()
        if part in ("end", "episode", "inf"):
            value: Optional[int] = None
        else:
            try:
                value = int(part)
            except ValueError:
                raise ProbeError(f"horizons: {part!r} is neither an integer >= 1 nor 'end'") from None
            if value < 1:
                raise ProbeError(f"horizons: {value} must be >= 1 (or 'end')")
        if value not in out:
            out.append(value)
    if not out:
        raise ProbeError("horizons: none given")
    return sorted(out, key=lambda k: math.inf if k is None else k)


def horizon_name(horizon: Optional[int]) -> str:
    return "end" if horizon is None else str(horizon)


# ------------------------------------------------------------------------ policies


class _UniformPolicy:
    description = "uniform random"

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def log_probs(self, obs: np.ndarray) -> np.ndarray:
        return np.full((len(obs), self.num_actions), -math.log(self.num_actions))


class _ModulePolicy:
    """A trained policy: the module's logits, forward only, in eval mode, no gradient."""

    def __init__(self, module, description: str):
        self.module = module
        self.description = description
        self.num_actions = int(module.action_space.n)

    def log_probs(self, obs: np.ndarray) -> np.ndarray:
        import torch

        was_training = self.module.training
        self.module.eval()
        try:
            with torch.no_grad():
                _, logits = self.module.policy_outputs(torch.as_tensor(obs))
                out = torch.log_softmax(logits.double(), dim=-1).numpy()
        finally:
            self.module.train(was_training)
        return out


# ------------------------------------------------------------------------ rollouts


def collect_rollouts(env_id: str, policy, *, env_config: Optional[Dict[str, Any]] = None,
                     episodes: int = DEFAULT_EPISODES, max_steps: int = DEFAULT_MAX_STEPS,
                     num_envs: int = 8, seed: int = 0, frame_stack: int = 1,
                     progress: Optional[Callable[[int, int], None]] = None) -> Dict[str, Any]:
    """Complete episodes of `policy` on `num_envs` copies of the env, until `episodes`
    are complete or `max_steps` steps are taken. Returns numpy arrays, one row per
    decision, episodes contiguous: `obs` (stacked as the module sees them), `actions`,
    `rewards`, `episode_ids`, `time_steps`, `log_pi` (all actions), plus `steps` (all
    steps taken, dropped episodes included)."""
    import gymnasium as gym

    envs = [gym.make(env_id, **dict(env_config or {})) for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    stack = int(frame_stack)

    def stacked(history: List[np.ndarray]) -> np.ndarray:
        if stack == 1:
            return history[-1]
        frames = history[-stack:]
        pad = [np.zeros_like(frames[0])] * (stack - len(frames))
        return np.concatenate(pad + frames, axis=-1)

    histories, buffers = [], []
    for i, env in enumerate(envs):
        obs, _ = env.reset(seed=seed * 10_007 + i)
        env.action_space.seed(seed * 10_007 + i)
        histories.append([obs])
        buffers.append([])
    done: List[List[tuple]] = []
    steps = 0
    try:
        while len(done) < episodes and steps < max_steps:
            obs_batch = np.stack([stacked(h) for h in histories])
            log_pi = policy.log_probs(obs_batch)
            probs = np.exp(log_pi - log_pi.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            cumulative = probs.cumsum(-1)
            actions = (rng.random((len(envs), 1)) > cumulative).sum(-1).clip(0, probs.shape[-1] - 1)
            for i, env in enumerate(envs):
                action = int(actions[i])
                next_obs, reward, terminated, truncated, _ = env.step(action)
                buffers[i].append((obs_batch[i], action, float(reward), log_pi[i]))
                steps += 1
                if terminated or truncated:
                    done.append(buffers[i])
                    buffers[i] = []
                    next_obs, _ = env.reset()
                    histories[i] = [next_obs]
                else:
                    histories[i].append(next_obs)
                    del histories[i][:-stack]
            if progress is not None:
                progress(len(done), steps)
    finally:
        for env in envs:
            env.close()
    done = done[:episodes]
    if len(done) < MIN_EPISODES:
        raise ProbeError(f"only {len(done)} complete episode(s) of {env_id!r} in {steps:,} steps; the probe "
                         f"needs at least {MIN_EPISODES}: raise --max-steps")
    rows = [row for episode in done for row in episode]
    lengths = [len(episode) for episode in done]
    return {
        "obs": np.stack([r[0] for r in rows]),
        "actions": np.array([r[1] for r in rows], dtype=np.int64),
        "rewards": np.array([r[2] for r in rows], dtype=np.float64),
        "log_pi": np.stack([r[3] for r in rows]).astype(np.float64),
        "episode_ids": np.repeat(np.arange(len(done)), lengths),
        "time_steps": np.concatenate([np.arange(n) for n in lengths]),
        "episode_returns": [float(sum(r[2] for r in episode)) for episode in done],
        "steps": steps,
    }


def split_episodes(episode_ids: np.ndarray, held_out_fraction: float, seed: int):
    """`(fit, validation, held_out)` episode ids, disjoint, seeded: `held_out_fraction`
    of the episodes held out; of the rest, `VALIDATION_FRACTION` for early stopping."""
    if not 0.0 < held_out_fraction < 1.0:
        raise ProbeError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    ids = np.unique(episode_ids)
    order = np.random.default_rng(seed + 1).permutation(ids)
    n_held = max(1, int(round(held_out_fraction * len(ids))))
    held, rest = order[:n_held], order[n_held:]
    n_val = max(1, int(round(VALIDATION_FRACTION * len(rest))))
    val, fit = rest[:n_val], rest[n_val:]
    if len(fit) == 0:
        raise ProbeError(f"{len(ids)} episodes leave none to fit the classifier on")
    return np.sort(fit), np.sort(val), np.sort(held)


# ---------------------------------------------------------------------- classifier


def build_classifier(observation_space, action_space, model_config: Optional[Dict[str, Any]] = None):
    """A fresh `HCATorchRLModule` whose hindsight head (with its own torso, of the training
    network's shape, and the return encoder) is the probe's classifier."""
    from hca_rllib.module import HCATorchRLModule

    config = dict(model_config or {})
    config["hindsight"] = {**(config.get("hindsight") or {}), "torso": "separate",
                           "parameterization": "policy_relative", "return_input": "return",
                           "balanced": False}
    return HCATorchRLModule(observation_space=observation_space, action_space=action_space,
                            inference_only=False, model_config=config)


def _classifier_parameters(module):
    return list(module.hindsight_torso.parameters()) + list(module.hindsight.parameters())


def _log_q_taken(module, obs, log_pi, returns, actions, batch_size=2048):
    import torch

    out = []
    with torch.no_grad():
        for start in range(0, len(actions), batch_size):
            sl = slice(start, start + batch_size)
            logits = module.hindsight_logits(torch.as_tensor(obs[sl]), None, torch.as_tensor(log_pi[sl]).float(),
                                             torch.as_tensor(returns[sl]))
            log_q = torch.log_softmax(logits.double(), -1)
            out.append(log_q.gather(-1, torch.as_tensor(actions[sl]).unsqueeze(-1)).squeeze(-1).numpy())
    return np.concatenate(out) if out else np.zeros(0)


def fit_classifier(module, data: Dict[str, Any], returns: np.ndarray, fit_rows: np.ndarray,
                   val_rows: np.ndarray, seed: int = 0, fit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Fit `module`'s hindsight classifier on the `fit_rows` by cross-entropy, with early
    stopping on the validation rows' mean information; the best state is kept. Returns the
    fit's record (epochs, updates, validation information)."""
    import torch

    fit = {**FIT, **(fit or {})}
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 2)
    obs, log_pi, actions = data["obs"], data["log_pi"], data["actions"]
    module.update_return_statistics(torch.as_tensor(returns[fit_rows]))
    parameters = _classifier_parameters(module)
    optimizer = torch.optim.Adam(parameters, lr=fit["lr"])
    taken_pi_val = log_pi[val_rows, actions[val_rows]]

    def validation_information() -> float:
        module.eval()
        log_q = _log_q_taken(module, obs[val_rows], log_pi[val_rows], returns[val_rows], actions[val_rows])
        return float(np.mean(credit.pointwise_information(log_q, taken_pi_val)))

    best, best_state, since, updates, epochs = validation_information(), None, 0, 0, 0
    improved = False  # False: no epoch beat the initial state (q = pi), which is kept
    best_state = copy.deepcopy([p.detach().clone() for p in parameters])
    history = [best]
    while epochs < fit["max_epochs"] and updates < fit["max_updates"] and since < fit["patience"]:
        module.train()
        order = rng.permutation(fit_rows)
        for start in range(0, len(order), fit["batch_size"]):
            rows = order[start:start + fit["batch_size"]]
            logits = module.hindsight_logits(torch.as_tensor(obs[rows]), None,
                                             torch.as_tensor(log_pi[rows]).float(),
                                             torch.as_tensor(returns[rows]))
            loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(actions[rows]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            if updates >= fit["max_updates"]:
                break
        epochs += 1
        value = validation_information()
        history.append(value)
        if value > best + 1e-5:
            best, since, improved = value, 0, True
            best_state = [p.detach().clone() for p in parameters]
        else:
            since += 1
    with torch.no_grad():
        for p, saved in zip(parameters, best_state):
            p.copy_(saved)
    module.eval()
    return {"epochs": epochs, "updates": updates, "validation_information": best, "improved": improved,
            "validation_history": history}


# ------------------------------------------------------------------------ analysis


def _describe_state(obs: np.ndarray) -> str:
    flat = obs.ravel()
    if flat.size <= 16:
        return "[" + ", ".join(f"{v:g}" for v in flat.tolist()) + "]"
    return f"obs #{zlib.crc32(obs.tobytes()) % 10**8:08d}"


def _where(pointwise: np.ndarray, data: Dict[str, Any], rows: np.ndarray, top: int = 5) -> Dict[str, Any]:
    """The time steps and (repeated) states that hold most of the held-out information."""
    episodes, t = data["episode_ids"][rows], data["time_steps"][rows]
    positive_total = float(np.clip(pointwise, 0, None).sum())
    out: Dict[str, Any] = {"time_steps": [], "states": [], "distinct_states": None}

    def group_rows(keys: np.ndarray, describe) -> List[Dict[str, Any]]:
        unique, index = np.unique(keys, return_inverse=True)
        sums = np.bincount(index, weights=pointwise)
        order = np.argsort(-sums)[:top]
        items = []
        for g in order:
            members = index == g
            mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise[members], episodes[members], reps=2000)
            items.append({"key": describe(unique[g], members), "decisions": int(members.sum()),
                          "mean": mean, "ci": [low, high],
                          "share_of_information": (float(sums[g]) / positive_total if positive_total > 0 else None)})
        return items

    out["time_steps"] = group_rows(t, lambda key, members: int(key))
    flat = data["obs"][rows].reshape(len(rows), -1)
    keys = np.array([row.tobytes() for row in flat], dtype=object)
    distinct = len(set(keys.tolist()))
    out["distinct_states"] = distinct
    if distinct <= 0.5 * len(rows):  # states repeat: a per-state table means something
        first = {}
        for i, k in enumerate(keys.tolist()):
            first.setdefault(k, i)
        codes = np.array([first[k] for k in keys.tolist()])
        out["states"] = group_rows(codes, lambda key, members: _describe_state(data["obs"][rows][int(key)]))
    # The start state (time step 0), the decision the closed forms of the known-answer tasks describe.
    start = t == 0
    mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise[start], episodes[start], reps=4000)
    out["start"] = {"decisions": int(start.sum()), "mean": mean, "ci": [low, high]}
    return out


def episode_end_information(per_horizon: Sequence[Dict[str, Any]], pointwise: Dict[str, np.ndarray],
                            episodes: np.ndarray, steps_to_end: np.ndarray) -> Optional[Dict[str, Any]]:
    """The long horizon apart from the fragment horizons: the information in the return to
    the episode's end (horizon `end`), the best fragment horizon K beside it, their paired
    difference (the same held-out decisions; bootstrap over episodes), and the end
    horizon's information against the steps left until the episode ends (bins 1, 2-3,
    4-7, ...; the return to the end reaches that far). None without an `end` horizon."""
    end = next((r for r in per_horizon if r["horizon"] == "end"), None)
    if end is None:
        return None
    fragments = [r for r in per_horizon if r["horizon"] != "end"]
    best = max(fragments, key=lambda r: r["information"]) if fragments else None
    out: Dict[str, Any] = {"information": end["information"], "ci": end["ci"], "start_state": end["start_state"],
                           "best_fragment": None, "end_minus_fragment": None, "by_steps_to_end": []}
    if best is not None:
        out["best_fragment"] = {"horizon": best["horizon"], "information": best["information"], "ci": best["ci"]}
        diff = pointwise["end"] - pointwise[best["horizon"]]
        mean, low, high = stats.cluster_bootstrap_mean_ci(diff, episodes)
        out["end_minus_fragment"] = {"mean": mean, "ci": [low, high]}
    bins = credit.power_of_two_bins(steps_to_end)
    for b in np.unique(bins):
        members = bins == b
        lo, hi = 2 ** int(b), min(2 ** (int(b) + 1) - 1, int(steps_to_end[members].max()))
        mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise["end"][members], episodes[members], reps=1000)
        item = {"steps": str(lo) if lo == hi else f"{lo}-{hi}", "low": lo, "high": hi,
                "decisions": int(members.sum()), "information": mean, "ci": [low, high]}
        if best is not None:
            item["best_fragment_information"] = float(np.mean(pointwise[best["horizon"]][members]))
        out["by_steps_to_end"].append(item)
    return out


def policy_record(data: Dict[str, Any]) -> Dict[str, Any]:
    """What the stated policy did: its mean action probabilities and the actions' frequencies,
    over all decisions and at the start state (t = 0), for checking which policy ran."""
    probs = np.exp(data["log_pi"])
    actions, n = data["actions"], probs.shape[-1]
    start = data["time_steps"] == 0
    return {"mean_probabilities": probs.mean(0).tolist(),
            "action_frequencies": (np.bincount(actions, minlength=n) / len(actions)).tolist(),
            "start_mean_probabilities": probs[start].mean(0).tolist(),
            "start_action_frequencies": (np.bincount(actions[start], minlength=n) / int(start.sum())).tolist(),
            "start_decisions": int(start.sum())}


def probe(env: str, *, env_config: Optional[Dict[str, Any]] = None, checkpoint=None, module=None,
          episodes: int = DEFAULT_EPISODES, max_steps: int = DEFAULT_MAX_STEPS,
          horizons: Sequence[Optional[int]] = DEFAULT_HORIZONS, gamma: float = GAMMA,
          held_out_fraction: float = HELD_OUT_FRACTION, threshold: float = THRESHOLD,
          num_envs: int = 8, seed: int = 0, frame_stack: Optional[int] = None,
          model_config: Optional[Dict[str, Any]] = None, fit: Optional[Dict[str, Any]] = None,
          benchmark_summary=BENCHMARK_SUMMARY, progress: Optional[Callable[[str], None]] = None,
          keep_data: bool = False, torch_threads: int = 1) -> Dict[str, Any]:
    """Measure `I(A; Z | S)` of `env` under a stated policy (see the module docstring).

    `env`: any id `resolve_env` accepts. The policy: uniform random (default), the
    policy of `checkpoint` (a checkpoint or run directory; its env is used if `env` is
    None), or `module` (an `HCATorchRLModule`, e.g. `hca_rllib.training_module(algo)`),
    run forward only. `horizons`: return horizons K (None: episode end). Returns a dict
    (JSON-ready): the information per horizon with its CI, where it lives at the peak
    horizon, the fit records, the split, and the `reading`. `keep_data=True` adds the
    rollouts and held-out pointwise information as numpy arrays under `"data"`.
    `torch_threads`: torch's threads while the probe runs (1, as the training runner's
    default: a small network is fastest on one; 0: leave torch's setting)."""
    import torch


    threads = torch.get_num_threads()
    if torch_threads:
        torch.set_num_threads(int(torch_threads))
    try:
        return _probe(env, env_config, checkpoint, module, episodes, max_steps, horizons, gamma, held_out_fraction,
                      threshold, num_envs, seed, frame_stack, model_config, fit, benchmark_summary, progress,
                      keep_data)
    finally:
        torch.set_num_threads(threads)


def _probe(env, env_config, checkpoint, module, episodes, max_steps, horizons, gamma, held_out_fraction,
           threshold, num_envs, seed, frame_stack, model_config, fit, benchmark_summary, progress, keep_data):
    import torch

    from hca_rllib.envs import resolve_env

    say = progress or (lambda message: None)
    started = time.time()
    if checkpoint is not None and module is not None:
        raise ProbeError("give a checkpoint or a module as the policy, not both")
    for name, value, low in (("episodes", episodes, MIN_EPISODES), ("max_steps", max_steps, 1), ("num_envs", num_envs, 1)):
        if isinstance(value, bool) or int(value) != value or value < low:
            raise ProbeError(f"{name} must be an integer >= {low}, got {value!r}")
    if not 0.0 < gamma <= 1.0:
        raise ProbeError(f"gamma must be in (0, 1], got {gamma}")
    horizons = list(horizons)
    if not horizons:
        raise ProbeError("horizons: none given")
    for k in horizons:
        if k is not None and (isinstance(k, bool) or int(k) != k or k < 1):
            raise ProbeError(f"horizons: {k!r} must be an integer >= 1 or None (episode end)")
    policy_source = "uniform"
    if checkpoint is not None:
        from hca_rllib.evaluation import checkpoint_config, find_checkpoint, load_checkpoint_module

        path = find_checkpoint(checkpoint)
        state = checkpoint_config(path)
        env = env if env is not None else state["env"]
        if env != state["env"]:
            raise ProbeError(f"--env {env!r} is not the checkpoint's env {state['env']!r}")
        env_config = dict(state.get("env_config") or {}) if env_config is None else env_config
        frame_stack = state.get("frame_stack") if frame_stack is None else frame_stack
        model_config = model_config if model_config is not None else dict(state.get("model_config") or {})
        module = load_checkpoint_module(path)
        policy_source = f"checkpoint {path}"
    info = resolve_env(env, env_config or {}, frame_stack=frame_stack, model_config=model_config or {})
    if info is None:
        raise ProbeError(f"environment {env!r}: the probe needs an id the resolver can build (a gymnasium id)")
    family_config = {**info.family.model_config, **(model_config or {})}
    if module is not None:
        from hca_rllib.module import HCATorchRLModule

        if not isinstance(module, HCATorchRLModule):
            raise ProbeError(f"module must be an HCATorchRLModule, got {type(module).__name__}")
        if module.observation_space.shape != info.module_observation_space.shape:
            raise ProbeError(f"the policy's observations have shape {module.observation_space.shape}, env "
                             f"{env!r} gives {info.module_observation_space.shape}")
        policy = _ModulePolicy(module, "trained policy (" + policy_source + ")" if checkpoint else "trained policy (module)")
    else:
        policy = _UniformPolicy(int(info.action_space.n))

    say(f"collecting rollouts of {env} under the {policy.description} policy")
    last = [0.0]

    def collect_progress(done: int, steps: int) -> None:
        if time.time() - last[0] > 5.0:
            last[0] = time.time()
            say(f"  {done:,}/{episodes:,} episodes, {steps:,}/{max_steps:,} steps")

    data = collect_rollouts(env, policy, env_config=env_config, episodes=episodes, max_steps=max_steps,
                            num_envs=num_envs, seed=seed, frame_stack=info.frame_stack,
                            progress=collect_progress)
    collect_s = time.time() - started
    fit_ids, val_ids, held_ids = split_episodes(data["episode_ids"], held_out_fraction, seed)
    ep = data["episode_ids"]
    fit_rows, val_rows, held_rows = (np.flatnonzero(np.isin(ep, ids)) for ids in (fit_ids, val_ids, held_ids))
    taken_pi = data["log_pi"][np.arange(len(ep)), data["actions"]]
    say(f"{len(np.unique(ep)):,} episodes, {len(ep):,} decisions: fit {len(fit_ids)}, validation "
        f"{len(val_ids)}, held out {len(held_ids)} episodes")

    per_horizon, pointwise_by_horizon = [], {}
    for k in horizons:
        returns = credit.horizon_returns(data["rewards"], ep, gamma, k)
        torch.manual_seed(seed)
        classifier = build_classifier(info.module_observation_space, info.action_space, family_config)
        record = fit_classifier(classifier, data, returns, fit_rows, val_rows, seed=seed, fit=fit)
        log_q = _log_q_taken(classifier, data["obs"][held_rows], data["log_pi"][held_rows], returns[held_rows],
                             data["actions"][held_rows])
        pointwise = credit.pointwise_information(log_q, taken_pi[held_rows])
        log_q_fit = _log_q_taken(classifier, data["obs"][fit_rows], data["log_pi"][fit_rows], returns[fit_rows],
                                 data["actions"][fit_rows])
        mean, low, high = stats.cluster_bootstrap_mean_ci(pointwise, ep[held_rows])
        row = {"horizon": horizon_name(k), "information": mean, "ci": [low, high],
               "information_on_fit_episodes": float(np.mean(credit.pointwise_information(log_q_fit, taken_pi[fit_rows]))),
               "concentration": credit.information_concentration(pointwise, threshold),
               "fit": {key: value for key, value in record.items() if key != "validation_history"}}
        start = data["time_steps"][held_rows] == 0
        s_mean, s_low, s_high = stats.cluster_bootstrap_mean_ci(pointwise[start], ep[held_rows][start], reps=4000)
        row["start_state"] = {"information": s_mean, "ci": [s_low, s_high], "decisions": int(start.sum())}
        per_horizon.append(row)
        pointwise_by_horizon[horizon_name(k)] = pointwise
        say(f"horizon {horizon_name(k):>4}: {mean:.4f} nats/decision [{low:.4f}, {high:.4f}] "
            f"({record['epochs']} epochs, {record['updates']} updates)")
    peak = max(per_horizon, key=lambda r: r["information"])
    steps_to_end = credit.steps_to_episode_end(ep)[held_rows]
    result = {
        "env": env,
        "env_config": dict(env_config or {}),
        "policy": policy.description,
        "gamma": gamma,
        "seed": seed,
        "threshold": threshold,
        "frame_stack": info.frame_stack,
        "episodes": int(len(np.unique(ep))),
        "decisions": int(len(ep)),
        "steps_taken": int(data["steps"]),
        "mean_episode_length": float(len(ep) / len(np.unique(ep))),
        "mean_episode_return": float(np.mean(data["episode_returns"])),
        "split": {"fit_episodes": fit_ids.tolist(), "validation_episodes": val_ids.tolist(),
                  "held_out_episodes": held_ids.tolist(), "held_out_fraction": held_out_fraction,
                  "held_out_decisions": int(len(held_rows))},
        "horizons": per_horizon,
        "peak_horizon": peak["horizon"],
        "where": _where(pointwise_by_horizon[peak["horizon"]], data, held_rows),
        "episode_end": episode_end_information(per_horizon, pointwise_by_horizon, ep[held_rows], steps_to_end),
        "policy_record": policy_record(data),
        "bound": ("held-out mean of log q(a|s,Z) - log pi(a|s): a variational lower bound on I(A; Z | S), "
                  "low by E[KL(posterior || q)]; CI: 95% percentile bootstrap over held-out episodes"),
        "seconds": {"collect": collect_s, "total": None},
    }
    result["reading"] = reading(result, load_benchmark_rows(benchmark_summary))
    result["seconds"]["total"] = time.time() - started
    if keep_data:
        result["data"] = {**data, "held_out_rows": held_rows, "fit_rows": fit_rows, "validation_rows": val_rows,
                          "pointwise": pointwise_by_horizon}
    return result


# ------------------------------------------------------------------------- reading


def information_level(information: float, ci_low: float) -> str:
    if ci_low <= 0.0:
        return "none detectable"
    for edge, name in LEVELS:
        if information < edge:
            return name
    return LEVELS[-1][1]


def load_benchmark_rows(path) -> List[Dict[str, Any]]:
    """The benchmark rows the reading compares with: tasks probed by this probe (uniform
    policy) with their learning benchmarks' credit mode minus A2C (benchmarks/probe.py)."""
    if path is None:
        return []
    path = Path(path)
    if not path.exists():
        return []
    try:
        return list(json.loads(path.read_text()).get("rows", []))
    except (OSError, ValueError):
        return []


def reading(result: Dict[str, Any], rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """What the measurements say, by fixed rules (never per env):

    - level: the peak horizon's information per decision, `none detectable` when its CI
      reaches 0, else by `LEVELS` (nats per decision);
    - concentration: at the peak horizon, the share of decisions above `threshold` and the
      share of the positive information held by the top 10% of decisions;
    - horizon: the shortest horizon that reaches 80% of the peak information (the return
      training's classifier sees must reach that far: `rollout_fragment_length` at least
      that, or `return_mode="monte_carlo"` for `end`);
    - benchmarks: the `NEAREST_ROWS` benchmark rows (tasks this probe measured under the
      uniform policy) nearest in log information, their credit modes minus A2C, and the
      mode with the best mean difference over them (A2C when none is above 0)."""
    peak = next(r for r in result["horizons"] if r["horizon"] == result["peak_horizon"])
    level = information_level(peak["information"], peak["ci"][0])
    threshold_value = 0.8 * peak["information"]
    shortest = next((r["horizon"] for r in result["horizons"] if r["information"] >= threshold_value),
                    peak["horizon"])
    c = peak["concentration"]
    out: Dict[str, Any] = {"level": level, "information": peak["information"], "ci": peak["ci"],
                           "peak_horizon": peak["horizon"], "shortest_horizon_80": shortest,
                           "share_above_threshold": c["share_above_threshold"], "top10_share": c["top_share"],
                           "benchmark_rows": [], "best_mode": None, "text": []}
    text = out["text"]
    text.append(f"Information: {peak['information']:.4f} nats per decision [95% CI {peak['ci'][0]:.4f}, "
                f"{peak['ci'][1]:.4f}] at horizon {peak['horizon']}: {level}.")
    if level == "none detectable":
        text.append("The classifier finds nothing the action tells about the return on held-out episodes: a "
                    "hindsight credit mode has nothing to add to A2C here (under this policy and budget).")
        if not any((h.get("fit") or {}).get("improved", True) for h in result["horizons"]):
            out["fit_never_improved"] = True
            text.append("No horizon's classifier beat its initial state (q = pi) on the validation episodes, so "
                        "the estimate is 0 by construction: a lower bound of 0, not a measured 0. More episodes "
                        "(--episodes, --max-steps) may find information this fit missed.")
    else:
        top = c["top_share"]
        spread = ("concentrated" if top is not None and top == top and top >= 0.5 else "spread out")
        held = "n/a" if top != top else f"{100 * top:.0f}%"
        text.append(f"Concentration: {100 * c['share_above_threshold']:.1f}% of decisions clear "
                    f"{c['threshold']:g} nats; the top 10% of decisions hold {held} of the positive "
                    f"information ({spread}).")
        if shortest == "end":
            text.append("Horizon: the information appears only in the return to the episode's end; training sees it "
                        "only with return_mode='monte_carlo' (batch_mode='complete_episodes') or fragments longer "
                        "than the episodes.")
        else:
            text.append(f"Horizon: 80% of the peak information is in the next {shortest} step(s) of return; "
                        f"a rollout fragment of at least {shortest} steps carries it.")
    end = result.get("episode_end")
    if end is not None:
        out["end_information"], out["end_ci"] = end["information"], end["ci"]
        line = (f"Long horizon: the return to the episode's end holds {end['information']:.4f} nats per decision "
                f"[{end['ci'][0]:.4f}, {end['ci'][1]:.4f}]")
        d, best = end.get("end_minus_fragment"), end.get("best_fragment")
        if d is not None and best is not None:
            out["end_minus_fragment"] = d
            line += (f"; the best fragment horizon, K = {best['horizon']}, {best['information']:.4f}; end minus "
                     f"fragment {d['mean']:+.4f} [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}]")
            if d["ci"][0] > 0:
                line += (f": the episode's end holds information no fragment of {best['horizon']} steps sees "
                         "(return_mode='monte_carlo', or fragments longer than the episodes, reach it).")
            elif d["ci"][1] < 0:
                line += (f": less to the end than in {best['horizon']} steps (the longer sum adds noise); a "
                         f"fragment of {best['horizon']} steps is enough.")
            else:
                line += ": no measurable difference."
        else:
            line += "."
        text.append(line)
    if rows:
        def key(value: float) -> float:
            return math.log10(max(value, 1e-5))

        here = key(peak["information"])
        near = sorted(rows, key=lambda r: abs(key(r["information"]) - here))[:NEAREST_ROWS]
        out["benchmark_rows"] = near
        modes: Dict[str, List[float]] = {}
        for row in near:
            for mode, diff in (row.get("credit_minus_a2c") or {}).items():
                if diff is not None and diff.get("mean") is not None:
                    modes.setdefault(mode, []).append(diff["mean"])
        means = {mode: float(np.mean(v)) for mode, v in modes.items() if len(v) == len(near)}
        if means:
            best = max(means, key=means.get)
            out["best_mode"] = best if means[best] > 0 else "a2c"
            out["mode_means"] = means
            names = ", ".join(r["task"] for r in near)
            if means[best] > 0:
                text.append(f"Benchmarks at similar information ({names}): {best} did best against A2C, a mean "
                            f"difference of {means[best]:+.3f} (normalised score) over those rows.")
            else:
                text.append(f"Benchmarks at similar information ({names}): no credit mode beat A2C on average "
                            f"(best {best}, {means[best]:+.3f}); use A2C.")
    else:
        text.append("No benchmark rows found (benchmarks/results/probe/summary.json): no comparison.")
    return out


# -------------------------------------------------------------------------- report


def _plots(result: Dict[str, Any], data_pointwise: Optional[Dict[str, np.ndarray]], out: Path) -> Dict[str, str]:
    from hca_rllib.report import make_figure

    files: Dict[str, str] = {}
    figure = make_figure(6.5, 4.0)
    ax = figure.add_subplot(1, 1, 1)
    names = [r["horizon"] for r in result["horizons"]]
    x = np.arange(len(names))
    mean = np.array([r["information"] for r in result["horizons"]])
    low = np.array([r["ci"][0] for r in result["horizons"]])
    high = np.array([r["ci"][1] for r in result["horizons"]])
    ax.errorbar(x, mean, yerr=[mean - low, high - mean], marker="o", capsize=4, label="all decisions")
    start = np.array([r["start_state"]["information"] for r in result["horizons"]])
    ax.plot(x, start, marker="s", linestyle="--", label="start state (t = 0)")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(x, names)
    ax.set_xlabel("return horizon K (steps; end: episode end)")
    ax.set_ylabel("I(A; Z | S), nats per decision")
    ax.set_title(f"{result['env']}: information against horizon")
    ax.grid(True, alpha=0.3)
    ax.legend()
    figure.tight_layout()
    figure.savefig(out / "information_horizon.png")
    files["horizon"] = "information_horizon.png"
    if data_pointwise is not None:
        values = data_pointwise[result["peak_horizon"]]
        figure = make_figure(6.5, 4.0)
        ax = figure.add_subplot(1, 1, 1)
        ax.hist(values, bins=60, log=True)
        ax.axvline(result["threshold"], color="tab:red", linestyle="--", label=f"threshold {result['threshold']:g}")
        ax.set_xlabel("pointwise information log q(a|s,Z) - log pi(a|s), nats")
        ax.set_ylabel("held-out decisions")
        ax.set_title(f"{result['env']}: pointwise information (horizon {result['peak_horizon']})")
        ax.legend()
        figure.tight_layout()
        figure.savefig(out / "pointwise_information.png")
        files["pointwise"] = "pointwise_information.png"
    return files


def _fmt(x: Optional[float], digits: int = 4) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def markdown(result: Dict[str, Any]) -> str:
    r = result
    lines = [f"# hca-rllib probe: {r['env']}", "",
             f"Policy: {r['policy']}. {r['episodes']:,} complete episodes ({r['decisions']:,} decisions, mean "
             f"length {r['mean_episode_length']:.1f}, mean return {r['mean_episode_return']:.3f}); "
             f"gamma {r['gamma']}; seed {r['seed']}; {r['split']['held_out_fraction']:.0%} of the episodes held "
             f"out ({r['split']['held_out_decisions']:,} decisions). {r['seconds']['total']:.0f} s.", ""]
    pr = r.get("policy_record")
    if pr is not None:
        lines += [f"Policy at the start state (t = 0, {pr['start_decisions']:,} decisions): mean probabilities "
                  + "[" + ", ".join(f"{v:.4f}" for v in pr["start_mean_probabilities"]) + "], actions taken "
                  + "[" + ", ".join(f"{v:.4f}" for v in pr["start_action_frequencies"]) + "].", ""]
    lines += ["## Reading", ""]
    lines += [f"- {t}" for t in r["reading"]["text"]]
    if r["reading"]["benchmark_rows"]:
        lines += ["", "Supporting benchmark rows (this probe, uniform policy; credit mode minus A2C from the "
                  "learning benchmarks, normalised score, mean over paired seeds [95% CI]):", "",
                  "| task | I (nats/decision) | " + " | ".join(sorted({m for row in r['reading']['benchmark_rows'] for m in row.get('credit_minus_a2c', {})})) + " |"]
        modes = sorted({m for row in r['reading']['benchmark_rows'] for m in row.get('credit_minus_a2c', {})})
        lines.append("|---|---:|" + "---:|" * len(modes))
        for row in r["reading"]["benchmark_rows"]:
            cells = []
            for m in modes:
                d = row.get("credit_minus_a2c", {}).get(m)
                cells.append("n/a" if not d else f"{d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")
            lines.append(f"| {row['task']} | {_fmt(row['information'])} | " + " | ".join(cells) + " |")
    lines += ["", "## Information against the return horizon", "",
              r["bound"] + ".", "",
              "| horizon K | I(A; Z \\| S) [95% CI] | start state (t = 0) [95% CI] | on fit episodes | "
              f"share > {r['threshold']:g} nats | top 10% hold | fit epochs |",
              "|---|---|---|---:|---:|---:|---:|"]
    for h in r["horizons"]:
        c, s = h["concentration"], h["start_state"]
        top = "n/a" if c["top_share"] != c["top_share"] else f"{100 * c['top_share']:.0f}%"
        lines.append(f"| {h['horizon']} | {_fmt(h['information'])} [{_fmt(h['ci'][0])}, {_fmt(h['ci'][1])}] | "
                     f"{_fmt(s['information'])} [{_fmt(s['ci'][0])}, {_fmt(s['ci'][1])}] | "
                     f"{_fmt(h['information_on_fit_episodes'])} | {100 * c['share_above_threshold']:.1f}% | "
                     f"{top} | "
                     f"{h['fit']['epochs']} |")
    lines += ["", "![information against horizon](information_horizon.png)", ""]
    end = r.get("episode_end")
    if end is not None:
        lines += ["## Long horizon: the return to the episode's end", "",
                  f"I(A; Z | S) with Z the return to the episode's end: {_fmt(end['information'])} "
                  f"[{_fmt(end['ci'][0])}, {_fmt(end['ci'][1])}] nats per decision; at the start state "
                  f"{_fmt(end['start_state']['information'])} [{_fmt(end['start_state']['ci'][0])}, "
                  f"{_fmt(end['start_state']['ci'][1])}]."]
        best, d = end.get("best_fragment"), end.get("end_minus_fragment")
        if best is not None and d is not None:
            lines += ["", f"Best fragment horizon K = {best['horizon']}: {_fmt(best['information'])} "
                      f"[{_fmt(best['ci'][0])}, {_fmt(best['ci'][1])}]; end minus fragment, paired on the same "
                      f"held-out decisions: {d['mean']:+.4f} [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}]."]
        lines += ["", "Against the steps left until the episode ends (the reach of the return to the end):", "",
                  "| steps to the end | decisions | I, return to the end [95% CI] |"
                  + (f" I, K = {best['horizon']} |" if best is not None else ""),
                  "|---|---:|---|" + ("---:|" if best is not None else "")]
        for item in end["by_steps_to_end"]:
            lines.append(f"| {item['steps']} | {item['decisions']:,} | {_fmt(item['information'])} "
                         f"[{_fmt(item['ci'][0])}, {_fmt(item['ci'][1])}] |"
                         + (f" {_fmt(item.get('best_fragment_information'))} |" if best is not None else ""))
        lines.append("")
    lines += [
              f"## Where it lives (horizon {r['peak_horizon']})", "",
              "Time steps holding the most information (sum of pointwise information over held-out decisions):", "",
              "| time step | decisions | mean [95% CI] | share of the information |", "|---:|---:|---|---:|"]
    for item in r["where"]["time_steps"]:
        share = item["share_of_information"]
        lines.append(f"| {item['key']} | {item['decisions']:,} | {_fmt(item['mean'])} [{_fmt(item['ci'][0])}, "
                     f"{_fmt(item['ci'][1])}] | {'n/a' if share is None else f'{100 * share:.0f}%'} |")
    if r["where"]["states"]:
        lines += ["", f"States ({r['where']['distinct_states']:,} distinct among the held-out decisions):", "",
                  "| state | decisions | mean [95% CI] | share of the information |", "|---|---:|---|---:|"]
        for item in r["where"]["states"]:
            share = item["share_of_information"]
            lines.append(f"| `{item['key']}` | {item['decisions']:,} | {_fmt(item['mean'])} [{_fmt(item['ci'][0])}, "
                         f"{_fmt(item['ci'][1])}] | {'n/a' if share is None else f'{100 * share:.0f}%'} |")
    else:
        lines += ["", f"States: {r['where']['distinct_states']:,} distinct among "
                  f"{r['split']['held_out_decisions']:,} held-out decisions (they rarely repeat: no per-state table)."]
    lines += ["", "![pointwise information](pointwise_information.png)", ""]
    return "\n".join(lines)


def write_probe_report(result: Dict[str, Any], out) -> Path:
    """`probe.md`, `probe.json` and the plots into directory `out`; returns probe.md's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = result.get("data")
    files = _plots(result, None if data is None else data["pointwise"], out)
    serialisable = {k: v for k, v in result.items() if k != "data"}
    serialisable["figures"] = files
    (out / "probe.json").write_text(json.dumps(serialisable, indent=1))
    text = markdown(serialisable)
    if "pointwise" not in files:
        text = text.replace("![pointwise information](pointwise_information.png)\n", "")
    (out / "probe.md").write_text(text)
    return out / "probe.md"
