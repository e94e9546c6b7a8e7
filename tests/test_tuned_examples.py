"""tuned_examples/: every script imports, its config validates for HCA and A2C with the
hyperparameters its docstring states, and one script trains end to end."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hca_rllib.fields import HCA_TRAINING_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ATARI = {
    "pong": ("Pong", 17.3),
    "breakout": ("Breakout", 279.8),
    "beam_rider": ("BeamRider", 2890),
    "qbert": ("Qbert", 3882),
    "seaquest": ("Seaquest", 1721),
    "space_invaders": ("SpaceInvaders", 627),
    "enduro": ("Enduro", 0),
}
MINATAR = {
    "breakout": "Breakout",
    "asterix": "Asterix",
    "freeway": "Freeway",
    "seaquest": "Seaquest",
    "space_invaders": "SpaceInvaders",
}
SCRIPTS = [("atari", m) for m in ATARI] + [("minatar", m) for m in MINATAR]


def load(family, module):
    return importlib.import_module(f"tuned_examples.{family}.{module}")


def test_every_script_file_is_listed_and_in_the_readme():
    on_disk = {(p.parent.name, p.stem) for family in ("atari", "minatar")
               for p in (ROOT / "tuned_examples" / family).glob("*.py") if p.stem != "__init__"}
    assert on_disk == set(SCRIPTS)
    readme = (ROOT / "tuned_examples" / "README.md").read_text()
    for family, module in SCRIPTS:
        assert f"tuned_examples/{family}/{module}.py" in readme


def test_games_table_is_the_scripts_and_the_readme_states_its_figures():
    from tuned_examples import games

    assert {(f, m) for f, rows in games.GAMES.items() for m in rows} == set(SCRIPTS)
    readme = (ROOT / "tuned_examples" / "README.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines() if line.startswith("| [")}
    for module, row in games.ATARI.items():
        line = rows[f"[`tuned_examples/atari/{module}.py`](atari/{module}.py)"]
        assert f"A2C {row['a2c_score']}" in line, module
    for module, row in games.MINATAR.items():
        line = rows[f"[`tuned_examples/minatar/{module}.py`](minatar/{module}.py)"]
        assert all(f"{algo} {score}" in line for algo, (score, _) in row["measured"].items()), module
    with pytest.raises(ValueError, match=r"no tuned example atari/tetris; known: \['atari/pong'"):
        games.game_row("atari", "tetris")


@pytest.mark.parametrize("family,module", SCRIPTS)
def test_script_is_a_few_lines_and_help_states_its_facts(family, module, capsys):
    from tuned_examples import games

    mod = load(family, module)
    code = [line for line in Path(mod.__file__).read_text().split('"""')[-1].splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    assert len(code) <= 8, code  # the facts are data (games.py), the code is shared
    with pytest.raises(SystemExit) as exit_info:
        mod.main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    row = games.game_row(family, module)
    assert row["name"] in text and "--stop-timesteps" in text
    if family == "atari":
        assert f"Expected: A2C {row['a2c_score']}" in text and "10M agent steps (40M frames)" in text
        assert "(docs/benchmarks.md)" in mod.EXPECTED["A2C"]["source"]
    else:
        for algo, (score, speed) in row["measured"].items():
            assert f"{algo} {score:.2f}" in text and f"{speed:,} steps/s" in mod.EXPECTED[algo]["source"]
    assert f"python tuned_examples/{family}/{module}.py --algo A2C" in text
    assert "shared/" not in text + json.dumps(mod.EXPECTED) + mod.__doc__


@pytest.mark.parametrize("family,module", SCRIPTS)
def test_script_constants_and_config_validate_for_both_algorithms(family, module):
    mod = load(family, module)
    game = ATARI[module][0] if family == "atari" else MINATAR[module]
    assert mod.ENV == f"{family}/{game}"
    assert isinstance(mod.BUDGET, int) and mod.BUDGET > 0
    assert set(mod.EXPECTED) == {"A2C", "HCA"}
    for algo in ("A2C", "HCA"):
        assert mod.EXPECTED[algo]["source"], (module, algo)
    for algo, credit in (("HCA", HCA_TRAINING_DEFAULTS["credit"]), ("A2C", "a2c")):
        config = mod.config(algo)
        config.validate()
        assert config.env == mod.ENV
        assert config.credit == credit
        assert type(config).__name__ == f"{algo}Config"
        assert config.entropy_coeff == 0.01
        assert config.lr == 7e-4
        assert config.gamma == 0.99 and config.lambda_ == 1.0
        assert config.grad_clip == 0.5 and config.grad_clip_by == "global_norm"
    assert mod.__doc__ and "python tuned_examples/" in mod.__doc__


@pytest.mark.parametrize("module", list(ATARI))
def test_atari_protocol_and_sb3_zoo_hyperparameters(module):
    mod = load("atari", module)
    game, a2c_score = ATARI[module]
    config = mod.config("HCA")
    assert config.env == f"atari/{game}"
    assert config.resolved_frame_stack == 4
    assert config.env_config.get("repeat_action_probability", 0.0) == 0.0  # classic protocol
    assert config.gym_env_vectorize_mode == "vector_entry_point"
    assert config.num_envs_per_env_runner == 16
    assert config.rollout_fragment_length == 5
    assert config.train_batch_size_per_learner == 80
    assert config.vf_loss_coeff == 0.25
    from hca_rllib.learner import RMSPROP_ALPHA, RMSPROP_EPS

    assert (RMSPROP_ALPHA, RMSPROP_EPS) == (0.99, 1e-5)  # the SB3 zoo's, the package's own
    assert mod.BUDGET == 10_000_000
    assert mod.EXPECTED["A2C"]["score"] == a2c_score
    assert "zoo" in mod.EXPECTED["A2C"]["source"]
    assert mod.EXPECTED["HCA"]["score"] is None
    assert "not measured" in mod.EXPECTED["HCA"]["source"]


@pytest.mark.parametrize("family,module", [("atari", "pong"), ("minatar", "seaquest")])
def test_batch_grows_with_env_runners(family, module):
    mod = load(family, module)
    one = mod.config("A2C")
    four = mod.config("A2C", num_env_runners=4)
    four.validate()
    per_runner = one.num_envs_per_env_runner * one.rollout_fragment_length
    assert one.train_batch_size_per_learner == per_runner
    assert four.num_env_runners == 4
    assert four.rollout_fragment_length == one.rollout_fragment_length
    assert four.train_batch_size_per_learner == 4 * per_runner


@pytest.mark.parametrize("module", list(MINATAR))
def test_minatar_hyperparameters_and_measured_expectation(module):
    mod = load("minatar", module)
    config = mod.config("A2C")
    assert config.num_envs_per_env_runner == 8
    assert config.rollout_fragment_length == 64
    assert config.train_batch_size_per_learner == 512
    assert mod.BUDGET <= 3_000_000  # fits a 2-core machine
    for algo in ("A2C", "HCA"):
        assert "not measured yet" in mod.EXPECTED[algo]["full_budget"]


def test_credit_choices():
    from tuned_examples.minatar.breakout import config

    assert config("HCA", "c2a2c").credit == "c2a2c"
    with pytest.raises(ValueError, match="A2C is credit='a2c'"):
        config("A2C", "hca")
    with pytest.raises(ValueError, match="unknown credit"):
        config("HCA", "nope")


def test_bad_arguments_exit_before_ray_starts(tmp_path, capsys):
    from tuned_examples.common import main
    from tuned_examples.minatar.breakout import BUDGET, EXPECTED, config

    def run(*argv):
        with pytest.raises(SystemExit) as exit_info:
            main(config, budget=BUDGET, expected=EXPECTED, default_output=str(tmp_path / "x"),
                 argv=list(argv))
        return exit_info.value.code, capsys.readouterr().err

    code, err = run("--resume", "--output", str(tmp_path / "none"))
    assert code == 2 and "nothing to resume" in err
    code, err = run("--algo", "A2C", "--credit", "hca", "--output", str(tmp_path / "y"))
    assert code == 2 and "A2C is credit='a2c'" in err
    code, err = run("--stop-timesteps", "0", "--output", str(tmp_path / "z"))
    assert code == 2 and "--stop-timesteps" in err
    code, err = run("--algo", "PPO")
    assert code == 2
    taken = tmp_path / "taken"  # a directory that holds a run is not overwritten
    taken.mkdir()
    (taken / "run.json").write_text("{}")
    (taken / "results.jsonl").write_text("")
    code, err = run("--output", str(taken))
    assert code == 2 and "already holds a run" in err


@pytest.mark.slow  # trains through the script, then resumes it
def test_script_runs_end_to_end(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "tuned_examples/minatar/breakout.py", "--algo", "A2C",
           "--stop-timesteps", "600", "--output", str(out), "--wandb", "off"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert lines and lines[-1]["env_steps"] >= 600
    checkpoints = sorted((out / "checkpoints").glob("iter_*"))
    assert checkpoints and (checkpoints[-1] / "hca_checkpoint.json").exists()
    info = json.loads((out / "run.json").read_text())
    assert info["algo"] == "A2C" and info["credit"] == "a2c"
    assert info["env"] == "minatar/Breakout" and info["seed"] == 0
    assert info["stop_timesteps"] == 600
    assert "tuned_examples/minatar/breakout.py" in info["command"]
    # --resume continues it (algorithm and seed from run.json) to a larger budget.
    resume = [sys.executable, "tuned_examples/minatar/breakout.py", "--resume", "--output", str(out),
              "--stop-timesteps", str(lines[-1]["env_steps"] + 1), "--wandb", "off"]
    proc = subprocess.run(resume, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming from" in proc.stdout
    resumed = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in resumed] == list(range(1, len(lines) + 2))
    assert json.loads((out / "run.json").read_text())["algo"] == "A2C"
