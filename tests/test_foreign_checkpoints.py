"""Foreign or incompatible checkpoints: `evaluate` and `train --resume` on a checkpoint of
another algorithm (RLlib's PPO), for another environment, made with a module of another
shape (`hindsight`), by another package version whose module does not load, or a
directory that is not a checkpoint: each is exit status 2 with one line naming the
mismatch, and no traceback. The resume checks run before Ray starts (tested with Ray's
start patched to raise; the unchanged run is the control that does reach it).

A real run of 0.1.0 (`tests/data/hca-0.1.0-cartpole-run.tar.gz`: `hca-rllib train` of
commit 2888b23 on CartPole, 2 iterations, hiddens [8]), whose config holds every field
0.2.0 removed at its default, loads: `evaluate`, `--resume` and
`Algorithm.from_checkpoint`; the same with one removed field at another value fails in
one line naming it.

One real CartPole run and one PPO checkpoint are made once for the module (subprocesses).
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import ray  # noqa: F401  (imported here, not under a test's capture: Ray's log handlers keep their stream)

import hca_rllib.cli  # noqa: F401

pytestmark = pytest.mark.slow  # the module's fixture trains (a CLI subprocess) and builds PPO

# One process, one Ray start: a short CartPole run of `hca-rllib train`, then RLlib's PPO.
MAKE_SCRIPT = """
import sys
from hca_rllib.cli import main
run, ppo = sys.argv[1:]
code = main(["train", "--env", "CartPole-v1", "--stop-timesteps", "256", "--num-envs-per-env-runner", "2",
             "--set", "train_batch_size_per_learner=128", "--wandb", "off", "--no-tensorboard",
             "--output", run])
assert code == 0, code
from ray.rllib.algorithms.ppo import PPOConfig
config = (PPOConfig().environment("CartPole-v1")
          .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
          .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1))
algo = config.build_algo()
algo.save_to_path(ppo)
algo.stop()
"""


class RayStarted(BaseException):
    pass


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(a CartPole run directory of `hca-rllib train`, an RLlib PPO checkpoint)."""
    work = tmp_path_factory.mktemp("foreign")
    run, ppo = work / "run", work / "ppo"
    for attempt in range(2):  # on a busy machine Ray's node start can time out: once more
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(ppo, ignore_errors=True)
        proc = subprocess.run([sys.executable, "-c", MAKE_SCRIPT, str(run), str(ppo)],
                              capture_output=True, text=True, timeout=900)
        if proc.returncode == 0 or "timed out during startup" not in proc.stderr:
            break
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, ppo


def newest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("iter_*"))[-1]


def rehash(checkpoint: Path, **meta_changes) -> None:
    """Make the checkpoint's hashes match its (changed) files: what a checkpoint made
    elsewhere has, so that only the mismatch itself is tested."""
    from hca_rllib.runner import CHECKPOINT_META, file_hashes

    path = checkpoint / CHECKPOINT_META
    meta = json.loads(path.read_text()) if path.exists() else {"iteration": 1, "env_steps": 128}
    meta.pop("files", None)
    files = file_hashes(checkpoint)
    files.pop(CHECKPOINT_META, None)
    path.write_text(json.dumps({**meta, **meta_changes, "files": files}))


def edit_config_state(checkpoint: Path, **changes) -> None:
    ctor_path = checkpoint / "class_and_ctor_args.pkl"
    ctor = pickle.loads(ctor_path.read_bytes())
    ctor["ctor_args_and_kwargs"][0][0].update(changes)
    ctor_path.write_bytes(pickle.dumps(ctor))


@pytest.fixture
def cli(monkeypatch, capfd, tmp_path):
    """`hca_rllib.cli.main(argv)` in this process with Ray's start refused: returns
    (status, stderr lines), or raises RayStarted."""
    import ray

    import hca_rllib.runner
    from hca_rllib.cli import main

    def no_ray(*args, **kwargs):
        raise RayStarted()

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(hca_rllib.runner, "init_ray", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)

    def call(*argv):
        capfd.readouterr()
        try:
            status = main(list(argv))
        except SystemExit as exit_:
            status = exit_.code
        err = capfd.readouterr().err
        return status, [line for line in err.splitlines() if line.strip()]

    return call


def one_error(result, *words):
    status, lines = result
    errors = [line for line in lines if not line.startswith("warning:")]
    assert status == 2 and len(errors) == 1 and errors[0].startswith("hca-rllib: error:"), lines
    assert not any("Traceback" in line for line in lines), lines
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def resume(cli, run: Path):
    return cli("train", "--resume", "--output", str(run), "--stop-timesteps", "100000")


def test_the_unchanged_run_resumes_up_to_ray(made, cli, tmp_path):
    """The control: the checks pass a run's own checkpoint (so a mismatch is the cause below)."""
    run = tmp_path / "run"
    shutil.copytree(made[0], run)
    with pytest.raises(RayStarted):
        resume(cli, run)


def test_another_algorithm(made, cli, tmp_path):
    run, ppo = made
    one_error(cli("evaluate", str(ppo)), "of algorithm PPO", "not one of ['HCA', 'A2C']")
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    target = newest(copy)
    shutil.rmtree(target)
    shutil.copytree(ppo, target)  # PPO's files where the newest checkpoint was, hashes valid
    rehash(target)
    one_error(resume(cli, copy), "of algorithm PPO")


def test_another_environment(made, cli, tmp_path):
    run, _ = made
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    info = json.loads((copy / "run.json").read_text())
    info["args"]["env"] = info["env"] = "Acrobot-v1"
    (copy / "run.json").write_text(json.dumps(info))
    one_error(resume(cli, copy), "made for env 'CartPole-v1'", "this run is for env 'Acrobot-v1'")

    # evaluate: the checkpoint's config says Acrobot (6 observations), its module takes 4
    checkpoint = tmp_path / "acrobot_checkpoint"
    shutil.copytree(newest(run), checkpoint)
    edit_config_state(checkpoint, env="Acrobot-v1")
    rehash(checkpoint)
    one_error(cli("evaluate", str(checkpoint), "--episodes", "1"), "does not fit env 'Acrobot-v1'")


def test_a_module_of_another_shape(made, cli, tmp_path):
    """Resuming under another classifier (other `hindsight` options) would fail in
    load_state_dict with a raw shape error: one line names the field instead."""
    from hca_rllib.runner import checkpoint_algorithm

    copy = tmp_path / "run"
    shutil.copytree(made[0], copy)
    info = json.loads((copy / "run.json").read_text())
    info["args"]["set"] = [*info["args"]["set"], "hindsight={'hiddens': [32]}"]
    (copy / "run.json").write_text(json.dumps(info))
    one_error(resume(cli, copy), "module of other shape", "'hiddens': [128, 128]", "'hiddens': [32]")
    # the outcome shapes the classifier's input: a checkpoint without the option (made
    # before it existed) holds the return outcome, so asking for the reward outcome is refused
    info["args"]["set"] = [*info["args"]["set"][:-1], "hindsight={'outcome': 'reward'}"]
    (copy / "run.json").write_text(json.dumps(info))
    stored = checkpoint_algorithm(newest(copy))[1]["hindsight"]
    edit_config_state(newest(copy), hindsight={k: v for k, v in stored.items() if k not in ("outcome", "window")})
    rehash(newest(copy))
    one_error(resume(cli, copy), "module of other shape", "'outcome': 'reward'")


def test_another_package_version_with_an_incompatible_module(made, cli, tmp_path):
    checkpoint = tmp_path / "old_checkpoint"
    shutil.copytree(newest(made[0]), checkpoint)
    # The module's class under another name, as a version that renamed it would have it.
    module_ctor = checkpoint.joinpath("learner_group", "learner", "rl_module", "default_policy",
                                      "class_and_ctor_args.pkl")
    data = module_ctor.read_bytes()
    assert b"HCATorchRLModule" in data
    module_ctor.write_bytes(data.replace(b"HCATorchRLModule", b"HCATorchRLModulX"))
    rehash(checkpoint, package_version="0.0.1")
    from hca_rllib import __version__

    one_error(cli("evaluate", str(checkpoint), "--episodes", "1"),
              f"its module does not load (made by hca_rllib 0.0.1; this is {__version__})")


def test_restore_failure_is_one_line_naming_the_version(tmp_path):
    """`restore_algorithm` (the resume path past the checks, and the Python API's): a
    restore that fails, as load_state_dict does on a shape mismatch, is one line."""
    from hca_rllib.runner import CHECKPOINT_META, CheckpointError, restore_algorithm

    (tmp_path / CHECKPOINT_META).write_text(json.dumps({"package_version": "0.0.1"}))

    class Algo:
        def restore_from_path(self, path):
            raise RuntimeError("Error(s) in loading state_dict for HCATorchRLModule:\n\tsize mismatch for x")

    with pytest.raises(CheckpointError) as error:
        restore_algorithm(Algo(), tmp_path)
    message = str(error.value)
    assert "\n" not in message and "made by hca_rllib 0.0.1" in message
    assert "RuntimeError: Error(s) in loading state_dict for HCATorchRLModule:" in message


def test_a_directory_that_is_not_a_checkpoint(made, cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    one_error(cli("evaluate", str(empty)), "is neither a checkpoint nor a run directory")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "rllib_checkpoint.json").write_text("{}")
    one_error(cli("evaluate", str(fake)), "is not an algorithm checkpoint")
    garbage = tmp_path / "garbage"
    shutil.copytree(newest(made[0]), garbage)
    (garbage / "class_and_ctor_args.pkl").write_bytes(b"not a pickle")
    rehash(garbage)
    one_error(cli("evaluate", str(garbage)), "unreadable class_and_ctor_args.pkl")
    one_error(resume(cli, empty), "nothing to resume")


# --------------------------------------------------------------- a 0.1.0 checkpoint

OLD_RUN = Path(__file__).resolve().parent / "data" / "hca-0.1.0-cartpole-run.tar.gz"


@pytest.fixture
def old_run(tmp_path) -> Path:
    """A copy of the 0.1.0 run directory (its checkpoint: `checkpoints/iter_000002`)."""
    import tarfile

    with tarfile.open(OLD_RUN) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "hca"


def test_the_0_1_0_checkpoint_holds_the_removed_fields_at_their_defaults(old_run):
    from hca_rllib.fields import REMOVED_FIELDS
    from hca_rllib.runner import checkpoint_version

    checkpoint = newest(old_run)
    assert checkpoint_version(checkpoint) == "0.1.0"
    # The raw pickle: `runner.checkpoint_algorithm` returns it upgraded (removed fields dropped)
    state = pickle.loads((checkpoint / "class_and_ctor_args.pkl").read_bytes())["ctor_args_and_kwargs"][0][0]
    assert {field: state[field] for field in REMOVED_FIELDS} == {f: d for f, (d, _) in REMOVED_FIELDS.items()}
    assert state["hindsight"]["balanced"] is False and state["hindsight"]["num_bins"] == 21


def test_a_0_1_0_checkpoint_evaluates_and_resumes(old_run, cli, tmp_path):
    status, lines = cli("evaluate", str(old_run), "--episodes", "1", "--output", str(tmp_path / "e.json"))
    assert status == 0, lines
    assert json.loads((tmp_path / "e.json").read_text())["episodes"] == 1
    with pytest.raises(RayStarted):  # every check of the resume passed
        resume(cli, old_run)


@pytest.mark.parametrize("change, words", [
    ({"hindsight_memory": 4}, "hindsight_memory=4 was removed in 0.2.0"),
    ({"trust_calibration": "weights"}, "trust_calibration='weights' was removed in 0.2.0"),
    ({"hindsight": {"hiddens": [8], "balanced": True}}, "hindsight.balanced=True was removed in 0.2.0"),
])
def test_a_0_1_0_checkpoint_with_a_removed_field_set_fails_in_one_line(old_run, cli, change, words):
    checkpoint = newest(old_run)
    edit_config_state(checkpoint, **change)
    rehash(checkpoint)
    one_error(cli("evaluate", str(checkpoint), "--episodes", "1"), words, "only its default")
    one_error(resume(cli, old_run), words)


def test_a_0_1_0_checkpoint_restores_into_an_algorithm_and_trains(old_run, ray_local):
    from ray.rllib.algorithms.algorithm import Algorithm

    import hca_rllib

    algo = Algorithm.from_checkpoint(str(newest(old_run)))
    try:
        assert type(algo.config) is hca_rllib.HCAConfig and algo.config.hindsight["hiddens"] == [8]
        assert not hasattr(algo.config, "hindsight_memory")
        module = hca_rllib.training_module(algo)
        assert float(module.return_encoder.count) == 1036.0  # the 0.1.0 run's steps, restored
        assert float(module.trust_evidence[0, 0]) > 0
        result = algo.train()
        assert result["learners"]["default_policy"]["num_module_steps_trained"] > 0
    finally:
        algo.stop()
