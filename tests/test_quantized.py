"""Quantized and half-precision models: onnxruntime.quantization's outputs, and float16 graphs."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.cost import node_flops
from dlbricks.fusion import optimized_model
from dlbricks.types import TensorSpec

from . import _models

quantization = pytest.importorskip("onnxruntime.quantization")


class _RandomReader(quantization.CalibrationDataReader):
    """Calibration data: a few seeded random batches."""

    def __init__(self, name: str, shape: tuple[int, ...], count: int = 3) -> None:
        rng = np.random.default_rng(0)
        self._batches = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CNN quantized dynamically and statically (QDQ), a transformer layer quantized dynamically."""
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice to pre-process
    folder = tmp_path_factory.mktemp("quantized")
    cnn, layer = folder / "cnn.onnx", folder / "layer.onnx"
    onnx.save(_models.resnet_like(batch=1), cnn)
    onnx.save(_models.transformer_layer(), layer)
    paths = {name: str(folder / f"{name}.onnx") for name in ("cnn_dynamic", "cnn_qdq", "layer_dynamic")}
    quantization.quantize_dynamic(str(cnn), paths["cnn_dynamic"], weight_type=quantization.QuantType.QInt8)
    quantization.quantize_static(str(cnn), paths["cnn_qdq"], _RandomReader("x", (1, 3, 16, 16)),
                                 quant_format=quantization.QuantFormat.QDQ)
    quantization.quantize_dynamic(str(layer), paths["layer_dynamic"])
    return paths


def _load(path: str) -> dlbricks.ModelGraph:
    return dlbricks.load_model(path, batch_size=1)


@pytest.mark.parametrize("name, ops", [
    ("cnn_dynamic", {"DynamicQuantizeLinear", "ConvInteger"}),
    ("cnn_qdq", {"QuantizeLinear", "DequantizeLinear", "Conv"}),
    ("layer_dynamic", {"DynamicQuantizeLinear", "MatMulInteger"}),
])
@pytest.mark.parametrize("granularity", ["layer", "fused"])
def test_quantized_bricks_keep_their_integer_ops_and_run(quantized: dict[str, str], name: str, ops: set[str],
                                                         granularity: str) -> None:
    dec = dlbricks.decompose(_load(quantized[name]), granularity)
    seen = {op for brick in dec.bricks.values() for op in brick.op_types}
    assert ops <= seen
    for brick in dec.bricks.values():
        assert brick.check_runnable() is None, brick.op_type
        assert brick.flops is not None, brick.op_type


def test_dequantize_of_weights_is_a_layer_not_a_folded_constant(quantized: dict[str, str]) -> None:
    graph = _load(quantized["cnn_qdq"])
    weights = [la for la in graph.layers if la.op_type == "DequantizeLinear" and graph.is_constant(la.inputs[0])]
    convs = [la for la in graph.layers if la.op_type == "Conv"]
    assert len(weights) >= len(convs) > 0
    assert all(not graph.is_constant(la.inputs[1]) for la in convs)


def test_integer_weights_are_synthetic_over_their_range_and_not_hashed(quantized: dict[str, str]) -> None:
    dec = dlbricks.decompose(_load(quantized["cnn_dynamic"]))
    conv = next(b for b in dec.bricks.values() if b.op_type == "ConvInteger")
    weight = next(c for c in conv.constants if c.spec.dtype == "int8" and c.spec.numel > 1)
    assert not weight.exact and weight.value is None
    values = onnx.numpy_helper.to_array(next(t for t in conv.to_onnx().graph.initializer
                                             if t.name == weight.spec.name))
    assert values.min() < -64 and values.max() > 64  # not zeros: int8 weights over their range
    zero_point = next(c for c in conv.constants if c.spec.dtype == "int8" and c.spec.numel == 1)
    assert zero_point.exact


def test_bricks_of_equal_shapes_share_a_signature_across_scales(quantized: dict[str, str]) -> None:
    """Every QDQ layer has its own scales and zero points; they do not decide the cost."""
    dec = dlbricks.decompose(_load(quantized["cnn_qdq"]), "fused")
    counts = [n for sig, n in dec.counts().items() if "Conv" in dec.bricks[sig].op_types]
    assert max(counts) > 1


def test_fused_qdq_brick_runs_as_one_quantized_kernel(quantized: dict[str, str]) -> None:
    dec = dlbricks.decompose(_load(quantized["cnn_qdq"]), "fused", opt_level="all")
    brick = next(b for b in dec.bricks.values()
                 if "Conv" in b.op_types and "DequantizeLinear" in b.op_types and b.inputs[0].dtype != "float32")
    assert brick.inputs[0].dtype == "uint8"  # as the runtime converts int8 Q -> DQ pairs on x86
    optimized = optimized_model(dlbricks.load_model(brick.to_onnx()), "all")
    assert "QLinearConv" in {n.op_type for n in optimized.graph.node}


def test_int8_inputs_are_drawn_over_their_range() -> None:
    arrays = dlbricks.inputs.random_inputs([TensorSpec("a", (256,), "uint8"), TensorSpec("b", (256,), "int8")])
    assert arrays["a"].max() > 128 and arrays["b"].min() < -64


def test_flops_count_integer_ops() -> None:
    x, w = TensorSpec("x", (1, 8, 16, 16), "uint8"), TensorSpec("w", (16, 8, 3, 3), "int8")
    y = TensorSpec("y", (1, 16, 16, 16), "uint8")
    scalar = TensorSpec("s", (), "float32")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    qconv = helper.make_node("QLinearConv", list("abcdefgh"), ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    assert node_flops(qconv, [x, scalar, scalar, w, scalar, scalar, scalar, scalar], [y]) == \
        node_flops(conv, [x, w], [y]) > 0
    a, b, out = TensorSpec("a", (4, 32), "uint8"), TensorSpec("b", (32, 8), "int8"), TensorSpec("o", (4, 8), "int32")
    assert node_flops(helper.make_node("MatMulInteger", ["a", "b"], ["o"]), [a, b], [out]) == 2 * 4 * 8 * 32
    dq = helper.make_node("DequantizeLinear", ["a", "s"], ["o"])
    assert node_flops(dq, [a, scalar], [TensorSpec("o", (4, 32), "float32")]) == 2 * 4 * 32
    qgemm = helper.make_node("QGemm", list("abcdefg"), ["o"], domain="com.microsoft")
    assert node_flops(qgemm, [a, scalar, scalar, b, scalar, scalar, None], [out]) == 2 * 4 * 8 * 32


def test_quantized_model_is_estimated(quantized: dict[str, str], tmp_path) -> None:
    from dlbricks.estimator import estimate
    from dlbricks.generators import Budget

    est = estimate(_load(quantized["layer_dynamic"]), str(tmp_path / "q.db"), on_missing="measure",
                   budget=Budget.quick())
    assert est.sequential_s > 0
    assert est.coverage == 1.0


def _float16_model() -> onnx.ModelProto:
    """float32 in and out, float16 inside: Conv, Relu, MatMul, Softmax between two Casts."""
    b = _models.Builder(3)
    rng = np.random.default_rng(0)
    x = b.op1("Cast", ["x"], to=TensorProto.FLOAT16)
    w = b.name("w")
    b.inits.append(numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.1).astype(np.float16), w))
    y = b.op1("Relu", [b.op1("Conv", [x, w], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    w2 = b.name("w")
    b.inits.append(numpy_helper.from_array((rng.standard_normal((16 * 8 * 8, 32)) * 0.1).astype(np.float16), w2))
    flat = b.op1("Reshape", [y, b.const(np.array([1, -1], np.int64))])
    out = b.op1("Cast", [b.op1("Softmax", [b.op1("MatMul", [flat, w2])])], to=TensorProto.FLOAT)
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])
    return b.model([inp], [(out, TensorProto.FLOAT)], "fp16")


@pytest.mark.parametrize("granularity", ["layer", "fused"])
def test_float16_model_decomposes_and_its_bricks_run(granularity: str) -> None:
    dec = dlbricks.decompose(_float16_model(), granularity)
    assert len(dec.bricks) > 2  # not one brick of the whole model (the runtime computes it in float32)
    assert any(s.dtype == "float16" for b in dec.bricks.values() for s in b.inputs)
    for brick in dec.bricks.values():
        assert brick.check_runnable() is None, brick.op_type
        assert brick.flops is not None
    conv = next(b for b in dec.bricks.values() if "Conv" in b.op_types)
    assert conv.constants[0].spec.dtype == "float16" and conv.constants[0].spec.nbytes == 16 * 8 * 9 * 2
    session = ort.InferenceSession(conv.to_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = dlbricks.inputs.random_inputs(conv.inputs)
    assert np.isfinite(session.run(None, feeds)[0]).all()


def _pooling_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool, twice, then a Conv: quantized statically, each MaxPool follows a Conv."""
    b = _models.Builder(4)
    x = "x"
    for c_in, c_out in ((3, 8), (8, 8)):
        x = b.op1("Relu", [b.op1("Conv", [x, b.weight((c_out, c_in, 3, 3))], pads=[1, 1, 1, 1])])
        x = b.op1("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    y = b.op1("Conv", [x, b.weight((4, 8, 1, 1))])
    return b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [(y, TensorProto.FLOAT)], "pooling_cnn")


@pytest.fixture(scope="module")
def pooling_qdq(tmp_path_factory: pytest.TempPathFactory) -> dlbricks.ModelGraph:
    logging.getLogger().setLevel(logging.ERROR)
    folder = tmp_path_factory.mktemp("pooling")
    source, target = folder / "cnn.onnx", folder / "cnn_qdq.onnx"
    onnx.save(_pooling_cnn(), source)
    quantization.quantize_static(str(source), str(target), _RandomReader("x", (1, 3, 32, 32)),
                                 quant_format=quantization.QuantFormat.QDQ)
    return _load(str(target))


def test_maxpool_between_qdq_pairs_is_one_brick_on_8bit_values(pooling_qdq: dlbricks.ModelGraph) -> None:
    """onnxruntime drops the DequantizeLinear -> MaxPool -> QuantizeLinear pair around a MaxPool and
    runs it on the 8-bit values: the pair is part of the MaxPool's group, and its brick runs no
    DequantizeLinear or QuantizeLinear either."""
    from dlbricks.fusion import fusion_groups

    graph = pooling_qdq
    plan = fusion_groups(graph, "all")
    op_of = {la.name: la.op_type for la in graph.layers}
    pools = [g for g in plan.groups if any(op_of[n] == "MaxPool" for n in g)]
    assert len(pools) == 2
    for group in pools:
        assert sorted(op_of[n] for n in group) == ["DequantizeLinear", "MaxPool", "QuantizeLinear"]
    dec = dlbricks.decompose(graph, "fused", opt_level="all")
    bricks = [b for b in dec.bricks.values() if "MaxPool" in b.op_types]
    assert bricks and all(b.inputs[0].dtype in ("uint8", "int8") for b in bricks)
    for brick in bricks:
        assert brick.check_runnable() is None
        kernels = {n.op_type for n in optimized_model(dlbricks.load_model(brick.to_onnx()), "all").graph.node}
        assert kernels & {"MaxPool", "NhwcMaxPool"} and not kernels & {"DequantizeLinear", "QuantizeLinear"}


def test_maxpool_after_an_nhwc_qlinearconv_runs_as_the_models_nhwc_kernel(
        pooling_qdq: dlbricks.ModelGraph) -> None:
    """In the model, the 8-bit MaxPool after a QLinearConv meets an NHWC tensor and runs as
    NhwcMaxPool; alone it would run the NCHW 8-bit MaxPool. Its brick is that NHWC kernel."""
    from dlbricks.fusion import fusion_groups

    optimized = optimized_model(pooling_qdq, "all")
    assert "NhwcMaxPool" in {n.op_type for n in optimized.graph.node}
    plan = fusion_groups(pooling_qdq, "all")
    assert any(plan.channels_last) and len(plan.channels_last) == len(plan.groups)
    dec = dlbricks.decompose(pooling_qdq, "fused", opt_level="all")
    nhwc = [b for b in dec.bricks.values() if [n.op_type for n in b.nodes] == ["NhwcMaxPool"]]
    assert nhwc
    for brick in nhwc:
        _, h, w, c = brick.inputs[0].shape
        assert c == 8 and h == w  # channels last
        session = ort.InferenceSession(brick.to_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
        (out,) = session.run(None, dlbricks.inputs.random_inputs(brick.inputs))
        assert out.shape == brick.outputs[0].shape


def test_kernels_renamed_by_transformers_are_attributed_in_the_model(pooling_qdq: dlbricks.ModelGraph) -> None:
    """onnxruntime names the QLinearConv that replaces node ``n`` ``n_token_<k>``: its time belongs
    to the group of ``n``'s layers, not to none."""
    from dlbricks.estimator._profile import _owner_of, in_model_times
    from dlbricks.fusion import fusion_groups, kernel_origin
    from dlbricks.generators import OrtConfig

    assert kernel_origin("conv_token_63") == "conv" and kernel_origin("a_token_1_token_22") == "a"
    assert _owner_of("__dlb3_token_63", {"__dlb3": "conv"}) == "conv"
    assert _owner_of("__dlb3/duplicated", {"__dlb3": "dq"}) == "dq"
    times = in_model_times(pooling_qdq, OrtConfig(graph_optimization_level="all"), runs=2, warmup=1)
    plan = fusion_groups(pooling_qdq, "all")
    qconv = [g for g, k in zip(plan.groups, plan.kernels, strict=True) if "QLinearConv" in k]
    assert qconv
    for group in qconv:
        assert sum(times.layers.get(n, 0.0) for n in group) > 0, group


def test_integer_bricks_are_bounded_by_the_integer_peak(quantized: dict[str, str]) -> None:
    """8-bit kernels beat the float peak: a quantized brick's roofline uses the integer peak, and its
    fast runs raise that peak, not the float one that bounds float bricks."""
    from dlbricks.estimator.estimation import Peaks, _reached, computes_on_8bit

    dec = dlbricks.decompose(_load(quantized["cnn_dynamic"]))
    conv = next(b for b in dec.bricks.values() if b.op_type == "ConvInteger")
    mul = next(b for b in dec.bricks.values() if b.op_type == "Mul" and not computes_on_8bit(b))
    assert computes_on_8bit(conv) and conv.flops
    peaks = Peaks(flops_per_s=1e9, bytes_per_s=1e30, int_ops_per_s=4e9)
    assert peaks.roofline_s(conv) == pytest.approx(Peaks(1e9, 1e30).roofline_s(conv) / 4)
    assert peaks.roofline_s(mul) == Peaks(1e9, 1e30).roofline_s(mul)
    seconds = 200e-6  # long enough to set a rate, at 10x the float peak
    slow = Peaks(flops_per_s=conv.flops / seconds / 10, bytes_per_s=1e30)
    fastest = {sig: (seconds if sig == conv.signature else 0.0) for sig in dec.bricks}
    reached = _reached(slow, dec, fastest, set())
    assert reached.flops_per_s == slow.flops_per_s
    assert reached.int_ops_per_s == pytest.approx(conv.flops / seconds)
    assert reached.roofline_s(conv) == pytest.approx(seconds) and reached.roofline_s(mul) == slow.roofline_s(mul)


def test_integer_peak_is_measured_on_an_8bit_gemm() -> None:
    from dlbricks.estimator.calibrate import Calibration
    from dlbricks.estimator.calibrate import int_gemm_model, merge_peaks
    from dlbricks.estimator.estimation import Peaks

    model = int_gemm_model(32)
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # under 128: on x86 without VNNI, onnxruntime's u8s8 kernel adds pairs of products in int16
    # and saturates where both are near 255 x 127 (the quantization tools' "reduce_range")
    x = np.random.default_rng(0).integers(0, 128, (32, 32), dtype=np.uint8)
    w = numpy_helper.to_array(model.graph.initializer[0])
    (y,) = session.run(None, {"x": x})
    assert np.array_equal(y, x.astype(np.int32) @ w.astype(np.int32))
    cal = Calibration(Peaks(1e11, 1e10, 4e11), ((256, 1e11),), ((1 << 20, 1e10),), int_gemm=((256, 4e11),))
    flops, _, details = merge_peaks(None, "onnxruntime", cal)
    assert flops == 1e11 and details["int_ops_per_s"] == 4e11


def test_nhwc_qlinearconvs_of_a_prepared_model_are_one_group_each(tmp_path) -> None:
    """Quantized as the onnxruntime tools advise (``quant_pre_process``, uint8 activations, int8
    weights), every QLinearConv runs on NHWC tensors that the runtime names afresh, between two layout
    Transposes at the model's edges: each kernel still finds its Conv (through the QuantizeLinear and
    DequantizeLinear layers around it) instead of the whole body falling into one group."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from dlbricks.fusion import fusion_groups

    logging.getLogger().setLevel(logging.ERROR)
    source, prepared, target = tmp_path / "cnn.onnx", tmp_path / "pre.onnx", tmp_path / "qdq.onnx"
    onnx.save(_pooling_cnn(), source)
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    quantization.quantize_static(str(prepared), str(target), _RandomReader("x", (1, 3, 32, 32)),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8)
    graph = _load(str(target))
    plan = fusion_groups(graph, "all")
    op_of = {la.name: la.op_type for la in graph.layers}
    convs = [[n for n in g if op_of[n] == "Conv"] for g in plan.groups]
    assert sum(len(c) for c in convs) == 3 and max(len(c) for c in convs) == 1
    assert plan.reorders >= 2  # the Transposes into and out of NHWC are the model's, not a brick's
