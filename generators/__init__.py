"""dlbricks.generators: make bricks runnable on a backend and time them.

The pipeline stage between decomposition and the database. A backend (onnxruntime CPU/CUDA,
registered by name) prepares a brick with its inputs and outputs bound once; the harness warms it
up and samples it until the median is known; measurements run in a worker subprocess that is
replaced when a brick crashes or hangs; every measurement carries its backend configuration, the
configuration's floor and, from :func:`collect_system_info`, the machine it ran on.
"""

from ._api import ProgressCallback, benchmark, calibrate_floor, measure
from ._budget import PILOT_BUDGET, Allocation, BrickShare, Budget, allocate, model_ci, topup_budget
from ._floor import measure_floor
from ._harness import Clock, Timing, time_calls
from ._inputs import VALUE_RANGES_KEY, random_inputs, value_ranges
from ._items import floor_model
from ._measurement import (
    Measurement,
    OpaqueConfig,
    combine,
    pool,
    relative_half_width,
    spread_half_width,
)
from ._mxnet import MxnetBackend, MxnetConfig
from ._ort import OrtBackend, OrtConfig, OrtPrepared, last_level_cache_bytes
from ._ort_kernels import ReorderCost, kernel_medians
from ._protocols import Backend, BackendConfig, Benchmarkable, Prepared
from ._registry import (
    BackendFactory,
    available_backends,
    get_backend,
    register_backend,
    unregister_backend,
)
from ._rounds import PairedRounds, Rounds, RoundsBudget
from ._runner import ROUND_PROCESSES, Runner, lock_waited_s, resolve_config, rounds_in_processes
from ._stats import Summary, median_ci, summarize
from ._system import SystemInfo, collect_system_info
from ._util import pin_to_core

__all__ = [
    # measuring
    "benchmark",
    "measure",
    "Runner",
    "resolve_config",
    "pin_to_core",
    "calibrate_floor",
    "measure_floor",
    "floor_model",
    "Budget",
    "PILOT_BUDGET",
    "ProgressCallback",
    # a model and its bricks in interleaved rounds
    "Rounds",
    "RoundsBudget",
    "PairedRounds",
    "rounds_in_processes",
    "lock_waited_s",
    "ROUND_PROCESSES",
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
    "last_level_cache_bytes",
    "kernel_medians",
    "ReorderCost",
    # MXNet (mxnet itself is imported only when a model runs)
    "MxnetBackend",
    "MxnetConfig",
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
