"""What a brick's own onnxruntime session runs beyond its kernel, and what a layout reorder costs.

Layout reorders at onnxruntime's "all" level are counted once per model, not once per brick.

At ``ORT_ENABLE_ALL`` the CPU provider runs convolutions in the blocked NCHWc layout and inserts
ReorderInput/ReorderOutput where an NCHWc region begins and ends. A fused brick run alone would be its
own region, converting its input and output itself, while inside the model the neighbouring kernels
share the blocked tensor. So a brick runs as :func:`native_layout` gives it: onnxruntime's optimized
graph of the brick without the reorders at its edges, its input and output in the blocked layout.
What it still runs that its model does not (a convolution whose residual Add the model fuses into it
runs in its own session as a convolution, a reorder and an Add) is subtracted from its time: each
brick's session is profiled once (:func:`brick_session_kernels`) and every kernel but its main one
counts, as the share of the session's run that they take (:attr:`SessionKernels.leftover_share`)
times the brick's timed median: the profile then only splits the run, and the timed measurement,
taken at another moment, sets the level. The reorders of the model (the fusion plan's
``reorder_tensors``, found in the model's optimized graph) are added once per run, priced by size
(:class:`ReorderCost`), measured on this machine with the same harness in the bricks' cache state.

Both are measured where the bricks are measured and stored with them (``OrtBackend.brick_overhead_s``,
called by ``benchmarks_db.populate``; :func:`calibrate_reorder`, stored per configuration), so an
estimate needs nothing but the database.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from dlbricks import Brick
from dlbricks.bricks import SIGNATURE_KEY
from dlbricks.fusion import NCHWC_DOMAIN, REORDER_OPS
from dlbricks.inputs import random_inputs
from dlbricks.ortutil import session_options

from .api import benchmark
from .budget import Budget
from .items import floor_model
from ._ort_config import OrtConfig

__all__ = ["brick_session_kernels", "calibrate_reorder", "kernel_medians", "native_layout", "ReorderCost",
           "SessionKernels", "REORDER_SHAPES"]

_KERNEL_TIME = "_kernel_time"


def kernel_medians(events: list[dict], warmup: int) -> dict[str, tuple[str, float]]:
    """Each kernel of an onnxruntime profile (its ``*_kernel_time`` events): its op type and median
    duration in seconds after the first ``warmup`` runs, by kernel name, in run order."""
    durations: dict[str, list[float]] = defaultdict(list)
    ops: dict[str, str] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith(_KERNEL_TIME):
            kernel = name[:-len(_KERNEL_TIME)]
            durations[kernel].append(event["dur"] * 1e-6)
            ops[kernel] = event.get("args", {}).get("op_name", "")
    return {k: (ops[k], float(np.median(d[warmup:] or d))) for k, d in durations.items()}


def native_layout(model: onnx.ModelProto, threads: int = 1) -> onnx.ModelProto | None:
    """``model`` (a brick) as its model runs it at level "all" on the CPU: optimized at that level
    (onnxruntime's own optimized graph), without the NCHWc layout reorders at its edges. An input
    that a reorder took to the blocked layout is given in that layout (channels padded to the
    block), and an output that a reorder took back is left in it, so that a chain's bricks pass
    blocked tensors to each other as the model's kernels do; the reorders the model itself runs are
    priced apart (:func:`calibrate_reorder`). Its graph is already optimized: run it at level
    "disable". The brick's metadata (its signature) is kept. None where the optimized brick has no
    such reorder, or where onnxruntime cannot optimize or run it."""
    return _native(model.SerializeToString(), threads)


@functools.lru_cache(maxsize=64)  # a chain asks again for the few inputs it draws; weights stay few
def _native(data: bytes, threads: int) -> onnx.ModelProto | None:
    import onnxruntime as ort

    original = onnx.load_from_string(data)
    try:
        with tempfile.TemporaryDirectory(prefix="dlbricks-native-") as tmp:
            path = str(Path(tmp) / "optimized.onnx")
            options = session_options("all", threads, optimized_path=path)
            ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
            optimized = onnx.load(path)
    except Exception:  # noqa: BLE001 - onnxruntime raises untyped errors: the brick runs as it is
        return None
    graph = optimized.graph
    inputs, outputs = [i.name for i in graph.input], [o.name for o in graph.output]
    readers: dict[str, int] = defaultdict(int)
    for node in graph.node:
        for name in node.input:
            readers[name] += 1
    into = {n.input[0]: n for n in graph.node if n.op_type == "ReorderInput" and n.input[0] in inputs
            and readers[n.input[0]] == 1 and not _channels_last(n)}
    back = {n.output[0]: n for n in graph.node if n.op_type == "ReorderOutput" and n.output[0] in outputs
            and not _channels_last(n)}
    if not into and not back:
        return None
    block = nchwc_block()
    shapes = {into[name].output[0]: _padded(vi, block) for vi in graph.input if (name := vi.name) in into}
    shapes.update({back[name].input[0]: _padded(vi, block) for vi in graph.output if (name := vi.name) in back})
    if any(shape is None for shape in shapes.values()):
        return None
    dropped = {id(n) for n in [*into.values(), *back.values()]}
    kept = [n for n in graph.node if id(n) not in dropped]
    new_inputs = [helper.make_tensor_value_info(into[i.name].output[0], TensorProto.FLOAT, shapes[into[i.name].output[0]])
                  if i.name in into else i for i in graph.input]
    new_outputs = [helper.make_tensor_value_info(back[o.name].input[0], TensorProto.FLOAT, shapes[back[o.name].input[0]])
                   if o.name in back else o for o in graph.output]
    native = onnx.ModelProto()
    native.CopyFrom(optimized)
    del native.graph.node[:], native.graph.input[:], native.graph.output[:], native.metadata_props[:]
    native.graph.node.extend(kept)
    native.graph.input.extend(new_inputs)
    native.graph.output.extend(new_outputs)
    native.metadata_props.extend(original.metadata_props)
    return native


@functools.cache
def nchwc_block() -> int:
    """Channels in one block of onnxruntime's NCHWc layout on this CPU (8 with AVX2, 16 with
    AVX-512): what a ReorderInput pads four channels to (it takes a multiple of four)."""
    import onnxruntime as ort

    graph = helper.make_graph([helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN)], "block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)])
    session = ort.InferenceSession(model.SerializeToString(), session_options("disable"),
                                   providers=["CPUExecutionProvider"])
    return int(session.run(None, {"x": np.zeros((1, 4, 1, 1), np.float32)})[0].shape[1])


def _padded(value: onnx.ValueInfoProto, block: int) -> list[int] | None:
    """The shape of ``value`` (N, C, ...) in the blocked layout: C rounded up to ``block``; None
    where its shape is not fully known."""
    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in value.type.tensor_type.shape.dim]
    if len(dims) < 3 or min(dims) <= 0:
        return None
    return [dims[0], -(-dims[1] // block) * block, *dims[2:]]


def _channels_last(node: onnx.NodeProto) -> bool:
    return any(a.name == "channels_last" and a.i for a in node.attribute)


#: Most runs of a brick's own session, profiled and plain, that split its time into kernels; fewer for
#: slow bricks, so that each set lasts about :data:`PROFILE_TIME_S`.
PROFILE_RUNS = 40
PROFILE_TIME_S = 0.05
_WARMUP_RUNS = 3


@dataclass(frozen=True, slots=True)
class SessionKernels:
    """The kernels a brick's own session runs, in run order, with their median times (seconds), and
    the median of a plain (unprofiled) run of the same session less an empty run's."""

    kernels: tuple[tuple[str, float], ...]
    run_s: float

    @property
    def main(self) -> int:
        """Index of the brick's own kernel: the slowest that is not a layout reorder."""
        candidates = [i for i, (op, _) in enumerate(self.kernels) if op not in REORDER_OPS] or [0]
        return max(candidates, key=lambda i: self.kernels[i][1])

    @property
    def profiler_s(self) -> float:
        """What the profiler adds to each kernel's time: the kernels' sum beyond a plain run, shared."""
        if not self.kernels:
            return 0.0
        return max(0.0, sum(t for _, t in self.kernels) - self.run_s) / len(self.kernels)

    @property
    def leftover_s(self) -> float:
        """Seconds of every kernel but the main one, each less the profiler's share."""
        if not self.kernels:
            return 0.0
        main, extra = self.main, self.profiler_s
        return sum(max(0.0, t - extra) for i, (_, t) in enumerate(self.kernels) if i != main)

    @property
    def leftover_share(self) -> float:
        """:attr:`leftover_s` as a share of the plain run (0 where the run took no measurable time;
        at most 1). A profile is a few dozen runs at one moment of a machine whose speed swings from
        one second to the next; a share of the run holds across those swings where seconds do not."""
        if self.run_s <= 0.0:
            return 0.0
        return min(1.0, self.leftover_s / self.run_s)


def brick_session_kernels(brick: Brick, opt_level: str, threads: int = 1,
                          previous: Brick | None = None) -> SessionKernels:
    """Profile the brick's own session at ``opt_level`` (once per brick, context and process).

    With ``previous`` (the brick before it in its model), each run follows an untimed run of that
    brick, as the brick's timed runs do (``previous_layer``): its reorders then meet the caches that
    the brick's time was measured with, not caches warm from the run before.
    """
    return _cached_kernels(brick.signature, brick.to_bytes(), opt_level, threads,
                           None if previous is None else previous.to_bytes())


@functools.lru_cache(maxsize=8192)
def _cached_kernels(signature: str, data: bytes, opt_level: str, threads: int,
                    previous: bytes | None = None) -> SessionKernels:
    import onnxruntime as ort

    from .inputs import random_inputs as model_inputs

    brick = Brick.from_bytes(data)
    proto, level = brick.to_onnx(), opt_level
    native = native_layout(proto, threads) if opt_level == "all" else None
    if native is not None:  # as the brick is timed: in its model's layout (OrtBackend.prepare)
        proto, level = native, "disable"
    model = proto.SerializeToString()
    feeds = random_inputs(brick.inputs) if native is None else model_inputs(native)
    prime = _prime(previous, opt_level, threads)
    plain = ort.InferenceSession(model, session_options(level, threads), providers=["CPUExecutionProvider"])
    plain.run(None, feeds)
    start = time.perf_counter()
    plain.run(None, feeds)
    runs = int(min(PROFILE_RUNS, max(3, PROFILE_TIME_S / max(time.perf_counter() - start, 1e-9))))
    with tempfile.TemporaryDirectory(prefix="dlbricks-kernels-") as tmp:
        options = session_options(level, threads, profile_prefix=str(Path(tmp) / "profile"))
        profiled = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        for _ in range(_WARMUP_RUNS + runs):
            prime()
            profiled.run(None, feeds)
        with open(profiled.end_profiling()) as f:
            events = json.load(f)
    kernels = tuple(kernel_medians(events, _WARMUP_RUNS).values())
    run_s = _median_run(plain, feeds, runs, prime) - _empty_run_s(threads)
    return SessionKernels(kernels, max(run_s, 0.0))


def _prime(previous: bytes | None, opt_level: str, threads: int) -> Callable[[], object]:
    """A run of the brick before (serialized), or nothing where there is none or it cannot run."""
    import onnxruntime as ort

    if previous is None:
        return lambda: None
    brick = Brick.from_bytes(previous)
    feeds = random_inputs(brick.inputs)
    try:
        session = ort.InferenceSession(brick.to_onnx().SerializeToString(), session_options(opt_level, threads),
                                       providers=["CPUExecutionProvider"])
        session.run(None, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime raises untyped errors; profiled without it, as timed
        return lambda: None
    return lambda: session.run(None, feeds)


def _median_run(session: Any, feeds: dict[str, np.ndarray], runs: int = PROFILE_RUNS,
                prime: Callable[[], object] = lambda: None) -> float:
    """Median seconds of a plain ``session.run`` (each after an untimed ``prime()``) after a few
    warm-up runs."""
    for _ in range(_WARMUP_RUNS):
        prime()
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        prime()
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


@functools.lru_cache(maxsize=8)
def _empty_run_s(threads: int) -> float:
    """A plain run of the floor model (one Identity): what a run costs beyond its kernels."""
    import onnxruntime as ort

    session = ort.InferenceSession(floor_model().SerializeToString(), session_options("disable", threads),
                                   providers=["CPUExecutionProvider"])
    return _median_run(session, {"x": np.zeros((1,), np.float32)})


@dataclass(frozen=True, slots=True)
class ReorderCost:
    """Seconds per byte of one NCHWc reorder, measured at a few tensor sizes, interpolated between
    them in log size (and held constant beyond): in the bricks' cache state a reorder of a tensor
    bigger than the L2 cache costs twice as much per byte as one of a tensor that fits in it."""

    sizes: tuple[int, ...]
    seconds_per_byte: tuple[float, ...]

    def __call__(self, nbytes: int) -> float:
        """Seconds of one reorder of ``nbytes``."""
        if not self.sizes or nbytes <= 0:
            return 0.0
        per_byte = np.interp(np.log(nbytes), np.log(self.sizes), self.seconds_per_byte)
        return float(per_byte) * nbytes

    def total(self, sizes: Iterable[int]) -> float:
        """Seconds of reorders of each of ``sizes``."""
        return sum(self(n) for n in sizes)


def _round_trip_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    nodes = [helper.make_node("ReorderInput", ["x"], ["blocked"], domain=NCHWC_DOMAIN),
             helper.make_node("ReorderOutput", ["blocked"], ["y"], domain=NCHWC_DOMAIN, channels=shape[1])]
    graph = helper.make_graph(nodes, "reorder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(NCHWC_DOMAIN, 1)])
    model.ir_version = 8
    # Measured as a brick, in the bricks' cache state (session copies on one arena).
    model.metadata_props.add(key=SIGNATURE_KEY, value="nchwc-reorder-round-trip-" + "x".join(map(str, shape)))
    return model


#: Tensors whose reorders are timed to calibrate :class:`ReorderCost`: 50 KB to 3.2 MB, as in CNNs.
REORDER_SHAPES = ((1, 64, 14, 14), (1, 384, 14, 14), (1, 192, 28, 28), (1, 32, 112, 112), (1, 256, 56, 56))


def calibrate_reorder(config: OrtConfig | None = None, budget: Budget | None = None,
                      shapes: Sequence[tuple[int, ...]] = REORDER_SHAPES) -> ReorderCost:
    """Cost of one NCHWc reorder by size: a ReorderInput + ReorderOutput round trip of each shape,
    measured as a brick (so in the bricks' cache state), halved."""
    config = config or OrtConfig()
    models = [_round_trip_model(tuple(shape)) for shape in shapes]
    measured = benchmark(models, config=replace(config, graph_optimization_level="disable"),
                         budget=budget or Budget(min_time=0.2))
    points = []
    for shape, m in zip(shapes, measured, strict=True):
        nbytes = 4 * math.prod(shape)
        if m.ok and m.median_s is not None:
            points.append((nbytes, max(m.median_s - (m.floor_s or 0.0), 0.0) / (2 * nbytes)))
    points.sort()
    return ReorderCost(tuple(n for n, _ in points), tuple(c for _, c in points))
