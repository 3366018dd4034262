"""Small inline models whose layers onnxruntime fuses, deletes or moves to the NCHWc layout."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from tests._models import Builder, conv_bn_relu


def conv_bn_relu_chain(channels: int = 8) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu: one FusedConv from the "basic"/"extended" levels on."""
    b = Builder(11)
    y = conv_bn_relu(b, "x", 3, channels)
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    return b.model([inp], [(y, TensorProto.FLOAT)], "conv_bn_relu")


def nchwc_cnn(channels: int = 16) -> onnx.ModelProto:
    """A residual CNN that onnxruntime runs in NCHWc at "all": 16 input channels (so a
    ReorderInput at the entry), a residual Add fused into a convolution, MaxPool and
    GlobalAveragePool in NCHWc, a ReorderOutput before the Flatten."""
    b = Builder(12)
    x = conv_bn_relu(b, "x", channels, channels)
    y = conv_bn_relu(b, x, channels, channels)
    y = conv_bn_relu(b, y, channels, channels, relu=False)
    x = b.op1("Relu", [b.op1("Add", [y, x])])
    x = b.op1("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    flat = b.op1("Flatten", [b.op1("GlobalAveragePool", [x])])
    logits = b.op1("Gemm", [flat, b.weight((10, channels)), b.weight((10,))], transB=1)
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])
    return b.model([inp], [(logits, TensorProto.FLOAT)], "nchwc_cnn")


def deleted_nodes(features: int = 64, hidden: int = 128) -> onnx.ModelProto:
    """Layers the optimizer deletes: a Transpose of a weight too large for dlbricks to fold (the
    runtime folds it), an Identity and a Dropout."""
    b = Builder(13)
    weight = b.weight((hidden, features))  # hidden * features > FOLD_MAX_ELEMENTS
    h = b.op1("MatMul", ["x", b.op1("Transpose", [weight], perm=[1, 0])])
    h = b.op1("Relu", [b.op1("Identity", [h])])
    h = b.op1("Dropout", [h])
    out = b.op1("Sigmoid", [b.op1("Add", [h, b.weight((hidden,))])])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, features])
    return b.model([inp], [(out, TensorProto.FLOAT)], "deleted_nodes")


def chain(n: int = 3) -> onnx.ModelProto:
    """Relu -> Sigmoid -> Relu...: n layers in a line."""
    b = Builder(14)
    x = "x"
    for i in range(n):
        x = b.op1("Relu" if i % 2 == 0 else "Sigmoid", [x])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    return b.model([inp], [(x, TensorProto.FLOAT)], "chain")

