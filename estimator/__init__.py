"""dlbricks.estimator: reconstruct model latency from brick measurements, bound it, validate it.

Composition (sequential sum, critical path), Benanza-style lower bounds, roofline bounds, prediction
of bricks never measured, and estimates with uncertainty, coverage and a per-brick breakdown; the
HTML report of where the time goes.
"""

from ._api import (
    PAIRED_ROUNDS,
    Validation,
    cache_capacity,
    composition_references,
    estimate,
    last_level_cache,
    matvec_rates,
    memory_rate,
    open_store,
    plan,
    validate,
)
from ._calibrate import Calibration, calibrate_peaks, merge_peaks
from ._compose import combined_halfwidth, critical_path, sequential
from ._estimate import (
    COMPOSITION_NEIGHBOURS,
    ON_MISSING,
    BrickContribution,
    CompositionReference,
    Estimate,
    MissingBrick,
    Peaks,
    Plan,
    composition_error,
    estimate_decomposition,
    issue_time,
    paired_interval,
    plan_decomposition,
    with_composition,
)
from ._evaluate import DEFAULT_SUITE, Evaluation, EvaluationRow, evaluate, measure_whole
from ._predict import LatencyPredictor, OpModel, Prediction, Predictor, floor_drift_s
from ._profile import InModelTimes, in_model_times
from ._report import ModelReport, model_report, render_report, write_report
from ._queue import QueueTimes, queue_critical_path, queue_latency
from ._sweep import SweepPoint, SweepShape, estimate_sweep, validate_sweep

__all__ = [
    # estimating from a database
    "estimate",
    "composition_references",
    "composition_error",
    "with_composition",
    "CompositionReference",
    "COMPOSITION_NEIGHBOURS",
    "cache_capacity",
    "last_level_cache",
    "memory_rate",
    "matvec_rates",
    "validate",
    "Validation",
    "PAIRED_ROUNDS",
    "paired_interval",
    "evaluate",
    "Evaluation",
    "EvaluationRow",
    "DEFAULT_SUITE",
    "measure_whole",
    "calibrate_peaks",
    "merge_peaks",
    "Calibration",
    "in_model_times",
    "InModelTimes",
    "open_store",
    # where the time goes, as one HTML page (the plot extra)
    "model_report",
    "ModelReport",
    "render_report",
    "write_report",
    # one model at several shapes
    "estimate_sweep",
    "validate_sweep",
    "SweepShape",
    "SweepPoint",
    # what a model lacks in a database
    "plan",
    "plan_decomposition",
    "Plan",
    "MissingBrick",
    # composition
    "estimate_decomposition",
    "Estimate",
    "BrickContribution",
    "Peaks",
    "ON_MISSING",
    "LatencyPredictor",
    "OpModel",
    "Prediction",
    "Predictor",
    "sequential",
    "critical_path",
    "queue_latency",
    "issue_time",
    "queue_critical_path",
    "QueueTimes",
    "combined_halfwidth",
    "floor_drift_s",
]
