"""`hca-rllib sweep`: Ray Tune over environments x credit modes x seeds (x a grid).

Each trial is one `HCA` training (credit `a2c` trains no classifier, as `A2C` does).
Resources are computed so no trial waits for a node that cannot hold it: a trial needs
one CPU for its driver (and learner) plus `cpus_per_env_runner` per EnvRunner, and at
most `floor(cluster CPUs / trial CPUs)` trials run at once. A failed trial is retried
(`--max-failures`) from its newest checkpoint. Every trial directory gets the project's
`run.json` and `results.jsonl` (written by `RunFilesCallback`), so `hca-rllib report`
reads a sweep like any set of runs; the sweep writes that report at the end.
`--resume` restores a killed sweep (Tune's `Tuner.restore`) after checking it against the
settings the sweep stored in `sweep.json`; each trial's files continue from storage.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hca_rllib import compat
from hca_rllib.credit import CREDIT_MODES
from hca_rllib.runner import (ResultsFile, read_results, result_line, user_path, wandb_logger_callback,
                              wandb_mode, write_file)


def trial_resources(num_env_runners: int, cpus_per_env_runner: float) -> float:
    """CPUs one trial reserves: its driver (with the learner) and its EnvRunners."""
    return 1.0 + num_env_runners * cpus_per_env_runner


def max_concurrent_trials(cluster_cpus: float, per_trial: float) -> int:
    if per_trial > cluster_cpus:
        raise ValueError(
            f"a trial needs {per_trial:g} CPUs (1 driver + EnvRunners) but the cluster has "
            f"{cluster_cpus:g}: use fewer --num-env-runners or a smaller --cpus-per-env-runner"
        )
    return max(1, int(math.floor(cluster_cpus / per_trial + 1e-9)))


def _trial_name(trial) -> str:
    c = trial.config
    env = str(c.get("env")).replace("/", "_").replace(":", "_")
    return f"{env}__{c.get('credit')}__seed{c.get('seed')}__{trial.trial_id}"


def _is_local(filesystem) -> bool:
    import pyarrow.fs

    return isinstance(filesystem, pyarrow.fs.LocalFileSystem)


RUN_FILES = ("run.json", "results.jsonl")


def _upload_run_files(trial, working: Path) -> None:
    """Copy the trial's `run.json` and `results.jsonl` from the driver's working directory
    to the sweep's (remote) storage, each atomically: written under a temporary name and
    moved over the stored one, so a kill mid-upload leaves the old, whole file."""
    import pyarrow.fs

    filesystem = trial.storage.storage_filesystem
    filesystem.create_dir(trial.path, recursive=True)
    for name in RUN_FILES:
        if (working / name).exists():
            target = Path(trial.path, name).as_posix()
            pyarrow.fs.copy_files(str(working / name), target + ".tmp", destination_filesystem=filesystem)
            filesystem.move(target + ".tmp", target)


def _fetch_run_files(trial, working: Path) -> None:
    """Copy the trial's `run.json` and `results.jsonl` from the sweep's (remote) storage
    into the driver's working directory where that lacks them: a driver that restores a
    sweep starts with an empty one."""
    import pyarrow.fs

    for name in RUN_FILES:
        if (working / name).exists():
            continue
        try:
            pyarrow.fs.copy_files(str(Path(trial.path, name).as_posix()), str(working / name),
                                  source_filesystem=trial.storage.storage_filesystem)
        except FileNotFoundError:  # a trial starting for the first time
            pass


def _push_trial_files(trial) -> None:
    """Copy the trial's files from the driver's staging directory to the sweep's storage.

    A trial that Tune restarts from a checkpoint (a retry after a failure) gets its
    `result.json` and `progress.csv` back from storage: Tune's loggers copy the stored
    files over the driver's before appending. The stored copies are only as new as Tune's
    last sync of the experiment, so rows reported after that sync would be lost; pushed
    here first, the copies Tune restores are whole."""
    import pyarrow.fs

    local = Path(trial.local_path)
    if local.is_dir():
        pyarrow.fs.copy_files(str(local), str(trial.path),
                              destination_filesystem=trial.storage.storage_filesystem)


def make_run_files_callback(stop_timesteps: Optional[int] = None):
    from ray.tune import Callback

    class RunFilesCallback(Callback):
        """Writes `run.json` and `results.jsonl` (the CLI's format) into each trial's
        directory. After a retry or a `--resume` restores a trial from a checkpoint, lines
        from the iterations being re-run are replaced, so none is duplicated; a trial whose
        lines already reached `stop_timesteps` (it finished after Tune's last snapshot of
        the experiment, so the restore runs it on) gets no line past that one.

        The files never pass through Tune's staging directory, whose periodic sync to
        storage copies files in place and in no set order: a kill mid-sync could leave an
        experiment state naming a checkpoint beside rows that stop before it, and the
        resumed trial would lose those rows. On local storage the files are written in the
        trial's directory there, each line synced as it is reported. On remote storage they
        are kept in a driver-local working directory and uploaded, each file atomically,
        when a checkpoint is reported (before Tune records it, so any state that names the
        checkpoint finds its rows stored), and when the trial ends, fails or restarts."""

        def __init__(self):
            self.last_iteration = {}  # trial id -> last iteration written
            self.finished = set()  # trial ids whose lines reached the stop before a restore
            self.scratch = None  # the working directory's root, for remote storage

        def working(self, trial) -> Path:
            """Where the trial's files are written: its storage directory (local storage),
            or a driver-local copy started from the stored files (remote storage)."""
            if _is_local(trial.storage.storage_filesystem):
                path = Path(trial.path)
                path.mkdir(parents=True, exist_ok=True)
                return path
            if self.scratch is None:
                import tempfile

                self.scratch = Path(tempfile.mkdtemp(prefix="hca-sweep-"))
            path = self.scratch / Path(trial.path).name
            if not path.exists():  # first seen by this driver: a restore continues the stored rows
                path.mkdir(parents=True)
                _fetch_run_files(trial, path)
            return path

        def upload(self, trial) -> None:
            if not _is_local(trial.storage.storage_filesystem):
                _upload_run_files(trial, self.working(trial))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            path = self.working(trial)
            run_json = path / "run.json"
            if not run_json.exists():
                c = trial.config
                write_file(run_json, json.dumps({
                    "algo": "A2C" if c.get("credit") == "a2c" else "HCA", "credit": c.get("credit"),
                    "env": c.get("env"), "seed": c.get("seed"), "trial_id": trial.trial_id,
                }, indent=1, default=repr).encode())
            line = result_line(result, float(result.get("time_total_s", 0.0)),
                               float(result.get("num_env_steps_sampled_lifetime", 0))
                               / max(float(result.get("time_total_s", 1e-9)), 1e-9))
            results = path / "results.jsonl"
            last = self.last_iteration.get(trial.trial_id)
            if trial.trial_id in self.finished:
                return
            if last is None or line["iteration"] <= last:
                # First result seen by this driver, or a retry/PBT exploit went back to a
                # checkpoint: rewrite without the iterations being run again.
                kept = [old for old in read_results(results) if old["iteration"] < line["iteration"]]
                if (last is None and stop_timesteps is not None and kept
                        and kept[-1]["env_steps"] >= stop_timesteps):
                    self.finished.add(trial.trial_id)  # its last line stays the last
                    return
                # Atomic and durable (temporary synced, renamed, directory synced).
                write_file(results, "".join(json.dumps(x) + "\n" for x in kept + [line]).encode())
            else:
                with ResultsFile(results) as f:  # appended and synced, a whole line or none
                    f.append(line)
            self.last_iteration[trial.trial_id] = line["iteration"]

        def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
            self.upload(trial)  # Tune records the checkpoint after this returns

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.upload(trial)

        def on_trial_error(self, iteration, trials, trial, **info):
            self.upload(trial)

        def on_trial_recover(self, iteration, trials, trial, **info):
            self.upload(trial)
            _push_trial_files(trial)  # before Tune's loggers restore them (a retry)

        def on_experiment_end(self, trials, **info):
            for trial in trials:  # rows past a trial's newest checkpoint too (an interrupt)
                if trial.trial_id in self.last_iteration:
                    self.upload(trial)
            if self.scratch is not None:
                import shutil

                shutil.rmtree(self.scratch, ignore_errors=True)

    return RunFilesCallback()


MAX_CPUS_PER_ENV_RUNNER = 1024.0  # more per EnvRunner than any node has: a typo

KEEP_CHECKPOINTS = 2  # per trial, besides any the saved experiment state still names


def checkpoints_to_prune(names: List[str], keep: int, protected: Optional[set]) -> List[str]:
    """Tune's `num_to_keep`, deferred: which of a trial's checkpoints (names, oldest first,
    the newest last) may be deleted. Never the newest `keep`, and never one at or after the
    oldest `protected` name (the checkpoints an experiment-state file, saved or being
    saved, names: `Tuner.restore` resumes from those). None either when `protected` is None
    (a state file could not be read) or names a checkpoint not in `names` (something else
    deleted it, or the bookkeeping disagrees: keep everything rather than guess)."""
    if protected is None or keep < 1 or not set(protected) <= set(names):
        return []
    cut = len(names) - keep
    for i, name in enumerate(names):
        if name in protected:
            cut = min(cut, i)
            break
    return names[:max(cut, 0)]


def _checkpoint_key(path: str) -> str:
    """A checkpoint's trial directory and name ("<trial dir>/checkpoint_000003"): one
    name per checkpoint of the experiment (a bare name repeats in every trial), the same
    on storage, in the driver's staging copy and after the experiment directory moved."""
    return "/".join(Path(path).parts[-2:])


def _named_checkpoints(filesystem, directory: str, cache: dict) -> Optional[Dict[str, Optional[str]]]:
    """Trial id -> the `_checkpoint_key` of the checkpoint the newest experiment-state
    file in `directory` resumes it from (None: from scratch; after a PBT exploit, one in
    another trial's directory). {} if there is no such file; None if it cannot be read
    (being written, a storage error). Parsed once per file version."""
    import pyarrow.fs

    try:
        newest = compat.newest_experiment_state_file(directory, filesystem)
        if newest is None:
            return {}
        info = filesystem.get_file_info(newest)
        if info.type != pyarrow.fs.FileType.File:
            return {}
        key = (newest, info.size, info.mtime_ns)
        if key not in cache:
            with filesystem.open_input_stream(newest) as f:
                state = json.loads(f.readall())
            named = {}
            for trial_json, metadata_json in state["trial_data"]:
                manager = compat.load_trial_metadata(metadata_json).get("checkpoint_manager")
                latest = manager.latest_checkpoint_result if manager is not None else None
                named[json.loads(trial_json)["trial_id"]] = (
                    _checkpoint_key(latest.checkpoint.path) if latest is not None else None)
            cache.clear()
            cache[key] = named
        return cache[key]
    except Exception:  # noqa: BLE001 - unreadable now: prune nothing, try again later
        return None


def make_checkpoint_pruner(keep: int = KEEP_CHECKPOINTS, scheduler=None):
    """A Tune callback that keeps each trial's newest `keep` checkpoints, as
    `CheckpointConfig(num_to_keep=keep)` would, but never deletes one that the experiment
    state on storage (or the one being synced to it) still names, nor one that any trial
    will restore from or PBT (`scheduler`) may still clone.

    Why: Tune saves the experiment state (which checkpoint each trial resumes from) every
    10 s or so and syncs it in the background, while its own `num_to_keep` deletes old
    checkpoints at once. A driver killed in between left a state that named a deleted
    checkpoint, and `--resume` failed ("does not exist on storage anymore"; found by
    tests/test_sweep.py's kill test). So the sweep runs Tune with `num_to_keep=None` and
    this callback prunes (`prune_trial_checkpoints`): when a trial checkpoints, and once
    more at the end (after Tune's final state save) for the trials this driver ran."""
    from ray.tune import Callback

    class CheckpointPruner(Callback):
        def __init__(self):
            self.keep = keep
            self.scheduler = scheduler
            self.caches = ({}, {})  # parse caches of the stored and the staged state files
            self.ran = set()  # trial ids this driver saw checkpoint: the only ones it prunes

        def prune(self, trial, new=None, trials=None) -> List[str]:
            return prune_trial_checkpoints(trial, self.keep, caches=self.caches, new=new,
                                           trials=list(trials or []), scheduler=self.scheduler)

        def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
            self.ran.add(trial.trial_id)
            try:  # Tune skips registering a checkpoint whose callback raised
                self.prune(trial, checkpoint, trials)
            except Exception as error:  # noqa: BLE001 - a missed prune costs only disk
                print(f"hca-rllib sweep: could not prune checkpoints of {trial}: {error!r}", file=sys.stderr)

        def on_experiment_end(self, trials, **info):
            for trial in trials:  # Tune has saved its final state (and waited) by now
                if trial.trial_id not in self.ran:  # finished before a restore: left as it was
                    continue
                try:
                    self.prune(trial, trials=trials)
                except Exception as error:  # noqa: BLE001
                    print(f"hca-rllib sweep: could not prune checkpoints of {trial}: {error!r}", file=sys.stderr)

    return CheckpointPruner()


def protected_checkpoints(trial_id: str, keys: List[str], stored: Dict[str, Optional[str]],
                          staged: Dict[str, Optional[str]], latest: Optional[str]) -> set:
    """The checkpoint keys of a trial (`keys`, its checkpoints' `_checkpoint_key`s) that
    pruning keeps with all newer ones: those the stored and the staged experiment state
    (`_named_checkpoints`) resume the trial from, its `latest` checkpoint in memory, and
    any of its checkpoints that those files name for another trial (a PBT clone: a state
    between the two may be being synced)."""
    protected = {x for x in (stored.get(trial_id), staged.get(trial_id)) if x}
    if latest is not None:
        protected.add(latest)
    protected |= {x for named in (stored, staged) for x in named.values() if x in keys}
    return protected


def claimed_checkpoints(trials, scheduler) -> set:
    """The keys of the checkpoints a trial will restore from (its latest) or PBT
    (`scheduler`) may still clone (the trial's checkpoint saved at its last perturbation,
    possibly many checkpoints ago); exact claims (in memory: no save of them in flight)."""
    claimed = set()
    for other in trials:
        manager = getattr(getattr(other, "run_metadata", None), "checkpoint_manager", None)
        latest = manager.latest_checkpoint_result if manager is not None else None
        if latest is not None:
            claimed.add(_checkpoint_key(latest.checkpoint.path))
    for saved in compat.pbt_saved_checkpoints(scheduler):
        path = getattr(saved, "path", None)
        if isinstance(path, str):  # a Checkpoint (a save in flight becomes the newest)
            claimed.add(_checkpoint_key(path))
    return claimed


def _experiment_states(trial, caches) -> Tuple[Optional[dict], Optional[dict]]:
    """(stored, staged) `_named_checkpoints` of `trial`'s experiment, either None when
    unreadable; `caches`: their parse caches."""
    import pyarrow.fs

    storage = trial.storage
    return (_named_checkpoints(storage.storage_filesystem, storage.experiment_fs_path, caches[0]),
            _named_checkpoints(pyarrow.fs.LocalFileSystem(), storage.experiment_driver_staging_path, caches[1]))


def prune_trial_checkpoints(trial, keep: int, *, caches, new=None, trials=(), scheduler=None
                            ) -> List[str]:
    """Delete `trial`'s checkpoints beyond its newest `keep` (`new`, the checkpoint being
    registered, counted as its newest) that no experiment state, trial or PBT
    (`scheduler`) still needs (`protected_checkpoints`, `claimed_checkpoints`; `trials`:
    all of the experiment's), from storage and from Tune's list of the trial's
    checkpoints (`compat.set_checkpoint_results`, so the experiment state does not grow
    with every checkpoint); returns the names deleted. Checkpoints are told apart by
    trial directory and name (`_checkpoint_key`). A trial whose checkpoints are ordered by
    score, or a state file that cannot be read now: nothing. `caches`: the parse caches
    of the stored and the staged state files (`_experiment_states`), kept by the caller
    across calls."""
    manager = trial.run_metadata.checkpoint_manager
    if manager is None or manager.checkpoint_config.checkpoint_score_attribute is not None:
        return []  # ordered by score, not time: not this rule
    results = list(compat.checkpoint_results(manager))
    keys = [_checkpoint_key(r.checkpoint.path) for r in results]
    if new is not None:
        keys.append(_checkpoint_key(new.path))
    stored, staged = _experiment_states(trial, caches)
    if stored is None or staged is None:
        return []
    latest = manager.latest_checkpoint_result
    protected = protected_checkpoints(trial.trial_id, keys, stored, staged,
                                      _checkpoint_key(latest.checkpoint.path) if latest is not None else None)
    doomed = set(checkpoints_to_prune(keys, keep, protected))
    doomed -= claimed_checkpoints(list(trials) + [trial], scheduler)
    if not doomed:
        return []
    compat.set_checkpoint_results(manager, [r for r in results if _checkpoint_key(r.checkpoint.path) not in doomed])
    trial.run_metadata.invalidate_cache()
    for r in results:
        if _checkpoint_key(r.checkpoint.path) in doomed:
            try:
                compat.delete_checkpoint_dir(r.checkpoint.filesystem, r.checkpoint.path)
            except FileNotFoundError:
                pass  # gone already (an end-of-experiment prune after the state save)
    return sorted(Path(key).name for key in doomed)


TUNE_LOGS = ("result.json", "progress.csv")  # Tune's per-trial files, one row a line


def trim_torn_logs(experiment: str) -> List[str]:
    """Cut each trial's `result.json` and `progress.csv` in `experiment` (a path or URI)
    back to their last whole line; returns the files cut. Tune's background sync copies
    them to storage in place, so a kill mid-sync leaves one torn; a restore copies it back
    and appends, gluing the torn row to the first new one (a line no JSON reader parses).
    Run before `Tuner.restore`."""
    import pyarrow.fs

    if "://" in experiment:
        filesystem, root = pyarrow.fs.FileSystem.from_uri(experiment)
    else:
        filesystem, root = pyarrow.fs.LocalFileSystem(), str(Path(experiment))
    cut = []
    for entry in filesystem.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True)):
        if entry.type != pyarrow.fs.FileType.Directory:
            continue
        for name in TUNE_LOGS:
            path = f"{entry.path}/{name}"
            try:
                with filesystem.open_input_stream(path) as f:
                    data = f.readall()
            except FileNotFoundError:
                continue
            if data and not data.endswith(b"\n"):
                whole = data[:data.rfind(b"\n") + 1]
                if _is_local(filesystem):
                    write_file(Path(path), whole)  # atomic: a kill here leaves it as it was
                else:
                    with filesystem.open_output_stream(path) as f:
                        f.write(whole)
                cut.append(path)
    return cut


def drop_missing_checkpoints(results) -> int:
    """Remove from each `Result.best_checkpoints` of `results` (a ResultGrid, or any
    sequence of Results) the checkpoints that no longer exist on storage; returns how many.
    Tune builds those lists from its in-memory bookkeeping, which for a trial that a
    `--resume` restored comes from an experiment state saved before `make_checkpoint_pruner`
    deleted some of them (and a trial that finished before the restore is not pruned
    again, so its list is never corrected). A listed checkpoint that does not exist would
    fail only when someone restores from it."""
    import pyarrow.fs

    dropped = 0
    for i in range(len(results)):
        result = results[i]
        kept = []
        for checkpoint, metrics in result.best_checkpoints or []:
            try:
                info = checkpoint.filesystem.get_file_info(checkpoint.path)
                exists = info.type != pyarrow.fs.FileType.NotFound
            except OSError:  # storage unreachable now: keep it rather than guess
                exists = True
            if exists:
                kept.append((checkpoint, metrics))
        if result.best_checkpoints and len(kept) < len(result.best_checkpoints):
            dropped += len(result.best_checkpoints) - len(kept)
            result.best_checkpoints = kept
    return dropped


def make_scheduler(name: str, stop_timesteps: int):
    """None, ASHA (early-stops on env steps) or PBT (mutates lr and entropy_coeff)."""
    from ray import tune

    if name == "none":
        return None
    if name == "asha":
        from ray.tune.schedulers import ASHAScheduler

        return ASHAScheduler(time_attr="num_env_steps_sampled_lifetime", max_t=stop_timesteps,
                             grace_period=max(stop_timesteps // 8, 1), reduction_factor=3)
    if name == "pbt":
        from ray.tune.schedulers import PopulationBasedTraining

        return PopulationBasedTraining(
            time_attr="num_env_steps_sampled_lifetime", perturbation_interval=max(stop_timesteps // 5, 1),
            hyperparam_mutations={"lr": tune.loguniform(1e-4, 3e-3), "entropy_coeff": [0.0, 0.003, 0.01, 0.03]})
    raise ValueError(f"scheduler must be none, asha or pbt, got {name!r}")


def check_grids(credits: List[str], overrides: Dict[str, Any]) -> None:
    """One-line ValueError for a grid the sweep cannot run as asked."""
    if "grid:hindsight_loss_coeff" in overrides and "a2c" in credits:
        # A grid key overrides the per-credit coefficient: every a2c trial would train a
        # classifier (and the grid would repeat the same A2C once per value).
        raise ValueError("--set grid:hindsight_loss_coeff=[...] cannot include credit a2c (A2C trains "
                         "no classifier): sweep a2c in its own sweep, or drop it from --credits")


def build_param_space(envs: List[str], credits: List[str], seeds: List[int], overrides: Dict[str, Any],
                      num_env_runners: int, num_envs_per_env_runner: int, cpus_per_env_runner: float):
    from ray import tune

    from hca_rllib import HCAConfig

    config = HCAConfig().env_runners(
        num_env_runners=num_env_runners,
        num_envs_per_env_runner=num_envs_per_env_runner,
        num_cpus_per_env_runner=cpus_per_env_runner,
    )
    check_grids(credits, overrides)
    grids = {k: v for k, v in overrides.items() if k.startswith("grid:")}
    config.update_from_dict({k: v for k, v in overrides.items() if k not in grids})
    space = config.to_dict()
    space.update({
        "env": tune.grid_search(envs),
        "credit": tune.grid_search(credits),
        "seed": tune.grid_search(seeds),
        # credit="a2c" is plain A2C: no classifier (A2CConfig's default).
        "hindsight_loss_coeff": tune.sample_from(
            lambda spec: 0.0 if spec.config["credit"] == "a2c" else overrides.get("hindsight_loss_coeff", 1.0)),
    })
    for key, values in grids.items():
        if not isinstance(values, list):
            raise ValueError(f"--set {key}=... must be a list of values, got {values!r}")
        space[key[len("grid:"):]] = tune.grid_search(values)
    return space

# ------------------------------------------------------------------ --metric

# The numbers a trial reports (`Algorithm.train()`'s result, nested keys joined with '/'),
# as Ray 2.60's RLlib and this package name them, by prefix: recorded from one-iteration
# runs of every credit mode, with the lean and the RLlib paths (HCA_RLLIB_PATHS), with
# remote EnvRunners and with evaluation on, plus the names only some runs log (the Atari
# game scores of `callbacks.GameScoreCallback`, an EnvRunner's step failures).
# tests/test_sweep_pruning.py::test_every_reported_metric_is_known trains one iteration
# and checks that every number it reports is named here, so that a new name in RLlib or
# in this package cannot be refused silently.
_ENV_RUNNER_METRICS = (
    "agent_episode_return_mean/default_agent", "env_reset_timer", "env_step_timer",
    "env_to_module_connector/connector_pipeline_timer", "env_to_module_sum_episodes_length_in",
    "env_to_module_sum_episodes_length_out", "episode_duration_sec_mean", "episode_len_max",
    "episode_len_mean", "episode_len_min", "episode_return_max", "episode_return_mean",
    "episode_return_min", "episode_return_window_mean", "module_episode_return_mean/default_policy",
    "module_to_env_connector/connector_pipeline_timer", "num_agent_steps_sampled/default_agent",
    "num_agent_steps_sampled_lifetime/default_agent", "num_env_steps_sampled",
    "num_env_steps_sampled_lifetime", "num_env_steps_sampled_lifetime_throughput/throughput_since_last_reduce",
    "num_env_steps_sampled_lifetime_throughput/throughput_since_last_restore", "num_episodes",
    "num_episodes_lifetime", "num_module_steps_sampled/default_policy",
    "num_module_steps_sampled_lifetime/default_policy", "rlmodule_inference_timer", "sample",
    "time_between_sampling", "weights_seq_no", "num_env_step_failures_lifetime",
)
# Logged only where episodes carry `info["game_return"]`: the Atari wrappers.
_GAME_METRICS = ("game_return_mean", "game_return_max", "game_return_min", "game_return_window_mean",
                 "game_length_mean")
_LEARNER_METRICS = {
    "__all_modules__": (
        "learner_connector/connector_pipeline_timer", "learner_connector_sum_episodes_length_in",
        "learner_connector_sum_episodes_length_out", "num_env_steps_trained", "num_env_steps_trained_lifetime",
        "num_env_steps_trained_lifetime_throughput/throughput_since_last_reduce",
        "num_env_steps_trained_lifetime_throughput/throughput_since_last_restore",
        "num_env_steps_trained_throughput", "num_module_steps_trained", "num_module_steps_trained_lifetime",
        "num_module_steps_trained_lifetime_throughput/throughput_since_last_reduce",
        "num_module_steps_trained_lifetime_throughput/throughput_since_last_restore",
        "num_module_steps_trained_throughput", "num_non_trainable_parameters", "num_skipped_updates",
        "num_trainable_parameters"),
    "default_policy": (
        "advantage_mean", "c2a2c/mask_fraction", "credit/decision_trust", "credit/history_kl",
        "credit/history_kl_lag1", "credit/history_kl_lag2plus", "credit/history_rows",
        "credit/trust", "credit/trust_scale", "info/history_reward_pairs",
        "credit/trust_signal_z", "credit/trust_z", "default_optimizer_learning_rate",
        "diff_num_grad_updates_vs_sampler_policy", "entropy", "gradients_default_optimizer_global_norm",
        "gradients_hindsight_global_norm", "gradients_remainder_global_norm", "info/reward_pairs",
        "remainder_learning_rate", "remainder_vf_loss",
        "hca/advantage_correlation", "hca/clip_fraction", "hca/ratio_max", "hca/ratio_mean", "hca/ratio_median",
        "hca/ratio_p99", "hindsight/accuracy", "hindsight_learning_rate", "hindsight_loss",
        "hindsight_loss_extra_passes", "info/mutual_information", "module_train_batch_size_mean",
        "num_module_steps_trained", "num_module_steps_trained_lifetime",
        "num_module_steps_trained_lifetime_throughput/throughput_since_last_reduce",
        "num_module_steps_trained_lifetime_throughput/throughput_since_last_restore",
        "num_trainable_parameters", "policy/accuracy", "policy_loss", "total_loss", "vf_explained_var",
        "vf_loss", "weights_seq_no"),
}
_TOP_METRICS = (
    "training_iteration", "iterations_since_restore", "time_total_s", "time_this_iter_s", "time_since_restore",
    "timestamp", "num_env_steps_sampled_lifetime", "num_training_step_calls_per_iteration",
    "env_runner_group/actor_manager_num_outstanding_async_reqs",
    "fault_tolerance/num_env_runners_dropped_lifetime", "fault_tolerance/num_healthy_workers",
    "fault_tolerance/num_remote_worker_restarts",
    "perf/cpu_util_percent", "perf/ram_util_percent",  # Tune's sampling of the machine (log_sys_usage)
    *(f"timers/{t}" for t in ("env_runner_sampling_timer", "learner_update_timer", "restore_env_runners",
                              "synch_env_connectors", "synch_weights", "training_iteration", "training_step")),
)
_EVALUATION_METRICS = (
    "evaluation/actor_manager_num_outstanding_async_reqs", "evaluation/num_env_runners_dropped_lifetime",
    "evaluation/num_healthy_workers", "evaluation/num_remote_worker_restarts",
    "timers/evaluation_iteration", "timers/restore_eval_env_runners", "timers/synch_eval_env_connectors",
)
# Open sets, so any name below these is taken (only the names under them are not
# checked; no scheduler should rank by them anyway): timers named after the pieces of a
# connector pipeline (RLlib's and any a config adds), and Tune's machine sampling, which
# names one entry per GPU (perf/gpu_util_percent0, ...).
_OPEN_PREFIXES = ("env_runners/env_to_module_connector/timers/",
                  "env_runners/module_to_env_connector/timers/",
                  "learners/__all_modules__/learner_connector/timers/", "perf/")


def reported_metrics(envs: List[str], overrides: Dict[str, Any]) -> List[str]:
    """The names of the numbers every trial of this sweep can report (sorted): the game
    scores only when an environment is an Atari one (`atari/...`, `atari-machado/...`)
    or a module's own ('module:Env-v0', which may emit them); evaluation's only when
    `--set [grid:]evaluation_interval` is given."""
    runners = list(_ENV_RUNNER_METRICS)
    if any(env.startswith("atari") or ":" in env for env in envs):
        runners += _GAME_METRICS
    names = [*_TOP_METRICS, *(f"env_runners/{m}" for m in runners),
             *(f"learners/{module}/{m}" for module, leaves in _LEARNER_METRICS.items() for m in leaves)]
    if any(key.removeprefix("grid:") == "evaluation_interval" and value for key, value in overrides.items()):
        names += [*_EVALUATION_METRICS, *(f"evaluation/env_runners/{m}" for m in runners)]
    return sorted(set(names))


def check_metric(metric: str, envs: List[str], overrides: Dict[str, Any]) -> None:
    """ValueError (one line) for a `--metric` no trial of this sweep reports: Tune's
    schedulers wait for it and never stop a trial, so the sweep would run every trial to
    its end (ASHA) or never exploit (PBT). Names the closest reported ones and the count."""
    import difflib

    known = reported_metrics(envs, overrides)
    if metric in known or metric.startswith(_OPEN_PREFIXES):
        return
    if metric.startswith("config/"):
        raise ValueError(f"--metric {metric!r} is a setting of the trial, not a result to maximise")
    why = ""
    if metric.removeprefix("env_runners/") in _GAME_METRICS:
        why = " (game scores come from Atari environments only)"
    elif metric.startswith("evaluation/"):
        why = " (evaluation runs only with --set evaluation_interval=N)"
    close = difflib.get_close_matches(metric, known, n=4, cutoff=0.5)
    raise ValueError(f"--metric {metric!r}: no trial reports it{why}; closest: {', '.join(close) or '-'} "
                     f"(of {len(known)} names, e.g. env_runners/episode_return_window_mean)")


SWEEP_FILE = "sweep.json"

# What a sweep was started with, by the flag that sets it: Tune restores all of it from
# the experiment (the grid, the stop, checkpointing, retries, the scheduler), so a
# `--resume` that asks for something else is refused rather than silently ignored.
SWEEP_FLAGS = {
    "envs": "--envs", "credits": "--credits", "seeds": "--seeds", "stop_timesteps": "--stop-timesteps",
    "overrides": "--set", "num_env_runners": "--num-env-runners",
    "num_envs_per_env_runner": "--num-envs-per-env-runner", "cpus_per_env_runner": "--cpus-per-env-runner",
    "scheduler": "--scheduler", "metric": "--metric", "max_failures": "--max-failures",
    "checkpoint_every": "--checkpoint-every",
}


def sweep_settings(**values: Any) -> Dict[str, Any]:
    """The settings `sweep.json` keeps (the keys of SWEEP_FLAGS), as JSON values."""
    assert set(values) == set(SWEEP_FLAGS), sorted(set(values) ^ set(SWEEP_FLAGS))
    return json.loads(json.dumps(values, default=repr))


def check_resume(experiment: str, resume: bool, settings: Dict[str, Any], restorable: bool) -> None:
    """Raise ValueError (one line) when `--resume` has nothing to continue or asks for
    another sweep than the one stored, or when a fresh start would mix its trials into an
    existing sweep. A sweep without `sweep.json` (older, or on a URI) is not compared."""
    if not resume:
        if restorable:
            raise ValueError(f"{experiment!r} already holds a sweep: pass --resume to continue it, "
                             f"or choose another --name or --output")
        return
    if not restorable:
        raise ValueError(f"nothing to resume in {experiment!r}: no Tune experiment state there "
                         f"(start the sweep without --resume)")
    stored_file = Path(experiment) / SWEEP_FILE
    if "://" in experiment or not stored_file.exists():
        return
    try:
        stored = json.loads(stored_file.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"unreadable {stored_file}: {error}") from None
    for key, flag in SWEEP_FLAGS.items():
        if key == "metric" and stored.get("scheduler", "none") == settings["scheduler"] == "none":
            continue  # no scheduler reads it (a sweep from before the window default resumes)
        if key in stored and stored[key] != settings[key]:
            raise ValueError(f"--resume: the sweep in {experiment!r} was started with {flag} "
                             f"{_flag_text(stored[key])}, not {_flag_text(settings[key])}; a resumed "
                             f"sweep runs the grid it was started with")


def _flag_text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={json.dumps(v)}" for k, v in value.items()) or "(none)"
    return str(value)


def run_sweep(
    *,
    envs: List[str],
    credits: List[str],
    seeds: List[int],
    stop_timesteps: int,
    storage_path: str,
    name: str,
    overrides: Optional[Dict[str, Any]] = None,
    num_env_runners: int = 0,
    num_envs_per_env_runner: int = 8,
    cpus_per_env_runner: float = 0.5,
    scheduler: str = "none",
    metric: str = "env_runners/episode_return_window_mean",
    max_failures: int = 2,
    checkpoint_every: int = 5,
    wandb: str = "auto",
    wandb_project: str = "hca-rllib",
    address: Optional[str] = None,
    resume: bool = False,
    report: bool = True,
    max_concurrent: Optional[int] = None,
    callbacks: Sequence[Any] = (),
):
    """Run the sweep; returns (tune ResultGrid, report path or None). `callbacks`: more
    Tune callbacks, after the sweep's own (its run files, checkpoint pruning, W&B)."""
    import ray
    from ray import tune

    from hca_rllib.runner import init_ray

    overrides = overrides or {}
    check_sweep_inputs(envs, credits, overrides, metric)  # before Ray starts
    storage, experiment = experiment_path(storage_path, name)
    settings = sweep_settings(envs=envs, credits=credits, seeds=seeds, stop_timesteps=stop_timesteps,
                              overrides=overrides, num_env_runners=num_env_runners,
                              num_envs_per_env_runner=num_envs_per_env_runner,
                              cpus_per_env_runner=cpus_per_env_runner, scheduler=scheduler, metric=metric,
                              max_failures=max_failures, checkpoint_every=checkpoint_every)
    check_resume(experiment, resume, settings, tune.Tuner.can_restore(experiment))
    init_ray(address)
    per_trial = trial_resources(num_env_runners, cpus_per_env_runner)
    if max_concurrent is None:  # sized to the cluster as it is now
        concurrent = max_concurrent_trials(ray.cluster_resources().get("CPU", 1.0), per_trial)
    else:  # an autoscaling cluster that will grow: the user says how far
        concurrent = max_concurrent
    chosen = make_scheduler(scheduler, stop_timesteps)
    tune_callbacks = [make_run_files_callback(stop_timesteps), make_checkpoint_pruner(scheduler=chosen)]
    mode = wandb_mode(wandb)
    if mode is not None:
        tune_callbacks.append(wandb_logger_callback(project=wandb_project, group=name, mode=mode))
    tune_callbacks.extend(callbacks)
    param_space = build_param_space(envs, credits, seeds, overrides, num_env_runners,
                                    num_envs_per_env_runner, cpus_per_env_runner)
    if resume:
        trim_torn_logs(experiment)
        # The param space again: Tune stored its objects (the RLModule spec's class) as
        # placeholders that only a new copy of the same space fills in.
        tuner = tune.Tuner.restore(experiment, trainable="HCA", resume_errored=True, param_space=param_space)
    else:
        if "://" not in experiment:
            Path(experiment).mkdir(parents=True, exist_ok=True)
            (Path(experiment) / SWEEP_FILE).write_text(json.dumps(settings, indent=1, default=repr))
        tuner = _new_tuner(param_space, name=name, storage=storage, stop_timesteps=stop_timesteps,
                           concurrent=concurrent, scheduler=chosen,
                           metric=metric if scheduler != "none" else None, checkpoint_every=checkpoint_every,
                           max_failures=max_failures, callbacks=tune_callbacks)
    results = tuner.fit()
    drop_missing_checkpoints(results)  # the pruner's deletions, as the saved state missed them
    page = _sweep_report(experiment) if report and "://" not in experiment else None
    return results, page


def check_sweep_inputs(envs: List[str], credits: List[str], overrides: Dict[str, Any], metric: str) -> None:
    """One-line ValueError for an environment that does not resolve, an unknown credit
    mode, a grid the sweep cannot run, or a `--metric` no trial reports."""
    from hca_rllib.envs import EnvResolutionError, resolve_env

    for env in envs:  # every env checked before any trial starts
        try:
            resolve_env(env, overrides.get("env_config"))
        except EnvResolutionError as error:
            raise ValueError(str(error)) from None
    bad = [c for c in credits if c not in CREDIT_MODES]
    if bad:
        raise ValueError(f"unknown credit mode(s) {bad}; choose from {list(CREDIT_MODES)}")
    check_grids(credits, overrides)
    check_metric(metric, envs, overrides)


def experiment_path(storage_path: str, name: str) -> Tuple[str, str]:
    """(storage, experiment): Tune's storage path (a URI as it is, a local path made
    absolute, as Tune wants it) and the experiment's path below it."""
    storage = storage_path if "://" in storage_path else str(user_path(storage_path))
    experiment = f"{storage}/{name}" if "://" in storage else str(Path(storage) / name)
    return storage, experiment


def _new_tuner(param_space, *, name: str, storage: str, stop_timesteps: int, concurrent: int, scheduler,
               metric: Optional[str], checkpoint_every: int, max_failures: int, callbacks: List[Any]):
    """A Tuner for a new sweep: the grid, the stop, checkpointing (pruned by
    `make_checkpoint_pruner`, not Tune's `num_to_keep`), retries, the scheduler
    (`metric`: None without one)."""
    from ray import tune

    return tune.Tuner(
        "HCA",
        param_space=param_space,
        tune_config=tune.TuneConfig(
            max_concurrent_trials=concurrent,
            scheduler=scheduler,
            metric=metric,
            mode="max" if metric is not None else None,
            trial_dirname_creator=_trial_name,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage,
            stop={"num_env_steps_sampled_lifetime": stop_timesteps},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=checkpoint_every,
                                                    checkpoint_at_end=True, num_to_keep=None),
            failure_config=tune.FailureConfig(max_failures=max_failures),
            callbacks=callbacks,
            verbose=1,
        ),
    )


def _sweep_report(experiment: str) -> Optional[Path]:
    """The report of a finished sweep (a local one), in its `report/`; None when no trial
    has a result (every trial failed before its first), said in one line."""
    from hca_rllib.report import NoRunsError, write_report

    try:
        return write_report([Path(experiment)], Path(experiment) / "report")
    except NoRunsError as error:  # every trial failed before its first result
        print(f"hca-rllib sweep: no report: {error}", file=sys.stderr)
        return None


def check_sweep_config(overrides: Dict[str, Any], num_env_runners: int, num_envs_per_env_runner: int,
                       cpus_per_env_runner: float) -> None:
    """Validate every trial's config before Ray starts: the fixed `--set` values, then each
    value of each `grid:` key in turn. Raises ValueError (one line) naming the field."""
    from hca_rllib import HCAConfig

    def check(values: Dict[str, Any], where: str = "") -> None:
        config = HCAConfig().env_runners(num_env_runners=num_env_runners,
                                         num_envs_per_env_runner=num_envs_per_env_runner,
                                         num_cpus_per_env_runner=cpus_per_env_runner)
        try:
            config.update_from_dict(values)
            config.validate()
        except ValueError as error:
            raise ValueError(where + str(error).splitlines()[0]) from None

    fixed = {k: v for k, v in overrides.items() if not k.startswith("grid:")}
    check(fixed)
    for key, values in overrides.items():
        if not key.startswith("grid:"):
            continue
        if not isinstance(values, list) or not values:
            raise ValueError(f"--set {key}=... must be a non-empty list of values, got {values!r}")
        for value in values:
            check({**fixed, key[len("grid:"):]: value}, where=f"--set {key}: ")
