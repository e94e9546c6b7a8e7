"""One place that turns an environment id into an RLlib-ready environment, or a clear error.

Every id below is a gymnasium id registered when ``hca_rllib`` is imported (which every
Ray worker does when it unpickles an ``HCAConfig``), so ``config.environment(id)``, the
command line, Tune's ``param_space={"env": id}`` and ``ray job submit`` all take the same
string and nothing needs registering by hand.

| id | family | what it is |
|---|---|---|
| ``atari/<Game>`` | atari | classic protocol (see :mod:`hca_rllib.envs.atari`) |
| ``atari-machado/<Game>`` | atari | Machado et al. 2018 protocol, sticky actions 0.25 |
| ``minatar/<Game>`` | minatar | MinAtar's five games |
| ``MinAtar/<Game>-v1``, ``-v0`` | minatar | MinAtar's own ids: the same game (``-v0``: all six actions) |
| ``bsuite/<experiment>-<setting>`` | bsuite | ``umbrella_length``, ``umbrella_distract``, ``discounting_chain`` |
| ``HCA/<Task>-v0`` | known_answer | the tasks of docs/method.md section 5 and key-to-door |
| ``module.path:EnvName-v0`` | gymnasium | gymnasium's own form: import the module, then make the id |
| any other registered id | gymnasium | e.g. ``CartPole-v1``; ale-py's ``ALE/Pong-v5`` is raw (a warning names the protocol id) |

:func:`resolve_env` checks an id before any worker starts: unknown ids (with close
matches), missing optional dependencies (naming the extra to install), non-``Discrete``
action spaces, and image observations too small for the default network. ale-py's own ids
(``ALE/<Game>-v5``, ``<Game>NoFrameskip-v4``, ...) are not the Atari protocol (their
frames are raw RGB, rewards unclipped, no life-loss or noop handling, and ``-v5`` has no
max-pool), so they are not mapped: they train as they are, and a one-line
:class:`RawAtariWarning`, once per id and process, names the ``atari/`` or
``atari-machado/`` id that gives the protocol.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import warnings
from typing import Any, Dict, Optional

import gymnasium as gym

__all__ = ["EnvFamily", "EnvInfo", "EnvResolutionError", "RawAtariWarning", "env_family", "resolve_env",
           "register_all"]


class EnvResolutionError(ValueError):
    """An environment id that cannot be used, with the reason in the message."""


class RawAtariWarning(UserWarning):
    """An ale-py id: raw frames, not the Atari protocol of ``atari/<Game>``."""


@dataclasses.dataclass(frozen=True)
class EnvFamily:
    name: str
    prefix: str  # id prefix ("" for plain gymnasium ids)
    modules: tuple  # the optional packages it needs
    extra: Optional[str]  # the pip extra that installs it
    frame_stack: int = 1  # frames the algorithm stacks by default (connectors, not env)
    model_config: Dict[str, Any] = dataclasses.field(default_factory=dict)


def _families() -> Dict[str, EnvFamily]:
    from hca_rllib.envs.minatar import MINATAR_MODEL_CONFIG

    minatar = EnvFamily("minatar", "minatar/", ("minatar",), "minatar", model_config=MINATAR_MODEL_CONFIG)
    return {
        "atari/": EnvFamily("atari", "atari/", ("ale_py",), "atari", frame_stack=4),
        "atari-machado/": EnvFamily("atari", "atari-machado/", ("ale_py",), "atari", frame_stack=4),
        "minatar/": minatar,
        "MinAtar/": minatar,  # MinAtar's own ids, MinAtar/<Game>-v0 / -v1 (minatar.py)
        "bsuite/": EnvFamily("bsuite", "bsuite/", ("bsuite", "shimmy"), "bsuite"),
        "HCA/": EnvFamily("known_answer", "HCA/", (), None),
    }


GYMNASIUM = EnvFamily("gymnasium", "", (), None)


def env_family(env_id: Any) -> EnvFamily:
    """The family of an id, from its prefix alone (no environment is built)."""
    if isinstance(env_id, str):
        for prefix, family in _families().items():
            if env_id.startswith(prefix):
                return family
    return GYMNASIUM


@functools.lru_cache(maxsize=None)
def register_all() -> tuple:
    """Register every id of the families above whose package is installed (idempotent)."""
    from hca_rllib.envs.atari import register_atari_envs
    from hca_rllib.envs.bsuite import register_bsuite_envs
    from hca_rllib.envs.known_answer import KNOWN_ANSWER_ENV_IDS, register_known_answer_envs
    from hca_rllib.envs.minatar import register_minatar_envs

    register_known_answer_envs()
    ids = list(KNOWN_ANSWER_ENV_IDS)
    ids += register_atari_envs()
    ids += register_minatar_envs()
    ids += register_bsuite_envs()
    return tuple(ids)


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    """What the algorithm needs to know about a resolved environment."""

    env_id: str
    family: EnvFamily
    observation_space: gym.Space  # one env's, before frame stacking
    action_space: gym.Space
    frame_stack: int

    @property
    def module_observation_space(self) -> gym.Space:
        """The observation space the RLModule sees (after frame stacking)."""
        space = self.observation_space
        if self.frame_stack > 1:
            import numpy as np

            shape = tuple(space.shape[:-1]) + (space.shape[-1] * self.frame_stack,)
            return gym.spaces.Box(
                np.min(space.low), np.max(space.high), shape, space.dtype
            )
        return space


def _require_module(env_id: str, family: EnvFamily) -> None:
    for module in family.modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EnvResolutionError(
                f"environment {env_id!r} needs the optional package {module!r}, which "
                f"failed to import ({error}); install it with: pip install 'hca-rllib[{family.extra}]'"
            ) from None


def _unknown(env_id: str) -> EnvResolutionError:
    candidates = list(gym.envs.registry)
    matches = difflib.get_close_matches(env_id, candidates, n=3, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in candidates}
        matches = [lowered[m] for m in difflib.get_close_matches(env_id.lower(), list(lowered), n=3, cutoff=0.6)]
    hint = f"; did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""
    return EnvResolutionError(
        f"unknown environment id {env_id!r}{hint} (ids: atari/<Game>, atari-machado/<Game>, "
        f"minatar/<Game> or MinAtar/<Game>-v1, bsuite/<experiment>-<setting>, HCA/<Task>-v0, any "
        f"gymnasium id, or "
        f"'module:EnvName-v0')"
    )


def _check_id(env_id: str, family: EnvFamily) -> None:
    if ":" in env_id and family is GYMNASIUM:
        module, _, name = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EnvResolutionError(
                f"environment id {env_id!r}: cannot import module {module!r} ({error})"
            ) from None
        if name not in gym.envs.registry:
            raise EnvResolutionError(
                f"environment id {env_id!r}: module {module!r} imported, but it registers no "
                f"gymnasium id {name!r}"
            )
        return
    if env_id not in gym.envs.registry:
        raise _unknown(env_id)


def _gym_id(env_id: str) -> str:
    return env_id.partition(":")[2] if ":" in env_id else env_id


def resolve_env(
    env: Any,
    env_config: Optional[Dict[str, Any]] = None,
    *,
    frame_stack: Optional[int] = None,
    model_config: Optional[Dict[str, Any]] = None,
) -> Optional[EnvInfo]:
    """Check an environment id and describe it, or raise :class:`EnvResolutionError`.

    Builds one instance of the environment (once per id and ``env_config``) to read its
    spaces. Returns ``None`` for what this resolver cannot inspect without side effects: a
    callable or a name registered with ``ray.tune.register_env``.
    """
    if env is None:
        raise EnvResolutionError("no environment given: set config.environment('<env id>')")
    if not isinstance(env, str):
        return None
    from hca_rllib import compat

    family = env_family(env)
    if family is GYMNASIUM and compat.tune_env_registered(env):
        return None
    register_all()
    _require_module(env, family)
    _check_id(env, family)
    _check_upstream(env, family)
    observation_space, action_space = _spaces(env, dict(env_config or {}))
    if family is GYMNASIUM:
        _warn_raw_atari(env, observation_space)
    if not isinstance(action_space, gym.spaces.Discrete):
        raise EnvResolutionError(
            f"environment {env!r} has action space {action_space}; HCA and A2C need a "
            f"gymnasium.spaces.Discrete action space (they learn action probabilities)"
        )
    stack = family.frame_stack if frame_stack is None else int(frame_stack)
    if stack < 1:
        raise EnvResolutionError(f"frame_stack must be >= 1, got {stack}")
    if stack > 1 and not (isinstance(observation_space, gym.spaces.Box) and observation_space.shape[-1:] == (1,)):
        raise EnvResolutionError(
            f"frame_stack={stack} needs observations of shape (..., 1); environment {env!r} "
            f"gives {observation_space}"
        )
    info = EnvInfo(env, family, observation_space, action_space, stack)
    _check_network(info, {**family.model_config, **(model_config or {})})
    return info


def _check_upstream(env_id: str, family: EnvFamily) -> None:
    """``MinAtar/<Game>-v1`` must be this package's env: the one every Ray worker builds."""
    if not env_id.startswith("MinAtar/"):
        return
    from hca_rllib.envs.minatar import minatar_upstream_ids

    entry_point = gym.spec(env_id).entry_point
    if entry_point != "hca_rllib.envs.minatar:MinAtarEnv":
        ours, kwargs = minatar_upstream_ids().get(env_id, ("minatar/<Game>", {}))
        given = f" with env_config={kwargs}" if kwargs else ""
        raise EnvResolutionError(
            f"environment {env_id!r} is registered in this process by {entry_point!r} (e.g. "
            f"minatar.gym.register_envs()), not by hca_rllib, so Ray workers would build a "
            f"different env; use {ours!r}{given}, the same game"
        )


_WARNED: set = set()


def _warn_raw_atari(env_id: str, observation_space: gym.Space) -> None:
    """One line, once per id and process, for ale-py's own ids (``ALE/Pong-v5``, ...)."""
    spec = gym.spec(_gym_id(env_id))
    if spec.entry_point != "ale_py.env:AtariEnv" or env_id in _WARNED:
        return
    _WARNED.add(env_id)
    from hca_rllib.envs.atari import ATARI_PROTOCOLS, atari_games

    kwargs = spec.kwargs
    names = {rom: name for name, rom in atari_games().items()}
    game = names.get(kwargs.get("game"), "<Game>")
    sticky = float(kwargs.get("repeat_action_probability", 0.25))
    frameskip = kwargs.get("frameskip", 4)
    # The protocol whose sticky actions this id has comes first.
    machado = sticky == ATARI_PROTOCOLS["machado"].repeat_action_probability
    first, second = ("atari-machado", "atari") if machado else ("atari", "atari-machado")
    shape = getattr(observation_space, "shape", None)
    # warn_explicit with a location that has no source line: Python prints one line.
    warnings.warn_explicit(
        f"{env_id!r} is ale-py's raw env (observations {shape}, frameskip {frameskip}, sticky "
        f"actions {sticky:g}, unclipped rewards, no frame stack or life-loss handling), not the "
        f"Atari protocol; for the protocol (84x84 grey, max-pool, 4 stacked frames, clipped "
        f"rewards) use {first + '/' + game!r} or {second + '/' + game!r}",
        RawAtariWarning,
        filename=__name__,
        lineno=0,
        module=__name__,
    )


_SPACES: Dict[str, tuple] = {}


def _spaces(env_id: str, env_config: Dict[str, Any]):
    key = repr((env_id, sorted(env_config.items(), key=lambda item: str(item[0]))))
    if key not in _SPACES:
        try:
            instance = gym.make(env_id, **env_config)
        except TypeError as error:
            raise EnvResolutionError(
                f"environment {env_id!r} rejected env_config {env_config}: {error}"
            ) from None
        try:
            _SPACES[key] = (instance.observation_space, instance.action_space)
        finally:
            instance.close()
    return _SPACES[key]


def _check_network(info: EnvInfo, model_config: Dict[str, Any]) -> None:
    from hca_rllib.module import MIN_DEFAULT_CNN_SIZE, default_cnn_too_small

    space = info.module_observation_space
    if default_cnn_too_small(space, model_config):
        raise EnvResolutionError(
            f"environment {info.env_id!r} gives image observations of shape {space.shape}, "
            f"smaller than the {MIN_DEFAULT_CNN_SIZE}x{MIN_DEFAULT_CNN_SIZE} the default Nature "
            f"CNN needs; set a network for them, e.g. "
            f"config.rl_module(model_config={{'conv_filters': [[16, 3, 1, 'valid']]}})"
        )
