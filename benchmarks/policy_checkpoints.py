"""A2C policies along the learning curve, for the probe on trained policies.

Trains A2C (the tuned examples' settings, `tuned_examples/common.py`) on each cell and keeps
the checkpoint at about 5%, 20%, 50% and 100% of the budget: MinAtar games to 1M env steps,
Pong and Breakout to 2M agent steps. Each mark is one `run_training` leg resumed from the
last, so a kill loses at most `--checkpoint-minutes` of training, and a restart continues.

* Where they live: `--out` (default `runs/policy_checkpoints/`, ignored by git, where
  `benchmarks/outcome_probe.py` reads them; `--quick`: a temp dir unless `--out` is given),
  `<cell>/step_<mark>/` each an ordinary checkpoint (`hca-rllib probe --checkpoint DIR`,
  `hca-rllib evaluate`), with `marks.json` listing the marks kept and their env steps.
  They are reproducible from this script (fixed seeds; a fresh machine reruns it).
* Priority: the process lowers its priority (`--nice`, default 19) and uses one core and
  one torch thread, the EnvRunner in the driver.

    nohup nice -n 19 .venv/bin/python benchmarks/policy_checkpoints.py > runs/policy_checkpoints.log 2>&1 &
    .venv/bin/python benchmarks/policy_checkpoints.py --cells minatar_breakout --quick
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

MARK_FRACTIONS = (0.05, 0.2, 0.5, 1.0)
MINATAR_GAMES = ("Breakout", "SpaceInvaders", "Asterix", "Freeway", "Seaquest")
ATARI_GAMES = ("Breakout", "Pong")
MINATAR_BUDGET = 1_000_000
ATARI_BUDGET = 2_000_000
# Cell name -> (family, game, budget). MinAtar first (minutes each), then Atari (hours).
CELLS = {**{f"minatar_{g.lower()}": ("minatar", g, MINATAR_BUDGET) for g in MINATAR_GAMES},
         **{f"atari_{g.lower()}": ("atari", g, ATARI_BUDGET) for g in ATARI_GAMES}}
QUICK_BUDGET = 4_000
DEFAULT_OUT = ROOT / "runs" / "policy_checkpoints"
RESULTS = ROOT / "benchmarks" / "results"


def marks(budget: int):
    return [int(round(fraction * budget)) for fraction in MARK_FRACTIONS]


def cell_config(name: str, seed: int, quick: bool):
    from tuned_examples.common import atari_config, minatar_config

    family, game, _ = CELLS[name]
    config = atari_config(game, "A2C") if family == "atari" else minatar_config(game, "A2C")
    if quick:
        config.reporting(min_sample_timesteps_per_iteration=256)
    config.debugging(seed=seed)
    return config


def train_cell(name: str, out: Path, seed: int, quick: bool, checkpoint_minutes: float, *, torch_threads: int = 1,
               stop=lambda: False) -> bool:
    """Train the cell's marks not yet kept, in order; before each, `stop()` may end the
    cell (a time limit). Returns whether every mark is kept."""
    from common import write_json

    from hca_rllib.runner import newest_valid_checkpoint, run_training

    budget = QUICK_BUDGET if quick else CELLS[name][2]
    cell_dir = out / f"{name}_seed{seed}"
    run_dir = cell_dir / "run"
    record_path = cell_dir / "marks.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"cell": name, "seed": seed,
                                                                                 "budget": budget, "marks": {}}
    for mark in marks(budget):
        target = cell_dir / f"step_{mark}"
        if target.exists():
            continue
        if stop():
            print(f"{name} seed {seed}: time limit reached; stopping before {mark:,} env steps (re-run to resume)",
                  flush=True)
            return False
        print(f"{name} seed {seed}: training to {mark:,} env steps", flush=True)
        line = run_training(cell_config(name, seed, quick), run_dir, mark, run_info={"cell": name, "mark": mark},
                            resume=run_dir.exists(), checkpoint_every=0, keep_checkpoints=2, wandb="off",
                            tensorboard=False, progress=False, checkpoint_every_s=checkpoint_minutes * 60,
                            torch_threads=torch_threads)
        checkpoint = newest_valid_checkpoint(run_dir, lambda message: print(f"warning: {message}"))
        tmp = cell_dir / f".tmp_step_{mark}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(checkpoint, tmp)
        os.replace(tmp, target)
        record["marks"][str(mark)] = {"env_steps": line["env_steps"], "score": line.get("score"),
                                      "episode_return_mean": line.get("episode_return_mean"),
                                      "checkpoint": target.name, "time": time.time()}
        write_json(record_path, record, indent=1, allow_nan=True)
        print(f"{name} seed {seed}: kept {target} at {line['env_steps']:,} env steps, score {line.get('score')}",
              flush=True)
    return True


def report(out: Path, names, seed: int) -> None:
    """The marks kept so far, per cell (`marks.json`)."""
    for name in names:
        record_path = out / f"{name}_seed{seed}" / "marks.json"
        marks_kept = json.loads(record_path.read_text())["marks"] if record_path.exists() else {}
        kept = ", ".join(f"{int(mark):,} ({entry['env_steps']:,} env steps, score {entry.get('score')})"
                         for mark, entry in sorted(marks_kept.items(), key=lambda item: int(item[0])))
        print(f"{name} seed {seed}: {kept or 'no mark kept'}")


def main(argv=None) -> int:
    from common import TimeLimit, benchmark_parser, check_out

    from hca_rllib.cli.arguments import int_argument, output_directory_argument

    parser = benchmark_parser(__doc__.splitlines()[0], quick_help=f"{QUICK_BUDGET:,} steps per cell (a check); "
                              "into --out or a temp dir", out_type=output_directory_argument,
                              out_help=f"where the cells go (default {DEFAULT_OUT})",
                              report_help="only list the marks kept so far",
                              torch_help="torch threads of the training (default 1)")
    parser.add_argument("--cells", nargs="+", choices=list(CELLS), default=list(CELLS))
    parser.add_argument("--seed", type=int_argument(0), default=0)
    parser.add_argument("--nice", type=int_argument(0, 19), default=19)
    parser.add_argument("--checkpoint-minutes", type=float, default=3.0)
    args = parser.parse_args(argv)
    check_out(parser, args, default_out=DEFAULT_OUT, results_root=RESULTS, quick_prefix="hca_policy_checkpoints_quick_")
    if args.report_only:
        report(args.out, args.cells, args.seed)
        return 0
    print(f"checkpoints into {args.out}", flush=True)
    os.nice(args.nice)
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # one core: Ray and ale-py's threads too
    limit = TimeLimit(args.time_limit_min)
    for name in args.cells:
        if not train_cell(name, args.out, args.seed, args.quick, args.checkpoint_minutes,
                          torch_threads=args.torch_threads, stop=limit.reached):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
