"""Exploratory probe for the benchmarking-cost issue: one onnxruntime session holding all of a zoo
model's unique bricks side by side, asked for one brick's outputs with
``RunOptions.only_execute_path_to_fetches``, against one session per brick.

Usage::

    python benchmarks/probes/probe_combined_session.py MODEL

Printed: the time to create the sessions each way, and each brick's median call both ways (15 calls
after 3, alternating), summed; whether the combined session accepts a brick's own inputs alone. Then
the combined session run whole (every brick, one call) with onnxruntime's profiler on: each brick's
kernels' median time per call from the profile (``*_kernel_time`` events) against its own session's
median call less the one-node floor, and what one profiled call of everything costs.
"""
import json
import os
import argparse, time
import numpy as np, onnx, onnxruntime as ort
from onnx import compose, helper
import dlbricks
from dlbricks.model_zoo import build


def main(name: str) -> None:
    g = dlbricks.load_model(build(name), name=name)
    dec = dlbricks.decompose(g)
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    models = [dec.bricks[k].to_onnx() for k in keys]
    so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL

    def feeds_of(m):
        init = {i.name for i in m.graph.initializer}
        out = {}
        for i in m.graph.input:
            if i.name in init: continue
            t = i.type.tensor_type
            shape = [d.dim_value for d in t.shape.dim]
            dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            out[i.name] = (np.random.rand(*shape) if dt.kind == 'f' else np.zeros(shape)).astype(dt)
        return out

    prefixed = [compose.add_prefix(m, f"b{i}_") for i, m in enumerate(models)]
    for i, m in enumerate(prefixed):  # every node named after its brick, for the profile
        for j, node in enumerate(m.graph.node):
            node.name = f"b{i}_n{j}"
    opset = models[0].opset_import
    graph = helper.make_graph(
        [n for m in prefixed for n in m.graph.node], "all",
        [x for m in prefixed for x in m.graph.input], [x for m in prefixed for x in m.graph.output],
        [x for m in prefixed for x in m.graph.initializer], value_info=[x for m in prefixed for x in m.graph.value_info])
    combined = helper.make_model(graph, opset_imports=opset, ir_version=models[0].ir_version)

    t0 = time.perf_counter()
    sessions = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]) for m in models]
    t1 = time.perf_counter()
    big = ort.InferenceSession(combined.SerializeToString(), so, providers=["CPUExecutionProvider"])
    t2 = time.perf_counter()
    print(f"{name}: {len(keys)} bricks; sessions one per brick {t1-t0:.2f} s, one combined {t2-t1:.2f} s")

    ro = ort.RunOptions(); ro.only_execute_path_to_fetches = True
    feeds = [feeds_of(m) for m in prefixed]
    allfeeds = {k: v for f in feeds for k, v in f.items()}
    outs = [[o.name for o in m.graph.output] for m in prefixed]
    ownfeeds_ok = True
    try:
        big.run(outs[0], feeds[0], ro)
    except Exception as e:
        ownfeeds_ok = False; print("own feeds only refused:", str(e)[:120])
    sep_feeds = [feeds_of(m) for m in models]
    sep_outs = [[o.name for o in m.graph.output] for m in models]

    def med(fn, n):
        for _ in range(3): fn()
        ts = []
        for _ in range(n):
            a = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - a)
        return float(np.median(ts)) / 1e3

    rows = []
    for rep in range(2):
        for i in range(len(keys)):
            a = med(lambda: sessions[i].run(sep_outs[i], sep_feeds[i]), 15)
            f = feeds[i] if ownfeeds_ok else allfeeds
            b = med(lambda: big.run(outs[i], f, ro), 15)
            rows.append((i, a, b))
    r = np.array(rows)
    sep = np.array([np.median(r[r[:, 0] == i, 1]) for i in range(len(keys))])
    comb = np.array([np.median(r[r[:, 0] == i, 2]) for i in range(len(keys))])
    d = comb - sep
    print(f"sum separate {sep.sum()/1e3:.2f} ms, combined {comb.sum()/1e3:.2f} ms; per brick combined-separate median {np.median(d):.1f} us, p10 {np.percentile(d,10):.1f}, p90 {np.percentile(d,90):.1f}; ratio median {np.median(comb/sep):.3f}")
    small = sep < 50
    print(f"bricks < 50 us: {small.sum()}, their median diff {np.median(d[small]) if small.any() else 0:.1f} us")
    profiled(combined, so, allfeeds, sep, len(keys))


def profiled(combined, so, allfeeds, sep, n_bricks: int, runs: int = 20) -> None:
    """The combined session run whole with the profiler on: each brick's kernel time per call against
    its own session's median call less the floor (a one-node Identity session's median call)."""
    from onnx import TensorProto
    po = ort.SessionOptions(); po.intra_op_num_threads = 1; po.inter_op_num_threads = 1
    po.graph_optimization_level = so.graph_optimization_level; po.execution_mode = so.execution_mode
    po.enable_profiling = True
    t0 = time.perf_counter()
    sess = ort.InferenceSession(combined.SerializeToString(), po, providers=["CPUExecutionProvider"])
    t1 = time.perf_counter()
    outs = [o.name for o in combined.graph.output]
    for _ in range(3):
        sess.run(outs, allfeeds)
    calls = []
    for _ in range(runs):
        a = time.perf_counter_ns(); sess.run(outs, allfeeds); calls.append(time.perf_counter_ns() - a)
    path = sess.end_profiling()
    events = json.load(open(path)); os.remove(path)
    per: dict[int, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            i = int(e["name"][1:e["name"].index("_")])
            per.setdefault(i, []).append(e["dur"])
    kernel = np.array([sum(per.get(i, [])) / (runs + 3) for i in range(n_bricks)])  # us per call
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    floor_model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "f", [x], [y]))
    fs = ort.InferenceSession(floor_model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    fx = {"x": np.ones(1, np.float32)}
    for _ in range(50): fs.run(None, fx)
    ft = []
    for _ in range(200):
        a = time.perf_counter_ns(); fs.run(None, fx); ft.append(time.perf_counter_ns() - a)
    floor = float(np.median(ft)) / 1e3
    own = np.maximum(sep - floor, 0.01)
    ratio = kernel / own
    print(f"profiled combined session: created in {t1-t0:.2f} s; one call of all bricks {np.median(calls)/1e6:.2f} ms "
          f"(kernels {kernel.sum()/1e3:.2f} ms), floor {floor:.1f} us")
    print(f"bricks' own calls less the floor sum to {own.sum()/1e3:.2f} ms; profiled kernels / own: median "
          f"{np.median(ratio):.3f}, p10 {np.percentile(ratio, 10):.3f}, p90 {np.percentile(ratio, 90):.3f}; "
          f"sum ratio {kernel.sum()/own.sum():.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a zoo model's name")
    main(parser.parse_args().model)
