"""Pong, 16 envs, env side only: ale-py's C++ vector env stepping alone, with the Nature
CNN's forward pass (on zeros) for all 16 envs per vector step, and double-buffered over
two groups of 8 (`EnvGroups`: forward for one group while the other steps), with 1 and 4
C++ threads per group. Steps/s and steps per CPU-second of the process (all threads).

    .venv/bin/python benchmarks/ale_overlap_micro.py 200   # vector steps per measurement
"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np, torch
torch.set_num_threads(1)
from hca_rllib.envs.atari import make_atari_vector
from hca_rllib.envs.groups import EnvGroups
net = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 8, 4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, 2), torch.nn.ReLU(),
                          torch.nn.Conv2d(64, 64, 3, 1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6))
def fwd(k):
    with torch.inference_mode():
        return net(torch.zeros(k, 4, 84, 84)).argmax(-1).numpy()
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
def run(mode, threads):
    one = make_atari_vector("Pong", num_envs=16, num_threads=threads)
    env = EnvGroups(one.split([8, 8])) if mode.startswith("groups") else one
    env.reset(seed=0)
    a = np.zeros(16, np.int64)
    c0, t0 = time.process_time(), time.perf_counter()
    if mode == "plain_noforward":
        for _ in range(steps): env.step(a)
    elif mode == "plain":
        for _ in range(steps): fwd(16); env.step(a)
    elif mode == "groups_overlap":
        env.send(0, fwd(8)); env.send(1, fwd(8))
        for _ in range(steps):
            env.recv(0); env.send(0, fwd(8)); env.recv(1); env.send(1, fwd(8))
        env.recv(0); env.recv(1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return 16 * steps / wall, 16 * steps / cpu
for rep in range(2):
    for mode, threads in (("plain_noforward", 0), ("plain", 0), ("groups_overlap", 0), ("groups_overlap", 4)):
        w, c = run(mode, threads)
        print(f"{mode:18s} threads={threads} steps/s {w:7.0f}  steps/cpu-s {c:7.0f}  load {os.getloadavg()[0]:.1f}", flush=True)
