"""Measuring a machine's peaks with the same harness as the bricks: FLOP/s and memory bandwidth.

Peak FLOP/s: float32 MatMuls of several sizes and 3x3 convolutions (with onnxruntime, at the
default level and in the NCHWc layout of level "all"); peak integer ops/s: 8-bit MatMulIntegers
(onnxruntime on the CPU), which bound the bricks of quantized models; peak bandwidth: Adds (two
reads, one write) and matrix-vector products (reading a weight matrix: what a fully connected layer does at batch 1)
over working sets from cache-sized to DRAM-sized. Each peak is the best rate any size reached (from the fastest sample),
so that per brick max(FLOPs / peak, bytes / peak) stays a floor that no measured run beats: a brick
whose data fits in cache moves bytes faster than DRAM allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlbricks import BackendError
from dlbricks.generators import Budget, Measurement, OrtConfig, benchmark
from dlbricks.generators.protocols import BackendConfig
from dlbricks.mxnet_frontend import import_mxnet, load_mxnet

from .estimation import Peaks

__all__ = [
    "CONV_SHAPES",
    "GEMM_SIZES",
    "GEMM_SIZES_CUDA",
    "GEMV_SIZES",
    "GEMV_SIZES_CUDA",
    "NCHWC_DEPTH",
    "STREAM_ELEMENTS",
    "STREAM_ELEMENTS_CUDA",
    "Calibration",
    "calibrate_peaks",
    "calibrated_backends",
    "int_gemm_model",
    "merge_peaks",
]

GEMM_SIZES = (256, 512, 1024)
#: 3x3 convolutions of ResNet-18 (channels in = out, height = width): oneDNN's convolutions in MXNet
#: ran 2-8% above the rate of the best GEMM, and a peak must be the best rate any kernel reaches.
CONV_SHAPES = ((64, 56), (128, 28), (256, 14), (512, 7))
STREAM_ELEMENTS = (1 << 16, 1 << 20, 1 << 24)
#: Matrix-vector products (n x n weights, 1 MB to 64 MB): reads only, so they stream faster than an
#: Add, which also writes. AlexNet's fully connected layers (234 MB of weights) read memory 5-10%
#: faster than the best Add, and the roofline rose above their lower bound.
GEMV_SIZES = (512, 2048, 4096)
#: On a GPU (``device="cuda"``) the CPU's sizes leave it launch-bound: larger MatMuls, longer Adds and
#: matrix-vector products over more than its L2 (50 MB on an H100).
GEMM_SIZES_CUDA = (1024, 2048, 4096)
STREAM_ELEMENTS_CUDA = (1 << 20, 1 << 24, 1 << 26)
GEMV_SIZES_CUDA = (2048, 4096, 8192)
#: Convolutions chained per calibration model at onnxruntime's level "all", where they run in the
#: NCHWc layout: one reorder in and one out for the chain, so the rate is the kernels'. Fused bricks at
#: "all" are timed without their reorders, and MLAS's NCHWc convolutions beat its NCHW ones: without
#: these the roofline of ResNets at "all" rose above their lower bound.
NCHWC_DEPTH = 4


@dataclass(frozen=True, slots=True)
class Calibration:
    """Peaks and the measurements they came from."""

    peaks: Peaks
    gemm: tuple[tuple[int, float], ...]  # (size, FLOP/s)
    stream: tuple[tuple[int, float], ...]  # (bytes moved, bytes/s)
    conv: tuple[tuple[int, int, float], ...] = ()  # (channels, height = width, FLOP/s)
    conv_nchwc: tuple[tuple[int, int, float], ...] = ()  # the same at onnxruntime's level "all"
    gemv: tuple[tuple[int, float], ...] = ()  # (bytes of weights, bytes/s)
    int_gemm: tuple[tuple[int, float], ...] = ()  # (size, integer ops/s): 8-bit GEMMs (onnxruntime)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], output: onnx.ValueInfoProto,
           inits: Sequence[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "calibrate", inputs, [output], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def gemm_model(n: int, rows: int | None = None) -> onnx.ModelProto:
    """``Y = X @ W`` with an n x n float32 ``W`` and ``rows`` rows of ``X`` (default n)."""
    rows = n if rows is None else rows
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32), "w")
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, n])],
                  helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n]), [w])


def int_gemm_model(n: int) -> onnx.ModelProto:
    """``Y = A @ B`` in integers (MatMulInteger: uint8 n x n ``A``, int8 n x n ``B``, int32 ``Y``): the
    8-bit GEMM that quantized models' ConvInteger, MatMulInteger and QLinearConv kernels run."""
    w = numpy_helper.from_array(np.random.default_rng(0).integers(-128, 128, (n, n), dtype=np.int8), "w")
    return _model([helper.make_node("MatMulInteger", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.UINT8, [n, n])],
                  helper.make_tensor_value_info("y", TensorProto.INT32, [n, n]), [w])


def conv_model(channels: int, size: int, depth: int = 1) -> onnx.ModelProto:
    """``depth`` chained 3x3 convolutions, padding 1, ``channels`` in and out, on a ``size`` x ``size``
    image."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3), dtype=np.float32),
                                       f"w{i}") for i in range(depth)]
    names = ["x"] + [f"h{i}" for i in range(depth - 1)] + ["y"]
    nodes = [helper.make_node("Conv", [names[i], f"w{i}"], [names[i + 1]], pads=[1, 1, 1, 1])
             for i in range(depth)]
    shape = [1, channels, size, size]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  helper.make_tensor_value_info("y", TensorProto.FLOAT, shape), weights)


def _conv_flops(channels: int, size: int) -> float:
    return 2.0 * channels * channels * 9 * size * size


def stream_model(elements: int) -> onnx.ModelProto:
    """``C = A + B`` over float32 vectors: reads two, writes one."""
    return _model([helper.make_node("Add", ["a", "b"], ["c"])],
                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, [elements]) for n in ("a", "b")],
                  helper.make_tensor_value_info("c", TensorProto.FLOAT, [elements]), [])


def mxnet_gemm_model(n: int, rows: int | None = None) -> onnx.ModelProto:
    """``Y = X @ W.T`` with an n x n float32 ``W`` and ``rows`` rows of ``X`` (default n), as an MXNet
    FullyConnected (``org.mxnet`` model)."""
    rows = n if rows is None else rows
    mx = import_mxnet()
    y = mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=n, no_bias=True, flatten=False, name="fc")
    return load_mxnet(y, input_shapes={"x": (rows, n)}, name=f"gemm{n}x{rows}").to_onnx()


def mxnet_conv_model(channels: int, size: int) -> onnx.ModelProto:
    """:func:`conv_model` as an MXNet Convolution (``org.mxnet`` model)."""
    mx = import_mxnet()
    y = mx.sym.Convolution(mx.sym.var("x"), num_filter=channels, kernel=(3, 3), pad=(1, 1), no_bias=True,
                           name="conv")
    return load_mxnet(y, input_shapes={"x": (1, channels, size, size)}, name=f"conv{channels}").to_onnx()


def mxnet_stream_model(elements: int) -> onnx.ModelProto:
    """``C = A + B`` over float32 vectors, as an MXNet elemwise_add (``org.mxnet`` model)."""
    mx = import_mxnet()
    c = mx.sym.elemwise_add(mx.sym.var("a"), mx.sym.var("b"), name="add")
    return load_mxnet(c, input_shapes={"a": (elements,), "b": (elements,)}, name=f"add{elements}").to_onnx()


def _rate(work: float, m: Measurement) -> float:
    if not m.ok or m.min_s is None:
        raise BackendError(f"calibration run failed: {m.error}")
    return work / max(m.min_s - (m.floor_s or 0.0), 1e-12)


def calibrate_peaks(config: BackendConfig | None = None, budget: Budget | None = None) -> Calibration:
    """Measure peak FLOP/s (MatMuls and 3x3 convolutions) and bandwidth (Adds) with the backend that
    runs a configuration (default: onnxruntime, 1 CPU thread): ONNX models, run by the configuration's
    own backend (onnxruntime, OpenVINO...); an ``MxnetConfig`` measures MXNet's FullyConnected,
    Convolution and elemwise_add instead. On the CPU the 8-bit GEMMs are run too, and with
    onnxruntime the convolutions in its NCHWc layout (level "all"). On a GPU the sizes are larger
    (``*_CUDA``) and neither is run."""
    budget = budget or Budget(min_time=0.3, max_time=2.0)
    config = config or OrtConfig()
    mxnet = config.backend == "mxnet"  # the model format of its calibration: org.mxnet nodes
    on_cpu = config.device == "cpu"
    gemm_sizes, stream_elements, gemv_sizes = ((GEMM_SIZES, STREAM_ELEMENTS, GEMV_SIZES) if on_cpu
                                               else (GEMM_SIZES_CUDA, STREAM_ELEMENTS_CUDA, GEMV_SIZES_CUDA))
    gemm_of, conv_of, stream_of = ((mxnet_gemm_model, mxnet_conv_model, mxnet_stream_model) if mxnet
                                   else (gemm_model, conv_model, stream_model))
    integer_runs = not mxnet and on_cpu  # 8-bit GEMMs: what quantized bricks run (the float peak does not bound them)
    models = ([gemm_of(n) for n in gemm_sizes] + [conv_of(c, h) for c, h in CONV_SHAPES]
              + [stream_of(e) for e in stream_elements] + [gemm_of(n, 1) for n in gemv_sizes]
              + ([int_gemm_model(n) for n in gemm_sizes] if integer_runs else []))
    # one call: each call of benchmark starts a worker and calibrates its floor
    results = iter(benchmark(models, backend=config.backend, config=config, budget=budget))
    gemm = tuple((n, _rate(2.0 * n ** 3, next(results))) for n in gemm_sizes)
    conv = tuple((c, h, _rate(_conv_flops(c, h), next(results))) for c, h in CONV_SHAPES)
    stream = tuple((12 * e, _rate(12.0 * e, next(results))) for e in stream_elements)
    gemv = tuple((4 * n * n, _rate(4.0 * n * n, next(results))) for n in gemv_sizes)
    nchwc: tuple[tuple[int, int, float], ...] = ()
    if isinstance(config, OrtConfig) and on_cpu:  # the NCHWc layout is onnxruntime's CPU provider's
        chains = [conv_model(c, h, NCHWC_DEPTH) for c, h in CONV_SHAPES]
        runs = benchmark(chains, config=replace(config, graph_optimization_level="all"), budget=budget)
        nchwc = tuple((c, h, _rate(NCHWC_DEPTH * _conv_flops(c, h), m))
                      for (c, h), m in zip(CONV_SHAPES, runs, strict=True))
    int_gemm = tuple((n, _rate(2.0 * n ** 3, next(results))) for n in gemm_sizes) if integer_runs else ()
    flops = max([r for _, r in gemm] + [r for _, _, r in conv + nchwc])
    bandwidth = max(r for _, r in stream + gemv)
    integer = max((r for _, r in int_gemm), default=None)
    return Calibration(Peaks(flops, bandwidth, integer), gemm, stream, conv, nchwc, gemv, int_gemm)


def merge_peaks(stored: Any, backend: str, calibration: Calibration) -> tuple[float, float, dict[str, Any]]:
    """The machine's peaks after calibrating ``backend``: the best of every backend calibrated so far
    on the CPU, as ``(flops_per_s, bytes_per_s, details)`` for ``store.systems.record_peaks``; ``details`` holds
    each backend's calibration and, where one was measured, the integer peak (``int_ops_per_s``).
    An accelerator's
    calibration (a ``backend`` key such as ``onnxruntime:cuda``, see ``peaks_key``) is kept in the
    details alone: a GPU's peaks would make every CPU roofline vanish.

    ``stored`` is the ``PeaksRecord`` already stored for the system, or None. A peak is a property of
    the machine and the roofline must stay below every framework's runs (MXNet's oneDNN
    convolutions beat the rate of onnxruntime's MatMul), so each backend's calibration is kept in
    the details and the peaks are the maximum over them.
    """
    backends: dict[str, Any] = {}
    if stored is not None:
        backends = dict(stored.details.get("backends") or {
            "onnxruntime": {"flops_per_s": stored.flops_per_s, "bytes_per_s": stored.bytes_per_s,
                            **stored.details}})
    backends[backend] = {"flops_per_s": calibration.peaks.flops_per_s,
                         "bytes_per_s": calibration.peaks.bytes_per_s,
                         "int_ops_per_s": calibration.peaks.int_ops_per_s,
                         "gemm": calibration.gemm, "conv": calibration.conv, "stream": calibration.stream,
                         "conv_nchwc": calibration.conv_nchwc, "gemv": calibration.gemv,
                         "int_gemm": calibration.int_gemm}
    cpu = [b for key, b in backends.items() if ":" not in key] or list(backends.values())  # (a row needs peaks)
    details: dict[str, Any] = {"backends": backends}
    integer = [b["int_ops_per_s"] for b in cpu if b.get("int_ops_per_s")]
    if integer:
        details["int_ops_per_s"] = max(integer)
    return (max(b["flops_per_s"] for b in cpu), max(b["bytes_per_s"] for b in cpu), details)


def calibrated_backends(stored: Any) -> set[str]:
    """Backends whose calibration went into a stored ``PeaksRecord`` (older databases: onnxruntime)."""
    return set(stored.details.get("backends") or {"onnxruntime": None})
