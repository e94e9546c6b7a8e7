"""The lean sampler's inference pass: the policy logits of `HCATorchRLModule._forward`
as one flat list of torch calls, and an action draw with fewer ops than
`torch.distributions.Categorical` (the same numbers, the same random stream).

Why: on these CPUs a torch op costs microseconds of dispatch however small its
tensors, and at MinAtar's batch of 8 the module's forward pass (twelve `nn.Module`
calls, two layout permutes, oneDNN's convolution) and `Categorical`'s sample and
log-prob (about 25 aten ops, multinomial's validity checks among them) were most of a
vector step (benchmarks/results/throughput_fast/summary.md).

* :func:`policy_plan` reads the stock module's layers (RLlib Catalog's CNN or MLP
  encoder, the dense layers after it, the policy head) and returns a callable computing
  `_forward`'s logits with the same functional ops, or None for any other module (a
  subclass that overrides `_forward` or `Torso.forward`, layer norms, other
  activations): the runner then calls the module's own `_forward_exploration`.
  Parameters are read from the layers at every call, so weight syncs (in-place
  `load_state_dict`, or `assign=True`) are seen; the runner caches the plan per module
  object and batch shape (`env_runner.LeanPolicy._policy_plan`), so a module whose
  layers are replaced in place (`module.pi = nn.Linear(...)`) needs a new module object.
* Convolution backend, per layer, by a fixed rule on its shape: torch's native im2col +
  GEMM kernel (`thnn_conv2d`, through :mod:`hca_rllib.compat`) on a contiguous NCHW
  input for a small convolution, oneDNN (what `nn.Conv2d` runs on CPU) otherwise. oneDNN
  has a fixed cost per call that dominates small layers: at MinAtar's Conv2d(4, 16, 3) on
  batch 8 (0.3 M multiply-adds) the native kernel took 20 us against 140 us; at Pong's
  Conv2d(4, 32, 8, 4) on batch 16 (52 M) oneDNN was 5x faster; the two cross between
  0.7 M and 2.4 M. :class:`ConvBackends` takes the native kernel for a layer of at most
  `NATIVE_CONV_MAX_MACS` multiply-adds per call whose output agrees with oneDNN's on the
  first batch (`allclose`, rtol 1e-4, atol 1e-5; float sums in another order), oneDNN
  otherwise or when the native kernel is missing. The choice depends on the layer and
  the batch shape only, never on timing, so a seeded run samples the same actions
  however loaded the machine is. The choice is kept per runner and shape
  (`env_runner.LeanPolicy.conv_backends`).
* :func:`sample_actions`: `Categorical(logits).sample()` is `torch.multinomial(probs, 1)`
  on `probs = softmax(logits - logsumexp(logits))`, and torch's multinomial draws one
  sample as `argmax(probs / q)` with `q ~ Exp(1)` from the default generator (its
  "gumbel" fast path). This does those steps directly (and `logsumexp`'s, without its
  masking of infinite maxima): the same probabilities, the same
  exponential draws, so the same actions bit for bit under the same seed
  (tests/test_fast_policy.py checks it against `Categorical`); log-probs are
  `Categorical.log_prob`'s gather on the normalised logits. Multinomial's check that the
  probabilities are finite is replaced by the runner's one check per fragment that the
  logits are finite.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import nn

from hca_rllib import compat

logger = logging.getLogger(__name__)

# The largest convolution (multiply-adds per call: batch x output positions x output
# channels x input channels x kernel area) that runs on the native kernel (module docs).
NATIVE_CONV_MAX_MACS = 1_000_000


def conv_macs(layer: nn.Conv2d, x: torch.Tensor) -> int:
    """Multiply-adds of `layer` on the NCHW batch `x`."""
    batch, channels, height, width = x.shape
    (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
    out_h = (height + 2 * ph - kh) // sh + 1
    out_w = (width + 2 * pw - kw) // sw + 1
    return batch * out_h * out_w * layer.out_channels * channels * kh * kw


class ConvBackends:
    """Per-layer choice between oneDNN and the native conv kernel, by shape (module docs)."""

    def __init__(self):
        # (layer index, input shape) -> "native" or "onednn"
        self.choice: Dict[Tuple[int, Tuple[int, ...]], str] = {}

    def choose(self, index: int, layer: nn.Conv2d, x: torch.Tensor) -> str:
        key = (index, tuple(x.shape))
        if key not in self.choice:
            self.choice[key] = self._rule(layer, x)
            logger.info("lean sampler: conv layer %d on input %s: %s kernel", index,
                        tuple(x.shape), self.choice[key])
        return self.choice[key]

    @staticmethod
    def _rule(layer: nn.Conv2d, x: torch.Tensor) -> str:
        if conv_macs(layer, x) > NATIVE_CONV_MAX_MACS or not compat.has_native_conv2d():
            return "onednn"
        try:
            with torch.inference_mode():
                a = nn.functional.conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding)
                b = _native_conv(layer, x.contiguous())
        except Exception:  # noqa: BLE001 - a private op: any failure (e.g. another
            return "onednn"  # signature, a TypeError) keeps the layer on oneDNN
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
            return "onednn"
        return "native"


def _native_conv(layer: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    return compat.native_conv2d(x, layer.weight, layer.kernel_size, layer.bias,
                                layer.stride, layer.padding)


def _conv_ok(layer: nn.Conv2d) -> bool:
    return (layer.groups == 1 and tuple(layer.dilation) == (1, 1) and layer.padding_mode == "zeros"
            and isinstance(layer.padding, tuple))


def _leaf_steps(layers) -> Optional[list]:
    """(kind, layer) per leaf of a Sequential, or None for a layer this path does not know."""
    steps = []
    for layer in layers:
        if type(layer) is nn.Linear:
            steps.append(("linear", layer))
        elif type(layer) in (nn.ReLU, nn.Tanh):
            steps.append(("relu" if type(layer) is nn.ReLU else "tanh", layer))
        elif type(layer) is nn.Identity:
            continue
        elif type(layer) is nn.Conv2d and _conv_ok(layer):
            steps.append(("conv", layer))
        elif type(layer) is nn.ZeroPad2d:
            steps.append(("pad", layer))
        else:
            return None
    return steps


def policy_plan(module, backends: ConvBackends, example_obs: torch.Tensor
                ) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """A callable `obs -> logits` equal to `module._forward({obs})[ACTION_DIST_INPUTS]`
    (up to the conv kernel's float rounding), or None when `module` is not the stock
    HCATorchRLModule structure. `example_obs`: a batch like the ones it will get (the
    conv backends are chosen for its shape the first time it is seen)."""
    from hca_rllib.module import HCATorchRLModule, Torso

    if type(module)._forward is not HCATorchRLModule._forward:
        return None
    torso, head = getattr(module, "pi_torso", None), getattr(module, "pi", None)
    if type(torso) is not Torso or type(head) is not nn.Linear:
        return None
    steps = _torso_steps(torso)
    if steps is None:
        return None
    is_cnn, flatten, cnn_steps, dense_before, post_steps = steps
    scale = bool(torso.scale_uint8)
    conv_kind = _conv_kinds(backends, cnn_steps, example_obs, scale) if is_cnn else {}
    dense = dense_before + post_steps + [("linear", head)]

    def logits(obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        fresh = x is not obs
        if scale:
            if fresh:
                x.div_(255.0)
            else:
                x = x / 255.0
                fresh = True
        if is_cnn:
            x = x.permute(0, 3, 1, 2)
            for i, (kind, layer) in enumerate(cnn_steps):
                x = _apply(kind, layer, x, conv_kind.get(i, "onednn"), fresh)
                fresh = True
            x = x.permute(0, 2, 3, 1)
            if flatten:
                x = x.flatten(1)
        for kind, layer in dense:
            x = _apply(kind, layer, x, "onednn", fresh)
            fresh = True
        return x

    return logits


def _torso_steps(torso):
    """`(is_cnn, flatten, cnn_steps, dense_before, post_steps)`: the stock torso's layers as
    plan steps, or None when it is not the stock structure."""
    from ray.rllib.core.models.torch.encoder import TorchCNNEncoder, TorchMLPEncoder
    from ray.rllib.core.models.torch.primitives import TorchCNN, TorchMLP

    encoder = torso.encoder
    cnn_steps: list = []
    if type(encoder) is TorchCNNEncoder:
        net = list(encoder.net)
        if not net or type(net[0]) is not TorchCNN:
            return None
        if len(net) == 2 and type(net[1]) is nn.Flatten and (net[1].start_dim, net[1].end_dim) == (1, -1):
            flatten = True
        elif len(net) == 1:
            flatten = False
        else:
            return None
        cnn_steps = _leaf_steps(net[0].cnn)
        dense_before = []
    elif type(encoder) is TorchMLPEncoder and type(encoder.net) is TorchMLP:
        flatten = False
        dense_before = _leaf_steps(encoder.net.mlp)
    else:
        return None
    post = torso.post
    post_steps = [] if type(post) is nn.Identity else (
        _leaf_steps(post) if type(post) is nn.Sequential else None)
    if cnn_steps is None or dense_before is None or post_steps is None:
        return None
    if any(kind in ("conv", "pad") for kind, _ in dense_before + post_steps):
        return None
    return type(encoder) is TorchCNNEncoder, flatten, cnn_steps, dense_before, post_steps


def _conv_kinds(backends: ConvBackends, cnn_steps: list, example_obs: torch.Tensor, scale: bool) -> Dict[int, str]:
    """Each conv layer's kernel, picked on a real batch (the layers' true inputs)."""
    conv_kind: Dict[int, str] = {}
    with torch.inference_mode():
        x = example_obs.float()
        if scale:
            x = x / 255.0
        x = x.permute(0, 3, 1, 2)
        for i, (kind, layer) in enumerate(cnn_steps):
            if kind == "conv":
                conv_kind[i] = backends.choose(i, layer, x)
            x = _apply(kind, layer, x, "onednn", fresh=False)
    return conv_kind


def _apply(kind: str, layer, x: torch.Tensor, conv: str, fresh: bool) -> torch.Tensor:
    """One layer as `nn.Module.forward` computes it; activations in place on tensors this
    pass made (`fresh`), never on the caller's observations."""
    if kind == "linear":
        return nn.functional.linear(x, layer.weight, layer.bias)
    if kind == "relu":
        return torch.relu_(x) if fresh else torch.relu(x)
    if kind == "tanh":
        return torch.tanh_(x) if fresh else torch.tanh(x)
    if kind == "pad":
        return nn.functional.pad(x, layer.padding, "constant", layer.value)
    # conv
    if conv == "native":
        return _native_conv(layer, x.contiguous())
    return nn.functional.conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding)


def sample_actions(logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """`(actions, log-probs)` as `Categorical(logits=logits)`'s `sample()` and
    `log_prob()` give them: the same values, the same draws of torch's default
    generator (module docs). `logits`: [B, A], finite."""
    # `logsumexp`'s own steps (ReduceOps.cpp: amax, sum of exp(x - max), log, + max), less
    # its masking of an infinite max (finite logits): 6 aten calls instead of about 30.
    top = logits.amax(-1, keepdim=True)
    norm = logits - (logits - top).exp_().sum(-1, keepdim=True).log_().add_(top)
    probs = norm.softmax(-1)
    q = torch.empty_like(probs).exponential_(1)
    actions = probs.div_(q).argmax(-1, keepdim=True)
    return actions.squeeze(-1), norm.gather(-1, actions).squeeze(-1)
