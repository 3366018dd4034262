"""A weight handed to a layer through an Identity (TorchScript's shared weights) stays in the layer's brick."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks._identities import constant_identities
from dlbricks.decomposition import _decompose_groups
from tests import _models
from tests.test_faithfulness import assert_faithful

ROWS, FEATURES = 64, 256


def _stack(feed: str = "identity", layers: int = 3) -> onnx.ModelProto:
    """``layers`` MatMul (64 x 256 x 256) layers with a Relu between, all reading one weight ``W``.

    ``feed`` says how each MatMul gets it: ``"identity"`` through an Identity of its own (as
    TorchScript exports a shared weight), ``"chain"`` through two Identities, ``"direct"`` as the
    initializer itself, ``"shared"`` through one Identity that every MatMul reads, ``"input"`` as a
    graph input (an activation).
    """
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((FEATURES, FEATURES)) * 0.05).astype(np.float32)
    inits = [] if feed == "input" else [numpy_helper.from_array(weight, "W")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, FEATURES])]
    if feed == "input":
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [FEATURES, FEATURES]))
    nodes = []
    if feed == "shared":
        nodes.append(helper.make_node("Identity", ["W"], ["W_all"], name="id_all"))
    h = "x"
    for i in range(layers):
        b = {"direct": "W", "input": "W", "shared": "W_all"}.get(feed, f"W_{i}")
        if feed in ("identity", "chain"):
            source = "W"
            if feed == "chain":
                nodes.append(helper.make_node("Identity", ["W"], [f"W_{i}_a"], name=f"id_{i}_a"))
                source = f"W_{i}_a"
            nodes.append(helper.make_node("Identity", [source], [b], name=f"id_{i}"))
        nodes.append(helper.make_node("MatMul", [h, b], [f"mm_{i}"], name=f"matmul_{i}"))
        h = f"mm_{i}"
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [h], [f"relu_{i}"], name=f"relu_{i}"))
            h = f"relu_{i}"
    graph = helper.make_graph(nodes, f"stack_{feed}", inputs,
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, [ROWS, FEATURES])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _models.OPSET)])


def _matmul_bricks(dec: dlbricks.Decomposition) -> list[dlbricks.Brick]:
    return [b for b in dec.bricks.values() if "MatMul" in b.op_types]


def test_identity_and_weight_join_the_matmul_brick() -> None:
    dec = dlbricks.decompose(_stack("identity"))
    assert dec.layers == 8  # 3 Identity, 3 MatMul, 2 Relu
    assert [dec.bricks[o.signature].op_type for o in dec.occurrences] == [
        "Identity+MatMul", "Relu", "Identity+MatMul", "Relu", "Identity+MatMul"]
    [brick] = _matmul_bricks(dec)
    assert [s.shape for s in brick.inputs] == [(ROWS, FEATURES)]  # the weight is no graph input
    assert [c.spec.shape for c in brick.constants] == [(FEATURES, FEATURES)]
    identity, matmul = brick.nodes
    assert (identity.op_type, list(identity.input)) == ("Identity", ["c0"])
    assert list(matmul.input) == ["in0", identity.output[0]]
    assert brick.constant_bytes == FEATURES * FEATURES * 4
    # the occurrences name the weight they share, so the reuse distance sees the sharing
    assert [o.weights for o in dec.occurrences if o.nodes[-1].startswith("matmul")] == [("W",)] * 3
    assert [o.nodes for o in dec.occurrences][0] == ("id_0", "matmul_0")


def test_signature_differs_from_a_direct_weight_and_an_activation() -> None:
    through = _matmul_bricks(dlbricks.decompose(_stack("identity")))
    direct = _matmul_bricks(dlbricks.decompose(_stack("direct")))
    activation = _matmul_bricks(dlbricks.decompose(_stack("input")))
    assert [b.op_type for b in (*direct, *activation)] == ["MatMul", "MatMul"]
    signatures = {b.signature for b in (*through, *direct, *activation)}
    assert len(signatures) == 3


def test_brick_runs_and_reproduces_the_model() -> None:
    dec = assert_faithful(_stack("identity"))
    [brick] = _matmul_bricks(dec)
    assert brick.check_runnable() is None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(brick.to_onnx().SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["in0"]
    [out] = session.run(None, {"in0": np.ones((ROWS, FEATURES), dtype=np.float32)})
    assert out.shape == (ROWS, FEATURES) and np.isfinite(out).all()


def test_a_chain_of_identities_joins_whole() -> None:
    graph = dlbricks.load_model(_stack("chain"))
    assert constant_identities(graph) == {f"id_{i}{s}": f"matmul_{i}" for i in range(3) for s in ("_a", "")}
    dec = assert_faithful(_stack("chain"))
    [brick] = _matmul_bricks(dec)
    assert brick.op_types == ("Identity", "Identity", "MatMul")
    assert not brick.inputs[1:] and len(brick.constants) == 1


def test_an_identity_read_by_several_layers_stays_its_own_brick() -> None:
    """Joined to one reader it would leave the others reading an output of that brick."""
    dec = dlbricks.decompose(_stack("shared"))
    assert [dec.bricks[o.signature].op_type for o in dec.occurrences][:2] == ["Identity", "MatMul"]
    assert all(len(b.inputs) == 2 for b in _matmul_bricks(dec))


@pytest.mark.parametrize(("model", "batch_size"), [
    (_models.resnet_like(), 1), (_models.transformer_layer(), 1), (_stack("direct"), None)])
def test_models_without_such_identities_decompose_as_before(model: onnx.ModelProto, batch_size: int | None) -> None:
    graph = dlbricks.load_model(model, batch_size=batch_size)
    dec = dlbricks.decompose(graph)
    before = _decompose_groups(graph, [(layer,) for layer in graph.layers], "layer", "synthetic")
    assert [o.signature for o in dec.occurrences] == [o.signature for o in before.occurrences]
    assert all(len(b.nodes) == 1 for b in dec.bricks.values())


def test_fused_groups_at_all_are_unchanged() -> None:
    """At "all" onnxruntime folds the Identities away and its fusion groups hold them already."""
    from dlbricks.fusion import fusion_groups

    graph = dlbricks.load_model(_stack("identity"))
    plan = fusion_groups(graph, "all")
    dec = dlbricks.decompose(graph, "fused", opt_level="all")
    assert [o.nodes for o in dec.occurrences] == [tuple(g) for g in plan.groups]
