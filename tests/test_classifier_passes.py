"""The classifier's extra passes (`hindsight_epochs`) with their per-update work done once
(`HCATorchLearner._classifier_passes`: the head's input and the loss's real rows) give the
same weights, bitwise, as the passes written the plain way (`reference_passes` below,
each pass recomputing everything), for the same seed and episodes: on both learner paths
(lean: every row real; RLlib's: artificial rows masked out), under every classifier
option the loop distinguishes (shared, detached or separate torso; independent
parameterization; no gradient clipping)."""

import copy

import pytest
import torch

from ray.rllib.core.columns import Columns

from hca_rllib.learner import HINDSIGHT_OPTIMIZER, HCATorchLearner
from hca_rllib.module import RETURNS

from test_learner_path import MID, build, make_config, make_episodes, module_state


def reference_passes(self, module_id, batch, latent, logits):
    """The extra passes written the plain way (no DDP), the loss included: the
    cross-entropy's plain masked mean over the real rows."""
    module = self.module[module_id].unwrapped()
    mask = batch[Columns.LOSS_MASK].bool()
    actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
    optimizer = self.get_optimizer(module_id, HINDSIGHT_OPTIMIZER)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    obs, returns = batch[Columns.OBS], batch[RETURNS]
    last = None
    for _ in range(self.config.hindsight_epochs):
        optimizer.zero_grad(set_to_none=True)
        hindsight_logits = module.hindsight_logits(obs, latent, logits, returns)
        log_q = torch.log_softmax(hindsight_logits, dim=-1).gather(-1, actions).squeeze(-1)
        loss = -(log_q[mask].sum() / mask.sum().clamp(min=1))
        loss.backward()
        grads = [p.grad for p in params if p.grad is not None]
        if self.config.grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm(grads)
        if not torch.isfinite(norm):
            break
        optimizer.step()
        last = loss.detach()
    return last


OPTIONS = {
    # The default credit mode's classifier (smaller).
    "default": ({}, {}),
    "shared": ({}, {"torso": "shared"}),
    "separate_torso": ({}, {"torso": "separate"}),
    "independent_symlog": ({}, {"parameterization": "independent", "return_encoding": "symlog"}),
    "no_grad_clip": ({"grad_clip": None}, {}),
}


def _config(option):
    training, hindsight = OPTIONS[option]
    config = make_config("expected_hca").training(hindsight_epochs=4, **training)
    return config.training(hindsight={"hiddens": [16, 16], **hindsight})


# RLlib's learner path in the slow tier (the full suite); the default lean path in both.
@pytest.mark.parametrize("path", ["lean", pytest.param("rllib", marks=pytest.mark.slow)])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_extra_passes_give_the_reference_weights_bitwise(option, path, monkeypatch):
    config = _config(option)
    fast, _ = build(config, path, 1)
    slow, _ = build(config, path, 1, state=fast.module[MID].get_state())
    monkeypatch.setattr(slow, "_classifier_passes", reference_passes.__get__(slow, HCATorchLearner))
    for update in range(3):
        episodes = make_episodes(100 * update + 7)
        out_fast = fast.update(episodes=copy.deepcopy(episodes))
        out_slow = slow.update(episodes=copy.deepcopy(episodes))
        assert out_fast[MID]["hindsight_loss_extra_passes"] == out_slow[MID]["hindsight_loss_extra_passes"]
    fast_state, slow_state = module_state(fast), module_state(slow)
    assert fast_state.keys() == slow_state.keys()
    moved = 0
    for name, tensor in fast_state.items():
        assert torch.equal(tensor, slow_state[name]), f"{option}, {path}: {name} differs"
        if name.startswith("hindsight"):
            initial = module_state(build(config, path, 1)[0])[name]
            moved += int(not torch.equal(tensor, initial))
    assert moved > 0, "the classifier never moved: the comparison would be empty"
    # The classifier's optimizer state too (what the next update steps from).
    for fast_opt, slow_opt in ((fast.get_optimizer(MID, HINDSIGHT_OPTIMIZER), slow.get_optimizer(MID, HINDSIGHT_OPTIMIZER)),):
        for a, b in zip(fast_opt.state.values(), slow_opt.state.values()):
            for key in a:
                assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


def test_the_reference_differs_when_the_passes_do():
    """The comparison can fail: one pass fewer on one side gives other weights."""
    config = _config("default")
    fast, _ = build(config, "lean", 1)
    slow, _ = build(config.training(hindsight_epochs=3), "lean", 1, state=fast.module[MID].get_state())
    episodes = make_episodes(7)
    fast.update(episodes=copy.deepcopy(episodes))
    slow.update(episodes=copy.deepcopy(episodes))
    a, b = module_state(fast), module_state(slow)
    assert not all(torch.equal(a[k], b[k]) for k in a if k.startswith("hindsight"))


@pytest.mark.parametrize("all_real", [True, False])
def test_hindsight_loss_is_the_plain_masked_mean_bitwise(all_real):
    """The main step's classifier loss (`hindsight_loss`, the passes' `pass_loss`) is the
    plain masked mean, value and gradient, bitwise: with every row real (lean path) and
    with artificial rows masked out (RLlib's)."""
    from hca_rllib.learner import hindsight_loss

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(37, 4, generator=g)
    actions = torch.randint(0, 4, (37, 1), generator=g)
    mask = torch.ones(37, dtype=torch.bool) if all_real else torch.rand(37, generator=g) > 0.3
    fast, plain = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = hindsight_loss(fast, actions, mask)
    log_q = torch.log_softmax(plain, dim=-1).gather(-1, actions).squeeze(-1)
    reference = -(log_q[mask].sum() / mask.sum().clamp(min=1))
    loss.backward()
    reference.backward()
    assert torch.equal(loss, reference) and torch.equal(fast.grad, plain.grad)
