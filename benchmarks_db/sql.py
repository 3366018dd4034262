"""Every SQL statement of the brick database, as small typed functions over a sqlite-utils Database.

Nothing else in the package writes SQL: :class:`~dlbricks.benchmarks_db.Store` converts records
and calls these functions (the schema itself is in :mod:`._migrations`). Writes run in short
``BEGIN IMMEDIATE`` transactions through :func:`write`, which retries when another process holds
the write lock beyond the busy timeout; reads run in autocommit mode and never block writers
(WAL).
"""

from __future__ import annotations

import functools
import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import sqlite_utils

from dlbricks.errors import DatabaseError

from ._migrations import (
    APPLICATION_ID,
    DLBRICKS_TABLES,
    MIGRATIONS,
    SCHEMA_VERSION,
    schema_at,
)
from .records import QUEUE_FIELDS, STAT_FIELDS, RecordOutcome

__all__ = [
    "connect", "write", "check_health", "damaged", "is_damage", "is_failed_write", "is_full",
    "integrity_lines", "foreign_key_problems", "brick_blobs", "open_for_check", "preflight",
    "stored_version", "schema_gaps", "invalid_measurements", "fail_invalid_measurements", "MERGE_RULES",
    "MEASUREMENT_TABLES", "EXPORT_QUERIES"
]

T = TypeVar("T")
Row = dict[str, Any]

#: Write transactions retried this many times when the lock stays busy past the busy timeout.
WRITE_ATTEMPTS = 8
#: Measurement tables and the column naming the measured item.
MEASUREMENT_TABLES = {"measurements": "signature", "model_measurements": "model",
                      "context_measurements": "signature"}
#: The columns that, with system and config_id, identify a row of each measurement table: a brick
#: measured in one model's context is a row per (model, brick).
MEASUREMENT_KEYS = {"measurements": ("signature",), "model_measurements": ("model",),
                    "context_measurements": ("model", "signature")}
#: The columns written for a measurement (besides its item, system and config_id).
MEASUREMENT_COLUMNS = ("status", "error", "n", *STAT_FIELDS, "wall_time_s", "converged", "floor_s",
                       "samples", "budget", "created_at", "context", *QUEUE_FIELDS, "node_s",
                       "empty_s")
#: When a new row replaces an existing row of the same (item, system, config_id); ``cur`` is the
#: existing row, ``excluded`` the new one.
MERGE_RULES: Mapping[str, str] = {
    # ok beats failed/timeout; then more samples; then the newer measurement
    "best": ("(excluded.status = 'ok') > (cur.status = 'ok') OR ((excluded.status = 'ok') = "
             "(cur.status = 'ok') AND (excluded.n > cur.n OR (excluded.n = cur.n AND "
             "excluded.created_at > cur.created_at)))"),
    "newest": "excluded.created_at > cur.created_at",
    "keep": "0",
    "replace": "1",
}


# --------------------------------------------------------------------------------- connection
def connect(path: str, *, create: bool, readonly: bool, busy_timeout_s: float) -> sqlite_utils.Database:
    """Open ``path``, check that it is a dlbricks database this code can read, set WAL and the
    busy timeout, and bring its schema up to date.

    Nothing is written (and no file is created) when the path is a folder, its folder is
    missing, the file is not SQLite, belongs to another application, or has a newer schema.
    """
    memory = path == ":memory:"
    conn = sqlite3.connect(":memory:", isolation_level=None) if memory else _open_file(
        path, create=create, readonly=readonly, busy_timeout_s=busy_timeout_s)
    try:
        _check_header(conn, path, readonly)
        if not memory:
            check_health(conn, path)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        if readonly:
            conn.execute("PRAGMA query_only = ON")
        else:
            if not memory:
                _retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable across process crashes
        db = sqlite_utils.Database(conn, execute_plugins=False)
        if not readonly:
            write(db, lambda: _migrate(db))
    except sqlite3.Error as e:
        conn.close()
        if is_damage(e):
            raise damaged(path, str(e)) from e
        raise DatabaseError(f"Cannot use database {path}: {e}; check that the file and its folder "
                            f"are writable.") from e
    except DatabaseError:
        conn.close()
        raise
    return db


def _open_file(path: str, *, create: bool, readonly: bool, busy_timeout_s: float) -> sqlite3.Connection:
    p = Path(path)
    if p.is_dir():
        raise DatabaseError(f"Cannot open database {path}: it is a folder; give a file path such "
                            f"as {p / 'dlbricks.db'}.")
    if not p.exists():
        if not create or readonly:
            raise DatabaseError(f"No database at {path}; fill one with 'dlbricks bench MODEL --db "
                                f"{path}'.")
        if not p.parent.is_dir():
            raise DatabaseError(f"Cannot create database {path}: the folder {p.parent} does not "
                                f"exist.")
    mode = "ro" if readonly else ("rwc" if create else "rw")
    if not readonly and p.exists() and not os.access(p, os.W_OK):
        raise DatabaseError(f"Cannot write database {path}: the file is read-only; make it writable, or "
                            f"copy it to a writable place.")
    if not readonly and not os.access(p.parent, os.W_OK):
        raise DatabaseError(f"Cannot write database {path}: its folder {p.parent} is read-only (SQLite "
                            f"keeps its journal beside the file); copy the database to a writable folder.")
    # a read-only folder cannot hold the WAL's shared-memory file: nobody can write there, so
    # the file is read as immutable
    immutable = "&immutable=1" if readonly and not os.access(p.parent, os.W_OK) else ""
    uri = f"file:{quote(str(p.absolute()))}?mode={mode}{immutable}"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None)
        conn.execute("PRAGMA schema_version").fetchone()  # opens the file for real
    except sqlite3.DatabaseError as e:
        raise _not_sqlite(path, e) from e
    return conn


def is_damage(e: BaseException) -> bool:
    """Whether an sqlite3 error says the file's content is damaged (not busy, not a permission)."""
    text = str(e)
    return isinstance(e, sqlite3.DatabaseError) and any(
        sign in text for sign in ("malformed", "no such table", "no such column", "file is not a database",
                                  "database corruption", "disk image"))


def is_full(e: BaseException) -> bool:
    """Whether an sqlite3 error says a write could not reach the disk (full, or over a size limit)."""
    return isinstance(e, sqlite3.OperationalError) and any(
        sign in str(e) for sign in ("disk is full", "disk I/O error"))


#: SQLite's (extended) error names of a write that found no room or could not be made.
_WRITE_ERRORS = frozenset({"SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE"})


def is_failed_write(e: BaseException) -> bool:
    """Whether an sqlite3 error is a write that failed (no room, a file size limit), not a read: only
    a write can have gone to SQLite's temporary files."""
    return getattr(e, "sqlite_errorname", None) in _WRITE_ERRORS


def damaged(path: str, detail: str) -> DatabaseError:
    """The one-line error of a damaged database: what is wrong and what to do."""
    detail = " ".join(detail.replace("*** in database main ***", "").split())
    return DatabaseError(f"{path} is damaged ({detail[:200]}); run 'dlbricks db check --db {path}' for "
                         f"details, then restore a copy or fill a new database.")


def check_health(conn: sqlite3.Connection, path: str) -> None:
    """The cheap check run on every open: SQLite's ``quick_check`` and every table and column of
    the file's schema version present. Raises :class:`DatabaseError` naming what is wrong."""
    try:
        version = stored_version(conn)[0]
        result = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
        tables, columns = schema_gaps(conn, version) if result == ["ok"] else ([], [])
    except sqlite3.DatabaseError as e:
        raise damaged(path, str(e)) from e
    if result != ["ok"]:
        raise damaged(path, "; ".join(result))
    if tables:
        raise damaged(path, f"table {tables[0]} is missing")
    if columns:
        table, _, column = columns[0].partition(".")
        raise damaged(path, f"table {table} lacks column {column}")


def stored_version(conn: sqlite3.Connection) -> tuple[int, bool]:
    """The file's schema version, and whether it comes from ``schema_migrations`` because the
    header lost it: a ``.dump`` restored into a new file keeps every table but not ``PRAGMA
    user_version`` nor ``application_id``, both 0 then."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version or conn.execute("PRAGMA application_id").fetchone()[0]:
        return version, False
    recorded = _recorded_version(conn)
    return recorded, recorded > 0


def _recorded_version(conn: sqlite3.Connection) -> int:
    """The last migration that ``schema_migrations`` records, if its rows are dlbricks' own (versions
    1, 2, ... named as :data:`MIGRATIONS` names them); else 0."""
    try:
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    except sqlite3.DatabaseError:  # no such table or column: not dlbricks' bookkeeping
        return 0
    names = [name for name, _ in MIGRATIONS]
    if [v for v, _ in rows] != list(range(1, len(rows) + 1)):
        return 0
    if any(name != names[v - 1] for v, name in rows if v <= len(names)):
        return 0
    return len(rows)


def schema_gaps(conn: sqlite3.Connection, version: int) -> tuple[list[str], list[str]]:
    """The tables, and the columns (as ``table.column``) of the tables present, that the schema at
    ``version`` has and the file lacks."""
    present: dict[str, set[str]] = {}
    for table, column in conn.execute("SELECT m.name, p.name FROM sqlite_master AS m, "
                                      "pragma_table_info(m.name) AS p WHERE m.type = 'table'"):
        present.setdefault(table, set()).add(column)
    expected = schema_at(version)
    tables = sorted(set(expected) - set(present))
    columns = sorted(f"{t}.{c}" for t in expected if t in present for c in expected[t] - present[t])
    return tables, columns


def _not_sqlite(path: str, e: sqlite3.Error) -> DatabaseError:
    if "not a database" in str(e):
        return DatabaseError(f"{path} is not a SQLite database ({e}); give the path of a dlbricks "
                             f"database or of a new file.")
    if is_damage(e):
        return DatabaseError(f"{path} is not a valid or complete SQLite database ({e}): the file may be "
                             f"truncated or damaged; restore a copy, or give the path of a new file.")
    return DatabaseError(f"Cannot open database {path}: {e}; check that its folder exists and is "
                         f"writable.")


def _check_header(conn: sqlite3.Connection, path: str, readonly: bool) -> None:
    """Refuse files that are not SQLite, not dlbricks', or from a newer dlbricks."""
    try:
        version = stored_version(conn)[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    except sqlite3.DatabaseError as e:
        raise _not_sqlite(path, e) from e
    ours = tables <= DLBRICKS_TABLES | {"_counts"}
    foreign = app_id not in (0, APPLICATION_ID) or (app_id == 0 and bool(tables) and (version == 0 or not ours))
    if foreign:
        raise DatabaseError(f"{path} is a SQLite database of another application (tables: "
                            f"{', '.join(sorted(tables)[:5]) or 'none'}, application id {app_id}); give a dlbricks "
                            f"database or a new "
                            f"file.")
    if version > SCHEMA_VERSION:
        raise DatabaseError(f"{path} has schema version {version}, newer than version "
                            f"{SCHEMA_VERSION} that this dlbricks knows; upgrade dlbricks to use it.")
    if readonly and version < SCHEMA_VERSION:
        raise DatabaseError(f"{path} has schema version {version} (current: {SCHEMA_VERSION}); run "
                            f"'dlbricks db upgrade --db {path}' to migrate it.")


def _migrate(db: sqlite_utils.Database) -> None:
    """Apply the missing migrations inside the caller's write transaction, and write the version
    and application id into the header (again, if a dump and restore lost them)."""
    version = stored_version(db.conn)[0]
    for number in range(version + 1, SCHEMA_VERSION + 1):
        name, migration = MIGRATIONS[number - 1]
        migration(db)
        db.conn.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, "
                        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))", (number, name))
    if db.conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        db.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def schema_version(db: sqlite_utils.Database) -> int:
    """The database's schema version (``PRAGMA user_version``, or what ``schema_migrations``
    records where a dump and restore lost it)."""
    return stored_version(db.conn)[0]


def integrity_check(db: sqlite_utils.Database) -> str:
    """``PRAGMA integrity_check``'s first line (``"ok"`` when the file is sound)."""
    return str(db.conn.execute("PRAGMA integrity_check").fetchone()[0])


# --------------------------------------------------------------------------------- transactions
def _is_busy(e: sqlite3.OperationalError) -> bool:
    name = getattr(e, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(e) or "busy" in str(e)


def _retry_busy(fn: Callable[[], T], attempts: int = WRITE_ATTEMPTS) -> T:
    delay = 0.02
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not _is_busy(e) or attempt == attempts:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


def write(db: sqlite_utils.Database, fn: Callable[[], T]) -> T:
    """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction and commit; roll back if it raises.

    Inside an open transaction ``fn`` simply joins it. When the write lock stays busy past the
    busy timeout, the whole transaction is retried with a jittered backoff.
    """
    conn = db.conn
    if conn.in_transaction:
        return fn()

    def attempt() -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    return _retry_busy(attempt)


# --------------------------------------------------------------------------------- writes
def insert_ignore(db: sqlite_utils.Database, table: str, rows: Sequence[Row]) -> None:
    """Insert rows whose primary key is not there yet (bricks, systems, backends are immutable)."""
    if rows:
        db[table].insert_all(rows, ignore=True, batch_size=200)


def upsert(db: sqlite_utils.Database, table: str, row: Row, pk: str, keep: Sequence[str] = ()) -> None:
    """Insert a row, or update the existing row with the same primary key except the ``keep``
    columns (e.g. when it was first added)."""
    db[table].insert_all([row], ignore=True)
    changes = {k: v for k, v in row.items() if k != pk and k not in keep}
    if changes:
        db[table].update(row[pk], changes)


def existing_signatures(db: sqlite_utils.Database, signatures: Sequence[str]) -> set[str]:
    """The signatures among ``signatures`` that ``bricks`` already holds."""
    rows = db.conn.execute("SELECT signature FROM bricks WHERE signature IN (SELECT value FROM "
                           "json_each(?))", (json.dumps(list(signatures)),))
    return {r[0] for r in rows}


def replace_model_graph(db: sqlite_utils.Database, model: str, granularity: str,
                        occurrences: Sequence[Row], edges: Sequence[Row], reorders: Sequence[Row] = ()) -> None:
    """Replace the occurrences, brick-DAG edges and layout reorders of one model at one granularity."""
    for table in ("model_bricks", "model_edges", "model_reorders"):
        db.conn.execute(f"DELETE FROM {table} WHERE model = ? AND granularity = ?", (model, granularity))
    if occurrences:
        db["model_bricks"].insert_all(occurrences, batch_size=500)
    if edges:
        db["model_edges"].insert_all(edges, batch_size=500)
    if reorders:
        db["model_reorders"].insert_all(reorders)


def model_reorders(db: sqlite_utils.Database, model: str, granularity: str) -> tuple[int, ...]:
    """Bytes of each layout reorder stored for one model at one granularity (empty if none)."""
    row = db.conn.execute("SELECT sizes FROM model_reorders WHERE model = ? AND granularity = ?",
                          (model, granularity)).fetchone()
    return tuple(int(n) for n in json.loads(row[0])) if row else ()


@functools.cache
def _upsert_sql(table: str, rule: str) -> str:
    keys = (*MEASUREMENT_KEYS[table], "system", "config_id")
    cols = (*keys, *MEASUREMENT_COLUMNS)
    sets = ", ".join(f"{c} = excluded.{c}" for c in MEASUREMENT_COLUMNS)
    return (f"INSERT INTO {table} AS cur ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets} WHERE {MERGE_RULES[rule]}")


def upsert_measurement(db: sqlite_utils.Database, table: str, row: Row, rule: str) -> RecordOutcome:
    """Insert a measurement, or resolve a duplicate (item, system, config_id) by ``rule``."""
    names = (*MEASUREMENT_KEYS[table], "system", "config_id")
    key = tuple(row[c] for c in names)
    existing = db.conn.execute(f"SELECT id FROM {table} WHERE "
                               f"{' AND '.join(f'{c} = ?' for c in names)}", key).fetchone()
    values = [*key, *(row[c] for c in MEASUREMENT_COLUMNS)]
    cursor = db.conn.execute(_upsert_sql(table, rule), values)
    if existing is None:
        return RecordOutcome.INSERTED
    return RecordOutcome.REPLACED if cursor.rowcount == 1 else RecordOutcome.KEPT


def measured_status(db: sqlite_utils.Database, table: str, item: str, system: str,
                    config_id: str) -> str | None:
    """The status of the stored measurement of an item, or None if there is none."""
    row = db.conn.execute(f"SELECT status FROM {table} WHERE {MEASUREMENT_TABLES[table]} = ? AND "
                          f"system = ? AND config_id = ?", (item, system, config_id)).fetchone()
    return None if row is None else str(row[0])


def get_claim(db: sqlite_utils.Database, item: str, system: str, config_id: str) -> Row | None:
    """The claim row on an item, or None."""
    rows = list(db.query("SELECT * FROM claims WHERE item = ? AND system = ? AND config_id = ?",
                         (item, system, config_id)))
    return rows[0] if rows else None


def put_claim(db: sqlite_utils.Database, row: Row) -> None:
    """Create or take over the claim on ``row``'s item."""
    db.conn.execute(
        "INSERT INTO claims (item, kind, system, config_id, owner, host, pid, claimed_at, expires_at) "
        "VALUES (:item, :kind, :system, :config_id, :owner, :host, :pid, :claimed_at, :expires_at) "
        "ON CONFLICT (item, system, config_id) DO UPDATE SET kind = excluded.kind, owner = "
        "excluded.owner, host = excluded.host, pid = excluded.pid, claimed_at = excluded.claimed_at, "
        "expires_at = excluded.expires_at", row)


def delete_claim(db: sqlite_utils.Database, item: str, system: str, config_id: str, owner: str) -> None:
    """Drop ``owner``'s claim on an item (no-op if someone else holds it)."""
    db.conn.execute("DELETE FROM claims WHERE item = ? AND system = ? AND config_id = ? AND owner = ?",
                    (item, system, config_id, owner))


def overheads(db: sqlite_utils.Database, system: str, config_id: str, signatures: Sequence[str]) -> dict[str, float]:
    """Stored overheads of ``signatures`` under a system and configuration."""
    rows = db.conn.execute("SELECT signature, overhead_s FROM brick_overheads WHERE system = ? AND config_id = ? "
                           "AND signature IN (SELECT value FROM json_each(?))",
                           (system, config_id, json.dumps(list(signatures))))
    return {str(sig): float(value) for sig, value in rows}


def get_reorder_price(db: sqlite_utils.Database, system: str, config_id: str) -> Row | None:
    """The ``reorder_prices`` row of a system and configuration, or None."""
    rows = list(db.query("SELECT * FROM reorder_prices WHERE system = ? AND config_id = ?", (system, config_id)))
    return rows[0] if rows else None


def get_peaks(db: sqlite_utils.Database, system: str) -> Row | None:
    """The ``peaks`` row of a system, or None."""
    rows = list(db.query("SELECT * FROM peaks WHERE system = ?", (system,)))
    return rows[0] if rows else None


def delete_owner_claims(db: sqlite_utils.Database, owner: str) -> None:
    """Drop every claim of ``owner``."""
    db.conn.execute("DELETE FROM claims WHERE owner = ?", (owner,))


# --------------------------------------------------------------------------------- queries
def select(db: sqlite_utils.Database, table: str, order: str) -> list[Row]:
    """Every row of a small table (systems, backends, models, claims), ordered."""
    return list(db.query(f"SELECT * FROM {table} ORDER BY {order}"))


def find_models(db: sqlite_utils.Database, name_or_key: str) -> list[Row]:
    """Models whose key, name or key prefix (6+ characters) is ``name_or_key``."""
    return list(db.query(
        "SELECT * FROM models WHERE key = :q OR name = :q OR (length(:q) >= 6 AND key LIKE :q || '%') "
        "ORDER BY name, key", {"q": name_or_key}))


def model_granularities(db: sqlite_utils.Database, model: str) -> list[str]:
    """The granularities at which a model's occurrences are stored."""
    rows = db.conn.execute("SELECT DISTINCT granularity FROM model_bricks WHERE model = ? ORDER BY 1",
                           (model,))
    return [r[0] for r in rows]


def bricks_of(db: sqlite_utils.Database, model: str, granularity: str) -> list[Row]:
    """The unique bricks of a model (with their occurrence ``count``), in order of first use."""
    return list(db.query(
        "SELECT b.signature, b.granularity, b.op_type, b.op_types, b.inputs, b.outputs, b.constants, "
        "b.attributes, b.flops, b.bytes_moved, COUNT(*) AS count FROM model_bricks AS mb JOIN bricks "
        "AS b ON b.signature = mb.signature WHERE mb.model = ? AND mb.granularity = ? "
        "GROUP BY b.signature ORDER BY MIN(mb.idx)", (model, granularity)))


def brick_rows(db: sqlite_utils.Database, signatures: Sequence[str] | None) -> list[Row]:
    """Rows of ``bricks`` (without the ONNX bytes), all or the given ones."""
    cols = ("signature, granularity, op_type, op_types, inputs, outputs, constants, attributes, "
            "flops, bytes_moved")
    if signatures is None:
        return list(db.query(f"SELECT {cols} FROM bricks ORDER BY op_type, signature"))
    return list(db.query(f"SELECT {cols} FROM bricks WHERE signature IN (SELECT value FROM "
                         f"json_each(?)) ORDER BY op_type, signature", (json.dumps(list(signatures)),)))


def brick_onnx(db: sqlite_utils.Database, signature: str) -> bytes | None:
    """The compact ONNX bytes of a brick, or None."""
    row = db.conn.execute("SELECT onnx FROM bricks WHERE signature = ?", (signature,)).fetchone()
    return None if row is None else bytes(row[0])


def occurrences(db: sqlite_utils.Database, model: str, granularity: str) -> list[Row]:
    """The occurrences of a model, in order."""
    return list(db.query("SELECT idx, signature, nodes, inputs, outputs, weights FROM model_bricks WHERE "
                         "model = ? AND granularity = ? ORDER BY idx", (model, granularity)))


def edges(db: sqlite_utils.Database, model: str, granularity: str) -> list[tuple[int, int]]:
    """The brick-DAG edges of a model."""
    rows = db.conn.execute("SELECT src, dst FROM model_edges WHERE model = ? AND granularity = ? "
                           "ORDER BY src, dst", (model, granularity))
    return [(int(a), int(b)) for a, b in rows]


def unmeasured(db: sqlite_utils.Database, system: str, config_id: str,
               signatures: Sequence[str] | None, ok_only: bool) -> list[str]:
    """Signatures without a measurement (or, with ``ok_only``, without an ok one), in order."""
    done = ("SELECT 1 FROM measurements AS m WHERE m.signature = {col} AND m.system = :system AND "
            "m.config_id = :config_id" + (" AND m.status = 'ok'" if ok_only else ""))
    params = {"system": system, "config_id": config_id}
    if signatures is None:
        sql = (f"SELECT b.signature FROM bricks AS b WHERE NOT EXISTS ({done.format(col='b.signature')}) "
               f"ORDER BY b.signature")
    else:
        params["sigs"] = json.dumps(list(signatures))
        sql = (f"SELECT j.value FROM json_each(:sigs) AS j WHERE NOT EXISTS "
               f"({done.format(col='j.value')}) ORDER BY j.key")
    return [r[0] for r in db.conn.execute(sql, params)]


def measurements(db: sqlite_utils.Database, table: str, *, items: Sequence[str] | None = None,
                 model: str | None = None, system: str | None = None, config_id: str | None = None,
                 status: str | None = None) -> list[Row]:
    """Measurement rows (with ``runtime`` from ``backends``) matching every filter given."""
    item = MEASUREMENT_TABLES[table]
    where, params = [], {}
    for column, value in (("system", system), ("config_id", config_id), ("status", status)):
        if value is not None:
            where.append(f"m.{column} = :{column}")
            params[column] = value
    if items is not None:
        where.append(f"m.{item} IN (SELECT value FROM json_each(:items))")
        params["items"] = json.dumps(list(items))
    if model is not None:
        where.append("m.signature IN (SELECT signature FROM model_bricks WHERE model = :model)"
                     if table == "measurements" else "m.model = :model")
        params["model"] = model
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    return list(db.query(f"SELECT m.*, be.runtime FROM {table} AS m JOIN backends AS be ON "
                         f"be.config_id = m.config_id {clause} ORDER BY m.id", params))


def measured_pairs(db: sqlite_utils.Database) -> list[tuple[str, str]]:
    """Every (system, config_id) that has brick measurements."""
    rows = db.conn.execute("SELECT DISTINCT system, config_id FROM measurements ORDER BY 1, 2")
    return [(a, b) for a, b in rows]


def op_summary(db: sqlite_utils.Database, system: str, config_id: str, model: str | None,
               granularity: str) -> list[Row]:
    """Per op type: bricks, occurrences, measured and failed bricks, summed medians and FLOPs."""
    join = ("LEFT JOIN measurements AS m ON m.signature = b.signature AND m.system = :system AND "
            "m.config_id = :config_id")
    ok_median = "TOTAL(CASE WHEN m.status = 'ok' THEN m.median_s END)"
    if model is None:
        sql = (f"SELECT b.op_type, COUNT(*) AS bricks, TOTAL((SELECT COUNT(*) FROM model_bricks AS mb "
               f"WHERE mb.signature = b.signature)) AS occurrences, TOTAL(m.status = 'ok') AS measured, "
               f"TOTAL(m.status != 'ok') AS failed, {ok_median} AS total_median_s, TOTAL(b.flops) AS "
               f"total_flops FROM bricks AS b {join} GROUP BY b.op_type")
    else:
        sql = (f"SELECT b.op_type, COUNT(DISTINCT b.signature) AS bricks, COUNT(*) AS occurrences, "
               f"COUNT(DISTINCT CASE WHEN m.status = 'ok' THEN b.signature END) AS measured, "
               f"COUNT(DISTINCT CASE WHEN m.status != 'ok' THEN b.signature END) AS failed, "
               f"{ok_median} AS total_median_s, TOTAL(b.flops) AS total_flops FROM model_bricks AS mb "
               f"JOIN bricks AS b ON b.signature = mb.signature {join} WHERE mb.model = :model AND "
               f"mb.granularity = :granularity GROUP BY b.op_type")
    params = {"system": system, "config_id": config_id, "model": model, "granularity": granularity}
    return list(db.query(f"{sql} ORDER BY total_median_s DESC, op_type", params))


def coverage(db: sqlite_utils.Database, system: str | None, config_id: str | None) -> list[Row]:
    """Per model and granularity: unique bricks and occurrences, and how many are measured."""
    return list(db.query(
        "SELECT mo.key AS model, mo.name, mb.granularity, COUNT(DISTINCT mb.signature) AS unique_bricks, "
        "COUNT(DISTINCT CASE WHEN m.status = 'ok' THEN mb.signature END) AS measured, "
        "COUNT(DISTINCT CASE WHEN m.status != 'ok' THEN mb.signature END) AS failed, "
        "COUNT(*) AS occurrences, TOTAL(m.status = 'ok') AS occurrences_measured "
        "FROM models AS mo JOIN model_bricks AS mb ON mb.model = mo.key LEFT JOIN measurements AS m "
        "ON m.signature = mb.signature AND m.system = :system AND m.config_id = :config_id "
        "GROUP BY mo.key, mb.granularity ORDER BY mo.name, mo.key, mb.granularity",
        {"system": system, "config_id": config_id}))


def counts(db: sqlite_utils.Database, now: float) -> Row:
    """Row counts of the main tables, and live claims at time ``now``."""
    tables = ("bricks", "models", "measurements", "model_measurements")
    parts = ", ".join(f"(SELECT COUNT(*) FROM {t}) AS {t}" for t in tables)
    return next(db.query(f"SELECT {parts}, (SELECT COUNT(*) FROM measurements WHERE status = 'ok') AS "
                         f"measurements_ok, (SELECT COUNT(*) FROM claims WHERE expires_at > :now) AS "
                         f"live_claims", {"now": now}))


# --------------------------------------------------------------------------------- merge
def attach(db: sqlite_utils.Database, path: str) -> None:
    """Attach another database read-only as ``src`` (outside any transaction)."""
    uri = f"file:{quote(str(Path(path).absolute()))}?mode=ro"
    db.conn.execute("ATTACH DATABASE ? AS src", (uri,))


def detach(db: sqlite_utils.Database) -> None:
    """Detach ``src``."""
    db.conn.execute("DETACH DATABASE src")


def _columns(db: sqlite_utils.Database, table: str) -> list[str]:
    return [r[1] for r in db.conn.execute(f"PRAGMA main.table_info({table})") if r[1] != "id"]


def copy_missing(db: sqlite_utils.Database, table: str) -> int:
    """Copy the rows of ``src.table`` whose key ``table`` lacks; return how many."""
    cols = ", ".join(_columns(db, table))
    cursor = db.conn.execute(f"INSERT OR IGNORE INTO main.{table} ({cols}) SELECT {cols} FROM "
                             f"src.{table}")
    return max(cursor.rowcount, 0)


def merge_measurements(db: sqlite_utils.Database, table: str, rule: str) -> tuple[int, int, int]:
    """Merge ``src.table`` by ``rule``; return (added, replaced, kept)."""
    keys = (*MEASUREMENT_KEYS[table], "system", "config_id")
    total = db.conn.execute(f"SELECT COUNT(*) FROM src.{table}").fetchone()[0]
    on = " AND ".join(f"t.{c} = s.{c}" for c in keys)
    clashes = db.conn.execute(
        f"SELECT COUNT(*) FROM src.{table} AS s JOIN main.{table} AS t ON {on}").fetchone()[0]
    cols = (*keys, *MEASUREMENT_COLUMNS)
    sets = ", ".join(f"{c} = excluded.{c}" for c in MEASUREMENT_COLUMNS)
    cursor = db.conn.execute(
        f"INSERT INTO main.{table} AS cur ({', '.join(cols)}) SELECT {', '.join(cols)} FROM "
        f"src.{table} WHERE true ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets} "
        f"WHERE {MERGE_RULES[rule]}")
    added = total - clashes
    replaced = max(cursor.rowcount, 0) - added
    return added, replaced, clashes - replaced


# --------------------------------------------------------------------------------- export
EXPORT_QUERIES: Mapping[str, str] = {
    "measurements": "SELECT t.*, m.samples, m.budget FROM brick_timings AS t JOIN measurements AS m "
                    "ON m.id = t.id ORDER BY t.id",
    "model_measurements": "SELECT mm.*, mo.name, be.runtime, be.device FROM model_measurements AS mm "
                          "JOIN models AS mo ON mo.key = mm.model JOIN backends AS be ON "
                          "be.config_id = mm.config_id ORDER BY mm.id",
    "bricks": "SELECT signature, granularity, op_type, op_types, inputs, outputs, constants, "
              "attributes, flops, bytes_moved, added_at FROM bricks ORDER BY op_type, signature",
    "models": "SELECT * FROM models ORDER BY name, key",
    "model_bricks": "SELECT * FROM model_bricks ORDER BY model, granularity, idx",
    "systems": "SELECT * FROM systems ORDER BY fingerprint",
    "peaks": "SELECT * FROM peaks ORDER BY system",
    "reorder_prices": "SELECT * FROM reorder_prices ORDER BY system, config_id",
    "brick_overheads": "SELECT * FROM brick_overheads ORDER BY signature, system, config_id",
    "backends": "SELECT * FROM backends ORDER BY config_id",
}


def export_rows(db: sqlite_utils.Database, table: str) -> tuple[list[str], Iterable[tuple[Any, ...]]]:
    """Column names and rows of one of :data:`EXPORT_QUERIES`."""
    cursor = db.conn.execute(EXPORT_QUERIES[table])
    return [d[0] for d in cursor.description], cursor


def integrity_lines(db: sqlite_utils.Database, limit: int = 20) -> list[str]:
    """``PRAGMA integrity_check``'s lines (``["ok"]`` for a sound file), or the error it raised."""
    try:
        rows = [str(r[0]) for r in db.conn.execute(f"PRAGMA integrity_check({int(limit)})")]
    except sqlite3.DatabaseError as e:
        return [str(e)]
    return [line.strip() for row in rows for line in row.splitlines()
            if line.strip() and line.strip() != "*** in database main ***"]


def foreign_key_problems(db: sqlite_utils.Database, limit: int = 20) -> list[str]:
    """Rows whose foreign key points nowhere, as ``"table rowid -> parent"``."""
    try:
        rows = db.conn.execute("PRAGMA foreign_key_check").fetchmany(limit)
    except sqlite3.DatabaseError as e:
        return [str(e)]
    return [f"{table} row {rowid} -> {parent}" for table, rowid, parent, _ in rows]


def _finite(column: str) -> str:
    """SQL true when ``column`` holds a finite number (SQLite keeps infinities, and text anywhere)."""
    return f"typeof({column}) IN ('integer', 'real') AND abs({column}) < 1e308"


#: What each value of an ok measurement must be: column -> (SQL true when it is, the words for it).
VALUE_RULES: Mapping[str, tuple[str, str]] = {
    "n": ("typeof(n) = 'integer' AND n >= 1", "an integer of at least 1"),
    "median_s": (f"{_finite('median_s')} AND median_s > 0", "a positive finite number"),
    "wall_time_s": (f"{_finite('wall_time_s')} AND wall_time_s >= 0", "a finite number >= 0"),
    **{c: (f"{c} IS NULL OR ({_finite(c)} AND {c} > 0)", "a positive finite number")
       for c in ("min_s", "mean_s", "p90_s", "p99_s", "ci_high_s")},
    **{c: (f"{c} IS NULL OR ({_finite(c)} AND {c} >= 0)", "a finite number >= 0")
       for c in ("ci_low_s", "std_s", "iqr_s", "floor_s")},
    **{c: (f"{c} IS NULL OR ({_finite(c)})", "a finite number") for c in (*QUEUE_FIELDS, "node_s", "empty_s")},
}


def _bad_values_sql(columns: Iterable[str]) -> tuple[str, str]:
    """For a measurement table with ``columns``: the SQL true for an ok row with an impossible
    value, and a CASE giving ``column = value`` of its first one."""
    rules = [(c, test) for c, (test, _) in VALUE_RULES.items() if c in columns]
    where = "status = 'ok' AND NOT (" + " AND ".join(f"({test})" for _, test in rules) + ")"
    first = "CASE " + " ".join(f"WHEN NOT ({test}) THEN '{c} = ' || quote({c})" for c, test in rules) + " END"
    return where, first


def invalid_measurements(db: sqlite_utils.Database, version: int, limit: int = 20) -> list[str]:
    """Ok measurements (at most ``limit`` per table) with an impossible value, as
    ``"table row id (item ...): column = value, not ..."``; the tables as at schema ``version``."""
    lines = []
    for table, item in MEASUREMENT_TABLES.items():
        if table not in schema_at(version):
            continue
        where, first = _bad_values_sql(schema_at(version)[table])
        rows = db.conn.execute(f"SELECT id, {item}, {first} FROM {table} WHERE {where} ORDER BY id LIMIT ?",
                               (limit,))
        for rowid, key, shown in rows:
            column = shown.partition(" ")[0]
            lines.append(f"{table} row {rowid} ({item} {str(key)[:12]}): {shown}, not "
                         f"{VALUE_RULES[column][1]}")
    return lines


def fail_invalid_measurements(db: sqlite_utils.Database) -> int:
    """Mark failed (with the impossible value as the error) every ok measurement that
    :func:`invalid_measurements` reports; return how many."""
    count = 0
    for table in MEASUREMENT_TABLES:
        where, first = _bad_values_sql(schema_at(SCHEMA_VERSION)[table])
        cursor = db.conn.execute(f"UPDATE {table} SET status = 'failed', error = 'impossible stored value ' || "
                                 f"{first} || ', marked failed by dlbricks db upgrade' WHERE {where}")
        count += max(cursor.rowcount, 0)
    return count


def brick_blobs(db: sqlite_utils.Database) -> Iterable[tuple[str, bytes | None]]:
    """Every brick's signature and ONNX bytes, one at a time."""
    yield from db.conn.execute("SELECT signature, onnx FROM bricks")


def open_for_check(path: str) -> sqlite_utils.Database:
    """Open an existing dlbricks database read-only without the health check (``db check``)."""
    conn = _open_file(path, create=False, readonly=True, busy_timeout_s=5.0)
    try:
        _check_header(conn, path, readonly=False)
        conn.execute("PRAGMA query_only = ON")
    except (sqlite3.Error, DatabaseError):
        conn.close()
        raise
    return sqlite_utils.Database(conn, execute_plugins=False)


def preflight(path: str, *, create: bool) -> None:
    """Raise :class:`DatabaseError` if opening ``path`` for writing would fail; write nothing."""
    if path == ":memory:":
        return
    p = Path(path)
    if p.is_dir():
        raise DatabaseError(f"Cannot open database {path}: it is a folder; give a file path such "
                            f"as {p / 'dlbricks.db'}.")
    if not p.exists():
        if not create:
            raise DatabaseError(f"No database at {path}; fill one with 'dlbricks bench MODEL --db {path}'.")
        if not p.parent.is_dir():
            raise DatabaseError(f"Cannot create database {path}: the folder {p.parent} does not exist.")
        if not os.access(p.parent, os.W_OK):
            raise DatabaseError(f"Cannot create database {path}: the folder {p.parent} is read-only; "
                                f"choose a writable folder.")
        return
    db = open_for_check(path)
    try:
        check_health(db.conn, path)
    finally:
        db.close()
    if not os.access(p, os.W_OK) or not os.access(p.parent, os.W_OK):
        raise DatabaseError(f"Cannot write database {path}: the file or its folder is read-only; make "
                            f"them writable, or copy the database to a writable folder.")
