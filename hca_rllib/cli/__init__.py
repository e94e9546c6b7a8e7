"""Command line: `hca-rllib train | evaluate | report | sweep | probe` (also `python -m hca_rllib ...`).

`train` runs on an embedded local Ray (loopback only, sized to this machine) unless
`--address` or `RAY_ADDRESS` points at a cluster. It writes a run directory (see
`hca_rllib.runner`): the resolved config, one JSON line per iteration, TensorBoard and
W&B logs, and checkpoints that `--resume` continues from. `evaluate` plays a checkpoint;
`report` turns run directories into learning curves, tables and a Markdown page; `probe`
measures a task's information I(A; Z | S) before training (`hca_rllib.probe`).
Bad arguments exit with status 2 and a one-line message; a write into the run directory
that fails (a full disk) exits with status 74 (EX_IOERR) and one line naming the file or
directory and the free space, the previous checkpoint kept for `--resume`. Every path argument may be
relative (to the working directory) or start with `~`; it is made absolute once, by its
argument type (`hca_rllib.cli.arguments`). Each command is one module of this package
(`train`, `evaluate`, `sweep`, `report`, `probe`): its arguments and the checks that turn
them into a call of the library, which never imports this package.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import List

from hca_rllib.cli import evaluate, probe, report, sweep, train
from hca_rllib.cli.arguments import OneLineParser, UsageError

# The subcommands, in the order `hca-rllib --help` lists them: each module holds its
# `HELP`, `add_arguments(parser)` and `run(args)`.
COMMANDS = {"train": train, "evaluate": evaluate, "sweep": sweep, "report": report, "probe": probe}


class _Parser(OneLineParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, name="hca-rllib", **kwargs)


def make_parser() -> argparse.ArgumentParser:
    """The `hca-rllib` parser with every subcommand's arguments."""
    parser = _Parser(prog="hca-rllib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, command in COMMANDS.items():
        command.add_arguments(commands.add_parser(name, help=command.HELP))
    return parser


def main(argv: List[str] | None = None) -> int:
    """Parse `argv` (default: the command line) and run the command; its exit status, a bad
    argument reported as one line on stderr."""
    args = make_parser().parse_args(argv)
    from hca_rllib.envs import EnvResolutionError
    from hca_rllib.runner import EXIT_DISK, CheckpointError, DiskWriteError, RayStartError, ResultsError

    try:
        from hca_rllib.paths import default_paths

        try:  # HCA_RLLIB_PATHS: read by every config a command builds
            default_paths()
        except ValueError as error:
            raise UsageError(str(error)) from None
        return COMMANDS[args.command].run(args)
    except (UsageError, CheckpointError, EnvResolutionError, ResultsError) as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return 2
    except DiskWriteError as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return EXIT_DISK
    except RayStartError as error:
        print(f"hca-rllib: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hca-rllib: interrupted; the last checkpoint is kept (resume with --resume)", file=sys.stderr)
        return 130


def _terminate_as_interrupt(signum, frame) -> None:
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)  # Tune's, during a sweep: it stops and saves the experiment
    else:
        raise KeyboardInterrupt


def run(argv: List[str] | None = None) -> int:
    """The `hca-rllib` command: `main`, with SIGTERM (`ray job stop`, a pod's termination,
    `kill`) taking Ctrl-C's path: a run closes its logs and keeps its last checkpoint, a
    sweep lets Tune save the experiment; either continues with `--resume`."""
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    return main(argv)

