"""dlbricks.estimator: reconstruct model latency from brick measurements, bound it, validate it.

Composition (sequential sum, critical path), Benanza-style lower bounds, roofline bounds, prediction
of bricks never measured, and estimates with uncertainty, coverage and a per-brick breakdown.
"""

from dlbricks.estimator._compose import combined_halfwidth, critical_path, sequential
from dlbricks.estimator._estimate import (
    ON_MISSING,
    BrickContribution,
    Estimate,
    Peaks,
    estimate_decomposition,
)
from dlbricks.estimator._predict import LatencyPredictor, OpModel

__all__ = [
    "estimate_decomposition",
    "Estimate",
    "BrickContribution",
    "Peaks",
    "ON_MISSING",
    "LatencyPredictor",
    "OpModel",
    "sequential",
    "critical_path",
    "combined_halfwidth",
]
