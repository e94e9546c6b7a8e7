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

For fault-injection tests, a worker node can be lost and another one added:

    python cluster/local_cluster.py kill-node --dir /tmp/hca-cluster --node worker0
    python cluster/local_cluster.py add-node --dir /tmp/hca-cluster --cpus-per-node 1

`kill-node` SIGKILLs that node's process group (its raylet, object store, agents and every
worker process it started: what a spot node being reclaimed looks like to the rest of the
cluster) and marks it dead in `cluster.json`; `add-node` starts a fresh worker node
(`worker<N>`, a new name) that joins the running cluster. Nodes carry their name as the
Ray node name (`ray.util.state.list_nodes()[i].node_name`).
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


START_ATTEMPTS = 3


def _start_node(name: str, args: list, env: dict, log: Path, state: dict, state_path: Path) -> None:
    """`ray start` one node in its own process group. Ray gives a node 30 s to register
    (not configurable); on a machine under heavy load that can run out, so a failed start
    is killed (every process it started) and tried again, up to START_ATTEMPTS times."""
    for attempt in range(1, START_ATTEMPTS + 1):
        with open(log, "ab") as out:
            proc = subprocess.Popen([_ray(), "start", *args, "--node-name", name], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        # Recorded before waiting: whatever happens next, `stop` can kill this group.
        state["process_groups"].append(proc.pid)  # the process group of everything this node runs
        state["nodes"][name] = {"process_group": proc.pid, "alive": True}
        state_path.write_text(json.dumps(state, indent=1))
        try:
            code = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            code = None
        if code == 0:
            return
        _kill_pids(node_pids(proc.pid), proc.pid)
        if code is None:
            proc.wait()
        state["process_groups"].remove(proc.pid)
        state["nodes"].pop(name)
        state_path.write_text(json.dumps(state, indent=1))
        print(f"ray start of {name} failed (attempt {attempt}/{START_ATTEMPTS}; see {log})", file=sys.stderr)
    raise RuntimeError(f"ray start of {name} failed {START_ATTEMPTS} times; see {log} "
                       f"(stop the rest with: stop --dir ...)")


# How long `ray job stop` waits after its SIGTERM before it SIGKILLs the job's driver
# (Ray's default, 3 s, is shorter than a run's clean stop: closing its logs and stopping
# its EnvRunners and Learner). Read by the job supervisor on the head node.
JOB_STOP_WAIT_S = 120


def _node_env(directory: Path) -> dict:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(directory / TOKEN),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_JOB_STOP_WAIT_TIME_S": str(JOB_STOP_WAIT_S)}
    env.pop("RAY_ADDRESS", None)
    return env


def _port_args(taken: set, rng) -> list:
    """Ports of one node: free ones, none in `taken` (which this adds them to)."""
    for _ in range(50):
        ports = _free_ports(5)
        if not taken.intersection(ports):
            break
    else:
        raise RuntimeError("no free ports found")
    taken.update(ports)
    low = _free_range(151, taken, rng)
    taken.update(range(low, low + 151))
    manager, objects, agent, agent_grpc, runtime = ports
    return ["--node-manager-port", str(manager), "--object-manager-port", str(objects),
            "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
            "--runtime-env-agent-port", str(runtime),
            "--min-worker-port", str(low), "--max-worker-port", str(low + 150)]


COMMON = ["--node-ip-address", "127.0.0.1", "--disable-usage-stats"]


def start(directory: Path, workers: int, cpus_per_node: int, head_cpus: int) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / STATE).exists():
        raise SystemExit(f"{directory / STATE} exists: a cluster may be running; stop it first")
    token = directory / TOKEN
    token.unlink(missing_ok=True)
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others
    os.write(fd, secrets.token_hex(32).encode())
    os.close(fd)
    env = _node_env(directory)
    gcs, dashboard, client = _free_ports(3)
    temp = directory / "ray"  # Ray shortens nothing: keep --dir short (unix socket paths)
    state = {"dir": str(directory), "gcs_address": f"127.0.0.1:{gcs}",
             "dashboard_url": f"http://127.0.0.1:{dashboard}", "process_groups": [], "nodes": {},
             "taken_ports": [gcs, dashboard, client]}
    (directory / STATE).write_text(json.dumps(state, indent=1))

    import random

    rng = random.Random()
    taken = {gcs, dashboard, client}
    # One temp dir per node: nodes sharing one would share `runtime_resources/`, and a
    # worker node unpacking a job's working_dir would replace the directory the job's
    # driver runs in on the head (its cwd vanishes: FileNotFoundError from os.getcwd()).
    head = ["--head", "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
            "--ray-client-server-port", str(client), "--num-cpus", str(head_cpus), "--num-gpus", "0",
            "--temp-dir", str(temp), *COMMON, *_port_args(taken, rng)]
    _start_node("head", head, env, directory / "head.log", state, directory / STATE)
    for _ in range(workers):
        add_node(directory, cpus_per_node, state=state, taken=taken, rng=rng)
    return state


def add_node(directory: Path, cpus_per_node: int, *, state: dict = None, taken: set = None, rng=None) -> str:
    """Start one more worker node (offering `env_runner_slot`) in the running cluster;
    returns its name, `worker<N>` with N one past the highest used so far."""
    import random

    path = directory / STATE
    if state is None:
        if not path.exists():
            raise SystemExit(f"no cluster in {directory} (no {STATE}): start one first")
        state = json.loads(path.read_text())
    rng = rng or random.Random()
    taken = set(state.get("taken_ports", [])) if taken is None else taken
    index = sum(1 for name in state["nodes"] if name.startswith("worker"))
    name = f"worker{index}"
    worker = ["--address", state["gcs_address"], "--num-cpus", str(cpus_per_node), "--num-gpus", "0",
              "--resources", json.dumps({WORKER_RESOURCE: 100}), "--temp-dir", f"{directory / 'ray'}-w{index}",
              *COMMON, *_port_args(taken, rng)]
    state["taken_ports"] = sorted(taken)  # so that a later add-node picks none of them
    _start_node(name, worker, _node_env(directory), directory / f"{name}.log", state, path)
    return name


def kill_node(directory: Path, name: str) -> list:
    """SIGKILL every process of worker node `name` (`node_pids`: nothing else), wait until
    they are gone, and mark the node dead in cluster.json. Returns the pids killed."""
    path = directory / STATE
    if not path.exists():
        raise SystemExit(f"no cluster in {directory} (no {STATE})")
    state = json.loads(path.read_text())
    if name not in state["nodes"]:
        raise SystemExit(f"no node {name!r} in {directory}; nodes: {sorted(state['nodes'])}")
    if name == "head":
        raise SystemExit("kill-node kills worker nodes only (the head holds the GCS: use stop)")
    group = state["nodes"][name]["process_group"]
    pids = node_pids(group)
    if not _kill_pids(pids, group):
        raise RuntimeError(f"processes of {name} (group {group}) survived SIGKILL for 10 s")
    state["nodes"][name]["alive"] = False
    state["nodes"][name]["killed_pids"] = pids
    path.write_text(json.dumps(state, indent=1))
    return pids


def _kill_pids(pids: list, group: int) -> bool:
    """SIGKILL `pids` all at once (as a node losing power: no process outlives another)
    and wait up to 10 s for them and process group `group` to be gone; False if not."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while time.time() < deadline and (_group_alive(group) or any(_alive(pid) for pid in pids)):
        time.sleep(0.1)
    return not (_group_alive(group) or any(_alive(pid) for pid in pids))


def _pgid(pid: int):
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by its parent) runs nothing
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop(directory: Path) -> None:
    path = directory / STATE
    if not path.exists():
        return
    state = json.loads(path.read_text())
    dead = {node["process_group"] for node in state.get("nodes", {}).values() if not node["alive"]}
    groups = [g for g in state["process_groups"] if g not in dead]  # a killed node's id may be reused
    # Ray's worker processes lead groups of their own: found now, killed if they outlive their raylet.
    workers = [pid for group in groups for pid in node_pids(group) if _pgid(pid) not in (group, None)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while time.time() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.2)
    for pid in workers:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    path.unlink()


def _processes() -> dict:
    """pid -> (parent pid, process group) of every process on this machine (from /proc)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[2]))  # ppid, pgrp
    return table


def node_pids(group: int) -> list:
    """The processes of the node whose `ray start` led process group `group`: the group's
    members (raylet, object store, agents) and all their descendants. Ray's worker
    processes (actors such as EnvRunners) are children of the raylet but lead process
    groups of their own, so killing the group alone would leave them running."""
    table = _processes()
    found = {pid for pid, (_, pgrp) in table.items() if pgrp == group}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in table.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return sorted(found)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "env", "kill-node", "add-node"])
    parser.add_argument("--dir", default="/tmp/hca-cluster", help="state, token, logs (keep it short)")
    parser.add_argument("--workers", type=int, default=1, help="worker nodes besides the head")
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--head-cpus", type=int, default=1)
    parser.add_argument("--node", default=None, help="kill-node: the worker node's name (worker0, ...)")
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    if args.command == "start":
        state = start(directory, args.workers, args.cpus_per_node, args.head_cpus)
        print(json.dumps({k: v for k, v in state.items() if k != "taken_ports"}, indent=1))
    elif args.command == "stop":
        stop(directory)
    elif args.command == "kill-node":
        if not args.node:
            parser.error("kill-node needs --node NAME")
        print(json.dumps({"node": args.node, "killed_pids": kill_node(directory, args.node)}))
    elif args.command == "add-node":
        print(json.dumps({"node": add_node(directory, args.cpus_per_node)}))
    else:
        for key, value in cluster_env(directory).items():
            print(f"export {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
