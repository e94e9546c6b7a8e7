#!/usr/bin/env python
"""A multi-node Ray cluster on this machine, for development: token auth, loopback only.

    python cluster/local_cluster.py start --dir /tmp/hca-cluster [--workers 1] [--cpus-per-node 1]
    eval "$(python cluster/local_cluster.py env --dir /tmp/hca-cluster)"   # RAY_ADDRESS etc.
    ray job submit --working-dir . -- \\
        python -m hca_rllib train --env minatar/Breakout --num-env-runners 1 \\
        --set "custom_resources_per_env_runner={'env_runner_slot': 1}"
    python cluster/local_cluster.py stop --dir /tmp/hca-cluster

`start` generates a token (a file under --dir, mode 600: never your ~/.ray/auth_token),
picks free ports so it never collides with another Ray on the machine, and starts a head
and N worker nodes with `ray start` under `RAY_AUTH_MODE=token`, each in its own process
group. Worker nodes offer the custom resource `env_runner_slot`, so EnvRunners can be
placed on them; the head offers none. `stop` kills exactly those process groups (never
`ray stop`, which would kill every Ray on the machine). The dashboard and job API bind to
127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = "cluster.json"
TOKEN = "auth_token"
WORKER_RESOURCE = "env_runner_slot"


def _free_ports(count: int) -> list:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


def _free_range(size: int, taken: set, rng) -> int:
    """The first port of `size` consecutive free ports, none of them in `taken`."""
    for _ in range(200):
        low = rng.randrange(20000, 60000 - size)
        block = range(low, low + size)
        if taken.intersection(block):
            continue
        try:
            for port in block:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return low
    raise RuntimeError(f"no {size} consecutive free ports found")


def _ray() -> str:
    return str(Path(sys.executable).with_name("ray"))


def cluster_env(directory: Path) -> dict:
    """Environment variables that reach this cluster (with its token)."""
    state = json.loads((directory / STATE).read_text())
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(directory / TOKEN),
        "RAY_ADDRESS": state["gcs_address"],
        "RAY_API_SERVER_ADDRESS": state["dashboard_url"],
    }


def _start_node(args: list, env: dict, log: Path, state: dict, state_path: Path) -> None:
    with open(log, "ab") as out:
        proc = subprocess.Popen([_ray(), "start", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    # Recorded before waiting: whatever happens next, `stop` can kill this group.
    state["process_groups"].append(proc.pid)  # the process group of everything this node runs
    state_path.write_text(json.dumps(state, indent=1))
    try:
        code = proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        code = None
    if code != 0:
        raise RuntimeError(f"ray start failed; see {log} (stop the rest with: stop --dir ...)")


def start(directory: Path, workers: int, cpus_per_node: int, head_cpus: int) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / STATE).exists():
        raise SystemExit(f"{directory / STATE} exists: a cluster may be running; stop it first")
    token = directory / TOKEN
    token.unlink(missing_ok=True)
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others
    os.write(fd, secrets.token_hex(32).encode())
    os.close(fd)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    gcs, dashboard, client, *node_ports = _free_ports(3 + 5 * (workers + 1))
    temp = directory / "ray"  # Ray shortens nothing: keep --dir short (unix socket paths)
    state = {"dir": str(directory), "gcs_address": f"127.0.0.1:{gcs}",
             "dashboard_url": f"http://127.0.0.1:{dashboard}", "process_groups": []}
    (directory / STATE).write_text(json.dumps(state, indent=1))

    import random

    rng = random.Random()
    taken = {gcs, dashboard, client, *node_ports}
    lows = []
    for _ in range(workers + 1):
        lows.append(_free_range(151, taken, rng))
        taken.update(range(lows[-1], lows[-1] + 151))

    def node_ports_args(i):
        manager, objects, agent, agent_grpc, runtime = node_ports[5 * i: 5 * i + 5]
        low = lows[i]
        return ["--node-manager-port", str(manager), "--object-manager-port", str(objects),
                "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
                "--runtime-env-agent-port", str(runtime),
                "--min-worker-port", str(low), "--max-worker-port", str(low + 150)]

    common = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    # One temp dir per node: nodes sharing one would share `runtime_resources/`, and a
    # worker node unpacking a job's working_dir would replace the directory the job's
    # driver runs in on the head (its cwd vanishes: FileNotFoundError from os.getcwd()).
    head = ["--head", "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
            "--ray-client-server-port", str(client), "--num-cpus", str(head_cpus), "--num-gpus", "0",
            "--temp-dir", str(temp), *common, *node_ports_args(0)]
    _start_node(head, env, directory / "head.log", state, directory / STATE)
    for i in range(workers):
        worker = ["--address", state["gcs_address"], "--num-cpus", str(cpus_per_node), "--num-gpus", "0",
                  "--resources", json.dumps({WORKER_RESOURCE: 100}), "--temp-dir", f"{temp}-w{i}",
                  *common, *node_ports_args(i + 1)]
        _start_node(worker, env, directory / f"worker{i}.log", state, directory / STATE)
    return state


def stop(directory: Path) -> None:
    path = directory / STATE
    if not path.exists():
        return
    groups = json.loads(path.read_text())["process_groups"]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while time.time() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.2)
    path.unlink()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "env"])
    parser.add_argument("--dir", default="/tmp/hca-cluster", help="state, token, logs (keep it short)")
    parser.add_argument("--workers", type=int, default=1, help="worker nodes besides the head")
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--head-cpus", type=int, default=1)
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    if args.command == "start":
        state = start(directory, args.workers, args.cpus_per_node, args.head_cpus)
        print(json.dumps(state, indent=1))
    elif args.command == "stop":
        stop(directory)
    else:
        for key, value in cluster_env(directory).items():
            print(f"export {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
