"""The 100-episode (and 100-game) window across iterations: `callbacks.WindowMeanStats`.

Ray 2.60's `MeanStats` empties its values at every reduce, so RLlib's
`episode_return_mean` is the mean of the episodes that ended in one iteration (pinned
below: if Ray changes that, this file says so). The window stats keep the last N values
of all EnvRunners across iterations and across a checkpoint."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from hca_rllib.callbacks import STATS_CLS_LOOKUP, WINDOW_REDUCE, EpisodeLog, WindowMeanStats
from hca_rllib.runner import result_line


def _loggers(n_leaves):
    root = MetricsLogger(root=True, stats_cls_lookup=STATS_CLS_LOOKUP)
    leaves = [MetricsLogger(stats_cls_lookup=STATS_CLS_LOOKUP) for _ in range(n_leaves)]
    return root, leaves


def _iteration(root, leaves, values_per_leaf, window):
    """Each leaf logs its values (as the callback does), the root aggregates the leaves'
    reduced stats (as the Algorithm does with its EnvRunners') and compiles."""
    for leaf, values in zip(leaves, values_per_leaf):
        for value in values:
            leaf.log_value("w", value, reduce=WINDOW_REDUCE, window=window)
            leaf.log_value("m", value, window=window)  # RLlib's episode_return_mean
    root.aggregate([leaf.reduce() for leaf in leaves], key="env_runners")
    return root.reduce(compile=True)["env_runners"]


@pytest.mark.parametrize("n_leaves", [1, 3])
def test_window_is_the_last_n_values_across_iterations_and_a_checkpoint(n_leaves):
    rng = random.Random(n_leaves)
    window = 7
    root, leaves = _loggers(n_leaves)
    history = []
    for iteration in range(12):
        # 0 to 4 episodes per EnvRunner: some iterations end none on some runners, or none at all.
        values = [[rng.uniform(-5, 50) for _ in range(rng.randint(0, 4))] for _ in leaves]
        result = _iteration(root, leaves, values, window)
        for per_leaf in values:
            history += per_leaf[-window:]
        if not history:
            assert "w" not in result or math.isnan(result["w"])
            continue
        assert result["w"] == pytest.approx(float(np.mean(history[-window:])))
        if iteration == 5:  # a checkpoint: the root's state into a fresh root logger
            state = root.get_state()
            root = MetricsLogger(root=True, stats_cls_lookup=STATS_CLS_LOOKUP)
            root.set_state(state)
            assert isinstance(root.stats["env_runners"]["w"], WindowMeanStats)
    # Ray's own mean: one iteration's values only (the window is emptied at each reduce).
    last = [v for per_leaf in values for v in per_leaf]
    if n_leaves == 1 and last:
        assert result["m"] == pytest.approx(float(np.mean(last)))


def test_a_custom_stats_lookup_keeps_the_window_and_a_restored_leaf_keeps_its_deque():
    from ray.rllib.utils.metrics.stats.mean import MeanStats

    from hca_rllib import HCAConfig

    class MyStats(MeanStats):
        stats_cls_identifier = "mine"

    config = HCAConfig().reporting(custom_stats_cls_lookup={"mine": MyStats})
    assert config.stats_cls_lookup[WINDOW_REDUCE] is WindowMeanStats and config.stats_cls_lookup["mine"] is MyStats
    assert config.copy().stats_cls_lookup[WINDOW_REDUCE] is WindowMeanStats
    leaf = MetricsLogger(stats_cls_lookup=STATS_CLS_LOOKUP)
    for value in range(5):
        leaf.log_value("w", float(value), reduce=WINDOW_REDUCE, window=3)
    again = MetricsLogger(stats_cls_lookup=STATS_CLS_LOOKUP)
    again.set_state(leaf.get_state())
    again.log_value("w", 9.0, reduce=WINDOW_REDUCE, window=3)  # a list here would fail (popleft)
    assert list(again.stats["w"].items) == [3.0, 4.0, 9.0] and "WindowMeanStats" in repr(again.stats["w"])


def test_window_values_stay_bounded_at_the_root():
    root, leaves = _loggers(2)
    for _ in range(50):
        _iteration(root, leaves, [[1.0] * 30, [2.0] * 30], window=100)
    stats = root.stats["env_runners"]["w"]
    # The last 100 in arrival order: 10 ones and 30 twos of the previous iteration, then
    # 30 ones and 30 twos: (40 * 1 + 60 * 2) / 100.
    assert len(stats.items) == 100 and stats.peek() == pytest.approx(1.6)
    assert all(len(leaf.stats.get("w").items) == 0 for leaf in leaves)  # leaves start empty


@pytest.mark.slow  # builds an Algorithm and trains
@pytest.mark.parametrize("sampler", ["lean", "rllib"])
def test_episode_window_of_a_training_run_against_every_episode(ray_local, tmp_path, sampler):
    """The Algorithm's `episode_return_window_mean` is the mean of the last 100 episodes'
    returns (the EpisodeLog of the local EnvRunner), across iterations and across a
    checkpoint restored into a new Algorithm; the results line carries it as `score_window`.
    In the first iteration (under 100 episodes, one EnvRunner) it equals RLlib's own
    `episode_return_mean`, which each sampler computes by its own route: the returns the
    callback sums are the episodes' returns."""
    from hca_rllib import HCAConfig

    config = (HCAConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, num_envs_per_env_runner=4, sampler=sampler)
              .training(train_batch_size_per_learner=512, credit="a2c").debugging(seed=3))
    algo = config.build_algo()
    episodes = []
    try:
        log = EpisodeLog(algo.env_runner)
        for iteration in range(10):  # CartPole at the start: ~20-30 steps an episode, ~20 an iteration
            result = algo.train()
            episodes += [ret for ret, _ in log.new()]
            expected = float(np.mean(episodes[-100:]))
            if iteration == 0:
                assert 0 < len(episodes) < 100
                assert result["env_runners"]["episode_return_window_mean"] == pytest.approx(
                    result["env_runners"]["episode_return_mean"])
            assert result["env_runners"]["episode_return_window_mean"] == pytest.approx(expected)
            line = result_line(result, 1.0, 1.0)
            assert line["score_window"] == pytest.approx(expected) and line["game_return_window_mean"] is None
        assert len(episodes) > 100  # the window has filled and moved
        # RLlib's per-iteration mean is not the window (pinned: Ray 2.60 keeps none).
        assert result["env_runners"]["episode_return_mean"] != pytest.approx(expected)
        path = algo.save_to_path(str(tmp_path / "checkpoint"))
    finally:
        algo.stop()
    restored = config.build_algo()
    try:
        restored.restore_from_path(path)
        log = EpisodeLog(restored.env_runner)
        result = restored.train()
        episodes += [ret for ret, _ in log.new()]
        assert result["env_runners"]["episode_return_window_mean"] == pytest.approx(float(np.mean(episodes[-100:])))
    finally:
        restored.stop()


def _episode(rewards, last_info):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    episode = SingleAgentEpisode(observations=[0] * (len(rewards) + 1), actions=[0] * len(rewards),
                                 rewards=list(rewards), infos=[{}] * len(rewards) + [last_info],
                                 terminated=True, len_lookback_buffer=0)
    return episode


def test_callback_logs_the_windows_only_where_the_lookup_has_them():
    """A game (Atari: the episode is a life, the game's score in the last info) goes to both
    windows; an episode without a game score only to the episode window; a logger with
    RLlib's own lookup (a foreign config using the callback) gets no window and no error."""
    from ray.rllib.utils.metrics.metrics_logger import DEFAULT_STATS_CLS_LOOKUP

    from hca_rllib.callbacks import GameScoreCallback

    callback = GameScoreCallback()
    ours = MetricsLogger(stats_cls_lookup=STATS_CLS_LOOKUP)
    callback.on_episode_end(episode=_episode([1.0, 0.0, 1.0], {"game_return": 37.0, "game_length": 900}),
                            metrics_logger=ours)
    callback.on_episode_end(episode=_episode([1.0, 1.0], {}), metrics_logger=ours)
    assert ours.peek("game_return_window_mean") == 37.0 and ours.peek("game_return_mean") == 37.0
    assert ours.peek("episode_return_window_mean") == pytest.approx((2.0 + 2.0) / 2)
    foreign = MetricsLogger(stats_cls_lookup=DEFAULT_STATS_CLS_LOOKUP)
    callback.on_episode_end(episode=_episode([1.0], {"game_return": 5.0}), metrics_logger=foreign)
    assert foreign.peek("game_return_mean") == 5.0
    assert "game_return_window_mean" not in foreign.stats and "episode_return_window_mean" not in foreign.stats
