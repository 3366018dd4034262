"""Do a model's float tensors hold denormal values, which x86 kernels run far slower on?

Every float tensor that shape inference types is made an output; the model runs once (optimizations
off, 1 thread) on random inputs (integers in [0, 100) for integer inputs, standard normal floats,
dynamic dimensions 1), and the script prints each tensor holding nonzero values smaller than
float32's least normal number, then the total. A brick fed synthetic values would run faster than
its layer inside a model whose activations are denormal.

Usage: ``python benchmarks/probes/probe_denormals.py MODEL.onnx [MODEL.onnx ...]``
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference


def _feeds(session: ort.InferenceSession, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64 if "64" in i.type else np.int32)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def denormal_tensors(path: str) -> tuple[dict[str, tuple[int, int]], int]:
    """Float tensor name -> (denormal values, size) for the tensors of ``path`` that hold any, and
    how many float tensors were read."""
    model = shape_inference.infer_shapes(onnx.load(path))
    outputs = {o.name for o in model.graph.output}
    written = {name for node in model.graph.node for name in node.output}  # value_info may name stale tensors
    model.graph.output.extend(v for v in model.graph.value_info if v.name in written and v.name not in outputs
                              and v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    values = session.run(None, _feeds(session, np.random.default_rng(0)))
    tiny = np.finfo(np.float32).tiny
    found, checked = {}, 0
    for out, value in zip(session.get_outputs(), values, strict=True):
        array = np.asarray(value)
        if array.dtype == np.float32 and array.size:
            checked += 1
            count = int(np.count_nonzero((array != 0) & (np.abs(array) < tiny)))
            if count:
                found[out.name] = (count, array.size)
    return found, checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    for path in parser.parse_args().models:
        found, checked = denormal_tensors(path)
        for name, (count, size) in found.items():
            print(f"{path}: {name}: {count} of {size} values denormal")
        print(f"{path}: {sum(c for c, _ in found.values())} denormal values in {len(found)} of {checked} float tensors")


if __name__ == "__main__":
    main()
