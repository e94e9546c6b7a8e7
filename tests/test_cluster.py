"""cluster/: Ray's own validation of the launcher config, the KubeRay manifests' security
and entrypoint, and a real two-node local cluster with token auth taking a job."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "cluster"
BIN = Path(sys.executable).parent


def test_aws_launcher_config_passes_rays_validation():
    import copy

    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((CLUSTER / "aws.yaml").read_text())
    validate_config(prepare_config(copy.deepcopy(config)))  # what `ray up` does first
    broken = copy.deepcopy(config)
    broken["available_node_types"]["cpu_worker"]["min_worker"] = 0  # a typo must fail
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(broken))
    head = " ".join(config["head_start_ray_commands"])
    worker = " ".join(config["worker_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "RAY_AUTH_MODE=token" in worker
    assert "--dashboard-host=127.0.0.1" in head
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    rules = config["provider"]["security_group"]["IpPermissions"]
    assert [(r["FromPort"], r["ToPort"]) for r in rules] == [(22, 22)]  # SSH only
    workers = config["available_node_types"]["cpu_worker"]
    assert workers["resources"]["env_runner_slot"] > 0
    assert config["available_node_types"]["head_gpu"]["resources"]["GPU"] == 1
    assert "WANDB_API_KEY=" not in (CLUSTER / "aws.yaml").read_text().replace('WANDB_API_KEY="$(aws ssm', "")


def _containers(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers":
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


@pytest.mark.parametrize("name, kind", [("raycluster.yaml", "RayCluster"), ("rayjob.yaml", "RayJob")])
def test_kuberay_manifests_use_token_auth_and_secrets(name, kind):
    import ray

    text = (CLUSTER / "kuberay" / name).read_text()
    manifest = yaml.safe_load(text)
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == kind
    spec = manifest["spec"] if kind == "RayCluster" else manifest["spec"]["rayClusterSpec"]
    assert spec["rayVersion"] == ray.__version__
    assert spec["headGroupSpec"]["serviceType"] == "ClusterIP"
    containers = list(_containers(manifest))
    assert len(containers) >= 2
    for container in containers:
        env = {e["name"]: e for e in container["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hca-rllib-ray-token"
        if "WANDB_API_KEY" in env:
            assert "value" not in env["WANDB_API_KEY"]  # from a Secret only
    for group in spec["workerGroupSpecs"]:
        assert "env_runner_slot" in group["rayStartParams"]["resources"]


def test_rayjob_entrypoint_is_a_valid_training_command():
    from hca_rllib.cli import make_parser
    from hca_rllib.cli.train import build_config

    entrypoint = yaml.safe_load((CLUSTER / "kuberay" / "rayjob.yaml").read_text())["spec"]["entrypoint"]
    words = shlex.split(entrypoint)
    assert words[:4] == ["python", "-m", "hca_rllib", "train"]
    args = make_parser().parse_args(words[3:])
    config = build_config(args)  # validates (env id, every --set key and range)
    assert config.custom_resources_per_env_runner == {"env_runner_slot": 1}
    assert config.train_batch_size_per_learner == 8 * 16 * 5


def _readme_commands():
    text = (CLUSTER / "README.md").read_text()
    block = re.search(r"<!-- commands:local-cluster -->\s*```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def _run(command, env, timeout=300):
    return subprocess.run(command, shell=True, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, executable="/bin/bash")


@pytest.fixture
def cluster_dir():
    # Short path: Ray's unix sockets live below it.
    directory = Path(f"/tmp/hcac{os.getpid()}")
    yield directory
    subprocess.run([sys.executable, str(CLUSTER / "local_cluster.py"), "stop", "--dir", str(directory)],
                   timeout=120)
    subprocess.run(["rm", "-rf", str(directory)])


@pytest.mark.cluster
def test_local_two_node_cluster_with_token_runs_a_submitted_job(cluster_dir):
    commands = [c.replace("/tmp/hca-cluster", str(cluster_dir)) for c in _readme_commands()]
    start, export, submit, stop = commands
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_API_SERVER_ADDRESS"):
        env.pop(key, None)
    proc = _run(start, env, timeout=300)
    logs = "".join(p.read_text()[-3000:] for p in cluster_dir.glob("*.log"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + logs
    state = json.loads((cluster_dir / "cluster.json").read_text())
    assert state["gcs_address"].startswith("127.0.0.1:") and len(state["process_groups"]) == 2

    # Without the token, the job API refuses the submission.
    no_token = {**env, "HOME": str(cluster_dir), "RAY_AUTH_MODE": "token",
                "RAY_API_SERVER_ADDRESS": state["dashboard_url"]}
    refused = _run(submit.replace("--output", "--output-refused"), no_token, timeout=120)
    assert refused.returncode != 0
    assert re.search(r"401|[Uu]nauthori[sz]ed|[Aa]uthenticat", refused.stdout + refused.stderr), refused.stderr[-2000:]

    # With it (the README's `eval "$(... env ...)"` then `ray job submit`), the job runs.
    proc = _run(f"{export} && {submit}", env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    run_dir = cluster_dir / "runs" / "cartpole"
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert lines[-1]["env_steps"] >= 2000
    assert list((run_dir / "checkpoints").glob("iter_*"))

    # The EnvRunner ran on the worker node (the only node offering `env_runner_slot`).
    token_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(cluster_dir / "auth_token")}
    query = (
        "import json, ray; from ray.util.state import list_actors, list_nodes\n"
        f"a = '{state['dashboard_url']}'\n"
        "nodes = {n.node_id: n.resources_total for n in list_nodes(address=a)}\n"
        "runners = [x.node_id for x in list_actors(address=a, detail=True, limit=1000) "
        "if x.class_name in ('SingleAgentEnvRunner', 'LeanEnvRunner')]\n"
        "print(json.dumps({'runners': [nodes[r].get('env_runner_slot', 0) for r in runners], "
        "'nodes': len(nodes)}))\n"
    )
    found = subprocess.run([sys.executable, "-c", query], env=token_env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    placement = json.loads(found.stdout.strip().splitlines()[-1])
    assert placement["nodes"] == 2
    assert placement["runners"] and all(slots > 0 for slots in placement["runners"])

    # Stopping kills exactly the cluster's own process groups.
    proc = _run(stop, env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for group in state["process_groups"]:
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)


def _local_cluster():
    """cluster/local_cluster.py as a module (it is a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("local_cluster", CLUSTER / "local_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env_runner_pids(local_cluster, group):
    """The EnvRunner actor processes among the processes of the node that leads `group`."""
    found = []
    for pid in local_cluster.node_pids(group):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if command.startswith(b"ray::") and b"EnvRunner" in command:
            found.append(pid)
    return found


def _lines(path):
    from hca_rllib.runner import read_results

    return read_results(path)


@pytest.mark.cluster
@pytest.mark.slow  # about 3 min on 2 busy cores: 3 nodes start, a node is lost, Ray restarts the runner
def test_training_survives_the_loss_of_the_worker_node_running_its_env_runner(cluster_dir):
    """A spot node reclaimed: every process of the worker node holding the EnvRunner is
    SIGKILLed by its pid mid-run; Ray restarts the actor on the other worker node, RLlib
    puts it back into service, and the run reaches its budget with no iteration lost,
    repeated or empty, the loss and the restart counted in results.jsonl."""
    local_cluster = _local_cluster()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_API_SERVER_ADDRESS"):
        env.pop(key, None)
    script = [sys.executable, str(CLUSTER / "local_cluster.py")]
    proc = subprocess.run([*script, "start", "--dir", str(cluster_dir), "--workers", "1"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([*script, "add-node", "--dir", str(cluster_dir)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {"node": "worker1"}
    state = json.loads((cluster_dir / "cluster.json").read_text())
    workers = {name: node["process_group"] for name, node in state["nodes"].items() if name != "head"}
    assert sorted(workers) == ["worker0", "worker1"]

    run_dir = cluster_dir / "runs" / "node-loss"
    budget = 8000
    driver_env = {**env, **local_cluster.cluster_env(cluster_dir), "PYTHONPATH": str(REPO)}
    driver_env.pop("RAY_ADDRESS")  # passed as --address: the driver joins the head node
    log = open(cluster_dir / "driver.log", "w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "hca_rllib", "train", "--env", "CartPole-v1", "--stop-timesteps", str(budget),
         "--num-env-runners", "1", "--num-envs-per-env-runner", "4", "--set", "train_batch_size_per_learner=256",
         "--set", "custom_resources_per_env_runner={'env_runner_slot': 1}", "--wandb", "off",
         "--no-tensorboard", "--checkpoint-every", "0", "--progress-every", "0", "--output", str(run_dir),
         "--address", state["gcs_address"]],
        cwd=REPO, env=driver_env, stdout=log, stderr=subprocess.STDOUT)
    results = run_dir / "results.jsonl"
    try:
        deadline = time.time() + 300
        while len(_lines(results)) < 3:  # training is under way
            assert driver.poll() is None, (cluster_dir / "driver.log").read_text()[-3000:]
            assert time.time() < deadline, "no 3 iterations in 300 s"
            time.sleep(0.1)
        holding = {name: _env_runner_pids(local_cluster, group) for name, group in workers.items()}
        victim = [name for name, pids in holding.items() if pids]
        assert len(victim) == 1 and len(holding[victim[0]]) == 1, holding
        survivor = next(name for name in workers if name != victim[0])
        before_kill = len(_lines(results))
        killed_at = time.time()
        proc = subprocess.run([*script, "kill-node", "--dir", str(cluster_dir), "--node", victim[0]], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        killed = json.loads(proc.stdout)["killed_pids"]
        assert holding[victim[0]][0] in killed and not local_cluster._group_alive(workers[victim[0]])
        assert not any(Path(f"/proc/{pid}").exists() and local_cluster._alive(pid) for pid in killed)

        recovered = None
        deadline = time.time() + 900  # the run's own budget is minutes: a hang fails, not waits for 1800 s
        while driver.poll() is None and time.time() < deadline:
            lines = _lines(results)
            if recovered is None and lines and lines[-1]["env_runner_restarts"]:
                recovered = time.time() - killed_at
                # The restarted EnvRunner runs on the surviving worker node.
                assert _env_runner_pids(local_cluster, workers[survivor]), "restarted runner not on the survivor"
            time.sleep(0.1)
        assert driver.wait(timeout=300) == 0, (cluster_dir / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        log.close()
    lines = _lines(results)
    print(f"\nnode loss: killed {victim[0]} after iteration {before_kill}; first iteration with the restarted "
          f"runner {recovered:.1f} s after the kill; {len(lines)} iterations, {lines[-1]['env_steps']} env steps")
    assert recovered is not None
    assert [line["iteration"] for line in lines] == list(range(1, len(lines) + 1))  # none lost, none twice
    steps = [line["env_steps"] for line in lines]
    assert all(b > a for a, b in zip(steps, steps[1:])), steps  # no empty iteration while the runner was out
    assert steps[-1] >= budget
    assert all(line["env_runners_lost"] == 0 and line["env_runner_restarts"] == 0 for line in lines[:before_kill])
    assert lines[-1]["env_runners_lost"] == 1 and lines[-1]["env_runner_restarts"] == 1
    assert lines[-1]["healthy_env_runners"] == 1
    assert "done: " in (cluster_dir / "driver.log").read_text()
