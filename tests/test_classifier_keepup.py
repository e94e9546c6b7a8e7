"""The classifier options of issue 11 (item 2): `hindsight.return_input`,
`hindsight.balanced` (with `hindsight.balanced_clip`) and `hindsight_memory`; and the
quick mode of `benchmarks/classifier_keepup.py`."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

from ray.rllib.core.columns import Columns

from hca_rllib import HCAConfig, credit
from hca_rllib.module import HCATorchRLModule

REPO = Path(__file__).resolve().parents[1]
OBS = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)


def cartpole(**training) -> HCAConfig:
    return HCAConfig().environment("CartPole-v1").training(**training)


def make_module(**hindsight):
    torch.manual_seed(0)
    return HCATorchRLModule(observation_space=OBS, action_space=gymnasium.spaces.Discrete(3),
                            model_config={"hindsight": hindsight})


# ------------------------------------------------------------------------- validation

INVALID = [
    ("return_input", {"hindsight": {"return_input": "value"}},
     r"hindsight\.return_input must be one of \['return', 'advantage'\], got 'value'"),
    ("balanced_int", {"hindsight": {"balanced": 1}},
     r"hindsight\.balanced must be True or False, got 1"),
    ("balanced_clip_small", {"hindsight": {"balanced_clip": 0.5}},
     r"hindsight\.balanced_clip must be a finite number >= 1, got 0\.5"),
    ("balanced_clip_nan", {"hindsight": {"balanced_clip": math.nan}},
     r"hindsight\.balanced_clip must be a finite number >= 1"),
    ("balanced_independent", {"hindsight": {"balanced": True, "parameterization": "independent"}},
     r"hindsight\.balanced=True needs hindsight\.parameterization='policy_relative'"),
    ("memory_negative", {"hindsight_memory": -1, "hindsight_epochs": 1},
     r"hindsight_memory must be an integer in \[0, 2147483647\], got -1"),
    ("memory_float", {"hindsight_memory": 2.0, "hindsight_epochs": 1},
     r"hindsight_memory must be an integer in \[0, 2147483647\], got 2\.0"),
    ("memory_without_epochs", {"hindsight_memory": 2, "hindsight_epochs": 0},
     r"hindsight_memory=2 is used by the extra classifier passes only: set hindsight_epochs >= 1"),
]


@pytest.mark.parametrize("kwargs,match", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_option_raises_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as error:
        cartpole(**kwargs).validate()
    assert re.search(match, str(error.value).splitlines()[0])


def test_valid_options_accepted():
    cartpole(hindsight_epochs=2, hindsight_memory=4,
             hindsight={"return_input": "advantage", "balanced": True, "balanced_clip": 1.0}).validate()


def test_module_refuses_bad_options_too():
    with pytest.raises(ValueError, match=r"hindsight\.balanced=True needs"):
        make_module(balanced=True, parameterization="independent")
    with pytest.raises(ValueError, match=r"hindsight\.return_input must be one of"):
        make_module(return_input="z")


# ------------------------------------------------------------------ return_input


def test_advantage_input_feeds_z_minus_v_and_its_statistics():
    module = make_module(return_input="advantage")
    g = torch.Generator().manual_seed(3)
    obs = torch.rand(64, 4, generator=g) * 2 - 1
    returns = torch.randn(64, generator=g) * 2 + 5.0
    with torch.no_grad():
        values = module.compute_values({Columns.OBS: obs})
    # the statistics are those of Z - V; without V the call says what it needs
    with pytest.raises(ValueError, match=r"return_input='advantage' needs the values"):
        module.update_return_statistics(returns)
    module.update_return_statistics(returns, values)
    advantage = (returns - values).double()
    assert float(module.return_encoder.count) == 64
    np.testing.assert_allclose(float(module.return_encoder.mean), float(advantage.mean()), rtol=1e-5)
    np.testing.assert_allclose(float(module.return_encoder.m2),
                               float(((advantage - advantage.mean()) ** 2).sum()), rtol=1e-4)
    # the forward: f(latent, encode(Z - V(s))), V computed from obs inside the module
    with torch.no_grad():
        torch.nn.init.normal_(module.hindsight[-1].weight)
        latent = module.pi_torso(obs)
        logits = module.pi(latent)
        got = module.hindsight_logits(obs, latent, logits, returns)
        f = module.hindsight(torch.cat([latent, module.return_encoder(returns - values)], -1))
    torch.testing.assert_close(got, logits + f)
    # and "return" sees Z itself, with or without values
    plain = make_module()
    torch.testing.assert_close(plain.return_encoder_input(returns, values), returns)
    torch.testing.assert_close(module.return_encoder_input(returns, values), returns - values)


def test_advantage_input_gives_no_gradient_to_the_value_function():
    module = make_module(return_input="advantage")
    obs, returns = torch.rand(16, 4), torch.randn(16)
    module.update_return_statistics(returns, module.compute_values({Columns.OBS: obs}).detach())
    torch.nn.init.normal_(module.hindsight[-1].weight)
    latent = module.pi_torso(obs)
    module.hindsight_logits(obs, latent, module.pi(latent), returns).sum().backward()
    assert all(p.grad is None for p in module.vf.parameters())
    assert all(p.grad is None for p in module.vf_torso.parameters())
    assert module.hindsight[0].weight.grad is not None


# ---------------------------------------------------------------------- balanced


def _tabular_problem(seed=0, num_returns=5):
    # Seeded: a torch Generator made here was never passed to Dirichlet.sample (which
    # takes none), so the draw followed the global torch seed, not `seed`.
    likelihood = np.random.default_rng(seed).dirichlet(np.ones(num_returns), size=3).T  # [K, A]
    return torch.from_numpy(likelihood).double()


def _fit_balanced_table(prior, likelihood, clip, steps=3000):
    """Minimise the expected balanced loss over a free table f[z, a] (exact expectation:
    every (z, a) pair is one example weighted by P(z, a) = pi(a) P(z|a), times the
    balanced weight of a), with the package's `balanced_weights` and
    `weighted_cross_entropy`."""
    num_returns, num_actions = likelihood.shape
    z_index, actions = torch.meshgrid(torch.arange(num_returns), torch.arange(num_actions),
                                      indexing="ij")
    z_index, actions = z_index.flatten(), actions.flatten()
    joint = (prior[None, :] * likelihood).flatten()
    weights = joint * credit.balanced_weights(torch.log(prior)[actions], num_actions, clip)
    table = torch.zeros(num_returns, num_actions, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([table], max_iter=steps, tolerance_grad=1e-12,
                                  tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = credit.weighted_cross_entropy(table[z_index], actions, weights)
        loss.backward()
        return loss

    optimizer.step(closure)
    return table.detach()


def _bayes(prior, likelihood):
    joint = prior[None, :] * likelihood
    return joint / joint.sum(-1, keepdim=True)


def test_balanced_minimiser_plus_policy_logits_is_bayes_posterior_for_any_policy():
    """3-action bandit with known P(Z|a) on 5 return values: the minimiser f of the
    balanced loss, trained on data of pi_1, gives softmax(log pi + f) = Bayes' posterior
    under pi for pi_1 *and* for another pi_2 plugged in afterwards (f does not depend on
    the policy that collected the data). The plain (unweighted) fit of softmax(f) is not
    policy-free: with pi_2 plugged in it misses the posterior by far more."""
    likelihood = _tabular_problem()
    pi_1 = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    pi_2 = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    f = _fit_balanced_table(pi_1, likelihood, clip=10.0)  # 1 / (3 x 0.1) = 3.3 < 10: no clip
    for pi in (pi_1, pi_2):
        q = credit.balanced_posterior(torch.log(pi)[None, :], f)
        torch.testing.assert_close(q, _bayes(pi, likelihood), atol=1e-6, rtol=0)
    # softmax(f) alone is the posterior under the uniform prior
    torch.testing.assert_close(torch.softmax(f, -1), _bayes(torch.full((3,), 1 / 3, dtype=torch.float64),
                                                            likelihood), atol=1e-6, rtol=0)


def test_unweighted_softmax_f_is_not_policy_free():
    """Contrast for the test above: softmax(f) fitted without weights is pi_1's posterior,
    so adding log pi_2 counts the prior twice: far from Bayes under pi_2."""
    likelihood = _tabular_problem()
    pi_1 = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    pi_2 = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    num_returns = likelihood.shape[0]
    z_index, actions = torch.meshgrid(torch.arange(num_returns), torch.arange(3), indexing="ij")
    joint = (pi_1[None, :] * likelihood).flatten()
    table = torch.zeros(num_returns, 3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([table], max_iter=3000, tolerance_grad=1e-12,
                                  tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = credit.weighted_cross_entropy(table[z_index.flatten()], actions.flatten(), joint)
        loss.backward()
        return loss

    optimizer.step(closure)
    q = credit.balanced_posterior(torch.log(pi_2)[None, :], table.detach())
    assert float((q - _bayes(pi_2, likelihood)).abs().max()) > 0.1


def test_clipped_balanced_minimiser_matches_its_closed_form():
    """With the clip active (pi = 0.05 < 1 / (3 x 1.5)), the minimiser is the closed form
    of `clipped_balanced_minimizer` (q proportional to pi^2 w P(z|a)), which gives the rare
    action less mass than Bayes, never more."""
    likelihood = _tabular_problem(seed=1)
    pi = torch.tensor([0.75, 0.2, 0.05], dtype=torch.float64)
    f = _fit_balanced_table(pi, likelihood, clip=1.5)
    q = credit.balanced_posterior(torch.log(pi)[None, :], f)
    expected = credit.clipped_balanced_minimizer(pi, likelihood, 3, 1.5)
    torch.testing.assert_close(q, expected, atol=1e-6, rtol=0)
    bayes = _bayes(pi, likelihood)
    assert float((expected - bayes).abs().max()) > 0.01  # the clip does bite here
    assert bool((expected[:, 2] <= bayes[:, 2] + 1e-12).all())  # the clipped action: less mass


def test_balanced_weights():
    log_pi = torch.log(torch.tensor([0.5, 0.1, 0.01]))
    torch.testing.assert_close(credit.balanced_weights(log_pi, 2, 10.0),
                               torch.tensor([1.0, 5.0, 10.0]))
    with pytest.raises(ValueError, match="clip must be >= 1"):
        credit.balanced_weights(log_pi, 2, 0.5)


def test_learner_balanced_loss_is_weighted_cross_entropy_of_f():
    from hca_rllib.learner import HCATorchLearner

    module = make_module(balanced=True, balanced_clip=4.0)
    g = torch.Generator().manual_seed(0)
    policy_logits = torch.randn(10, 3, generator=g)
    f = torch.randn(10, 3, generator=g)
    actions = torch.randint(0, 3, (10, 1), generator=g)
    mask = torch.ones(10, dtype=torch.bool)
    mask[-2:] = False
    got = HCATorchLearner._classifier_loss(module, policy_logits + f, policy_logits, actions, mask)
    pi = torch.softmax(policy_logits, -1).gather(-1, actions).squeeze(-1)
    w = torch.clamp(1.0 / (3 * pi), max=4.0)
    nll = -torch.log_softmax(f, -1).gather(-1, actions).squeeze(-1)
    torch.testing.assert_close(got, (w * nll)[mask].sum() / w[mask].sum())
    # not balanced: the plain cross-entropy of q
    plain = make_module()
    got = HCATorchLearner._classifier_loss(plain, policy_logits + f, policy_logits, actions, mask)
    nll_q = -torch.log_softmax(policy_logits + f, -1).gather(-1, actions).squeeze(-1)
    torch.testing.assert_close(got, nll_q[mask].mean())


# ------------------------------------------------------------------------ memory


def _keepup():
    spec = importlib.util.spec_from_file_location("classifier_keepup",
                                                  REPO / "benchmarks" / "classifier_keepup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_keeps_the_last_batches_real_steps(ray_local):
    """Through the real Learner (advantage input, balanced, memory 2): after 4 updates
    the memory holds exactly the real steps of the last 2 batches (about 256 each:
    the artificial bootstrap steps are left out), with the behaviour logits of their time,
    and the return statistics count every real step once (as Z - V)."""
    config = (
        HCAConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4)
        .training(credit="hca", train_batch_size_per_learner=256, hindsight_epochs=1,
                  hindsight_memory=2, hindsight={"return_input": "advantage", "balanced": True})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        for _ in range(4):
            result = algo.train()
        learner = algo.learner_group._learner
        module = learner.module["default_policy"]
        memory = learner._hindsight_memory["default_policy"]
        assert len(memory) == 2
        for entry in memory:
            n = len(entry["obs"])  # the batch's real steps: 256 sampled, rounded up per env
            assert 256 <= n <= 256 + 4 and entry["obs"].shape == (n, 4)
            assert entry["actions"].shape == entry["returns"].shape == (n,)
            assert entry["logits"].shape == (n, 2)
        assert 4 * 256 <= float(module.return_encoder.count) <= 4 * (256 + 4)
        losses = result["learners"]["default_policy"]
        assert math.isfinite(losses["hindsight_loss_extra_passes"])
    finally:
        algo.stop()


# --------------------------------------------------------------------- benchmark


@pytest.mark.benchmark
def test_classifier_keepup_quick(tmp_path):
    """`benchmarks/classifier_keepup.py --quick`: default and every new option at once on
    delayed_effect_L10_sd1, 1 seed, 3072 steps; the summary has both with finite scores."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "classifier_keepup.py"),
                           "--quick", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    options = summary["settings"]["delayed_effect_L10_sd1"]["options"]
    assert set(options) == {"default", "all_new"}
    for stats in options.values():
        assert len(stats["seeds"]) == 1 and math.isfinite(stats["score_mean"])
    assert options["all_new"]["vs_default"]["seeds"] == [0]
    record = json.loads((tmp_path / "delayed_effect_L10_sd1" / "all_new_seed0.json").read_text())
    assert record["overrides"]["hindsight_memory"] == 2
    assert (tmp_path / "summary.md").read_text().startswith("# Classifier keep-up")
