"""The run directory's pieces: results lines, atomic checkpoints, W&B modes, Tune's W&B."""

import io
import json
import os

import pytest

from hca_rllib import HCAConfig
from hca_rllib.runner import (
    CheckpointError,
    Progress,
    ResultsError,
    newest_valid_checkpoint,
    read_results,
    restore_rng_state,
    result_line,
    save_checkpoint,
    user_path,
    verify_checkpoint,
    wandb_logger_callback,
    wandb_mode,
)


def _result(iteration=3, steps=1536, game=None, window=None, game_window=None):
    env_runners = {"episode_return_mean": 12.5, "num_episodes": 4}
    if game is not None:
        env_runners["game_return_mean"] = game
    if window is not None:
        env_runners["episode_return_window_mean"] = window
    if game_window is not None:
        env_runners["game_return_window_mean"] = game_window
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
    assert line["score_window"] is None and atari["score_window"] is None  # no window stats
    windowed = result_line(_result(game=-20.0, window=3.0, game_window=-18.5), 10.0, 150.0)
    assert windowed["score_window"] == -18.5 and windowed["episode_return_window_mean"] == 3.0
    assert result_line(_result(window=14.0), 10.0, 150.0)["score_window"] == 14.0


def test_read_results_drops_a_torn_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"iteration": 1}\n{"iteration": 2}\n{"iterat')
    assert read_results(path) == [{"iteration": 1}, {"iteration": 2}]
    told = []
    assert read_results(path, on_torn=told.append) == [{"iteration": 1}, {"iteration": 2}]
    assert told == [f"{path}: skipped its torn last line 3 (a kill mid-write)"]
    path.write_text('{"iteration": 1}\n\n{"iteration": 2}\n')  # blank lines are no lines
    assert read_results(path, on_torn=told.append) == [{"iteration": 1}, {"iteration": 2}] and len(told) == 1
    assert read_results(tmp_path / "none.jsonl") == []


def test_read_results_refuses_damage_before_the_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"iteration": 1}\n{"iterat\n{"iteration": 3}\n')
    with pytest.raises(ResultsError, match=r"results\.jsonl, line 2: not valid JSON"):
        read_results(path)
    path.write_text('{"iteration": 1}\n[2]\n')
    with pytest.raises(ResultsError, match=r"line 2: a JSON list, not an object"):
        read_results(path)
    assert issubclass(ResultsError, ValueError)


def test_user_path_is_absolute_from_relative_and_home(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_path("runs/a") == tmp_path / "runs" / "a"
    assert user_path("~/runs/../b") == tmp_path / "home" / "b"
    assert user_path(tmp_path / "c") == tmp_path / "c"
    with pytest.raises(ValueError, match="cannot expand '~no_such_user_hca/x'"):
        user_path("~no_such_user_hca/x")


def test_tune_wandb_callback_needs_no_key_offline_and_honours_wandb_dir(monkeypatch, tmp_path):
    """Ray's own callback raises "No WandB API key found" at setup unless the environment
    says WANDB_MODE=offline; ours is offline by argument alone, leaves the environment as it
    was, and passes the driver's WANDB_DIR to its logging actor as `dir`."""
    from ray.air.integrations.wandb import WandbLoggerCallback

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "w" / "runs"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no `wandb login` of this machine's user
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.delenv("WANDB_SETUP_API_KEY_HOOK", raising=False)
    with pytest.raises(ValueError, match="No WandB API key found"):
        WandbLoggerCallback(project="p", mode="offline").setup()
    callback = wandb_logger_callback(project="p")
    assert isinstance(callback, WandbLoggerCallback) and callback.kwargs["mode"] == "offline"
    callback.setup()
    assert "WANDB_MODE" not in os.environ and "WANDB_API_KEY" not in os.environ
    assert callback.kwargs["dir"] == str(tmp_path / "w" / "runs") and (tmp_path / "w" / "runs").is_dir()
    assert wandb_logger_callback(project="p", dir=str(tmp_path / "x")).kwargs["dir"] == str(tmp_path / "x")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    wandb_logger_callback(project="p").setup()
    assert os.environ["WANDB_MODE"] == "disabled"  # restored, not overwritten
    monkeypatch.delenv("WANDB_DIR")
    assert "dir" not in wandb_logger_callback(project="p").kwargs  # Ray's default: the trial directory


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
    stream = io.StringIO()  # the last-100 window where the run has one
    Progress(10_000, stream).show(result_line(_result(window=30.25), 10.0, 150.0), rate=150.0)
    assert "return   30.25" in stream.getvalue()


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _line(iteration, steps, score=1.0, mi=None):
    return {"iteration": iteration, "env_steps": steps, "score": score, "mutual_information": mi}


def test_progress_in_a_log_is_a_line_per_iteration_at_most_every_n_seconds():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(1000, stream, every_s=10, clock=clock)
    assert not progress.tty
    for iteration in range(1, 10):  # an iteration every 3 s: lines at 0, 12 and 24 s
        progress.show(_line(iteration, 100 * iteration), rate=33.3)
        clock.now += 3
    shown = stream.getvalue().splitlines()
    assert [int(text.split()[1]) for text in shown] == [1, 5, 9]
    progress.show(_line(10, 1000), rate=33.3)  # the budget is reached: shown at once
    assert stream.getvalue().splitlines()[-1].split()[1] == "10"
    progress.close()
    assert len(stream.getvalue().splitlines()) == 4
    assert "steps      1,000/1,000" in stream.getvalue().splitlines()[-1]
    # A held-back last line is written when the run ends.
    stream = io.StringIO()
    progress = Progress(10**6, stream, every_s=10, clock=clock)
    progress.show(_line(1, 100), rate=50.0)
    progress.show(_line(2, 200, mi=0.5), rate=50.0)
    assert len(stream.getvalue().splitlines()) == 1
    progress.close()
    last = stream.getvalue().splitlines()
    assert len(last) == 2 and last[1].startswith("iter     2") and "MI +0.5000 nats" in last[1]
    # every_s=0: every iteration, as for slow (Atari-sized) iterations.
    stream = io.StringIO()
    progress = Progress(10**6, stream, every_s=0, clock=clock)
    for iteration in range(1, 4):
        progress.show(_line(iteration, iteration), rate=1.0)
    assert len(stream.getvalue().splitlines()) == 3


def test_progress_on_a_terminal_is_one_updating_bar():
    import fcntl
    import select
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 150, 0, 0))
    stream = os.fdopen(slave, "w")
    try:
        progress = Progress(10_000, stream)
        assert progress.tty
        for iteration, steps in enumerate((2_000, 5_000, 10_500), start=1):
            progress.show(_line(iteration, steps, score=20.0 + iteration, mi=0.01), rate=500.0)
        progress.close()
        stream.flush()
        seen = b""
        while select.select([master], [], [], 0.5)[0]:
            seen += os.read(master, 1 << 16)
    finally:
        stream.close()
        os.close(master)
    text = seen.decode()
    assert text.endswith("\n") and text.count("\n") == 1  # one line, redrawn in place
    frames = [frame for frame in text.rstrip("\r\n").split("\r") if frame]
    assert len(frames) >= 3
    assert frames[0].startswith(" 20%|") and "2,000/10,000 steps, 500 steps/s, left 0m16s, iter 1" in frames[0]
    assert "return 21.00, MI +0.0100 nats" in frames[0]
    assert frames[-1].startswith("100%|") and "10,500/10,000 steps" in frames[-1] and "left 0m00s" in frames[-1]
    assert all(len(frame) <= 150 for frame in frames)


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


@pytest.mark.parametrize("keep", [1, 2])
def test_a_save_after_resuming_past_a_damaged_checkpoint_keeps_itself(small_algo, tmp_path, keep):
    """Resumed from iteration 4 because iteration 8 is damaged: the next save (6) is kept,
    and the damaged newer one goes (it would stay the newest and shadow the new ones).
    Before, "all but the newest `keep`" by iteration deleted the new save with keep=1."""
    for iteration in (2, 4, 8):
        save_checkpoint(small_algo, tmp_path, iteration, iteration * 64, keep=3)
    next((tmp_path / "checkpoints" / "iter_000008").rglob("state.pkl")).unlink()
    warnings = []
    assert newest_valid_checkpoint(tmp_path, warnings.append).name == "iter_000004"
    save_checkpoint(small_algo, tmp_path, 6, 6 * 64, keep=keep)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == (["iter_000006"] if keep == 1 else ["iter_000004", "iter_000006"])
    assert newest_valid_checkpoint(tmp_path, warnings.append).name == "iter_000006"
    verify_checkpoint(tmp_path / "checkpoints" / "iter_000006", require_meta=True)


def test_rng_state_round_trips(small_algo, tmp_path):
    import random

    import numpy as np
    import torch

    path = save_checkpoint(small_algo, tmp_path, 1, 64)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.random(), np.random.rand(), torch.rand(1)  # move every generator on
    restore_rng_state(path)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.slow  # a Tune run
def test_tune_logs_to_wandb_offline_through_rays_callback(ray_local, tmp_path, monkeypatch):
    from ray import tune

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # conftest's default would hide the no-key path
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
    # WANDB_DIR was set after ray.init (the fixture), so the logging actor only knows it
    # because wandb_logger_callback passes it on; the callback waits for wandb.finish at
    # the experiment's end, so the run is complete there when fit() returns.
    runs = [p for p in (tmp_path / "wandb_root").rglob("offline-run-*") if p.is_dir()]
    assert len(runs) == 1 and any(f.suffix == ".wandb" for f in runs[0].iterdir())
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


class _FilesAlgo:
    """Stands in for an Algorithm in `save_checkpoint`: writes a plain RLlib-looking
    checkpoint (no Ray, no module)."""

    def save_to_path(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "rllib_checkpoint.json"), "w") as f:
            f.write("{}")


def test_checkpoints_past_a_million_iterations_are_ordered_by_iteration(tmp_path):
    # iter_1000000 has 7 digits: by name it sorts before iter_999998; by number it is
    # the newest, kept by pruning and taken by resume.
    for iteration in (999_996, 999_998, 1_000_000, 1_000_002):
        save_checkpoint(_FilesAlgo(), tmp_path, iteration, iteration * 64, keep=3)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["iter_1000000", "iter_1000002", "iter_999998"]
    assert newest_valid_checkpoint(tmp_path, print).name == "iter_1000002"


def test_a_failing_stop_never_hides_the_runs_outcome(ray_local, tmp_path, monkeypatch):
    """`algo.stop()` runs in a `finally`: when it raises, the run's own error still reaches
    the caller (and a finished run still returns its last line), with a warning."""
    from ray.rllib.algorithms.algorithm import Algorithm

    from hca_rllib import A2CConfig
    from hca_rllib.runner import run_training

    def failing_stop(self):
        raise RuntimeError("stop failed")

    monkeypatch.setattr(Algorithm, "stop", failing_stop)
    config = (A2CConfig().environment("CartPole-v1")
              .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16)
              .training(train_batch_size_per_learner=32).debugging(seed=0))
    warnings = []

    def boom(line):
        raise KeyError("the run's own error")

    with pytest.raises(KeyError, match="the run's own error"):
        run_training(config, tmp_path / "a", 64, run_info={"env": "CartPole-v1"}, checkpoint_every=0,
                     wandb="off", tensorboard=False, progress=False, warn=warnings.append, stop_when=boom)
    assert warnings == ["stopping the algorithm failed: RuntimeError: stop failed"]
    last = run_training(config, tmp_path / "b", 64, run_info={"env": "CartPole-v1"}, checkpoint_every=0,
                        wandb="off", tensorboard=False, progress=False, warn=warnings.append)
    assert last["env_steps"] >= 64 and len(warnings) == 2


def test_write_file_syncs_the_file_then_the_directory_after_the_rename(tmp_path, monkeypatch):
    """A rename is only durable once its directory is synced: `write_file` syncs the
    temporary's data, renames it over the target, then syncs the directory (in that
    order); a filesystem that refuses a directory fsync still gets the whole file."""
    import os as os_module
    import stat

    from hca_rllib import runner

    events = []
    real_fsync, real_replace = os_module.fsync, os_module.replace

    def fsync(fd):
        events.append(("fsync", "dir" if stat.S_ISDIR(os_module.fstat(fd).st_mode) else "file"))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os_module.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(runner.os, "fsync", fsync)
    monkeypatch.setattr(runner.os, "replace", replace)
    runner.write_file(tmp_path / "run.json", b"{}")
    assert events == [("fsync", "file"), ("replace", "run.json"), ("fsync", "dir")]
    assert (tmp_path / "run.json").read_bytes() == b"{}" and not list(tmp_path.glob(".*.tmp"))

    def refusing(fd):
        if stat.S_ISDIR(os_module.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        return real_fsync(fd)

    monkeypatch.setattr(runner.os, "fsync", refusing)
    runner.write_file(tmp_path / "run.json", b"[1]")
    assert (tmp_path / "run.json").read_bytes() == b"[1]"


class FakeRay:
    """`ray.init` that times out in Ray's node start `failures` times, then starts."""

    def __init__(self, failures):
        self.failures, self.calls = failures, []

    def init(self, **kwargs):
        self.calls.append("init")
        if self.failures:
            self.failures -= 1
            raise Exception("The current node timed out during startup. This could happen because ...")

    def shutdown(self):
        self.calls.append("shutdown")


def _fake_ray(monkeypatch, failures):
    import ray

    fake = FakeRay(failures)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    return fake


def test_an_embedded_ray_that_times_out_starting_is_stopped_and_started_once_more(monkeypatch, capsys):
    from hca_rllib.runner import init_ray

    fake = _fake_ray(monkeypatch, failures=1)
    init_ray()
    assert fake.calls == ["init", "shutdown", "init"]
    assert "did not start within Ray's limit; trying once more" in capsys.readouterr().err


def test_a_second_time_out_is_one_line_and_leaves_no_half_made_run_directory(monkeypatch, tmp_path):
    from hca_rllib.runner import RayStartError, run_training

    fake = _fake_ray(monkeypatch, failures=2)
    config = HCAConfig().environment("CartPole-v1")
    with pytest.raises(RayStartError, match=r"^Ray's node did not start within Ray's limit, twice \(The current node "
                                            r"timed out during startup[^\n]*overloaded$"):
        run_training(config, tmp_path / "run", 1000, run_info={}, tensorboard=False, wandb="off")
    assert fake.calls == ["init", "shutdown", "init", "shutdown"]
    assert not (tmp_path / "run").exists()  # a retried `train` starts clean
    (tmp_path / "kept").mkdir()  # a directory the user had stays
    fake.failures = 2
    with pytest.raises(RayStartError):
        run_training(config, tmp_path / "kept", 1000, run_info={}, tensorboard=False, wandb="off")
    assert (tmp_path / "kept").is_dir()


def test_other_ray_start_errors_are_not_retried(monkeypatch):
    import ray

    from hca_rllib.runner import init_ray

    calls = []

    def broken(**kwargs):
        calls.append(kwargs)
        raise ValueError("object_store_memory is too large")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", broken)
    with pytest.raises(ValueError, match="too large"):
        init_ray()
    assert len(calls) == 1


def test_the_cli_says_a_failed_ray_start_in_one_line(monkeypatch, tmp_path, capsys):
    from hca_rllib.cli import main

    _fake_ray(monkeypatch, failures=2)
    code = main(["train", "--env", "CartPole-v1", "--stop-timesteps", "1000", "--output", str(tmp_path / "run"),
                 "--wandb", "off", "--no-tensorboard"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1].startswith("hca-rllib: error: Ray's node did not start within Ray's limit, twice")
    assert not (tmp_path / "run").exists()


def test_checkpoint_schedule_by_iterations_and_by_seconds():
    """Every `every` iterations; with `every_s`, also after an iteration that ends that
    long after the last checkpoint (or the start), counted from each save."""
    from hca_rllib.runner import CheckpointSchedule

    now = [100.0]
    by_count = CheckpointSchedule(3, None, iteration=0, clock=lambda: now[0])
    assert [i for i in range(1, 10) if by_count.due(i)] == [3, 6, 9]
    assert not any(CheckpointSchedule(0, None, 0).due(i) for i in range(1, 10))  # 0: never by count

    schedule = CheckpointSchedule(0, 60.0, iteration=5, clock=lambda: now[0])
    assert schedule.last_iteration == 5
    now[0] = 159.0
    assert not schedule.due(6)
    now[0] = 160.0
    assert schedule.due(7)
    schedule.saved(7)
    assert schedule.last_iteration == 7 and not schedule.due(8)
    now[0] = 220.0
    assert schedule.due(9)
