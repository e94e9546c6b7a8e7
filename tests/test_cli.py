"""`hca-rllib train` end to end, and its one-line errors."""

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "hca_rllib"]


def run_cli(*args, timeout=300):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_train_writes_results_config_and_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = run_cli(
        "train", "--credit", "c2a2c", "--stop-timesteps", "2000", "--num-envs-per-env-runner", "4",
        "--set", "train_batch_size_per_learner=256", "--output", str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) >= 7 and lines[-1]["env_steps"] >= 2000
    assert [line["iteration"] for line in lines] == list(range(1, len(lines) + 1))
    assert "mutual_information" in lines[-1]
    config = json.loads((out / "config.json").read_text())
    assert config["credit"] == "c2a2c"
    assert config.get("train_batch_size_per_learner", config.get("_train_batch_size_per_learner")) == 256
    assert (out / "checkpoint" / "rllib_checkpoint.json").exists()
    assert "steps/s" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--algo", "PPO"], "unknown algorithm 'PPO'"),
        (["--credit", "bogus"], "unknown credit mode 'bogus'"),
        (["--env", "CartPol-v1"], "unknown environment id 'CartPol-v1'; did you mean"),
        (["--set", "no_such_key=1"], "unknown config key(s) in --set: ['no_such_key']"),
        (["--set", "gamma=1.5"], "gamma must be in (0.0, 1.0], got 1.5"),
        (["--set", "novalue"], "--set expects key=value"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(args, message, tmp_path):
    proc = run_cli("train", "--output", str(tmp_path / "x"), *args, timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hca-rllib: error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
