"""Atari environment throughput and EnvRunner memory of this project's pipelines.

Everything is measured in ONE run of this script, on one machine, with random actions
unless said otherwise, and every throughput is reported both as agent steps per second
(one agent step = 4 emulator frames; a vector env of N games makes N agent steps per
vector step) and as a ratio to the raw ALE figure of the same round:

1. ``raw_ale``: ale-py's ``AtariEnv(game, obs_type="grayscale", frameskip=4,
   repeat_action_probability=0)``, one env, full 210x160 grayscale screens, no
   preprocessing. The denominator of every ratio.
2. ``python_1``: the project's Python pipeline, one env (``make_atari``: ``AtariEnv`` +
   gymnasium's ``AtariPreprocessing`` (frameskip 4 in Python, max-pool, 84x84 resize) +
   game score, life loss / fire reset and reward clipping wrappers), classic protocol.
3. ``python_sync_8``: the same, 8 envs in ``gymnasium.make_vec("atari/<Game>",
   vectorization_mode="sync")`` (what RLlib builds for ``gym_env_vectorize_mode="sync"``).
4. ``native_8_t1`` / ``native_8_t2`` / ``native_8_auto``: ale-py's C++ ``AtariVectorEnv``
   through ``make_atari_vector`` (same protocol), 8 envs, ``num_threads`` 1, 2, 0 (auto);
   ``native_8_auto_bare``: the bare ``AtariVectorEnv`` under it (no protocol wrapper), to
   show what the wrapper costs.
5. ``rllib_sync_policy`` / ``rllib_native_policy``: RLlib's ``SingleAgentEnvRunner`` of an
   ``HCAConfig().environment("atari/<Game>")`` algorithm (``num_env_runners=0``, 8 envs,
   ``gym_env_vectorize_mode`` "sync" or "vector_entry_point"), timing
   ``algo.env_runner.sample(num_timesteps=512, random_actions=False)``: this INCLUDES the
   policy's forward pass (Nature CNN on 8 x 4 stacked 84x84 frames per vector step, torch
   with ``--torch-threads`` threads, 1 by default), the frame-stacking connector and
   RLlib's episode bookkeeping; sampling only, no learning. ``rllib_*_random``: the same
   with ``random_actions=True`` (RLlib then skips the forward pass and the module-to-env
   connector, but still runs the env-to-module connectors). Steps are RLlib's own count
   (the autoreset step of gymnasium's next-step mode is not counted).
   From the same samples: bytes of stored observations per env step (the episodes keep
   one 84x84x1 ``uint8`` frame per step; a 4-frame stack would be 4 x 84 x 84 = 28,224
   bytes), both as ``get_observations()`` (the chunk's T + 1 frames) and as the whole
   lookback buffer (plus the frame-stack lookback frames carried over from the previous
   chunk).
6. Memory flatness: a short HCA training on the first game with ONE remote EnvRunner
   (``num_env_runners=1, num_cpus_per_env_runner=0.5``, 8 envs, learner in the driver),
   ``--memory-iters`` ``algo.train()`` iterations (512 env steps each) per vectorize
   mode; the EnvRunner actor's resident memory (psutil RSS of its pid, from
   ``foreach_env_runner(lambda r: os.getpid())``) and the driver's are read after every
   iteration. Reported: the series, first/last value, and the growth from iteration 5
   to the end (MiB), with a least-squares slope over the same range, and the growth
   over the second half. Beside it, the observation bytes of the episode chunks the
   EnvRunner still references for its ongoing episodes (ray 2.60 keeps every chunk
   returned by ``sample()`` until its episode ends, for the episode metrics), read
   from the actor after every iteration.

The machine is shared and noisy, so each throughput measurement runs for a fixed time
budget (``--seconds``) and the measurements are interleaved over ``--rounds`` rounds (the
order rotates each round); reported are the median over rounds of the steps/s and the
median over rounds of the per-round ratio to raw ALE (a paired ratio), and the CPU
seconds the process got per wall second (``cpu/wall``: ~1.0 for a single-threaded loop
on an idle machine; less means other processes took the cores). All envs and
algorithms are built once per game before the rounds and warmed up; building is not
timed. Ray is started with ``benchmarks/common.py``'s ``RAY_INIT_KWARGS`` (2 CPUs) for
the whole run, also during the pure-env measurements.

Reproduce (from the repository root):

    .venv/bin/python benchmarks/env_throughput.py          # Pong and Breakout, 3 rounds x
                                                           # 5 s, memory 40 iters x 2 modes
                                                           # (~8 min on 2 cores); results in
                                                           # benchmarks/results/env_throughput/
    .venv/bin/python benchmarks/env_throughput.py --quick  # smoke test (< 90 s): Pong, 1
                                                           # round x 1.5 s, 3 memory iters,
                                                           # to --out or a fresh temp dir

Writes ``<out>/results.json`` (every figure, the command line, machine and versions) and
``<out>/summary.md`` (the tables); ``--report-only`` rebuilds ``summary.md`` from it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for _path in (str(REPO), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import RAY_INIT_KWARGS, command_line, machine_note, write_json  # noqa: E402

DEFAULT_OUT = REPO / "benchmarks" / "results" / "env_throughput"
NUM_ENVS = 8
FRAME_SKIP = 4
FRAME_BYTES = 84 * 84  # one 84x84x1 uint8 frame
STACK = 4
STACKED_BYTES = STACK * FRAME_BYTES  # a 4-frame-stacked observation
SAMPLE_TIMESTEPS = 512  # one training batch of HCAConfig's defaults
MEMORY_FROM_ITER = 5  # growth is measured from this (1-based) iteration to the end
MIB = 2 ** 20


# ------------------------------------------------------------------ measurements


class Bench:
    """One throughput measurement: `run(seconds)` steps for about `seconds` and returns
    (agent steps, elapsed seconds); `close()` frees it."""

    key: str = ""
    label: str = ""
    num_envs: int = 1

    def run(self, seconds: float) -> Tuple[int, float]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SingleEnvBench(Bench):
    """One gymnasium env stepped with uniform random actions, reset by hand."""

    def __init__(self, key: str, label: str, env, seed: int) -> None:
        self.key, self.num_envs, self.label, self.env = key, 1, label, env
        self.env.reset(seed=seed)
        self.n_actions = int(self.env.action_space.n)
        self.rng = np.random.default_rng(seed)

    def run(self, seconds):
        env, rng, n_actions = self.env, self.rng, self.n_actions
        steps, t0 = 0, time.perf_counter()
        deadline = t0 + seconds
        while True:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(n_actions)))
            steps += 1
            if terminated or truncated:
                env.reset()
            if time.perf_counter() >= deadline:
                return steps, time.perf_counter() - t0

    def close(self):
        self.env.close()


class RawALE(SingleEnvBench):
    def __init__(self, rom: str, seed: int) -> None:
        from ale_py.env import AtariEnv

        super().__init__(
            "raw_ale", "raw ALE: ale_py AtariEnv, grayscale 210x160, frameskip 4, 1 env",
            AtariEnv(game=rom, obs_type="grayscale", frameskip=FRAME_SKIP,
                     repeat_action_probability=0.0), seed)


class PythonOne(SingleEnvBench):
    def __init__(self, game: str, seed: int) -> None:
        from hca_rllib.envs.atari import make_atari

        super().__init__("python_1", "project Python pipeline (make_atari), 1 env",
                         make_atari(game, "classic"), seed)


class VectorBench(Bench):
    """A gymnasium vector env (next-step autoreset: no resets by hand)."""

    def __init__(self, key: str, label: str, env, seed: int, step_env=None) -> None:
        self.key, self.label, self.env = key, label, env
        self.num_envs = int(env.num_envs)
        self.step_env = step_env if step_env is not None else env
        self.env.reset(seed=seed)
        self.n_actions = int(env.single_action_space.n)
        self.rng = np.random.default_rng(seed)

    def run(self, seconds):
        step, rng, n_actions, n = self.step_env.step, self.rng, self.n_actions, self.num_envs
        steps, t0 = 0, time.perf_counter()
        deadline = t0 + seconds
        while True:
            step(rng.integers(n_actions, size=n))
            steps += n
            if time.perf_counter() >= deadline:
                return steps, time.perf_counter() - t0

    def close(self):
        self.env.close()


def python_sync(game: str, seed: int) -> VectorBench:
    import gymnasium as gym

    env = gym.make_vec(f"atari/{game}", num_envs=NUM_ENVS, vectorization_mode="sync")
    return VectorBench("python_sync_8", f"project Python pipeline, {NUM_ENVS} envs, "
                       "gymnasium.make_vec(vectorization_mode='sync')", env, seed)


def native(game: str, seed: int, num_threads: int, bare: bool = False) -> VectorBench:
    from hca_rllib.envs.atari import make_atari_vector

    env = make_atari_vector(game, "classic", num_envs=NUM_ENVS, num_threads=num_threads)
    threads = "auto" if num_threads == 0 else f"t{num_threads}"
    if bare:
        return VectorBench(f"native_{NUM_ENVS}_{threads}_bare",
                           f"bare ale-py AtariVectorEnv (no protocol wrapper), {NUM_ENVS} "
                           f"envs, num_threads={num_threads}", env, seed, step_env=env.env)
    return VectorBench(f"native_{NUM_ENVS}_{threads}",
                       f"C++ vector env (make_atari_vector), {NUM_ENVS} envs, "
                       f"num_threads={num_threads}" + (" (auto)" if num_threads == 0 else ""),
                       env, seed)


class RLlibSample(Bench):
    """`algo.env_runner.sample(num_timesteps=512)` on a local EnvRunner (shared by the
    policy and the random-action measurement of one vectorize mode)."""

    def __init__(self, algo, mode_key: str, mode: str, random_actions: bool) -> None:
        self.algo, self.random_actions = algo, random_actions
        self.num_envs = NUM_ENVS
        what = "random actions" if random_actions else "policy forward pass (Nature CNN)"
        self.key = f"rllib_{mode_key}_{'random' if random_actions else 'policy'}"
        self.label = (f"RLlib EnvRunner.sample, {NUM_ENVS} envs, "
                      f"gym_env_vectorize_mode='{mode}', {what}")
        self.obs_bytes = 0  # get_observations(): T + 1 frames per chunk
        self.buffer_bytes = 0  # the whole observation buffer, lookback included
        self.obs_frames = 0
        self.env_steps = 0
        self.frame_shape: Optional[List[int]] = None
        self.frame_dtype: Optional[str] = None

    def run(self, seconds):
        runner = self.algo.env_runner
        steps, t0 = 0, time.perf_counter()
        deadline = t0 + seconds
        # The policy and the random-action measurement share the runner, and RLlib
        # cannot continue an episode chunk sampled in the other mode (its
        # extra_model_outputs would be missing): start fresh episodes once per run.
        force_reset = True
        while True:
            episodes = runner.sample(num_timesteps=SAMPLE_TIMESTEPS,
                                     random_actions=self.random_actions,
                                     force_reset=force_reset)
            force_reset = False
            steps += sum(len(ep) for ep in episodes)
            if time.perf_counter() >= deadline:
                break
            self._count_bytes(episodes)
        elapsed = time.perf_counter() - t0
        self._count_bytes(episodes)
        runner.get_metrics()  # reduce (and so bound) the runner's metrics between rounds
        return steps, elapsed

    def _count_bytes(self, episodes) -> None:
        for ep in episodes:
            obs = np.asarray(ep.get_observations())
            self.obs_bytes += obs.nbytes
            self.obs_frames += len(obs)
            data = ep.observations.data
            if isinstance(data, list):
                self.buffer_bytes += sum(np.asarray(o).nbytes for o in data)
            else:
                self.buffer_bytes += np.asarray(data).nbytes
            self.env_steps += len(ep)
            self.frame_shape = list(obs.shape[1:])
            self.frame_dtype = str(obs.dtype)

    def memory(self) -> Dict[str, Any]:
        steps = max(self.env_steps, 1)
        per_step = self.obs_bytes / steps
        per_step_buffer = self.buffer_bytes / steps
        return {
            "env_steps_counted": self.env_steps,
            "stored_frame_shape": self.frame_shape,
            "stored_frame_dtype": self.frame_dtype,
            "frames_per_env_step": self.obs_frames / steps,
            "obs_bytes_per_env_step": per_step,
            "obs_bytes_per_env_step_with_lookback": per_step_buffer,
            "stacked_obs_bytes": STACKED_BYTES,
            "ratio_to_stacked": per_step / STACKED_BYTES,
            "ratio_to_stacked_with_lookback": per_step_buffer / STACKED_BYTES,
        }


VECTORIZE_MODES = {"sync": "sync", "native": "vector_entry_point"}


def build_algo(game: str, mode: str, *, remote: bool, seed: int):
    from hca_rllib import HCAConfig

    config = HCAConfig().environment(f"atari/{game}").debugging(seed=seed)
    if remote:
        config = config.env_runners(num_env_runners=1, num_cpus_per_env_runner=0.5,
                                    num_envs_per_env_runner=NUM_ENVS,
                                    gym_env_vectorize_mode=mode)
    else:
        config = config.env_runners(num_env_runners=0, num_envs_per_env_runner=NUM_ENVS,
                                    gym_env_vectorize_mode=mode)
    return config.build_algo()


def measure_game(game: str, args) -> Dict[str, Any]:
    from hca_rllib.envs.atari import rom_id

    seed = 0
    t_setup = time.perf_counter()
    benches: List[Bench] = [
        RawALE(rom_id(game), seed),
        PythonOne(game, seed),
        python_sync(game, seed),
        native(game, seed, 1),
        native(game, seed, 2),
        native(game, seed, 0),
        native(game, seed, 0, bare=True),
    ]
    algos = []
    if not args.skip_rllib:
        for mode_key, mode in VECTORIZE_MODES.items():
            algo = build_algo(game, mode, remote=False, seed=seed)
            algos.append(algo)
            benches.append(RLlibSample(algo, mode_key, mode, random_actions=False))
            benches.append(RLlibSample(algo, mode_key, mode, random_actions=True))
    setup_s = time.perf_counter() - t_setup
    for bench in benches:  # warm-up: first-call costs (torch, connectors, episode starts)
        bench.run(args.warmup)
    for bench in benches:
        if isinstance(bench, RLlibSample):
            bench.obs_bytes = bench.buffer_bytes = bench.obs_frames = bench.env_steps = 0

    rates: Dict[str, List[float]] = {b.key: [] for b in benches}
    cpu: Dict[str, List[float]] = {b.key: [] for b in benches}
    load: List[float] = []
    for rnd in range(args.rounds):
        shift = rnd % len(benches)
        order = benches[shift:] + benches[:shift]
        load.append(loadavg_1min())
        for bench in order:
            cpu0 = time.process_time()  # this process, all threads
            steps, elapsed = bench.run(args.seconds)
            cpu[bench.key].append((time.process_time() - cpu0) / elapsed)
            rates[bench.key].append(steps / elapsed)
        line = ", ".join(f"{b.key} {rates[b.key][-1]:,.0f}" for b in benches)
        print(f"  {game} round {rnd + 1}/{args.rounds}: {line}", flush=True)

    raw = rates["raw_ale"]
    measurements: Dict[str, Any] = {}
    for bench in benches:
        ratios = [r / base for r, base in zip(rates[bench.key], raw)]
        measurements[bench.key] = {
            "label": bench.label,
            "num_envs": bench.num_envs,
            "steps_per_s_rounds": rates[bench.key],
            "steps_per_s_median": statistics.median(rates[bench.key]),
            "steps_per_s_min": min(rates[bench.key]),
            "steps_per_s_max": max(rates[bench.key]),
            "frames_per_s_median": FRAME_SKIP * statistics.median(rates[bench.key]),
            "ratio_to_raw_rounds": ratios,
            "ratio_to_raw_median": statistics.median(ratios),
            # CPU seconds this process got per wall second (all its threads): ~1.0 for a
            # single-threaded loop on an idle machine; less means other processes took
            # the cores (the machine is shared).
            "cpu_per_wall_rounds": cpu[bench.key],
            "cpu_per_wall_median": statistics.median(cpu[bench.key]),
        }
    obs_memory = {b.key: b.memory() for b in benches
                  if isinstance(b, RLlibSample) and not b.random_actions}
    for bench in benches:
        bench.close()
    for algo in algos:
        algo.stop()
    return {"setup_s": setup_s, "loadavg_1min_at_round_start": load,
            "measurements": measurements, "rllib_obs_memory": obs_memory}


def loadavg_1min() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


# ------------------------------------------------------------------------ memory


def _retained_chunks(runner) -> Optional[List[int]]:
    """[chunks, env steps, observation bytes] of the episode chunks an EnvRunner keeps
    for ongoing episodes (ray 2.60's private `_ongoing_episodes_for_metrics`: every chunk
    already returned by `sample()` stays referenced until its episode ends, for the
    episode metrics and `on_episode_end(prev_episode_chunks=...)`); None if absent."""
    kept = getattr(runner, "_ongoing_episodes_for_metrics", None)
    if kept is None:
        return None
    chunks = steps = nbytes = 0
    for episode_chunks in kept.values():
        for ep in episode_chunks:
            data = ep.observations.data
            nbytes += (sum(np.asarray(o).nbytes for o in data) if isinstance(data, list)
                       else np.asarray(data).nbytes)
            chunks += 1
            steps += len(ep)
    return [chunks, steps, nbytes]


def growth(series: List[float]) -> Dict[str, Any]:
    """First/last/max of an RSS series (MiB), its growth and least-squares slope from
    iteration MEMORY_FROM_ITER (1-based) to the end, and its growth over the second half."""
    start = min(MEMORY_FROM_ITER, len(series)) - 1
    tail = np.asarray(series[start:], dtype=np.float64)
    slope = float(np.polyfit(np.arange(len(tail)), tail, 1)[0]) if len(tail) >= 2 else 0.0
    half = len(series) // 2
    return {
        "first_mib": series[0],
        "last_mib": series[-1],
        "max_mib": max(series),
        "from_iteration": start + 1,
        "growth_mib": series[-1] - series[start],
        "slope_mib_per_100_iters": 100 * slope,
        "second_half_from_iteration": half + 1,
        "growth_second_half_mib": series[-1] - series[half],
    }


def memory_flatness(game: str, mode: str, iters: int, seed: int = 0) -> Dict[str, Any]:
    import psutil

    t0 = time.perf_counter()
    algo = build_algo(game, mode, remote=True, seed=seed)
    build_s = time.perf_counter() - t0
    pids = algo.env_runner_group.foreach_env_runner(lambda r: os.getpid(),
                                                    local_env_runner=False)
    if len(pids) != 1 or pids[0] == os.getpid():
        raise RuntimeError(f"expected one remote EnvRunner, got pids {pids}")
    runner = psutil.Process(pids[0])
    driver = psutil.Process()
    rss, driver_rss, iter_s, env_steps, retained = [], [], [], [], []
    rss_after_build = runner.memory_info().rss / MIB
    driver_after_build = driver.memory_info().rss / MIB
    for i in range(iters):
        t = time.perf_counter()
        result = algo.train()
        iter_s.append(time.perf_counter() - t)
        rss.append(runner.memory_info().rss / MIB)
        driver_rss.append(driver.memory_info().rss / MIB)
        lifetime = result.get("num_env_steps_sampled_lifetime")
        if lifetime is None:
            lifetime = result["env_runners"]["num_env_steps_sampled_lifetime"]
        env_steps.append(int(lifetime))
        kept = algo.env_runner_group.foreach_env_runner(_retained_chunks,
                                                        local_env_runner=False)[0]
        retained.append(kept)
        if (i + 1) % 10 == 0 or i + 1 == iters:
            kept_mib = f"{kept[2] / MIB:.1f} MiB" if kept else "?"
            print(f"  memory {mode}: iter {i + 1}/{iters}, EnvRunner RSS {rss[-1]:.1f} MiB, "
                  f"driver {driver_rss[-1]:.1f} MiB, retained chunk observations "
                  f"{kept_mib}, {iter_s[-1]:.2f} s/iter", flush=True)
    algo.stop()

    return {
        "game": game,
        "gym_env_vectorize_mode": mode,
        "iterations": iters,
        "env_steps_per_iteration": SAMPLE_TIMESTEPS,
        "env_steps_sampled": env_steps,
        "build_s": build_s,
        "iter_s": iter_s,
        "env_runner_pid": pids[0],
        "env_runner_rss_after_build_mib": rss_after_build,
        "env_runner_rss_mib": rss,
        "env_runner": growth(rss),
        "driver_rss_after_build_mib": driver_after_build,
        "driver_rss_mib": driver_rss,
        "driver": growth(driver_rss),
        # Per iteration: [chunks, env steps, observation bytes] kept by the EnvRunner
        # for its ongoing episodes (None where ray has no such attribute).
        "env_runner_retained_chunks": retained,
        "env_runner_retained_obs_mib": [None if k is None else k[2] / MIB
                                        for k in retained],
    }


# ----------------------------------------------------------------------- report


def fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def summary_markdown(data: Dict[str, Any]) -> str:
    games = list(data["games"])
    settings = data["settings"]
    lines = [
        "# Atari environment throughput and EnvRunner memory",
        "",
        f"Command: `{data['command']}`  ",
        f"Machine: {data['machine'].get('processor')}, {data['machine'].get('cpu_count')} "
        f"CPUs, load average at start {data['machine'].get('loadavg_1_5_15')}, at end "
        f"{data.get('loadavg_at_end')}; wall time {data['wall_s']:.0f} s.  ",
        f"Versions: {', '.join(f'{k} {v}' for k, v in data['versions'].items())}.",
        "",
        f"Agent steps/s (1 agent step = {FRAME_SKIP} frames), random actions unless said "
        f"otherwise: median over {settings['rounds']} interleaved rounds of "
        f"{settings['seconds']} s each, [min, max] over rounds; ratio = median over "
        "rounds of the per-round ratio to raw ALE. The RLlib `policy` rows include the "
        f"Nature CNN forward pass (torch, {settings['torch_threads']} thread(s)). "
        "cpu/wall: CPU seconds this process got per wall second (median over rounds; "
        "~1.0 for a single-threaded loop on an idle machine, up to 2.0 with two "
        "threads on two cores): less means other processes took the cores.",
        "",
    ]
    for game in games:
        load = data["games"][game].get("loadavg_1min_at_round_start")
        if load:
            lines.append(f"1-minute load average at the start of each {game} round: {load}  ")
    lines.append("")
    header = "| measurement | envs |"
    rule = "|---|---|"
    for game in games:
        header += f" {game} steps/s [min, max] | {game} ratio to raw | cpu/wall |"
        rule += "---|---|---|"
    lines += [header, rule]
    first = data["games"][games[0]]["measurements"]
    for key, entry in first.items():
        row = f"| `{key}`: {entry['label']} | {entry['num_envs']} |"
        for game in games:
            m = data["games"][game]["measurements"].get(key)
            if m is None:
                row += " - | - | - |"
                continue
            cpu = m.get("cpu_per_wall_median")
            row += (f" {fmt(m['steps_per_s_median'])} [{fmt(m['steps_per_s_min'])}, "
                    f"{fmt(m['steps_per_s_max'])}] | {m['ratio_to_raw_median']:.2f} "
                    f"| {'-' if cpu is None else f'{cpu:.2f}'} |")
        lines.append(row)

    mem_rows = [(game, key, mem) for game in games
                for key, mem in data["games"][game]["rllib_obs_memory"].items()]
    if mem_rows:
        lines += [
            "",
            "## Observation bytes stored in sampled episodes, per env step",
            "",
            f"A 4-frame-stacked 84x84 observation would be {STACKED_BYTES:,} bytes.",
            "",
            "| game | sampler | stored frame | frames / step | bytes / step "
            "(get_observations) | ratio to stacked | bytes / step (with lookback) "
            "| ratio to stacked |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for game, key, mem in mem_rows:
            lines.append(
                f"| {game} | `{key}` | {mem['stored_frame_shape']} {mem['stored_frame_dtype']} "
                f"| {mem['frames_per_env_step']:.3f} | {fmt(mem['obs_bytes_per_env_step'])} "
                f"| {mem['ratio_to_stacked']:.3f} "
                f"| {fmt(mem['obs_bytes_per_env_step_with_lookback'])} "
                f"| {mem['ratio_to_stacked_with_lookback']:.3f} |")

    if data.get("memory_flatness"):
        lines += [
            "",
            "## Resident memory during HCA training (one remote EnvRunner)",
            "",
            f"RSS in MiB after each `algo.train()` ({SAMPLE_TIMESTEPS} env steps); growth "
            f"and least-squares slope from iteration {MEMORY_FROM_ITER} to the end, and "
            "growth over the second half of the iterations.",
            "",
            "| game, vectorize mode | process | iterations | after build | first | last "
            "| max | growth | slope / 100 iters | growth, 2nd half | s / iter |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for run in data["memory_flatness"]:
            for proc, after in (("env_runner", run["env_runner_rss_after_build_mib"]),
                                ("driver", run["driver_rss_after_build_mib"])):
                g = run[proc]
                lines.append(
                    f"| {run['game']}, {run['gym_env_vectorize_mode']} | {proc} "
                    f"| {run['iterations']} | {after:.1f} | {g['first_mib']:.1f} "
                    f"| {g['last_mib']:.1f} | {g['max_mib']:.1f} | {g['growth_mib']:+.1f} "
                    f"| {g['slope_mib_per_100_iters']:+.1f} "
                    f"| {g['growth_second_half_mib']:+.1f} "
                    f"| {statistics.median(run['iter_s']):.2f} |")
        lines.append("")
        for run in data["memory_flatness"]:
            mode = run["gym_env_vectorize_mode"]
            series = ", ".join(f"{v:.0f}" for v in run["env_runner_rss_mib"])
            lines.append(f"EnvRunner RSS series ({mode}): {series}  ")
            kept = run.get("env_runner_retained_obs_mib") or []
            if kept and all(k is not None for k in kept):
                lines.append(f"Observations of ongoing-episode chunks the EnvRunner keeps "
                             f"(MiB, {mode}): {', '.join(f'{k:.1f}' for k in kept)}  ")
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Reproduce: .venv/bin/python benchmarks/env_throughput.py (full); "
               "add --quick for the smoke test.")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: Pong, 1 round x 1.5 s, 3 memory iterations (one "
                             "mode); writes to --out or a fresh temp dir, never to "
                             "benchmarks/results")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results directory (default: {DEFAULT_OUT.relative_to(REPO)})")
    parser.add_argument("--games", nargs="+", default=None,
                        help="Atari games (default Pong Breakout; --quick: Pong); memory "
                             "flatness runs on the first")
    parser.add_argument("--seconds", type=float, default=None,
                        help="time budget of one measurement (default 5, --quick 1.5)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds (default 3, --quick 1)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="warm-up seconds per measurement (default 0.5, --quick 0.2)")
    parser.add_argument("--memory-iters", type=int, default=None,
                        help="training iterations of the memory check (default 40, "
                             "--quick 3; 0 skips it)")
    parser.add_argument("--memory-modes", nargs="+", default=None,
                        choices=["sync", "vector_entry_point"],
                        help="vectorize modes of the memory check (default both, "
                             "--quick vector_entry_point)")
    parser.add_argument("--report-only", action="store_true",
                        help="only rebuild summary.md from <out>/results.json")
    parser.add_argument("--skip-rllib", action="store_true",
                        help="pure env measurements only (no Ray, no memory check)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads in the driver (default 1)")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = dict(games=["Pong"] if quick else ["Pong", "Breakout"],
                    seconds=1.5 if quick else 5.0, rounds=1 if quick else 3,
                    warmup=0.2 if quick else 0.5, memory_iters=3 if quick else 40,
                    memory_modes=["vector_entry_point"] if quick
                    else ["sync", "vector_entry_point"])
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.skip_rllib:
        args.memory_iters = 0
    if quick and args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="env_throughput_quick_"))
    if quick and args.out.resolve() == DEFAULT_OUT.resolve():
        parser.error("--quick must not write into benchmarks/results/env_throughput")
    if args.out is None:
        args.out = DEFAULT_OUT
    return args


def versions() -> Dict[str, str]:
    import ale_py
    import gymnasium

    found = {"ale_py": ale_py.__version__, "gymnasium": gymnasium.__version__,
             "numpy": np.__version__}
    for name in ("ray", "torch"):
        try:
            found[name] = __import__(name).__version__
        except ImportError:
            pass
    return found


def report_only(out: Path) -> int:
    import json

    data = json.loads((out / "results.json").read_text())
    for run in data.get("memory_flatness", []):  # derived figures, recomputed
        run["env_runner"] = growth(run["env_runner_rss_mib"])
        run["driver"] = growth(run["driver_rss_mib"])
    write_results(out, data)
    print(f"wrote {out / 'summary.md'}")
    return 0


def write_results(out: Path, data: Dict[str, Any]) -> None:
    """`results.json` and the `summary.md` made from it, which is also printed."""
    write_json(out / "results.json", data)
    summary = summary_markdown(data)
    (out / "summary.md").write_text(summary)
    print(summary)


def main(argv=None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    if args.report_only:
        return report_only(out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"results: {out}", flush=True)
    t_start = time.perf_counter()
    data: Dict[str, Any] = {
        "command": command_line(None if argv is None else [sys.argv[0]] + list(argv)),
        "machine": machine_note(),
        "versions": versions(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "settings": {
            "games": args.games, "seconds": args.seconds, "rounds": args.rounds,
            "warmup_s": args.warmup, "num_envs": NUM_ENVS, "frame_skip": FRAME_SKIP,
            "protocol": "classic", "sample_num_timesteps": SAMPLE_TIMESTEPS,
            "torch_threads": args.torch_threads, "memory_iters": args.memory_iters,
            "memory_modes": args.memory_modes if args.memory_iters else [],
            "quick": args.quick, "ray_init": {k: v for k, v in RAY_INIT_KWARGS.items()},
        },
        "games": {},
        "memory_flatness": [],
    }
    import hca_rllib  # noqa: F401  (registers atari/<Game>)

    ray = None
    if not args.skip_rllib:
        import ray
        from hca_rllib.runner import start_local_ray
        import torch

        torch.set_num_threads(args.torch_threads)
        start_local_ray(**RAY_INIT_KWARGS)
    try:
        for game in args.games:
            print(f"{game}: throughput", flush=True)
            data["games"][game] = measure_game(game, args)
        for mode in args.memory_modes if args.memory_iters > 0 else []:
            print(f"{args.games[0]}: memory, {mode}, {args.memory_iters} iterations",
                  flush=True)
            data["memory_flatness"].append(
                memory_flatness(args.games[0], mode, args.memory_iters))
    finally:
        if ray is not None:
            ray.shutdown()
    data["wall_s"] = time.perf_counter() - t_start
    try:
        data["loadavg_at_end"] = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        pass
    write_results(out, data)
    print(f"wrote {out / 'results.json'} and {out / 'summary.md'} in {data['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
