"""Time the brick database: storing the zoo's bricks, writing 100,000 measurements, querying a model.

Usage::

    python benchmarks/bench_db.py [--measurements N] [--sample-bricks K] [--small]

Prints the time to store every model of the zoo (bricks, occurrences, DAGs; decomposition itself
is timed apart), to write N synthetic measurements committed one at a time as ``dlbricks bench``
does (claim, then record and release: two write transactions) and in batches, and to query one
model's measurements. Then it measures K bricks of the zoo with the default budget and prints the
per-measurement write cost as a share of the median brick's measuring time (target: < 1%).
``--small`` uses the small models of ``tests/_models.py`` instead of the zoo.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.generators import Budget, Measurement, OrtConfig
from dlbricks.generators.runner import Runner
from dlbricks.generators.system import SystemInfo

BATCH = 5_000


def _decompositions(small: bool) -> tuple[str, list[dlbricks.Decomposition], list[dlbricks.ModelGraph]]:
    if not small:
        try:
            from dlbricks.model_zoo import build, list_models
        except ImportError:
            small = True
    if small:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests import _models

        protos = {"resnet_like": _models.resnet_like(), "transformer_layer": _models.transformer_layer(),
                  "lstm": _models.lstm_model(), "split": _models.split_model()}
        graphs = [dlbricks.load_model(p, batch_size=1 if n in ("resnet_like", "transformer_layer") else None,
                                      name=n) for n, p in protos.items()]
        source = "tests/_models.py (small models)"
    else:
        graphs = [dlbricks.load_model(build(m.name), name=m.name) for m in list_models()]
        source = "the model zoo"
    return source, [dlbricks.decompose(g) for g in graphs], graphs


def _system(i: int) -> SystemInfo:
    return SystemInfo(cpu_model=f"synthetic-cpu-{i}", architecture="x86_64", physical_cores=8,
                      logical_cores=16, cpu_isa=("avx2",), cache_bytes=(("L3", 32 << 20),),
                      memory_total_bytes=64 << 30, os="Linux", os_release="bench", kernel="6",
                      python_version="3.11", numpy_version="2", onnx_version="1.16",
                      onnxruntime_version="1.31", gpu_name=None, gpu_driver=None, gpu_count=0)


def _measurement(key: str, cfg: OrtConfig, i: int) -> Measurement:
    t = 1e-5 * (1 + i % 97)
    return Measurement(key=key, status="ok", error=None, n=50, min_s=t * 0.9, median_s=t, mean_s=t,
                       p90_s=t * 1.1, p99_s=t * 1.3, std_s=t * 0.05, iqr_s=t * 0.04, ci_low_s=t * 0.99,
                       ci_high_s=t * 1.01, wall_time_s=0.3, converged=True, backend="onnxruntime",
                       config=cfg, floor_s=2e-6)


def _workload(signatures: list[str], n: int, first_system: int) -> list[tuple[Measurement, SystemInfo]]:
    """``n`` measurements over (system, config, brick) triples, every triple distinct."""
    configs = [OrtConfig(intra_op_num_threads=t) for t in (1, 2, 4, 8)]
    out: list[tuple[Measurement, SystemInfo]] = []
    s = first_system
    while len(out) < n:
        system = _system(s)
        for cfg in configs:
            out += [(_measurement(sig, cfg, i), system) for i, sig in enumerate(signatures)]
        s += 1
    return out[:n]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=int, default=100_000)
    parser.add_argument("--sample-bricks", type=int, default=12)
    parser.add_argument("--small", action="store_true", help="use tests/_models.py instead of the zoo")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    source, decs, graphs = _decompositions(args.small)
    print(f"models: {len(decs)} from {source}; decomposed in {time.perf_counter() - t0:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = Store(path)
        t0 = time.perf_counter()
        for dec, graph in zip(decs, graphs, strict=True):
            store.models.add(dec, source=graph.source)
        insert_s = time.perf_counter() - t0
        stats = store.stats()
        occurrences = sum(len(d.occurrences) for d in decs)
        print(f"store the bricks of {source}: {insert_s:.2f} s for {stats.bricks} unique bricks and "
              f"{occurrences} occurrences of {stats.models} models "
              f"({1e3 * insert_s / stats.bricks:.2f} ms per brick); file "
              f"{path.stat().st_size / 1e6:.1f} MB")

        signatures = sorted({s for d in decs for s in d.bricks})
        n = args.measurements
        single = _workload(signatures, n, 0)
        for system in {s.fingerprint: s for _, s in single}.values():
            store.systems.record(system)
        costs = []
        t0 = time.perf_counter()
        for m, system in single:
            start = time.perf_counter()
            store.claims.take(m.key, system.fingerprint, m.config.config_id)
            store.measurements.record(m, system.fingerprint, release=store.owner)
            costs.append(time.perf_counter() - start)
        single_s = time.perf_counter() - t0
        print(f"write {n:,} measurements one at a time (claim + record, as bench): {single_s:.1f} s; "
              f"{1e6 * statistics.mean(costs):.0f} us mean, {1e6 * statistics.median(costs):.0f} us "
              f"median, {1e6 * statistics.quantiles(costs, n=100)[98]:.0f} us p99 per measurement")

        by_system: dict[str, list[tuple[Measurement, SystemInfo]]] = {}
        for m, system in _workload(signatures, n, 10_000):
            by_system.setdefault(system.fingerprint, []).append((m, system))
        t0 = time.perf_counter()
        for group in by_system.values():
            for start in range(0, len(group), BATCH):
                store.measurements.record_many([m for m, _ in group[start:start + BATCH]], group[0][1])
        batch_s = time.perf_counter() - t0
        print(f"write {n:,} measurements in batches of up to {BATCH:,} (record_many): {batch_s:.1f} s "
              f"({1e6 * batch_s / n:.1f} us per measurement)")

        model = max(decs, key=lambda d: len(d.bricks))
        fingerprint, cid = single[0][1].fingerprint, single[0][0].config.config_id
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            found = store.measurements.bricks(model=model.model_key, system=fingerprint, config_id=cid)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        every = store.measurements.bricks(model=model.model_key)
        all_s = time.perf_counter() - t0
        print(f"query the measurements of {model.model} ({len(model.bricks)} bricks) in a database of "
              f"{store.stats().measurements:,} measurements: {1e3 * statistics.median(times):.1f} ms for "
              f"one system and config ({len(found)} rows), {1e3 * all_s:.1f} ms for all ({len(every)} rows)")
        store.close()

    bricks = [b for d in decs for b in d.bricks.values()]
    step = max(1, len(bricks) // args.sample_bricks)
    sample = list({b.signature: b for b in bricks[::step]}.values())[:args.sample_bricks]
    with Runner(budget=Budget()) as runner:
        walls = [runner.measure(b).wall_time_s for b in sample]
    median_wall = statistics.median(walls)
    per = statistics.mean(costs)
    print(f"median measuring time of {len(sample)} bricks (default budget): {median_wall:.3f} s; "
          f"write cost per measurement {1e6 * per:.0f} us = {100 * per / median_wall:.3f}% of it "
          f"(target < 1%)")


if __name__ == "__main__":
    main()
