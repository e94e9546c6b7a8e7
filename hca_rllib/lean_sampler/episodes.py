"""Each env's running episode between the lean loop's fragments, and its chunks as
RLlib's `SingleAgentEpisode`.

A chunk holds what RLlib's path stores: observations including the last one, actions,
rewards, terminated/truncated, the extra model outputs `action_dist_inputs`,
`action_logp` and `weights_seq_no`, the same episode id across fragments and the same
lookback buffer (`episode_lookback_horizon` steps: the frames the learner's frame
stacking reaches back to). Infos are kept at the step where an episode ends (the
full-game score lives there) and are empty elsewhere.

A running episode keeps only what the next chunk needs (the lookback steps), not every
earlier chunk: RLlib's runner keeps all chunks of a running episode for its metrics,
about 1.5 GiB per runner for an Atari game at the 27k-step cap. What callbacks read of
the earlier chunks is one `PreviousChunks` summary.
"""

from __future__ import annotations

import time
import uuid
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO


class PreviousChunks:
    """What the lean runner keeps of a running episode's earlier chunks: their sums.

    Passed to ``on_episode_end`` as the one item of ``prev_episode_chunks``; it answers
    what callbacks read of those chunks (``get_return()``, ``len()``,
    ``get_duration_s()``, ``id_``, ``t_started``, ``t``) and holds no data."""

    __slots__ = ("id_", "t_started", "t", "_return", "_duration_s")

    def __init__(self, id_: str, t: int, ret: float, duration_s: float):
        self.id_, self.t_started, self.t = id_, 0, int(t)
        self._return, self._duration_s = float(ret), float(duration_s)

    def get_return(self) -> float:
        return self._return

    def get_duration_s(self) -> float:
        return self._duration_s

    def __len__(self) -> int:
        return self.t


class EpisodeEnd(NamedTuple):
    """A completed episode's totals: what the metrics and `on_episode_end` get."""

    length: int
    ret: float
    duration_s: float
    # `prev_episode_chunks` for `on_episode_end`: one PreviousChunks, or none when the
    # episode fits in its last chunk.
    previous: List[PreviousChunks]


class RunningEpisodes:
    """The running episode of each of `num_envs` envs: its id, its steps so far (`t`), the
    return of its earlier chunks (`ret`), when it started, and its last `lookback` steps
    (`carry`: what the next chunk's lookback buffer holds; observations before the
    current one, actions, rewards, extra model outputs)."""

    def __init__(self, num_envs: int, lookback: int, observation_space, action_space):
        self.lookback = int(lookback)
        self.observation_space, self.action_space = observation_space, action_space
        now = time.perf_counter()
        self.ids = [uuid.uuid4().hex for _ in range(num_envs)]
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.carry: List[Optional[Dict[str, np.ndarray]]] = [None] * num_envs
        self.ret = np.zeros(num_envs, dtype=np.float64)
        self.start = np.full(num_envs, now)

    def restart(self, i: int) -> None:
        """Env `i` starts a new episode (its autoreset)."""
        self.ids[i] = uuid.uuid4().hex
        self.t[i] = 0
        self.carry[i] = None
        self.ret[i] = 0.0
        self.start[i] = time.perf_counter()

    def held_steps(self) -> int:
        """Steps held for the running episodes between fragments (their lookback)."""
        return int(sum(len(c["actions"]) for c in self.carry if c is not None))

    def running_chunk(self, i: int, buffers, first: int, last: int, weights_seq_no: int
                      ) -> SingleAgentEpisode:
        """Env `i`'s chunk of rows `first..last` (real steps) of the fragment's `buffers`,
        its episode going on: the carried lookback in front; its last steps carried on."""
        episode, data, chunk_return = self._chunk(i, buffers, first, last, weights_seq_no, None)
        obs = data.pop("obs")
        m = min(self.lookback, len(data["actions"]))
        self.carry[i] = {
            "obs": obs[len(obs) - 1 - m:len(obs) - 1].copy(),
            **{key: value[len(value) - m:].copy() for key, value in data.items()},
        }
        self.t[i] = episode.t_started + (last - first + 1)
        self.ret[i] += chunk_return
        return episode

    def final_chunk(self, i: int, buffers, first: int, last: int, weights_seq_no: int,
                    info: dict) -> Tuple[SingleAgentEpisode, EpisodeEnd]:
        """Env `i`'s last chunk, its episode ended at row `last` with `info`, and the
        episode's totals. Its next step is its autoreset (`restart`)."""
        episode, _, chunk_return = self._chunk(i, buffers, first, last, weights_seq_no, info)
        ret = float(self.ret[i]) + chunk_return
        duration = time.perf_counter() - float(self.start[i])
        previous = ([PreviousChunks(episode.id_, episode.t_started, float(self.ret[i]), 0.0)]
                    if episode.t_started > 0 else [])
        self.carry[i] = None
        return episode, EpisodeEnd(int(episode.t), ret, duration, previous)

    def _chunk(self, i: int, b, first: int, last: int, weights_seq_no: int,
               end_info: Optional[dict]) -> Tuple[SingleAgentEpisode, Dict[str, np.ndarray], float]:
        """The chunk as a SingleAgentEpisode, its arrays with the lookback (observations,
        actions, rewards, extra model outputs), and the return of its own steps."""
        obs = b.obs[first:last + 2, i]
        extras = {
            Columns.ACTION_DIST_INPUTS: b.logits[first:last + 1, i],
            Columns.ACTION_LOGP: b.logp[first:last + 1, i],
        }
        actions = b.act[first:last + 1, i]
        rewards = b.rew[first:last + 1, i]
        carry = self.carry[i]
        if carry is not None:
            lb = len(carry["actions"])
            obs = np.concatenate([carry["obs"], obs])
            actions = np.concatenate([carry["actions"], actions])
            rewards = np.concatenate([carry["rewards"], rewards])
            extras = {key: np.concatenate([carry[key], value]) for key, value in extras.items()}
        else:
            lb = 0
            obs, actions, rewards = obs.copy(), actions.copy(), rewards.copy()
            extras = {key: value.copy() for key, value in extras.items()}
        extras[WEIGHTS_SEQ_NO] = np.full(len(actions), weights_seq_no, np.int64)
        if carry is not None:
            extras[WEIGHTS_SEQ_NO][:lb] = carry[WEIGHTS_SEQ_NO]
        infos = [{} for _ in range(len(obs))]
        terminated = truncated = False
        if end_info is not None:
            infos[-1] = end_info
            terminated = bool(b.term[last, i])
            truncated = bool(b.trunc[last, i])
        episode = SingleAgentEpisode(
            id_=self.ids[i], observations=obs, observation_space=self.observation_space,
            infos=infos, actions=actions, action_space=self.action_space, rewards=rewards,
            terminated=terminated, truncated=truncated, extra_model_outputs=extras,
            t_started=int(self.t[i]), len_lookback_buffer=lb)
        data = {"obs": obs, "actions": actions, "rewards": rewards, **extras}
        return episode, data, float(rewards[lb:].sum())
