"""What a model lacks in a database: missing bricks, their predicted share, the time to measure them."""

from __future__ import annotations

import pytest

import dlbricks
from dlbricks.estimator.estimation import MEASURE_SETUP_S, measure_time_s, plan_decomposition
from dlbricks.estimator.predict import LatencyPredictor
from dlbricks.generators import Budget, Measurement, OrtConfig
from dlbricks.generators.measurement import failed_measurement
from tests import _models


def _measurement(key: str, median: float) -> Measurement:
    return Measurement(key=key, status="ok", error=None, n=50, min_s=median * 0.95, median_s=median,
                       mean_s=median, p90_s=median * 1.05, p99_s=median * 1.1, std_s=median * 0.02,
                       iqr_s=median * 0.03, ci_low_s=median * 0.99, ci_high_s=median * 1.01,
                       wall_time_s=0.1, converged=True, backend="onnxruntime", config=OrtConfig(), floor_s=2e-6)


def _fake(brick: dlbricks.Brick) -> float:
    return 4e-6 + (brick.flops or 0) / 2e10 + brick.bytes_moved / 5e9


def test_plan_lists_missing_bricks_by_share_with_time_to_measure() -> None:
    train = dlbricks.decompose(_models.resnet_like(blocks=3, channels=24), batch_size=1)
    dec = dlbricks.decompose(_models.resnet_like(blocks=3, channels=16), batch_size=1)
    train_ms = {s: _measurement(s, _fake(b)) for s, b in train.bricks.items()}
    predictor = LatencyPredictor(min_bricks=2).fit_measurements(train.bricks.values(), train_ms)
    measured = dict(list({s: _measurement(s, _fake(b)) for s, b in dec.bricks.items()}.items())[:3])
    failed = next(s for s in dec.bricks if s not in measured)
    broken = failed_measurement(failed, "failed", "boom", wall_time_s=0.1, backend="onnxruntime", config=OrtConfig())
    budget = Budget.quick()
    result = plan_decomposition(dec, {**measured, failed: broken}, config_id="cfg", predictor=predictor,
                                budget=budget)
    assert {r.signature for r in result.missing} == set(dec.bricks) - set(measured)
    assert {r.signature: r.why for r in result.missing if r.why != "unmeasured"} == {failed: "failed"}
    shares = [r.share for r in result.missing]
    assert shares == sorted(shares, reverse=True)
    assert result.estimate is not None and result.predicted_share == pytest.approx(result.estimate.predicted_share)
    assert result.predicted_share == pytest.approx(sum(shares))
    assert result.measure_s == pytest.approx(sum(r.measure_s for r in result.missing))
    assert all(r.measure_s >= MEASURE_SETUP_S + budget.min_time for r in result.missing)


def test_plan_of_a_fully_measured_model_is_empty() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    measured = {s: _measurement(s, _fake(b)) for s, b in dec.bricks.items()}
    result = plan_decomposition(dec, measured, config_id="cfg")
    assert result.missing == () and result.measure_s == 0 and result.predicted_share == 0


def test_measure_time_follows_the_budget() -> None:
    budget = Budget(min_time=0.2, min_runs=10, max_time=2.0)
    assert measure_time_s(1e-5, budget) == pytest.approx(MEASURE_SETUP_S + budget.warmup_time + 0.2)
    assert measure_time_s(0.05, budget) == pytest.approx(MEASURE_SETUP_S + budget.warmup_time + 0.5)
    assert measure_time_s(1.0, budget) == pytest.approx(MEASURE_SETUP_S + budget.warmup_time + 2.0)
