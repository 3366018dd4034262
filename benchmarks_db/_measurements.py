"""``store.measurements``: the measurements of bricks, of whole models and of bricks in a model's
context (tables ``measurements``, ``model_measurements``, ``context_measurements``), and what they
cover."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from dlbricks import InvalidArgumentError
from dlbricks.errors import DatabaseError
from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import sql as _sql
from dlbricks.generators import Measurement

from ._part import Part, guard
from .records import QUEUE_FIELDS, STAT_FIELDS, Coverage, MeasurementRecord, OpSummary, RecordOutcome

__all__ = ["Measurements", "TABLES"]

#: How a measurement's item is named in each measurement table.
TABLES = {"brick": "measurements", "model": "model_measurements", "context": "context_measurements"}


class Measurements(Part):
    """The measurements of a :class:`~dlbricks.benchmarks_db.Store`, reached as ``store.measurements``.

    There is at most one row per (item, system, configuration): a brick's signature, a model's key,
    or a brick in one model's context. Each write is one transaction, committed before it returns.

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.measurements.bricks(status="ok")
    []
    """

    name = "measurements"

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
        context : dlbricks.BrickContext, optional
            The context the brick was measured in, stored with the row.
        model : str, optional
            A stored model (name or key) in whose context the brick was measured again: the row goes
            to ``context_measurements``, for that model only (see :meth:`get`).
        """
        if model is not None:
            return self._record("context", [measurement], system, budget, rule, release, None, context,
                                self.store.models.get(model).key)[0]
        return self._record("brick", [measurement], system, budget, rule, release, overhead_s, context)[0]

    def record_model(self, measurement: Measurement, system: Any, *, budget: Any = None,
                     rule: str = "best", release: str | None = None) -> RecordOutcome:
        """Store a whole-model measurement (``key`` is the model key); see :meth:`record`."""
        return self._record("model", [measurement], system, budget, rule, release)[0]

    def record_many(self, measurements: Iterable[Measurement], system: Any, *, budget: Any = None,
                    rule: str = "best") -> list[RecordOutcome]:
        """Store many brick measurements in one transaction (imports, merges of result files)."""
        return self._record("brick", list(measurements), system, budget, rule, None)

    @guard
    def _record(self, kind: str, items: Sequence[Measurement], system: Any, budget: Any, rule: str,
                release: str | None, overhead_s: float | None = None, context: Any = None,
                model: str | None = None) -> list[RecordOutcome]:
        if rule not in _sql.MERGE_RULES:
            raise InvalidArgumentError(f"'rule' must be one of {sorted(_sql.MERGE_RULES)}. Got {rule!r}.")
        table = TABLES[kind]
        item = _sql.MEASUREMENT_TABLES[table]
        key = self._system_key(system)
        known = self.store._known_backends
        backends = {m.config.config_id: _rows.backend_row(m.config, m.backend, None, _rows.now())
                    for m in items if m.config.config_id not in known}
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
                                f"{kind} (models.add) and the system (systems.record) first.") from e
        known.update(backends)
        return outcomes

    @guard
    def get(self, key: str, system: Any, config_id: str, *,
            kind: str = "brick", model: str | None = None) -> Measurement | None:
        """The stored measurement of a brick (or, ``kind="model"``, a model) as a
        ``dlbricks.generators.Measurement``, its configuration rebuilt; None if there is none.
        With ``model`` (a stored model's name or key), the brick's measurement in that model's
        context (``record(..., model=)``), None if it has none."""
        table = TABLES["context" if model is not None else kind]
        rows = _sql.measurements(self._db, table, items=[key], system=_rows.fingerprint_of(system),
                                 config_id=config_id,
                                 model=None if model is None else self.store.models.get(model).key)
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

    @guard
    def bricks(self, *, model: str | None = None, system: Any = None, config_id: str | None = None,
               signatures: Sequence[str] | None = None, status: str | None = None) -> list[MeasurementRecord]:
        """Brick measurements matching every filter given (a model: its bricks' measurements)."""
        rows = _sql.measurements(
            self._db, "measurements", items=signatures,
            system=None if system is None else _rows.fingerprint_of(system),
            model=None if model is None else self.store.models.get(model).key, config_id=config_id,
            status=status)
        return [MeasurementRecord.from_row(r, "brick") for r in rows]

    @guard
    def in_context(self, model: str, *, system: Any = None, config_id: str | None = None,
                   status: str | None = None) -> list[MeasurementRecord]:
        """The bricks of ``model`` (a name or key) measured again in its context
        (``record(..., model=)``), matching every filter given."""
        rows = _sql.measurements(
            self._db, "context_measurements", system=None if system is None else _rows.fingerprint_of(system),
            model=self.store.models.get(model).key, config_id=config_id, status=status)
        return [MeasurementRecord.from_row(r, "context") for r in rows]

    @guard
    def models(self, *, model: str | None = None, system: Any = None, config_id: str | None = None,
               status: str | None = None) -> list[MeasurementRecord]:
        """Whole-model measurements matching every filter given."""
        rows = _sql.measurements(
            self._db, "model_measurements", system=None if system is None else _rows.fingerprint_of(system),
            model=None if model is None else self.store.models.get(model).key, config_id=config_id,
            status=status)
        return [MeasurementRecord.from_row(r, "model") for r in rows]

    @guard
    def unmeasured(self, system: Any, config_id: str, signatures: Sequence[str] | None = None, *,
                   retry_failed: bool = False) -> list[str]:
        """Bricks (all, or among ``signatures``, in their order) without a measurement for this
        system and configuration; with ``retry_failed``, failed ones count as unmeasured too."""
        return _sql.unmeasured(self._db, _rows.fingerprint_of(system), config_id, signatures, retry_failed)

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

    @guard
    def op_summary(self, *, system: Any = None, config_id: str | None = None, model: str | None = None,
                   granularity: str | None = None) -> list[OpSummary]:
        """Per op type: bricks, occurrences, measured, total median time; slowest first.

        With ``model``, occurrences and time are the model's (each occurrence counted);
        ``system``/``config_id`` may be left out when the database has one such pair.
        """
        sys_key, cid = self._pair(system, config_id)
        key = None
        if model is not None:
            key, granularity = self.store.models._granularity(model, granularity)
        rows = _sql.op_summary(self._db, sys_key, cid, key, granularity or "layer")
        return [OpSummary(r["op_type"], int(r["bricks"]), int(r["occurrences"]), int(r["measured"]),
                          int(r["failed"]), float(r["total_median_s"]), int(r["total_flops"]))
                for r in rows]

    @guard
    def coverage(self, *, system: Any = None, config_id: str | None = None) -> list[Coverage]:
        """Per model and granularity: how many bricks are measured for (system, config)."""
        sys_key = None if system is None else _rows.fingerprint_of(system)
        return [Coverage(r["model"], r["name"], r["granularity"], sys_key, config_id,
                         int(r["unique_bricks"]), int(r["measured"]), int(r["failed"]),
                         int(r["occurrences"]), int(r["occurrences_measured"]))
                for r in _sql.coverage(self._db, sys_key, config_id)]
