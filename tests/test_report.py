"""`hca_rllib.stats` against brute force, and `hca_rllib.report.write_report` on
synthetic run directories with known score curves (no Ray, no training)."""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hca_rllib import stats
from hca_rllib.cli import report as report_cli
from hca_rllib.report import (
    common_grid_curves,
    final_score,
    find_run_dirs,
    method_label,
    write_report,
)

# ------------------------------------------------------------------------- stats


def test_iqm_by_hand():
    x = np.array([10.0, 1.0, 7.0, 3.0, 100.0, 5.0, -50.0, 4.0])  # n=8: drop 2 per end
    assert stats.iqm(x) == pytest.approx((3 + 4 + 5 + 7) / 4)
    assert stats.iqm(np.array([1.0, 2.0, 30.0])) == pytest.approx(11.0)  # n=3: int(.75)=0
    assert stats.iqm(np.array([4.0, 1.0, 2.0, 9.0])) == pytest.approx(3.0)  # middle two
    rows = np.array([[1.0, 2.0, 3.0, 50.0], [0.0, 10.0, 20.0, -5.0]])
    np.testing.assert_allclose(stats.iqm(rows, axis=1), [2.5, 5.0])
    assert stats.iqm(rows, axis=None) == pytest.approx(np.mean([1, 2, 3, 10]))


def test_iqm_matches_scipy_trim_mean():
    from scipy.stats import trim_mean

    rng = np.random.default_rng(1)
    for n in range(1, 12):
        x = rng.normal(size=(5, n))
        np.testing.assert_array_equal(stats.iqm(x, axis=1), trim_mean(x, 0.25, axis=1))


def test_bootstrap_ci_brute_force_small_sample():
    """With 3 values there are 27 equally likely ordered resamples: the bootstrap
    distribution must match the exhaustive one (its quantiles, and the 90% interval)."""
    values = np.array([0.0, 1.0, 5.0])
    exhaustive = np.array([np.mean(values[list(i)])
                           for i in itertools.product(range(3), repeat=3)])
    point, low, high = stats.bootstrap_ci(values, reps=20_000)
    assert point == pytest.approx(2.0)
    # the extreme resamples (all 0 / all 5) have mass 1/27 > 2.5% each
    assert low == np.percentile(exhaustive, 2.5, method="inverted_cdf") == 0.0
    assert high == np.percentile(exhaustive, 97.5, method="inverted_cdf") == 5.0
    # 60% interval: the 20% and 80% quantiles fall well inside the atoms 2/3 and 10/3
    _, low, high = stats.bootstrap_ci(values, reps=20_000, level=0.6)
    assert low == pytest.approx(np.percentile(exhaustive, 20, method="inverted_cdf"))
    assert high == pytest.approx(np.percentile(exhaustive, 80, method="inverted_cdf"))


def test_iqm_ci_contains_truth_and_narrows_with_seeds():
    rng = np.random.default_rng(123)
    widths = []
    for n in (5, 20, 80):
        sample = rng.normal(loc=3.0, scale=1.0, size=n)
        point, low, high, method = stats.iqm_ci(sample)
        assert low <= point <= high
        assert low < 3.0 < high
        assert "stratified bootstrap" in method
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # fixed seed: reproducible bit for bit
    assert stats.iqm_ci(np.arange(6.0)) == stats.iqm_ci(np.arange(6.0))
    assert stats.iqm_ci([4.0])[:3] == (4.0, 4.0, 4.0)


def test_iqm_ci_stratified_resamples_within_tasks():
    """Task 0 always scores 0 and task 1 always 10: every stratified resample keeps
    half the runs of each task, so the IQM never moves."""
    scores = np.column_stack([np.zeros(6), np.full(6, 10.0)])
    point, low, high, method = stats.iqm_ci(scores)
    assert point == low == high == pytest.approx(5.0)
    assert "2 strata" in method


def test_probability_of_improvement():
    assert stats.probability_of_improvement([10, 11, 12], [1, 2, 3]) == 1.0
    assert stats.probability_of_improvement([1, 2, 3], [10, 11, 12]) == 0.0
    assert stats.probability_of_improvement([1, 2, 3], [1, 2, 3]) == 0.5
    # brute force: pairs (x > y) + half ties
    x, y = [1.0, 3.0, 3.0], [3.0, 2.0]
    pairs = [(a > b) + 0.5 * (a == b) for a in x for b in y]
    assert stats.probability_of_improvement(x, y) == pytest.approx(np.mean(pairs))


def test_optimality_gap():
    scores = np.array([0.2, 1.5, 0.9, 1.0])
    assert stats.optimality_gap(scores) == pytest.approx((0.8 + 0 + 0.1 + 0) / 4)
    point, low, high = stats.optimality_gap_ci(scores)
    assert low <= point <= high and 0 <= low and high <= 0.8
    assert stats.optimality_gap_ci(np.full(5, 2.0)) == (0.0, 0.0, 0.0)


def test_paired_stratified_difference_ci_brute_force():
    """Paired resampling: a constant shift gives a zero-width interval at the shift, and
    with 2 seeds x 1 task the 4 equally likely paired resamples give the exhaustive
    distribution of the mean difference (an unpaired bootstrap would be wider)."""
    base = np.array([[0.0, 10.0], [4.0, 2.0], [1.0, 7.0]])
    point, low, high = stats.paired_stratified_difference_ci(base + 0.5, base, np.mean)
    assert point == pytest.approx(0.5) and low == pytest.approx(0.5) and high == pytest.approx(0.5)
    a, b = np.array([3.0, 1.0]), np.array([0.0, 0.0])  # differences 3 and 1
    exhaustive = [np.mean([[3.0, 1.0][i] for i in idx])
                  for idx in itertools.product(range(2), repeat=2)]
    assert sorted(exhaustive) == [1.0, 2.0, 2.0, 3.0]  # each atom of mass >= 1/4
    point, low, high = stats.paired_stratified_difference_ci(a, b, np.mean, reps=20_000)
    assert (point, low, high) == (pytest.approx(2.0), pytest.approx(1.0), pytest.approx(3.0))
    # the IQM difference of a method better on every seed of every task is above 0
    rng = np.random.default_rng(0)
    base = rng.normal(size=(5, 3))
    point, low, high = stats.paired_stratified_difference_ci(base + 1.0, base, stats.iqm)
    assert low > 0 and point == pytest.approx(stats.iqm((base + 1.0).ravel()) - stats.iqm(base.ravel()))
    with pytest.raises(ValueError, match="same shape"):
        stats.paired_stratified_difference_ci(base, base[:, :2], np.mean)


def test_average_probability_of_improvement_by_hand():
    x = np.array([[1.0, 0.0], [3.0, 0.0]])  # task 0: {1, 3}; task 1: {0, 0}
    y = np.array([[2.0, 0.0], [2.0, 1.0]])  # task 0: {2, 2}; task 1: {0, 1}
    # task 0: pairs (1>2? no, no, 3>2 yes, yes) = 2/4; task 1: (0 vs 0 tie .5, 0 vs 1 no) x2 = 1/4
    assert stats.average_probability_of_improvement(x, y) == pytest.approx((0.5 + 0.25) / 2)


def test_bootstrap_band_one_row_and_shape():
    curves = np.array([[1.0, 2.0, 3.0]])
    mean, low, high = stats.bootstrap_band(curves)
    np.testing.assert_array_equal(mean, low)
    np.testing.assert_array_equal(mean, high)
    curves = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])
    mean, low, high = stats.bootstrap_band(curves)
    np.testing.assert_allclose(mean, [2.0, 1.0])
    assert low[0] < 2.0 < high[0] and low[1] == high[1] == 1.0


def test_paired_difference():
    out = stats.paired_difference({0: 2.0, 1: 3.0, 2: 5.0}, {0: 1.0, 1: 1.0, 2: 1.0, 9: 0.0})
    assert out["seeds"] == [0, 1, 2]
    assert out["mean"] == pytest.approx(7.0 / 3)
    assert out["excludes_zero"]
    assert stats.paired_difference({0: 1.0}, {1: 1.0}) is None


# ------------------------------------------------------------------------ report

ITERATIONS = 20
STEPS_PER_ITERATION = 512


def score_curve(method_offset: float, seed: int):
    """Score at iteration i (0-based): rises linearly; null for the first two."""
    return [None if i < 2 else method_offset + seed + 0.5 * i for i in range(ITERATIONS)]


def make_run(root: Path, env: str, algo: str, credit: str, seed: int, scores,
             *, torn: bool = False, game: bool = False, diagnostics: bool = None) -> Path:
    directory = root / env.replace("/", "_") / f"{credit}_s{seed}"
    directory.mkdir(parents=True)
    meta = {"algo": algo, "credit": credit, "env": env, "seed": seed,
            "stop_timesteps": ITERATIONS * STEPS_PER_ITERATION, "set": {},
            "command": f"hca-rllib train --algo {algo} --credit {credit} --env {env} --seed {seed}"}
    (directory / "run.json").write_text(json.dumps(meta))
    diagnostics = algo == "HCA" if diagnostics is None else diagnostics
    lines = []
    for i, score in enumerate(scores):
        row = {key: None for key in (
            "episode_return_mean", "game_return_mean", "mutual_information",
            "hindsight_accuracy", "policy_accuracy", "trust", "hca_ratio_mean",
            "hca_clip_fraction", "c2a2c_mask_fraction", "policy_loss")}
        row.update(iteration=i + 1, env_steps=(i + 1) * STEPS_PER_ITERATION + seed,
                   time_s=i * 0.5, steps_per_s=1000.0, score=score)
        row["game_return_mean" if game else "episode_return_mean"] = score
        if diagnostics:
            row.update(mutual_information=0.01 * i, hindsight_accuracy=0.5 + 0.02 * i,
                       policy_accuracy=0.5 + 0.01 * i, trust=min(1.0, 0.1 * i),
                       hca_clip_fraction=0.05, c2a2c_mask_fraction=0.3 if credit == "c2a2c" else None)
        lines.append(json.dumps(row))
    text = "\n".join(lines) + "\n"
    if torn:
        text += '{"iteration": 21, "env_steps": 10752, "sco'
    (directory / "results.jsonl").write_text(text)
    return directory


def expected_final(scores, fraction=0.1):
    window = scores[-max(1, math.ceil(fraction * len(scores) - 1e-9)):]
    values = [v for v in window if v is not None]
    return sum(values) / len(values)


def hand_iqm(values):
    values = sorted(values)
    cut = int(0.25 * len(values))
    kept = values[cut:len(values) - cut]
    return sum(kept) / len(kept)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    expected = {}
    # Env 1 (full-game score): A2C 3 seeds, HCA (hca) 4 seeds (the IQM trims one per end).
    for seed in range(3):
        make_run(root, "atari/Pong", "A2C", "a2c", seed, score_curve(0.0, seed), game=True)
    hca_seeds = {0: 20.0, 1: 25.0, 2: 21.0, 3: 50.0}
    for seed, offset in hca_seeds.items():
        make_run(root, "atari/Pong", "HCA", "hca", seed, score_curve(offset, 0), game=True)
    expected["atari/Pong"] = {
        "A2C": [expected_final(score_curve(0.0, s)) for s in range(3)],
        "HCA (hca)": [expected_final(score_curve(o, 0)) for o in hca_seeds.values()],
    }
    # Env 2 (episode return): A2C 3 seeds + one without any score; HCA (c2a2c) 3 seeds,
    # seed 1 with a torn last line.
    for seed in range(3):
        make_run(root, "CartPole-v1", "A2C", "a2c", seed, score_curve(100.0, seed))
        make_run(root, "CartPole-v1", "HCA", "c2a2c", seed, score_curve(90.0, 2 * seed),
                 torn=seed == 1)
    make_run(root, "CartPole-v1", "A2C", "a2c", 7, [None] * 5)
    expected["CartPole-v1"] = {
        "A2C": [expected_final(score_curve(100.0, s)) for s in range(3)],
        "HCA (c2a2c)": [expected_final(score_curve(90.0, 2 * s)) for s in range(3)],
    }
    out = root.parent / (root.name + "_report")
    # a parent directory and, again, one run directory inside it (counted once)
    page = write_report([root, root / "CartPole-v1" / "a2c_s0"], out)
    return root, out, page, expected


def _png_ok(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.is_file() and path.stat().st_size > 10_000, path
    image = mpimg.imread(path)[..., :3]
    assert image.shape[0] > 300 and image.shape[1] > 500
    not_white = np.any(image < 0.95, axis=-1).mean()
    assert 0.01 < not_white < 0.9, f"{path}: {not_white:.3f} of the pixels drawn"
    assert image.std() > 0.05


def _has_color(path: Path, rgb) -> bool:
    import matplotlib.image as mpimg

    image = mpimg.imread(path)[..., :3]
    return bool(np.any(np.all(np.abs(image - np.array(rgb) / 255) < 0.02, axis=-1)))


def test_report_finds_runs_and_skips_the_one_without_score(synthetic):
    root, out, page, _ = synthetic
    assert page == out / "report.md"
    data = json.loads((out / "report.json").read_text())
    assert len(find_run_dirs([root])) == 14
    assert len(data["runs"]) == 13
    assert [Path(s["run_dir"]).name for s in data["skipped"]] == ["a2c_s7"]
    assert any("unreadable line" in note and "c2a2c_s1" in note for note in data["notes"])
    torn = [r for r in data["runs"] if r["run_dir"].endswith("c2a2c_s1")][0]
    assert torn["iterations"] == ITERATIONS and torn["bad_lines"] == 1


def test_report_final_scores_iqm_and_probability_of_improvement(synthetic):
    _, out, _, expected = synthetic
    data = json.loads((out / "report.json").read_text())
    assert set(data["environments"]) == {"atari/Pong", "CartPole-v1"}
    for env, by_method in expected.items():
        methods = data["environments"][env]["methods"]
        assert set(methods) == set(by_method)
        for method, finals in by_method.items():
            summary = methods[method]
            assert sorted(summary["final_scores"]) == pytest.approx(sorted(finals))
            assert summary["n_seeds"] == len(finals)
            assert summary["iqm"] == pytest.approx(hand_iqm(finals))
            assert summary["ci_low"] <= summary["iqm"] <= summary["ci_high"]
    pong = data["environments"]["atari/Pong"]["methods"]
    # HCA finals 9.25 + offsets (20, 25, 21, 50): IQM = 9.25 + (21 + 25) / 2
    assert pong["HCA (hca)"]["iqm"] == pytest.approx(9.25 + 23.0)
    assert pong["HCA (hca)"]["probability_of_improvement_over_a2c"] == 1.0
    assert pong["A2C"]["probability_of_improvement_over_a2c"] is None
    cart = data["environments"]["CartPole-v1"]["methods"]
    # c2a2c finals 99.25, 101.25, 103.25 vs A2C 109.25, 110.25, 111.25
    assert cart["HCA (c2a2c)"]["probability_of_improvement_over_a2c"] == 0.0
    assert data["environments"]["atari/Pong"]["score_label"] == "return (full game)"
    assert data["environments"]["CartPole-v1"]["score_label"] == "episode return"


def test_report_images_exist_are_drawn_and_linked(synthetic):
    _, out, page, _ = synthetic
    data = json.loads((out / "report.json").read_text())
    markdown = page.read_text()
    for env, e in data["environments"].items():
        assert e["learning_curve"] and e["diagnostics"]
        for name in (e["learning_curve"], e["diagnostics"]):
            _png_ok(out / name)
            assert f"]({name})" in markdown
        # tab10 colours: A2C (first method) blue, the others follow
        assert _has_color(out / e["learning_curve"], (31, 119, 180))
    pong = data["environments"]["atari/Pong"]
    assert set(pong["learning_curve_methods"]) == {"A2C", "HCA (hca)"}
    assert pong["learning_curve_methods"]["A2C"]["seeds"] == 3
    assert "C2A2C mask fraction" not in pong["diagnostics_panels"]
    assert "C2A2C mask fraction" in data["environments"]["CartPole-v1"]["diagnostics_panels"]
    assert "Mutual information" in pong["diagnostics_panels"][0]
    for text in ("hca-rllib train --algo HCA --credit hca --env atari/Pong",
                 "| atari/Pong | HCA (hca) | 4 |", "a2c_s7", "no score yet (5 iterations)"):
        assert text in markdown


def test_report_single_seed_and_a2c_only(tmp_path):
    make_run(tmp_path / "runs", "HCA/Bandit-v0", "A2C", "a2c", 0, score_curve(1.0, 0))
    out = tmp_path / "report"
    args = report_cli.add_arguments(argparse.ArgumentParser()).parse_args(
        [str(tmp_path / "runs"), "--output", str(out), "--final-fraction", "0.25"])
    assert report_cli.run(args) == 0
    data = json.loads((out / "report.json").read_text())
    env = data["environments"]["HCA/Bandit-v0"]
    assert env["diagnostics"] is None and not (out / "diagnostics_HCA_Bandit-v0.png").exists()
    summary = env["methods"]["A2C"]
    assert summary["iqm"] == summary["ci_low"] == summary["ci_high"] == pytest.approx(
        expected_final(score_curve(1.0, 0), 0.25))
    assert "1 seed" in (out / "report.md").read_text()
    _png_ok(out / env["learning_curve"])


def test_report_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:  # a missing RUN_DIR: refused by its argument type
        report_cli.add_arguments(argparse.ArgumentParser()).parse_args(
            [str(tmp_path / "missing"), "--output", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "no such directory" in capsys.readouterr().err
    args = argparse.Namespace(run_dirs=[tmp_path], output=tmp_path / "out", final_fraction=0.1)
    assert report_cli.run(args) == 2
    assert "no run directory" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="no run directory"):
        write_report([tmp_path], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_no_report_without_a_scored_run(tmp_path, capsys):
    """A file for RUN_DIR is refused (it read as the directory holding it, and reported
    whatever runs were beside it); runs with no results yet give no report, not an empty
    one with exit status 0."""
    from hca_rllib.cli import main
    from hca_rllib.report import NoRunsError

    run = tmp_path / "runs" / "r0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"algo": "HCA", "credit": "hca", "env": "CartPole-v1", "seed": 0}))
    (run / "results.jsonl").write_text("")
    out = tmp_path / "out"
    with pytest.raises(NoRunsError, match="no run with a score.*no results yet"):
        write_report([tmp_path / "runs"], out)
    assert not out.exists()
    assert main(["report", str(tmp_path / "runs"), "--output", str(out)]) == 2
    assert "no run with a score" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(run / "run.json"), "--output", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "is a file, not a directory" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_helpers():
    assert method_label({"algo": "A2C", "credit": "a2c"}) == "A2C"
    assert method_label({"algo": "HCA", "credit": "mix"}) == "HCA (mix)"
    rows = [{"score": None}] * 25 + [{"score": float(i)} for i in range(5)]
    assert final_score(rows, 0.1) == pytest.approx(np.mean([2.0, 3.0, 4.0]))  # last 3 of 30
    assert final_score([{"score": None}], 0.1) is None
    grid, curves = common_grid_curves([(np.array([0.0, 10.0]), np.array([0.0, 10.0])),
                                       (np.array([2.0, 6.0]), np.array([1.0, 1.0]))])
    assert grid[0] == 2.0 and grid[-1] == 6.0
    np.testing.assert_allclose(curves[0], grid)
    np.testing.assert_allclose(curves[1], 1.0)


def test_markdown_sections_from_report_data():
    """report.md's sections are pure functions of report.json's data: the runs line, the
    notes only when there are any, the final-score table's rows, and why a run has no
    final score."""
    from hca_rllib.report import RunData, _markdown, _markdown_notes, _no_score_reason

    summary = {"n_runs": 2, "n_seeds": 1, "iterations": [3, 5], "env_steps_min": 1536, "command": None,
               "iqm": 2.5, "ci_low": None, "ci_high": None, "mean": 2.5,
               "probability_of_improvement_over_a2c": 0.75}
    env = {"score_label": "episode return", "learning_curve": "lc.png", "diagnostics": None,
           "diagnostics_panels": [], "performance_profile_data": None, "methods": {"HCA (hca)": summary}}
    data = {"inputs": ["runs"], "runs": [{}, {}], "final_fraction": 0.1, "ci_method": None,
            "skipped": [], "notes": [], "environments": {"Env|1": env}}
    text = _markdown(data, found=3)
    assert "3 run directories found under `runs`: 2 with scores, in 1 group(s)" in text
    assert "| Env\\|1 | HCA (hca) | 2 | 3-5 | 1,536 |" in text
    assert "- Env|1 / HCA (hca): `(not recorded)`" in text
    assert "| Env\\|1 | HCA (hca) | 1 | 2.50 (1 seed, no CI) | 2.50 | 0.75 |" in text
    assert "CI (none: fewer than 2 seeds everywhere)" in text
    assert "No diagnostics: no run of this environment logs them (A2C only)." in text
    assert "### Notes" not in text and _markdown_notes(data) == []
    data.update(skipped=[{"run_dir": "a", "reason": "no results yet"}], notes=["n"])
    assert _markdown_notes(data) == ["### Notes", "", "- skipped `a`: no results yet", "- n", ""]

    def run(rows):
        return RunData(Path("r"), {}, rows)

    assert _no_score_reason(run([]), 0.1) == "no results yet"
    assert _no_score_reason(run([{"score": None}] * 4), 0.1) == "no score yet (4 iterations)"
    assert _no_score_reason(run([{"score": 1.0}] + [{"score": None}] * 19), 0.1) == (
        "no score in its last 2 of 20 iterations")


def test_report_reads_results_with_the_runners_reader(tmp_path):
    """One reader (hca_rllib.runner.read_results): the torn last line is skipped and
    counted; a run damaged before its last line is listed as skipped, naming the line."""
    import hca_rllib.report as report
    from hca_rllib.runner import read_results

    assert report.read_results is read_results
    scores = [float(i) for i in range(10)]
    torn = make_run(tmp_path, "CartPole-v1", "A2C", "a2c", 0, scores, torn=True)
    run = report.load_run(torn)
    assert [r["iteration"] for r in run.rows] == list(range(1, 11)) and run.bad_lines == 1
    damaged = make_run(tmp_path, "CartPole-v1", "A2C", "a2c", 1, scores)
    lines = (damaged / "results.jsonl").read_text().splitlines()
    lines[4] = lines[4][:20]
    (damaged / "results.jsonl").write_text("\n".join(lines) + "\n")
    write_report([tmp_path], tmp_path / "out")
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [Path(r["run_dir"]).name for r in data["runs"]] == ["a2c_s0"]
    (skipped,) = data["skipped"]
    assert Path(skipped["run_dir"]).name == "a2c_s1"
    assert "results.jsonl, line 5: not valid JSON" in skipped["reason"]


def test_report_takes_relative_and_home_paths(tmp_path, monkeypatch, capsys):
    """As typed by a user: inputs relative to the working directory, output under ~."""
    make_run(tmp_path / "work" / "runs", "CartPole-v1", "A2C", "a2c", 0, [float(i) for i in range(10)])
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    parser = argparse.ArgumentParser()
    report_cli.add_arguments(parser)
    args = parser.parse_args(["runs", "--output", "~/report"])
    assert args.run_dirs == [tmp_path / "work" / "runs"] and args.output == tmp_path / "home" / "report"
    monkeypatch.chdir(tmp_path)  # parsed paths are absolute: a later chdir changes nothing
    assert report_cli.run(args) == 0
    assert (tmp_path / "home" / "report" / "report.md").is_file()
    assert f"report: {tmp_path / 'home' / 'report' / 'report.md'}" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path / "work")
    page = write_report(["runs"], "~/report2")  # the library takes them too
    assert page == tmp_path / "home" / "report2" / "report.md"
