"""A DequantizeLinear read by several layers runs once per reader in onnxruntime, at every
optimization level: the layers and bricks count it as often as the runtime runs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks


def _shared_dq(dq_is_output: bool) -> onnx.ModelProto:
    """x -> Q -> DQ -> (Relu, Sigmoid, Add's second input) -> Add -> y; the DQ's output optionally
    also a model output."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
             numpy_helper.from_array(np.array(128, np.uint8), "zero")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"], name="dequant"),
             helper.make_node("Relu", ["dq"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["dq"], ["s"], name="sigmoid"),
             helper.make_node("Add", ["r", "s"], ["a"], name="add"),
             helper.make_node("Add", ["a", "dq"], ["y"], name="add2")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])]
    if dq_is_output:
        outputs.append(helper.make_tensor_value_info("dq", TensorProto.FLOAT, [1, 8, 16, 16]))
    graph = helper.make_graph(nodes, "shared_dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 8, 16, 16])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _runtime_dequantizes(model: onnx.ModelProto, tmp_path: Path) -> int:
    """DequantizeLinear nodes in the graph onnxruntime runs with optimizations off."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "runs.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sum(n.op_type == "DequantizeLinear" for n in onnx.load(tmp_path / "runs.onnx").graph.node)


@pytest.mark.parametrize("dq_is_output", [False, True])
def test_a_shared_dequantize_counts_once_per_reader_as_the_runtime_runs_it(tmp_path: Path,
                                                                            dq_is_output: bool) -> None:
    model = _shared_dq(dq_is_output)
    graph = dlbricks.load_model(model)
    dequantizes = [layer for layer in graph.layers if layer.op_type == "DequantizeLinear"]
    assert len(dequantizes) == _runtime_dequantizes(model, tmp_path) == (4 if dq_is_output else 3)
    assert len({layer.name for layer in graph.layers}) == len(graph.layers)
    dec = dlbricks.decompose(graph)
    dq = [sig for sig, b in dec.bricks.items() if b.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and dec.counts()[dq[0]] == len(dequantizes)  # one brick, run once per reader
    readers = {i for layer in graph.layers if layer.op_type != "DequantizeLinear" for i in layer.inputs}
    assert {o for layer in dequantizes for o in layer.outputs} - {"dq"} <= readers


def test_a_dequantize_with_one_reader_is_left_alone() -> None:
    model = _shared_dq(False)
    del model.graph.node[3:]  # x -> Q -> DQ -> Relu
    model.graph.node[2].output[0] = "y"
    assert [layer.op_type for layer in dlbricks.load_model(model).layers] == [
        "QuantizeLinear", "DequantizeLinear", "Relu"]


def test_the_profiler_gives_each_copy_its_own_kernel() -> None:
    from dlbricks.estimator._profile import in_model_times

    graph = dlbricks.load_model(_shared_dq(False))
    times = in_model_times(graph, runs=5, warmup=1)
    assert times.kernels == len(graph.layers)  # the runtime made no further copies
    assert all(times.layers.get(layer.name, 0.0) > 0 for layer in graph.layers)  # each layer its own kernel
