"""Quantized models end to end: bench their bricks, validate the estimate against the model whole.

Builds small zoo models, quantizes each with onnxruntime.quantization (``quantize_dynamic``, and
``quantize_static`` in QDQ format calibrated on random inputs), then, per model and for two
configurations (1 thread, optimizations off with layer bricks; ``all`` with fused bricks), measures
the bricks into a fresh database (:func:`dlbricks.benchmarks_db.populate`) and validates
(:func:`dlbricks.estimator.validate`: the model measured whole by the same harness). Prints per
model and configuration the measured and estimated latency and the error; with ``--per-brick``,
the bricks whose own time is furthest from their layers' time in the model (onnxruntime's profiler).

Usage: ``python benchmarks/bench_quantized.py [--models squeezenet1_1:dynamic,...] [--budget quick]
[--per-brick] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from dlbricks import decompose, load_model
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.estimator import Validation, validate
from dlbricks.generators import Budget, OrtConfig
from dlbricks.model_zoo import build, list_models

DEFAULT_MODELS = ("squeezenet1_1:dynamic", "squeezenet1_1:qdq", "mobilenet_v2_0.35:qdq", "resnet18_v1:qdq")
CONFIGS = (("disable", "layer"), ("all", "fused"))


def quantize(name: str, method: str, folder: Path) -> Path:
    """The zoo model ``name`` quantized by ``method`` ("dynamic" or "qdq"), saved in ``folder``."""
    from onnxruntime import quantization as q

    spec = next(m for m in list_models() if m.name == name)
    source, target = folder / f"{name}.onnx", folder / f"{name}-{method}.onnx"
    onnx.save(build(name), source)
    if method == "dynamic":
        q.quantize_dynamic(str(source), str(target), weight_type=q.QuantType.QInt8)
        return target
    rng = np.random.default_rng(0)
    batches = iter([{n: rng.standard_normal(shape).astype(np.float32) for n, shape, _ in spec.input_shapes}
                    for _ in range(2)])

    class Reader(q.CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    q.quantize_static(str(source), str(target), Reader(), quant_format=q.QuantFormat.QDQ)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated zoo_model:method, method dynamic or qdq")
    parser.add_argument("--budget", choices=("quick", "default"), default="quick")
    parser.add_argument("--per-brick", action="store_true", help="show the bricks furthest from their in-model time")
    parser.add_argument("--keep", default=None, help="folder for the quantized models and databases (default: temp)")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice to pre-process
    budget = Budget.quick() if args.budget == "quick" else Budget()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="dlbricks-quantized-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{'model':<28} {'config':<16} {'bricks':>6} {'measured ms':>11} {'estimated ms':>12} {'error %':>8}")
    errors: dict[str, list[float]] = {}
    for item in args.models.split(","):
        name, method = item.split(":")
        graph = load_model(str(quantize(name, method, folder)), name=f"{name}-{method}")
        for level, granularity in CONFIGS:
            config = OrtConfig(graph_optimization_level=level)
            dec = decompose(graph, granularity, opt_level=level if granularity == "fused" else None)
            with Store.open(folder / f"{graph.name}-{level}.db") as store:
                populate(store, [dec], [config], BenchOptions(budget=budget))
                v = validate(graph, store, config=config, granularity=granularity, budget=budget,
                             per_brick=args.per_brick)
            error = 100 * v.error
            errors.setdefault(dec.granularity, []).append(error)
            print(f"{graph.name:<28} {level + '/' + granularity:<16} {len(dec.bricks):>6} "
                  f"{1e3 * v.measured.median_s:>11.3f} {1e3 * v.estimate.sequential_s:>12.3f} {error:>+8.1f}")
            if args.per_brick:
                _print_worst(v)
    for granularity, values in errors.items():
        print(f"{granularity}: mean |error| {np.mean(np.abs(values)):.1f}% over {len(values)} models")
    return 0


def _print_worst(v: Validation) -> None:
    """The five bricks whose own time is furthest from their layers' in-model time."""
    in_model: dict[str, float] = {}
    for occ in v.decomposition.occurrences:
        in_model[occ.signature] = in_model.get(occ.signature, 0.0) + v.in_model[occ.index]
    rows = sorted(v.estimate.breakdown, key=lambda c: -abs(c.total_s - in_model.get(c.signature, 0.0)))
    for c in rows[:5]:
        print(f"    {c.op_type[:48]:<48} x{c.count:<3} brick {1e3 * c.total_s:7.3f} ms  "
              f"in model {1e3 * in_model.get(c.signature, 0.0):7.3f} ms")


if __name__ == "__main__":
    sys.exit(main())
