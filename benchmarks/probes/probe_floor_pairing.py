"""How steady is the floor's cost of a further node, timed apart or paired?

Calibrates the floor ``--rounds`` times in one process, each round both ways in turn (the order
alternating): *apart*, the one-node model and the chain of ``CHAIN_NODES`` nodes each timed on its
own, one after the other (the cost of a further node is their difference over the chain's further
nodes); *paired*, :func:`dlbricks.generators.floor.measure_floor`, the chain timed with the one-node model
beside it. Prints each round's one-node median, node cost and floor both ways, then per way the
median and the spread (min-max) of the node cost, and the node cost of the calibration that a
Runner would keep by the lowest floor (the rule before pairing) and by the fastest one-node model.

Usage: ``python benchmarks/probes/probe_floor_pairing.py [--rounds 12] [--budget quick|default]``
"""

from __future__ import annotations

import argparse
import statistics

from dlbricks.generators import Budget, OrtConfig, collect_system_info, get_backend
from dlbricks.generators.floor import CHAIN_NODES, measure_floor, node_cost
from dlbricks.generators.harness import measure_model
from dlbricks.generators.items import FLOOR_KEY, floor_model


def apart(config: OrtConfig, budget: Budget) -> tuple[float, float, float]:
    """(one-node median, node cost, floor), the one-node model and the chain timed one after the other."""
    backend = get_backend("onnxruntime")
    one, _ = measure_model(floor_model(), FLOOR_KEY, backend, config, budget)
    chain, _ = measure_model(floor_model(CHAIN_NODES), FLOOR_KEY, backend, config, budget)
    node = node_cost(one.median_s, chain.median_s, CHAIN_NODES)
    return one.median_s, node, max(one.median_s - node, 0.0)


def paired(config: OrtConfig, budget: Budget) -> tuple[float, float, float]:
    """(one-node median, node cost, floor) as :func:`measure_floor` calibrates them."""
    m = measure_floor(config=config, budget=budget)
    return m.median_s, m.node_s, m.floor_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--budget", choices=["quick", "default"], default="default")
    args = parser.parse_args()
    config, budget = OrtConfig(), Budget.quick() if args.budget == "quick" else Budget()
    print(f"{collect_system_info().cpu_model}; onnxruntime, 1 thread, optimizations off; {args.rounds} rounds")
    ways = {"apart": apart, "paired": paired}
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ways}
    print(f"{'round':>5} {'way':>7} {'one-node us':>12} {'node us':>8} {'floor us':>9}")
    for r in range(args.rounds):
        for name in (list(ways) if r % 2 == 0 else list(reversed(ways))):
            one, node, floor = ways[name](config, budget)
            runs[name].append((one, node, floor))
            print(f"{r + 1:>5} {name:>7} {one * 1e6:>12.3f} {node * 1e6:>8.3f} {floor * 1e6:>9.3f}")
    print()
    for name, rows in runs.items():
        nodes = [node for _, node, _ in rows]
        by_floor = min(rows, key=lambda row: row[2])
        by_one = min(rows, key=lambda row: row[0])
        print(f"{name:>7}: node cost median {statistics.median(nodes) * 1e6:.3f} us, "
              f"min-max {min(nodes) * 1e6:.3f}-{max(nodes) * 1e6:.3f} us; kept by the lowest floor: "
              f"node {by_floor[1] * 1e6:.3f} us, floor {by_floor[2] * 1e6:.3f} us; by the fastest one-node "
              f"model: node {by_one[1] * 1e6:.3f} us, floor {by_one[2] * 1e6:.3f} us")


if __name__ == "__main__":
    main()
