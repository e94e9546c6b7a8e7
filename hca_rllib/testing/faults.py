"""Fault injection for testing fault tolerance: ``hca_rllib.testing:FailOnce-v0``.

Wraps any env id and raises ``RuntimeError`` (or, with ``kill=True``, SIGKILLs its own
process) at a chosen step, once: the first process to
reach step ``fail_at_step`` (counted per process, over all episodes) creates
``marker`` and fails; every later process, including the EnvRunner that replaces it, finds
the marker and runs clean. Used to show that a failing EnvRunner is replaced, training
reaches its budget, and the failure is counted in the results.
"""

from __future__ import annotations

import os
import signal

import gymnasium as gym

__all__ = ["FailOnce", "InjectedFailure", "make_fail_once"]


class InjectedFailure(RuntimeError):
    """The failure FailOnce raises on purpose."""


class FailOnce(gym.Wrapper):
    _steps_in_process = 0

    def __init__(self, env_id: str = "CartPole-v1", fail_at_step: int = 100, marker: str = "",
                 kill: bool = False, **kwargs):
        if not marker:
            raise ValueError("marker must name a file path (it records that the failure happened)")
        if fail_at_step < 1:
            raise ValueError(f"fail_at_step must be >= 1, got {fail_at_step}")
        super().__init__(gym.make(env_id, **kwargs))
        self.fail_at_step = int(fail_at_step)
        self.marker = marker
        self.kill = bool(kill)  # SIGKILL the whole process instead of raising

    def step(self, action):
        FailOnce._steps_in_process += 1
        if FailOnce._steps_in_process >= self.fail_at_step and not os.path.exists(self.marker):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return self.env.step(action)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise InjectedFailure(f"injected failure at step {FailOnce._steps_in_process} (pid {os.getpid()})")
        return self.env.step(action)


def make_fail_once(env_id: str = "CartPole-v1", fail_at_step: int = 100, marker: str = "",
                   kill: bool = False, **kwargs) -> gym.Env:
    return FailOnce(env_id, fail_at_step, marker, kill, **kwargs)
