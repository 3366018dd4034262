"""dlbricks.benchmarks_db: the brick database.

One SQLite file (WAL mode, readable with the ``sqlite-utils`` CLI and Datasette) holds the
systems, backend configurations, bricks (with their compact ONNX), models with their brick
occurrences and DAGs, and the measurements of bricks and whole models. :class:`Store` reads and
writes it; :func:`populate` fills it, one brick at a time, resumably and safely from several
processes at once (claims with leases); :meth:`Store.merge_from` merges files from several
machines.

Examples
--------
>>> from dlbricks.benchmarks_db import Store
>>> with Store(":memory:") as store:
...     store.schema_version == SCHEMA_VERSION
True
"""

from dlbricks.benchmarks_db._migrations import SCHEMA_VERSION
from dlbricks.benchmarks_db._populate import BenchProgress, BenchReport, lease_for, populate
from dlbricks.benchmarks_db._records import (
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
from dlbricks.benchmarks_db._sql import MERGE_RULES
from dlbricks.benchmarks_db._store import DEFAULT_LEASE_S, DEFAULT_PATH, Store

__all__ = [
    # the store
    "Store",
    "DEFAULT_PATH",
    "SCHEMA_VERSION",
    "MERGE_RULES",
    # filling it
    "populate",
    "lease_for",
    "DEFAULT_LEASE_S",
    "BenchProgress",
    "BenchReport",
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
