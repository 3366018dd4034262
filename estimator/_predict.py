"""Predicting bricks that were never measured, from measured bricks of the same op type.

Two stages per op type. First a roofline-like linear model: latency as a non-negative combination of
a constant, FLOPs, bytes moved and output elements (:func:`scipy.optimize.nnls`), rows weighted by
1/latency so that the fit minimises *relative* error. A linear model charges one throughput to every
shape, but kernels are not equally efficient: a 1x1 convolution over 512 channels at 7x7 runs at a
different rate than a 3x3 one over 64 channels at 56x56. So, second, the linear prediction is
corrected by the measured/linear ratio of the brick's nearest measured neighbours, in a space of log
sizes and kernel attributes (k nearest neighbours, :class:`scipy.spatial.cKDTree`, geometric mean
weighted by inverse distance), the way nn-Meter predicts kernels from shape features. The linear
model also counts the im2col matrix a convolution builds: memory traffic that FLOPs do not show.
Op types with too few measured bricks fall back to the linear model fitted over all bricks. The
cross-validated error (leave-one-out, median |relative error|) of each model is reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import helper
from scipy.optimize import nnls
from scipy.spatial import cKDTree

from dlbricks import Brick

__all__ = ["LatencyPredictor", "OpModel", "descriptor", "features"]

MIN_BRICKS_PER_OP = 3
NEIGHBOURS = 3


def features(brick: Brick) -> np.ndarray:
    """Features of a brick: [1, FLOPs, bytes moved, output elements, im2col elements]."""
    flops = float(brick.flops or 0)
    outputs = float(sum(s.numel for s in brick.outputs))
    return np.array([1.0, flops, float(brick.bytes_moved), outputs, float(im2col_elements(brick))])


def im2col_elements(brick: Brick) -> int:
    """Elements of the im2col matrix a convolution brick builds (0 when it needs none).

    CPU runtimes (onnxruntime's MLAS, oneDNN's gemm path) run a convolution as a GEMM on an
    unfolded input of K x N = (input channels x kernel area) x output pixels; writing and reading it
    is memory traffic that FLOPs do not show and that dominates when there are few output channels
    to share it (a 3x3 convolution to 32 channels). A pointwise stride-1 convolution reads its input
    as it is, and a depthwise one has a kernel of its own.
    """
    node = brick.nodes[0]
    if node.op_type != "Conv" or not brick.constants or not brick.outputs:
        return 0
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    weight = brick.constants[0].spec.shape
    group = int(attrs.get("group", 1))
    kernel = math.prod(weight[2:])
    strided = any(s != 1 for s in attrs.get("strides") or ()) or any(attrs.get("pads") or ())
    if (kernel == 1 and not strided) or (group > 1 and weight[1] == 1):
        return 0
    return weight[1] * group * kernel * math.prod(brick.outputs[0].shape[2:])


def descriptor(brick: Brick) -> np.ndarray:
    """Where a brick sits among bricks of its op type: log sizes and kernel attributes.

    A convolution is described as the GEMM it runs: log M (output channels per group), log N
    (output pixels), log K (input channels per group times kernel area), log kernel area, stride and
    log group; the rate of a GEMM depends on its three sizes, not only on their product (a
    convolution to 32 channels runs below the rate of one to 128 of the same FLOPs). Other ops:
    log FLOPs, log input, output and weight bytes, the number of inputs, log input and output
    channels (dimension 1) and log output size past dimension 1.
    """
    node = brick.nodes[0]
    first_in = brick.inputs[0].shape if brick.inputs else ()
    first_out = brick.outputs[0].shape if brick.outputs else ()
    if node.op_type == "Conv" and brick.constants and len(first_out) > 2:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = brick.constants[0].spec.shape
        group = int(attrs.get("group", 1))
        kernel = float(np.prod(weight[2:]))
        return np.array([
            np.log(weight[0] / group),
            np.log(float(np.prod(first_out[2:]))),
            np.log(weight[1] * kernel),
            np.log(kernel),
            float(max(attrs.get("strides") or (1,))),
            np.log(group),
        ])
    weights = sum(c.spec.nbytes for c in brick.constants)
    return np.array([
        np.log1p(float(brick.flops or 0)),
        np.log1p(float(sum(s.nbytes for s in brick.inputs))),
        np.log1p(float(sum(s.nbytes for s in brick.outputs))),
        np.log1p(float(weights)),
        float(len(brick.inputs) + len(brick.constants)),
        np.log1p(float(first_in[1]) if len(first_in) > 1 else 0.0),
        np.log1p(float(first_out[1]) if len(first_out) > 1 else 0.0),
        np.log1p(float(np.prod(first_out[2:])) if len(first_out) > 2 else 0.0),
    ])


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    scale = 1.0 / np.maximum(y, 1e-9)
    col = np.maximum(np.abs(x).max(axis=0), 1e-30)
    coef, _ = nnls((x / col) * scale[:, None], y * scale)
    return coef / col


def _loo_error(x: np.ndarray, d: np.ndarray, y: np.ndarray, neighbours: int) -> float:
    """Median |relative error| of leave-one-out predictions (linear model and neighbour correction)."""
    if len(y) < 3:
        return float("nan")
    errors = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        coef = _fit(x[keep], y[keep])
        correction = _Neighbours.fit(d[keep], y[keep] / np.maximum(x[keep] @ coef, 1e-12), neighbours)
        predicted = max(float(x[i] @ coef), 0.0) * (correction.ratio(d[i]) if correction else 1.0)
        errors.append(abs(predicted - y[i]) / y[i])
    return float(np.median(errors))


@dataclass(frozen=True, slots=True)
class _Neighbours:
    """Measured/linear ratios of measured bricks, looked up by nearest standardized descriptors."""

    tree: cKDTree
    center: np.ndarray
    scale: np.ndarray
    log_ratio: np.ndarray
    k: int

    @classmethod
    def fit(cls, d: np.ndarray, ratio: np.ndarray, k: int) -> _Neighbours | None:
        """The lookup, or None when there is nothing to look up (``k`` 0 or no bricks)."""
        if k <= 0 or len(ratio) == 0:
            return None
        center, spread = d.mean(axis=0), d.std(axis=0)
        scale = np.where(spread > 1e-9, spread, 1.0)
        tree = cKDTree((d - center) / scale)
        return cls(tree, center, scale, np.log(np.maximum(ratio, 1e-12)), min(k, len(ratio)))

    def ratio(self, descriptor: np.ndarray) -> float:
        """Geometric mean of the ``k`` nearest ratios, weighted by inverse distance."""
        distance, index = self.tree.query((descriptor - self.center) / self.scale, k=self.k)
        distance, index = np.atleast_1d(distance), np.atleast_1d(index)
        weights = 1.0 / (distance + 0.1)
        return float(np.exp(weights @ self.log_ratio[index] / weights.sum()))


@dataclass(frozen=True, slots=True)
class OpModel:
    """A fitted latency model for one op type (``"*"``: all op types, linear only)."""

    op_type: str
    coef: tuple[float, ...]
    n: int
    cv_error: float  # median |relative error| of leave-one-out predictions (NaN below 3 bricks)
    neighbours: _Neighbours | None = None

    def predict(self, brick: Brick) -> float:
        """Predicted latency of a brick in seconds."""
        linear = max(float(features(brick) @ np.array(self.coef)), 0.0)
        if self.neighbours is None:
            return linear
        return linear * self.neighbours.ratio(descriptor(brick))


class LatencyPredictor:
    """Latency models per op type, fitted on measured bricks.

    Parameters
    ----------
    min_bricks : int
        Op types with fewer measured bricks use the model fitted over all bricks.
    neighbours : int
        Nearest measured bricks whose measured/linear ratio corrects a prediction (0: linear only).
    """

    def __init__(self, *, min_bricks: int = MIN_BRICKS_PER_OP, neighbours: int = NEIGHBOURS) -> None:
        self.min_bricks = min_bricks
        self.neighbours = neighbours

    def fit_measurements(self, bricks: Iterable[Brick], measurements: Mapping[str, object]) -> LatencyPredictor:
        """Fit on ok measurements (``Measurement`` records), floor-corrected."""
        latency = {sig: m.median_s - (m.floor_s or 0.0)  # type: ignore[attr-defined]
                   for sig, m in measurements.items()
                   if m.status == "ok" and m.median_s is not None}  # type: ignore[attr-defined]
        return self.fit(bricks, latency)

    def fit(self, bricks: Iterable[Brick], latency: Mapping[str, float]) -> LatencyPredictor:
        """Fit on the bricks whose signature has a measured, floor-corrected ``latency`` (seconds)."""
        by_op: dict[str, list[Brick]] = {}
        measured = [b for b in bricks if b.signature in latency and latency[b.signature] > 0]
        for brick in measured:
            by_op.setdefault(brick.op_type, []).append(brick)
        self.models_: dict[str, OpModel] = {}
        for op, group in by_op.items():
            if len(group) >= self.min_bricks:
                self.models_[op] = self._fit_group(op, group, latency, self.neighbours)
        if measured:
            self.models_["*"] = self._fit_group("*", measured, latency, 0)
        return self

    @staticmethod
    def _fit_group(op: str, group: Sequence[Brick], latency: Mapping[str, float], neighbours: int) -> OpModel:
        x = np.stack([features(b) for b in group])
        d = np.stack([descriptor(b) for b in group]) if neighbours else np.zeros((len(group), 1))
        y = np.array([latency[b.signature] for b in group])
        coef = _fit(x, y)
        correction = _Neighbours.fit(d, y / np.maximum(x @ coef, 1e-12), neighbours)
        return OpModel(op, tuple(float(c) for c in coef), len(group), _loo_error(x, d, y, neighbours), correction)

    def model_for(self, brick: Brick) -> OpModel | None:
        """The model used for a brick: its op type's, else the global one, else None."""
        models = getattr(self, "models_", {})
        return models.get(brick.op_type) or models.get("*")

    def predict(self, brick: Brick) -> float | None:
        """Predicted latency of a brick (seconds), or None when nothing was fitted."""
        model = self.model_for(brick)
        return None if model is None else model.predict(brick)
