"""`benchmarks/probe.py --quick`: the probe's benchmark script runs end to end, so it cannot rot."""

from __future__ import annotations

import json

import pytest

from scripts import run_script


@pytest.mark.benchmark
def test_probe_quick(tmp_path):
    """`benchmarks/probe.py --quick`: a known-answer setting and MinAtar Breakout at tiny
    budgets; one JSON per task, and the summary's rows with their information and CIs."""
    run_script("probe.py", "--quick", "--out", tmp_path, timeout=300)
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


@pytest.mark.benchmark
def test_outcome_probe_quick(tmp_path):
    """`benchmarks/outcome_probe.py --quick`: one reading (MinAtar Breakout, uniform, 3,000
    steps) and one floor cell, each stored as it finishes, and the summary over them; a
    second run finds both stored and runs nothing."""
    run_script("outcome_probe.py", "--quick", "--out", tmp_path, timeout=300)
    reading = json.loads((tmp_path / "readings" / "minatar_breakout__uniform.json").read_text())
    assert reading["probe"]["outcome"] == "reward" and reading["probe"]["window"] == 32
    assert reading["probe"]["decisions"] <= 3_000 + 8 and "held_out_episodes" not in reading["probe"]["split"]
    floor = json.loads((tmp_path / "floor.json").read_text())["cells"]["bandit__0.05__1000__seed0"]
    assert floor["held_out_pairs"] == pytest.approx(1_000, abs=2)
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["rows"]
    assert row["task"] == "minatar_breakout" and row["policy"] == "uniform"
    # 3,000 steps leave fewer held-out pairs than the floor's 1,000: no verdict.
    assert row["floor_spread"]["budget"] == 1_000 and row["verdict"].startswith("n/a (fewer held-out pairs")
    for key in ("return_per_decision", "reward_per_pair", "reward_per_decision"):
        figure = row[key]
        assert figure["ci_bonferroni"][0] <= figure["information"] <= figure["ci_bonferroni"][1]
    assert "| minatar_breakout | uniform |" in (tmp_path / "summary.md").read_text()
    again = run_script("outcome_probe.py", "--quick", "--out", tmp_path, timeout=300)
    assert "done" not in again.stdout and "floor (" not in again.stdout
