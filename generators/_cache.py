"""What a worker keeps prepared between measurements, so that it does not build it twice.

Measuring a brick costs more outside its timed runs than inside them: its sessions, the session
copies that give it a cold cache, their first runs, the brick before it. A brick measured again (a
further measurement that the allocation asks for, a brick measured at another moment) meets all of
it already built: the worker times the prepared item it kept, as ``again`` does for a held one.

:class:`PreparedCache` keeps prepared items up to a byte budget (what each one's buffers and weights
hold, ``Prepared.nbytes``). When it is full it closes the item whose timed run is shortest first:
the bricks measured again are the ones that weigh in their model, and those are the long ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_CACHE_BYTES", "PreparedCache", "digest"]

#: Bytes of prepared items (weights, session copies, bound buffers) a worker keeps by default.
DEFAULT_CACHE_BYTES = 2 << 30


def digest(model_bytes: bytes, config_id: str) -> str:
    """What identifies a prepared item: its model's bytes (its context included) and configuration."""
    h = hashlib.blake2b(model_bytes, digest_size=20)
    h.update(config_id.encode())
    return h.hexdigest()


@dataclass(slots=True)
class _Entry:
    prepared: Any
    nbytes: int
    value_s: float


class PreparedCache:
    """Prepared items kept for reuse, at most ``max_bytes`` of them (0 keeps none)."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[str, _Entry] = {}
        self._last: str | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the kept items."""
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, key: str) -> Any | None:
        """The prepared item kept under ``key``, or None; it stays kept."""
        entry = self._entries.get(key)
        return None if entry is None else entry.prepared

    def keep(self, key: str, prepared: Any, *, value_s: float) -> None:
        """Keep ``prepared`` under ``key`` (closing it instead if it cannot be kept); ``value_s``
        (its timed run) decides what goes first when the cache is full."""
        nbytes = int(getattr(prepared, "nbytes", -1))
        old = self._entries.get(key)
        if old is not None and old.prepared is prepared:
            old.value_s = value_s
            self._last = key
            return
        if nbytes < 0 or nbytes > self.max_bytes:
            prepared.close()
            return
        if old is not None:
            self._evict(key)
        self._entries[key] = _Entry(prepared, nbytes, value_s)
        self._last = key
        self._shrink()

    def drop(self, key: str) -> None:
        """Close the item kept under ``key`` (nothing if none is)."""
        if key in self._entries:
            self._evict(key)

    def clear(self) -> None:
        """Close every kept item."""
        for key in list(self._entries):
            self._evict(key)

    def _shrink(self) -> None:
        """Close kept items, shortest timed run first and the newest last, until within budget."""
        total = self.nbytes
        for key in sorted(self._entries, key=lambda k: (k == self._last, self._entries[k].value_s)):
            if total <= self.max_bytes:
                return
            total -= self._entries[key].nbytes
            self._evict(key)

    def _evict(self, key: str) -> None:
        self._entries.pop(key).prepared.close()
