"""How fast does a recurrent step read its weights, against a matrix-vector product of their size?

For LSTMs of several widths (one direction, batch 1), times the layer over 1 and over 9 steps and
takes a step as the difference over 8; beside it, a MatMul of one row by the step's recurrent
weights (``hidden x 4 hidden``), the loop that the calibrated matrix-vector products of ``dlbricks
calibrate`` run. Each is timed warm (run again and again), in rounds that take the cases in turn,
single-threaded, optimizations off; medians over the rounds. The predictor charges a step whose
weights fit in the last-level cache at the calibrated matrix-vector rate of their size
(``LatencyPredictor.fit(step_rates=...)``); this probe shows how close that loop is.

Usage: ``python benchmarks/probes/probe_recurrent_step.py [--hidden 256,650,1024,1500] [--rounds 9]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from dlbricks.generators import collect_system_info


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _model(node: onnx.NodeProto, x_shape: list[int], weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(value, name) for name, value in weights.items()]
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def lstm_case(steps: int, hidden: int, rng: np.random.Generator) -> tuple[ort.InferenceSession, dict]:
    """An LSTM of ``hidden`` units over ``steps`` steps, its feed."""
    weights = {name: (rng.standard_normal((1, 4 * hidden, hidden)) * 0.05).astype(np.float32) for name in "WR"}
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=hidden)
    feed = {"x": rng.standard_normal((steps, 1, hidden)).astype(np.float32)}
    return _session(_model(node, [steps, 1, hidden], weights)), feed


def matvec_case(hidden: int, rng: np.random.Generator) -> tuple[ort.InferenceSession, dict]:
    """One row by ``hidden x 4 hidden`` weights, its feed."""
    weights = {"W": (rng.standard_normal((hidden, 4 * hidden)) * 0.05).astype(np.float32)}
    node = helper.make_node("MatMul", ["x", "W"], ["y"])
    feed = {"x": rng.standard_normal((1, hidden)).astype(np.float32)}
    return _session(_model(node, [1, hidden], weights)), feed


def _time(session: ort.InferenceSession, feed: dict, seconds: float) -> float:
    """Mean seconds of a run over ``seconds`` of runs, after one untimed run."""
    session.run(None, feed)
    start, runs = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        session.run(None, feed)
        runs += 1
    return (time.perf_counter() - start) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hidden", default="256,650,1024,1500", help="comma-separated LSTM widths")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of every case in turn")
    parser.add_argument("--seconds", type=float, default=0.05, help="seconds of runs per case and round")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    widths = [int(h) for h in args.hidden.split(",")]
    cases = {(h, kind): case for h in widths for kind, case in
             (("one", lstm_case(1, h, rng)), ("nine", lstm_case(9, h, rng)), ("matvec", matvec_case(h, rng)))}
    times: dict[tuple[int, str], list[float]] = {key: [] for key in cases}
    for _ in range(args.rounds):
        for key, (session, feed) in cases.items():
            times[key].append(_time(session, feed, args.seconds))
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, onnxruntime {ort.__version__}, 1 thread, optimizations off, "
          f"{args.rounds} rounds")
    print(f"{'hidden':>6}  {'R MB':>6}  {'step us':>8}  {'GB/s':>6}  {'matvec us':>9}  {'GB/s':>6}  {'step/matvec':>11}")
    for h in widths:
        med = {kind: float(np.median(times[(h, kind)])) for kind in ("one", "nine", "matvec")}
        step, r_bytes = (med["nine"] - med["one"]) / 8, 16 * h * h
        print(f"{h:>6}  {r_bytes / 1e6:>6.2f}  {step * 1e6:>8.1f}  {r_bytes / step / 1e9:>6.1f}  "
              f"{med['matvec'] * 1e6:>9.1f}  {r_bytes / med['matvec'] / 1e9:>6.1f}  {step / med['matvec']:>11.2f}")


if __name__ == "__main__":
    main()
