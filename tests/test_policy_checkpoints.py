"""`benchmarks/policy_checkpoints.py --quick`: the checkpoints along A2C's learning curve
that the probe reads are kept at each mark, load as policies, and a second start trains
nothing more."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scripts import run_script

REPO = Path(__file__).resolve().parents[1]


def _run(out: Path) -> str:
    return run_script("policy_checkpoints.py", "--cells", "minatar_breakout", "--quick", "--nice", "0",
                      "--out", out).stdout


@pytest.mark.benchmark
def test_marks_are_kept_and_load(tmp_path):
    from hca_rllib.evaluation import find_checkpoint, load_checkpoint_module

    sys.path.insert(0, str(REPO / "benchmarks"))
    import policy_checkpoints

    expected = policy_checkpoints.marks(policy_checkpoints.QUICK_BUDGET)
    assert expected == [200, 800, 2000, 4000]
    _run(tmp_path)
    cell = tmp_path / "minatar_breakout_seed0"
    record = json.loads((cell / "marks.json").read_text())
    assert sorted(map(int, record["marks"])) == expected
    previous = 0
    for mark in expected:
        entry = record["marks"][str(mark)]
        assert mark <= entry["env_steps"] < mark + 1024 and entry["env_steps"] > previous, entry
        previous = entry["env_steps"]
        meta = json.loads((cell / f"step_{mark}" / "hca_checkpoint.json").read_text())
        assert meta["env_steps"] == entry["env_steps"]
    module = load_checkpoint_module(find_checkpoint(cell / f"step_{expected[-1]}"))
    assert module is not None
    # A second start finds every mark kept and trains nothing.
    assert "training to" not in _run(tmp_path)
