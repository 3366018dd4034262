"""Predicting bricks that were never measured, with intervals that say how far to trust them.

Kernel classes
    Bricks that run the same kind of kernel share a model: MatMul, Gemm and pointwise (1x1,
    stride 1) convolutions all run a matrix product (``"gemm"``); other convolutions run im2col and
    a product (``"conv"``); element-wise ops, data movement, pooling, normalizations and reductions
    are bound by the bytes they move (``"memory"``); other ops (recurrent ones) form their own
    class. Bricks of several nodes (fused bricks) form ``"<class>+fused"``. Each brick has up to
    three candidate models: its op type's, its class's, and one fitted over every brick (``"*"``).
    A recurrent layer (LSTM, GRU, RNN) has a fourth: its products (:class:`Recurrence`), the input
    one predicted by the class of matrix products, each step's at its roofline.

Each model
    A roofline-like linear model (a non-negative combination of a constant, FLOPs, bytes moved,
    output elements, im2col elements and convolution groups, :func:`scipy.optimize.nnls`, rows
    weighted by 1/latency so that it minimises *relative* error), corrected by the measured/linear
    ratio of the brick's nearest measured neighbours in a space of log shapes (a GEMM by its rows,
    columns, depth, batch and weight bytes, as the BLAS runs it: a pointwise convolution's rows are
    its output channels; a convolution by the GEMM it runs, its kernel and its log stride; other ops
    by their log sizes), the way nn-Meter predicts kernels from shape features. In a class other
    than the matrix products, a neighbour of another op type counts :data:`OP_PENALTY` further
    away: the class shares the linear model (element-wise ops by bytes moved), but the
    measured/linear ratio is the op's own kernel (Clip and Pow of the same bytes ran 3x apart); in
    the class of matrix products MatMul, Gemm and pointwise convolutions run the same GEMM.

Physics
    A prediction never falls below the brick's roofline (FLOPs off the zero padding at the peak
    FLOP rate, weight bytes at the peak bandwidth) where the machine's peaks are calibrated (raised
    to the best rates the measured bricks reached). Nor does it rise above
    :data:`CAP_SLACK` times the slowest rate that measured bricks of its class of at least a
    quarter of its work ran at: the data says how slow a kernel gets, and no further.

Uncertainty
    Each model is cross-validated (leave-one-out up to :data:`LOO_MAX` bricks, else
    :data:`FOLDS`-fold). Its scores are the absolute log errors divided by ``1 + d / d_ref``, with
    ``d`` the standardized distance of the held-out brick to its nearest training brick and
    ``d_ref`` the median of those distances; the conformal quantile ``q`` of the scores at 95% gives
    a predicted brick the log interval ``+-q (1 + d / d_ref)`` (normalized split-conformal): wide
    where the model erred on held-out bricks, and wider the farther the brick lies from what was
    measured; beyond one ``d_ref`` each further unit adds :data:`EXTRAPOLATION`, for errors the
    cross-validation never held a brick out far enough to see. The interval never reaches below
    the roofline nor above the cap.

Choice
    Of a brick's op type model and kernel class model, those not far from the brick
    (:data:`FAR_DISTANCE`), the one with the narrowest interval at its distance predicts it; where
    both are far, the narrowest of them and the global model does: a Gemm far from the classifier
    heads the Gemm model knows is predicted by the class of matrix products, MatMuls included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import onnx
from onnx import helper
from scipy.optimize import nnls
from scipy.spatial import cKDTree

from dlbricks import Brick
from dlbricks.cost import DATA_MOVEMENT_OPS, ELEMENTWISE_OPS, gemm_dims
from dlbricks.types import TensorSpec

__all__ = [
    "LatencyPredictor", "OpModel", "Prediction", "Rates", "CrossValidation", "Recurrence", "Product",
    "computes_on_8bit", "descriptor", "features", "conv_groups", "contiguous_runs", "kernel_class",
    "main_node", "roofline_work", "conformal_quantile", "unseen_op_fit", "Predictor", "floor_drift_s"
]

MIN_BRICKS_PER_OP = 3
NEIGHBOURS = 3
#: Miscoverage of the predicted bricks' intervals (0.05: 95% intervals).
ALPHA = 0.05
#: Models of at most this many bricks are cross-validated leave-one-out, larger ones k-fold.
LOO_MAX = 60
FOLDS = 10
#: Log half-width given where a model has too few bricks to cross-validate (a factor of 3).
UNKNOWN_LOG_HALFWIDTH = math.log(3.0)
#: Smallest log half-width a model gives: the timing noise of one brick.
MIN_LOG_HALFWIDTH = 0.03
#: A brick farther than this many ``d_ref`` from its nearest training brick is far from the data.
FAR_DISTANCE = 3.0
#: Log half-width added per ``d_ref`` beyond the first: past the distances the cross-validation held
#: bricks out at, it has not seen how the model errs.
EXTRAPOLATION = math.log(1.25)
#: A prediction may exceed the slowest rate measured bricks of its class ran at by this factor.
CAP_SLACK = 1.5
#: In a class model other than the matrix products', a training brick of another op type lies
#: ``OP_PENALTY * sqrt(2)`` further (in standardized descriptor units) than one of the brick's own:
#: Clip and Pow move the same bytes at rates 3x apart, while MatMul and Gemm run the same GEMM.
OP_PENALTY = 2.0
#: Bricks whose floor-corrected time is at least this long show rates the machine reached.
REACHED_MIN_S = 100e-6
#: Op types a class model must hold to predict an op type it never saw (see :func:`unseen_op_fit`).
MIN_OP_TYPES = 4

_COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", "MatMulInteger", "QLinearMatMul",
                "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "ConvInteger", "QLinearConv")
#: Element types of quantized values.
_8BIT = frozenset({"int8", "uint8"})
_MEMORY_OPS = ELEMENTWISE_OPS | DATA_MOVEMENT_OPS | {
    "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
    "InstanceNormalization", "LayerNormalization", "GroupNormalization", "LRN", "Softmax",
    "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
    "ReduceSumSquare", "ReduceL1", "ReduceLogSumExp", "ArgMax", "ArgMin", "CumSum", "Resize",
    "Upsample", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}


def floor_drift_s(m: Any) -> float:
    """How far the per-call floor stood above the run's at a brick's own moments, in seconds (below
    it if negative): its ``empty_s`` (the floor's one-node model timed beside it) less the run's
    ``floor_s + node_s`` (the same model's calibrated time); 0 where any of them is unknown. ``m``
    is a ``Measurement`` or a stored measurement record."""
    empty, node, floor = getattr(m, "empty_s", None), getattr(m, "node_s", None), m.floor_s
    if empty is None or node is None or floor is None:
        return 0.0
    return float(empty - floor - node)


def brick_call_s(m: Any) -> float:
    """What a brick's measured call costs beyond its share inside a model, in seconds: the run's
    floor (``floor_s``) and the floor's drift at the brick's moments (:func:`floor_drift_s`)."""
    return (m.floor_s or 0.0) + floor_drift_s(m)


# ------------------------------------------------------------------------------------------ features
def _specs(brick: Brick) -> dict[str, TensorSpec]:
    return ({s.name: s for s in brick.inputs} | {c.spec.name: c.spec for c in brick.constants}
            | {s.name: s for s in brick.outputs})


def computes_on_8bit(brick: Brick) -> bool:
    """Whether a brick holds 8-bit tensors (inputs, weights, outputs) or quantizes or dequantizes:
    a brick of a quantized model whose kernels may run integer arithmetic."""
    specs = (*brick.inputs, *brick.outputs, *(c.spec for c in brick.constants))
    return any(s.dtype in _8BIT for s in specs) or any(
        op in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear") for op in brick.op_types)


def main_node(brick: Brick) -> onnx.NodeProto:
    """The node that does a brick's work: its first compute node (convolution, matrix product,
    recurrent layer), else its first node."""
    return next((n for n in brick.nodes if n.op_type in _COMPUTE_OPS), brick.nodes[0])


def _gemm_dims(brick: Brick) -> tuple[int, int, int, int] | None:
    node = main_node(brick)
    specs = _specs(brick)
    ins = [specs.get(name) for name in node.input]
    outs = [specs.get(name) for name in node.output] if len(brick.nodes) > 1 else list(brick.outputs[:1])
    return gemm_dims(node, ins, outs)


def kernel_class(brick: Brick) -> str:
    """The class of kernel a brick runs: ``"gemm"``, ``"conv"``, ``"memory"`` or its main op type,
    with ``"+fused"`` for bricks of several nodes."""
    op = main_node(brick).op_type
    if _gemm_dims(brick) is not None:
        name = "gemm"
    elif op in ("Conv", "ConvTranspose"):
        name = "conv"
    elif op in _MEMORY_OPS:
        name = "memory"
    else:
        name = op
    return name + ("+fused" if len(brick.nodes) > 1 else "")


def features(brick: Brick, flop_scale: float = 1.0) -> np.ndarray:
    """Features of a brick: [1, FLOPs, bytes moved, output elements, im2col elements, contiguous
    runs, groups]. ``flop_scale`` weighs its FLOPs (:meth:`Rates.flop_scale`: an 8-bit product's
    operations in float32 FLOPs of the same time)."""
    flops = float(brick.flops or 0) * flop_scale
    outputs = float(sum(s.numel for s in brick.outputs))
    return np.array([1.0, flops, float(brick.bytes_moved), outputs, float(im2col_elements(brick)),
                     float(contiguous_runs(brick)), float(conv_groups(brick))])


def contiguous_runs(brick: Brick) -> int:
    """The contiguous runs of memory a brick of one Split, Concat or Transpose copies (1 for others).

    A copy costs its bytes plus a fixed time per run: a Split of ``[1, 8732, 4]`` into pairs along
    its last axis copies 17464 runs of 8 bytes and took 44 us for 280 KB, a Split of ``[1, 232, 14,
    14]`` in halves along its channels two runs of 91 KB and 4.7 us for 360 KB. Split and Concat
    copy one run per piece and per index before their axis; a Transpose one per index before the
    trailing dimensions it keeps in place.
    """
    node = brick.nodes[0]
    if len(brick.nodes) != 1 or node.op_type not in ("Split", "Concat", "Transpose") or not brick.inputs:
        return 1
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    whole = brick.inputs[0].shape if node.op_type != "Concat" else (brick.outputs[0].shape if brick.outputs else ())
    if not whole:
        return 1
    if node.op_type == "Transpose":
        perm = list(attrs.get("perm") or reversed(range(len(whole))))
        kept = len(perm)
        while kept and perm[kept - 1] == kept - 1:
            kept -= 1
        return max(math.prod(whole[:kept]), 1)
    axis = int(attrs.get("axis", 0)) % len(whole)
    pieces = len(brick.outputs) if node.op_type == "Split" else len(node.input)
    return max(pieces * math.prod(whole[:axis]), 1)


def conv_groups(brick: Brick) -> int:
    """The groups of a brick's convolution (0 when it runs none).

    A grouped convolution runs one small kernel per group (onnxruntime's MLAS loops over them), so
    a depthwise convolution costs about a fixed time per channel on top of its work: 58-960
    channels at 7x7 to 28x28 pixels took 0.3-1.5 us a channel, whatever their FLOPs.
    """
    node = main_node(brick)
    if node.op_type not in ("Conv", "ConvTranspose"):
        return 0
    return int(next((helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1))


def roofline_work(brick: Brick) -> tuple[int, int]:
    """What a roofline charges a brick: FLOPs off its convolutions' zero padding, and its weights'
    bytes (activations live in the cache inside a model; weights come from memory)."""
    return max((brick.flops or 0) - brick.padding_flops, 0), brick.constant_bytes


def im2col_elements(brick: Brick) -> int:
    """Elements of the im2col matrix a convolution brick builds (0 when it needs none).

    CPU runtimes (onnxruntime's MLAS, oneDNN's gemm path) run a convolution as a GEMM on an
    unfolded input of K x N = (input channels x kernel area) x output pixels; writing and reading it
    is memory traffic that FLOPs do not show and that dominates when there are few output channels
    to share it (a 3x3 convolution to 32 channels). The weights may be a constant or an input (a
    QDQ model at ``disable`` feeds them from a DequantizeLinear); the unfolding is the same. A
    pointwise stride-1 convolution reads its input as it is, and a depthwise 3x3 one has a kernel
    of its own (MLAS's depthwise kernel is 3x3 only: a depthwise 5x5 convolution unfolds its input
    like any other).
    """
    node = brick.nodes[0]
    weight_spec = _specs(brick).get(node.input[1]) if len(node.input) > 1 else None
    if node.op_type != "Conv" or weight_spec is None or not brick.outputs:
        return 0
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    weight = weight_spec.shape
    group = int(attrs.get("group", 1))
    kernel = math.prod(weight[2:])
    strided = any(s != 1 for s in attrs.get("strides") or ()) or any(attrs.get("pads") or ())
    if (kernel == 1 and not strided) or (group > 1 and weight[1] == 1 and tuple(weight[2:]) == (3, 3)):
        return 0
    return weight[1] * group * kernel * math.prod(brick.outputs[0].shape[2:])


def _log(value: float) -> float:
    return math.log(max(float(value), 1.0))


def descriptor(brick: Brick, kind: str = "auto") -> np.ndarray:
    """Where a brick sits among bricks of its kind: log sizes and kernel attributes.

    ``kind`` ``"gemm"``: log rows, columns, depth, batch and weight bytes of the product it runs
    (a convolution's rows are its output channels: onnxruntime multiplies its weights by its input).
    ``"conv"``: the GEMM a convolution runs, log M (output channels per group), N (output pixels),
    K (input channels per group times kernel area), log kernel area, log stride and log group; the rate
    of a GEMM depends on its three sizes, not only on their product. ``"generic"``: log FLOPs,
    input, output and weight bytes, the number of inputs, log input and output channels and log
    output size past dimension 1. ``"auto"`` picks by :func:`kernel_class`.
    """
    if kind == "auto":
        kind = _kind(kernel_class(brick))
    if kind == "gemm":
        dims = _gemm_dims(brick) or (1, 1, 1, 1)
        batch, rows, cols, depth = dims
        if main_node(brick).op_type == "Conv":  # MLAS multiplies the weights by the input: M = channels
            rows, cols = cols, rows
        return np.array([_log(rows), _log(cols), _log(depth), _log(batch), _log(brick.constant_bytes)])
    node = main_node(brick)
    specs = _specs(brick)
    first_out = brick.outputs[0].shape if brick.outputs else ()
    weight = specs.get(node.input[1]) if len(node.input) > 1 else None
    if kind == "conv":
        if node.op_type not in ("Conv", "ConvTranspose") or weight is None or len(weight.shape) < 3:
            return np.zeros(6)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        group = int(attrs.get("group", 1))
        kernel = float(np.prod(weight.shape[2:]))
        return np.array([
            _log(weight.shape[0] / group), _log(float(np.prod(first_out[2:]))), _log(weight.shape[1] * kernel),
            _log(kernel), _log(max(attrs.get("strides") or (1,))), _log(group)])
    first_in = brick.inputs[0].shape if brick.inputs else ()
    return np.array([
        np.log1p(float(brick.flops or 0)),
        np.log1p(float(sum(s.nbytes for s in brick.inputs))),
        np.log1p(float(sum(s.nbytes for s in brick.outputs))),
        np.log1p(float(brick.constant_bytes)),
        float(len(brick.inputs) + len(brick.constants)),
        np.log1p(float(first_in[1]) if len(first_in) > 1 else 0.0),
        np.log1p(float(first_out[1]) if len(first_out) > 1 else 0.0),
        np.log1p(float(np.prod(first_out[2:])) if len(first_out) > 2 else 0.0),
    ])


def _kind(key: str) -> str:
    """The descriptor kind of a model's key (an op type, a kernel class or ``"*"``)."""
    base = key.split("+")[0]
    if base in ("gemm", "MatMul", "Gemm"):
        return "gemm"
    if base in ("conv", "Conv", "ConvTranspose"):
        return "conv"
    return "generic"


#: Gates of the recurrent layers: each runs ``gates`` products of its hidden size per step.
RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@dataclass(frozen=True, slots=True)
class Recurrence:
    """The work of a recurrent layer (LSTM, GRU, RNN) as onnxruntime runs it: one product of every
    step's input by the input weights ``W`` (``seq * batch`` rows), then, step after step, one
    product of the hidden state by the recurrent weights ``R`` (``batch`` rows), whose weights the
    cache holds from one step to the next."""

    seq: int
    batch: int
    inputs: int
    hidden: int
    gates: int
    directions: int

    @classmethod
    def of(cls, brick: Brick) -> Recurrence | None:
        """The recurrence of a brick of one recurrent node, or None."""
        node = brick.nodes[0]
        if len(brick.nodes) != 1 or node.op_type not in RECURRENT_GATES or len(node.input) < 3:
            return None
        specs = _specs(brick)
        x, r = specs.get(node.input[0]), specs.get(node.input[2])
        if x is None or r is None or len(x.shape) != 3 or len(r.shape) != 3:
            return None
        seq, batch, inputs = x.shape
        directions, _, hidden = r.shape
        return cls(seq, batch, inputs, hidden, RECURRENT_GATES[node.op_type], directions)

    def input_product(self) -> Product:
        """The product of every step's input by ``W``."""
        cols = self.gates * self.hidden * self.directions
        return Product(1, self.seq * self.batch, cols, self.inputs, 4 * self.inputs * cols)

    def step(self) -> Product:
        """One step's product of the hidden state by ``R``."""
        cols = self.gates * self.hidden * self.directions
        return Product(1, self.batch, cols, self.hidden, 4 * self.hidden * cols)


@dataclass(frozen=True, slots=True)
class Product:
    """A float32 matrix product ``batch x (rows x depth) @ (depth x cols)``, weights of
    ``weight_bytes``: the features, descriptor and roofline work a brick running it would have."""

    batch: int
    rows: int
    cols: int
    depth: int
    weight_bytes: int

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.rows * self.cols * self.depth

    @property
    def bytes_moved(self) -> int:
        return 4 * self.batch * self.rows * (self.depth + self.cols) + self.weight_bytes

    def features(self) -> np.ndarray:
        """As :func:`features`."""
        return np.array([1.0, float(self.flops), float(self.bytes_moved), float(self.batch * self.rows * self.cols),
                         0.0, 1.0, 0.0])

    def descriptor(self) -> np.ndarray:
        """As :func:`descriptor` of kind ``"gemm"``."""
        return np.array([_log(self.rows), _log(self.cols), _log(self.depth), _log(self.batch),
                         _log(self.weight_bytes)])


# ------------------------------------------------------------------------------------------ records
@dataclass(frozen=True, slots=True)
class Rates:
    """Rates the machine reaches: FLOP/s, weight bytes/s (the roofline's) and bytes moved/s; and
    8-bit integer ops/s where known, for the bricks that compute on 8-bit values."""

    flops_per_s: float
    weight_bytes_per_s: float
    bytes_per_s: float
    int_ops_per_s: float | None = None

    def compute_rate(self, brick: Brick) -> float:
        """The arithmetic rate that bounds ``brick``: the float one, or for a brick computing on
        8-bit values (:func:`computes_on_8bit`) the higher of the float and integer ones."""
        if self.int_ops_per_s is None or not computes_on_8bit(brick):
            return self.flops_per_s
        return max(self.flops_per_s, self.int_ops_per_s)

    def flop_scale(self, brick: Brick) -> float:
        """What one of ``brick``'s operations weighs in float32 FLOPs of the same time: 1, or for a
        brick computing on 8-bit values the float peak over the integer one. A product on 8-bit
        values is predicted by the float products of its shape at the machine's ratio of peaks
        (onnxruntime's 8-bit GEMM ran 3.8x the float one's rate here)."""
        return self.flops_per_s / self.compute_rate(brick)

    def roofline_s(self, brick: Brick) -> float:
        """max(FLOPs / FLOP rate, weight bytes / bandwidth): no run is faster."""
        flops, weights = roofline_work(brick)
        return max(flops / self.compute_rate(brick), weights / self.weight_bytes_per_s)

    def product_s(self, product: Product) -> float:
        """max(FLOPs / FLOP rate, weight bytes / bandwidth) of a product: its roofline."""
        return max(product.flops / self.flops_per_s, product.weight_bytes / self.weight_bytes_per_s)

    def work_s(self, brick: Brick) -> float:
        """max(FLOPs / FLOP rate, bytes moved / bandwidth): the brick's work at the best rates.

        The FLOPs include those over a convolution's zero padding: the roofline leaves them out,
        but the kernels do them (an im2col GEMM multiplies the padding too). A dilated 3x3
        convolution of DeepLabV3's head, dilation 36 on a 33x33 map, is nearly all padding and ran
        as long as its dilation-12 twin; its cap from the work without padding held it to a third."""
        return max((brick.flops or 0) / self.compute_rate(brick), brick.bytes_moved / self.bytes_per_s, 1e-12)


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted brick time (seconds) with its interval.

    ``model`` is the key of the model that predicted it; ``distance`` its distance to the nearest
    training brick of that model in units of the model's ``d_ref``; ``floor_s`` the roofline it was
    held above; ``capped`` whether the cap of its class held it down.
    """

    seconds: float
    low_s: float
    high_s: float
    model: str
    distance: float
    floor_s: float
    capped: bool

    @property
    def far(self) -> bool:
        """Whether the brick lies far from every brick the model was fitted on."""
        return self.distance > FAR_DISTANCE


@runtime_checkable
class Predictor(Protocol):
    """What :func:`~dlbricks.estimator.estimate` asks of a predictor of bricks the database never
    measured (``on_missing="predict"``, ``predictor=``): :class:`LatencyPredictor` is one; a model of
    one's own (a learned cost model, a vendor's tables) is another.
    """

    def with_peaks(self, peaks: Any) -> Predictor:
        """The predictor to use on a machine with the calibrated ``peaks`` (None: none calibrated);
        itself where they change nothing."""
        ...

    def prediction(self, brick: Brick) -> Prediction | None:
        """``brick``'s own time in seconds, the per-call floor left out, with its interval; None where
        it cannot tell (the estimate then refuses the model in one line)."""
        ...


@dataclass(frozen=True, slots=True)
class _Space:
    """Standardized descriptors of a model's training bricks, for neighbours and distances; with
    ``penalty``, bricks of another op type lie ``penalty * sqrt(2)`` further (a one-hot op type
    scaled by ``penalty`` joins the descriptor; an op type the model never saw lies ``penalty``
    from every training brick)."""

    tree: cKDTree
    center: np.ndarray
    scale: np.ndarray
    ops: tuple[str, ...] = ()
    penalty: float = 0.0

    @classmethod
    def fit(cls, d: np.ndarray, ops: Sequence[str], penalty: float = 0.0) -> _Space:
        center, spread = d.mean(axis=0), d.std(axis=0)
        scale = np.where(spread > 1e-9, spread, 1.0)
        vocabulary = tuple(sorted(set(ops))) if penalty > 0 and len(set(ops)) > 1 else ()
        return cls(cKDTree(_embed((d - center) / scale, ops, vocabulary, penalty)), center, scale, vocabulary,
                   penalty)

    def query(self, d: np.ndarray, k: int, op: str) -> tuple[np.ndarray, np.ndarray]:
        point = _embed(((d - self.center) / self.scale)[None], (op,), self.ops, self.penalty)[0]
        distance, index = self.tree.query(point, k=k)
        return np.atleast_1d(distance), np.atleast_1d(index)


def _embed(z: np.ndarray, ops: Sequence[str], vocabulary: Sequence[str], penalty: float) -> np.ndarray:
    """Standardized descriptors ``z`` with their op types one-hot over ``vocabulary``, scaled by ``penalty``."""
    if not vocabulary:
        return z
    return np.hstack([z, penalty * np.array([[op == o for o in vocabulary] for op in ops], dtype=float)])


@dataclass(frozen=True, slots=True, eq=False)
class _Fitted:
    """One model fitted on a set of bricks: linear coefficients, neighbour ratios, cap data."""

    coef: np.ndarray
    space: _Space
    log_ratio: np.ndarray
    k: int
    work: np.ndarray  # training bricks' work at the best rates, sorted
    slowest: np.ndarray  # per sorted training brick: the largest time/work among bricks of at least its work

    def predict(self, x: np.ndarray, d: np.ndarray, work: float, op: str = "") -> tuple[float, float, float]:
        """(seconds, distance to the nearest training brick, cap) of one brick of op type ``op``."""
        linear = max(float(x @ self.coef), 1e-12)
        distance, index = self.space.query(d, max(self.k, 1), op)
        if self.k > 0:
            weights = 1.0 / (distance + 0.1)
            linear *= float(np.exp(weights @ self.log_ratio[index] / weights.sum()))
        cap = self.cap(work)
        return min(linear, cap), float(distance.min()), cap

    def cap(self, work: float) -> float:
        """The most a brick of ``work`` may take: CAP_SLACK times the slowest time/work ratio of
        training bricks of at least a quarter of its work (the three largest when none is)."""
        start = int(np.searchsorted(self.work, work / 4))
        start = min(start, max(len(self.work) - 3, 0))
        return CAP_SLACK * work * float(self.slowest[start])


def _fit_linear(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    scale = 1.0 / np.maximum(y, 1e-9)
    col = np.maximum(np.abs(x).max(axis=0), 1e-30)
    coef, _ = nnls((x / col) * scale[:, None], y * scale)
    return coef / col


def _fit(x: np.ndarray, d: np.ndarray, y: np.ndarray, work: np.ndarray, k: int, ops: Sequence[str],
         penalty: float = 0.0) -> _Fitted:
    coef = _fit_linear(x, y)
    ratio = y / np.maximum(x @ coef, 1e-12)
    order = np.argsort(work)
    per_work = (y / work)[order]
    slowest = np.maximum.accumulate(per_work[::-1])[::-1]
    return _Fitted(coef, _Space.fit(d, ops, penalty), np.log(np.maximum(ratio, 1e-12)), min(k, len(y)), work[order],
                   slowest)


def conformal_quantile(scores: Sequence[float] | np.ndarray, alpha: float = ALPHA) -> float:
    """The split-conformal quantile: the ceil((n + 1)(1 - alpha))-th smallest score (inf when
    there are too few scores for that level)."""
    ordered = np.sort(np.asarray(scores, dtype=float))
    rank = math.ceil((len(ordered) + 1) * (1 - alpha))
    return float(ordered[rank - 1]) if 0 < rank <= len(ordered) else math.inf


@dataclass(frozen=True, slots=True)
class CrossValidation:
    """Held-out log errors of a model and each held-out brick's distance to its training bricks."""

    log_errors: np.ndarray
    distances: np.ndarray

    @property
    def d_ref(self) -> float:
        """The typical distance of a held-out brick: what interval widths are scaled by."""
        return max(float(np.median(self.distances)), 0.25) if len(self.distances) else 1.0

    def quantile(self, alpha: float = ALPHA) -> float:
        """Conformal quantile of the distance-normalized log errors."""
        if len(self.log_errors) < 3:
            return UNKNOWN_LOG_HALFWIDTH
        scores = self.log_errors / (1 + self.distances / self.d_ref)
        return max(min(conformal_quantile(scores, alpha), 2 * float(scores.max()) + 0.1), MIN_LOG_HALFWIDTH)


def _cross_validate(x: np.ndarray, d: np.ndarray, y: np.ndarray, work: np.ndarray, k: int,
                    ops: Sequence[str], penalty: float = 0.0) -> CrossValidation:
    n = len(y)
    if n < 3:
        return CrossValidation(np.zeros(0), np.zeros(0))
    folds = np.arange(n) % FOLDS if n > LOO_MAX else np.arange(n)
    if n > LOO_MAX:
        np.random.default_rng(0).shuffle(folds)
    errors, distances = np.zeros(n), np.zeros(n)
    for fold in np.unique(folds):
        test = folds == fold
        kept = [op for op, held in zip(ops, test, strict=True) if not held]
        fitted = _fit(x[~test], d[~test], y[~test], work[~test], k, kept, penalty)
        for i in np.flatnonzero(test):
            seconds, distances[i], _ = fitted.predict(x[i], d[i], work[i], ops[i])
            errors[i] = abs(math.log(seconds / y[i]))
    return CrossValidation(errors, distances)


def _op_effects(x: np.ndarray, y: np.ndarray, ops: Sequence[str], coef: np.ndarray) -> dict[str, float]:
    """Each op type's mean log ratio of measured to linear time: its kernel's own speed."""
    logs = np.log(np.maximum(y, 1e-12) / np.maximum(x @ coef, 1e-12))
    kinds = np.array(ops)
    return {op: float(logs[kinds == op].mean()) for op in dict.fromkeys(ops)}


def unseen_op_fit(x: np.ndarray, y: np.ndarray, ops: Sequence[str],
                  alpha: float = ALPHA) -> tuple[float, float] | None:
    """How a class model predicts an op type it never saw: (log effect, conformal log half-width).

    In a class whose op types share a linear model but not a speed (element-wise ops by bytes
    moved: Relu, Erf and QuantizeLinear of the same bytes run at rates 3x apart), a new op type is
    one more draw from the class's op types. Its prediction is the linear model times the median
    op-type effect (:func:`_op_effects`, each op type counting once, whatever its bricks); its
    interval is cross-validated by holding out each op type whole (linear model and effects fitted
    on the others), so it is as wide as the spread between op types, not within one. None below
    :data:`MIN_OP_TYPES` op types.
    """
    kinds = list(dict.fromkeys(ops))
    if len(kinds) < MIN_OP_TYPES:
        return None
    labels = np.array(ops)
    errors: list[float] = []
    for op in kinds:
        held = labels == op
        kept = [o for o in ops if o != op]
        coef = _fit_linear(x[~held], y[~held])
        center = float(np.median(list(_op_effects(x[~held], y[~held], kept, coef).values())))
        predicted = np.maximum(x[held] @ coef, 1e-12) * math.exp(center)
        errors.extend(np.abs(np.log(y[held] / predicted)))
    center = float(np.median(list(_op_effects(x, y, ops, _fit_linear(x, y)).values())))
    scores = np.array(errors)
    width = max(min(conformal_quantile(scores, alpha), 2 * float(scores.max()) + 0.1), MIN_LOG_HALFWIDTH)
    return center, width


@dataclass(frozen=True, slots=True, eq=False)
class OpModel:
    """A fitted latency model for an op type, a kernel class or (``"*"``) every brick.

    ``cv_error`` is the median |relative error| of its cross-validated predictions (NaN below 3
    bricks); ``q`` the conformal log half-width at distance 0 and ``d_ref`` the distance unit.
    """

    op_type: str
    coef: tuple[float, ...]
    n: int
    cv_error: float
    q: float = UNKNOWN_LOG_HALFWIDTH
    d_ref: float = 1.0
    kind: str = "generic"
    fitted: _Fitted | None = None
    #: For an op type the model never saw: (log of its op-type effect, conformal log half-width),
    #: from :func:`unseen_op_fit`; None where the model holds fewer than :data:`MIN_OP_TYPES`.
    unseen_op: tuple[float, float] | None = None

    def knows(self, op_type: str) -> bool:
        """Whether bricks of ``op_type`` were among those the model was fitted on (always, for a
        model whose neighbours do not tell op types apart)."""
        return self.unseen_op is None or self.fitted is None or op_type in self.fitted.space.ops

    def predict(self, brick: Brick, rates: Rates | None = None) -> float:
        """Predicted latency of a brick in seconds (before the roofline floor)."""
        return self._raw(brick, rates)[0]

    def _raw(self, brick: Brick, rates: Rates | None) -> tuple[float, float, float]:
        """(seconds, distance in units of ``d_ref``, cap) of one brick."""
        if self.fitted is None:
            return max(float(features(brick) @ np.array(self.coef)), 0.0), 0.0, math.inf
        work = rates.work_s(brick) if rates else math.inf
        x = features(brick, rates.flop_scale(brick) if rates else 1.0)
        return self._raw_terms(x, descriptor(brick, self.kind), work, brick.op_type)

    def _raw_terms(self, x: np.ndarray, d: np.ndarray, work: float, op: str = "") -> tuple[float, float, float]:
        """(seconds, distance in units of ``d_ref``, cap) of a brick's features, descriptor, work
        and op type."""
        assert self.fitted is not None
        seconds, distance, cap = self.fitted.predict(x, d, work, op)
        return seconds, distance / self.d_ref, cap

    def log_halfwidth(self, distance: float) -> float:
        """The conformal log half-width at ``distance`` (in units of ``d_ref``), plus
        :data:`EXTRAPOLATION` per unit beyond the first."""
        return self.q * (1 + distance) + EXTRAPOLATION * max(distance - 1.0, 0.0)


class LatencyPredictor:
    """Latency models per op type, per kernel class and over all bricks, fitted on measured bricks.

    Parameters
    ----------
    min_bricks : int
        Op types and classes with fewer measured bricks get no model of their own.
    neighbours : int
        Nearest measured bricks whose measured/linear ratio corrects a prediction (0: linear only).
    alpha : float
        Miscoverage of the intervals (0.05: 95%).
    """

    def __init__(self, *, min_bricks: int = MIN_BRICKS_PER_OP, neighbours: int = NEIGHBOURS,
                 alpha: float = ALPHA) -> None:
        self.min_bricks = min_bricks
        self.neighbours = neighbours
        self.alpha = alpha

    def fit_measurements(self, bricks: Iterable[Brick], measurements: Mapping[str, Any], *,
                         peaks: Any = None, cache_bytes: int | None = None, memory_rate: float | None = None,
                         step_rates: Sequence[tuple[int, float]] = ()) -> LatencyPredictor:
        """Fit on ok measurements (``Measurement`` records), less their call's cost (:func:`brick_call_s`)."""
        latency = {sig: m.median_s - brick_call_s(m) for sig, m in measurements.items()
                   if m.status == "ok" and m.median_s is not None}
        return self.fit(bricks, latency, peaks=peaks, cache_bytes=cache_bytes, memory_rate=memory_rate,
                        step_rates=step_rates)

    def fit(self, bricks: Iterable[Brick], latency: Mapping[str, float], *, peaks: Any = None,
            cache_bytes: int | None = None, memory_rate: float | None = None,
            step_rates: Sequence[tuple[int, float]] = ()) -> LatencyPredictor:
        """Fit on the bricks whose signature has a measured, floor-corrected ``latency`` (seconds).

        ``peaks`` (``flops_per_s``, ``bytes_per_s``, as :class:`Peaks`), where calibrated, floor
        every prediction at the roofline; the rates the measured bricks reached raise them. Without
        them the reached rates only scale each brick's work (for the cap): a rate a set of bricks
        reached is no peak, and a roofline at it no floor.

        ``cache_bytes``, the last-level cache of the machine the bricks ran on, tells which recurrent
        layers keep their recurrent weights in the cache from step to step, and ``memory_rate``
        (bytes/s) is how fast a loop reads weights larger than the cache again and again (the
        calibrated matrix-vector product of that size, :func:`~dlbricks.estimator.api.memory_rate`);
        without it, the rate measured bricks with weights larger than the cache reached (see
        :meth:`_recurrent`). ``step_rates``, the calibrated matrix-vector products as ``(weight bytes,
        bytes/s)`` (:func:`~dlbricks.estimator.api.matvec_rates`), give the rate a step reads recurrent
        weights that fit in the cache at.
        """
        measured = [b for b in bricks if b.signature in latency and latency[b.signature] > 0]
        self.training_ = (tuple(measured), dict(latency))
        self.cache_bytes_ = cache_bytes
        self.rates_ = _reached_rates(measured, latency, peaks)
        self.data_rates_ = _reached_rates(measured, latency, None)
        self.floor_rates_ = self.rates_ if peaks is not None else None
        self.memory_rate_ = memory_rate if memory_rate and cache_bytes else _memory_rate(measured, latency, cache_bytes)
        self.step_rates_ = tuple(sorted((int(size), float(rate)) for size, rate in step_rates if rate > 0))
        groups: dict[str, list[Brick]] = {}
        for brick in measured:
            for key in dict.fromkeys((brick.op_type, kernel_class(brick))):
                groups.setdefault(key, []).append(brick)
        self.models_: dict[str, OpModel] = {}
        for key, group in groups.items():
            if len(group) >= self.min_bricks:
                self.models_[key] = self._fit_group(key, group, latency, self.neighbours)
        if measured:
            self.models_["*"] = self._fit_group("*", measured, latency, 0)
        return self

    def with_peaks(self, peaks: Any) -> LatencyPredictor:
        """This predictor fitted again with the machine's calibrated ``peaks`` (itself when it was
        fitted with peaks, or when ``peaks`` is None)."""
        if peaks is None or getattr(self, "floor_rates_", None) is not None or not hasattr(self, "training_"):
            return self
        clone = LatencyPredictor(min_bricks=self.min_bricks, neighbours=self.neighbours, alpha=self.alpha)
        return clone.fit(*self.training_, peaks=peaks, cache_bytes=getattr(self, "cache_bytes_", None),
                         memory_rate=getattr(self, "memory_rate_", None), step_rates=getattr(self, "step_rates_", ()))

    def _fit_group(self, key: str, group: Sequence[Brick], latency: Mapping[str, float], k: int) -> OpModel:
        kind = "generic" if key == "*" else _kind(key)
        x = np.stack([features(b, self.rates_.flop_scale(b)) for b in group])
        d = np.stack([descriptor(b, kind) for b in group])
        y = np.array([latency[b.signature] for b in group])
        work = np.array([self.rates_.work_s(b) for b in group])
        ops = tuple(b.op_type for b in group)
        penalty = OP_PENALTY if key != "*" and kind != "gemm" else 0.0
        fitted = _fit(x, d, y, work, k, ops, penalty)
        cv = _cross_validate(x, d, y, work, k, ops, penalty)
        error = float(np.median(np.expm1(cv.log_errors))) if len(cv.log_errors) else float("nan")
        unseen = unseen_op_fit(x, y, ops, self.alpha) if fitted.space.ops else None
        return OpModel(key, tuple(float(c) for c in fitted.coef), len(group), error, cv.quantile(self.alpha),
                       cv.d_ref, kind, fitted, unseen)

    def candidates(self, brick: Brick) -> list[OpModel]:
        """The models that may predict a brick: its op type's, its class's, the global one."""
        models = getattr(self, "models_", {})
        keys = (brick.op_type, kernel_class(brick), "*")
        return [models[k] for k in dict.fromkeys(keys) if k in models]

    def prediction(self, brick: Brick) -> Prediction | None:
        """The brick's prediction, or None when nothing was fitted.

        Of its op type's and its kernel class's models, those that hold the brick within
        :data:`FAR_DISTANCE` of their training bricks, the one with the narrowest interval predicts
        it; where neither does, the narrowest of them and the global model, unless its class's model
        tells op types apart and holds bricks of its op type (:meth:`_tells_apart`). A brick of an
        op type its class's model never saw is predicted by that model's rule for unseen op types
        (:func:`unseen_op_fit`), whose interval was cross-validated on op types held out whole.
        """
        candidates = self.candidates(brick)
        recurrent = self._recurrent(brick)
        unseen = [self._bounded(m, brick, unseen=True) for m in candidates if not m.knows(brick.op_type)]
        if unseen and recurrent is None:
            return min(unseen, key=lambda pair: pair[0])[1]
        found = [self._bounded(model, brick) for model in candidates]
        if recurrent is not None:
            found.append(recurrent)
        own = [pair for pair in found if pair[1].model != "*"]
        near = [pair for pair in own if not pair[1].far]
        if not near and self._tells_apart(brick):
            near = own
        return min(near or found, key=lambda pair: pair[0])[1] if found else None

    def _tells_apart(self, brick: Brick) -> bool:
        """Whether the model of the brick's kernel class tells op types apart and was fitted on
        bricks of the brick's op type: then it, even far, knows the op's own speed, which the
        global model does not (Erf and Relu of the same bytes run 4x apart)."""
        model = getattr(self, "models_", {}).get(kernel_class(brick))
        return bool(model is not None and model.fitted is not None and brick.op_type in model.fitted.space.ops)

    def _bounded(self, model: OpModel, brick: Brick, unseen: bool = False) -> tuple[float, Prediction]:
        """``model``'s log half-width at ``brick`` and its prediction, held between the brick's
        roofline and its class's cap; with ``unseen``, by the model's rule for an op type it never
        saw (its linear part times the typical op-type effect, the width of that rule)."""
        seconds, distance, cap = model._raw(brick, self.rates_)
        width = model.log_halfwidth(distance)
        if unseen and model.unseen_op is not None and model.fitted is not None:
            effect, width = model.unseen_op
            x = features(brick, self.rates_.flop_scale(brick))
            seconds = min(max(float(x @ model.fitted.coef), 1e-12) * math.exp(effect), cap)
        floor = self.floor_rates_.roofline_s(brick) if self.floor_rates_ is not None else 0.0
        capped = seconds >= cap
        seconds = max(seconds, floor)
        low = max(seconds * math.exp(-width), floor)
        high = max(min(seconds * math.exp(width), cap), seconds)
        return width, Prediction(seconds, low, high, model.op_type, distance, floor, capped)

    def _recurrent(self, brick: Brick) -> tuple[float, Prediction] | None:
        """A recurrent layer predicted from its products (see :class:`Recurrence`), or None.

        The input product is predicted by the class of matrix products. Each step reads the
        recurrent weights ``R`` again:

        - where ``R`` fits in the last-level cache (``cache_bytes`` given to :meth:`fit`), or the
          cache is not known, a step reads ``R`` at the rate of the calibrated matrix-vector product
          of its size (``step_rates``, log-interpolated between the calibrated sizes that fit in
          the cache): the same loop over weights of that size, not the Adds' streams that set the
          peak bandwidth; without ``step_rates``, at its roofline at the
          calibrated peaks. The interval reaches down to the roofline and up to the rate measured
          bricks read weights at;
        - where it does not, a step reads ``R`` from memory at the memory rate given to :meth:`fit`
          (a calibrated matrix-vector product larger than the cache, the same loop over the same
          weights), else at the rate measured bricks with weights larger than the cache reached
          (:func:`_memory_rate`), and never faster than from the cache. Between half the cache
          and the cache, the interval reaches the memory rate.

        Without calibrated peaks, the rates the measured bricks reached stand for them.
        """
        recurrence = Recurrence.of(brick)
        model = getattr(self, "models_", {}).get("gemm")
        if recurrence is None or model is None or model.fitted is None:
            return None
        product = recurrence.input_product()
        work = max(product.flops / self.rates_.flops_per_s, product.bytes_moved / self.rates_.bytes_per_s, 1e-12)
        seconds, distance, _ = model._raw_terms(product.features(), product.descriptor(), work, "MatMul")
        width = model.log_halfwidth(distance)
        step, steps = recurrence.step(), recurrence.seq
        fast = (self.floor_rates_ or self.data_rates_).product_s(step)
        cached = max(fast, self._looped_s(step))
        slow = max(self.data_rates_.product_s(step), cached)
        central = cached
        memory = self._streamed_s(step)
        if memory is not None:  # the cache is known
            if step.weight_bytes > self.cache_bytes_:
                central = max(memory, cached)
            if step.weight_bytes > self.cache_bytes_ / 2:
                slow = max(slow, memory)
        floor = self.floor_rates_.roofline_s(brick) if self.floor_rates_ is not None else 0.0
        total = max(seconds + steps * central, floor)
        low = max(seconds * math.exp(-width) + steps * fast, floor)
        high = max(seconds * math.exp(width) + steps * slow, total)
        return math.log(high / total), Prediction(total, low, high, model.op_type, distance, floor, False)

    def _looped_s(self, product: Product) -> float:
        """A product's time with its weights read from the cache at the calibrated matrix-vector
        rate of their size (0.0 where none was calibrated)."""
        points = getattr(self, "step_rates_", ())
        cache = getattr(self, "cache_bytes_", None)
        fitting = [p for p in points if not cache or p[0] <= cache] or list(points)
        if not fitting:
            return 0.0
        sizes = np.log([float(size) for size, _ in fitting])
        rate = float(np.interp(math.log(max(product.weight_bytes, 1)), sizes, [r for _, r in fitting]))
        return max(product.weight_bytes / rate, product.flops / self.rates_.flops_per_s)

    def _streamed_s(self, product: Product) -> float | None:
        """A product's time with its weights read from memory at the predictor's memory rate (and
        its FLOPs at the best rate), or None where the cache or that rate is not known."""
        rate = getattr(self, "memory_rate_", None)
        if rate is None or not getattr(self, "cache_bytes_", None):
            return None
        return max(product.weight_bytes / rate, product.flops / self.rates_.flops_per_s)

    def model_for(self, brick: Brick) -> OpModel | None:
        """The model that predicts a brick (see :meth:`prediction`), or None."""
        found = self.prediction(brick)
        return None if found is None else self.models_[found.model]

    def predict(self, brick: Brick) -> float | None:
        """Predicted latency of a brick (seconds), or None when nothing was fitted."""
        found = self.prediction(brick)
        return None if found is None else found.seconds


def _memory_rate(bricks: Sequence[Brick], latency: Mapping[str, float], cache_bytes: int | None) -> float | None:
    """The fastest rate at which measured bricks whose weights exceed ``cache_bytes`` read them
    (weight bytes / latency): weights from memory. None without such bricks or a cache size."""
    if not cache_bytes:
        return None
    rates = [roofline_work(b)[1] / latency[b.signature] for b in bricks if roofline_work(b)[1] > cache_bytes]
    return max(rates) if rates else None


def _reached_rates(bricks: Sequence[Brick], latency: Mapping[str, float], peaks: Any) -> Rates:
    """The best rates: the calibrated peaks where given, raised to what bricks of at least
    :data:`REACHED_MIN_S` reached (all bricks when none is that long). Bricks computing on 8-bit
    values raise the integer rate, the others the float one; the integer rate is None where no
    peak and no such brick says it."""
    long = [b for b in bricks if latency[b.signature] >= REACHED_MIN_S] or list(bricks)
    eight = [b for b in long if computes_on_8bit(b)]
    flops = max([roofline_work(b)[0] / latency[b.signature] for b in long if not computes_on_8bit(b)] + [1.0])
    integer = max((roofline_work(b)[0] / latency[b.signature] for b in eight), default=None)
    weights = max([roofline_work(b)[1] / latency[b.signature] for b in long] + [1.0])
    moved = max([b.bytes_moved / latency[b.signature] for b in long] + [1.0])
    if peaks is not None:
        flops, weights = max(flops, peaks.flops_per_s), max(weights, peaks.bytes_per_s)
        moved = max(moved, peaks.bytes_per_s)
        calibrated = getattr(peaks, "int_ops_per_s", None)
        if calibrated is not None:
            integer = max(integer or 0.0, calibrated)
    return Rates(flops, weights, moved, integer)
