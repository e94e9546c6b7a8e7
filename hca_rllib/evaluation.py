"""`hca-rllib evaluate`: play a checkpoint's policy and report the full-game return.

The policy sees exactly what it saw in training: the environment from the resolver with
the run's `env_config`, and its input batch made by the run's own env-to-module connector
pipeline, the one training's EnvRunners use (frames stacked by RLlib's
`FrameStackingEnvToModule`, zeros before the first frame of an episode). In the classic
Atari protocol an episode ends with each life; a *game* ends when the environment reports
`game_return`, which is what is scored here (unclipped, all lives). No Ray cluster is
needed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hca_rllib.runner import (CHECKPOINTS, CheckpointError, checkpoint_algorithm, newest_valid_checkpoint,
                              user_path, verify_checkpoint)

MODULE_PATH = ("learner_group", "learner", "rl_module", "default_policy")
MAX_VIDEO_FRAMES = 20_000


def find_checkpoint(path, warn=lambda message: print(f"warning: {message}")) -> Path:
    """A checkpoint directory, or the newest valid checkpoint of a run directory, as an
    absolute path (RLlib passes it on to pyarrow, which takes a relative path for a URI)."""
    try:
        path = user_path(path)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if (path / "rllib_checkpoint.json").exists():
        verify_checkpoint(path)
        return path
    if (path / CHECKPOINTS).is_dir():
        found = newest_valid_checkpoint(path, warn)
        if found is None:
            raise CheckpointError(f"run directory {str(path)!r} has no valid checkpoint")
        return found
    raise CheckpointError(f"{str(path)!r} is neither a checkpoint nor a run directory with {CHECKPOINTS}/")


def checkpoint_config(checkpoint: Path) -> Dict[str, Any]:
    """The config state of an HCA or A2C checkpoint (a pickle: load only checkpoints you
    trust); CheckpointError for another algorithm's or an unreadable one."""
    from hca_rllib.hca import ALGORITHMS

    algo_class, state = checkpoint_algorithm(checkpoint)
    if algo_class not in ALGORITHMS.values():
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} is of algorithm "
                              f"{getattr(algo_class, '__name__', algo_class)}, not one of {list(ALGORITHMS)}")
    return state


def load_checkpoint_module(path: Path):
    """The checkpoint's RLModule, a failure (another package version's module, missing
    files) as a one-line CheckpointError."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from hca_rllib import __version__
    from hca_rllib.module import HCATorchRLModule
    from hca_rllib.runner import checkpoint_version

    version = checkpoint_version(path)
    made = (f" (made by hca_rllib {version}; this is {__version__})"
            if version is not None and version != __version__ else "")
    # RLlib logs a warning and falls back to a bare RLModule when the module's class
    # does not unpickle (that is the error here, said once), and a deprecation warning of
    # its own constructor call on every load (not the user's to act on).
    quiet = [logging.getLogger(name) for name in ("ray.rllib.utils.checkpoints", "ray._common.deprecation")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        module = RLModule.from_checkpoint(str(path.joinpath(*MODULE_PATH)))
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(f"checkpoint {str(path)!r}: its module does not load{made}: "
                              f"{type(error).__name__}: {first[:300]}") from None
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    if not isinstance(module, HCATorchRLModule):
        raise CheckpointError(f"checkpoint {str(path)!r}: its module does not load{made}: its class "
                              f"does not unpickle here (RLlib fell back to {type(module).__name__})")
    return module


class TrainingInputs:
    """The module's input batch, made as in training: by the run's own env-to-module
    connector pipeline (`config.build_env_to_module_connector`, the one every EnvRunner
    builds: RLlib's `FrameStackingEnvToModule` when frames are stacked, then RLlib's
    default pieces), fed with an RLlib episode as an EnvRunner feeds it. So there is one
    frame stacking (zeros before an episode's first frame), RLlib's, for both."""

    # Long games are cut into chunks (keeping the lookback the stack needs), as an
    # EnvRunner cuts its episodes, so that memory stays bounded.
    CHUNK = 1000

    def __init__(self, config_state: Dict[str, Any], env, module):
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        config = AlgorithmConfig.from_state(dict(config_state))
        self.pipeline = config.build_env_to_module_connector(env=env)
        self.lookback = config.episode_lookback_horizon
        self.module = module
        self.spaces = (env.observation_space, env.action_space)
        self.episode = None

    def reset(self, observation, infos) -> Dict[str, Any]:
        """A new episode starts with `observation`: the module's input for it."""
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode

        self.episode = SingleAgentEpisode(observation_space=self.spaces[0], action_space=self.spaces[1])
        self.episode.add_env_reset(observation=observation, infos=infos)
        return self._batch()

    def step(self, observation, action, reward, infos) -> Dict[str, Any]:
        """The episode goes on to `observation` (not terminal): the module's input."""
        self.episode.add_env_step(observation=observation, action=action, reward=reward, infos=infos)
        if len(self.episode) >= self.CHUNK:
            self.episode = self.episode.cut(len_lookback_buffer=self.lookback)
        return self._batch()

    def _batch(self) -> Dict[str, Any]:
        return self.pipeline(rl_module=self.module, batch={}, episodes=[self.episode],
                             explore=False, shared_data={})


def _write_video(frames, path: Path, fps: int) -> None:
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        imageio.mimsave(path, frames[::2], duration=2.0 / fps, loop=0)
    elif path.suffix.lower() == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise CheckpointError("an .mp4 video needs imageio-ffmpeg (pip install imageio-ffmpeg); "
                                  "or write a .gif") from None
        imageio.mimsave(path, frames, fps=fps)
    else:
        raise CheckpointError(f"video must end in .gif or .mp4, got {str(path)!r}")


def evaluate_checkpoint(
    checkpoint,
    *,
    episodes: int = 10,
    greedy: bool = False,
    seed: int = 0,
    video: Optional[str] = None,
    output: Optional[str] = None,
) -> Dict[str, Any]:
    """Play `episodes` games; returns (and writes as JSON) mean, std, min, max, median and
    every game's return."""
    import torch

    from hca_rllib.envs import resolve_env

    video, output = _checked_paths(episodes, video, output)
    path = find_checkpoint(checkpoint)
    config = checkpoint_config(path)
    env_id, env_config = config["env"], dict(config.get("env_config") or {})
    info = resolve_env(env_id, env_config, frame_stack=config.get("frame_stack"),
                       model_config=config.get("model_config") or {})
    module = load_checkpoint_module(path)
    module.eval()
    env = _make_env(env_id, env_config, render=video is not None)
    inputs = TrainingInputs(config, env, module)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    game = Game(env, module, inputs, greedy=greedy, rng=rng,
                lives_episodes=info is not None and info.family.name == "atari")
    game.reset(seed)
    _check_module_fits(module, game.batch, path, env_id, env)
    returns = game.play(episodes, video)
    env.close()
    summary = _summary(returns, path, env_id, greedy, episodes, video)
    target = output if output is not None else path.parent / f"evaluation_{path.name}.json"
    if target.suffix != ".json":
        target = target / "evaluation.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(summary, indent=1))
    summary["written_to"] = str(target)
    return summary


def _checked_paths(episodes: int, video: Optional[str], output: Optional[str]
                   ) -> Tuple[Optional[Path], Optional[Path]]:
    """The video and output paths made absolute, after checking the arguments
    (CheckpointError, one line, for a bad one)."""
    if episodes < 1:
        raise CheckpointError(f"--episodes must be >= 1, got {episodes}")
    try:
        video = None if video is None else user_path(video)
        output = None if output is None else user_path(output)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    if video is not None and video.suffix.lower() not in (".gif", ".mp4"):
        raise CheckpointError(f"video must end in .gif or .mp4, got {str(video)!r}")
    return video, output


def _make_env(env_id: str, env_config: Dict[str, Any], render: bool):
    """The run's environment (rendering frames for a video when `render`)."""
    import gymnasium as gym

    try:
        return gym.make(env_id, render_mode="rgb_array" if render else None, **env_config)
    except TypeError as error:
        if render:
            raise CheckpointError(f"environment {env_id!r} cannot render, so no video ({error})") from None
        raise


def _check_module_fits(module, batch: Dict[str, Any], path: Path, env_id: str, env) -> None:
    """A module made for other observations fails here, in one line, not mid-game."""
    import torch

    try:
        with torch.no_grad():
            module.forward_inference(batch)
    except Exception as error:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: its module (observations of shape "
            f"{getattr(module.observation_space, 'shape', None)}) does not fit env {env_id!r} "
            f"(observations of shape {getattr(env.observation_space, 'shape', None)}): {type(error).__name__}: "
            f"{str(error).strip().splitlines()[0][:200] if str(error).strip() else ''}") from None


def choose_action(logits: np.ndarray, greedy: bool, rng: np.random.Generator) -> int:
    """The action for `logits` (one state's): the argmax when `greedy`, else drawn from
    their softmax with `rng`."""
    if greedy:
        return int(np.argmax(logits))
    probs = np.exp(logits - logits.max())
    return int(rng.choice(len(probs), p=probs / probs.sum()))


class Game:
    """Whole games of `env` played by `module` on the inputs training made
    (`TrainingInputs`). A game ends where the env reports `game_return` (Atari: all
    lives; `lives_episodes`, its episodes end with each life), else with the episode."""

    def __init__(self, env, module, inputs: TrainingInputs, *, greedy: bool, rng: np.random.Generator,
                 lives_episodes: bool):
        self.env, self.module, self.inputs = env, module, inputs
        self.greedy, self.rng, self.lives_episodes = greedy, rng, lives_episodes
        self.batch: Optional[Dict[str, Any]] = None  # the module's input for the next step

    def reset(self, seed: Optional[int] = None) -> None:
        obs, reset_info = self.env.reset(seed=seed) if seed is not None else self.env.reset()
        self.batch = self.inputs.reset(obs, reset_info)

    def play(self, games: int, video: Optional[Path] = None) -> List[float]:
        """The returns of `games` games from the current state; the first game's frames
        (up to MAX_VIDEO_FRAMES) written to `video`."""
        import torch
        from ray.rllib.core.columns import Columns

        returns: List[float] = []
        frames: List[Any] = []
        episode_return = 0.0
        recording = video is not None
        while len(returns) < games:
            with torch.no_grad():
                out = self.module.forward_inference(self.batch)
            logits = out[Columns.ACTION_DIST_INPUTS][0].double().numpy()
            action = choose_action(logits, self.greedy, self.rng)
            obs, reward, terminated, truncated, step_info = self.env.step(action)
            episode_return += float(reward)
            if recording and len(frames) < MAX_VIDEO_FRAMES:
                frames.append(self.env.render())
            game_over = False
            if "game_return" in step_info:
                returns.append(float(step_info["game_return"]))
                game_over = True
            elif (terminated or truncated) and not self.lives_episodes:
                returns.append(episode_return)
                game_over = True
            if game_over and recording:
                _write_video(frames, video, fps=self.env.metadata.get("render_fps", 30) or 30)
                recording, frames = False, []
            if terminated or truncated:
                episode_return = 0.0
                self.reset()
            else:
                self.batch = self.inputs.step(obs, action, reward, step_info)
        return returns


def _summary(returns: List[float], path: Path, env_id: str, greedy: bool, episodes: int,
             video: Optional[Path]) -> Dict[str, Any]:
    """What evaluation.json holds: the games' returns and their statistics."""
    values = np.array(returns)
    return {
        "checkpoint": str(path),
        "env": env_id,
        "policy": "greedy" if greedy else "stochastic",
        "episodes": episodes,
        "mean": float(values.mean()),
        "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
        "min": float(values.min()),
        "max": float(values.max()),
        "median": float(np.median(values)),
        "returns": returns,
        "video": None if video is None else str(video),
    }
