"""A remote EnvRunner whose environment raises mid-episode is replaced, training reaches
its budget, and the failure is counted in results.jsonl; the fault-injection env lives in
`hca_rllib.testing`, out of the default registry."""

import json
import os
import subprocess
import sys

import pytest

from hca_rllib import HCAConfig
from hca_rllib.runner import run_training
from hca_rllib.testing import FAIL_ONCE_ENV_ID


@pytest.mark.slow  # waits for RLlib to restart the EnvRunner (about 30 s)
def test_failing_env_runner_is_replaced_and_counted(ray_local, tmp_path):
    marker = tmp_path / "failed_once"
    config = (
        HCAConfig()
        .environment(FAIL_ONCE_ENV_ID, env_config={"env_id": "CartPole-v1", "fail_at_step": 150,
                                                   "marker": str(marker)})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.5)
        .training(train_batch_size_per_learner=256)
        .fault_tolerance(delay_between_env_runner_restarts_s=1.0)  # RLlib's default waits 60 s
        .debugging(seed=0)
    )
    last = run_training(config, tmp_path / "run", 2000, run_info={"env": FAIL_ONCE_ENV_ID},
                        checkpoint_every=0, wandb="off", tensorboard=False, progress=False)
    assert marker.exists()  # the env did raise, in the EnvRunner's process
    assert int(marker.read_text()) != os.getpid()
    lines = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert last["env_steps"] >= 2000  # training reached its budget
    assert lines[-1]["env_runner_restarts"] + lines[-1]["env_runners_dropped"] >= 1  # counted, not hidden
    assert lines[-1]["healthy_env_runners"] == 1  # replaced
    assert [line["iteration"] for line in lines] == list(range(1, len(lines) + 1))


def test_fault_injection_is_not_in_the_default_registry():
    """A default `import hca_rllib` registers no fault-injection env: not in gymnasium's
    registry, not among the resolver's ids. Importing `hca_rllib.testing` (what the
    `module:id` form does in any process) registers it."""
    code = (
        "import sys, gymnasium, hca_rllib\n"
        "from hca_rllib.envs import register_all, resolve_env, EnvResolutionError\n"
        "ids = register_all()\n"
        "assert ids and 'HCA/KeyToDoor-v0' in ids, ids\n"
        "leaked = [i for i in list(gymnasium.envs.registry) + list(ids) if 'FailOnce' in i]\n"
        "assert not leaked, leaked\n"
        "assert 'hca_rllib.testing' not in sys.modules\n"
        "for old in ('HCA/FailOnce-v0', 'FailOnce-v0'):\n"
        "    try:\n"
        "        resolve_env(old)\n"
        "    except EnvResolutionError as error:\n"
        "        assert 'unknown environment id' in str(error), error\n"
        "    else:\n"
        "        raise AssertionError(old + ' resolved')\n"
        "info = resolve_env('hca_rllib.testing:FailOnce-v0', {'marker': '/nonexistent/m'})\n"
        "assert info.action_space.n == 2 and 'FailOnce-v0' in gymnasium.envs.registry\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.slow  # builds an algorithm with a remote EnvRunner (about 20 s)
def test_env_runner_that_never_comes_back_is_refused_after_the_restore_timeout(ray_local):
    """A lost EnvRunner that Ray cannot bring back (here: no restarts allowed; on a
    cluster: no node left offering its resources) stops the run with a one-line error
    after `env_runner_restore_timeout_s`, instead of a hang or empty iterations."""
    import signal
    import time

    config = (
        HCAConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2, num_cpus_per_env_runner=0.5)
        .training(train_batch_size_per_learner=64)
        .fault_tolerance(max_num_env_runner_restarts=0, env_runner_restore_timeout_s=3.0,
                         env_runner_health_probe_timeout_s=1.0)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        first = algo.train()
        assert first["fault_tolerance"]["num_healthy_workers"] == 1
        [pid] = algo.env_runner_group.foreach_env_runner(lambda runner: os.getpid(), local_env_runner=False)
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match=r"all 1 remote EnvRunners lost and none restored within "
                                               r"env_runner_restore_timeout_s=3 s"):
            algo.train()
        assert time.monotonic() - started >= 3.0
        assert algo.iteration == 1  # the refused iteration is not counted
    finally:
        algo.stop()


def test_env_runners_lost_counts_the_restored_and_the_still_missing():
    from hca_rllib.runner import env_runners_lost, result_line

    assert env_runners_lost(0, 2, 2) == 0
    assert env_runners_lost(0, 1, 2) == 1  # one out, not back yet
    assert env_runners_lost(1, 2, 2) == 1  # one lost, restored
    assert env_runners_lost(3, 1, 2) == 4  # restored three times, one out now
    assert env_runners_lost(0, 0, 0) == 0  # no remote EnvRunners: the local one samples
    assert env_runners_lost(None, 1, 2) is None and env_runners_lost(0, 1, None) is None
    result = {"training_iteration": 5, "num_env_steps_sampled_lifetime": 100,
              "fault_tolerance": {"num_remote_worker_restarts": 1, "num_healthy_workers": 1,
                                  "num_env_runners_dropped_lifetime": 0},
              "config": HCAConfig().env_runners(num_env_runners=2)}
    assert result_line(result, 1.0, 100.0)["env_runners_lost"] == 2
    result["config"] = {"num_env_runners": 1}  # as Tune passes it
    assert result_line(result, 1.0, 100.0)["env_runners_lost"] == 1
    del result["config"]
    assert result_line(result, 1.0, 100.0)["env_runners_lost"] is None
