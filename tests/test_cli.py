"""`hca-rllib train | evaluate | report` end to end, crash and resume, paths as users type
them, the progress display on a terminal, and one-line errors."""

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from polling import wait_for

CLI = [sys.executable, "-m", "hca_rllib"]
SMALL = ["--num-envs-per-env-runner", "4", "--set", "train_batch_size_per_learner=256"]


def run_cli(*args, timeout=300, env=None, cwd=None):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def run_cli_on_a_terminal(*args, cwd, env=None, timeout=300, columns=120):
    """The command with its stdout on a pseudo-terminal `columns` wide: (returncode, what
    the terminal received, stderr)."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                            cwd=cwd, env={**os.environ, **(env or {})})
    os.close(slave)
    chunks = []

    def read():
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer has closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    reader.join(10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace"), stderr.decode(errors="replace")


def results(run_dir: Path):
    """Every line, strictly: for a run that has ended."""
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def results_so_far(run_dir: Path):
    """For a run being written or just killed: a torn last line is dropped (read_results)."""
    from hca_rllib.runner import read_results

    return read_results(run_dir / "results.jsonl")


@pytest.fixture(scope="module")
def terminal_run(tmp_path_factory):
    """One real short run, shared by the evaluate and report tests: trained as a user
    would, on a terminal, with a relative --output from the directory it is in."""
    work = tmp_path_factory.mktemp("cli")
    code, terminal, stderr = run_cli_on_a_terminal(
        "train", "--env", "minatar/Breakout", "--stop-timesteps", "1500", "--checkpoint-every", "2",
        "--wandb", "off", "--output", "runs/minatar_run", *SMALL, cwd=work)
    assert code == 0, stderr[-3000:]
    return work / "runs" / "minatar_run", terminal


@pytest.fixture(scope="module")
def trained_run(terminal_run):
    return terminal_run[0]


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch) that trains
def test_train_on_a_terminal_shows_one_updating_bar(terminal_run):
    run, terminal = terminal_run
    last = results(run)[-1]
    bar = [line for line in terminal.split("\n") if "steps/s" in line]
    assert len(bar) == 1, terminal  # one line, redrawn in place with \r
    frames = [frame for frame in bar[0].split("\r") if "steps/s" in frame]
    assert len(frames) >= last["iteration"] and frames[-1].startswith("100%|"), frames
    for part in (f"{last['env_steps']:,}/1,500 steps", "steps/s", "left 0m00s", f"iter {last['iteration']}",
                 "return ", "MI "):
        assert part in frames[-1], frames[-1]
    assert all(len(frame) <= 120 for frame in frames)  # fits the terminal
    assert f"run in {run}" in terminal  # the relative --output, made absolute


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch) that trains
def test_train_writes_results_config_checkpoint_tensorboard_and_wandb(tmp_path):
    out = tmp_path / "run"
    secret = "wandb-secret-0123456789abcdef0123456789abcdef"
    proc = run_cli(
        "train", "--credit", "c2a2c", "--stop-timesteps", "2000", "--output", str(out),
        "--wandb", "offline", *SMALL, env={"WANDB_API_KEY": secret},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = results(out)
    assert len(lines) >= 7 and lines[-1]["env_steps"] >= 2000
    assert [line["iteration"] for line in lines] == list(range(1, len(lines) + 1))
    for key in ("score", "episode_return_mean", "mutual_information", "trust", "steps_per_s", "time_s"):
        assert key in lines[-1]
    # The classifier's diagnostics reach the lines with values (c2a2c has a classifier).
    for key in ("mutual_information", "hca_ratio_mean", "hca_ratio_median", "hca_clip_fraction",
                "c2a2c_mask_fraction"):
        assert all(isinstance(line[key], float) for line in lines[-3:]), (key, [line[key] for line in lines])
    # Markov: for positive ratios, at most half lie at or above twice the mean.
    assert all(0 < line["hca_ratio_median"] <= 2 * line["hca_ratio_mean"] for line in lines[-3:])
    assert lines[-1]["score"] == lines[-1]["episode_return_mean"]  # CartPole: the episode is the game
    config = json.loads((out / "config.json").read_text())
    assert config["credit"] == "c2a2c"
    run = json.loads((out / "run.json").read_text())
    assert run["env"] == "CartPole-v1" and run["credit"] == "c2a2c" and run["stop_timesteps"] == 2000
    checkpoints = sorted((out / "checkpoints").glob("iter_*"))
    assert checkpoints and (checkpoints[-1] / "rllib_checkpoint.json").exists()
    assert (checkpoints[-1] / "hca_checkpoint.json").exists()
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    offline = list((out / "wandb").rglob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb"))
    # The progress display: steps, rate, return, MI, time left.
    progress = [line for line in proc.stdout.splitlines() if "steps/s" in line]
    assert progress and all(word in progress[-1] for word in ("steps", "return", "MI", "left"))
    # No secret printed or written anywhere in the run.
    assert secret not in proc.stdout + proc.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch) that trains
def test_kill_9_then_resume_continues_from_the_last_checkpoint(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--stop-timesteps", "200000", "--checkpoint-every", "3", "--wandb", "off",
            "--output", str(out), *SMALL]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        def progressed():
            done = [p for p in (out / "checkpoints").glob("iter_*")] if (out / "checkpoints").exists() else []
            return len(done) >= 2 and (out / "results.jsonl").exists() and len(results_so_far(out)) >= 8
        assert wait_for(progressed, 240), "training made no progress"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its embedded Ray, mid-run
        proc.wait()
    before = results_so_far(out)  # killed mid-run: its last line may be torn
    newest = sorted((out / "checkpoints").glob("iter_*"))[-1]
    saved = json.loads((newest / "hca_checkpoint.json").read_text())
    assert before[-1]["iteration"] >= saved["iteration"]

    budget = before[-1]["env_steps"] + 1500
    proc = run_cli("train", "--resume", "--stop-timesteps", str(budget), "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"iteration {saved['iteration']}" in proc.stdout
    after = results(out)
    iterations = [line["iteration"] for line in after]
    assert iterations == list(range(1, len(after) + 1))  # none lost, none duplicated
    assert after[: saved["iteration"]] == before[: saved["iteration"]]  # history kept as written
    resumed = after[saved["iteration"]]
    assert resumed["env_steps"] > saved["env_steps"] >= before[saved["iteration"] - 1]["env_steps"]
    assert resumed["env_steps"] - saved["env_steps"] < 600  # one iteration on from the checkpoint
    assert after[-1]["env_steps"] >= budget


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch) that trains
def test_damaged_newest_checkpoint_is_skipped_with_a_warning(tmp_path):
    """Also: a relative --output, then --resume of it as ~/... from another directory."""
    out = tmp_path / "run"
    proc = run_cli("train", "--stop-timesteps", "1500", "--checkpoint-every", "2", "--wandb", "off",
                   "--no-tensorboard", "--output", "run", *SMALL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    older, newest = sorted((out / "checkpoints").glob("iter_*"))[-2:]
    state = next(p for p in newest.rglob("state.pkl"))
    state.write_bytes(state.read_bytes()[: len(state.read_bytes()) // 2])  # a torn write
    (tmp_path / "elsewhere").mkdir()
    proc = run_cli("train", "--resume", "--stop-timesteps", "2500", "--output", "~/run",
                   cwd=tmp_path / "elsewhere", env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipping checkpoint {newest.name}" in proc.stderr and "damaged" in proc.stderr
    older_iteration = json.loads((older / "hca_checkpoint.json").read_text())["iteration"]
    assert f"iteration {older_iteration}" in proc.stdout
    iterations = [line["iteration"] for line in results(out)]
    assert iterations == list(range(1, len(iterations) + 1))


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch)
def test_existing_run_needs_resume(tmp_path, trained_run):
    proc = run_cli("train", "--env", "minatar/Breakout", "--output", str(trained_run), timeout=120)
    assert proc.returncode == 2 and "already holds a run: pass --resume" in proc.stderr


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch)
def test_resume_of_a_run_made_elsewhere_is_a_one_line_error(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"algo": "HCA", "credit": "hca", "seed": 0}))
    (tmp_path / "results.jsonl").write_text("")
    proc = run_cli("train", "--resume", "--output", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "was not made by `hca-rllib train`" in proc.stderr


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch) that trains
def test_evaluate_a_real_run_with_video(trained_run, tmp_path):
    """With the run's relative path, as in the README (once a pyarrow `URI has empty
    scheme` traceback), a relative video and an output under ~."""
    video = tmp_path / "game.gif"
    proc = run_cli("evaluate", "runs/minatar_run", "--episodes", "3", "--greedy",
                   "--video", os.path.relpath(video, trained_run.parents[1]), "--output", "~/eval.json",
                   cwd=trained_run.parents[1], env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "eval.json").read_text())
    newest = sorted((trained_run / "checkpoints").glob("iter_*"))[-1]
    assert summary["checkpoint"] == str(newest) and summary["video"] == str(video)
    assert summary["episodes"] == 3 and len(summary["returns"]) == 3 and summary["policy"] == "greedy"
    assert summary["min"] <= summary["mean"] <= summary["max"]
    assert summary["env"] == "minatar/Breakout"
    assert video.exists() and video.stat().st_size > 1000
    import imageio.v2 as imageio

    frames = imageio.mimread(video)
    assert len(frames) >= 2 and frames[0].ndim == 3


@pytest.mark.slow  # a CLI subprocess (imports Ray and torch) that trains
def test_report_from_real_runs(trained_run, tmp_path):
    proc = run_cli("report", "runs", "--output", "~/report", cwd=trained_run.parents[1],
                   env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "report" / "report.md").read_text()
    assert "minatar/Breakout" in page
    pngs = list((tmp_path / "report").glob("*.png"))
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)


def test_every_path_argument_is_made_absolute(tmp_path, monkeypatch):
    """Relative to the working directory, or under ~, for every command (parsed only)."""
    from hca_rllib.cli import make_parser

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    parse = make_parser().parse_args
    home = tmp_path / "home"
    assert parse(["train", "--output", "runs/a"]).output == tmp_path / "runs" / "a"
    assert parse(["train", "--resume", "--output", "~/runs/a"]).output == home / "runs" / "a"
    assert parse(["train"]).output == tmp_path / "runs" / "train"  # the default too
    e = parse(["evaluate", "runs/a", "--video", "~/game.gif", "--output", "eval.json"])
    assert (e.checkpoint, e.video, e.output) == (tmp_path / "runs" / "a", home / "game.gif", tmp_path / "eval.json")
    (tmp_path / "runs").mkdir()  # RUN_DIRs are read: they must exist
    (home / "more").mkdir(parents=True)
    r = parse(["report", "runs", "~/more", "--output", "~/report"])
    assert (r.run_dirs, r.output) == ([tmp_path / "runs", home / "more"], home / "report")
    assert parse(["sweep", "--envs", "CartPole-v1", "--output", "~/sweeps"]).output == str(home / "sweeps")
    assert parse(["sweep", "--envs", "CartPole-v1", "--output", "s3://bucket/sweeps"]).output == "s3://bucket/sweeps"


@pytest.mark.slow  # one CLI subprocess per case
@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--algo", "PPO"], "unknown algorithm 'PPO'"),
        (["train", "--credit", "bogus"], "unknown credit mode 'bogus'"),
        (["train", "--env", "CartPol-v1"], "unknown environment id 'CartPol-v1'; did you mean"),
        (["train", "--env", "Pendulum-v1"], "HCA and A2C need a gymnasium.spaces.Discrete action space"),
        (["train", "--set", "no_such_key=1"], "unknown config key(s) in --set: ['no_such_key']"),
        (["train", "--set", "gamma=1.5"], "gamma must be in (0.0, 1.0], got 1.5"),
        (["train", "--set", "novalue"], "--set expects key=value"),
        (["train", "--stop-timesteps", "0"], "argument --stop-timesteps: must be an integer in [1, "),
        (["train", "--resume"], "nothing to resume in"),
        (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["evaluate", "/no/such/checkpoint"], "checkpoint '/no/such/checkpoint' does not exist"),
        (["evaluate", "."], "is neither a checkpoint nor a run directory"),
        (["report", "/no/such/run"], "no such directory: /no/such/run"),
    ],
)
def test_bad_arguments_exit_nonzero_with_one_line(args, message, tmp_path):
    if args[0] == "train":
        args = [*args, "--output", str(tmp_path / "x")]
    proc = run_cli(*args, timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hca-rllib: error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--progress-every", "-1"], "argument --progress-every: must be a finite number in [0, 86400]"),
        (["evaluate", "no/such/run"], "checkpoint '{cwd}/no/such/run' does not exist"),
        (["evaluate", "~no_such_user_hca/run"], "cannot expand '~no_such_user_hca/run'"),
        (["report", "~no_such_user_hca/runs"], "cannot expand '~no_such_user_hca/runs'"),
    ],
)
def test_bad_paths_and_progress_are_one_line_errors(args, message, tmp_path, monkeypatch, capsys):
    """In process (no Ray starts before these checks): one line, status 2."""
    from hca_rllib.cli import main

    monkeypatch.chdir(tmp_path)
    try:
        code = main([*args, "--output", str(tmp_path / "x")] if args[0] == "train" else args)
    except SystemExit as exit:  # argparse
        code = exit.code
    assert code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("hca-rllib: error:") and len(stderr.strip().splitlines()) == 1, stderr
    assert message.format(cwd=tmp_path) in stderr


@pytest.mark.parametrize("command", [["train"], ["sweep", "--envs", "CartPole-v1"], ["probe", "--env", "CartPole-v1"]])
def test_bad_hca_rllib_paths_is_a_one_line_error(command, tmp_path, monkeypatch, capsys):
    """A bad HCA_RLLIB_PATHS (the default paths' switch) stops every command before it
    builds a config or starts Ray: one line naming the variable, status 2."""
    from hca_rllib.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HCA_RLLIB_PATHS", "fast")
    assert main([*command, "--output", str(tmp_path / "x")]) == 2
    stderr = capsys.readouterr().err
    assert stderr.strip() == "hca-rllib: error: HCA_RLLIB_PATHS must be one of ['auto', 'lean', 'rllib'], got 'fast'", stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("content, message", [
    ('{"args": {"algo": "HCA"', "is not valid JSON (Expecting ',' delimiter at line 1, column 24): "
                                "repair it or start a new run"),
    ("[1, 2]", "holds a JSON list, not the run's settings (an object)"),
    (b"\xff\xfe", "cannot read"),
])
def test_resume_over_a_damaged_run_json_is_a_one_line_error(content, message, tmp_path, capsys):
    """A run.json cut short (a full disk) or not a run's settings: named in one line, before
    Ray starts, where it was a raw JSONDecodeError traceback."""
    from hca_rllib.cli import main

    path = tmp_path / "run.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "results.jsonl").write_text('{"iteration": 1}\n')
    assert main(["train", "--resume", "--output", str(tmp_path)]) == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith(f"hca-rllib: error: {str(path)!r} " if "cannot" not in message
                             else "hca-rllib: error: cannot read"), stderr
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_resume_over_a_damaged_results_file_is_a_one_line_error(tmp_path, capsys):
    """Only a torn last line is skipped; damage before it is named, before Ray starts."""
    from hca_rllib.cli import main, make_parser
    from hca_rllib.cli.train import TRAIN_ARGS

    defaults = vars(make_parser().parse_args(["train"]))
    args = {key: defaults[key] for key in TRAIN_ARGS}
    (tmp_path / "run.json").write_text(json.dumps({"args": args, "stop_timesteps": 1000}))
    (tmp_path / "results.jsonl").write_text('{"iteration": 1}\n{"iter\n{"iteration": 3}\n')
    assert main(["train", "--resume", "--output", str(tmp_path)]) == 2
    stderr = capsys.readouterr().err
    assert stderr == f"hca-rllib: error: {tmp_path / 'results.jsonl'}, line 2: not valid JSON " \
                     "(Unterminated string starting at); only a torn last line is skipped\n"


def test_evaluate_chooses_the_argmax_or_draws_from_the_softmax():
    """`evaluation.choose_action`: greedy takes the largest logit; otherwise the draws
    follow softmax(logits) (a chi-square test at p = 1e-6 over 6,000 draws) from the
    generator given, so a seed repeats them."""
    import numpy as np

    from hca_rllib.evaluation import choose_action

    logits = np.log(np.array([0.2, 0.3, 0.5]))
    assert choose_action(logits, True, np.random.default_rng(0)) == 2
    draws = [choose_action(logits, False, np.random.default_rng(1)) for _ in range(3)]
    assert len(set(draws)) == 1  # the same generator state, the same draw
    rng = np.random.default_rng(2)
    counts = np.bincount([choose_action(logits, False, rng) for _ in range(6000)], minlength=3)
    expected = 6000 * np.array([0.2, 0.3, 0.5])
    assert ((counts - expected) ** 2 / expected).sum() < 27.6, counts
