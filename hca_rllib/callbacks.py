"""RLlib callbacks that HCAConfig installs by default, and the episode log read from them."""

from __future__ import annotations

from typing import List, Tuple

from ray.rllib.callbacks.callbacks import RLlibCallback

GAME_RETURN = "game_return"
GAME_LENGTH = "game_length"

# Attributes of an EnvRunner that an `EpisodeLog` attached to it; the callback appends to
# them when they are there (and records nothing otherwise).
EPISODES_ATTRIBUTE = "recorded_episodes"
LAST_REWARDS_ATTRIBUTE = "recorded_last_rewards"


class GameScoreCallback(RLlibCallback):
    """The one episode-end callback: logs the score a paper reports and, on an EnvRunner
    with an `EpisodeLog` attached, records every episode's exact return and length.

    Score: environments that train on something else than the game (clipped rewards, one
    episode per life; see :mod:`hca_rllib.envs.atari`) put ``info["game_return"]`` and
    ``info["game_length"]`` at the step where the game ends. This callback logs them as
    ``env_runners/game_return_mean`` (and ``_min``/``_max``, ``game_length_mean``),
    averaged over the same window as RLlib's ``episode_return_mean``. Environments
    without that info log nothing here: their episode return already is the score.

    Episode log: the episode passed to `on_episode_end` is only the last chunk when the
    episode spanned several `sample()` calls; earlier chunks come as
    `prev_episode_chunks`. With a local learner those earlier chunks are the very objects
    the learner connector `AddOneTsToEpisodesAndTruncate` extended in place by one
    artificial step with reward 0.0: summing their returns is still exact, summing their
    lengths is not (+1 per chunk), so the length is taken from the last chunk's `t`
    (steps since reset), which the learner has not touched yet. The reward of the last
    step is recorded too (bsuite's umbrella pays its only action-dependent reward there).
    On the lean sampler (`hca_rllib.env_runner`), `prev_episode_chunks` is one
    `PreviousChunks` summary of the earlier chunks (their return and length, no data),
    and the episode is the last chunk with the info of its last step: the same sums.
    """

    def on_episode_end(self, *, episode, prev_episode_chunks=None, env_runner=None,
                       metrics_logger=None, **kwargs) -> None:
        if env_runner is not None and EPISODES_ATTRIBUTE in env_runner.__dict__:
            chunks = list(prev_episode_chunks or []) + [episode]
            ret = float(sum(chunk.get_return() for chunk in chunks))
            env_runner.__dict__[EPISODES_ATTRIBUTE].append((ret, int(episode.t)))
            env_runner.__dict__[LAST_REWARDS_ATTRIBUTE].append(float(episode.get_rewards(-1)))
        if metrics_logger is None or len(episode) == 0:
            return
        info = episode.get_infos(-1)
        if not isinstance(info, dict) or GAME_RETURN not in info:
            return
        window = getattr(getattr(env_runner, "config", None), "metrics_num_episodes_for_smoothing", 100)
        score = float(info[GAME_RETURN])
        metrics_logger.log_value(f"{GAME_RETURN}_mean", score, window=window)
        metrics_logger.log_value(f"{GAME_RETURN}_max", score, reduce="max", window=window)
        metrics_logger.log_value(f"{GAME_RETURN}_min", score, reduce="min", window=window)
        if GAME_LENGTH in info:
            metrics_logger.log_value(f"{GAME_LENGTH}_mean", float(info[GAME_LENGTH]), window=window)


class EpisodeLog:
    """Every completed episode of one (local) EnvRunner, recorded by `GameScoreCallback`
    (which HCAConfig and A2CConfig install): attach it before training; `new()` returns
    the `(return, length)` of the episodes completed since the previous call."""

    def __init__(self, env_runner) -> None:
        self.env_runner = env_runner
        env_runner.__dict__.setdefault(EPISODES_ATTRIBUTE, [])
        env_runner.__dict__.setdefault(LAST_REWARDS_ATTRIBUTE, [])
        self.seen = len(env_runner.__dict__[EPISODES_ATTRIBUTE])

    def new(self) -> List[Tuple[float, int]]:
        episodes = self.env_runner.__dict__[EPISODES_ATTRIBUTE]
        fresh = list(episodes[self.seen:])
        self.seen = len(episodes)
        return fresh

    def last_rewards(self) -> List[float]:
        """The last-step reward of every episode recorded so far (same order as `new`)."""
        return list(self.env_runner.__dict__[LAST_REWARDS_ATTRIBUTE])
