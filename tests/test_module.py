"""Tests for `HCATorchRLModule` (method note, section 3), built directly: no Ray cluster."""

from __future__ import annotations

import itertools

import gymnasium
import numpy as np
import pytest
import torch
from torch import nn

from ray.rllib.core.columns import Columns

from hca_rllib import credit
from hca_rllib.module import HINDSIGHT_LOGITS, RETURNS, HCATorchRLModule, Torso

OBS_DIM = 5
NUM_ACTIONS = 3
VECTOR_OBS = gymnasium.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
IMAGE_OBS = gymnasium.spaces.Box(0, 255, (84, 84, 4), np.uint8)
ENCODINGS = ("standardize", "symlog")
TORSOS = ("shared_detached", "shared", "separate")


def make_module(observation_space=VECTOR_OBS, num_actions=NUM_ACTIONS, inference_only=False, **hindsight):
    torch.manual_seed(0)
    return HCATorchRLModule(
        observation_space=observation_space,
        action_space=gymnasium.spaces.Discrete(num_actions),
        inference_only=inference_only,
        model_config={"hindsight": hindsight} if hindsight else {},
    )


def random_batch(batch_size=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(batch_size, OBS_DIM, generator=g) * 2 - 1
    returns = torch.randn(batch_size, generator=g) * 3.0
    actions = torch.randint(0, NUM_ACTIONS, (batch_size,), generator=g)
    return obs, returns, actions


def policy_log_probs(module, obs):
    return torch.log_softmax(module.pi(module.pi_torso(obs)), dim=-1)


def linears(module):
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def hindsight_loss(module, obs, returns, actions):
    log_q = module.hindsight_log_probs({Columns.OBS: obs}, returns)
    return -log_q.gather(-1, actions.unsqueeze(-1)).mean()


def randomise_last_hindsight_layer(module):
    """Under `policy_relative` the classifier's last layer starts at zero, which zeroes
    every gradient behind it; give it weights so gradient flow can be observed."""
    with torch.no_grad():
        nn.init.normal_(module.hindsight[-1].weight, std=0.5)


# --------------------------------------------------------------------------------------
# Architecture on vector observations
# --------------------------------------------------------------------------------------


def test_vector_default_architecture():
    module = make_module()
    assert isinstance(module.pi_torso, Torso) and isinstance(module.vf_torso, Torso)
    assert module.pi_torso is not module.vf_torso
    for torso in (module.pi_torso, module.vf_torso):
        layers = list(torso.encoder.net.mlp)
        assert [type(layer) for layer in layers] == [nn.Linear, nn.Tanh, nn.Linear, nn.Tanh]
        assert layers[0].weight.shape == (64, OBS_DIM)
        assert layers[2].weight.shape == (64, 64)
        assert torso.output_dim == 64
    # Separate parameters (not shared tensors).
    pi_params = {id(p) for p in module.pi_torso.parameters()}
    assert not pi_params & {id(p) for p in module.vf_torso.parameters()}
    assert module.pi.weight.shape == (NUM_ACTIONS, 64)
    assert module.vf.weight.shape == (1, 64)
    assert module.hindsight_torso is None


def test_pi_head_orthogonal_small():
    module = make_module()
    w = module.pi.weight.detach().double()
    # Orthogonal rows with gain 0.01: W W^T = 1e-4 I.
    torch.testing.assert_close(w @ w.T, 1e-4 * torch.eye(NUM_ACTIONS, dtype=torch.float64), atol=1e-10, rtol=0)
    assert torch.all(module.pi.bias == 0)
    # Hence an almost uniform initial policy.
    obs, _, _ = random_batch()
    probs = policy_log_probs(module, obs).exp()
    assert torch.allclose(probs, torch.full_like(probs, 1 / NUM_ACTIONS), atol=0.02)
    # Torso layers: orthogonal with gain sqrt(2), zero bias.
    hidden = module.pi_torso.encoder.net.mlp[2].weight.detach().double()
    torch.testing.assert_close(hidden @ hidden.T, 2.0 * torch.eye(64, dtype=torch.float64), atol=1e-5, rtol=0)


def test_values_shape():
    module = make_module()
    obs, returns, _ = random_batch(batch_size=11)
    values = module.compute_values({Columns.OBS: obs})
    assert values.shape == (11,)
    out = module.forward_train({Columns.OBS: obs, RETURNS: returns})
    assert out[Columns.VF_PREDS].shape == (11,)
    assert out[Columns.ACTION_DIST_INPUTS].shape == (11, NUM_ACTIONS)
    assert out[HINDSIGHT_LOGITS].shape == (11, NUM_ACTIONS)
    torch.testing.assert_close(out[Columns.VF_PREDS], values)
    # Without returns in the batch there are no hindsight logits.
    assert HINDSIGHT_LOGITS not in module.forward_train({Columns.OBS: obs})


# --------------------------------------------------------------------------------------
# policy_relative: q == pi exactly at initialisation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding,torso", list(itertools.product(ENCODINGS, TORSOS)))
def test_policy_relative_equals_pi_at_init(encoding, torso):
    module = make_module(return_encoding=encoding, torso=torso)
    obs, returns, actions = random_batch()
    module.update_return_statistics(returns)  # so that `standardize` gives non-zero codes
    with torch.no_grad():
        log_q = module.hindsight_log_probs({Columns.OBS: obs}, returns)
        log_pi = policy_log_probs(module, obs)
        assert torch.equal(log_q, log_pi)
        out = module.forward_train({Columns.OBS: obs, RETURNS: returns})
        assert torch.equal(out[HINDSIGHT_LOGITS], out[Columns.ACTION_DIST_INPUTS])
        values = module.compute_values({Columns.OBS: obs})

    log_pi_taken = log_pi.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    log_q_taken = log_q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    # The main failure mode of the method note: zero HCA credit, c2a2c masks everything.
    for baseline in (values, torch.zeros_like(values)):
        advantage = credit.hca_advantage(log_pi_taken, log_q_taken, returns, baseline=baseline)
        assert torch.equal(advantage, torch.zeros_like(advantage))
    assert torch.equal(credit.c2a2c_gate(log_pi_taken, log_q_taken, 0.1), torch.zeros(len(actions)))


def test_independent_is_not_pi():
    module = make_module(parameterization="independent")
    obs, returns, _ = random_batch()
    module.update_return_statistics(returns)
    with torch.no_grad():
        log_q = module.hindsight_log_probs({Columns.OBS: obs}, returns)
        log_pi = policy_log_probs(module, obs)
    assert not torch.equal(log_q, log_pi)
    assert torch.isfinite(log_q).all()
    torch.testing.assert_close(log_q.exp().sum(-1), torch.ones(len(obs)))


def test_one_classifier_step_moves_q_away_from_pi_and_makes_it_return_dependent():
    module = make_module()
    obs, returns, _ = random_batch(batch_size=128)
    # Actions tell about the return: action 0 when Z > 0, else action 1 or 2.
    actions = torch.where(returns > 0, 0, 1 + (torch.arange(len(returns)) % 2))
    module.update_return_statistics(returns)
    log_pi_before = policy_log_probs(module, obs).detach()

    optimizer = torch.optim.Adam(module.hindsight.parameters(), lr=1e-2)
    optimizer.zero_grad()
    loss = hindsight_loss(module, obs, returns, actions)
    loss.backward()
    # The classifier loss never reaches the policy (default torso: shared_detached).
    assert all(p.grad is None or torch.all(p.grad == 0) for p in module.pi_torso.parameters())
    assert all(p.grad is None or torch.all(p.grad == 0) for p in module.pi.parameters())
    optimizer.step()

    with torch.no_grad():
        log_pi = policy_log_probs(module, obs)
        log_q = module.hindsight_log_probs({Columns.OBS: obs}, returns)
        assert torch.equal(log_pi, log_pi_before)
        assert (log_q - log_pi).abs().max() > 1e-3
        # Same observations, different returns: different q.
        high = module.hindsight_log_probs({Columns.OBS: obs}, torch.full_like(returns, 3.0))
        low = module.hindsight_log_probs({Columns.OBS: obs}, torch.full_like(returns, -3.0))
        assert (high - low).abs().max() > 1e-4
        # And in the direction of the data: action 0 more likely after a high return.
        assert (high[:, 0] > low[:, 0]).float().mean() > 0.9
        assert hindsight_loss(module, obs, returns, actions) < loss


# --------------------------------------------------------------------------------------
# Torso options: where the classifier's gradient goes
# --------------------------------------------------------------------------------------


def _grads_after_hindsight_loss(module):
    obs, returns, actions = random_batch()
    module.update_return_statistics(returns)
    module.zero_grad(set_to_none=True)
    hindsight_loss(module, obs, returns, actions).backward()


def _has_gradient(parameters) -> bool:
    return any(p.grad is not None and torch.any(p.grad != 0) for p in parameters)


@pytest.mark.parametrize("parameterization", ["policy_relative", "independent"])
def test_shared_detached_torso_gets_no_gradient(parameterization):
    module = make_module(torso="shared_detached", parameterization=parameterization)
    randomise_last_hindsight_layer(module)
    _grads_after_hindsight_loss(module)
    assert not _has_gradient(module.pi_torso.parameters())
    assert _has_gradient(module.hindsight.parameters())
    assert module.hindsight_torso is None


@pytest.mark.parametrize("parameterization", ["policy_relative", "independent"])
def test_shared_torso_gets_gradient(parameterization):
    module = make_module(torso="shared", parameterization=parameterization)
    randomise_last_hindsight_layer(module)
    _grads_after_hindsight_loss(module)
    assert _has_gradient(module.pi_torso.parameters())
    assert _has_gradient(module.hindsight.parameters())
    assert module.hindsight_torso is None
    if parameterization == "policy_relative":
        # logits_pi are stop-gradient inside q.
        assert not _has_gradient(module.pi.parameters())


@pytest.mark.parametrize("parameterization", ["policy_relative", "independent"])
def test_separate_torso(parameterization):
    module = make_module(torso="separate", parameterization=parameterization)
    assert isinstance(module.hindsight_torso, Torso)
    assert module.hindsight_torso is not module.pi_torso
    randomise_last_hindsight_layer(module)
    _grads_after_hindsight_loss(module)
    assert not _has_gradient(module.pi_torso.parameters())
    assert not _has_gradient(module.pi.parameters())
    assert _has_gradient(module.hindsight_torso.parameters())


# --------------------------------------------------------------------------------------
# Return encodings
# --------------------------------------------------------------------------------------


def test_standardize_running_statistics_match_numpy():
    module = make_module(return_encoding="standardize")
    encoder = module.return_encoder
    rng = np.random.default_rng(3)
    # Before two samples the encoding is 0 (no statistics yet).
    assert torch.equal(encoder(torch.tensor([1.0, -4.0])), torch.zeros(2, 1))
    batches = [rng.normal(loc, scale, size) for loc, scale, size in
               ((5.0, 2.0, 1), (-3.0, 0.5, 7), (10.0, 4.0, 200), (0.0, 1.0, 3), (2.0, 3.0, 64))]
    seen = []
    for batch in batches:
        module.update_return_statistics(torch.tensor(batch, dtype=torch.float32))
        seen.append(batch.astype(np.float32).astype(np.float64))
        data = np.concatenate(seen)
        assert encoder.count.item() == len(data)
        # Buffers may be stored in float32 (RLlib's state round trip): float32 tolerances.
        np.testing.assert_allclose(encoder.mean.item(), data.mean(), rtol=1e-6, atol=1e-6)
        if len(data) > 1:
            np.testing.assert_allclose(
                (encoder.m2.double() / (encoder.count.double() - 1)).item(), data.var(ddof=1), rtol=1e-5
            )
    module.update_return_statistics(torch.zeros(0))  # an empty batch changes nothing
    assert encoder.count.item() == len(data)

    encoded = encoder(torch.tensor(data, dtype=torch.float32))
    assert encoded.shape == (len(data), 1)
    assert abs(encoded.mean().item()) < 1e-4
    assert abs(encoded.std(unbiased=True).item() - 1.0) < 1e-4


def test_symlog_encoding():
    module = make_module(return_encoding="symlog")
    z = torch.tensor([-1000.0, -7.5, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 42.0, 1e6])
    expected = np.sign(z.numpy().astype(np.float64)) * np.log1p(np.abs(z.numpy().astype(np.float64)))
    encoded = module.return_encoder(z)
    assert encoded.shape == (len(z), 1)
    np.testing.assert_allclose(encoded.squeeze(-1).numpy(), expected, rtol=1e-6, atol=1e-7)
    # Statistics do not change symlog.
    module.update_return_statistics(torch.randn(100) * 10)
    np.testing.assert_allclose(module.return_encoder(z).squeeze(-1).numpy(), expected, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------
# Inference-only modules (EnvRunners)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("torso", TORSOS)
def test_inference_only(torso):
    full = make_module(torso=torso)
    light = make_module(inference_only=True, torso=torso)
    for name in ("vf", "vf_torso", "hindsight", "hindsight_torso", "return_encoder", "trust", "trust_evidence"):
        assert getattr(light, name, None) is None, name
    full_keys = set(full.state_dict())
    light_keys = set(light.state_dict())
    assert light_keys and light_keys < full_keys
    assert not any(k.startswith(("vf", "hindsight", "return_encoder", "trust")) for k in light_keys)

    attributes = full.get_non_inference_attributes()
    for key in full_keys - light_keys:
        assert any(key == a or key.startswith(a + ".") for a in attributes), key

    # What the learner syncs to EnvRunners is exactly what they hold.
    state = full.get_state(inference_only=True)
    assert set(state) == light_keys
    with torch.no_grad():
        nn.init.normal_(full.pi.weight)  # make the policies differ before syncing
    state = full.get_state(inference_only=True)
    light.set_state(state)
    obs, _, _ = random_batch()
    with torch.no_grad():
        full_logits = full.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        light_logits = light.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        assert torch.equal(full_logits, light_logits)
        assert torch.equal(light.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS], full_logits)


# --------------------------------------------------------------------------------------
# Image observations
# --------------------------------------------------------------------------------------


def test_image_nature_cnn():
    module = make_module(observation_space=IMAGE_OBS, num_actions=6)
    torso = module.pi_torso
    convs = [m for m in torso.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(4, 32), (32, 64), (64, 64)]
    assert [c.kernel_size for c in convs] == [(8, 8), (4, 4), (3, 3)]
    assert [c.stride for c in convs] == [(4, 4), (2, 2), (1, 1)]
    assert all(c.padding == (0, 0) for c in convs)  # valid padding
    dense = linears(torso)
    assert len(dense) == 1 and dense[0].in_features == 3136 and dense[0].out_features == 512
    assert torso.output_dim == 512
    assert module.vf_torso is None
    assert module.vf.in_features == 512
    assert module.pi.in_features == 512

    conv_inputs = []
    hook = convs[0].register_forward_hook(lambda m, args, out: conv_inputs.append(args[0].detach()))
    flat = []
    hook_flat = torso.encoder.register_forward_hook(lambda m, args, out: flat.append(out["encoder_out"].detach()))
    try:
        g = torch.Generator().manual_seed(0)
        obs = torch.randint(0, 256, (2, 84, 84, 4), dtype=torch.uint8, generator=g)
        obs[0, 0, 0, 0] = 255
        obs[1, 0, 0, 0] = 0
        with torch.no_grad():
            logits = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
            values = module.compute_values({Columns.OBS: obs})
    finally:
        hook.remove()
        hook_flat.remove()
    assert logits.shape == (2, 6) and torch.isfinite(logits).all()
    assert values.shape == (2,)
    x = conv_inputs[0]
    assert x.dtype == torch.float32
    assert x.min().item() == 0.0 and x.max().item() == 1.0
    # Values are exactly obs / 255 (channels may be permuted to NCHW).
    expected = obs.float() / 255.0
    assert torch.equal(x.permute(0, 2, 3, 1), expected) or torch.equal(x, expected)
    assert flat[0].shape == (2, 3136)


def test_float_image_not_rescaled():
    space = gymnasium.spaces.Box(0.0, 1.0, (84, 84, 4), np.float32)
    module = make_module(observation_space=space, num_actions=2)
    assert module.pi_torso.scale_uint8 is False
    conv = next(m for m in module.pi_torso.modules() if isinstance(m, nn.Conv2d))
    seen = []
    hook = conv.register_forward_hook(lambda m, args, out: seen.append(args[0].detach()))
    try:
        obs = torch.full((1, 84, 84, 4), 0.5)
        with torch.no_grad():
            module.forward_inference({Columns.OBS: obs})
    finally:
        hook.remove()
    assert torch.all(seen[0] == 0.5)


# --------------------------------------------------------------------------------------
# Action spaces
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action_space",
    [gymnasium.spaces.Box(-1.0, 1.0, (2,)), gymnasium.spaces.MultiDiscrete([2, 3])],
    ids=["box", "multidiscrete"],
)
def test_non_discrete_action_space_rejected(action_space):
    with pytest.raises(ValueError, match="Discrete"):
        HCATorchRLModule(
            observation_space=VECTOR_OBS,
            action_space=action_space,
            inference_only=False,
            model_config={},
        )


def test_small_image_without_conv_filters_is_a_clear_error():
    small = gymnasium.spaces.Box(0, 1, (10, 10, 4), np.uint8)
    with pytest.raises(ValueError, match=r"observation shape \(10, 10, 4\).*conv_filters"):
        HCATorchRLModule(observation_space=small, action_space=gymnasium.spaces.Discrete(3),
                         inference_only=False, model_config={})
    module = HCATorchRLModule(
        observation_space=small, action_space=gymnasium.spaces.Discrete(3), inference_only=False,
        model_config={"conv_filters": [[16, 3, 1, "valid"]]},
    )
    assert module.pi_torso.output_dim == 512


@pytest.mark.parametrize("side,too_small", [(35, True), (36, False)])
def test_module_and_resolver_share_one_image_size_check(side, too_small):
    # The one threshold: the module and the resolver refuse the same images.
    from hca_rllib.envs.resolver import EnvInfo, EnvResolutionError, _check_network, env_family
    from hca_rllib.module import MIN_DEFAULT_CNN_SIZE, default_cnn_too_small, default_model_config

    assert MIN_DEFAULT_CNN_SIZE == 36
    space = gymnasium.spaces.Box(0, 255, (side, 50, 4), np.uint8)
    assert default_cnn_too_small(space, {}) is too_small
    assert default_cnn_too_small(space, {"conv_filters": [[16, 3, 1, "valid"]]}) is False
    assert default_cnn_too_small(gymnasium.spaces.Box(0, 1, (4,)), {}) is False
    info = EnvInfo("Small-v0", env_family("CartPole-v1"), space, gymnasium.spaces.Discrete(3), 1)
    if too_small:
        with pytest.raises(ValueError, match=r"images of at least 36x36"):
            default_model_config(space, {})
        with pytest.raises(EnvResolutionError, match=r"smaller than the 36x36"):
            _check_network(info, {})
    else:
        assert default_model_config(space, {})["conv_filters"]
        _check_network(info, {})


def test_plain_a2c_builds_no_classifier():
    module = HCATorchRLModule(
        observation_space=gymnasium.spaces.Box(-1, 1, (4,), np.float32),
        action_space=gymnasium.spaces.Discrete(2), inference_only=False,
        model_config={"uses_hindsight": False},
    )
    assert module.hindsight is None and module.return_encoder is None
    assert not any(k.startswith(("hindsight", "return_encoder")) for k in module.state_dict())
    out = module.forward_train({"obs": torch.zeros(3, 4), "returns": torch.zeros(3)})
    assert HINDSIGHT_LOGITS not in out


def test_hindsight_options_from_model_config_are_validated():
    with pytest.raises(ValueError, match=r"hindsight.torso must be one of"):
        HCATorchRLModule(
            observation_space=gymnasium.spaces.Box(-1, 1, (4,), np.float32),
            action_space=gymnasium.spaces.Discrete(2), inference_only=False,
            model_config={"hindsight": {"torso": "bogus"}},
        )


def test_0_1_0_module_options_load_at_their_defaults_and_name_themselves_otherwise():
    """A 0.1.0 module's constructor arguments (as its checkpoint holds them) carry the
    removed options: at their defaults the module builds as before, otherwise one line
    names the option."""
    from hca_rllib.module import REMOVED_HINDSIGHT_OPTIONS

    old = {"parameterization": "policy_relative", "return_encoding": "standardize", "torso": "shared_detached",
           "hiddens": [8], **{k: default for k, (default, _) in REMOVED_HINDSIGHT_OPTIONS.items()}}
    kwargs = dict(observation_space=gymnasium.spaces.Box(-1, 1, (4,), np.float32),
                  action_space=gymnasium.spaces.Discrete(2), inference_only=False)
    module = HCATorchRLModule(**kwargs, model_config={"hindsight": old, "trust_evidence_bins": 1})
    assert module.hindsight[0].out_features == 8 and module.trust_evidence.shape == (1, 4)
    with pytest.raises(ValueError, match=r"^hindsight\.balanced=True was removed in 0\.2\.0 \(.*\); only its default False loads$"):
        HCATorchRLModule(**kwargs, model_config={"hindsight": {**old, "balanced": True}})
    with pytest.raises(ValueError, match=r"^trust_bins was removed in 0\.2\.0"):
        HCATorchRLModule(**kwargs, model_config={"hindsight": old, "trust_evidence_bins": 2})


@pytest.mark.parametrize("observation_space", [VECTOR_OBS, IMAGE_OBS], ids=["vector", "image"])
def test_the_remainder_head_trains_no_torso(observation_space):
    """The reward outcome's remainder baseline is a head on V's features, detached: its
    loss reaches its own weights and nothing else, so a shared torso (images) learns as
    under A2C."""
    module = make_module(observation_space, outcome="reward", window=4)
    obs = (torch.rand(6, *observation_space.shape) * (255 if observation_space is IMAGE_OBS else 1)).to(
        torch.float32)
    _, remainder = module.values_and_remainder(obs)
    (remainder ** 2).mean().backward()
    assert _has_gradient(module.remainder_vf.parameters())
    others = [p for name, p in module.named_parameters() if not name.startswith("remainder_vf.")]
    assert not _has_gradient(others)
