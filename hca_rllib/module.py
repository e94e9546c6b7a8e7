"""RLModule with policy, value and hindsight-classifier heads (method note, section 3).

Encoders come from RLlib's `Catalog`: an MLP for vector observations (by default
separate 64x64 tanh torsos for policy and value, as Stable-Baselines3's A2C) and, for
84x84 images, the Nature CNN with valid padding followed by a 512-unit dense layer.
`uint8` image observations are scaled to [0, 1] here, not on the EnvRunners.

The hindsight classifier `q(a | s, Z)` and the value function are training-only: with
`inference_only=True` (EnvRunners) they are never built (`InferenceOnlyAPI`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ray.rllib.core.columns import Columns
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, ValueFunctionAPI
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override

from hca_rllib import credit

# Column names this package adds to train batches and forward outputs.
RETURNS = "returns"
HINDSIGHT_LOGITS = "hindsight_logits"
# Per-action policy-gradient weights W[t, a] (`credit.credit_weights`), a train-batch column.
CREDIT_WEIGHTS = "credit_weights"
# The reward outcome's train-batch columns: the rewards r_{t+k} of each step's window
# (`credit.window_rewards`, [B, window]; the classifier's outcome), and the value targets
# of the remainder head, `Z_t - S_t` (the return less the in-window rewards).
WINDOW_REWARDS = "hca_window_rewards"
REMAINDER_TARGETS = "hca_remainder_targets"
# Forward-output key of the remainder head's values, V_rem(s_t) = V(s_t) - E[S_t | s_t].
REMAINDER_VALUES = "hca_remainder_values"
# The reward outcome across fragments (`HindsightSpec.across_fragments`): for the rows
# carried in front of a chunk from its episode's earlier fragments (their LOSS_MASK is
# False) the steps to its first new row (`d_t >= 1`; 0 on new rows: `history_rows`), and
# the logits of the policy that sampled each row (RLlib's column, the sampler's).
HISTORY_OFFSETS = "hca_history_offsets"
BEHAVIOUR_LOGITS = Columns.ACTION_DIST_INPUTS

# The credit heads' generator: the global seed plus this (`HCATorchRLModule.setup`).
CREDIT_HEADS_SEED_OFFSET = 7919
# Nature DQN torso (Mnih et al. 2015), valid padding: 84x84 -> 20 -> 9 -> 7, 3136 wide.
NATURE_CNN_FILTERS = [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]]
NATURE_CNN_DENSE = 512
# The smallest image that torso takes: 36 -> 8 -> 3 -> 1 through its three convs.
MIN_DEFAULT_CNN_SIZE = 36



@dataclasses.dataclass(frozen=True)
class HindsightSpec:
    """The hindsight classifier `q(a | s, Z)` (method note, section 3): the config's
    `hindsight` option, a dict of these fields (`training(hindsight={"torso": "separate"})`
    sets one and keeps the rest)."""

    # `policy_relative`: logits_q = stopgrad(logits_pi) + f(s, Z), so q == pi exactly
    # until f learns something; `independent`: logits_q = f(s, Z).
    parameterization: str = "policy_relative"
    # How Z enters f: `standardize` (by running mean and std), `symlog`.
    return_encoding: str = "standardize"
    # f's input latent: the policy torso's, detached (`shared_detached`) or not
    # (`shared`: f's gradient reaches the policy torso), or its own torso (`separate`).
    torso: str = "shared_detached"
    # Hidden layers of f.
    hiddens: Tuple[int, ...] = (128, 128)
    # What the classifier conditions on (method note, sections 2.5 and 2.8): `return`, the
    # return Z_t of each step (one classifier input per step); `reward`, each nonzero
    # reward r_{t+k} of the next `window` steps of the chunk, with its lag k (one input
    # per (step, reward event) pair: `h_k(a | s_t, r_{t+k}, k)`).
    outcome: str = "return"
    # The reward outcome's credit window: the lags k = 1..window whose rewards the
    # classifier credits (rewards beyond it, and the bootstrap, are sampled as in A2C).
    window: int = 32
    # The reward outcome's window reaches back across fragments: each chunk carries its
    # episode's last `window` steps, and a reward credits those earlier steps too, by an
    # importance-weighted correction (method note, section 2.9). Without it a window ends
    # at its fragment's end.
    across_fragments: bool = False

    def as_dict(self) -> Dict[str, Any]:
        """The options as the config holds them (JSON values: `hiddens` a list)."""
        return {**dataclasses.asdict(self), "hiddens": list(self.hiddens)}


# The choices of the string options of `HindsightSpec`.
HINDSIGHT_CHOICES = {
    "parameterization": ("policy_relative", "independent"),
    "return_encoding": ("standardize", "symlog"),
    "torso": ("shared_detached", "shared", "separate"),
    "outcome": ("return", "reward"),
}
# The longest reward-outcome window taken (the classifier's lag code is this wide).
MAX_WINDOW = 4096
HINDSIGHT_DEFAULTS: Dict[str, Any] = HindsightSpec().as_dict()
# Options of 0.1.0's classifier that are gone: option -> (the default, whose behaviour
# stays; what there is instead). A checkpoint holding the default loads as before.
REMOVED_HINDSIGHT_OPTIONS: Dict[str, Tuple[Any, str]] = {
    "num_bins": (21, "return_encoding='bins' was removed"),
    "bins_range": ([-10.0, 10.0], "return_encoding='bins' was removed"),
    "return_input": ("return", "the classifier conditions on the return Z"),
    "balanced": (False, "the classifier trains by plain cross-entropy"),
    "balanced_clip": (10.0, "the classifier trains by plain cross-entropy"),
}
# Values of kept options that are gone, with what to use instead (`removed_value_error`).
REMOVED_HINDSIGHT_VALUES: Dict[Tuple[str, Any], str] = {
    ("return_encoding", "bins"): "hindsight.return_encoding='bins' was removed in 0.2.0: use 'standardize' or 'symlog'",
}


# --- what 0.1.0 had and 0.2.0 removed, at both levels: the config's fields
# (`fields.REMOVED_FIELDS`) and the `hindsight` options (`prefix` "hindsight.") ----------


def removed_error(settings, removed: Dict[str, Tuple[Any, str]], prefix: str = "") -> Optional[str]:
    """The one-line error for the first name in `settings` (names, or a dict of settings)
    that `removed` (name -> (default, instead)) lists, or None."""
    for name in settings:
        if name in removed:
            return f"{prefix}{name} was removed in 0.2.0 ({removed[name][1]})"
    return None


def drop_removed(settings: Dict[str, Any], removed: Dict[str, Tuple[Any, str]], prefix: str = "") -> Dict[str, Any]:
    """A copy of a 0.1.0 `settings` dict (a checkpoint's) without the entries `removed`
    lists where they hold their defaults; ValueError (one line, naming the entry) where
    one holds another value."""
    settings = dict(settings)
    for name, (default, instead) in removed.items():
        if name in settings and settings[name] != default:
            raise ValueError(f"{prefix}{name}={settings[name]!r} was removed in 0.2.0 ({instead}); "
                             f"only its default {default!r} loads")
        settings.pop(name, None)
    return settings


def removed_value_error(removed: Dict[Tuple[str, Any], str], name: str, value: Any) -> Optional[str]:
    """What `removed` ((name, value) -> its one-line error) says of `value` of `name`, or
    None (also for an unhashable value: none is listed)."""
    try:
        return removed.get((name, value))
    except TypeError:
        return None


def removed_hindsight_error(options: Dict[str, Any]) -> Optional[str]:
    """The one-line error for the first removed option, or else removed value, in a
    `hindsight` dict, or None."""
    return removed_error(options, REMOVED_HINDSIGHT_OPTIONS, "hindsight.") or next(
        filter(None, (removed_value_error(REMOVED_HINDSIGHT_VALUES, option, value)
                      for option, value in options.items())), None)


def hindsight_error(options: Any) -> Optional[str]:
    """The one-line error for a `hindsight` dict that is not a valid `HindsightSpec`
    (unknown or removed option, bad choice, bad layer sizes), or None."""
    if not isinstance(options, dict):
        return (f"hindsight must be a dict of options, e.g. {{'torso': 'shared'}}, got {options!r}; "
                f"allowed options: {sorted(HINDSIGHT_DEFAULTS)}")
    removed = removed_hindsight_error(options)
    if removed:
        return removed
    unknown = sorted(set(options) - set(HINDSIGHT_DEFAULTS))
    if unknown:
        return f"hindsight: unknown option(s) {unknown}; allowed: {sorted(HINDSIGHT_DEFAULTS)}"
    for option, allowed in HINDSIGHT_CHOICES.items():
        if options.get(option, HINDSIGHT_DEFAULTS[option]) not in allowed:
            return f"hindsight.{option} must be one of {list(allowed)}, got {options[option]!r}"
    hiddens = options.get("hiddens", HINDSIGHT_DEFAULTS["hiddens"])
    if not isinstance(hiddens, (list, tuple)) or any(
            isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1 for h in hiddens):
        return f"hindsight.hiddens must be a list of layer sizes (integers >= 1), got {hiddens!r}"
    window = options.get("window", HINDSIGHT_DEFAULTS["window"])
    if isinstance(window, bool) or not isinstance(window, numbers.Integral) or not 1 <= window <= MAX_WINDOW:
        return f"hindsight.window must be an integer in [1, {MAX_WINDOW}], got {window!r}"
    across = options.get("across_fragments", False)
    if not isinstance(across, bool):
        return f"hindsight.across_fragments must be True or False, got {across!r}"
    if across and options.get("outcome", HINDSIGHT_DEFAULTS["outcome"]) != "reward":
        return "hindsight.across_fragments needs outcome='reward' (it carries reward events across fragments)"
    return None


def upgrade_hindsight_options(options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """A 0.1.0 `hindsight` dict without its removed options where they hold their
    defaults; ValueError (one line, naming the option) where one holds another value."""
    return drop_removed(options or {}, REMOVED_HINDSIGHT_OPTIONS, "hindsight.")


def hindsight_spec(options: Optional[Dict[str, Any]]) -> HindsightSpec:
    """The `HindsightSpec` of a (partial) options dict; ValueError (one line) for a bad
    one. 0.1.0's options (`REMOVED_HINDSIGHT_OPTIONS`) are dropped where they hold the
    value every 0.1.0 module had, and refused, naming the option, where not."""
    options = upgrade_hindsight_options(options)
    error = hindsight_error(options)
    if error:
        raise ValueError(error)
    return HindsightSpec(**{**options, "hiddens": tuple(options.get("hiddens", HindsightSpec.hiddens)),
                            "window": int(options.get("window", HindsightSpec.window))})


def history_rows(batch: Dict[str, Any]) -> Optional[torch.Tensor]:
    """The rows carried from earlier fragments (bool, [B]), or None for a batch without
    any (`HISTORY_OFFSETS` absent)."""
    offsets = batch.get(HISTORY_OFFSETS)
    return None if offsets is None else offsets > 0


def classifier_base_logits(batch: Dict[str, Any], logits: torch.Tensor) -> torch.Tensor:
    """The policy logits the classifier is relative to, per row: `logits` (the current
    policy's), but on the rows carried from earlier fragments (`history_rows`) those of
    the policy that sampled them (`BEHAVIOUR_LOGITS`): their `h_k` is the posterior under
    the behaviour policy."""
    history = history_rows(batch)
    if history is None:
        return logits
    return torch.where(history.unsqueeze(-1), batch[BEHAVIOUR_LOGITS].to(logits.dtype), logits)


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def default_cnn_too_small(space: gym.Space, model_config: Dict[str, Any]) -> bool:
    """Whether `space` is an image smaller than the default CNN takes, with no
    `conv_filters` in `model_config` (the one check: the env resolver uses it too)."""
    return (is_image_space(space) and min(space.shape[:2]) < MIN_DEFAULT_CNN_SIZE
            and not model_config.get("conv_filters"))


def default_model_config(observation_space: gym.Space, user_config: Dict[str, Any]) -> Dict[str, Any]:
    """RLlib's defaults overlaid with A2C's usual choices for this observation space."""
    config = dataclasses.asdict(DefaultModelConfig())
    if is_image_space(observation_space):
        if default_cnn_too_small(observation_space, user_config):
            raise ValueError(
                f"observation shape {observation_space.shape}: the default Nature CNN needs "
                f"images of at least {MIN_DEFAULT_CNN_SIZE}x{MIN_DEFAULT_CNN_SIZE}; set "
                f"model_config['conv_filters'] for smaller images (or flatten them)"
            )
        config.update(conv_filters=NATURE_CNN_FILTERS, conv_dense_hiddens=[NATURE_CNN_DENSE],
                      vf_share_layers=True)
    else:
        config.update(fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False)
    return config


def _orthogonal_init(module: nn.Module, gain: float) -> None:
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


class Torso(nn.Module):
    """An RLlib Catalog encoder plus, for images, scaling and the dense layer after it."""

    def __init__(self, observation_space: gym.Space, model_config: Dict[str, Any]):
        super().__init__()
        # Catalog's encoder config for this space with recurrence off (what its
        # overridable `_get_encoder_config` returns for a non-recurrent model config;
        # HCAConfig refuses use_lstm), through its public `get_tokenizer_config`.
        encoder_config = Catalog.get_tokenizer_config(
            observation_space=observation_space, model_config_dict=dict(model_config)
        )
        self.encoder = encoder_config.build(framework="torch")
        self.scale_uint8 = observation_space.dtype == np.uint8
        width = encoder_config.output_dims[0]
        self.post = nn.Identity()
        if is_image_space(observation_space):
            # Dense layers after the convolutions (Nature CNN: one of 512 units).
            layers: List[nn.Module] = []
            for hidden in model_config.get("conv_dense_hiddens", [NATURE_CNN_DENSE]):
                layers += [nn.Linear(width, hidden), nn.ReLU()]
                width = hidden
            self.post = nn.Sequential(*layers)
        self.output_dim = width
        if model_config.get("fcnet_kernel_initializer") is None:
            _orthogonal_init(self, math.sqrt(2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        if self.scale_uint8:
            x = x / 255.0
        return self.post(self.encoder({Columns.OBS: x})["encoder_out"])


def _mlp(input_dim: int, hiddens: List[int], output_dim: int) -> nn.Sequential:
    layers: List[nn.Module] = []
    for width in hiddens:
        layers += [nn.Linear(input_dim, width), nn.ReLU()]
        input_dim = width
    layers.append(nn.Linear(input_dim, output_dim))
    return nn.Sequential(*layers)


class ReturnEncoder(nn.Module):
    """Encodes the return Z for the classifier; keeps running statistics as buffers."""

    def __init__(self, encoding: str):
        super().__init__()
        self.encoding = encoding
        self.output_dim = 1
        # float32 storage: RLlib's state round trip (checkpoints, weight sync) is float32.
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("m2", torch.zeros(()))

    @torch.no_grad()
    def update(self, returns: torch.Tensor) -> None:
        z = returns.detach().to(torch.float64).flatten()
        if z.numel() == 0:
            return
        batch_mean = z.mean()
        self._merge(z.numel(), float(batch_mean), float(((z - batch_mean) ** 2).sum()))

    def _merge(self, n: float, batch_mean: float, batch_m2: float) -> None:
        """Chan et al.'s parallel merge of batch moments into the running moments."""
        count, mean, m2 = float(self.count), float(self.mean), float(self.m2)
        merged = count + n
        delta = batch_mean - mean
        self.mean.fill_(mean + delta * n / merged)
        self.m2.fill_(m2 + batch_m2 + delta**2 * count * n / merged)
        self.count.fill_(merged)

    @torch.no_grad()
    def update_from_sums(self, n, total, total_of_squares) -> None:
        """The same from (count, sum, sum of squares), e.g. summed over learner ranks."""
        n = float(n)
        if n == 0:
            return
        batch_mean = float(total) / n
        self._merge(n, batch_mean, max(float(total_of_squares) - n * batch_mean**2, 0.0))

    def forward(self, returns: torch.Tensor) -> torch.Tensor:
        z = returns.float()
        if self.encoding == "standardize":
            if self.count < 2:
                return torch.zeros_like(z).unsqueeze(-1)
            std = torch.sqrt(self.m2 / (self.count - 1)).clamp(min=1e-6)
            return torch.clamp((z - self.mean) / std, -10.0, 10.0).unsqueeze(-1)
        return (torch.sign(z) * torch.log1p(torch.abs(z))).unsqueeze(-1)  # symlog


class HCATorchRLModule(TorchRLModule, ValueFunctionAPI, InferenceOnlyAPI):
    """Policy, value and hindsight heads for A2C and the HCA family."""

    @override(RLModule)
    def setup(self):
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"HCA needs a Discrete action space (it uses action probabilities), "
                f"got {self.action_space}"
            )
        user_config = self.model_config or {}
        if dataclasses.is_dataclass(user_config):
            user_config = dataclasses.asdict(user_config)
        config = {**default_model_config(self.observation_space, user_config), **user_config}
        self.resolved_model_config = config
        self.hindsight_spec = hindsight_spec(config.get("hindsight"))
        if config.get("trust_evidence_bins", 1) != 1:  # a 0.1.0 module's
            raise ValueError(f"trust_bins was removed in 0.2.0 (one pool of evidence for all decisions); "
                             f"this module has {config['trust_evidence_bins']} evidence bins")
        num_actions = int(self.action_space.n)

        self.pi_torso = Torso(self.observation_space, config)
        self.pi = nn.Linear(self.pi_torso.output_dim, num_actions)
        _orthogonal_init(self.pi, 0.01)
        if self.inference_only:
            return

        self.vf_torso = (
            None if config["vf_share_layers"] else Torso(self.observation_space, config)
        )
        vf_width = (self.vf_torso or self.pi_torso).output_dim
        self.vf = nn.Linear(vf_width, 1)
        _orthogonal_init(self.vf, 1.0)

        # Plain A2C (`uses_hindsight` False) builds no classifier: no dead parameters
        # (which DistributedDataParallel would reject) and smaller checkpoints.
        self.hindsight = self.hindsight_torso = self.return_encoder = self.remainder_vf = None
        if not config.get("uses_hindsight", True):
            return
        # The credit heads draw their initial weights from a generator of their own, so the
        # global one (which samples the actions when the EnvRunner shares the process) goes
        # on as under A2C: at trust 0 a run is A2C's run, not another seed of it.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed((torch.initial_seed() + CREDIT_HEADS_SEED_OFFSET) % 2**63)
            self._build_credit_heads(config, vf_width, num_actions)

    def _build_credit_heads(self, config: Dict[str, Any], vf_width: int, num_actions: int) -> None:
        """The classifier (its own torso under `torso="separate"`), the outcome encoder, the
        credit state buffers and, for the reward outcome, the remainder's value head."""
        h = self.hindsight_spec
        self.hindsight_torso = Torso(self.observation_space, config) if h.torso == "separate" else None
        self.return_encoder = ReturnEncoder(h.return_encoding)
        # The credit state, as buffers so that it is checkpointed with the weights: the
        # trust in the classifier, from 0 (as A2C); `trust_evidence` holds the accumulated
        # `credit.calibration_evidence` [n, sum x, sum x^2, sum d], one row (the shape
        # checkpoints hold).
        self.register_buffer("trust", torch.zeros(()))
        self.register_buffer("trust_evidence", torch.zeros(1, 4))
        h_width = (self.hindsight_torso or self.pi_torso).output_dim
        # The reward outcome adds the lag k, one-hot over the window, and the remainder's
        # value head (its baseline, method note section 2.8).
        self.remainder_vf = None
        outcome_width = self.return_encoder.output_dim
        if h.outcome == "reward":
            outcome_width += h.window
            if config.get("uses_remainder_value", True):  # not under credit="a2c": A2C's update
                self.remainder_vf = nn.Linear(vf_width, 1)
                _orthogonal_init(self.remainder_vf, 1.0)
        self.hindsight = _mlp(h_width + outcome_width, list(h.hiddens), num_actions)
        _orthogonal_init(self.hindsight, math.sqrt(2))
        final = self.hindsight[-1]
        if h.parameterization == "policy_relative":
            # f == 0 at initialisation, so q == pi exactly: an untrained classifier
            # gives zero credit, not noise.
            nn.init.zeros_(final.weight)
        else:
            nn.init.orthogonal_(final.weight, 0.01)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> List[str]:
        return ["vf_torso", "vf", "hindsight_torso", "return_encoder", "hindsight", "trust",
                "trust_evidence", "remainder_vf"]

    # --- forward passes ---------------------------------------------------------------

    @override(RLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.pi(self.pi_torso(batch[Columns.OBS]))}

    @override(RLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        """Policy logits, values, the remainder head's values (reward outcome) and, when
        the batch carries the classifier's outcome (`outcome_column`), hindsight logits.

        Everything the loss differentiates goes through this one call, so that
        DistributedDataParallel sees every parameter in its forward pass.
        """
        obs = batch[Columns.OBS]
        policy_latent, logits, values, remainder = self._rows_forward(obs, history_rows(batch))
        out = {
            Columns.ACTION_DIST_INPUTS: logits,
            Columns.EMBEDDINGS: policy_latent,
            Columns.VF_PREDS: values,
        }
        if remainder is not None:
            out[REMAINDER_VALUES] = remainder
        if self.hindsight is not None and self.outcome_column in batch:
            out[HINDSIGHT_LOGITS] = self.hindsight_logits(obs, policy_latent, classifier_base_logits(batch, logits),
                                                          batch[self.outcome_column])
        return out

    def _policy_and_values(self, obs: torch.Tensor):
        """`(policy latent, logits, V(s), V_rem(s) or None)` of `obs`, in one pass."""
        policy_latent = self.pi_torso(obs)
        return (policy_latent, self.pi(policy_latent), *self._values_and_remainder(obs, policy_latent))

    def _rows_forward(self, obs: torch.Tensor, history: Optional[torch.Tensor]):
        """`_policy_and_values` of every row, the rows carried from earlier fragments
        (`history`) in a pass of their own: the fragment's own rows then go through the
        very pass A2C runs on its batch, so that where the carried rows weigh nothing (trust
        0) the update is A2C's to the bit (a pass over more rows rounds differently)."""
        if history is None or not bool(history.any()):
            return self._policy_and_values(obs)
        own, carried = (~history).nonzero().squeeze(-1), history.nonzero().squeeze(-1)
        order = torch.argsort(torch.cat([own, carried]))  # back to the batch's row order
        parts = zip(self._policy_and_values(obs[own]), self._policy_and_values(obs[carried]))
        return tuple(None if a is None else torch.cat([a, b])[order] for a, b in parts)

    def _value_latent(self, obs: torch.Tensor, policy_latent: Optional[torch.Tensor]) -> torch.Tensor:
        if self.vf_torso is not None:
            return self.vf_torso(obs)
        return self.pi_torso(obs) if policy_latent is None else policy_latent

    def _values(self, obs: torch.Tensor, policy_latent: Optional[torch.Tensor]) -> torch.Tensor:
        return self.vf(self._value_latent(obs, policy_latent)).squeeze(-1)

    def _values_and_remainder(self, obs, policy_latent):
        """`V(s)` and, with the reward outcome, the remainder head's `V_rem(s)` (else None),
        from one value latent."""
        latent = self._value_latent(obs, policy_latent)
        # The remainder head reads V's features without training them: a baseline that
        # shapes no torso, so on a shared torso (images) the policy's features learn as
        # under A2C, and at trust 0 the update is A2C's.
        remainder = None if self.remainder_vf is None else self.remainder_vf(latent.detach()).squeeze(-1)
        return self.vf(latent).squeeze(-1), remainder

    def values_and_remainder(self, obs: torch.Tensor, policy_latent: Optional[torch.Tensor] = None):
        """`(V(s), V_rem(s))` (`V_rem` None without the reward outcome), training module only
        (with or without a classifier)."""
        self._require_training_module("values_and_remainder", classifier=False)
        return self._values_and_remainder(obs, policy_latent)

    @property
    def outcome_column(self) -> str:
        """The train-batch column holding the classifier's outcome: `RETURNS` (return
        outcome) or `WINDOW_REWARDS` (reward outcome)."""
        return WINDOW_REWARDS if self.hindsight_spec.outcome == "reward" else RETURNS

    def outcome_pairs(self, outcome: torch.Tensor):
        """`(rows, lags)` of the classifier's (decision, outcome) pairs: `(None, None)` under
        the return outcome (one pair per row, in row order); under the reward outcome the
        row `t` and lag index `k - 1` of every nonzero entry of the window rewards
        `outcome` ([B, window]), in row-major order."""
        if self.hindsight_spec.outcome != "reward":
            return None, None
        if outcome.dim() != 2 or outcome.shape[1] != self.hindsight_spec.window:
            raise ValueError(f"the reward outcome takes window rewards of shape [B, {self.hindsight_spec.window}], "
                             f"got {tuple(outcome.shape)}")
        index = outcome.nonzero()
        return index[:, 0], index[:, 1]

    def policy_outputs(self, obs: torch.Tensor):
        """`(latent, logits)` of the policy for a batch of observations."""
        latent = self.pi_torso(obs)
        return latent, self.pi(latent)

    def hindsight_logits(
        self,
        obs: torch.Tensor,
        policy_latent: torch.Tensor,
        policy_logits: torch.Tensor,
        outcome: torch.Tensor,
    ) -> torch.Tensor:
        """Logits of the classifier from the policy's latent and logits (`policy_outputs`)
        and the outcome (training module only): `q(a | s_t, Z_t)` per row for the returns
        `Z` ([B]); `h_k(a | s_t, r_{t+k}, k)` per pair (`outcome_pairs`) for the window
        rewards ([B, window])."""
        self._require_training_module("hindsight_logits")
        rows, _ = self.outcome_pairs(outcome)
        return self.hindsight_head(self.hindsight_input(obs, policy_latent, outcome),
                                   policy_logits if rows is None else policy_logits[rows])

    def hindsight_input(self, obs: torch.Tensor, policy_latent: torch.Tensor,
                        outcome: torch.Tensor) -> torch.Tensor:
        """The input of the classifier's head f, one row per pair (`outcome_pairs`): its
        latent (the policy's, or under `torso="separate"` its own torso's) beside the
        encoded return, or beside the encoded reward and its lag (one-hot). Under a
        shared torso it depends on the head's parameters not at all, so that passes
        which step only the head on fixed inputs can compute it once
        (`HCATorchLearner`'s extra passes)."""
        torso = self.hindsight_spec.torso
        if torso == "separate":
            latent = self.hindsight_torso(obs)
        elif torso == "shared_detached":
            latent = policy_latent.detach()
        else:
            latent = policy_latent
        rows, lags = self.outcome_pairs(outcome)
        if rows is None:
            return torch.cat([latent, self.return_encoder(outcome)], dim=-1)
        lag_code = torch.nn.functional.one_hot(lags, self.hindsight_spec.window).to(latent.dtype)
        return torch.cat([latent[rows], self.return_encoder(outcome[rows, lags]), lag_code], dim=-1)

    def hindsight_head(self, inputs: torch.Tensor, policy_logits: torch.Tensor) -> torch.Tensor:
        """The classifier's logits from `hindsight_input`'s output and the policy's logits."""
        f = self.hindsight(inputs)
        if self.hindsight_spec.parameterization == "policy_relative":
            return policy_logits.detach() + f
        return f

    @override(ValueFunctionAPI)
    def compute_values(self, batch: Dict[str, Any], embeddings: Optional[Any] = None) -> torch.Tensor:
        return self._values(batch[Columns.OBS], embeddings)

    # --- analysis ---------------------------------------------------------------------

    def hindsight_log_probs(self, batch: Dict[str, Any], outcome: torch.Tensor) -> torch.Tensor:
        """`log q(a | s, Z)` for every action: Tensor[B, num_actions] for the returns `Z`
        ([B]); under the reward outcome, for the window rewards ([B, window]), one row per
        pair (`outcome_pairs`)."""
        self._require_training_module("hindsight_log_probs")
        obs = batch[Columns.OBS]
        latent, logits = self.policy_outputs(obs)
        return torch.log_softmax(self.hindsight_logits(obs, latent, logits, outcome), dim=-1)

    def _require_training_module(self, what: str, classifier: bool = True) -> None:
        if self.inference_only:
            raise RuntimeError(
                f"{what}: this is the inference-only copy of the module (the EnvRunners' "
                f"one, which `algo.get_module()` returns); the classifier lives on the "
                f"learner: use hca_rllib.training_module(algo)")
        if classifier and self.hindsight is None:
            raise RuntimeError(
                f"{what}: this module has no hindsight classifier (credit='a2c' with "
                f"hindsight_loss_coeff=0 builds none)")

    def update_return_statistics(self, returns: torch.Tensor) -> None:
        """Merge `returns` (Z; under the reward outcome, the reward events r_{t+k}) into
        the outcome encoder's running statistics."""
        self.return_encoder.update(returns)

    @torch.no_grad()
    def update_trust_evidence(self, batch_evidence: torch.Tensor, accumulate=credit.accumulate_evidence) -> None:
        """Fold this batch's evidence (`[4]`) into the accumulated evidence by `accumulate`:
        `credit.accumulate_evidence` for `credit.calibration_evidence`,
        `credit.accumulate_bias_evidence` for two `credit.bias_evidence` pairs."""
        self.trust_evidence[0].copy_(accumulate(self.trust_evidence[0], batch_evidence))
