"""What the lean loop does in place of RLlib's env-to-module pipeline: the observations as
the episodes store them, and the frames the policy sees.

Two of RLlib's pieces change what the module sees; `LeanObservations` reads them from a
runner's pipeline and does their work once per vector step:

* `FlattenObservations` (HCAConfig adds it for non-Box observation spaces): each vector
  step's observations flattened (one-hot for the discrete parts) with the same function;
  the episodes store the flattened ones, as on RLlib's path.
* `FrameStackingEnvToModule` (HCAConfig installs it for Atari): one rolling stack per env
  of the last `num_frames` frames of the episode, zeros before its first frame, as
  RLlib's connector builds them from the episode.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from ray.rllib.utils.numpy import flatten_inputs_to_1d_tensor
from ray.rllib.utils.spaces.space_utils import get_base_struct_from_space


class LeanObservations:
    """Flattening and frame stacking as the env-to-module pipeline's pieces configure
    them (`from_pipeline`)."""

    def __init__(self, num_frames: int = 1, flatten=None):
        # Frames stacked on the last axis (1: none).
        self.num_frames = int(num_frames)
        # (the struct of the env's observation space, the flattened space the episodes
        # are stored in), or None: the observations are stored as the env gives them.
        self.flatten = flatten

    @classmethod
    def from_pipeline(cls, env_to_module) -> "LeanObservations":
        """What RLlib's `FrameStacking` and `FlattenObservations` pieces in the
        `env_to_module` pipeline would do (neither there: observations as they are)."""
        num_frames, flatten = 1, None
        for piece in env_to_module.connectors:
            if type(piece).__name__ == "FrameStacking":
                num_frames = int(piece.num_frames)
            if type(piece).__name__ == "FlattenObservations":
                flatten = (get_base_struct_from_space(piece.input_observation_space),
                           piece.observation_space)
        return cls(num_frames, flatten)

    def observation_space(self, env_space):
        """The space of the observations the episodes store, given the env's single one."""
        return env_space if self.flatten is None else self.flatten[1]

    def convert(self, obs) -> np.ndarray:
        """A vector step's observations as the episodes store them: flattened (one-hot
        for Discrete parts) as RLlib's FlattenObservations does, when it is in the
        pipeline; else as an array."""
        if self.flatten is None:
            return np.asarray(obs)
        return np.asarray(flatten_inputs_to_1d_tensor(obs, self.flatten[0], batch_axis=True),
                          dtype=np.float32)

    def new_stack(self, obs: np.ndarray) -> Optional[np.ndarray]:
        """The frame stacks of envs that all start an episode at `obs` (one frame each,
        on the last axis): zeros, then the frame; None without frame stacking."""
        if self.num_frames <= 1:
            return None
        stack = np.zeros(obs.shape[:-1] + (obs.shape[-1] * self.num_frames,), obs.dtype)
        stack[..., -obs.shape[-1]:] = obs
        return stack

    @staticmethod
    def push(stack: np.ndarray, frames: np.ndarray, new_episode: np.ndarray) -> None:
        """Roll each env's stack in place by one frame, `frames` the newest (their last
        axis the width of one frame); envs where `new_episode` start their episode at this
        frame, with zeros before it."""
        frame = frames.shape[-1]
        stack[..., :-frame] = stack[..., frame:]
        stack[..., -frame:] = frames
        if new_episode.any():
            stack[new_episode, ..., :-frame] = 0
