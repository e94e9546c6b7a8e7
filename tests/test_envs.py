"""The environment resolver and its families: Atari (both protocols, Python and C++
pipelines), MinAtar, bsuite, key-to-door, gymnasium's ``module:Env`` ids, and every error."""

import math
import re
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import hca_rllib  # noqa: F401  (registers the ids)
from hca_rllib import HCAConfig
from hca_rllib.envs import KeyToDoor, key_to_door_values, resolve_env
from hca_rllib.envs.atari import make_atari, make_atari_vector
from hca_rllib.envs.minatar import MINATAR_GAMES

SMALL = dict(num_envs_per_env_runner=2, rollout_fragment_length=32)


# ---------------------------------------------------------------------------------------
# Atari: one adapter over both implementations of a protocol.
# ---------------------------------------------------------------------------------------


class OneEnv:
    """Steps the Python pipeline (gymnasium autoreset by hand) or the C++ vector env with
    one sub-env, through the same interface: step(a) -> obs, r, terminated, truncated, info."""

    def __init__(self, impl, game, protocol="classic", **kwargs):
        self.impl = impl
        if impl == "python":
            self.env = make_atari(game, protocol, **kwargs)
        else:
            self.env = make_atari_vector(game, protocol, num_envs=1, num_threads=1, **kwargs)
        self.action_space = self.env.action_space if impl == "python" else self.env.single_action_space
        self._needs_reset = False

    def reset(self, seed):
        obs, info = self.env.reset(seed=seed)
        return obs if self.impl == "python" else obs[0]

    def step(self, action):
        if self.impl == "python":
            if self._needs_reset:  # gymnasium's next-step autoreset, as RLlib sees it
                self._needs_reset = False
                obs, info = self.env.reset()
                return obs, 0.0, False, False, info
            obs, r, term, trunc, info = self.env.step(action)
            self._needs_reset = term or trunc
            return obs, r, term, trunc, info
        obs, r, term, trunc, info = self.env.step(np.array([action]))
        one = {k: v[0] for k, v in info.items() if not k.startswith("_") and (f"_{k}" not in info or info[f"_{k}"][0])}
        return obs[0], float(r[0]), bool(term[0]), bool(trunc[0]), one


IMPLS = ["python", "native"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("protocol", ["classic", "machado"])
def test_atari_observations_are_single_uint8_frames(impl, protocol):
    env = OneEnv(impl, "Pong", protocol)
    obs = env.reset(seed=0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    assert env.action_space == gym.spaces.Discrete(6)  # Pong's minimal action set
    obs, *_ = env.step(0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    assert 0 < obs.mean() < 255  # a real screen, not a blank


@pytest.mark.parametrize("impl", IMPLS)
def test_sticky_actions_in_machado_only(impl):
    """Pong without noops is deterministic given the actions, unless actions stick: the
    same actions under two seeds give the same game in the classic protocol and
    different games in Machado's (sticky actions 0.25)."""

    def frames(protocol, seed):
        env = OneEnv(impl, "Pong", protocol, noop_max=0, fire_reset=False)
        env.reset(seed=seed)
        rng = np.random.default_rng(123)
        return np.stack([env.step(int(rng.integers(6)))[0] for _ in range(150)])

    assert np.array_equal(frames("classic", 1), frames("classic", 2))
    assert not np.array_equal(frames("machado", 1), frames("machado", 2))
    if impl == "python":
        ale = make_atari("Pong", "classic").unwrapped.ale
        assert ale.getFloat("repeat_action_probability") == 0.0
        ale = make_atari("Pong", "machado").unwrapped.ale
        assert ale.getFloat("repeat_action_probability") == pytest.approx(0.25)


def _play_one_game(impl, protocol, game="SpaceInvaders", seed=3, clip_rewards=True):
    env = OneEnv(impl, game, protocol, clip_rewards=clip_rewards)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    rewards, episodes_ended = [], 0
    for _ in range(20_000):
        _, r, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
        rewards.append(r)
        episodes_ended += term or trunc
        if "game_return" in info:
            return np.array(rewards), episodes_ended, float(info["game_return"]), int(info["game_length"])
    raise AssertionError("game did not end")


@pytest.mark.parametrize("impl", IMPLS)
def test_rewards_clipped_for_training_and_game_score_is_full_and_unclipped(impl):
    clipped, episodes, score, length = _play_one_game(impl, "classic")
    raw, _, raw_score, _ = _play_one_game(impl, "classic", clip_rewards=False)
    # Same seed, same actions: the same game, seen clipped and unclipped.
    assert np.array_equal(clipped, np.sign(raw))
    assert set(np.unique(clipped)) <= {-1.0, 0.0, 1.0}
    assert raw.max() >= 5  # Space Invaders pays 5 to 30 per invader: clipping is visible
    assert score == raw_score == pytest.approx(raw.sum())
    assert score > clipped.sum() > 0
    # Classic protocol: one training episode per life (SpaceInvaders has 3).
    assert episodes == 3
    # Agent steps of the game, give or take the protocol's own FIRE/NOOP step per life.
    assert abs(length - len(raw)) <= episodes


@pytest.mark.parametrize("impl", IMPLS)
def test_machado_protocol_keeps_the_game_as_one_episode(impl):
    clipped, episodes, score, _ = _play_one_game(impl, "machado")
    assert episodes == 1
    assert score > clipped.sum() > 0


def test_python_and_native_pipelines_play_the_same_game():
    """Same protocol, two implementations: without noops and fire reset (whose timing
    differs: one agent step in Python, one frame in ale-py), identical actions give
    identical rewards and terminations and frames equal up to resize rounding."""
    py = OneEnv("python", "Pong", noop_max=0, fire_reset=False)
    native = OneEnv("native", "Pong", noop_max=0, fire_reset=False)
    py.reset(seed=0)
    native.reset(seed=0)
    rng = np.random.default_rng(0)
    pixel_gap, rewards = [], 0
    for _ in range(600):
        action = int(rng.integers(6))
        a, b = py.step(action), native.step(action)
        assert a[1:4] == b[1:4]
        rewards += abs(a[1])
        pixel_gap.append(np.abs(a[0].astype(int) - b[0].astype(int)).mean())
    assert rewards >= 3  # points were scored on the way, so rewards were compared
    assert np.mean(pixel_gap) < 2.0


def test_atari_ids_cover_every_ale_game_in_both_protocols():
    from ale_py import roms

    games = len(roms.get_all_rom_ids())
    atari = [k for k in gym.envs.registry if k.startswith("atari/")]
    machado = [k for k in gym.envs.registry if k.startswith("atari-machado/")]
    assert len(atari) == len(machado) == games >= 100
    for env_id in ("atari/SpaceInvaders", "atari/Pong", "atari-machado/MontezumaRevenge"):
        assert env_id in gym.envs.registry


# ---------------------------------------------------------------------------------------
# Frame stacking through RLlib: connectors, no copies in episodes, order at fragment cuts.
# ---------------------------------------------------------------------------------------


def _expected_stack(counter, frames=4):
    return np.array([max(counter - frames + 1 + k, 0) for k in range(frames)])


def test_frame_stack_holds_the_last_four_frames_in_order_across_fragments(ray_local):
    from ray.rllib.core.columns import Columns

    config = (
        HCAConfig()
        .environment("user_envs:CounterFrames-v0", frame_stack=4)
        .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=5)
        .training(train_batch_size_per_learner=5)
        .rl_module(model_config={"conv_filters": [[4, 8, 8, "valid"]], "conv_dense_hiddens": [8]})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        runner = algo.env_runner
        assert algo.config.episode_lookback_horizon >= 3
        assert runner.module.observation_space.shape == (84, 84, 4)
        learner = algo.learner_group._learner
        checked_cuts = 0
        for _ in range(4):
            episodes = runner.sample(num_timesteps=5, random_actions=True)
            for episode in episodes:
                # Episodes store each frame once.
                assert episode.get_observations().shape[1:] == (84, 84, 1)
            # The stack the policy sees for the first step of the next fragment.
            batch = runner._env_to_module(episodes=runner._ongoing_episodes, batch={}, explore=False,
                                          rl_module=runner.module, shared_data={}, metrics=runner.metrics)
            obs = np.asarray(batch[Columns.OBS])[0]
            counter = int(obs[0, 0, -1])
            assert np.array_equal(obs[0, 0], _expected_stack(counter)), obs[0, 0]
            checked_cuts += counter > 4  # a cut inside an episode, reaching into the lookback
            # The stacks the learner trains on, row by row.
            train = learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes,
                                               shared_data={}, metrics=learner.metrics)
            rows = np.asarray(train["default_policy"][Columns.OBS])[:, 0, 0]
            for row in rows:
                assert np.array_equal(row, _expected_stack(int(row[-1]))), row
        assert checked_cuts >= 2
    finally:
        algo.stop()


# ---------------------------------------------------------------------------------------
# Short trainings from the resolver.
# ---------------------------------------------------------------------------------------


def _train(config, min_steps):
    algo = config.build_algo()
    try:
        before = {k: v.clone() for k, v in algo.learner_group._learner.module["default_policy"].state_dict().items()}
        result = algo.train()
        while result["num_env_steps_sampled_lifetime"] < min_steps:
            result = algo.train()
        after = algo.learner_group._learner.module["default_policy"].state_dict()
        changed = [k for k in before if k.startswith("pi") and not torch.equal(before[k], after[k])]
        assert changed, "policy weights did not move"
        learner = result["learners"]["default_policy"]
        assert math.isfinite(learner["total_loss"]) if "total_loss" in learner else True
        assert math.isfinite(learner["policy_loss"])
        return algo, result
    except BaseException:
        algo.stop()
        raise


@pytest.mark.slow  # sync plays whole Pong games: 50 s at low load; vector 6-30 s
@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_hca_trains_on_pong(ray_local, mode):
    config = (
        HCAConfig()
        .environment("atari/Pong")
        .env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode=mode)
        .training(train_batch_size_per_learner=256)
        .debugging(seed=0)
    )
    algo, result = _train(config, 1024)
    try:
        assert algo.env_runner.module.observation_space.shape == (84, 84, 4)
        if mode == "sync":
            # A near-random Pong game lasts about 800-1,000 agent steps (4 envs).
            for _ in range(40):
                if np.isfinite(result["env_runners"].get("game_return_mean", np.nan)):
                    break
                result = algo.train()
            env_runners = result["env_runners"]
            assert -21 <= env_runners["game_return_mean"] <= -10
            assert env_runners["game_length_mean"] > 500
            info = result["learners"]["default_policy"]
            assert math.isfinite(info["info/mutual_information"])
    finally:
        algo.stop()


@pytest.mark.slow  # an Atari game played to its end (about 12 s)
def test_logged_game_return_sums_all_lives_while_training_sees_lives(ray_local):
    config = (
        HCAConfig()
        .environment("atari/Breakout")
        .env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")
        .training(train_batch_size_per_learner=512)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        result = {}
        for _ in range(10):
            result = algo.train()
            if result["env_runners"].get("game_return_mean") is not None:
                break
        env_runners = result["env_runners"]
        # Five lives per game: the game's return spans several training episodes.
        assert env_runners["game_return_mean"] is not None
        assert env_runners["game_length_mean"] > 2 * env_runners["episode_len_mean"]
    finally:
        algo.stop()


@pytest.mark.parametrize("game", sorted(MINATAR_GAMES))
def test_hca_trains_on_every_minatar_game(ray_local, game):
    config = (
        HCAConfig()
        .environment(f"minatar/{game}")
        .env_runners(**SMALL)
        .training(train_batch_size_per_learner=64)
        .debugging(seed=0)
    )
    algo, result = _train(config, 128)
    try:
        space = algo.env_runner.module.observation_space
        assert space.shape[:2] == (10, 10) and space.dtype == np.uint8
        # MinAtar's own network: one 3x3 conv with 16 channels, then 128 units.
        assert algo.config.model_config["conv_filters"] == [[16, 3, 1, "valid"]]
        widths = [m.out_features for m in algo.env_runner.module.pi_torso.modules() if isinstance(m, torch.nn.Linear)]
        assert widths == [128]
    finally:
        algo.stop()


def test_minatar_observations_and_actions():
    for game, expected_actions in {"Breakout": 3, "Freeway": 3, "Asterix": 5, "Seaquest": 6, "SpaceInvaders": 4}.items():
        env = gym.make(f"minatar/{game}")
        obs, _ = env.reset(seed=0)
        assert obs.dtype == np.uint8 and obs.shape[:2] == (10, 10)
        assert set(np.unique(obs)) <= {0, 255}
        assert env.action_space == gym.spaces.Discrete(expected_actions)
        first = [env.step(0)[0] for _ in range(5)]
        env.reset(seed=0)
        assert all(np.array_equal(a, env.step(0)[0]) for a in first)  # seeded


@pytest.mark.parametrize("version, minimal", [("v1", True), ("v0", False)])
@pytest.mark.parametrize("game", sorted(MINATAR_GAMES))
def test_minatar_own_ids_are_the_same_game(game, version, minimal):
    """``MinAtar/<Game>-v1`` / ``-v0`` (MinAtar's ids) resolve to our env and play exactly
    the game MinAtar's own gym env plays from the same seed: same actions, same planes
    (bool there, 0/255 here), same rewards, sticky actions included."""
    from minatar.gym import BaseEnv  # MinAtar's env, built directly (no registration)

    env_id = f"MinAtar/{game}-{version}"
    info = resolve_env(env_id)
    assert info.family.name == "minatar" and info.frame_stack == 1
    assert HCAConfig().environment(env_id)._model_config_auto_includes["conv_filters"] == [[16, 3, 1, "valid"]]
    ours = gym.make(env_id).unwrapped
    theirs = BaseEnv(game=MINATAR_GAMES[game], use_minimal_action_set=minimal)
    assert ours.action_space == theirs.action_space == info.action_space
    assert ours.action_space.n == (len(ours.game.minimal_action_set()) if minimal else 6)
    ours.reset()
    theirs.reset()
    ours.game.seed(7)
    theirs.game.seed(7)
    ours.game.reset()
    theirs.game.reset()
    rng = np.random.default_rng(0)
    rewards = 0.0
    for _ in range(300):
        action = int(rng.integers(ours.action_space.n))
        obs, reward, terminated, *_ = ours.step(action)
        state, their_reward, their_terminated, *_ = theirs.step(action)
        assert obs.dtype == np.uint8 and np.array_equal(obs, state.astype(np.uint8) * 255)
        assert (reward, terminated) == (their_reward, their_terminated)
        rewards += reward
        if terminated:
            ours.game.reset()
            theirs.game.reset()
    if minimal:  # the id we document: also the same spaces as minatar/<Game>
        plain = resolve_env(f"minatar/{game}")
        assert (plain.observation_space, plain.action_space) == (info.observation_space, info.action_space)


def test_minatar_id_registered_by_minatar_itself_is_named(monkeypatch):
    import dataclasses

    theirs = dataclasses.replace(gym.spec("MinAtar/Breakout-v1"), entry_point="minatar.gym:BaseEnv",
                                 kwargs={"game": "breakout", "use_minimal_action_set": True})
    monkeypatch.setitem(gym.envs.registry, "MinAtar/Breakout-v1", theirs)
    message = _validation_error("MinAtar/Breakout-v1")
    assert "'MinAtar/Breakout-v1' is registered in this process by 'minatar.gym:BaseEnv'" in message
    assert "use 'minatar/Breakout', the same game" in message


def test_minatar_wrong_version_names_the_ids():
    message = _validation_error("MinAtar/Breakout-v2")
    assert "unknown environment id 'MinAtar/Breakout-v2'; did you mean 'MinAtar/Breakout-v1'" in message


@pytest.mark.parametrize("env_id, first, second, shape", [
    ("ALE/Pong-v5", "atari-machado/Pong", "atari/Pong", (210, 160, 3)),
    ("BreakoutNoFrameskip-v4", "atari/Breakout", "atari-machado/Breakout", (210, 160, 3)),
    ("ALE/SpaceInvaders-v5", "atari-machado/SpaceInvaders", "atari/SpaceInvaders", (210, 160, 3)),
])
def test_ale_own_ids_stay_raw_and_say_so_once(monkeypatch, env_id, first, second, shape):
    """ale-py's ids are not the Atari protocol (raw RGB frames, unclipped, no max-pool in
    v5), so they are not mapped: they resolve as they are, with one line, once, naming
    the ids that give the protocol."""
    from hca_rllib.envs import resolver

    monkeypatch.setattr(resolver, "_WARNED", set())
    with pytest.warns(resolver.RawAtariWarning) as caught:
        info = resolve_env(env_id)
    assert len(caught) == 1
    message = str(caught[0].message)
    shown = warnings.formatwarning(caught[0].message, caught[0].category, caught[0].filename, caught[0].lineno)
    assert shown.count("\n") == 1 and shown.endswith(f"RawAtariWarning: {message}\n")  # one line, as printed
    assert message.startswith(f"{env_id!r} is ale-py's raw env (observations {shape},")
    assert f"use {first!r} or {second!r}" in message
    assert info.family.name == "gymnasium" and info.observation_space.shape == shape  # not mapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_env(env_id)  # once per id and process
        resolve_env(first)  # the protocol ids do not warn
        resolve_env("CartPole-v1")


@pytest.mark.parametrize("env_id", ["bsuite/umbrella_length-3", "bsuite/umbrella_distract-2", "bsuite/discounting_chain-0"])
def test_bsuite_tasks_resolve_and_train(ray_local, env_id):
    info = resolve_env(env_id)
    assert info.family.name == "bsuite" and len(info.observation_space.shape) == 1
    config = HCAConfig().environment(env_id).env_runners(**SMALL).training(train_batch_size_per_learner=64)
    algo, _ = _train(config.debugging(seed=0), 128)
    algo.stop()


def test_bsuite_umbrella_length_matches_bsuite_setting():
    env = gym.make("bsuite/umbrella_length-3")  # bsuite's umbrella_length/3: chain length 4
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, term, trunc, _ = env.step(0)
        steps += 1
        if term or trunc:
            break
    assert steps == 4


def test_user_module_env_id_trains(ray_local):
    config = HCAConfig().environment("user_envs:TinyChain-v0").env_runners(**SMALL).training(train_batch_size_per_learner=64)
    algo, result = _train(config.debugging(seed=0), 256)
    algo.stop()
    assert result["env_runners"]["episode_return_mean"] >= 0


def test_key_to_door_pays_the_door_only_with_the_key_and_matches_its_values():
    rng = np.random.default_rng(0)
    env = KeyToDoor(distractor_length=6, apple_prob=0.5, apple_reward=1.0, door_reward=5.0)
    returns = {KeyToDoor.WAIT: [], KeyToDoor.PICK: []}
    for episode in range(4000):
        env.reset(seed=episode)
        key = int(rng.integers(2))
        total, steps, done = 0.0, 0, False
        _, r, done, _, _ = env.step(key)
        total += r
        steps += 1
        while not done:
            obs, r, done, _, info = env.step(KeyToDoor.PICK)
            total += r
            steps += 1
        assert steps == 6 + 2
        assert info["has_key"] == (key == KeyToDoor.PICK)
        returns[key].append(total)
    values = key_to_door_values(distractor_length=6, apple_prob=0.5, apple_reward=1.0, door_reward=5.0)
    for key in (KeyToDoor.WAIT, KeyToDoor.PICK):
        sample = np.array(returns[key])
        stderr = sample.std() / math.sqrt(len(sample))
        assert abs(sample.mean() - values["q_key"][key]) < 4 * stderr + 1e-9
    assert values["q_key"][1] - values["q_key"][0] == 5.0
    assert values["advantage_key"] == pytest.approx((-2.5, 2.5))


def test_key_to_door_hides_the_key():
    env = KeyToDoor(distractor_length=3, apple_prob=0.0)
    observations = []
    for key in (0, 1):
        env.reset(seed=0)
        seen = [env.step(key)[0]]
        seen += [env.step(0)[0] for _ in range(3)]
        observations.append(np.stack(seen))
    assert np.array_equal(observations[0], observations[1])


# ---------------------------------------------------------------------------------------
# Errors, each with the message it must show, raised before any worker starts.
# ---------------------------------------------------------------------------------------


def _validation_error(env_id, **kwargs):
    config = HCAConfig().environment(env_id, **kwargs)
    with pytest.raises(ValueError) as error:
        config.validate()
    return str(error.value)


def test_unknown_id_names_close_matches():
    message = _validation_error("atari/Pongg")
    assert "unknown environment id 'atari/Pongg'; did you mean 'atari/Pong'" in message
    message = _validation_error("CartPol-v1")
    assert "did you mean 'CartPole-v1'" in message
    message = _validation_error("minatar/breakout")
    assert "did you mean 'minatar/Breakout'" in message


def test_bsuite_slash_form_is_pointed_to_the_id():
    assert "did you mean 'bsuite/umbrella_length-3'" in _validation_error("bsuite/umbrella_length/3")


def test_continuous_action_space_is_rejected():
    message = _validation_error("Pendulum-v1")
    assert re.search(r"environment 'Pendulum-v1' has action space Box\(.*\); HCA and A2C need a "
                     r"gymnasium.spaces.Discrete action space", message)


def test_small_images_without_a_network_are_rejected():
    message = _validation_error("user_envs:SmallImage-v0")
    assert "gives image observations of shape (20, 20, 3), smaller than the 36x36 the default Nature CNN needs" in message
    assert "conv_filters" in message
    config = HCAConfig().environment("user_envs:SmallImage-v0").rl_module(
        model_config={"conv_filters": [[8, 3, 1, "valid"]]})
    config.validate()  # with a network it is fine


def test_unknown_module_in_module_id():
    message = _validation_error("no_such_package:Thing-v0")
    assert "environment id 'no_such_package:Thing-v0': cannot import module 'no_such_package'" in message


@pytest.mark.parametrize("env_id, module, extra", [
    ("minatar/Breakout", "minatar", "minatar"),
    ("bsuite/umbrella_length-3", "shimmy", "bsuite"),
    ("atari/Pong", "ale_py", "atari"),
])
def test_missing_optional_dependency_names_the_extra(monkeypatch, env_id, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    message = _validation_error(env_id)
    assert f"environment {env_id!r} needs the optional package {module!r}" in message
    assert f"pip install 'hca-rllib[{extra}]'" in message


def test_bad_frame_stack_is_rejected():
    assert "frame_stack must be an integer in [1, 1024]" in _validation_error("atari/Pong", frame_stack=0)
    assert "frame_stack=4 needs observations of shape (..., 1)" in _validation_error("CartPole-v1", frame_stack=4)


def test_errors_come_before_any_worker_starts(ray_local, monkeypatch):
    from ray.rllib.env import env_runner_group

    def no_workers(*args, **kwargs):
        raise AssertionError("an EnvRunner group was started before the env was checked")

    monkeypatch.setattr(env_runner_group.EnvRunnerGroup, "__init__", no_workers)
    with pytest.raises(ValueError, match="unknown environment id 'atari/Pongg'"):
        HCAConfig().environment("atari/Pongg").env_runners(num_env_runners=1).build_algo()
