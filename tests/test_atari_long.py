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


# Drivers started here run at the test's own priority: at nice 19 on one core, beside the
# other xdist worker's work, Ray's 30 s node start could starve. The nice 19 default is
# tested by test_benchmarks_quick.py::test_atari_long_quick.
SAME_PRIORITY = ("--nice", "0")


def _driver(*args, timeout=400):
    return subprocess.run([sys.executable, str(SCRIPT), *SAME_PRIORITY, *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fake_suite(tmp_path):
    """A running process whose command line names a (unique) test program."""
    name = _fake_name()
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(10**6)\n")  # until killed: no race with a slow driver
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
    driver = subprocess.Popen([sys.executable, str(SCRIPT), *SAME_PRIORITY, "--cells", atari_long.QUICK_CELL, "--quick-child",
                               "--out", str(out), "--runs", str(runs), "--target-steps", "100000",
                               "--checkpoint-minutes", "60", "--on-tests", "stop", "--guard-names", name],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = runs / atari_long.QUICK_CELL / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None and not read_results(results):
        time.sleep(0.5)
    assert read_results(results), "the driver wrote no results line"
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(10**6)\n")  # until killed: no race with a slow driver
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


def _drive_here(tmp_path, cells, target_steps):
    """`atari_long.drive` in this process (passes of 10 steps), its signal handlers put
    back afterwards."""
    from types import SimpleNamespace

    args = SimpleNamespace(nice=19, core=0, out=tmp_path / "x", runs=tmp_path / "y", guard_names=["fake"],
                           cells=cells, pass_steps=10, target_steps=target_steps, on_tests="pause")
    previous = {s: atari_long.signal.getsignal(s) for s in (atari_long.signal.SIGTERM, atari_long.signal.SIGINT)}
    try:
        return atari_long.drive(args)
    finally:
        for s, handler in previous.items():
            atari_long.signal.signal(s, handler)


def test_a_pause_continues_the_same_cell(monkeypatch, tmp_path):
    """After a test-suite pause the paused cell's pass goes on (one restart), before the
    next cell's; a pass is never skipped. `run_cell` stubbed: the loop's order only."""
    calls, polls = [], iter([[], ["pytest (fake)"], []] + [[]] * 20)
    monkeypatch.setattr(atari_long, "lower_priority", lambda nice, core: {"nice": nice, "core": core})
    monkeypatch.setattr(atari_long, "running_tests", lambda names: next(polls))
    monkeypatch.setattr(atari_long, "PAUSE_POLL_S", 0.0)

    def run_cell(name, args, stopper, setup, stop_at):
        calls.append((name, stop_at))
        return "test suite running (fake)" if len(calls) == 1 else "done"

    monkeypatch.setattr(atari_long, "run_cell", run_cell)
    assert _drive_here(tmp_path, cells=["a", "b"], target_steps=20) == 0
    assert calls == [("a", 10), ("a", 10), ("b", 10), ("a", 20), ("b", 20)]


@pytest.mark.parametrize("up_before", [True, False])
def test_drive_stops_only_a_ray_it_started(monkeypatch, tmp_path, up_before):
    """In the test process `drive` once stopped the session's shared Ray (conftest's
    ray_local): later tests on that xdist worker lost Tune's registered envs. It stops Ray
    only when Ray was not up before it ran (its cells started it)."""
    import ray

    state, stops = {"up": up_before}, []
    monkeypatch.setattr(ray, "is_initialized", lambda: state["up"])
    monkeypatch.setattr(ray, "shutdown", lambda: stops.append(1))
    monkeypatch.setattr(atari_long, "lower_priority", lambda nice, core: {"nice": nice, "core": core})
    monkeypatch.setattr(atari_long, "running_tests", lambda names: [])

    def run_cell(name, args, stopper, setup, stop_at):
        state["up"] = True  # a cell starts Ray where none was up
        return "done"

    monkeypatch.setattr(atari_long, "run_cell", run_cell)
    assert _drive_here(tmp_path, cells=["a"], target_steps=10) == 0
    assert stops == ([] if up_before else [1])


@pytest.mark.benchmark
def test_sigterm_after_ray_started_checkpoints_and_exits(tmp_path):
    """SIGTERM mid-run (Ray up: its core worker installs a SIGTERM handler of its own that
    killed the driver at once): the cell checkpoints at its last iteration, stores its
    record and the driver exits 128 + 15."""
    import signal

    from hca_rllib.runner import checkpoints_newest_first, read_results, verify_checkpoint

    out, runs = tmp_path / "out", tmp_path / "runs"
    driver = subprocess.Popen([sys.executable, str(SCRIPT), *SAME_PRIORITY, "--cells", atari_long.QUICK_CELL, "--quick-child",
                               "--out", str(out), "--runs", str(runs), "--target-steps", "100000",
                               "--checkpoint-minutes", "60", "--record-minutes", "0", "--on-tests", "stop",
                               "--guard-names", _fake_name()],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = runs / atari_long.QUICK_CELL / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None and len(read_results(results)) < 2:
        time.sleep(0.5)
    assert driver.poll() is None
    # The record is rewritten mid-run (--record-minutes 0: after every iteration), before
    # any stop: a session cut short (the machine gone) keeps the curve so far.
    running = json.loads((out / f"{atari_long.QUICK_CELL}.json").read_text())
    assert running["sessions"][-1]["ended"] == "running (record refreshed mid-run)"
    assert running["env_steps"] >= atari_long.QUICK_STEPS_PER_ITERATION
    driver.send_signal(signal.SIGTERM)
    output = driver.communicate(timeout=300)[0]
    assert driver.returncode == 128 + signal.SIGTERM, output[-4000:]
    rows = read_results(results)
    meta = verify_checkpoint(checkpoints_newest_first(runs / atari_long.QUICK_CELL)[0], require_meta=True)
    assert meta["iteration"] == rows[-1]["iteration"] >= 2 and rows[-1]["env_steps"] < 100_000
    record = json.loads((out / f"{atari_long.QUICK_CELL}.json").read_text())
    assert record["sessions"][-1]["ended"] == "signal SIGTERM"


def _record(name, method, steps, scores, **extra):
    """A compact cell record as the driver stores it, with a score curve."""
    game = name.split("_")[0]
    return {"cell": name, "game": game, "env_id": f"atari/{game.title()}", "method": method,
            "credit": method, "algo": "A2C", "seed": 0, "target_env_steps": 3_000_000,
            "settings": {"env": f"atari/{game.title()}", "credit": method},
            "env_steps": steps[-1], "final_score": scores[-1], "env_steps_per_s": 500.0,
            "sessions": [{"machine": {"host": "vm", "boot_id": "abcd1234"}}],
            "curve": {"env_steps": steps, "score": scores}, "record_format": "compact-1", **extra}


def test_archive_attempt_keeps_the_record_and_counts_attempts(tmp_path):
    """A lost run's record is kept as <cell>.attempt1.json, the next start is attempt 2 with
    the first one listed; attempt 2 archived in turn becomes attempt2.json; archiving an
    attempt whose file exists is refused with a one-line error (nothing overwritten)."""
    stored = _record("breakout_a2c_seed0", "a2c", [100, 200], [1.0, 2.0])
    start = atari_long.archive_attempt(tmp_path, "breakout_a2c_seed0", stored, "lost")
    kept = json.loads((tmp_path / "breakout_a2c_seed0.attempt1.json").read_text())
    assert kept["curve"] == stored["curve"] and kept["attempt"] == 1 and kept["attempt_ended"] == "lost"
    assert start["attempt"] == 2 and start["settings"] == stored["settings"]
    assert start["earlier_attempts"] == [{"attempt": 1, "record": "breakout_a2c_seed0.attempt1.json",
                                          "env_steps": 200, "final_score": 2.0, "ended": "lost",
                                          "sessions": 1}]
    second = {**_record("breakout_a2c_seed0", "a2c", [50], [0.5]), **start}
    third = atari_long.archive_attempt(tmp_path, "breakout_a2c_seed0", second, "lost again")
    assert third["attempt"] == 3 and [a["attempt"] for a in third["earlier_attempts"]] == [1, 2]
    assert json.loads((tmp_path / "breakout_a2c_seed0.attempt2.json").read_text())["env_steps"] == 50
    with pytest.raises(SystemExit) as stop:
        atari_long.archive_attempt(tmp_path, "breakout_a2c_seed0", stored, "again")
    assert "\n" not in str(stop.value.code) and "attempt1.json exists already" in str(stop.value.code)
    assert json.loads((tmp_path / "breakout_a2c_seed0.attempt1.json").read_text())["attempt_ended"] == "lost"


def test_score_at_and_the_report_with_attempts(tmp_path):
    """Scores at equal agent steps: the mean of the curve points in the 100k agent steps up
    to the mark, blank where the run did not reach it or no game ended in the span; the
    report lists every attempt and plots both figures."""
    a2c = _record("breakout_a2c_seed0", "a2c", [160_000, 200_000, 240_000, 420_000, 510_000, 1_000_000],
                  [1.0, 3.0, 5.0, 6.0, 20.0, 40.0], attempt=2)
    lost = _record("breakout_a2c_seed0", "a2c", [250_000, 520_000], [9.0, 25.0],
                   attempt=1, attempt_ended="lost")
    hca = _record("breakout_expected_hca_seed0", "expected_hca", [240_000, 600_000], [4.0, None])
    assert atari_long.score_at(a2c, 250_000) == 3.0     # (1 + 3 + 5) / 3: 150k < step <= 250k
    assert atari_long.score_at(a2c, 500_000) == 6.0     # 420k only
    assert atari_long.score_at(a2c, 1_000_000) == 40.0
    assert atari_long.score_at(a2c, 1_500_000) is None  # not reached
    assert atari_long.score_at(a2c, 400_000) is None    # reached, no point in (300k, 400k]
    assert atari_long.score_at(hca, 250_000) == 4.0
    assert atari_long.score_at(hca, 600_000) is None    # a None score is skipped
    assert atari_long.score_at(lost, 1_000_000) is None
    for name, record in (("breakout_a2c_seed0", a2c), ("breakout_a2c_seed0.attempt1", lost),
                         ("breakout_expected_hca_seed0", hca)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    (tmp_path / "quick_check.json").write_text("{}")  # not a cell record
    text = atari_long.report(tmp_path)
    assert "| breakout_a2c_seed0.attempt1 | atari/Breakout | a2c | 1 | 520,000 (3,000,000) |" in text
    assert "| breakout_a2c_seed0 | atari/Breakout | a2c | 2 | 1,000,000 (3,000,000) |" in text
    assert "| record | 0.25M | 0.5M | 1M |" in text
    assert "| breakout_a2c_seed0 | 3.00 | 6.00 | 40.00 |" in text
    assert "| breakout_a2c_seed0.attempt1 | 9.00 |  |  |" in text  # 520k > 0.5M: none in (400k, 500k]
    assert (tmp_path / "curves.png").stat().st_size > 0 and (tmp_path / "diagnostics.png").exists()


def test_marks_are_read_from_every_iteration_not_the_binned_curve(tmp_path):
    """A record's score at a mark is the brute-force mean of the per-iteration scores in the
    100k agent steps up to it, whatever the stored curve's bins (the run grows, the stride
    changes); a collapse just before a mark is where the binned reading went wrong."""
    import random

    from hca_rllib.runner import read_results

    rng = random.Random(0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines, steps = [], 0
    for iteration in range(1, 1_301):  # 1,300 iterations of ~2,000 steps: past the 2.5M mark
        steps += rng.randint(1_900, 2_100)
        collapse = 1_900_000 < steps <= 1_960_000
        score = None if iteration % 7 == 0 else (-21.0 if collapse else rng.uniform(-5.0, 15.0))
        lines.append({"iteration": iteration, "env_steps": steps, "time_s": iteration * 4.0, "score": score})
    (run_dir / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert len(read_results(run_dir / "results.jsonl")) == 1_300

    def brute(mark):
        inside = [l["score"] for l in lines if mark - 100_000 < l["env_steps"] <= mark and l["score"] is not None]
        return sum(inside) / len(inside)

    record = atari_long.cell_record("pong_a2c_seed0", run_dir, {"method": "a2c"})
    reached = [m for m in atari_long.MARKS if m <= steps]
    assert reached == [250_000, 500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000]
    assert record["score_at_marks"] == {str(m): pytest.approx(brute(m)) for m in reached}
    assert record["curve_stride"] == 7  # 1,300 iterations into at most 200 points
    for mark in reached:
        assert atari_long.score_at(record, mark) == pytest.approx(brute(mark))
    binned = atari_long.span_mean(record["curve"]["env_steps"], record["curve"]["score"], 2_000_000)
    assert abs(binned - brute(2_000_000)) > 0.1  # the old reading, off by the bins
    assert atari_long.score_at(record, 3_000_000) is None
    older = {k: v for k, v in record.items() if k != "score_at_marks"}  # a record from before
    assert atari_long.score_at(older, 2_000_000) == binned


def test_report_only_of_a_missing_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit) as stop:
        atari_long.main(["--report-only", "--out", str(tmp_path / "nothing")])
    assert stop.value.code == 2


@pytest.mark.slow  # imports RLlib's config in a subprocess (about 8 s)
def test_a_record_without_its_run_directory_is_refused(tmp_path):
    """A fresh machine: the record says the cell trained, its run directory is not there.
    The driver refuses with one line naming the cell and --new-attempt, before Ray starts,
    and leaves the record as it was."""
    out = tmp_path / "out"
    out.mkdir()
    from hca_rllib.runner import flat_config

    config = atari_long.cell_config(atari_long.QUICK_CELL, True)[0]
    record = _record(atari_long.QUICK_CELL, "a2c", [160, 320], [-21.0, -20.0],
                     settings=atari_long.settings_of(flat_config(config)))
    (out / f"{atari_long.QUICK_CELL}.json").write_text(json.dumps(record))
    proc = _driver("--cells", atari_long.QUICK_CELL, "--quick-child", "--out", out, "--runs", tmp_path / "runs",
                   "--target-steps", 480, "--on-tests", "stop", "--guard-names", _fake_name(), timeout=200)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"atari_long: cell {atari_long.QUICK_CELL}: its record is at 320 agent steps") \
        and "--new-attempt" in last, proc.stderr[-2000:]
    assert json.loads((out / f"{atari_long.QUICK_CELL}.json").read_text()) == record
    assert not (tmp_path / "runs" / atari_long.QUICK_CELL / "results.jsonl").exists()


@pytest.mark.benchmark
def test_new_attempt_trains_again_and_keeps_the_lost_record(short_cell, tmp_path):
    """--new-attempt on a fresh run directory: the stored record (the short cell's) is kept
    as attempt 1 unchanged, the cell trains from 0 as attempt 2 whose record lists attempt
    1 and only its own session, with the machine's ids."""
    out = tmp_path / "out"
    out.mkdir()
    stored_text = (short_cell / f"{atari_long.QUICK_CELL}.json").read_text()
    (out / f"{atari_long.QUICK_CELL}.json").write_text(stored_text)
    stored = json.loads(stored_text)
    proc = _driver("--cells", atari_long.QUICK_CELL, "--quick-child", "--out", out, "--runs", tmp_path / "runs",
                   "--target-steps", atari_long.QUICK_STEPS_PER_ITERATION, "--new-attempt",
                   "--on-tests", "stop", "--guard-names", _fake_name())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    kept = json.loads((out / f"{atari_long.QUICK_CELL}.attempt1.json").read_text())
    assert stored["attempt"] == 1 and {k: v for k, v in kept.items() if k != "attempt_ended"} == stored
    new = json.loads((out / f"{atari_long.QUICK_CELL}.json").read_text())
    assert new["attempt"] == 2 and new["earlier_attempts"][0]["env_steps"] == stored["env_steps"]
    assert len(new["sessions"]) == 1 and new["sessions"][0]["from_env_steps"] == 0
    assert 0 < new["env_steps"] < stored["env_steps"] + atari_long.QUICK_STEPS_PER_ITERATION
    assert "boot_id" in new["sessions"][0]["machine"]


def test_stopper_refreshes_the_record_at_its_interval_and_survives_a_failed_write(capsys):
    """After an iteration the stopper rewrites the record when `refresh_every_s` has passed
    (not before), and a failing write is a warning, not a stop."""
    stopper = atari_long.Stopper([_fake_name()])
    stopper.armed, stopper.looked = True, float("inf")  # no signal handlers, no process scan
    seen = []
    stopper.refresh, stopper.refresh_every_s = seen.append, 3600.0
    stopper.refreshed = time.monotonic()
    assert stopper({"env_steps": 1}) is None and seen == []
    stopper.refreshed -= 3600.0
    assert stopper({"env_steps": 2}) is None and seen == [{"env_steps": 2}]
    assert stopper({"env_steps": 3}) is None and seen == [{"env_steps": 2}]

    def fail(line):
        raise OSError("disk full")

    stopper.refresh, stopper.refresh_every_s = fail, 0.0
    assert stopper({"env_steps": 4}) is None
    assert "warning: the record was not refreshed: disk full" in capsys.readouterr().out
