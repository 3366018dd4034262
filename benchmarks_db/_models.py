"""``store.models``: the stored models with their brick occurrences and brick DAGs (tables ``models``,
``model_bricks``, ``model_edges``, ``model_reorders``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import networkx as nx

from dlbricks import Decomposition, InvalidArgumentError
from dlbricks.decomposition import Occurrence
from dlbricks.graph import ModelSource
from dlbricks.names import check_identifier
from dlbricks.benchmarks_db import _rows
from dlbricks.benchmarks_db import sql as _sql

from ._part import Part, guard
from .records import BrickRecord, ModelRecord

__all__ = ["Models"]


class Models(Part):
    """The models of a :class:`~dlbricks.benchmarks_db.Store`, reached as ``store.models``.

    A model is stored at one or more granularities, each with its bricks, their occurrences in
    order and the brick DAG. Methods that read a model take its name, its key or a key prefix (6+
    characters) and, where it has several, a granularity (default ``"layer"`` where it is stored).

    Examples
    --------
    >>> from dlbricks.benchmarks_db import Store
    >>> with Store(":memory:") as store:
    ...     store.models.all()
    []
    """

    name = "models"

    @guard
    def add(self, decomposition: Decomposition, source: ModelSource | None = None) -> int:
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

    @guard
    def stored_name(self, key: str) -> str | None:
        """The name of the model stored under ``key`` (None where none is)."""
        row = next(iter(self._db["models"].rows_where("key = ?", [key], select="name")), None)
        return None if row is None else str(row["name"])

    @guard
    def all(self) -> list[ModelRecord]:
        """Every model, by name."""
        return [ModelRecord.from_row(r) for r in _sql.select(self._db, "models", "name, key")]

    @guard
    def has(self, key: str) -> bool:
        """Whether a model with exactly this key is stored."""
        return self._db["models"].count_where("key = ?", [key]) > 0

    @guard
    def get(self, name_or_key: str) -> ModelRecord:
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
            known = ", ".join(sorted({m.name for m in self.all()})[:10]) or "none"
            raise InvalidArgumentError(f"No model {_rows.shown(name_or_key)} in {self.path}; models: {known}.")
        if len(rows) > 1:
            choices = "; ".join(f"{r['key'][:12]} ({r['name']}, inputs {r['inputs']})" for r in rows)
            raise InvalidArgumentError(f"{name_or_key!r} names {len(rows)} models in {self.path}; give "
                                       f"a key instead: {choices}.")
        return ModelRecord.from_row(rows[0])

    @guard
    def _granularity(self, model: str, granularity: str | None) -> tuple[str, str]:
        """The key of ``model`` and the granularity to read: the one given, else ``"layer"`` where it
        is stored, else the first stored."""
        key = self.get(model).key
        stored = _sql.model_granularities(self._db, key)
        if granularity is None:
            granularity = "layer" if "layer" in stored or not stored else stored[0]
        if granularity not in stored:
            raise InvalidArgumentError(f"Model {model!r} has no bricks at granularity {granularity!r} "
                                       f"in {self.path}; stored: {stored or 'none'}.")
        return key, granularity

    @guard
    def bricks(self, model: str, granularity: str | None = None) -> list[BrickRecord]:
        """The unique bricks of a model, in order of first use, with their occurrence counts."""
        key, granularity = self._granularity(model, granularity)
        return [BrickRecord.from_row(r) for r in _sql.bricks_of(self._db, key, granularity)]

    @guard
    def occurrences(self, model: str, granularity: str | None = None) -> tuple[Occurrence, ...]:
        """The occurrences of a model's bricks, in order."""
        key, granularity = self._granularity(model, granularity)
        return tuple(Occurrence(r["idx"], r["signature"], tuple(json.loads(r["nodes"])),
                                tuple(json.loads(r["inputs"])), tuple(json.loads(r["outputs"])),
                                tuple(json.loads(r["weights"] or "[]")))
                     for r in _sql.occurrences(self._db, key, granularity))

    @guard
    def dag(self, model: str, granularity: str | None = None) -> nx.DiGraph:
        """The brick DAG of a model: occurrence indices (attribute ``signature``) and edges."""
        key, granularity = self._granularity(model, granularity)
        dag = nx.DiGraph()
        dag.add_nodes_from((o.index, {"signature": o.signature}) for o in self.occurrences(key, granularity))
        dag.add_edges_from(_sql.edges(self._db, key, granularity))
        return dag

    @guard
    def decomposition(self, model: str, granularity: str | None = None) -> Decomposition:
        """Rebuild a stored model's :class:`~dlbricks.Decomposition` (bricks with synthetic weights)."""
        record = self.get(model)
        key, granularity = self._granularity(record.key, granularity)
        occurrences = self.occurrences(key, granularity)
        bricks = {sig: self.store.bricks.get(sig) for sig in dict.fromkeys(o.signature for o in occurrences)}
        return Decomposition(model=record.name, model_key=key, granularity=granularity,
                             inputs=record.inputs, bricks=bricks, occurrences=occurrences,
                             dag=self.dag(key, granularity),
                             reorder_bytes=_sql.model_reorders(self._db, key, granularity))
