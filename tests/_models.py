"""Small inline ONNX models for the processor tests (built with onnx.helper, seeded weights)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    """Tiny graph builder: unique tensor names, seeded weights."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, shape: tuple[int, ...], scale: float = 0.1, positive: bool = False) -> str:
        name = self.name("w")
        arr = self.rng.random(shape) + 0.5 if positive else self.rng.standard_normal(shape) * scale
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def const(self, value: np.ndarray) -> str:
        name = self.name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs

    def op1(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        return self.op(op_type, inputs, 1, **attrs)[0]

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[tuple[str, int]],
              name: str = "g") -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
        for vi in outs:  # shapes filled by inference below
            vi.type.tensor_type.ClearField("shape")
        graph = helper.make_graph(self.nodes, name, inputs, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(model)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        return model


def conv_bn_relu(b: Builder, x: str, cin: int, cout: int, stride: int = 1, relu: bool = True) -> str:
    w = b.weight((cout, cin, 3, 3), scale=(2.0 / (cin * 9)) ** 0.5)
    y = b.op1("Conv", [x, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])
    y = b.op1("BatchNormalization", [y, b.weight((cout,), positive=True), b.weight((cout,)),
                                     b.weight((cout,)), b.weight((cout,), positive=True)])
    return b.op1("Relu", [y]) if relu else y


def resnet_like(blocks: int = 3, channels: int = 16, batch: str | int = "N") -> onnx.ModelProto:
    """A CNN with BatchNorm and residual adds; blocks repeat, so bricks deduplicate."""
    b = Builder(1)
    x = conv_bn_relu(b, "x", 3, channels)
    for _ in range(blocks):
        y = conv_bn_relu(b, x, channels, channels)
        y = conv_bn_relu(b, y, channels, channels, relu=False)
        x = b.op1("Relu", [b.op1("Add", [x, y])])
    pooled = b.op1("GlobalAveragePool", [x])
    flat = b.op1("Flatten", [pooled])
    logits = b.op1("Gemm", [flat, b.weight((10, channels)), b.weight((10,))], transB=1)
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])
    return b.model([inp], [(logits, TensorProto.FLOAT)], "resnet_like")


def transformer_layer(seq: int = 8, hidden: int = 32, heads: int = 4, vocab: int = 50) -> onnx.ModelProto:
    """Embedding + one encoder layer, with Reshapes computed as Shape->Gather->Unsqueeze->Concat."""
    b = Builder(2)
    emb = b.op1("Gather", [b.weight((vocab, hidden)), "ids"], axis=0)
    head_dim = hidden // heads

    def dyn_shape(t: str, tail: list[int]) -> str:
        shape = b.op1("Shape", [t])
        batch = b.op1("Unsqueeze", [b.op1("Gather", [shape, b.const(np.array(0, np.int64))], axis=0),
                                    b.const(np.array([0], np.int64))])
        length = b.op1("Unsqueeze", [b.op1("Gather", [shape, b.const(np.array(1, np.int64))], axis=0),
                                     b.const(np.array([0], np.int64))])
        return b.op1("Concat", [batch, length, b.const(np.array(tail, np.int64))], axis=0)

    def proj(t: str) -> str:
        return b.op1("Add", [b.op1("MatMul", [t, b.weight((hidden, hidden))]), b.weight((hidden,))])

    def split_heads(t: str) -> str:
        return b.op1("Transpose", [b.op1("Reshape", [t, dyn_shape(t, [heads, head_dim])])],
                     perm=[0, 2, 1, 3])

    q, k, v = (split_heads(proj(emb)) for _ in range(3))
    scores = b.op1("Div", [b.op1("MatMul", [q, b.op1("Transpose", [k], perm=[0, 1, 3, 2])]),
                           b.const(np.array(np.sqrt(head_dim), np.float32))])
    mask = b.op1("Mul", [b.op1("Sub", [b.const(np.array(1.0, np.float32)),
                                       b.op1("Cast", [b.op1("Unsqueeze", [
                                           b.op1("Unsqueeze", ["mask", b.const(np.array([1], np.int64))]),
                                           b.const(np.array([2], np.int64))])], to=TensorProto.FLOAT)]),
                         b.const(np.array(-10000.0, np.float32))])
    probs = b.op1("Softmax", [b.op1("Add", [scores, mask])], axis=-1)
    ctx = b.op1("Transpose", [b.op1("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = b.op1("Reshape", [ctx, dyn_shape(emb, [hidden])])
    x = b.op1("LayerNormalization", [b.op1("Add", [emb, proj(ctx)]), b.weight((hidden,), positive=True),
                                     b.weight((hidden,))], axis=-1, epsilon=1e-5)
    h = proj(x)
    gelu = b.op1("Mul", [b.op1("Mul", [h, b.op1("Add", [b.op1("Erf", [b.op1("Div", [
        h, b.const(np.array(1.4142135, np.float32))])]), b.const(np.array(1.0, np.float32))])]),
        b.const(np.array(0.5, np.float32))])
    out = b.op1("LayerNormalization", [b.op1("Add", [x, proj(gelu)]), b.weight((hidden,), positive=True),
                                       b.weight((hidden,))], axis=-1, epsilon=1e-5)
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", seq]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", seq])]
    return b.model(inputs, [(out, TensorProto.FLOAT)], "transformer_layer")


def lstm_model(seq: int = 6, batch: int = 2, inp: int = 8, hidden: int = 16) -> onnx.ModelProto:
    """A 2-layer LSTM with a Squeeze between layers and a final MatMul."""
    b = Builder(3)
    x = "x"
    size = inp
    for _ in range(2):
        y, _, _ = b.op("LSTM", [x, b.weight((1, 4 * hidden, size)), b.weight((1, 4 * hidden, hidden)),
                                b.weight((1, 8 * hidden))], 3, hidden_size=hidden)
        x = b.op1("Squeeze", [y, b.const(np.array([1], np.int64))])
        size = hidden
    out = b.op1("MatMul", [x, b.weight((hidden, 5))])
    inp_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])
    return b.model([inp_vi], [(out, TensorProto.FLOAT)], "lstm")


def split_model() -> onnx.ModelProto:
    """A Split of several outputs (one unused), a Concat and an optional-input Clip."""
    b = Builder(4)
    a, c, d = b.op("Split", ["x", b.const(np.array([2, 3, 3], np.int64))], 3, axis=1)
    clipped = b.op1("Clip", [a, "", b.const(np.array(0.5, np.float32))])
    out = b.op1("Concat", [clipped, b.op1("Sigmoid", [c])], axis=1)
    del d
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 4])
    return b.model([inp], [(out, TensorProto.FLOAT)], "split")


def control_flow_model() -> onnx.ModelProto:
    """An If whose branches read an outer tensor and a Loop that accumulates."""
    b = Builder(5)
    h = b.op1("Relu", ["x"])
    w = b.weight((4, 4))
    then_g = helper.make_graph([helper.make_node("MatMul", [h, w], ["then_out"])], "then", [],
                               [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [3, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", [h], ["else_out"])], "else", [],
                               [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [3, 4])])
    cond = b.op1("ReduceSum", ["flag"], keepdims=0)
    cond = b.op1("Cast", [cond], to=TensorProto.BOOL)
    branch = b.op1("If", [cond], then_branch=then_g, else_branch=else_g)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", branch], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3, 4])])
    acc = b.op1("Loop", [b.const(np.array(3, np.int64)), "", h], body=body)
    out = b.op1("Add", [acc, h])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
              helper.make_tensor_value_info("flag", TensorProto.INT64, [1])]
    return b.model(inputs, [(out, TensorProto.FLOAT)], "control_flow")


def unrunnable_model() -> onnx.ModelProto:
    """A model whose middle op (Relu on int16) onnxruntime's CPU provider has no kernel for."""
    b = Builder(6)
    y = b.op1("Relu", ["x"])
    z = b.op1("Cast", [y], to=TensorProto.INT16)
    z = b.op1("Relu", [z])  # valid ONNX, but no int16 Relu kernel on the CPU provider
    out = b.op1("Cast", [z], to=TensorProto.FLOAT)
    out = b.op1("Sigmoid", [out])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    return b.model([inp], [(out, TensorProto.FLOAT)], "unrunnable")


def matmul_stack(shared: bool, layers: int = 4, rows: int = 16, hidden: int = 64) -> onnx.ModelProto:
    """``layers`` of MatMul -> Relu; with ``shared``, every MatMul reads one weight (cross-layer
    parameter sharing, as in ALBERT), else each its own."""
    b = Builder()
    x = "x"
    w = b.weight((hidden, hidden))
    for _ in range(layers):
        x = b.op1("Relu", [b.op1("MatMul", [x, w if shared else b.weight((hidden, hidden))])])
    f32 = TensorProto.FLOAT
    return b.model([helper.make_tensor_value_info("x", f32, [rows, hidden])], [(x, f32)],
                   name="shared" if shared else "distinct")


def shared_bias_stack(layers: int = 4, rows: int = 16, hidden: int = 96) -> onnx.ModelProto:
    """``layers`` of Gemm -> Relu, each Gemm with a weight of its own and one bias shared by all (as an
    exporter that merges equal constants leaves them)."""
    b = Builder()
    x = "x"
    bias = b.weight((rows, hidden))  # 6 KiB: a weight (SHARED_WEIGHT_BYTES), shared
    for _ in range(layers):
        x = b.op1("Relu", [b.op1("Gemm", [x, b.weight((hidden, hidden)), bias])])
    f32 = TensorProto.FLOAT
    return b.model([helper.make_tensor_value_info("x", f32, [rows, hidden])], [(x, f32)], name="shared_bias")


def widening_stack(layers: int = 40, rows: int = 4, start: int = 16, step: int = 4) -> onnx.ModelProto:
    """``layers`` MatMuls in a chain, each ``step`` wider than the one before: as many distinct bricks
    of much the same time, none of which holds 5% of the model."""
    b = Builder()
    x = "x"
    for i in range(layers):
        x = b.op1("MatMul", [x, b.weight((start + step * i, start + step * (i + 1)))])
    f32 = TensorProto.FLOAT
    return b.model([helper.make_tensor_value_info("x", f32, [rows, start])], [(x, f32)], name="widening")


def masked_softmax(least: float = float(np.finfo(np.float32).min)) -> onnx.ModelProto:
    """Attention scores plus a mask of ``least`` (float32's least value, as torch exports it; -10000
    as a BERT built by hand masks) where ``mask`` is 0, then a Softmax."""
    nodes = [
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "maskf"], ["inverted"]),
        helper.make_node("Mul", ["inverted", "least"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("least", TensorProto.FLOAT, [], [least])]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 8, 8]),
                                               helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 1, 1, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 2, 8, 8])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
