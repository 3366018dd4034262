"""``store.systems``: the machines and backend configurations measurements are taken on, and what is
calibrated for them (tables ``systems``, ``backends``, ``peaks``, ``reorder_prices``,
``brick_overheads``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from dlbricks import InvalidArgumentError
from dlbricks.errors import DatabaseError
from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import sql as _sql

from ._part import Part, guard
from .records import BackendRecord, PeaksRecord, SystemRecord

__all__ = ["Systems"]


class Systems(Part):
    """The systems and backend configurations of a :class:`~dlbricks.benchmarks_db.Store`, reached
    as ``store.systems``, with their calibrations: peaks, reorder prices and brick overheads.

    A system is given as its fingerprint, a :class:`SystemRecord` or a
    ``dlbricks.generators.SystemInfo`` (stored first where a write needs it).

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.systems.all(), store.systems.peaks("no-such-machine")
    ([], None)
    """

    name = "systems"

    @guard
    def record(self, info: Any, *, fingerprint: str | None = None) -> SystemRecord:
        """Store a machine (a ``dlbricks.generators.SystemInfo``) once; return its record.

        ``fingerprint`` overrides the machine's own (tests, or labelling a machine); the details
        then keep the real one as ``machine_fingerprint``.
        """
        row = _rows.system_row(info, fingerprint, _rows.now())
        key = row["fingerprint"]
        _sql.write(self._db, lambda: _sql.insert_ignore(self._db, "systems", [row]))
        self.store._known_systems.add(key)
        return SystemRecord.from_row(self._db["systems"].get(key))

    @guard
    def all(self) -> list[SystemRecord]:
        """Every system, by fingerprint."""
        return [SystemRecord.from_row(r) for r in _sql.select(self._db, "systems", "fingerprint")]

    @guard
    def record_backend(self, config: Any, runtime: str = "onnxruntime", *,
                       version: str | None = None) -> BackendRecord:
        """Store a backend configuration (``config_id`` and ``to_dict()``) once; return its record.

        ``version`` defaults to the config's ``<runtime>_version`` or ``version`` field.
        """
        row = _rows.backend_row(config, runtime, version, _rows.now())
        _sql.write(self._db, lambda: _sql.insert_ignore(self._db, "backends", [row]))
        self.store._known_backends.add(row["config_id"])
        return BackendRecord.from_row(self._db["backends"].get(row["config_id"]))

    @guard
    def backends(self) -> list[BackendRecord]:
        """Every backend configuration, by config id."""
        return [BackendRecord.from_row(r) for r in _sql.select(self._db, "backends", "config_id")]

    @guard
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
                                f"system (systems.record) first.") from e
        return PeaksRecord.from_row(row)

    @guard
    def peaks(self, system: Any) -> PeaksRecord | None:
        """The peaks last recorded for a system, or None."""
        row = _sql.get_peaks(self._db, _rows.fingerprint_of(system))
        return None if row is None else PeaksRecord.from_row(row)

    @guard
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
                                f"system and the configuration (systems.record_backend) first.") from e

    @guard
    def reorder_price(self, system: Any, config_id: str) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
        """The stored reorder price of a system and configuration as (sizes, seconds per byte), or None."""
        row = _sql.get_reorder_price(self._db, _rows.fingerprint_of(system), config_id)
        if row is None:
            return None
        return tuple(json.loads(row["sizes"])), tuple(json.loads(row["seconds_per_byte"]))

    @guard
    def overheads(self, system: Any, config_id: str, signatures: Sequence[str]) -> dict[str, float]:
        """The stored overheads (``store.measurements.record(..., overhead_s=)``) of those bricks that
        have one."""
        return _sql.overheads(self._db, _rows.fingerprint_of(system), config_id, list(signatures))
