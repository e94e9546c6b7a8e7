"""`hca_rllib.stats` against rliable called directly on fixed data, and its numpy-only
pieces against rliable or closed forms (brute force, `scipy.stats.trim_mean`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import trim_mean

from hca_rllib import stats

rly = pytest.importorskip("rliable.library")
metrics = pytest.importorskip("rliable.metrics")

REPS = 2_000  # rliable resamples in a Python loop; enough to compare bit for bit


def _fixed(shape, seed=7, loc=0.6):
    return np.random.default_rng(seed).normal(loc=loc, scale=0.5, size=shape)


def _rliable_ci(scores, func, reps=REPS, seed=stats.BOOTSTRAP_SEED, level=0.95):
    """rliable's own call, as its README shows it (the global numpy RNG seeded, since
    rliable 1.2.0's StratifiedBootstrap draws from `np.random.choice`)."""
    np.random.seed(seed)
    points, intervals = rly.get_interval_estimates({"x": scores}, func, reps=reps,
                                                   confidence_interval_size=level)
    return float(np.asarray(points["x"]).reshape(-1)[0]), intervals["x"][:, 0]


# ---------------------------------------------------------------- facade == rliable


@pytest.mark.parametrize("shape", [(5,), (6, 3), (10, 1)])
def test_iqm_ci_equals_rliable(shape):
    scores = _fixed(shape)
    point, low, high, method = stats.iqm_ci(scores, reps=REPS)
    matrix = scores.reshape(shape[0], -1)
    ref_point, ref = _rliable_ci(matrix, lambda x: np.array([metrics.aggregate_iqm(x)]))
    assert point == ref_point == metrics.aggregate_iqm(matrix)
    assert (low, high) == (ref[0], ref[1])  # bit for bit
    assert low < point < high
    assert "rliable stratified bootstrap" in method and f"{REPS} resamples" in method


def test_optimality_gap_equals_rliable():
    scores = _fixed((5, 4))
    assert stats.optimality_gap(scores) == metrics.aggregate_optimality_gap(scores)
    assert stats.optimality_gap(scores, gamma=0.5) == metrics.aggregate_optimality_gap(scores, 0.5)
    point, low, high = stats.optimality_gap_ci(scores, gamma=0.8, reps=REPS)
    ref_point, ref = _rliable_ci(
        scores, lambda x: np.array([metrics.aggregate_optimality_gap(x, 0.8)]))
    assert (point, low, high) == (ref_point, ref[0], ref[1])
    # closed form: mean shortfall below gamma
    assert point == pytest.approx(np.mean(np.maximum(0.8 - scores, 0.0)), abs=1e-15)
    # along an axis: the same formula per row
    np.testing.assert_allclose(stats.optimality_gap(scores, axis=1),
                               [metrics.aggregate_optimality_gap(r) for r in scores])


def test_stratified_bootstrap_ci_equals_rliable_for_any_statistic():
    scores = _fixed((6, 3), seed=3)
    point, low, high = stats.stratified_bootstrap_ci(scores, np.median, reps=REPS, level=0.9)
    ref_point, ref = _rliable_ci(scores, lambda x: np.array([np.median(x)]), level=0.9)
    assert (point, low, high) == (ref_point, ref[0], ref[1])


def test_probability_of_improvement_equals_rliable_and_brute_force():
    x, y = _fixed(7, seed=1), _fixed(5, seed=2)
    y[1] = x[3]  # a tie
    brute = np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y])
    assert stats.probability_of_improvement(x, y) == pytest.approx(brute, abs=1e-15)
    assert stats.probability_of_improvement(x, y) == metrics.probability_of_improvement(
        x[:, None], y[:, None])
    assert np.isnan(stats.probability_of_improvement([], [1.0]))
    # several tasks: rliable's average over tasks, and by brute force per task
    xs, ys = _fixed((6, 3), seed=4), _fixed((4, 3), seed=5)
    avg = stats.average_probability_of_improvement(xs, ys)
    assert avg == metrics.probability_of_improvement(xs, ys)
    per_task = [np.mean([(a > b) + 0.5 * (a == b) for a in xs[:, t] for b in ys[:, t]])
                for t in range(3)]
    assert avg == pytest.approx(np.mean(per_task), abs=1e-15)
    with pytest.raises(ValueError, match="same tasks"):
        stats.average_probability_of_improvement(xs, ys[:, :2])


def test_performance_profile_equals_rliable():
    scores = {"a": _fixed((5, 3), seed=8), "b": _fixed((5, 3), seed=9, loc=0.9)}
    taus = np.linspace(-0.5, 2.0, 11)
    out_taus, profiles = stats.performance_profile(scores, taus, reps=500)
    np.testing.assert_array_equal(out_taus, taus)
    np.random.seed(stats.BOOTSTRAP_SEED)
    ref, ref_cis = rly.create_performance_profile(scores, taus, reps=500)
    for method in scores:
        profile, low, high = profiles[method]
        np.testing.assert_array_equal(profile, ref[method])
        np.testing.assert_array_equal(low, ref_cis[method][0])
        np.testing.assert_array_equal(high, ref_cis[method][1])
        # closed form of the profile: fraction of all runs above each tau
        np.testing.assert_array_equal(
            profile, [np.mean(scores[method] > t) for t in taus])
        assert np.all(low <= profile) and np.all(profile <= high)
        assert np.all(np.diff(profile) <= 0)  # non-increasing in tau
    # default thresholds span all scores: 1 below the smallest, 0 at the largest
    taus, profiles = stats.performance_profile({"a": [0.0, 1.0, 2.0], "b": [3.0, 4.0]},
                                               reps=50, points=5)
    np.testing.assert_allclose(taus, np.linspace(0.0, 4.0, 5))
    np.testing.assert_allclose(profiles["a"][0], [2 / 3, 1 / 3, 0, 0, 0])
    np.testing.assert_allclose(profiles["b"][0], [1, 1, 1, 0.5, 0])
    with pytest.raises(ValueError, match="at least one method"):
        stats.performance_profile({})


def test_plot_performance_profile_draws_each_method():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    taus, profiles = stats.performance_profile({"a": _fixed(5), "b": _fixed(5, seed=2)},
                                               reps=50, points=9)
    figure = Figure()
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    stats.plot_performance_profile(ax, taus, profiles, colors={"a": "C0", "b": "C1"})
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    np.testing.assert_array_equal(ax.get_lines()[1].get_ydata(), profiles["b"][0])


# ------------------------------------------------------------- numpy-only pieces


def test_iqm_equals_trim_mean_and_aggregate_iqm_bit_for_bit():
    rng = np.random.default_rng(11)
    for n in range(1, 14):
        x = rng.normal(size=(n, 3))
        assert stats.iqm(x, axis=None) == metrics.aggregate_iqm(x) == trim_mean(x, 0.25, None)
        np.testing.assert_array_equal(stats.iqm(x, axis=0), trim_mean(x, 0.25, axis=0))


def test_paired_stratified_difference_ci():
    rng = np.random.default_rng(0)
    scores, base = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    # against a zero baseline the paired interval is rliable's interval of the statistic
    # itself (same StratifiedBootstrap draws)
    point, low, high = stats.paired_stratified_difference_ci(scores, np.zeros_like(scores),
                                                             np.mean, reps=REPS)
    ref_point, ref = _rliable_ci(scores, lambda x: np.array([np.mean(x)]))
    assert point == pytest.approx(ref_point, abs=1e-15)
    assert (low, high) == (ref[0], ref[1])
    # brute force: the paired bootstrap of the mean difference equals the bootstrap of
    # the per-seed differences, resampled within each task with the same draws
    point, low, high = stats.paired_stratified_difference_ci(scores, base, np.mean, reps=REPS)
    ref_point, ref = _rliable_ci(scores - base, lambda x: np.array([np.mean(x)]))
    assert point == pytest.approx(ref_point, abs=1e-12)
    np.testing.assert_allclose((low, high), ref, atol=1e-12)
    # paired: narrower than the difference of two independent intervals would suggest
    _, a_low, a_high, _ = stats.iqm_ci(scores, reps=REPS)
    d, d_low, d_high = stats.paired_stratified_difference_ci(scores + 0.3, scores, stats.iqm,
                                                             reps=REPS)
    assert d == pytest.approx(0.3) and d_low == pytest.approx(0.3)
    assert d_high == pytest.approx(0.3) and a_high - a_low > 0.1


def test_bootstrap_band_equals_rliable_pointwise():
    curves = _fixed((6, 4), seed=12)
    center, low, high = stats.bootstrap_band(curves, np.mean, reps=REPS)
    np.testing.assert_array_equal(center, curves.mean(axis=0))
    for j in range(curves.shape[1]):
        _, ref = _rliable_ci(curves[:, j:j + 1], lambda x: np.array([np.mean(x)]))
        # the same draws; the per-row means may differ in the last bit of the sum order
        np.testing.assert_allclose((low[j], high[j]), ref, rtol=0, atol=1e-14)
        point, b_low, b_high = stats.bootstrap_ci(curves[:, j], np.mean, reps=REPS)
        np.testing.assert_allclose((low[j], high[j]), (b_low, b_high), rtol=0, atol=1e-14)


def test_bootstrap_ci_exhaustive_two_values():
    """2 values: the 4 equally likely resamples have means 0, 0.5, 0.5, 1, so the 95%
    interval is [0, 1] and the 40% interval sits on the middle atom."""
    values = np.array([0.0, 1.0])
    exhaustive = [np.mean(values[list(i)]) for i in itertools.product(range(2), repeat=2)]
    assert sorted(exhaustive) == [0.0, 0.5, 0.5, 1.0]
    assert stats.bootstrap_ci(values, reps=REPS) == (0.5, 0.0, 1.0)
    assert stats.bootstrap_ci(values, reps=REPS, level=0.4) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="1-d"):
        stats.bootstrap_ci(np.zeros((2, 2)))


# --------------------------------------------------------------------- determinism


def test_fixed_seed_is_bit_for_bit_and_leaves_global_rng_alone():
    scores = _fixed((5, 3), seed=21)
    np.random.seed(123)
    expected_next = np.random.random()
    np.random.seed(123)
    first = stats.iqm_ci(scores, reps=REPS)
    assert np.random.random() == expected_next  # the caller's stream is restored
    assert stats.iqm_ci(scores, reps=REPS) == first
    assert stats.iqm_ci(scores, reps=REPS, seed=1)[1:3] != first[1:3]
    assert stats.optimality_gap_ci(scores, reps=REPS) == stats.optimality_gap_ci(scores,
                                                                                 reps=REPS)
    pair = stats.paired_stratified_difference_ci(scores, scores[::-1], stats.iqm, reps=REPS)
    assert pair == stats.paired_stratified_difference_ci(scores, scores[::-1], stats.iqm,
                                                         reps=REPS)
    a = stats.performance_profile({"m": scores}, reps=100)
    b = stats.performance_profile({"m": scores}, reps=100)
    for x, y in zip(a[1]["m"], b[1]["m"]):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(stats.bootstrap_band(scores)[1], stats.bootstrap_band(scores)[1])


def test_fewer_than_two_seeds_collapse_to_the_point():
    assert stats.iqm_ci([4.0]) == (4.0, 4.0, 4.0, "none (fewer than 2 seeds)")
    assert stats.optimality_gap_ci([0.25]) == (0.75, 0.75, 0.75)
    assert stats.paired_stratified_difference_ci([2.0], [1.0], np.mean) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="seeds, tasks"):
        stats.iqm_ci(np.zeros((2, 2, 2)))


# ------------------------------------------------------------------- in the report


@pytest.mark.slow  # rliable's bootstrap and the plot (about 10 s)
def test_report_draws_rliable_performance_profile(tmp_path):
    """`write_report` with two methods on one environment: the profile in report.json is
    `stats.performance_profile` of the final scores, drawn and tabulated; with one method
    there is none."""
    import json

    from hca_rllib.report import write_report

    finals = {("A2C", "a2c"): [1.0, 2.0, 3.0], ("HCA", "hca"): [2.5, 3.5, 4.5]}
    for (algo, credit), values in finals.items():
        for seed, value in enumerate(values):
            run = tmp_path / "runs" / f"{credit}_{seed}"
            run.mkdir(parents=True)
            (run / "run.json").write_text(json.dumps(
                {"algo": algo, "credit": credit, "env": "Toy-v0", "seed": seed}))
            rows = [{"iteration": i + 1, "env_steps": 100 * (i + 1), "score": value}
                    for i in range(10)]
            (run / "results.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    report = write_report([tmp_path / "runs"], tmp_path / "out")
    env = json.loads((tmp_path / "out" / "report.json").read_text())["environments"]["Toy-v0"]
    assert (tmp_path / "out" / env["performance_profile"]).stat().st_size > 0
    data = env["performance_profile_data"]
    taus, expected = stats.performance_profile(
        {"A2C": finals[("A2C", "a2c")], "HCA (hca)": finals[("HCA", "hca")]},
        data["taus"])
    for method, (profile, low, high) in expected.items():
        assert data["methods"][method]["profile"] == profile.tolist()
        assert data["methods"][method]["ci_low"] == low.tolist()
        assert data["methods"][method]["ci_high"] == high.tolist()
    # pooled quartiles of {1, 2, 2.5, 3, 3.5, 4.5}: 2.125, 2.75, 3.375
    np.testing.assert_allclose(data["quartile_taus"], [2.125, 2.75, 3.375])
    assert [row[0] for row in data["methods"]["HCA (hca)"]["at_quartile_taus"]] == \
        pytest.approx([1.0, 2 / 3, 2 / 3])
    assert [row[0] for row in data["methods"]["A2C"]["at_quartile_taus"]] == \
        pytest.approx([1 / 3, 1 / 3, 0.0])
    assert "Performance profile (rliable)" in report.read_text()
    # one method: no profile, and a stale image from an earlier report is removed
    for seed in range(3):
        for name in ("run.json", "results.jsonl"):
            (tmp_path / "runs" / f"hca_{seed}" / name).unlink()
    write_report([tmp_path / "runs"], tmp_path / "out")
    env = json.loads((tmp_path / "out" / "report.json").read_text())["environments"]["Toy-v0"]
    assert env["performance_profile"] is None
    assert not (tmp_path / "out" / "performance_profile_Toy-v0.png").exists()


def test_ratio_bootstrap_is_the_cluster_mean_bootstrap_with_unit_weights():
    rng = np.random.default_rng(2)
    ids = np.repeat(np.arange(30), rng.integers(1, 9, size=30))
    values = rng.normal(size=len(ids)) + ids % 3
    mean, low, high = stats.cluster_bootstrap_mean_ci(values, ids)
    point, (ci,) = stats.cluster_bootstrap_ratio_ci(values, np.ones(len(values)), ids)
    assert point == pytest.approx(mean)
    assert ci == pytest.approx((low, high))
    # Weighted: the point is sum(w x) / sum(w); a wider level gives a wider interval.
    w = rng.uniform(0.1, 2.0, size=len(ids))
    point, (ci_95, ci_975) = stats.cluster_bootstrap_ratio_ci(values * w, w, ids, levels=(0.95, 0.975))
    assert point == pytest.approx((values * w).sum() / w.sum())
    assert ci_975[0] <= ci_95[0] <= ci_95[1] <= ci_975[1]
