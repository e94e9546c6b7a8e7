"""Atari through ale-py, under the two standard protocols (docs/benchmarks.md, section 1, "Atari").

Ids: ``atari/<Game>`` runs the *classic* protocol, ``atari-machado/<Game>`` the Machado et
al. (2018) one, for every game ale-py ships (``atari/Pong``, ``atari/SpaceInvaders``, ...).

| protocol | sticky actions | noop reset | fire reset | life loss ends the training episode |
|---|---|---|---|---|
| classic  | 0    | up to 30 | yes | yes |
| machado  | 0.25 | no       | no  | no  |

Both: frameskip 4 with a max-pool over the last two frames, 84x84 grayscale ``uint8``
frames of shape ``(84, 84, 1)``, rewards clipped to their sign *in the environment*
(RLlib's ``clip_rewards`` does nothing on the new API stack), minimal action set, and
episodes cut at 108,000 frames (27,000 agent steps). The four-frame stack is not done
here: :class:`hca_rllib.HCAConfig` adds RLlib's frame-stacking connectors, so episodes store
each frame once.

The score a paper reports is the full-game, unclipped return. Training sees clipped
rewards and, in the classic protocol, one episode per life; so the environment adds
``info["game_return"]`` (unclipped, summed over all lives) and ``info["game_length"]``
(agent steps) at the step where the *game* ends, and the algorithm logs them as
``env_runners/game_return_mean``.

Two implementations of the same protocol:

- :func:`make_atari`: one Python env (ale-py's ``AtariEnv`` + gymnasium's
  ``AtariPreprocessing`` + the wrappers below); RLlib vectorizes it.
- :func:`make_atari_vector`: ale-py's C++ ``AtariVectorEnv`` stepping all sub-envs in
  native threads, used when ``gym_env_vectorize_mode="vector_entry_point"``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np

__all__ = [
    "ATARI_PROTOCOLS",
    "AtariProtocol",
    "atari_games",
    "make_atari",
    "make_atari_vector",
    "rom_id",
]

MAX_EPISODE_FRAMES = 108_000
FRAME_SKIP = 4
SCREEN_SIZE = 84
NOOP, FIRE = 0, 1


@dataclasses.dataclass(frozen=True)
class AtariProtocol:
    name: str
    repeat_action_probability: float
    noop_max: int
    fire_reset: bool
    terminal_on_life_loss: bool


ATARI_PROTOCOLS: Dict[str, AtariProtocol] = {
    "classic": AtariProtocol("classic", 0.0, 30, True, True),
    "machado": AtariProtocol("machado", 0.25, 0, False, False),
}
# Id namespace -> protocol.
ATARI_NAMESPACES = {"atari": "classic", "atari-machado": "machado"}

def _camel(rom: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in rom.split("_"))


def atari_games() -> Dict[str, str]:
    """Game name (``Pong``, ``SpaceInvaders``) -> ale-py ROM id (``pong``, ``space_invaders``)."""
    from ale_py import roms

    return {_camel(rom): rom for rom in roms.get_all_rom_ids()}


def rom_id(game: str) -> str:
    games = atari_games()
    if game in games:
        return games[game]
    if game in games.values():
        return game
    raise ValueError(f"unknown Atari game {game!r}; ale-py ships {len(games)} games")


def _protocol(protocol: str, overrides: Dict[str, Any]) -> AtariProtocol:
    if protocol not in ATARI_PROTOCOLS:
        raise ValueError(f"protocol must be one of {sorted(ATARI_PROTOCOLS)}, got {protocol!r}")
    fields = {f.name for f in dataclasses.fields(AtariProtocol)} - {"name"}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"unknown Atari option(s) {sorted(unknown)}; allowed: {sorted(fields)}")
    return dataclasses.replace(ATARI_PROTOCOLS[protocol], **overrides)


# ---------------------------------------------------------------------------------------
# Python pipeline (one env)
# ---------------------------------------------------------------------------------------


class GameScore(gym.Wrapper):
    """Sums the unclipped reward over the whole game (all lives) and reports it at its end."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._score = 0.0
        self._length = 0

    def reset(self, **kwargs):
        self._score, self._length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._score += float(reward)
        self._length += 1
        if terminated or truncated:
            info = dict(info, game_return=self._score, game_length=self._length)
        return obs, reward, terminated, truncated, info


class LifeLossAndFireReset(gym.Wrapper):
    """Ends the training episode when a life is lost, and presses FIRE to start play.

    After a life loss the next ``reset()`` does not restart the game: it takes one step
    (FIRE where the game needs it, else NOOP) and continues; rewards of that step count
    toward the game score but not toward training, as in Stable-Baselines3's
    ``EpisodicLifeEnv``. A real reset happens only when the game is over.
    """

    def __init__(self, env: gym.Env, terminal_on_life_loss: bool, fire_reset: bool):
        super().__init__(env)
        self.terminal_on_life_loss = terminal_on_life_loss
        meanings = env.unwrapped.get_action_meanings()
        self.fire_reset = fire_reset and len(meanings) > FIRE and meanings[FIRE] == "FIRE"
        self._lives = 0
        self._game_over = True

    def reset(self, **kwargs):
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
            if self.fire_reset:
                obs, _, terminated, truncated, info = self.env.step(FIRE)
                if terminated or truncated:
                    obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(FIRE if self.fire_reset else NOOP)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if self.terminal_on_life_loss and 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info


class ClipRewardToSign(gym.RewardWrapper):
    def reward(self, reward):
        return float(np.sign(reward))


def make_atari(
    game: str,
    protocol: str = "classic",
    *,
    render_mode: Optional[str] = None,
    max_episode_frames: int = MAX_EPISODE_FRAMES,
    clip_rewards: bool = True,
    num_threads: int = 0,  # for the vector env only; accepted so one env_config fits both
    **protocol_overrides: Any,
) -> gym.Env:
    """One Atari env under ``protocol``; observations ``uint8`` of shape ``(84, 84, 1)``."""
    from ale_py.env import AtariEnv
    from gymnasium.wrappers import AtariPreprocessing

    p = _protocol(protocol, protocol_overrides)
    env = AtariEnv(
        game=rom_id(game),
        obs_type="grayscale",
        frameskip=1,
        repeat_action_probability=p.repeat_action_probability,
        full_action_space=False,
        max_num_frames_per_episode=max_episode_frames,
        render_mode=render_mode,
    )
    env = AtariPreprocessing(
        env,
        noop_max=p.noop_max,
        frame_skip=FRAME_SKIP,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        grayscale_newaxis=True,
        scale_obs=False,
    )
    env = GameScore(env)
    env = LifeLossAndFireReset(env, p.terminal_on_life_loss, p.fire_reset)
    if clip_rewards:
        env = ClipRewardToSign(env)
    return env


# ---------------------------------------------------------------------------------------
# ale-py's native vector env, same protocol
# ---------------------------------------------------------------------------------------


class AtariVectorProtocol(gym.vector.VectorWrapper):
    """Adds to ``AtariVectorEnv`` what the Python pipeline does in its wrappers.

    The C++ env does noop and fire resets, frameskip, max-pool and resizing; this wrapper
    ends the training episode on life loss (with the same FIRE/NOOP step after it),
    clips rewards, reports the full-game score, and makes frames ``(84, 84, 1)``.
    Autoreset follows gymnasium's next-step mode, as RLlib's EnvRunner expects.
    """

    def __init__(self, env, terminal_on_life_loss: bool, fire_reset: bool, clip_rewards: bool):
        super().__init__(env)
        n = env.num_envs
        self.terminal_on_life_loss = terminal_on_life_loss
        meanings = env.ale.get_action_set()
        # The minimal action set's second action is FIRE in every game that has one.
        self.fire_reset = fire_reset and len(meanings) > FIRE and meanings[FIRE].name == "FIRE"
        self.clip_rewards = clip_rewards
        self._lives = np.zeros(n, dtype=np.int64)
        self._score = np.zeros(n)
        self._length = np.zeros(n, dtype=np.int64)
        self._life_reset = np.zeros(n, dtype=bool)  # next step is the step after a life loss
        self._game_reset = np.zeros(n, dtype=bool)  # next step is the C++ autoreset
        single = env.single_observation_space
        height, width = single.shape[1:3]
        self.single_observation_space = gym.spaces.Box(0, 255, (height, width, 1), np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)

    @staticmethod
    def _frames(obs: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(obs, 1, -1))

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._lives[:] = info["lives"]
        self._score[:] = 0.0
        self._length[:] = 0
        self._life_reset[:] = False
        self._game_reset[:] = False
        return self._frames(obs), info

    def step(self, actions):
        self.send(actions)
        return self.recv()

    def send(self, actions) -> None:
        """Starts the step (ale-py's C++ threads run it); :meth:`recv` waits for it."""
        actions = np.asarray(actions).astype(np.int64, copy=True)
        actions[self._life_reset] = FIRE if self.fire_reset else NOOP
        self.env.send(actions)

    def recv(self):
        """The results of the step :meth:`send` started."""
        obs, reward, terminated, truncated, info = self.env.recv()
        reward = np.asarray(reward, dtype=np.float64)
        lives = np.asarray(info["lives"], dtype=np.int64)
        # Envs that just auto-reset start a new game (their reward is 0, lives refilled).
        self._score[self._game_reset] = 0.0
        self._length[self._game_reset] = 0
        self._score += reward
        self._length += 1
        game_over = np.logical_or(terminated, truncated)
        life_lost = (~game_over) & (lives > 0) & (lives < self._lives) & ~self._game_reset
        terminated = np.asarray(terminated, dtype=bool).copy()
        if self.terminal_on_life_loss:
            terminated |= life_lost
        self._life_reset = life_lost if self.terminal_on_life_loss else np.zeros_like(life_lost)
        self._game_reset = game_over
        self._lives = lives
        info = dict(info)
        if game_over.any():
            info["game_return"] = np.where(game_over, self._score, 0.0)
            info["_game_return"] = game_over
            info["game_length"] = np.where(game_over, self._length, 0)
            info["_game_length"] = game_over
        if self.clip_rewards:
            reward = np.sign(reward)
        return self._frames(obs), reward.astype(np.float32), terminated, truncated, info


def make_atari_vector(
    game: str,
    protocol: str = "classic",
    *,
    num_envs: int,
    num_threads: int = 0,
    max_episode_frames: int = MAX_EPISODE_FRAMES,
    clip_rewards: bool = True,
    render_mode: Optional[str] = None,
    **protocol_overrides: Any,
) -> gym.vector.VectorEnv:
    """``num_envs`` Atari games in ale-py's C++ vector env, under ``protocol``.

    ``num_threads=0`` lets ale-py pick (one thread per core, at most one per env).
    """
    if render_mode is not None:
        raise ValueError("the native Atari vector env does not render; use the Python pipeline")
    from ale_py.vector_env import AtariVectorEnv

    p = _protocol(protocol, protocol_overrides)
    env = AtariVectorEnv(
        rom_id(game),
        num_envs,
        num_threads=num_threads,
        max_num_frames_per_episode=max_episode_frames,
        repeat_action_probability=p.repeat_action_probability,
        full_action_space=False,
        img_height=SCREEN_SIZE,
        img_width=SCREEN_SIZE,
        grayscale=True,
        stack_num=1,
        frameskip=FRAME_SKIP,
        maxpool=True,
        noop_max=p.noop_max,
        episodic_life=False,
        life_loss_info=False,
        reward_clipping=False,
        use_fire_reset=p.fire_reset,
    )
    return AtariVectorProtocol(env, p.terminal_on_life_loss, p.fire_reset, clip_rewards)


def register_atari_envs() -> List[str]:
    """Register ``atari/<Game>`` and ``atari-machado/<Game>`` with gymnasium (if ale-py is
    installed); returns the registered ids."""
    try:
        games = atari_games()
    except ImportError:
        return []
    ids = []
    for namespace, protocol in ATARI_NAMESPACES.items():
        for game in games:
            env_id = f"{namespace}/{game}"
            if env_id not in gym.envs.registry:
                gym.register(
                    id=env_id,
                    entry_point="hca_rllib.envs.atari:make_atari",
                    vector_entry_point="hca_rllib.envs.atari:make_atari_vector",
                    kwargs={"game": game, "protocol": protocol},
                )
            ids.append(env_id)
    return ids
