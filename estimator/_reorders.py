"""Layout reorders at onnxruntime's "all" level: counted once per model, not once per brick.

At ``ORT_ENABLE_ALL`` the CPU provider runs convolutions in the blocked NCHWc layout and inserts
ReorderInput/ReorderOutput where an NCHWc region begins and ends. A fused brick run alone is its own
region, so its session converts its input and output itself, while inside the model the neighbouring
kernels share the blocked tensor. The rule: each brick's own reorders (found in the brick's optimized
graph, sized from its input and output specs) are subtracted from its time; the reorders of the model
(the fusion plan's ``reorder_tensors``, found in the model's optimized graph) are added once per run.
Both are priced with one calibrated cost per byte, measured on this machine with the same harness.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from dlbricks import Brick
from dlbricks._ortutil import session_options
from dlbricks.generators import Budget, OrtConfig, benchmark

__all__ = ["brick_reorder_bytes", "calibrate_reorder", "REORDER_OPS", "NCHWC_DOMAIN"]

NCHWC_DOMAIN = "com.microsoft.nchwc"
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
def _cached_bytes(signature: str, data: bytes, opt_level: str, threads: int) -> int:
    brick = Brick.from_bytes(data)
    specs = {s.name: s for s in (*brick.inputs, *brick.outputs)}
    graph = _optimized(brick.to_onnx(), opt_level, threads).graph
    total = 0
    for node in graph.node:
        if node.domain == NCHWC_DOMAIN and node.op_type in REORDER_OPS:
            boundary = node.input[0] if node.op_type == "ReorderInput" else node.output[0]
            if boundary in specs:
                total += specs[boundary].nbytes
    return total


def brick_reorder_bytes(brick: Brick, opt_level: str, threads: int = 1) -> int:
    """Bytes that the layout reorders onnxruntime inserts in the brick's own session convert."""
    if opt_level != "all":
        return 0
    return _cached_bytes(brick.signature, brick.to_bytes(), opt_level, threads)


def _round_trip_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    nodes = [helper.make_node("ReorderInput", ["x"], ["blocked"], domain=NCHWC_DOMAIN),
             helper.make_node("ReorderOutput", ["blocked"], ["y"], domain=NCHWC_DOMAIN, channels=shape[1])]
    graph = helper.make_graph(nodes, "reorder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(NCHWC_DOMAIN, 1)])
    model.ir_version = 8
    return model


def calibrate_reorder(config: OrtConfig | None = None, budget: Budget | None = None,
                      shape: tuple[int, ...] = (1, 256, 56, 56)) -> float:
    """Seconds per byte of one NCHWc reorder (a ReorderInput + ReorderOutput round trip, halved)."""
    config = config or OrtConfig()
    from dataclasses import replace

    (m,) = benchmark([_round_trip_model(shape)], config=replace(config, graph_optimization_level="disable"),
                     budget=budget or Budget(min_time=0.2))
    if not m.ok or m.median_s is None:
        return 0.0
    nbytes = 4
    for d in shape:
        nbytes *= d
    return max(m.median_s - (m.floor_s or 0.0), 0.0) / (2 * nbytes)
