"""Bricks reproduce the model: every brick's outputs equal the model's intermediate tensors."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dlbricks
from tests import _models


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _all_tensors(graph: dlbricks.ModelGraph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the whole model with every intermediate tensor exposed as an output."""
    model = graph.to_onnx()
    names = [t for layer in graph.layers for t in layer.outputs if t]
    existing = {o.name for o in model.graph.output}
    for name in names:
        if name not in existing:
            model.graph.output.append(graph.spec(name).to_value_info())
    values = _session(model).run(names, feeds)
    return {**feeds, **dict(zip(names, values, strict=True))}


def assert_faithful(model: onnx.ModelProto, **load_kwargs: object) -> dlbricks.Decomposition:
    graph = dlbricks.load_model(model, **load_kwargs)
    feeds = dlbricks.inputs.random_inputs(graph.inputs, seed=7)
    tensors = _all_tensors(graph, feeds)
    dec = dlbricks.decompose(graph, weights="real")
    assert dec.instances is not None
    for occ, brick in zip(dec.occurrences, dec.instances, strict=True):
        proto = brick.to_onnx(weights="real")
        onnx.checker.check_model(proto, full_check=True)
        inputs = {f"in{i}": tensors[name] for i, name in enumerate(occ.inputs)}
        outputs = _session(proto).run(None, inputs)
        for i, (name, got) in enumerate(zip(occ.outputs, outputs, strict=True)):
            spec = brick.outputs[i]
            assert got.shape == spec.shape == graph.spec(name).shape, (occ.nodes, name)
            assert got.dtype.name == spec.dtype, (occ.nodes, name)
            np.testing.assert_allclose(got, tensors[name], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{occ.nodes} output {name}")
    return dec


def test_cnn_with_batchnorm_and_residual_adds() -> None:
    dec = assert_faithful(_models.resnet_like(), batch_size=2)
    ops = {b.op_type for b in dec.bricks.values()}
    assert {"Conv", "BatchNormalization", "Relu", "Add", "Gemm"} <= ops


def test_transformer_layer_with_shape_chain() -> None:
    dec = assert_faithful(_models.transformer_layer(), batch_size=2)
    ops = [b.op_type for b in dec.bricks.values()]
    # the Shape -> Gather -> Unsqueeze -> Concat chains are folded: Reshapes see constant shapes
    assert "Shape" not in ops and "Concat" not in ops
    reshapes = [b for b in dec.bricks.values() if b.op_type == "Reshape"]
    assert reshapes and all(c.exact and c.spec.dtype == "int64" for b in reshapes for c in b.constants)
    gather = next(b for b in dec.bricks.values() if b.op_type == "Gather")
    assert gather.inputs[0].value_range == (0, 50)


def test_lstm() -> None:
    dec = assert_faithful(_models.lstm_model())
    lstm = next(b for b in dec.bricks.values() if b.op_type == "LSTM")
    assert len(lstm.outputs) == 3


def test_split_with_several_outputs_and_optional_input() -> None:
    dec = assert_faithful(_models.split_model())
    split = next(b for b in dec.bricks.values() if b.op_type == "Split")
    assert len(split.outputs) == 3
    clip = next(b for b in dec.bricks.values() if b.op_type == "Clip")
    assert list(clip.nodes[0].input)[1] == ""


def test_control_flow_kept_whole() -> None:
    dec = assert_faithful(_models.control_flow_model())
    ops = [b.op_type for b in dec.bricks.values()]
    assert "If" in ops and "Loop" in ops
    loop = next(b for b in dec.bricks.values() if b.op_type == "Loop")
    # the Loop body reads the If's output from the outer scope: it is an input of the brick
    assert len(loop.inputs) == 2


@pytest.mark.parametrize("factory", [_models.resnet_like, _models.transformer_layer])
def test_synthetic_bricks_check_and_run(factory) -> None:  # type: ignore[no-untyped-def]
    dec = dlbricks.decompose(factory(), batch_size=1)
    for brick in dec.bricks.values():
        proto = brick.to_onnx()
        onnx.checker.check_model(proto, full_check=True)
        outs = _session(proto).run(None, dlbricks.inputs.random_inputs(brick.inputs, seed=1))
        for got, spec in zip(outs, brick.outputs, strict=True):
            assert got.shape == spec.shape
            if np.issubdtype(got.dtype, np.floating):
                assert np.isfinite(got).all(), brick.op_type
