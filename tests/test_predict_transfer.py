"""Predictions that transfer between kernels of one class, held above the roofline."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.estimator.estimation import Peaks, estimate_decomposition
from dlbricks.estimator.predict import LatencyPredictor, descriptor, kernel_class
from dlbricks.generators import Budget, OrtConfig, get_backend
from dlbricks.generators.harness import time_calls
from tests import _models


def _single(node: object, inputs: list[object], initializers: list[object]) -> dlbricks.Brick:
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (brick,) = dlbricks.decompose(dlbricks.load_model(model)).bricks.values()
    return brick


def matmul_brick(rows: int, depth: int, cols: int) -> dlbricks.Brick:
    """x[rows, depth] @ W[depth, cols], W a constant."""
    w = numpy_helper.from_array(np.zeros((depth, cols), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, depth])
    return _single(helper.make_node("MatMul", ["x", "w"], ["y"]), [x], [w])


def gemm_brick(rows: int, depth: int, cols: int) -> dlbricks.Brick:
    """x[rows, depth] W^T + b, as exporters write a linear layer (transB=1, bias)."""
    w = numpy_helper.from_array(np.zeros((cols, depth), np.float32), "w")
    b = numpy_helper.from_array(np.zeros((cols,), np.float32), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, depth])
    return _single(helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1), [x], [w, b])


def pointwise_conv_brick(pixels: int, cin: int, cout: int) -> dlbricks.Brick:
    w = numpy_helper.from_array(np.zeros((cout, cin, 1, 1), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, pixels, 1])
    return _single(helper.make_node("Conv", ["x", "w"], ["y"]), [x], [w])


def test_gemm_matmul_and_pointwise_conv_share_a_class() -> None:
    shapes = [kernel_class(b) for b in (matmul_brick(8, 16, 32), gemm_brick(8, 16, 32),
                                        pointwise_conv_brick(8, 16, 32))]
    assert shapes == ["gemm", "gemm", "gemm"]
    # the same product is the same place in the class's space, whatever the op that runs it; a
    # convolution multiplies its weights by its input, so its rows are its output channels
    assert np.allclose(descriptor(matmul_brick(8, 16, 32))[:3], descriptor(gemm_brick(8, 16, 32))[:3])
    assert np.allclose(descriptor(matmul_brick(32, 16, 8))[:3], descriptor(pointwise_conv_brick(8, 16, 32))[:3])


def _interleaved(prepared: list[object], rounds: int) -> np.ndarray:
    """Seconds per call of each prepared brick, less its floor's (the one-node model timed beside it),
    in each of ``rounds`` rounds: one short burst of each brick a round, in an order drawn each round,
    so that every brick meets each of the machine's phases (rows: rounds, columns: bricks)."""
    burst = Budget(warmup_time=0.002, min_time=0.01, min_runs=5, max_time=0.05, rel_ci=1.0, placements=1)
    rng = np.random.default_rng(7)
    times = np.zeros((rounds, len(prepared)))
    for r in range(rounds):
        for i in rng.permutation(len(prepared)):
            timing = time_calls(prepared[i], burst, warmed=r > 0)
            times[r, i] = float(np.median(timing.samples_s)) - (timing.empty_s or 0.0)
    return times


def test_gemm_predicted_from_matmuls_of_the_same_shape_is_within_15_percent() -> None:
    """Measured with onnxruntime: a Gemm (transB, bias) predicted by a model fitted on MatMuls only,
    one of them of the Gemm's shape (its twin), lands within 15% of the Gemm's own measurement.

    The ten bricks run in interleaved rounds, and each brick's time is its median ratio to the twin
    over the rounds times the twin's median: a ratio taken within a round is the machine's at one
    moment for both bricks, so the machine changing speed between phases (here by up to 1.6x within
    seconds) moves neither the fit's points against each other nor the Gemm against its twin."""
    shapes = [(32, 256, 256), (64, 256, 512), (64, 512, 256), (128, 256, 256), (32, 512, 512),
              (128, 512, 512), (64, 384, 384), (96, 384, 768)]
    target = (128, 384, 768)
    twin, gemm = matmul_brick(*target), gemm_brick(*target)
    bricks = [*(matmul_brick(*s) for s in shapes), twin, gemm]
    backend = get_backend("onnxruntime")
    prepared = [backend.prepare(b.to_onnx(), OrtConfig()) for b in bricks]
    try:
        times = _interleaved(prepared, rounds=15)
    finally:
        for item in prepared:
            item.close()
    assert (times > 0).all(), times
    relative = np.median(times / times[:, [len(shapes)]], axis=0)  # each brick over its twin, a round at a time
    seconds = relative * float(np.median(times[:, len(shapes)]))
    matmuls = bricks[:-1]
    predictor = LatencyPredictor().fit(matmuls, {b.signature: float(t) for b, t in zip(matmuls, seconds[:-1], strict=True)})
    found = predictor.prediction(gemm)
    assert found is not None and found.model in ("gemm", "MatMul") and not found.far
    assert found.seconds / seconds[len(shapes)] == pytest.approx(relative[-1], rel=0.15)


def _fake(brick: dlbricks.Brick) -> float:
    return 2e-6 + (brick.flops or 0) / 2e10 + brick.bytes_moved / 5e9


def test_no_predicted_brick_below_its_roofline() -> None:
    """Peaks so high that the roofline of many bricks is above what the data predicts: every
    predicted brick is held at or above its roofline, interval included."""
    train = dlbricks.decompose(_models.resnet_like(blocks=3, channels=24), batch_size=1)
    dec = dlbricks.decompose(_models.resnet_like(blocks=3, channels=16), batch_size=2)
    latency = {s: _fake(b) for s, b in train.bricks.items()}
    peaks = Peaks(flops_per_s=2e9, bytes_per_s=1e9)
    predictor = LatencyPredictor(min_bricks=2).fit(train.bricks.values(), latency, peaks=peaks)
    for brick in dec.bricks.values():
        found = predictor.prediction(brick)
        floor = predictor.floor_rates_.roofline_s(brick)  # the peaks, raised to the rates the data reached
        assert found is not None and found.low_s >= floor * (1 - 1e-9)
    est = estimate_decomposition(dec, {}, config_id="cfg", on_missing="predict", predictor=predictor, peaks=peaks)
    assert est.predicted_share == pytest.approx(1.0)
    for c in est.breakdown:
        assert c.roofline_s is not None and c.latency_s >= c.roofline_s * (1 - 1e-9)
        assert c.low_s is not None and c.low_s >= c.roofline_s * (1 - 1e-9)
    assert any(c.latency_s == c.roofline_s > 0 for c in est.breakdown)  # some were held at it
    assert est.roofline_s is not None and est.sequential_s >= est.roofline_s


def test_a_gemm_far_from_the_heads_is_predicted_by_its_class() -> None:
    """A Gemm op model fitted on memory-bound heads (one row) alone would charge a 128-row product
    for weight traffic it does not have; the brick is far from the heads, so the class of matrix
    products, which holds MatMuls of many rows, predicts it."""
    heads = [gemm_brick(1, k, n) for k in (512, 1024, 2048) for n in (256, 1000, 4096)]
    latency = {b.signature: 2e-6 + b.constant_bytes / 1e10 for b in heads}
    big = [matmul_brick(256, 256, 256), matmul_brick(256, 512, 512)]  # what reached the FLOP rate
    latency |= {b.signature: (b.flops or 0) / 1e11 for b in big}
    predictor = LatencyPredictor().fit([*heads, *big], latency)
    gpt = gemm_brick(128, 768, 2304)
    found = predictor.prediction(gpt)
    assert found is not None
    assert found.model == "gemm"
    assert found.seconds == pytest.approx((gpt.flops or 0) / 1e11, rel=0.5)
    assert found.low_s <= (gpt.flops or 0) / 1e11 <= found.high_s


def test_prediction_never_far_above_what_its_class_reached() -> None:
    """Fitted on memory-bound heads alone, a model would charge a 128-row product for 128 times a
    head's traffic; with calibrated peaks the cap holds it near the slowest rate the heads ran at,
    and the brick is far from the data."""
    heads = [gemm_brick(1, k, n) for k in (512, 1024, 2048) for n in (256, 1000, 4096)]
    latency = {b.signature: 2e-6 + b.constant_bytes / 1e10 for b in heads}
    peaks = Peaks(flops_per_s=1e11, bytes_per_s=1e10)
    predictor = LatencyPredictor().fit(heads, latency, peaks=peaks)
    gpt = gemm_brick(128, 768, 2304)
    found = predictor.prediction(gpt)
    assert found is not None and found.far
    assert peaks.roofline_s(gpt) <= found.seconds <= 3 * peaks.roofline_s(gpt)


def _gemm_family(rows: int, seed: int) -> tuple[list[dlbricks.Brick], dict[str, float]]:
    rng = np.random.default_rng(seed)
    bricks = [matmul_brick(rows * r, d, c) for r in (1, 2, 4) for d in (64, 128, 256) for c in (64, 192, 256)]
    truth = {b.signature: (3e-6 + (b.flops or 0) / 3e10) * float(np.exp(rng.normal(0, 0.05))) for b in bricks}
    return bricks, truth


def test_intervals_widen_with_distance_from_the_data() -> None:
    bricks, truth = _gemm_family(8, seed=1)
    predictor = LatencyPredictor().fit(bricks, truth)
    widths, distances = [], []
    for rows in (16, 128, 1024, 8192):  # inside the data, then ever farther out
        found = predictor.prediction(matmul_brick(rows, 128, 192))
        assert found is not None
        widths.append(np.log(found.high_s / found.seconds))
        distances.append(found.distance)
    assert distances == sorted(distances) and widths == sorted(widths)
    assert widths[-1] > 3 * widths[0]
    assert predictor.prediction(matmul_brick(8192, 128, 192)).far  # type: ignore[union-attr]


def test_intervals_cover_held_out_bricks_of_the_same_kind() -> None:
    """Bricks drawn like the training bricks fall inside their 95% interval about as often."""
    bricks, truth = _gemm_family(8, seed=2)
    held, held_truth = _gemm_family(12, seed=3)
    predictor = LatencyPredictor().fit(bricks, truth)
    covered = []
    for brick in held:
        found = predictor.prediction(brick)
        assert found is not None
        covered.append(found.low_s <= held_truth[brick.signature] <= found.high_s)
    assert np.mean(covered) >= 0.85


def test_estimate_warns_when_much_of_it_is_predicted() -> None:
    train = dlbricks.decompose(_models.resnet_like(blocks=3, channels=24), batch_size=1)
    dec = dlbricks.decompose(_models.resnet_like(blocks=3, channels=16), batch_size=1)
    latency = {s: _fake(b) for s, b in train.bricks.items()}
    predictor = LatencyPredictor(min_bricks=2).fit(train.bricks.values(), latency)
    est = estimate_decomposition(dec, {}, config_id="cfg", on_missing="predict", predictor=predictor)
    assert est.warn and "predicted" in (est.warning or "")
    assert est.ci_low_s < est.sequential_s < est.ci_high_s
    assert all(c.source == "predicted" and c.predictor for c in est.breakdown)


def conv_brick(channels: int, size: int, dilation: int = 1) -> dlbricks.Brick:
    """A 3x3 convolution, channels to channels on size x size, padded to keep its size."""
    w = numpy_helper.from_array(np.zeros((channels, channels, 3, 3), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    return _single(helper.make_node("Conv", ["x", "w"], ["y"], dilations=[dilation] * 2, pads=[dilation] * 4), [x], [w])


def test_a_convolution_mostly_over_padding_costs_its_whole_product() -> None:
    """An im2col convolution multiplies its zero padding too: a dilated convolution whose taps fall
    mostly in the padding (DeepLabV3's head) is predicted as long as its undilated twin, though its
    roofline leaves the padding out."""
    bricks = [conv_brick(c, s) for c in (32, 64, 128, 256) for s in (14, 28, 56)]
    latency = {b.signature: 2e-6 + (b.flops or 0) / 5e10 for b in bricks}
    peaks = Peaks(flops_per_s=1e11, bytes_per_s=1e10)
    predictor = LatencyPredictor().fit(bricks, latency, peaks=peaks)
    dilated, twin = conv_brick(96, 28, dilation=24), conv_brick(96, 28)
    assert dilated.padding_flops > 0.8 * (dilated.flops or 0)
    assert peaks.roofline_s(dilated) < 0.2 * peaks.roofline_s(twin)
    found, expected = predictor.prediction(dilated), predictor.prediction(twin)
    assert found is not None and expected is not None
    assert found.seconds == pytest.approx(expected.seconds, rel=0.1)
    assert found.seconds >= peaks.roofline_s(dilated)
