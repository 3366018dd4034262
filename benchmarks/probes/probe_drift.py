"""How much does this machine's speed move from one second to the next?

Times a compute-bound MatMul (128x768 by 768x3072, 60 runs) and a memory-bound Add of two 32 MiB
tensors (10 runs) about once a second, single-threaded, and prints each pair of medians with the
time, then the range of each over the probe. On a quiet dedicated machine both stay within a few
percent; on a shared one they move together when neighbours load the memory system. This is why
``dlbricks evaluate`` samples each model while its bricks are measured (a paired design).

Usage: ``python benchmarks/probes/probe_drift.py [--seconds 60]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from dlbricks.generators import collect_system_info


def _session(nodes: list, inputs: list, outputs: list, initializers: list) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "probe", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _median_s(session: ort.InferenceSession, feeds: dict, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, {info.physical_cores} cores, onnxruntime {info.onnxruntime_version}")
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    weight = numpy_helper.from_array(rng.standard_normal((768, 3072)).astype(np.float32), "w")
    matmul = _session([helper.make_node("MatMul", ["x", "w"], ["y"])],
                      [helper.make_tensor_value_info("x", f32, [128, 768])],
                      [helper.make_tensor_value_info("y", f32, [128, 3072])], [weight])
    add = _session([helper.make_node("Add", ["a", "b"], ["y"])],
                   [helper.make_tensor_value_info(n, f32, [8, 1024, 1024]) for n in "ab"],
                   [helper.make_tensor_value_info("y", f32, [8, 1024, 1024])], [])
    x = {"x": rng.standard_normal((128, 768)).astype(np.float32)}
    ab = {n: np.ones((8, 1024, 1024), np.float32) for n in "ab"}
    matmuls, adds = [], []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        matmuls.append(_median_s(matmul, x, 60))
        adds.append(_median_s(add, ab, 10))
        print(f"{time.strftime('%H:%M:%S')} matmul {matmuls[-1] * 1e6:8.1f} us  add 32 MiB {adds[-1] * 1e3:6.2f} ms",
              flush=True)
        time.sleep(1.0)
    print(f"matmul {min(matmuls) * 1e3:.2f}..{max(matmuls) * 1e3:.2f} ms ({max(matmuls) / min(matmuls):.2f}x); "
          f"add {min(adds) * 1e3:.2f}..{max(adds) * 1e3:.2f} ms ({max(adds) / min(adds):.2f}x)")


if __name__ == "__main__":
    main()
