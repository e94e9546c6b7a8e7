"""The lean sampler's inference pass (`hca_rllib.fast_policy`): the same logits as the
module's `_forward`, the same actions and log-probs as `torch.distributions.Categorical`
under the same seed, the conv kernel chosen only where it agrees, and the runner's
fallback to the module's own pass for modules it does not know."""

import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from ray.rllib.core.columns import Columns

from hca_rllib import fast_policy
from hca_rllib.envs.minatar import MINATAR_MODEL_CONFIG
from hca_rllib.fast_policy import ConvBackends, policy_plan, sample_actions
from hca_rllib.module import HCATorchRLModule


def _module(space, model_config=None, actions=4):
    return HCATorchRLModule(observation_space=space, action_space=gym.spaces.Discrete(actions),
                            inference_only=True, model_config=model_config or {})


SPACES = [
    ("mlp", gym.spaces.Box(-1.0, 1.0, (4,), np.float32), None, 8),
    ("minatar cnn", gym.spaces.Box(0, 255, (10, 10, 4), np.uint8), MINATAR_MODEL_CONFIG, 8),
    ("nature cnn", gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), None, 4),
    ("same padding", gym.spaces.Box(0, 255, (10, 10, 2), np.uint8),
     {"conv_filters": [[8, 3, 1, "same"], [8, 3, 2, "valid"]], "conv_dense_hiddens": [32]}, 5),
]


@pytest.mark.parametrize("name, space, model_config, batch", SPACES, ids=[s[0] for s in SPACES])
@pytest.mark.parametrize("kernel", ["onednn", "native"])
def test_plan_gives_the_modules_logits(name, space, model_config, batch, kernel, monkeypatch):
    """Both conv kernels (forced): the plan's logits equal `_forward`'s, bit for bit with
    the kernel `nn.Conv2d` runs (oneDNN) and to float rounding with the native one."""
    torch.manual_seed(0)
    module = _module(space, model_config).eval()
    monkeypatch.setattr(ConvBackends, "_rule", staticmethod(lambda layer, x: kernel))
    rng = np.random.default_rng(0)
    for _ in range(3):
        obs = torch.from_numpy(np.asarray(
            [space.sample() for _ in range(batch)]) if space.dtype == np.float32 else
            rng.integers(0, 256, (batch,) + space.shape, dtype=np.uint8))
        obs_copy = obs.clone()
        plan = policy_plan(module, ConvBackends(), obs)
        assert plan is not None
        with torch.inference_mode():
            want = module._forward({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
            got = plan(obs)
        assert torch.equal(obs, obs_copy)  # the observations are not written to
        if kernel == "onednn" or name == "mlp":
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_plan_sees_weight_updates():
    """Parameters are read by reference: an in-place state load (RLlib's weight sync)
    changes the plan's logits as it changes the module's."""
    space = gym.spaces.Box(0, 255, (10, 10, 4), np.uint8)
    module, other = _module(space, MINATAR_MODEL_CONFIG), _module(space, MINATAR_MODEL_CONFIG)
    obs = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (8, 10, 10, 4), dtype=np.uint8))
    plan = policy_plan(module, ConvBackends(), obs)
    module.set_state(other.get_state())
    with torch.inference_mode():
        torch.testing.assert_close(plan(obs), other._forward({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS],
                                   rtol=1e-5, atol=1e-6)


def test_conv_kernel_needs_agreement(monkeypatch):
    """The native kernel is never picked when its output disagrees with oneDNN's, however
    fast it is; and a missing native kernel means oneDNN."""
    layer = nn.Conv2d(4, 16, 3)
    x = torch.rand(8, 4, 10, 10)
    monkeypatch.setattr(fast_policy, "_native_conv", lambda layer, x: torch.zeros(8, 16, 8, 8))
    assert ConvBackends().choose(0, layer, x) == "onednn"
    monkeypatch.undo()
    assert ConvBackends().choose(0, layer, x) == "native"
    monkeypatch.setattr(fast_policy.compat, "has_native_conv2d", lambda: False)
    assert ConvBackends().choose(0, layer, x) == "onednn"


def test_a_native_kernel_that_fails_in_any_way_means_onednn(monkeypatch):
    """`thnn_conv2d` is private: a torch whose op takes other arguments raises TypeError
    (not RuntimeError); the layer keeps oneDNN instead of the sampler failing."""
    def changed_signature(layer, x):
        raise TypeError("thnn_conv2d() missing 1 required positional argument")

    monkeypatch.setattr(fast_policy, "_native_conv", changed_signature)
    assert ConvBackends().choose(0, nn.Conv2d(4, 16, 3), torch.rand(8, 4, 10, 10)) == "onednn"


def test_conv_kernel_is_chosen_by_shape_not_timing(monkeypatch):
    """The rule: native for a layer of at most NATIVE_CONV_MAX_MACS multiply-adds
    (MinAtar's conv on 8 or 16 envs), oneDNN above (Atari's Nature CNN); the same answer
    with the clock stopped, so machine load cannot change a seeded run's logits."""
    minatar, nature = nn.Conv2d(4, 16, 3), nn.Conv2d(4, 32, 8, 4)
    assert fast_policy.conv_macs(minatar, torch.rand(8, 4, 10, 10)) == 8 * 8 * 8 * 16 * 4 * 9
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    for batch, want in ((8, "native"), (16, "native"), (64, "onednn")):
        assert ConvBackends().choose(0, minatar, torch.rand(batch, 4, 10, 10)) == want, batch
    assert ConvBackends().choose(0, nature, torch.rand(16, 4, 84, 84)) == "onednn"
    assert ConvBackends().choose(0, nature, torch.rand(1, 4, 84, 84)) == "onednn"


def test_conv_kernel_is_chosen_once_per_layer_and_shape(monkeypatch):
    calls = []
    monkeypatch.setattr(ConvBackends, "_rule",
                        staticmethod(lambda layer, x: calls.append(tuple(x.shape)) or "native"))
    backends, layer = ConvBackends(), nn.Conv2d(4, 16, 3)
    for _ in range(3):
        assert backends.choose(0, layer, torch.rand(8, 4, 10, 10)) == "native"
    backends.choose(0, layer, torch.rand(4, 4, 10, 10))
    assert calls == [(8, 4, 10, 10), (4, 4, 10, 10)]


@pytest.mark.parametrize("shape", [(8, 3), (16, 6), (1, 2), (5, 18)])
def test_sample_actions_is_categorical_bit_for_bit(shape):
    """Same seed, same logits: the same actions and log-probs as Categorical's sample()
    and log_prob() (torch.multinomial's one-sample algorithm on the same draws), and
    the random stream is left at the same place."""
    logits = torch.randn(shape) * 3
    logits[0, 0] = -1e4  # a near-impossible action
    for seed in range(20):
        torch.manual_seed(seed)
        dist = torch.distributions.Categorical(logits=logits, validate_args=False)
        want = dist.sample()
        want_logp = dist.log_prob(want)
        after_want = torch.rand(3)
        torch.manual_seed(seed)
        got, got_logp = sample_actions(logits)
        after_got = torch.rand(3)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want) and torch.equal(got_logp, want_logp)
        assert torch.equal(after_got, after_want)


def test_sample_actions_frequencies():
    """Probabilities (0.1, 0.2, 0.7) over 100k draws: a chi-square test at p = 1e-6."""
    torch.manual_seed(0)
    p = torch.tensor([0.1, 0.2, 0.7])
    logits = torch.log(p).expand(1000, -1).clone()
    counts = np.zeros(3)
    for _ in range(100):
        counts += np.bincount(sample_actions(logits)[0].numpy(), minlength=3)
    expected = counts.sum() * p.numpy()
    assert float(((counts - expected) ** 2 / expected).sum()) < 27.6


class OwnForward(HCATorchRLModule):
    def _forward(self, batch, **kwargs):
        return {Columns.ACTION_DIST_INPUTS: torch.zeros(batch[Columns.OBS].shape[0], 2)}


class OwnTorsoLayer(HCATorchRLModule):
    def setup(self):
        super().setup()
        self.pi_torso.post = nn.Sequential(nn.Linear(self.pi_torso.post[0].in_features, 128), nn.SiLU())


def test_unknown_modules_get_no_plan():
    space = gym.spaces.Box(0, 255, (10, 10, 4), np.uint8)
    obs = torch.zeros(2, 10, 10, 4, dtype=torch.uint8)
    kwargs = dict(observation_space=space, action_space=gym.spaces.Discrete(2), inference_only=True,
                  model_config=MINATAR_MODEL_CONFIG)
    assert policy_plan(OwnForward(**kwargs), ConvBackends(), obs) is None
    assert policy_plan(OwnTorsoLayer(**kwargs), ConvBackends(), obs) is None
    assert policy_plan(HCATorchRLModule(**kwargs), ConvBackends(), obs) is not None


def test_lean_runner_samples_as_without_the_plan():
    """The runner with the plan (`fast_policy = True`) and without it
    (`PlainLeanEnvRunner`: the module's forward and Categorical), same seed and weights,
    on MinAtar: the same episodes (observations, actions, rewards, ends), log-probs and
    logits to float rounding; the plan is used and the native kernel was chosen."""
    from hca_rllib import A2CConfig
    from hca_rllib.env_runner import LeanEnvRunner, PlainLeanEnvRunner

    def runner(cls):
        config = (A2CConfig().environment("minatar/Breakout")
                  .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=32)
                  .training(train_batch_size_per_learner=128).debugging(seed=0))
        config.validate()
        return cls(config=config)

    fast, plain = runner(LeanEnvRunner), runner(PlainLeanEnvRunner)
    plain.module.set_state(fast.module.get_state())
    used = []
    original = fast_policy.sample_actions
    import hca_rllib.env_runner as env_runner_module

    def counting(logits):
        used.append(1)
        return original(logits)

    env_runner_module.sample_actions = counting
    try:
        torch.manual_seed(0)
        eps_fast = [fast.sample() for _ in range(3)]
    finally:
        env_runner_module.sample_actions = original
    torch.manual_seed(0)
    eps_plain = [plain.sample() for _ in range(3)]
    assert used and list(fast._policy.conv_backends.choice) == [(0, (4, 4, 10, 10))]
    assert not plain._policy.conv_backends.choice
    ended = 0
    for a, b in zip(eps_fast, eps_plain):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert (x.t_started, x.t, x.is_terminated, x.is_truncated) == (
                y.t_started, y.t, y.is_terminated, y.is_truncated)
            for name in ("observations", "actions", "rewards"):
                np.testing.assert_array_equal(getattr(x, name).data, getattr(y, name).data)
            for key in (Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS):
                np.testing.assert_allclose(x.get_extra_model_outputs(key),
                                           y.get_extra_model_outputs(key), rtol=1e-5, atol=1e-5)
            ended += x.is_done
    assert ended


def test_non_finite_logits_are_refused():
    from hca_rllib import A2CConfig
    from hca_rllib.env_runner import LeanEnvRunner

    config = (A2CConfig().environment("CartPole-v1")
              .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=4)
              .training(train_batch_size_per_learner=8))
    config.validate()
    runner = LeanEnvRunner(config=config)
    with torch.no_grad():
        runner.module.pi.bias.fill_(float("nan"))
    with pytest.raises(ValueError, match="logits are not all finite"):
        runner.sample()


def test_lean_runner_builds_the_plan_once_and_follows_weight_updates():
    """The plan is built once per module and batch shape (not per sample(): building it
    runs the conv layers once more), and a weight sync between fragments (`set_state`,
    as RLlib sends the learner's weights) reaches the cached plan: after new weights, the
    logits the runner recorded are the module's own forward pass on the recorded
    observations, and differ from the old weights' (so the comparison can fail)."""
    from hca_rllib import A2CConfig
    from hca_rllib.env_runner import LeanEnvRunner
    import hca_rllib.env_runner as env_runner_module

    config = (A2CConfig().environment("minatar/Breakout")
              .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=16)
              .training(train_batch_size_per_learner=64).debugging(seed=0))
    config.validate()
    runner = LeanEnvRunner(config=config)
    built = []
    original = env_runner_module.policy_plan

    def counting(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)

    def module_logits(state, obs):
        runner.module.set_state(state)
        with torch.no_grad():
            return runner.module._forward_exploration({Columns.OBS: torch.from_numpy(obs)})[
                Columns.ACTION_DIST_INPUTS].numpy()

    env_runner_module.policy_plan = counting
    try:
        for _ in range(3):
            runner.sample()
        assert len(built) == 1
        old = runner.module.get_state()
        rng = np.random.default_rng(1)
        new = {k: (v + 0.5 * rng.standard_normal(np.shape(v))).astype(v.dtype)
               if np.issubdtype(np.asarray(v).dtype, np.floating) else v for k, v in old.items()}
        runner.module.set_state(new)
        episodes = runner.sample()
        assert len(built) == 1
    finally:
        env_runner_module.policy_plan = original
    checked = 0
    for episode in episodes:
        obs = np.ascontiguousarray(episode.get_observations()[:len(episode)])
        recorded = episode.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS)
        np.testing.assert_allclose(recorded, module_logits(new, obs), rtol=1e-5, atol=1e-4)
        assert not np.allclose(recorded, module_logits(old, obs), rtol=1e-3, atol=1e-3)
        checked += len(episode)
    assert checked >= 64
