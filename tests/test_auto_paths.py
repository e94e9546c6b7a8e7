"""`benchmarks/auto_paths.py --quick`: every configuration of the page on what "auto"
costs builds, takes the path the page states for it, and trains."""

from __future__ import annotations

import pytest

from hca_rllib.paths import default_paths
from scripts import run_script

# config -> (sampler, learner path) that "auto" resolves to (benchmarks/auto_paths.py).
EXPECTED = {
    "cartpole_lean": ("lean", "lean"),
    "cartpole_rllib": ("rllib", None),
    "cartpole_mean_std": ("rllib", None),
    "cartpole_step_callback": ("rllib", None),
    "cartpole_learner_piece": ("lean", "lean"),
    "cartpole_learner_piece_rllib": ("lean", "rllib"),
    "frozenlake_lean": ("lean", "lean"),
    "frozenlake_rllib": ("rllib", None),
}


@pytest.mark.benchmark
@pytest.mark.skipif(default_paths() != ("auto", "auto"), reason="the page is about what \"auto\" picks; "
                    "HCA_RLLIB_PATHS sets the paths")
def test_auto_paths_quick():
    proc = run_script("auto_paths.py", "--quick")
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| config")}
    assert set(rows) == set(EXPECTED), proc.stdout
    for name, (sampler, learner_path) in EXPECTED.items():
        cells = rows[name]
        assert cells[0] == sampler, (name, cells)
        if learner_path is not None:
            assert cells[1] == learner_path, (name, cells)
        steps_per_s = float(cells[2].split(" ")[0].replace(",", ""))
        assert steps_per_s > 0, (name, cells)
