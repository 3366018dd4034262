"""Conversion of MXNet bricks (``org.mxnet`` nodes) into standard ONNX bricks.

A brick cut from an MXNet model keeps MXNet's ops; :func:`mxnet_brick_to_onnx` rewrites it with
default-domain ONNX ops (opset 17) so that onnxruntime can run it and so that MXNet layers can be
compared with, or estimated from, ONNX bricks. The result is a new :class:`Brick` with its own
signature. Weights follow the original brick: real values are carried over (transposed or reshaped
where the ONNX op wants another layout), synthetic ones stay synthetic. Ops without an exact ONNX
equivalent raise :class:`UnrunnableBrickError`.

Semantics that need care: MXNet's ``FullyConnected`` flattens its input by default (``Flatten`` +
``Gemm``); ``BatchNorm`` defaults to ``fix_gamma=True`` and ``eps=1e-3``; ``Pooling`` with
``pooling_convention="full"`` rounds up (``ceil_mode=1``); ``Dropout`` is the identity at inference;
``SoftmaxOutput`` is a softmax over axis 1 whose label input is not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from dlbricks._canonical import canonical_nodes, signature_of, value_digest
from dlbricks._constants import EXACT_MAX_ELEMENTS, POSITIVE_INPUTS, SEMANTIC_INPUTS, ConstantSpec
from dlbricks.bricks import Brick
from dlbricks.cost import node_flops
from dlbricks.errors import UnrunnableBrickError
from dlbricks.mxnet_frontend import MXNET_DOMAIN
from dlbricks.types import TensorSpec, onnx_dtype_to_name

__all__ = ["CONVERTIBLE_OPS", "ONNX_OPSET", "mxnet_brick_flops", "mxnet_brick_to_onnx"]

ONNX_OPSET = 17
IR_VERSION = 8


@dataclass(slots=True)
class _Const:
    """A constant of the converted brick: its spec, value (None: synthetic), how it is made."""

    spec: TensorSpec
    value: np.ndarray | None
    exact: bool
    synthetic: str = "normal"
    hashed: bool = False  # made by the conversion: its value is part of the signature


@dataclass(slots=True)
class _Builder:
    """The converted graph under construction."""

    label: str
    specs: dict[str, TensorSpec]
    consts: dict[str, _Const]
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    counter: int = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"_{stem}{self.counter}"

    def add(self, op: str, inputs: list[str], outputs: list[str], **attrs: object) -> None:
        self.nodes.append(onnx.helper.make_node(op, inputs, outputs, **attrs))

    def constant(self, stem: str, value: np.ndarray) -> str:
        """A new exact constant holding ``value``."""
        name = self.fresh(stem)
        self.consts[name] = _Const(TensorSpec(name, tuple(value.shape), value.dtype.name), value, True, hashed=True)
        return name

    def derived(self, source: str, fn: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...]) -> str:
        """A constant computed from constant ``source`` (transposed, reshaped); synthetic stays synthetic."""
        old = self.consts[source]
        name = self.fresh("w")
        value = fn(old.value) if old.value is not None else None
        self.consts[name] = _Const(TensorSpec(name, shape, old.spec.dtype), value, old.exact, old.synthetic)
        return name


Converter = Callable[[_Builder, onnx.NodeProto, dict[str, str]], None]


# ----------------------------------------------------------------------------------- attributes
def _tuple(text: str | None, default: tuple[int, ...] = ()) -> tuple[int, ...]:
    if text is None or text.strip() in ("", "()", "[]", "None"):
        return default
    return tuple(int(x) for x in re.findall(r"-?\d+", text))


def _bool(text: str | None, default: bool) -> bool:
    if text is None:
        return default
    return text.strip().lower() in ("true", "1")


def _float(text: str | None, default: float) -> float:
    return default if text is None or text.strip() == "None" else float(text)


def _unsupported(b: _Builder, node: onnx.NodeProto, why: str) -> UnrunnableBrickError:
    return UnrunnableBrickError(f"{b.label}: MXNet {node.op_type} {why} has no ONNX equivalent; keep the "
                                f"brick on the mxnet backend.")


def _layout(b: _Builder, node: onnx.NodeProto, attrs: Mapping[str, str]) -> None:
    layout = attrs.get("layout", "None")
    if layout not in ("None", "NCW", "NCHW", "NCDHW"):
        raise _unsupported(b, node, f"with layout={layout}")


# ----------------------------------------------------------------------------------- converters
def _convolution(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    _layout(b, node, attrs)
    kernel = _tuple(attrs.get("kernel"))
    n = len(kernel)
    pad = _tuple(attrs.get("pad"), (0,) * n)
    inputs = list(node.input[:2]) if _bool(attrs.get("no_bias"), False) else list(node.input[:3])
    b.add("Conv", inputs, list(node.output[:1]), kernel_shape=list(kernel),
          strides=list(_tuple(attrs.get("stride"), (1,) * n)), pads=list(pad) * 2,
          dilations=list(_tuple(attrs.get("dilate"), (1,) * n)), group=int(attrs.get("num_group", 1)))


def _batchnorm(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    if int(attrs.get("axis", 1)) != 1:
        raise _unsupported(b, node, f"over axis {attrs['axis']}")
    x, gamma, beta, mean, var = node.input[:5]
    if _bool(attrs.get("fix_gamma"), True):
        channels = b.specs[x].shape[1]
        gamma = b.constant("ones", np.ones(channels, dtype=np.dtype(b.specs[x].dtype)))
    b.add("BatchNormalization", [x, gamma, beta, mean, var], list(node.output[:1]),
          epsilon=_float(attrs.get("eps"), 1e-3))


_ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus",
                "softsign": "Softsign"}


def _activation(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    act = attrs.get("act_type", "")
    if act not in _ACTIVATIONS:
        raise _unsupported(b, node, f"act_type={act}")
    b.add(_ACTIVATIONS[act], [node.input[0]], [node.output[0]])


def _leaky_relu(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    act = attrs.get("act_type", "leaky")
    slope = _float(attrs.get("slope"), 0.25)
    x, y = node.input[0], node.output[0]
    if act == "leaky":
        b.add("LeakyRelu", [x], [y], alpha=slope)
    elif act == "elu":
        b.add("Elu", [x], [y], alpha=slope)
    elif act == "selu":
        b.add("Selu", [x], [y])
    elif act == "prelu":
        rank = len(b.specs[x].shape)
        gamma = node.input[1]
        channels = b.consts[gamma].spec.numel
        shape = (channels,) + (1,) * max(rank - 2, 0)
        slope_name = b.derived(gamma, lambda v: v.reshape(shape), shape)
        b.add("PRelu", [x, slope_name], [y])
    else:
        raise _unsupported(b, node, f"act_type={act}")


def _pooling(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    _layout(b, node, attrs)
    kind = attrs.get("pool_type", "max")
    x, y = node.input[0], node.output[0]
    if kind not in ("max", "avg"):
        raise _unsupported(b, node, f"pool_type={kind}")
    if _bool(attrs.get("global_pool"), False):
        b.add("GlobalMaxPool" if kind == "max" else "GlobalAveragePool", [x], [y])
        return
    kernel = _tuple(attrs.get("kernel"))
    n = len(kernel)
    convention = attrs.get("pooling_convention", "valid")
    if convention not in ("valid", "full"):
        raise _unsupported(b, node, f"pooling_convention={convention}")
    common = {"kernel_shape": list(kernel), "strides": list(_tuple(attrs.get("stride"), (1,) * n)),
              "pads": list(_tuple(attrs.get("pad"), (0,) * n)) * 2, "ceil_mode": int(convention == "full")}
    if kind == "max":
        b.add("MaxPool", [x], [y], **common)
    else:
        b.add("AveragePool", [x], [y], count_include_pad=int(_bool(attrs.get("count_include_pad"), True)),
              **common)


def _deconvolution(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    _layout(b, node, attrs)
    kernel = _tuple(attrs.get("kernel"))
    n = len(kernel)
    pad = _tuple(attrs.get("pad"), (0,) * n)
    inputs = list(node.input[:2]) if _bool(attrs.get("no_bias"), True) else list(node.input[:3])
    extra = {}
    if _tuple(attrs.get("target_shape"), (0,) * n) != (0,) * n:  # MXNet derives pads from it: ONNX too
        extra["output_shape"] = list(b.specs[node.output[0]].shape[2:])
    else:
        extra["pads"] = list(pad) * 2
        extra["output_padding"] = list(_tuple(attrs.get("adj"), (0,) * n))
    b.add("ConvTranspose", inputs, list(node.output[:1]), kernel_shape=list(kernel),
          strides=list(_tuple(attrs.get("stride"), (1,) * n)), dilations=list(_tuple(attrs.get("dilate"), (1,) * n)),
          group=int(attrs.get("num_group", 1)), **extra)


def _bilinear_resize(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    """Resize to the output's size (``like`` inputs give only their shape)."""
    sizes = b.constant("sizes", np.array(b.specs[node.output[0]].shape, dtype=np.int64))
    mode = "align_corners" if _bool(attrs.get("align_corners"), True) else "pytorch_half_pixel"
    b.add("Resize", [node.input[0], "", "", sizes], [node.output[0]], mode="linear",
          coordinate_transformation_mode=mode)


def _adaptive_avg_pool(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    x, y = node.input[0], node.output[0]
    size_in, size_out = b.specs[x].shape[2:], b.specs[y].shape[2:]
    if all(o == 1 for o in size_out):
        b.add("GlobalAveragePool", [x], [y])
        return
    if any(i % o for i, o in zip(size_in, size_out, strict=True)):
        raise _unsupported(b, node, f"from {size_in} to {size_out} (not a whole factor)")
    kernel = [i // o for i, o in zip(size_in, size_out, strict=True)]
    b.add("AveragePool", [x], [y], kernel_shape=kernel, strides=kernel)


def _embedding(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    """MXNet's indices are floats: cast, then gather rows of the weight."""
    indices = b.fresh("idx")
    b.add("Cast", [node.input[0]], [indices], to=onnx.TensorProto.INT64)
    b.add("Gather", [node.input[1], indices], [node.output[0]], axis=0)


def _layer_norm(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    if _bool(attrs.get("output_mean_var"), False):
        raise _unsupported(b, node, "with output_mean_var")
    b.add("LayerNormalization", list(node.input[:3]), [node.output[0]], axis=int(attrs.get("axis", -1)),
          epsilon=_float(attrs.get("eps"), 1e-5))


def _fully_connected(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    x, w = node.input[0], node.input[1]
    bias = None if _bool(attrs.get("no_bias"), False) else node.input[2]
    y = node.output[0]
    rank = len(b.specs[x].shape)
    if _bool(attrs.get("flatten"), True) or rank == 2:
        if rank != 2:
            flat = b.fresh("flat")
            b.add("Flatten", [x], [flat], axis=1)
            x = flat
        b.add("Gemm", [x, w] + ([bias] if bias else []), [y], transB=1)
        return
    if w in b.consts:
        hidden, inner = b.consts[w].spec.shape
        wt = b.derived(w, lambda v: np.ascontiguousarray(v.T), (inner, hidden))
    else:  # a weight computed in the model: transposed in the brick
        wt = b.fresh("wt")
        b.add("Transpose", [w], [wt], perm=[1, 0])
    if bias is None:
        b.add("MatMul", [x, wt], [y])
        return
    product = b.fresh("mm")
    b.add("MatMul", [x, wt], [product])
    b.add("Add", [product, bias], [y])


def _binary(onnx_op: str) -> Converter:
    def convert(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
        b.add(onnx_op, list(node.input[:2]), [node.output[0]])

    return convert


def _unary(onnx_op: str) -> Converter:
    def convert(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
        b.add(onnx_op, [node.input[0]], [node.output[0]])

    return convert


def _scalar(onnx_op: str, reverse: bool = False) -> Converter:
    """``x op scalar`` (``scalar op x`` for MXNet's ``_r*_scalar``)."""

    def convert(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
        dtype = np.dtype(b.specs[node.input[0]].dtype)
        scalar = b.constant("scalar", np.array(_float(attrs.get("scalar"), 0.0), dtype=dtype))
        pair = [scalar, node.input[0]] if reverse else [node.input[0], scalar]
        b.add(onnx_op, pair, [node.output[0]])

    return convert


def _concat(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    b.add("Concat", list(node.input), [node.output[0]], axis=int(attrs.get("dim", 1)))


def _flatten(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    b.add("Flatten", [node.input[0]], [node.output[0]], axis=1)


def _identity(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    b.add("Identity", [node.input[0]], [node.output[0]])


def _softmax(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    if _float(attrs.get("temperature"), 1.0) != 1.0 or _bool(attrs.get("use_length"), False):
        raise _unsupported(b, node, "with a temperature or use_length")
    b.add("Softmax", [node.input[0]], [node.output[0]], axis=int(attrs.get("axis", -1)))


def _softmax_output(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    rank = len(b.specs[node.input[0]].shape)
    if rank != 2 and not _bool(attrs.get("multi_output"), False):
        raise _unsupported(b, node, f"on a rank-{rank} input without multi_output")
    b.add("Softmax", [node.input[0]], [node.output[0]], axis=1)


def _clip(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    dtype = np.dtype(b.specs[node.input[0]].dtype)
    low = b.constant("min", np.array(_float(attrs.get("a_min"), 0.0), dtype=dtype))
    high = b.constant("max", np.array(_float(attrs.get("a_max"), 0.0), dtype=dtype))
    b.add("Clip", [node.input[0], low, high], [node.output[0]])


def _reshape(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    shape = b.specs.get(node.output[0])
    if shape is None:
        raise _unsupported(b, node, "whose output shape is unknown")
    target = b.constant("shape", np.array(shape.shape, dtype=np.int64))
    b.add("Reshape", [node.input[0], target], [node.output[0]])


def _transpose(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    rank = len(b.specs[node.input[0]].shape)
    perm = _tuple(attrs.get("axes"), tuple(reversed(range(rank))))
    b.add("Transpose", [node.input[0]], [node.output[0]], perm=list(perm))


def _expand_dims(b: _Builder, node: onnx.NodeProto, attrs: dict[str, str]) -> None:
    axes = b.constant("axes", np.array([int(attrs["axis"])], dtype=np.int64))
    b.add("Unsqueeze", [node.input[0], axes], [node.output[0]])


#: MXNet op -> converter.
_CONVERTERS: dict[str, Converter] = {
    "Convolution": _convolution, "BatchNorm": _batchnorm, "Activation": _activation,
    "LeakyReLU": _leaky_relu, "Pooling": _pooling, "FullyConnected": _fully_connected,
    "elemwise_add": _binary("Add"), "broadcast_add": _binary("Add"), "_Plus": _binary("Add"),
    "_plus": _binary("Add"), "_add": _binary("Add"), "elemwise_mul": _binary("Mul"),
    "broadcast_mul": _binary("Mul"), "_Mul": _binary("Mul"), "elemwise_sub": _binary("Sub"),
    "broadcast_sub": _binary("Sub"), "Concat": _concat, "concat": _concat, "Flatten": _flatten,
    "flatten": _flatten, "Dropout": _identity, "identity": _identity, "_copy": _identity,
    "softmax": _softmax, "SoftmaxOutput": _softmax_output, "clip": _clip, "Reshape": _reshape,
    "reshape": _reshape, "transpose": _transpose, "expand_dims": _expand_dims,
    "Deconvolution": _deconvolution, "BilinearResize2D": _bilinear_resize,
    "_contrib_BilinearResize2D": _bilinear_resize, "AdaptiveAvgPooling2D": _adaptive_avg_pool,
    "_contrib_AdaptiveAvgPooling2D": _adaptive_avg_pool, "Embedding": _embedding, "LayerNorm": _layer_norm,
    "relu": _unary("Relu"), "sigmoid": _unary("Sigmoid"), "tanh": _unary("Tanh"), "exp": _unary("Exp"),
    "sqrt": _unary("Sqrt"), "elemwise_div": _binary("Div"), "broadcast_div": _binary("Div"),
    "_plus_scalar": _scalar("Add"), "_minus_scalar": _scalar("Sub"), "_rminus_scalar": _scalar("Sub", True),
    "_mul_scalar": _scalar("Mul"), "_div_scalar": _scalar("Div"), "_rdiv_scalar": _scalar("Div", True),
}
#: MXNet ops that :func:`mxnet_brick_to_onnx` converts (some only with certain attributes).
CONVERTIBLE_OPS = frozenset(_CONVERTERS)


# ----------------------------------------------------------------------------------- brick
def mxnet_brick_to_onnx(brick: Brick) -> Brick:
    """A standard ONNX brick (default domain, opset 17) computing what an MXNet brick computes.

    Parameters
    ----------
    brick : Brick
        A brick of ``org.mxnet`` nodes (from a model loaded with :func:`dlbricks.load_mxnet`).

    Returns
    -------
    Brick
        Same inputs, outputs and weight mode; its own signature, ONNX op types and FLOPs.

    Raises
    ------
    UnrunnableBrickError
        If a node is not an MXNet op, or an op (or attribute value) has no ONNX equivalent.
    """
    label = f"brick {brick.signature[:12]} ({brick.op_type})"
    specs = {s.name: s for s in (*brick.inputs, *brick.outputs)}
    consts = {}
    for c in brick.constants:
        value = numpy_helper.to_array(c.value) if c.value is not None else None
        consts[c.spec.name] = _Const(c.spec, value, c.exact, c.synthetic)
        specs[c.spec.name] = c.spec
    builder = _Builder(label, specs, consts)
    for node in brick.nodes:
        if node.domain != MXNET_DOMAIN:
            raise UnrunnableBrickError(f"{label}: node {node.op_type} of domain '{node.domain}' is not an "
                                       f"MXNet op; only org.mxnet bricks are converted.")
        convert = _CONVERTERS.get(node.op_type)
        if convert is None:
            raise UnrunnableBrickError(f"{label}: MXNet op {node.op_type} has no ONNX conversion (known: "
                                       f"{', '.join(sorted(_CONVERTERS)[:8])}...); keep it on the mxnet backend.")
        attrs = {a.name: a.s.decode() for a in node.attribute if not a.name.startswith("dlbricks_")}
        try:
            convert(builder, node, attrs)
        except (KeyError, ValueError, IndexError) as e:
            raise UnrunnableBrickError(f"{label}: cannot convert {node.op_type} with {attrs}: {e}") from e
    return _assemble(brick, builder)


def mxnet_brick_flops(brick: Brick) -> int | None:
    """FLOPs of an MXNet brick: those of its ONNX conversion (``None`` where an op does not convert),
    so that the roofline of an MXNet model has a compute side too."""
    try:
        return mxnet_brick_to_onnx(brick).flops
    except UnrunnableBrickError:
        return None


def _assemble(brick: Brick, b: _Builder) -> Brick:
    """Name, check, sign and wrap the converted nodes."""
    used: dict[str, None] = {}
    for node in b.nodes:
        for name in node.input:
            if name:
                used.setdefault(name, None)
    inputs = [s.name for s in brick.inputs if s.name in used]  # unread inputs (a softmax label) dropped
    const_names = [n for n in used if n in b.consts]
    outputs = [s.name for s in brick.outputs]
    nodes = canonical_nodes(b.nodes, inputs, const_names, outputs)
    in_specs = tuple(b.specs[n].renamed(f"in{i}") for i, n in enumerate(inputs))
    out_specs = tuple(s.renamed(f"out{i}") for i, s in enumerate(brick.outputs))
    semantic, positive = _roles(nodes)
    const_specs, sig_consts = [], []
    for i, name in enumerate(const_names):
        c = b.consts[name]
        spec = c.spec.renamed(f"c{i}")
        integral = np.issubdtype(np.dtype(spec.dtype), np.integer) or spec.dtype == "bool"
        is_semantic = f"c{i}" in semantic
        exact = c.exact or is_semantic or integral or spec.numel <= EXACT_MAX_ELEMENTS
        hashed = (c.hashed or is_semantic or integral or spec.numel <= 1) and c.value is not None
        tensor = numpy_helper.from_array(c.value, spec.name) if c.value is not None else None
        kind = "positive" if f"c{i}" in positive else c.synthetic
        const_specs.append(ConstantSpec(spec, exact, kind, tensor if (exact or brick.weights == "real") else None))
        sig_consts.append((spec.shape, spec.dtype, value_digest(c.value) if hashed else None))
    opsets = (("", ONNX_OPSET),)
    signature = signature_of(granularity=brick.granularity, nodes=nodes, opsets=dict(opsets),
                             inputs=[(s.shape, s.dtype) for s in in_specs], constants=sig_consts,
                             outputs=[(s.shape, s.dtype) for s in out_specs])
    draft = Brick(signature=signature, granularity=brick.granularity, op_types=tuple(n.op_type for n in nodes),
                  inputs=in_specs, outputs=out_specs, constants=tuple(const_specs), nodes=nodes, opsets=opsets,
                  ir_version=IR_VERSION, flops=None, weights=brick.weights)
    inferred = _infer(draft, brick)
    flops = _flops(nodes, inferred)
    return Brick(signature=signature, granularity=brick.granularity, op_types=draft.op_types, inputs=in_specs,
                 outputs=out_specs, constants=draft.constants, nodes=nodes, opsets=opsets,
                 ir_version=IR_VERSION, flops=flops, weights=brick.weights)


def _roles(nodes: tuple[onnx.NodeProto, ...]) -> tuple[set[str], set[str]]:
    semantic: set[str] = set()
    positive: set[str] = set()
    for node in nodes:
        for position, name in enumerate(node.input):
            if position in SEMANTIC_INPUTS.get(node.op_type, frozenset()):
                semantic.add(name)
            if position in POSITIVE_INPUTS.get(node.op_type, frozenset()):
                positive.add(name)
    return semantic, positive


def _infer(draft: Brick, original: Brick) -> dict[str, TensorSpec]:
    """Every tensor's spec by ONNX shape inference; the outputs must match the original brick's."""
    exact = [c.value for c in draft.constants if c.exact and c.value is not None]
    graph = onnx.helper.make_graph(  # weights as typed inputs: no values drawn for inference
        list(draft.nodes), "infer",
        [s.to_value_info() for s in draft.inputs]
        + [c.spec.to_value_info() for c in draft.constants if not (c.exact and c.value is not None)],
        [s.to_value_info() for s in draft.outputs], initializer=exact)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", ONNX_OPSET)],
                                   ir_version=IR_VERSION)
    label = f"brick {original.signature[:12]} ({original.op_type})"
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UnrunnableBrickError(f"{label}: the converted ONNX brick is not valid: {first}") from e
    specs: dict[str, TensorSpec] = {s.name: s for s in (*draft.inputs, *draft.outputs)}
    specs.update({c.spec.name: c.spec for c in draft.constants})
    for vi in (*inferred.graph.value_info, *inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            spec = TensorSpec(vi.name, tuple(int(d.dim_value) for d in tt.shape.dim),
                              onnx_dtype_to_name(tt.elem_type))
            expected = specs.get(vi.name)
            if expected is not None and expected.shape != spec.shape:
                raise UnrunnableBrickError(
                    f"{label}: the ONNX conversion gives {vi.name} the shape {spec.shape}, MXNet gives "
                    f"{expected.shape}; this attribute combination is not convertible.")
            specs.setdefault(vi.name, spec)
    return specs


def _flops(nodes: tuple[onnx.NodeProto, ...], specs: Mapping[str, TensorSpec]) -> int | None:
    total = 0
    for node in nodes:
        ins = [specs.get(n) if n else None for n in node.input]
        outs = [specs.get(n) if n else None for n in node.output]
        flops = node_flops(node, ins, outs)
        if flops is None:
            return None
        total += flops
    return total
