"""What the DequantizeLinear copies change: a QDQ model decomposed with and without them, estimated
from one database, with the whole model measured between the estimates.

onnxruntime copies every DequantizeLinear once per further reader at every optimization level
(``EnsureUniqueDQForNodeUnit``); :func:`dlbricks.onnx_frontend.unique_dequantize` makes the same
copies when a model is loaded. This script loads the model both ways, benches the bricks of both
decompositions into one database (shared bricks once), and then, round after round, measures the
whole model and prints both estimates against it.

    python benchmarks/bench_dq_copies.py MODEL.onnx [--levels disable,all] [--rounds 3] [--db-dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import dlbricks
import dlbricks.onnx_frontend as frontend
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.estimator import estimate
from dlbricks.estimator.evaluation import measure_whole
from dlbricks.generators import Budget, OrtConfig

WHOLE_BUDGET = Budget(min_time=0.5, max_time=2.0)


def _decompositions(path: str, level: str) -> tuple[dlbricks.ModelGraph, dlbricks.Decomposition,
                                                     dlbricks.Decomposition]:
    """The model's graph and its decomposition with the copies, then without them."""
    granularity, opt = ("layer", None) if level == "disable" else ("fused", level)
    graph = dlbricks.load_model(path, name="with_copies")
    with_copies = dlbricks.decompose(graph, granularity, opt_level=opt)
    copies = frontend.unique_dequantize
    frontend.unique_dequantize = lambda nodes, outputs: nodes
    try:
        without = dlbricks.decompose(dlbricks.load_model(path, name="without_copies"), granularity, opt_level=opt)
    finally:
        frontend.unique_dequantize = copies
    return graph, with_copies, without


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an ONNX file with Q/DQ nodes")
    parser.add_argument("--levels", default="disable,all", help="optimization levels, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="whole-model measurements per level")
    parser.add_argument("--db-dir", default=None, help="where the databases go (default: a temporary folder)")
    args = parser.parse_args()
    folder = Path(args.db_dir or tempfile.mkdtemp(prefix="dq_copies_"))
    for level in args.levels.split(","):
        config = OrtConfig(graph_optimization_level=level)
        graph, with_copies, without = _decompositions(args.model, level)
        print(f"{level}: {len(with_copies.occurrences)} layers with the copies, {len(without.occurrences)} without")
        with Store(folder / f"dq_copies_{level}.db") as store:
            populate(store, [with_copies, without], [config], BenchOptions(contexts="reuse"))
            for r in range(args.rounds):
                whole = measure_whole(graph, config, WHOLE_BUDGET, workers=1).median_s or float("nan")
                new, old = (estimate(d, store, config=config, granularity=d.granularity.split(":")[0]).sequential_s
                            for d in (with_copies, without))
                print(f"  round {r}: whole {1e3 * whole:.3f} ms; with the copies {1e3 * new:.3f} ms "
                      f"({new / whole - 1:+.1%}), without {1e3 * old:.3f} ms ({old / whole - 1:+.1%})", flush=True)


if __name__ == "__main__":
    main()
