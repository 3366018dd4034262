"""Models as exporters write them: external data, shape subgraphs, control flow, opsets 11 to 21,
and ops that dlbricks cannot run, each refused with one line that names the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.cli import main

from . import _models


def test_external_data_loads_and_decomposes(tmp_path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save_model(_models.resnet_like(batch=1), path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.data", size_threshold=0)
    assert (tmp_path / "model.data").is_file()
    dec = dlbricks.decompose(str(path), weights="real")
    inline = dlbricks.decompose(_models.resnet_like(batch=1), weights="real")
    assert set(dec.bricks) == set(inline.bricks)
    conv = next(b for b in dec.instances if b.op_type == "Conv")
    assert conv.constants[0].value is not None  # the weights were read from the side file


def test_missing_external_data_is_one_line(tmp_path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save_model(_models.resnet_like(batch=1), path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.data", size_threshold=0)
    (tmp_path / "model.data").unlink()
    with pytest.raises(dlbricks.ModelLoadError, match="external data file 'model.data'"):
        dlbricks.load_model(str(path))


def _shape_chain_model(opset: int) -> onnx.ModelProto:
    """Conv, then a flatten written as exporters do (Shape -> Gather -> Unsqueeze -> Concat ->
    Reshape), then MatMul and Softmax, in ops whose form every opset from 11 to 21 accepts."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal((8 * 8 * 8, 10)) * 0.1).astype(np.float32), "fc"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    unsqueeze = (helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]) if opset < 13 else
                 helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]))
    if opset >= 13:
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes0"))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
             unsqueeze,
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"], name="reshape"),
             helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="matmul"),
             helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize("opset", range(11, 22))
def test_opsets_11_to_21_load_fold_shape_chains_and_run(opset: int) -> None:
    graph = dlbricks.load_model(_shape_chain_model(opset), batch_size=2)
    assert [la.op_type for la in graph.layers] == ["Conv", "Relu", "Reshape", "MatMul", "Softmax"]
    reshape = next(la for la in graph.layers if la.op_type == "Reshape")
    assert graph.constant_array(reshape.inputs[1]).tolist() == [2, -1]
    dec = dlbricks.decompose(graph)
    assert all(b.check_runnable() is None for b in dec.bricks.values())


def test_if_and_loop_are_bricks_that_run() -> None:
    dec = dlbricks.decompose(_models.control_flow_model())
    ops = {b.op_type for b in dec.bricks.values()}
    assert {"If", "Loop"} <= ops
    assert all(b.check_runnable() is None for b in dec.bricks.values())


def _bad_model(node: onnx.NodeProto, domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    relu = helper.make_node("Relu", ["x"], ["t"], name="relu")
    graph = helper.make_graph([relu, node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 17), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


@pytest.mark.parametrize("model, error, words", [
    (_bad_model(helper.make_node("Frobnicate", ["t"], ["y"], name="frob")), dlbricks.ModelLoadError,
     ["node 'frob'", "Frobnicate"]),
    (_bad_model(helper.make_node("Frob", ["t"], ["y"], name="frob", domain="my.ops"), ("my.ops",)),
     dlbricks.errors.ShapeInferenceError, ["node 'frob'", "my.ops:Frob", "re-export"]),
])
def test_unsupported_ops_are_named_in_one_line(model: onnx.ModelProto, error: type, words: list[str],
                                               tmp_path) -> None:
    with pytest.raises(error) as info:
        dlbricks.load_model(model)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    result = CliRunner().invoke(main, ["decompose", str(path)])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "frob" in lines[0], result.output
