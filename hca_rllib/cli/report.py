"""`hca-rllib report`: learning curves, tables and a Markdown page from run directories
(`hca_rllib.report`)."""

from __future__ import annotations

import argparse
import sys

from hca_rllib.cli.arguments import float_argument, input_directory_argument, output_directory_argument

HELP = "learning curves, IQM tables and diagnostics from run directories"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the arguments of `hca-rllib report` to `parser` (a subparser)."""
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=input_directory_argument,
                        help="run directories (run.json + results.jsonl) or directories above them")
    parser.add_argument("--output", default="runs/report", type=output_directory_argument,
                        help="directory for report.md, report.json and the figures")
    parser.add_argument("--final-fraction", type=float_argument(0.0, 1.0, low_open=True), default=0.1,
                        help="final score: mean over this trailing fraction of iterations "
                             "(default 0.1)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run `hca-rllib report` from parsed arguments; 0 on success, 2 on bad input."""
    from hca_rllib.report import write_report

    try:
        path = write_report(args.run_dirs, args.output,
                            final_fraction=args.final_fraction)
    except (FileNotFoundError, ValueError) as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0
