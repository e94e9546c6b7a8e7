"""The run directory's pieces: results lines, atomic checkpoints, W&B modes, Tune's W&B."""

import io
import json
import os

import pytest

from hca_rllib import HCAConfig
from hca_rllib.runner import (
    CheckpointError,
    Progress,
    newest_valid_checkpoint,
    read_results,
    restore_rng_state,
    result_line,
    save_checkpoint,
    verify_checkpoint,
    wandb_logger_callback,
    wandb_mode,
)


def _result(iteration=3, steps=1536, game=None):
    env_runners = {"episode_return_mean": 12.5, "num_episodes": 4}
    if game is not None:
        env_runners["game_return_mean"] = game
    return {
        "training_iteration": iteration,
        "num_env_steps_sampled_lifetime": steps,
        "env_runners": env_runners,
        "learners": {"default_policy": {"info/mutual_information": 0.02, "policy_loss": float("nan")},
                     "__all_modules__": {"num_skipped_updates": 0}},
    }


def test_result_line_scores_the_game_where_there_is_one():
    line = result_line(_result(), 10.0, 150.0)
    assert line["iteration"] == 3 and line["env_steps"] == 1536
    assert line["score"] == line["episode_return_mean"] == 12.5
    assert line["mutual_information"] == 0.02
    assert line["policy_loss"] is None  # non-finite values are written as null, JSON-safe
    assert line["hca_ratio_mean"] is None
    json.dumps(line, allow_nan=False)
    atari = result_line(_result(game=-20.0), 10.0, 150.0)
    assert atari["score"] == -20.0 and atari["episode_return_mean"] == 12.5


def test_read_results_drops_a_torn_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"iteration": 1}\n{"iteration": 2}\n{"iterat')
    assert read_results(path) == [{"iteration": 1}, {"iteration": 2}]


def test_wandb_is_offline_without_a_key_and_online_with_one(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode("auto") == "online"
    assert wandb_mode("offline") == "offline" and wandb_mode("off") is None
    with pytest.raises(ValueError, match="wandb mode must be auto, online, offline or off"):
        wandb_mode("cloud")


def test_progress_shows_steps_rate_return_mi_and_time_left():
    stream = io.StringIO()
    Progress(10_000, stream).show(result_line(_result(), 10.0, 150.0), rate=150.0)
    text = stream.getvalue()
    for part in ("iter     3", "1,536/10,000", "150 steps/s", "return   12.50", "MI +0.0200 nats", "left 0m56s"):
        assert part in text, text


@pytest.fixture(scope="module")
def small_algo(ray_local):
    algo = (HCAConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size_per_learner=64).debugging(seed=0).build_algo())
    algo.train()
    yield algo
    algo.stop()


def test_checkpoints_are_atomic_verified_and_pruned(small_algo, tmp_path):
    for iteration in (2, 4, 6, 8):
        save_checkpoint(small_algo, tmp_path, iteration, iteration * 64, keep=3)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["iter_000004", "iter_000006", "iter_000008"]  # no temporary left, oldest pruned
    meta = verify_checkpoint(tmp_path / "checkpoints" / "iter_000008")
    assert meta["iteration"] == 8 and meta["env_steps"] == 512 and meta["files"]
    # A kill mid-write leaves only a temporary directory: never taken for a checkpoint.
    (tmp_path / "checkpoints" / ".tmp_iter_000010_123").mkdir()
    warnings = []
    assert newest_valid_checkpoint(tmp_path, warnings.append).name == "iter_000008"
    # A file lost from the newest: skipped with a warning naming it.
    next((tmp_path / "checkpoints" / "iter_000008").rglob("state.pkl")).unlink()
    assert newest_valid_checkpoint(tmp_path, warnings.append).name == "iter_000006"
    assert "skipping checkpoint iter_000008" in warnings[0] and "is missing" in warnings[0]
    with pytest.raises(CheckpointError, match="does not exist"):
        verify_checkpoint(tmp_path / "nope")
    # In a run directory every checkpoint has its hashes: one without (a half-written or
    # half-deleted directory) or with unreadable metadata is skipped, not trusted.
    (tmp_path / "checkpoints" / "iter_000006" / "hca_checkpoint.json").unlink()
    save_checkpoint(small_algo, tmp_path, 10, 640, keep=5)
    (tmp_path / "checkpoints" / "iter_000010" / "hca_checkpoint.json").write_bytes(b"\xff\xfe\x00garbage")
    found = newest_valid_checkpoint(tmp_path, warnings.append)
    assert found.name == "iter_000004"
    assert any("iter_000010" in w and "unreadable" in w for w in warnings)
    assert any("iter_000006" in w and "not a complete checkpoint" in w for w in warnings)


def test_rng_state_round_trips(small_algo, tmp_path):
    import random

    import numpy as np
    import torch

    path = save_checkpoint(small_algo, tmp_path, 1, 64)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.random(), np.random.rand(), torch.rand(1)  # move every generator on
    restore_rng_state(path)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_tune_logs_to_wandb_offline_through_rays_callback(ray_local, tmp_path, monkeypatch):
    from ray import tune

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_root"))
    config = (HCAConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
              .training(train_batch_size_per_learner=64))
    tuner = tune.Tuner(
        "HCA",
        param_space=config,
        run_config=tune.RunConfig(
            name="wandb_offline", storage_path=str(tmp_path / "tune"), stop={"training_iteration": 2},
            callbacks=[wandb_logger_callback(project="hca-rllib-test", group="CartPole-v1:hca")],
            verbose=0,
        ),
    )
    results = tuner.fit()
    assert not results.errors
    runs = [p for p in tmp_path.rglob("offline-run-*") if p.is_dir()]
    assert runs and any(f.suffix == ".wandb" for f in runs[0].iterdir())
    assert os.environ.get("WANDB_API_KEY") is None


def _tensorboard_events(directory):
    """Every Event in the TFRecord files below `directory` (length, crc, data, crc)."""
    import struct

    from tensorboardX.proto import event_pb2

    events = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[offset + 12: offset + 12 + length])
            events.append(event)
            offset += 12 + length + 4
    return events


def test_tensorboard_resume_purges_points_after_the_checkpoint(tmp_path):
    from hca_rllib.runner import TensorBoardLogger

    first = TensorBoardLogger(tmp_path)
    for steps in (100, 200, 300):
        first.log({"iteration": steps // 100, "env_steps": steps, "score": float(steps)})
    first.close()
    resumed = TensorBoardLogger(tmp_path, purge_step=201)  # checkpoint at 200 steps
    resumed.log({"iteration": 3, "env_steps": 300, "score": -1.0})
    resumed.close()
    events = _tensorboard_events(tmp_path)
    starts = [e for e in events if e.HasField("session_log") and e.session_log.status == e.session_log.START]
    assert [e.step for e in starts] == [201]  # TensorBoard drops earlier-file points at >= 201
    scores = [(e.step, e.summary.value[0].simple_value) for e in events
              if e.HasField("summary") and e.summary.value and e.summary.value[0].tag == "score"]
    assert scores[-1] == (300, -1.0)
