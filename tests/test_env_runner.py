"""The lean EnvRunner (`sampler="lean"`, `hca_rllib.env_runner.LeanEnvRunner`) against
RLlib's SingleAgentEnvRunner: the same training batch when the envs are seeded alike
and the actions forced equal, sampled action frequencies that match the policy, running
episodes whose stored length stays bounded, and one-line errors for what it refuses."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from hca_rllib import A2CConfig, HCAConfig
from hca_rllib.hca import default_paths
from hca_rllib.env_runner import (DEFAULT_SAMPLER, LeanEnvRunner, PreviousChunks,
                                  StockStepLeanEnvRunner)
from hca_rllib.lean_sampler import vector_step
from hca_rllib.module import HCATorchRLModule


class CertainActionModule(HCATorchRLModule):
    """A policy whose sampled action is certain: logits 0 for the argmax of the module's
    own policy head and -1e4 for every other action (probability exactly 0 in float32),
    so it varies with the observation and any sampler takes the same action. The
    learner's passes (`policy_outputs`, values) are the usual ones."""

    def _forward(self, batch, **kwargs):
        logits = self.pi(self.pi_torso(batch[Columns.OBS]))
        chosen = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1])
        return {Columns.ACTION_DIST_INPUTS: (chosen.float() - 1.0) * 1e4}


FIXED_PROBS = np.array([0.2, 0.3, 0.5])


class FixedProbsModule(HCATorchRLModule):
    """A policy with fixed, known probabilities `FIXED_PROBS` in every state."""

    def _forward(self, batch, **kwargs):
        n = batch[Columns.OBS].shape[0]
        logits = torch.log(torch.tensor(FIXED_PROBS, dtype=torch.float32))
        return {Columns.ACTION_DIST_INPUTS: logits.expand(n, -1).clone()}


class Endless(gym.Env):
    """Never ends (no time limit): one running episode across every fragment."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), float(action), False, False, {}


ENDLESS_ID = "LeanRunnerTest/Endless-v0"
if ENDLESS_ID not in gym.envs.registry:
    gym.register(ENDLESS_ID, entry_point=Endless)


def _config(env, num_envs, fragment, module_class=None, seed=0, algo=A2CConfig):
    config = (algo().environment(env)
              .env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=fragment)
              .training(train_batch_size_per_learner=num_envs * fragment)
              .debugging(seed=seed))
    if env.startswith("atari/"):
        config.env_runners(gym_env_vectorize_mode="vector_entry_point")
    if module_class is not None:
        config.rl_module(rl_module_spec=RLModuleSpec(module_class=module_class))
    return config


def _runner(config, sampler):
    config = copy.deepcopy(config).env_runners(sampler=sampler)
    config.validate()
    return (LeanEnvRunner if sampler == "lean" else SingleAgentEnvRunner)(config=config)


def _learner_batch(learner, episodes):
    """The batch the learner sees: its connector pipeline on (a copy of) the episodes
    (frame stacking, the one artificial bootstrap step, returns, advantages, credit)."""
    batch = learner._learner_connector(rl_module=learner.module, batch={},
                                       episodes=copy.deepcopy(episodes), shared_data={},
                                       metrics=learner.metrics)
    return batch["default_policy"]


def _assert_same_batch(a, b, where):
    assert set(a) == set(b), (where, sorted(set(a) ^ set(b)))
    for key in ("obs", "actions", "rewards", "terminateds", "truncateds", "loss_mask",
                "returns", "advantages", "value_targets"):
        assert key in a, (where, key, sorted(a))
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape, (where, key, x.dtype, y.dtype, x.shape, y.shape)
            assert torch.equal(x, y), (where, key)


EQUIVALENCE_ENVS = [
    ("CartPole-v1", 4, 16),
    ("HCA/KeyToDoor-v0", 3, 5),
    ("minatar/Breakout", 4, 8),
    pytest.param("atari/Breakout", 2, 16, marks=pytest.mark.slow),  # frame stacking, C++ vector env
]


@pytest.mark.parametrize("env, num_envs, fragment", EQUIVALENCE_ENVS)
def test_same_training_batch_as_rllib_with_forced_actions(ray_local, env, num_envs, fragment):
    """Envs seeded alike, a policy whose action is certain: over 3 fragments (episodes
    that end, restart and continue across fragments), the learner's batch from the
    lean runner's episodes equals the one from RLlib's, column by column (HCA's
    connector: returns, advantages, value targets, classifier and credit columns)."""
    if env.startswith("atari/"):
        pytest.importorskip("ale_py")
    config = _config(env, num_envs, fragment, CertainActionModule, algo=HCAConfig)
    # RLlib's learner path: its connector computes every credit column (the lean path
    # computes them in the loss; tests/test_learner_path.py checks the two agree).
    algo = copy.deepcopy(config).env_runners(sampler="rllib").learners(learner_path="rllib").build_algo()
    try:
        learner = algo.learner_group._learner
        rllib, lean = _runner(config, "rllib"), _runner(config, "lean")
        lean.module.set_state(rllib.module.get_state())
        ids = {}
        for fragment_index in range(3):
            eps_rllib, eps_lean = rllib.sample(), lean.sample()
            assert [len(e) for e in eps_rllib] == [len(e) for e in eps_lean]
            for x, y in zip(eps_rllib, eps_lean):
                assert (x.t_started, x.t, x.is_terminated, x.is_truncated) == (
                    y.t_started, y.t, y.is_terminated, y.is_truncated)
                assert x.observations.lookback == y.observations.lookback
                # An episode continued from an earlier fragment keeps its id.
                if x.t_started > 0:
                    assert ids[x.id_] == y.id_
                ids[x.id_] = y.id_
            _assert_same_batch(_learner_batch(learner, eps_rllib), _learner_batch(learner, eps_lean),
                               (env, fragment_index))
        assert any(x.t_started > 0 for x in eps_rllib)  # continuation was exercised
        m_rllib, m_lean = rllib.get_metrics(), lean.get_metrics()
        for key in ("num_env_steps_sampled_lifetime", "num_episodes_lifetime", "episode_len_mean"):
            if key in m_rllib:
                assert m_lean[key].peek() == pytest.approx(m_rllib[key].peek()), key
    finally:
        algo.stop()


def test_same_episodes_as_rllib_under_the_same_seed():
    """With a stochastic policy, the lean runner draws its actions as RLlib's GetActions
    does (`torch.distributions.Categorical`, the same random stream), so the same seed
    gives the same episodes, action log-probs and logits included."""
    config = _config("CartPole-v1", 3, 12)
    rllib = _runner(config, "rllib")
    torch.manual_seed(0)
    eps_rllib = [rllib.sample() for _ in range(3)]
    lean = _runner(config, "lean")
    torch.manual_seed(0)
    eps_lean = [lean.sample() for _ in range(3)]
    for a, b in zip(eps_rllib, eps_lean):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            for name in ("observations", "actions", "rewards"):
                bx, by = getattr(x, name), getattr(y, name)
                assert bx.lookback == by.lookback and bx.data.dtype == by.data.dtype
                np.testing.assert_array_equal(bx.data, by.data)
            assert set(x.extra_model_outputs) == set(y.extra_model_outputs)
            for key, bx in x.extra_model_outputs.items():
                np.testing.assert_array_equal(bx.data, y.extra_model_outputs[key].data)


def _assert_action_frequencies(runner) -> None:
    """12 fragments of 8 x 64 steps: the action counts pass a chi-square test against
    FIXED_PROBS at p = 1e-6 (2 degrees of freedom: statistic < 27.6), and every stored
    log-prob is log p of the action taken."""
    counts = np.zeros(3)
    for _ in range(12):
        for episode in runner.sample():
            actions = episode.get_actions()
            counts += np.bincount(actions, minlength=3)
            logp = episode.get_extra_model_outputs(Columns.ACTION_LOGP)
            np.testing.assert_allclose(logp, np.log(FIXED_PROBS)[actions], rtol=1e-6)
    n = counts.sum()
    assert n >= 6_144
    expected = n * FIXED_PROBS
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.6, (counts, expected, chi2)


def test_sampled_action_frequencies_match_the_policy():
    """A policy with fixed probabilities (0.2, 0.3, 0.5) on MinAtar Breakout's three
    actions: the counts over 6,144 sampled steps pass a chi-square test at p = 1e-6
    (2 degrees of freedom: statistic < 27.6), which a greedy or uniform sampler fails by
    hundreds; every stored log-prob is log p of the action taken."""
    runner = _runner(_config("minatar/Breakout", 8, 64, FixedProbsModule), "lean")
    _assert_action_frequencies(runner)


@pytest.mark.slow  # 10 s of episodes growing in RLlib's runner
def test_running_episode_memory_stays_bounded():
    """An episode that never ends, over 40 fragments: the lean runner keeps only the
    lookback steps of it between fragments (each chunk it returns holds the fragment plus
    that lookback), while RLlib's runner keeps every earlier chunk for its metrics."""
    config = _config(ENDLESS_ID, 2, 10)
    lean, rllib = _runner(config, "lean"), _runner(config, "rllib")
    lookback = lean.config.episode_lookback_horizon
    for k in range(40):
        chunks = lean.sample()
        rllib.sample()
        assert len(chunks) == 2 and all(c.t_started == 10 * k for c in chunks)
        for chunk in chunks:
            assert len(chunk.observations.data) <= 10 + 1 + lookback
        assert lean.held_steps() <= 2 * lookback
    kept_by_rllib = sum(len(v) for v in rllib._ongoing_episodes_for_metrics.values())
    assert kept_by_rllib == 2 * 40  # what the lean runner does not keep


def test_episode_end_callback_sees_whole_episode_totals():
    """`on_episode_end` on the lean path: the last chunk plus one PreviousChunks summary,
    whose sums give the whole episode's return and length (as GameScoreCallback and
    user callbacks read them)."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    seen = []

    class Totals(RLlibCallback):
        def on_episode_end(self, *, episode, prev_episode_chunks=(), **kwargs):
            seen.append((episode.get_return() + sum(c.get_return() for c in prev_episode_chunks),
                         len(episode) + sum(len(c) for c in prev_episode_chunks), episode.t,
                         [type(c) for c in prev_episode_chunks]))

    runner = _runner(_config("CartPole-v1", 2, 8).callbacks(Totals), "lean")
    for _ in range(10):
        runner.sample()
    assert seen
    for ret, length, t, kinds in seen:
        assert ret == length == t  # CartPole: reward 1 per step
        assert all(kind is PreviousChunks for kind in kinds)
    assert any(kinds for *_, kinds in seen)  # some episodes spanned fragments


def test_bad_sampler_value_is_a_one_line_error():
    config = A2CConfig().environment("CartPole-v1").env_runners(sampler="fast")
    with pytest.raises(ValueError) as error:
        config.validate()
    assert str(error.value).splitlines()[0] == "sampler must be one of ['auto', 'lean', 'rllib'], got 'fast'"
    config = HCAConfig().environment("CartPole-v1")
    config.update_from_dict({"sampler": "Lean"})
    with pytest.raises(ValueError, match=r"^sampler must be one of \['auto', 'lean', 'rllib'\], got 'Lean'"):
        config.validate()


def test_lean_refuses_per_step_callbacks_and_user_connectors_auto_switches():
    """Explicit sampler="lean" refuses a per-step callback or a user connector in one
    line; "auto" (the default) takes RLlib's runner for them (tests/test_rllib_native.py
    trains with them)."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class PerStep(RLlibCallback):
        def on_episode_step(self, **kwargs):
            pass

    config = A2CConfig().environment("CartPole-v1").env_runners(sampler="lean").callbacks(PerStep)
    with pytest.raises(ValueError, match=r"^sampler='lean' cannot run this config: PerStep.on_episode_step "
                                         r"is defined \(the lean sampler makes no per-step episode "
                                         r"callbacks\); use sampler='auto' \(the default\) or 'rllib'"):
        config.validate()
    config.env_runners(sampler="rllib").validate()  # RLlib's loop takes them
    assert config.env_runner_cls is None
    config.env_runners(sampler="auto").validate()
    assert config.env_runner_cls is None and config.resolved_sampler == "rllib"

    config = A2CConfig().environment("CartPole-v1").env_runners(
        sampler="lean", env_to_module_connector=lambda env=None, spaces=None, device=None: [])
    with pytest.raises(ValueError, match=r"^sampler='lean' cannot run this config: env_to_module_connector "
                                         r"is set \(the lean sampler runs no user connectors\)"):
        config.validate()
    config.env_runners(sampler="auto").validate()
    assert config.env_runner_cls is None and config.resolved_sampler == "rllib"


def test_sampler_installs_the_env_runner_class():
    config = A2CConfig().environment("CartPole-v1")
    assert DEFAULT_SAMPLER == "auto" and config.sampler == default_paths()[0]  # HCA_RLLIB_PATHS
    config.env_runners(sampler="auto").validate()
    assert config.env_runner_cls is LeanEnvRunner and config.resolved_sampler == "lean"
    config.env_runners(sampler="lean").validate()
    assert config.env_runner_cls is LeanEnvRunner
    config.env_runners(sampler="rllib").validate()
    assert config.env_runner_cls is None  # RLlib picks SingleAgentEnvRunner

    class Mine(SingleAgentEnvRunner):
        pass

    config.env_runners(sampler="lean", env_runner_cls=Mine).validate()
    assert config.env_runner_cls is Mine  # a class the user set is kept


@pytest.mark.slow  # starts a remote EnvRunner actor (about 30 s on 2 busy cores)
def test_lean_trains_with_a_remote_env_runner(ray_local):
    """Remote EnvRunner actors of the lean class sample, sync weights and report the
    episode metrics the runner and report read."""
    config = (_config("CartPole-v1", 4, 32).env_runners(
        sampler="lean", num_env_runners=1, num_cpus_per_env_runner=0.5))
    algo = config.build_algo()
    try:
        for _ in range(3):
            result = algo.train()
        names = algo.env_runner_group.foreach_env_runner(lambda r: type(r).__name__,
                                                         local_env_runner=False)
        assert names == ["LeanEnvRunner"]
        assert result["env_runners"]["episode_return_mean"] > 0
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 3 * 128
    finally:
        algo.stop()


@pytest.mark.parametrize("env", ["CartPole-v1", "minatar/Breakout"])
def test_same_seed_trains_to_the_same_weights_on_both_samplers(ray_local, env):
    """End to end with a stochastic policy: A2C with the same seed, 3 iterations of
    sampling, learner update and weight sync on each sampler, ends with bitwise-equal
    learner weights: the lean path changes the speed, not the training."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # multi-threaded kernels may sum in another order
    weights = {}
    try:
        for sampler in ("rllib", "lean"):
            algo = _config(env, 4, 32).env_runners(sampler=sampler).build_algo()
            try:
                for _ in range(3):
                    algo.train()
                module = algo.learner_group._learner.module["default_policy"]
                weights[sampler] = {k: v.detach().clone() for k, v in module.state_dict().items()}
            finally:
                algo.stop()
    finally:
        torch.set_num_threads(threads)
    assert weights["rllib"].keys() == weights["lean"].keys()
    for key, value in weights["rllib"].items():
        assert torch.equal(value, weights["lean"][key]), key


def test_env_step_failure_recreates_the_envs_and_sampling_goes_on(tmp_path):
    """`restart_failed_sub_environments=True` on the lean path: an env that raises mid
    fragment is re-created and reset (RLlib's `_try_env_step` semantics), the fragment is
    sampled again from the fresh envs, and the failure is counted."""
    from hca_rllib.testing import FAIL_ONCE_ENV_ID

    marker = tmp_path / "failed_once"
    config = (_config(FAIL_ONCE_ENV_ID, 2, 16)
              .environment(env_config={"env_id": "CartPole-v1", "fail_at_step": 40,
                                       "marker": str(marker)})
              .fault_tolerance(restart_failed_sub_environments=True))
    runner = _runner(config, "lean")
    env_before = runner.env
    for _ in range(4):
        episodes = runner.sample()
        assert sum(len(e) for e in episodes) >= 32
        for episode in episodes:
            episode.validate()
    assert marker.exists() and runner.env is not env_before  # it failed and was re-created
    metrics = runner.get_metrics()
    assert metrics["num_env_step_failures"].peek() == 1


def test_num_episodes_and_random_actions_run_rllibs_loop_then_lean_resumes():
    """`sample(num_episodes=...)` (evaluation, `batch_mode="complete_episodes"`) and
    `random_actions=True` go through RLlib's own loop on the same runner; the lean loop
    then starts from freshly reset envs (new episodes, t_started 0)."""
    runner = _runner(_config("CartPole-v1", 2, 8), "lean")
    runner.sample()
    whole = runner.sample(num_episodes=3)
    assert len(whole) >= 3 and all(e.is_done and e.t_started == 0 for e in whole)
    after = runner.sample()
    assert all(e.t_started == 0 for e in after) and sum(len(e) for e in after) >= 16
    randomly = runner.sample(num_timesteps=20, random_actions=True)
    assert sum(len(e) for e in randomly) >= 20
    assert all(e.t_started == 0 for e in runner.sample())
    assert runner.get_metrics()["num_episodes_lifetime"].peek() >= 3


def _same_episode(x, y, where):
    assert (x.t_started, x.t, x.is_terminated, x.is_truncated) == (
        y.t_started, y.t, y.is_terminated, y.is_truncated), where
    for name in ("observations", "actions", "rewards"):
        bx, by = getattr(x, name), getattr(y, name)
        assert bx.lookback == by.lookback and bx.data.dtype == by.data.dtype, (where, name)
        np.testing.assert_array_equal(bx.data, by.data, err_msg=f"{where} {name}")
    assert set(x.extra_model_outputs) == set(y.extra_model_outputs), where
    for key, bx in x.extra_model_outputs.items():
        np.testing.assert_array_equal(bx.data, y.extra_model_outputs[key].data, err_msg=f"{where} {key}")
    assert x.get_infos(-1) == y.get_infos(-1), where


def test_lean_carry_holds_at_most_the_lookback_while_the_episode_grows():
    """One episode that never ends, 2 envs, 25 fragments of 7 steps, lookback 5: between
    fragments each env's carried state is exactly the last min(5, t) steps of the chunk
    it returned (every array the same length), while the episode's t keeps growing."""
    lookback, fragment = 5, 7
    config = _config(ENDLESS_ID, 2, fragment).env_runners(episode_lookback_horizon=lookback)
    runner = _runner(config, "lean")
    assert runner._lookback == lookback
    for k in range(25):
        chunks = runner.sample()
        episodes = runner._lean["episodes"]
        assert list(episodes.t) == [fragment * (k + 1)] * 2
        assert sorted(c.t for c in chunks) == [fragment * (k + 1)] * 2
        for chunk, carry in zip(sorted(chunks, key=lambda c: episodes.ids.index(c.id_)), episodes.carry):
            assert chunk.t_started == fragment * k and len(chunk) == fragment
            m = min(lookback, fragment * (k + 1))
            assert {key: len(value) for key, value in carry.items()} == {key: m for key in carry}
            actions = chunk.get_actions(indices=slice(-m, None), neg_index_as_lookback=False)
            np.testing.assert_array_equal(carry["actions"], actions)
            # The carried observations are the m before the chunk's last one.
            obs = chunk.observations.data
            np.testing.assert_array_equal(carry["obs"], obs[len(obs) - 1 - m:len(obs) - 1])


# ------------------------------------------------------- direct SyncVectorEnv step


class InfoEnv(gym.Env):
    """Short episodes of random length that end by termination or by truncation, with
    infos of several types at reset and at every step (float, int, bool, a nested dict,
    a key some steps have and others not)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._end = 0, int(self.np_random.integers(2, 9))
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, {"reset_draw": float(self.np_random.uniform())}

    def step(self, action):
        self._t += 1
        over = self._t >= self._end
        terminated = bool(over and self._end % 2)
        info = {"score": float(self.np_random.uniform()), "t": self._t, "flag": bool(action),
                "nested": {"end": self._end}}
        if self._t % 3 == 0:
            info["sometimes"] = np.float32(self._t)
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(action) - 0.5 * self._t, terminated, over and not terminated, info


INFO_ENV_ID = "LeanRunnerTest/Info-v0"
SHORT_CARTPOLE_ID = "LeanRunnerTest/CartPoleShort-v0"  # truncated at 9 steps
if INFO_ENV_ID not in gym.envs.registry:
    gym.register(INFO_ENV_ID, entry_point=InfoEnv)
if SHORT_CARTPOLE_ID not in gym.envs.registry:
    gym.register(SHORT_CARTPOLE_ID, entry_point="gymnasium.envs.classic_control:CartPoleEnv",
                 max_episode_steps=9)


def _assert_same_env_state(direct, stock, where):
    """The direct runner's own autoreset flags are those the stock vector env keeps
    (gymnasium 1.x's `_autoreset_envs`), and both runners go on from the same
    observations."""
    flags = stock.env.env._autoreset_envs
    np.testing.assert_array_equal(direct._lean["needs_reset"], flags, err_msg=f"{where} autoreset")
    np.testing.assert_array_equal(stock._lean["needs_reset"], flags, err_msg=f"{where} autoreset")
    assert direct._lean["obs"].dtype == stock._lean["obs"].dtype, where
    np.testing.assert_array_equal(direct._lean["obs"], stock._lean["obs"], err_msg=f"{where} obs")


def _assert_same_direct_episode(x, y, where):
    """`_same_episode` and every info of the episode, with its types."""
    _same_episode(x, y, where)
    ix, iy = x.get_infos(), y.get_infos()
    assert ix == iy, where
    assert [{k: type(v) for k, v in d.items()} for d in ix] == [
        {k: type(v) for k, v in d.items()} for d in iy], where


def _direct_and_stock(env, num_envs, fragment, env_config=None):
    from gymnasium.vector import SyncVectorEnv

    config = _config(env, num_envs, fragment, CertainActionModule)
    if env_config:
        config.environment(env_config=env_config)
    config = copy.deepcopy(config).env_runners(sampler="lean")
    config.validate()
    direct, stock = LeanEnvRunner(config=config), StockStepLeanEnvRunner(config=config)
    stock.module.set_state(direct.module.get_state())
    assert type(direct.env.env) is SyncVectorEnv and direct.steps_sub_envs()
    assert not stock.steps_sub_envs()
    return direct, stock


DIRECT_ENVS = [  # the fast tier runs the first and the typed-info env; the full suite all
    ("minatar/Breakout", 4, 24, None),
    pytest.param("minatar/Breakout", 3, 16, {"max_episode_steps": 11}, marks=pytest.mark.slow),  # truncations
    pytest.param("CartPole-v1", 4, 16, None, marks=pytest.mark.slow),
    pytest.param(SHORT_CARTPOLE_ID, 3, 10, None, marks=pytest.mark.slow),  # TimeLimit truncations
    (INFO_ENV_ID, 5, 7, None),
]


@pytest.mark.parametrize("env, num_envs, fragment, env_config", DIRECT_ENVS)
def test_direct_sync_step_samples_the_same_episodes(env, num_envs, fragment, env_config, monkeypatch):
    """The direct `SyncVectorEnv` step against the env's own `step`: envs seeded alike, a
    policy whose action is certain; over 6 fragments (episodes that end by termination
    and truncation, autoresets, episodes across fragments) the same episodes in the same
    order (observations with the lookback, actions, rewards, ends, t_started, logits,
    log-probs, every info with its type), the same episode ids across fragments, the
    same metrics, and the autoreset flags the vector env's own step keeps."""
    direct, stock = _direct_and_stock(env, num_envs, fragment, env_config)
    calls = []
    direct_step = vector_step.step_sub_envs
    monkeypatch.setattr(vector_step, "step_sub_envs", lambda *a: (calls.append(1), direct_step(*a))[1])
    ids, ended, truncated = {}, 0, 0
    for k in range(6):
        eps_direct, eps_stock = direct.sample(), stock.sample()
        assert len(eps_direct) == len(eps_stock), k
        for j, (x, y) in enumerate(zip(eps_direct, eps_stock)):
            _assert_same_direct_episode(x, y, (env, k, j))
            if x.t_started > 0:
                assert ids[x.id_] == y.id_
            ids[x.id_] = y.id_
            ended += x.is_done
            truncated += x.is_truncated
        _assert_same_env_state(direct, stock, (env, k))
    assert calls and ended and len(ids) > num_envs  # direct steps; episodes ended, restarted
    if env_config or env == SHORT_CARTPOLE_ID or env == INFO_ENV_ID:
        assert truncated
    if env == INFO_ENV_ID:
        assert any(x.get_infos(-1) for x in eps_direct if x.is_done)
    m_direct, m_stock = direct.get_metrics(), stock.get_metrics()
    for key in ("num_env_steps_sampled_lifetime", "num_episodes_lifetime", "episode_len_mean",
                "episode_return_mean"):
        if key in m_stock:
            assert m_direct[key].peek() == pytest.approx(m_stock[key].peek()), key


def test_direct_sync_step_comparison_catches_a_changed_reward(monkeypatch):
    """The comparison above can fail: one reward perturbed in the direct path's buffer
    (a step that ends no episode) makes an episode differ."""
    direct, stock = _direct_and_stock(INFO_ENV_ID, 3, 7)
    direct_step = vector_step.step_sub_envs
    count = [0]

    def perturbed(envs, autoreset, b, v, actions, env_infos):
        direct_step(envs, autoreset, b, v, actions, env_infos)
        count[0] += 1
        if count[0] == 10:
            b.rew[v, 1] += 1e-3

    monkeypatch.setattr(vector_step, "step_sub_envs", perturbed)
    with pytest.raises(AssertionError):
        for k in range(4):
            for j, (x, y) in enumerate(zip(direct.sample(), stock.sample())):
                _assert_same_direct_episode(x, y, (k, j))
    assert count[0] >= 10


def test_direct_sync_step_then_the_stock_step_carries_on():
    """The direct step leaves the vector env's own state as it was, so a runner switched
    to the env's own `step` resets the envs first (as RLlib's loop does after lean
    sampling): it samples what a stock runner reset at the same point samples (the
    sub-envs' random streams carry on); switched back, the direct step goes on from the
    stock step's state without a reset."""
    direct, stock = _direct_and_stock(INFO_ENV_ID, 4, 6)
    for k in range(3):
        for j, (x, y) in enumerate(zip(direct.sample(), stock.sample())):
            _assert_same_direct_episode(x, y, ("direct", k, j))
    direct.direct_vector_step = False
    for k in range(3):
        a, b = direct.sample(), stock.sample(force_reset=(k == 0))
        assert len(a) == len(b)
        for j, (x, y) in enumerate(zip(a, b)):
            assert x.t_started == 0 or k > 0
            _assert_same_direct_episode(x, y, ("stock after direct", k, j))
    direct.direct_vector_step = True
    for k in range(2):
        for j, (x, y) in enumerate(zip(direct.sample(), stock.sample())):
            _assert_same_direct_episode(x, y, ("direct again", k, j))
    # RLlib's loop (a reset, its own SyncVectorEnv.step), then the direct step again.
    a, b = direct.sample(num_episodes=2), stock.sample(num_episodes=2)
    assert [len(e) for e in a] == [len(e) for e in b]
    for k in range(2):
        for j, (x, y) in enumerate(zip(direct.sample(), stock.sample())):
            assert x.t_started == 0 or k > 0
            _assert_same_direct_episode(x, y, ("after rllib's loop", k, j))


class FramesEnv(gym.Env):
    """One-channel random frames, episodes of 3-11 steps ending by termination or
    truncation: for frame stacking on a SyncVectorEnv."""

    observation_space = gym.spaces.Box(0, 255, (6, 6, 1), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._end = 0, int(self.np_random.integers(3, 12))
        return self.np_random.integers(0, 256, (6, 6, 1), dtype=np.uint8), {}

    def step(self, action):
        self._t += 1
        over = self._t >= self._end
        obs = self.np_random.integers(0, 256, (6, 6, 1), dtype=np.uint8)
        return obs, float(action), bool(over and self._end % 2), bool(over and not self._end % 2), {"t": self._t}


FRAMES_ENV_ID = "LeanRunnerTest/Frames-v0"
if FRAMES_ENV_ID not in gym.envs.registry:
    gym.register(FRAMES_ENV_ID, entry_point=FramesEnv)


def test_direct_sync_step_with_frame_stacking():
    """The direct step under the lean loop's frame stack (3 frames, a SyncVectorEnv of
    Python envs): the same episodes, env state and rolling stacks as the stock step, and
    the policy's actions depend on the stacked frames."""
    config = (A2CConfig().environment(FRAMES_ENV_ID, frame_stack=3)
              .env_runners(num_envs_per_env_runner=3, rollout_fragment_length=10)
              .training(train_batch_size_per_learner=30).debugging(seed=0)
              .rl_module(rl_module_spec=RLModuleSpec(module_class=CertainActionModule),
                         model_config={"conv_filters": [[8, 3, 1, "valid"]], "conv_dense_hiddens": [16]}))
    config.validate()
    direct, stock = LeanEnvRunner(config=config), StockStepLeanEnvRunner(config=config)
    stock.module.set_state(direct.module.get_state())
    assert direct._observations.num_frames == 3 and direct.steps_sub_envs()
    actions, ended = set(), 0
    for k in range(5):
        eps_direct, eps_stock = direct.sample(), stock.sample()
        assert len(eps_direct) == len(eps_stock), k
        for j, (x, y) in enumerate(zip(eps_direct, eps_stock)):
            _assert_same_direct_episode(x, y, (k, j))
            actions.update(x.get_actions().tolist())
            ended += x.is_done
        _assert_same_env_state(direct, stock, k)
        np.testing.assert_array_equal(direct._lean["stack"], stock._lean["stack"])
    assert ended and len(actions) > 1
