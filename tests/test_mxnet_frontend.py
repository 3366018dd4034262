"""The MXNet frontend: symbols, files and Gluon blocks into ModelGraphs; decomposition; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import dlbricks
from dlbricks import InvalidArgumentError, ModelLoadError
from dlbricks.errors import ShapeInferenceError
from dlbricks.mxnet_frontend import LAYOUTS_ATTR, MXNET_DOMAIN, is_mxnet_model, load_mxnet
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()

from dlbricks.model_zoo.gluon import build_gluon, export_gluon, gluon_block  # noqa: E402


def small_symbol() -> mx.sym.Symbol:
    """conv -> bn -> relu -> pool -> fc, with a data shape hint (batch 0 = unknown)."""
    data = mx.sym.var("data", shape=(0, 3, 16, 16))
    x = mx.sym.Convolution(data, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn")
    x = mx.sym.Activation(x, act_type="relu", name="relu")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    return mx.sym.FullyConnected(x, num_hidden=10, name="fc")


@pytest.fixture(scope="module")
def resnet18() -> dlbricks.ModelGraph:
    return build_gluon("resnet18_v1")


def test_block_loads_as_model_graph(resnet18: dlbricks.ModelGraph) -> None:
    g = resnet18
    assert g.name == "gluon_resnet18_v1"
    assert g.opsets == {MXNET_DOMAIN: 1}
    assert g.source.format == "mxnet"
    assert [s.shape for s in g.inputs] == [(1, 3, 224, 224)]
    assert [s.shape for s in g.outputs] == [(1, 1000)]
    assert len(g) == 68
    assert {la.domain for la in g} == {MXNET_DOMAIN}
    assert {la.op_type for la in g} >= {"Convolution", "BatchNorm", "Activation", "elemwise_add", "Pooling",
                                        "FullyConnected"}
    conv = g.layers[0]
    attrs = {a.name: a.s.decode() for a in conv.proto.attribute}
    assert attrs["kernel"] == "(7, 7)" and attrs["num_filter"] == "64"
    assert attrs[LAYOUTS_ATTR] == "plain,const"
    assert list(attrs) == sorted(attrs)
    # weights are constants holding the block's parameters; the DAG follows the tensors
    assert g.is_constant(conv.inputs[1]) and g.constant_array(conv.inputs[1]).shape == (64, 3, 7, 7)
    assert g.dag.number_of_nodes() == 68 and g.dag.number_of_edges() >= 67
    assert g.to_onnx().opset_import[0].domain == MXNET_DOMAIN


def test_shapes_match_mxnet_inference(resnet18: dlbricks.ModelGraph) -> None:
    block = gluon_block("resnet18_v1")
    internals = block(mx.sym.var("data")).get_internals()
    _, shapes, _ = internals.infer_shape(data=(1, 3, 224, 224))
    expected = dict(zip(internals.list_outputs(), shapes, strict=True))
    for layer in resnet18:
        for out in layer.outputs:
            assert resnet18.spec(out).shape == tuple(expected[out])


def test_decompose_dedups_and_signatures_are_stable(resnet18: dlbricks.ModelGraph) -> None:
    dec = dlbricks.decompose(resnet18)
    assert dec.layers == 68 and len(dec.bricks) == 28
    again = dlbricks.decompose(build_gluon("resnet18_v1"))
    assert set(again.bricks) == set(dec.bricks)
    assert resnet18.key == build_gluon("resnet18_v1").key
    brick = next(iter(dec.bricks.values()))
    model = brick.to_onnx()
    assert model.opset_import[0].domain == MXNET_DOMAIN
    assert [i.name for i in model.graph.input] == ["in0"]
    bs = dlbricks.BrickSet.from_models([resnet18, build_gluon("resnet34_v1")])
    assert bs.summary().shared_across_models > 10


def test_exported_files_load_like_the_block(tmp_path) -> None:
    path = export_gluon("gluon_squeezenet1.1", tmp_path)
    assert path.name == "gluon_squeezenet1.1-symbol.json"
    assert (tmp_path / "gluon_squeezenet1.1-0000.params").is_file()
    from_file = load_mxnet(path)
    from_block = build_gluon("squeezenet1.1")
    assert from_file.name == "gluon_squeezenet1.1"
    assert from_file.source.path == str(path)
    assert from_file.key == from_block.key
    assert [s.shape for s in load_mxnet(path, batch_size=4).inputs] == [(4, 3, 224, 224)]
    shaped = load_mxnet(path, input_shapes={"data": (2, 3, 224, 224)})
    assert shaped.inputs[0].shape == (2, 3, 224, 224)


def test_symbol_with_params_and_synthetic_weights() -> None:
    sym = small_symbol()
    g = load_mxnet(sym, batch_size=2)
    assert [s.shape for s in g.inputs] == [(2, 3, 16, 16)]
    assert [la.op_type for la in g] == ["Convolution", "BatchNorm", "Activation", "Pooling", "FullyConnected"]
    var = g.constant_array("bn_moving_var")
    assert (var > 0).all()  # synthetic variances are positive
    rng = np.random.default_rng(0)
    params = {"arg:conv_weight": mx.nd.array(rng.standard_normal((8, 3, 3, 3)))}
    with pytest.warns(RuntimeWarning, match="are not in the parameters"):
        with_params = load_mxnet(sym, params=params, batch_size=2)
    np.testing.assert_array_equal(with_params.constant_array("conv_weight"), params["arg:conv_weight"].asnumpy())
    assert with_params.key != g.key


def test_softmax_label_shape_is_inferred() -> None:
    data = mx.sym.var("data", shape=(1, 4))
    out = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data, num_hidden=3, name="fc"), name="softmax")
    g = load_mxnet(out, params={"fc_weight": np.ones((3, 4), np.float32), "fc_bias": np.zeros(3, np.float32)})
    assert {s.name: s.shape for s in g.inputs} == {"data": (1, 4), "softmax_label": (1,)}


def test_onnx_form_round_trips(resnet18: dlbricks.ModelGraph) -> None:
    """``ModelGraph.to_onnx()`` of an MXNet model loads back into the same graph."""
    again = load_mxnet(resnet18.to_onnx())
    assert again.name == resnet18.name and again.key == resnet18.key
    assert [la.name for la in again] == [la.name for la in resnet18]
    assert set(dlbricks.decompose(again).bricks) == set(dlbricks.decompose(resnet18).bricks)
    assert is_mxnet_model(resnet18.to_onnx())
    from dlbricks.model_zoo import build

    assert not is_mxnet_model(build("squeezenet1_1"))
    with pytest.raises(InvalidArgumentError, match="domains other than org.mxnet"):
        load_mxnet(build("squeezenet1_1"))


def test_ignore_unknown_inputs() -> None:
    shapes = {"data": (2, 3, 16, 16), "tokens": (2, 7)}
    g = load_mxnet(small_symbol(), input_shapes=shapes, ignore_unknown_inputs=True)
    assert [s.shape for s in g.inputs] == [(2, 3, 16, 16)]


def test_is_mxnet_model() -> None:
    assert is_mxnet_model("model-symbol.json") and is_mxnet_model(small_symbol())
    assert is_mxnet_model(gluon_block("mobilenet0.25"))
    assert not is_mxnet_model("model.onnx") and not is_mxnet_model(b"bytes") and not is_mxnet_model(3)


def test_dlbricks_does_not_import_mxnet() -> None:
    code = ("import sys, dlbricks, dlbricks.generators, dlbricks.model_zoo, dlbricks.estimator, "
            "dlbricks.mxnet_frontend, dlbricks.mxnet_bricks, dlbricks._mxnet_to_onnx, "
            "dlbricks.generators.mxnet, dlbricks.model_zoo.gluon; "
            "from dlbricks.generators import get_backend; get_backend('mxnet'); "
            "assert 'mxnet' not in sys.modules, 'mxnet imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------------- bad input
def test_missing_file(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="no such file"):
        load_mxnet(tmp_path / "nope-symbol.json")


def test_not_json(tmp_path) -> None:
    path = tmp_path / "bad-symbol.json"
    path.write_text("{not json")
    with pytest.raises(ModelLoadError, match="is not a JSON file"):
        load_mxnet(path)


def test_json_that_is_not_a_symbol(tmp_path) -> None:
    path = tmp_path / "other-symbol.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ModelLoadError, match="is not an MXNet symbol"):
        load_mxnet(path)


def test_corrupt_params(tmp_path) -> None:
    path = export_gluon("mobilenet0.25", tmp_path)
    (tmp_path / "gluon_mobilenet0.25-0000.params").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match=r"not an MXNet \.params file"):
        load_mxnet(path)


def test_params_of_another_model(tmp_path) -> None:
    with pytest.raises(ShapeInferenceError, match="Shape inconsistent"), pytest.warns(RuntimeWarning):
        load_mxnet(small_symbol(), params={"conv_weight": np.ones((4, 3, 3, 3), np.float32)}, batch_size=1)


def test_block_without_shapes() -> None:
    with pytest.raises(ShapeInferenceError, match="input_shapes="):
        load_mxnet(gluon_block("mobilenet0.25"))


def test_uninitialized_block() -> None:
    from mxnet.gluon.model_zoo import vision

    with pytest.raises(ModelLoadError, match="initialize"):
        load_mxnet(vision.get_model("mobilenet0.25"), input_shapes={"data": (1, 3, 224, 224)})


def test_input_without_shape() -> None:
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3)
    with pytest.raises(ShapeInferenceError, match="data input 'data' has no shape"):
        load_mxnet(sym)
    with pytest.raises(ShapeInferenceError, match="batch_size=N"):
        load_mxnet(small_symbol())


def test_bad_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="has no input named 'image'"):
        load_mxnet(small_symbol(), input_shapes={"image": (1, 3, 16, 16)})
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        load_mxnet(small_symbol(), batch_size=-1)
    with pytest.raises(InvalidArgumentError, match="takes a path"):
        load_mxnet(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="shape of input 'data'"):
        load_mxnet(small_symbol(), input_shapes={"data": "1,3"})  # type: ignore[dict-item]
