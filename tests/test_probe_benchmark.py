"""`benchmarks/probe.py --quick`: the probe's benchmark script runs end to end, so it cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run_script(name: str, *args, timeout: int = 400) -> subprocess.CompletedProcess:
    """`benchmarks/<name> <args>` from the repository root; it must exit 0."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.mark.benchmark
def test_probe_quick(tmp_path):
    """`benchmarks/probe.py --quick`: a known-answer setting and MinAtar Breakout at tiny
    budgets; one JSON per task, and the summary's rows with their information and CIs."""
    _run_script("probe.py", "--quick", "--out", tmp_path, timeout=300)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["command"] == ".venv/bin/python benchmarks/probe.py --quick"
    rows = {row["task"]: row for row in summary["rows"]}
    assert set(rows) == {"delayed_effect_L3_sd1", "minatar_Breakout"}
    for name, row in rows.items():
        assert (tmp_path / f"{name}.json").is_file()
        assert row["ci"][0] <= row["information"] <= row["ci"][1]
        assert row["episodes"] <= 150 and row["decisions"] <= 3_000 + 8
    assert rows["delayed_effect_L3_sd1"]["closed_form_start_state"] == pytest.approx(0.141, abs=0.001)
    assert "| minatar_Breakout |" in (tmp_path / "summary.md").read_text()
