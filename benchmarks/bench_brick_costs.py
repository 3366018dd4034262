"""Where does the time of measuring a brick go? Setup against timed runs, per brick.

Decomposes zoo models into layer bricks (each in its model's context, as ``populate`` measures them)
and measures the first ``--bricks`` unique bricks of each in one worker under two budgets:

- ``before``: the main job's former fixed budget (every brick at least 0.1 s of timed runs);
- ``after``: the pilot budget that :func:`dlbricks.benchmarks_db.populate` gives every brick before
  the allocation (:data:`dlbricks.generators.budget.PILOT_BUDGET`).

Per brick it prints the session copies, the wall time seen by the parent (request to reply), the
backend's preparation (sessions, cold copies, the brick before it), warm-up, timed runs and the
rest of the sampling (primes, buffer moves, bookkeeping); then the totals, and the share of setup
(wall less warm-up and sampling) in the wall time.

``--steps`` instead runs each brick's steps in this process under the pilot budget and times each
apart (:func:`steps`): where a brick's setup goes, step by step.

Usage: ``python benchmarks/bench_brick_costs.py [--models resnet50_v1,bert_base] [--bricks 20] [--steps]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import onnx

from dlbricks import decompose, load_model
from dlbricks.bricks import split_previous
from dlbricks.generators import Budget, OrtConfig, collect_system_info, get_backend
from dlbricks.generators.budget import PILOT_BUDGET
from dlbricks.generators.harness import Timing, time_calls
from dlbricks.generators.items import floor_model
from dlbricks.generators.runner import Runner
from dlbricks.model_zoo import build

BEFORE = Budget(warmup_time=0.02, min_time=0.1, min_runs=10, max_time=1.0, rel_ci=0.02)
BUDGETS = {"before": BEFORE, "after": PILOT_BUDGET}


def _items(models: list[str], per_model: int) -> list[object]:
    items: list[object] = []
    seen: set[str] = set()
    for name in models:
        dec = decompose(load_model(build(name), name=name), "layer")
        fresh = [sig for sig in dec.bricks if sig not in seen][:per_model]
        seen.update(fresh)
        items += [dec.in_context(sig) for sig in fresh]
    return items


def _row(op: str, wall: float, t: Timing) -> str:
    setup = wall - t.harness_s
    return (f"{op:<20} {t.copies:>6} {1e3 * wall:>8.1f} {1e3 * t.prepare_s:>8.1f} {1e3 * setup:>8.1f} "
            f"{1e3 * t.warmup_s:>8.1f} {1e3 * t.timed_s:>8.1f} {1e3 * (t.sampling_s - t.timed_s):>8.1f}")


def run(items: list[object], label: str, budget: Budget) -> None:
    print(f"\n{label}: {budget}")
    print(f"{'brick':<20} {'copies':>6} {'wall ms':>8} {'prep ms':>8} {'setup ms':>8} {'warm ms':>8} "
          f"{'timed ms':>8} {'prime ms':>8}")
    totals = {"wall": 0.0, "setup": 0.0, "prepare": 0.0, "warm": 0.0, "timed": 0.0, "other": 0.0}
    with Runner(config=OrtConfig(), budget=budget) as runner:
        runner.floor()
        for item in items:
            m, t = runner.measure_detailed(item)
            if t is None:
                print(f"{getattr(item, 'op_type', '?'):<20} failed: {m.error}")
                continue
            print(_row(getattr(item, "op_type", "?"), m.wall_time_s, t))
            totals["wall"] += m.wall_time_s
            totals["setup"] += m.wall_time_s - t.harness_s
            totals["prepare"] += t.prepare_s
            totals["warm"] += t.warmup_s
            totals["timed"] += t.timed_s
            totals["other"] += t.sampling_s - t.timed_s
    n = max(len(items), 1)
    print(f"{label}: {len(items)} bricks, wall {totals['wall']:.2f} s ({1e3 * totals['wall'] / n:.1f} ms a brick): "
          f"setup {totals['setup']:.2f} s (of which backend preparation {totals['prepare']:.2f} s), warm-up "
          f"{totals['warm']:.2f} s, timed {totals['timed']:.2f} s, primes and bookkeeping {totals['other']:.2f} s; "
          f"setup share {100 * totals['setup'] / max(totals['wall'], 1e-9):.0f}%")


def steps(items: list[object], budget: Budget) -> None:
    """Each brick's steps in this process, each timed apart: the brick materialized and serialized as
    the parent does, loaded, its weights drawn (``split_previous`` materializes them, as the backend
    does first), the floor's one-node model prepared, the whole preparation by the onnxruntime
    backend (sessions and cold copies, the brick before it, the floor's model, buffers bound), the
    harness under ``budget`` (warm-up, timed runs, the rest of sampling: primes, the floor's paired
    runs, buffer moves), and closing."""
    backend, config = get_backend("onnxruntime"), OrtConfig()
    backend.prepare(floor_model(), config).close()  # onnxruntime's first session
    spent: dict[str, float] = {}
    copies = 0

    def timed(step: str, call: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = call()
        spent[step] = spent.get(step, 0.0) + time.perf_counter() - start
        return result

    for item in items:
        data = timed("materialize and serialize (parent)", lambda i=item: i.to_onnx().SerializeToString())
        model = timed("load (worker)", lambda d=data: onnx.load_from_string(d))
        timed("  draw the weights (apart)", lambda m=model: split_previous(m))
        timed("  prepare the floor's model (apart)", lambda: backend.prepare(floor_model(), config)).close()
        prepared = timed("prepare", lambda m=model: backend.prepare(m, config))
        timing = timed("harness", lambda p=prepared: time_calls(p, budget))
        for step, seconds in (("  warm-up", timing.warmup_s), ("  timed runs", timing.timed_s),
                              ("  primes, floor runs, buffer moves", timing.sampling_s - timing.timed_s)):
            spent[step] = spent.get(step, 0.0) + seconds
        copies += prepared.copies
        timed("close", prepared.close)
    n = max(len(items), 1)
    print(f"\nsteps: {len(items)} bricks, {copies / n:.1f} session copies a brick, {budget}")
    for step, seconds in spent.items():
        print(f"{step:<38} {seconds:8.2f} s {1e3 * seconds / n:8.2f} ms a brick")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50_v1,mobilenet_v2_1.0,bert_base")
    parser.add_argument("--bricks", type=int, default=20, help="unique bricks per model")
    parser.add_argument("--budget", choices=("before", "after", "both"), default="both")
    parser.add_argument("--steps", action="store_true", help="each brick's steps in this process, timed apart")
    args = parser.parse_args()
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, {info.physical_cores} cores, onnxruntime {info.onnxruntime_version}, 1 thread")
    items = _items([m.strip() for m in args.models.split(",") if m.strip()], args.bricks)
    if args.steps:
        steps(items, PILOT_BUDGET)
        return
    for label in ("before", "after") if args.budget == "both" else (args.budget,):
        run(items, label, BUDGETS[label])


if __name__ == "__main__":
    main()
