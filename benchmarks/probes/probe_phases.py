"""How long the machine holds one speed: a small MatMul timed call after call, summarized by window.

Usage::

    python benchmarks/probes/probe_phases.py [--size 256] [--seconds 20]

One onnxruntime session (1 thread) of an ``N x N`` MatMul runs back to back for ``--seconds``.
Printed: the calls' median, 10th and 90th percentiles; the autocorrelation of their log times at
several lags; each second's median; and, for windows of 5 ms to 1 s, how far apart two neighbouring
windows' medians are (the standard deviation of their log ratio). Where neighbouring windows of a
round's length agree and windows a few seconds apart do not, a round of that length pairs what
it holds, and measurements taken seconds apart do not.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def _session(n: int) -> ort.InferenceSession:
    w = helper.make_tensor("w", TensorProto.FLOAT, [n, n], np.random.default_rng(0).random(n * n, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _window_medians(times_s: np.ndarray, window_s: float) -> np.ndarray:
    labels = (np.cumsum(times_s) / window_s).astype(int)
    return np.array([np.median(times_s[labels == k]) for k in np.unique(labels)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    session = _session(args.size)
    feed = {"a": np.random.default_rng(1).random((args.size, args.size), dtype=np.float32)}
    for _ in range(50):
        session.run(None, feed)
    times, end = [], time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    t = np.asarray(times)
    us = 1e6 * t
    p10, p50, p90 = np.percentile(us, [10, 50, 90])
    print(f"{len(t)} calls of a {args.size}x{args.size} MatMul: median {p50:.0f} us, p10 {p10:.0f}, p90 {p90:.0f} "
          f"(p90/p10 {p90 / p10:.2f})")
    logs = np.log(t)
    lags = [lag for lag in (1, 10, 100, 1000) if lag < len(t)]
    print("autocorrelation of log times: " + ", ".join(
        f"lag {lag} {np.corrcoef(logs[:-lag], logs[lag:])[0, 1]:.2f}" for lag in lags))
    print("each second's median, us: " + " ".join(f"{1e6 * m:.0f}" for m in _window_medians(t, 1.0)))
    for window in (0.005, 0.04, 0.1, 0.3, 1.0):
        medians = _window_medians(t, window)
        if len(medians) > 2:
            print(f"windows of {1e3 * window:.0f} ms: neighbours' log ratio sd {np.log(medians[1:] / medians[:-1]).std():.3f}, "
                  f"three apart {np.log(medians[3:] / medians[:-3]).std():.3f}")


if __name__ == "__main__":
    main()
