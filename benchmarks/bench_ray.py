"""Ray's cost per brick: the same zoo bricks measured by one local process and by a two-node local Ray cluster.

Builds zoo models until it has ``--bricks`` unique bricks (60 by default), measures them with
``populate`` in this process (the local loop), then with ``RayExecutor`` on a
``ray.cluster_utils.Cluster`` of two nodes on this machine, each into its own database. Prints the
wall time of each run, Ray's overhead per brick (each item's round trip from this process less the
time its node spent measuring it: serialization, scheduling, transfer of the brick and the reply),
and whether both runs measured the same bricks with the same statuses.

Both nodes share this machine's cores, so the Ray run's brick timings are not comparable to the local
ones; the overhead and the statuses are what this measures.

    python benchmarks/bench_ray.py [--bricks 60] [--budget quick|default] [--models m1,m2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dlbricks
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.ray import RayExecutor
from dlbricks.generators import Budget

DEFAULT_MODELS = ("mobilenet_v2_0.5", "squeezenet1_1", "resnet18_v1", "shufflenet_v2_x0_5")


class _FirstBricks:
    """A decomposition seen through its first ``n`` unique bricks (what ``populate`` reads of it)."""

    def __init__(self, dec: dlbricks.Decomposition, signatures: Sequence[str]) -> None:
        self.dec = dec
        self.bricks = {s: dec.bricks[s] for s in signatures}
        self.reorder_bytes = dec.reorder_bytes

    def in_context(self, signature: str) -> Any:
        return self.dec.in_context(signature)


def _zoo_bricks(models: Sequence[str], count: int) -> tuple[list[dlbricks.Decomposition], list[_FirstBricks]]:
    """Decompositions of ``models`` in turn until ``count`` unique bricks, and views of them holding
    only those bricks."""
    from dlbricks.model_zoo import build

    decs, views, seen = [], [], set()
    for name in models:
        dec = dlbricks.decompose(dlbricks.load_model(build(name), name=name))
        new = [s for s in dec.bricks if s not in seen][: count - len(seen)]
        seen.update(new)
        decs.append(dec)
        views.append(_FirstBricks(dec, new))
        if len(seen) >= count:
            break
    if len(seen) < count:
        sys.exit(f"only {len(seen)} unique bricks in {', '.join(models)}; name more models")
    return decs, views


def _run(db: Path, decs: Sequence[dlbricks.Decomposition], views: Sequence[_FirstBricks], budget: Budget,
         executor: Any = None) -> tuple[Any, float, float, dict[str, str]]:
    """Populate ``db`` with the bricks of ``views``; the report, its start (``time.monotonic()``), its wall
    seconds and each brick's status."""
    with Store(db) as store:
        for dec in decs:
            store.models.add(dec)
        started, t0 = time.monotonic(), time.perf_counter()
        report = populate(store, views, None, BenchOptions(budget=budget, store_models=False), executor=executor)
        wall = time.perf_counter() - t0
        statuses = {r.key: r.status for r in store.measurements.bricks()}
    return report, started, wall, statuses


def _ms(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"mean {1e3 * statistics.fmean(values):.2f} ms, median {1e3 * statistics.median(values):.2f} ms, "
            f"p90 {1e3 * p90:.2f} ms, max {1e3 * ordered[-1]:.2f} ms")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bricks", type=int, default=60)
    parser.add_argument("--budget", choices=("quick", "default"), default="quick")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="zoo models, comma-separated")
    args = parser.parse_args(argv)
    budget = Budget.quick() if args.budget == "quick" else Budget()

    import ray
    from ray.cluster_utils import Cluster

    decs, views = _zoo_bricks(args.models.split(","), args.bricks)
    print(f"{args.bricks} unique bricks of {', '.join(d.model for d in decs)}; budget {args.budget}")
    with tempfile.TemporaryDirectory() as tmp:
        local, _, local_wall, local_status = _run(Path(tmp) / "local.db", decs, views, budget)
        print(f"local process:  {local.measured} bricks ({local.failed} failed) in {local_wall:.2f} s; "
              f"bricks {local.wall_s:.2f} s (setup {local.setup_s:.2f} s, timed {local.timed_s:.2f} s)")

        t0 = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        print(f"two-node local Ray cluster started and connected in {time.perf_counter() - t0:.2f} s")
        try:
            executor = RayExecutor()
            remote, remote_start, remote_wall, remote_status = _run(Path(tmp) / "ray.db", decs, views, budget, executor)
        finally:
            ray.shutdown()
            cluster.shutdown()
    runs = executor.runs_
    first = min(r.submitted for r in runs)
    overheads = [r.overhead_s for r in runs if r.overhead_s is not None]
    print(f"Ray, 2 nodes:   {remote.measured} bricks ({remote.failed} failed) in {remote_wall:.2f} s "
          f"(of which {first - remote_start:.2f} s to start the node actors and describe the nodes); "
          f"bricks {remote.wall_s:.2f} s (setup {remote.setup_s:.2f} s, timed {remote.timed_s:.2f} s)")
    per_node = {n: sum(r.node_id == n for r in runs) for n in {r.node_id for r in runs}}
    print(f"bricks per node: {', '.join(f'{n[:8]}: {c}' for n, c in sorted(per_node.items()))}")
    print(f"Ray overhead per brick (round trip less the node's measuring time), {len(overheads)} bricks: "
          f"{_ms(overheads)}; target < 10 ms: {'met' if statistics.fmean(overheads) < 0.010 else 'NOT met'}")
    same_bricks = set(local_status) == set(remote_status)
    same_status = local_status == remote_status
    print(f"same bricks: {same_bricks} ({len(local_status)} local, {len(remote_status)} Ray); "
          f"same statuses: {same_status} ({sorted(set(local_status.values()))} local, "
          f"{sorted(set(remote_status.values()))} Ray)")


if __name__ == "__main__":
    main()
