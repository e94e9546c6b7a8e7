"""SIGTERM (`kill`, a pod's termination, `ray job stop`) ends a run the way Ctrl-C does:
logs closed, the last checkpoint kept, and `--resume` continues with no row lost or
repeated; on a cluster, a job stopped mid-run and submitted again with `--resume`."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from polling import wait_for
from test_cluster import BIN, _readme_commands, _run, cluster_dir  # noqa: F401 - a fixture

CLI = [sys.executable, "-m", "hca_rllib"]
SMALL = ["--num-envs-per-env-runner", "4", "--set", "train_batch_size_per_learner=256"]
INTERRUPTED = "hca-rllib: interrupted; the last checkpoint is kept (resume with --resume)"


def _rows(run_dir: Path):
    """Every line of results.jsonl, strictly: a torn line fails the test."""
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _checkpointed(run_dir: Path, count: int):
    def ready():
        done = list((run_dir / "checkpoints").glob("iter_*")) if (run_dir / "checkpoints").is_dir() else []
        return len(done) >= count
    return ready


def _saved_iteration(run_dir: Path) -> int:
    newest = sorted((run_dir / "checkpoints").glob("iter_*"))[-1]
    return json.loads((newest / "hca_checkpoint.json").read_text())["iteration"]


def _check_resumed(before, after, saved, budget):
    """`after` (the resumed run's rows) keeps `before`'s rows up to the checkpoint it
    resumed from (iteration `saved`), then goes on to the budget: none lost, none twice."""
    assert len(before) >= saved >= 2
    assert [row["iteration"] for row in after] == list(range(1, len(after) + 1))
    assert after[:saved] == before[:saved]
    assert after[-1]["env_steps"] >= budget


@pytest.mark.slow  # a CLI subprocess that trains, then its resume
def test_sigterm_ends_a_run_like_ctrl_c_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([*CLI, "train", "--stop-timesteps", "200000", "--checkpoint-every", "2",
                             "--wandb", "off", "--output", str(out), *SMALL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(_checkpointed(out, 2), 240), "training made no progress"
    finally:
        proc.send_signal(signal.SIGTERM)  # the driver only, as `kill PID` does
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == INTERRUPTED
    before, saved = _rows(out), _saved_iteration(out)  # whole lines only: the run ended between writes
    budget = before[-1]["env_steps"] + 1000
    resumed = subprocess.run([*CLI, "train", "--resume", "--stop-timesteps", str(budget), "--output", str(out)],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _check_resumed(before, _rows(out), saved, budget)


@pytest.mark.cluster
@pytest.mark.slow  # a local two-node cluster, a job stopped mid-run and submitted again
def test_a_job_stopped_mid_run_resumes_when_submitted_again(cluster_dir):  # noqa: F811 - the fixture
    start, export, submit, stop = [c.replace("/tmp/hca-cluster", str(cluster_dir)) for c in _readme_commands()]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_API_SERVER_ADDRESS"):
        env.pop(key, None)
    proc = _run(start, env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = cluster_dir / "runs" / "cartpole"
    long_run = submit.replace("--stop-timesteps 2000", "--stop-timesteps 200000 --checkpoint-every 2")
    assert long_run != submit
    job_id = "hca-stop-test"
    proc = _run(f"{export} && {long_run.replace('ray job submit', f'ray job submit --no-wait --submission-id {job_id}')}",
                env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    try:
        assert wait_for(_checkpointed(run_dir, 2), 300), "the job made no progress"
    finally:
        stopped = _run(f"{export} && ray job stop {job_id}", env, timeout=120)
    assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    logs = _run(f"{export} && ray job logs {job_id}", env, timeout=120).stdout
    assert INTERRUPTED in logs, logs[-3000:]  # SIGTERM took Ctrl-C's path in the job's driver
    before, saved = _rows(run_dir), _saved_iteration(run_dir)
    budget = before[-1]["env_steps"] + 1000
    again = submit.replace("--stop-timesteps 2000", f"--stop-timesteps {budget} --resume")
    proc = _run(f"{export} && {again}", env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    _check_resumed(before, _rows(run_dir), saved, budget)
    assert _run(stop, env, timeout=120).returncode == 0
