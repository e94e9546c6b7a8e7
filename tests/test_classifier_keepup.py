"""The quick mode of `benchmarks/classifier_keepup.py`: how much of the information in the
return the classifier recovers, per classifier option (`hindsight_lr`,
`hindsight_epochs`, `hindsight.hiddens`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.benchmark
def test_classifier_keepup_quick(tmp_path):
    """`benchmarks/classifier_keepup.py --quick`: the earlier small classifier and the
    package default's on delayed_effect_L10_sd1, 1 seed, 3072 steps; the summary has both
    with finite scores."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "classifier_keepup.py"),
                           "--quick", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    options = summary["settings"]["delayed_effect_L10_sd1"]["options"]
    assert set(options) == {"default", "h128_lr3x_ep4"}
    for stats in options.values():
        assert len(stats["seeds"]) == 1 and math.isfinite(stats["score_mean"])
    assert options["h128_lr3x_ep4"]["vs_default"]["seeds"] == [0]
    record = json.loads((tmp_path / "delayed_effect_L10_sd1" / "h128_lr3x_ep4_seed0.json").read_text())
    assert record["overrides"]["hindsight_epochs"] == 4
    assert (tmp_path / "summary.md").read_text().startswith("# Classifier keep-up")
