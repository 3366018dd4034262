"""Exploratory probe for the benchmarking-cost issue: one onnxruntime session holding all of a zoo
model's unique bricks side by side, asked for one brick's outputs with
``RunOptions.only_execute_path_to_fetches``, against one session per brick.

Usage::

    python benchmarks/probes/probe_combined_session.py MODEL

Printed: the time to create the sessions each way, and each brick's median call both ways (15 calls
after 3, alternating), summed; whether the combined session accepts a brick's own inputs alone.
"""
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a zoo model's name")
    main(parser.parse_args().model)
