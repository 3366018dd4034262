"""dlbricks.generators: make bricks runnable on a backend and time them.

The pipeline stage between decomposition and the database. A backend (onnxruntime CPU/CUDA,
registered by name) prepares a brick with its inputs and outputs bound once; the harness warms it
up and samples it until the median is known; measurements run in a worker subprocess that is
replaced when a brick crashes or hangs; every measurement carries its backend configuration, the
configuration's floor and, from :func:`collect_system_info`, the machine it ran on.
"""

from dlbricks.generators._api import ProgressCallback, benchmark, calibrate_floor, measure
from dlbricks.generators._budget import PILOT_BUDGET, Allocation, BrickShare, Budget, allocate, model_ci, topup_budget
from dlbricks.generators._floor import measure_floor
from dlbricks.generators._harness import Clock, Timing, time_calls
from dlbricks.generators._inputs import VALUE_RANGES_KEY, random_inputs, value_ranges
from dlbricks.generators._items import floor_model
from dlbricks.generators._measurement import (
    Measurement, OpaqueConfig, combine, pool, relative_half_width, spread_half_width,
)
from dlbricks.generators._ort import OrtBackend, OrtConfig, OrtPrepared
from dlbricks.generators._protocols import Backend, BackendConfig, Benchmarkable, Prepared
from dlbricks.generators._registry import (
    BackendFactory,
    available_backends,
    get_backend,
    register_backend,
    unregister_backend,
)
from dlbricks.generators._runner import Runner
from dlbricks.generators._stats import Summary, median_ci, summarize
from dlbricks.generators._system import SystemInfo, collect_system_info

__all__ = [
    # measuring
    "benchmark",
    "measure",
    "Runner",
    "calibrate_floor",
    "measure_floor",
    "floor_model",
    "Budget",
    "PILOT_BUDGET",
    "ProgressCallback",
    # allocating a model-level precision target
    "Allocation",
    "BrickShare",
    "allocate",
    "model_ci",
    "topup_budget",
    # records
    "Measurement",
    "OpaqueConfig",
    "pool",
    "combine",
    "relative_half_width",
    "spread_half_width",
    "SystemInfo",
    "collect_system_info",
    # backends
    "Backend",
    "BackendConfig",
    "Benchmarkable",
    "Prepared",
    "BackendFactory",
    "register_backend",
    "unregister_backend",
    "get_backend",
    "available_backends",
    # onnxruntime
    "OrtBackend",
    "OrtConfig",
    "OrtPrepared",
    "VALUE_RANGES_KEY",
    "value_ranges",
    "random_inputs",
    # harness and statistics
    "time_calls",
    "Timing",
    "Clock",
    "Summary",
    "summarize",
    "median_ci",
]
