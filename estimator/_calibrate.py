"""Measuring a machine's peaks with the same harness as the bricks: FLOP/s and memory bandwidth.

Peak FLOP/s: float32 MatMuls of several sizes; peak bandwidth: Adds over working sets from
cache-sized to DRAM-sized. Each peak is the best rate any size reached (from the fastest sample),
so that per brick max(FLOPs / peak, bytes / peak) stays a floor that no measured run beats: a brick
whose data fits in cache moves bytes faster than DRAM allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlbricks._errors import BackendError
from dlbricks.estimator._estimate import Peaks
from dlbricks.generators import Budget, Measurement, benchmark

__all__ = ["calibrate_peaks", "Calibration", "GEMM_SIZES", "STREAM_ELEMENTS"]

GEMM_SIZES = (256, 512, 1024)
STREAM_ELEMENTS = (1 << 16, 1 << 20, 1 << 24)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Peaks and the measurements they came from."""

    peaks: Peaks
    gemm: tuple[tuple[int, float], ...]  # (size, FLOP/s)
    stream: tuple[tuple[int, float], ...]  # (bytes moved, bytes/s)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], output: onnx.ValueInfoProto,
           inits: Sequence[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "calibrate", inputs, [output], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def gemm_model(n: int) -> onnx.ModelProto:
    """``Y = X @ W`` with n x n float32 operands."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32), "w")
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                  helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n]), [w])


def stream_model(elements: int) -> onnx.ModelProto:
    """``C = A + B`` over float32 vectors: reads two, writes one."""
    return _model([helper.make_node("Add", ["a", "b"], ["c"])],
                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, [elements]) for n in ("a", "b")],
                  helper.make_tensor_value_info("c", TensorProto.FLOAT, [elements]), [])


def _rate(work: float, m: Measurement) -> float:
    if not m.ok or m.min_s is None:
        raise BackendError(f"calibration run failed: {m.error}")
    return work / max(m.min_s - (m.floor_s or 0.0), 1e-12)


def calibrate_peaks(config: object | None = None, budget: Budget | None = None) -> Calibration:
    """Measure peak FLOP/s and bandwidth under a backend configuration (default: 1 CPU thread)."""
    budget = budget or Budget(min_time=0.3, max_time=2.0)
    models = [gemm_model(n) for n in GEMM_SIZES] + [stream_model(e) for e in STREAM_ELEMENTS]
    results = list(benchmark(models, config=config, budget=budget))  # type: ignore[arg-type]
    gemm = tuple((n, _rate(2.0 * n ** 3, m)) for n, m in zip(GEMM_SIZES, results, strict=False))
    stream = tuple((12 * e, _rate(12.0 * e, m))
                   for e, m in zip(STREAM_ELEMENTS, results[len(GEMM_SIZES):], strict=True))
    return Calibration(Peaks(max(r for _, r in gemm), max(r for _, r in stream)), gemm, stream)
