"""What the :class:`~dlbricks.benchmarks_db.Store` and its parts share: :class:`Part`, the base of
``store.bricks``, ``store.models``, ``store.systems``, ``store.measurements`` and ``store.claims``,
and :func:`guard`, which turns sqlite3 errors into :class:`DatabaseError`.

A part holds no connection and no state of its own: it reads and writes through its store's
connection, in the store's transactions (:func:`._sql.write`).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import sqlite_utils

from dlbricks.errors import DatabaseError
from dlbricks.tempdir import sqlite_temp_error, sqlite_temp_is_culprit
from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import sql as _sql

if TYPE_CHECKING:
    from .store import Store

__all__ = ["Part", "guard"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def guard(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Turn sqlite3 errors into :class:`DatabaseError` naming the file and the operation, or into
    :class:`TempDirError` naming the temporary folder where a write that found no room more likely
    failed there (SQLite's sorts and statement journals, :func:`sqlite_temp_is_culprit`).

    The operation is the method's name, prefixed with its part's (``measurements.record``) on a part.
    """

    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            store: Store = getattr(self, "store", self)
            name = method.__name__.lstrip("_")
            op = f"{self.name}.{name}" if isinstance(self, Part) else name
            if _sql.is_damage(e):
                raise _sql.damaged(store.path, f"{e}, in {op}") from e
            if _sql.is_full(e):
                temp = (sqlite_temp_is_culprit(store.path, store.readonly or store.path == ":memory:")
                        if _sql.is_failed_write(e) else None)
                if temp is not None:
                    raise sqlite_temp_error(store.path, temp, f"{e}, in {op}") from e
                raise DatabaseError(f"{store.path}: cannot write ({e}, in {op}): the "
                                    f"disk may be full; free space and run the same command again (what "
                                    f"was committed before is kept).") from e
            raise DatabaseError(f"{store.path}: {op} failed: {e}.") from e

    return wrapper


class Part:
    """One kind of thing a :class:`~dlbricks.benchmarks_db.Store` holds, reached as an attribute of
    the store (``store.measurements``); it shares the store's connection and transactions."""

    #: The store's attribute for this part; errors name an operation ``<name>.<method>``.
    name = ""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def path(self) -> str:
        """The store's file."""
        return self.store.path

    @property
    def _db(self) -> sqlite_utils.Database:
        return self.store.db

    def _system_key(self, system: Any) -> str:
        """The fingerprint of ``system``, a SystemInfo stored first if this store has not stored it."""
        key = _rows.fingerprint_of(system)
        if not isinstance(system, str) and hasattr(system, "to_dict") and key not in self.store._known_systems:
            self.store.systems.record(system)
        return key

    def __repr__(self) -> str:
        return f"{self.store!r}.{self.name}"
