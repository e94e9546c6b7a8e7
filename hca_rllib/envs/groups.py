"""One vector env made of groups of envs that step on their own (``sampler_overlap``).

:class:`EnvGroups` is a gymnasium ``VectorEnv`` of ``num_envs`` envs held as consecutive
groups (sub vector envs): env ``i`` of the whole is env ``i - offset`` of its group.
``reset`` and ``step`` act on all of them, as any vector env (RLlib's own loop uses
these); ``send(g, actions)`` starts group ``g``'s step and ``recv(g)`` waits for its
results, which is what :class:`hca_rllib.env_runner.LeanEnvRunner` uses to run the policy
on one group's observations while the other group steps.

How a group steps in the background: ale-py's vector env (through
:class:`hca_rllib.envs.atari.AtariVectorProtocol`) has its own ``send``/``recv`` (C++
threads, the GIL released); gymnasium's ``AsyncVectorEnv`` its ``step_async``/``step_wait``
(processes); any other vector env (a ``SyncVectorEnv`` of Python envs) steps in a
worker thread, which overlaps with the policy only where either side releases the GIL
(torch's kernels do, Python env code does not).

Seeds: ``reset(seed=s)`` with an int seeds group ``g`` with ``s + offset_g``; gymnasium's
and ale-py's vector envs seed their envs ``s, s + 1, ...``, so every env gets the seed it
gets in one vector env of all of them.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Dict, List, Sequence

import gymnasium as gym
import numpy as np

__all__ = ["EnvGroups", "split_vector_env", "merge_infos"]


def merge_infos(infos: Sequence[dict], sizes: Sequence[int]) -> dict:
    """The vector info of the whole from the groups' vector infos (gymnasium's layout:
    ``info[key]`` one entry per env, ``info["_" + key]`` the mask of envs that have it;
    a key one group lacks gets zeros and a False mask there)."""
    keys: List[str] = []
    for info in infos:
        keys += [k for k in info if k not in keys]
    out: Dict[str, Any] = {}
    for key in keys:
        parts = [info.get(key) for info in infos]
        if any(isinstance(p, dict) for p in parts):
            out[key] = merge_infos([p if isinstance(p, dict) else {} for p in parts], sizes)
            continue
        present = next(np.asarray(p) for p in parts if p is not None)
        filled = []
        for part, size in zip(parts, sizes):
            if part is None:
                dtype = bool if key.startswith("_") else present.dtype
                part = np.zeros((size,) + present.shape[1:], dtype)
            filled.append(np.asarray(part))
        out[key] = np.concatenate(filled)
    return out


class _StepThread:
    """A worker thread that runs ``env.step`` for :meth:`EnvGroups.send`."""

    def __init__(self, env):
        self._env = env
        self._todo: "queue.SimpleQueue" = queue.SimpleQueue()
        self._done: "queue.SimpleQueue" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True, name="EnvGroups-step")
        self._thread.start()

    def _run(self) -> None:
        while True:
            actions = self._todo.get()
            if actions is None:
                return
            try:
                self._done.put((True, self._env.step(actions)))
            except BaseException as e:  # handed to recv()
                self._done.put((False, e))

    def send(self, actions) -> None:
        self._todo.put(actions)

    def recv(self):
        ok, result = self._done.get()
        if not ok:
            raise result
        return result

    def close(self) -> None:
        self._todo.put(None)
        self._thread.join(timeout=10)


class EnvGroups(gym.vector.VectorEnv):
    """``groups`` (vector envs with the same spaces) as one vector env; see the module."""

    def __init__(self, groups: Sequence[gym.vector.VectorEnv]):
        if len(groups) < 2:
            raise ValueError(f"EnvGroups needs at least 2 groups, got {len(groups)}")
        self.groups = list(groups)
        self.sizes = [int(g.num_envs) for g in self.groups]
        self.offsets = [int(o) for o in np.cumsum([0] + self.sizes[:-1])]
        self.slices = [slice(o, o + n) for o, n in zip(self.offsets, self.sizes)]
        self.num_envs = sum(self.sizes)
        first = self.groups[0]
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(getattr(first, "metadata", {}))
        self.render_mode = getattr(first, "render_mode", None)
        self.closed = False
        self._steppers = []
        for g in self.groups:
            if callable(getattr(g, "send", None)) and callable(getattr(g, "recv", None)):
                self._steppers.append(g)  # ale-py's C++ vector env, through its wrapper
            elif isinstance(g, gym.vector.AsyncVectorEnv):
                self._steppers.append(_AsyncStepper(g))
            else:
                self._steppers.append(_StepThread(g))
        self._in_flight = [False] * len(self.groups)

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def send(self, g: int, actions) -> None:
        """Start group ``g``'s step with its envs' ``actions``."""
        self._in_flight[g] = True
        self._steppers[g].send(actions)

    def recv(self, g: int):
        """Group ``g``'s ``(obs, rewards, terminated, truncated, info)`` of the step
        :meth:`send` started (its own vector info, for its envs only)."""
        self._in_flight[g] = False
        obs, rew, term, trunc, info = self._steppers[g].recv()
        return obs, rew, term, trunc, self._global_env_ids(g, info)

    def _global_env_ids(self, g: int, info: dict) -> dict:
        """ale-py's ``info["env_id"]`` (the env's index in its C++ env) as the index in
        the whole."""
        if "env_id" in info and self.offsets[g]:
            info = dict(info, env_id=np.asarray(info["env_id"]) + self.offsets[g])
        return info

    def drain(self) -> None:
        """Wait for every step in flight, dropping its results and errors."""
        for g, busy in enumerate(self._in_flight):
            if busy:
                try:
                    self.recv(g)
                except Exception:
                    pass

    def reset(self, *, seed=None, options=None):
        self.drain()
        obs, infos = [], []
        for g, (group, sl, offset) in enumerate(zip(self.groups, self.slices, self.offsets)):
            if seed is None or isinstance(seed, (int, np.integer)):
                seed_g = None if seed is None else int(seed) + offset
            else:
                seed_g = list(seed)[sl]
            options_g = options
            if options and "reset_mask" in options:
                options_g = dict(options, reset_mask=np.asarray(options["reset_mask"])[sl])
            o, info = group.reset(seed=seed_g, options=options_g)
            obs.append(np.asarray(o))
            infos.append(self._global_env_ids(g, info))
        return np.concatenate(obs), merge_infos(infos, self.sizes)

    def step(self, actions):
        self.drain()
        actions = np.asarray(actions)
        for g, sl in enumerate(self.slices):
            self.send(g, actions[sl])
        results = [self.recv(g) for g in range(self.num_groups)]
        obs, rew, term, trunc, infos = zip(*results)
        return (np.concatenate([np.asarray(o) for o in obs]), np.concatenate(rew),
                np.concatenate(term), np.concatenate(trunc), merge_infos(infos, self.sizes))

    def close_extras(self, **kwargs) -> None:
        self.drain()
        for stepper in self._steppers:
            if isinstance(stepper, _StepThread):
                stepper.close()
        for group in self.groups:
            group.close()

    def __repr__(self) -> str:
        return f"EnvGroups({', '.join(repr(g) for g in self.groups)})"


class _AsyncStepper:
    def __init__(self, env):
        self._env = env

    def send(self, actions) -> None:
        self._env.step_async(actions)

    def recv(self):
        return self._env.step_wait()


def split_vector_env(env, num_groups: int) -> EnvGroups:
    """``env`` (a vector env) as :class:`EnvGroups` of ``num_groups`` groups of
    consecutive envs (sizes differing by at most one). A ``SyncVectorEnv`` is split
    around its own sub-envs; ale-py's vector env (``AtariVectorProtocol``) is rebuilt as
    that many C++ vector envs; ``EnvGroups`` already split is returned as it is."""
    if isinstance(env, EnvGroups):
        return env
    n = int(env.num_envs)
    if not 2 <= num_groups <= n:
        raise ValueError(f"sampler_overlap needs at least {num_groups} envs per EnvRunner "
                         f"(num_envs_per_env_runner), got {n}")
    sizes = [n // num_groups + (1 if g < n % num_groups else 0) for g in range(num_groups)]
    if isinstance(env, gym.vector.SyncVectorEnv):
        envs, groups, start = list(env.envs), [], 0
        for size in sizes:
            part = envs[start:start + size]
            groups.append(gym.vector.SyncVectorEnv([lambda e=e: e for e in part],
                                                   copy=env.copy,
                                                   autoreset_mode=env.autoreset_mode))
            start += size
        # The groups own the sub-envs now: the emptied vector env must not close them
        # when it is dropped (gymnasium's VectorEnv.__del__ closes one not closed).
        env.closed = True
        return EnvGroups(groups)
    if callable(getattr(env, "split", None)):
        return EnvGroups(env.split(sizes))
    raise ValueError(f"sampler_overlap cannot split a {type(env).__name__} into groups (it "
                     f"splits gymnasium's SyncVectorEnv and ale-py's vector env): set "
                     f"sampler_overlap=False")
