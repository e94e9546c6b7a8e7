"""benchmarks/same_behaviour.py: training is deterministic for a fixed seed (two
processes record the same arrays bit for bit, so the check can tell a changed arithmetic
from noise), and its comparison flags what it must."""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from same_behaviour import compare, record  # noqa: E402


def test_compare_tells_equal_close_and_different_apart():
    base = {"batch/adv": np.array([1.0, -2.0, 4.0]), "first/w": np.ones(3, np.float32),
            "last/w": np.ones(3, np.float32)}
    same = compare(base, dict(base), 1e-6)
    assert all(r["within_rtol"] and r["bitwise_equal"] for r in same.values())
    close = dict(base, **{"batch/adv": base["batch/adv"] * (1 + 1e-8)})
    assert compare(base, close, 1e-6)["batch"] == {"same_keys": True, "max_relative_difference": pytest.approx(1e-8),
                                                   "within_rtol": True, "bitwise_equal": False, "arrays": 1}
    far = dict(base, **{"first/w": np.array([1.0, 1.0, 1.0 + 1e-5], np.float32)})
    assert not compare(base, far, 1e-6)["first"]["within_rtol"]
    renamed = {k.replace("adv", "advantages"): v for k, v in base.items()}
    assert compare(base, renamed, 1e-6)["batch"]["same_keys"] is False


@pytest.mark.slow  # two training processes
def test_two_processes_record_the_same_training_bit_for_bit(tmp_path):
    for name in ("one", "two"):
        record(REPO, "CartPole-v1", "default", 2, tmp_path / f"{name}.npz")
    with np.load(tmp_path / "one.npz") as one, np.load(tmp_path / "two.npz") as two:
        one, two = dict(one), dict(two)
    assert {k.split("/")[0] for k in one} == {"batch", "first", "last"}
    assert len(one["batch/advantages"]) >= 512  # the default batch: every row the loss saw
    report = compare(one, two, 1e-6)
    assert all(r["bitwise_equal"] for r in report.values()), report
    params = [k[len("first/"):] for k in one if k.startswith("first/")]
    assert any(not np.array_equal(one[f"first/{k}"], one[f"last/{k}"]) for k in params)  # it trained
