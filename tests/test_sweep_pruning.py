"""The sweep's checkpoint pruning (`hca_rllib.sweep.make_checkpoint_pruner`): Tune's
`num_to_keep`, deferred until no experiment-state file names the checkpoint.

The callback runs on Tune's own bookkeeping objects (`_CheckpointManager`,
`_TrainingRunMetadata`, `Checkpoint`) and reads experiment-state files written in Tune's
format by Tune's own encoder, so a change of that format in a Ray upgrade fails here."""

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.fs
import pytest

from hca_rllib.sweep import checkpoints_to_prune, make_checkpoint_pruner

NAMES = [f"checkpoint_{i:06d}" for i in range(7)]


def test_keeps_the_newest_when_no_state_names_one():
    assert checkpoints_to_prune(NAMES, 2, set()) == NAMES[:5]
    assert checkpoints_to_prune(NAMES[:2], 2, set()) == []
    assert checkpoints_to_prune(NAMES, 7, set()) == []


def test_never_deletes_a_named_checkpoint_nor_any_newer():
    assert checkpoints_to_prune(NAMES, 2, {NAMES[2]}) == NAMES[:2]
    assert checkpoints_to_prune(NAMES, 2, {NAMES[4], NAMES[2]}) == NAMES[:2]  # the oldest named rules
    assert checkpoints_to_prune(NAMES, 2, {NAMES[6]}) == NAMES[:5]  # named newest: as Tune would
    assert checkpoints_to_prune(NAMES, 2, {NAMES[0]}) == []


def test_unknown_state_or_unknown_name_deletes_nothing():
    assert checkpoints_to_prune(NAMES, 2, None) == []
    assert checkpoints_to_prune(NAMES, 2, {"checkpoint_000099"}) == []
    assert checkpoints_to_prune(NAMES, 0, set()) == []


# --- the callback on Tune's objects --------------------------------------------------------

def _manager(paths):
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult
    from ray.tune import Checkpoint, CheckpointConfig

    manager = _CheckpointManager(CheckpointConfig(num_to_keep=None))
    for i, path in enumerate(paths):
        manager.register_checkpoint(_TrainingResult(checkpoint=Checkpoint.from_directory(str(path)),
                                                    metrics={"training_iteration": i + 1}))
    return manager


def _write_state(directory: Path, trial_id: str, named_paths, name="experiment_state-2026-12-02_00-00-00.json"):
    """An experiment-state file as TuneController.save_to_dir writes it, for one trial
    whose checkpoint manager holds `named_paths` (the last is the one it resumes from)."""
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    metadata = _TrainingRunMetadata()
    metadata.checkpoint_manager = _manager(named_paths) if named_paths else None
    trial_json = json.dumps({"trial_id": trial_id, "status": "RUNNING"})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps({"trial_data": [[trial_json, metadata.get_json_state()]],
                                              "runner_data": {}, "stats": {}}))


@pytest.fixture
def trial(tmp_path):
    """A trial with 6 registered checkpoints on disk; the 7th is being registered."""
    from ray.tune import Checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    experiment, staging = tmp_path / "experiment", tmp_path / "staging"
    paths = []
    for name in NAMES:
        path = experiment / "trial_0" / name
        path.mkdir(parents=True)
        (path / "algorithm_state.pkl").write_bytes(b"x")
        paths.append(path)
    metadata = _TrainingRunMetadata()
    metadata.checkpoint_manager = _manager(paths[:6])
    storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(),
                              experiment_fs_path=str(experiment), experiment_driver_staging_path=str(staging))
    return SimpleNamespace(trial_id="t0", run_metadata=metadata, storage=storage, paths=paths,
                           experiment=experiment, staging=staging,
                           new=Checkpoint.from_directory(str(paths[6])))


def _on_disk(trial):
    return sorted(p.name for p in (trial.experiment / "trial_0").iterdir())


def _tracked(trial):
    return [Path(r.checkpoint.path).name for r in trial.run_metadata.checkpoint_manager._checkpoint_results]


def test_a_stale_saved_state_keeps_its_checkpoint_and_all_newer(trial):
    _write_state(trial.experiment, "t0", trial.paths[:3])  # on storage: resumes from checkpoint 2
    _write_state(trial.staging, "t0", trial.paths[:6])  # being synced: from checkpoint 5
    pruner = make_checkpoint_pruner(2)
    pruner.on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[2:]
    assert _tracked(trial) == NAMES[2:6]  # Tune registers the 7th after the callback
    assert (trial.paths[2] / "algorithm_state.pkl").read_bytes() == b"x"


def test_the_staged_state_protects_too(trial):
    _write_state(trial.experiment, "t0", trial.paths[:5])
    _write_state(trial.staging, "t0", trial.paths[:2])  # an older staged state: the oldest rules
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[1:]


def test_with_states_that_name_the_newest_it_prunes_as_tune_would(trial):
    _write_state(trial.experiment, "t0", trial.paths[:6])
    _write_state(trial.staging, "t0", trial.paths[:6])
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[5:]
    assert _tracked(trial) == NAMES[5:6]


def test_no_state_yet_and_a_trial_the_state_does_not_resume(trial):
    # another trial's checkpoint only (in its own directory)
    _write_state(trial.experiment, "other", [trial.experiment / "trial_1" / name for name in NAMES[:3]])
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[5:]


def test_an_unreadable_state_deletes_nothing(trial, capsys):
    trial.experiment.mkdir(exist_ok=True)
    (trial.experiment / "experiment_state-2026-12-02_00-00-00.json").write_text('{"trial_data": [["')
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES
    assert _tracked(trial) == NAMES[:6]
    assert capsys.readouterr().err == ""  # not an error: tried again at the next checkpoint


def test_the_newest_state_file_is_the_one_read(trial):
    _write_state(trial.experiment, "t0", trial.paths[:1], name="experiment_state-2026-12-01_00-00-00.json")
    _write_state(trial.experiment, "t0", trial.paths[:4], name="experiment_state-2026-12-02_00-00-00.json")
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[3:]


def test_at_the_end_only_the_trials_this_driver_ran(trial):
    _write_state(trial.experiment, "t0", trial.paths[:6])
    pruner = make_checkpoint_pruner(2)
    pruner.on_experiment_end(trials=[trial])  # finished before a restore: not touched
    assert _on_disk(trial) == NAMES
    pruner.on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    trial.run_metadata.checkpoint_manager.register_checkpoint(
        __import__("ray.train._internal.session", fromlist=["_TrainingResult"])._TrainingResult(
            checkpoint=trial.new, metrics={"training_iteration": 7}))
    _write_state(trial.experiment, "t0", trial.paths[:7], name="experiment_state-2026-12-03_00-00-00.json")
    pruner.on_experiment_end(trials=[trial])
    assert _on_disk(trial) == NAMES[5:]


def test_a_failing_prune_never_stops_tune_registering(trial, capsys):
    trial.run_metadata.checkpoint_manager._checkpoint_results = None  # Tune's bookkeeping changed
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert "could not prune checkpoints" in capsys.readouterr().err
    assert _on_disk(trial) == NAMES


# --- checkpoints other trials (PBT) or an earlier prune left in Tune's state --------------

def _lower_trial(trial, exploited_path):
    """A second trial that PBT's exploit pointed at `trial`'s checkpoint (Tune 2.60's
    `PopulationBasedTraining._exploit` sets `_latest_checkpoint_result` to the cloned
    trial's checkpoint; the restore runs when the trial starts again)."""
    from ray.train._internal.session import _TrainingResult
    from ray.tune import Checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    metadata = _TrainingRunMetadata()
    metadata.checkpoint_manager = _manager([])
    metadata.checkpoint_manager._latest_checkpoint_result = _TrainingResult(
        checkpoint=Checkpoint.from_directory(str(exploited_path)), metrics={})
    return SimpleNamespace(trial_id="t1", run_metadata=metadata, storage=trial.storage)


def test_a_checkpoint_another_trial_will_restore_from_is_kept(trial):
    _write_state(trial.experiment, "t0", trial.paths[:6])
    lower = _lower_trial(trial, trial.paths[2])
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial, lower], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == [NAMES[2], NAMES[5], NAMES[6]]
    assert _tracked(trial) == [NAMES[2], NAMES[5]]


def test_a_checkpoint_the_saved_state_resumes_another_trial_from_is_kept(trial):
    # The saved experiment state resumes t1 (exploited by PBT) from t0's checkpoint 3:
    # `--resume` after a kill restores t1 from it.
    _write_state(trial.experiment, "t0", trial.paths[:6])
    state = json.loads((trial.experiment / "experiment_state-2026-12-02_00-00-00.json").read_text())
    _write_state(trial.staging, "t1", trial.paths[:4])
    state["trial_data"] += json.loads((trial.staging / "experiment_state-2026-12-02_00-00-00.json").read_text())["trial_data"]
    (trial.experiment / "experiment_state-2026-12-02_00-00-00.json").write_text(json.dumps(state))
    (trial.staging / "experiment_state-2026-12-02_00-00-00.json").unlink()
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[3:]  # and all newer, as for the trial's own entry


def test_a_checkpoint_pbt_may_still_clone_is_kept(trial):
    # PBT clones `_trial_state[upper].last_checkpoint`, saved at the upper trial's last
    # perturbation, possibly many checkpoints ago.
    from ray.tune import Checkpoint

    _write_state(trial.experiment, "t0", trial.paths[:6])
    scheduler = SimpleNamespace(_trial_state={"trial t0": SimpleNamespace(
        last_checkpoint=Checkpoint.from_directory(str(trial.paths[1])))})
    make_checkpoint_pruner(2, scheduler=scheduler).on_checkpoint(
        iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == [NAMES[1], NAMES[5], NAMES[6]]


def test_a_tracked_checkpoint_already_gone_does_not_orphan_the_others(trial, capsys):
    # The end-of-experiment prune runs after Tune's final state save, so a restored
    # trial's bookkeeping can list a checkpoint that is gone already.
    import shutil

    shutil.rmtree(trial.paths[0])
    _write_state(trial.experiment, "t0", trial.paths[:6])
    make_checkpoint_pruner(2).on_checkpoint(iteration=1, trials=[trial], trial=trial, checkpoint=trial.new)
    assert _on_disk(trial) == NAMES[5:]
    assert _tracked(trial) == NAMES[5:6]
    assert "could not prune" not in capsys.readouterr().err


# --- what a sweep returns, and what --metric may name ----------------------------------------

def test_results_list_no_pruned_checkpoint(tmp_path):
    """`run_sweep`'s ResultGrid: a checkpoint the pruner deleted after Tune's last state
    save (a restored trial's list comes from that state) is dropped from
    `Result.best_checkpoints`; the ones that exist stay, in order."""
    from ray.tune import Checkpoint, Result, ResultGrid

    from hca_rllib.sweep import drop_missing_checkpoints

    paths = [tmp_path / "trial" / name for name in NAMES[:4]]
    for path in paths:
        path.mkdir(parents=True)
    listed = [(Checkpoint.from_directory(str(p)), {"training_iteration": i}) for i, p in enumerate(paths)]
    for path in paths[:2]:  # pruned
        path.rmdir()
    grid = ResultGrid.__new__(ResultGrid)  # as tuner.fit() returns it, without an experiment
    grid._results = [Result(metrics={}, checkpoint=listed[-1][0], error=None, path=str(tmp_path / "trial"),
                            best_checkpoints=list(listed)),
                     Result(metrics={}, checkpoint=None, error=None, path=str(tmp_path), best_checkpoints=None)]
    assert drop_missing_checkpoints(grid) == 2
    assert [Path(c.path).name for c, _ in grid[0].best_checkpoints] == NAMES[2:4]
    assert [m for _, m in grid[0].best_checkpoints] == [{"training_iteration": 2}, {"training_iteration": 3}]
    assert grid[1].best_checkpoints is None
    assert drop_missing_checkpoints(grid) == 0


def _documented_metrics():
    """Every `--metric NAME` in the docs and every metric of the tuned sweeps."""
    import re

    from tuned_examples.sweeps import SWEEPS

    root = Path(__file__).resolve().parents[1]
    names = {spec["metric"] for spec in SWEEPS.values()}
    for doc in [root / "README.md", *root.glob("docs/*.md"), *root.glob("cluster/*.md"),
                *root.glob("tuned_examples/*.md")]:
        names |= set(re.findall(r"--metric[ =]([\w/]+)", doc.read_text()))
    return names


def test_documented_metrics_are_accepted():
    from hca_rllib.cli.sweep import add_arguments
    from hca_rllib.sweep import check_metric

    import argparse

    default = add_arguments(argparse.ArgumentParser()).parse_args(["--envs", "x"]).metric
    names = _documented_metrics() | {default, "env_runners/episode_return_mean"}  # the last: test_sweep
    assert "env_runners/game_return_window_mean" in names and default in names
    for name in names:
        check_metric(name, ["atari/Pong"], {})
    check_metric(default, ["CartPole-v1"], {})
    check_metric("evaluation/env_runners/episode_return_mean", ["CartPole-v1"], {"evaluation_interval": 1})
    check_metric("env_runners/module_to_env_connector/timers/connectors/get_actions", ["CartPole-v1"], {})


@pytest.mark.parametrize("metric, envs, words", [
    ("env_runners/episode_reward_mean", ["CartPole-v1"], "closest: env_runners/episode_return_mean"),
    ("episode_return_mean", ["CartPole-v1"], "env_runners/episode_return_mean"),
    ("env_runners/game_return_window_mean", ["CartPole-v1", "minatar/Breakout"], "Atari environments only"),
    ("evaluation/env_runners/episode_return_mean", ["CartPole-v1"], "evaluation_interval"),
    ("config/lr", ["CartPole-v1"], "a setting"),
    ("learners/default_policy/vf_los", ["CartPole-v1"], "learners/default_policy/vf_loss"),
    ("learners/policy_1/vf_loss", ["CartPole-v1"], "learners/default_policy/vf_loss"),
])
def test_unknown_metric_is_refused_naming_the_closest(metric, envs, words):
    from hca_rllib.sweep import check_metric

    with pytest.raises(ValueError, match="no trial reports it|a setting") as error:
        check_metric(metric, envs, {})
    message = str(error.value)
    assert words in message and "\n" not in message and repr(metric) in message


@pytest.mark.slow  # trains an iteration of each credit mode on an embedded Ray
def test_every_reported_metric_is_known():
    """Every number one training iteration reports (what Tune hands a scheduler) is a name
    `--metric` takes: a name RLlib or this package adds fails here, not in a user's sweep."""
    import numbers

    import ray

    from hca_rllib import HCAConfig
    from hca_rllib.credit import CREDIT_MODES
    from hca_rllib.sweep import _OPEN_PREFIXES, reported_metrics

    def flat(d, prefix=""):
        for key, value in d.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}/")
            else:
                yield f"{prefix}{key}", value

    known = set(reported_metrics(["atari/Pong"], {"evaluation_interval": 1}))
    started = not ray.is_initialized()
    if started:
        from hca_rllib.runner import start_local_ray

        start_local_ray(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        seen = set()
        reward_outcome = {"hindsight": {"outcome": "reward", "window": 8, "across_fragments": True}, "trust": "bias"}
        for credit, extra in [(credit, {}) for credit in CREDIT_MODES] + [("expected_hca", reward_outcome)]:
            config = (HCAConfig().environment("CartPole-v1")
                      .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
                      .training(credit=credit, train_batch_size_per_learner=64, **extra))
            if extra:  # the window across fragments: on the learner path that carries it
                config.learners(learner_path="lean")
            algo = config.build_algo()
            try:
                result = algo.train()
            finally:
                algo.stop()
            seen |= {name for name, value in flat(result) if not name.startswith("config/") and name != "pid"
                     and isinstance(value, numbers.Number) and not isinstance(value, bool)}
    finally:
        if started:
            ray.shutdown()
    unknown = sorted(name for name in seen - known if not name.startswith(_OPEN_PREFIXES))
    assert not unknown, f"reported but not in hca_rllib.sweep's metric names: {unknown}"
    assert "env_runners/episode_return_window_mean" in seen and "learners/default_policy/vf_loss" in seen


def test_protected_checkpoints_are_the_states_entries_the_latest_and_clones():
    """What pruning keeps with all newer ones: the trial's entry in the stored and the
    staged experiment state, its latest checkpoint, and its checkpoints that those files
    name for another trial (a PBT clone); another trial's own checkpoints are not its."""
    from hca_rllib.sweep import protected_checkpoints

    keys = [f"t1/checkpoint_{i:06d}" for i in range(6)]
    stored = {"t1": keys[1], "t2": keys[3], "t3": "t3/checkpoint_000009"}
    staged = {"t1": keys[2], "t2": None}
    assert protected_checkpoints("t1", keys, stored, staged, latest=keys[5]) == {keys[1], keys[2], keys[3], keys[5]}
    assert protected_checkpoints("t1", keys, {}, {}, latest=None) == set()
    assert protected_checkpoints("t9", keys, {"t9": None}, {}, latest=None) == set()
