"""How well do MXNet bricks reconstruct MXNet model latency? The paper's setting, on this machine.

For a suite of Gluon vision models (random weights, batch 1): load each into a ModelGraph, decompose
it into layer bricks, benchmark every unique brick once with the MXNet backend (worker subprocess,
single-threaded, cold-weight bricks), measure every model whole with the same harness and budget
(in several worker processes, median of their medians), and estimate each model from its bricks
(floor-corrected sum, :func:`dlbricks.estimator.estimation.estimate_decomposition`). Prints per model: layers,
unique bricks, measured, estimated, error, and the spread of the whole model's medians over its
worker processes (when it is wide, the machine is busy and the errors are noise too); then the suite's
mean and max absolute error (target: every model within +-5%) and the benchmarking time of bricks
against whole models.

Usage: ``python benchmarks/bench_mxnet_suite.py [--suite default|full|NAME,...] [--engine E]
[--cache cold|warm] [--threads N] [--whole-workers K] [--quick]``

Needs the mxnet extra (Python 3.11, numpy<1.24).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace

from dlbricks import BrickSet, decompose
from dlbricks.estimator.estimation import estimate_decomposition
from dlbricks.generators import Budget, Measurement, benchmark, collect_system_info
from dlbricks.generators.mxnet import ENGINES, MxnetConfig
from dlbricks.model_zoo.gluon import GLUON_MODELS, GLUON_PREFIX, build_gluon

DEFAULT_SUITE = ("resnet18_v1", "resnet50_v1", "resnet50_v2", "mobilenet1.0", "mobilenetv2_1.0",
                 "squeezenet1.1", "densenet121", "inceptionv3", "alexnet")
#: The stopping rule of the lead's ``evaluate`` (bricks and whole models alike).
BUDGET = Budget(warmup_time=0.02, min_time=0.1, min_runs=10, max_time=1.0, rel_ci=0.02)
TARGET = 0.05


@dataclass(frozen=True, slots=True)
class Row:
    """One model of the table (seconds)."""

    model: str
    layers: int
    unique_bricks: int
    measured_s: float
    estimated_s: float
    whole_wall_s: float
    spread: float  # (max - min) / median of the whole model's per-process medians: the noise floor

    @property
    def error(self) -> float:
        """estimated / measured - 1."""
        return self.estimated_s / self.measured_s - 1.0


def suite(arg: str) -> list[str]:
    """Gluon names of ``default``, ``full`` (all 34) or a comma-separated list."""
    if arg == "default":
        return list(DEFAULT_SUITE)
    if arg == "full":
        return list(GLUON_MODELS)
    names = [n.strip().removeprefix(GLUON_PREFIX) for n in arg.split(",") if n.strip()]
    unknown = [n for n in names if n not in GLUON_MODELS]
    if unknown:
        sys.exit(f"unknown Gluon models {unknown}; valid: {', '.join(GLUON_MODELS)}")
    return names


def measure_whole(name: str, config: MxnetConfig, budget: Budget, workers: int) -> tuple[Measurement, float]:
    """The whole model in ``workers`` separate worker processes: the run with the median median, and
    the spread of the medians ((max - min) / median)."""
    graph = build_gluon(name)
    runs = [m for _ in range(workers) for m in benchmark([graph], backend="mxnet", config=config, budget=budget)]
    bad = [m for m in runs if not m.ok]
    if bad:
        raise SystemExit(f"{name}: whole-model run failed: {bad[0].error}")
    runs.sort(key=lambda m: m.median_s or 0.0)
    mid = runs[len(runs) // 2]
    spread = ((runs[-1].median_s or 0.0) - (runs[0].median_s or 0.0)) / (mid.median_s or 1.0)
    return replace(mid, wall_time_s=sum(m.wall_time_s for m in runs)), spread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="default", help="default, full, or NAME,NAME,...")
    parser.add_argument("--engine", default="ThreadedEnginePerDevice", choices=ENGINES)
    parser.add_argument("--cache", default="cold", choices=("cold", "warm"))
    parser.add_argument("--threads", type=int, default=1, help="OMP threads (default 1)")
    parser.add_argument("--no-mkldnn", action="store_true", help="MXNet's own CPU kernels, not oneDNN")
    parser.add_argument("--whole-workers", type=int, default=3, help="processes per whole model")
    parser.add_argument("--quick", action="store_true", help="Budget.quick() (smoke runs)")
    args = parser.parse_args(argv)
    names = suite(args.suite)
    config = MxnetConfig(engine=args.engine, cache=args.cache, omp_threads=args.threads,
                         mkldnn=not args.no_mkldnn)
    budget = Budget.quick() if args.quick else BUDGET
    system = collect_system_info()
    start = time.perf_counter()
    print(f"mxnet {config.mxnet_version}, config {config.config_id} {config.to_dict()}")
    print(f"system: {getattr(system, 'cpu_model', '')} ({getattr(system, 'logical_cores', '?')} cores)")

    brickset = BrickSet()
    for name in names:
        brickset.add(decompose(build_gluon(name)))
    summary = brickset.summary()
    print(f"{summary.models} models, {summary.layers} layers, {summary.unique_bricks} unique bricks "
          f"(reuse {summary.reuse_ratio:.1f}x)", flush=True)

    bricks = list(brickset.bricks.values())
    measurements: dict[str, Measurement] = {}
    for i, m in enumerate(benchmark(bricks, backend="mxnet", config=config, budget=budget), start=1):
        measurements[m.key] = m
        if not m.ok:
            print(f"  brick {m.key[:12]} {m.status}: {m.error}", flush=True)
        if i % 50 == 0 or i == len(bricks):
            print(f"  bricks {i}/{len(bricks)} ({time.perf_counter() - start:.0f} s)", flush=True)
    brick_wall = sum(m.wall_time_s for m in measurements.values())

    rows = []
    for name in names:
        dec = brickset.models[GLUON_PREFIX + name]
        est = estimate_decomposition(dec, measurements, config_id=config.config_id)
        whole, spread = measure_whole(name, config, budget, args.whole_workers)
        rows.append(Row(dec.model, dec.layers, len(dec.bricks), whole.median_s or float("nan"),
                        est.sequential_s, whole.wall_time_s, spread))
        r = rows[-1]
        print(f"  {r.model}: measured {1e3 * r.measured_s:.2f} ms, estimated {1e3 * r.estimated_s:.2f} ms "
              f"({100 * r.error:+.1f}%)", flush=True)
    _report(rows, brick_wall, time.perf_counter() - start)
    return 0


def _report(rows: list[Row], brick_wall: float, elapsed: float) -> None:
    print()
    print(f"{'model':28s} {'layers':>6s} {'bricks':>6s} {'measured ms':>12s} {'estimated ms':>13s} {'error':>7s} "
          f"{'spread':>7s}")
    for r in rows:
        flag = "" if abs(r.error) <= TARGET else "  *"
        print(f"{r.model:28s} {r.layers:6d} {r.unique_bricks:6d} {1e3 * r.measured_s:12.3f} "
              f"{1e3 * r.estimated_s:13.3f} {100 * r.error:+6.1f}% {100 * r.spread:6.1f}%{flag}")
    errors = [abs(r.error) for r in rows]
    within = sum(e <= TARGET for e in errors)
    print(f"mean |error| {100 * statistics.fmean(errors):.1f}%, max |error| {100 * max(errors):.1f}%, "
          f"{within}/{len(rows)} models within +-{100 * TARGET:.0f}%")
    whole_wall = sum(r.whole_wall_s for r in rows)
    print(f"benchmarking time: unique bricks {brick_wall:.1f} s, whole models {whole_wall:.1f} s "
          f"(over {len(rows)} models); elapsed {elapsed:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
