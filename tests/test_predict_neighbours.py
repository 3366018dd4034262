"""Whose measurements correct a prediction: neighbours that run the same kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.estimator.predict import LatencyPredictor, contiguous_runs, conv_groups
from tests.test_predict_transfer import _single


def unary_brick(op: str, channels: int, size: int) -> dlbricks.Brick:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    return _single(helper.make_node(op, ["x"], ["y"]), [x], [])


def test_an_element_wise_op_is_corrected_by_its_own_kind_not_by_a_slower_op_of_its_shape() -> None:
    """The class of memory-bound ops shares one linear model by bytes, but how fast an op runs per
    byte is its own kernel's: Relu bricks measured at three sizes (too few for a Relu model of its
    own), and many Sigmoid bricks (3x slower per byte) at every size, including the target's. A Relu
    of a new size is predicted at Relu's rate, not at the rate of the Sigmoid of its shape, and its
    interval says that its nearest Relu is not of its shape."""
    def cost(b: dlbricks.Brick) -> float:
        return 1e-6 + b.bytes_moved * (3 if b.op_type == "Sigmoid" else 1) / 50e9

    bricks = [unary_brick("Sigmoid", c, s) for c in (16, 32, 64, 128, 256) for s in (7, 14, 28, 56)]
    bricks += [unary_brick("Relu", 64, 14), unary_brick("Relu", 64, 56), unary_brick("Relu", 256, 28)]
    predictor = LatencyPredictor(min_bricks=4).fit(bricks, {b.signature: cost(b) for b in bricks})
    target = unary_brick("Relu", 64, 28)
    found = predictor.prediction(target)
    assert found is not None and found.model == "memory"
    assert found.seconds == pytest.approx(cost(target), rel=0.1)
    assert found.low_s <= cost(target) <= found.high_s
    assert found.distance > 0.5  # no brick of its kind at its shape


def strided_depthwise_brick(channels: int, out: int, stride: int) -> dlbricks.Brick:
    """A depthwise 3x3 convolution to ``out x out`` pixels at ``stride``."""
    w = numpy_helper.from_array(np.zeros((channels, 1, 3, 3), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, out * stride, out * stride])
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=channels, pads=[1] * 4, strides=[stride] * 2)
    return _single(node, [x], [w])


def patchify_brick(channels: int, out: int, stride: int) -> dlbricks.Brick:
    w = numpy_helper.from_array(np.zeros((channels, 3, stride, stride), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, out * stride, out * stride])
    return _single(helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * 2), [x], [w])


def test_a_convolution_is_corrected_by_neighbours_of_its_stride() -> None:
    """Depthwise convolutions pay a fixed time per channel, twice as much at stride 2 as at stride
    1; a few patchify convolutions of stride 16 widen the spread of strides. A stride-1 depthwise
    convolution of a channel count measured only at stride 2 follows the stride-1 bricks of other
    channel counts: a doubled stride counts as much as a doubled size (log stride), not as a
    fraction of the spread up to 16."""
    def cost(b: dlbricks.Brick) -> float:
        stride = b.inputs[0].shape[2] // b.outputs[0].shape[2]
        per_channel = {1: 0.3e-6, 2: 0.6e-6}.get(stride, 0.0)
        return 2e-6 + per_channel * conv_groups(b) + 1.6e-9 * b.outputs[0].numel + (b.flops or 0) / 50e9

    bricks = [strided_depthwise_brick(c, s, stride) for c in (32, 64, 128, 256) for s in (7, 14, 28)
              for stride in (1, 2)]
    bricks += [strided_depthwise_brick(96, s, 2) for s in (7, 14, 28)]  # the target's twins at stride 2
    bricks += [patchify_brick(c, s, 16) for c in (64, 128, 256) for s in (7, 14)]
    predictor = LatencyPredictor().fit(bricks, {b.signature: cost(b) for b in bricks})
    target = strided_depthwise_brick(96, 7, 1)
    found = predictor.prediction(target)
    assert found is not None
    assert found.seconds == pytest.approx(cost(target), rel=0.08)


def split_brick(shape: tuple[int, ...], axis: int, pieces: int) -> dlbricks.Brick:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    sizes = numpy_helper.from_array(np.full((pieces,), shape[axis] // pieces, np.int64), "sizes")
    outs = [f"y{i}" for i in range(pieces)]
    graph = helper.make_graph([helper.make_node("Split", ["x", "sizes"], outs, axis=axis)], "g", [x],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
                              initializer=[sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (brick,) = dlbricks.decompose(dlbricks.load_model(model)).bricks.values()
    return brick


def test_contiguous_runs_of_copies() -> None:
    assert contiguous_runs(split_brick((1, 8732, 4), 2, 2)) == 2 * 8732
    assert contiguous_runs(split_brick((1, 232, 14, 14), 1, 2)) == 2
    assert contiguous_runs(unary_brick("Relu", 64, 14)) == 1


def test_a_copy_in_few_long_runs_is_not_charged_for_many_short_ones() -> None:
    """Splits cost their bytes plus a fixed time per contiguous run. Measured: splits of boxes
    ``[1, n, 4]`` into pairs along the last axis (2n runs of 8 bytes) and of ``[1, 3, n, n, 85]``
    along it; predicted: a split of channels in halves (two runs), as ShuffleNet does."""
    def cost(b: dlbricks.Brick) -> float:
        return 0.5e-6 + b.bytes_moved / 40e9 + contiguous_runs(b) * 1.2e-9

    bricks = [split_brick((1, n, 4), 2, 2) for n in (1000, 3234, 5000, 8732, 12000)]
    bricks += [split_brick((1, 3, n, n, 85), 4, 5) for n in (13, 26, 52)]
    bricks += [split_brick((1, 8 * n, 4), 1, 2) for n in (64, 256)]
    predictor = LatencyPredictor().fit(bricks, {b.signature: cost(b) for b in bricks})
    target = split_brick((1, 232, 14, 14), 1, 2)
    found = predictor.prediction(target)
    assert found is not None
    assert found.seconds == pytest.approx(cost(target), rel=0.1)
