"""RLlib callbacks that HCAConfig installs by default."""

from __future__ import annotations

from ray.rllib.callbacks.callbacks import RLlibCallback

GAME_RETURN = "game_return"
GAME_LENGTH = "game_length"


class GameScoreCallback(RLlibCallback):
    """Logs the score a paper reports: the full-game, unclipped return.

    Environments that train on something else than the game (clipped rewards, one
    episode per life; see :mod:`hca_rllib.envs.atari`) put ``info["game_return"]`` and
    ``info["game_length"]`` at the step where the game ends. This callback logs them as
    ``env_runners/game_return_mean`` (and ``_min``/``_max``, ``game_length_mean``),
    averaged over the same window as RLlib's ``episode_return_mean``. Environments
    without that info log nothing here: their episode return already is the score.
    """

    def on_episode_end(self, *, episode, env_runner=None, metrics_logger=None, **kwargs) -> None:
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
