"""How much a worker process's own layout moves a model's bricks against its whole runs.

Usage::

    python benchmarks/probes/probe_worker_bias.py MODEL [--workers 6] [--rounds bursts|chained]

The zoo model and all its bricks are timed in rounds (``dlbricks.estimator.api.ROUND_DESIGNS``, bursts
by default) in ``--workers`` fresh worker processes, one after another; printed per worker: its
rounds and the seconds a round took, the whole model's median, the ratio of the bricks' sum to the
whole runs with its 95% interval and the spread of one round's ratio, and the three heaviest
bricks' medians. Workers whose ratios
differ by more than their intervals drew a bias that lasts as long as the process; a ratio that
holds while the whole model's median moves from worker to worker is the pairing at work. The ratio
is raw: none of the estimator's corrections (the floor) are taken off.
"""

from __future__ import annotations

import argparse

import numpy as np

import dlbricks
from dlbricks.estimator.api import ROUND_DESIGNS
from dlbricks.generators import Budget, OrtConfig
from dlbricks.generators.runner import Runner
from dlbricks.model_zoo import build

#: Holding the model in a worker: one run that proves it runs (the rounds time it).
HOLD = Budget(warmup_time=0.0, min_time=0.0, min_runs=1, max_time=1.0, rel_ci=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--rounds", choices=tuple(ROUND_DESIGNS), default="bursts")
    args = parser.parse_args()
    graph = dlbricks.load_model(build(args.model), name=args.model)
    dec = dlbricks.decompose(graph)
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    counts = dec.counts()
    items = [dec.in_context(sig) for sig in keys]
    with Runner("onnxruntime", OrtConfig()) as runner:
        for worker in range(args.workers):
            runner.close()  # the next request starts a fresh worker
            held = runner.measure_detailed(graph, hold=True, budget=HOLD)[0]
            part = runner.rounds(held.key, items, [counts[sig] for sig in keys], ROUND_DESIGNS[args.rounds], seed=worker)
            if part is None:
                print(f"worker {worker}: its rounds failed")
                continue
            ratio, low, high = part.ratio()
            heaviest = np.argsort([-counts[sig] * part.bricks[sig].median_s for sig in keys])[:3]
            bricks = ", ".join(f"{dec.bricks[keys[i]].op_type} {1e3 * part.bricks[keys[i]].median_s:.3f} ms"
                               for i in heaviest)
            per_round = part.rounds.elapsed_s / part.rounds.count
            each = part.rounds.sums(part.counts) / np.asarray(part.rounds.whole_s)
            spread = np.percentile(each, [10, 90])
            print(f"{args.model} worker {worker}: {part.rounds.count} rounds of {per_round:.2f} s, "
                  f"whole {1e3 * part.whole.median_s:.3f} ms, "
                  f"bricks over whole {ratio:.3f} [{low:.3f}, {high:.3f}], one round's {spread[0]:.3f}-{spread[1]:.3f} "
                  f"(p10-p90); heaviest bricks {bricks}")


if __name__ == "__main__":
    main()
