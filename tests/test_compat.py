"""Every contact of `hca_rllib.compat` with another library's private names, exercised
against the installed library: a test fails with the library's version and the private
name when an upgrade moved or reshaped it (then fix compat.py, and only it)."""

import logging
import math

import gymnasium as gym
import numpy as np
import pyarrow.fs
import pytest
import ray
import torch
from torch import nn

from hca_rllib import compat


def moved(library: str, version: str, name: str, what: str) -> str:
    return (f"{library} {version}: the private {name} that hca_rllib.compat uses has moved or "
            f"changed ({what}); update hca_rllib/compat.py")


def _torch(name, what):
    return moved("torch", torch.__version__, name, what)


def _gym(name, what):
    return moved("gymnasium", gym.__version__, name, what)


def _ray(name, what):
    return moved("Ray", ray.__version__, name, what)


# ------------------------------------------------------------------------------ torch

def test_native_conv2d_computes_conv2d():
    assert compat.has_native_conv2d(), _torch("torch._C._nn.thnn_conv2d", "missing")
    layer = nn.Conv2d(4, 16, 3, stride=1, padding=(1, 1))
    x = torch.rand(8, 4, 10, 10)
    try:
        got = compat.native_conv2d(x, layer.weight, layer.kernel_size, layer.bias,
                                   layer.stride, layer.padding)
    except Exception as error:  # noqa: BLE001
        pytest.fail(_torch("torch._C._nn.thnn_conv2d", f"call raised {error!r}"))
    want = nn.functional.conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding)
    assert got.shape == want.shape, _torch("torch._C._nn.thnn_conv2d", f"shape {tuple(got.shape)}")
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), _torch("torch._C._nn.thnn_conv2d", "other values")


def test_public_replacements_give_the_same_numbers():
    """What replaced private torch calls: `F.linear` is the op `torch._C._nn.linear`
    was; `get_total_norm(inf)` is finite exactly when `torch._foreach_norm(inf)` is."""
    assert nn.functional.linear is torch._C._nn.linear
    from hca_rllib.learner import all_finite

    tensors = [torch.randn(5, 3), torch.randn(7)]
    assert all_finite(tensors) and all_finite([None] + tensors) and all_finite([])
    for bad in (float("nan"), float("inf"), -float("inf")):
        t = torch.randn(4)
        t[2] = bad
        assert not all_finite(tensors + [t])
        assert not bool(torch.isfinite(torch.stack(torch._foreach_norm(tensors + [t], math.inf))).all())


# -------------------------------------------------------------------------- gymnasium

class _InfoEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {"start": 1}

    def step(self, action):
        info = {"score": float(action), "nested": {"t": 3}}
        if action:
            info["sometimes"] = np.float32(2)
        return np.zeros(2, np.float32), 1.0, bool(action), False, info


def test_vector_infos_as_sync_vector_env_and_dict_info_to_list_give_them():
    from gymnasium.vector import SyncVectorEnv
    from gymnasium.wrappers.vector import DictInfoToList

    env = DictInfoToList(SyncVectorEnv([_InfoEnv for _ in range(3)]))
    env.reset(seed=0)
    actions = np.array([0, 1, 1])
    _, rewards, _, _, want = env.step(actions)
    assert rewards.dtype == np.float64, _gym("SyncVectorEnv.step", f"rewards {rewards.dtype}")
    infos = {}
    try:
        for i, sub in enumerate(env.env.envs):
            infos = compat.add_vector_info(env.env, infos, sub.step(actions[i])[4], i)
        got = compat.vector_infos_to_list(infos, 3)
    except Exception as error:  # noqa: BLE001
        pytest.fail(_gym("VectorEnv._add_info / DictInfoToList._convert_info_to_list", repr(error)))
    assert got == want, _gym("VectorEnv._add_info / DictInfoToList._convert_info_to_list", f"{got} != {want}")
    assert [{k: type(v) for k, v in d.items()} for d in got] == [
        {k: type(v) for k, v in d.items()} for d in want]


# ------------------------------------------------------------------------------ RLlib

def test_user_connector_reads_what_the_config_methods_set():
    from ray.rllib.connectors.env_to_module import FlattenObservations

    from hca_rllib import A2CConfig

    config = A2CConfig()
    for pipeline in ("env_to_module", "module_to_env", "learner"):
        assert compat.user_connector(config, pipeline) is None, _ray(
            f"AlgorithmConfig._{pipeline}_connector", "missing or not None by default")

    def build(*args):
        return FlattenObservations()

    config.env_runners(env_to_module_connector=build, module_to_env_connector=build)
    config.training(learner_connector=build)
    for pipeline in ("env_to_module", "module_to_env", "learner"):
        assert compat.user_connector(config, pipeline) is build, _ray(
            f"AlgorithmConfig._{pipeline}_connector", "no longer where the setter stores it")
    with pytest.raises(ValueError):
        compat.user_connector(config, "other")


def test_rlmodule_config_deprecation_key_is_rllibs_and_spending_it_silences_it(caplog):
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.util.debug import reset_log_once

    from hca_rllib.module import HCATorchRLModule

    spec = RLModuleSpec(module_class=HCATorchRLModule, observation_space=gym.spaces.Box(-1, 1, (4,)),
                        action_space=gym.spaces.Discrete(2), model_config={})
    reset_log_once(compat.RLMODULE_CONFIG_DEPRECATION_KEY)
    with caplog.at_level(logging.WARNING):
        spec.build()
    warned = [r for r in caplog.records if "RLModuleConfig" in r.getMessage()]
    if not warned:  # RLlib stopped warning (or changed its key): the call is not needed
        pytest.fail(_ray("RLModuleConfig deprecation log_once key",
                         f"no warning under {compat.RLMODULE_CONFIG_DEPRECATION_KEY!r}"))
    caplog.clear()
    compat.silence_rlmodule_config_deprecation()
    with caplog.at_level(logging.WARNING):
        spec.build()
    assert not [r for r in caplog.records if "eprecat" in r.getMessage()]


# ------------------------------------------------------------------------- Ray Tune

def test_tune_env_registered():
    from ray.tune import register_env

    name = "CompatTest/Registered-v0"
    assert not compat.tune_env_registered(name)
    register_env(name, lambda config: _InfoEnv())
    assert compat.tune_env_registered(name), _ray("ray.tune.registry._global_registry", "lookup")


def test_newest_experiment_state_file_and_trial_metadata(tmp_path):
    """Tune's experiment-state files: the newest by its timestamp name, and a trial's
    metadata decoded (the checkpoint manager in it) from what Tune writes."""
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train import CheckpointConfig
    from ray.tune.experiment.trial import _TrainingRunMetadata

    fs = pyarrow.fs.LocalFileSystem()
    assert compat.newest_experiment_state_file(str(tmp_path), fs) is None
    for stamp in ("2026-01-01_00-00-00", "2026-01-02_00-00-00"):
        (tmp_path / f"experiment_state-{stamp}.json").write_text("{}")
    newest = compat.newest_experiment_state_file(str(tmp_path), fs)
    assert newest is not None and newest.endswith("experiment_state-2026-01-02_00-00-00.json"), _ray(
        "ray.tune.execution.experiment_state._find_newest_experiment_checkpoint", repr(newest))
    metadata = _TrainingRunMetadata()
    metadata.checkpoint_manager = _CheckpointManager(CheckpointConfig())
    text = metadata.get_json_state()  # what Tune writes per trial (TuneFunctionEncoder)
    try:
        loaded = compat.load_trial_metadata(text)
    except Exception as error:  # noqa: BLE001
        pytest.fail(_ray("ray.tune.utils.serialization._loads_with_cloudpickle", repr(error)))
    assert loaded.get("checkpoint_manager") is not None, _ray(
        "ray.tune.utils.serialization._loads_with_cloudpickle", f"decoded {type(loaded)}")


def test_checkpoint_results_and_delete(tmp_path):
    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult

    manager = _CheckpointManager(CheckpointConfig())
    dirs = []
    for i in range(3):
        d = tmp_path / f"checkpoint_{i:06d}"
        d.mkdir()
        (d / "state.pkl").write_text("x")
        dirs.append(d)
        manager.register_checkpoint(_TrainingResult(checkpoint=Checkpoint(str(d)), metrics={"i": i}))
    try:
        results = list(compat.checkpoint_results(manager))
    except AttributeError as error:
        pytest.fail(_ray("_CheckpointManager._checkpoint_results", repr(error)))
    assert [r.metrics["i"] for r in results] == [0, 1, 2], _ray(
        "_CheckpointManager._checkpoint_results", "not the registered results, oldest first")
    compat.set_checkpoint_results(manager, results[1:])
    assert [r.metrics["i"] for r in compat.checkpoint_results(manager)] == [1, 2]
    assert manager.latest_checkpoint_result.metrics["i"] == 2
    compat.delete_checkpoint_dir(pyarrow.fs.LocalFileSystem(), str(dirs[0]))
    assert not dirs[0].exists(), _ray("ray.train._internal.storage._delete_fs_path", "left the directory")
    with pytest.raises(FileNotFoundError):
        compat.delete_checkpoint_dir(pyarrow.fs.LocalFileSystem(), str(dirs[0]))


def test_pbt_saved_checkpoints():
    from ray.train import Checkpoint
    from ray.tune.schedulers import FIFOScheduler, PopulationBasedTraining

    assert compat.pbt_saved_checkpoints(FIFOScheduler()) == []
    assert compat.pbt_saved_checkpoints(None) == []
    pbt = PopulationBasedTraining(metric="m", mode="max", hyperparam_mutations={"lr": [0.1, 0.2]})
    assert isinstance(getattr(pbt, "_trial_state", None), dict), _ray(
        "PopulationBasedTraining._trial_state", "not a dict")

    from ray.tune.schedulers.pbt import _PBTTrialState

    class Trial:
        config, experiment_tag = {"lr": 0.1}, "0"

    trial = Trial()
    try:
        pbt._trial_state[trial] = _PBTTrialState(trial)  # what on_trial_add does
    except Exception as error:  # noqa: BLE001
        pytest.fail(_ray("ray.tune.schedulers.pbt._PBTTrialState", repr(error)))
    assert compat.pbt_saved_checkpoints(pbt) == [None]
    pbt._trial_state[trial].last_checkpoint = Checkpoint("/tmp/x")
    assert [c.path for c in compat.pbt_saved_checkpoints(pbt)] == ["/tmp/x"], _ray(
        "_PBTTrialState.last_checkpoint", "not read")


DEPRECATION_SCRIPT = r'''
import logging, sys, warnings
warnings.simplefilter("always")
caught = []

class Catch(logging.Handler):
    def emit(self, record):
        if "eprecat" in record.getMessage():
            caught.append(f"{record.name}: {record.getMessage()}")

for name in ("", "ray", "ray.rllib", "ray._common.deprecation"):
    logging.getLogger(name).addHandler(Catch(level=logging.WARNING))
with warnings.catch_warnings(record=True) as python_warnings:
    warnings.simplefilter("always")
    from hca_rllib import evaluation, probe
    from hca_rllib.cli import main
    run = sys.argv[1]
    for algo, out in (("A2C", run + "/a2c"), ("HCA", run + "/hca")):
        assert main(["train", "--algo", algo, "--env", "CartPole-v1", "--stop-timesteps", "256",
                     "--checkpoint-every", "0", "--wandb", "off", "--no-tensorboard",
                     "--num-envs-per-env-runner", "2", "--set", "train_batch_size_per_learner=128",
                     "--output", out]) == 0
        checkpoint = evaluation.find_checkpoint(out)
        evaluation.evaluate_checkpoint(checkpoint, episodes=1)
        probe.probe("CartPole-v1", checkpoint=checkpoint, episodes=10, max_steps=2000, horizons=[None],
                    benchmark_summary=None)
caught += [f"{w.category.__name__}: {w.message}" for w in python_warnings
           if issubclass(w.category, DeprecationWarning) and "RLModule" in str(w.message)]
print("CAUGHT", caught)
sys.exit(1 if caught else 0)
'''


def test_no_rlmodule_deprecation_warning_when_training_evaluating_and_probing(tmp_path):
    """In a fresh process: A2C and HCA (default credit) trained one iteration on CartPole
    through the command line, each checkpoint evaluated and probed: no deprecation
    warning from RLlib (its loggers at WARNING) and no Python DeprecationWarning naming
    RLModule."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", DEPRECATION_SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
