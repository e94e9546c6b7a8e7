"""EnvRunner resident memory over an Atari game that runs to the step cap, lean vs RLlib.

RLlib 2.60's ``SingleAgentEnvRunner`` keeps every chunk of a running episode until the
episode ends (for its episode metrics); the project's ``LeanEnvRunner``
(``sampler="lean"``, the default) keeps only the ``episode_lookback_horizon`` steps the
next fragment needs. This script shows what that means for the process's memory over one
full-length Atari game (108,000 frames = 27,000 agent steps, the classic protocol's cap).

Setup (the same for both samplers, each in its own fresh subprocess, run at the same
time, so they share no memory): the tuned Atari example's config (``tuned_examples.common.atari_config``:
``atari/<Game>``, 4-frame stacking, ale-py's C++ vector env), ``--num-envs`` envs and
``--fragment``-step fragments per env, ``num_env_runners=0``; the EnvRunner object is built
directly in the subprocess (``LeanEnvRunner`` or RLlib's ``SingleAgentEnvRunner``), no
learner. To keep every game alive to the cap, the env is built with ``fire_reset=False``
and the policy head's last layer is set so that action 0 (NOOP) wins everywhere
(weights 0, bias +10 on NOOP), sampled with ``explore=False``: Breakout's ball is never
launched, no life is lost, and each game is truncated by ALE at the frame cap. The script
samples until every env has ended one episode and checks that each ended by truncation
at the cap (the lengths are reported). ``runner.get_metrics()`` is called once per
``ATARI_STEPS_PER_ITERATION`` env steps, as one training iteration would.

After every ``sample()``: the process RSS (psutil) and the steps the runner holds for its
running episodes (RLlib: the chunks in ``_ongoing_episodes_for_metrics``; lean: the
carried lookback). Reported per sampler: RSS before sampling, peak RSS, RSS at 10%, 50%
and 100% of the cap, the growth from 10% to 100%, the held steps at the end, and a
downsampled RSS-vs-steps series (at most ``MAX_POINTS`` points).

Reproduce (from the repository root):

    .venv/bin/python benchmarks/env_runner_memory.py          # Breakout, 2 envs x 64 steps,
                                                              # the 27,000-step cap; results in
                                                              # benchmarks/results/env_runner_memory/
    .venv/bin/python benchmarks/env_runner_memory.py --quick  # smoke test: a 500-step cap
                                                              # (2,000 frames), to --out or a temp dir

Writes ``<out>/summary.json`` and ``<out>/summary.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "env_runner_memory"
SAMPLERS = ("lean", "rllib")
MAX_POINTS = 50
FRAME_SKIP = 4
MIB = 2 ** 20


# ------------------------------------------------------------------------- child side


def _noop_policy(module) -> None:
    """Set the policy head's last layer so that NOOP (action 0) wins in every state."""
    import torch

    with torch.no_grad():
        module.pi.weight.zero_()
        module.pi.bias.zero_()
        module.pi.bias[0] = 10.0


def _held_steps(runner, sampler: str) -> int:
    """Steps the runner holds for its running episodes between sample() calls."""
    if sampler == "rllib":
        return int(sum(len(chunk) for chunks in runner._ongoing_episodes_for_metrics.values()
                       for chunk in chunks))
    return runner.held_steps()


def measure(sampler: str, game: str, num_envs: int, fragment: int, max_episode_frames: int,
            seed: int) -> Dict[str, Any]:
    import psutil
    import torch
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    sys.path.insert(0, str(REPO))
    from hca_rllib.env_runner import LeanEnvRunner
    from tuned_examples.common import ATARI_STEPS_PER_ITERATION, atari_config

    torch.set_num_threads(1)
    proc = psutil.Process()
    cap = max_episode_frames // FRAME_SKIP
    config = atari_config(game, algo="A2C")
    config.environment(env_config={"fire_reset": False, "max_episode_frames": max_episode_frames})
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs,
                       rollout_fragment_length=fragment, sampler=sampler)
    config.training(train_batch_size_per_learner=num_envs * fragment)
    config.debugging(seed=seed)
    config.validate()
    cls = LeanEnvRunner if sampler == "lean" else SingleAgentEnvRunner
    assert (config.env_runner_cls or SingleAgentEnvRunner) is cls, config.env_runner_cls
    runner = cls(config=config)
    _noop_policy(runner.module)
    rss_before = proc.memory_info().rss / MIB
    metrics_every = max(1, -(-ATARI_STEPS_PER_ITERATION // (num_envs * fragment)))
    steps: List[int] = []  # env steps per env after each sample()
    rss: List[float] = []
    held: List[int] = []
    lengths: List[int] = []
    truncated: List[bool] = []
    total = 0
    t0 = time.perf_counter()
    calls = 0
    while len(lengths) < num_envs:
        episodes = runner.sample(explore=False)
        calls += 1
        for episode in episodes:
            total += len(episode)
            if episode.is_done:
                lengths.append(int(episode.t))
                truncated.append(bool(episode.is_truncated))
        if calls % metrics_every == 0:
            runner.get_metrics()
        steps.append(total // num_envs)
        rss.append(proc.memory_info().rss / MIB)
        held.append(_held_steps(runner, sampler))
        if calls > 4 * cap:  # a game that never ends: stop and report it
            break
    wall = time.perf_counter() - t0
    return {"sampler": sampler, "cap_steps": cap, "steps_per_env": steps, "rss_mib": rss,
            "held_steps": held, "rss_before_mib": rss_before, "episode_lengths": lengths,
            "episodes_truncated": truncated, "sample_calls": calls, "wall_s": wall,
            "lookback": int(config.episode_lookback_horizon)}


# ------------------------------------------------------------------------ parent side


def _at(run: Dict[str, Any], fraction: float) -> float:
    """RSS after the first sample() that reached `fraction` of the cap (per env)."""
    target = fraction * run["cap_steps"]
    for steps, value in zip(run["steps_per_env"], run["rss_mib"]):
        if steps >= target:
            return value
    return run["rss_mib"][-1]


def _downsample(xs: List, ys: List, points: int = MAX_POINTS):
    if len(xs) <= points:
        return list(xs), list(ys)
    idx = sorted({round(i * (len(xs) - 1) / (points - 1)) for i in range(points)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


def summarize(run: Dict[str, Any]) -> Dict[str, Any]:
    at = {f"rss_at_{int(f * 100)}pct_mib": round(_at(run, f), 1) for f in (0.1, 0.5, 1.0)}
    xs, ys = _downsample(run["steps_per_env"], [round(v, 1) for v in run["rss_mib"]])
    return {
        "rss_before_sampling_mib": round(run["rss_before_mib"], 1),
        "peak_rss_mib": round(max(run["rss_mib"]), 1),
        **at,
        "growth_10_to_100pct_mib": round(at["rss_at_100pct_mib"] - at["rss_at_10pct_mib"], 1),
        "max_held_steps": max(run["held_steps"]),
        "episode_lengths": run["episode_lengths"],
        "episodes_truncated": run["episodes_truncated"],
        "all_reached_cap": (len(run["episode_lengths"]) > 0
                            and all(n == run["cap_steps"] for n in run["episode_lengths"])
                            and all(run["episodes_truncated"])),
        "sample_calls": run["sample_calls"],
        "wall_s": round(run["wall_s"], 1),
        "lookback": run["lookback"],
        "series": {"steps_per_env": xs, "rss_mib": ys},
    }


def _child_command(args, sampler: str, out: Path) -> List[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", sampler,
            "--child-out", str(out), "--game", args.game, "--num-envs", str(args.num_envs),
            "--fragment", str(args.fragment), "--max-episode-frames", str(args.max_episode_frames),
            "--seed", str(args.seed)]


def run_children(args, workdir: Path) -> Dict[str, Dict[str, Any]]:
    """One fresh subprocess per sampler, all at the same time (RSS is per process)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs = {}
    for sampler in args.samplers:
        out = workdir / f"{sampler}.json"
        log = open(workdir / f"{sampler}.log", "w")
        procs[sampler] = (subprocess.Popen(_child_command(args, sampler, out), cwd=REPO, env=env,
                                           stdout=log, stderr=subprocess.STDOUT), out, log)
    runs = {}
    for sampler, (proc, out, log) in procs.items():
        rc = proc.wait()
        log.close()
        if rc != 0:
            text = (workdir / f"{sampler}.log").read_text()
            raise SystemExit(f"the {sampler} measurement failed (exit {rc}):\n{text[-4000:]}")
        runs[sampler] = json.loads(out.read_text())
    return runs


def write_report(out: Path, data: Dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(data, indent=1) + "\n")
    s = data["setup"]
    lines = [
        "# EnvRunner memory over an Atari game that runs to the step cap",
        "",
        f"Command: `{data['command']}`",
        "",
        f"`atari/{s['game']}` (tuned Atari config, frame stack 4, C++ vector env), "
        f"{s['num_envs']} envs x {s['fragment']}-step fragments, cap {s['cap_steps']:,} agent "
        f"steps ({s['max_episode_frames']:,} frames), NOOP-only policy (`explore=False`, "
        f"`fire_reset=False`: the ball is never launched). Each sampler in its own process, "
        f"EnvRunner built directly (no learner). RSS of that process after each `sample()`.",
        "",
        "| sampler | RSS before | peak RSS | at 10% | at 50% | at 100% | growth 10%->100% "
        "| held steps (max) | episode lengths | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in data["samplers"].items():
        lines.append(
            f"| {name} | {r['rss_before_sampling_mib']:.0f} MiB | {r['peak_rss_mib']:.0f} MiB "
            f"| {r['rss_at_10pct_mib']:.0f} | {r['rss_at_50pct_mib']:.0f} "
            f"| {r['rss_at_100pct_mib']:.0f} | {r['growth_10_to_100pct_mib']:+.0f} MiB "
            f"| {r['max_held_steps']:,} | {', '.join(map(str, r['episode_lengths']))} "
            f"{'(all truncated at the cap)' if r['all_reached_cap'] else '(NOT all at the cap)'} "
            f"| {r['wall_s']:.0f} |")
    lean, rllib = data["samplers"].get("lean"), data["samplers"].get("rllib")
    if lean and rllib:
        lines += ["", f"Peak RSS, RLlib's runner minus the lean one: "
                      f"{rllib['peak_rss_mib'] - lean['peak_rss_mib']:+.0f} MiB; growth from 10% "
                      f"to 100% of the cap: lean {lean['growth_10_to_100pct_mib']:+.0f} MiB, "
                      f"RLlib {rllib['growth_10_to_100pct_mib']:+.0f} MiB."]
    lines += ["", "'held steps': env steps the runner keeps for its running episodes between "
              "`sample()` calls (RLlib: the chunks kept for its metrics; lean: the carried "
              "lookback, at most envs x `episode_lookback_horizon`). The RSS series "
              "(at most 50 points per sampler) is in summary.json.",
              "", f"Machine: {data['machine']}; {data['versions']}", ""]
    (out / "summary.md").write_text("\n".join(lines))


def main(argv=None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: a 500-step cap (2,000 frames), output to a temp dir")
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--fragment", type=int, default=64)
    parser.add_argument("--max-episode-frames", type=int, default=None,
                        help="the frame cap (default 108,000; --quick: 2,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", choices=SAMPLERS, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.max_episode_frames is None:
        args.max_episode_frames = 2_000 if args.quick else 108_000
    if args.child:
        run = measure(args.child, args.game, args.num_envs, args.fragment,
                      args.max_episode_frames, args.seed)
        args.child_out.write_text(json.dumps(run))
        return run
    out = args.out or (Path(tempfile.mkdtemp(prefix="env_runner_memory_")) if args.quick else DEFAULT_OUT)
    import ray
    import torch

    samplers: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for sampler, run in run_children(args, Path(workdir)).items():
            samplers[sampler] = summarize(run)
            print(f"{sampler}: peak {samplers[sampler]['peak_rss_mib']:.0f} MiB, growth 10%->100% "
                  f"{samplers[sampler]['growth_10_to_100pct_mib']:+.0f} MiB", flush=True)
    data = {
        "command": shlex.join(["python", "benchmarks/env_runner_memory.py", *(argv or sys.argv[1:])]),
        "setup": {"game": args.game, "num_envs": args.num_envs, "fragment": args.fragment,
                  "max_episode_frames": args.max_episode_frames,
                  "cap_steps": args.max_episode_frames // FRAME_SKIP, "seed": args.seed},
        "samplers": samplers,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "versions": f"python {platform.python_version()}, ray {ray.__version__}, torch {torch.__version__}",
    }
    write_report(out, data)
    print(f"wrote {out}/summary.md", flush=True)
    return data


if __name__ == "__main__":
    main()
