"""dlbricks.benchmarks_db: the brick database.

One SQLite file (WAL mode, readable with the ``sqlite-utils`` CLI and Datasette) holds the
systems, backend configurations, bricks (with their compact ONNX), models with their brick
occurrences and DAGs, and the measurements of bricks and whole models. :class:`Store` opens it
and reads and writes it through its parts (``store.bricks``, ``store.models``, ``store.systems``,
``store.measurements``, ``store.claims``); :func:`populate` fills it, one brick at a time,
resumably and safely from several processes at once (claims with leases), here or, with a
:class:`RayExecutor`, on the nodes of a Ray cluster; :meth:`Store.merge_from` merges files from
several machines.

Examples
--------
>>> from dlbricks.benchmarks_db import Store
>>> with Store(":memory:") as store:
...     store.schema_version == SCHEMA_VERSION
True
"""

from ._bricks import Bricks
from ._claims import Claims
from ._jobs import (
    CONTEXT_RULES,
    BenchJob,
    BenchOptions,
    BenchProgress,
    BenchReport,
    Executor,
    lease_for,
)
from ._measurements import Measurements
from ._migrations import SCHEMA_VERSION
from ._models import Models
from ._populate import populate
from ._ray import NodeReport, NodeRun, RayExecutor
from ._records import (
    BackendRecord,
    BrickRecord,
    Claim,
    ClaimStatus,
    Coverage,
    DbStats,
    MeasurementRecord,
    MergeReport,
    ModelRecord,
    OpSummary,
    PeaksRecord,
    RecordOutcome,
    SystemRecord,
)
from ._rounds import measure_in_rounds, model_measurements
from ._schedule import (
    DOMINANT_SHARE,
    dominant_bricks,
    out_of_context,
    remeasure,
)
from ._sql import MERGE_RULES
from ._store import DEFAULT_LEASE_S, DEFAULT_PATH, Store
from ._systems import Systems

__all__ = [
    # the store
    "Store",
    "DEFAULT_PATH",
    "SCHEMA_VERSION",
    "MERGE_RULES",
    # its parts
    "Bricks",
    "Models",
    "Systems",
    "Measurements",
    "Claims",
    # filling it
    "populate",
    "BenchOptions",
    "remeasure",
    "out_of_context",
    "CONTEXT_RULES",
    "measure_in_rounds",
    "model_measurements",
    "lease_for",
    "DEFAULT_LEASE_S",
    "BenchProgress",
    "BenchReport",
    "dominant_bricks",
    "DOMINANT_SHARE",
    # filling it from a cluster
    "Executor",
    "BenchJob",
    "RayExecutor",
    "NodeReport",
    "NodeRun",
    # records
    "SystemRecord",
    "BackendRecord",
    "BrickRecord",
    "ModelRecord",
    "MeasurementRecord",
    "Claim",
    "ClaimStatus",
    "RecordOutcome",
    "OpSummary",
    "PeaksRecord",
    "Coverage",
    "DbStats",
    "MergeReport",
]
