"""The credit path's learner-connector pieces on a hand-built batch in RLlib's layout
(episode chunks, each followed by one artificial bootstrap step with LOSS_MASK False)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from hca_rllib import HCAConfig, credit
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2

from hca_rllib.connectors import (BOOTSTRAP_VALUES, CREDIT_STATE, ComputeCreditWeights,
                                  ComputeReturnsAndAdvantages, credit_pieces)
from hca_rllib.module import CREDIT_WEIGHTS, RETURNS, HCATorchRLModule

MID = "default_policy"


def make_batch(seed=0, lengths=(5, 3), terminated=(False, True)):
    """Episode chunks in RLlib's layout, each followed by its artificial step; by default
    two: 5 steps truncated (bootstrap), 3 steps terminated."""
    rng = np.random.default_rng(seed)
    rows = []
    for length, term in zip(lengths, terminated):
        for t in range(length):
            last = t == length - 1
            rows.append(dict(reward=rng.normal(), term=last and term, trunc=last and not term, mask=True))
        rows.append(dict(reward=0.0, term=False, trunc=False, mask=False))
    n = len(rows)
    return {
        Columns.OBS: torch.tensor(rng.normal(size=(n, 4)), dtype=torch.float32),
        Columns.ACTIONS: torch.tensor(rng.integers(0, 2, n)),
        Columns.REWARDS: torch.tensor([r["reward"] for r in rows], dtype=torch.float32),
        Columns.TERMINATEDS: torch.tensor([r["term"] for r in rows]),
        Columns.TRUNCATEDS: torch.tensor([r["trunc"] for r in rows]),
        Columns.LOSS_MASK: torch.tensor([r["mask"] for r in rows]),
    }


def make_module(config):
    return HCATorchRLModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        action_space=gym.spaces.Discrete(2),
        inference_only=False,
        model_config={"hindsight": config.hindsight, "uses_hindsight": config.uses_hindsight},
    )


def run(config, batch, module=None):
    module = module or make_module(config)
    metrics = MetricsLogger()
    pipeline = ConnectorPipelineV2(connectors=credit_pieces(config))
    out = pipeline(rl_module={MID: module}, batch={MID: batch}, episodes=[], metrics=metrics)
    return out[MID], module, metrics


def values_of(module, batch):
    with torch.no_grad():
        return module.compute_values(batch)


def rllib_layout_reference(batch, values, gamma, lambda_):
    """The returns and GAE as the package computed them on RLlib's layout before its
    credit functions took one layout: float64 numpy loops over every row, `V(s_{t+1}) =
    values[t + 1]`; float32, garbage on the artificial rows."""
    r = batch[Columns.REWARDS].numpy().astype(np.float64)
    v = values.numpy().astype(np.float64)
    nv = np.append(v[1:], 0.0)
    term, trunc = batch[Columns.TERMINATEDS].numpy(), batch[Columns.TRUNCATEDS].numpy()
    returns, gae = np.empty_like(r), np.empty_like(r)
    running = 0.0
    for t in range(len(r) - 1, -1, -1):
        if term[t]:
            running = r[t]
        elif trunc[t]:
            running = r[t] + gamma * nv[t]
        else:
            running = r[t] + gamma * running
        returns[t] = running
    deltas = r + gamma * (~term) * nv - v
    propagate = ~(term | trunc)
    running = 0.0
    for t in range(len(r) - 1, -1, -1):
        running = deltas[t] + (gamma * lambda_ * running if propagate[t] else 0.0)
        gae[t] = running
    return torch.as_tensor(returns, dtype=torch.float32), torch.as_tensor(gae, dtype=torch.float32)


def test_a2c_advantages_are_gae_not_normalised():
    config = HCAConfig().training(credit="a2c", hindsight_loss_coeff=0.0, gamma=0.9, lambda_=0.8)
    batch = make_batch()
    out, module, _ = run(config, dict(batch))
    v = values_of(module, batch)
    real = batch[Columns.LOSS_MASK]
    _, gae = rllib_layout_reference(batch, v, 0.9, 0.8)
    torch.testing.assert_close(out[Postprocessing.ADVANTAGES][real], gae[real])
    torch.testing.assert_close(out[Postprocessing.VALUE_TARGETS][real], (gae + v)[real])
    assert torch.count_nonzero(out[Postprocessing.ADVANTAGES][~real]) == 0  # artificial rows: 0
    assert RETURNS not in out  # no classifier in plain A2C


def test_returns_bootstrap_where_a_chunk_is_cut():
    config = HCAConfig().training(credit="hca", gamma=0.95)
    batch = make_batch(seed=3)
    out, module, _ = run(config, dict(batch))
    v = values_of(module, batch)
    real = batch[Columns.LOSS_MASK]
    expected, _ = rllib_layout_reference(batch, v, 0.95, 1.0)
    torch.testing.assert_close(out[RETURNS][real], expected[real])
    # The truncated chunk's last real step (row 4) bootstraps with the artificial step's value.
    r = batch[Columns.REWARDS]
    assert float(out[RETURNS][4]) == pytest.approx(float(r[4] + 0.95 * v[5]), abs=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_rllib_layout_gives_the_columns_of_before_bitwise(seed):
    """RLlib's layout goes to `credit`'s through `credit_steps`: on the real rows the
    returns, advantages and value targets are bitwise those of the loops over RLlib's
    rows (`rllib_layout_reference`) and those of the same steps in the lean layout; the
    artificial rows get 0; the chunk ids number the chunks."""
    rng = np.random.default_rng(seed)
    n_chunks = int(rng.integers(1, 7))
    lengths = [int(x) for x in rng.integers(1, 9, n_chunks)]
    terminated = [bool(x) for x in rng.random(n_chunks) < 0.5]
    batch = make_batch(seed, lengths, terminated)
    config = HCAConfig().training(credit="hca", gamma=0.97, lambda_=0.9)
    module = make_module(config)
    with torch.no_grad():
        latent, logits = module.policy_outputs(batch[Columns.OBS])
        v = module.compute_values({Columns.OBS: batch[Columns.OBS]}, latent)
    piece = ComputeReturnsAndAdvantages(config=config)
    b = dict(batch)
    s = piece.from_outputs(b, latent, logits, v)
    returns, gae = rllib_layout_reference(batch, v, 0.97, 0.9)
    real = batch[Columns.LOSS_MASK]
    assert torch.equal(s.returns[real], returns[real]) and torch.equal(s.gae[real], gae[real])
    assert torch.equal(b[Postprocessing.ADVANTAGES][real], gae[real])
    assert torch.equal(b[Postprocessing.VALUE_TARGETS][real], (gae + v)[real])
    assert torch.count_nonzero(s.returns[~real]) == 0 and torch.count_nonzero(s.gae[~real]) == 0
    assert torch.equal(s.chunks, torch.arange(n_chunks).repeat_interleave(torch.tensor(lengths)))
    # The same steps in the lean layout: the bootstrap value on each cut chunk's last step.
    after = torch.nonzero(~real).squeeze(-1)
    bootstrap = torch.zeros(len(batch[Columns.REWARDS]))
    bootstrap[after - 1] = v[after] * batch[Columns.TRUNCATEDS][after - 1]
    lean = {k: batch[k][real] for k in batch}
    lean[BOOTSTRAP_VALUES] = bootstrap[real]
    s_lean = piece.from_outputs(lean, latent[real], logits[real], v[real])
    assert torch.equal(s_lean.returns, s.returns[real]) and torch.equal(s_lean.gae, s.gae[real])
    assert torch.equal(s_lean.chunks, s.chunks)


@pytest.mark.parametrize("credit_mode", ["hca", "c2a2c"])
def test_untrained_policy_relative_classifier_gives_a2c_or_nothing(credit_mode):
    """q == pi at initialisation: the pure estimators give 0 (hca) or mask everything
    (c2a2c); with the default trust (which starts at 0) every mode is exactly A2C."""
    batch = make_batch(seed=1)
    pure = HCAConfig().training(credit=credit_mode, trust=None)
    out, module, metrics = run(pure, dict(batch))
    v = values_of(module, batch)
    real = batch[Columns.LOSS_MASK]
    _, gae = rllib_layout_reference(batch, v, 0.99, 1.0)
    assert torch.count_nonzero(out[Postprocessing.ADVANTAGES]) == 0
    reduced = metrics.reduce()
    assert reduced[MID]["info/mutual_information"].peek() == 0.0
    if credit_mode == "c2a2c":
        assert reduced[MID]["c2a2c/mask_fraction"].peek() == 1.0

    trusted = HCAConfig().training(credit=credit_mode)
    out, _, _ = run(trusted, dict(batch), module=module)
    torch.testing.assert_close(out[Postprocessing.ADVANTAGES][real], gae[real])


def test_non_finite_reward_leaves_running_statistics_untouched():
    config = HCAConfig().training(credit="hca")
    batch = make_batch()
    _, module, _ = run(config, dict(batch))
    state = {k: v.clone() for k, v in module.return_encoder.state_dict().items()}
    trust = module.trust.clone()
    poisoned = dict(make_batch(seed=5))
    poisoned[Columns.REWARDS] = poisoned[Columns.REWARDS].clone()
    poisoned[Columns.REWARDS][2] = float("nan")
    run(config, poisoned, module=module)
    for key, value in module.return_encoder.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert torch.equal(module.trust, trust)


# --------------------------------------------------------------------------------------
# Evaluation feeds the module through training's env-to-module pipeline (one frame stacking).
# --------------------------------------------------------------------------------------


def test_evaluation_inputs_are_training_frame_stacks_across_episodes_and_cuts():
    import user_envs  # noqa: F401  (registers CounterFrames-v0: frame t holds t + 1)
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule

    from hca_rllib.evaluation import TrainingInputs

    config = (
        HCAConfig()
        .environment("CounterFrames-v0", env_config={"episode_length": 7}, frame_stack=4)
        .rl_module(model_config={"conv_filters": [[4, 8, 8, "valid"]], "conv_dense_hiddens": [8]})
    )
    config.validate()
    env = gym.make("CounterFrames-v0", episode_length=7)
    # The module as an EnvRunner builds it: on the pipeline's (stacked) observation space.
    stacked = config.build_env_to_module_connector(env=env).observation_space
    assert stacked.shape == (84, 84, 4)
    module = config.get_rl_module_spec(spaces={MID: (stacked, env.action_space)},
                                       inference_only=True).build()
    inputs = TrainingInputs(config.get_state(), env, module)
    # The one pipeline: RLlib's frame stacking connector, as the EnvRunners build it.
    assert any(isinstance(piece, FrameStackingEnvToModule.func) for piece in inputs.pipeline.connectors)
    inputs.CHUNK = 3  # cut the episode often: the stack reaches into the lookback buffer

    def stack(batch):
        obs = batch[Columns.OBS]
        assert isinstance(obs, torch.Tensor) and obs.shape == (1, 84, 84, 4) and obs.dtype == torch.uint8
        with torch.no_grad():  # the batch is the module's input as it stands
            assert module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS].shape == (1, 2)
        return obs[0, 0, 0].tolist()

    seen = []
    for episode in range(2):
        obs, info = env.reset(seed=episode)
        seen.append(stack(inputs.reset(obs, info)))
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(0)
            done = terminated or truncated
            if not done:
                seen.append(stack(inputs.step(obs, 0, reward, info)))
    # Zeros before an episode's first frame, the last four frames in order, per episode.
    expected = [[max(c - 3 + k, 0) for k in range(4)] for c in range(1, 8)]
    assert seen == expected + expected


# --------------------------------------------------------------------------------------
# Per-action weights and the evidence trust through the pieces.
# --------------------------------------------------------------------------------------


def _a2c_weights(module, batch, config):
    """A2C's weights on the real rows."""
    real = batch[Columns.LOSS_MASK]
    _, gae = rllib_layout_reference(batch, values_of(module, batch), config.gamma, config.lambda_)
    return credit.one_hot_weights(gae, batch[Columns.ACTIONS], 2)[real]


@pytest.mark.parametrize("credit_mode", ["expected_hca", "hca", "c2a2c"])
def test_untrained_classifier_with_evidence_trust_is_a2c_exactly(credit_mode):
    config = HCAConfig().training(credit=credit_mode, trust="evidence")
    batch = make_batch(seed=2)
    out, module, metrics = run(config, dict(batch))
    torch.testing.assert_close(out[CREDIT_WEIGHTS][batch[Columns.LOSS_MASK]], _a2c_weights(module, batch, config))
    reduced = metrics.reduce()
    assert reduced[MID]["credit/trust"].peek() == 0.0
    assert module.trust_evidence.shape == (1, 4)
    assert torch.count_nonzero(module.trust_evidence[:, 1:]) == 0  # d = 0: no evidence at all
    assert float(module.trust_evidence[0, 0]) == 2.0  # the two chunks were counted


def _module_with_classifier(config, actions, push: float):
    """A module whose classifier is `logits_pi + push * onehot(actions)`: its deviation
    from pi points at the taken actions (push > 0) or away from them (push < 0)."""
    module = HCATorchRLModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        action_space=gym.spaces.Discrete(2), inference_only=False,
        model_config={"hindsight": config.hindsight, "uses_hindsight": True})
    module.hindsight_logits = lambda obs, latent, logits, returns: (
        logits + push * torch.nn.functional.one_hot(actions, 2))
    return module


def test_wrong_classifier_with_evidence_trust_falls_back_to_a2c():
    """A classifier whose deviation from pi points away from the actions taken: its
    held-out evidence is negative, trust stays 0, the weights are A2C's."""
    config = HCAConfig().training(credit="expected_hca", trust="evidence")
    batch = make_batch(seed=4)
    actions = batch[Columns.ACTIONS]
    module = _module_with_classifier(config, actions, -2.0)
    run(config, dict(batch), module=module)  # its evidence serves the next batch
    out, _, metrics = run(config, dict(batch), module=module)
    reduced = metrics.reduce()
    assert reduced[MID]["credit/trust_z"].peek() < 0
    assert reduced[MID]["credit/trust"].peek() == 0.0
    torch.testing.assert_close(out[CREDIT_WEIGHTS][batch[Columns.LOSS_MASK]], _a2c_weights(module, batch, config))


def test_right_classifier_with_evidence_trust_gives_expected_hca():
    """A classifier whose deviation points at the actions taken, over enough chunks for
    full trust: from the second batch on, the weights are expected HCA's, scaled by the
    calibration (at least 1: the classifier is, if anything, shrunk toward pi)."""
    config = HCAConfig().training(credit="expected_hca", trust="evidence")
    rows = []
    for seed in range(8):  # 16 chunks
        rows.append(make_batch(seed=seed))
    batch = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
    actions = batch[Columns.ACTIONS]
    module = _module_with_classifier(config, actions, 1.0)
    out, _, metrics = run(config, dict(batch), module=module)
    # The first batch is weighted with the evidence before it (none): A2C.
    assert metrics.reduce()[MID]["credit/trust"].peek() == 0.0
    torch.testing.assert_close(out[CREDIT_WEIGHTS][batch[Columns.LOSS_MASK]], _a2c_weights(module, batch, config))
    out, _, metrics = run(config, dict(batch), module=module)
    reduced = metrics.reduce()
    assert reduced[MID]["credit/trust"].peek() == 1.0
    scale = reduced[MID]["credit/trust_scale"].peek()
    assert 1.0 <= scale <= credit.MAX_CALIBRATION_SCALE
    v = values_of(module, batch)
    with torch.no_grad():
        _, logits = module.policy_outputs(batch[Columns.OBS])
    returns, _ = rllib_layout_reference(batch, v, config.gamma, config.lambda_)
    pi = torch.softmax(logits, -1)
    q = torch.softmax(logits + torch.nn.functional.one_hot(actions, 2), -1)
    real = batch[Columns.LOSS_MASK]
    torch.testing.assert_close(out[CREDIT_WEIGHTS][real], credit.expected_hca_weights(returns, v, q, pi, scale)[real])


def test_pieces_share_one_state_per_module():
    config = HCAConfig().training(credit="hca")
    pipeline = ConnectorPipelineV2(connectors=credit_pieces(config))
    shared = {}
    module = HCATorchRLModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        action_space=gym.spaces.Discrete(2), inference_only=False,
        model_config={"hindsight": config.hindsight, "uses_hindsight": True})
    pipeline(rl_module={MID: module}, batch={MID: make_batch()}, episodes=[], shared_data=shared)
    state = shared[CREDIT_STATE][MID]
    assert state.log_q_all is not None and "weights" in state.parts
    with pytest.raises(RuntimeError, match="ComputeReturnsAndAdvantages must run first"):
        ComputeCreditWeights(config=config)(rl_module={MID: module}, batch={MID: make_batch()},
                                            episodes=[], shared_data={})


def test_inference_only_module_says_where_the_classifier_lives():
    light = HCATorchRLModule(
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        action_space=gym.spaces.Discrete(2), inference_only=True,
        model_config={"uses_hindsight": True})
    batch = make_batch()
    with pytest.raises(RuntimeError, match=r"inference-only copy.*hca_rllib.training_module\(algo\)"):
        light.hindsight_log_probs(batch, batch[Columns.REWARDS])
