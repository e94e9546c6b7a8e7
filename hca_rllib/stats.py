"""Statistics over seeds for reports and benchmarks, in plain numpy.

Follows rliable (Agarwal et al., 2021, "Deep RL at the edge of the statistical
precipice") without importing it: the `rliable` package's import is broken on some
machines (its `arch` dependency against pandas 3), so the estimators and the
stratified percentile bootstrap are re-implemented here in numpy.

* `iqm`: interquartile mean (25% trimmed mean), identical to
  `scipy.stats.trim_mean(x, 0.25)` and to rliable's `aggregate_iqm`.
* `iqm_ci`: IQM over seeds (or over a seeds x tasks matrix) with its 95% stratified
  bootstrap CI; `optimality_gap` likewise for rliable's optimality gap.
* `stratified_bootstrap_ci`: the bootstrap behind both, for any statistic.
* `bootstrap_ci`: any statistic of a 1-d sample, percentile bootstrap.
* `bootstrap_band`: pointwise bootstrap band of a statistic over rows (curves of seeds).
* `probability_of_improvement`: P(X > Y), ties counting half.
* `paired_difference`: mean per-seed difference to a baseline with its CI.
* `paired_stratified_difference_ci`: difference of a statistic (e.g. IQM) between two
  methods over a seeds x tasks matrix, with the same seed draw for both (paired runs).
* `average_probability_of_improvement`: rliable's P(X > Y) averaged over tasks.

Every bootstrap uses `numpy.random.default_rng(seed)` with a fixed default seed, so
results are reproducible bit for bit.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "BOOTSTRAP_REPS",
    "BOOTSTRAP_SEED",
    "iqm",
    "iqm_ci",
    "stratified_bootstrap_ci",
    "optimality_gap",
    "optimality_gap_ci",
    "bootstrap_ci",
    "bootstrap_band",
    "probability_of_improvement",
    "paired_difference",
    "paired_stratified_difference_ci",
    "average_probability_of_improvement",
]

BOOTSTRAP_REPS = 10_000
BOOTSTRAP_SEED = 0


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along `axis`: the mean of the values left after cutting
    `int(0.25 * n)` from each end (a 25% trimmed mean, as rliable's `aggregate_iqm`).

    Computed exactly as `scipy.stats.trim_mean(scores, 0.25, axis)` (same partition,
    same slice), in numpy only. `axis=None` flattens first. NaN for an empty array."""
    a = np.asarray(scores)
    if a.size == 0:
        return np.float64(np.nan)
    if axis is None:
        a = a.ravel()
        axis = 0
    nobs = a.shape[axis]
    lowercut = int(0.25 * nobs)
    uppercut = nobs - lowercut
    part = np.partition(a, (lowercut, uppercut - 1), axis)
    sl = [slice(None)] * part.ndim
    sl[axis] = slice(lowercut, uppercut)
    trimmed = part[tuple(sl)]
    if not np.issubdtype(trimmed.dtype, np.floating):
        trimmed = trimmed.astype(np.float64)
    return np.mean(trimmed, axis=axis)


def _resampled_scores(scores: np.ndarray, reps: int, seed: int) -> np.ndarray:
    """Stratified bootstrap resamples of `scores` (seeds,) or (seeds, tasks): the seeds
    are drawn with replacement independently within each task (stratum). Returns
    (reps, seeds * tasks), each row one resample, tasks flattened (as rliable's
    aggregates see them). With one task the draws equal the unstratified bootstrap's
    `rng.integers(0, n, size=(reps, n))`."""
    rng = np.random.default_rng(seed)
    if scores.ndim == 1:
        n = len(scores)
        idx = rng.integers(0, n, size=(reps, n))
        return scores[idx]
    n, tasks = scores.shape
    idx = rng.integers(0, n, size=(reps, n, tasks))
    resampled = np.take_along_axis(scores[None, :, :], idx, axis=1)
    return resampled.reshape(reps, n * tasks)


def stratified_bootstrap_ci(scores: np.ndarray, statistic: Callable[..., Any],
                            reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                            level: float = 0.95) -> Tuple[float, float, float]:
    """`statistic` of `scores` and its percentile CI under a stratified bootstrap
    (rliable's `StratifiedBootstrap` + `get_interval_estimates`, in numpy).

    `scores` is (seeds,) for one task or (seeds, tasks); the seeds are resampled with
    replacement within each task. `statistic(x, axis=1)` must reduce a
    (reps, seeds * tasks) array row by row; the point estimate is
    `statistic(scores.reshape(1, -1), axis=1)`. With fewer than 2 seeds the interval
    collapses to the point."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim not in (1, 2):
        raise ValueError(f"scores must be (seeds,) or (seeds, tasks), got shape {scores.shape}")
    point = float(np.asarray(statistic(scores.reshape(1, -1), axis=1)).reshape(-1)[0])
    if scores.shape[0] < 2:
        return point, point, point
    stats = statistic(_resampled_scores(scores, reps, seed), axis=1)
    tail = 100 * (1 - level) / 2
    low, high = (float(v) for v in np.percentile(stats, [tail, 100 - tail]))
    return point, low, high


def iqm_ci(scores: np.ndarray, reps: int = BOOTSTRAP_REPS,
           seed: int = BOOTSTRAP_SEED) -> Tuple[float, float, float, str]:
    """IQM over seeds and its 95% stratified bootstrap CI, with a description of the
    method: `(point, low, high, method)`.

    `scores` is (seeds,) (one task: the strata collapse to one, i.e. the seeds are
    resampled with replacement) or (seeds, tasks) (seeds resampled within each task,
    IQM over all runs of all tasks, as rliable). Percentile interval, numpy only."""
    scores = np.asarray(scores, dtype=np.float64)
    tasks = 1 if scores.ndim == 1 else scores.shape[1]
    if scores.shape[0] < 2:
        point = float(iqm(scores, axis=None))
        return point, point, point, "none (fewer than 2 seeds)"
    point, low, high = stratified_bootstrap_ci(scores, iqm, reps, seed)
    strata = "1 stratum" if tasks == 1 else f"{tasks} strata, one per task"
    return point, low, high, (f"numpy stratified bootstrap over seeds ({strata}), percentile, "
                              f"{reps} resamples, seed {seed}")


def optimality_gap(scores: np.ndarray, gamma: float = 1.0, axis: Optional[int] = None
                   ) -> np.ndarray:
    """rliable's optimality gap: the mean of `max(0, gamma - score)` (how far the
    normalized scores fall short of `gamma`; lower is better, 0 when all reach it).
    `axis=None` averages over everything."""
    scores = np.asarray(scores, dtype=np.float64)
    return np.mean(np.maximum(gamma - scores, 0.0), axis=axis)


def optimality_gap_ci(scores: np.ndarray, gamma: float = 1.0, reps: int = BOOTSTRAP_REPS,
                      seed: int = BOOTSTRAP_SEED, level: float = 0.95
                      ) -> Tuple[float, float, float]:
    """`optimality_gap(scores, gamma)` and its stratified percentile-bootstrap CI
    (`scores` (seeds,) or (seeds, tasks), as `stratified_bootstrap_ci`)."""
    return stratified_bootstrap_ci(
        scores, lambda x, axis: optimality_gap(x, gamma, axis=axis), reps, seed, level)


def bootstrap_ci(values: Sequence[float], statistic: Callable = np.mean,
                 reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                 level: float = 0.95) -> Tuple[float, float, float]:
    """`statistic(values)` and its percentile-bootstrap CI, resampling the values (seeds)
    with replacement. `statistic` must accept `axis=1` on a 2-d array (np.mean does).
    With fewer than 2 values the interval collapses to the point."""
    values = np.asarray(values, dtype=np.float64)
    point = float(statistic(values))
    if len(values) < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(reps, len(values)))
    stats = statistic(values[idx], axis=1)
    tail = 100 * (1 - level) / 2
    low, high = (float(v) for v in np.percentile(stats, [tail, 100 - tail]))
    return point, low, high


def bootstrap_band(curves: np.ndarray, statistic: Callable = np.mean,
                   reps: int = 2_000, seed: int = BOOTSTRAP_SEED, level: float = 0.95
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise `statistic` over the rows (seeds) of `curves` (seeds, points) and its
    percentile-bootstrap band, resampling whole rows (seeds) with replacement, the same
    resamples at every point. Returns `(center, low, high)`, each (points,); with one
    row the band collapses to the curve. `statistic` must accept `axis=`."""
    curves = np.asarray(curves, dtype=np.float64)
    if curves.ndim != 2:
        raise ValueError(f"curves must be (seeds, points), got shape {curves.shape}")
    center = np.asarray(statistic(curves, axis=0), dtype=np.float64)
    if curves.shape[0] < 2:
        return center, center.copy(), center.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, curves.shape[0], size=(reps, curves.shape[0]))
    stats = statistic(curves[idx], axis=1)  # (reps, points)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(stats, [tail, 100 - tail], axis=0)
    return center, low, high


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) over all pairs (x_i, y_j), ties counting half (rliable's definition
    for one task: the Mann-Whitney U statistic over len(x) * len(y))."""
    x = np.asarray(x, dtype=np.float64)[:, None]
    y = np.asarray(y, dtype=np.float64)[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def paired_difference(scores: Dict[int, float], baseline: Dict[int, float],
                      reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED
                      ) -> Optional[Dict[str, Any]]:
    """Per-seed differences `scores[s] - baseline[s]` over the common seeds, their mean
    and its 95% percentile-bootstrap CI over seeds; None without common seeds."""
    seeds = sorted(set(scores) & set(baseline))
    if not seeds:
        return None
    diffs = np.array([scores[s] - baseline[s] for s in seeds], dtype=np.float64)
    point, low, high = bootstrap_ci(diffs, np.mean, reps, seed)
    return {
        "seeds": seeds,
        "differences": diffs.tolist(),
        "mean": point,
        "ci_low": low,
        "ci_high": high,
        "excludes_zero": bool(len(seeds) >= 2 and (low > 0 or high < 0)),
        "ci_method": (f"mean of paired per-seed differences, percentile bootstrap over "
                      f"seeds, {reps} resamples, seed {seed}"),
    }


def paired_stratified_difference_ci(scores: np.ndarray, baseline: np.ndarray,
                                    statistic: Callable[..., Any],
                                    reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                                    level: float = 0.95) -> Tuple[float, float, float]:
    """`statistic(scores) - statistic(baseline)` and its percentile CI under a paired
    stratified bootstrap: `scores` and `baseline` are (seeds, tasks) with row `i` the same
    seed in both; each resample draws seed indices with replacement within each task and
    applies the same draw to both arrays (the runs of one seed were made side by side).
    `statistic(x, axis=1)` reduces a (reps, seeds * tasks) array row by row."""
    scores = np.asarray(scores, dtype=np.float64)
    baseline = np.asarray(baseline, dtype=np.float64)
    if scores.ndim == 1:
        scores, baseline = scores[:, None], baseline[:, None]
    if scores.shape != baseline.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and baseline {baseline.shape} must both be "
                         "(seeds, tasks) of the same shape")
    point = float(np.asarray(statistic(scores.reshape(1, -1), axis=1)).reshape(-1)[0]
                  - np.asarray(statistic(baseline.reshape(1, -1), axis=1)).reshape(-1)[0])
    n, tasks = scores.shape
    if n < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(reps, n, tasks))
    a = np.take_along_axis(scores[None], idx, axis=1).reshape(reps, n * tasks)
    b = np.take_along_axis(baseline[None], idx, axis=1).reshape(reps, n * tasks)
    diffs = statistic(a, axis=1) - statistic(b, axis=1)
    tail = 100 * (1 - level) / 2
    low, high = (float(v) for v in np.percentile(diffs, [tail, 100 - tail]))
    return point, low, high


def average_probability_of_improvement(scores: np.ndarray, baseline: np.ndarray) -> float:
    """rliable's probability of improvement over several tasks: `P(X > Y)` per task
    (columns of the (seeds, tasks) arrays, ties half), averaged over the tasks."""
    scores = np.asarray(scores, dtype=np.float64)
    baseline = np.asarray(baseline, dtype=np.float64)
    if scores.ndim == 1:
        scores, baseline = scores[:, None], baseline[:, None]
    return float(np.mean([probability_of_improvement(scores[:, t], baseline[:, t])
                          for t in range(scores.shape[1])]))
