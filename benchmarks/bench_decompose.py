"""Speed of decomposition: load + decompose + dedup vs onnx.load + infer_shapes on the same file.

Target (issue 2): at most 2x for a model of ~2,000 nodes (a 24-layer transformer).

    python benchmarks/bench_decompose.py [--model bert_large] [--repeat 3]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import onnx

import dlbricks
from dlbricks.generators import collect_system_info
from dlbricks.model_zoo import build, list_models


def _largest_language_model() -> str:
    names = [m.name for m in list_models("language")]
    if not names:
        raise SystemExit("no language model in the zoo; pass --model NAME")
    return max(names, key=lambda n: len(build(n).graph.node))


def _best_of(repeat: int, fn) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="zoo model (default: the largest language model)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    name = args.model or _largest_language_model()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        model = build(name)
        onnx.save(model, path, save_as_external_data=model.ByteSize() > 1.8e9, location=f"{name}.data")
        nodes = len(model.graph.node)
        del model

        def baseline() -> None:
            onnx.shape_inference.infer_shapes(onnx.load(path), data_prop=True)

        def ours() -> None:
            bs = dlbricks.BrickSet()
            bs.add(dlbricks.decompose(dlbricks.load_model(path)))

        base = _best_of(args.repeat, baseline)
        mine = _best_of(args.repeat, ours)
        dec = dlbricks.decompose(dlbricks.load_model(path))
    info = collect_system_info()
    print(f"machine: {info.cpu_model} ({info.physical_cores} cores), Python {platform.python_version()}, "
          f"onnx {onnx.__version__}")
    print(f"model: {name}, {nodes} nodes, {dec.layers} layers, {len(dec.bricks)} unique bricks")
    print(f"onnx.load + infer_shapes:          {base:.3f} s (best of {args.repeat})")
    print(f"load_model + decompose + dedup:    {mine:.3f} s (best of {args.repeat})")
    print(f"ratio: {mine / base:.2f}x (target <= 2.0x)")


if __name__ == "__main__":
    main()
