"""Weight-free bricks: nothing of a proprietary model survives but what decides the cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.bricks import SIGNATURE_KEY, write_bricks


def _secret_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) + 3.0).astype(np.float32), name)

    inits = [init("secret_conv_w", (8, 3, 3, 3)), init("secret_conv_b", (8,)), init("secret_fc_w", (8 * 6 * 6, 16)),
             init("secret_fc_b", (16,)), init("secret_ln_scale", (16,)), init("secret_ln_bias", (16,)),
             numpy_helper.from_array(np.asarray([1, 8 * 6 * 6], np.int64), "secret_shape"),
             numpy_helper.from_array(np.asarray(0.125, np.float32), "secret_scale")]
    nodes = [
        helper.make_node("Conv", ["secret_input", "secret_conv_w", "secret_conv_b"], ["secret_conv_out"],
                         name="secret_conv", pads=[1, 1, 1, 1], doc_string="secret stack trace"),
        helper.make_node("Relu", ["secret_conv_out"], ["secret_relu_out"], name="secret_relu"),
        helper.make_node("Reshape", ["secret_relu_out", "secret_shape"], ["secret_flat"], name="secret_reshape"),
        helper.make_node("MatMul", ["secret_flat", "secret_fc_w"], ["secret_fc_out"], name="secret_fc"),
        helper.make_node("Add", ["secret_fc_out", "secret_fc_b"], ["secret_fc_biased"], name="secret_bias"),
        helper.make_node("LayerNormalization", ["secret_fc_biased", "secret_ln_scale", "secret_ln_bias"],
                         ["secret_ln_out"], name="secret_ln", axis=-1),
        helper.make_node("Mul", ["secret_ln_out", "secret_scale"], ["secret_output"], name="secret_mul"),
    ]
    graph = helper.make_graph(nodes, "secret_graph",
                              [helper.make_tensor_value_info("secret_input", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("secret_output", TensorProto.FLOAT, [1, 16])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _weights(model: onnx.ModelProto) -> list[np.ndarray]:
    """The model's float initializers of more than one element: its weights."""
    arrays = [numpy_helper.to_array(t) for t in model.graph.initializer]
    return [a for a in arrays if a.dtype.kind == "f" and a.size > 1]


@pytest.mark.parametrize("granularity", ["layer", "fused"])
def test_no_weight_and_no_name_survives_and_signatures_hold(tmp_path: Path, granularity: str) -> None:
    source = _secret_model()
    dec = dlbricks.decompose(dlbricks.load_model(source, name="secret_model"), granularity=granularity,
                             weights="real")
    paths = write_bricks(dec.bricks.values(), tmp_path, no_weights=True)
    assert len(paths) == len(dec.bricks)
    secrets = _weights(source)
    for path in paths:
        data = path.read_bytes()
        assert b"secret" not in data  # no node, tensor, graph or doc string of the model
        written = onnx.load_model_from_string(data)
        for array in _weights(written):
            assert not any(array.shape == s.shape and np.array_equal(array, s) for s in secrets)
        signature = {p.key: p.value for p in written.metadata_props}[SIGNATURE_KEY]
        brick = dec.bricks[signature]
        assert brick.without_weights().signature == signature
        if granularity == "layer":  # cut again, the written brick is the same brick
            (again,) = dlbricks.decompose(dlbricks.load_model(written)).bricks
            assert again == signature


def test_real_weights_brick_does_keep_them(tmp_path: Path) -> None:
    """The check above can fail: with the model's weights the written bricks hold them."""
    source = _secret_model()
    dec = dlbricks.decompose(dlbricks.load_model(source), weights="real")
    paths = write_bricks(dec.bricks.values(), tmp_path, weights="real")
    found = [a for p in paths for a in _weights(onnx.load(p))]
    assert any(np.array_equal(a, s) for a in found for s in _weights(source) if a.shape == s.shape)
    with pytest.raises(dlbricks.InvalidArgumentError, match="no_weights"):
        write_bricks(dec.bricks.values(), tmp_path, weights="real", no_weights=True)


def test_only_shape_constants_keep_their_values() -> None:
    dec = dlbricks.decompose(dlbricks.load_model(_secret_model()), weights="real")
    for brick in dec.bricks.values():
        bare = brick.without_weights()
        for before, after in zip(brick.constants, bare.constants, strict=True):
            if brick.op_type == "Reshape":  # a shape: what the op computes
                assert after.value is not None and after.value == before.value
            else:  # weights and scalars alike are synthetic
                assert after.value is None
