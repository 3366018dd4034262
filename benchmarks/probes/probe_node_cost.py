"""Does a one-node brick cost more, beyond the floor, than its node inside a model? Tiny tensors.

dlbricks subtracts the per-call floor (a call with no node, extrapolated from a one-node model and
a chain of nodes, :mod:`dlbricks.generators.floor`) from every brick and adds it once per model.
For models of a few microseconds a layer (ncf_ml20m, dlrm_criteo_kaggle) what is left of a brick
must equal its node's cost inside the model to within a tenth of a microsecond. This probe times,
with raw onnxruntime sessions and IOBinding (1 thread, optimizations off, tensors of 64 floats):

- one-node models (Identity, Relu, Add of a constant, Add of two inputs, with an unused third input,
  Concat of two inputs), the bricks' shapes;
- chains of 1 and 33 Relus and of 1 and 33 Adds of a constant, whose time per further node is a
  node's cost inside a model;
- a chain of 33 nodes that cycles through eight unary kernels (:data:`MIXED`), against the sum of
  their one-node bricks: what a node pays for running a kernel other than the one before it;

and prints each brick less the zero-node floor beside the chain's cost per node.

Usage: ``python benchmarks/probes/probe_node_cost.py [--size 64] [--calls 5000]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def _model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[str], size: int,
           inits: Sequence[onnx.TensorProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "probe", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [size])
                                                     for n in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _chain(op: str, nodes: int, size: int, const: onnx.TensorProto | None) -> onnx.ModelProto:
    chain, prev = [], "x"
    for i in range(nodes):
        out = "y" if i == nodes - 1 else f"t{i}"
        chain.append(helper.make_node(op, [prev, const.name] if const is not None else [prev], [out]))
        prev = out
    return _model(chain, ["x"], size, [const] if const is not None else [])


#: The kernels the mixed chain cycles through.
MIXED = ("Relu", "Sigmoid", "Neg", "Abs", "Tanh", "Floor", "Ceil", "Softsign")


def _mixed_chain(nodes: int, size: int) -> onnx.ModelProto:
    """A chain of ``nodes`` unary nodes, each a kernel other than the one before it (:data:`MIXED`)."""
    chain, prev = [], "x"
    for i in range(nodes):
        out = "y" if i == nodes - 1 else f"t{i}"
        chain.append(helper.make_node(MIXED[i % len(MIXED)], [prev], [out]))
        prev = out
    return _model(chain, ["x"], size)


def _bound(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
    """One bound run of ``model`` (1 thread, optimizations off) as a call."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    for output in session.get_outputs():
        binding.bind_output(output.name)
    return lambda: session.run_with_iobinding(binding)


def time_calls(models: Mapping[str, tuple[onnx.ModelProto, Mapping[str, np.ndarray]]], calls: int,
               repeats: int = 15) -> dict[str, float]:
    """Each model's least mean time of ``calls`` bound runs, in microseconds, the models taken in
    turn ``repeats`` times (the machine's drift meets all alike)."""
    runs = {name: _bound(model, feeds) for name, (model, feeds) in models.items()}
    best = dict.fromkeys(runs, float("inf"))
    for run in runs.values():
        for _ in range(calls // 10):
            run()
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter_ns()
            for _ in range(calls):
                run()
            best[name] = min(best[name], (time.perf_counter_ns() - start) / calls / 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="elements of every tensor")
    parser.add_argument("--calls", type=int, default=5000, help="timed calls per repeat")
    args = parser.parse_args()
    n, calls = args.size, args.calls
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    const = numpy_helper.from_array(np.random.default_rng(1).random(n, dtype=np.float32), "c")
    one, two = {"x": x}, {"x": x, "x2": x}
    add = helper.make_node("Add", ["x", "x2"], ["y"])
    models = {
        "Relu x1": (_chain("Relu", 1, n, None), one), "Relu x33": (_chain("Relu", 33, n, None), one),
        "Add x1": (_chain("Add", 1, n, const), one), "Add x33": (_chain("Add", 33, n, const), one),
        "Identity": (_model([helper.make_node("Identity", ["x"], ["y"])], ["x"], n), one),
        "Add of two inputs": (_model([add], ["x", "x2"], n), two),
        "Add, unused third input": (_model([add], ["x", "x2", "x3"], n), {**two, "x3": x}),
        "Concat of two inputs": (_model([helper.make_node("Concat", ["x", "x2"], ["y"], axis=0)], ["x", "x2"], n),
                                 two),
    }
    models["mixed x33"] = (_mixed_chain(33, n), one)
    models.update({f"{op} brick": (_chain(op, 1, n, None), one) for op in MIXED})
    t = time_calls(models, calls)
    per_node = {op: (t[f"{op} x33"] - t[f"{op} x1"]) / 32 for op in ("Relu", "Add")}
    floor = t["Relu x1"] - per_node["Relu"]
    bricks = {"Identity": (t["Identity"], None), "Relu": (t["Relu x1"], "Relu"),
              "Add of a constant": (t["Add x1"], "Add"), "Add of two inputs": (t["Add of two inputs"], "Add"),
              "Add, unused third input": (t["Add, unused third input"], "Add"),
              "Concat of two inputs": (t["Concat of two inputs"], None)}
    print(f"{n} floats, 1 thread, optimizations off; zero-node floor {floor:.3f} us "
          f"(one Relu {t['Relu x1']:.3f} us less {per_node['Relu']:.3f} us per further Relu)")
    print(f"  {'brick':26s} {'call us':>8s} {'less floor':>10s} {'in a chain':>10s} {'ratio':>6s}")
    for name, (call, op) in bricks.items():
        in_chain = per_node.get(op) if op else None
        ratio = f"{(call - floor) / in_chain:6.2f}" if in_chain else "     -"
        chain = f"{in_chain:10.3f}" if in_chain else "         -"
        print(f"  {name:26s} {call:8.3f} {call - floor:10.3f} {chain} {ratio}")
    bricks_sum = sum(t[f"{MIXED[i % len(MIXED)]} brick"] - floor for i in range(33))
    print(f"mixed chain of 33 kernels in turn: {t['mixed x33'] - floor:.3f} us less the floor; its nodes' "
          f"bricks less the floor, summed: {bricks_sum:.3f} us; {(t['mixed x33'] - floor - bricks_sum) / 33:+.3f} "
          "us per node")


if __name__ == "__main__":
    main()
