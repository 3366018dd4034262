"""dlbricks.benchmarks_db: the brick database.

One SQLite file (WAL mode, readable with the ``sqlite-utils`` CLI and Datasette) holds the
systems, backend configurations, bricks (with their compact ONNX), models with their brick
occurrences and DAGs, and the measurements of bricks and whole models. :class:`Store` reads and
writes it; :func:`populate` fills it, one brick at a time, resumably and safely from several
processes at once (claims with leases), here or, with a :class:`RayExecutor`, on the nodes of a
Ray cluster; :meth:`Store.merge_from` merges files from several machines.

Examples
--------
>>> from dlbricks.benchmarks_db import Store
>>> with Store(":memory:") as store:
...     store.schema_version == SCHEMA_VERSION
True
"""

from ._jobs import (
    CONTEXT_RULES,
    BenchJob,
    BenchOptions,
    BenchProgress,
    BenchReport,
    Executor,
    lease_for,
)
from ._migrations import SCHEMA_VERSION
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

__all__ = [
    # the store
    "Store",
    "DEFAULT_PATH",
    "SCHEMA_VERSION",
    "MERGE_RULES",
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
