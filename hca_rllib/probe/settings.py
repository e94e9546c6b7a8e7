"""The probe's settings: one typed object (`ProbeSettings`) with its checks, the defaults,
and the one-line error type (`ProbeError`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

DEFAULT_HORIZONS = (1, 4, 16, 64, None)
DEFAULT_EPISODES = 1000
DEFAULT_MAX_STEPS = 50_000
HELD_OUT_FRACTION = 0.3
VALIDATION_FRACTION = 0.2  # of the fit episodes: early stopping, never the held-out part
THRESHOLD = 0.05  # nats: a decision "holds information" above it
GAMMA = 0.99
MIN_EPISODES = 10
# The classifier fit: Adam, minibatches, early stopping on the validation episodes.
FIT = {"lr": 1e-3, "batch_size": 256, "max_epochs": 40, "patience": 4, "max_updates": 4000}
# The hindsight outcomes the probe measures: `return`, the K-step discounted return (one
# classifier per horizon K); `reward`, each reward event r_{t+k} != 0 in a window of W steps
# after the decision (one classifier pooled over k).
OUTCOMES = ("return", "reward")
DEFAULT_WINDOW = 32


class ProbeError(ValueError):
    """Bad input to the probe: one line, exit status 2 from the CLI."""


def parse_horizons(text: str) -> List[Optional[int]]:
    """`"1,4,16,64,end"` -> `[1, 4, 16, 64, None]` (sorted, unique; `end`: episode end)."""
    out: List[Optional[int]] = []
    for part in str(text).split(","):
        part = part.strip().lower()
        if part in ("end", "episode", "inf"):
            value: Optional[int] = None
        else:
            try:
                value = int(part)
            except ValueError:
                raise ProbeError(f"horizons: {part!r} is neither an integer >= 1 nor 'end'") from None
            if value < 1:
                raise ProbeError(f"horizons: {value} must be >= 1 (or 'end')")
        if value not in out:
            out.append(value)
    if not out:
        raise ProbeError("horizons: none given")
    return sorted(out, key=lambda k: math.inf if k is None else k)


def horizon_name(horizon: Optional[int]) -> str:
    return "end" if horizon is None else str(horizon)


def _is_int_at_least(value: Any, low: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and int(value) == value and value >= low


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """What the probe measures and with how much data; the policy and the env are given
    apart (`probe()`'s `env`, `checkpoint`, `module`).

    - `episodes`, `max_steps`: collection stops at whichever comes first (complete
      episodes only); `num_envs` copies of the env step side by side.
    - `outcome`: `return` (the K-step return, per horizon in `horizons`) or `reward`
      (each reward event within `window` steps after the decision, beside the
      `window`-step return on the same decisions).
    - `gamma`: the discount of the returns and of the reward outcome's weights.
    - `held_out_fraction` of the episodes are held out (seeded by `seed`); `threshold`:
      nats above which a decision "holds information"; `fit`: overrides of `FIT`.
    """

    episodes: int = DEFAULT_EPISODES
    max_steps: int = DEFAULT_MAX_STEPS
    num_envs: int = 8
    outcome: str = "return"
    horizons: Tuple[Optional[int], ...] = DEFAULT_HORIZONS
    window: int = DEFAULT_WINDOW
    gamma: float = GAMMA
    held_out_fraction: float = HELD_OUT_FRACTION
    threshold: float = THRESHOLD
    seed: int = 0
    fit: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "horizons", tuple(self.horizons))

    def validate(self) -> "ProbeSettings":
        """Raise `ProbeError` (one line) on the first bad field; returns self."""
        for name, low in (("episodes", MIN_EPISODES), ("max_steps", 1), ("num_envs", 1), ("window", 1)):
            value = getattr(self, name)
            if not _is_int_at_least(value, low):
                raise ProbeError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.outcome not in OUTCOMES:
            raise ProbeError(f"outcome must be one of {', '.join(OUTCOMES)}, got {self.outcome!r}")
        if not 0.0 < self.gamma <= 1.0:
            raise ProbeError(f"gamma must be in (0, 1], got {self.gamma}")
        if not 0.0 < self.held_out_fraction < 1.0:
            raise ProbeError(f"held_out_fraction must be in (0, 1), got {self.held_out_fraction}")
        if not self.horizons:
            raise ProbeError("horizons: none given")
        for k in self.horizons:
            if k is not None and not _is_int_at_least(k, 1):
                raise ProbeError(f"horizons: {k!r} must be an integer >= 1 or None (episode end)")
        unknown = sorted(set(self.fit or {}) - set(FIT))
        if unknown:
            raise ProbeError(f"fit: unknown setting(s) {unknown}; known: {sorted(FIT)}")
        return self
