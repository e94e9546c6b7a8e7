"""Which EnvRunner and which learner path a config runs: `sampler` and `learner_path`.

Each is "auto" by default: the package's lean one ("lean": `hca_rllib.env_runner.LeanEnvRunner`;
the lean learner path, `connectors.LeanEpisodesToBatch`) whenever the config uses only
what it supports, RLlib's own ("rllib") otherwise, with one log line naming the feature
(docs/guide.md, "Sampling"). "lean" refuses a config it cannot run, in one line.
`HCA_RLLIB_PATHS=rllib` (or `lean`) in the environment starts new configs there.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from hca_rllib.connectors import DEFAULT_LEARNER_PATH, LEARNER_PATHS, lean_learner_blocker
from hca_rllib.env_runner import AUTO, DEFAULT_SAMPLER, SAMPLERS, LeanEnvRunner, lean_sampler_blocker

PATHS_ENV = "HCA_RLLIB_PATHS"
PATHS_ENV_VALUES = (AUTO, "lean", "rllib")
# The values `sampler` and `learner_path` take (checked with the other fields: `fields.CHECKS`).
SAMPLER_CHOICES = (AUTO, *SAMPLERS)
LEARNER_PATH_CHOICES = (AUTO, *LEARNER_PATHS)

logger = logging.getLogger(__name__)


def default_paths() -> tuple:
    """(sampler, learner_path) a new `HCAConfig` starts with: ("auto", "auto"), or
    ("lean", "lean") / ("rllib", "rllib") when the environment variable HCA_RLLIB_PATHS
    is "lean" / "rllib"."""
    value = os.environ.get(PATHS_ENV, AUTO)
    if value == AUTO:
        return DEFAULT_SAMPLER, DEFAULT_LEARNER_PATH
    if value in SAMPLERS:
        return value, value
    raise ValueError(f"{PATHS_ENV} must be one of {list(PATHS_ENV_VALUES)}, got {value!r}")


def _package_picks_runner(config) -> bool:
    """Whether the EnvRunner class is the package's to choose: none set by the user (or the
    lean one, which `install_paths` set) and no recording (`output` keeps RLlib's offline
    runner)."""
    return config.env_runner_cls in (None, LeanEnvRunner) and not config.output


def sampler_blocker(config) -> Optional[str]:
    """Why "auto" takes RLlib's runner for `config` (one phrase), or None. A runner class
    the user set is kept; recording (`output`) keeps RLlib's offline runner."""
    return lean_sampler_blocker(config) if _package_picks_runner(config) else None


def resolved_sampler(config) -> str:
    """The sampler `config` runs: `sampler`, or for "auto" "lean" when everything the
    config uses is on the lean runner's allow-list, "rllib" otherwise."""
    if config.sampler != AUTO:
        return config.sampler
    return "rllib" if lean_sampler_blocker(config) else "lean"


def resolved_learner_path(config) -> str:
    """The learner path `config` runs: `learner_path`, or for "auto" "lean" when everything
    the config uses is on the lean path's allow-list, "rllib" otherwise."""
    if config.learner_path != AUTO:
        return config.learner_path
    return "rllib" if lean_learner_blocker(config) else "lean"


def install_paths(config) -> None:
    """For `sampler` and `learner_path` (values checked: `fields.CHECKS`): refuse "lean"
    where it cannot run the config (ValueError, one line), log what "auto" chose where it
    is RLlib's, and install the sampler's EnvRunner class (RLlib's `env_runner_cls` hook)."""
    for field, reason, what in (
            ("sampler", sampler_blocker(config), "RLlib's SingleAgentEnvRunner"),
            ("learner_path", lean_learner_blocker(config), "RLlib's learner connector pieces")):
        value = getattr(config, field)
        if value == "lean" and reason:
            raise ValueError(f"{field}='lean' cannot run this config: {reason}; use "
                             f"{field}='auto' (the default) or 'rllib'")
        if value == AUTO and reason:
            _announce(config, field, what, reason)
    if resolved_sampler(config) == "lean" and _package_picks_runner(config):
        config.env_runner_cls = LeanEnvRunner
    elif config.env_runner_cls is LeanEnvRunner:
        config.env_runner_cls = None


def _announce(config, field: str, what: str, reason: str) -> None:
    """One log line when "auto" resolves `field` to RLlib's, naming the feature; once per
    config (its copies, Tune's and checkpoints' serialized forms included: the config's
    `_auto_paths_logged` list travels with it)."""
    value = resolved_sampler(config) if field == "sampler" else resolved_learner_path(config)
    entry = [field, value, reason]
    logged = getattr(config, "_auto_paths_logged", None)
    if not isinstance(logged, list):
        logged = []
    if entry in logged:
        return
    logger.info(f"{field}: {what} for this run: {reason}")
    config._auto_paths_logged = logged + [entry]
