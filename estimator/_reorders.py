"""Layout reorders at onnxruntime's "all" level: counted once per model, not once per brick.

At ``ORT_ENABLE_ALL`` the CPU provider runs convolutions in the blocked NCHWc layout and inserts
ReorderInput/ReorderOutput where an NCHWc region begins and ends. A fused brick run alone is its own
region, so its session converts its input and output itself, while inside the model the neighbouring
kernels share the blocked tensor. The rule: each brick's own reorders (found in the brick's optimized
graph, sized from its input and output specs) are subtracted from its time; the reorders of the model
(the fusion plan's ``reorder_tensors``, found in the model's optimized graph) are added once per run.
Both are priced by size (:class:`ReorderCost`), measured on this machine with the same harness in the
bricks' cache state.
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from dlbricks import Brick
from dlbricks._bricks import SIGNATURE_KEY
from dlbricks._fusion import NCHWC_DOMAIN
from dlbricks._ortutil import session_options
from dlbricks.generators import Budget, OrtConfig, benchmark

__all__ = ["brick_reorder_bytes", "brick_reorder_sizes", "calibrate_reorder", "ReorderCost", "REORDER_OPS",
           "REORDER_SHAPES", "NCHWC_DOMAIN"]

REORDER_OPS = ("ReorderInput", "ReorderOutput")


def _optimized(model: onnx.ModelProto, opt_level: str, threads: int) -> onnx.ModelProto:
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="dlbricks-reorder-") as tmp:
        path = Path(tmp) / "optimized.onnx"
        options = session_options(opt_level, threads, optimized_path=str(path), external_weights=True,
                                  log_severity=4)
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(path), load_external_data=False)


@functools.lru_cache(maxsize=8192)
def _cached_sizes(signature: str, data: bytes, opt_level: str, threads: int) -> tuple[int, ...]:
    brick = Brick.from_bytes(data)
    specs = {s.name: s for s in (*brick.inputs, *brick.outputs)}
    graph = _optimized(brick.to_onnx(), opt_level, threads).graph
    sizes = []
    for node in graph.node:
        if node.domain == NCHWC_DOMAIN and node.op_type in REORDER_OPS:
            boundary = node.input[0] if node.op_type == "ReorderInput" else node.output[0]
            if boundary in specs:
                sizes.append(specs[boundary].nbytes)
    return tuple(sizes)


def brick_reorder_sizes(brick: Brick, opt_level: str, threads: int = 1) -> tuple[int, ...]:
    """Bytes of each layout reorder that onnxruntime inserts in the brick's own session."""
    if opt_level != "all":
        return ()
    return _cached_sizes(brick.signature, brick.to_bytes(), opt_level, threads)


def brick_reorder_bytes(brick: Brick, opt_level: str, threads: int = 1) -> int:
    """Bytes that the layout reorders onnxruntime inserts in the brick's own session convert."""
    return sum(brick_reorder_sizes(brick, opt_level, threads))


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
    # Measured as a brick, in the bricks' cache state: inside a fused brick's session the reorders
    # write buffers of each session copy, which the cache emulation keeps cold.
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
