"""What a worker keeps prepared between measurements, so that it does not build it twice.

Measuring a brick costs more outside its timed runs than inside them: its sessions, the session
copies that give it a cold cache, their first runs, the brick before it. Two requests meet
something already built:

- the same item again (a further measurement of a brick that the allocation asks for, a brick
  measured at another moment): the worker times the prepared item it kept, as ``again`` does for a
  held one;
- the brick before a brick: the brick measured just before in the same model is usually the one
  that runs before it, and the brick's untimed prime borrows that brick's first session instead of
  preparing its own.

:class:`PreparedCache` keeps prepared items up to a byte budget (what each one's buffers and weights
hold, ``Prepared.nbytes``). When it is full it closes the item whose timed run is shortest first:
the bricks measured again are the ones that weigh in their model, and those are the long ones. An
item lent as the brick before another one is closed only once that one lets it go.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_CACHE_BYTES", "PreparedCache", "borrow_previous", "digest", "lending"]

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
    signature: str | None
    config_id: str
    nbytes: int
    value_s: float
    lent: int = 0
    evicted: bool = False

    def close_if_free(self) -> None:
        if self.evicted and self.lent == 0:
            self.prepared.close()


@dataclass(slots=True)
class _Borrowed:
    """The run of a kept item's first copy, as the untimed brick before another brick."""

    entry: _Entry
    closed: bool = field(default=False)

    def run(self) -> None:
        self.entry.prepared.run_warm()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.entry.lent -= 1
            self.entry.close_if_free()


class PreparedCache:
    """Prepared items kept for reuse, at most ``max_bytes`` of them (0 keeps none)."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[str, _Entry] = {}
        self._last: str | None = None
        self.hits = 0
        self.lends = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the kept items."""
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, key: str) -> Any | None:
        """The prepared item kept under ``key``, or None; it stays kept."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self.hits += 1
        return entry.prepared

    def keep(self, key: str, prepared: Any, *, signature: str | None, config_id: str, value_s: float) -> None:
        """Keep ``prepared`` under ``key`` (closing it instead if it cannot be kept); ``value_s``
        (its timed run) decides what goes first when the cache is full."""
        nbytes = int(getattr(prepared, "nbytes", -1))
        old = self._entries.get(key)
        if old is not None and old.prepared is prepared:
            old.value_s = value_s
            self._last = key
            return
        if nbytes < 0 or nbytes > self.max_bytes or not callable(getattr(prepared, "run_warm", None)):
            prepared.close()
            return
        if old is not None:
            self._evict(key)
        self._entries[key] = _Entry(prepared, signature, config_id, nbytes, value_s)
        self._last = key
        self._shrink()

    def borrow(self, signature: str, config_id: str) -> _Borrowed | None:
        """The first copy of a kept brick with ``signature`` under ``config_id``, lent until the
        borrower's ``close()``; None if none is kept."""
        for entry in self._entries.values():
            if entry.signature == signature and entry.config_id == config_id:
                entry.lent += 1
                self.lends += 1
                return _Borrowed(entry)
        return None

    def drop(self, key: str) -> None:
        """Close the item kept under ``key`` (nothing if none is)."""
        if key in self._entries:
            self._evict(key)

    def clear(self) -> None:
        """Close every kept item (lent ones when their borrowers let them go)."""
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
        entry = self._entries.pop(key)
        entry.evicted = True
        entry.close_if_free()


_LENDER: contextvars.ContextVar[Callable[[str, str], _Borrowed | None] | None] = contextvars.ContextVar(
    "dlbricks_prepared_lender", default=None)


@contextlib.contextmanager
def lending(cache: PreparedCache) -> Iterator[None]:
    """While inside, :func:`borrow_previous` lends from ``cache`` (the worker wraps ``prepare``)."""
    token = _LENDER.set(cache.borrow)
    try:
        yield
    finally:
        _LENDER.reset(token)


def borrow_previous(signature: str | None, config_id: str) -> _Borrowed | None:
    """A kept brick to run as the brick before another one, where the worker lends one; else None."""
    lender = _LENDER.get()
    if lender is None or signature is None:
        return None
    return lender(signature, config_id)
