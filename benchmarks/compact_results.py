"""Rewrite stored benchmark runs as compact records (`common.compact_record`), or check them.

The benchmark scripts write compact records themselves (`common.store_run`); this script
converts a run store written in the older, full format (pretty-printed JSON with every
episode's return and length) and checks that every committed run record is compact. It is
idempotent: a compact record is left as it is.

    .venv/bin/python benchmarks/compact_results.py --check    # exit 1 if a run under results/ is not compact
    .venv/bin/python benchmarks/compact_results.py DIR ...    # convert the run stores DIR ...

A run record is any `*_seed*.json` at any depth of a store (`<task>/<method>_seed<k>.json`
of the grid benchmarks, `<cell>.json` of `atari_long.py`). `--keep-raw` also writes each
full record beside its compact one (`*.raw.json.gz`, ignored by git).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from common import RECORD_FORMAT, compact_record, store_run, write_json  # noqa: E402

RESULTS = BENCH_DIR / "results"
PATTERN = "*_seed*.json"  # one run per file, at any depth


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="*", type=Path,
                        help="run stores (default: benchmarks/results, every run record below it)")
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if any run "
                        "is not compact")
    parser.add_argument("--keep-raw", action="store_true",
                        help="also write the full record beside the compact one (not in git)")
    args = parser.parse_args(argv)
    dirs = args.dirs or [RESULTS]
    for directory in dirs:
        if not directory.is_dir():
            parser.error(f"{directory} is not a directory")
    pending = converted = 0
    before = after = 0
    for directory in dirs:
        for path in sorted(directory.rglob(PATTERN)):
            size = path.stat().st_size
            data = json.loads(path.read_text())
            if data.get("record_format") == RECORD_FORMAT:
                continue
            pending += 1
            if args.check:
                print(f"not compact: {path}")
                continue
            if args.keep_raw:
                store_run(path, data)
            else:
                write_json(path, compact_record(data))
            converted += 1
            before += size
            after += path.stat().st_size
    if args.check:
        print(f"{pending} run(s) not compact")
        return 1 if pending else 0
    print(f"converted {converted} run(s): {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
