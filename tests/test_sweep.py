"""`hca-rllib sweep`: a 2 envs x 2 credit modes x 2 seeds grid on 2 cores, a trial that
fails and resumes from its checkpoint, and the resource arithmetic."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hca_rllib.sweep import max_concurrent_trials, run_sweep, trial_resources


def test_resources_fit_the_cluster():
    assert trial_resources(0, 0.5) == 1.0
    assert trial_resources(2, 0.5) == 2.0
    assert max_concurrent_trials(2, 1.0) == 2
    assert max_concurrent_trials(2, 1.5) == 1
    with pytest.raises(ValueError, match="a trial needs 3 CPUs .* but the cluster has 2"):
        max_concurrent_trials(2, trial_resources(4, 0.5))


@pytest.mark.slow  # Tune trials
def test_sweep_2_envs_x_2_credits_x_2_seeds_completes_with_a_report(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hca_rllib", "sweep", "--envs", "minatar/Breakout,HCA/KeyToDoor-v0",
         "--credits", "a2c,hca", "--seeds", "0,1", "--stop-timesteps", "1024",
         "--num-envs-per-env-runner", "4", "--set", "train_batch_size_per_learner=256",
         "--checkpoint-every", "2", "--output", "sweeps", "--name", "grid", "--wandb", "off"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,  # a relative --output
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "8 trials, 0 errored" in proc.stdout
    trials = [p for p in (tmp_path / "sweeps" / "grid").iterdir() if (p / "run.json").exists()]
    assert len(trials) == 8
    seen = set()
    for trial in trials:
        run = json.loads((trial / "run.json").read_text())
        seen.add((run["env"], run["credit"], run["seed"]))
        lines = [json.loads(x) for x in (trial / "results.jsonl").read_text().splitlines()]
        assert lines[-1]["env_steps"] >= 1024
        assert list(trial.glob("checkpoint_*"))
    assert len(seen) == 8
    page = (tmp_path / "sweeps" / "grid" / "report" / "report.md").read_text()
    for env in ("minatar/Breakout", "HCA/KeyToDoor-v0"):
        assert f"| {env} | A2C | 2 |" in page and f"| {env} | HCA (hca) | 2 |" in page


@pytest.mark.slow  # Tune trials
@pytest.mark.parametrize("kill", [False, True], ids=["raises", "sigkill"])
def test_failed_trial_is_retried_from_its_checkpoint(ray_local, tmp_path, kill):
    """The trial's env fails mid-run in the trial's own process: by an exception, or by
    SIGKILL of the whole trial process (a crash, an OOM kill)."""
    marker = tmp_path / "failed_once"
    results, _ = run_sweep(
        envs=["hca_rllib.testing:FailOnce-v0"], credits=["hca"], seeds=[0], stop_timesteps=1536,
        storage_path=str(tmp_path), name="retry", num_envs_per_env_runner=4,
        overrides={"env_config": {"env_id": "CartPole-v1", "fail_at_step": 700, "marker": str(marker),
                                  "kill": kill},
                   "train_batch_size_per_learner": 256},
        checkpoint_every=1, max_failures=2, wandb="off", report=False,
    )
    assert marker.exists()  # the trial did fail once
    assert not results.errors
    trial = next(p for p in (tmp_path / "retry").iterdir() if (p / "result.json").exists())
    reported = [json.loads(x)["training_iteration"] for x in (trial / "result.json").read_text().splitlines()]
    # Resumed from the checkpoint: iterations never start over from 1.
    assert reported == sorted(set(reported)) and reported[0] == 1 and len(reported) >= 6
    lines = [json.loads(x) for x in (trial / "results.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == reported
    assert lines[-1]["env_steps"] >= 1536


def test_schedulers():
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    from hca_rllib.sweep import make_scheduler

    assert make_scheduler("none", 1000) is None
    assert isinstance(make_scheduler("asha", 1000), ASHAScheduler)
    assert isinstance(make_scheduler("pbt", 1000), PopulationBasedTraining)
    with pytest.raises(ValueError, match="scheduler must be none, asha or pbt"):
        make_scheduler("hyperband", 1000)


@pytest.mark.parametrize("which, trials", [("atari", 7 * 4 * 3), ("minatar", 5 * 4 * 5)])
def test_tuned_example_sweeps_are_valid(which, trials):
    from ray.tune.search.variant_generator import generate_variants

    from hca_rllib import HCAConfig
    from hca_rllib.sweep import build_param_space
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tuned_examples.sweeps import sweep_kwargs

    kwargs = sweep_kwargs(which, num_env_runners=2)
    assert kwargs["overrides"]["train_batch_size_per_learner"] == 2 * kwargs["num_envs_per_env_runner"] * \
        kwargs["overrides"]["rollout_fragment_length"]
    space = build_param_space(kwargs["envs"], kwargs["credits"], kwargs["seeds"], kwargs["overrides"],
                              kwargs["num_env_runners"], kwargs["num_envs_per_env_runner"], 0.5)
    variants = [config for _, config in generate_variants(space)]
    assert len(variants) == trials
    assert {v["hindsight_loss_coeff"] for v in variants if v["credit"] == "a2c"} == {0.0}
    assert {v["hindsight_loss_coeff"] for v in variants if v["credit"] != "a2c"} == {1.0}
    if which == "atari":  # the tuned example's settings, not a hand copy that can drift
        from tuned_examples.common import atari_config

        tuned = atari_config("Pong", num_env_runners=2)
        for key, value in kwargs["overrides"].items():
            assert getattr(tuned, key) == value, key
    for env in kwargs["envs"]:  # every trial's config validates
        config = HCAConfig().update_from_dict({**kwargs["overrides"], "env": env})
        config.validate()
