"""The floor: the per-call cost of an empty model under a configuration.

A brick's time includes the runtime's fixed cost per call (dispatch, binding checks, thread pool
wake-up). The estimator subtracts the floor per brick and adds it once per model run. It is measured
with the same harness and budget as the bricks, on :func:`~dlbricks.generators._items.floor_model`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from dlbricks.generators._budget import Budget
from dlbricks.generators._harness import Clock, Timing, measure_model
from dlbricks.generators._items import FLOOR_KEY, floor_model
from dlbricks.generators._measurement import Measurement
from dlbricks.generators._protocols import Backend, BackendConfig
from dlbricks.generators._registry import get_backend

__all__ = ["measure_floor"]


def measure_floor(
    backend: Backend | str = "onnxruntime",
    config: BackendConfig | None = None,
    budget: Budget | None = None,
    *,
    details: bool = False,
    clock: Clock = time.perf_counter_ns,
) -> Any:
    """Measure the floor in this process (no worker, no isolation).

    Parameters
    ----------
    backend : Backend or str, default "onnxruntime"
        A backend object or a registered name.
    config : BackendConfig, optional
        Default: the backend's default configuration.
    budget : Budget, optional
        Default: ``Budget()``.
    details : bool, default False
        Also return the harness :class:`Timing` (as ``(measurement, timing)``).
    clock : callable, default time.perf_counter_ns

    Returns
    -------
    Measurement or tuple of (Measurement, Timing)
        Keyed ``"dlbricks.floor:identity-float32-1"``; its ``floor_s`` is its own median.
    """
    backend_obj = get_backend(backend) if isinstance(backend, str) else backend
    config = backend_obj.default_config() if config is None else config
    budget = Budget() if budget is None else budget
    backend_obj.check(config)
    measurement, timing = measure_model(floor_model(), FLOOR_KEY, backend_obj, config, budget, clock=clock)
    measurement = dataclasses.replace(measurement, floor_s=measurement.median_s)
    result: tuple[Measurement, Timing] = (measurement, timing)
    return result if details else measurement
