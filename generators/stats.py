"""Statistics of timing samples: summary figures and a distribution-free CI of the median."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Summary", "median_ci", "median_ci_ranks", "summarize"]


@dataclass(frozen=True, slots=True)
class Summary:
    """Summary statistics of per-call times, in seconds."""

    n: int
    min_s: float
    median_s: float
    mean_s: float
    p90_s: float
    p99_s: float
    std_s: float
    iqr_s: float
    ci_low_s: float | None
    ci_high_s: float | None


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks of the order statistics bounding the median with ``confidence``.

    The number of samples below the true median is Binomial(n, 1/2); the interval
    ``[x_(j), x_(n+1-j)]`` (1-based) covers the median with probability at least ``confidence``
    when ``j = binom.ppf((1 - confidence) / 2, n, 1/2)``. This is the interval that
    ``scipy.stats.quantile_test(...).confidence_interval()`` gives for ``p=0.5``, computed without
    building the test object so that the harness can check it cheaply.

    Returns
    -------
    tuple of int or None
        ``(low_rank, high_rank)`` into the sorted samples, or None when ``n`` is too small for any
        interval at this confidence (``n < 6`` at 95%).
    """
    from scipy import stats  # imported on first use: scipy.stats takes ~0.4 s to import

    if n < 1:
        return None
    j = int(stats.binom.ppf((1.0 - confidence) / 2.0, n, 0.5))
    if j < 1:
        return None
    return j - 1, n - j


def median_ci(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the median of ``samples`` (None if too few)."""
    ranks = median_ci_ranks(len(samples), confidence)
    if ranks is None:
        return None
    low, high = np.partition(np.asarray(samples), ranks)[list(ranks)]
    return float(low), float(high)


def relative_ci_width(samples: np.ndarray, confidence: float = 0.95) -> float:
    """Width of the median's CI divided by the median (``inf`` when there is no CI yet)."""
    ranks = median_ci_ranks(len(samples), confidence)
    if ranks is None:
        return float("inf")
    mid = len(samples) // 2
    part = np.partition(np.asarray(samples), [ranks[0], mid, ranks[1]])
    median = float(part[mid])
    if median <= 0:
        return float("inf")
    return float(part[ranks[1]] - part[ranks[0]]) / median


def summarize(samples: np.ndarray) -> Summary:
    """Summary statistics of per-call times ``samples`` (seconds, at least one)."""
    x = np.asarray(samples, dtype=np.float64)
    p25, p50, p75, p90, p99 = np.percentile(x, [25, 50, 75, 90, 99])
    ci = median_ci(x)
    return Summary(
        n=int(x.size),
        min_s=float(x.min()),
        median_s=float(p50),
        mean_s=float(x.mean()),
        p90_s=float(p90),
        p99_s=float(p99),
        std_s=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        iqr_s=float(p75 - p25),
        ci_low_s=None if ci is None else ci[0],
        ci_high_s=None if ci is None else ci[1],
    )
