"""A user's own environments, reached through gymnasium's ``"module:EnvName-v0"`` ids
(``"user_envs:TinyChain-v0"``): importing this module registers them, as a user's
package would. Nothing in ``hca_rllib`` knows about them."""

import gymnasium as gym
import numpy as np


class TinyChain(gym.Env):
    """Walk right (action 1) ``length`` times to earn +1; action 0 stays. Vector obs."""

    def __init__(self, length: int = 4):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        obs = np.zeros(self.length + 1, np.float32)
        obs[self._pos] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos, self._t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        self._pos = min(self._pos + int(action), self.length)
        done = self._pos == self.length
        return self._obs(), float(done), done, self._t >= 4 * self.length and not done, {}


class CounterFrames(gym.Env):
    """Frames of shape (84, 84, 1) filled with ``t + 1`` at step ``t``: a frame stack of
    them shows which frames it holds, in which order."""

    def __init__(self, episode_length: int = 30, size: int = 84, channels: int = 1):
        self.episode_length = episode_length
        self.observation_space = gym.spaces.Box(0, 255, (size, size, channels), np.uint8)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        return np.full(self.observation_space.shape, (self._t + 1) % 256, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        return self._obs(), 0.0, self._t >= self.episode_length, False, {}


gym.register("TinyChain-v0", entry_point=TinyChain)
gym.register("CounterFrames-v0", entry_point=CounterFrames)
gym.register("SmallImage-v0", entry_point=CounterFrames, kwargs={"size": 20, "channels": 3})
