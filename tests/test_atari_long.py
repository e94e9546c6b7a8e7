"""benchmarks/atari_long.py: a second start that resumes rather than restarts, and the
test-suite guard (its quick mode: tests/test_benchmarks_quick.py, test_atari_long_quick)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "atari_long.py"
sys.path.insert(0, str(REPO / "benchmarks"))

import atari_long  # noqa: E402


def _fake_name() -> str:
    return f"fake_suite_{uuid.uuid4().hex[:8]}"


def _driver(*args, timeout=400):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fake_suite(tmp_path):
    """A running process whose command line names a (unique) test program."""
    name = _fake_name()
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, str(script)])
    time.sleep(0.5)
    yield name, proc
    proc.kill()
    proc.wait()


def test_is_test_command():
    assert atari_long.is_test_command(["/v/bin/python", "-m", "pytest", "-q", "tests/x.py"])
    assert atari_long.is_test_command(["/v/bin/pytest", "-x"])
    assert atari_long.is_test_command(["python", "/v/lib/pytest/__main__.py"])
    assert atari_long.is_test_command(["py.test"])
    assert not atari_long.is_test_command(["python", "benchmarks/atari_long.py"])
    assert not atari_long.is_test_command(["python", "-m", "pytest_cov"])
    assert not atari_long.is_test_command(["vim", "tests/test_x.py"])
    assert not atari_long.is_test_command([])


@pytest.mark.slow  # a child process that imports the driver (about 7 s)
def test_running_tests_finds_others_not_ancestors(fake_suite):
    name, proc = fake_suite
    found = atari_long.running_tests([name])
    assert [line.split(":")[0] for line in found] == [str(proc.pid)]
    # This process (a pytest) and, from a child, its ancestors are left out.
    assert str(os.getpid()) not in [line.split(":")[0] for line in atari_long.running_tests()]
    child = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import atari_long; print([l.split(':')[0] for l in atari_long.running_tests()])",
                            str(REPO / "benchmarks")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert child.returncode == 0, child.stderr
    assert f"'{os.getpid()}'" not in child.stdout


@pytest.mark.slow  # starts the driver in a subprocess (about 7 s)
def test_driver_does_not_start_while_tests_run(fake_suite, tmp_path):
    name, _ = fake_suite
    proc = _driver("--cells", "pong_a2c_seed0", "--out", tmp_path / "out", "--runs", tmp_path / "runs",
                   "--on-tests", "stop", "--guard-names", name, timeout=120)
    assert proc.returncode == atari_long.EXIT_TESTS, proc.stdout + proc.stderr
    assert "not starting: the test suite is running" in proc.stdout
    # Nothing trained: no run directory (the cell's lock file only).
    assert not (tmp_path / "runs").exists() or not [p for p in (tmp_path / "runs").iterdir() if p.suffix != ".lock"]


def test_a_cell_another_driver_holds_is_refused(tmp_path):
    """Two drivers never train one cell: a cell whose lock another holder has (here an
    open file of this test: `flock` locks belong to the open file, so they conflict in
    one process too) stops the driver's start with a one-line error naming the cell,
    and the locks it took on the way are let go."""
    import fcntl

    runs = tmp_path / "runs"
    runs.mkdir()
    with open(runs / "breakout_a2c_seed0.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SystemExit) as stop:
            atari_long.lock_cells(runs, ["pong_a2c_seed0", "breakout_a2c_seed0"])
    message = str(stop.value.code)
    assert "\n" not in message and message.startswith(
        "atari_long: cell breakout_a2c_seed0 is being trained by another driver"), message
    for name in ("pong_a2c_seed0", "breakout_a2c_seed0"):  # both free again
        with open(runs / f"{name}.lock", "a+") as again:
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
    # While a driver's locks are held, another start is refused; once let go, not.
    locks = atari_long.lock_cells(runs, ["pong_a2c_seed0"])
    with pytest.raises(SystemExit):
        atari_long.lock_cells(runs, ["pong_a2c_seed0"])
    for handle in locks:
        handle.close()
    for handle in atari_long.lock_cells(runs, ["pong_a2c_seed0"]):
        handle.close()


@pytest.fixture(scope="module")
def short_cell(tmp_path_factory):
    """The quick cell run once to 2 iterations (`--quick-child`: short iterations)."""
    out = tmp_path_factory.mktemp("atari_long_resume")
    proc = _driver("--cells", atari_long.QUICK_CELL, "--quick-child", "--out", out, "--runs", out / "runs",
                   "--target-steps", 2 * atari_long.QUICK_STEPS_PER_ITERATION, "--on-tests", "stop",
                   "--guard-names", _fake_name())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


@pytest.mark.benchmark
def test_atari_long_second_start_resumes(short_cell):
    """Started again with a larger target, the cell continues from its last checkpoint:
    no iteration is run twice and the new session starts where the last one ended."""
    from hca_rllib.runner import read_results

    before = read_results(short_cell / "runs" / atari_long.QUICK_CELL / "results.jsonl")
    target = before[-1]["env_steps"] + 2 * atari_long.QUICK_STEPS_PER_ITERATION
    proc = _driver("--cells", atari_long.QUICK_CELL, "--quick-child", "--out", short_cell,
                   "--runs", short_cell / "runs", "--target-steps", target, "--on-tests", "stop",
                   "--checkpoint-minutes", 0, "--guard-names", _fake_name())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"(iteration {before[-1]['iteration']}," in proc.stdout  # resumed, not restarted
    after = read_results(short_cell / "runs" / atari_long.QUICK_CELL / "results.jsonl")
    assert after[:len(before)] == before
    assert [r["iteration"] for r in after] == list(range(1, len(after) + 1))
    assert after[-1]["env_steps"] >= target
    record = json.loads((short_cell / f"{atari_long.QUICK_CELL}.json").read_text())
    assert record["sessions"][-1]["from_env_steps"] == before[-1]["env_steps"]
    assert [s["from_env_steps"] for s in record["sessions"]] == [0, before[-1]["env_steps"]]


@pytest.mark.benchmark
def test_driver_stops_cleanly_when_tests_start(tmp_path):
    """A test suite that starts mid-run: the cell checkpoints at its last iteration, stores
    its record and the driver exits 75 (`--on-tests stop`)."""
    from hca_rllib.runner import checkpoints_newest_first, read_results, verify_checkpoint

    name = _fake_name()
    out, runs = tmp_path / "out", tmp_path / "runs"
    driver = subprocess.Popen([sys.executable, str(SCRIPT), "--cells", atari_long.QUICK_CELL, "--quick-child",
                               "--out", str(out), "--runs", str(runs), "--target-steps", "100000",
                               "--checkpoint-minutes", "60", "--on-tests", "stop", "--guard-names", name],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = runs / atari_long.QUICK_CELL / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None and not read_results(results):
        time.sleep(0.5)
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(120)\n")
    fake = subprocess.Popen([sys.executable, str(script)])
    try:
        output = driver.communicate(timeout=300)[0]
    finally:
        fake.kill()
        fake.wait()
    assert driver.returncode == atari_long.EXIT_TESTS, output[-4000:]
    rows = read_results(results)
    meta = verify_checkpoint(checkpoints_newest_first(runs / atari_long.QUICK_CELL)[0], require_meta=True)
    assert meta["iteration"] == rows[-1]["iteration"] and rows[-1]["env_steps"] < 100_000
    record = json.loads((out / f"{atari_long.QUICK_CELL}.json").read_text())
    assert record["sessions"][-1]["ended"].startswith("test suite running")
    assert record["env_steps"] == rows[-1]["env_steps"]


def test_a_pause_continues_the_same_cell(monkeypatch, tmp_path):
    """After a test-suite pause the paused cell's pass goes on (one restart), before the
    next cell's; a pass is never skipped. `run_cell` stubbed: the loop's order only."""
    from types import SimpleNamespace

    calls, polls = [], iter([[], ["pytest (fake)"], []] + [[]] * 20)
    monkeypatch.setattr(atari_long, "lower_priority", lambda nice, core: {"nice": nice, "core": core})
    monkeypatch.setattr(atari_long, "running_tests", lambda names: next(polls))
    monkeypatch.setattr(atari_long, "PAUSE_POLL_S", 0.0)

    def run_cell(name, args, stopper, setup, stop_at):
        calls.append((name, stop_at))
        return "test suite running (fake)" if len(calls) == 1 else "done"

    monkeypatch.setattr(atari_long, "run_cell", run_cell)
    args = SimpleNamespace(nice=19, core=0, out=tmp_path / "x", runs=tmp_path / "y", guard_names=["fake"],
                           cells=["a", "b"], pass_steps=10, target_steps=20, on_tests="pause")
    previous = {s: atari_long.signal.getsignal(s) for s in (atari_long.signal.SIGTERM, atari_long.signal.SIGINT)}
    try:
        assert atari_long.drive(args) == 0
    finally:
        for s, handler in previous.items():
            atari_long.signal.signal(s, handler)
    assert calls == [("a", 10), ("a", 10), ("b", 10), ("a", 20), ("b", 20)]


@pytest.mark.benchmark
def test_sigterm_after_ray_started_checkpoints_and_exits(tmp_path):
    """SIGTERM mid-run (Ray up: its core worker installs a SIGTERM handler of its own that
    killed the driver at once): the cell checkpoints at its last iteration, stores its
    record and the driver exits 128 + 15."""
    import signal

    from hca_rllib.runner import checkpoints_newest_first, read_results, verify_checkpoint

    out, runs = tmp_path / "out", tmp_path / "runs"
    driver = subprocess.Popen([sys.executable, str(SCRIPT), "--cells", atari_long.QUICK_CELL, "--quick-child",
                               "--out", str(out), "--runs", str(runs), "--target-steps", "100000",
                               "--checkpoint-minutes", "60", "--on-tests", "stop", "--guard-names", _fake_name()],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = runs / atari_long.QUICK_CELL / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None and len(read_results(results)) < 2:
        time.sleep(0.5)
    assert driver.poll() is None
    driver.send_signal(signal.SIGTERM)
    output = driver.communicate(timeout=300)[0]
    assert driver.returncode == 128 + signal.SIGTERM, output[-4000:]
    rows = read_results(results)
    meta = verify_checkpoint(checkpoints_newest_first(runs / atari_long.QUICK_CELL)[0], require_meta=True)
    assert meta["iteration"] == rows[-1]["iteration"] >= 2 and rows[-1]["env_steps"] < 100_000
    record = json.loads((out / f"{atari_long.QUICK_CELL}.json").read_text())
    assert record["sessions"][-1]["ended"] == "signal SIGTERM"
