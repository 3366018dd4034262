"""The main job's cost and accuracy, with a model-level precision target or with the fixed rule.

Runs :func:`dlbricks.estimator.evaluate` as ``dlbricks evaluate`` does (default suite, 1 thread,
optimizations off, layer bricks, a fresh database) and prints its figures: per model the measured
and estimated latency, error and the estimate's CI half-width; for the suite the wall time of the
bricks (setup against timed runs) and of the whole models, the wall speedup, DLBricks' compute
ratio, the error figures and the elapsed time.

``--target-ci 0.01`` (the default) allocates the bricks' timed runs to each model's estimate;
``--target-ci none`` measures every brick under the fixed budget, as before the target existed.

Usage: ``python benchmarks/bench_evaluate_cost.py --db /tmp/x.db [--target-ci 0.01] [--suite default]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlbricks.estimator import Evaluation, evaluate
from dlbricks.estimator.evaluation import DEFAULT_TARGET_CI, suite_models
from dlbricks.generators import OrtConfig


def report(ev: Evaluation) -> None:
    print(f"{'model':<20} {'measured ms':>11} {'estimated ms':>12} {'error %':>8} {'CI +-%':>7}")
    for r in ev.rows:
        half = 100 * (r.ci_high_s - r.ci_low_s) / 2 / r.estimated_s
        print(f"{r.model:<20} {1e3 * r.measured_s:>11.3f} {1e3 * r.estimated_s:>12.3f} {100 * r.error:>+8.1f} "
              f"{half:>7.2f}")
    print(f"suite: {len(ev.rows)} models, {ev.layers} layers, {ev.unique_bricks} unique bricks")
    target = "fixed budget per brick" if ev.target_ci is None else f"target +-{100 * ev.target_ci:g}% per model"
    print(f"precision: {target}; widest model CI reached by the allocation: "
          + ("-" if ev.worst_ci is None else f"+-{100 * ev.worst_ci:.2f}%")
          + f"; models within target: {ev.within_target}/{len(ev.rows)}")
    whole = (f" (setup {ev.whole_setup_s:.1f} s, timed {ev.whole_time_s - ev.whole_setup_s:.1f} s: their side of the "
             "same rounds)" if ev.bricks_in_rounds else "")
    print(f"benchmarking time: unique bricks {ev.brick_time_s:.1f} s (setup {ev.brick_setup_s:.1f} s, timed "
          f"{ev.brick_timed_s:.1f} s), whole models {ev.whole_time_s:.1f} s{whole}: wall speedup {ev.speedup:.2f}x")
    print(f"latency of one run: all models {1e3 * ev.model_latency_s:.1f} ms, all unique bricks "
          f"{1e3 * ev.unique_brick_latency_s:.1f} ms: compute ratio {ev.time_dedup_ratio:.2f}x")
    print(f"error: mean |error| {100 * ev.mean_abs_error:.2f}%, max |error| {100 * ev.max_abs_error:.2f}%; "
          f"within +-5%: {sum(abs(r.error) <= 0.05 for r in ev.rows)}/{len(ev.rows)}")
    print(f"elapsed: {ev.elapsed_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--suite", default="default")
    parser.add_argument("--target-ci", default=str(DEFAULT_TARGET_CI), help="a fraction, or 'none'")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    target = None if args.target_ci.lower() == "none" else float(args.target_ci)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    ev = evaluate(suite_models(args.suite), str(args.db), config=OrtConfig(), target_ci=target, say=say)
    report(ev)


if __name__ == "__main__":
    main()
