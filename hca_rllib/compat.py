"""The one module that touches other libraries' private names.

Each contact is one small function: what it reaches, why no public API does it, and the
library version it was written against. The rest of the package calls these functions
and nothing private (tests/test_structure.py counts reaches outside this module; it
must be 0). tests/test_compat.py exercises every function against the installed
libraries and fails with the library version and the private name when an upgrade
moved or reshaped a contact, so an upgrade is an audit of this file only.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from gymnasium.wrappers.vector import DictInfoToList

# ------------------------------------------------------------------------------ torch


def has_native_conv2d() -> bool:
    """Whether torch has its native (im2col + GEMM) CPU convolution,
    `torch._C._nn.thnn_conv2d`. Written against torch 2.13."""
    return hasattr(torch._C._nn, "thnn_conv2d")


def native_conv2d(x: torch.Tensor, weight: torch.Tensor, kernel_size, bias, stride, padding) -> torch.Tensor:
    """torch's native CPU convolution (`torch._C._nn.thnn_conv2d`) on a contiguous NCHW
    `x`: what `F.conv2d` computes, in another summation order (within 1e-6 here).

    Why private: `F.conv2d` always dispatches to oneDNN on CPU, whose fixed cost per
    call is several times the whole convolution at MinAtar's sizes (8 x 4 x 10 x 10,
    3 x 3 kernels: about 20 us native against 140 us oneDNN on one core); no public
    switch selects the native kernel per call (`torch.backends.mkldnn` is global and
    also changes the RLlib learner's convolutions). Written against torch 2.13."""
    return torch._C._nn.thnn_conv2d(x, weight, kernel_size, bias, stride, padding)


# -------------------------------------------------------------------------- gymnasium


def add_vector_info(vector_env, infos: Dict[str, Any], info: Dict[str, Any], index: int) -> Dict[str, Any]:
    """`infos` with sub-env `index`'s `info` merged in, as `VectorEnv.step` builds its
    dict of per-key arrays (`VectorEnv._add_info`: the `_key` masks, nested dicts, the
    array dtypes).

    Why private: gymnasium has no public function for its vector info layout, and the
    infos must be exactly what `SyncVectorEnv.step` gives (RLlib's `DictInfoToList`
    turns them back into per-env dicts; tests compare every value and type). Written
    against gymnasium 1.2."""
    return vector_env._add_info(infos, info, index)


def vector_infos_to_list(infos: Dict[str, Any], num_envs: int) -> List[Dict[str, Any]]:
    """A vector env's info dict as `num_envs` per-env dicts, what RLlib's
    `DictInfoToList` wrapper returns from `step` (`DictInfoToList._convert_info_to_list`).

    Why private: the conversion is a method of the wrapper, which the lean runner does
    not step through (it steps the sub-envs itself, or a group of them); no public
    function converts. Written against gymnasium 1.2."""
    return _InfoLists(num_envs)._convert_info_to_list(infos)


class _InfoLists:
    """What `DictInfoToList._convert_info_to_list` uses of its wrapper: `num_envs`, and
    itself (for nested dicts)."""

    _convert_info_to_list = DictInfoToList._convert_info_to_list

    def __init__(self, num_envs: int):
        self.num_envs = num_envs


# ------------------------------------------------------------------------------ RLlib


def user_connector(config, pipeline: str):
    """The connector (or builder) the user set on an `AlgorithmConfig` for `pipeline`
    ("env_to_module", "module_to_env" or "learner"), or None.

    Why private: `AlgorithmConfig` stores `env_runners(env_to_module_connector=...)`,
    `env_runners(module_to_env_connector=...)` and `training(learner_connector=...)` as
    `_<pipeline>_connector` with no public getter (its `build_*_connector` methods build
    the whole pipeline, defaults included, and need an env). Written against Ray 2.60."""
    if pipeline not in ("env_to_module", "module_to_env", "learner"):
        raise ValueError(f"pipeline must be env_to_module, module_to_env or learner, got {pipeline!r}")
    return getattr(config, f"_{pipeline}_connector", None)


# RLlib's key for its RLModuleConfig deprecation warning (`@Deprecated(old=...)` on
# `ray.rllib.core.rl_module.rl_module.RLModuleConfig`).
RLMODULE_CONFIG_DEPRECATION_KEY = "RLModule(config=[RLModuleConfig object])"


def silence_rlmodule_config_deprecation() -> None:
    """Spend the `log_once` key of RLlib's "`RLModule(config=[RLModuleConfig object])`
    has been deprecated" warning in this process.

    Why: RLlib 2.60's own `RLModule.__init__` builds the deprecated `RLModuleConfig`
    (kept for old custom models) for every module, including ones built with the new
    constructor (`observation_space=, action_space=, inference_only=, model_config=`) as
    this package builds them, so the warning names no call of this package or of its
    users. Spent as `hca_rllib.hca` spends RLlib's new-API-stack warning. The key is
    the `old=` string of RLlib's `@Deprecated` decorator. Written against Ray 2.60."""
    from ray.util.debug import log_once

    log_once(RLMODULE_CONFIG_DEPRECATION_KEY)


# ------------------------------------------------------------------------- Ray Tune


def tune_env_registered(name: str) -> bool:
    """Whether `name` is registered with `ray.tune.register_env`
    (`ray.tune.registry._global_registry.contains(ENV_CREATOR, name)`).

    Why private: Tune's registry has public `register_env` but no public lookup of
    environments (`registry_contains_input` covers inputs only). Written against
    Ray 2.60."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    return _global_registry.contains(ENV_CREATOR, name)


def newest_experiment_state_file(directory: str, filesystem) -> Optional[str]:
    """The path of the newest `experiment_state-*.json` in an experiment `directory` on
    `filesystem` (pyarrow), or None (`ray.tune.execution.experiment_state.
    _find_newest_experiment_checkpoint`).

    Why private: Tune's resume reads this file itself; no public API says which state
    file a resume would read (Tune names them by timestamp). Written against Ray 2.60."""
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    return _find_newest_experiment_checkpoint(directory, fs=filesystem)


def load_trial_metadata(metadata_json) -> Dict[str, Any]:
    """One trial's run metadata from an experiment-state file's `trial_data` entry, as
    Tune decodes it (`ray.tune.utils.serialization._loads_with_cloudpickle`: JSON with
    cloudpickled objects such as the trial's checkpoint manager).

    Why private: the format is Tune's own (its `TuneFunctionEncoder`); no public
    decoder. Written against Ray 2.60."""
    from ray.tune.utils.serialization import _loads_with_cloudpickle

    return _loads_with_cloudpickle(metadata_json)


def delete_checkpoint_dir(filesystem, path: str) -> None:
    """Delete a checkpoint directory (or file) `path` on a pyarrow `filesystem` as Tune
    deletes the checkpoints it prunes (`ray.train._internal.storage._delete_fs_path`);
    FileNotFoundError when it is gone.

    Why private: Tune's own pruning (`CheckpointConfig(num_to_keep=...)`) cannot be
    used (tests/test_sweep.py's kill test: it deletes checkpoints that the experiment
    state being synced still names), and Tune exposes no public delete. Written
    against Ray 2.60."""
    from ray.train._internal.storage import _delete_fs_path

    _delete_fs_path(fs=filesystem, fs_path=path)


def checkpoint_results(manager) -> list:
    """The training results with checkpoints that a trial's checkpoint manager keeps,
    oldest first (`_CheckpointManager._checkpoint_results`).

    Why private: the list is what Tune saves in the experiment state; no public
    accessor (only `latest_checkpoint_result` and `best_checkpoint_results`, which
    is ordered by score). Written against Ray 2.60."""
    return manager._checkpoint_results


def set_checkpoint_results(manager, results: list) -> None:
    """Replace a checkpoint manager's list of kept results (`checkpoint_results`) after
    a prune, so that the experiment state stops naming the deleted checkpoints.

    Why private: Tune has no public way to drop a checkpoint it registered. Written
    against Ray 2.60."""
    manager._checkpoint_results = results


def pbt_saved_checkpoints(scheduler) -> list:
    """The checkpoints a PopulationBasedTraining `scheduler` keeps for its exploits
    (`PopulationBasedTraining._trial_state[trial].last_checkpoint`: saved at a trial's
    last perturbation, cloned by the trials that exploit it); [] for another scheduler.

    Why private: PBT's per-trial state has no public accessor. Written against
    Ray 2.60."""
    states = getattr(scheduler, "_trial_state", None) or {}
    return [getattr(state, "last_checkpoint", None) for state in states.values()]
