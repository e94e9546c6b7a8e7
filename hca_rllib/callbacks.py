"""RLlib callbacks that HCAConfig installs by default, and the episode log read from them."""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.utils.metrics.metrics_logger import DEFAULT_STATS_CLS_LOOKUP
from ray.rllib.utils.metrics.stats.item_series import ItemSeriesStats

GAME_RETURN = "game_return"
GAME_LENGTH = "game_length"
# The mean over the last `metrics_num_episodes_for_smoothing` (100) games, and episodes,
# across iterations: `env_runners/game_return_window_mean`, `.../episode_return_window_mean`.
WINDOW_SUFFIX = "_window_mean"
WINDOW_REDUCE = "window_mean"


class WindowMeanStats(ItemSeriesStats):
    """The mean of the last `window` values logged by all EnvRunners, kept across
    training iterations: the "mean over the last 100 episodes" of SB3's `ep_rew_mean`
    and of RLlib's old API stack, which Ray 2.60's `MeanStats` no longer gives (its
    values are emptied at every reduce, so `episode_return_mean` is the mean of the
    episodes that ended in one iteration).

    A leaf (an EnvRunner's logger) sends every value logged since its last reduce and
    starts empty, as `ItemSeriesStats` does; merging at the root concatenates them (every
    episode counts once, where RLlib's merge of MeanStats averages the EnvRunners' means)
    and keeps the last `window`; the root's reduce returns their mean and keeps them, and
    the values travel with the Algorithm's checkpoint (its MetricsLogger state).
    Registered under the reduce name "window_mean" by `STATS_CLS_LOOKUP` (`HCAConfig`
    installs it). Within one iteration the values arrive EnvRunner by EnvRunner, so with
    several EnvRunners "the last N" is in that order, not by end time: where one
    EnvRunner alone ends N or more episodes in an iteration, the window holds only the
    last-listed EnvRunner's (all share the same weights, so it is still a fair sample)."""

    stats_cls_identifier = WINDOW_REDUCE

    def _keep_window(self) -> None:
        if self._window:
            self.items = list(self.items)[-int(self._window):]

    def merge(self, incoming_stats: List["ItemSeriesStats"]) -> None:
        super().merge(incoming_stats)
        self._keep_window()

    def peek(self, compile: bool = True, latest_merged_only: bool = False) -> Any:
        items = super().peek(compile=False, latest_merged_only=latest_merged_only)
        if not compile:
            return items
        return float(np.mean(items)) if len(items) else np.nan

    def reduce(self, compile: bool = True) -> Any:
        # Only EnvRunners log these (GameScoreCallback), and the Algorithm's root logger
        # aggregates them. A root's reduce(compile=False) returns the whole window: a root
        # logger whose output were aggregated again (aggregator actors are root loggers)
        # would count it again each iteration, so such a use needs another reduce.
        if not self.is_root:  # a leaf or an intermediate aggregator: pass the values on
            items = list(self.items)
            reduced = super().reduce(compile=False)
            return (float(np.mean(items)) if items else np.nan) if compile else reduced
        self._keep_window()
        if compile:
            return self.peek(compile=True)
        kept = self.clone()
        kept.items = list(self.items)  # a root keeps a plain list (no leaf window deque)
        return kept

    def get_state(self) -> dict:
        state = super().get_state()
        state["items"] = list(state["items"])  # a deque at a windowed leaf
        return state

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self._set_items(list(state["items"]))  # a windowed leaf's push needs its deque back

    def __repr__(self) -> str:
        return f"WindowMeanStats(window={self._window}; len={len(self)})"


STATS_CLS_LOOKUP = {**DEFAULT_STATS_CLS_LOOKUP, WINDOW_REDUCE: WindowMeanStats}

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
    averaged like RLlib's ``episode_return_mean`` (in Ray 2.60: over the games that ended
    in the iteration). Environments without that info log no game score: their episode
    return already is the score.

    Windows: where the config's stats lookup has `WindowMeanStats` (HCAConfig's does), it
    also logs ``env_runners/game_return_window_mean`` and
    ``env_runners/episode_return_window_mean``: the mean over the last
    `metrics_num_episodes_for_smoothing` (100) games and episodes, across iterations.

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
        recorded = env_runner is not None and EPISODES_ATTRIBUTE in env_runner.__dict__
        # Not where a config without STATS_CLS_LOOKUP runs this callback.
        windowed = metrics_logger is not None and WINDOW_REDUCE in getattr(metrics_logger, "stats_cls_lookup", {})
        if recorded or windowed:  # the episode's return, summed once over its chunks
            ret = float(sum(chunk.get_return() for chunk in [*(prev_episode_chunks or []), episode]))
        if recorded:
            env_runner.__dict__[EPISODES_ATTRIBUTE].append((ret, int(episode.t)))
            env_runner.__dict__[LAST_REWARDS_ATTRIBUTE].append(float(episode.get_rewards(-1)))
        if metrics_logger is None or len(episode) == 0:
            return
        window = getattr(getattr(env_runner, "config", None), "metrics_num_episodes_for_smoothing", 100)
        if windowed:
            metrics_logger.log_value("episode_return" + WINDOW_SUFFIX, ret, reduce=WINDOW_REDUCE, window=window)
        info = episode.get_infos(-1)
        if not isinstance(info, dict) or GAME_RETURN not in info:
            return
        score = float(info[GAME_RETURN])
        if windowed:
            metrics_logger.log_value(GAME_RETURN + WINDOW_SUFFIX, score, reduce=WINDOW_REDUCE, window=window)
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
