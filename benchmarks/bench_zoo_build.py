"""Build every model of the zoo once; print each model's build time, size and layer count, and the total.

Usage::

    python benchmarks/bench_zoo_build.py [--task TASK] [--seed N] [NAME ...]

Target: all models in under 60 s on a 2-core machine. "layers" counts the nodes of each graph other
than ``Constant`` nodes.
"""

from __future__ import annotations

import argparse
import time

from dlbricks.model_zoo import build, count_params, list_models


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print one row per model, then the totals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to build (default: all)")
    parser.add_argument("--task", default=None, help="only the models of this task")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = args.names or [m.name for m in list_models(args.task)]

    print(f"{'model':32s} {'params':>13s} {'MB':>8s} {'layers':>7s} {'build s':>8s}")
    total_s = total_layers = total_params = 0
    for name in names:
        start = time.perf_counter()
        model = build(name, seed=args.seed)
        elapsed = time.perf_counter() - start
        layers = sum(1 for n in model.graph.node if n.op_type != "Constant")
        params = count_params(model)
        megabytes = sum(len(t.raw_data) for t in model.graph.initializer) / 1e6
        del model
        total_s += elapsed
        total_layers += layers
        total_params += params
        print(f"{name:32s} {params:13,d} {megabytes:8.1f} {layers:7d} {elapsed:8.3f}", flush=True)
    print(f"{f'total ({len(names)} models)':32s} {total_params:13,d} {'':8s} {total_layers:7d} {total_s:8.3f}")


if __name__ == "__main__":
    main()
