"""One `sample()` of the lean loop: preallocated buffers its vector steps are written
into, and the bookkeeping after each step (the episodes that ended, the autoresets, the
frame stacks).

Rows: row `v` of `act`, `rew`, ... is the `v`-th vector step of the fragment; `obs` has
one row more (row 0: the observations the fragment starts from, row `v + 1`: those after
step `v`). An env whose episode ended at a step autoresets at its next one (NEXT_STEP,
gymnasium's default): that row is no real step of it, so every other row of an env can
be an autoreset, and a fragment of `num_timesteps` env steps over `num_envs` envs needs
at most `rows_needed` rows.
"""

from __future__ import annotations

from typing import Callable, List

import numpy as np
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from hca_rllib.lean_sampler.episodes import EpisodeEnd, RunningEpisodes
from hca_rllib.lean_sampler.observations import LeanObservations


def rows_needed(num_timesteps: int, num_envs: int) -> int:
    """The rows a fragment of `num_timesteps` env steps over `num_envs` envs may take."""
    return 2 * (-(-num_timesteps // num_envs)) + 2


class FragmentBuffers:
    """The numpy rows of a fragment (see the module); kept across fragments while they
    fit (`fits`)."""

    __slots__ = ("obs", "act", "logp", "logits", "rew", "term", "trunc")

    def __init__(self, rows: int, obs: np.ndarray, num_actions: int):
        num_envs = len(obs)
        self.obs = np.zeros((rows + 1,) + obs.shape, obs.dtype)
        # int32 and float32, as RLlib's TensorToNumpy reduces them.
        self.act = np.zeros((rows, num_envs), np.int32)
        self.logp = np.zeros((rows, num_envs), np.float32)
        self.logits = np.zeros((rows, num_envs, num_actions), np.float32)
        self.rew = None  # allocated at the first step, with the env's reward dtype
        self.term = np.zeros((rows, num_envs), bool)
        self.trunc = np.zeros((rows, num_envs), bool)

    def fits(self, rows: int, obs: np.ndarray) -> bool:
        """Whether a fragment of `rows` rows starting from `obs` fits."""
        return self.act.shape[0] >= rows and self.obs.dtype == obs.dtype

    def allocate_rewards(self, dtype) -> None:
        """The reward rows, of `dtype`, unless there are some already."""
        if self.rew is None:
            self.rew = np.zeros(self.act.shape, dtype)


# on_episode_end(env index, the episode's last chunk, its totals)
EpisodeEndHook = Callable[[int, SingleAgentEpisode, EpisodeEnd], None]


class Fragment:
    """One `sample()`'s steps into `buffers`: per env, whether its next step is its
    autoreset (`needs_reset`) and the row its current chunk starts at, and the chunks of
    the episodes that ended (`done_episodes`, in the order they ended)."""

    def __init__(self, buffers: FragmentBuffers, episodes: RunningEpisodes, needs_reset: np.ndarray,
                 stack, weights_seq_no: int, on_episode_end: EpisodeEndHook):
        self.buffers = buffers
        self.episodes = episodes
        # Each env's frame stack (rolled in place), or None without frame stacking.
        self.stack = stack
        self.weights_seq_no = weights_seq_no
        self.on_episode_end = on_episode_end
        self.needs_reset = needs_reset.copy()
        # Row of the first real step of each env's current chunk in this fragment.
        self.seg_start = np.where(needs_reset, 1, 0)
        self.done_episodes: List[SingleAgentEpisode] = []

    def module_obs(self, v: int) -> np.ndarray:
        """What the policy sees at row `v`: the frame stacks, or the observations."""
        return self.stack if self.stack is not None else self.buffers.obs[v]

    def store_actions(self, v: int, actions, logp, logits) -> np.ndarray:
        """Row `v`'s actions, their log-probs and the logits (torch tensors), stored; the
        stored actions."""
        b = self.buffers
        b.act[v] = actions.numpy()
        b.logp[v] = logp.numpy()
        b.logits[v] = logits.numpy()
        return b.act[v]

    def store_step(self, v: int, obs: np.ndarray, rew, term, trunc) -> None:
        """Row `v`'s results of a vector env's own step (observations as stored)."""
        b = self.buffers
        if b.rew is None:  # the first step into these buffers: the env's reward dtype
            b.allocate_rewards(np.asarray(rew).dtype)
        b.obs[v + 1] = obs
        b.rew[v] = rew
        b.term[v] = term
        b.trunc[v] = trunc

    def after_step(self, v: int, infos_of: Callable[[], List[dict]]) -> None:
        """After row `v`'s step is in the buffers: the episodes that ended (their last
        chunk, `on_episode_end`), the autoresets, the frame stacks. `infos_of()`: the
        step's per-env info dicts (asked for only when an episode ended)."""
        b, needs_reset, seg_start = self.buffers, self.needs_reset, self.seg_start
        done = (b.term[v] | b.trunc[v]) & ~needs_reset
        if done.any():
            infos = infos_of()
            for i in np.flatnonzero(done).tolist():
                episode, end = self.episodes.final_chunk(i, b, int(seg_start[i]), v, self.weights_seq_no,
                                                         infos[i])
                self.on_episode_end(i, episode, end)
                self.done_episodes.append(episode)
        if needs_reset.any():
            # These envs' step was their autoreset: a new episode from obs row v + 1.
            for i in np.flatnonzero(needs_reset).tolist():
                self.episodes.restart(i)
            seg_start[needs_reset] = v + 1
        if self.stack is not None:
            LeanObservations.push(self.stack, b.obs[v + 1], needs_reset)
        needs_reset[:] = done

    def running_chunks(self, rows: int) -> List[SingleAgentEpisode]:
        """After `rows` steps, the chunks of the episodes that go on into the next
        fragment (their last steps carried)."""
        running = []
        for i in range(len(self.needs_reset)):
            # An env that ended at the last row starts its next episode next fragment;
            # one whose chunk has no step yet (autoreset at the last row) returns nothing.
            if not self.needs_reset[i] and self.seg_start[i] <= rows - 1:
                running.append(self.episodes.running_chunk(i, self.buffers, int(self.seg_start[i]),
                                                           rows - 1, self.weights_seq_no))
        return running
