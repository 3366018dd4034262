"""How kernels run: grouped convolutions pay per group, recurrent layers per step."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.estimator import LatencyPredictor, Peaks
from dlbricks.estimator._predict import Recurrence, conv_groups, features
from tests.test_predict_transfer import _single, matmul_brick


def depthwise_brick(channels: int, size: int, kernel: int = 3) -> dlbricks.Brick:
    w = numpy_helper.from_array(np.zeros((channels, 1, kernel, kernel), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    pad = kernel // 2
    return _single(helper.make_node("Conv", ["x", "w"], ["y"], group=channels, pads=[pad] * 4), [x], [w])


def lstm_brick(seq: int, inputs: int, hidden: int) -> dlbricks.Brick:
    w = numpy_helper.from_array(np.zeros((1, 4 * hidden, inputs), np.float32), "w")
    r = numpy_helper.from_array(np.zeros((1, 4 * hidden, hidden), np.float32), "r")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, inputs])
    return _single(helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden), [x], [w, r])


def test_depthwise_convolutions_pay_per_channel() -> None:
    """Depthwise convolutions that cost a fixed time per channel plus their outputs: one of a
    channel count and size never measured is predicted within 10%."""
    def cost(b: dlbricks.Brick) -> float:
        return 3e-6 + 0.3e-6 * conv_groups(b) + 1.6e-9 * sum(s.numel for s in b.outputs)

    bricks = [depthwise_brick(c, s) for c in (32, 96, 192, 384, 960) for s in (7, 14, 28, 56)]
    predictor = LatencyPredictor().fit(bricks, {b.signature: cost(b) for b in bricks})
    target = depthwise_brick(116, 14)
    assert features(target)[-1] == 116
    found = predictor.prediction(target)
    assert found is not None and found.seconds == pytest.approx(cost(target), rel=0.1)


def test_a_recurrent_layer_is_predicted_from_its_products() -> None:
    """Fitted on MatMuls only, an LSTM is its input product (as the class of matrix products
    predicts it) plus one step per element of its sequence at the roofline of the recurrent
    weights; its interval reaches up to steps that read those weights at the measured rate."""
    peaks = Peaks(flops_per_s=1e11, bytes_per_s=8e10)
    bricks = [matmul_brick(r, d, c) for r in (1, 8, 32, 128) for d in (256, 512, 1024) for c in (512, 2048)]
    latency = {b.signature: 2e-6 + max((b.flops or 0) / 8e10, b.constant_bytes / 2.5e10) for b in bricks}
    predictor = LatencyPredictor().fit(bricks, latency, peaks=peaks)
    lstm = lstm_brick(35, 512, 512)
    recurrence = Recurrence.of(lstm)
    assert recurrence == Recurrence(35, 1, 512, 512, 4, 1)
    found = predictor.prediction(lstm)
    assert found is not None and found.model == "gemm" and not found.far
    product = predictor.prediction(matmul_brick(35, 512, 2048))
    assert product is not None
    step = 4 * 512 * 2048 / 8e10  # the recurrent weights at the peak bandwidth
    assert found.seconds == pytest.approx(product.seconds + 35 * step, rel=0.02)
    assert found.low_s >= predictor.floor_rates_.roofline_s(lstm)
    assert found.high_s >= product.seconds + 35 * 4 * 512 * 2048 / 2.5e10  # weights at the rate measured
    assert Recurrence.of(matmul_brick(8, 8, 8)) is None
