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
    from hca_rllib.cli import build_config, make_parser

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
