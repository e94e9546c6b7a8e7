"""Long Atari runs that survive interruptions: Pong and Breakout, A2C and the default credit mode.

A fixed list of cells (game, method, seed): Pong and Breakout (classic protocol, the tuned
examples' settings: `tuned_examples/common.atari_config`), `a2c` and the package's default
credit mode (`HCA_TRAINING_DEFAULTS["credit"]`, read at start), seeds 0-2. Each cell is one
run directory of `hca_rllib.runner.run_training` (results.jsonl, checksummed checkpoints,
`--resume`), so a cell continues from its newest valid checkpoint whenever the driver is
started again, also after a `kill -9` (the runner cuts results.jsonl back to it).

* Priority and cores: the process lowers its priority (`os.nice`, default 19) and pins
  itself, and so Ray and the EnvRunner started from it, to ONE core
  (`os.sched_setaffinity`, default the last one), torch with 1 thread, the EnvRunner in
  the driver (`num_env_runners=0`): the other cores stay free.
* Checkpoints: every `--checkpoint-minutes` (default 3) of training, at each pass's end
  and before any stop, so an interruption loses at most that much.
* Order: passes of `--pass-steps` (default 1M) agent steps, every cell in turn, so that
  all cells advance together toward `--target-steps` (default 10M).
* The test suite: the driver never trains while one runs. It looks for processes whose
  command line runs pytest (`python -m pytest`, `pytest`, `py.test`; psutil), other than
  its own ancestors (so its quick mode can run inside the suite). Found at start or
  mid-run: the cell checkpoints and stops; `--on-tests pause` (default) waits until the
  suite has ended and continues, `--on-tests stop` exits with status 75 (EX_TEMPFAIL).
  SIGTERM / SIGINT also checkpoint first, then exit.
* Records: after each pass (and each stop) one compact JSON per cell in
  `benchmarks/results/atari_long/<cell>.json` (`common.compact_record`: the score curve
  against agent steps and the credit diagnostics, downsampled; steps/s; the sessions with
  their machine). The run directories (checkpoints, results.jsonl) go to `--runs`
  (default `runs/atari_long/`, ignored by git).
* `--report-only`: summary.md and curves.png (score against agent steps next to the
  reference lines) and diagnostics.png from the stored records.

Run (from the repository root):

    nohup .venv/bin/python benchmarks/atari_long.py > runs/atari_long.log 2>&1 &   # resumable
    .venv/bin/python benchmarks/atari_long.py --cells pong_a2c_seed0 --target-steps 3000000
    .venv/bin/python benchmarks/atari_long.py --report-only
    .venv/bin/python benchmarks/atari_long.py --quick   # start, checkpoint, kill -9, resume, report

Two drivers, one per core, each with its own cells (a cell is locked by the driver that
trains it; a second driver asking for it exits with an error naming it):

    .venv/bin/python benchmarks/atari_long.py --cells pong_a2c_seed0 pong_expected_hca_seed0 --core 1
    .venv/bin/python benchmarks/atari_long.py --cells breakout_a2c_seed0 breakout_expected_hca_seed0 --core 0
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import (  # noqa: E402
    command_line, compact_record, fmt, machine_note, matplotlib_pyplot, nan_mean, write_json)

from hca_rllib.hca import HCA_TRAINING_DEFAULTS  # noqa: E402
from tuned_examples.games import ATARI  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "atari_long"
RESULTS_ROOT = REPO / "benchmarks" / "results"
DEFAULT_RUNS = REPO / "runs" / "atari_long"
TARGET_STEPS = 10_000_000
PASS_STEPS = 1_000_000
EXIT_TESTS = 75  # sysexits.h EX_TEMPFAIL: the test suite is running, try again later
TEST_NAMES = ("pytest", "py.test")
TEST_POLL_S = 5.0  # at most one look at the process table per this many seconds
PAUSE_POLL_S = 30.0

# The package's default credit mode, read when the driver starts (a branch may change it).
DEFAULT_METHOD = HCA_TRAINING_DEFAULTS["credit"]
GAMES = {"pong": "Pong", "breakout": "Breakout"}
METHODS = ("a2c", DEFAULT_METHOD)
# Seeds 0-2 (the default driver runs every cell; `--cells` picks some).
SEEDS = (0, 1, 2)
CELLS = {f"{game}_{method}_seed{seed}": (game, method, seed)
         for seed in SEEDS for game in GAMES for method in METHODS}
QUICK_CELL = "quick_pong_a2c_seed0"
QUICK_STEPS = 800
# The quick check checkpoints every 2 iterations and its first start SIGKILLs itself once
# iteration 3's results line is written: one row past the newest checkpoint, every time.
QUICK_CHECKPOINT_EVERY = 2
QUICK_KILL_AFTER = 3
QUICK_STEPS_PER_ITERATION = 160

# Reference scores at 10M agent steps (docs/benchmarks.md, section 2, with the sources).
REFERENCES = {
    "pong": [("SB3 zoo A2C, 10M", ATARI["pong"]["a2c_score"])],
    "breakout": [("SB3 zoo A2C, 10M", ATARI["breakout"]["a2c_score"]),
                 ("RLlib A2C (old API stack), 10M", 374.0)],
}
REFERENCE_SOURCES = (
    "SB3 zoo: the 'Performance of trained agents' table of DLR-RM/rl-baselines3-zoo "
    "(benchmark.md, `<Game>NoFrameskip-v4`, 10M steps, one run); RLlib: the 'RLlib IMPALA "
    "and A2C on 10M time-steps (40M frames)' table of ray-project/rl-experiments "
    "(atari-a2c, 5 workers, old API stack). See docs/benchmarks.md, section 2.")

# Published A2C curves read at intermediate budgets (agent steps = frames / 4): the track a
# run of this budget is on. Sources and how each was read: docs/benchmarks.md, section 2.
REFERENCE_TRACKS = {
    "breakout": [
        ("OpenAI Baselines A2C (6 runs, read off the curve)",
         {500_000: 2.1, 1_000_000: 2.9, 2_000_000: 18.9, 3_000_000: 50.3, 10_000_000: 275.0}),
        ("RLlib A2C, rl-experiments (1 run, progress.csv)",
         {500_000: 14.66, 1_000_000: 23.28, 2_000_000: 74.52, 3_000_000: 176.28, 4_000_000: 289.03,
          5_000_000: 302.58, 6_000_000: 334.05, 7_000_000: 367.42, 8_000_000: 365.67, 10_000_000: 374.9}),
        ("nnabla-rl A2C (3 seeds, evaluation tsv)",
         {500_000: 8.954, 1_000_000: 28.754, 2_000_000: 88.099, 3_000_000: 244.403, 4_000_000: 290.333,
          5_000_000: 360.877, 6_000_000: 331.567, 7_000_000: 254.074, 8_000_000: 357.217,
          10_000_000: 372.4}),
        ("pytorch-a2c-ppo-acktr-gail (1 run, read off the image)",
         {500_000: 19.0, 1_000_000: 47.0, 2_000_000: 125.0, 3_000_000: 250.0}),
    ],
    "pong": [
        ("OpenAI Baselines A2C (6 runs, read off the curve)",
         {500_000: -20.2, 1_000_000: -20.1, 2_000_000: -16.3, 3_000_000: -1.0, 10_000_000: 18.5}),
        ("nnabla-rl A2C (3 seeds, evaluation tsv)",
         {500_000: -20.872, 1_000_000: -18.606, 2_000_000: -1.089, 3_000_000: 18.542, 4_000_000: 18.679,
          5_000_000: 19.22, 6_000_000: -19.973, 7_000_000: 19.493, 8_000_000: 19.183, 10_000_000: 19.918}),
    ],
}

# results.jsonl columns kept as the credit diagnostics over time.
DIAGNOSTICS = ("mutual_information", "trust", "decision_trust", "trust_scale",
               "hca_clip_fraction", "c2a2c_mask_fraction", "hca_ratio_mean",
               "hindsight_accuracy", "policy_accuracy", "advantage_correlation",
               "entropy", "vf_explained_var")
CURVE = ("env_steps", "score", "episode_return_mean", "num_episodes", "steps_per_s")


# ------------------------------------------------------------------ the test guard


def is_test_command(cmdline: Sequence[str], names: Sequence[str] = TEST_NAMES) -> bool:
    """Whether a command line runs pytest: `-m pytest`, or an argument whose file name is
    one of `names` (with or without `.py`, or a package's `__main__.py` under it)."""
    args = list(cmdline or [])
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args) and args[i + 1] in names:
            return True
        base = os.path.basename(arg)
        stem = base[:-3] if base.endswith(".py") else base
        if stem in names:
            return True
        if base == "__main__.py" and os.path.basename(os.path.dirname(arg)) in names:
            return True
    return False


def running_tests(names: Sequence[str] = TEST_NAMES) -> List[str]:
    """'pid: command' of each running process that runs the test suite (`is_test_command`),
    leaving out this process and its ancestors (a quick mode started by the suite)."""
    import psutil

    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.info["pid"] in mine:
            continue
        cmdline = proc.info.get("cmdline") or []
        if is_test_command(cmdline, names):
            found.append(f"{proc.info['pid']}: {shlex.join(cmdline)[:120]}")
    return found


class Stopper:
    """`stop_when` of the runner: a reason to stop after an iteration (a signal, or the test
    suite running), looking at the process table at most every `TEST_POLL_S`."""

    def __init__(self, names: Sequence[str]):
        self.names = names
        self.signal: Optional[str] = None
        self.reason: Optional[str] = None
        self.looked = -math.inf
        self.armed = False  # our handlers installed since Ray started
        # `refresh(line)`, at most every `refresh_every_s` after an iteration: the cell's
        # record rewritten mid-run (a session cut short keeps its curve so far).
        self.refresh: Optional[Callable[[Dict[str, Any]], None]] = None
        self.refresh_every_s = math.inf
        self.refreshed = -math.inf
        # The quick check's crash, at a known point: SIGKILL itself once the results line
        # of this iteration is written, past the checkpoint before it (once: `kill_marker`).
        self.kill_after: Optional[int] = None
        self.kill_marker: Optional[Path] = None

    def handle(self, signum, frame) -> None:
        self.signal = signal.Signals(signum).name

    def arm(self) -> None:
        """Install the SIGTERM/SIGINT handlers. Again after `ray.init`: Ray's core worker
        installs its own SIGTERM handler in the driver, which prints a stack and kills the
        process, so without this a `kill` lost the work since the last timed checkpoint."""
        signal.signal(signal.SIGTERM, self.handle)
        signal.signal(signal.SIGINT, self.handle)

    def tests(self) -> List[str]:
        self.looked = time.monotonic()
        return running_tests(self.names)

    def __call__(self, line: Dict[str, Any]) -> Optional[str]:
        if not self.armed:  # the first iteration: Ray is up by now
            self.arm()
            self.armed = True
        if self.kill_after is not None and line["iteration"] == self.kill_after and not self.kill_marker.exists():
            self.kill_marker.write_text(str(line["iteration"]))
            os.kill(os.getpid(), signal.SIGKILL)
        if self.signal:
            self.reason = f"signal {self.signal}"
        elif time.monotonic() - self.looked >= TEST_POLL_S:
            found = self.tests()
            if found:
                self.reason = f"test suite running ({found[0]})"
        if (self.reason is None and self.refresh is not None
                and time.monotonic() - self.refreshed >= self.refresh_every_s):
            self.refreshed = time.monotonic()
            try:
                self.refresh(line)
            except Exception as error:  # a record is not worth the run: say so, train on
                print(f"warning: the record was not refreshed: {error}", flush=True)
        return self.reason


# ------------------------------------------------------------------ process setup


def lower_priority(nice: int, core: Optional[int]) -> Dict[str, Any]:
    """Niceness at least `nice`, and this process (and what it starts) on one core: `core`,
    or the last one this process may use. Returns what was set."""
    current = os.nice(0)
    if nice > current:
        os.nice(nice - current)
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if core is None else core
    os.sched_setaffinity(0, {chosen})
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    return {"nice": os.nice(0), "core": chosen, "cores_allowed_before": len(allowed)}


def cell_config(name: str, quick: bool):
    """The tuned config of a cell (`tuned_examples.common.atari_config`); the quick cell has
    short iterations so that it checkpoints several times in a few thousand steps."""
    from tuned_examples.common import atari_config

    game, method, seed = (("pong", "a2c", 0) if name == QUICK_CELL else CELLS[name])
    config = (atari_config(GAMES[game], "A2C") if method == "a2c"
              else atari_config(GAMES[game], "HCA", method))
    if quick:
        config.reporting(min_sample_timesteps_per_iteration=QUICK_STEPS_PER_ITERATION)
    config.debugging(seed=seed)
    config.validate()
    return config, game, method, seed


# Settings of a stored cell that must not change under it (the package defaults may).
SETTING_KEYS = ("env", "credit", "trust", "hindsight_lr", "hindsight_epochs",
                "lr", "entropy_coeff", "vf_loss_coeff",
                "num_envs_per_env_runner", "rollout_fragment_length", "train_batch_size_per_learner")


def settings_of(flat: Dict[str, Any]) -> Dict[str, Any]:
    """The cell's settings; a record of 0.1.0 names removed fields (`trust_decay`,
    `hindsight_memory`, `trust_calibration`): at their defaults they drop out, otherwise
    ValueError names them (`hca_rllib.fields.upgrade_state`)."""
    from hca_rllib.fields import upgrade_state

    flat = upgrade_state(flat)
    return {key: flat.get(key) for key in SETTING_KEYS}


# ------------------------------------------------------------------ records


def cell_record(name: str, run_dir: Path, info: Dict[str, Any]) -> Dict[str, Any]:
    """The compact record of a cell from its run directory: score curve and diagnostics
    (downsampled by `compact_record`), steps/s, sessions."""
    from hca_rllib.runner import read_results

    lines = read_results(run_dir / "results.jsonl")
    last = lines[-1] if lines else {"env_steps": 0, "iteration": 0, "time_s": 0.0}
    tail = lines[-max(1, len(lines) // 10):] if lines else []
    data = {
        **info, "cell": name, "env_steps": last["env_steps"], "iterations": last["iteration"],
        "train_s": last.get("time_s", 0.0),
        "env_steps_per_s": last["env_steps"] / last["time_s"] if last.get("time_s") else None,
        "final_score": nan_mean(line.get("score") for line in tail),
        "final_score_note": "mean of the last 10% of iterations' game_return_mean (the unclipped "
                            "full-game score; in Ray 2.60 each iteration's value is the mean of "
                            "the games that ended in that iteration: RLlib's MeanStats empties "
                            "its window at every reduce)",
        "curve": {key: [line.get(key) for line in lines] for key in CURVE},
        "diagnostics": {key: [line.get(key) for line in lines] for key in ("env_steps", *DIAGNOSTICS)},
        # Read from every iteration here, not later from the downsampled curve, whose bins
        # move as the run grows (a mark next to a collapse read -12.9 at one length and
        # -8.9 at another).
        "score_at_marks": marks_of([line["env_steps"] for line in lines],
                                   [line.get("score") for line in lines]),
    }
    return compact_record(data)


def store_cell(out: Path, name: str, run_dir: Path, info: Dict[str, Any]) -> Dict[str, Any]:
    record = cell_record(name, run_dir, info)
    write_json(out / f"{name}.json", record)
    return record


def attempt_path(out: Path, name: str, attempt: int) -> Path:
    return out / f"{name}.attempt{attempt}.json"


def archive_attempt(out: Path, name: str, stored: Dict[str, Any], why: str) -> Dict[str, Any]:
    """Keep the stored record of cell `name` as `<name>.attempt<N>.json` (N: its attempt,
    1 for records made before attempts were counted) and return the start of attempt N + 1:
    no sessions, and the earlier attempts listed (their steps, score and why they ended).
    The archived file is written before `<name>.json` is replaced, so a kill in between
    loses nothing."""
    attempt = int(stored.get("attempt", 1))
    target = attempt_path(out, name, attempt)
    if target.exists():
        sys.exit(f"atari_long: {target} exists already: move it away before archiving "
                 f"attempt {attempt} of {name} again")
    write_json(target, {**stored, "attempt": attempt, "attempt_ended": why})
    earlier = list(stored.get("earlier_attempts", [])) + [{
        "attempt": attempt, "record": target.name, "env_steps": stored.get("env_steps"),
        "final_score": stored.get("final_score"), "ended": why,
        "sessions": len(stored.get("sessions", []))}]
    print(f"{name}: attempt {attempt} ({stored.get('env_steps', 0):,} agent steps) kept as "
          f"{target.name}; attempt {attempt + 1} starts from 0 ({why})", flush=True)
    return {"settings": stored.get("settings"), "attempt": attempt + 1, "earlier_attempts": earlier}


def machine_identity() -> Dict[str, Any]:
    """What tells two machines (and two boots of one) apart when their host names agree:
    /etc/machine-id and the kernel's boot id, 8 characters each (absent where unreadable)."""
    found = {}
    for key, path in (("machine_id", "/etc/machine-id"), ("boot_id", "/proc/sys/kernel/random/boot_id")):
        try:
            found[key] = Path(path).read_text().strip().replace("-", "")[:8]
        except OSError:
            pass
    return found


# ------------------------------------------------------------------ driving


def run_cell(name: str, args, stopper: Stopper, setup: Dict[str, Any], stop_at: int) -> str:
    """Train cell `name` to `stop_at` agent steps from its newest checkpoint. Returns
    'done' or the stop's reason."""
    from hca_rllib.runner import flat_config, newest_valid_checkpoint, run_training, verify_checkpoint

    config, game, method, seed = cell_config(name, args.quick)
    stopper.armed = False  # re-armed after this cell's first iteration (Ray may start again)
    run_dir = args.runs / name
    record_path = args.out / f"{name}.json"
    stored = json.loads(record_path.read_text()) if record_path.exists() else {}
    settings = settings_of(flat_config(config))
    if stored.get("settings") is not None and settings_of(stored["settings"]) != settings:
        sys.exit(f"{record_path}: made with settings {stored['settings']}, this start has "
                 f"{settings} (the package defaults changed?): use another --out and --runs")
    # Where the cell stands: its newest valid checkpoint (results.jsonl may run past it
    # after a kill; the runner cuts it back on resume).
    checkpoint = newest_valid_checkpoint(run_dir, lambda message: print(f"warning: {message}"))
    done = int(verify_checkpoint(checkpoint, require_meta=True)["env_steps"]) if checkpoint else 0
    if checkpoint is None and stored.get("env_steps", 0) > 0:
        # The record says the cell trained, but this machine has none of its checkpoints
        # (a fresh machine: run directories are machine-local and ignored by git). Starting
        # over would overwrite the stored curve with a new run's.
        if not args.new_attempt:
            sys.exit(f"atari_long: cell {name}: its record is at {stored['env_steps']:,} agent "
                     f"steps but {run_dir} has no checkpoint (a new machine?): restore that run "
                     f"directory, or pass --new-attempt to keep the record as attempt "
                     f"{stored.get('attempt', 1)} and train the cell again from 0")
        stored = archive_attempt(args.out, name, stored, f"no checkpoint in {run_dir}")
    if done >= stop_at:
        return "done"
    session = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "from_env_steps": done,
               "machine": {**machine_note(), **machine_identity(), **setup}, "command": command_line()}
    info = {"game": game, "env_id": config.env, "method": method, "credit": config.credit,
            "algo": config.algo_class.__name__, "seed": seed, "target_env_steps": args.target_steps,
            "settings": settings, "attempt": stored.get("attempt", 1),
            "earlier_attempts": stored.get("earlier_attempts", []),
            "sessions": stored.get("sessions", []),
            "references": REFERENCES.get(game, [])}
    print(f"{name}: to {stop_at:,} agent steps in {run_dir}", flush=True)
    t0 = time.time()

    def refresh(line: Dict[str, Any]) -> None:
        running = {**session, "to_env_steps": line["env_steps"], "wall_s": round(time.time() - t0, 1),
                   "steps_per_s": line.get("steps_per_s"), "ended": "running (record refreshed mid-run)"}
        store_cell(args.out, name, run_dir, {**info, "sessions": info["sessions"] + [running]})

    stopper.refresh, stopper.refresh_every_s = refresh, 60 * args.record_minutes
    crash_test = getattr(args, "kill_after_iteration", None) is not None
    stopper.refreshed = time.monotonic()
    last = run_training(
        config, run_dir, stop_at, resume=True, checkpoint_every=QUICK_CHECKPOINT_EVERY if crash_test else 0,
        checkpoint_every_s=None if crash_test else 60 * args.checkpoint_minutes, stop_when=stopper,
        run_info={"algo": info["algo"], "credit": config.credit, "env": config.env, "seed": seed,
                  "cell": name, "stop_timesteps": stop_at, "command": command_line()},
        wandb="off", tensorboard=False, progress=True, progress_every=60, torch_threads=1)
    stopper.refresh = None
    reason = stopper.reason or "done"
    session.update(to_env_steps=last["env_steps"], wall_s=round(time.time() - t0, 1),
                   steps_per_s=last.get("steps_per_s"), ended=reason)
    info["sessions"] = info["sessions"] + [session]
    record = store_cell(args.out, name, run_dir, info)
    print(f"{name}: {record['env_steps']:,} agent steps, score {fmt(record['final_score'])}, "
          f"{reason}", flush=True)
    return reason


def lock_cells(runs: Path, cells: Sequence[str]) -> List[Any]:
    """An exclusive lock (`fcntl.flock`) per cell, held while this process lives, so that
    two drivers (say one per core, `--core`) never train the same cell's run directory.
    A cell another driver holds: exit with a one-line error naming it."""
    import fcntl

    runs.mkdir(parents=True, exist_ok=True)
    held = []
    for name in cells:
        handle = open(runs / f"{name}.lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            for other in held:
                other.close()
            sys.exit(f"atari_long: cell {name} is being trained by another driver "
                     f"({runs / (name + '.lock')}); give each driver its own --cells")
        held.append(handle)
    return held


def drive(args) -> int:
    import ray

    locks = lock_cells(args.runs, args.cells)  # noqa: F841 (held until the process exits)
    ray_was_up = ray.is_initialized()  # a caller's Ray (a test's) is the caller's to stop
    setup = lower_priority(args.nice, args.core)
    print(f"priority: nice {setup['nice']}, core {setup['core']}; results {args.out}, runs {args.runs}",
          flush=True)
    stopper = Stopper(args.guard_names)
    stopper.arm()
    if getattr(args, "kill_after_iteration", None):  # (tests drive with a namespace of their own)
        stopper.kill_after, stopper.kill_marker = args.kill_after_iteration, args.runs / "quick_killed"
    cells = args.cells
    steps = args.pass_steps
    stop_at = {name: 0 for name in cells}
    try:
        while True:
            pending = [name for name in cells if stop_at[name] < args.target_steps]
            if not pending:
                break
            for name in pending:
                while True:
                    found = stopper.tests()
                    if not found:
                        break
                    if args.on_tests == "stop" or stopper.signal:
                        print(f"not starting: the test suite is running ({found[0]})", flush=True)
                        return EXIT_TESTS
                    print(f"paused: the test suite is running ({found[0]})", flush=True)
                    time.sleep(PAUSE_POLL_S)
                if stopper.signal:
                    return 128 + signal.Signals[stopper.signal].value
                stop_at[name] = min(stop_at[name] + steps, args.target_steps)
                while True:
                    reason = run_cell(name, args, stopper, setup, max(stop_at[name], 1))
                    if stopper.signal:
                        return 128 + signal.Signals[stopper.signal].value
                    if reason == "done":
                        break
                    # The test suite: checkpointed. Exit, or wait and go on with this
                    # cell's pass (not the next cell's: a pause costs one restart).
                    stopper.reason = None
                    if args.on_tests == "stop":
                        print(f"stopped: {reason}", flush=True)
                        return EXIT_TESTS
                    print(f"paused: {reason}", flush=True)
                    while stopper.tests():
                        if stopper.signal:
                            return 128 + signal.Signals[stopper.signal].value
                        time.sleep(PAUSE_POLL_S)
            # A cell already past this pass's mark returns at once: the marks catch up.
    finally:
        if ray.is_initialized() and not ray_was_up:
            ray.shutdown()
    print("all cells at their target", flush=True)
    return 0


# ------------------------------------------------------------------ report


MARKS = (250_000, 500_000, 1_000_000, 1_500_000, 2_000_000, 2_500_000, 3_000_000,
         4_000_000, 5_000_000, 6_000_000, 7_000_000, 8_000_000, 10_000_000)


SCORE_SPAN = 100_000  # agent steps before a mark whose curve points make its score


def span_mean(steps: Sequence[int], scores: Sequence[Optional[float]], mark: int,
              span: int = SCORE_SPAN) -> Optional[float]:
    """The mean of the scores whose step lies in (mark - span, mark]; None where none does."""
    inside = [score for step, score in zip(steps, scores)
              if mark - span < step <= mark and score is not None]
    return sum(inside) / len(inside) if inside else None


def marks_of(steps: Sequence[int], scores: Sequence[Optional[float]]) -> Dict[str, Optional[float]]:
    """`span_mean` at every mark of MARKS the run has reached, keyed by the mark as text
    (JSON): what a record stores as `score_at_marks`, from every iteration."""
    reached = steps[-1] if steps else 0
    return {str(mark): span_mean(steps, scores, mark) for mark in MARKS if mark <= reached}


def score_at(record: Dict[str, Any], mark: int, span: int = SCORE_SPAN) -> Optional[float]:
    """The game score at `mark` agent steps: the mean of the per-iteration scores in the
    `span` agent steps up to `mark` (each the games that ended in that iteration; 100k
    steps hold about 100 games of Pong or of Breakout at a score of 20-30); None where the
    run has not reached `mark` or no game ended in the span. Read from the record's
    `score_at_marks` (every iteration) where it has the mark, else from its stored curve
    (downsampled: the reading can move with the bins, records written before
    `score_at_marks`)."""
    if record["env_steps"] < mark:
        return None
    stored = record.get("score_at_marks") or {}
    if span == SCORE_SPAN and str(mark) in stored:
        return stored[str(mark)]
    steps, scores = record["curve"]["env_steps"], record["curve"].get("score") or []
    return span_mean(steps, scores, mark, span) if steps else None


def label(name: str, r: Dict[str, Any]) -> str:
    return f"{r['method']} seed {r['seed']}" + (f", attempt {r['attempt']}" if "attempt" in r else "")


def load_records(out: Path) -> Dict[str, Dict[str, Any]]:
    """Every cell record in `out` (`<cell>.json` and the earlier attempts'
    `<cell>.attemptN.json`), by file stem."""
    return {p.stem: r for p in sorted(out.glob("*.json"))
            if "cell" in (r := json.loads(p.read_text()))}


def report(out: Path) -> str:
    records = load_records(out)
    lines = ["# Atari at a budget: long runs of A2C and the default credit mode", "",
             "Written by `benchmarks/atari_long.py --report-only` from the compact records here. "
             "A cell trained again from 0 after its run directory was lost (a new machine) keeps "
             "each earlier attempt as `<cell>.attemptN.json`.", "",
             "| record | env | method | attempt | agent steps (target) | final score | agent steps/s | sessions | machines |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for name, r in records.items():
        machines = sorted({"{}{}".format(s["machine"]["host"], f" {s['machine']['boot_id']}"
                                         if s["machine"].get("boot_id") else "")
                           for s in r.get("sessions", [])})
        lines.append(f"| {name} | {r['env_id']} | {r['method']} | {r.get('attempt', 1)} | "
                     f"{r['env_steps']:,} ({r['target_env_steps']:,}) | {fmt(r['final_score'])} | "
                     f"{fmt(r['env_steps_per_s'], 0)} | {len(r.get('sessions', []))} | "
                     f"{', '.join(machines)} |")
    marks = [m for m in MARKS if any(r["env_steps"] >= m for r in records.values())]
    if marks:
        lines += ["", f"Game score at equal agent steps (the mean of the per-iteration scores over "
                  f"the {SCORE_SPAN:,} agent steps up to the mark, read from every iteration when "
                  f"the record is written, `score_at_marks`; blank: not reached), beside the "
                  f"published A2C tracks at the same agent steps:", "",
                  "| record | " + " | ".join(f"{m / 1e6:g}M" for m in marks) + " |",
                  "|---|" + "---:|" * len(marks)]
        for game in sorted({r["game"] for r in records.values()}):
            for name, r in sorted((n, r) for n, r in records.items() if r["game"] == game):
                lines.append(f"| {name} | " + " | ".join(
                    "" if (v := score_at(r, m)) is None else fmt(v) for m in marks) + " |")
            for text, track in REFERENCE_TRACKS.get(game, []):
                lines.append(f"| *{game}: {text}* | " + " | ".join(
                    fmt(track[m]) if m in track else "" for m in marks) + " |")
        lines += ["", "Each curve point is the mean of the games that ended in its iterations "
                  "(Ray 2.60's `episode_return_mean` and `game_return_mean` keep no window across "
                  "iterations; runs since the last-100 window was added also log "
                  "`game_return_window_mean`). All envs start a game together at a run's start and after each "
                  "resume, so the short games end first and the curve dips for about one game's "
                  "length after a restart; the sessions column counts the restarts."]
    lines += ["", "Reference scores at 10M agent steps: "
              + "; ".join(f"{game} {label_} {score}" for game, refs in REFERENCES.items()
                          for label_, score in refs) + ".", "", "Sources: " + REFERENCE_SOURCES, "",
              "Diagnostics (mean of the last 10 iterations; the A2C cells log none of the credit ones):", "",
              "| record | information (nats) | trust | decision trust | HCA clip fraction | c2a2c mask fraction | entropy | vf explained var |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in records.items():
        d = r.get("diagnostics_last10") or {}
        lines.append(f"| {name} | " + " | ".join(fmt(d.get(k), 4) for k in (
            "mutual_information", "trust", "decision_trust", "hca_clip_fraction",
            "c2a2c_mask_fraction", "entropy", "vf_explained_var")) + " |")
    lines += ["", "![curves](curves.png)", "", "![diagnostics](diagnostics.png)", ""]
    text = "\n".join(lines)
    (out / "summary.md").write_text(text)
    plot(records, out)
    return text


def plot(records: Dict[str, Dict[str, Any]], out: Path) -> None:
    """curves.png: score against agent steps, one panel a game, the reference lines;
    earlier attempts dotted. diagnostics.png: the credit diagnostics over agent steps."""
    plt = matplotlib_pyplot()
    games = sorted({r["game"] for r in records.values()}) or ["pong"]
    colours = {method: f"C{i}" for i, method in enumerate(sorted({r["method"] for r in records.values()}))}
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4), squeeze=False)
    for ax, game in zip(axes[0], games):
        for name, r in records.items():
            if r["game"] == game and r["curve"]["env_steps"]:
                # No episode ended yet (a short run): the column is stored as None.
                score = [math.nan if v is None else v
                         for v in r["curve"]["score"] or [None] * len(r["curve"]["env_steps"])]
                earlier = "attempt_ended" in r
                ax.plot(r["curve"]["env_steps"], score, color=colours[r["method"]],
                        linestyle=":" if earlier else "-", alpha=0.6 if earlier else 1.0,
                        label=label(name, r) + (" (run lost)" if earlier else ""))
        for (text, value), style in zip(REFERENCES.get(game, []), ("--", "-.")):
            ax.axhline(value, color="grey", linestyle=style, label=f"{text}: {value}")
        for (text, track), marker in zip(REFERENCE_TRACKS.get(game, []), "osD^v"):
            top = max((r["env_steps"] for r in records.values() if r["game"] == game), default=0)
            shown = sorted(m for m in track if m <= max(top, 3_000_000))
            ax.plot(shown, [track[m] for m in shown], color="black", linewidth=0.6, alpha=0.5,
                    marker=marker, markersize=4, label=text)
        ax.set(title=GAMES.get(game, game), xlabel="agent steps", ylabel="game score")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=90)
    plt.close(fig)
    keys = ("mutual_information", "trust", "decision_trust", "hca_clip_fraction", "entropy")
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.5), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for name, r in records.items():
            diagnostics = r.get("diagnostics") or {}
            if diagnostics.get(key):
                ax.plot(diagnostics["env_steps"], [math.nan if v is None else v for v in diagnostics[key]],
                        label=f"{r['game']} {label(name, r)}",
                        linestyle=":" if "attempt_ended" in r else "-")
        ax.set(title=key, xlabel="agent steps")
        if ax.lines:
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "diagnostics.png", dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------ quick mode


def quick(args) -> int:
    """Start the quick cell in a child, which SIGKILLs itself mid-run, one iteration past
    its checkpoint (`QUICK_KILL_AFTER`); start it again (it must resume from that
    checkpoint), let it finish and report."""
    from hca_rllib.runner import checkpoints_newest_first, read_results, verify_checkpoint

    base = [sys.executable, str(Path(__file__).resolve()), "--cells", QUICK_CELL, "--quick-child",
            "--out", str(args.out), "--runs", str(args.runs), "--target-steps", str(QUICK_STEPS),
            "--checkpoint-minutes", str(args.checkpoint_minutes), "--on-tests", "stop", "--nice", str(args.nice),
            "--kill-after-iteration", str(QUICK_KILL_AFTER),
            "--guard-names", *args.guard_names]
    run_dir = args.runs / QUICK_CELL
    first = subprocess.run(base, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600)
    rows = read_results(run_dir / "results.jsonl") if (run_dir / "results.jsonl").exists() else []
    if first.returncode != -signal.SIGKILL or not rows or rows[-1]["iteration"] != QUICK_KILL_AFTER:
        print(first.stdout[-3000:])
        print(f"quick: the child was to SIGKILL itself after iteration {QUICK_KILL_AFTER}; it exited with "
              f"{first.returncode}", file=sys.stderr)
        return 1
    killed_at = rows[-1]["iteration"]
    checkpoint = checkpoints_newest_first(run_dir)[0]
    meta = verify_checkpoint(checkpoint, require_meta=True)
    if meta["iteration"] >= killed_at:
        print(f"quick: the newest checkpoint ({meta['iteration']}) is not behind the kill", file=sys.stderr)
        return 1
    print(f"quick: killed (SIGKILL) at iteration {killed_at}; newest checkpoint {checkpoint.name} "
          f"(iteration {meta['iteration']}, {meta['env_steps']} agent steps) verifies", flush=True)
    second = subprocess.run(base, cwd=REPO, capture_output=True, text=True, timeout=300)
    print(second.stdout[-3000:] + second.stderr[-2000:])
    if second.returncode != 0:
        return second.returncode
    if f"(iteration {meta['iteration']}," not in second.stdout:
        print("quick: the second start did not resume from the checkpoint", file=sys.stderr)
        return 1
    rows = read_results(run_dir / "results.jsonl")
    iterations = [row["iteration"] for row in rows]
    if iterations != list(range(1, len(rows) + 1)) or rows[-1]["env_steps"] < QUICK_STEPS:
        print(f"quick: results.jsonl iterations {iterations} are not one unbroken run", file=sys.stderr)
        return 1
    write_json(args.out / "quick_check.json", {"killed_at_iteration": killed_at,
                                               "resumed_from_iteration": meta["iteration"],
                                               "resumed_from_env_steps": meta["env_steps"],
                                               "iterations": len(rows), "env_steps": rows[-1]["env_steps"]})
    print(report(args.out))
    print(f"quick: ok; results in {args.out}", flush=True)
    return 0


def main(argv=None) -> int:
    import argparse

    from hca_rllib.cli.arguments import OneLineParser, float_argument, int_argument, output_directory_argument

    # A bad argument: one line and exit status 2, before any cell starts.
    parser = OneLineParser(description=__doc__.splitlines()[0], epilog=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", choices=list(CELLS) + [QUICK_CELL], default=None,
                        help=f"default: all of {list(CELLS)}")
    parser.add_argument("--target-steps", type=int_argument(1), default=None,
                        help=f"agent steps per cell (default {TARGET_STEPS:,}; the goal is >= 3M)")
    parser.add_argument("--pass-steps", type=int_argument(1), default=PASS_STEPS,
                        help="agent steps a cell trains before the next cell's turn")
    parser.add_argument("--checkpoint-minutes", type=float_argument(0.0, 10_000.0), default=3.0,
                        help="checkpoint after this many minutes of training (default 3)")
    parser.add_argument("--record-minutes", type=float_argument(0.0, 10_000.0), default=10.0,
                        help="rewrite each training cell's record this often mid-run (default 10), "
                             "besides at each pass's end and stop")
    parser.add_argument("--nice", type=int_argument(-20, 19), default=19)
    parser.add_argument("--core", type=int_argument(0, (os.cpu_count() or 1) - 1), default=None,
                        help="the one core (default: the last)")
    parser.add_argument("--on-tests", choices=["pause", "stop"], default="pause",
                        help="while the test suite runs: wait (pause) or exit 75 (stop)")
    parser.add_argument("--out", type=output_directory_argument, default=None, help=f"records (default {DEFAULT_OUT})")
    parser.add_argument("--runs", type=output_directory_argument, default=None,
                        help=f"run directories (default {DEFAULT_RUNS})")
    parser.add_argument("--new-attempt", action="store_true",
                        help="a cell whose record is ahead of its run directory (no checkpoint "
                             "here: a new machine): keep the record as <cell>.attemptN.json and "
                             "train the cell again from 0 (without it: an error naming the cell)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny Pong cell in a temp dir: start, checkpoint, kill -9, resume, report")
    parser.add_argument("--quick-child", action="store_true", help=argparse.SUPPRESS)
    # For tests: the program names taken for the test suite (default pytest, py.test).
    parser.add_argument("--guard-names", nargs="+", default=list(TEST_NAMES), help=argparse.SUPPRESS)
    # For --quick: the child's crash (SIGKILL after this iteration's line, once; a
    # checkpoint every QUICK_CHECKPOINT_EVERY iterations).
    parser.add_argument("--kill-after-iteration", type=int_argument(1), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="atari_long_quick_"))
    if (args.quick or args.quick_child) and args.out.resolve().is_relative_to(RESULTS_ROOT.resolve()):
        parser.error("--quick must not write into benchmarks/results")
    args.out = (args.out or DEFAULT_OUT).resolve()
    args.runs = (args.runs or (args.out / "runs" if args.quick else DEFAULT_RUNS)).resolve()
    if args.report_only:
        if not args.out.is_dir():
            parser.error(f"--out {args.out}: no such directory (no records to report)")
        print(report(args.out))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        if args.checkpoint_minutes == 3.0:
            args.checkpoint_minutes = 0.0  # a checkpoint after every iteration
        return quick(args)
    args.quick = args.quick_child
    args.cells = args.cells or list(CELLS)
    if QUICK_CELL in args.cells and not args.quick:
        parser.error(f"{QUICK_CELL} is the quick mode's cell: use --quick")
    args.target_steps = args.target_steps or (QUICK_STEPS if args.quick else TARGET_STEPS)
    if args.target_steps < 1 or args.pass_steps < 1 or args.checkpoint_minutes < 0 or args.record_minutes < 0:
        parser.error("--target-steps and --pass-steps must be >= 1, --checkpoint-minutes and "
                     "--record-minutes >= 0")
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
