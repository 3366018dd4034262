"""A predictor of one's own, through ``estimate()``: the Predictor protocol."""

from __future__ import annotations

import pytest

import dlbricks
from dlbricks.estimator import estimate
from dlbricks.estimator.predict import LatencyPredictor, Prediction, Predictor
from tests import _models


class PerFlop:
    """A cost model of one's own: 1 us a brick, plus 10 ps a FLOP and 100 ps a byte moved, +-10%."""

    def __init__(self) -> None:
        self.peaks_seen: list[object] = []

    def with_peaks(self, peaks: object) -> PerFlop:
        self.peaks_seen.append(peaks)
        return self

    def prediction(self, brick: dlbricks.Brick) -> Prediction:
        s = 1e-6 + 1e-11 * (brick.flops or 0) + 1e-10 * brick.bytes_moved
        return Prediction(s, 0.9 * s, 1.1 * s, "per-flop", 0.0, 0.0, False)


def test_estimate_takes_a_predictor_of_ones_own(tmp_path) -> None:
    """A model none of whose bricks the database measured is estimated from the given predictor:
    every brick predicted by it, the sum of its predictions over the occurrences (views left out)."""
    path = tmp_path / "m.onnx"
    import onnx

    onnx.save(_models.resnet_like(blocks=2), path)
    db = tmp_path / "b.db"
    predictor = PerFlop()
    assert isinstance(predictor, Predictor) and isinstance(LatencyPredictor(), Predictor)
    graph = dlbricks.load_model(str(path), batch_size=1)
    est = estimate(graph, db, on_missing="predict", predictor=predictor)
    dec = dlbricks.decompose(graph)
    assert set(est.predicted) == set(dec.bricks) and est.coverage == 0.0
    views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}  # onnxruntime runs them as views: no cost
    expected = sum(n * predictor.prediction(dec.bricks[s]).seconds for s, n in dec.counts().items()
                   if not set(dec.bricks[s].op_types) <= views)
    assert est.sequential_s == pytest.approx(expected, rel=1e-9)
    assert predictor.peaks_seen  # asked for the machine's peaks before predicting
    assert est.ci_low_s < est.sequential_s < est.ci_high_s


def test_a_predictor_is_checked_before_anything_is_read(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    import onnx

    onnx.save(_models.resnet_like(blocks=1), path)
    db = tmp_path / "b.db"
    with pytest.raises(dlbricks.InvalidArgumentError, match="must have with_peaks"):
        estimate(str(path), db, on_missing="predict", predictor=object())
    with pytest.raises(dlbricks.InvalidArgumentError, match="pass on_missing='predict'"):
        estimate(str(path), db, predictor=PerFlop())
    assert not db.exists()  # nothing opened, nothing created
