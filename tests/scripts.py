"""Running a benchmark script in tests: one helper, so every test runs them alike."""

import importlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def run_script(name: str, *args, timeout: int = 400) -> subprocess.CompletedProcess:
    """`benchmarks/<name> <args>` from the repository root, output captured; it must exit 0
    (else the assertion shows the tails of stdout and stderr)."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def import_benchmark(name: str):
    """The module `benchmarks/<name>.py` (its directory on `sys.path`, as the scripts run)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
