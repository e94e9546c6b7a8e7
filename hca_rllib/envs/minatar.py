"""MinAtar (Young and Tian 2019): 10x10 Atari-like games, ``minatar/<Game>``.

Games: Breakout, Asterix, Freeway, Seaquest, SpaceInvaders. Observations are the game's
``10 x 10 x channels`` boolean planes as ``uint8`` (0 or 255, so the RLModule's usual
``/255`` scaling gives 0/1), the action space is the game's minimal action set (as
``MinAtar/<Game>-v1``), sticky actions 0.1 and difficulty ramping are MinAtar's defaults.
The network MinAtar's authors use (one 3x3 convolution with 16 channels and a 128-unit
dense layer) is the default model for these ids (:data:`MINATAR_MODEL_CONFIG`).

MinAtar's own gymnasium ids (what ``minatar.gym.register_envs()`` registers, and its
README uses) are accepted too, as the same game: ``MinAtar/<Game>-v1`` is
``minatar/<Game>`` (minimal action set) and ``MinAtar/<Game>-v0`` is ``minatar/<Game>``
with ``minimal_action_set=False`` (all six actions). Same dynamics, sticky actions and
ramping; the one difference is the encoding above (``uint8`` 0/255 where MinAtar's gym
env gives ``bool`` planes).
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np

__all__ = ["MINATAR_GAMES", "MINATAR_MODEL_CONFIG", "MinAtarEnv", "minatar_upstream_ids", "register_minatar_envs"]

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
        minimal_action_set: bool = True,
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
        if minimal_action_set:
            self._actions = list(self.game.minimal_action_set())
        else:  # MinAtar/<Game>-v0: every action MinAtar has, as its gym env does
            self._actions = list(range(self.game.num_actions()))
        self.action_space = gym.spaces.Discrete(len(self._actions))
        shape = tuple(self.game.state_shape())
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.max_episode_steps = max_episode_steps
        self.render_mode = render_mode
        self._steps = 0

    def _obs(self) -> np.ndarray:
        # The bool planes read as their 0/1 bytes (a view, no copy), times 255: one new
        # array where `.astype(np.uint8) * 255` made two; the same values and dtype.
        return self.game.state().view(np.uint8) * np.uint8(255)

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


def minatar_upstream_ids() -> dict:
    """MinAtar's own gymnasium id -> ``(our id, the kwargs that make it the same env)``."""
    ids = {}
    for game in MINATAR_GAMES:
        ids[f"MinAtar/{game}-v0"] = (f"minatar/{game}", {"minimal_action_set": False})
        ids[f"MinAtar/{game}-v1"] = (f"minatar/{game}", {})
    return ids


def register_minatar_envs():
    """Register ``minatar/<Game>`` and MinAtar's own ``MinAtar/<Game>-v0/-v1`` ids (ids
    already registered, e.g. by ``minatar.gym.register_envs()``, are kept)."""
    ids = []
    for game in MINATAR_GAMES:
        env_id = f"minatar/{game}"
        if env_id not in gym.envs.registry:
            gym.register(id=env_id, entry_point="hca_rllib.envs.minatar:MinAtarEnv", kwargs={"game": game})
        ids.append(env_id)
    for env_id, (ours, kwargs) in minatar_upstream_ids().items():
        if env_id not in gym.envs.registry:
            gym.register(id=env_id, entry_point="hca_rllib.envs.minatar:MinAtarEnv",
                         kwargs={**gym.spec(ours).kwargs, **kwargs})
        ids.append(env_id)
    return ids
