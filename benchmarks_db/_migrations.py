"""The schema of the brick database, as numbered migrations.

Each migration is a function ``(db) -> None`` that moves the schema from version ``n - 1`` to
``n``; :data:`MIGRATIONS` lists them in order. The version is kept in ``PRAGMA user_version`` (what
the code checks) and, readable in Datasette, in the ``schema_migrations`` table (one row per
applied migration). A database whose version is newer than :data:`SCHEMA_VERSION` is refused.

Conventions of the tables: times in seconds (columns ending in ``_s``), timestamps as ISO 8601 UTC
text, JSON as TEXT checked with ``json_valid`` (never pickles), the brick's compact ONNX the only
blob (``bricks.onnx``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import sqlite_utils

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "APPLICATION_ID", "DLBRICKS_TABLES", "schema_at"]

#: ``PRAGMA application_id`` of a dlbricks database ("dlbr").
APPLICATION_ID = 0x646C6272

_STATS = """
    n INTEGER NOT NULL,
    min_s REAL, median_s REAL, mean_s REAL, p90_s REAL, p99_s REAL, std_s REAL, iqr_s REAL,
    ci_low_s REAL, ci_high_s REAL,
    wall_time_s REAL NOT NULL,
    converged INTEGER NOT NULL,
    floor_s REAL,
    samples TEXT CHECK (samples IS NULL OR json_valid(samples)),
    budget TEXT CHECK (budget IS NULL OR json_valid(budget)),
    created_at TEXT NOT NULL"""

_V1 = f"""
CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
);
CREATE TABLE systems (
    fingerprint TEXT PRIMARY KEY,
    cpu TEXT NOT NULL,
    cores INTEGER,
    logical_cores INTEGER,
    memory INTEGER,
    os TEXT,
    gpu TEXT,
    details TEXT NOT NULL CHECK (json_valid(details)),
    first_seen TEXT NOT NULL
);
CREATE TABLE backends (
    config_id TEXT PRIMARY KEY,
    runtime TEXT NOT NULL,
    version TEXT,
    device TEXT,
    options TEXT NOT NULL CHECK (json_valid(options)),
    first_seen TEXT NOT NULL
);
CREATE TABLE bricks (
    signature TEXT PRIMARY KEY,
    granularity TEXT NOT NULL,
    op_type TEXT NOT NULL,
    op_types TEXT NOT NULL CHECK (json_valid(op_types)),
    inputs TEXT NOT NULL CHECK (json_valid(inputs)),
    outputs TEXT NOT NULL CHECK (json_valid(outputs)),
    constants TEXT NOT NULL CHECK (json_valid(constants)),
    attributes TEXT NOT NULL CHECK (json_valid(attributes)),
    flops INTEGER,
    bytes_moved INTEGER NOT NULL,
    onnx BLOB NOT NULL,
    added_at TEXT NOT NULL
);
CREATE INDEX bricks_op_type ON bricks (op_type);
CREATE TABLE models (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    source TEXT CHECK (source IS NULL OR json_valid(source)),
    inputs TEXT NOT NULL CHECK (json_valid(inputs)),
    layers INTEGER NOT NULL,
    added_at TEXT NOT NULL
);
CREATE INDEX models_name ON models (name);
CREATE TABLE model_bricks (
    model TEXT NOT NULL REFERENCES models (key),
    granularity TEXT NOT NULL,
    idx INTEGER NOT NULL,
    signature TEXT NOT NULL REFERENCES bricks (signature),
    nodes TEXT NOT NULL CHECK (json_valid(nodes)),
    inputs TEXT NOT NULL CHECK (json_valid(inputs)),
    outputs TEXT NOT NULL CHECK (json_valid(outputs)),
    PRIMARY KEY (model, granularity, idx)
);
CREATE INDEX model_bricks_signature ON model_bricks (signature);
CREATE TABLE model_edges (
    model TEXT NOT NULL REFERENCES models (key),
    granularity TEXT NOT NULL,
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    PRIMARY KEY (model, granularity, src, dst)
);
CREATE TABLE measurements (
    id INTEGER PRIMARY KEY,
    signature TEXT NOT NULL REFERENCES bricks (signature),
    system TEXT NOT NULL REFERENCES systems (fingerprint),
    config_id TEXT NOT NULL REFERENCES backends (config_id),
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
    error TEXT,{_STATS}
);
CREATE UNIQUE INDEX measurements_item ON measurements (signature, system, config_id);
CREATE INDEX measurements_system_config ON measurements (system, config_id, status);
CREATE TABLE model_measurements (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL REFERENCES models (key),
    system TEXT NOT NULL REFERENCES systems (fingerprint),
    config_id TEXT NOT NULL REFERENCES backends (config_id),
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
    error TEXT,{_STATS}
);
CREATE UNIQUE INDEX model_measurements_item ON model_measurements (model, system, config_id);
CREATE TABLE claims (
    item TEXT NOT NULL,
    kind TEXT NOT NULL,
    system TEXT NOT NULL,
    config_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    claimed_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (item, system, config_id)
);
CREATE VIEW brick_timings AS
SELECT m.id, m.signature, b.op_type, b.flops, b.bytes_moved, m.system, s.cpu, m.config_id,
       be.runtime, be.version, be.device, m.status, m.error, m.n, m.min_s, m.median_s, m.mean_s,
       m.p90_s, m.p99_s, m.std_s, m.iqr_s, m.ci_low_s, m.ci_high_s, m.floor_s, m.converged,
       m.wall_time_s, m.created_at
FROM measurements AS m
JOIN bricks AS b ON b.signature = m.signature
JOIN systems AS s ON s.fingerprint = m.system
JOIN backends AS be ON be.config_id = m.config_id;
"""

#: Tables that a dlbricks database has (any other table means another application's file).
DLBRICKS_TABLES = frozenset({"schema_migrations", "systems", "backends", "bricks", "models",
                             "model_bricks", "model_edges", "measurements", "model_measurements",
                             "context_measurements",
                             "claims", "peaks", "model_reorders", "brick_overheads", "reorder_prices"})


_V2 = """
CREATE TABLE peaks (
    system TEXT PRIMARY KEY REFERENCES systems (fingerprint),
    flops_per_s REAL NOT NULL,
    bytes_per_s REAL NOT NULL,
    details TEXT NOT NULL CHECK (json_valid(details)),
    measured_at TEXT NOT NULL
);
"""


_V3 = """
CREATE TABLE model_reorders (
    model TEXT NOT NULL REFERENCES models (key),
    granularity TEXT NOT NULL,
    sizes TEXT NOT NULL CHECK (json_valid(sizes)),
    PRIMARY KEY (model, granularity)
);
"""


_V4 = """
CREATE TABLE brick_overheads (
    signature TEXT NOT NULL REFERENCES bricks (signature),
    system TEXT NOT NULL REFERENCES systems (fingerprint),
    config_id TEXT NOT NULL REFERENCES backends (config_id),
    overhead_s REAL NOT NULL CHECK (overhead_s >= 0),
    PRIMARY KEY (signature, system, config_id)
);
CREATE TABLE reorder_prices (
    system TEXT NOT NULL REFERENCES systems (fingerprint),
    config_id TEXT NOT NULL REFERENCES backends (config_id),
    sizes TEXT NOT NULL CHECK (json_valid(sizes)),
    seconds_per_byte TEXT NOT NULL CHECK (json_valid(seconds_per_byte)),
    measured_at TEXT NOT NULL,
    PRIMARY KEY (system, config_id)
);
"""


def _m0001_initial(db: sqlite_utils.Database) -> None:
    """Tables, indexes and the ``brick_timings`` view of the first release."""
    db.executescript(_V1)


def _m0002_peaks(db: sqlite_utils.Database) -> None:
    """``peaks``: a machine's measured peak FLOP/s and memory bandwidth (the roofline)."""
    db.executescript(_V2)


def _m0003_model_reorders(db: sqlite_utils.Database) -> None:
    """``model_reorders``: bytes of each layout reorder onnxruntime runs in a model at a fused
    granularity (level "all"), so that an estimate of a stored model adds them as a fresh one does."""
    db.executescript(_V3)


def _m0004_fused_overheads(db: sqlite_utils.Database) -> None:
    """``brick_overheads``: what a fused brick's own session runs at level "all" beyond its kernel
    (layout reorders, kernels the model fuses away), measured with the brick; ``reorder_prices``: the
    cost of one layout reorder by size, per system and configuration. An estimate at "all" reads both
    instead of profiling on the machine that estimates."""
    db.executescript(_V4)


_V5 = f"""
ALTER TABLE measurements ADD COLUMN context TEXT CHECK (context IS NULL OR json_valid(context));
ALTER TABLE model_measurements ADD COLUMN context TEXT CHECK (context IS NULL OR json_valid(context));
ALTER TABLE model_bricks ADD COLUMN weights TEXT CHECK (weights IS NULL OR json_valid(weights));
CREATE TABLE context_measurements (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL REFERENCES models (key),
    signature TEXT NOT NULL REFERENCES bricks (signature),
    system TEXT NOT NULL REFERENCES systems (fingerprint),
    config_id TEXT NOT NULL REFERENCES backends (config_id),
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
    error TEXT,{_STATS},
    context TEXT CHECK (context IS NULL OR json_valid(context))
);
CREATE UNIQUE INDEX context_measurements_item ON context_measurements (model, signature, system, config_id);
"""


def _m0005_contexts(db: sqlite_utils.Database) -> None:
    """The context a brick was measured in (``context``: the brick before it, its reuse distance),
    the weights each occurrence reads (``model_bricks.weights``, by name: shared weights show), and
    ``context_measurements``: a brick measured again in the context of another model that uses
    it, where that context differs from the one its measurement was taken in."""
    db.executescript(_V5)


_V6 = "\n".join(f"ALTER TABLE {table} ADD COLUMN {column} REAL;"
                for table in ("measurements", "model_measurements", "context_measurements")
                for column in ("host_s", "device_s", "device_warm_s"))


def _m0006_queue_times(db: sqlite_utils.Database) -> None:
    """The times of an accelerator's launch queue with each measurement (None elsewhere): the host's
    time to issue one run unsynchronized (``host_s``), and the device's time to run it with a cold L2
    cache (``device_s``) and after itself (``device_warm_s``)."""
    db.executescript(_V6)


_V7 = "\n".join(f"ALTER TABLE {table} ADD COLUMN node_s REAL;"
                for table in ("measurements", "model_measurements", "context_measurements"))


def _m0007_node_cost(db: sqlite_utils.Database) -> None:
    """The floor's cost of one further node with each measurement (``node_s``): what a node that
    does no work of its own, a view, costs inside a model. None for rows measured before."""
    db.executescript(_V7)


_V8 = "\n".join(f"ALTER TABLE {table} ADD COLUMN repeat_s REAL;"
                for table in ("measurements", "model_measurements", "context_measurements"))


def _m0008_repeat_time(db: sqlite_utils.Database) -> None:
    """On an accelerator, what one further copy of a brick adds to a run that holds several side by
    side (``repeat_s``): its cost inside a model, issued while the device runs the layer before.
    None for rows measured before, and on the CPU."""
    db.executescript(_V8)


_V9 = "\n".join(f"ALTER TABLE {table} ADD COLUMN empty_s REAL;"
                for table in ("measurements", "model_measurements", "context_measurements"))


def _m0009_empty_time(db: sqlite_utils.Database) -> None:
    """The floor's one-node model timed after each sample of a brick, paired with them
    (``empty_s``): the per-call cost at the brick's own moments. None for rows measured before."""
    db.executescript(_V9)


#: ``(name, migration)`` in order; migration ``i`` (0-based) brings the schema to version ``i + 1``.
MIGRATIONS: tuple[tuple[str, Callable[[sqlite_utils.Database], None]], ...] = (
    ("0001_initial", _m0001_initial),
    ("0002_peaks", _m0002_peaks),
    ("0003_model_reorders", _m0003_model_reorders),
    ("0004_fused_overheads", _m0004_fused_overheads),
    ("0005_contexts", _m0005_contexts),
    ("0006_queue_times", _m0006_queue_times),
    ("0007_node_cost", _m0007_node_cost),
    ("0008_repeat_time", _m0008_repeat_time),
    ("0009_empty_time", _m0009_empty_time),
)

#: The schema version this code writes and reads.
SCHEMA_VERSION = len(MIGRATIONS)


@functools.cache
def schema_at(version: int = SCHEMA_VERSION) -> Mapping[str, frozenset[str]]:
    """The tables of the schema at ``version`` and the columns of each: the first ``version``
    migrations applied to an in-memory database, as SQLite reports them."""
    db = sqlite_utils.Database(memory=True)
    for _, migration in MIGRATIONS[:version]:
        migration(db)
    schema = {table.name: frozenset(table.columns_dict) for table in db.tables}
    db.close()
    return schema
