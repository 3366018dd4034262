"""The :class:`Store`: one SQLite file of systems, backends, bricks, models and measurements.

The store owns the connection, the schema and the operations on the whole file (check, upgrade,
merge, export, stats); what it stores is read and written through its parts, one per kind of
thing: ``store.bricks``, ``store.models``, ``store.systems``, ``store.measurements`` and
``store.claims``. They turn the pipeline's objects (``Decomposition``, ``Brick``, ``SystemInfo``,
backend configurations, ``Measurement``) into rows and rows into the records of :mod:`.records`;
the SQL is in :mod:`.sql`. Each write method is one short transaction, committed before it returns.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import sqlite3
import time
from typing import Any

import sqlite_utils

from dlbricks import Brick, InvalidArgumentError
from dlbricks.benchmarks_db import export as _export
from dlbricks.benchmarks_db import sql as _sql
from dlbricks.errors import DatabaseError

from ._bricks import Bricks
from ._claims import DEFAULT_LEASE_S, HOST, Claims
from ._measurements import Measurements
from ._migrations import schema_at
from ._models import Models
from ._part import guard as _guard
from .records import CheckReport, DbStats, MergeReport, PeaksRecord, UpgradeReport
from ._systems import Systems

__all__ = ["Store", "DEFAULT_PATH", "DEFAULT_LEASE_S", "DEFAULT_BUSY_TIMEOUT_S", "HOST",
           "Bricks", "Models", "Systems", "Measurements", "Claims"]

#: The database ``dlbricks bench`` uses when ``--db`` is not given.
DEFAULT_PATH = "dlbricks.db"
#: Seconds a write waits for another process's write lock before retrying.
DEFAULT_BUSY_TIMEOUT_S = 30.0


class Store:
    """A brick database: one SQLite file, WAL mode, safe for several processes.

    Parameters
    ----------
    path : str or Path, default "dlbricks.db"
        The file (``":memory:"`` for a private in-memory database).
    create : bool, default True
        Create the file if it does not exist; with False a missing file is an error.
    readonly : bool, default False
        Open for queries only (``merge_from`` opens its sources this way).
    busy_timeout_s : float, default 30
        How long a write waits for another process's write lock (then it retries).

    Attributes
    ----------
    bricks : Bricks
        The bricks, by signature.
    models : Models
        The models, with their brick occurrences and brick DAGs.
    systems : Systems
        The systems and backend configurations, with their peaks, reorder prices and overheads.
    measurements : Measurements
        The measurements of bricks, of whole models and of bricks in a model's context.
    claims : Claims
        The leases of the processes filling the file.
    owner : str
        This store's name in claims (host, process id and a random suffix).

    Raises
    ------
    DatabaseError
        If the path is a folder or cannot be created, the file is not SQLite or belongs to another
        application, or its schema is newer than this code; nothing is written then.

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.stats().bricks, store.measurements.bricks()
    (0, [])
    """

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *, create: bool = True,
                 readonly: bool = False, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        self.owner = f"{HOST}:{os.getpid()}:{secrets.token_hex(3)}"
        self._db = _sql.connect(self.path, create=create, readonly=readonly,
                                busy_timeout_s=busy_timeout_s)
        # the systems and backend configurations this store has written (not written again)
        self._known_systems: set[str] = set()
        self._known_backends: set[str] = set()
        self.bricks = Bricks(self)
        self.models = Models(self)
        self.systems = Systems(self)
        self.measurements = Measurements(self)
        self.claims = Claims(self)

    @classmethod
    def open(cls, path: str | os.PathLike[str] = DEFAULT_PATH, **kwargs: Any) -> Store:
        """Open (or create) a database; see :class:`Store` for the arguments."""
        return cls(path, **kwargs)

    @property
    def db(self) -> sqlite_utils.Database:
        """The underlying sqlite-utils Database (for ad-hoc queries)."""
        return self._db

    @property
    def schema_version(self) -> int:
        """The schema version of the file."""
        return _sql.schema_version(self._db)

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed when the last connection closes)."""
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # ------------------------------------------------------------------------------ file-level
    @_guard
    def stats(self) -> DbStats:
        """Counts, systems, backends, and coverage per model for every measured (system, config)."""
        counts = _sql.counts(self._db, time.time())
        peaks = tuple(PeaksRecord.from_row(r) for r in _sql.select(self._db, "peaks", "system"))
        pairs = _sql.measured_pairs(self._db) or [(None, None)]
        coverage = tuple(c for s, cid in pairs for c in self.measurements.coverage(system=s, config_id=cid))
        return DbStats(self.path, self.schema_version, tuple(self.systems.all()), tuple(self.systems.backends()),
                       counts["bricks"], counts["models"], counts["measurements"],
                       counts["measurements_ok"], counts["model_measurements"], counts["live_claims"],
                       coverage, peaks)

    @_guard
    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` (``"ok"`` for a sound file)."""
        return _sql.integrity_check(self._db)

    @staticmethod
    def preflight(path: str | os.PathLike[str], *, create: bool = True) -> None:
        """Check, writing nothing, that ``path`` can be opened for writing: an existing file must be a
        sound dlbricks database (the check run on every open) and writable; a new one needs an
        existing, writable folder (and ``create``). Raises :class:`DatabaseError`."""
        _sql.preflight(os.fspath(path), create=create)

    @staticmethod
    def check(path: str | os.PathLike[str]) -> CheckReport:
        """Check a database file in depth, read-only: SQLite's integrity check, the schema version,
        every table and column of that version present, foreign keys, every stored brick decoding,
        and the values of ok measurements (a positive median, at least one sample...).

        Unlike opening a :class:`Store`, a damaged file is reported, not refused; a file that is
        not a dlbricks database raises :class:`DatabaseError`.
        """
        path = os.fspath(path)
        db = _sql.open_for_check(path)
        try:
            version, lost = _sql.stored_version(db.conn)
            integrity = tuple(_sql.integrity_lines(db))
            sound = integrity == ("ok",)
            tables, columns = _sql.schema_gaps(db.conn, version) if sound else ([], [])
            foreign = tuple(_sql.foreign_key_problems(db)) if sound else ()
            values = (tuple(_sql.invalid_measurements(db, version)) if sound and not tables and not columns
                      else ())
            bad, count = (_undecodable(db) if sound and "bricks" in schema_at(version) and "bricks" not in tables
                          else ((), 0))
        finally:
            db.close()
        return CheckReport(path, version, integrity, tuple(tables), foreign, bad, count, tuple(columns), values,
                           lost)

    @staticmethod
    def require_mergeable(path: str | os.PathLike[str]) -> CheckReport:
        """:meth:`check` a file that is to be read from (a merge's source): raise
        :class:`DatabaseError` naming the file and its first problem if it is damaged or holds
        impossible values; a version lost in a dump and restore is fine."""
        report = Store.check(path)
        readable = dataclasses.replace(report, version_lost=False)  # stored_version recovers it on open
        if not readable.ok:
            problems = readable.problems
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise DatabaseError(f"Cannot merge {report.path}: {problems[0]}{more}; run 'dlbricks db check "
                                f"--db {report.path}' for details and the command that repairs it.")
        return report

    @staticmethod
    def upgrade(path: str | os.PathLike[str]) -> UpgradeReport:
        """Bring a database to the current schema in place, and repair what :meth:`check` says
        ``upgrade`` repairs: the schema version that a dump and restore lost is written back, and
        ok measurements with an impossible value are marked failed (``bench --retry-failed``
        measures them again). A damaged file is refused as every open refuses it."""
        path = os.fspath(path)
        db = _sql.open_for_check(path)
        try:
            before, lost = _sql.stored_version(db.conn)
        finally:
            db.close()
        with Store(path, create=False) as store:
            failed = store._fail_invalid()
            return UpgradeReport(path, before, store.schema_version, lost, failed)

    @_guard
    def _fail_invalid(self) -> int:
        return _sql.write(self._db, lambda: _sql.fail_invalid_measurements(self._db))

    # ------------------------------------------------------------------------------ merge, export
    @_guard
    def merge_from(self, other: str | os.PathLike[str], rule: str = "best", *, check: bool = True) -> MergeReport:
        """Copy another database's systems, backends, bricks, models and measurements into this one.

        Bricks, models, systems (with their peaks and reorder prices), backends and brick
        overheads are copied when missing. A measurement (bricks in a model's context included) of
        the same (item, system, configuration) is resolved by ``rule``: ``"best"``
        (ok over failed, then more samples, then newer), ``"newest"``, or ``"keep"`` (this
        database's row stays).
        Claims are not copied. One transaction: a failure leaves this database unchanged.
        The source is checked first (:meth:`require_mergeable`; ``check=False`` when the caller did).
        """
        if rule not in ("best", "newest", "keep"):
            raise InvalidArgumentError(f"'rule' must be 'best', 'newest' or 'keep'. Got {rule!r} instead.")
        source = os.fspath(other)
        if self.path != ":memory:" and _export.same_file(source, self.path):
            raise InvalidArgumentError(f"Cannot merge {source} into itself ({self.path} is the same file).")
        Store(source, create=False, readonly=True).close()  # validates the file and its schema
        if check:
            Store.require_mergeable(source)
        _sql.attach(self._db, source)
        try:
            def tx() -> MergeReport:
                copied = {t: _sql.copy_missing(self._db, t) for t in
                          ("systems", "peaks", "backends", "bricks", "models", "model_bricks",
                           "model_edges", "model_reorders", "brick_overheads", "reorder_prices")}
                bricks = _sql.merge_measurements(self._db, "measurements", rule)
                models = _sql.merge_measurements(self._db, "model_measurements", rule)
                _sql.merge_measurements(self._db, "context_measurements", rule)
                return MergeReport(source, rule, copied["systems"], copied["backends"],
                                   copied["bricks"], copied["models"], *bricks, *models)

            return _sql.write(self._db, tx)
        except sqlite3.IntegrityError as e:
            raise DatabaseError(f"Cannot merge {source}: {e}; run 'dlbricks db check --db {source}' for "
                                f"details.") from e
        finally:
            _sql.detach(self._db)

    @_guard
    def export(self, fmt: str, out: Any, *, table: str = "measurements", overwrite: bool = False) -> int:
        """Write a table as CSV or JSON (an array of objects) to a path or text stream.

        ``table="measurements"`` exports the ``brick_timings`` view (each measurement with its
        brick's op type, the system's CPU and the runtime); bricks are exported without their
        ONNX bytes. A path is written to a temporary file renamed into place; it may not be this
        database (symlinks resolved), nor an existing file unless ``overwrite``. Returns the
        number of rows written.
        """
        if table not in _sql.EXPORT_QUERIES:
            raise InvalidArgumentError(f"'table' must be one of {sorted(_sql.EXPORT_QUERIES)}. "
                                       f"Got {table!r} instead.")
        if not hasattr(out, "write"):
            _export.check_output(out, [self.path], overwrite=overwrite)
        columns, rows = _sql.export_rows(self._db, table)
        return _export.write_rows(out, fmt, columns, rows)


def _undecodable(db: sqlite_utils.Database) -> tuple[tuple[str, ...], int]:
    """The signatures of the stored bricks whose ONNX bytes do not decode, and how many bricks there are."""
    bad, count = [], 0
    for signature, data in _sql.brick_blobs(db):
        count += 1
        try:
            Brick.from_bytes(data)
        except Exception:  # noqa: BLE001 - protobuf, onnx and json raise untyped errors
            bad.append(signature)
    return tuple(bad), count
