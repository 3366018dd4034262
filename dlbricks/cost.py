"""FLOPs of a node from its attributes and tensor specs; ``None`` where the op is unknown.

Conventions (as in most FLOP counters): a multiply-add is 2 FLOPs; elementwise ops cost one FLOP per
output element (transcendentals included); pure data movement (Reshape, Transpose, Gather...) costs
0 FLOPs, which is known, not unknown. Integer ops of quantized models count like their float
counterparts (QLinearConv as a Conv, MatMulInteger as a MatMul), and quantizing or dequantizing a
tensor 2 ops per element. Bytes moved are the brick's inputs, constants and outputs, at the width of
their types (1 byte for int8).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import onnx

from dlbricks.types import TensorSpec

__all__ = ["DATA_MOVEMENT_OPS", "ELEMENTWISE_OPS", "KNOWN_OPS", "gemm_dims", "node_flops", "padding_flops"]

Specs = Sequence[TensorSpec | None]
FlopFn = Callable[[Mapping[str, object], Specs, Specs], int | None]


def _numel(spec: TensorSpec | None) -> int | None:
    return None if spec is None else spec.numel


def _out(outs: Specs) -> int | None:
    return _numel(outs[0]) if outs else None


def _conv(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    w, y = ins[1], outs[0]
    if w is None or y is None:
        return None
    per_out = 2 * math.prod(w.shape[1:])  # Cin/group * kernel, multiply-add
    bias = y.numel if len(ins) > 2 and ins[2] is not None else 0
    return y.numel * per_out + bias


def _conv_transpose(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    x, w, y = ins[0], ins[1], outs[0]
    if x is None or w is None or y is None:
        return None
    # every input element is scattered through Cout/group * kernel weights
    per_in = 2 * math.prod(w.shape[1:])
    bias = y.numel if len(ins) > 2 and ins[2] is not None else 0
    return x.numel * per_in + bias


def _conv_at(weight: int, bias: int | None) -> FlopFn:
    """A convolution whose weight and bias are at other positions (QLinearConv, ConvInteger)."""
    def fn(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
        w = ins[weight] if len(ins) > weight else None
        y = outs[0] if outs else None
        if w is None or y is None:
            return None
        has_bias = bias is not None and len(ins) > bias and ins[bias] is not None
        return y.numel * 2 * math.prod(w.shape[1:]) + (y.numel if has_bias else 0)
    return fn


def _dynamic_quantize_matmul(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    """DynamicQuantizeMatMul: quantizes A (range and scale, 4 per element), then the product."""
    product = _matmul(attrs, ins, outs)
    a = ins[0] if ins else None
    return None if product is None or a is None else product + 4 * a.numel


def _matmul(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    a, y = ins[0], outs[0]
    if a is None or y is None or not a.shape:
        return None
    return 2 * y.numel * a.shape[-1]


def _gemm_with_bias_at(index: int) -> FlopFn:
    """A Gemm's FLOPs, its bias C the input at ``index``: Gemm(A, B, C) at 2, QGemm(A, a_scale,
    a_zero_point, B, b_scale, b_zero_point, C...) at 6."""
    def fn(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
        a, y = ins[0], outs[0]
        if a is None or y is None:
            return None
        k = a.shape[0] if attrs.get("transA", 0) else a.shape[-1]
        bias = y.numel if len(ins) > index and ins[index] is not None else 0
        return 2 * y.numel * k + bias
    return fn


_gemm = _gemm_with_bias_at(2)
_qgemm = _gemm_with_bias_at(6)


def _pool(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    y = outs[0]
    kernel = attrs.get("kernel_shape")
    if y is None or kernel is None:
        return None
    return y.numel * math.prod(kernel)  # type: ignore[arg-type]


def _global_pool(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    return _numel(ins[0])


def _per_input(factor: int) -> FlopFn:
    def fn(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
        n = _numel(ins[0]) if ins else None
        return None if n is None else factor * n
    return fn


def _per_output(factor: int) -> FlopFn:
    def fn(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
        n = _out(outs)
        return None if n is None else factor * n
    return fn


def _zero(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int:
    return 0


def _rnn(gates: int) -> FlopFn:
    def fn(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
        x, w, r = ins[0], ins[1], ins[2]
        if x is None or w is None or r is None:
            return None
        seq, batch, inp = x.shape
        directions, gh, hidden = r.shape
        matmuls = 2 * seq * batch * directions * gh * (inp + hidden)
        elementwise = 4 * seq * batch * directions * gh
        return matmuls + elementwise
    return fn


def _resize(attrs: Mapping[str, object], ins: Specs, outs: Specs) -> int | None:
    n = _out(outs)
    if n is None:
        return None
    mode = attrs.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    rank = len(outs[0].shape) if outs[0] is not None else 4
    per = {"nearest": 0, "linear": 2 ** max(rank - 2, 1) * 2, "cubic": 4 ** max(rank - 2, 1) * 2}
    return n * per.get(mode, 1)


_ELEMENTWISE = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Relu", "LeakyRelu",
                "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log", "Sqrt", "Erf",
                "Abs", "Neg", "Reciprocal", "Clip", "Elu", "Selu", "Celu", "Gelu", "Softplus",
                "Softsign", "Mish", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Where",
                "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor",
                "Not", "Mod", "BitShift", "IsNaN", "IsInf", "ThresholdedRelu", "QuickGelu"]
_DATA_MOVEMENT = ["Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split",
                  "Slice", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
                  "Expand", "Tile", "Pad", "Identity", "Cast", "CastLike", "Shape", "Size",
                  "ConstantOfShape", "Constant", "Range", "DepthToSpace", "SpaceToDepth",
                  "Dropout", "Trilu", "OneHot", "NonZero", "Compress", "EyeLike"]

_FLOPS: dict[str, FlopFn] = {
    "Conv": _conv, "ConvTranspose": _conv_transpose, "MatMul": _matmul, "Gemm": _gemm,
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool,
    "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool,
    "BatchNormalization": _per_output(2), "InstanceNormalization": _per_output(5),
    "LayerNormalization": _per_output(8), "GroupNormalization": _per_output(8),
    "LRN": _per_output(5), "Softmax": _per_output(5), "LogSoftmax": _per_output(5),
    "ReduceMean": _per_input(1), "ReduceSum": _per_input(1), "ReduceMax": _per_input(1),
    "ReduceMin": _per_input(1), "ReduceProd": _per_input(1), "ReduceL2": _per_input(2),
    "ReduceSumSquare": _per_input(2), "ReduceL1": _per_input(1), "ReduceLogSumExp": _per_input(3),
    "ArgMax": _per_input(1), "ArgMin": _per_input(1), "TopK": _per_input(1),
    "CumSum": _per_input(1),
    "LSTM": _rnn(4), "GRU": _rnn(3), "RNN": _rnn(1), "Resize": _resize, "Upsample": _resize,
    **{op: _per_output(1) for op in _ELEMENTWISE},
    **{op: _zero for op in _DATA_MOVEMENT},
    # integer ops of quantized models: a multiply-add of integers is 2 ops, as of floats; quantizing
    # (scale, round, shift) and dequantizing (shift, scale) 2 per element; DynamicQuantizeLinear
    # also finds its input's range (2 more)
    "QLinearConv": _conv_at(3, 8), "ConvInteger": _conv_at(1, None),
    "QLinearMatMul": _matmul, "MatMulInteger": _matmul,
    "QuantizeLinear": _per_output(2), "DequantizeLinear": _per_output(2),
    "DynamicQuantizeLinear": _per_input(4),
}
#: FLOPs of onnxruntime's contrib ops (domain ``com.microsoft``) that quantization tools write.
_CONTRIB_FLOPS: dict[str, FlopFn] = {
    "QGemm": _qgemm, "MatMulIntegerToFloat": _matmul, "DynamicQuantizeMatMul": _dynamic_quantize_matmul,
    "QLinearAdd": _per_output(1), "QLinearMul": _per_output(1), "QLinearSigmoid": _per_output(1),
    "QLinearLeakyRelu": _per_output(1), "QLinearSoftmax": _per_output(5),
    "QLinearGlobalAveragePool": _global_pool, "QLinearAveragePool": _pool,
    "QLinearConcat": _zero, "QLinearWhere": _per_output(1),
}
_DOMAIN_FLOPS: Mapping[str, Mapping[str, FlopFn]] = {"": _FLOPS, "ai.onnx": _FLOPS,
                                                     "com.microsoft": _CONTRIB_FLOPS}

#: Ops of the ONNX domain whose FLOPs dlbricks knows (others report ``None``).
KNOWN_OPS = frozenset(_FLOPS)
#: Element-wise ops: one FLOP per output element, cost set by the bytes they move.
ELEMENTWISE_OPS = frozenset(_ELEMENTWISE)
#: Ops that only move data (0 FLOPs).
DATA_MOVEMENT_OPS = frozenset(_DATA_MOVEMENT)


#: The two operands of each op that runs a matrix product: the quantized products name their
#: second operand after the scale and zero point of the first.
_PRODUCT_OPERANDS = {
    "MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3),
    "MatMulIntegerToFloat": (0, 1), "DynamicQuantizeMatMul": (0, 1),
}
#: The input and weight of each convolution op (a pointwise one runs a matrix product).
_CONV_OPERANDS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3)}


def gemm_dims(node: onnx.NodeProto, ins: Specs, outs: Specs) -> tuple[int, int, int, int] | None:
    """The matrix product a node runs, as ``(batch, rows, columns, depth)``; None if it runs none.

    MatMul and Gemm multiply ``rows x depth`` by ``depth x columns`` (a MatMul by a 2-D right
    operand folds its leading dimensions into the rows; one by a batched operand runs ``batch``
    products). A pointwise convolution (1x1 kernel, stride 1, no padding, one group) is the same
    product per image: rows are the output pixels, columns the output channels, depth the input
    channels. The quantized products (MatMulInteger, QLinearMatMul, onnxruntime's
    MatMulIntegerToFloat and DynamicQuantizeMatMul) and convolutions (ConvInteger, QLinearConv) run
    the same products on 8-bit values. Anything else, or unknown shapes, gives None.
    """
    y = outs[0] if outs else None
    if y is None or not y.shape or any(d <= 0 for d in y.shape) or len(ins) < 2:
        return None
    attrs = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    if node.op_type in _PRODUCT_OPERANDS and len(y.shape) >= 2:
        i, j = _PRODUCT_OPERANDS[node.op_type]
        a, b = (ins[i], ins[j]) if len(ins) > j else (None, None)
        if a is None or b is None:
            return None
        depth, cols = a.shape[-1], y.shape[-1]
        if len(b.shape) <= 2:
            return 1, y.numel // cols, cols, depth
        return math.prod(y.shape[:-2]), y.shape[-2], cols, depth
    a = ins[0]
    if node.op_type == "Gemm" and a is not None and len(y.shape) == 2:
        depth = a.shape[0] if attrs.get("transA", 0) else a.shape[-1]
        return 1, y.shape[0], y.shape[1], depth
    if node.op_type in _CONV_OPERANDS and len(y.shape) > 2:
        w = ins[_CONV_OPERANDS[node.op_type][1]] if len(ins) > _CONV_OPERANDS[node.op_type][1] else None
        if w is None or len(w.shape) != len(y.shape):
            return None
        pointwise = (math.prod(w.shape[2:]) == 1 and int(attrs.get("group", 1)) == 1
                     and all(s == 1 for s in attrs.get("strides") or ())  # type: ignore[union-attr]
                     and not any(attrs.get("pads") or ()))  # type: ignore[arg-type]
        if pointwise:
            return y.shape[0], math.prod(y.shape[2:]), y.shape[1], w.shape[1]
    return None


def node_flops(node: onnx.NodeProto, ins: Specs, outs: Specs) -> int | None:
    """FLOPs of one node, or None if the op is unknown (custom domains, control flow...).

    Integer ops count like their float counterparts: QLinearConv and ConvInteger as a Conv,
    MatMulInteger and QLinearMatMul as a MatMul, onnxruntime's QGemm as a Gemm.
    """
    fn = _DOMAIN_FLOPS.get(node.domain, {}).get(node.op_type)
    if fn is None:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    try:
        return fn(attrs, ins, outs)
    except (IndexError, ValueError, TypeError):
        return None


def _taps_in_bounds(size: int, kernel: int, stride: int, dilation: int, pad_begin: int, out: int) -> int:
    """Pairs (output position, kernel tap) along one axis whose input position lies inside the input."""
    total = 0
    for k in range(kernel):
        offset = k * dilation - pad_begin  # input position that output 0 reads with tap k
        low = 0 if offset >= 0 else (stride - 1 - offset) // stride
        high = (size - 1 - offset) // stride if offset <= size - 1 else -1
        total += max(0, min(out - 1, high) - low + 1)
    return total


def padding_flops(node: onnx.NodeProto, x: TensorSpec | None, w: TensorSpec | None) -> int:
    """FLOPs that a convolution's count spends on taps over its zero padding (0 when unknown).

    :func:`node_flops` counts every tap, as FLOP counters do; a tap that reads padding is no work
    an implementation must do, and with large dilations most taps do (DeepLabV3's atrous 3x3
    convolutions at dilation 36 on a 32x32 map read the image with their centre tap only, and ran
    in a fifth of the time their full count allows at peak). The roofline leaves them out.
    """
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or x is None or w is None:
        return 0
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    spatial, kernel = list(x.shape[2:]), list(w.shape[2:])
    if len(spatial) != len(kernel) or not all(isinstance(d, int) and d > 0 for d in spatial + kernel):
        return 0
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return 0
    n = len(kernel)
    pads = list(attrs.get("pads", [0] * 2 * n))
    strides = list(attrs.get("strides", [1] * n))
    dilations = list(attrs.get("dilations", [1] * n))
    full = inside = 1
    for d in range(n):
        out = (spatial[d] + pads[d] + pads[d + n] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
        if out <= 0:
            return 0
        full *= out * kernel[d]
        inside *= _taps_in_bounds(spatial[d], kernel[d], strides[d], dilations[d], pads[d], out)
    per_tap = 2 * int(x.shape[0]) * int(w.shape[0]) * int(w.shape[1])  # batch * Cout * Cin/group
    return per_tap * (full - inside)
