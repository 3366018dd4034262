"""Benanza's comparison across runtimes: a model's lower bound with each brick at its fastest runtime.

Each runtime (one backend configuration each, all on one system and at one thread count) gives the
model's own estimate and lower bound from its own measurements (:func:`~dlbricks.estimator.estimate`
with the alternatives of that runtime alone). Per brick, the quantity the lower bound composes (its
fastest measured run, floor-corrected, less what its model does not run, at least its roofline) is
set side by side across runtimes: the fastest runtime of each brick and by how much it wins, the
same summed by op type, and the lower bound across runtimes, every brick at its fastest runtime
plus the smallest per-run floor, composed sequentially and along the critical path. It is at most
every runtime's own lower bound, and so at most every runtime's measured whole model wherever
those bounds hold.

Bricks are compared at layer granularity, where every runtime runs the same bricks (fused bricks
are each runtime's own kernels, which other runtimes do not run).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dlbricks import Decomposition, InvalidArgumentError, MissingBricksError
from dlbricks.benchmarks_db import Store

from ._compose import critical_path, sequential
from .api import _decomposition, _estimate_decomposition, _system_key, backend_name, open_store, threads_of

__all__ = ["BrickComparison", "OpComparison", "RuntimeBound", "RuntimeComparison", "compare_bricks",
           "compare_ops", "compare_runtimes"]


@dataclass(frozen=True, slots=True)
class RuntimeBound:
    """One runtime's side of a model (seconds per run): its estimate and lower bounds from its own
    measurements, and its latest whole-model run stored for the system (None where none was)."""

    runtime: str
    config_id: str
    estimate_s: float
    lower_bound_s: float
    lower_bound_parallel_s: float
    floor_s: float
    measured_s: float | None


@dataclass(frozen=True, slots=True)
class BrickComparison:
    """One brick in every runtime: ``fastest_s`` holds, in the order of the runtimes, the time its
    runtime's lower bound takes for one occurrence (floor-corrected, seconds); ``count`` its
    occurrences per run (of a model, or summed over a suite)."""

    signature: str
    op_type: str
    count: int
    fastest_s: tuple[float, ...]

    @property
    def best(self) -> int:
        """The index of the fastest runtime (the first of equals)."""
        return _lead(self.fastest_s)[0]

    @property
    def runner_up_s(self) -> float:
        """The time of the fastest of the other runtimes (one occurrence)."""
        return _lead(self.fastest_s)[1]

    @property
    def ratio(self) -> float:
        """How many times faster the fastest runtime is than the next (inf where it takes no time)."""
        return _lead(self.fastest_s)[2]

    @property
    def difference_s(self) -> float:
        """Seconds per run that the fastest runtime saves on this brick's occurrences against the next."""
        return self.count * (self.runner_up_s - self.fastest_s[self.best])


@dataclass(frozen=True, slots=True)
class OpComparison:
    """An op type in every runtime: ``total_s`` the seconds per run its bricks' occurrences take in each
    runtime's lower bound, ``wins`` on how many of its bricks each runtime is the fastest."""

    op_type: str
    bricks: int
    occurrences: int
    total_s: tuple[float, ...]
    wins: tuple[int, ...]

    @property
    def best(self) -> int:
        """The index of the runtime with the smallest total (the first of equals)."""
        return _lead(self.total_s)[0]

    @property
    def ratio(self) -> float:
        """The next runtime's total over the fastest one's (inf where the fastest takes no time)."""
        return _lead(self.total_s)[2]


def _lead(times: Sequence[float]) -> tuple[int, float, float]:
    """Of one time per runtime: the index of the fastest (the first of equals), the next fastest's
    time, and how many times the fastest's that is (inf where the fastest takes no time, 1 where
    neither does)."""
    best = int(np.argmin(times))
    other = min(t for i, t in enumerate(times) if i != best)
    first = times[best]
    return best, other, other / first if first > 0 else (1.0 if other == 0 else float("inf"))


@dataclass(frozen=True, slots=True)
class RuntimeComparison:
    """A model compared across runtimes (seconds per run).

    ``lower_bound_s`` and ``lower_bound_parallel_s`` are the lower bound across runtimes: each brick
    at its fastest runtime, plus ``floor_s``, the smallest of the runtimes' per-run floors, composed
    sequentially and along the critical path of the brick DAG. ``bricks`` are sorted by what the
    fastest runtime saves on them (largest first), ``ops`` by their fastest total (largest first).
    """

    model: str
    layers: int
    unique_bricks: int
    runtimes: tuple[RuntimeBound, ...]
    lower_bound_s: float
    lower_bound_parallel_s: float
    floor_s: float
    bricks: tuple[BrickComparison, ...]
    ops: tuple[OpComparison, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The runtimes' names, in the order of every tuple of times."""
        return tuple(r.runtime for r in self.runtimes)

    @property
    def bound_holds(self) -> bool | None:
        """Whether the lower bound across runtimes is at most every measured whole model (None where
        no runtime has a measured one)."""
        measured = [r.measured_s for r in self.runtimes if r.measured_s is not None]
        return None if not measured else self.lower_bound_s <= min(measured)

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form, each brick and op type with its fastest runtime and ratio."""
        out = asdict(self)
        names = self.names
        for row, brick in zip(out["bricks"], self.bricks, strict=True):  # type: ignore[arg-type]
            row.update(fastest=names[brick.best], ratio=brick.ratio, difference_s=brick.difference_s)
        for row, op in zip(out["ops"], self.ops, strict=True):  # type: ignore[arg-type]
            row.update(fastest=names[op.best], ratio=op.ratio)
        out["runtime_names"] = list(names)
        return out


def compare_runtimes(model: Any, db: Store | str | os.PathLike[str], configs: Sequence[Any], *,
                     system: Any = None) -> RuntimeComparison:
    """Compare a model's bricks across runtimes, and bound the model with each brick at its fastest.

    Parameters
    ----------
    model : path, ModelProto, ModelGraph, Decomposition or name
        A model, or the name of a model stored in the db (or of a zoo model); compared at layer
        granularity.
    db : Store or path
        The brick database, holding the model's bricks measured under every configuration.
    configs : sequence of backend configurations
        One per runtime (at least two, of different runtimes, at the same thread count), e.g.
        ``[OrtConfig(), get_backend("openvino").default_config()]``.
    system : SystemInfo or fingerprint, optional
        Whose measurements to use; default: this machine.

    Raises
    ------
    InvalidArgumentError
        For fewer than two configurations, two of one runtime, or different thread counts.
    MissingBricksError
        Where a runtime lacks measurements of some of the model's bricks (the message names it).
    """
    _check_configs(configs)
    store = open_store(db)
    system = _system_key(system)
    dec = _decomposition(model, store, "layer", configs[0])
    sides, per_brick = [], []
    for cfg in configs:
        try:
            est = _estimate_decomposition(dec, store, system, cfg, "error", None, None, True, same_runtime=True)
        except MissingBricksError as e:
            name = backend_name(cfg)
            raise MissingBricksError(
                f"{e.missing} of {len(dec.bricks)} bricks of '{dec.model}' have no measurement in {name} (configuration "
                f"{cfg.config_id[:12]}); benchmark them with 'dlbricks bench {dec.model} --backend "
                f"{name}'.", e.missing) from e
        sides.append(RuntimeBound(backend_name(cfg), cfg.config_id, est.sequential_s, est.lower_bound_s,
                                  est.lower_bound_parallel_s, est.floor_s, _measured(store, dec, system, cfg)))
        per_brick.append({c.signature: c.lower_bound_s if c.lower_bound_s is not None else c.latency_s
                          for c in est.breakdown})
    counts = dec.counts()
    bricks = [BrickComparison(sig, b.op_type, counts[sig], tuple(times[sig] for times in per_brick))
              for sig, b in dec.bricks.items()]
    floor = min(s.floor_s for s in sides)
    node = {o.index: min(times[o.signature] for times in per_brick) + floor for o in dec.occurrences}
    return RuntimeComparison(
        model=dec.model, layers=dec.layers, unique_bricks=len(dec.bricks), runtimes=tuple(sides),
        lower_bound_s=sequential(dec.dag, node, floor), lower_bound_parallel_s=critical_path(dec.dag, node, floor),
        floor_s=floor, bricks=compare_bricks([bricks]), ops=compare_ops(bricks))


def compare_bricks(models: Iterable[Iterable[BrickComparison]]) -> tuple[BrickComparison, ...]:
    """The bricks of several models (each a comparison's ``bricks``, in one order of runtimes), a
    brick shared by models once: its occurrences summed, its time in each runtime their mean (each
    model's measurement of it, in its own context, weighted by its occurrences); largest difference
    first."""
    merged: dict[str, BrickComparison] = {}
    for bricks in models:
        for brick in bricks:
            seen = merged.get(brick.signature)
            merged[brick.signature] = brick if seen is None else _pooled(seen, brick)
    return tuple(sorted(merged.values(), key=lambda b: (-b.difference_s, b.signature)))


def _pooled(one: BrickComparison, other: BrickComparison) -> BrickComparison:
    """A brick of two models as one: occurrences summed, times their occurrence-weighted mean."""
    count = one.count + other.count
    return BrickComparison(one.signature, one.op_type, count, tuple(
        (one.count * a + other.count * b) / count for a, b in zip(one.fastest_s, other.fastest_s, strict=True)))


def compare_ops(bricks: Iterable[BrickComparison]) -> tuple[OpComparison, ...]:
    """``bricks`` summed by op type: each runtime's seconds per run and bricks won, the largest total
    of the fastest runtime first."""
    groups: dict[str, list[BrickComparison]] = {}
    for b in bricks:
        groups.setdefault(b.op_type, []).append(b)
    ops = []
    for op, group in groups.items():
        n = len(group[0].fastest_s)
        ops.append(OpComparison(op, len(group), sum(b.count for b in group),
                                tuple(sum(b.count * b.fastest_s[i] for b in group) for i in range(n)),
                                tuple(sum(b.best == i for b in group) for i in range(n))))
    return tuple(sorted(ops, key=lambda o: (-o.total_s[o.best], o.op_type)))


def _check_configs(configs: Sequence[Any]) -> None:
    names = [backend_name(c) for c in configs]
    if len(configs) < 2:
        raise InvalidArgumentError(f"comparing runtimes takes configurations of at least two runtimes. Got "
                                   f"{len(configs)} ({', '.join(names) or 'none'}) instead.")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"comparing runtimes takes one configuration per runtime. Got several of "
                                   f"{', '.join(twice)} instead.")
    threads = sorted({threads_of(c) for c in configs})
    if len(threads) > 1:
        raise InvalidArgumentError(f"comparing runtimes takes configurations at one thread count (a lower bound "
                                   f"holds for its own). Got {threads} instead.")


def _measured(store: Store, dec: Decomposition, system: Any, config: Any) -> float | None:
    """The median of the latest ok whole-model run of ``dec``'s model under ``config`` on ``system``."""
    runs = [r for r in store.measurements.models(system=system, config_id=config.config_id, status="ok")
            if r.key == dec.model_key and r.median_s]
    return float(max(runs, key=lambda r: r.id).median_s) if runs else None
