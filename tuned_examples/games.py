"""The per-game facts of the tuned examples, as data: one row a game.

Each script `tuned_examples/<family>/<module>.py` is a few lines that look up its row
here (by its own file name) and call the shared `tuned_examples.common.main`. A row holds
the game id, its display name, the expected scores with their sources, and notes; the
budget, protocol and hyperparameters are the family's (`tuned_examples/common.py`).
Reference scores and how they were obtained: ``docs/benchmarks.md``.
"""

from __future__ import annotations

import textwrap
from typing import Any, Dict

# Atari (classic protocol), in the order of the sweep. `a2c_score`: the Stable-Baselines3
# zoo's A2C benchmark (`<Game>NoFrameskip-v4`, 10M steps, one run).
ATARI: Dict[str, Dict[str, Any]] = {
    "pong": {"game": "Pong", "name": "Pong", "a2c_score": 17.3},
    "breakout": {"game": "Breakout", "name": "Breakout", "a2c_score": 279.8},
    "beam_rider": {"game": "BeamRider", "name": "Beam Rider", "a2c_score": 2890},
    "qbert": {"game": "Qbert", "name": "Q*bert", "a2c_score": 3882},
    "seaquest": {"game": "Seaquest", "name": "Seaquest", "a2c_score": 1721},
    "space_invaders": {"game": "SpaceInvaders", "name": "Space Invaders", "a2c_score": 627},
    "enduro": {"game": "Enduro", "name": "Enduro", "a2c_score": 0, "note": "A2C fails on Enduro"},
}

# MinAtar, in the order of the sweep. `measured`: algorithm -> (mean score over the last
# 10% of iterations, env steps/s), one seed (0) at 300k env steps on a shared 2-core
# machine, with `MINATAR_COMMAND` below.
MINATAR: Dict[str, Dict[str, Any]] = {
    "breakout": {"game": "Breakout", "name": "Breakout",
                 "measured": {"A2C": (3.92, 2461), "HCA": (3.83, 2622)}},
    "asterix": {"game": "Asterix", "name": "Asterix",
                "measured": {"A2C": (0.55, 3996), "HCA": (0.47, 3332)}},
    "freeway": {"game": "Freeway", "name": "Freeway",
                "measured": {"A2C": (24.5, 4887), "HCA": (20.62, 4529)},
                "note": "Freeway: one batch of 8 episodes",
                "detail": "Freeway's episodes last about 2,540 steps and end together in the 8 "
                          "envs, so the last 10% of iterations hold one batch of 8 episodes."},
    "seaquest": {"game": "Seaquest", "name": "Seaquest",
                 "measured": {"A2C": (0.65, 3954), "HCA": (0.61, 4209)}},
    "space_invaders": {"game": "SpaceInvaders", "name": "Space Invaders",
                       "measured": {"A2C": (9.17, 3911), "HCA": (7.83, 3931)}},
}

GAMES = {"atari": ATARI, "minatar": MINATAR}

MINATAR_MEASURED_STEPS = 300_000
MINATAR_COMMAND = ("nice -n 10 python tuned_examples/minatar/{module}.py --algo {algo} --seed 0 "
                   "--stop-timesteps 300000 --output /tmp/tuned_minatar/{module}_{algo} --wandb off")


def game_row(family: str, module: str) -> Dict[str, Any]:
    """The row of `family` ("atari" or "minatar") and script `module` ("breakout", ...)."""
    if family not in GAMES or module not in GAMES[family]:
        known = [f"{f}/{m}" for f, rows in GAMES.items() for m in rows]
        raise ValueError(f"no tuned example {family}/{module}; known: {known}")
    return GAMES[family][module]


def expected(family: str, module: str) -> Dict[str, Dict[str, Any]]:
    """What each algorithm is expected to reach, with its source (a script's `EXPECTED`)."""
    row = game_row(family, module)
    if family == "atari":
        note = f"; {row['note']}" if "note" in row else ""
        return {
            "A2C": {"score": row["a2c_score"],
                    "source": f"Stable-Baselines3 zoo benchmark, {row['game']}NoFrameskip-v4, "
                              f"10M steps, 1 run (docs/benchmarks.md){note}"},
            "HCA": {"score": None,
                    "source": "not measured yet (the HCA paper's tables are not available here)"},
        }
    note = f"{row['note']}; " if "note" in row else ""
    out = {}
    for algo, (score, speed) in row["measured"].items():
        out[algo] = {
            "score_300k": score,
            "source": f"measured here at 300k steps, 1 seed: {score} (seed 0, mean score over "
                      f"the last 10% of iterations; {note}2-core machine, {speed:,} steps/s)",
            "command": MINATAR_COMMAND.format(module=module, algo=algo),
            "full_budget": "not measured yet",
        }
    return out


def minutes_per_run(module: str, budget: int) -> str:
    """The full budget's time at the measured speeds, in whole minutes ("8-10", "7")."""
    speeds = [speed for _, speed in MINATAR[module]["measured"].values()]
    low, high = round(budget / max(speeds) / 60), round(budget / min(speeds) / 60)
    return f"{low}" if low == high else f"{low}-{high}"


def describe(family: str, module: str, budget: int) -> str:
    """The script's description (its `--help`): protocol, budget, expected, how to run it."""
    row = game_row(family, module)
    script = f"python tuned_examples/{family}/{module}.py"
    if family == "atari":
        a2c = f"{row['a2c_score']}" + (f" ({row['note']})" if "note" in row else "")
        lines = [
            f"Atari {row['name']} (classic protocol), A2C or HCA, with the SB3 zoo's A2C "
            f"hyperparameters.",
            "",
            "Protocol and hyperparameters: tuned_examples/common.py (atari_config) and "
            "tuned_examples/README.md; the score is the unclipped full-game return.",
            f"Budget: {budget // 1_000_000}M agent steps ({4 * budget // 1_000_000}M frames), "
            f"the standard A2C budget.",
            f"Expected: A2C {a2c} (SB3 zoo benchmark, 10M steps, one run: see "
            f"docs/benchmarks.md). HCA: not measured yet.",
            "Time: about 11 hours on 2 cores, extrapolated (see tuned_examples/README.md).",
        ]
    else:
        scores = ", ".join(f"{algo} {score:.2f}" for algo, (score, _) in row["measured"].items())
        speeds = sorted(speed for _, speed in row["measured"].values())
        lines = [
            f"MinAtar {row['name']}, A2C or HCA.",
            "",
            f"Protocol: minatar/{row['game']}: MinAtar's 10x10 {row['name']} (uint8 planes, "
            f"minimal action set, sticky actions 0.1, difficulty ramping), MinAtar's network "
            f"(one 3x3 conv with 16 channels and a 128-unit dense layer). No frame stack, no "
            f"reward clipping; the score is the episode return (score in results.jsonl).",
            "Hyperparameters: tuned_examples/common.py (minatar_config) and "
            "tuned_examples/README.md.",
            f"Budget: {budget // 1_000_000}M env steps, chosen to fit a 2-core machine: the "
            f"two 300k-step runs went at {speeds[0]:,}-{speeds[-1]:,} env steps/s, so the full "
            f"budget takes roughly {minutes_per_run(module, budget)} minutes per run plus "
            f"Ray's start (an extrapolation).",
            f"Expected: measured here at 300k steps, 1 seed (seed 0), mean score over the last "
            f"10% of iterations: {scores}." + (f" {row['detail']}" if "detail" in row else "")
            + " A single seed at 15% of the budget: a smoke-level reference, not a result. "
              "At the full budget: not measured yet.",
        ]
    lines += ["", "Run:", f"  {script} --algo A2C",
              f"  {script} --algo HCA --seed 1 --output runs/hca1"]
    if family == "atari":
        lines.append(f"  {script} --num-env-runners 8 --address auto   # a cluster")
    lines.append(f"  {script} --output runs/hca1 --resume")
    return "\n".join(line if line.startswith("  ") else textwrap.fill(line, 88) for line in lines)
