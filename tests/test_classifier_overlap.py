"""`hindsight_overlap`: the extra classifier passes run in a background thread while the
next batch is sampled. The run must be the same, number for number, as without it; the
passes must fit the policy as it was before the update; errors must surface."""

from __future__ import annotations

import math

import pytest
import torch

from ray.rllib.core.columns import Columns

from hca_rllib import HCAConfig
from hca_rllib.learner import HCATorchLearner


def _config(**training) -> HCAConfig:
    base = dict(credit="expected_hca", trust="evidence", train_batch_size_per_learner=128,
                hindsight_epochs=3, hindsight_lr=3e-3, hindsight={"hiddens": [32]})
    return (HCAConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
            .training(**{**base, **training}).debugging(seed=3))


def _run(config: HCAConfig, iterations: int):
    algo = config.build_algo()
    try:
        losses = []
        for _ in range(iterations):
            result = algo.train()
            losses.append(result["learners"]["default_policy"].get("hindsight_loss_extra_passes"))
        learner = algo.learner_group._learner
        state = {k: v.detach().clone() for k, v in learner.module["default_policy"].state_dict().items()}
        optimizer = learner.get_optimizer("default_policy", "hindsight")
        lr = optimizer.param_groups[0]["lr"]
        return state, losses, lr
    finally:
        algo.stop()


@pytest.mark.parametrize("memory, lr, path", [(0, 3e-3, "lean"), (2, [[0, 3e-3], [300, 1e-3]], "lean"),
                                              (0, 3e-3, "rllib")],
                         ids=["no_memory", "memory_and_lr_schedule", "rllib_learner_path"])
def test_overlap_gives_the_same_weights_as_in_line_passes(ray_local, memory, lr, path):
    """Same seed, 5 updates: every parameter and buffer of the module (policy, value,
    classifier, trust statistics) is bitwise equal with and without the background
    thread, with memory and with a scheduled classifier learning rate (which RLlib sets
    while the passes may still run); the passes' losses appear one iteration later."""
    # A schedule reaches the classifier through `lr` (hindsight_lr=None: the policy's).
    extra = {"hindsight_lr": lr} if not isinstance(lr, list) else {"hindsight_lr": None, "lr": lr}
    runs = {overlap: _run(_config(hindsight_overlap=overlap, hindsight_memory=memory, **extra)
                          .learners(learner_path=path), 5)
            for overlap in (False, True)}
    (inline, inline_losses, inline_lr), (overlap, overlap_losses, overlap_lr) = runs[False], runs[True]
    assert inline.keys() == overlap.keys()
    for name in inline:
        assert torch.equal(inline[name], overlap[name]), name
    assert inline_lr == overlap_lr
    if isinstance(lr, list):
        assert 1e-3 <= inline_lr < 3e-3  # the schedule moved it
    assert all(math.isfinite(x) for x in inline_losses)
    assert overlap_losses[0] is None  # the first update's passes end after its results
    assert overlap_losses[1:] == pytest.approx(inline_losses[:-1], rel=0, abs=0)


def test_passes_fit_the_policy_before_the_update(ray_local, monkeypatch):
    """The behaviour (latent, logits) handed to the passes is the gradient pass's, taken
    before the step: equal to a no-grad `policy_outputs` of the pre-update module."""
    seen = []
    original_update, original_passes = HCATorchLearner._update, HCATorchLearner._classifier_passes

    def update(self, batch):
        self._finish_background()
        module = self.module["default_policy"].unwrapped()
        with torch.no_grad():
            seen.append(module.policy_outputs(batch["default_policy"][Columns.OBS]))
        return original_update(self, batch)

    def passes(self, batch, behaviour):
        seen.append(behaviour["default_policy"])
        return original_passes(self, batch, behaviour)

    monkeypatch.setattr(HCATorchLearner, "_update", update)
    monkeypatch.setattr(HCATorchLearner, "_classifier_passes", passes)
    _run(_config(hindsight_overlap=True), 2)
    assert len(seen) == 4
    for before, handed in (seen[0:2], seen[2:4]):
        assert torch.equal(before[0], handed[0]) and torch.equal(before[1], handed[1])
        assert not handed[0].requires_grad and not handed[1].requires_grad


def test_an_error_in_the_background_passes_surfaces(ray_local, monkeypatch):
    def fail(self, batch, behaviour):
        raise RuntimeError("classifier pass failed")

    monkeypatch.setattr(HCATorchLearner, "_extra_hindsight_passes", fail)
    algo = _config(hindsight_overlap=True).build_algo()
    try:
        algo.train()  # the passes run after this update returns
        with pytest.raises(RuntimeError, match="classifier pass failed"):
            algo.train()
    finally:
        algo.stop()


def test_overlap_must_be_a_bool():
    with pytest.raises(ValueError, match=r"hindsight_overlap must be True or False, got 1"):
        _config(hindsight_overlap=1).validate()
