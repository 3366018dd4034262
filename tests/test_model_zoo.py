"""Tests of the built-in model zoo (dlbricks.model_zoo): registry, builders, counts, export, CLI."""

from __future__ import annotations

import dataclasses
import doctest
import functools
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from dlbricks import DlbricksError, InvalidArgumentError, ModelLoadError, model_zoo
from dlbricks.cli._zoo import zoo
from dlbricks.model_zoo import _builder, _params, build, count_params, get_model, list_models, registry
from dlbricks.model_zoo.registry import export
from dlbricks.model_zoo.spec import TASKS, ZooModel

# A few small models of every task: every op family of the zoo, fast enough for the default lane.
FAST_MODELS = [
    "squeezenet1_1",
    "mobilenet_v3_small",
    "shufflenet_v2_x0_5",
    "resnet18_v2",
    "ssdlite320_mobilenet_v3_large",
    "yolov3_tiny",
    "lraspp_mobilenet_v3_large",
    "gpt2",
    "lstm_lm_medium",
    "wav2letter_mfcc",
    "ncf_ml20m",
    "dlrm_criteo_kaggle",
]
ALL_MODELS = [m.name for m in list_models()]
_NP_DTYPES = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64}
_SLOW = pytest.mark.skipif(os.environ.get("DLBRICKS_SLOW") != "1", reason="slow lane only (DLBRICKS_SLOW=1)")


@functools.lru_cache(maxsize=4)
def _built(name: str, batch_size: int = 1, seed: int = 0) -> onnx.ModelProto:
    return build(name, batch_size=batch_size, seed=seed)


def _random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    ranges = json.loads({p.key: p.value for p in model.metadata_props}.get(_builder.VALUE_RANGES_KEY, "{}"))
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        dtype = _NP_DTYPES[inp.type.tensor_type.elem_type]
        if dtype == np.int64:
            low, high = ranges[inp.name]
            feeds[inp.name] = rng.integers(low, high, size=shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds


def _static_shape(value_info: onnx.ValueInfoProto) -> list[int]:
    dims = value_info.type.tensor_type.shape.dim
    assert all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), value_info.name
    return [d.dim_value for d in dims]


def _verify(name: str, batch_size: int = 1) -> None:
    """Everything a zoo model promises: valid ONNX, concrete shapes, runs finite, published params."""
    zm = get_model(name)
    model = _built(name, batch_size)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert {i.name: tuple(_static_shape(i)) for i in model.graph.input} == zm.shapes(batch_size)
    for vi in [*model.graph.output, *model.graph.value_info]:
        _static_shape(vi)
    int_inputs = {n for n, _, d in zm.input_shapes if d == "int64"}
    assert set(zm.ranges()) == int_inputs
    params = count_params(model)
    assert abs(params - zm.expected_params) <= 0.01 * zm.expected_params, (params, zm.expected_params)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, _random_feeds(model))
    for out, info in zip(outputs, model.graph.output):
        assert list(out.shape) == _static_shape(info)
        assert out.shape[0] == batch_size
        assert np.isfinite(out).all(), f"{name}: output {info.name} is not finite"


# ----------------------------------------------------------------------------------- registry
def test_registry_has_50_models_over_5_tasks():
    models = list_models()
    assert len(models) >= 50
    assert len({m.task for m in models}) >= 5
    assert len({m.name for m in models}) == len(models)
    assert all(m.task in TASKS and m.family and m.params_source and m.description for m in models)


def test_registry_covers_the_required_architectures():
    names = set(ALL_MODELS)
    for depth in (18, 34, 50, 101, 152):
        assert {f"resnet{depth}_v1", f"resnet{depth}_v2"} <= names
    for depth in (11, 13, 16, 19):
        assert {f"vgg{depth}", f"vgg{depth}_bn"} <= names
    assert {"alexnet", "squeezenet1_0", "squeezenet1_1", "inception_v3", "efficientnet_b0", "ssd300_vgg16",
            "yolov3", "fcn_resnet50", "deeplabv3_resnet50", "unet", "bert_base", "bert_large", "gpt2",
            "lstm_lm_medium", "wav2letter_mfcc", "dlrm_criteo_kaggle"} <= names
    assert {f"densenet{d}" for d in (121, 161, 169, 201)} <= names
    assert len([n for n in names if n.startswith("mobilenet_v1_")]) >= 4
    assert len([n for n in names if n.startswith("mobilenet_v2_")]) >= 4


def test_list_models_by_task():
    for task in TASKS:
        models = list_models(task)
        assert models and all(m.task == task for m in models)
    assert sum(len(list_models(t)) for t in TASKS) == len(list_models())


def test_zoo_model_is_a_frozen_slotted_record():
    zm = get_model("bert_base")
    assert isinstance(zm, ZooModel)
    with pytest.raises(dataclasses.FrozenInstanceError):
        zm.name = "other"  # type: ignore[misc]
    assert not hasattr(zm, "__dict__")
    assert zm.shapes(4) == {"input_ids": (4, 128), "token_type_ids": (4, 128), "attention_mask": (4, 128)}
    assert zm.ranges()["input_ids"] == (0, 30522)
    hash(zm)


@pytest.mark.parametrize("bad", ["resnet", "", "RESNET50_V1"])
def test_unknown_model_raises_a_one_line_error(bad):
    with pytest.raises(InvalidArgumentError, match="dlbricks zoo list") as info:
        build(bad)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, DlbricksError)


def test_unknown_task_raises():
    with pytest.raises(InvalidArgumentError, match="image_classification"):
        list_models("vision")


@pytest.mark.parametrize("batch_size", [0, -1, True, 1.0, "2"])
def test_bad_batch_size_raises(batch_size):
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        build("squeezenet1_1", batch_size=batch_size)


def test_bad_seed_raises():
    with pytest.raises(InvalidArgumentError, match="seed"):
        build("squeezenet1_1", seed=-1)


# ----------------------------------------------------------------------------------- models
@pytest.mark.parametrize("name", FAST_MODELS)
def test_fast_models_are_valid_and_runnable(name):
    _verify(name)


def test_batch_size_reaches_every_input_and_output():
    _verify("shufflenet_v2_x0_5", batch_size=3)
    _verify("lstm_lm_medium", batch_size=2)


@pytest.mark.slow
@pytest.mark.untimed
@_SLOW
@pytest.mark.parametrize("name", ALL_MODELS)
def test_all_models_are_valid_and_runnable(name):
    _verify(name)


def test_build_is_deterministic():
    a = build("mobilenet_v3_small", seed=0).SerializeToString()
    assert a == build("mobilenet_v3_small", seed=0).SerializeToString()
    assert a != build("mobilenet_v3_small", seed=1).SerializeToString()


def test_value_ranges_are_in_metadata():
    model = _built("gpt2")
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["dlbricks.value_ranges"]) == {"input_ids": [0, 50257]}
    assert meta["dlbricks.zoo_model"] == "gpt2"
    assert "dlbricks.value_ranges" not in {p.key for p in _built("squeezenet1_1").metadata_props}


def test_gpt2_reshapes_are_built_like_pytorch_exports():
    model = _built("gpt2")
    producer = {o: n for n in model.graph.node for o in n.output}
    dynamic = 0
    for node in model.graph.node:
        if node.op_type != "Reshape" or producer.get(node.input[1]) is None:
            continue
        concat = producer[node.input[1]]
        if concat.op_type != "Concat":
            continue
        unsqueezes = [producer[i] for i in concat.input if i in producer]
        assert [u.op_type for u in unsqueezes] == ["Unsqueeze", "Unsqueeze"]
        gathers = [producer[u.input[0]] for u in unsqueezes]
        assert [g.op_type for g in gathers] == ["Gather", "Gather"]
        assert {producer[g.input[0]].op_type for g in gathers} == {"Shape"}
        dynamic += 1
    assert dynamic == 12 * 4  # q, k, v splits and the merge, in each of the 12 layers


def test_transformers_use_standard_onnx_ops():
    ops = {n.op_type for n in _built("gpt2").graph.node}
    assert {"Gather", "LayerNormalization", "MatMul", "Softmax", "Where", "Tanh", "Gemm"} <= ops
    assert all(n.domain in ("", "ai.onnx") for n in _built("gpt2").graph.node)


def test_detection_heads_decode_in_graph():
    ops = {n.op_type for n in _built("yolov3_tiny").graph.node}
    assert {"Sigmoid", "Exp", "Transpose", "Reshape", "Concat", "Constant"} <= ops
    assert count_params(_built("yolov3_tiny")) == get_model("yolov3_tiny").expected_params  # anchors excluded


# ----------------------------------------------------------------------------------- count_params
def _tiny_bn_model() -> onnx.ModelProto:
    b = _builder.GraphBuilder("tiny", seed=0)
    x = b.input("x", (1, 3, 8, 8))
    y = b.relu(b.batch_norm(b.conv(x, 4, 3)))
    b.output(b.reshape(y, (1, -1)), "y")
    return b.build()


def test_count_params_skips_running_stats_and_shapes():
    # conv 4*3*3*3 + 4 bias, BN scale and bias 4 + 4; running mean/var and the int64 shape are skipped
    assert count_params(_tiny_bn_model()) == 108 + 4 + 8


def test_count_params_reads_a_path(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save_model(_tiny_bn_model(), path)
    assert count_params(path) == 120
    assert count_params(str(path)) == 120


def test_count_params_errors(tmp_path):
    with pytest.raises(InvalidArgumentError):
        count_params(42)  # type: ignore[arg-type]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ModelLoadError):
        count_params(bad)


def test_count_params_skips_scalars_and_constant_nodes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    scalar = helper.make_tensor("s", TensorProto.FLOAT, [], [2.0])
    const = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [2], [1, 2]))
    nodes = [const, helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "c"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[scalar]))
    assert count_params(model) == 0


# ----------------------------------------------------------------------------------- export
def test_export_writes_one_file_per_model(tmp_path):
    paths = export(["squeezenet1_1", "ncf_ml20m"], tmp_path / "out", batch_size=2)
    assert [p.name for p in paths] == ["squeezenet1_1.onnx", "ncf_ml20m.onnx"]
    model = onnx.load(paths[0])
    assert count_params(model) == get_model("squeezenet1_1").expected_params
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ncf_ml20m.onnx", "squeezenet1_1.onnx"]


def test_export_uses_external_data_above_the_threshold(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "EXTERNAL_DATA_THRESHOLD", 1000)
    (path,) = export("squeezenet1_1", tmp_path)
    assert (tmp_path / "squeezenet1_1.onnx.data").exists()
    assert path.stat().st_size < 100_000
    onnx.checker.check_model(str(path), full_check=True)


def test_export_validates_every_name_before_writing(tmp_path):
    with pytest.raises(InvalidArgumentError, match="nope"):
        export(["squeezenet1_1", "nope"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidArgumentError):
        export([], tmp_path)


# ----------------------------------------------------------------------------------- CLI
def test_cli_list_table():
    result = CliRunner().invoke(zoo, ["list"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["name", "task", "family", "inputs", "params"]
    assert len(lines) == len(ALL_MODELS) + 1
    assert any(line.startswith("resnet50_v1 ") and "25,557,032" in line for line in lines)


def test_cli_list_json_by_task():
    result = CliRunner().invoke(zoo, ["list", "--task", "language", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["name"] for r in rows} == {m.name for m in list_models("language")}
    bert = next(r for r in rows if r["name"] == "bert_base")
    assert bert["expected_params"] == 109_482_240
    assert bert["inputs"][0] == {"name": "input_ids", "shape": [1, 128], "dtype": "int64", "value_range": [0, 30522]}


def test_cli_list_unknown_task_exits_2():
    result = CliRunner().invoke(zoo, ["list", "--task", "vision"])
    assert result.exit_code == 2


def test_cli_export(tmp_path):
    result = CliRunner().invoke(zoo, ["export", "squeezenet1_1", "--out", str(tmp_path), "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path / "squeezenet1_1.onnx")
    assert (tmp_path / "squeezenet1_1.onnx").exists()


def test_cli_export_unknown_name_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(zoo, ["export", "resnet5", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: Unknown zoo model 'resnet5'. Did you mean 'resnet50_v2'? Run 'dlbricks zoo list' to see the "
        "valid names."]


def test_cli_export_bad_batch_size_exits_2(tmp_path):
    result = CliRunner().invoke(zoo, ["export", "squeezenet1_1", "--out", str(tmp_path), "--batch-size", "0"])
    assert result.exit_code == 2
    assert "batch_size" in result.output


@pytest.mark.parametrize("args", [[], ["list"], ["export"]])
def test_cli_commands_have_help(args):
    result = CliRunner().invoke(zoo, [*args, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


# ----------------------------------------------------------------------------------- docs
@pytest.mark.parametrize("module", [model_zoo, _builder, _params, registry])
def test_docstring_examples_run(module):
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
