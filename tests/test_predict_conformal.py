"""Split-conformal intervals: the quantile rule and its coverage on synthetic data."""

from __future__ import annotations

import math

import numpy as np

from dlbricks.estimator.predict import CrossValidation, conformal_quantile


def test_conformal_quantile_rank() -> None:
    scores = np.arange(1.0, 20.0)  # 19 scores: the 95% rank is ceil(20 * 0.95) = 19, the largest
    assert conformal_quantile(scores, 0.05) == 19.0
    assert conformal_quantile(np.arange(1.0, 11.0), 0.05) == math.inf  # too few for 95%
    assert conformal_quantile(np.arange(1.0, 11.0), 0.2) == 9.0  # ceil(11 * 0.8) = 9


def test_conformal_quantile_covers_exchangeable_scores() -> None:
    """Over many draws, a fresh score falls under the quantile of n earlier ones at least 1 - alpha
    of the time (and not much more)."""
    rng = np.random.default_rng(0)
    hits = []
    for _ in range(2000):
        scores = np.abs(rng.standard_t(3, size=40))
        q = conformal_quantile(scores[:39], 0.1)
        hits.append(scores[39] <= q)
    assert 0.88 <= np.mean(hits) <= 0.95


def test_normalized_scores_widen_with_distance() -> None:
    """Errors that grow with distance: normalizing by 1 + d / d_ref keeps the coverage at every
    distance, where one width for all would miss the far ones."""
    rng = np.random.default_rng(1)
    d = rng.uniform(0, 4, size=400)
    errors = np.abs(rng.normal(0, 0.05 * (1 + d / 2)))
    cv = CrossValidation(errors[:300], d[:300])
    q = cv.quantile(0.1)
    test_d, test_e = d[300:], errors[300:]
    covered = test_e <= q * (1 + test_d / cv.d_ref)
    far = test_d > 3
    assert covered.mean() >= 0.85 and covered[far].mean() >= 0.8
    plain = np.quantile(errors[:300], 0.9)
    assert (test_e[far] <= plain).mean() < covered[far].mean()
