"""The two learner paths (`learner_path="lean"`, `"rllib"`) on the same episodes: the same
train-batch quantities (returns, value targets, advantages, credit weights W, masks), the
same classifier state and diagnostics, the same gradients and updated weights, for A2C
and every credit mode; episodes that terminate, hit the time limit, are cut at the
fragment end or continue from an earlier fragment; with frame stacking; with several
epochs and minibatches (the lean path then fixes the credit before the first step)."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

from hca_rllib import A2CConfig, HCAConfig, credit
from hca_rllib.connectors import BOOTSTRAP_VALUES, DEFAULT_LEARNER_PATH, LEARNER_PATHS, credit_steps
from hca_rllib.paths import default_paths
from hca_rllib.learner import all_finite
from hca_rllib.module import CREDIT_WEIGHTS, REMAINDER_TARGETS, RETURNS, WINDOW_REWARDS

MID = "default_policy"
NUM_ACTIONS = 3
COLUMNS = (Postprocessing.VALUE_TARGETS, Postprocessing.ADVANTAGES, CREDIT_WEIGHTS, RETURNS,
           Columns.ACTIONS, Columns.REWARDS, WINDOW_REWARDS, REMAINDER_TARGETS, "obs_sum")
ATOL = 1e-6

# (length, lookback, terminated, truncated): a chunk continuing an earlier fragment and
# cut again, one that terminates, one at the time limit, a fresh one cut at the fragment
# end, a one-step terminal chunk and a one-step cut chunk.
CHUNKS = [(6, 3, False, False), (4, 0, True, False), (5, 2, False, True), (7, 0, False, False),
          (1, 0, True, False), (1, 4, False, False)]


def _spaces(frames: int):
    if frames == 1:
        return gym.spaces.Box(-3.0, 3.0, (4,), np.float32), gym.spaces.Box(-3.0, 3.0, (4,), np.float32)
    raw = gym.spaces.Box(0, 255, (6, 6, 1), np.uint8)
    return raw, gym.spaces.Box(0, 255, (6, 6, frames), np.uint8)


def make_episodes(seed: int, frames: int = 1, chunks=CHUNKS):
    rng = np.random.default_rng(seed)
    raw, _ = _spaces(frames)
    action_space = gym.spaces.Discrete(NUM_ACTIONS)
    episodes = []
    for length, lookback, terminated, truncated in chunks:
        n = lookback + length
        if frames == 1:
            obs = [rng.normal(size=4).astype(np.float32) for _ in range(n + 1)]
        else:
            obs = [rng.integers(0, 256, (6, 6, 1)).astype(np.uint8) for _ in range(n + 1)]
        episode = SingleAgentEpisode(
            observations=obs, actions=[int(a) for a in rng.integers(0, NUM_ACTIONS, n)],
            # About 40% zero rewards (no reward event), some of them -0.0 (not one either).
            rewards=[float(r) * (rng.random() < 0.6) for r in rng.normal(size=n)], terminated=terminated, truncated=truncated,
            len_lookback_buffer=lookback, observation_space=raw, action_space=action_space)
        episode.to_numpy()
        episodes.append(episode)
    return episodes


def make_config(case: str, frames: int = 1):
    hindsight = {"hiddens": [16]}
    if case == "a2c":
        config = A2CConfig()
    elif case == "a2c_classifier":
        config = A2CConfig().training(hindsight_loss_coeff=1.0)
    elif case in ("hca", "c2a2c"):
        config = HCAConfig().training(credit=case)
    elif case == "expected_hca":
        config = HCAConfig().training(credit="expected_hca", trust="evidence")
    elif case == "hca_options":  # the classifier's other torso and encoding, extra passes
        config = HCAConfig().training(credit="hca", trust=None, hindsight_epochs=2, gamma=0.9, lambda_=0.8)
        hindsight = {"hiddens": [16], "torso": "shared", "return_encoding": "symlog"}
    elif case == "c2a2c_options":
        config = HCAConfig().training(credit="c2a2c", c2a2c_delta=0.01)
    elif case == "reward_outcome":  # one classifier input per (step, reward event), window 3;
        # the pure estimator, so that the weights are not A2C's (the trust starts at 0)
        config = HCAConfig().training(credit="expected_hca", trust=None, hindsight_epochs=2, gamma=0.9,
                                      lambda_=0.8)
        hindsight = {"hiddens": [16], "outcome": "reward", "window": 3}
    elif case == "reward_outcome_a2c":  # A2C's update, the reward classifier beside it
        config = A2CConfig().training(hindsight_loss_coeff=1.0)
        hindsight = {"hiddens": [16], "outcome": "reward", "window": 5, "torso": "separate"}
    else:
        raise ValueError(case)
    config = config.training(hindsight=hindsight, hindsight_lr=3e-3, lr=3e-3)
    model = {"fcnet_hiddens": [16, 16]} if frames == 1 else {
        "conv_filters": [[4, 3, 1, "valid"]], "conv_dense_hiddens": [16]}
    config = config.environment(frame_stack=frames).rl_module(model_config=model).debugging(seed=3)
    return config


CASES = ["a2c", "a2c_classifier", "hca", "c2a2c", "expected_hca", "hca_options", "c2a2c_options", "reward_outcome",
         "reward_outcome_a2c"]


class Recorder:
    """What a learner's update computed: the loss's batch columns (real rows), the
    gradients and the classifier's diagnostics."""

    def __init__(self, learner):
        self.batches, self.grads = [], []
        compute_loss, apply_gradients = learner.compute_loss_for_module, learner.apply_gradients

        def spy_loss(**kwargs):
            loss = compute_loss(**kwargs)
            batch = kwargs["batch"]
            mask = batch[Columns.LOSS_MASK].bool()
            self.batches.append({k: batch[k][mask].detach().clone() for k in COLUMNS if k in batch}
                                | {"rows": int(mask.numel()), Columns.OBS: batch[Columns.OBS][mask].clone()})
            return loss

        def spy_grads(gradients_dict):
            self.grads.append([None if g is None else g.detach().clone() for g in gradients_dict.values()])
            return apply_gradients(gradients_dict)

        learner.compute_loss_for_module = spy_loss
        learner.apply_gradients = spy_grads


def build(config, path, frames, state=None):
    config = copy.deepcopy(config).learners(learner_path=path)
    config.validate()
    _, stacked = _spaces(frames)
    learner = config.build_learner(spaces={MID: (stacked, gym.spaces.Discrete(NUM_ACTIONS))})
    if state is not None:
        learner.module[MID].set_state(state)
    return learner, Recorder(learner)


def module_state(learner):
    return {k: v.detach().clone() for k, v in learner.module[MID].unwrapped().state_dict().items()}


def diagnostics(results):
    keys = ("info/mutual_information", "hindsight/accuracy", "credit/trust", "credit/decision_trust",
            "hca/advantage_correlation", "vf_loss", "policy_loss", "hindsight_loss",
            "hindsight_loss_extra_passes", "num_module_steps_trained")
    return {k: results[MID][k] for k in keys if k in results[MID]}


def assert_same(a, b, what):
    assert a.shape == b.shape, f"{what}: shapes {a.shape} and {b.shape}"
    torch.testing.assert_close(a.double(), b.double(), atol=ATOL, rtol=1e-5, msg=lambda m: f"{what}: {m}")


def run_both(case, frames=1, updates=3, **update_kwargs):
    config = make_config(case, frames) if isinstance(case, str) else case
    lean, lean_rec = build(config, "lean", frames)
    rllib, rllib_rec = build(config, "rllib", frames, state=lean.module[MID].get_state())
    for name, tensor in module_state(lean).items():
        assert_same(tensor, module_state(rllib)[name], f"initial {name}")
    results = []
    for update in range(updates):
        episodes = make_episodes(100 * update + frames, frames)
        out_lean = lean.update(episodes=copy.deepcopy(episodes), **update_kwargs)
        out_rllib = rllib.update(episodes=copy.deepcopy(episodes), **update_kwargs)
        results.append((out_lean, out_rllib))
    return config, (lean, lean_rec), (rllib, rllib_rec), results


@pytest.mark.parametrize("case", CASES)
def test_both_paths_compute_the_same_update(case):
    config, (lean, lean_rec), (rllib, rllib_rec), results = run_both(case)
    real = sum(length for length, *_ in CHUNKS)
    assert len(lean_rec.batches) == len(rllib_rec.batches) == 3
    for update, (a, b) in enumerate(zip(lean_rec.batches, rllib_rec.batches)):
        # The lean batch has no artificial rows; RLlib's one row more per chunk.
        assert a["rows"] == real and b["rows"] == real + len(CHUNKS)
        assert set(a) == set(b)
        assert (RETURNS in a or WINDOW_REWARDS in a) == config.uses_hindsight
        for key in set(a) - {"rows"}:
            assert_same(a[key], b[key], f"update {update}: {key}")
    for update, (ga, gb) in enumerate(zip(lean_rec.grads, rllib_rec.grads)):
        assert len(ga) == len(gb)
        for i, (x, y) in enumerate(zip(ga, gb)):
            assert (x is None) == (y is None)
            if x is not None:
                assert_same(x, y, f"update {update}: gradient {i}")
    state_lean, state_rllib = module_state(lean), module_state(rllib)
    assert set(state_lean) == set(state_rllib)
    for name in state_lean:  # weights, the classifier's statistics, the trust state
        assert_same(state_lean[name], state_rllib[name], f"after 3 updates: {name}")
    for out_lean, out_rllib in results:
        d_lean, d_rllib = diagnostics(out_lean), diagnostics(out_rllib)
        steps = d_lean.pop("num_module_steps_trained"), d_rllib.pop("num_module_steps_trained")
        assert steps == (real, real + len(CHUNKS))  # RLlib's count includes its artificial rows
        assert d_lean.keys() == d_rllib.keys()
        for key in d_lean:
            assert abs(float(d_lean[key]) - float(d_rllib[key])) < 1e-5, key


@pytest.mark.parametrize("case", ["a2c", "hca", "expected_hca"])
def test_both_paths_agree_with_stacked_frames(case):
    _, (lean, lean_rec), (rllib, rllib_rec), _ = run_both(case, frames=4, updates=2)
    for a, b in zip(lean_rec.batches, rllib_rec.batches):
        # Observations stacked as RLlib's FrameStackingLearner stacks them (zeros before
        # an episode's first frame, the lookback across fragments).
        assert a[Columns.OBS].shape[1:] == (6, 6, 4) and torch.equal(a[Columns.OBS], b[Columns.OBS])
        for key in set(a) - {"rows"}:
            assert_same(a[key], b[key], key)
    for name, tensor in module_state(lean).items():
        assert_same(tensor, module_state(rllib)[name], name)


@pytest.mark.parametrize("case", ["a2c", "hca_options", "expected_hca", "reward_outcome"])
def test_several_epochs_fix_the_credit_before_the_first_step(case):
    # Two full-batch steps on each batch: the lean path computes the credit once, with
    # a no-grad pass before the first step (the weights change between the steps), as
    # RLlib's path does in its connector.
    _, (lean, lean_rec), (rllib, rllib_rec), _ = run_both(case, updates=2, num_epochs=2)
    assert len(lean_rec.batches) == len(rllib_rec.batches) == 4
    for a, b in zip(lean_rec.batches, rllib_rec.batches):
        for key in set(a) - {"rows"}:
            assert_same(a[key], b[key], key)
    for first, second in (lean_rec.batches[0:2], lean_rec.batches[2:4]):
        for key in set(first) - {"rows"}:  # the same credit on both epochs
            assert torch.equal(first[key], second[key]), key
    for name, tensor in module_state(lean).items():
        assert_same(tensor, module_state(rllib)[name], name)


def test_minibatches_get_the_credit_of_the_whole_batch_at_the_start():
    config = make_config("hca")
    single, single_rec = build(config, "lean", 1)
    mini, mini_rec = build(config, "lean", 1, state=single.module[MID].get_state())
    episodes = make_episodes(7)
    single.update(episodes=copy.deepcopy(episodes))
    mini.update(episodes=copy.deepcopy(episodes), num_epochs=2, minibatch_size=8)
    whole = single_rec.batches[0]
    assert len(mini_rec.batches) >= 6
    for part in mini_rec.batches:
        # Each minibatch row is found in the whole batch by its (unique) observation.
        rows = [int(torch.nonzero((whole[Columns.OBS] == o).all(-1))[0]) for o in part[Columns.OBS]]
        for key in (Postprocessing.VALUE_TARGETS, Postprocessing.ADVANTAGES, CREDIT_WEIGHTS, RETURNS):
            assert_same(part[key], whole[key][rows], key)


class ShapeRewards(ConnectorV2):
    """A user's learner piece: rewards reshaped in the episodes (2 r + obs[0]) and a
    per-step column (the observation's sum), as `CountBasedCuriosity` and RLlib's own
    pieces write them."""

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            observations = np.asarray(episode.get_observations(slice(0, len(episode))))
            shaped = 2.0 * np.asarray(episode.get_rewards()) + observations[:, 0]
            episode.set_rewards(new_data=shaped.astype(np.float32), at_indices=slice(0, len(episode)))
            self.add_n_batch_items(batch, "obs_sum", items_to_add=list(observations.sum(-1)),
                                   num_items=len(episode), single_agent_episode=episode)
        return batch


@pytest.mark.parametrize("case", ["a2c", "expected_hca", "reward_outcome"])
def test_a_users_learner_piece_gives_the_same_update_on_both_paths(case):
    config = make_config(case).training(learner_connector=lambda obs_space, act_space: ShapeRewards())
    _, (lean, lean_rec), (rllib, rllib_rec), _ = run_both(config, updates=2)
    for a, b in zip(lean_rec.batches, rllib_rec.batches):
        for key in set(a) - {"rows"}:
            assert_same(a[key], b[key], key)
        assert_same(a["obs_sum"], a[Columns.OBS].sum(-1), "the user's column")
    first = make_episodes(1)  # the rewards the learner saw are the shaped ones
    observations = np.concatenate([e.get_observations(slice(0, len(e))) for e in first])
    rewards = np.concatenate([e.get_rewards() for e in first])
    assert_same(lean_rec.batches[0][Columns.REWARDS], torch.as_tensor(2 * rewards + observations[:, 0]), "rewards")
    for name, tensor in module_state(lean).items():
        assert_same(tensor, module_state(rllib)[name], name)


@pytest.mark.parametrize("case", ["short", "long", "not_per_step"])
def test_a_users_column_must_have_one_item_per_step(case):
    learner, _ = build(make_config("a2c"), "lean", 1)
    episodes = make_episodes(2)
    first = episodes[0]  # 6 steps

    class Column(ConnectorV2):
        def __call__(self, *, rl_module, batch, episodes, **kwargs):
            if case == "not_per_step":
                self.add_batch_item(batch, "col", 0.0)
                return batch
            for e in episodes:
                n = len(e) + (-1 if case == "short" else 1) * (e is first)
                self.add_n_batch_items(batch, "col", [0.0] * n, n, single_agent_episode=e)
            return batch

    learner._learner_connector.prepend(Column())
    message = {"short": "has 5 items for an episode chunk of 6 steps",
               "long": f"has 1 more item than episode '{first.id_}' has steps",
               "not_per_step": "is not per episode step"}[case]
    with pytest.raises(ValueError, match=f"^learner connector column 'col' {message}"):
        learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=None)


def test_bootstrap_values_are_the_values_after_each_cut():
    config = make_config("a2c")
    learner, _ = build(config, "lean", 1)
    episodes = make_episodes(5)
    batch = learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes,
                                       shared_data={}, metrics=None)[MID]
    module = learner.module[MID].unwrapped()
    ends = np.cumsum([len(e) for e in episodes]) - 1
    expected = torch.zeros(len(batch[Columns.OBS]))
    for end, episode in zip(ends, episodes):
        assert bool(batch[Columns.TERMINATEDS][end]) == episode.is_terminated
        assert bool(batch[Columns.TRUNCATEDS][end]) == (not episode.is_terminated)
        if not episode.is_terminated:
            last = torch.as_tensor(episode.get_observations(-1))[None]
            with torch.no_grad():
                expected[end] = module.compute_values({Columns.OBS: last})[0]
    assert int(batch[Columns.TERMINATEDS].sum() + batch[Columns.TRUNCATEDS].sum()) == len(episodes)
    assert_same(batch[BOOTSTRAP_VALUES], expected, "bootstrap values")
    # The episodes are read, not extended (RLlib's path adds a step to each).
    assert [len(e) for e in episodes] == [length for length, *_ in CHUNKS]


def test_lean_layout_returns_match_the_padded_layout():
    """The same steps in both layouts give the same `credit` inputs (`credit_steps`), so
    the same returns, GAE and chunks."""
    rng = np.random.default_rng(0)
    lengths, terminated = [4, 1, 6, 3], [True, False, False, True]
    rewards, values, boot, flags = [], [], [], []
    padded = {"r": [], "v": [], "term": [], "trunc": [], "mask": []}
    for length, term in zip(lengths, terminated):
        r, v, b = rng.normal(size=length), rng.normal(size=length), rng.normal()
        rewards += list(r)
        values += list(v)
        boot += [0.0] * (length - 1) + [0.0 if term else b]
        flags += [(False, False)] * (length - 1) + [(term, not term)]
        padded["r"] += list(r) + [0.0]
        padded["v"] += list(v) + [b]
        padded["term"] += [False] * (length - 1) + [term, False]
        padded["trunc"] += [False] * (length - 1) + [not term, False]
        padded["mask"] += [True] * length + [False]
    t = lambda x, dtype=torch.float32: torch.tensor(x, dtype=dtype)  # noqa: E731
    lean = {Columns.REWARDS: t(rewards), Columns.TERMINATEDS: t([f[0] for f in flags], torch.bool),
            Columns.TRUNCATEDS: t([f[1] for f in flags], torch.bool), BOOTSTRAP_VALUES: t(boot)}
    rllib = {Columns.REWARDS: t(padded["r"]), Columns.TERMINATEDS: t(padded["term"], torch.bool),
             Columns.TRUNCATEDS: t(padded["trunc"], torch.bool), Columns.LOSS_MASK: t(padded["mask"], torch.bool)}
    a, b = credit_steps(lean, t(values)), credit_steps(rllib, t(padded["v"]))
    assert a.rows is None and torch.equal(b.rows, torch.nonzero(t(padded["mask"], torch.bool)).squeeze(-1))
    for name in ("rewards", "values", "terminateds", "truncateds"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # V(s_{t+1}) after a terminal step (not read): 0 on the lean layout, the artificial row's on RLlib's.
    live = ~a.terminateds
    assert torch.equal(a.next_values[live], b.next_values[live])
    for x, y in ((credit.discounted_returns(a.rewards, a.next_values, a.terminateds, a.truncateds, 0.9),
                  credit.discounted_returns(b.rewards, b.next_values, b.terminateds, b.truncateds, 0.9)),
                 (credit.gae_advantages(*a[:5], 0.9, 0.7), credit.gae_advantages(*b[:5], 0.9, 0.7)),
                 (credit.chunk_ids(a.terminateds, a.truncateds), credit.chunk_ids(b.terminateds, b.truncateds))):
        torch.testing.assert_close(x, y)


def test_learner_path_is_validated_and_defaults_to_auto():
    assert DEFAULT_LEARNER_PATH == "auto" and HCAConfig().learner_path == default_paths()[1]
    assert LEARNER_PATHS == ("lean", "rllib")
    with pytest.raises(ValueError, match=r"learner_path must be one of \['auto', 'lean', 'rllib'\], got 'fast'"):
        HCAConfig().environment("CartPole-v1").learners(learner_path="fast").validate()
    with pytest.raises(ValueError, match="^learner_path='lean' cannot run this config: add_default_connectors_to"):
        HCAConfig().environment("CartPole-v1").learners(
            learner_path="lean", add_default_connectors_to_learner_pipeline=False).validate()
    for path in ("rllib", "auto"):  # RLlib's path takes it; "auto" picks it
        config = HCAConfig().environment("CartPole-v1").learners(
            learner_path=path, add_default_connectors_to_learner_pipeline=False)
        config.validate()
        assert config.resolved_learner_path == "rllib" and not config.uses_lean_learner
    for path in ("lean", "auto"):  # the user's learner pieces run on the lean path
        config = HCAConfig().environment("CartPole-v1").learners(learner_path=path,
                                                                  learner_connector=lambda *a, **k: [])
        config.validate()
        assert config.uses_lean_learner
    config = HCAConfig().environment("CartPole-v1").learners(learner_path="auto")
    config.validate()
    assert config.resolved_learner_path == "lean" and config.uses_lean_learner


def test_hca_rllib_paths_switches_both_defaults(monkeypatch):
    """HCA_RLLIB_PATHS (what `make test-rllib-paths` sets for the whole suite): unset or
    "auto", the lean sampler and learner path where the config allows; "lean", the lean
    paths (refusing what they do not support); "rllib", RLlib's own runner and learner
    connectors; anything else, a one-line error naming the variable. An explicit setting
    always wins."""
    from hca_rllib.env_runner import LeanEnvRunner

    monkeypatch.delenv("HCA_RLLIB_PATHS", raising=False)
    assert default_paths() == ("auto", "auto")
    config = HCAConfig().environment("CartPole-v1")
    assert (config.sampler, config.learner_path) == ("auto", "auto")
    config.validate()
    assert config.env_runner_cls is LeanEnvRunner and config.uses_lean_learner
    assert (config.resolved_sampler, config.resolved_learner_path) == ("lean", "lean")
    monkeypatch.setenv("HCA_RLLIB_PATHS", "auto")
    assert default_paths() == ("auto", "auto")
    monkeypatch.setenv("HCA_RLLIB_PATHS", "lean")
    assert default_paths() == ("lean", "lean")
    monkeypatch.setenv("HCA_RLLIB_PATHS", "rllib")
    config = HCAConfig().environment("CartPole-v1")
    assert (config.sampler, config.learner_path) == ("rllib", "rllib")
    config.validate()
    assert config.env_runner_cls is None and not config.uses_lean_learner
    config = HCAConfig().environment("CartPole-v1").env_runners(sampler="lean").learners(learner_path="lean")
    config.validate()
    assert config.env_runner_cls is LeanEnvRunner and config.uses_lean_learner
    monkeypatch.setenv("HCA_RLLIB_PATHS", "fast")
    with pytest.raises(ValueError) as error:
        HCAConfig()
    assert str(error.value) == "HCA_RLLIB_PATHS must be one of ['auto', 'lean', 'rllib'], got 'fast'"


def test_all_finite_is_the_elementwise_check():
    finite = [torch.ones(3), None, torch.zeros(2, 2)]
    assert all_finite(finite) and all_finite([])
    for bad in (float("nan"), float("inf"), -float("inf")):
        tensors = [torch.ones(3), torch.tensor([[1.0, bad]])]
        assert not all_finite(tensors)
    assert all_finite([torch.full((4,), 3e38)])  # large but finite
