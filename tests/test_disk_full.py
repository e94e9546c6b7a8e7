"""A full disk (issue 14, item 3): a checkpoint or results write that fails with ENOSPC
(or EDQUOT) leaves the previous checkpoint as the newest valid one, stops the run with one
line naming the file or directory and the free space (exit status 74), and `--resume`
continues once space is freed.

Faults are injected with `hca_rllib.testing.disk.SmallDisk` (a simulated small disk,
in-process): in the middle of every file of a checkpoint (RLlib's own, the RNG state, the
hashes), in each sync and in the rename, and in a results line; end to end through the
CLI (a `python -c` that installs it, then calls `hca_rllib.cli.main`); and, where the
tests run as root and may mount one, on a real small tmpfs.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hca_rllib import HCAConfig
from hca_rllib.runner import (
    EXIT_DISK,
    DiskWriteError,
    ResultsFile,
    TensorBoardLogger,
    disk_error,
    free_space,
    newest_valid_checkpoint,
    read_results,
    save_checkpoint,
    verify_checkpoint,
)
from hca_rllib.testing.disk import SmallDisk


@pytest.fixture(scope="module")
def algo(ray_local):
    algo = (HCAConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size_per_learner=64).debugging(seed=0).build_algo())
    algo.train()
    yield algo
    algo.stop()


def one_line(error: BaseException, *words: str) -> str:
    text = str(error)
    assert "\n" not in text and text.strip() == text, text
    for word in words:
        assert word in text, text
    return text


def assert_previous_kept(run: Path, previous: Path, expected_names):
    """The previous checkpoint verifies and is the newest valid one; nothing else (no
    temporary, no half-deleted, no failed iteration) is in the checkpoints directory."""
    warnings = []
    assert newest_valid_checkpoint(run, warnings.append) == previous and warnings == []
    verify_checkpoint(previous, require_meta=True)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == sorted(expected_names)


def checkpoint_message(run: Path, iteration: int, reason: str = "no space left on device") -> str:
    return f"checkpoint write to '{run / 'checkpoints' / f'iter_{iteration:06d}'}' failed: {reason} ("


def test_a_full_disk_in_the_middle_of_every_checkpoint_file_keeps_the_previous_one(algo, tmp_path):
    """(a) inside RLlib's save_to_path and (b) the RNG state and the hashes: the disk fills
    halfway through each file of a checkpoint, in turn."""
    run = tmp_path
    save_checkpoint(algo, run, 1, 64)
    with SmallDisk(run) as plan:  # where the bytes of one checkpoint go
        previous = save_checkpoint(algo, run, 2, 128)
    files = list(plan.writes.items())
    names = [Path(path).name for path, _ in files]
    assert {"rllib_checkpoint.json", "class_and_ctor_args.pkl", "state.pkl", "rng.pkl",
            "hca_checkpoint.json"} <= set(names) and len(files) >= 8, names
    assert names[-1] == "hca_checkpoint.json" and names[-2] == "rng.pkl"
    def inside(path):  # a file's name inside its (temporary) checkpoint directory
        return Path(*Path(path).relative_to(run / "checkpoints").parts[1:])

    faults = clean = 0
    before = 0
    for path, size in files:
        capacity = before + size // 2
        before += size
        with SmallDisk(run, capacity) as disk:
            with pytest.raises(DiskWriteError) as caught:
                save_checkpoint(algo, run, 3, 192)
        faults += 1
        assert [inside(p) for _, p in disk.injected] == [inside(path)]  # the fault hit this file
        assert disk.used == capacity  # half of it was written before the disk filled
        one_line(caught.value, checkpoint_message(run, 3), "0 B free on ")
        assert caught.value.errno == errno.ENOSPC
        assert_previous_kept(run, previous, ["iter_000001", "iter_000002"])
        clean += 1
    assert faults == clean == len(files)
    # Space freed: the same checkpoint is written.
    assert newest_valid_checkpoint(run, print) == previous
    assert save_checkpoint(algo, run, 3, 192).name == "iter_000003"
    verify_checkpoint(run / "checkpoints" / "iter_000003", require_meta=True)


def test_a_failed_sync_or_rename_keeps_the_previous_checkpoint(algo, tmp_path):
    """(c) the first and the last file sync, the directory's sync after the rename, and
    the rename itself; also the rename over a checkpoint of the same iteration, which is
    put back."""
    run = tmp_path
    save_checkpoint(algo, run, 1, 64)
    with SmallDisk(run) as plan:
        previous = save_checkpoint(algo, run, 2, 128)
    fsyncs = plan.calls["fsync"]
    assert plan.calls["rename"] == 1 and fsyncs >= 9  # every file, then the directory
    cases = [{"fsync": 1}, {"fsync": fsyncs - 1}, {"fsync": fsyncs}, {"rename": 1}]
    for fail in cases:
        with SmallDisk(run, fail=fail) as disk:
            with pytest.raises(DiskWriteError) as caught:
                save_checkpoint(algo, run, 3, 192)
        assert [what for what, _ in disk.injected] == list(fail), fail
        one_line(caught.value, checkpoint_message(run, 3), " free on ")
        assert_previous_kept(run, previous, ["iter_000001", "iter_000002"])
    # The same iteration again (the end-of-run checkpoint): rename 1 moves the old one
    # aside, rename 2 fails; the old one is back.
    with SmallDisk(run, fail={"rename": 2}) as disk:
        with pytest.raises(DiskWriteError):
            save_checkpoint(algo, run, 2, 128)
    assert [what for what, _ in disk.injected] == ["rename"]
    assert_previous_kept(run, previous, ["iter_000001", "iter_000002"])


def test_a_quota_is_named_as_such(algo, tmp_path):
    save_checkpoint(algo, tmp_path, 1, 64)
    with SmallDisk(tmp_path, 50_000, errno=errno.EDQUOT):
        with pytest.raises(DiskWriteError) as caught:
            save_checkpoint(algo, tmp_path, 2, 128)
    one_line(caught.value, checkpoint_message(tmp_path, 2, "disk quota exceeded"))
    assert caught.value.errno == errno.EDQUOT
    assert_previous_kept(tmp_path, tmp_path / "checkpoints" / "iter_000001", ["iter_000001"])


def test_a_results_line_that_does_not_fit_is_cut_off_again(tmp_path):
    """(d) results.jsonl: the failed line is truncated away, so the file ends on a whole
    line; where the cut fails too, the torn last line is what read_results skips."""
    path = tmp_path / "results.jsonl"
    lines = [{"iteration": i, "env_steps": 64 * i, "score": 1.5} for i in (1, 2, 3)]
    with ResultsFile(path) as results:
        results.append(lines[0])
        results.append(lines[1])
    whole = path.read_bytes()
    with SmallDisk(tmp_path, 10) as disk, ResultsFile(path) as results:
        with pytest.raises(DiskWriteError) as caught:
            results.append(lines[2])
    assert disk.injected == [("write", str(path))] and disk.used == 10
    one_line(caught.value, f"results write to '{path}' failed: no space left on device (0 B free on ")
    assert path.read_bytes() == whole and read_results(path) == lines[:2]
    # The cut fails as well: a torn line stays, and read_results (so --resume) drops it.
    with SmallDisk(tmp_path, 10), ResultsFile(path) as results:
        def cannot(*args):
            raise OSError(errno.EIO, "cannot")
        results.handle.truncate = cannot
        with pytest.raises(DiskWriteError):
            results.append(lines[2])
    assert path.read_bytes() != whole and not path.read_text().endswith("\n")
    told = []
    assert read_results(path, on_torn=told.append) == lines[:2] and len(told) == 1


def test_tensorboard_on_a_full_disk_is_the_same_one_line_error(tmp_path):
    """Events are written in this thread (no tensorboardX writer thread to die with a
    traceback and block its queue, no exit hook that fails at exit)."""
    before = set(threading.enumerate())
    with SmallDisk(tmp_path) as disk:
        logger = TensorBoardLogger(tmp_path / "tensorboard")
        logger.log({"iteration": 1, "env_steps": 64, "score": 1.0})
        disk.capacity = disk.used + 20  # then the disk fills
        with pytest.raises(DiskWriteError) as caught:
            logger.log({"iteration": 2, "env_steps": 128, "score": 2.0, "entropy": 0.5})
    assert [what for what, _ in disk.injected] == ["write"]
    one_line(caught.value, f"TensorBoard write to '{tmp_path / 'tensorboard'}' failed: no space left on device")
    # No tensorboardX writer thread (other threads of the process, Ray's, may come and go).
    from tensorboardX.event_file_writer import _EventLoggerThread

    assert not [t for t in set(threading.enumerate()) - before if isinstance(t, _EventLoggerThread)]
    logger.close()  # space freed: what was held back is written
    # A second logger in the same second does not truncate the first one's file.
    again = TensorBoardLogger(tmp_path / "tensorboard", purge_step=129)
    again.close()
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 2


def test_disk_error_reads_the_errno_from_causes_and_words(tmp_path):
    class RayTaskErrorLike(Exception):  # Ray wraps a remote error as `cause`
        def __init__(self, cause):
            super().__init__("task failed")
            self.cause = cause

    words_only = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    for error, reason in [(words_only, "no space left on device"),
                          (RayTaskErrorLike(OSError(errno.EDQUOT, "quota")), "disk quota exceeded"),
                          (OSError(errno.EIO, "Input/output error"), "input/output error")]:
        message = str(disk_error("checkpoint write", tmp_path / "a" / "b", error))
        assert message.startswith(f"checkpoint write to '{tmp_path / 'a' / 'b'}' failed: {reason} (")
    # The free space of the nearest existing parent, and the mount point it is on.
    text = free_space(tmp_path / "not" / "yet")
    mount = Path(text.rsplit(" free on ", 1)[1])
    assert os.path.ismount(mount) and (mount == tmp_path or mount in tmp_path.resolve().parents)
    assert text.split()[1] in ("B", "KiB", "MiB", "GiB", "TiB")


# ------------------------------------------------------------------ end to end

SMALL = ["--num-envs-per-env-runner", "2", "--set", "train_batch_size_per_learner=128",
         "--checkpoint-every", "2", "--wandb", "off"]

# `hca-rllib train` with a SmallDisk on the run directory that fills after the second
# checkpoint: `room` more bytes (a negative room: that many bytes less than one checkpoint).
UNDER_A_SMALL_DISK = """
import sys
import hca_rllib.runner as runner
from hca_rllib.testing.disk import SmallDisk
from hca_rllib.cli import main
room, argv = int(sys.argv[1]), sys.argv[2:]
disk = SmallDisk(argv[argv.index("--output") + 1]).install()
real, saved = runner.save_checkpoint, []
def save_checkpoint(*args, **kwargs):
    before = disk.used
    path = real(*args, **kwargs)
    saved.append(disk.used - before)  # the bytes of the checkpoint just written
    if len(saved) == 2:
        disk.capacity = disk.used + (room if room > 0 else saved[-1] + room)
    return path
runner.save_checkpoint = save_checkpoint
code = main(argv)
print("injected", disk.injected, file=sys.stderr)
sys.exit(code)
"""


def train(out: Path, *extra, room=None, timeout=600):
    argv = ["train", "--stop-timesteps", "1536", "--output", str(out), *SMALL, *extra]
    command = ([sys.executable, "-c", UNDER_A_SMALL_DISK, str(room)] if room is not None
               else [sys.executable, "-m", "hca_rllib"])
    return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=timeout)


def results(run: Path):
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


# Ray's and RLlib's own start-up log lines (token authentication, a deprecation, gputil).
RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\t(INFO|WARNING) ")


def stderr_lines(stderr: str):
    """What the run itself wrote to stderr: Ray's log lines and the test's own left out."""
    return [line for line in stderr.splitlines()
            if line.strip() and not RAY_LOG_LINE.match(line) and not line.startswith("injected ")]


def assert_failed_cleanly(proc, run: Path, what: str, newest: str):
    assert proc.returncode == EXIT_DISK, proc.stderr[-3000:]
    lines = stderr_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"hca-rllib: error: {what} to '"), lines
    assert " free on " in lines[0] and f"--resume continues from {newest} once space is freed" in lines[0]
    errors = lines
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names[-1] == newest and all(name.startswith("iter_") for name in names), names
    assert newest_valid_checkpoint(run, pytest.fail) == run / "checkpoints" / newest
    return errors[0]


def assert_resumes(run: Path, newest: str, before):
    saved = json.loads((run / "checkpoints" / newest / "hca_checkpoint.json").read_text())
    proc = train(run, "--resume")  # space freed: no SmallDisk
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert stderr_lines(proc.stderr) == [], proc.stderr[-3000:]
    assert f"resuming from {run / 'checkpoints' / newest} (iteration {saved['iteration']}" in proc.stdout
    after = results(run)
    assert [line["iteration"] for line in after] == list(range(1, len(after) + 1))  # none lost or twice
    assert after[: saved["iteration"]] == before[: saved["iteration"]]
    assert after[-1]["env_steps"] >= 1536
    assert not list((run / "checkpoints").glob(".*"))


@pytest.mark.slow  # CLI subprocesses that train
@pytest.mark.parametrize("where, room, what", [
    ("checkpoint", -50_000, "checkpoint write"),  # the third checkpoint lacks 50 kB
    ("results", 300, "results write"),  # the next results line does not fit
])
def test_a_cli_run_on_a_disk_that_fills_stops_cleanly_and_resumes(tmp_path, where, room, what):
    run = tmp_path / "run"
    proc = train(run, room=room)
    error = assert_failed_cleanly(proc, run, what, "iter_000004")
    if where == "checkpoint":
        assert f"'{run / 'checkpoints' / 'iter_000006'}' failed: no space left on device (0 B free on " in error
    else:
        assert f"'{run / 'results.jsonl'}' failed: no space left on device (0 B free on " in error
    before = results(run)  # whole lines only, up to the iteration that failed
    assert [line["iteration"] for line in before] == list(range(1, len(before) + 1))
    assert len(before) == (6 if where == "checkpoint" else 4)
    assert_resumes(run, "iter_000004", before)


# ------------------------------------------------------------------ a real small tmpfs


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 16 MiB tmpfs mounted at tmp_path/disk (root only; skipped where mount is refused)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow  # CLI subprocesses that train
def test_a_real_full_tmpfs_stops_the_run_cleanly_and_resume_continues(small_tmpfs):
    """The run is paused after its second checkpoint, the disk filled to 32 KiB of room
    (a checkpoint is about 200 KiB), the run let go: it stops at its next checkpoint."""
    run = small_tmpfs / "run"
    argv = [sys.executable, "-m", "hca_rllib", "train", "--stop-timesteps", "100000",
            "--output", str(run), *SMALL]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    filler = small_tmpfs / "filler"
    try:
        deadline = time.time() + 300
        while len(list(run.glob("checkpoints/iter_*"))) < 2:
            assert proc.poll() is None and time.time() < deadline, "training made no progress"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGSTOP)
        with open(filler, "wb") as f:  # all the free space but 32 KiB
            f.write(b"\0" * (os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize - 32 * 1024))
        os.kill(proc.pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_DISK, stderr[-3000:]
    newest = sorted(p.name for p in (run / "checkpoints").glob("iter_*"))[-1]
    errors = stderr_lines(stderr)
    assert len(errors) == 1 and errors[0].startswith("hca-rllib: error: checkpoint write to '"), errors
    assert "failed: no space left on device (" in errors[0] and f"free on {small_tmpfs})" in errors[0]
    assert f"--resume continues from {newest} once space is freed" in errors[0]
    assert not list((run / "checkpoints").glob(".*"))
    before = results(run)
    filler.unlink()  # space freed
    budget = before[-1]["env_steps"] + 512
    saved = json.loads((run / "checkpoints" / newest / "hca_checkpoint.json").read_text())
    proc = subprocess.run([*argv[:5], str(budget), *argv[6:], "--resume"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"(iteration {saved['iteration']}," in proc.stdout
    after = results(run)
    assert [line["iteration"] for line in after] == list(range(1, len(after) + 1))
    assert after[: saved["iteration"]] == before[: saved["iteration"]]
    assert after[-1]["env_steps"] >= budget
