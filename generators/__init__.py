"""dlbricks.generators: make bricks runnable on a backend and time them.

The pipeline stage between decomposition and the database. A backend (onnxruntime CPU/CUDA,
registered by name) prepares a brick with its inputs and outputs bound once; the harness warms it
up and samples it until the median is known; measurements run in a worker subprocess that is
replaced when a brick crashes or hangs; every measurement carries its backend configuration, the
configuration's floor and, from :func:`collect_system_info`, the machine it ran on.

The names below are what a user needs first. The public submodules hold the rest: ``api``
(``measure``, ``calibrate_floor``), ``runner`` (the worker subprocesses, rounds in processes),
``rounds`` (a model and its bricks in interleaved rounds), ``budget`` (allocating a precision
target), ``measurement`` (pooling and combining measurements), ``protocols`` (the backend's
protocols), ``ort`` and ``ort_kernels`` (onnxruntime), ``mxnet`` (MXNet), ``floor``, ``items``,
``harness``, ``stats``, ``inputs``, ``system``, ``util``. Modules whose names start with ``_`` are
private.
"""

from ._registry import available_backends, get_backend, register_backend, unregister_backend
from .api import benchmark
from .budget import Budget
from .measurement import Measurement
from .ort import OrtConfig
from .protocols import Backend
from .system import collect_system_info

__all__ = [
    # measuring
    "benchmark",
    "Budget",
    "Measurement",
    "collect_system_info",
    # backends
    "Backend",
    "OrtConfig",
    "register_backend",
    "unregister_backend",
    "get_backend",
    "available_backends",
]
