"""A remote EnvRunner whose environment raises mid-episode is replaced, training reaches
its budget, and the failure is counted in results.jsonl."""

import json
import os

from hca_rllib import HCAConfig
from hca_rllib.runner import run_training


def test_failing_env_runner_is_replaced_and_counted(ray_local, tmp_path):
    marker = tmp_path / "failed_once"
    config = (
        HCAConfig()
        .environment("HCA/FailOnce-v0", env_config={"env_id": "CartPole-v1", "fail_at_step": 150,
                                                    "marker": str(marker)})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.5)
        .training(train_batch_size_per_learner=256)
        .fault_tolerance(delay_between_env_runner_restarts_s=1.0)  # RLlib's default waits 60 s
        .debugging(seed=0)
    )
    last = run_training(config, tmp_path / "run", 2000, run_info={"env": "HCA/FailOnce-v0"},
                        checkpoint_every=0, wandb="off", tensorboard=False, progress=False)
    assert marker.exists()  # the env did raise, in the EnvRunner's process
    assert int(marker.read_text()) != os.getpid()
    lines = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert last["env_steps"] >= 2000  # training reached its budget
    assert lines[-1]["env_runner_restarts"] + lines[-1]["env_runners_dropped"] >= 1  # counted, not hidden
    assert lines[-1]["healthy_env_runners"] == 1  # replaced
    assert [line["iteration"] for line in lines] == list(range(1, len(lines) + 1))
