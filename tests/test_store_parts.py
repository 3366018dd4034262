"""The Store's parts: one per kind of thing it stores, each small, all on the store's connection."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import dlbricks.benchmarks_db as bdb
from dlbricks.errors import DatabaseError
from dlbricks.benchmarks_db import Store
from dlbricks.benchmarks_db.store import Bricks, Claims, Measurements, Models, Systems
from tests.test_db_support import decompositions, measurement, system_info

#: The most public methods a part may have; a part that needs more is two kinds of thing.
MOST_METHODS = 12
#: Each part's public methods: a new one is a choice, made here.
PARTS = {
    "bricks": (Bricks, {"add", "get", "records"}),
    "models": (Models, {"add", "get", "all", "has", "stored_name", "bricks", "occurrences", "dag",
                        "decomposition"}),
    "systems": (Systems, {"record", "all", "record_backend", "backends", "record_peaks", "peaks",
                          "record_reorder_price", "reorder_price", "overheads"}),
    "measurements": (Measurements, {"record", "record_many", "record_model", "get", "bricks", "models",
                                    "in_context", "unmeasured", "op_summary", "coverage"}),
    "claims": (Claims, {"take", "release", "release_all", "all"}),
}
#: What the store itself does: open and close the file, and the operations on the whole file.
STORE = {"open", "close", "stats", "integrity_check", "preflight", "check", "require_mergeable", "upgrade",
         "merge_from", "export"}


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, classmethod))}


def test_the_parts_are_pinned() -> None:
    with Store(":memory:") as store:
        for name, (cls, methods) in PARTS.items():
            part = getattr(store, name)
            assert type(part) is cls and part.name == name and part.store is store, name
            assert public_methods(cls) == methods, name
            assert len(methods) <= MOST_METHODS, name
            assert repr(part) == f"Store(':memory:').{name}"
    assert public_methods(Store) == STORE


def test_the_parts_share_the_stores_connection_and_transactions() -> None:
    dec = decompositions()[0]
    sig = next(iter(dec.bricks))
    with Store(":memory:") as store:
        store.models.add(dec)
        with pytest.raises(RuntimeError), store.db.conn:  # one transaction across two parts, rolled back
            store.db.conn.execute("BEGIN IMMEDIATE")
            store.systems.record(system_info())
            store.measurements.record(measurement(sig), system_info())
            raise RuntimeError
        assert store.systems.all() == [] and store.measurements.bricks() == []


def test_an_sqlite_error_names_the_part_and_the_operation() -> None:
    store = Store(":memory:")
    store.close()
    with pytest.raises(DatabaseError, match=r"^:memory:: measurements\.bricks failed: "):
        store.measurements.bricks()
    with pytest.raises(DatabaseError, match=r"^:memory:: stats failed: "):
        store.stats()


def test_the_store_modules_stay_small() -> None:
    folder = Path(inspect.getfile(bdb)).parent
    for module in ("store", "_part", *(f"_{name}" for name in PARTS)):
        lines = (folder / f"{module}.py").read_text().count("\n")
        assert lines < 600, module


@pytest.mark.parametrize("module", ["store", *(f"_{name}" for name in PARTS)])
def test_the_examples_run(module: str) -> None:
    import doctest
    import importlib

    failures, attempted = doctest.testmod(importlib.import_module(f"dlbricks.benchmarks_db.{module}"))
    assert attempted and not failures
