"""A brick's constant inputs: which keep the model's values, which its signature hashes, and how a
synthetic one is described.

Shared by :mod:`dlbricks.bricks` (which exports these names), :mod:`dlbricks.decomposition` and
:mod:`dlbricks.no_weights`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from dlbricks.types import TensorSpec

__all__ = [
    "DIGESTS_KEY", "EXACT_MAX_ELEMENTS", "GATHERS", "INTEGER_WEIGHT_INPUTS", "POSITIVE_INPUTS",
    "QUANTIZATION_PARAMETERS", "QUANTIZED_DTYPES", "QUANTIZED_INPUTS", "SEMANTIC_INPUTS", "ConstantSpec",
    "index_kind", "value_is_hashed",
]

#: Constants of at most this many elements are always kept exactly.
EXACT_MAX_ELEMENTS = 64
#: Quantized ops (ONNX and onnxruntime's com.microsoft domain): positions of their scales, zero
#: points and integer weights. Scales and zero points are kept exactly (onnxruntime checks some
#: zero points, and its QDQ fusions compare them) but not hashed: the kernel's work does not depend
#: on their values, and a quantized model has other ones at every layer. Integer weights and biases
#: are weights like any other, synthetic by default.
QUANTIZED_INPUTS: Mapping[str, tuple[frozenset[int], frozenset[int], frozenset[int]]] = {
    "QuantizeLinear": (frozenset({1}), frozenset({2}), frozenset()),
    "DequantizeLinear": (frozenset({1}), frozenset({2}), frozenset({0})),
    "QLinearConv": (frozenset({1, 4, 6}), frozenset({2, 5, 7}), frozenset({3, 8})),
    "QLinearMatMul": (frozenset({1, 4, 6}), frozenset({2, 5, 7}), frozenset({0, 3})),
    "MatMulInteger": (frozenset(), frozenset({2, 3}), frozenset({0, 1})),
    "ConvInteger": (frozenset(), frozenset({2, 3}), frozenset({1})),
    "QGemm": (frozenset({1, 4, 7}), frozenset({2, 5, 8}), frozenset({0, 3, 6})),
    "QLinearAdd": (frozenset({1, 4, 6}), frozenset({2, 5, 7}), frozenset({0, 3})),
    "QLinearMul": (frozenset({1, 4, 6}), frozenset({2, 5, 7}), frozenset({0, 3})),
    "QLinearGlobalAveragePool": (frozenset({1, 3}), frozenset({2, 4}), frozenset()),
    "QLinearAveragePool": (frozenset({1, 3}), frozenset({2, 4}), frozenset()),
    "QLinearSigmoid": (frozenset({1, 3}), frozenset({2, 4}), frozenset()),
    "QLinearLeakyRelu": (frozenset({1, 3}), frozenset({2, 4}), frozenset()),
    "DynamicQuantizeMatMul": (frozenset({2}), frozenset({3}), frozenset({1})),
    "MatMulIntegerToFloat": (frozenset({2, 3}), frozenset({4, 5}), frozenset({0, 1})),
}
#: Integer types that hold quantized values (weights, activations), never shapes or indices.
QUANTIZED_DTYPES = frozenset({"int8", "uint8"})
#: Inputs (op type -> positions) whose values change what the op computes or how much work it does.
SEMANTIC_INPUTS: Mapping[str, frozenset[int]] = {
    "Reshape": frozenset({1}), "Expand": frozenset({1}), "Tile": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}), "Pad": frozenset({1, 2, 3}), "Resize": frozenset({1, 2, 3}),
    "Upsample": frozenset({1}), "TopK": frozenset({1}), "Split": frozenset({1}),
    "Squeeze": frozenset({1}), "Unsqueeze": frozenset({1}), "Gather": frozenset({1}),
    "GatherElements": frozenset({1}), "GatherND": frozenset({1}), "ConstantOfShape": frozenset({0}),
    "Range": frozenset({0, 1, 2}), "OneHot": frozenset({1}), "Clip": frozenset({1, 2}),
    "ReduceSum": frozenset({1}), "ReduceMean": frozenset({1}), "ReduceMax": frozenset({1}),
    "ReduceMin": frozenset({1}), "ReduceProd": frozenset({1}), "ReduceL2": frozenset({1}),
    "CumSum": frozenset({1}), "Trilu": frozenset({1}), "Pow": frozenset({1}),
    "LSTM": frozenset({4}), "GRU": frozenset({4}), "RNN": frozenset({4}),
}
#: Inputs that must be positive for the op to compute finite values (variances, divisors, scales).
POSITIVE_INPUTS: Mapping[str, frozenset[int]] = {
    "BatchNormalization": frozenset({4}), "BatchNorm": frozenset({4}), "Div": frozenset({1}), "Sqrt": frozenset({0}),
    "Log": frozenset({0}), "Reciprocal": frozenset({0}), "Pow": frozenset({0}),
    **{op: scales for op, (scales, _, _) in QUANTIZED_INPUTS.items()},
}
#: Scales and zero points of quantized ops: exact, not hashed.
QUANTIZATION_PARAMETERS: Mapping[str, frozenset[int]] = {
    op: scales | zero_points for op, (scales, zero_points, _) in QUANTIZED_INPUTS.items()}
#: Integer inputs that are weights (values synthetic unless real weights are asked for).
INTEGER_WEIGHT_INPUTS: Mapping[str, frozenset[int]] = {op: w for op, (_, _, w) in QUANTIZED_INPUTS.items()}
#: Metadata key of a weight-free brick's record of the values it replaced that its signature hashed:
#: ``{"c0": digest}`` (see :meth:`~dlbricks.Brick.without_weights`).
DIGESTS_KEY = "dlbricks.value_digests"


GATHERS = frozenset({"Gather", "GatherElements", "GatherND"})
"""Ops that read only the part of their data input that they return."""


@dataclass(frozen=True, slots=True)
class ConstantSpec:
    """A constant input of a brick.

    ``value`` holds the exact tensor (semantic constants, or real weights); otherwise it is
    generated with ``synthetic`` (``"normal"``, ``"positive"``, or :func:`index_kind`'s range of
    integers) at materialization (:func:`~dlbricks.bricks.synthetic_array`).
    """

    spec: TensorSpec
    exact: bool
    synthetic: str = "normal"
    value: onnx.TensorProto | None = field(default=None, compare=False, repr=False)


def value_is_hashed(spec: TensorSpec, semantic: bool = False, integer_weight: bool = False,
                    parameter: bool = False) -> bool:
    """Whether the signature hashes a constant's value: at a semantic position, a scalar, or an
    integer, bool or string tensor; not a weight (``integer_weight``: read at a position of
    :data:`INTEGER_WEIGHT_INPUTS`, or of a quantized type such as int8) nor a scale or zero point
    (``parameter``: :data:`QUANTIZATION_PARAMETERS`) unless it is semantic too."""
    if semantic:
        return True
    if integer_weight or parameter or spec.dtype in QUANTIZED_DTYPES:
        return spec.numel <= 1 and not parameter
    if spec.numel <= 1 or spec.dtype in ("bool", "string"):
        return True
    return spec.dtype != "bfloat16" and bool(np.issubdtype(np.dtype(spec.dtype), np.integer))


def index_kind(low: int, high: int) -> str:
    """The synthetic kind of integers uniform over ``[low, high)`` (a gather's indices), for
    :attr:`ConstantSpec.synthetic` and :func:`~dlbricks.bricks.synthetic_array`."""
    return f"range:{int(low)}:{int(high)}"
