"""The :class:`Store`: one SQLite file of systems, backends, bricks, models and measurements.

The store turns the pipeline's objects (``Decomposition``, ``Brick``, ``SystemInfo``, backend
configurations, ``Measurement``) into rows and rows into the records of :mod:`._records`; the SQL
is in :mod:`._sql`. Each write method is one short transaction, committed before it returns.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import networkx as nx
import sqlite_utils

from dlbricks import Brick, Decomposition, InvalidArgumentError
from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import export as _export
from dlbricks.benchmarks_db import sql as _sql
from dlbricks.decomposition import Occurrence
from dlbricks.errors import DatabaseError
from dlbricks.graph import ModelSource
from dlbricks.names import check_identifier
from dlbricks.tempdir import sqlite_temp_error, sqlite_temp_is_culprit

from ._migrations import schema_at
from .records import (
    QUEUE_FIELDS,
    STAT_FIELDS,
    BackendRecord,
    BrickRecord,
    CheckReport,
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
    UpgradeReport,
)

if TYPE_CHECKING:
    from dlbricks.generators import Measurement

__all__ = ["Store", "DEFAULT_PATH", "DEFAULT_LEASE_S", "DEFAULT_BUSY_TIMEOUT_S", "HOST"]

#: The database ``dlbricks bench`` uses when ``--db`` is not given.
DEFAULT_PATH = "dlbricks.db"
#: Seconds a claim lasts unless renewed; ``populate`` derives its own from the budget.
DEFAULT_LEASE_S = 600.0
#: Seconds a write waits for another process's write lock before retrying.
DEFAULT_BUSY_TIMEOUT_S = 30.0
#: This machine's name, stored with claims: a claim of a dead process on this host is stale.
HOST = socket.gethostname()
#: How a measurement's item is named in each measurement table.
_TABLES = {"brick": "measurements", "model": "model_measurements", "context": "context_measurements"}

P = ParamSpec("P")
R = TypeVar("R")


def _guard(method: Callable[Concatenate[Store, P], R]) -> Callable[Concatenate[Store, P], R]:
    """Turn sqlite3 errors into :class:`DatabaseError` naming the file and the operation, or into
    :class:`TempDirError` naming the temporary folder where a write that found no room more likely
    failed there (SQLite's sorts and statement journals, :func:`sqlite_temp_is_culprit`)."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            if _sql.is_damage(e):
                raise _sql.damaged(self.path, f"{e}, in {method.__name__.lstrip('_')}") from e
            if _sql.is_full(e):
                temp = (sqlite_temp_is_culprit(self.path, self.readonly or self.path == ":memory:")
                        if _sql.is_failed_write(e) else None)
                if temp is not None:
                    raise sqlite_temp_error(self.path, temp, f"{e}, in {method.__name__.lstrip('_')}") from e
                raise DatabaseError(f"{self.path}: cannot write ({e}, in {method.__name__.lstrip('_')}): the "
                                    f"disk may be full; free space and run the same command again (what "
                                    f"was committed before is kept).") from e
            raise DatabaseError(f"{self.path}: {method.__name__.lstrip('_')} failed: {e}.") from e

    return wrapper


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

    Raises
    ------
    DatabaseError
        If the path is a folder or cannot be created, the file is not SQLite or belongs to another
        application, or its schema is newer than this code; nothing is written then.

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.stats().bricks
    0
    """

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *, create: bool = True,
                 readonly: bool = False, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        self.owner = f"{HOST}:{os.getpid()}:{secrets.token_hex(3)}"
        self._db = _sql.connect(self.path, create=create, readonly=readonly,
                                busy_timeout_s=busy_timeout_s)
        self._systems: set[str] = set()
        self._backends: set[str] = set()

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

    # ------------------------------------------------------------------------------ bricks, models
    @_guard
    def add_bricks(self, bricks: Iterable[Brick]) -> int:
        """Store bricks not stored yet (a brick is immutable: its signature is its content).

        Returns the number of bricks that were new.
        """
        unique = {b.signature: b for b in bricks}
        existing = _sql.existing_signatures(self._db, list(unique))
        now = _rows.now()
        rows = [_rows.brick_row(b, now) for s, b in unique.items() if s not in existing]
        _sql.write(self._db, lambda: _sql.insert_ignore(self._db, "bricks", rows))
        return len(rows)

    @_guard
    def add_decomposition(self, decomposition: Decomposition, source: ModelSource | None = None) -> int:
        """Store a model, its new bricks, its occurrences and its brick DAG (one transaction).

        Storing the same model again replaces its occurrences at that granularity; ``source``
        None keeps the source stored before. A model's name is a label and its key (its content) its
        identity: a model stored before under another name keeps that name (:meth:`stored_name`
        tells it), and a name already given to other content with the same inputs is refused. Returns
        the number of bricks that were new.

        Raises
        ------
        InvalidArgumentError
            If another model with the same inputs is stored under this name, or the name is unfit to
            store (blank, unprintable characters, over 200 characters).
        """
        dec = decomposition
        check_identifier(dec.model, "The model name", "rename the model file")
        existing = _sql.existing_signatures(self._db, list(dec.bricks))
        now = _rows.now()
        bricks = [_rows.brick_row(b, now) for s, b in dec.bricks.items() if s not in existing]
        model, occurrences, edges = _rows.model_rows(dec, source, now)
        model["name"] = self._label_for(model)
        reorders = _rows.reorder_rows(dec)

        def tx() -> None:
            _sql.insert_ignore(self._db, "bricks", bricks)
            _sql.upsert(self._db, "models", model, "key", keep=("added_at",))
            _sql.replace_model_graph(self._db, dec.model_key, dec.granularity, occurrences, edges, reorders)

        _sql.write(self._db, tx)
        return len(bricks)

    def _label_for(self, model: Mapping[str, Any]) -> str:
        """The name a ``models`` row is stored under: the name its key has already, else its own
        (refused where another model with the same inputs has it)."""
        stored = self.stored_name(model["key"])
        if stored is not None:
            return stored
        for row in _sql.find_models(self._db, model["name"]):
            if row["name"] == model["name"] and row["key"] != model["key"] and row["inputs"] == model["inputs"]:
                raise InvalidArgumentError(
                    f"{self.path} holds another model named {model['name']!r} with the same inputs (key "
                    f"{row['key'][:12]}), so the name would point at other content: rename the model file to "
                    "store this one, or use another database.")
        return str(model["name"])

    @_guard
    def stored_name(self, key: str) -> str | None:
        """The name of the model stored under ``key`` (None where none is)."""
        row = next(iter(self._db["models"].rows_where("key = ?", [key], select="name")), None)
        return None if row is None else str(row["name"])

    # ------------------------------------------------------------------------------ systems, backends
    @_guard
    def record_system(self, info: Any, *, fingerprint: str | None = None) -> SystemRecord:
        """Store a machine (a ``dlbricks.generators.system.SystemInfo``) once; return its record.

        ``fingerprint`` overrides the machine's own (tests, or labelling a machine); the details
        then keep the real one as ``machine_fingerprint``.
        """
        row = _rows.system_row(info, fingerprint, _rows.now())
        key = row["fingerprint"]
        _sql.write(self._db, lambda: _sql.insert_ignore(self._db, "systems", [row]))
        self._systems.add(key)
        return SystemRecord.from_row(self._db["systems"].get(key))

    @_guard
    def record_backend(self, config: Any, runtime: str = "onnxruntime", *,
                       version: str | None = None) -> BackendRecord:
        """Store a backend configuration (``config_id`` and ``to_dict()``) once; return its record.

        ``version`` defaults to the config's ``<runtime>_version`` or ``version`` field.
        """
        row = _rows.backend_row(config, runtime, version, _rows.now())
        _sql.write(self._db, lambda: _sql.insert_ignore(self._db, "backends", [row]))
        self._backends.add(row["config_id"])
        return BackendRecord.from_row(self._db["backends"].get(row["config_id"]))

    @_guard
    def record_peaks(self, system: Any, flops_per_s: float, bytes_per_s: float,
                     details: Mapping[str, Any] | None = None) -> PeaksRecord:
        """Store a machine's measured peak FLOP/s and memory bandwidth (bytes/s), replacing the
        previous calibration; ``system`` is a SystemInfo (stored if needed) or a fingerprint."""
        for name, value in (("flops_per_s", flops_per_s), ("bytes_per_s", bytes_per_s)):
            if not isinstance(value, int | float) or not value > 0 or value == float("inf"):
                raise InvalidArgumentError(f"'{name}' must be a positive finite number. Got {value!r}.")
        key = self._system_key(system)
        row = {"system": key, "flops_per_s": float(flops_per_s), "bytes_per_s": float(bytes_per_s),
               "details": _rows.to_json(dict(details or {})), "measured_at": _rows.now()}
        try:
            _sql.write(self._db, lambda: _sql.upsert(self._db, "peaks", row, "system"))
        except sqlite3.IntegrityError as e:
            raise DatabaseError(f"{self.path}: cannot record peaks of system {key}: {e}; store the "
                                f"system (record_system) first.") from e
        return PeaksRecord.from_row(row)

    @_guard
    def overheads(self, system: Any, config_id: str, signatures: Sequence[str]) -> dict[str, float]:
        """The stored overheads (``record(..., overhead_s=)``) of those bricks that have one."""
        return _sql.overheads(self._db, _rows.fingerprint_of(system), config_id, list(signatures))

    @_guard
    def record_reorder_price(self, system: Any, config_id: str, sizes: Sequence[int],
                             seconds_per_byte: Sequence[float]) -> None:
        """Store the cost of one layout reorder by size (bytes -> seconds per byte, ascending
        sizes) for a system and configuration, replacing an earlier calibration."""
        if len(sizes) != len(seconds_per_byte) or list(sizes) != sorted(sizes):
            raise InvalidArgumentError("'sizes' must ascend and match 'seconds_per_byte' one to one.")
        key = self._system_key(system)
        row = {"system": key, "config_id": config_id, "sizes": _rows.to_json([int(n) for n in sizes]),
               "seconds_per_byte": _rows.to_json([float(c) for c in seconds_per_byte]), "measured_at": _rows.now()}
        try:
            _sql.write(self._db, lambda: self._db["reorder_prices"].upsert(row, pk=("system", "config_id")))
        except sqlite3.IntegrityError as e:
            raise DatabaseError(f"{self.path}: cannot record a reorder price of system {key}: {e}; store the "
                                f"system and the configuration (record_backend) first.") from e

    @_guard
    def reorder_price(self, system: Any, config_id: str) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
        """The stored reorder price of a system and configuration as (sizes, seconds per byte), or None."""
        row = _sql.get_reorder_price(self._db, _rows.fingerprint_of(system), config_id)
        if row is None:
            return None
        return tuple(json.loads(row["sizes"])), tuple(json.loads(row["seconds_per_byte"]))

    @_guard
    def peaks(self, system: Any) -> PeaksRecord | None:
        """The peaks last recorded for a system, or None."""
        row = _sql.get_peaks(self._db, _rows.fingerprint_of(system))
        return None if row is None else PeaksRecord.from_row(row)

    def _system_key(self, system: Any) -> str:
        key = _rows.fingerprint_of(system)
        if not isinstance(system, str) and hasattr(system, "to_dict") and key not in self._systems:
            self.record_system(system)
        return key

    # ------------------------------------------------------------------------------ measurements
    def record(self, measurement: Measurement, system: Any, *, budget: Any = None, rule: str = "best",
               release: str | None = None, overhead_s: float | None = None, context: Any = None,
               model: str | None = None) -> RecordOutcome:
        """Store the measurement of a brick and commit at once.

        There is at most one row per (brick, system, configuration). A duplicate is resolved by
        ``rule`` (see :data:`MERGE_RULES`): ``"best"`` keeps an ok measurement over a failed one,
        then the one with more samples, then the newer. ``release`` (an owner) drops that owner's
        claim in the same transaction.

        Parameters
        ----------
        measurement : dlbricks.generators.Measurement
            Its ``key`` is the brick signature; the brick must be stored.
        system : str, SystemRecord or SystemInfo
            A SystemInfo is stored first if needed.
        budget : dlbricks.generators.Budget, optional
            Stored with the row (JSON), to tell quick runs from thorough ones.
        overhead_s : float, optional
            What the brick's own run does that its model does not (``brick_overheads``), stored in
            the same transaction.
        context : dlbricks.bricks.BrickContext, optional
            The context the brick was measured in, stored with the row.
        model : str, optional
            A stored model (name or key) in whose context the brick was measured again: the row goes
            to ``context_measurements``, for that model only (see :meth:`measurement`).
        """
        if model is not None:
            return self._record("context", [measurement], system, budget, rule, release, None, context,
                                self.model(model).key)[0]
        return self._record("brick", [measurement], system, budget, rule, release, overhead_s, context)[0]

    def record_model(self, measurement: Measurement, system: Any, *, budget: Any = None,
                     rule: str = "best", release: str | None = None) -> RecordOutcome:
        """Store a whole-model measurement (``key`` is the model key); see :meth:`record`."""
        return self._record("model", [measurement], system, budget, rule, release)[0]

    def record_many(self, measurements: Iterable[Measurement], system: Any, *, budget: Any = None,
                    rule: str = "best") -> list[RecordOutcome]:
        """Store many brick measurements in one transaction (imports, merges of result files)."""
        return self._record("brick", list(measurements), system, budget, rule, None)

    @_guard
    def _record(self, kind: str, items: Sequence[Measurement], system: Any, budget: Any, rule: str,
                release: str | None, overhead_s: float | None = None, context: Any = None,
                model: str | None = None) -> list[RecordOutcome]:
        if rule not in _sql.MERGE_RULES:
            raise InvalidArgumentError(f"'rule' must be one of {sorted(_sql.MERGE_RULES)}. Got {rule!r}.")
        table = _TABLES[kind]
        item = _sql.MEASUREMENT_TABLES[table]
        key = self._system_key(system)
        backends = {m.config.config_id: _rows.backend_row(m.config, m.backend, None, _rows.now())
                    for m in items if m.config.config_id not in self._backends}
        text = None if context is None else context.to_json()
        rows = [_rows.measurement_row(m, item, key, budget, _rows.now(), text) for m in items]
        if model is not None:
            for row in rows:
                row["model"] = model

        def tx() -> list[RecordOutcome]:
            _sql.insert_ignore(self._db, "backends", list(backends.values()))
            outcomes = [_sql.upsert_measurement(self._db, table, row, rule) for row in rows]
            if overhead_s is not None:
                self._db["brick_overheads"].upsert(
                    {"signature": items[0].key, "system": key, "config_id": items[0].config.config_id,
                     "overhead_s": overhead_s}, pk=("signature", "system", "config_id"))
            if release is not None:
                for m in items:
                    _sql.delete_claim(self._db, m.key, key, m.config.config_id, release)
            return outcomes

        try:
            outcomes = _sql.write(self._db, tx)
        except sqlite3.IntegrityError as e:
            raise DatabaseError(f"{self.path}: cannot record a measurement of {kind} "
                                f"{items[0].key[:12] if items else ''} on system {key}: {e}; store the "
                                f"{kind} (add_decomposition) and the system (record_system) first.") from e
        self._backends.update(backends)
        return outcomes

    # ------------------------------------------------------------------------------ claims
    @_guard
    def claim(self, item: str, system: Any, config_id: str, owner: str | None = None,
              lease_s: float = DEFAULT_LEASE_S, *, kind: str = "brick",
              retry_failed: bool = False) -> ClaimStatus:
        """Try to take the lease on measuring ``item`` for a system and configuration.

        In one write transaction: if the item has a measurement (an ok one, with
        ``retry_failed``), return ``MEASURED``; if another owner holds a live lease, return
        ``HELD``; otherwise take or renew the lease until ``now + lease_s`` and return
        ``CLAIMED``. A lease is live until it expires, except that a lease of this host whose
        process is gone is stale at once (a killed ``bench`` does not block its bricks).
        """
        owner = owner or self.owner
        key = _rows.fingerprint_of(system)
        table = _TABLES[kind]

        def tx() -> ClaimStatus:
            status = _sql.measured_status(self._db, table, item, key, config_id)
            if status == "ok" or (status is not None and not retry_failed):
                return ClaimStatus.MEASURED
            held = _sql.get_claim(self._db, item, key, config_id)
            now = time.time()
            if (held is not None and held["owner"] != owner and held["expires_at"] > now
                    and (held["host"] != HOST or _rows.pid_alive(held["pid"]))):
                return ClaimStatus.HELD
            _sql.put_claim(self._db, {"item": item, "kind": kind, "system": key, "config_id": config_id,
                                      "owner": owner, "host": HOST, "pid": os.getpid(),
                                      "claimed_at": now, "expires_at": now + lease_s})
            return ClaimStatus.CLAIMED

        return _sql.write(self._db, tx)

    @_guard
    def release(self, item: str, system: Any, config_id: str, owner: str | None = None) -> None:
        """Drop the claim of ``owner`` (default: this store's) on an item."""
        key, owner = _rows.fingerprint_of(system), owner or self.owner
        _sql.write(self._db, lambda: _sql.delete_claim(self._db, item, key, config_id, owner))

    @_guard
    def release_all(self, owner: str | None = None) -> None:
        """Drop every claim of ``owner`` (default: this store's)."""
        owner = owner or self.owner
        _sql.write(self._db, lambda: _sql.delete_owner_claims(self._db, owner))

    @_guard
    def claims(self, *, live_only: bool = True) -> list[Claim]:
        """The claims in the database (only unexpired ones by default)."""
        now = time.time()
        rows = _sql.select(self._db, "claims", "claimed_at")
        return [Claim.from_row(r) for r in rows if not live_only or r["expires_at"] > now]

    # ------------------------------------------------------------------------------ queries
    @_guard
    def systems(self) -> list[SystemRecord]:
        """Every system, by fingerprint."""
        return [SystemRecord.from_row(r) for r in _sql.select(self._db, "systems", "fingerprint")]

    @_guard
    def backends(self) -> list[BackendRecord]:
        """Every backend configuration, by config id."""
        return [BackendRecord.from_row(r) for r in _sql.select(self._db, "backends", "config_id")]

    @_guard
    def models(self) -> list[ModelRecord]:
        """Every model, by name."""
        return [ModelRecord.from_row(r) for r in _sql.select(self._db, "models", "name, key")]

    @_guard
    def has_model(self, key: str) -> bool:
        """Whether a model with exactly this key is stored."""
        return self._db["models"].count_where("key = ?", [key]) > 0

    @_guard
    def model(self, name_or_key: str) -> ModelRecord:
        """The model with this key, key prefix (6+ characters) or name.

        Raises
        ------
        InvalidArgumentError
            If no model matches, a name matches several models (e.g. two batch sizes), or the name is
            not one a model can have (blank, unprintable characters, over 200 characters).
        """
        check_identifier(name_or_key, "The model name", "give the name or key of a stored model")
        rows = _sql.find_models(self._db, name_or_key)
        if not rows:
            known = ", ".join(sorted({m.name for m in self.models()})[:10]) or "none"
            raise InvalidArgumentError(f"No model {_rows.shown(name_or_key)} in {self.path}; models: {known}.")
        if len(rows) > 1:
            choices = "; ".join(f"{r['key'][:12]} ({r['name']}, inputs {r['inputs']})" for r in rows)
            raise InvalidArgumentError(f"{name_or_key!r} names {len(rows)} models in {self.path}; give "
                                       f"a key instead: {choices}.")
        return ModelRecord.from_row(rows[0])

    @_guard
    def _model_granularity(self, model: str, granularity: str | None) -> tuple[str, str]:
        key = self.model(model).key
        stored = _sql.model_granularities(self._db, key)
        if granularity is None:
            granularity = "layer" if "layer" in stored or not stored else stored[0]
        if granularity not in stored:
            raise InvalidArgumentError(f"Model {model!r} has no bricks at granularity {granularity!r} "
                                       f"in {self.path}; stored: {stored or 'none'}.")
        return key, granularity

    @_guard
    def bricks_of(self, model: str, granularity: str | None = None) -> list[BrickRecord]:
        """The unique bricks of a model, in order of first use, with their occurrence counts."""
        key, granularity = self._model_granularity(model, granularity)
        return [BrickRecord.from_row(r) for r in _sql.bricks_of(self._db, key, granularity)]

    @_guard
    def brick_records(self, signatures: Sequence[str] | None = None) -> list[BrickRecord]:
        """Records of all bricks, or of the given signatures (without their ONNX bytes)."""
        return [BrickRecord.from_row(r) for r in _sql.brick_rows(self._db, signatures)]

    @_guard
    def brick(self, signature: str) -> Brick:
        """Rebuild a stored brick (with synthetic weights) from its ONNX bytes."""
        data = _sql.brick_onnx(self._db, signature)
        if data is None:
            raise InvalidArgumentError(f"No brick {signature[:16]!r} in {self.path}.")
        try:
            return Brick.from_bytes(data)
        except Exception as e:  # noqa: BLE001 - protobuf, onnx and json raise untyped errors on bad bytes
            raise _sql.damaged(self.path, f"brick {signature[:12]} does not decode: {type(e).__name__}: "
                                          f"{e}") from e

    @_guard
    def occurrences(self, model: str, granularity: str | None = None) -> tuple[Occurrence, ...]:
        """The occurrences of a model's bricks, in order."""
        key, granularity = self._model_granularity(model, granularity)
        return tuple(Occurrence(r["idx"], r["signature"], tuple(json.loads(r["nodes"])),
                                tuple(json.loads(r["inputs"])), tuple(json.loads(r["outputs"])),
                                tuple(json.loads(r["weights"] or "[]")))
                     for r in _sql.occurrences(self._db, key, granularity))

    @_guard
    def dag(self, model: str, granularity: str | None = None) -> nx.DiGraph:
        """The brick DAG of a model: occurrence indices (attribute ``signature``) and edges."""
        key, granularity = self._model_granularity(model, granularity)
        dag = nx.DiGraph()
        dag.add_nodes_from((o.index, {"signature": o.signature}) for o in self.occurrences(key, granularity))
        dag.add_edges_from(_sql.edges(self._db, key, granularity))
        return dag

    @_guard
    def decomposition(self, model: str, granularity: str | None = None) -> Decomposition:
        """Rebuild a stored model's :class:`~dlbricks.Decomposition` (bricks with synthetic weights)."""
        record = self.model(model)
        key, granularity = self._model_granularity(record.key, granularity)
        occurrences = self.occurrences(key, granularity)
        bricks = {sig: self.brick(sig) for sig in dict.fromkeys(o.signature for o in occurrences)}
        return Decomposition(model=record.name, model_key=key, granularity=granularity,
                             inputs=record.inputs, bricks=bricks, occurrences=occurrences,
                             dag=self.dag(key, granularity),
                             reorder_bytes=_sql.model_reorders(self._db, key, granularity))

    @_guard
    def unmeasured(self, system: Any, config_id: str, signatures: Sequence[str] | None = None, *,
                   retry_failed: bool = False) -> list[str]:
        """Bricks (all, or among ``signatures``, in their order) without a measurement for this
        system and configuration; with ``retry_failed``, failed ones count as unmeasured too."""
        return _sql.unmeasured(self._db, _rows.fingerprint_of(system), config_id, signatures, retry_failed)

    @_guard
    def measurements(self, *, model: str | None = None, system: Any = None, config_id: str | None = None,
                     signatures: Sequence[str] | None = None,
                     status: str | None = None) -> list[MeasurementRecord]:
        """Brick measurements matching every filter given (a model: its bricks' measurements)."""
        rows = _sql.measurements(
            self._db, "measurements", items=signatures,
            system=None if system is None else _rows.fingerprint_of(system),
            model=None if model is None else self.model(model).key, config_id=config_id, status=status)
        return [MeasurementRecord.from_row(r, "brick") for r in rows]

    @_guard
    def context_measurements(self, model: str, *, system: Any = None, config_id: str | None = None,
                             status: str | None = None) -> list[MeasurementRecord]:
        """The bricks of ``model`` (a name or key) measured again in its context
        (``record(..., model=)``), matching every filter given."""
        rows = _sql.measurements(
            self._db, "context_measurements", system=None if system is None else _rows.fingerprint_of(system),
            model=self.model(model).key, config_id=config_id, status=status)
        return [MeasurementRecord.from_row(r, "context") for r in rows]

    @_guard
    def model_measurements(self, *, model: str | None = None, system: Any = None,
                           config_id: str | None = None,
                           status: str | None = None) -> list[MeasurementRecord]:
        """Whole-model measurements matching every filter given."""
        rows = _sql.measurements(
            self._db, "model_measurements", system=None if system is None else _rows.fingerprint_of(system),
            model=None if model is None else self.model(model).key, config_id=config_id, status=status)
        return [MeasurementRecord.from_row(r, "model") for r in rows]

    @_guard
    def measurement(self, key: str, system: Any, config_id: str, *,
                    kind: str = "brick", model: str | None = None) -> Measurement | None:
        """The stored measurement of a brick (or, ``kind="model"``, a model) as a
        ``dlbricks.generators.Measurement``, its configuration rebuilt; None if there is none.
        With ``model`` (a stored model's name or key), the brick's measurement in that model's
        context (``record(..., model=)``), None if it has none."""
        from dlbricks.generators import Measurement

        table = _TABLES["context" if model is not None else kind]
        rows = _sql.measurements(self._db, table, items=[key], system=_rows.fingerprint_of(system),
                                 config_id=config_id, model=None if model is None else self.model(model).key)
        if not rows:
            return None
        rec = MeasurementRecord.from_row(rows[0], "context" if model is not None else kind)
        options = json.loads(self._db["backends"].get(config_id)["options"])
        data = {name: getattr(rec, name) for name in ("key", "status", "error", "n", *STAT_FIELDS,
                                                      "wall_time_s", "converged", "floor_s",
                                                      *QUEUE_FIELDS, "node_s", "empty_s")}
        data.update(backend=rec.runtime, config=options, config_id=config_id,
                    samples_s=None if rec.samples_s is None else list(rec.samples_s))
        return Measurement.from_dict(data)

    def _pair(self, system: Any, config_id: str | None) -> tuple[str, str]:
        """The (system, config) to summarize: as given, or the only measured one that matches."""
        sys_key = None if system is None else _rows.fingerprint_of(system)
        if sys_key is not None and config_id is not None:
            return sys_key, config_id
        pairs = [(s, c) for s, c in _sql.measured_pairs(self._db)
                 if sys_key in (None, s) and config_id in (None, c)]
        if len(pairs) != 1:
            listed = ", ".join(f"{s}/{c}" for s, c in pairs[:6]) or "none"
            raise InvalidArgumentError(f"{self.path} has measurements for {len(pairs)} matching "
                                       f"(system, config) pairs ({listed}); give both system= and "
                                       f"config_id=.")
        return pairs[0]

    @_guard
    def op_summary(self, *, system: Any = None, config_id: str | None = None, model: str | None = None,
                   granularity: str | None = None) -> list[OpSummary]:
        """Per op type: bricks, occurrences, measured, total median time; slowest first.

        With ``model``, occurrences and time are the model's (each occurrence counted);
        ``system``/``config_id`` may be left out when the database has one such pair.
        """
        sys_key, cid = self._pair(system, config_id)
        key = None
        if model is not None:
            key, granularity = self._model_granularity(model, granularity)
        rows = _sql.op_summary(self._db, sys_key, cid, key, granularity or "layer")
        return [OpSummary(r["op_type"], int(r["bricks"]), int(r["occurrences"]), int(r["measured"]),
                          int(r["failed"]), float(r["total_median_s"]), int(r["total_flops"]))
                for r in rows]

    @_guard
    def coverage(self, *, system: Any = None, config_id: str | None = None) -> list[Coverage]:
        """Per model and granularity: how many bricks are measured for (system, config)."""
        sys_key = None if system is None else _rows.fingerprint_of(system)
        return [Coverage(r["model"], r["name"], r["granularity"], sys_key, config_id,
                         int(r["unique_bricks"]), int(r["measured"]), int(r["failed"]),
                         int(r["occurrences"]), int(r["occurrences_measured"]))
                for r in _sql.coverage(self._db, sys_key, config_id)]

    @_guard
    def stats(self) -> DbStats:
        """Counts, systems, backends, and coverage per model for every measured (system, config)."""
        counts = _sql.counts(self._db, time.time())
        peaks = tuple(PeaksRecord.from_row(r) for r in _sql.select(self._db, "peaks", "system"))
        pairs = _sql.measured_pairs(self._db) or [(None, None)]
        coverage = tuple(c for s, cid in pairs for c in self.coverage(system=s, config_id=cid))
        return DbStats(self.path, self.schema_version, tuple(self.systems()), tuple(self.backends()),
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
