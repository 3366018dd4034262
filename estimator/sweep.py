"""One model estimated at several shapes (batch sizes, sequence lengths): a shape sweep."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlbricks import InvalidArgumentError, ModelGraph, load_model
from dlbricks.benchmarks_db import Store
from dlbricks.generators import Budget, OrtConfig
from dlbricks.model_zoo import build, list_models

from .api import Validation, _decompose, _system_key, estimate, open_store, validate
from .estimation import Estimate, Peaks

__all__ = ["SweepShape", "SweepPoint", "estimate_sweep", "validate_sweep"]


@dataclass(frozen=True, slots=True)
class SweepShape:
    """One point of a sweep: the batch size and the input shapes a model is loaded with.

    ``input_shapes`` holds ``(input name, shape)`` pairs; :meth:`of` builds one from a batch size
    (an int) or a mapping of input names to shapes.
    """

    batch_size: int | None = None
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @classmethod
    def of(cls, point: SweepShape | int | Mapping[str, Sequence[int]]) -> SweepShape:
        """``point`` as a SweepShape: an int is a batch size, a mapping gives input shapes."""
        if isinstance(point, SweepShape):
            return point
        if isinstance(point, int) and not isinstance(point, bool):
            return cls(batch_size=point)
        if isinstance(point, Mapping):
            return cls(input_shapes=tuple((str(k), tuple(int(d) for d in v)) for k, v in point.items()))
        raise InvalidArgumentError(f"A sweep point must be a batch size (int), a mapping of input names to "
                                   f"shapes, or a SweepShape. Got {point!r} instead.")

    @property
    def label(self) -> str:
        """The point as a short text: ``batch 2``, ``input_ids=1,128``."""
        parts = [] if self.batch_size is None else [f"batch {self.batch_size}"]
        parts += [f"{name}={','.join(map(str, dims))}" for name, dims in self.input_shapes]
        return ", ".join(parts) or "as exported"

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form."""
        return {"batch_size": self.batch_size, "input_shapes": {n: list(d) for n, d in self.input_shapes}}


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """A model's estimate at one shape of a sweep.

    ``shared_bricks`` counts the point's unique bricks that an earlier point of the sweep also has
    (measured once, for both); ``measured_bricks`` the bricks this point measured (none unless
    missing bricks are measured). ``validation`` is set by :func:`validate_sweep`.
    """

    shape: SweepShape
    estimate: Estimate
    shared_bricks: int
    measured_bricks: int
    validation: Validation | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form."""
        out: dict[str, object] = {"shape": self.shape.label, **self.shape.to_dict(),
                                  "shared_bricks": self.shared_bricks, "measured_bricks": self.measured_bricks,
                                  "estimate": self.estimate.to_dict()}
        if self.validation is not None:
            out["measured_s"] = self.validation.measured.median_s
            out["error"] = self.validation.error
        return out


def estimate_sweep(model: Any, db: Store | str | os.PathLike[str],
                   shapes: Sequence[SweepShape | int | Mapping[str, Sequence[int]]], *, system: Any = None,
                   config: OrtConfig | None = None, granularity: str = "layer", on_missing: str = "error",
                   budget: Budget | None = None, peaks: Peaks | None = None) -> tuple[SweepPoint, ...]:
    """Estimate one model at several shapes, as :func:`estimate` does at each.

    The model is loaded and decomposed at each shape; a brick that several shapes share (same
    signature) is measured once, by the first point that lacks it.

    Parameters
    ----------
    model : path, ModelProto, ModelGraph or name
        A model file, a model in memory (loaded again at each shape), the name of a zoo model, or of
        a model stored in the database from a file.
    db : Store or path
        The brick database.
    shapes : sequence of int, mapping or SweepShape
        The points, in order: a batch size (``[1, 2, 4, 8]``) or input shapes
        (``[{"input_ids": (1, 64)}, {"input_ids": (1, 128)}]``) each.
    system, config, granularity, on_missing, budget, peaks
        As for :func:`estimate`.

    Returns
    -------
    tuple of SweepPoint
        One per shape, in the order given.

    Raises
    ------
    InvalidArgumentError
        If no shape is given, or one repeats.
    """
    return _sweep(model, db, shapes, system, config, granularity, on_missing, budget, peaks, whole=False)


def validate_sweep(model: Any, db: Store | str | os.PathLike[str],
                   shapes: Sequence[SweepShape | int | Mapping[str, Sequence[int]]], *, system: Any = None,
                   config: OrtConfig | None = None, granularity: str = "layer",
                   budget: Budget | None = None) -> tuple[SweepPoint, ...]:
    """:func:`validate` at each shape of a sweep (see :func:`estimate_sweep`): each point is measured
    whole, its missing bricks measured, and ``validation`` set."""
    return _sweep(model, db, shapes, system, config, granularity, "measure", budget, None, whole=True)


def _sweep(model: Any, db: Store | str | os.PathLike[str], shapes: Sequence[Any], system: Any,
           config: OrtConfig | None, granularity: str, on_missing: str, budget: Budget | None,
           peaks: Peaks | None, *, whole: bool) -> tuple[SweepPoint, ...]:
    points = [SweepShape.of(s) for s in shapes]
    if not points:
        raise InvalidArgumentError("A sweep needs at least one shape; got none.")
    repeated = next((p for i, p in enumerate(points) if p in points[:i]), None)
    if repeated is not None:
        raise InvalidArgumentError(f"The sweep has the shape '{repeated.label}' twice; give each shape once.")
    store = open_store(db)
    system = _system_key(system)
    cfg = config or OrtConfig()
    seen: set[str] = set()
    out = []
    graphs = [_load_at(model, store, point) for point in points]  # every shape checked before any is measured
    for point, graph in zip(points, graphs, strict=True):
        dec = _decompose(graph, granularity, cfg)
        lacking = _lacking(store, dec.bricks, system, cfg.config_id)
        validation = None
        if whole:
            validation = validate(graph, store, system=system, config=cfg, granularity=granularity,
                                  budget=budget)
            est = validation.estimate
        else:
            est = estimate(graph if lacking else dec, store, system=system, config=cfg, granularity=granularity,
                           on_missing=on_missing, budget=budget, peaks=peaks)
        measured = len(lacking) - len(_lacking(store, lacking, system, cfg.config_id))
        out.append(SweepPoint(point, est, len(seen & set(dec.bricks)), measured, validation))
        seen.update(dec.bricks)
    return tuple(out)


def _lacking(store: Store, signatures: Iterable[str], system: Any, config_id: str) -> list[str]:
    """Those of ``signatures`` without a successful measurement in ``store``."""
    out = []
    for sig in signatures:
        m = store.measurements.get(sig, system, config_id)
        if m is None or not m.ok:
            out.append(sig)
    return out


def _load_at(model: Any, store: Store, shape: SweepShape) -> ModelGraph:
    """``model`` loaded at ``shape``."""
    shapes = dict(shape.input_shapes) or None
    if isinstance(model, ModelGraph):
        return load_model(model.proto, shapes, shape.batch_size, name=model.name)
    if isinstance(model, str) and not os.path.exists(model) and not model.endswith((".onnx", ".json")):
        if model in {m.name for m in list_models()}:
            return load_model(build(model, batch_size=shape.batch_size or 1), shapes, name=model)
        source = store.models.get(model).source
        if source is None or source.path is None or not os.path.exists(source.path):
            raise InvalidArgumentError(f"model '{model}' is not a zoo model and was not stored from a file that "
                                       "is there: pass the model file to sweep its shapes.")
        return load_model(source.path, shapes, shape.batch_size, name=model)
    return load_model(model, shapes, shape.batch_size)
