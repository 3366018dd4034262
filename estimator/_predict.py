"""Predicting bricks that were never measured, from measured bricks of the same op type.

Per op type, latency is fitted as a non-negative combination of a constant, FLOPs, bytes moved and
output elements (:func:`scipy.optimize.nnls`), rows weighted by 1/latency so that the fit minimises
*relative* error. Op types with too few measured bricks fall back to a model fitted over all bricks.
The cross-validated error (leave-one-out, median |relative error|) of each model is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from dlbricks import Brick

__all__ = ["LatencyPredictor", "OpModel", "features"]

MIN_BRICKS_PER_OP = 3


def features(brick: Brick) -> np.ndarray:
    """Features of a brick: [1, FLOPs, bytes moved, output elements]."""
    flops = float(brick.flops or 0)
    outputs = float(sum(s.numel for s in brick.outputs))
    return np.array([1.0, flops, float(brick.bytes_moved), outputs])


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    scale = 1.0 / np.maximum(y, 1e-9)
    col = np.maximum(np.abs(x).max(axis=0), 1e-30)
    coef, _ = nnls((x / col) * scale[:, None], y * scale)
    return coef / col


def _loo_error(x: np.ndarray, y: np.ndarray) -> float:
    """Median |relative error| of leave-one-out predictions."""
    if len(y) < 3:
        return float("nan")
    errors = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        coef = _fit(x[keep], y[keep])
        errors.append(abs(float(x[i] @ coef) - y[i]) / y[i])
    return float(np.median(errors))


@dataclass(frozen=True, slots=True)
class OpModel:
    """A fitted latency model for one op type (``"*"``: all op types)."""

    op_type: str
    coef: tuple[float, ...]
    n: int
    cv_error: float  # median |relative error| of leave-one-out predictions (NaN below 3 bricks)

    def predict(self, brick: Brick) -> float:
        """Predicted latency of a brick in seconds."""
        return max(float(features(brick) @ np.array(self.coef)), 0.0)


class LatencyPredictor:
    """Latency models per op type, fitted on measured bricks.

    Parameters
    ----------
    min_bricks : int
        Op types with fewer measured bricks use the model fitted over all bricks.
    """

    def __init__(self, *, min_bricks: int = MIN_BRICKS_PER_OP) -> None:
        self.min_bricks = min_bricks

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
                self.models_[op] = self._fit_group(op, group, latency)
        if measured:
            self.models_["*"] = self._fit_group("*", measured, latency)
        return self

    @staticmethod
    def _fit_group(op: str, group: Sequence[Brick], latency: Mapping[str, float]) -> OpModel:
        x = np.stack([features(b) for b in group])
        y = np.array([latency[b.signature] for b in group])
        return OpModel(op, tuple(float(c) for c in _fit(x, y)), len(group), _loo_error(x, y))

    def model_for(self, brick: Brick) -> OpModel | None:
        """The model used for a brick: its op type's, else the global one, else None."""
        models = getattr(self, "models_", {})
        return models.get(brick.op_type) or models.get("*")

    def predict(self, brick: Brick) -> float | None:
        """Predicted latency of a brick (seconds), or None when nothing was fitted."""
        model = self.model_for(brick)
        return None if model is None else model.predict(brick)
