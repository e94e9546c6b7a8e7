"""What an RLlib user does with any new-API-stack algorithm, done with HCA and A2C on
the package defaults (`sampler="auto"`, `learner_path="auto"`) and on RLlib's own paths.

Each use either runs on the lean paths (the default resolves to "lean": asserted, so a
gap in the lean path fails here) or the default selects RLlib's path by itself with one
log line naming the feature (asserted too). `HCA_RLLIB_PATHS=rllib` turns the "default"
cases into RLlib-path runs (`make test-rllib-paths`); the expectations below follow.
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.env_to_module import FlattenObservations, MeanStdFilter
from ray.rllib.core import COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, LEARNER_RESULTS

from hca_rllib import A2CConfig, HCAConfig
from hca_rllib.paths import default_paths
from hca_rllib.module import HCATorchRLModule

# "default": the config as built (sampler and learner_path "auto" unless HCA_RLLIB_PATHS
# says otherwise); "rllib": RLlib's runner and learner pieces, named.
PATHS = ("default", "rllib")
LOGGER = "hca_rllib.paths"  # where "auto" logs what it chose


def _small(config, path, num_envs=2, fragment=16):
    config = (config.env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=fragment)
              .training(train_batch_size_per_learner=num_envs * fragment)
              .debugging(seed=0))
    if path == "rllib":
        config.env_runners(sampler="rllib").learners(learner_path="rllib")
    return config


def _cartpole(path, algo=A2CConfig, **kwargs):
    return _small(algo().environment("CartPole-v1"), path, **kwargs)


def _default_is_auto() -> bool:
    return default_paths() == ("auto", "auto")


def _expect(config, path, sampler, learner_path):
    """The resolved paths: `sampler`/`learner_path` for the default config (with
    HCA_RLLIB_PATHS unset), RLlib's where named or where HCA_RLLIB_PATHS=rllib."""
    config.validate()
    if path == "rllib" or default_paths() == ("rllib", "rllib"):
        sampler = learner_path = "rllib"
    assert (config.resolved_sampler, config.resolved_learner_path) == (sampler, learner_path)


def _auto_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def _train(config, iterations=2):
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(iterations)]
    except BaseException:
        algo.stop()
        raise
    return algo, results


# ------------------------------------------------------------------------ small envs


class DictObsCorridor(gym.Env):
    """A corridor of 4 cells; observations a Dict of the cell (Discrete) and a Box
    noise; action 1 moves right, reward 1 at the right end."""

    observation_space = gym.spaces.Dict({
        "cell": gym.spaces.Discrete(4),
        "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    })
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        super().__init__()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return self._obs(), {}

    def _obs(self):
        return {"cell": self.cell, "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32)}

    def step(self, action):
        self.cell = min(3, self.cell + 1) if action == 1 else max(0, self.cell - 1)
        done = self.cell == 3
        return self._obs(), float(done), done, False, {}


class MultiDiscreteGrid(gym.Env):
    """A 3x3 grid observed as MultiDiscrete([3, 3]) (row, column); 4 moves, reward 1 at
    the corner (2, 2), at most 20 steps."""

    observation_space = gym.spaces.MultiDiscrete([3, 3])
    action_space = gym.spaces.Discrete(4)

    def __init__(self, config=None):
        super().__init__()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = np.array([0, 0]), 0
        return self.pos.copy(), {}

    def step(self, action):
        move = [(0, 1), (1, 0), (0, -1), (-1, 0)][int(action)]
        self.pos = np.clip(self.pos + move, 0, 2)
        self.t += 1
        done = bool((self.pos == 2).all())
        return self.pos.copy(), float(done), done, self.t >= 20, {}


class TemperatureModule(HCATorchRLModule):
    """A user's own RLModule: the stock policy's logits divided by 2 (its own forward
    pass, which the lean runner calls instead of its fused one)."""

    def _forward(self, batch, **kwargs):
        out = super()._forward(batch, **kwargs)
        out[Columns.ACTION_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS] / 2.0
        return out


class CountingLearnerPiece(ConnectorV2):
    """A user's learner connector piece: counts its calls, passes the batch on."""

    calls = 0

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        type(self).calls += 1
        return batch


# ------------------------------------------------------------------- the eight uses


@pytest.mark.parametrize("path", PATHS)
def test_rllib_checks_the_train_results(ray_local, path):
    from ray.rllib.utils.test_utils import check_train_results_new_api_stack

    config = _cartpole(path)
    _expect(config, path, "lean", "lean")
    algo, results = _train(config)
    try:
        for result in results:
            check_train_results_new_api_stack(result)
        assert results[-1][ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"] >= 64
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_rllib_evaluation_runs(ray_local, path):
    config = _cartpole(path).evaluation(evaluation_interval=1, evaluation_duration=2,
                                        evaluation_duration_unit="episodes")
    _expect(config, path, "lean", "lean")
    algo, results = _train(config, iterations=1)
    try:
        evaluation = results[-1]["evaluation"][ENV_RUNNER_RESULTS]
        assert evaluation["num_episodes"] >= 2
        assert evaluation["episode_return_mean"] >= 8  # CartPole: a reward per step, >= 8 steps
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_checkpoint_round_trip_and_module_from_checkpoint(ray_local, tmp_path, path):
    config = _cartpole(path, algo=HCAConfig)
    algo, _ = _train(config, iterations=1)
    try:
        algo.save_to_path(str(tmp_path / "ckpt"))
        weights = algo.get_module().get_state()
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    try:
        assert restored.config.sampler == config.sampler
        assert restored.config.resolved_sampler == config.resolved_sampler
        result = restored.train()
        assert result[ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"] >= 64
    finally:
        restored.stop()
    module_dir = tmp_path / "ckpt" / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE / DEFAULT_MODULE_ID
    module = RLModule.from_checkpoint(str(module_dir))
    obs = torch.zeros((3, 4))
    logits = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()
    for key, value in weights.items():  # the saved module is the trained one
        if key in module.get_state():
            np.testing.assert_allclose(module.get_state()[key], value, rtol=1e-6)


@pytest.mark.slow  # a Tune trial actor per path (about 15 s)
@pytest.mark.parametrize("path", PATHS)
def test_tune_runs_the_registered_algorithm(ray_local, tmp_path, path):
    from ray import tune

    config = _cartpole(path, algo=HCAConfig)
    tuner = tune.Tuner("HCA", param_space=config, run_config=tune.RunConfig(
        stop={"training_iteration": 2}, storage_path=str(tmp_path), verbose=0))
    results = tuner.fit()
    assert not results.errors
    assert results[0].metrics["training_iteration"] == 2
    assert results[0].config["sampler"] == config.sampler


def test_continuous_actions_are_refused_in_one_line():
    with pytest.raises(ValueError) as error:
        A2CConfig().environment("Pendulum-v1").validate()
    line = str(error.value).splitlines()[0]  # RLlib adds how to skip its validation
    assert "Pendulum-v1" in line and "Discrete action space" in line


@pytest.mark.parametrize("path", PATHS)
def test_mean_std_filter_takes_rllibs_runner_with_one_line(ray_local, caplog, path):
    caplog.set_level(logging.INFO, logger=LOGGER)
    config = _cartpole(path).env_runners(
        env_to_module_connector=lambda env=None, spaces=None, device=None: MeanStdFilter())
    _expect(config, path, "rllib", "lean")
    lines = _auto_lines(caplog)
    if path == "default" and _default_is_auto():
        assert lines == ["sampler: RLlib's SingleAgentEnvRunner for this run: env_to_module_connector "
                         "is set (the lean sampler runs no user connectors)"]
    algo, _ = _train(config, iterations=3)
    try:
        episodes = algo.env_runner.sample(num_timesteps=200, random_actions=False)
        obs = np.concatenate([e.get_observations(slice(0, len(e))) for e in episodes])
        # Filtered: every dimension near mean 0, std 1 (CartPole's raw pole angle has a
        # std of a few hundredths).
        assert np.all(np.abs(obs.mean(0)) < 1.0) and np.all(obs.std(0) > 0.3)
    finally:
        algo.stop()
    assert _auto_lines(caplog) == lines  # building and training logged nothing more


@pytest.mark.parametrize("path", PATHS)
def test_flatten_observations_connector_on_frozen_lake(ray_local, caplog, path):
    caplog.set_level(logging.INFO, logger=LOGGER)
    config = _small(A2CConfig().environment("FrozenLake-v1", env_config={"is_slippery": False}), path)
    config.env_runners(env_to_module_connector=lambda env=None, spaces=None, device=None:
                       FlattenObservations())
    _expect(config, path, "rllib", "lean")
    if path == "default" and _default_is_auto():
        assert len(_auto_lines(caplog)) == 1 and "env_to_module_connector" in _auto_lines(caplog)[0]
    algo, results = _train(config)
    try:
        episodes = algo.env_runner.sample(num_timesteps=16)
        assert episodes[0].get_observations(0).shape == (16,)  # one-hot, once
        assert results[-1][LEARNER_RESULTS][DEFAULT_MODULE_ID]["policy_loss"] == pytest.approx(
            results[-1][LEARNER_RESULTS][DEFAULT_MODULE_ID]["policy_loss"])  # finite
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_per_step_episode_callback_is_called_every_step(ray_local, caplog, path):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls = []
    config = _cartpole(path).callbacks(on_episode_step=lambda episode, **kw: calls.append(episode.id_))
    _expect(config, path, "rllib", "lean")
    if path == "default" and _default_is_auto():
        assert _auto_lines(caplog) == [
            "sampler: RLlib's SingleAgentEnvRunner for this run: config.callbacks_on_episode_step "
            "is set (the lean sampler makes no per-step episode callbacks)"]
    algo, results = _train(config)
    try:
        sampled = results[-1][ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"]
        assert len(calls) == sampled  # once per env step, in the driver's local runner
    finally:
        algo.stop()


# ------------------------------------------------------- more of what RLlib accepts


@pytest.mark.slow  # two EnvRunner actors (about 20 s on 2 busy cores)
@pytest.mark.parametrize("path", PATHS)
def test_two_remote_env_runners(ray_local, path):
    config = _cartpole(path).env_runners(num_env_runners=2, num_cpus_per_env_runner=0.25)
    _expect(config, path, "lean", "lean")
    algo, results = _train(config)
    try:
        assert results[-1][ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"] >= 64
        assert algo.env_runner_group.num_healthy_remote_workers() == 2
    finally:
        algo.stop()


@pytest.mark.slow  # two Learner actors with torch DDP (about 25 s)
@pytest.mark.parametrize("path", PATHS)
def test_two_learners(ray_local, path):
    config = _cartpole(path, algo=HCAConfig).learners(num_learners=2, num_cpus_per_learner=0.25)
    _expect(config, path, "lean", "lean")
    algo, results = _train(config)
    try:
        learner = results[-1][LEARNER_RESULTS][DEFAULT_MODULE_ID]
        assert np.isfinite(learner["policy_loss"])
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_dict_observations_are_flattened(ray_local, path):
    config = _small(A2CConfig().environment(DictObsCorridor), path)
    _expect(config, path, "lean", "lean")
    algo, results = _train(config)
    try:
        episodes = algo.env_runner.sample(num_timesteps=16)
        obs = episodes[0].get_observations(slice(0, len(episodes[0])))
        assert obs.shape[1:] == (6,)  # one-hot cell (4) + noise (2)
        np.testing.assert_array_equal(obs[:, :4].sum(1), 1.0)
        assert episodes[0].observation_space.shape == (6,)
        assert results[-1][ENV_RUNNER_RESULTS]["num_episodes_lifetime"] >= 1
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_multi_discrete_observations_are_one_hot(ray_local, path):
    config = _small(A2CConfig().environment(MultiDiscreteGrid), path)
    _expect(config, path, "lean", "lean")
    algo, results = _train(config)
    try:
        episodes = algo.env_runner.sample(num_timesteps=16, force_reset=True)
        obs = episodes[0].get_observations(slice(0, len(episodes[0])))
        assert obs.shape[1:] == (6,)  # one-hot row (3) + one-hot column (3)
        np.testing.assert_array_equal(obs.sum(1), 2.0)
        np.testing.assert_array_equal(obs[0], [1, 0, 0, 1, 0, 0])  # reset at (0, 0)
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_users_own_rl_module(ray_local, path):
    config = _cartpole(path).rl_module(rl_module_spec=RLModuleSpec(module_class=TemperatureModule))
    _expect(config, path, "lean", "lean")
    algo, _ = _train(config)
    try:
        module = algo.get_module()
        assert isinstance(module, TemperatureModule)
        episodes = algo.env_runner.sample(num_timesteps=32)
        logits = np.concatenate([e.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS, slice(0, len(e)))
                                 for e in episodes])
        obs = np.concatenate([e.get_observations(slice(0, len(e))) for e in episodes])
        with torch.no_grad():
            expected = module.forward_exploration({Columns.OBS: torch.from_numpy(obs)})
        np.testing.assert_allclose(logits, expected[Columns.ACTION_DIST_INPUTS].numpy(), rtol=1e-5, atol=1e-6)
    finally:
        algo.stop()


# ------------------------------------------------------------------- learner side


@pytest.mark.parametrize("path", PATHS)
def test_a_learner_connector_runs_on_either_learner_path(ray_local, caplog, path):
    caplog.set_level(logging.INFO, logger=LOGGER)
    CountingLearnerPiece.calls = 0
    config = _cartpole(path).learners(
        learner_connector=lambda obs_space, act_space: CountingLearnerPiece())
    _expect(config, path, "lean", "lean")
    assert _auto_lines(caplog) == []  # "auto" keeps the lean learner path
    algo, _ = _train(config, iterations=2)
    try:
        assert CountingLearnerPiece.calls == 2  # once per update
    finally:
        algo.stop()


@pytest.mark.parametrize("path", PATHS)
def test_epochs_and_minibatches_on_the_config_are_used(ray_local, path):
    config = _cartpole(path).training(num_epochs=2, minibatch_size=16)
    _expect(config, path, "lean", "lean")
    algo, results = _train(config, iterations=1)
    try:
        learner = results[-1][LEARNER_RESULTS][DEFAULT_MODULE_ID]
        # Minibatches of 16 rows (one full-batch step: 32 or 33), two epochs over the
        # batch of 32 (and RLlib's bootstrap rows): at least 64 rows trained.
        assert learner["module_train_batch_size_mean"] == 16
        assert learner["num_module_steps_trained"] >= 64
    finally:
        algo.stop()


# --------------------------------------------------------------------- resolution


def test_auto_resolution_is_logged_once_per_config(caplog):
    import copy

    caplog.set_level(logging.INFO, logger=LOGGER)
    config = A2CConfig().environment("CartPole-v1").env_runners(sampler="auto").learners(
        learner_path="auto").callbacks(on_episode_start=lambda **kw: None)
    config.validate()
    config.validate()
    copied = config.copy(copy_frozen=False)
    copied.validate()
    copy.deepcopy(config).validate()
    A2CConfig.from_dict(config.to_dict()).validate()  # Tune's and checkpoints' way
    assert _auto_lines(caplog) == [
        "sampler: RLlib's SingleAgentEnvRunner for this run: config.callbacks_on_episode_start "
        "is set (the lean sampler makes no per-step episode callbacks)"]
    assert (config.sampler, config.resolved_sampler, config.env_runner_cls) == ("auto", "rllib", None)
    # The resolution follows the config: without the callback the lean runner returns.
    config.callbacks(on_episode_start=None)
    config.validate()
    assert config.resolved_sampler == "lean" and config.env_runner_cls.__name__ == "LeanEnvRunner"


def test_explicit_lean_refuses_in_one_line():
    config = A2CConfig().environment("CartPole-v1").env_runners(sampler="lean").callbacks(
        on_episode_step=lambda **kw: None)
    with pytest.raises(ValueError) as error:
        config.validate()
    assert str(error.value).splitlines()[0] == (
        "sampler='lean' cannot run this config: config.callbacks_on_episode_step is set (the lean "
        "sampler makes no per-step episode callbacks); use sampler='auto' (the default) or 'rllib'")
    config = A2CConfig().environment("CartPole-v1").learners(
        learner_path="lean", add_default_connectors_to_learner_pipeline=False)
    with pytest.raises(ValueError) as error:
        config.validate()
    assert str(error.value).splitlines()[0] == (
        "learner_path='lean' cannot run this config: add_default_connectors_to_learner_pipeline is False "
        "(the lean learner path replaces RLlib's default pieces); use learner_path='auto' (the default) or 'rllib'")


def test_a_config_saved_with_the_lean_paths_still_loads():
    """Checkpoints and Tune configs written when "lean" was the default name it."""
    state = A2CConfig().environment("CartPole-v1").to_dict()
    state.update(sampler="lean", learner_path="lean")
    state.pop("_auto_paths_logged")  # not in configs saved before "auto"
    config = A2CConfig.from_dict(state)
    config.validate()
    assert (config.resolved_sampler, config.resolved_learner_path) == ("lean", "lean")


# --------------------------------------------------------------- learning on Discrete obs


@pytest.mark.learning
@pytest.mark.parametrize("algo", (A2CConfig, HCAConfig))
def test_frozen_lake_learns_from_one_hot_observations(ray_local, algo):
    """FrozenLake (4x4, not slippery) from its Discrete(16) observations as they come:
    a uniform random policy reaches the goal in about 1.5% of its episodes; after 30
    iterations the policy reaches it in most episodes and greedily."""
    config = _small(algo().environment("FrozenLake-v1", env_config={"is_slippery": False}),
                    "default", num_envs=8, fragment=16).training(lr=3e-3)
    _expect(config, "default", "lean", "lean")
    algo_, results = _train(config, iterations=30)
    try:
        assert results[-1][ENV_RUNNER_RESULTS]["episode_return_mean"] >= 0.8
        env = gym.make("FrozenLake-v1", is_slippery=False)
        obs, _ = env.reset(seed=0)
        module, total = algo_.get_module(), 0.0
        for _ in range(20):
            one_hot = torch.nn.functional.one_hot(torch.tensor([obs]), 16).float()
            logits = module.forward_inference({Columns.OBS: one_hot})[Columns.ACTION_DIST_INPUTS]
            obs, reward, terminated, truncated, _ = env.step(int(logits.argmax()))
            total += reward
            if terminated or truncated:
                break
        assert total == 1.0  # the greedy policy walks to the goal
    finally:
        algo_.stop()


def test_lean_runner_built_with_what_it_cannot_run():
    """The EnvRunner class itself: with sampler="auto" (a case only the built env or
    pipeline shows) it samples with RLlib's loop and says so once; with "lean" it refuses
    in one line."""
    from hca_rllib.env_runner import LeanEnvRunner

    def config_with(sampler):
        config = _cartpole("default")
        config.validate()
        # What validate() would have sent to RLlib's runner, set behind its back.
        config.env_runners(sampler=sampler,
                           env_to_module_connector=lambda env=None, spaces=None, device=None: MeanStdFilter())
        return config

    runner = LeanEnvRunner(config=config_with("auto"))
    try:
        episodes = runner.sample(num_timesteps=256)
        assert sum(len(e) for e in episodes) >= 256
        assert runner._lean is None  # the lean loop never ran
        obs = np.concatenate([e.get_observations(slice(0, len(e))) for e in episodes])
        assert np.all(obs.std(0) > 0.3)  # filtered (raw CartPole's pole angle: a few hundredths)
    finally:
        runner.stop()
    with pytest.raises(ValueError) as error:
        LeanEnvRunner(config=config_with("lean"))
    assert str(error.value) == (
        "sampler='lean' cannot run this config: env_to_module_connector is set (the lean sampler runs "
        "no user connectors); use sampler='auto' (the default) or 'rllib'")
