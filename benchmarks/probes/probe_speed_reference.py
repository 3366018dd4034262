"""Can a reference kernel timed beside a model take the machine's swings out of its time?

Times, in turn about once a second for ``--seconds``, a compute-bound reference (a 256x512 by
512x512 MatMul), a memory-bound reference (an Add of two 8 MiB tensors) and each of ``--models``
(zoo models, whole), all single-threaded with optimizations off. Each window keeps the median of a
few runs of each. It prints, per model, the spread of its raw window medians (90th over 10th
percentile) beside the spread of its time divided by each reference and by their geometric mean,
and the correlation of the logarithms. A reference that tracks the machine narrows the spread; one
that does not leaves it or widens it.

Usage: ``python benchmarks/probes/probe_speed_reference.py [--seconds 120] [--models mobilenet_v2_1.0,resnet18_v1]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper, numpy_helper

from dlbricks import model_zoo
from dlbricks.generators import collect_system_info


def _session(model: ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _one_node(op: str, inputs: dict[str, list[int]], out: list[int], weights: list) -> ModelProto:
    f32 = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node(op, [*inputs, *(w.name for w in weights)], ["y"])], "ref",
                              [helper.make_tensor_value_info(n, f32, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info("y", f32, out)], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(session: ort.InferenceSession, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in arg.shape]
        if "int" in arg.type:
            feeds[arg.name] = np.zeros(shape, np.int64)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _times_s(session: ort.InferenceSession, feeds: dict, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return times


def _spread(values: list[float]) -> float:
    q = np.percentile(values, [10, 90])
    return float(q[1] / q[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--models", default="mobilenet_v2_1.0,shufflenet_v2_x1_0,resnet18_v1")
    args = parser.parse_args()
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, {info.physical_cores} cores, onnxruntime {info.onnxruntime_version}")
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")
    sessions = {
        "compute": _session(_one_node("MatMul", {"x": [256, 512]}, [256, 512], [weight])),
        "memory": _session(_one_node("Add", {"a": [2, 1024, 1024], "b": [2, 1024, 1024]}, [2, 1024, 1024], [])),
    }
    names = [m for m in args.models.split(",") if m]
    for name in names:
        sessions[name] = _session(model_zoo.build(name))
    feeds = {k: _feeds(s, rng) for k, s in sessions.items()}
    runs = {"compute": 15, "memory": 15, **{n: 7 for n in names}}
    for k, s in sessions.items():  # warm up
        _times_s(s, feeds[k], 2)
    windows: dict[str, list[float]] = {k: [] for k in sessions}
    every: dict[str, list[list[float]]] = {k: [] for k in sessions}
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for k, s in sessions.items():
            every[k].append(_times_s(s, feeds[k], runs[k]))
            windows[k].append(statistics.median(every[k][-1]))
        time.sleep(0.2)
    comp, mem = np.array(windows["compute"]), np.array(windows["memory"])
    both = np.sqrt(comp * mem)
    print(f"{len(comp)} windows; compute reference {_spread(list(comp)):.3f}x, memory reference {_spread(list(mem)):.3f}x "
          "(90th / 10th percentile of the window medians)")
    print(f"  {'model':22s} {'median ms':>9s} {'raw':>7s} {'/compute':>9s} {'/memory':>8s} {'/both':>7s}"
          f" {'r(compute)':>10s} {'r(memory)':>9s}")
    for name in names:
        t = np.array(windows[name])
        r_c = float(np.corrcoef(np.log(t), np.log(comp))[0, 1])
        r_m = float(np.corrcoef(np.log(t), np.log(mem))[0, 1])
        print(f"  {name:22s} {np.median(t) * 1e3:9.2f} {_spread(list(t)):6.3f}x {_spread(list(t / comp)):8.3f}x "
              f"{_spread(list(t / mem)):7.3f}x {_spread(list(t / both)):6.3f}x {r_c:10.2f} {r_m:9.2f}")
    print("spread (90th / 10th percentile over windows) of each window's median, 10th percentile and least run:")
    for name in sessions:
        rows = every[name]
        cells = [_spread([float(stat(w)) for w in rows]) for stat in (np.median, lambda v: np.percentile(v, 10), np.min)]
        print(f"  {name:22s} " + " ".join(f"{c:7.3f}x" for c in cells))
    print("each statistic of all runs in the first half of the probe over the same in the second half,")
    print("and in the odd windows over the even ones (how reproducible each statistic is):")
    print(f"  {'model':22s} {'median':>15s} {'10th pct':>15s} {'min':>15s}")
    for name in sessions:
        rows = every[name]
        halves = ([x for w in rows[:len(rows) // 2] for x in w], [x for w in rows[len(rows) // 2:] for x in w])
        parity = ([x for w in rows[0::2] for x in w], [x for w in rows[1::2] for x in w])
        cells = []
        for stat in (np.median, lambda v: np.percentile(v, 10), np.min):
            cells.append(f"{stat(halves[0]) / stat(halves[1]):7.3f} {stat(parity[0]) / stat(parity[1]):7.3f}")
        print(f"  {name:22s} " + " ".join(cells))


if __name__ == "__main__":
    main()

