"""Why does a transformer's FFN down-projection run slower inside its model than as a brick?

``dlbricks validate bert_ts.onnx --per-brick`` (the export corpus's torch.onnx BERT) put the
down-projection MatMul (128x1024 by 1024x256) at 0.82-0.92 of its in-model time as a brick, and the
up-projection at 0.95-1.02. Inside the model the down-projection follows the five nodes of torch's
exact Gelu (Div, Erf, Add, Mul, Mul), each writing a fresh 512 KiB tensor, 2.5 MiB in all against
a 1 MiB L2. This probe, with raw onnxruntime sessions and IOBinding (1 thread, optimizations off),
times the down-projection:

- in its region: the Gelu chain and the MatMul as one model, less the Gelu chain alone;
- as a brick run again and again;
- as a brick run right after the Gelu chain (its dirty intermediates in the cache), on an input of
  its own, and on the very tensor the chain wrote;
- as a brick run right after a model that reads as many bytes and writes nothing.

Each variant is timed in rounds taken in turn, so that the machine's drift meets all alike, and
the medians are printed as ratios to the in-region time.

Usage: ``python benchmarks/probes/probe_ffn_context.py [--rounds 7] [--runs 200]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper, numpy_helper

TOKENS, HIDDEN, FFN = 128, 256, 1024


def _model(nodes: list, inputs: list, outputs: list, initializers: list) -> ModelProto:
    graph = helper.make_graph(nodes, "probe", inputs, outputs, initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _tensor(name: str, shape: list[int]) -> object:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _gelu_nodes(x: str, out: str) -> tuple[list, list]:
    """torch.onnx's exact Gelu: x * (erf(x / sqrt 2) + 1) * 0.5."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("Div", [x, "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", [x, "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], [out])]
    return nodes, consts


def _models(rng: np.random.Generator) -> dict[str, ModelProto]:
    bound = 1 / np.sqrt(FFN)
    w2 = numpy_helper.from_array(rng.uniform(-bound, bound, (FFN, HIDDEN)).astype(np.float32), "w2")
    gelu, consts = _gelu_nodes("h", "g")
    down = helper.make_node("MatMul", ["g", "w2"], ["y"])
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    reader = helper.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=0)
    return {
        "region": _model([*gelu, down], [_tensor("h", [TOKENS, FFN])], [_tensor("y", [TOKENS, HIDDEN])], [*consts, w2]),
        "gelu": _model(gelu, [_tensor("h", [TOKENS, FFN])], [_tensor("g", [TOKENS, FFN])], consts),
        "brick": _model([down], [_tensor("g", [TOKENS, FFN])], [_tensor("y", [TOKENS, HIDDEN])], [w2]),
        "reader": _model([reader], [_tensor("r", [5, TOKENS, FFN])], [_tensor("s", [TOKENS, FFN])], [axes]),
    }


def _bound(model: ModelProto, feeds: dict[str, np.ndarray]) -> tuple[ort.InferenceSession, ort.IOBinding]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value))
    for out in session.get_outputs():
        binding.bind_output(out.name)
    session.run_with_iobinding(binding)
    return session, binding


def _timed(session: ort.InferenceSession, binding: ort.IOBinding, runs: int,
           before: tuple[ort.InferenceSession, ort.IOBinding] | None = None) -> float:
    """Median seconds of one run, each after an untimed run of ``before`` where given."""
    times = []
    for _ in range(runs):
        if before is not None:
            before[0].run_with_iobinding(before[1])
        t0 = time.perf_counter_ns()
        session.run_with_iobinding(binding)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    models = _models(rng)
    h = rng.standard_normal((TOKENS, FFN)).astype(np.float32)
    g = (h * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2))) * 0.5).astype(np.float32)
    region, gelu = _bound(models["region"], {"h": h}), _bound(models["gelu"], {"h": h})
    brick = _bound(models["brick"], {"g": g})
    reader = _bound(models["reader"], {"r": rng.standard_normal((5, TOKENS, FFN)).astype(np.float32)})
    fed = _bound(models["brick"], {"g": g})
    fed[1].bind_ortvalue_input("g", gelu[1].get_outputs()[0])  # the chain's own output buffer
    results: dict[str, list[float]] = {k: [] for k in ("in region", "brick", "after Gelu", "on its output",
                                                       "after reader")}
    for _ in range(args.rounds):
        whole, chain = _timed(*region, args.runs), _timed(*gelu, args.runs)
        results["in region"].append(whole - chain)
        results["brick"].append(_timed(*brick, args.runs))
        results["after Gelu"].append(_timed(*brick, args.runs, before=gelu))
        results["on its output"].append(_timed(*fed, args.runs, before=gelu))
        results["after reader"].append(_timed(*brick, args.runs, before=reader))
    reference = statistics.median(results["in region"])
    print(f"down-projection {TOKENS}x{FFN} by {FFN}x{HIDDEN}, 1 thread, {args.rounds} rounds of {args.runs} runs")
    for name, values in results.items():
        med = statistics.median(values)
        print(f"  {name:14s} {1e6 * med:8.1f} us  {med / reference:5.3f} of in region  "
              f"(rounds {1e6 * min(values):.1f}-{1e6 * max(values):.1f} us)")


if __name__ == "__main__":
    main()
