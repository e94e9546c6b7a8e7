"""Running a benchmark script in tests: one helper, so every test runs them alike."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_script(name: str, *args, timeout: int = 400) -> subprocess.CompletedProcess:
    """`benchmarks/<name> <args>` from the repository root, output captured; it must exit 0
    (else the assertion shows the tails of stdout and stderr)."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc
