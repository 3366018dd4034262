"""A whole model's measurement for validation: in several worker processes, pooled, to the budget of
:func:`~dlbricks.estimator.evaluate`'s main job."""

from __future__ import annotations

from typing import Any

from dlbricks import ModelGraph
from dlbricks.generators import Budget, Measurement, benchmark
from dlbricks.generators.measurement import pool

__all__ = ["DEFAULT_TARGET_CI", "EVALUATE_BUDGET", "WHOLE_WORKERS", "measure_whole"]

#: Relative 95% half-width to ask of each model's estimate in the main job (``target_ci``, which is
#: opt-in); whole models are measured to the same half-width of their median (:data:`EVALUATE_BUDGET`).
DEFAULT_TARGET_CI = 0.01
#: Budget of the main job: whole models (and, without ``target_ci``, bricks) are timed until the
#: 95% CI of their median is within +-:data:`DEFAULT_TARGET_CI`.
EVALUATE_BUDGET = Budget(warmup_time=0.02, min_time=0.1, min_runs=10, max_time=1.0, rel_ci=2 * DEFAULT_TARGET_CI)
#: Worker processes each whole model is measured in.
WHOLE_WORKERS = 3


def measure_whole(graph: ModelGraph, config: Any, budget: Budget, workers: int = WHOLE_WORKERS,
                  backend: str = "onnxruntime") -> Measurement:
    """A whole model measured in ``workers`` separate worker processes, pooled (see
    :func:`~dlbricks.generators.measurement.pool`)."""
    return pool([next(iter(benchmark([graph], backend=backend, config=config, budget=budget)))
                 for _ in range(workers)])
