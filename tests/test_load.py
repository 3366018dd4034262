"""Loading ONNX models: shapes resolved, external data, and one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.cli import main
from tests import _models


def _cli_error(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ")
    return lines[0]


def test_symbolic_batch_resolved_by_batch_size() -> None:
    graph = dlbricks.load_model(_models.resnet_like(), batch_size=3)
    assert graph.inputs[0].shape == (3, 3, 16, 16)
    assert all(spec.shape[0] == 3 for name, spec in graph.tensors.items() if len(spec.shape) == 4)


def test_input_shapes_override() -> None:
    graph = dlbricks.load_model(_models.transformer_layer(seq=8), input_shapes={"ids": (2, 8), "mask": (2, 8)})
    assert {s.name: s.shape for s in graph.inputs} == {"ids": (2, 8), "mask": (2, 8)}


def test_shape_chains_and_constants_fold() -> None:
    graph = dlbricks.load_model(_models.transformer_layer(), batch_size=1)
    assert not any(layer.op_type in ("Shape", "Concat", "Constant") for layer in graph.layers)
    assert any("Shape" in name for name in graph.folded)


def test_constant_node_becomes_a_constant() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    nodes = [helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([3, 4], np.int64))),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", 1, [3, 4])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = dlbricks.load_model(model)
    assert [la.op_type for la in graph.layers] == ["Reshape"]
    assert graph.is_constant("shape")


def test_data_dependent_shape_read_from_runtime() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", 7, None)]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = dlbricks.load_model(model)
    assert graph.spec("nz").shape[0] == 2 and graph.spec("y").shape[1] == 2


def test_external_data_model_loads(tmp_path: Path) -> None:
    model = _models.resnet_like()
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=0)
    assert (tmp_path / "m.data").exists()
    graph = dlbricks.load_model(path, batch_size=1)
    dec = dlbricks.decompose(graph, weights="real")
    conv = next(b for b in dec.instances or () if b.op_type == "Conv")
    assert conv.to_onnx(weights="real").graph.initializer[0].raw_data


def test_bad_batch_size_message() -> None:
    with pytest.raises(dlbricks.InvalidArgumentError, match="positive int. Got -1 instead"):
        dlbricks.load_model(_models.resnet_like(), batch_size=-1)


def test_missing_path(tmp_path: Path) -> None:
    line = _cli_error(["decompose", str(tmp_path / "nope.onnx")])
    assert "nope.onnx" in line and "no such file" in line


def test_not_onnx(tmp_path: Path) -> None:
    path = tmp_path / "notes.onnx"
    path.write_text("these are not the weights you are looking for\n")
    line = _cli_error(["decompose", str(path)])
    assert "notes.onnx" in line and "not a valid ONNX file" in line


def test_truncated(tmp_path: Path) -> None:
    data = _models.resnet_like().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    line = _cli_error(["decompose", str(path), "--batch-size", "1"])
    assert "cut.onnx" in line and ("truncated" in line or "not an ONNX model" in line)


def _external(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(_models.resnet_like(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    return path


def test_missing_external_data(tmp_path: Path) -> None:
    path = _external(tmp_path)
    (tmp_path / "m.data").unlink()
    line = _cli_error(["decompose", str(path), "--batch-size", "1"])
    assert "m.data" in line and "missing" in line


def test_external_data_outside_folder(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    model = _models.resnet_like()
    path = inner / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=0)
    (inner / "m.data").rename(tmp_path / "m.data")
    proto = onnx.load(path, load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../m.data"
    onnx.save(proto, path)
    line = _cli_error(["decompose", str(path), "--batch-size", "1"])
    assert "outside the model's folder" in line


def test_symbolic_dimension_without_hint(tmp_path: Path) -> None:
    path = tmp_path / "sym.onnx"
    onnx.save(_models.resnet_like(), path)
    line = _cli_error(["decompose", str(path)])
    assert "sym.onnx" in line and "symbolic dimension 'N'" in line and "--input-shape x=" in line


@pytest.mark.parametrize("value", ["x", "x=", "x=1,a", "x=0,3,16,16", "=1,2"])
def test_invalid_input_shape(tmp_path: Path, value: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_models.resnet_like(), path)
    line = _cli_error(["decompose", str(path), "--input-shape", value])
    assert "--input-shape" in line


def test_unrunnable_op_reported_rest_go_on(tmp_path: Path) -> None:
    path = tmp_path / "unr.onnx"
    onnx.save(_models.unrunnable_model(), path)
    result = CliRunner().invoke(main, ["decompose", str(path), "--json"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "unrunnable" in errors[0] and "Relu" in errors[0]
    import json

    report = json.loads(result.stdout)
    runnable = [b["runnable"] for b in report["bricks"]]
    assert runnable.count(False) == 1 and runnable.count(True) == 4
