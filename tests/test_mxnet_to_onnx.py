"""MXNet bricks converted to standard ONNX bricks compute the same in onnxruntime as in MXNet.

Tolerance: rtol 1e-4, atol 1e-4 (float32; the two runtimes sum convolutions and matrix products in
different orders, and the Gluon models' activations grow to a few hundred).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dlbricks
from dlbricks.errors import UnrunnableBrickError
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()

from dlbricks._mxnet_to_onnx import CONVERTIBLE_OPS, mxnet_brick_to_onnx
from dlbricks.model_zoo import build
from dlbricks.model_zoo.gluon import build_gluon
from dlbricks.mxnet_bricks import brick_to_symbol
from dlbricks.mxnet_frontend import load_mxnet

RTOL, ATOL = 1e-4, 1e-4
MODELS = ("resnet18_v1", "resnet18_v2", "squeezenet1.0", "mobilenetv2_0.25", "densenet121", "inceptionv3",
          "alexnet", "vgg11_bn")


def run_mxnet(brick: dlbricks.Brick, feeds: list[np.ndarray]) -> list[np.ndarray]:
    symbol, args, aux, inputs = brick_to_symbol(brick)
    args.update({n: mx.nd.array(v) for n, v in zip(inputs, feeds, strict=True)})
    exe = symbol.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


def run_ort(brick: dlbricks.Brick, feeds: list[np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(brick.to_onnx().SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {s.name: v for s, v in zip(brick.inputs, feeds, strict=True)})


def feeds_for(brick: dlbricks.Brick, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s.shape).astype(np.float32) for s in brick.inputs]


def check_equivalent(brick: dlbricks.Brick) -> dlbricks.Brick:
    converted = mxnet_brick_to_onnx(brick)
    assert converted.signature != brick.signature
    assert {d for d, _ in converted.opsets} == {""}
    assert [s.shape for s in converted.outputs] == [s.shape for s in brick.outputs]
    onnx.checker.check_model(converted.to_onnx(), full_check=True)
    feeds = feeds_for(brick)
    used = feeds[: len(converted.inputs)]  # a dropped input (softmax label) is the last one
    for got, want in zip(run_ort(converted, used), run_mxnet(brick, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{brick.op_type} {brick.describe()}")
    return converted


@pytest.mark.parametrize("name", MODELS)
def test_every_brick_of_the_model_converts(name: str) -> None:
    dec = dlbricks.decompose(build_gluon(name), weights="real")
    for brick in dec.bricks.values():
        converted = check_equivalent(brick)
        assert converted.weights == "real"
        if brick.op_type in ("Convolution", "FullyConnected"):
            assert converted.flops and converted.flops > 0


def test_mxnet_bricks_count_the_flops_of_their_conversion() -> None:
    mxnet_dec = dlbricks.decompose(build_gluon("resnet18_v1"))
    onnx_dec = dlbricks.decompose(build("resnet18_v1"))
    assert all(b.flops is not None for b in mxnet_dec.bricks.values())
    totals = [sum(d.bricks[o.signature].flops for o in d.occurrences) for d in (mxnet_dec, onnx_dec)]
    assert totals[0] == totals[1] > 3e9  # the same network, counted by the same rules


def test_synthetic_bricks_convert_and_run() -> None:
    dec = dlbricks.decompose(build_gluon("mobilenet0.25"))
    for brick in dec.bricks.values():
        converted = mxnet_brick_to_onnx(brick)
        (out,) = run_ort(converted, feeds_for(converted))
        assert out.shape == brick.outputs[0].shape and np.isfinite(out).all()
        assert mxnet_brick_to_onnx(brick).signature == converted.signature  # deterministic


def _one_layer(sym: mx.sym.Symbol, shape: tuple[int, ...]) -> dlbricks.Brick:
    graph = load_mxnet(sym, input_shapes={"data": shape})
    dec = dlbricks.decompose(graph, weights="real")
    assert len(dec.bricks) == len(graph) == 1
    return next(iter(dec.bricks.values()))


@pytest.mark.parametrize("flatten", [True, False])
def test_fully_connected_flatten_semantics(flatten: bool) -> None:
    data = mx.sym.var("data")
    brick = _one_layer(mx.sym.FullyConnected(data, num_hidden=5, flatten=flatten), (2, 3, 4, 6))
    converted = check_equivalent(brick)
    assert converted.op_types == (("Flatten", "Gemm") if flatten else ("MatMul", "Add"))
    assert converted.outputs[0].shape == ((2, 5) if flatten else (2, 3, 4, 5))


@pytest.mark.parametrize("sym_fn", [
    lambda d: mx.sym.BatchNorm(d),  # MXNet defaults: fix_gamma=True, eps=1e-3
    lambda d: mx.sym.Pooling(d, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full"),
    lambda d: mx.sym.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                             count_include_pad=False),
    lambda d: mx.sym.Pooling(d, kernel=(1, 1), global_pool=True, pool_type="avg"),
    lambda d: mx.sym.LeakyReLU(d, act_type="leaky", slope=0.1),
    lambda d: mx.sym.LeakyReLU(d, act_type="elu", slope=0.5),
    lambda d: mx.sym.LeakyReLU(d, act_type="prelu", name="prelu"),
    lambda d: mx.sym.Activation(d, act_type="softrelu"),
    lambda d: mx.sym.clip(d, -0.5, 0.5),
    lambda d: mx.sym.Dropout(d, p=0.3),
    lambda d: mx.sym.softmax(d, axis=1),
    lambda d: mx.sym.Reshape(d, shape=(0, -1)),
    lambda d: mx.sym.transpose(d, axes=(0, 2, 3, 1)),
    lambda d: mx.sym.Convolution(d, kernel=(3, 3), num_filter=8, num_group=4, stride=(2, 2), dilate=(2, 2),
                                 pad=(2, 2)),
    lambda d: mx.sym.elemwise_add(d, d),
    lambda d: mx.sym.Concat(d, d, dim=1),
])
def test_op_semantics(sym_fn) -> None:
    check_equivalent(_one_layer(sym_fn(mx.sym.var("data")), (2, 8, 11, 11)))


def test_unmapped_op_is_a_one_line_error() -> None:
    brick = _one_layer(mx.sym.Pooling(mx.sym.var("data"), kernel=(2, 2), pool_type="lp", p_value=2), (1, 4, 8, 8))
    with pytest.raises(UnrunnableBrickError, match="pool_type=lp has no ONNX equivalent") as info:
        mxnet_brick_to_onnx(brick)
    assert "\n" not in str(info.value)
    brick = _one_layer(mx.sym.sort(mx.sym.var("data"), axis=1), (1, 4, 8, 8))
    with pytest.raises(UnrunnableBrickError, match="MXNet op sort has no ONNX conversion"):
        mxnet_brick_to_onnx(brick)


def test_onnx_bricks_are_refused() -> None:
    from dlbricks.model_zoo import build

    brick = next(iter(dlbricks.decompose(build("squeezenet1_1")).bricks.values()))
    with pytest.raises(UnrunnableBrickError, match="is not an MXNet op"):
        mxnet_brick_to_onnx(brick)


def test_convertible_ops_cover_the_gluon_zoo() -> None:
    assert {"Convolution", "BatchNorm", "Activation", "Pooling", "FullyConnected", "elemwise_add", "Concat",
            "Flatten", "Dropout", "clip", "softmax", "SoftmaxOutput", "LeakyReLU", "Reshape"} <= CONVERTIBLE_OPS


@pytest.mark.parametrize("make, shape", [
    (lambda x: mx.sym.Deconvolution(x, num_filter=4, kernel=(4, 4), stride=(2, 2), pad=(1, 1), name="l"),
     (1, 3, 8, 8)),
    (lambda x: mx.sym.Deconvolution(x, num_filter=4, kernel=(3, 3), stride=(2, 2), adj=(1, 1), pad=(1, 1),
                                    no_bias=False, name="l"), (1, 3, 5, 5)),
    (lambda x: mx.sym.contrib.BilinearResize2D(x, height=11, width=14, name="l"), (1, 3, 6, 7)),
    (lambda x: mx.sym.contrib.AdaptiveAvgPooling2D(x, output_size=(3, 2), name="l"), (1, 3, 9, 8)),
    (lambda x: mx.sym.contrib.AdaptiveAvgPooling2D(x, output_size=1, name="l"), (1, 3, 7, 5)),
    (lambda x: mx.sym.LayerNorm(x, name="l"), (2, 5, 16)),
    (lambda x: mx.sym.relu(x, name="l"), (1, 3, 4, 4)),
    (lambda x: 2.5 - x, (1, 3, 4, 4)),  # _rminus_scalar
])
def test_more_ops_convert_with_their_flops(make, shape) -> None:
    """Deconvolution, BilinearResize2D, AdaptiveAvgPooling2D, LayerNorm... compute in ONNX what they
    compute in MXNet, so that their FLOPs are those of the ONNX ops (known to the cost model)."""
    brick = _one_layer(make(mx.sym.var("data")), shape)
    converted = check_equivalent(brick)
    assert brick.flops is not None and brick.flops == converted.flops > 0


def test_embedding_and_fully_connected_with_a_computed_weight() -> None:
    """An Embedding gathers rows (no FLOPs, its bytes); a FullyConnected whose weight is computed in
    the model (an input of its brick) counts its multiply-adds."""
    tokens, w = mx.sym.var("tokens"), mx.sym.var("wsrc")
    emb = mx.sym.Embedding(tokens, input_dim=50, output_dim=16, name="emb")
    fc = mx.sym.FullyConnected(emb, weight=mx.sym.relu(w, name="wr"), num_hidden=8, no_bias=True, flatten=False,
                               name="fc")
    graph = load_mxnet(fc, input_shapes={"tokens": (2, 6), "wsrc": (8, 16)})
    bricks = {b.op_type: b for b in dlbricks.decompose(graph, weights="real").bricks.values()}
    assert bricks["Embedding"].flops == 0 and bricks["Embedding"].bytes_moved > 50 * 16 * 4
    assert bricks["FullyConnected"].flops == 2 * 2 * 6 * 16 * 8
    fc_brick = bricks["FullyConnected"]
    feeds = feeds_for(fc_brick)
    for got, want in zip(run_ort(mxnet_brick_to_onnx(fc_brick), feeds), run_mxnet(fc_brick, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    emb_brick = bricks["Embedding"]
    indices = [np.random.default_rng(0).integers(0, 50, size=(2, 6)).astype(np.float32)]
    for got, want in zip(run_ort(mxnet_brick_to_onnx(emb_brick), indices), run_mxnet(emb_brick, indices),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
