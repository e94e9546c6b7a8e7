"""The probe's data: complete episodes of a stated policy (uniform random or a trained
module, run forward only), the seeded split of the episodes, and what the policy did."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from hca_rllib.probe.settings import DEFAULT_EPISODES, DEFAULT_MAX_STEPS, MIN_EPISODES, VALIDATION_FRACTION, ProbeError


class UniformPolicy:
    description = "uniform random"

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def log_probs(self, obs: np.ndarray) -> np.ndarray:
        return np.full((len(obs), self.num_actions), -math.log(self.num_actions))


class ModulePolicy:
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


def _stacked(history: List[np.ndarray], stack: int) -> np.ndarray:
    """The last `stack` frames along the last axis, zeros before the first frame."""
    if stack == 1:
        return history[-1]
    frames = history[-stack:]
    pad = [np.zeros_like(frames[0])] * (stack - len(frames))
    return np.concatenate(pad + frames, axis=-1)


def _sample_actions(log_pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    probs = np.exp(log_pi - log_pi.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    cumulative = probs.cumsum(-1)
    return (rng.random((len(log_pi), 1)) > cumulative).sum(-1).clip(0, probs.shape[-1] - 1)


class _FrameStore:
    """The frames of complete episodes, written in order into one array allocated once for
    the step budget (the OS maps its pages as they are written): the stacked frames are
    held once, not once per step and again when stacked at the end (an Atari frame stack
    is 28 KB). An episode's rows keep no frame once it is written."""

    def __init__(self, capacity: int):
        self.capacity, self.frames, self.size = capacity, None, 0

    def add(self, episode: List[tuple]) -> List[tuple]:
        if self.frames is None:
            first = episode[0][0]
            self.frames = np.empty((self.capacity,) + first.shape, dtype=first.dtype)
        for j, row in enumerate(episode):
            self.frames[self.size + j] = row[0]
        self.size += len(episode)
        return [(None,) + tuple(row[1:]) for row in episode]


def _as_arrays(done: List[List[tuple]], store: _FrameStore, steps: int) -> Dict[str, Any]:
    rows = [row for episode in done for row in episode]
    lengths = [len(episode) for episode in done]
    return {
        "obs": store.frames[:len(rows)],
        "actions": np.array([r[1] for r in rows], dtype=np.int64),
        "rewards": np.array([r[2] for r in rows], dtype=np.float64),
        "log_pi": np.stack([r[3] for r in rows]).astype(np.float64),
        "episode_ids": np.repeat(np.arange(len(done)), lengths),
        "time_steps": np.concatenate([np.arange(n) for n in lengths]),
        "episode_returns": [float(sum(r[2] for r in episode)) for episode in done],
        "steps": steps,
    }


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
    histories, buffers = [], []
    for i, env in enumerate(envs):
        obs, _ = env.reset(seed=seed * 10_007 + i)
        env.action_space.seed(seed * 10_007 + i)
        histories.append([obs])
        buffers.append([])
    done: List[List[tuple]] = []
    store = _FrameStore(int(max_steps) + num_envs)
    steps = 0
    try:
        while len(done) < episodes and steps < max_steps:
            obs_batch = np.stack([_stacked(h, stack) for h in histories])
            log_pi = policy.log_probs(obs_batch)
            actions = _sample_actions(log_pi, rng)
            for i, env in enumerate(envs):
                action = int(actions[i])
                next_obs, reward, terminated, truncated, _ = env.step(action)
                buffers[i].append((obs_batch[i], action, float(reward), log_pi[i]))
                steps += 1
                if terminated or truncated:
                    done.append(store.add(buffers[i]))
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
    return _as_arrays(done, store, steps)


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


def split_rows(episode_ids: np.ndarray, held_out_fraction: float, seed: int) -> Dict[str, np.ndarray]:
    """`split_episodes`' episode ids (`fit_ids`, ...) and the decision rows of each part
    (`fit`, `validation`, `held_out`)."""
    fit_ids, val_ids, held_ids = split_episodes(episode_ids, held_out_fraction, seed)
    rows = {name: np.flatnonzero(np.isin(episode_ids, ids))
            for name, ids in (("fit", fit_ids), ("validation", val_ids), ("held_out", held_ids))}
    return {**rows, "fit_ids": fit_ids, "validation_ids": val_ids, "held_out_ids": held_ids}


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
