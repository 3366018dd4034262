"""``store.bricks``: the stored bricks (table ``bricks``), each under its signature."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dlbricks import Brick, InvalidArgumentError
from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import sql as _sql

from ._part import Part, guard
from .records import BrickRecord

__all__ = ["Bricks"]


class Bricks(Part):
    """The bricks of a :class:`~dlbricks.benchmarks_db.Store`, reached as ``store.bricks``.

    A brick is immutable: its signature is its content. The bricks of a model are stored with the
    model (:meth:`Models.add`).

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.bricks.records()
    []
    """

    name = "bricks"

    @guard
    def add(self, bricks: Iterable[Brick]) -> int:
        """Store bricks not stored yet. Returns the number of bricks that were new."""
        unique = {b.signature: b for b in bricks}
        existing = _sql.existing_signatures(self._db, list(unique))
        now = _rows.now()
        rows = [_rows.brick_row(b, now) for s, b in unique.items() if s not in existing]
        _sql.write(self._db, lambda: _sql.insert_ignore(self._db, "bricks", rows))
        return len(rows)

    @guard
    def get(self, signature: str) -> Brick:
        """Rebuild a stored brick (with synthetic weights) from its ONNX bytes."""
        data = _sql.brick_onnx(self._db, signature)
        if data is None:
            raise InvalidArgumentError(f"No brick {signature[:16]!r} in {self.path}.")
        try:
            return Brick.from_bytes(data)
        except Exception as e:  # noqa: BLE001 - protobuf, onnx and json raise untyped errors on bad bytes
            raise _sql.damaged(self.path, f"brick {signature[:12]} does not decode: {type(e).__name__}: "
                                          f"{e}") from e

    @guard
    def records(self, signatures: Sequence[str] | None = None) -> list[BrickRecord]:
        """Records of all bricks, or of the given signatures (without their ONNX bytes)."""
        return [BrickRecord.from_row(r) for r in _sql.brick_rows(self._db, signatures)]
