"""MinAtar (Young and Tian 2019): 10x10 Atari-like games, ``minatar/<Game>``.

Games: Breakout, Asterix, Freeway, Seaquest, SpaceInvaders. Observations are the game's
``10 x 10 x channels`` boolean planes as ``uint8`` (0 or 255, so the RLModule's usual
``/255`` scaling gives 0/1), the action space is the game's minimal action set (as
``MinAtar/<Game>-v1``), sticky actions 0.1 and difficulty ramping are MinAtar's defaults.
The network MinAtar's authors use (one 3x3 convolution with 16 channels and a 128-unit
dense layer) is the default model for these ids (:data:`MINATAR_MODEL_CONFIG`).
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np

__all__ = ["MINATAR_GAMES", "MINATAR_MODEL_CONFIG", "MinAtarEnv", "register_minatar_envs"]

MINATAR_GAMES = {
    "Breakout": "breakout",
    "Asterix": "asterix",
    "Freeway": "freeway",
    "Seaquest": "seaquest",
    "SpaceInvaders": "space_invaders",
}
MINATAR_MODEL_CONFIG = {"conv_filters": [[16, 3, 1, "valid"]], "conv_dense_hiddens": [128]}


class MinAtarEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        game: str,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
        max_episode_steps: Optional[int] = None,
        render_mode: Optional[str] = None,
    ):
        from minatar import Environment  # optional dependency: hca_rllib[minatar]

        if game not in MINATAR_GAMES:
            raise ValueError(f"unknown MinAtar game {game!r}; one of {sorted(MINATAR_GAMES)}")
        if not 0.0 <= sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {sticky_action_prob}")
        self.game = Environment(
            MINATAR_GAMES[game],
            sticky_action_prob=sticky_action_prob,
            difficulty_ramping=difficulty_ramping,
        )
        self._actions = list(self.game.minimal_action_set())
        self.action_space = gym.spaces.Discrete(len(self._actions))
        shape = tuple(self.game.state_shape())
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.max_episode_steps = max_episode_steps
        self.render_mode = render_mode
        self._steps = 0

    def _obs(self) -> np.ndarray:
        return self.game.state().astype(np.uint8) * np.uint8(255)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.game.seed(int(self.np_random.integers(2**31 - 1)))
        self.game.reset()
        self._steps = 0
        return self._obs(), {}

    def step(self, action):
        reward, terminated = self.game.act(self._actions[int(action)])
        self._steps += 1
        truncated = bool(self.max_episode_steps and self._steps >= self.max_episode_steps)
        return self._obs(), float(reward), bool(terminated), truncated and not terminated, {}

    def render(self):
        state = self.game.state()
        colors = np.array(
            [[255, 255, 255]] + [[(37 * k) % 256, (91 * k) % 256, (151 * k) % 256] for k in range(1, state.shape[-1] + 1)],
            dtype=np.uint8,
        )
        index = np.where(state.any(-1), state.argmax(-1) + 1, 0)
        return np.repeat(np.repeat(colors[index], 16, axis=0), 16, axis=1)


def register_minatar_envs():
    ids = []
    for game in MINATAR_GAMES:
        env_id = f"minatar/{game}"
        if env_id not in gym.envs.registry:
            gym.register(id=env_id, entry_point="hca_rllib.envs.minatar:MinAtarEnv", kwargs={"game": game})
        ids.append(env_id)
    return ids
