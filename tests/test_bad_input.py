"""Bad input, table-driven: malformed values for every flag of every command: the
`hca-rllib` subcommands (train, evaluate, report, sweep, probe), `--set` of every config
field, and the scripts users run with their own parsers (a tuned example, e.g.
`tuned_examples/minatar/breakout.py`; `tuned_examples/sweeps.py`;
`benchmarks/atari_long.py`). The kinds: zero, negative, NaN, inf, huge, a fraction for a
count, the wrong type, empty, unknown names, and the wrong kind of path (a file for a
directory, a directory for a file, a missing directory, one that cannot be created: under
a regular file, or under /proc, where even root cannot write).

Each case runs the command's `main(argv)` in this process with Ray's start patched to
raise (`ray.init` and `hca_rllib.runner.init_ray`), so a value that slips through
validation shows up as "started Ray" instead of training. A case is clean when the
command exits with status 2, its stderr (fd level: logging too) is exactly one line
`<command>: error: ...`, that line names the problem (the flag or field,
case-insensitive), there is no traceback, and Ray was not started.

Count: `pytest --collect-only -q tests/test_bad_input.py -k one_line_error | grep -c ::`:
every case clean (the count is in docs/guide.md). 579 of them made up the table for the `hca-rllib` subcommands alone;
on the code before the checks for the other 199 (the scripts, the sweep's metric, the
paths that cannot be written, zero for counts where zero means nothing), 156 of the 778
were not clean: 101 in the scripts (a usage block, or accepted), 55 in `hca-rllib` (the
sweep ran with a metric no trial reports, `report` of a file wrote a report, ...).
"""

from __future__ import annotations

import json

import pytest


class RayStarted(BaseException):
    """Raised by the patched ray.init: validation let the input through."""


def _case_id(argv, command="hca-rllib"):
    return " ".join([command, *(a if a else "''" for a in argv)])[:120]


HUGE = str(2**64)  # beyond every count and seed taken (the config's MAX_COUNT is 2**31 - 1)
# Directories no one can create, root included: below a regular file (made by the
# fixture), and below /proc.
UNWRITABLE = ["a_file/sub", "/proc/hca_rllib_no_such/dir"]


# ------------------------------------------------------------------ the table

# Bad values per config field (as typed after `--set KEY=`), each expected to be refused
# with a message naming the field.
NUMBER_BAD = ["nan", "inf", "'x'", "''", "[1]", "{1: 2}", "True", "None"]
SET_BAD = {
    # the project's fields (hca_rllib.fields.HCA_TRAINING_DEFAULTS)
    "credit": ["nope", "''", "1", "[1]", "None", "'mix'"],
    "vf_loss_coeff": ["-1", *NUMBER_BAD],
    "entropy_coeff": ["-1", "1e400", *NUMBER_BAD],
    "c2a2c_delta": ["0", "-1", *NUMBER_BAD],
    "trust": ["nope", "''", "1", "[1]", "'batch'"],
    "hindsight": ["[1,2]", "{torso:nope}", "''", "5", "None", "{'torso': 'nope'}", "{'nope': 1}",
                  "{'hiddens': 'x'}", "{'hiddens': [-1]}", "{'hiddens': [0]}", "{'hiddens': 64}",
                  "{'return_encoding': 'bins'}", "{'return_encoding': 'raw'}", "{'parameterization': 1}",
                  "{'num_bins': 21}", "{'balanced': False}", "{'return_input': 'return'}"],
    "hindsight_loss_coeff": ["-1", *NUMBER_BAD],
    "hindsight_epochs": ["-1", "1.5", "'x'", "True", "nan", "10**12"],
    "hindsight_lr": ["0", "-1", "nan", "inf", "'x'", "[1]"],
    "frame_stack": ["0", "-1", "1.5", "'x'", "True", "[1]"],
    "sampler": ["nope", "''", "1"],
    "learner_path": ["nope", "''", "1"],
    # RLlib's fields the CLI exposes or that users commonly set
    "lr": ["0", "-1", "nan", "inf", "'x'", "''", "[1, 2]", "{1: 2}", "True"],
    "gamma": ["0", "-1", "1.5", *NUMBER_BAD],
    "lambda_": ["-1", "2", *NUMBER_BAD],
    "train_batch_size_per_learner": ["0", "-1", "1.5", "'x'", "nan", "True", "10**15", "[1]"],
    "num_env_runners": ["-1", "1.5", "'x'", "True", "[1]"],
    "num_envs_per_env_runner": ["0", "-1", "1.5", "'x'", "True", "10**12"],
    "rollout_fragment_length": ["0", "-1", "1.5", "'x'", "True", "[1]"],
    "grad_clip": ["0", "-1", "nan", "'x'", "[1]", "True"],
    "grad_clip_by": ["nope", "''", "1"],
    "num_learners": ["-1", "1.5", "'x'"],
    "batch_mode": ["nope", "''", "1"],
    "num_cpus_per_env_runner": ["-1", "nan", "'x'"],
    "seed": ["-1", "1.5", "'x'", "2**64"],
    "env": ["nope-v0", "''", "5", "[1]"],
    "env_config": ["'x'", "[1]", "5"],
    "model_config": ["'x'", "[1]", "5"],
}
# 0.1.0's fields that were removed (hca_rllib.fields.REMOVED_FIELDS).
REMOVED = ["sampler_overlap", "hindsight_overlap", "hindsight_memory", "return_mode", "normalize_advantages",
           "hca_ratio_clip", "hca_baseline", "c2a2c_soft", "c2a2c_normalize", "mix_eta", "trust_z",
           "trust_information", "trust_decay", "trust_max_scale", "trust_calibration", "trust_bins",
           "optimizer_type", "rmsprop_alpha", "optimizer_eps"]
SET_SYNTAX = [  # --set itself malformed: (value, expected words)
    ("lr", "key=value"), ("", "key=value"), ("=1", "with a key"), ("nosuchkey=1", "nosuchkey"),
    ("LR=1e-3", "LR"), (" =1", "with a key"),
]


def _train(*extra):
    return ["train", "--output", "out", *extra]


def _sweep(*extra):
    return ["sweep", "--envs", "CartPole-v1", "--output", "sw", *extra]


def _cases():
    cases = []

    def add(argv, words, command="hca-rllib"):
        cases.append(pytest.param(command, argv, words, id=_case_id(argv, command)))

    # train: every flag
    for flag, values in {
        "--algo": ["PPO", "", "hca", "A2C,HCA"],
        "--credit": ["nope", "", "HCA", "expected-hca"],
        "--env": ["nope-v0", "", "no_such_module:Env-v0", "atari/NoSuchGame", "Pendulum-v1"],
        "--seed": ["x", "1.5", "nan", "inf", "-1", HUGE, "", "1e3"],
        "--stop-timesteps": ["0", "-5", "x", "1.5", "nan", "inf", "", HUGE],
        "--num-env-runners": ["-1", "x", "1.5", "", "nan", HUGE],
        "--num-envs-per-env-runner": ["0", "-1", "x", "1.5", "", HUGE],
        "--checkpoint-every": ["-1", "x", "1.5", "", "nan", HUGE],
        "--keep-checkpoints": ["0", "-1", "x", "", "1.5", "nan", HUGE, "none"],
        "--wandb": ["bogus", "", "ONLINE"],
        "--wandb-project": ["", " ", "a/b", "a#b", "x" * 200],
        "--torch-threads": ["0", "-1", "x", "", "1.5", "nan", "5000"],
        "--progress-every": ["-1", "nan", "x", "", "inf", "1e9"],
        "--address": ["", "host:notaport", "host:70000", "host:0", "http://host:1"],
        "--output": ["", *UNWRITABLE],
    }.items():
        words = {"--algo": "algorithm", "--credit": "credit mode", "--env": "environment"}.get(flag, flag)
        for value in values:
            add(["train", flag, value] if flag == "--output" else _train(flag, value), words)
    add(["train", "--output", "~no_such_user_hca/x"], "no_such_user_hca")
    add(_train("--bogus-flag"), "--bogus-flag")
    add(_train("--seed"), "--seed")  # flag without its value
    add(_train("--resume"), "nothing to resume")
    add(["train", "--output", "a_file"], "a_file")  # a file, not a directory (made by the fixture)
    # train: --set
    for value, words in SET_SYNTAX:
        add(_train("--set", value), words)
    for field, values in SET_BAD.items():
        for value in values:
            add(_train("--set", f"{field}={value}"), field.rstrip("_") if field != "lambda_" else "lambda")
    # the fields of 0.1.0 that were removed: any value, the default included, says so
    for field in REMOVED:
        add(_train("--set", f"{field}=0"), f"{field} was removed")

    # probe: every flag
    def _probe(*extra):
        return ["probe", "--env", "CartPole-v1", "--output", "pr", *extra]

    for flag, values in {
        "--episodes": ["0", "-1", "x", "1.5", "", HUGE],
        "--max-steps": ["0", "-1", "x", "", HUGE],
        "--horizons": ["", "0", "-1", "x", "1,,2", "nan"],
        "--gamma": ["0", "1.5", "nan", "inf", "x", ""],
        "--held-out-fraction": ["0", "1", "nan", "-0.5", "x"],
        "--threshold": ["-1", "nan", "inf", "x"],
        "--num-envs": ["0", "2000", "x", "1.5"],
        "--seed": ["x", "-1", HUGE, ""],
        "--set-env": ["nokey", "=1", "length"],
        "--output": ["a_file", *UNWRITABLE],
        "--outcome": ["", "returns", "rewards", "x", "1"],
        "--window": ["0", "-1", "4097", "x", "1.5", "", HUGE],
    }.items():
        for value in values:
            add(_probe(flag, value), flag)
    add(["probe"], "--env")
    add(["probe", "--env", "nope-v0"], "nope-v0")
    add(["probe", "--env", ""], "env")
    add(["probe", "--env", "Pendulum-v1"], "discrete")
    add(["probe", "--checkpoint", "no_such_dir"], "no_such_dir")
    add(["probe", "--checkpoint", ""], "--checkpoint")
    add(["probe", "--checkpoint", "a_file"], "a_file")
    add(["probe", "--env", "CartPole-v1", "--output", ""], "--output")
    # evaluate: every flag
    for argv, words in [
        (["evaluate", ""], "checkpoint"),
        (["evaluate", "no_such_dir"], "no_such_dir"),
        (["evaluate", "a_file"], "a_file"),
        (["evaluate", "empty_dir"], "empty_dir"),
        (["evaluate", "~no_such_user_hca/c"], "no_such_user_hca"),
        (["evaluate"], "checkpoint"),
        (["evaluate", "no_such_dir", "--episodes", "0"], "--episodes"),
        (["evaluate", "no_such_dir", "--episodes", "-1"], "--episodes"),
        (["evaluate", "no_such_dir", "--episodes", "x"], "--episodes"),
        (["evaluate", "no_such_dir", "--episodes", "1.5"], "--episodes"),
        (["evaluate", "no_such_dir", "--episodes", ""], "--episodes"),
        (["evaluate", "no_such_dir", "--episodes", "nan"], "--episodes"),
        (["evaluate", "no_such_dir", "--episodes", HUGE], "--episodes"),
        (["evaluate", "no_such_dir", "--seed", "1.5"], "--seed"),
        (["evaluate", "no_such_dir", "--video", "empty_dir"], "--video"),  # a directory
        (["evaluate", "no_such_dir", "--video", "a_file/v.gif"], "--video"),
        (["evaluate", "no_such_dir", "--video", "/proc/hca_rllib_no_such/v.gif"], "--video"),
        (["evaluate", "no_such_dir", "--output", "a_file"], "--output"),  # a file, not a directory
        (["evaluate", "no_such_dir", "--output", "dir.json"], "--output"),  # a directory, not a .json file
        (["evaluate", "no_such_dir", "--output", "a_file/e.json"], "--output"),
        (["evaluate", "no_such_dir", "--output", "/proc/hca_rllib_no_such/d"], "--output"),
        (["evaluate", "no_such_dir", "--seed", "x"], "--seed"),
        (["evaluate", "no_such_dir", "--seed", "-1"], "--seed"),
        (["evaluate", "no_such_dir", "--seed", str(2**64)], "--seed"),
        (["evaluate", "no_such_dir", "--video", "x.avi"], "video"),
        (["evaluate", "no_such_dir", "--video", ""], "--video"),
        (["evaluate", "no_such_dir", "--output", ""], "--output"),
        (["evaluate", "no_such_dir", "--greedy", "--stochastic"], "--stochastic"),
        (["evaluate", "no_such_dir", "--bogus"], "--bogus"),
    ]:
        add(argv, words)

    # report: every flag
    for argv, words in [
        (["report"], "RUN_DIR"),
        (["report", ""], "RUN_DIR"),
        (["report", "no_such_dir"], "no_such_dir"),
        (["report", "empty_dir"], "empty_dir"),
        (["report", "a_file"], "a_file"),  # a file, not a run directory
        (["report", "run/results.jsonl"], "results.jsonl"),
        (["report", "run", "a_file"], "a_file"),
        (["report", "~no_such_user_hca/r"], "no_such_user_hca"),
        (["report", "norun"], "no run with a score"),  # run.json, no results yet
        (["report", "run", "--final-fraction", "0"], "--final-fraction"),
        (["report", "run", "--final-fraction", "-1"], "--final-fraction"),
        (["report", "run", "--final-fraction", "2"], "--final-fraction"),
        (["report", "run", "--final-fraction", "nan"], "--final-fraction"),
        (["report", "run", "--final-fraction", "inf"], "--final-fraction"),
        (["report", "run", "--final-fraction", "x"], "--final-fraction"),
        (["report", "run", "--final-fraction", ""], "--final-fraction"),
        (["report", "run", "--output", ""], "--output"),
        (["report", "run", "--output", "a_file"], "a_file"),
        (["report", "run", "--output", "a_file/sub"], "a_file"),
        (["report", "run", "--output", "/proc/hca_rllib_no_such/r"], "--output"),
        (["report", "run", "--bogus"], "--bogus"),
    ]:
        add(argv, words)

    # sweep: every flag
    for flag, values in {
        "--envs": ["", ",", "nope-v0", "CartPole-v1,nope-v0"],
        "--credits": ["nope", "", ",", "a2c,a2c", "HCA"],
        "--seeds": ["x", "", "1.5", "-1", HUGE, "0,0", "nan"],
        "--stop-timesteps": ["0", "-1", "x", "1.5", "nan", "inf", HUGE, ""],
        "--num-env-runners": ["-1", "x", "1.5", HUGE],
        "--num-envs-per-env-runner": ["0", "-1", "x", HUGE],
        "--cpus-per-env-runner": ["-1", "nan", "inf", "x", "1e9"],
        "--scheduler": ["bogus", "", "ASHA"],
        "--metric": ["", "nope", "env_runners/episode_reward_mean", "episode_return_mean",
                     "config/lr", "env_runners/game_return_window_mean",
                     "evaluation/env_runners/episode_return_mean", "learners/default_policy/nope"],
        "--max-failures": ["-2", "x", "1.5", HUGE],
        "--max-concurrent": ["0", "-1", "x", HUGE],
        "--checkpoint-every": ["-1", "x", "1.5", HUGE],
        "--output": ["", "a_file", *UNWRITABLE],
        "--name": ["", "a/b", ".."],
        "--wandb": ["bogus", ""],
        "--wandb-project": ["", "a/b"],
        "--address": ["", "host:notaport"],
    }.items():
        for value in values:
            if flag == "--envs":
                argv = ["sweep", "--output", "sw", "--envs", value]
            elif flag == "--output":
                argv = ["sweep", "--envs", "CartPole-v1", "--output", value]
            else:
                argv = _sweep(flag, value)
            add(argv, "environment" if flag == "--envs" and value.strip(", ") else flag)
    add(["sweep", "--output", "sw", "--envs", "CartPole-v1,CartPole-v1"], "--envs")  # the same trials twice
    # The metric a scheduler reads, mistyped (RLlib's old API stack name): refused, not run to the end.
    add(_sweep("--scheduler", "asha", "--metric", "env_runners/episode_reward_mean"), "episode_return_mean")
    add(_sweep("--scheduler", "pbt", "--metric", "env_runners/game_return_window_mean"), "Atari")
    add(["sweep"], "--envs")
    add(_sweep("--set", "nosuchkey=1"), "nosuchkey")
    add(_sweep("--set", "lr"), "key=value")
    add(_sweep("--resume"), "nothing to resume")
    add(_sweep("--set", "grid:lr=5"), "grid:lr")
    add(_sweep("--set", "grid:lr=[]"), "grid:lr")
    add(_sweep("--set", "grid:lr=[1e-3,-1]"), "lr")
    add(_sweep("--set", "grid:nosuchkey=[1]"), "nosuchkey")
    add(_sweep("--set", "grid:hindsight=[[1,2]]"), "hindsight")
    for field in REMOVED[:4]:
        add(_sweep("--set", f"{field}=0"), f"{field} was removed")
        add(_sweep("--set", f"grid:{field}=[0, 1]"), f"{field} was removed")
    for field, values in SET_BAD.items():  # the first two bad values of each field
        if field in ("env", "seed"):  # the sweep sets these itself (--envs, --seeds)
            continue
        for value in values[:2]:
            add(_sweep("--set", f"{field}={value}"), field.rstrip("_") if field != "lambda_" else "lambda")

    # a tuned example (every script in tuned_examples/atari|minatar shares this parser)
    for flag, values in {
        "--algo": ["PPO", ""],
        "--credit": ["nope", ""],
        "--seed": ["x", "-1", "1.5", HUGE],
        "--stop-timesteps": ["0", "-1", "x", "nan", HUGE],
        "--output": ["", "a_file", *UNWRITABLE],
        "--num-env-runners": ["-1", "x", HUGE],
        "--checkpoint-every": ["-1", "x", "1.5"],
        "--torch-threads": ["0", "-1", "x", "5000"],
        "--wandb": ["bogus", ""],
        "--address": ["", "host:notaport"],
    }.items():
        for value in values:
            add([flag, value], flag, command=TUNED)
    add(["--output", "empty_dir", "--resume"], "nothing to resume", command=TUNED)
    add(["--bogus"], "--bogus", command=TUNED)
    add(["--algo", "A2C", "--credit", "hca"], "A2C", command=TUNED)

    # tuned_examples/sweeps.py
    for flag, values in {
        "--stop-timesteps": ["0", "-1", "x", HUGE],
        "--num-env-runners": ["-1", "x"],
        "--cpus-per-env-runner": ["-1", "nan", "inf", "x"],
        "--output": ["", "a_file", *UNWRITABLE],
        "--scheduler": ["bogus", ""],
        "--max-failures": ["-2", "x"],
        "--wandb": ["bogus"],
        "--address": ["", "host:notaport"],
        "--credits": ["nope", "", ",", "a2c,a2c"],
        "--seeds": ["x", "-1", "", "0,0", HUGE],
    }.items():
        for value in values:
            add(["minatar", "--output", "sw", flag, value] if flag != "--output" else ["minatar", flag, value],
                flag, command="sweeps.py")
    add([], "which", command="sweeps.py")
    add(["nope"], "which", command="sweeps.py")
    add(["minatar", "--output", "sw", "--resume"], "nothing to resume", command="sweeps.py")

    # benchmarks/atari_long.py
    for flag, values in {
        "--cells": ["nope", ""],
        "--target-steps": ["0", "-1", "x", HUGE],
        "--pass-steps": ["0", "-1", "x"],
        "--checkpoint-minutes": ["-1", "nan", "inf", "x", "1e9"],
        "--record-minutes": ["-1", "nan", "inf", "1e9"],
        "--nice": ["20", "-21", "x"],
        "--core": ["-1", "100000", "x"],
        "--on-tests": ["bogus", ""],
        "--out": ["", "a_file", *UNWRITABLE],
        "--runs": ["", "a_file", *UNWRITABLE],
    }.items():
        for value in values:
            add([flag, value], flag, command="atari_long.py")
    return cases


TUNED = "breakout.py"  # tuned_examples/minatar/breakout.py


def _command_main(command):
    """The `main(argv)` that runs `command` in this process."""
    if command == "hca-rllib":
        from hca_rllib.cli import main

        return main
    if command == TUNED:
        from tuned_examples.minatar.breakout import main

        return main
    if command == "sweeps.py":
        from tuned_examples.sweeps import main

        return main
    if command == "atari_long.py":
        import benchmarks.atari_long

        return benchmarks.atari_long.main
    raise AssertionError(command)


CASES = _cases()


# ------------------------------------------------------------------ the check

@pytest.fixture
def cli(tmp_path, monkeypatch, capfd):
    """Run `hca_rllib.cli.main(argv)` in tmp_path with Ray's start refused; returns
    (status, stderr lines, what went wrong or None)."""
    import ray

    import hca_rllib.runner

    def no_ray(*args, **kwargs):
        raise RayStarted()

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(hca_rllib.runner, "init_ray", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "norun").mkdir()  # a run that has not reported yet
    (tmp_path / "norun" / "run.json").write_text(json.dumps({"algo": "HCA", "credit": "hca", "env": "CartPole-v1"}))
    (tmp_path / "norun" / "results.jsonl").write_text("")
    run = tmp_path / "run"  # a minimal run directory for `report`
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"algo": "HCA", "credit": "hca", "env": "CartPole-v1", "seed": 0}))
    (run / "results.jsonl").write_text("".join(
        json.dumps({"iteration": i, "env_steps": 100 * i, "score": float(i), "time_s": float(i)}) + "\n"
        for i in range(1, 4)))

    def call(command, argv):
        problem = None
        try:
            status = _command_main(command)(list(argv))
        except SystemExit as exit_:
            status = exit_.code
        except RayStarted:
            status, problem = None, "started Ray (the input was accepted)"
        except Exception as error:  # noqa: BLE001 - what the user would see as a traceback
            status, problem = None, f"traceback: {type(error).__name__}: {str(error)[:300]}"
        out, err = capfd.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        return status, lines, problem

    return call


def clean(status, lines, problem, words, command="hca-rllib"):
    """None if the outcome is clean, else what is wrong with it."""
    if problem:
        return problem
    if status != 2:
        return f"exit status {status!r}, not 2 (stderr {lines[:3]})"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr, not 1: {lines[:4]}"
    prefix = "hca-rllib: error:" if command == "hca-rllib" else ": error: "
    if "Traceback" in lines[0] or prefix not in lines[0] or (command == "hca-rllib") != lines[0].startswith(prefix):
        return f"not a one-line error: {lines[0]!r}"
    if words.lower() not in lines[0].lower():
        return f"the error does not name {words!r}: {lines[0]!r}"
    return None


@pytest.mark.parametrize("command, argv, words", CASES)
def test_bad_input_is_a_one_line_error(command, argv, words, cli):
    wrong = clean(*cli(command, argv), words, command)
    assert wrong is None, f"{_case_id(argv, command)}: {wrong}"


def _flags_in_help(command, capsys):
    """The --flags a script's --help lists."""
    import re

    with pytest.raises(SystemExit):
        _command_main(command)(["--help"])
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out))


# Flags that take no value: nothing malformed to give them (--resume has its own cases).
SWITCHES = {"--help", "--resume", "--no-tensorboard", "--greedy", "--stochastic", "--new-attempt",
            "--report-only", "--quick"}


def test_the_table_covers_every_flag_and_field(capsys):
    """Every flag of every command (every `hca-rllib` subcommand and every script with its
    own parser) and every project field has bad values above, so a new flag or field
    cannot go untested."""
    from hca_rllib.cli import make_parser
    from hca_rllib.fields import HCA_TRAINING_DEFAULTS, REMOVED_FIELDS

    parser = make_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    tried = {}
    for param in CASES:
        command, argv, _ = param.values
        key = argv[0] if command == "hca-rllib" and argv else command
        tried.setdefault(key, set()).update(a for a in argv if a.startswith("--"))
    for name, sub in subcommands.items():
        flags = {opt for action in sub._actions for opt in action.option_strings if opt.startswith("--")}
        missing = flags - tried[name] - SWITCHES
        assert not missing, f"hca-rllib {name}: no bad values for {sorted(missing)}"
    for command in (TUNED, "sweeps.py", "atari_long.py"):
        flags = _flags_in_help(command, capsys)
        assert len(flags) > 5, (command, flags)
        missing = flags - tried[command] - SWITCHES
        assert not missing, f"{command}: no bad values for {sorted(missing)}"
    assert not set(HCA_TRAINING_DEFAULTS) - set(SET_BAD), "a project field without bad values"
    assert set(REMOVED) == set(REMOVED_FIELDS), "a removed field without its case"
    assert len(CASES) >= 600
