"""The main job: on this machine, for a suite of zoo models, decompose, benchmark the unique bricks,
estimate every model, measure every model whole, and report the paper's table.

Benchmarking time is compared under one stopping rule (the same :class:`Budget` for bricks and whole
models): the sum of the stored ``wall_time_s`` of the suite's unique bricks (session creation,
warm-up and timed runs) against the same sum over the whole models.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlbricks import BrickSet, decompose, load_model
from dlbricks.benchmarks_db import Store, populate
from dlbricks.estimator._api import estimate, open_store
from dlbricks.generators import Budget, OrtConfig, SystemInfo, benchmark, collect_system_info

__all__ = ["DEFAULT_SUITE", "EvaluationRow", "Evaluation", "evaluate", "suite_models", "EVALUATE_BUDGET"]

#: The default suite: one or two models per task, small enough to finish in minutes on 2 cores.
DEFAULT_SUITE = ("resnet18_v1", "resnet50_v1", "mobilenet_v2_1.0", "squeezenet1_1", "inception_v3",
                 "densenet121", "efficientnet_b0", "shufflenet_v2_x1_0")
#: Budget of the main job: a stopping rule that converges for bricks and whole models alike.
EVALUATE_BUDGET = Budget(warmup_time=0.02, min_time=0.1, min_runs=10, max_time=1.0, rel_ci=0.02)


def suite_models(suite: str) -> list[str]:
    """Model names of ``default`` or ``full`` (every zoo model), or a comma-separated list."""
    from dlbricks.model_zoo import list_models

    if suite == "default":
        known = {m.name for m in list_models()}
        return [n for n in DEFAULT_SUITE if n in known]
    if suite == "full":
        return [m.name for m in list_models()]
    return [n.strip() for n in suite.split(",") if n.strip()]


@dataclass(frozen=True, slots=True)
class EvaluationRow:
    """One model of the table (seconds)."""

    model: str
    layers: int
    unique_bricks: int
    measured_s: float
    estimated_s: float
    parallel_s: float
    lower_bound_s: float
    roofline_s: float | None
    ci_low_s: float
    ci_high_s: float

    @property
    def error(self) -> float:
        """estimated / measured - 1."""
        return self.estimated_s / self.measured_s - 1.0

    @property
    def bounds_hold(self) -> bool:
        """roofline <= lower bound <= measured."""
        return self.lower_bound_s <= self.measured_s and (
            self.roofline_s is None or self.roofline_s <= self.lower_bound_s)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The table and the suite's figures."""

    rows: tuple[EvaluationRow, ...]
    layers: int
    unique_bricks: int
    brick_time_s: float
    whole_time_s: float
    system: SystemInfo
    config: OrtConfig
    elapsed_s: float

    @property
    def speedup(self) -> float:
        """Time benchmarking whole models / time benchmarking the unique bricks."""
        return self.whole_time_s / self.brick_time_s if self.brick_time_s else math.inf

    @property
    def mean_abs_error(self) -> float:
        return sum(abs(r.error) for r in self.rows) / len(self.rows) if self.rows else 0.0

    @property
    def max_abs_error(self) -> float:
        return max((abs(r.error) for r in self.rows), default=0.0)


def evaluate(models: Sequence[str], db: Store | str | os.PathLike[str], *, config: OrtConfig | None = None,
             budget: Budget | None = None, say: Callable[[str], object] = lambda s: None) -> Evaluation:
    """Run the main job over zoo models (names) and return the table."""
    from dlbricks.model_zoo import build

    start = time.perf_counter()
    store = open_store(db)
    system = collect_system_info()
    budget = budget or EVALUATE_BUDGET
    config = config or OrtConfig()
    bricks_cfg = whole_cfg = config
    brickset = BrickSet()
    for name in models:
        graph = load_model(build(name), name=name)
        dec = decompose(graph)
        store.add_decomposition(dec, graph.source)
        brickset.add(dec)
    summary = brickset.summary()
    say(f"{summary.models} models, {summary.layers} layers, {summary.unique_bricks} unique bricks")
    populate(store, list(brickset.models.values()), [bricks_cfg], budget=budget, system=system,
             store_models=False, progress=lambda p: say(_progress_line(p)))
    brick_time = sum(r.wall_time_s or 0.0 for r in store.measurements(
        system=system, config_id=bricks_cfg.config_id, signatures=list(brickset.bricks)))
    rows, whole_time = [], 0.0
    for name in models:
        dec = brickset.models[name]
        measured = store.measurement(dec.model_key, system, whole_cfg.config_id, kind="model")
        if measured is None or not measured.ok:
            (measured,) = benchmark([load_model(build(name), name=name)], config=whole_cfg, budget=budget)
            store.record_model(measured, system, budget=budget)
        whole_time += measured.wall_time_s
        est = estimate(dec, store, system=system, config=config)
        rows.append(EvaluationRow(
            model=name, layers=dec.layers, unique_bricks=len(dec.bricks),
            measured_s=measured.median_s or float("nan"), estimated_s=est.sequential_s,
            parallel_s=est.parallel_s, lower_bound_s=est.lower_bound_s, roofline_s=est.roofline_s,
            ci_low_s=est.ci_low_s, ci_high_s=est.ci_high_s))
        say(f"{name}: measured {1e3 * rows[-1].measured_s:.2f} ms, estimated "
            f"{1e3 * est.sequential_s:.2f} ms ({100 * rows[-1].error:+.1f}%)")
    return Evaluation(rows=tuple(rows), layers=summary.layers, unique_bricks=summary.unique_bricks,
                      brick_time_s=brick_time, whole_time_s=whole_time, system=system, config=config,
                      elapsed_s=time.perf_counter() - start)


def _progress_line(p: object) -> str:
    done = getattr(p, "done", 0)
    total = getattr(p, "total", 0)
    return f"bricks {done}/{total}"
