"""dlbricks.estimator: reconstruct model latency from brick measurements, bound it, validate it.

Composition (sequential sum, critical path), Benanza-style lower bounds, roofline bounds, prediction
of bricks never measured, and estimates with uncertainty, coverage and a per-brick breakdown; the
HTML report of where the time goes.

The names below are what a user needs first. The public submodules hold the rest: ``api``
(the machine's rates and caches, stored peaks, round designs), ``estimation`` (estimating a
decomposition, composition references, peaks, plans), ``evaluation`` (the suite, whole-model
runs), ``calibrate`` (the calibration record, merging peaks), ``predict`` (predicting unseen
bricks), ``queue`` (a GPU stream's queue), ``sweep`` (one model at several shapes), ``across``
(comparing runtimes), ``report`` and ``plot`` (the HTML report, figures). Modules whose names start
with ``_`` are private.
"""

from .api import Validation, estimate, plan, validate
from .calibrate import calibrate_peaks
from .estimation import Estimate
from .evaluation import Evaluation, evaluate
from .report import model_report, write_report

__all__ = [
    # estimating from a database
    "estimate",
    "Estimate",
    "plan",
    # checking estimates against whole-model runs
    "validate",
    "Validation",
    "evaluate",
    "Evaluation",
    # the machine's peaks (roofline and lower bounds)
    "calibrate_peaks",
    # where the time goes, as one HTML page (the plot extra)
    "model_report",
    "write_report",
]
