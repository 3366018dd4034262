"""A small graph builder that writes ONNX models layer by layer, with shapes and seeded weights.

Every architecture of the zoo is written against :class:`GraphBuilder`: each method adds one ONNX
node (or the few nodes that an exporter emits for one framework layer), names its tensors uniquely
under the current :meth:`GraphBuilder.scope`, tracks the concrete shape of every value and creates
the layer's weights from a seeded :func:`numpy.random.default_rng`.

Weights are written straight into the model's protobuf as ``raw_data`` (one copy), so that the whole
zoo builds in seconds. They are uniform with a He-like standard deviation ``gain / sqrt(fan_in)``,
which keeps activations finite (and out of the denormal range) through 150+ layers. Trainable
tensors are initializers; non-trainable float constants (anchors, masks, scalars) are ``Constant``
nodes, and integer constants (shapes, axes, indices) are int64 initializers, so that
:func:`count_params` can tell them apart.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

__all__ = ["GraphBuilder", "Value", "OPSET", "IR_VERSION", "VALUE_RANGES_KEY"]

OPSET = 17
IR_VERSION = 8
VALUE_RANGES_KEY = "dlbricks.value_ranges"

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64

_RELU_GAIN = math.sqrt(2.0)
_SQRT3 = math.sqrt(3.0)


@dataclass(frozen=True, slots=True)
class Value:
    """A tensor of the graph being built: its unique name, concrete shape and ONNX element type."""

    name: str
    shape: tuple[int, ...]
    dtype: int = FLOAT

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def channels(self) -> int:
        """Size of dimension 1 (channels of NCHW / NCL tensors)."""
        return self.shape[1]


def _tuple(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(v) for v in value)


def _pool_out(size: int, k: int, s: int, pb: int, pe: int, d: int, ceil: bool) -> int:
    span = size + pb + pe - d * (k - 1) - 1
    if not ceil:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= size + pb:  # last window must start inside the input (PyTorch/ONNX rule)
        out -= 1
    return out


class GraphBuilder:
    """Build one ONNX model: inputs, layers with seeded weights, outputs.

    Parameters
    ----------
    name : str
        Graph name.
    seed : int, optional
        Seed of the weight generator; the same seed gives byte-identical models.

    Examples
    --------
    >>> b = GraphBuilder("tiny", seed=0)
    >>> x = b.input("x", (1, 3, 8, 8))
    >>> y = b.relu(b.conv(x, 4, 3))
    >>> b.output(y, "y")
    >>> b.build().graph.output[0].name
    'y'
    """

    def __init__(self, name: str, *, seed: int = 0) -> None:
        self._name = name
        self._rng = np.random.default_rng(seed)
        self._model = onnx.ModelProto()
        self._graph = self._model.graph
        self._scopes: list[str] = []
        self._used: dict[str, int] = {}
        self._values: dict[str, Value] = {}
        self._inputs: list[Value] = []
        self._outputs: list[tuple[Value, str]] = []
        self._initializers: set[str] = set()
        self._const_cache: dict[tuple[int, bytes, tuple[int, ...]], Value] = {}
        self._value_ranges: dict[str, list[int]] = {}
        self._metadata: dict[str, str] = {}
        self._built = False

    # ------------------------------------------------------------------ naming and bookkeeping
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the names of the tensors and nodes created inside the block with ``name/``."""
        self._scopes.append(str(name))
        try:
            yield
        finally:
            self._scopes.pop()

    def _unique(self, base: str) -> str:
        full = "/".join([*self._scopes, base])
        n = self._used.get(full, 0)
        self._used[full] = n + 1
        return full if n == 0 else f"{full}_{n}"

    def _new_value(self, base: str, shape: Sequence[int], dtype: int) -> Value:
        value = Value(self._unique(base), tuple(int(d) for d in shape), dtype)
        self._values[value.name] = value
        return value

    def _initializer(self, base: str, array: np.ndarray) -> Value:
        array = np.asarray(array, order="C")
        dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
        value = self._new_value(base, array.shape, dtype)
        tensor = self._graph.initializer.add()
        tensor.name = value.name
        tensor.data_type = dtype
        tensor.dims.extend(array.shape)
        tensor.raw_data = array.tobytes()
        self._initializers.add(value.name)
        return value

    def set_metadata(self, key: str, value: str) -> None:
        """Record a ``metadata_props`` entry of the model."""
        self._metadata[key] = value

    # ------------------------------------------------------------------ graph interface
    def input(self, name: str, shape: Sequence[int], dtype: int = FLOAT,
              value_range: tuple[int, int] | None = None) -> Value:
        """Declare a graph input; integer inputs take their valid ``[low, high)`` range."""
        value = Value(name, tuple(int(d) for d in shape), dtype)
        self._used[name] = 1
        self._values[name] = value
        self._inputs.append(value)
        if value_range is not None:
            self._value_ranges[name] = [int(value_range[0]), int(value_range[1])]
        return value

    def output(self, value: Value, name: str | None = None) -> None:
        """Declare ``value`` a graph output, renamed to ``name`` when given."""
        self._outputs.append((value, name or value.name))

    def build(self) -> onnx.ModelProto:
        """Return the finished :class:`onnx.ModelProto` (opset 17, IR version 8); call it once."""
        if self._built:
            raise RuntimeError(f"The graph '{self._name}' was already built; use a new GraphBuilder.")
        self._built = True
        renames = {v.name: n for v, n in self._outputs if n != v.name}
        clashes = sorted(n for n in renames.values() if n in self._values)
        if clashes:
            raise ValueError(f"Output names {clashes} of graph '{self._name}' are already tensor names.")
        graph = self._graph
        graph.name = self._name
        if renames:
            for node in graph.node:
                for i, n in enumerate(node.input):
                    if n in renames:
                        node.input[i] = renames[n]
                for i, n in enumerate(node.output):
                    if n in renames:
                        node.output[i] = renames[n]
        for v in self._inputs:
            graph.input.append(helper.make_tensor_value_info(v.name, v.dtype, v.shape))
        output_names = {v.name for v, _ in self._outputs}
        for v, n in self._outputs:
            graph.output.append(helper.make_tensor_value_info(n, v.dtype, v.shape))
        skip = output_names | self._initializers | {v.name for v in self._inputs}
        for v in self._values.values():
            if v.name not in skip:
                graph.value_info.append(helper.make_tensor_value_info(v.name, v.dtype, v.shape))
        model = self._model
        model.ir_version = IR_VERSION
        model.producer_name = "dlbricks.model_zoo"
        opset = model.opset_import.add()
        opset.domain = ""
        opset.version = OPSET
        metadata = dict(self._metadata)
        if self._value_ranges:
            metadata[VALUE_RANGES_KEY] = json.dumps(self._value_ranges, sort_keys=True)
        for key, val in sorted(metadata.items()):
            entry = model.metadata_props.add()
            entry.key = key
            entry.value = val
        return model

    # ------------------------------------------------------------------ tensors
    def weight(self, shape: Sequence[int], std: float, name: str = "weight") -> Value:
        """A trainable float32 initializer, uniform with standard deviation ``std``."""
        shape = tuple(int(d) for d in shape)
        array = self._rng.random(math.prod(shape), dtype=np.float32)
        array -= np.float32(0.5)
        array *= np.float32(2.0 * _SQRT3 * std)
        return self._initializer(name, array.reshape(shape))

    def filled(self, shape: Sequence[int], fill: float, name: str) -> Value:
        """A float32 initializer filled with one value (norm scales, running variances)."""
        return self._initializer(name, np.full(tuple(shape), fill, dtype=np.float32))

    def ints(self, values: Sequence[int] | np.ndarray, name: str = "const") -> Value:
        """An int64 initializer (shapes, axes, indices, sizes)."""
        return self._initializer(name, np.asarray(values, dtype=np.int64))

    def const(self, array: float | np.ndarray, name: str = "const") -> Value:
        """A non-trainable constant as a ``Constant`` node (floats, bools); equal ones are shared."""
        array = np.asarray(array)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        array = np.asarray(array, order="C")
        dtype = helper.np_dtype_to_tensor_dtype(array.dtype)
        key = (dtype, array.tobytes(), array.shape)
        if key in self._const_cache:
            return self._const_cache[key]
        (value,) = self.node("Constant", [], [(array.shape, dtype)], name=name,
                             value=onnx.numpy_helper.from_array(array))
        self._const_cache[key] = value
        return value

    def node(self, op_type: str, inputs: Sequence[Value | None], outputs: Sequence[tuple[Sequence[int], int]],
             *, name: str | None = None, **attrs: object) -> list[Value]:
        """Add one node; ``outputs`` gives each output's (shape, dtype). Returns the output values."""
        node_name = self._unique(name or op_type)
        outs = []
        for i, (shape, dtype) in enumerate(outputs):
            value = Value(node_name if len(outputs) == 1 else f"{node_name}:{i}",
                          tuple(int(d) for d in shape), dtype)
            self._values[value.name] = value
            outs.append(value)
        names = [v.name if v is not None else "" for v in inputs]
        while names and not names[-1]:
            names.pop()
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self._graph.node.append(helper.make_node(op_type, names, [v.name for v in outs],
                                                 name=node_name, **attrs))
        return outs

    def _unary(self, op_type: str, x: Value, name: str | None = None, **attrs: object) -> Value:
        return self.node(op_type, [x], [(x.shape, x.dtype)], name=name, **attrs)[0]

    def _binary(self, op_type: str, a: Value | float, b: Value | float, dtype: int | None = None) -> Value:
        a = a if isinstance(a, Value) else self.const(np.float32(a))
        b = b if isinstance(b, Value) else self.const(np.float32(b))
        shape = np.broadcast_shapes(a.shape, b.shape)
        return self.node(op_type, [a, b], [(shape, dtype or a.dtype)])[0]

    # ------------------------------------------------------------------ elementwise
    def add(self, a: Value | float, b: Value | float) -> Value:
        """Elementwise ``a + b`` with broadcasting."""
        return self._binary("Add", a, b)

    def sub(self, a: Value | float, b: Value | float) -> Value:
        """Elementwise ``a - b`` with broadcasting."""
        return self._binary("Sub", a, b)

    def mul(self, a: Value | float, b: Value | float) -> Value:
        """Elementwise ``a * b`` with broadcasting."""
        return self._binary("Mul", a, b)

    def div(self, a: Value | float, b: Value | float) -> Value:
        """Elementwise ``a / b`` with broadcasting."""
        return self._binary("Div", a, b)

    def pow(self, a: Value, b: float) -> Value:
        """Elementwise ``a ** b``."""
        return self._binary("Pow", a, b)

    def max(self, a: Value | float, b: Value | float) -> Value:
        """Elementwise maximum."""
        return self._binary("Max", a, b)

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        """``a`` where ``cond`` else ``b``."""
        shape = np.broadcast_shapes(cond.shape, a.shape, b.shape)
        return self.node("Where", [cond, a, b], [(shape, a.dtype)])[0]

    def relu(self, x: Value) -> Value:
        """ReLU."""
        return self._unary("Relu", x)

    def relu6(self, x: Value) -> Value:
        """ReLU6 as ``Clip(x, 0, 6)``."""
        lo, hi = self.const(np.float32(0.0)), self.const(np.float32(6.0))
        return self.node("Clip", [x, lo, hi], [(x.shape, x.dtype)])[0]

    def leaky_relu(self, x: Value, alpha: float = 0.1) -> Value:
        """Leaky ReLU."""
        return self._unary("LeakyRelu", x, alpha=float(alpha))

    def sigmoid(self, x: Value) -> Value:
        """Logistic sigmoid."""
        return self._unary("Sigmoid", x)

    def tanh(self, x: Value) -> Value:
        """Hyperbolic tangent."""
        return self._unary("Tanh", x)

    def exp(self, x: Value) -> Value:
        """Exponential."""
        return self._unary("Exp", x)

    def silu(self, x: Value) -> Value:
        """SiLU / swish as ``x * Sigmoid(x)`` (how PyTorch exports it at opset 17)."""
        return self.mul(x, self.sigmoid(x))

    def hard_swish(self, x: Value) -> Value:
        """Hard swish (MobileNetV3)."""
        return self._unary("HardSwish", x)

    def hard_sigmoid(self, x: Value) -> Value:
        """PyTorch's hard sigmoid ``relu6(x + 3) / 6``."""
        return self._unary("HardSigmoid", x, alpha=1.0 / 6.0, beta=0.5)

    def gelu(self, x: Value, approximate: bool = False) -> Value:
        """GELU as exporters write it: Erf form, or the tanh form (GPT-2's ``gelu_new``)."""
        if not approximate:
            inner = self._unary("Erf", self.div(x, math.sqrt(2.0)))
            return self.mul(self.mul(x, self.add(inner, 1.0)), 0.5)
        cube = self.mul(self.pow(x, 3.0), 0.044715)
        inner = self.tanh(self.mul(self.add(x, cube), math.sqrt(2.0 / math.pi)))
        return self.mul(self.mul(x, 0.5), self.add(inner, 1.0))

    def activation(self, x: Value, kind: str | None) -> Value:
        """Apply an activation by name: relu, relu6, leaky, silu, hswish, hsigmoid, sigmoid, tanh or None."""
        if kind is None:
            return x
        fn = {"relu": self.relu, "relu6": self.relu6, "leaky": self.leaky_relu, "silu": self.silu,
              "hswish": self.hard_swish, "hsigmoid": self.hard_sigmoid, "sigmoid": self.sigmoid,
              "tanh": self.tanh}[kind]
        return fn(x)

    def softmax(self, x: Value, axis: int = -1) -> Value:
        """Softmax along ``axis``."""
        return self._unary("Softmax", x, axis=axis)

    def cast(self, x: Value, to: int) -> Value:
        """Cast to the ONNX element type ``to``."""
        return self.node("Cast", [x], [(x.shape, to)], to=to)[0]

    # ------------------------------------------------------------------ convolution and norms
    def conv(self, x: Value, out_channels: int, kernel: int | Sequence[int], *, stride: int | Sequence[int] = 1,
             padding: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1, groups: int = 1,
             bias: bool = True, gain: float = _RELU_GAIN, name: str = "conv") -> Value:
        """Convolution over the spatial dims of ``x`` (1-D or 2-D), PyTorch-style arguments.

        ``padding`` is symmetric per spatial dim, or ``2 * ndim`` explicit ONNX pads; ``None``
        means ``dilation * (kernel - 1) // 2`` ("same" for odd kernels at stride 1).
        """
        nd = x.rank - 2
        k, s, d = _tuple(kernel, nd), _tuple(stride, nd), _tuple(dilation, nd)
        if padding is None:
            padding = tuple(di * (ki - 1) // 2 for ki, di in zip(k, d))
        p = _tuple(padding, nd)
        pads = p if len(p) == 2 * nd else p + p
        in_per_group = x.channels // groups
        w = self.weight((out_channels, in_per_group, *k), gain / math.sqrt(in_per_group * math.prod(k)),
                        name=f"{name}.weight")
        b = self.weight((out_channels,), 0.01, name=f"{name}.bias") if bias else None
        spatial = [_pool_out(x.shape[2 + i], k[i], s[i], pads[i], pads[nd + i], d[i], False)
                   for i in range(nd)]
        return self.node("Conv", [x, w, b], [((x.shape[0], out_channels, *spatial), FLOAT)], name=name,
                         kernel_shape=list(k), strides=list(s), pads=list(pads), dilations=list(d),
                         group=groups)[0]

    def conv_transpose(self, x: Value, out_channels: int, kernel: int, stride: int,
                       name: str = "upconv") -> Value:
        """Transposed 2-D convolution with bias, no padding (``kernel == stride`` upsampling)."""
        w = self.weight((x.channels, out_channels, kernel, kernel),
                        _RELU_GAIN / math.sqrt(x.channels * kernel * kernel / (stride * stride)),
                        name=f"{name}.weight")
        b = self.weight((out_channels,), 0.01, name=f"{name}.bias")
        h, wd = ((n - 1) * stride + kernel for n in x.shape[2:])
        return self.node("ConvTranspose", [x, w, b], [((x.shape[0], out_channels, h, wd), FLOAT)],
                         name=name, kernel_shape=[kernel, kernel], strides=[stride, stride])[0]

    def batch_norm(self, x: Value, *, gain: float = 1.0, eps: float = 1e-5, affine: bool = True,
                   name: str = "bn") -> Value:
        """Inference BatchNormalization; ``gain`` is the scale (small on residual branches).

        ``affine=False`` (MXNet's ``scale=False, center=False``) makes scale and bias constants.
        """
        c = (x.channels,)
        if affine:
            scale = self.filled(c, gain, f"{name}.weight")
            bias = self.weight(c, 0.01, name=f"{name}.bias")
        else:
            scale = self.const(np.ones(c, np.float32))
            bias = self.const(np.zeros(c, np.float32))
        mean = self.weight(c, 0.01, name=f"{name}.running_mean")
        var = self.filled(c, 1.0, f"{name}.running_var")
        return self.node("BatchNormalization", [x, scale, bias, mean, var], [(x.shape, FLOAT)],
                         name=name, epsilon=float(eps))[0]

    def conv_bn(self, x: Value, out_channels: int, kernel: int | Sequence[int], act: str | None = "relu",
                *, bn_gain: float = 1.0, eps: float = 1e-5, **conv_kwargs: object) -> Value:
        """Conv (no bias) + BatchNorm + activation: the unit of most modern CNNs."""
        y = self.conv(x, out_channels, kernel, bias=False, **conv_kwargs)  # type: ignore[arg-type]
        return self.activation(self.batch_norm(y, gain=bn_gain, eps=eps), act)

    def layer_norm(self, x: Value, eps: float = 1e-5, name: str = "ln") -> Value:
        """LayerNormalization over the last dim, with scale and bias."""
        c = (x.shape[-1],)
        scale = self.filled(c, 1.0, f"{name}.weight")
        bias = self.weight(c, 0.01, name=f"{name}.bias")
        return self.node("LayerNormalization", [x, scale, bias], [(x.shape, FLOAT)], name=name,
                         axis=-1, epsilon=float(eps))[0]

    # ------------------------------------------------------------------ pooling
    def _pool(self, op_type: str, x: Value, kernel: int | Sequence[int], stride: int | Sequence[int] | None,
              padding: int | Sequence[int], ceil_mode: bool, **attrs: object) -> Value:
        nd = x.rank - 2
        k = _tuple(kernel, nd)
        s = _tuple(stride if stride is not None else kernel, nd)
        p = _tuple(padding, nd)
        pads = p if len(p) == 2 * nd else p + p
        spatial = [_pool_out(x.shape[2 + i], k[i], s[i], pads[i], pads[nd + i], 1, ceil_mode) for i in range(nd)]
        return self.node(op_type, [x], [((*x.shape[:2], *spatial), x.dtype)], kernel_shape=list(k),
                         strides=list(s), pads=list(pads), ceil_mode=int(ceil_mode), **attrs)[0]

    def max_pool(self, x: Value, kernel: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False) -> Value:
        """MaxPool (stride defaults to the kernel, as in PyTorch)."""
        return self._pool("MaxPool", x, kernel, stride, padding, ceil_mode)

    def avg_pool(self, x: Value, kernel: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Value:
        """AveragePool (PyTorch's default ``count_include_pad=True``)."""
        return self._pool("AveragePool", x, kernel, stride, padding, ceil_mode,
                          count_include_pad=int(count_include_pad))

    def global_avg_pool(self, x: Value) -> Value:
        """GlobalAveragePool (keeps the spatial dims as 1)."""
        return self.node("GlobalAveragePool", [x], [((*x.shape[:2], *[1] * (x.rank - 2)), x.dtype)])[0]

    # ------------------------------------------------------------------ dense layers
    def linear(self, x: Value, out_features: int, *, bias: bool = True, std: float | None = None,
               name: str = "fc") -> Value:
        """A fully connected layer: ``Gemm(transB=1)`` on 2-D inputs, ``MatMul + Add`` otherwise."""
        n_in = x.shape[-1]
        std = std if std is not None else _RELU_GAIN / math.sqrt(n_in)
        if x.rank == 2:
            w = self.weight((out_features, n_in), std, name=f"{name}.weight")
            b = self.weight((out_features,), 0.01, name=f"{name}.bias") if bias else None
            return self.node("Gemm", [x, w, b], [((x.shape[0], out_features), FLOAT)], name=name, transB=1)[0]
        w = self.weight((n_in, out_features), std, name=f"{name}.weight")
        y = self.matmul(x, w)
        return self.add(y, self.weight((out_features,), 0.01, name=f"{name}.bias")) if bias else y

    def matmul(self, a: Value, b: Value) -> Value:
        """Batched matrix product with broadcasting of the leading dims."""
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return self.node("MatMul", [a, b], [((*lead, a.shape[-2], b.shape[-1]), FLOAT)])[0]

    def embedding(self, ids: Value, num: int, dim: int, std: float = 0.02, name: str = "embedding") -> Value:
        """An embedding table and its Gather over integer ``ids``."""
        table = self.weight((num, dim), std, name=f"{name}.weight")
        return self.gather(table, ids, axis=0)

    def lstm(self, x: Value, hidden: int, name: str = "lstm") -> Value:
        """One unidirectional ONNX LSTM layer over ``x`` of shape (seq, batch, features).

        Returns ``Y`` squeezed to (seq, batch, hidden). ``B`` holds both PyTorch biases (8 * hidden).
        """
        std = 1.0 / math.sqrt(hidden)
        w = self.weight((1, 4 * hidden, x.shape[-1]), std, name=f"{name}.W")
        r = self.weight((1, 4 * hidden, hidden), std, name=f"{name}.R")
        b = self.weight((1, 8 * hidden), std, name=f"{name}.B")
        seq, batch = x.shape[0], x.shape[1]
        (y,) = self.node("LSTM", [x, w, r, b], [((seq, 1, batch, hidden), FLOAT)], name=name,
                         hidden_size=hidden)
        return self.squeeze(y, [1])

    # ------------------------------------------------------------------ shape manipulation
    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        """Reshape with a constant shape (``-1`` and ``0`` allowed, resolved here)."""
        out = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        if -1 in out:
            known = math.prod(d for d in out if d != -1)
            out[out.index(-1)] = math.prod(x.shape) // known
        return self.node("Reshape", [x, self.ints(list(shape), "shape")], [(out, x.dtype)])[0]

    def flatten(self, x: Value, axis: int = 1) -> Value:
        """Flatten to 2-D at ``axis``."""
        shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
        return self.node("Flatten", [x], [(shape, x.dtype)], axis=axis)[0]

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        """Permute dimensions."""
        return self.node("Transpose", [x], [([x.shape[p] for p in perm], x.dtype)], perm=list(perm))[0]

    def squeeze(self, x: Value, axes: Sequence[int]) -> Value:
        """Remove size-1 dims ``axes``."""
        axes = [a % x.rank for a in axes]
        shape = [d for i, d in enumerate(x.shape) if i not in axes]
        return self.node("Squeeze", [x, self.ints(list(axes), "axes")], [(shape, x.dtype)])[0]

    def unsqueeze(self, x: Value, axes: Sequence[int]) -> Value:
        """Insert size-1 dims at ``axes`` (of the output)."""
        rank = x.rank + len(axes)
        axes = sorted(a % rank for a in axes)
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        return self.node("Unsqueeze", [x, self.ints(list(axes), "axes")], [(shape, x.dtype)])[0]

    def concat(self, xs: Sequence[Value], axis: int = 1) -> Value:
        """Concatenate along ``axis``."""
        axis = axis % xs[0].rank
        shape = list(xs[0].shape)
        shape[axis] = sum(v.shape[axis] for v in xs)
        return self.node("Concat", list(xs), [(shape, xs[0].dtype)], axis=axis)[0]

    def split(self, x: Value, sizes: Sequence[int], axis: int = 1) -> list[Value]:
        """Split along ``axis`` into pieces of ``sizes``."""
        axis = axis % x.rank
        shapes = [(*x.shape[:axis], s, *x.shape[axis + 1:]) for s in sizes]
        return self.node("Split", [x, self.ints(list(sizes), "split")], [(s, x.dtype) for s in shapes],
                         axis=axis)

    def slice(self, x: Value, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int]) -> Value:
        """Slice with step 1 (``ends`` already clipped to the dims)."""
        shape = list(x.shape)
        for s, e, a in zip(starts, ends, axes):
            shape[a] = e - s
        return self.node("Slice", [x, self.ints(list(starts), "starts"), self.ints(list(ends), "ends"),
                                   self.ints(list(axes), "axes")], [(shape, x.dtype)])[0]

    def gather(self, data: Value, indices: Value | int, axis: int = 0) -> Value:
        """Gather along ``axis``; an int index drops the axis."""
        idx = indices if isinstance(indices, Value) else self.ints(np.int64(indices), "index")
        axis = axis % data.rank
        shape = (*data.shape[:axis], *idx.shape, *data.shape[axis + 1:])
        return self.node("Gather", [data, idx], [(shape, data.dtype)], axis=axis)[0]

    def reduce(self, op_type: str, x: Value, axes: Sequence[int], keepdims: bool = True) -> Value:
        """A Reduce* op over ``axes`` (attribute form, opset 17)."""
        axes = [a % x.rank for a in axes]
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes]
        return self.node(op_type, [x], [(shape, x.dtype)], axes=axes, keepdims=int(keepdims))[0]

    def resize(self, x: Value, size: Sequence[int], mode: str = "linear") -> Value:
        """Resize the spatial dims to ``size``: ``linear`` as PyTorch's bilinear
        (``align_corners=False``) or ``nearest`` as its nearest upsampling."""
        sizes = self.ints([*x.shape[:2], *size], "sizes")
        attrs: dict[str, object] = {"mode": mode}
        if mode == "linear":
            attrs["coordinate_transformation_mode"] = "pytorch_half_pixel"
        else:
            attrs["coordinate_transformation_mode"] = "asymmetric"
            attrs["nearest_mode"] = "floor"
        return self.node("Resize", [x, None, None, sizes], [((*x.shape[:2], *size), x.dtype)], **attrs)[0]

    def shape_of(self, x: Value) -> Value:
        """The runtime ``Shape`` of ``x`` (int64 vector), as exporters emit before dynamic Reshapes."""
        return self.node("Shape", [x], [((x.rank,), INT64)])[0]
