"""What a worker that keeps prepared bricks saves, and that it changes no measurement.

Two runners measure the same bricks in turn (which goes first alternates): one keeps what it
prepared (the default, :class:`~dlbricks.generators.runner.Runner` ``keep_bytes``), one keeps nothing.
Every layer brick of each model is measured in its model's context, in the model's order, then the
model's heaviest bricks are measured again (as the allocation and the drift moments do). Per model
it prints the ratio of the two runners' sums (occurrences x median), and the wall time each spent on
the bricks, first measurements and measurements again apart.

Usage: ``python benchmarks/bench_keep.py [--models resnet50_v1,densenet121] [--again 10] [--opt-level all]``
"""

from __future__ import annotations

import argparse

import numpy as np

from dlbricks import decompose, load_model
from dlbricks.generators import Budget, OrtConfig
from dlbricks.generators.runner import Runner
from dlbricks.model_zoo import build

BUDGET = Budget(warmup_time=0.005, min_time=0.03, min_runs=8, max_time=0.3, rel_ci=0.05, placements=2)


def _paired(keep: Runner, none: Runner, item: object, turn: int) -> tuple:
    """Both runners' measurements of ``item``, the one going first alternating with ``turn``."""
    if turn % 2:
        k = keep.measure(item)
        n = none.measure(item)
    else:
        n = none.measure(item)
        k = keep.measure(item)
    return k, n


def run(name: str, again: int, level: str) -> None:
    granularity = "layer" if level == "disable" else "fused"
    dec = decompose(load_model(build(name), name=name), granularity, opt_level=None if level == "disable" else level)
    config = OrtConfig(graph_optimization_level=level)
    counts = dec.counts()
    sums = np.zeros(2)
    walls = np.zeros((2, 2))  # [first, again] x [keep, none]
    totals: dict[str, float] = {}
    with Runner(config=config, budget=BUDGET) as keep, Runner(config=config, budget=BUDGET, keep_bytes=0) as none:
        for turn, sig in enumerate(dec.bricks):
            k, n = _paired(keep, none, dec.in_context(sig), turn)
            sums += counts[sig] * np.array([k.median_s, n.median_s])
            walls[0] += [k.wall_time_s, n.wall_time_s]
            totals[sig] = counts[sig] * n.median_s
        for turn, sig in enumerate(sorted(totals, key=totals.get, reverse=True)[:again]):
            k, n = _paired(keep, none, dec.in_context(sig), turn)
            walls[1] += [k.wall_time_s, n.wall_time_s]
    print(f"{name:<20} {len(dec.bricks):>6} {sums[0] / sums[1]:>10.4f} {walls[0, 0]:>9.2f} {walls[0, 1]:>9.2f} "
          f"{walls[1, 0]:>9.2f} {walls[1, 1]:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50_v1,densenet121,bert_base")
    parser.add_argument("--again", type=int, default=10, help="heaviest bricks measured again per model")
    parser.add_argument("--opt-level", default="disable", help="onnxruntime level; above disable, fused bricks")
    args = parser.parse_args()
    print(f"{'model':<20} {'bricks':>6} {'keep/none':>10} {'first k s':>9} {'first n s':>9} "
          f"{'again k s':>9} {'again n s':>9}")
    for name in args.models.split(","):
        run(name, args.again, args.opt_level)


if __name__ == "__main__":
    main()
