"""How good is the harness on this machine? Overhead, efficiency and stability.

Prints three figures with the machine they were taken on:

1. overhead: the per-call time the harness reports for an Identity brick, divided by a bare
   ``session.run_with_iobinding`` loop in the same process (target <= 1.10);
2. efficiency: the wall time spent measuring 30 bricks in a worker (worker start, floor, model
   transfer, session creation and warm-up included) divided by the sum of their timed runs
   (target <= 1.5);
3. stability: the same 30 bricks measured in two separate worker processes, single-threaded: the
   share whose medians agree within 3% (target >= 90%). Both workers live at once and each brick is
   measured in one then the other, so that the machine's drift over a pass (several percent here)
   does not pass for a difference between workers; the two sequential passes and a same-worker
   control are printed too.

The 30 bricks are single-node models of ResNet-50, MobileNet and BERT-base sizes, built inline.

Usage: ``python benchmarks/bench_harness.py [--quick] [--threads N]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlbricks.generators import Budget, Measurement, OrtConfig, collect_system_info
from dlbricks.generators.harness import measure_prepared
from dlbricks.generators.inputs import VALUE_RANGES_KEY
from dlbricks.generators.items import floor_model
from dlbricks.generators.ort import OrtBackend
from dlbricks.generators.runner import Runner

AGREE = 0.03
RNG = np.random.default_rng(0)


def _weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.05).astype(np.float32), name)


def _single(
    op: str,
    inputs: dict[str, tuple],
    weights: dict[str, tuple] | None = None,
    ranges: dict | None = None,
    **attrs,
) -> onnx.ModelProto:
    """A one-node model whose graph inputs are ``inputs`` and initializers ``weights``."""
    weights = weights or {}
    int_inputs = set(ranges or {})
    value_infos = [
        helper.make_tensor_value_info(n, TensorProto.INT64 if n in int_inputs else TensorProto.FLOAT, s)
        for n, s in inputs.items()
    ]
    inits = [w if isinstance(w, onnx.TensorProto) else _weight(n, w) for n, w in weights.items()]
    names = list(inputs) + list(weights)
    if op == "Gather":
        names = list(weights) + list(inputs)
    node = helper.make_node(op, names, ["y"], **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], f"{op}", value_infos, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if ranges:
        model.metadata_props.add(key=VALUE_RANGES_KEY, value=str(ranges).replace("'", '"'))
    return model


def _conv(cin: int, cout: int, hw: int, k: int, stride: int = 1, group: int = 1) -> onnx.ModelProto:
    return _single(
        "Conv",
        {"x": (1, cin, hw, hw)},
        {"w": (cout, cin // group, k, k), "b": (cout,)},
        pads=[k // 2] * 4,
        strides=[stride, stride],
        group=group,
    )


def _bn(c: int, hw: int) -> onnx.ModelProto:
    params = {
        "scale": (c,),
        "bias": (c,),
        "mean": (c,),
        "var": numpy_helper.from_array(np.ones(c, np.float32), "var"),
    }
    return _single("BatchNormalization", {"x": (1, c, hw, hw)}, params)


def thirty_bricks() -> list[onnx.ModelProto]:
    """30 varied single-node bricks of realistic CNN and transformer sizes (batch 1)."""
    seq, hidden, heads, ffn = 128, 768, 12, 3072
    return [
        # ResNet-50 / MobileNet
        _conv(3, 64, 224, 7, stride=2),
        _conv(64, 64, 56, 3),
        _conv(64, 256, 56, 1),
        _conv(256, 64, 56, 1),
        _conv(128, 128, 28, 3),
        _conv(512, 128, 28, 1),
        _conv(256, 256, 14, 3),
        _conv(512, 512, 7, 3),
        _conv(144, 144, 56, 3, group=144),
        _bn(64, 112),
        _bn(256, 56),
        _single("Relu", {"x": (1, 64, 112, 112)}),
        _single("Relu", {"x": (1, 256, 56, 56)}),
        _single("MaxPool", {"x": (1, 64, 112, 112)}, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4),
        _single("GlobalAveragePool", {"x": (1, 2048, 7, 7)}),
        _single("Add", {"a": (1, 256, 56, 56), "b": (1, 256, 56, 56)}),
        _single("Gemm", {"x": (1, 2048)}, {"w": (1000, 2048), "c": (1000,)}, transB=1),
        _single("Clip", {"x": (1, 96, 56, 56)}),
        # BERT-base, sequence 128
        _single("Gather", {"ids": (1, seq)}, {"table": (30522, hidden)}, ranges={"ids": [0, 30522]}),
        _single("MatMul", {"x": (1, seq, hidden)}, {"w": (hidden, hidden)}),
        _single("MatMul", {"x": (1, seq, hidden)}, {"w": (hidden, ffn)}),
        _single("MatMul", {"x": (1, seq, ffn)}, {"w": (ffn, hidden)}),
        _single("MatMul", {"q": (1, heads, seq, 64), "k": (1, heads, 64, seq)}),
        _single("MatMul", {"p": (1, heads, seq, seq), "v": (1, heads, seq, 64)}),
        _single("Softmax", {"x": (1, heads, seq, seq)}, axis=-1),
        _single("Add", {"a": (1, seq, hidden), "b": (1, seq, hidden)}),
        _single("LayerNormalization", {"x": (1, seq, hidden)}, {"g": (hidden,), "b": (hidden,)}, axis=-1),
        _single("Erf", {"x": (1, seq, ffn)}),
        _single("Mul", {"a": (1, seq, ffn), "b": (1, seq, ffn)}),
        _single("Transpose", {"x": (1, seq, heads, 64)}, perm=[0, 2, 1, 3]),
    ]


def zoo_bricks(count: int = 30) -> list[Any]:
    """``count`` unique bricks of ResNet-50, MobileNet-v2 and BERT-base, spread over op types."""
    import dlbricks
    from dlbricks.model_zoo import build

    bricks: dict[str, Any] = {}
    for name in ("resnet50_v1", "mobilenet_v2_1.0", "bert_base"):
        bricks.update(dlbricks.decompose(dlbricks.load_model(build(name), name=name)).bricks)
    ordered = sorted(bricks.values(), key=lambda b: (b.op_type, b.signature))
    step = len(ordered) / count
    return [ordered[int(i * step)] for i in range(count)]


def bare_loop_per_call(prepared, calls: int, repeats: int) -> float:
    """Median per-call seconds of a bare ``run_with_iobinding`` loop."""
    run, binding = prepared.session.run_with_iobinding, prepared.binding
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            run(binding)
        per_call.append((time.perf_counter_ns() - t0) / calls / 1e9)
    return statistics.median(per_call)


def overhead(config: OrtConfig, budget: Budget, rounds: int = 5) -> tuple[float, float, float]:
    """(harness per-call, bare per-call, ratio) for the Identity brick, interleaved rounds."""
    prepared = OrtBackend().prepare(floor_model(), config)
    harness, bare = [], []
    for _ in range(rounds):
        bare.append(bare_loop_per_call(prepared, calls=1000, repeats=max(20, int(budget.min_time * 500))))
        m, _ = measure_prepared(prepared, "identity", "onnxruntime", config, budget)
        harness.append(m.median_s)
    prepared.close()
    h, b = statistics.median(harness), statistics.median(bare)
    return h, b, h / b


def measure_all(
    models: list[Any], config: OrtConfig, budget: Budget, *, control: bool = False
) -> tuple[list[Measurement], float, float, list[Measurement]]:
    """Measure ``models`` in one fresh worker.

    Returns the measurements, the wall seconds of that pass (worker start and floor included), the
    seconds of timed runs, and, with ``control``, a second pass in the same worker (else empty).
    """
    start = time.perf_counter()
    timed = 0.0
    results = []
    with Runner(config=config, budget=budget) as runner:
        for model in models:
            measurement, timing = runner.measure_detailed(model)
            results.append(measurement)
            timed += timing.timed_s if timing is not None else 0.0
        wall = time.perf_counter() - start
        again = [runner.measure(model) for model in models] if control else []
    return results, wall, timed, again


def measure_interleaved(
    models: list[Any], config: OrtConfig, budget: Budget
) -> tuple[list[Measurement], list[Measurement]]:
    """Measure ``models`` in two live workers, each brick in one then the other (order alternating).

    The machine drifts by several percent over the minutes of a pass; measuring a brick in both
    workers back to back compares the workers, not two moments of the machine.
    """
    first: list[Measurement] = []
    second: list[Measurement] = []
    with Runner(config=config, budget=budget) as one, Runner(config=config, budget=budget) as two:
        for i, model in enumerate(models):
            pair = (one, two) if i % 2 == 0 else (two, one)
            results = {id(runner): runner.measure(model) for runner in pair}
            first.append(results[id(one)])
            second.append(results[id(two)])
    return first, second


def agreement(first: list[Measurement], second: list[Measurement], names: list[str]) -> str:
    """'k/n = p% ... within 3%' for the medians of two passes, with the worst three bricks."""
    diffs = [
        (abs(a.median_s - b.median_s) / min(a.median_s, b.median_s), f"#{i} {name}")
        for i, (a, b, name) in enumerate(zip(first, second, names, strict=True))
        if a.ok and b.ok
    ]
    agree = sum(d <= AGREE for d, _ in diffs)
    worst = ", ".join(f"{name} {d:.1%}" for d, name in sorted(diffs, reverse=True)[:3])
    median = statistics.median(d for d, _ in diffs)
    return (
        f"{agree}/{len(diffs)} = {agree / len(diffs):.0%} of medians agree within {AGREE:.0%}; "
        f"median difference {median:.2%}; worst {worst}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="use Budget.quick() (smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="intra_op_num_threads (default 1)")
    parser.add_argument("--inline", action="store_true",
                        help="30 inline single-node models instead of 30 zoo bricks")
    args = parser.parse_args()
    budget = Budget.quick() if args.quick else Budget()
    config = OrtConfig(intra_op_num_threads=args.threads)

    info = collect_system_info()
    caches = dict(info.cache_bytes)
    print(
        f"machine: {info.cpu_model}, {info.physical_cores} physical / {info.logical_cores} logical "
        f"cores, L3 {caches.get('L3', 0) >> 20} MiB, {info.os_release}, onnxruntime "
        f"{info.onnxruntime_version}, fingerprint {info.fingerprint}"
    )
    print(f"config: {config.to_dict()} ({config.config_id}); budget: {budget.to_dict()}")

    h, b, ratio = overhead(config, budget)
    print(
        f"(1) overhead: harness {h * 1e6:.3f} us/call, bare run_with_iobinding loop "
        f"{b * 1e6:.3f} us/call -> ratio {ratio:.3f} (target <= 1.10)"
    )

    models: list[Any] = thirty_bricks() if args.inline else zoo_bricks()
    names = [m.graph.name if isinstance(m, onnx.ModelProto) else m.op_type for m in models]
    first, wall, timed, again = measure_all(models, config, budget, control=True)
    item_wall = sum(m.wall_time_s for m in first)
    failed = [m.error for m in first if not m.ok]
    print(
        f"(2) efficiency: {len(models)} bricks, wall {wall:.2f} s (per-item sum {item_wall:.2f} s) "
        f"/ timed runs {timed:.2f} s -> {wall / timed:.3f} overall, {item_wall / timed:.3f} "
        f"per item (target <= 1.5); converged {sum(m.converged for m in first)}/{len(first)}; "
        f"floor {first[0].floor_s * 1e6:.3f} us" + (f"; FAILED: {failed}" if failed else "")
    )
    second, _, _, _ = measure_all(models, config, budget)
    a, b = measure_interleaved(models, config, budget)
    print(f"(3) stability, two worker processes, interleaved: {agreement(a, b, names)} (target >= 90%)")
    print(f"    two worker processes, one pass after the other: {agreement(first, second, names)}")
    print(f"    control, same worker, two passes: {agreement(first, again, names)}")
    medians = " ".join(f"{n}={m.median_s * 1e6:.1f}" for n, m in zip(names, first, strict=True) if m.ok)
    print(f"medians (us): {medians}")


if __name__ == "__main__":
    main()
