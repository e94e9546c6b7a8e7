"""The lean EnvRunner's parts (`hca_rllib.lean_sampler`) on their own: frame stacks
against a brute-force stack of each episode's frames, the running episodes' chunks and
carried lookback, the own `SyncVectorEnv` step against gymnasium's, one fragment's
bookkeeping, and what the runner refuses. tests/test_env_runner.py checks them together
against RLlib's runner."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Discrete
from gymnasium.wrappers.vector import DictInfoToList
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from hca_rllib.lean_sampler import vector_step
from hca_rllib.lean_sampler.episodes import PreviousChunks, RunningEpisodes
from hca_rllib.lean_sampler.fragment import Fragment, FragmentBuffers, rows_needed
from hca_rllib.lean_sampler.observations import LeanObservations
from hca_rllib.lean_sampler.support import unsupported_pieces


def _frames_of_episode(frames, starts, t, num_frames):
    """Brute force: the last `num_frames` frames of the episode running at step `t`
    (`starts`: the steps that start an episode), zeros before its first one."""
    start = max(s for s in starts if s <= t)
    picked = [frames[u] if u >= start else np.zeros_like(frames[0]) for u in range(t - num_frames + 1, t + 1)]
    return np.concatenate(picked, axis=-1)


def test_frame_stack_is_the_episodes_last_frames_with_zeros_before_its_start():
    rng = np.random.default_rng(0)
    num_envs, num_frames, steps = 3, 4, 30
    frames = rng.integers(1, 255, (steps, num_envs, 2, 2, 1), dtype=np.uint8)
    new_episode = rng.random((steps, num_envs)) < 0.2
    new_episode[0] = True
    observations = LeanObservations(num_frames=num_frames)
    stack = observations.new_stack(frames[0])
    assert stack.shape == (num_envs, 2, 2, num_frames) and stack.dtype == np.uint8
    for t in range(1, steps):
        observations.push(stack, frames[t], new_episode[t])
        for i in range(num_envs):
            starts = [u for u in range(t + 1) if new_episode[u, i]]
            expected = _frames_of_episode(frames[:, i], starts, t, num_frames)
            np.testing.assert_array_equal(stack[i], expected, err_msg=f"env {i}, step {t}")
    assert LeanObservations(num_frames=1).new_stack(frames[0]) is None


def test_observations_without_flattening_are_stored_as_given():
    observations = LeanObservations()
    obs = [np.zeros(3, np.float32), np.ones(3, np.float32)]
    np.testing.assert_array_equal(observations.convert(obs), np.stack(obs))
    space = Box(-1, 1, (3,))
    assert observations.observation_space(space) is space


def test_rows_needed_covers_an_autoreset_every_other_row():
    for num_timesteps, num_envs in [(1, 1), (7, 3), (64, 8), (65, 8)]:
        rows = rows_needed(num_timesteps, num_envs)
        # Worst case: every env autoresets every other row, so a row gives num_envs / 2 steps.
        assert rows >= 2 * -(-num_timesteps // num_envs) + 1


def test_fragment_buffers_fit_and_take_the_first_reward_dtype():
    obs = np.zeros((4, 3), np.float32)
    b = FragmentBuffers(10, obs, num_actions=5)
    assert b.obs.shape == (11, 4, 3) and b.act.shape == (10, 4) and b.logits.shape == (10, 4, 5)
    assert b.act.dtype == np.int32 and b.logp.dtype == np.float32 and b.rew is None
    assert b.fits(10, obs) and not b.fits(11, obs) and not b.fits(5, obs.astype(np.float64))
    b.allocate_rewards(np.float64)
    b.allocate_rewards(np.float32)  # kept: the first step's dtype
    assert b.rew.dtype == np.float64 and b.rew.shape == (10, 4)


def _filled_buffers(rows, num_envs, rng):
    b = FragmentBuffers(rows, np.zeros((num_envs, 2), np.float32), num_actions=3)
    b.obs[:] = rng.normal(size=b.obs.shape)
    b.act[:] = rng.integers(0, 3, b.act.shape)
    b.logp[:] = rng.normal(size=b.logp.shape)
    b.logits[:] = rng.normal(size=b.logits.shape)
    b.allocate_rewards(np.float64)
    b.rew[:] = rng.normal(size=b.rew.shape)
    return b


def test_running_chunks_carry_the_lookback_and_continue_the_episode():
    """Three fragments of one running episode, lookback 3: each chunk has the carried
    steps in front (its lookback buffer) and the same id; t and the return add up."""
    rng = np.random.default_rng(1)
    episodes = RunningEpisodes(2, 3, Box(-10, 10, (2,)), Discrete(3))
    ids = list(episodes.ids)
    total, t = 0.0, 0
    for k, rows in enumerate([2, 5, 4]):
        b = _filled_buffers(rows, 2, rng)
        chunk = episodes.running_chunk(1, b, 0, rows - 1, weights_seq_no=k)
        lookback = min(3, t)
        assert chunk.id_ == ids[1] and chunk.t_started == t and len(chunk) == rows
        assert chunk.observations.lookback == lookback
        np.testing.assert_array_equal(chunk.get_actions(), b.act[:rows, 1])
        np.testing.assert_array_equal(chunk.get_observations(), b.obs[:rows + 1, 1])
        seq = chunk.get_extra_model_outputs(WEIGHTS_SEQ_NO, indices=slice(0, None))
        assert (seq == k).all()
        np.testing.assert_array_equal(chunk.get_extra_model_outputs(Columns.ACTION_LOGP), b.logp[:rows, 1])
        if lookback:  # the carried steps are the last fragment's last ones
            np.testing.assert_array_equal(
                chunk.get_actions(indices=slice(-lookback - rows, -rows), neg_index_as_lookback=False),
                previous_actions[-lookback:])
        t += rows
        total += float(b.rew[:rows, 1].sum())
        previous_actions = np.concatenate([previous_actions, b.act[:rows, 1]]) if k else b.act[:rows, 1]
        assert episodes.t[1] == t and episodes.ret[1] == pytest.approx(total)
        assert {key: len(value) for key, value in episodes.carry[1].items()} == {
            key: min(3, len(chunk.get_actions(indices=slice(-10_000, None), neg_index_as_lookback=False)))
            for key in episodes.carry[1]}
    assert episodes.carry[0] is None and episodes.held_steps() == 3


def test_final_chunk_gives_the_whole_episodes_totals():
    rng = np.random.default_rng(2)
    episodes = RunningEpisodes(1, 2, Box(-10, 10, (2,)), Discrete(3))
    b = _filled_buffers(4, 1, rng)
    episodes.running_chunk(0, b, 0, 3, weights_seq_no=0)
    first = float(b.rew[:4, 0].sum())
    b2 = _filled_buffers(3, 1, rng)
    b2.term[2, 0] = True
    chunk, end = episodes.final_chunk(0, b2, 0, 2, weights_seq_no=1, info={"game_return": 5.0})
    assert chunk.is_terminated and not chunk.is_truncated and chunk.get_infos(-1) == {"game_return": 5.0}
    assert end.length == 7 == chunk.t and end.ret == pytest.approx(first + float(b2.rew[:3, 0].sum()))
    [previous] = end.previous
    assert isinstance(previous, PreviousChunks) and len(previous) == 4
    assert previous.get_return() == pytest.approx(first) and previous.id_ == chunk.id_
    assert episodes.carry[0] is None
    old = episodes.ids[0]
    episodes.restart(0)
    assert episodes.ids[0] != old and episodes.t[0] == 0 and episodes.ret[0] == 0.0


def test_fragment_ends_restarts_and_carries_episodes():
    """Two envs over 4 rows: env 0 ends at row 1 (its autoreset at row 2), env 1 runs on.
    The ended episode is reported once, with its info; the autoreset row is no step of
    the next episode; the running chunks start where their episode does."""
    rng = np.random.default_rng(3)
    episodes = RunningEpisodes(2, 2, Box(-10, 10, (2,)), Discrete(3))
    b = _filled_buffers(4, 2, rng)
    b.term[:] = False
    b.trunc[:] = False
    b.term[1, 0] = True
    ended = []
    fragment = Fragment(b, episodes, np.zeros(2, bool), None, weights_seq_no=0,
                        on_episode_end=lambda i, episode, end: ended.append((i, episode, end)))
    for v in range(4):
        fragment.after_step(v, lambda v=v: [{"row": v}, {"row": v}])
    [(i, episode, end)] = ended
    assert i == 0 and fragment.done_episodes == [episode] and len(episode) == 2
    assert episode.get_infos(-1) == {"row": 1} and end.previous == []
    running = fragment.running_chunks(4)
    assert [len(c) for c in running] == [1, 4]  # env 0: row 3 only (row 2 was its autoreset)
    assert running[0].id_ != episode.id_ and running[0].t_started == 0
    assert not fragment.needs_reset.any()


class _Counter(gym.Env):
    """Ends every `length` steps (terminated, or truncated for odd lengths); an info at
    every reset and step."""

    observation_space = Box(-100, 100, (1,), np.float32)
    action_space = Discrete(2)

    def __init__(self, length):
        self.length = length

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0], np.float32), {"reset": True}

    def step(self, action):
        self.t += 1
        over = self.t >= self.length
        return (np.array([self.t * 10 + action], np.float32), float(action + self.t),
                over and self.length % 2 == 0, over and self.length % 2 == 1, {"t": self.t})


def _counters():
    return gym.vector.SyncVectorEnv([lambda n=n: _Counter(n) for n in (2, 3, 4)])


def test_own_step_is_what_sync_vector_env_step_does():
    """`step_sub_envs` with the fragment's autoreset flags against the vector env's own
    step (NEXT_STEP): the same observations, rewards, ends and infos, row by row."""
    stock, own = DictInfoToList(_counters()), _counters()
    obs_stock, _ = stock.reset(seed=0)
    obs_own, _ = own.reset(seed=0)
    assert vector_step.can_step_directly(own)
    b = FragmentBuffers(12, obs_own, num_actions=2)
    b.allocate_rewards(vector_step.SYNC_VECTOR_REWARD_DTYPE)
    b.obs[0] = obs_own
    autoreset = np.zeros(3, bool)
    env_infos = [None] * 3
    rng = np.random.default_rng(4)
    for v in range(12):
        actions = rng.integers(0, 2, 3)
        obs, rew, term, trunc, infos = stock.step(actions)
        vector_step.step_sub_envs(own.envs, autoreset, b, v, actions, env_infos)
        np.testing.assert_array_equal(b.obs[v + 1], obs)
        np.testing.assert_array_equal(b.rew[v], rew)
        np.testing.assert_array_equal(b.term[v], term)
        np.testing.assert_array_equal(b.trunc[v], trunc)
        assert vector_step.sub_env_infos(own, env_infos) == infos
        autoreset = term | trunc
    with pytest.raises(ValueError, match="2 actions for 3 envs"):
        vector_step.step_sub_envs(own.envs, autoreset, b, 0, np.zeros(2, int), env_infos)


def test_own_step_only_for_a_plain_sync_vector_env():
    class Sub(gym.vector.SyncVectorEnv):
        pass

    assert not vector_step.can_step_directly(Sub([lambda: _Counter(2)]))
    same_step = gym.vector.SyncVectorEnv([lambda: _Counter(2)],
                                         autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert not vector_step.can_step_directly(same_step)
    assert not vector_step.can_step_directly(DictInfoToList(_counters()))


class _Pipeline:
    def __init__(self, *pieces):
        self.connectors = list(pieces)


class NumpyToTensor:
    pass


class MyPiece:
    pass


def test_unsupported_pieces_name_the_piece_or_the_action_space():
    ok = _Pipeline(NumpyToTensor())
    assert unsupported_pieces(ok, _Pipeline(), Discrete(3)) is None
    assert unsupported_pieces(ok, _Pipeline(), None) is None
    assert unsupported_pieces(_Pipeline(MyPiece()), _Pipeline(), Discrete(3)) == (
        "the env-to-module connector piece MyPiece is in the pipeline (the lean sampler does "
        "frame stacking and flattening only)")
    assert "module-to-env connector piece MyPiece" in unsupported_pieces(ok, _Pipeline(MyPiece()), Discrete(3))
    assert unsupported_pieces(ok, _Pipeline(), Box(-1, 1, (2,))).startswith(
        "the action space is Box(-1.0, 1.0, (2,), float32) (the lean sampler needs a Discrete one)")
