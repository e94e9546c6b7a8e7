"""Training throughput: agent steps per second of A2C, HCA, RLlib's PPO and SB3's A2C,
the learner update split, memory per EnvRunner, a profile of sampling, and a projection
to a cluster.

Everything is measured in ONE run of this script, on one machine, and reported as ratios
measured in the same round (the project's machines are shared and noisy, so absolute
speeds are not compared across runs). Torch runs with ONE thread in every process (the
driver sets ``torch.set_num_threads(1)``; remote EnvRunner actors get
``OMP_NUM_THREADS=1`` from Ray, which torch follows).

Two settings (``--env minatar``, ``--env atari`` or both, the default):

* **MinAtar Breakout** (``minatar/Breakout``: 10x10x4 ``uint8`` planes), 8 envs x 64-step
  rollouts = 512 env steps and one update per iteration; MinAtar's network (one 3x3
  conv, 16 channels, valid padding, ReLU; a 128-unit ReLU dense layer; linear policy and
  value heads on that shared torso; ``uint8`` scaled by 1/255 in the module).
* **Atari Pong** (``atari/Pong``, classic protocol) with the tuned examples' config
  ``tuned_examples.common.atari_config("Pong", ...)``: 16 envs x 5-step rollouts = 80
  steps per update, ale-py's C++ vector env (``gym_env_vectorize_mode=
  "vector_entry_point"``), 4 frames stacked by RLlib's connectors, the Nature CNN (3
  convs, a 512-unit dense layer, linear heads on the shared torso), RMSprop, and
  ``min_sample_timesteps_per_iteration=2000`` (one ``train()`` = 25 updates).

Methods (same names in both settings where they exist):

* ``a2c``: ``hca_rllib.A2CConfig`` (MinAtar: ``A2CConfig().environment("minatar/Breakout")``
  with its defaults; Atari: ``atari_config("Pong", "A2C")``), one local EnvRunner
  (``num_env_runners=0``), local learner. The denominator of every ratio.
* ``a2c_lean``, ``a2c_rllib``: the same A2C with ``env_runners(sampler="lean")``
  (``hca_rllib.env_runner.LeanEnvRunner``) and ``sampler="rllib"`` (RLlib's
  ``SingleAgentEnvRunner`` and its connector pipelines): the two sampling paths in one
  run (``a2c`` is whichever is the default).
* ``a2c_plain_act``: the lean sampler without ``hca_rllib.fast_policy``
  (``PlainLeanEnvRunner``: the module's ``_forward_exploration`` and
  ``torch.distributions.Categorical`` each step): what the fast policy step buys, in one
  run.
* ``a2c_stock_step`` (MinAtar only): the lean sampler stepping the ``SyncVectorEnv``
  through its own ``step`` (``StockStepLeanEnvRunner``: ``direct_vector_step = False``,
  the SyncVectorEnv's own step): what the direct vector step buys, in one run.
* ``hca``, ``c2a2c``, ``expected_hca``: ``HCAConfig`` with that ``credit``, same setting, the
  hindsight classifier trained every iteration (its defaults).
* ``a2c_rllib_learner``, ``hca_rllib_learner``: ``a2c`` and ``hca`` with
  ``learners(learner_path="rllib")`` (RLlib's learner connector pieces after
  ``AddOneTsToEpisodesAndTruncate``, the credit from its own no-grad pass) instead of the
  default ``"lean"`` (``hca_rllib.connectors.LeanEpisodesToBatch``: real rows only, the
  bootstrap values from a no-grad pass on the fragment ends, the credit from the
  gradient pass): the two learner paths in one run, both on the lean sampler.
* ``ppo_1epoch``: RLlib's PPO (its ``training_step``, learner, loss and GAE connector)
  with ``num_epochs=1`` and one minibatch of the whole batch (one gradient step on the
  same batch as A2C), ``num_env_runners=0``, the same envs, rollout and batch, and the
  SAME network: its RLModule is this package's ``HCATorchRLModule`` with the A2C
  ``model_config`` (``uses_hindsight=False``, ``vf_share_layers=True``, which PPO would
  otherwise set to False). On Atari it gets the same 4-frame stacking through RLlib's
  ``FrameStackingEnvToModule`` / ``FrameStackingLearner`` connectors (what HCAConfig
  installs) and ``episode_lookback_horizon=3``. What still differs from A2C: PPO's loss
  (clipped ratio, KL term), its GAE connector (advantages standardised), Adam instead of
  RMSprop, and the importance ratio needs the EnvRunner's action log-probs.
* ``ppo_1epoch_rllib_module`` (MinAtar only, an extra): the same PPO with RLlib's default
  PPO module, made as close as it allows: ``conv_filters [[16, 3, 1, "valid"]]``,
  ``head_fcnet_hiddens [128]``, ``vf_share_layers=True``. It differs from our network
  in two ways: the dense 128 layer is part of each head, so the value head has its OWN
  1024->128 layer (the policy path and hence sampling are the same, the learner computes
  one more dense layer), and RLlib's CNN encoder does not cast ``uint8`` frames, so the
  env casts them to float32 in [0, 1] (``TransformObservation``). On Atari this variant
  is not run: casting in the env would store float32 frames (4x the episode memory and
  copies), which changes the sampling cost, so ``ppo_1epoch`` (same module) is the
  comparison there.
* ``sb3_a2c``: Stable-Baselines3's A2C with the SAME network. MinAtar:
  ``A2C("CnnPolicy", make_vec_env(MinAtarEnv("Breakout"), 8), n_steps=64)`` with
  ``features_extractor_class=MinAtarCNN`` (Conv2d(4, 16, 3) + ReLU, flatten, Linear(1024,
  128) + ReLU), ``net_arch=[]`` (linear heads on the shared extractor), ``uint8``
  scaled by 1/255 in SB3's preprocessing (SB3 transposes the channels-last planes with
  ``VecTransposeImage``; RLlib's CNN permutes inside the forward pass; the flatten order
  differs, the arithmetic does not). Atari: the SB3 zoo's setting,
  ``make_atari_env("PongNoFrameskip-v4", n_envs=16)`` (``DummyVecEnv`` of Python envs
  with SB3's ``AtariWrapper``: noop 30, frameskip 4 + max-pool, life loss ends the
  episode, fire reset, 84x84, clipped rewards) + ``VecFrameStack(4)``,
  ``A2C("CnnPolicy", n_steps=5, vf_coef=0.25, ent_coef=0.01, RMSpropTFLike eps 1e-5)``:
  the Nature CNN, same as ours. The remaining difference on Atari is the env stepping:
  SB3 steps 16 Python envs in turn, we step ale-py's C++ vector env.
* ``sb3_a2c_mlp`` (MinAtar only, an extra): SB3's default ``A2C("MlpPolicy")`` (two 64x64
  tanh MLPs on the flattened planes, NOT the conv net above), as in the earlier runs.
* ``a2c_runners1``, ``a2c_runners2``: A2C with 1 and 2 remote EnvRunners
  (``num_cpus_per_env_runner=0.5``), learner in the driver. MinAtar: 8 envs each, the
  batch stays 512 (64- and 32-step fragments: the same batch split over the runners).
  Atari: ``atari_config("Pong", "A2C", num_env_runners=k)``: 16 envs x 5 steps per runner,
  the batch grows with the runners (80 k), as in the tuned examples.

Procedure: for each round (``--rounds``, default 2), for each setting, for each method
(order rotated every round): build, warm up (``train()`` twice on MinAtar, once on Atari,
where one call is 25 updates; SB3: ``learn()`` of 2 MinAtar / 25 Atari updates), then
``train()`` repeatedly until ``--seconds`` of wall time have passed; steps/s = increase
of ``num_env_steps_sampled_lifetime`` over the wall time of those timed calls (SB3:
``model.num_timesteps`` over the wall time of ``learn()``, stopped by a callback after
``--seconds``). Build and warm-up are not timed. Per method: median over rounds of the
steps/s, and median over rounds of the ratio to ``a2c`` of the same round. Also kept per
run: the 1-minute load average before it, the CPU seconds the driver process got per
wall second (``cpu/wall``; with other processes on the 2 cores it is below 1 even for a
single-threaded loop), and the wall time of the three phases of ``training_step``
summed over the timed calls: sampling (``synchronous_parallel_sample``), learner update
(``learner_group.update``) and weight sync (``env_runner_group.sync_weights``), timed by
wrappers the benchmark puts around those three calls for the timed ``train()`` calls only
(``PhaseTimer``; the calls run unchanged). Reported per update (one batch) and as
fractions of the timed wall time. RLlib's own ``timers`` are kept in ``results.json``
(``rllib_timers_ema_s``) but not used: they are exponential moving averages with
coefficient 0.01 over the algorithm's life, still dominated by the first iterations.

Memory: for every RLlib run the driver's resident memory (psutil RSS) and the RSS of
each remote EnvRunner actor (pids from ``env_runner_group.foreach_env_runner(lambda r:
os.getpid(), local_env_runner=False)``), after the warm-up and after the timed
iterations; and the RSS of an idle Ray actor that imported ``hca_rllib``, ``torch``
and RLlib (the floor every EnvRunner pays).

After the rounds (skip with ``--no-details``):

* **Learner update split** (a2c and hca, each setting): build the algorithm, train
  ``WARMUP`` iterations, sample one train batch of episodes from the local EnvRunner,
  then ``--split-reps`` times, on a fresh deep copy of the episodes each time: run the
  learner connector pipeline exactly as ``Learner.update`` does (``connector``: episodes
  to batch, frame stacking, GAE/credit including, for HCA, the no-grad classifier pass
  the advantage needs), then the learner's own pieces one at a time: the module's
  policy and value forward pass (``forward``, as in ``HCATorchRLModule._forward_train``),
  the hindsight head (``hindsight``: ``hindsight_logits`` on the same latent, with
  gradient), ``compute_losses`` (``loss``), ``compute_gradients`` (``backward``:
  zero_grad + ``loss.backward()``) and ``postprocess_gradients`` + ``apply_gradients``
  (``step``: global-norm clip, the non-finite check, the optimizer steps). Beside them,
  on another fresh copy, the whole ``learner_group.update(episodes=...)`` (what
  ``learner_update_timer`` times); ``other`` = whole - sum of the pieces (RLlib's
  batching into a ``MultiAgentBatch``, minibatch iterator, metrics). Inside the
  connector, the no-grad policy/value pass and classifier pass are timed again on their
  own on the same batch (``connector_policy_value``, ``connector_hindsight``). Medians
  over the repetitions; nothing in the package is changed or patched. Written for
  ``learner_path="rllib"``: on the lean path (the default) the connector row holds only
  the batch and the bootstrap pass, and ``loss`` includes the credit pieces (see the
  update profile below for the two paths side by side).
* **Where sampling time goes**: cProfile of ``--profile-calls`` calls of the local
  EnvRunner's ``sample()`` (one train batch each) of MinAtar A2C (and Atari A2C; also
  ``a2c_rllib``, RLlib's runner, when it is among the methods), after
  two ``train()`` calls; the same number of calls timed without the profiler first.
  Own time of every function is assigned to a group by its file (env step, module
  forward, connectors, episode bookkeeping, metrics, EnvRunner loop, hca_rllib's own
  code); the own time of built-ins and of neutral helpers (numpy, dm-tree, the standard
  library, RLlib's numpy/space utilities) goes to their callers' groups in proportion to
  the time of each call edge. Top functions by own and by cumulative time.
* **One update on each learner path** (``--update-profile``, with the
  ``*_rllib_learner`` methods among ``--methods``): for a2c and hca, one algorithm per
  learner path built with the same seed, warmed up, one train batch of episodes
  sampled once; then ``--split-reps`` times, alternating the paths, the whole
  ``learner_group.update(episodes=...)`` on a fresh deep copy, timed; then cProfile of
  ``--profile-calls`` more updates per path: the functions with the largest cumulative
  time. Medians and the ratio rllib / lean of the same repetitions.
* **Projection to a cluster** from the measured numbers (see ``summary.md``).

Reproduce (from the repository root):

    .venv/bin/python benchmarks/throughput.py --seconds 15  # both settings, 2 rounds,
                                                            # ~20 min on 2 busy cores; in
                                                            # benchmarks/results/throughput/
    .venv/bin/python benchmarks/throughput.py --env minatar # one setting only
    .venv/bin/python benchmarks/throughput.py --quick       # smoke test (~2 min), temp dir

Writes ``results.json`` (every measurement, the command line, the machine) and
``summary.md`` (the tables, the throughput targets, the projection) into
``--out``; ``--report-only`` rewrites ``summary.md`` from ``results.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import RAY_INIT_KWARGS, command_line, lifetime_env_steps, machine_note, write_json  # noqa: E402

from hca_rllib.credit import HINDSIGHT_CREDIT_MODES  # noqa: E402

T_PROCESS = time.perf_counter()  # imports and Ray's start count toward the total wall time
DEFAULT_OUT = REPO / "benchmarks" / "results" / "throughput"
MIB = 2**20
ENVS = ("minatar", "atari")
SETTINGS: Dict[str, Dict[str, Any]] = {
    "minatar": {"title": "MinAtar Breakout", "env_id": "minatar/Breakout", "n_envs": 8,
                "n_steps": 64, "warmup_iters": 2,
                "description": "`minatar/Breakout`, 8 envs x 64 steps = 512 steps per update, "
                               "MinAtar's conv net"},
    "atari": {"title": "Atari Pong", "env_id": "atari/Pong", "n_envs": 16, "n_steps": 5,
              "warmup_iters": 1, "steps_per_iteration": 2000,
              "description": "`atari/Pong` with `tuned_examples.common.atari_config`: 16 envs "
                             "x 5 steps = 80 steps per update (25 updates per `train()`), "
                             "C++ vector env, 4 stacked frames, Nature CNN"},
}
METHODS: Dict[str, Tuple[str, ...]] = {
    "minatar": ("a2c", "a2c_lean", "a2c_plain_act", "a2c_stock_step", "a2c_rllib", "a2c_rllib_learner", "hca", "hca_rllib_learner",
                "c2a2c", "expected_hca", "ppo_1epoch", "ppo_1epoch_rllib_module", "sb3_a2c", "sb3_a2c_mlp",
                "a2c_runners1", "a2c_runners2"),
    "atari": ("a2c", "a2c_lean", "a2c_plain_act", "a2c_rllib", "a2c_rllib_learner", "hca", "hca_rllib_learner",
              "c2a2c", "expected_hca", "ppo_1epoch", "sb3_a2c", "a2c_runners1", "a2c_runners2"),
}
# The methods on RLlib's learner path, and the method each is the counterpart of.
RLLIB_LEARNER_SUFFIX = "_rllib_learner"
ALL_METHODS = tuple(dict.fromkeys(METHODS["minatar"] + METHODS["atari"]))
QUICK_METHODS = {"minatar": ("a2c", "hca", "ppo_1epoch", "sb3_a2c", "a2c_runners1"),
                 "atari": ("a2c", "hca", "ppo_1epoch", "sb3_a2c")}
# --quick: one Atari train() = 2 updates instead of 25.
QUICK_ATARI_STEPS_PER_ITERATION = 160
LABELS = {
    "a2c": "A2C (hca_rllib), 0 remote runners, the default sampler",
    "a2c_lean": "A2C, sampler='lean' (hca_rllib's LeanEnvRunner)",
    "a2c_rllib": "A2C, sampler='rllib' (RLlib's SingleAgentEnvRunner)",
    "a2c_plain_act": "A2C, sampler='lean' without fast_policy (the module's forward + Categorical per step)",
    "a2c_stock_step": "A2C, sampler='lean' through SyncVectorEnv.step (no direct vector step)",
    "a2c_rllib_learner": "A2C, learner_path='rllib' (RLlib's learner connector pieces)",
    "hca": "HCA credit=hca",
    "hca_rllib_learner": "HCA credit=hca, learner_path='rllib'",
    "c2a2c": "HCA credit=c2a2c",
    "expected_hca": "HCA credit=expected_hca (the default)",
    "ppo_1epoch": "RLlib PPO, 1 epoch, 1 minibatch, same network (our RLModule)",
    "ppo_1epoch_rllib_module": "extra: RLlib PPO, 1 epoch, RLlib's default PPO module",
    "sb3_a2c": "SB3 A2C, same network",
    "sb3_a2c_mlp": "extra: SB3 A2C MlpPolicy (64x64 tanh MLP, not our network)",
    "a2c_runners1": "A2C, 1 remote EnvRunner",
    "a2c_runners2": "A2C, 2 remote EnvRunners",
}
# SB3's A2C on MinAtar Breakout, 8 envs x 64 steps, on 2 cores (the reference measured with SB3).
SB3_REFERENCE_STEPS_PER_S = 6500
SPLIT_PIECES = ("connector", "forward", "hindsight", "loss", "backward", "step")
SPLIT_LABELS = {
    "connector": "learner connector (episodes -> batch, GAE/credit; HCA: no-grad classifier)",
    "forward": "forward: policy + value (with grad)",
    "hindsight": "hindsight head forward (with grad)",
    "loss": "loss terms (compute_losses)",
    "backward": "backward (zero_grad + loss.backward)",
    "step": "clip + finite check + optimizer step",
    "other": "other (RLlib: MultiAgentBatch, minibatch iterator, metrics)",
}


# ------------------------------------------------------------------------ configs


PPO_FLOAT_ENV_ID = "minatar/Breakout-float32"


def make_breakout_float(env_config: Optional[dict] = None):
    """`minatar/Breakout` with observations cast to float32 in [0, 1], for RLlib's
    default PPO module (its CNN encoder does not cast uint8 inputs)."""
    import gymnasium as gym
    import numpy as np

    from hca_rllib.envs.minatar import MinAtarEnv

    env = MinAtarEnv("Breakout")
    space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
    return gym.wrappers.TransformObservation(
        env, lambda obs: (obs > 0).astype(np.float32), space)


def stack_frames_env_to_module(env=None, spaces=None, device=None):
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule

    return FrameStackingEnvToModule(num_frames=4)


def stack_frames_learner(input_observation_space=None, input_action_space=None):
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner

    return FrameStackingLearner(num_frames=4)


def ours_config(env: str, method: str, quick: bool = False):
    """A2C / HCA config of `method` (a2c, hca, c2a2c, expected_hca, a2c_runners<k>) in `env`."""
    import hca_rllib  # noqa: F401  (registers the env ids)
    from hca_rllib import A2CConfig, HCAConfig

    learner_path = None
    if method.endswith(RLLIB_LEARNER_SUFFIX):
        method, learner_path = method[:-len(RLLIB_LEARNER_SUFFIX)], "rllib"
    runners = int(method[-1]) if method.startswith("a2c_runners") else 0
    credit = method if method in HINDSIGHT_CREDIT_MODES else None
    sampler = {"a2c_lean": "lean", "a2c_rllib": "rllib"}.get(method)
    if env == "atari":
        from tuned_examples.common import atari_config

        config = atari_config("Pong", "HCA" if credit else "A2C", credit,
                              num_env_runners=runners)
        if quick:
            config.reporting(min_sample_timesteps_per_iteration=QUICK_ATARI_STEPS_PER_ITERATION)
    else:
        config = HCAConfig().training(credit=credit) if credit else A2CConfig()
        config = (config.environment(SETTINGS["minatar"]["env_id"])
                  .env_runners(num_envs_per_env_runner=SETTINGS["minatar"]["n_envs"]))
        if runners:
            config = config.env_runners(num_env_runners=runners)
    if runners:
        config = config.env_runners(num_cpus_per_env_runner=0.5)
    if sampler:
        config = config.env_runners(sampler=sampler)
    if method == "a2c_plain_act":
        from hca_rllib.env_runner import PlainLeanEnvRunner

        config = config.env_runners(sampler="lean", env_runner_cls=PlainLeanEnvRunner)
    if method == "a2c_stock_step":
        from hca_rllib.env_runner import StockStepLeanEnvRunner

        config = config.env_runners(sampler="lean", env_runner_cls=StockStepLeanEnvRunner)
    if learner_path:
        config = config.learners(learner_path=learner_path)
    return config


def ppo_config(env: str, rllib_module: bool = False, quick: bool = False):
    """RLlib's PPO, one epoch of one minibatch on the A2C batch of `env`; with our RLModule
    (same network as A2C) unless `rllib_module`."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from hca_rllib.module import HCATorchRLModule

    s = SETTINGS[env]
    batch = s["n_envs"] * s["n_steps"]
    config = (PPOConfig()
              .env_runners(num_env_runners=0, num_envs_per_env_runner=s["n_envs"],
                           rollout_fragment_length=s["n_steps"])
              .training(train_batch_size_per_learner=batch, num_epochs=1, minibatch_size=batch))
    if rllib_module:
        from ray.tune.registry import register_env

        register_env(PPO_FLOAT_ENV_ID, make_breakout_float)
        return (config.environment(PPO_FLOAT_ENV_ID)
                .rl_module(model_config={"conv_filters": [[16, 3, 1, "valid"]],
                                         "head_fcnet_hiddens": [128],
                                         "vf_share_layers": True}))
    a2c = ours_config(env, "a2c", quick)
    model_config = {**a2c.model_config, "vf_share_layers": True, "uses_hindsight": False}
    config = config.environment(a2c.env).rl_module(
        rl_module_spec=RLModuleSpec(module_class=HCATorchRLModule, model_config=model_config))
    if env == "atari":
        config = (config
                  .env_runners(gym_env_vectorize_mode="vector_entry_point",
                               episode_lookback_horizon=3,
                               env_to_module_connector=stack_frames_env_to_module)
                  .training(learner_connector=stack_frames_learner)
                  .reporting(min_sample_timesteps_per_iteration=(
                      a2c.min_sample_timesteps_per_iteration)))
    return config


def rllib_config(env: str, method: str, quick: bool = False):
    if method == "ppo_1epoch":
        return ppo_config(env, quick=quick)
    if method == "ppo_1epoch_rllib_module":
        return ppo_config(env, rllib_module=True, quick=quick)
    return ours_config(env, method, quick)


# ----------------------------------------------------------------------- measuring


def rss_mib(pid: Optional[int] = None) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / MIB


def cpu_seconds(pid: Optional[int] = None) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def runner_pids(algo) -> List[int]:
    """Process ids of the remote EnvRunner actors of `algo`."""
    return list(algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(),
                                                         local_env_runner=False))


def load1() -> Optional[float]:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


class PhaseTimer:
    """Wall time of the three phases of `training_step` (sampling, learner update, weight
    sync), summed over the timed `train()` calls: timing wrappers around
    `synchronous_parallel_sample` as the algorithm's module calls it, and around this
    algorithm's `learner_group.update` and `env_runner_group.sync_weights` (instance
    attributes). The wrapped calls run unchanged; everything is restored by `close()`.
    RLlib's own `timers` are exponential moving averages with coefficient 0.01 over the
    algorithm's whole life, so they still carry most of the first iterations' weight.
    """

    def __init__(self, algo) -> None:
        self.seconds = {"sampling": 0.0, "learner_update": 0.0, "synch_weights": 0.0}
        self.calls = {key: 0 for key in self.seconds}
        self.on = False
        self.module = sys.modules[type(algo).training_step.__module__]
        self.sample = self.module.synchronous_parallel_sample
        self.module.synchronous_parallel_sample = self._wrap("sampling", self.sample)
        self.algo = algo
        algo.learner_group.update = self._wrap("learner_update", algo.learner_group.update)
        algo.env_runner_group.sync_weights = self._wrap(
            "synch_weights", algo.env_runner_group.sync_weights)

    def _wrap(self, key: str, func: Callable) -> Callable:
        def timed(*args, **kwargs):
            if not self.on:
                return func(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1
        return timed

    def close(self) -> None:
        self.module.synchronous_parallel_sample = self.sample
        for obj, name in ((self.algo.learner_group, "update"),
                          (self.algo.env_runner_group, "sync_weights")):
            obj.__dict__.pop(name, None)


def time_rllib(env: str, method: str, seconds: float, quick: bool) -> Dict[str, Any]:
    load = load1()
    t0 = time.perf_counter()
    algo = rllib_config(env, method, quick).build_algo()
    phases = PhaseTimer(algo)
    try:
        setup_s = time.perf_counter() - t0
        learner = getattr(algo.learner_group, "_learner", None)
        network = str(learner.module) if learner is not None else None
        result = None
        for _ in range(SETTINGS[env]["warmup_iters"]):
            result = algo.train()
        pids = runner_pids(algo) if algo.env_runner_group.num_remote_env_runners() else []
        memory: Dict[str, Any] = {"driver_rss_mib_warm": rss_mib()}
        if pids:
            memory["env_runner_rss_mib_warm"] = [rss_mib(pid) for pid in pids]
        steps0 = lifetime_env_steps(result)
        iters = 0
        cpu0 = cpu_seconds()
        runners_cpu0 = [cpu_seconds(pid) for pid in pids]
        phases.on = True
        start = time.perf_counter()
        while True:
            result = algo.train()
            iters += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        phases.on = False
        cpu = cpu_seconds() - cpu0
        runners_cpu = [cpu_seconds(pid) - c0 for pid, c0 in zip(pids, runners_cpu0)]
        steps = lifetime_env_steps(result) - steps0
        memory["driver_rss_mib_end"] = rss_mib()
        if pids:
            memory["env_runner_rss_mib_end"] = [rss_mib(pid) for pid in pids]
        memory["iterations_between"] = iters
        timers = {k: float(v) for k, v in (result.get("timers") or {}).items()
                  if isinstance(v, (int, float))}
    finally:
        phases.close()
        algo.stop()
    updates = phases.calls["learner_update"]
    out = {"env_steps": int(steps), "wall_s": elapsed, "iterations": iters,
           "steps_per_s": steps / elapsed, "setup_s": setup_s,
           "iteration_s": elapsed / iters, "updates": updates,
           "rllib_timers_ema_s": timers, "cpu_per_wall": cpu / elapsed,
           "cpu_s_driver": cpu, "cpu_s_env_runners": runners_cpu,
           "steps_per_cpu_s": steps / (cpu + sum(runners_cpu)),
           "load1_before": load, "memory": memory,
           "phase_s_total": dict(phases.seconds), "phase_calls": dict(phases.calls),
           "network": network}
    # Per training_step (one batch, one update); a train() runs several on Atari.
    out["phase_s_per_update"] = {k: v / max(updates, 1) for k, v in phases.seconds.items()}
    out["fraction_sampling"] = phases.seconds["sampling"] / elapsed
    out["fraction_learner_update"] = phases.seconds["learner_update"] / elapsed
    out["fraction_synch_weights"] = phases.seconds["synch_weights"] / elapsed
    return out


def minatar_cnn_class():
    """SB3 features extractor equal to our MinAtar torso: Conv2d(C, 16, 3, stride 1,
    valid) + ReLU, flatten, Linear(16 * 8 * 8, 128) + ReLU."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarCNN(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = 128):
            super().__init__(observation_space, features_dim)
            channels, height, width = observation_space.shape  # SB3 transposed it to CxHxW
            self.cnn = nn.Sequential(nn.Conv2d(channels, 16, 3, 1), nn.ReLU(), nn.Flatten())
            flat = 16 * (height - 2) * (width - 2)
            self.linear = nn.Sequential(nn.Linear(flat, features_dim), nn.ReLU())

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            return self.linear(self.cnn(observations))

    return MinAtarCNN


def sb3_model(env: str, method: str, quick: bool):
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    s = SETTINGS[env]
    if env == "atari":
        import ale_py
        import gymnasium as gym
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        gym.register_envs(ale_py)
        vec = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=s["n_envs"], seed=0),
                            n_stack=4)
        model = A2C("CnnPolicy", vec, n_steps=s["n_steps"], vf_coef=0.25, ent_coef=0.01,
                    policy_kwargs=dict(optimizer_class=RMSpropTFLike,
                                       optimizer_kwargs=dict(eps=1e-5)),
                    seed=0, device="cpu", verbose=0)
        return model, vec
    from hca_rllib.envs.minatar import MinAtarEnv

    vec = make_vec_env(lambda: MinAtarEnv("Breakout"), n_envs=s["n_envs"], seed=0)
    if method == "sb3_a2c_mlp":
        model = A2C("MlpPolicy", vec, n_steps=s["n_steps"], seed=0, device="cpu", verbose=0)
    else:
        model = A2C("CnnPolicy", vec, n_steps=s["n_steps"], seed=0, device="cpu", verbose=0,
                    policy_kwargs=dict(features_extractor_class=minatar_cnn_class(),
                                       features_extractor_kwargs=dict(features_dim=128),
                                       net_arch=[]))
    return model, vec


def time_sb3(env: str, method: str, seconds: float, quick: bool) -> Dict[str, Any]:
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAfter(BaseCallback):
        def __init__(self, deadline: float):
            super().__init__()
            self.deadline = deadline

        def _on_step(self) -> bool:
            return time.perf_counter() < self.deadline

    s = SETTINGS[env]
    batch = s["n_envs"] * s["n_steps"]
    load = load1()
    t0 = time.perf_counter()
    model, vec = sb3_model(env, method, quick)
    setup_s = time.perf_counter() - t0
    warmup = s.get("steps_per_iteration", batch) * s["warmup_iters"]
    if quick and env == "atari":
        warmup = QUICK_ATARI_STEPS_PER_ITERATION
    model.learn(total_timesteps=warmup)
    steps0 = model.num_timesteps
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    model.learn(total_timesteps=10**9, reset_num_timesteps=False,
                callback=StopAfter(start + seconds))
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds() - cpu0
    steps = model.num_timesteps - steps0
    vec.close()
    return {"env_steps": int(steps), "wall_s": elapsed, "iterations": steps // batch,
            "steps_per_s": steps / elapsed, "setup_s": setup_s, "cpu_per_wall": cpu / elapsed,
            "cpu_s_driver": cpu, "steps_per_cpu_s": steps / cpu,
            "load1_before": load, "network": str(model.policy)}


def measure(env: str, method: str, seconds: float, quick: bool) -> Dict[str, Any]:
    if method.startswith("sb3_"):
        return time_sb3(env, method, seconds, quick)
    return time_rllib(env, method, seconds, quick)


def idle_actor_rss() -> Dict[str, float]:
    """RSS of a Ray actor that only imported hca_rllib, torch and RLlib's EnvRunner."""
    import ray

    @ray.remote(num_cpus=0)
    class Probe:
        def rss(self) -> Dict[str, float]:
            before = rss_mib()
            import torch  # noqa: F401
            from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # noqa: F401

            import hca_rllib  # noqa: F401

            return {"bare_actor_mib": before, "after_imports_mib": rss_mib()}

    probe = Probe.remote()
    try:
        return ray.get(probe.rss.remote())
    finally:
        ray.kill(probe)


# -------------------------------------------------------------------- learner split


def learner_split(env: str, method: str, reps: int, quick: bool) -> Dict[str, Any]:
    """Time the pieces of one learner update (see the module docstring), on RLlib's
    learner path (`learner_path="rllib"`), whose connector pieces it takes apart; the lean
    path computes the credit inside the loss, and `--update-profile` compares the two."""
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from hca_rllib.module import HINDSIGHT_LOGITS, REMAINDER_VALUES

    algo = ours_config(env, method, quick).learners(learner_path="rllib").build_algo()
    try:
        for _ in range(SETTINGS[env]["warmup_iters"]):
            algo.train()
        learner = algo.learner_group._learner
        episodes = algo.env_runner.sample()
        n_steps = sum(len(e) for e in episodes)
        mid = DEFAULT_MODULE_ID
        module = learner.module[mid].unwrapped()
        times: Dict[str, List[float]] = {k: [] for k in SPLIT_PIECES + (
            "whole", "connector_policy_value", "connector_hindsight")}
        clock = time.perf_counter
        for rep in range(reps + 1):  # the first repetition is a warm-up, not kept
            eps = copy.deepcopy(episodes)
            t0 = clock()
            batch = learner._learner_connector(rl_module=learner.module, batch={}, episodes=eps,
                                               shared_data={}, metrics=learner.metrics)
            t1 = clock()
            b = batch[mid]
            outcome = module.outcome_column  # the return, or the window's rewards
            has_hindsight = outcome in b and module.hindsight is not None
            obs = b[Columns.OBS]
            latent = module.pi_torso(obs)
            logits = module.pi(latent)
            values, remainder = module.values_and_remainder(obs, latent)
            fwd = {Columns.ACTION_DIST_INPUTS: logits, Columns.EMBEDDINGS: latent, Columns.VF_PREDS: values}
            if remainder is not None:
                fwd[REMAINDER_VALUES] = remainder
            t2 = clock()
            if has_hindsight:
                fwd[HINDSIGHT_LOGITS] = module.hindsight_logits(obs, latent, logits, b[outcome])
            t3 = clock() if has_hindsight else t2
            losses = learner.compute_losses(fwd_out={mid: fwd}, batch={mid: b})
            t4 = clock()
            grads = learner.compute_gradients(losses)
            t5 = clock()
            learner.apply_gradients(learner.postprocess_gradients(grads))
            t6 = clock()
            # The connector's own no-grad passes, again on their own on this batch.
            with torch.no_grad():
                t7 = clock()
                c_latent = module.pi_torso(obs)
                c_logits = module.pi(c_latent)
                module.values_and_remainder(obs, c_latent)
                t8 = clock()
                if has_hindsight:
                    module.hindsight_logits(obs, c_latent, c_logits, b[outcome])
                t9 = clock() if has_hindsight else t8
            eps = copy.deepcopy(episodes)
            t10 = clock()
            algo.learner_group.update(episodes=eps, timesteps={
                NUM_ENV_STEPS_SAMPLED_LIFETIME: (rep + 1) * n_steps})
            t11 = clock()
            if rep == 0:
                continue
            for key, value in (("connector", t1 - t0), ("forward", t2 - t1),
                               ("hindsight", t3 - t2), ("loss", t4 - t3), ("backward", t5 - t4),
                               ("step", t6 - t5), ("connector_policy_value", t8 - t7),
                               ("connector_hindsight", t9 - t8), ("whole", t11 - t10)):
                times[key].append(value)
    finally:
        algo.stop()
    ms = {k: 1000 * statistics.median(v) for k, v in times.items()}
    whole = ms["whole"]
    pieces = sum(ms[k] for k in SPLIT_PIECES)
    ms["other"] = whole - pieces
    fractions = {k: ms[k] / whole for k in SPLIT_PIECES + ("other",)}
    return {"env": env, "method": method, "reps": reps, "batch_env_steps": n_steps,
            "ms_median": ms, "sum_of_pieces_ms": pieces, "fraction_of_whole": fractions,
            "whole_ms_rounds": [1000 * v for v in times["whole"]]}


def update_profile(env: str, method: str, reps: int, calls: int, quick: bool) -> Dict[str, Any]:
    """One learner update on each learner path, same episodes (see the module docstring)."""
    import cProfile
    import pstats

    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    paths = {"lean": method, "rllib": method + RLLIB_LEARNER_SUFFIX}
    algos = {path: ours_config(env, m, quick).debugging(seed=0).build_algo() for path, m in paths.items()}
    try:
        for algo in algos.values():
            for _ in range(SETTINGS[env]["warmup_iters"]):
                algo.train()
        episodes = algos["lean"].env_runner.sample()
        n_steps = sum(len(e) for e in episodes)
        times: Dict[str, List[float]] = {path: [] for path in paths}
        clock = time.perf_counter

        def update(path: str, rep: int) -> None:
            algos[path].learner_group.update(episodes=copy.deepcopy(episodes), timesteps={
                NUM_ENV_STEPS_SAMPLED_LIFETIME: (rep + 1) * n_steps})

        for rep in range(reps + 1):  # the first repetition is a warm-up, not kept
            for path in (paths if rep % 2 == 0 else list(paths)[::-1]):
                t0 = clock()
                update(path, rep)
                if rep:
                    times[path].append(clock() - t0)
        top: Dict[str, List[Dict[str, Any]]] = {}
        for path in paths:
            profiler = cProfile.Profile()
            profiler.enable()
            for rep in range(calls):
                update(path, reps + 1 + rep)
            profiler.disable()
            stats = pstats.Stats(profiler).stats
            rows = sorted(((_func_name(f), v[3] / calls, v[2] / calls) for f, v in stats.items()),
                          key=lambda r: -r[1])
            top[path] = [{"function": name, "cum_ms": 1000 * cum, "own_ms": 1000 * own}
                         for name, cum, own in rows[:200]]
    finally:
        for algo in algos.values():
            algo.stop()
    ms = {path: 1000 * statistics.median(v) for path, v in times.items()}
    per_rep = [b / a for a, b in zip(times["lean"], times["rllib"])]
    return {"env": env, "method": method, "reps": reps, "profiled_calls": calls,
            "batch_env_steps": n_steps, "ms_median": ms,
            "ratio_rllib_to_lean_median": statistics.median(per_rep), "top": top}


# ------------------------------------------------------------------- sampling profile


PROFILE_GROUPS = (
    ("env step (env, gymnasium, ale-py)", ("/minatar/", "hca_rllib/envs/", "/gymnasium/",
                                          "/ale_py/")),
    ("module forward (torch, RLModule)", ("hca_rllib/module.py", "/torch/",
                                          "rllib/core/models/", "rllib/core/rl_module/")),
    ("connectors (incl. action sampling)", ("rllib/connectors/", "rllib/core/distribution/")),
    ("episode bookkeeping", ("rllib/env/single_agent_episode", "rllib/env/utils/",
                             "rllib/env/multi_agent_episode")),
    ("metrics", ("rllib/utils/metrics/",)),
    ("callbacks (RLlib + hca_rllib)", ("rllib/callbacks/", "hca_rllib/callbacks.py")),
    ("hca_rllib, other", ("hca_rllib/",)),
    ("EnvRunner loop", ("rllib/env/",)),
)
# Helpers whose own time belongs to whoever called them: built-ins, numpy, dm-tree,
# RLlib's numpy/space/torch utilities, the standard library, Ray internals.
NEUTRAL = ("/numpy/", "/tree/", "/ray/rllib/utils/", "/ray/_private/", "/ray/util/",
           "/typing_extensions")


def _profile_group(filename: str) -> Optional[str]:
    """The group of a function by its file; None for a neutral helper."""
    f = filename.replace("\\", "/")
    if "/rllib/utils/metrics/" in f:
        return "metrics"
    for group, needles in PROFILE_GROUPS:
        if any(n in f for n in needles):
            return group
    if (f == "~" or f.startswith("<") or any(n in f for n in NEUTRAL)
            or "/site-packages/" not in f):
        return None
    return "other"


def group_own_time(stats: Dict[Any, Any]) -> Dict[str, float]:
    """Own time per group; neutral functions' own time goes to their callers' groups."""
    memo: Dict[Any, Dict[str, float]] = {}

    def shares(func, depth: int = 0) -> Dict[str, float]:
        if func in memo:
            return memo[func]
        group = _profile_group(func[0])
        if group is not None:
            memo[func] = {group: 1.0}
            return memo[func]
        callers = stats.get(func, (0, 0, 0, 0, {}))[4]
        if depth > 30 or not callers:
            return {"other": 1.0}
        memo[func] = {"other": 1.0}  # guard against recursion cycles
        weights = {c: (edge[3] if len(edge) > 3 else 0.0) for c, edge in callers.items()}
        total = sum(weights.values())
        out: Dict[str, float] = {}
        for caller, w in weights.items():
            frac = w / total if total > 0 else 1.0 / len(weights)
            for g, s in shares(caller, depth + 1).items():
                out[g] = out.get(g, 0.0) + frac * s
        memo[func] = out
        return out

    totals: Dict[str, float] = {}
    for func, (_cc, _nc, tt, _ct, _callers) in stats.items():
        for g, s in shares(func).items():
            totals[g] = totals.get(g, 0.0) + tt * s
    return totals


def _func_name(func) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    parts = filename.replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])}:{line}({name})"


def profile_sampling(env: str, calls: int, quick: bool, method: str = "a2c") -> Dict[str, Any]:
    import cProfile
    import pstats

    algo = ours_config(env, method, quick).build_algo()
    try:
        for _ in range(2):
            algo.train()
        runner = algo.env_runner
        steps = 0
        start = time.perf_counter()
        for _ in range(calls):
            steps += sum(len(e) for e in runner.sample())
        plain_s = time.perf_counter() - start
        profiler = cProfile.Profile()
        psteps = 0
        start = time.perf_counter()
        profiler.enable()
        for _ in range(calls):
            psteps += sum(len(e) for e in runner.sample())
        profiler.disable()
        profiled_s = time.perf_counter() - start
        # RLlib's TorchRLModule.forward_exploration calls `self.eval()` before every
        # forward pass; torch walks every submodule through nn.Module.__setattr__.
        module = runner.module
        reps = 2000
        start = time.perf_counter()
        for _ in range(reps):
            module.eval()
        eval_us = 1e6 * (time.perf_counter() - start) / reps
        n_submodules = sum(1 for _ in module.modules())
    finally:
        algo.stop()
    stats = pstats.Stats(profiler).stats
    total = sum(v[2] for v in stats.values())
    groups = group_own_time(stats)
    own = sorted(stats.items(), key=lambda kv: -kv[1][2])[:15]
    cumulative = sorted(stats.items(), key=lambda kv: -kv[1][3])[:25]
    ours = sorted(((f, v) for f, v in stats.items() if "hca_rllib/" in f[0].replace("\\", "/")),
                  key=lambda kv: -kv[1][3])
    vector_steps = calls * SETTINGS[env]["n_steps"]
    return {
        "env": env, "method": method, "sampler": algo.config.resolved_sampler, "calls": calls,
        "steps_per_s_unprofiled": steps / plain_s, "steps_per_s_profiled": psteps / profiled_s,
        "vector_step_us_unprofiled": 1e6 * plain_s / vector_steps,
        "module_eval_us": eval_us, "module_submodules": n_submodules,
        "profiled_total_own_s": total,
        "hca_rllib_own_s": sum(v[2] for _f, v in ours),
        "hca_rllib_functions": [{"function": _func_name(f), "calls": v[1], "own_s": v[2],
                                 "cum_s": v[3]} for f, v in ours],
        "groups_own_s": groups,
        "groups_fraction": {g: v / total for g, v in groups.items()},
        "top_own": [{"function": _func_name(f), "calls": v[1], "own_s": v[2], "cum_s": v[3],
                     "group": _profile_group(f[0]) or "(helper: caller's group)"}
                    for f, v in own],
        "top_cumulative": [{"function": _func_name(f), "calls": v[1], "own_s": v[2],
                            "cum_s": v[3]} for f, v in cumulative],
    }


# ------------------------------------------------------------------------ summary


def median(values: List[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


def summarise(rounds: List[Dict[str, Dict[str, Dict[str, Any]]]], env: str
              ) -> Dict[str, Dict[str, Any]]:
    summary: Dict[str, Dict[str, Any]] = {}
    env_rounds = [r[env] for r in rounds if env in r]
    for method in METHODS[env]:
        runs = [r[method] for r in env_rounds if method in r]
        if not runs:
            continue
        ratios = [r[method]["steps_per_s"] / r["a2c"]["steps_per_s"] for r in env_rounds
                  if method in r and "a2c" in r]
        cpu_ratios = [r[method]["steps_per_cpu_s"] / r["a2c"]["steps_per_cpu_s"]
                      for r in env_rounds if method in r and "a2c" in r]
        entry: Dict[str, Any] = {
            "steps_per_s_median": median([x["steps_per_s"] for x in runs]),
            "steps_per_s_rounds": [x["steps_per_s"] for x in runs],
            "ratio_to_a2c_median": median(ratios), "ratio_to_a2c_rounds": ratios,
            "steps_per_cpu_s_median": median([x["steps_per_cpu_s"] for x in runs]),
            "cpu_ratio_to_a2c_median": median(cpu_ratios), "cpu_ratio_to_a2c_rounds": cpu_ratios,
            "cpu_per_wall_median": median([x.get("cpu_per_wall") for x in runs]),
            "load1_rounds": [x.get("load1_before") for x in runs]}
        entry["driver_cpu_us_per_step_median"] = median(
            [1e6 * x["cpu_s_driver"] / x["env_steps"] for x in runs])
        if runs[0].get("cpu_s_env_runners"):
            entry["env_runner_cpu_us_per_step_median"] = median(
                [1e6 * sum(x["cpu_s_env_runners"]) / x["env_steps"] for x in runs])
        if "phase_s_per_update" in runs[0]:
            for key in ("sampling", "learner_update", "synch_weights"):
                entry[f"fraction_{key}_median"] = median([x.get(f"fraction_{key}") for x in runs])
                entry[f"{key}_s_median"] = median([x["phase_s_per_update"][key] for x in runs])
        if "memory" in runs[-1]:
            entry["memory_last_round"] = runs[-1]["memory"]
        summary[method] = entry
    return summary


def fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def batch_of(env: str, method: str) -> int:
    s = SETTINGS[env]
    batch = s["n_envs"] * s["n_steps"]
    if env == "atari" and method.startswith("a2c_runners"):
        batch *= int(method[-1])
    return batch


def targets(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The throughput targets, judged on wall-clock steps/s (same-round ratios); beside each,
    the same comparison in steps per CPU-second (driver + EnvRunner processes), which the
    other load on the machine disturbs much less."""
    out = []
    for env in ENVS:
        summary = data.get("envs", {}).get(env, {}).get("summary")
        if not summary:
            continue

        def ratios(m: str) -> Tuple[Optional[float], Optional[float]]:
            s = summary.get(m, {})
            return s.get("ratio_to_a2c_median"), s.get("cpu_ratio_to_a2c_median")

        def add(target: str, name: str, num: str, den: str, threshold: float = 1.0) -> None:
            (nw, nc), (dw, dc) = ratios(num), ratios(den)
            if None in (nw, dw):
                return
            wall = nw / dw
            cpu = nc / dc if nc is not None and dc else None
            out.append({"env": env, "target": target, "value": f"{name} = {wall:.2f}",
                        "ratio_wall": wall, "ratio_cpu": cpu, "threshold": threshold,
                        "met": bool(wall >= threshold),
                        "met_cpu": None if cpu is None else bool(cpu >= threshold)})

        for mode in HINDSIGHT_CREDIT_MODES:
            add(f"{mode} >= 0.9 x A2C", f"{mode} / A2C", mode, "a2c", 0.9)
        add("A2C >= RLlib PPO (1 epoch, same batch and network)", "A2C / PPO", "a2c",
            "ppo_1epoch")
        add("HCA >= RLlib PPO (1 epoch, same batch and network)", "HCA / PPO", "hca",
            "ppo_1epoch")
        add("lean sampler >= RLlib's (A2C, 0 runners)", "a2c_lean / a2c_rllib", "a2c_lean",
            "a2c_rllib")
        add("lean learner path >= RLlib's (A2C)", "a2c / a2c_rllib_learner", "a2c",
            "a2c_rllib_learner")
        add("lean learner path >= RLlib's (HCA)", "hca / hca_rllib_learner", "hca",
            "hca_rllib_learner")
        lean_target = 1.5 if env == "minatar" else 1.0  # per CPU-second
        add(f"A2C lean >= {lean_target} x SB3 A2C (same network; per CPU-second)",
            "a2c_lean / SB3", "a2c_lean", "sb3_a2c", lean_target)
        add("A2C (0 runners) >= SB3 A2C (same network)", "A2C / SB3", "a2c", "sb3_a2c")
        add("HCA (0 runners) >= SB3 A2C (same network)", "HCA / SB3", "hca", "sb3_a2c")
        candidates = [m for m in ("a2c", "a2c_runners1", "a2c_runners2")
                      if ratios(m)[0] is not None]
        if "sb3_a2c" in summary and candidates:
            best = max(candidates, key=lambda m: ratios(m)[0])
            add("best A2C on this machine (0-2 remote runners) >= SB3 A2C (same network)",
                f"{best} / SB3", best, "sb3_a2c")
        if env == "minatar" and summary.get("a2c"):
            a2c = summary["a2c"]["steps_per_s_median"]
            out.append({"env": env, "target": f"A2C >= {SB3_REFERENCE_STEPS_PER_S:,} steps/s "
                        "(the SB3 reference, absolute, measured in another run)",
                        "value": f"{a2c:,.0f} steps/s",
                        "ratio_wall": a2c / SB3_REFERENCE_STEPS_PER_S,
                        "ratio_cpu": None, "threshold": 1.0,
                        "met": bool(a2c >= SB3_REFERENCE_STEPS_PER_S), "met_cpu": None})
    return out


def projection(data: Dict[str, Any], env: str) -> Optional[Dict[str, Any]]:
    """Synchronous A2C with k EnvRunners on k dedicated cores: an iteration is the
    slowest runner's sampling plus the learner update plus the weight sync, so
    steps/s(k) = B_k / (b_k / r + u B_k + W) with r one runner's sampling rate, b_k the
    steps each runner samples per iteration, B_k the batch, u the learner's time per
    step (the update is linear in the batch on a CPU learner) and W the sync. The
    ceiling is 1 / u (= batch / update time) whatever k.

    Two sets of inputs: "as measured" (wall times on this busy machine: r from the
    sampling phase with one remote runner, u from the update phase with 0 runners, W
    from the sync phase with one runner) and "dedicated cores" (CPU time with one remote
    runner: r = steps per CPU-second of the EnvRunner process, u = the driver's CPU
    seconds per step, which hold the learner update, the connector, receiving the
    episodes and the sync, W = 0)."""
    summary = data.get("envs", {}).get(env, {}).get("summary", {})
    one = summary.get("a2c_runners1")
    zero = summary.get("a2c")
    if not one or not zero or not one.get("sampling_s_median") or not zero.get(
            "learner_update_s_median"):
        return None
    s = SETTINGS[env]
    b1 = s["n_envs"] * s["n_steps"]  # steps one runner samples per iteration (1 runner)
    inputs = {"as_measured": {"r": b1 / one["sampling_s_median"],
                              "u": zero["learner_update_s_median"] / b1,
                              "w": one.get("synch_weights_s_median") or 0.0}}
    if one.get("env_runner_cpu_us_per_step_median"):
        inputs["dedicated_cores"] = {"r": 1e6 / one["env_runner_cpu_us_per_step_median"],
                                     "u": 1e-6 * one["driver_cpu_us_per_step_median"],
                                     "w": 0.0}
    sb3 = summary.get("sb3_a2c", {}).get("steps_per_s_median")
    sb3_cpu = summary.get("sb3_a2c", {}).get("steps_per_cpu_s_median")
    out: Dict[str, Any] = {"batch": b1, "sb3_steps_per_s": sb3, "sb3_steps_per_cpu_s": sb3_cpu,
                           "local_sampling_steps_per_s": (b1 / zero["sampling_s_median"]
                                                          if zero.get("sampling_s_median")
                                                          else None)}
    for name, x in inputs.items():
        rows = []
        for k in (1, 2, 4, 8, 16, 32, 64):
            if env == "atari":  # batch grows with the runners (tuned examples)
                batch, per_runner = k * b1, b1
            else:  # fixed batch split over the runners
                batch, per_runner = b1, b1 / k
            t = per_runner / x["r"] + x["u"] * batch + x["w"]
            rows.append({"runners": k, "batch": batch, "steps_per_s": batch / t,
                         "learner_share": x["u"] * batch / t})
        reference = sb3 if name == "as_measured" else sb3_cpu
        need = (next((row["runners"] for row in rows if row["steps_per_s"] >= reference), None)
                if reference else None)
        out[name] = {"per_runner_sampling_steps_per_s": x["r"],
                     "learner_ms_per_batch": 1000 * x["u"] * b1,
                     "synch_weights_ms": 1000 * x["w"],
                     "learner_ceiling_steps_per_s": 1.0 / x["u"], "rows": rows,
                     "sb3_reference": reference, "runners_to_pass_sb3": need}
    return out


def _method_table(env: str, summary: Dict[str, Dict[str, Any]]) -> List[str]:
    lines = [
        "| method | batch | steps/s | ratio to A2C (per round) | steps per CPU-s | its ratio "
        "to A2C | fraction of the time: sampling / learner update / weight sync "
        "| ms per update: sampling / learner update | cpu/wall (driver) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method in METHODS[env]:
        if method not in summary:
            continue
        s = summary[method]
        split = per_update = "-"
        if s.get("fraction_sampling_median") is not None:
            split = " / ".join(f"{s[f'fraction_{k}_median']:.2f}"
                               for k in ("sampling", "learner_update", "synch_weights"))
            per_update = (f"{1000 * s['sampling_s_median']:.1f} / "
                          f"{1000 * s['learner_update_s_median']:.1f}")
        rounds = ", ".join(f"{r:.2f}" for r in s["ratio_to_a2c_rounds"])
        lines.append(
            f"| `{method}`: {LABELS[method]} | {batch_of(env, method)} "
            f"| {fmt(s['steps_per_s_median'], ',.0f')} "
            f"| {fmt(s['ratio_to_a2c_median'], '.2f')} ({rounds}) "
            f"| {fmt(s.get('steps_per_cpu_s_median'), ',.0f')} "
            f"| {fmt(s.get('cpu_ratio_to_a2c_median'), '.2f')} | {split} | {per_update} "
            f"| {fmt(s.get('cpu_per_wall_median'), '.2f')} |")
    return lines


def _split_table(splits: List[Dict[str, Any]]) -> List[str]:
    if not splits:
        return []
    head = " | ".join(f"{s['env']} `{s['method']}` ms (fraction)" for s in splits)
    lines = [f"| piece | {head} |", "|---|" + "---|" * len(splits)]
    for key in SPLIT_PIECES + ("other",):
        cells = " | ".join(f"{s['ms_median'][key]:.2f} ({s['fraction_of_whole'][key]:.2f})"
                           for s in splits)
        lines.append(f"| {SPLIT_LABELS[key]} | {cells} |")
    cells = " | ".join(f"**{s['ms_median']['whole']:.2f}** (1.00)" for s in splits)
    lines.append(f"| **whole `learner_group.update`** | {cells} |")
    for key, label in (("connector_policy_value", "within the connector: policy + value, no grad"),
                       ("connector_hindsight", "within the connector: classifier, no grad")):
        cells = " | ".join(f"{s['ms_median'][key]:.2f}" for s in splits)
        lines.append(f"| {label} (ms, part of the connector row) | {cells} |")
    return lines


def _memory_table(data: Dict[str, Any]) -> List[str]:
    lines = ["| setting | method | runners | RSS per EnvRunner after warm-up (MiB) "
             "| after N more iterations (MiB) | N | driver RSS warm / end (MiB) |",
             "|---|---|---|---|---|---|---|"]
    for env in ENVS:
        summary = data.get("envs", {}).get(env, {}).get("summary", {})
        for method in METHODS[env]:
            mem = summary.get(method, {}).get("memory_last_round")
            if not mem:
                continue
            runners = int(method[-1]) if method.startswith("a2c_runners") else 0
            warm = ", ".join(f"{v:.0f}" for v in mem.get("env_runner_rss_mib_warm", [])) or "-"
            end = ", ".join(f"{v:.0f}" for v in mem.get("env_runner_rss_mib_end", [])) or "-"
            lines.append(f"| {env} | `{method}` | {runners} | {warm} | {end} "
                         f"| {mem['iterations_between']} | {mem['driver_rss_mib_warm']:.0f} / "
                         f"{mem['driver_rss_mib_end']:.0f} |")
    return lines


def _sampler_of(profile: Dict[str, Any]) -> str:
    """The sampler a profile ran (runs before it was stored: from the method's name; the
    lean one was the default then)."""
    if profile.get("sampler"):
        return profile["sampler"]
    return {"a2c_rllib": "rllib", "a2c_lean": "lean"}.get(profile.get("method"), "lean")


def _profile_section(profile: Dict[str, Any]) -> List[str]:
    lines = [f"### {SETTINGS[profile['env']]['title']}, `{profile.get('method', 'a2c')}`, "
             f"{profile['calls']} calls of "
             "`EnvRunner.sample()`", "",
             f"Sampling rate without the profiler {profile['steps_per_s_unprofiled']:,.0f} "
             f"steps/s, with it {profile['steps_per_s_profiled']:,.0f} (cProfile's overhead "
             "inflates Python-heavy groups).", "",
             "| group (own time; helpers and built-ins go to their caller's group) "
             "| s | fraction |",
             "|---|---|---|"]
    for g, v in sorted(profile["groups_own_s"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {g} | {v:.3f} | {profile['groups_fraction'][g]:.2f} |")
    lines += ["", f"hca_rllib's own functions: {profile['hca_rllib_own_s']:.3f} s of own time "
              f"({profile['hca_rllib_own_s'] / profile['profiled_total_own_s']:.1%}); by "
              "cumulative time: " + ", ".join(
                  f"`{row['function']}` {row['cum_s']:.3f} s" for row in
                  profile["hca_rllib_functions"][:6]) + ".", "",
              f"One vector step (all {SETTINGS[profile['env']]['n_envs']} envs, forward pass, "
              f"connectors, bookkeeping) takes {profile['vector_step_us_unprofiled']:.0f} us "
              f"unprofiled; the `module.eval()` RLlib's `forward_exploration` calls before "
              f"every forward pass takes {profile['module_eval_us']:.0f} us alone "
              f"({profile['module_submodules']} submodules walked; "
              f"{profile['module_eval_us'] / profile['vector_step_us_unprofiled']:.1%} of "
              "the step" + ("; the lean sampler calls it once per `sample()`)."
                            if _sampler_of(profile) == "lean" else ").")]
    lines += ["", "Top 15 functions by own time:", "",
              "| function | calls | own s | cumulative s | group |", "|---|---|---|---|---|"]
    for row in profile["top_own"]:
        lines.append(f"| `{row['function']}` | {row['calls']} | {row['own_s']:.3f} "
                     f"| {row['cum_s']:.3f} | {row['group']} |")
    lines += ["", "Top functions by cumulative time:", "",
              "| function | calls | own s | cumulative s |", "|---|---|---|---|"]
    for row in profile["top_cumulative"][:15]:
        lines.append(f"| `{row['function']}` | {row['calls']} | {row['own_s']:.3f} "
                     f"| {row['cum_s']:.3f} |")
    return lines


# Functions of the update profile shown in the summary, by the part of the update.
UPDATE_PROFILE_FUNCTIONS = (
    ("learner connector pipeline", "learner_connector_pipeline.py", "__call__"),
    ("the credit pieces (no-grad policy/value pass, classifier, credit)", "hca_rllib/connectors.py", "run"),
    ("module.forward_train (with gradient)", "torch_rl_module.py", "forward_train"),
    ("compute_losses (lean: with the credit)", "learner/learner.py", "compute_losses"),
    ("compute_gradients (backward)", "torch_learner.py", "compute_gradients"),
    ("apply_gradients (finite check, optimizer step)", "hca_rllib/learner.py", "apply_gradients"),
)


def _update_profile_section(profile: Dict[str, Any]) -> List[str]:
    ms = profile["ms_median"]
    lines = [f"## One learner update on each path: {profile['env']} `{profile['method']}`", "",
             f"Whole `learner_group.update` on the same {profile['batch_env_steps']} env steps, "
             f"median of {profile['reps']} alternating repetitions: lean {ms['lean']:.1f} ms, "
             f"rllib {ms['rllib']:.1f} ms, ratio rllib / lean "
             f"{profile['ratio_rllib_to_lean_median']:.2f} (median of the per-repetition ratios). "
             f"cProfile of {profile['profiled_calls']} more updates per path (ms per update, "
             "cumulative; the profiler's overhead inflates both):", "",
             "| part | lean | rllib |", "|---|---|---|"]

    def find(path: str, file: str, name: str) -> Optional[float]:
        hits = [r["cum_ms"] for r in profile["top"][path]
                if r["function"].split(":")[0].endswith(file) and r["function"].endswith(f"({name})")]
        return max(hits) if hits else None

    for label, file, name in UPDATE_PROFILE_FUNCTIONS:
        lines.append(f"| {label} | {fmt(find('lean', file, name), '.1f')} "
                     f"| {fmt(find('rllib', file, name), '.1f')} |")
    return lines


def _projection_section(data: Dict[str, Any]) -> List[str]:
    lines: List[str] = []
    for env in ENVS:
        p = (data.get("projection") or {}).get(env)
        if not p:
            continue
        mode = ("batch grows with the runners (80 k), as in the tuned examples"
                if env == "atari" else "batch fixed at 512, split over the runners")
        measured, dedicated = p["as_measured"], p.get("dedicated_cores")
        lines += [f"### {SETTINGS[env]['title']} ({mode})", "",
                  f"As measured (wall time, busy machine): one remote EnvRunner samples "
                  f"{measured['per_runner_sampling_steps_per_s']:,.0f} steps/s including the "
                  f"actor round trip (the local EnvRunner "
                  f"{fmt(p['local_sampling_steps_per_s'], ',.0f')}); the A2C learner update "
                  f"takes {measured['learner_ms_per_batch']:.1f} ms per {p['batch']}-step "
                  f"batch; weight sync {measured['synch_weights_ms']:.1f} ms. Learner ceiling "
                  f"(batch / update time): **{measured['learner_ceiling_steps_per_s']:,.0f} "
                  "steps/s**."]
        if dedicated:
            lines += ["", f"Dedicated cores (CPU time with one remote runner): the EnvRunner "
                      f"process spends {1e6 / dedicated['per_runner_sampling_steps_per_s']:.0f} "
                      f"us of CPU per step ({dedicated['per_runner_sampling_steps_per_s']:,.0f} "
                      f"steps per CPU-second), the driver (learner, connector, receiving the "
                      f"episodes, sync) "
                      f"{dedicated['learner_ms_per_batch'] * 1000 / p['batch']:.0f} "
                      f"us per step: ceiling **{dedicated['learner_ceiling_steps_per_s']:,.0f} "
                      "steps/s**."]
        head = "| EnvRunners (own cores) | batch | projected steps/s, as measured | learner share"
        sep = "|---|---|---|---|"
        if dedicated:
            head += " | projected steps/s, dedicated cores | learner share"
            sep += "---|---|"
        lines += ["", head + " |", sep]
        for i, row in enumerate(measured["rows"]):
            line = (f"| {row['runners']} | {row['batch']} | {row['steps_per_s']:,.0f} "
                    f"| {row['learner_share']:.2f}")
            if dedicated:
                d = dedicated["rows"][i]
                line += f" | {d['steps_per_s']:,.0f} | {d['learner_share']:.2f}"
            lines.append(line + " |")
        for name, x, what in (("as measured", measured, "steps/s in this run"),
                              ("dedicated cores", dedicated, "steps per CPU-second")):
            if not x or not x.get("sb3_reference"):
                continue
            need = x["runners_to_pass_sb3"]
            lines += ["", f"SB3's A2C (same network, one process): {x['sb3_reference']:,.0f} "
                      f"{what}; {name}, A2C passes it with "
                      + (f"**{need} EnvRunner(s)**." if need else
                         "no number of EnvRunners (the learner ceiling is below it).")]
        lines.append("")
    return lines


def write_summary(out: Path, data: Dict[str, Any]) -> str:
    lines = [
        "# Training throughput: A2C, HCA, RLlib PPO and SB3 A2C (torch 1 thread)", "",
        f"Command: `{data['command']}`  ",
        f"{data['rounds']} round(s) x {data['seconds']} s of timed `train()` per method, "
        "methods interleaved (order rotated each round); steps/s and ratio to A2C of the same "
        "round, median over rounds. Total wall time "
        f"{data.get('total_wall_s', 0) / 60:.1f} min.  ",
        f"Machine: {data['machine'].get('cpu_count')} CPUs, load average at start "
        f"{data['machine'].get('loadavg_1_5_15')}, at end {data.get('loadavg_end')}. "
        "**The machine was busy**: other long benchmark processes ran on the same 2 cores "
        "during the whole run, so absolute steps/s are low and noisy; the ratios within a "
        "round are what this benchmark reports.", "",
        "How to read the two measures: `cpu/wall` is the CPU time the driver process got "
        "per wall second (1.0 = a full core). A single-threaded process that is always "
        "runnable (SB3, our A2C sampling MinAtar in the driver) gets most of a core even "
        "under this load; a process that hands work to threads or actors and waits "
        "(ale-py's C++ vector env threads on Atari, remote EnvRunners) waits for a time "
        "slice at every hand-off, so its wall-clock rate drops much more than its CPU cost "
        "per step. Steps per CPU-second (driver + EnvRunner processes; Ray's own daemons "
        "not counted) is therefore the steadier comparison of cost per step here, and what "
        "a dedicated core would see; wall-clock steps/s is what this machine delivered.", "",
    ]
    for env in ENVS:
        block = data.get("envs", {}).get(env)
        if not block:
            continue
        lines += [f"## {SETTINGS[env]['title']}", "", SETTINGS[env]["description"] + ".", ""]
        lines += _method_table(env, block["summary"]) + [""]
    lines += ["## Targets", "",
              "Judged on wall-clock steps/s (ratios of the same round, "
              "median over rounds). The last column is the same ratio in steps per CPU-second "
              "of the driver and EnvRunner processes, which the other processes on the "
              "machine disturb much less (a cost per step, as on a dedicated core).", "",
              "| setting | target | measured (wall) | met | per CPU-second | met (CPU) |",
              "|---|---|---|---|---|---|"]

    def verdict(met: Optional[bool]) -> str:
        return "-" if met is None else ("met" if met else "**not met**")

    for t in data["targets"]:
        lines.append(f"| {t['env']} | {t['target']} | {t['value']} | {verdict(t['met'])} "
                     f"| {fmt(t.get('ratio_cpu'), '.2f')} | {verdict(t.get('met_cpu'))} |")
    lines.append("")
    splits = data.get("learner_split") or []
    if splits:
        lines += ["## Learner update split", "",
                  "Median over repetitions of each piece of one A2C/HCA update on one real "
                  "train batch (see the docstring of `throughput.py`); fraction of the whole "
                  "`learner_group.update` timed on the same batch. The HCA classifier is "
                  "evaluated twice per update: once without gradient in the connector (for "
                  "the advantage) and once with gradient in the loss.", ""]
        lines += _split_table(splits) + [""]
    baseline = data.get("idle_actor_rss")
    lines += ["## Memory per EnvRunner", "",
              "psutil RSS of each remote EnvRunner actor (last round), after the warm-up and "
              "after the timed iterations; the driver's RSS includes the local EnvRunner, the "
              "learner and everything built earlier in this process (Python does not return "
              "freed memory), so only its growth within a run means something."]
    if baseline:
        lines.append(f"An idle Ray actor: {baseline['bare_actor_mib']:.0f} MiB, after importing "
                     f"torch, RLlib's EnvRunner and hca_rllib {baseline['after_imports_mib']:.0f} "
                     "MiB (the floor of every EnvRunner).")
    lines += [""] + _memory_table(data) + [""]
    profiles = data.get("profile") or []
    if profiles:
        lines += ["## Where sampling time goes", ""]
        for profile in profiles:
            lines += _profile_section(profile) + [""]
    for profile in data.get("update_profile") or []:
        lines += _update_profile_section(profile) + [""]
    lines += ["## Scaling with EnvRunners on this machine", "",
              "| setting | remote EnvRunners | batch | steps/s | ratio to 0 runners "
              "| steps per CPU-s (driver + runners) | its ratio "
              "| ms per update: sampling / learner update |", "|---|---|---|---|---|---|---|---|"]
    for env in ENVS:
        summary = data.get("envs", {}).get(env, {}).get("summary", {})
        for method in ("a2c", "a2c_runners1", "a2c_runners2"):
            s = summary.get(method)
            if not s:
                continue
            k = int(method[-1]) if method != "a2c" else 0
            lines.append(
                f"| {env} | {k} | {batch_of(env, method)} | {fmt(s['steps_per_s_median'], ',.0f')} "
                f"| {fmt(s['ratio_to_a2c_median'], '.2f')} "
                f"| {fmt(s.get('steps_per_cpu_s_median'), ',.0f')} "
                f"| {fmt(s.get('cpu_ratio_to_a2c_median'), '.2f')} "
                f"| {fmt((s.get('sampling_s_median') or 0) * 1000, '.0f')} / "
                f"{fmt((s.get('learner_update_s_median') or 0) * 1000, '.0f')} |")
    lines += ["", "## Projection to a cluster", "",
              "Model: A2C's `training_step` is synchronous: it samples from all EnvRunners, "
              "then runs one learner update, then syncs the weights; nothing overlaps. With "
              "k EnvRunners on k dedicated cores, an iteration takes (steps per runner) / r "
              "+ U(batch) + W, where r is one runner's sampling rate (measured with one "
              "remote runner, actor round trip included), U the learner update (measured, "
              "linear in the batch on a CPU learner: U(B) = B x the per-step update time) "
              "and W the weight sync (measured with one runner, assumed constant). So "
              "sampling scales with k until the learner update dominates, and the ceiling "
              "is batch / U = the learner's own rate, whatever k. Assumptions: one learner on "
              "one core with 1 torch thread as measured here (on this busy machine, so an "
              "idle core is faster: both r and U would improve), no network cost beyond "
              "the measured sync, runners that do not slow each other down. Raising the "
              "ceiling needs a faster learner (more torch threads, a GPU, or several "
              "learners with `num_learners`, each taking a shard of the batch) or an "
              "asynchronous sampler (IMPALA-style: iteration = max(sampling, update) "
              "instead of the sum).", ""]
    lines += _projection_section(data)
    lines += [f"Machine: `{data['machine']}`", ""]
    text = "\n".join(lines)
    (out / "summary.md").write_text(text)
    return text


# --------------------------------------------------------------------------- main


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=("minatar", "atari", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=None,
                        help="timed train() wall time per method and round (20; --quick 1.5)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (2; --quick 1)")
    parser.add_argument("--methods", nargs="*", default=None, choices=ALL_METHODS,
                        help="subset of the methods (a2c is always run)")
    parser.add_argument("--split-reps", type=int, default=None,
                        help="repetitions of the learner split (40; --quick 3)")
    parser.add_argument("--profile-calls", type=int, default=None,
                        help="sample() calls profiled (20; --quick 3)")
    parser.add_argument("--no-details", action="store_true",
                        help="skip the learner split, the profile and the idle-actor RSS")
    parser.add_argument("--update-profile", action="store_true",
                        help="with --no-details: still time and profile one update per learner path")
    parser.add_argument("--quick", action="store_true", help="smoke test")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite summary.md from results.json in --out")
    args = parser.parse_args(argv)
    out = args.out or (Path(tempfile.mkdtemp(prefix="throughput_")) if args.quick else DEFAULT_OUT)
    if args.report_only:
        data = json.loads((out / "results.json").read_text())
        data["targets"] = targets(data)  # the targets as this version of the script states them
        print(write_summary(out, data))
        return
    quick = args.quick
    seconds = args.seconds if args.seconds is not None else (1.5 if quick else 20.0)
    n_rounds = args.rounds if args.rounds is not None else (1 if quick else 2)
    split_reps = args.split_reps if args.split_reps is not None else (3 if quick else 40)
    profile_calls = args.profile_calls if args.profile_calls is not None else (3 if quick else 20)
    out.mkdir(parents=True, exist_ok=True)
    envs = list(ENVS) if args.env == "both" else [args.env]
    plan: Dict[str, List[str]] = {}
    for env in envs:
        chosen = QUICK_METHODS[env] if quick else METHODS[env]
        if args.methods is not None:
            chosen = [m for m in METHODS[env] if m in args.methods]
        plan[env] = ["a2c"] + [m for m in chosen if m != "a2c"]

    machine = machine_note()
    import ray
    from hca_rllib.runner import start_local_ray
    import torch

    torch.set_num_threads(1)
    start_local_ray(**RAY_INIT_KWARGS)
    rounds: List[Dict[str, Dict[str, Dict[str, Any]]]] = []
    details: Dict[str, Any] = {"learner_split": [], "profile": [], "update_profile": []}
    try:
        for k in range(n_rounds):
            this: Dict[str, Dict[str, Dict[str, Any]]] = {}
            rounds.append(this)
            for env in envs:
                this[env] = {}
                methods = plan[env]
                shift = k % len(methods)
                for method in methods[shift:] + methods[:shift]:
                    this[env][method] = measure(env, method, seconds, quick)
                    m = this[env][method]
                    print(f"round {k} {env:7s} {method:24s} {m['steps_per_s']:8.0f} steps/s "
                          f"({m['iterations']} iters, setup {m['setup_s']:.1f} s, cpu/wall "
                          f"{m['cpu_per_wall']:.2f}, load {m['load1_before']})", flush=True)
        if args.update_profile or not args.no_details:
            for env in envs:
                for method in ("a2c", "hca"):
                    if method + RLLIB_LEARNER_SUFFIX not in plan[env] and args.no_details:
                        continue
                    prof = update_profile(env, method, split_reps, profile_calls, quick)
                    details["update_profile"].append(prof)
                    print(f"update {env} {method}: {prof['ms_median']} ms, rllib / lean "
                          f"{prof['ratio_rllib_to_lean_median']:.2f}", flush=True)
        if not args.no_details:
            details["idle_actor_rss"] = idle_actor_rss()
            for env in envs:
                for method in ("a2c", "hca"):
                    split = learner_split(env, method, split_reps, quick)
                    details["learner_split"].append(split)
                    print(f"split {env} {method}: " + ", ".join(
                        f"{key} {v:.2f}" for key, v in split["ms_median"].items()) + " ms",
                        flush=True)
            for env in envs:
                # Both samplers when the run compares them (a2c is the default one).
                profiled = ["a2c"] + [m for m in ("a2c_rllib",) if m in plan[env]]
                for method in profiled:
                    details["profile"].append(profile_sampling(env, profile_calls, quick, method))
                    print(f"profile {env} {method}: {details['profile'][-1]['groups_fraction']}",
                          flush=True)
    finally:
        ray.shutdown()
        data: Dict[str, Any] = {
            "command": command_line(), "machine": machine, "quick": quick,
            "seconds": seconds, "rounds": n_rounds, "settings": {e: SETTINGS[e] for e in envs},
            "plan": plan, "total_wall_s": time.perf_counter() - T_PROCESS,
            "loadavg_end": [round(v, 2) for v in os.getloadavg()],
            "measurements": rounds,
            "envs": {env: {"summary": summarise(rounds, env)} for env in envs},
            **details,
        }
        data["targets"] = targets(data)
        data["projection"] = {env: projection(data, env) for env in envs}
        write_json(out / "results.json", data)
        print(write_summary(out, data))
        print(f"written to {out}")


if __name__ == "__main__":
    main()
