"""How kernels run: grouped convolutions pay per group, recurrent layers per step."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.estimator.estimation import Peaks
from dlbricks.estimator.predict import LatencyPredictor, Recurrence, conv_groups, features
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


def test_recurrent_weights_larger_than_the_cache_are_read_from_memory() -> None:
    """With the machine's last-level cache known, a step whose recurrent weights exceed it reads
    them at the memory rate (given, or else the rate of measured bricks with weights larger than the
    cache); one whose weights fit keeps the cached rate, and between half the cache and the cache the
    interval reaches up to the memory rate."""
    peaks = Peaks(flops_per_s=1e11, bytes_per_s=8e10)
    bricks = [matmul_brick(r, d, c) for r in (1, 8, 32, 128) for d in (256, 512, 1024) for c in (512, 2048)]
    latency = {b.signature: 2e-6 + max((b.flops or 0) / 8e10, b.constant_bytes / 2.5e10) for b in bricks}
    small, large = lstm_brick(35, 512, 512), lstm_brick(35, 512, 1024)  # R: 4 MiB and 16 MiB
    cache = 6 << 20

    def steps(predictor: LatencyPredictor, lstm: dlbricks.Brick, hidden: int) -> float:
        found, product = predictor.prediction(lstm), predictor.prediction(matmul_brick(35, 512, 4 * hidden))
        assert found is not None and product is not None
        return (found.seconds - product.seconds) / 35

    unknown = LatencyPredictor().fit(bricks, latency, peaks=peaks)
    given = LatencyPredictor().fit(bricks, latency, peaks=peaks, cache_bytes=cache, memory_rate=2e10)
    learned = LatencyPredictor().fit(bricks, latency, peaks=peaks, cache_bytes=1 << 20)
    r_large = 4 * 1024 * 4096
    assert steps(unknown, large, 1024) == pytest.approx(r_large / 8e10, rel=0.02)
    assert steps(given, large, 1024) == pytest.approx(r_large / 2e10, rel=0.02)
    assert learned.memory_rate_ == pytest.approx(max(b.constant_bytes / latency[b.signature]
                                                     for b in bricks if b.constant_bytes > 1 << 20))
    assert steps(given, small, 512) == pytest.approx(4 * 512 * 2048 / 8e10, rel=0.02)
    wide, read = given.prediction(small), given.prediction(large)
    assert wide is not None and wide.high_s >= wide.seconds + 35 * (4 * 512 * 2048 / 2e10 - 4 * 512 * 2048 / 8e10)
    assert read is not None and read.low_s < read.seconds


def test_recurrent_weights_in_the_cache_are_read_at_the_matrix_vector_rate_of_their_size() -> None:
    """With calibrated matrix-vector products, a step whose recurrent weights fit in the cache reads
    them at the rate calibrated for their size (log-interpolated between the sizes that fit), not at
    the peak bandwidth; the interval still reaches down to the roofline."""
    peaks = Peaks(flops_per_s=1e11, bytes_per_s=8e10)
    bricks = [matmul_brick(r, d, c) for r in (1, 8, 32, 128) for d in (256, 512, 1024) for c in (512, 2048)]
    latency = {b.signature: 2e-6 + max((b.flops or 0) / 8e10, b.constant_bytes / 2.5e10) for b in bricks}
    cache = 32 << 20
    rates = ((1 << 20, 5e10), (16 << 20, 3e10), (64 << 20, 1e10))  # the 64 MiB point lies beyond the cache
    predictor = LatencyPredictor().fit(bricks, latency, peaks=peaks, cache_bytes=cache, step_rates=rates)
    lstm = lstm_brick(35, 512, 512)  # R: 4 MiB, two of the four octaves from 1 MiB to 16 MiB
    found, product = predictor.prediction(lstm), predictor.prediction(matmul_brick(35, 512, 2048))
    assert found is not None and product is not None
    r_bytes = 4 * 512 * 2048
    rate = 5e10 + (3e10 - 5e10) * 0.5
    assert (found.seconds - product.seconds) / 35 == pytest.approx(r_bytes / rate, rel=0.02)
    assert found.low_s <= product.seconds + 35 * r_bytes / 8e10 < found.seconds
    assert found.low_s >= predictor.floor_rates_.roofline_s(lstm)
    assert predictor.with_peaks(peaks).step_rates_ == tuple(rates)


def test_the_cache_and_memory_rate_come_from_the_database(tmp_path) -> None:
    """The estimate's predictor learns the last-level cache from the stored system and the memory
    rate from the calibrated matrix-vector product just larger than it, not from the Adds' streams,
    even where those were faster: a recurrent step runs the matrix-vector product's loop."""
    from dlbricks.benchmarks_db import Store
    from dlbricks.estimator.calibrate import Calibration
    from dlbricks.estimator.api import last_level_cache, matvec_rates, memory_rate
    from dlbricks.estimator.calibrate import merge_peaks
    from dlbricks.generators import collect_system_info

    system = collect_system_info()
    cache = max(size for _, size in system.cache_bytes)
    gemv = ((cache // 4, 8e10), (cache * 2, 3e10), (cache * 8, 2e10))
    with Store(tmp_path / "b.db") as store:
        assert memory_rate(store, system, cache) is None
        stream = ((cache // 2, 9e10), (cache * 6, 4e10))  # bytes moved, bytes/s
        store.systems.record_peaks(system, *merge_peaks(None, "onnxruntime", Calibration(Peaks(1e11, 9e10), (), stream,
                                                                                         gemv=gemv)))
        assert last_level_cache(store, system.fingerprint) == cache == last_level_cache(None, system)
        assert memory_rate(store, system.fingerprint, cache) == 3e10
        assert memory_rate(store, system, cache * 16) is None
        assert matvec_rates(store, system.fingerprint) == gemv
