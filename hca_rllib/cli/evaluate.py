"""`hca-rllib evaluate`: play a checkpoint and print its full-game return (`hca_rllib.evaluation`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hca_rllib.cli.arguments import (SEED, int_argument, output_directory_argument, output_file_argument,
                                     path_argument)

HELP = "play a checkpoint and report its full-game return"


def video_argument(text: str) -> Path:
    """argparse `type` for `evaluate --video`: a .gif or .mp4 file to write."""
    path = output_file_argument(text)
    if path.suffix.lower() not in (".gif", ".mp4"):
        raise argparse.ArgumentTypeError(f"must end in .gif or .mp4, got {text!r}")
    return path


def evaluation_output_argument(text: str) -> Path:
    """argparse `type` for `evaluate --output`: a .json file, else a directory (for
    evaluation.json)."""
    path = path_argument(text)
    return output_file_argument(text) if path.suffix == ".json" else output_directory_argument(text)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `hca-rllib evaluate` to `parser` (a subparser)."""
    parser.add_argument("checkpoint", type=path_argument,
                        help="a checkpoint directory, or a run directory (its newest valid checkpoint)")
    parser.add_argument("--episodes", type=int_argument(1), default=10, help="games to play")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="take the most likely action")
    mode.add_argument("--stochastic", action="store_true", help="sample actions (the default)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--video", type=video_argument, default=None, help="write one game as .gif or .mp4 here")
    parser.add_argument("--output", type=evaluation_output_argument, default=None,
                        help="a .json file, or a directory for evaluation.json (default: beside the checkpoint)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run `hca-rllib evaluate` from parsed arguments; prints the summary, returns 0."""
    from hca_rllib.evaluation import evaluate_checkpoint

    summary = evaluate_checkpoint(
        args.checkpoint, episodes=args.episodes, greedy=args.greedy, seed=args.seed,
        video=args.video, output=args.output,
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "returns"}, indent=1))
    return 0
