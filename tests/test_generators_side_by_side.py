"""Copies of a brick side by side in one run (the CUDA launch queue's ``repeat_s``), built and timed
with real onnxruntime sessions on the CPU."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dlbricks
from dlbricks import InvalidArgumentError
from dlbricks.generators import OrtConfig
from dlbricks.generators.items import side_by_side
from dlbricks.generators.ort import repeat_time
from tests import _models


def _brick(op_type: str) -> onnx.ModelProto:
    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    return next(b for b in dec.bricks.values() if b.op_type == op_type).to_onnx()


def _inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    session = ort.InferenceSession(model.SerializeToString())
    return {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
            for i in session.get_inputs()}


@pytest.mark.parametrize("op_type", ["Conv", "Relu", "Flatten"])
def test_copies_read_the_same_inputs_and_write_outputs_of_their_own(op_type: str) -> None:
    brick = _brick(op_type)
    copies = side_by_side(brick, 3)
    onnx.checker.check_model(copies)
    assert len(copies.graph.output) == 3 * len(brick.graph.output)
    assert len(copies.graph.node) == 3 * len(brick.graph.node)
    assert len(copies.graph.initializer) == len(brick.graph.initializer)  # weights shared
    assert not copies.metadata_props  # no brick: one session, no previous layer
    inputs = _inputs(brick)
    (alone, *_) = ort.InferenceSession(brick.SerializeToString()).run(None, inputs)
    outputs = ort.InferenceSession(copies.SerializeToString()).run(None, inputs)
    assert all(np.array_equal(alone, o) for o in outputs)


def test_copies_refuse_what_they_cannot_build() -> None:
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    through = onnx.helper.make_model(onnx.helper.make_graph([], "through", [x], [x]))
    with pytest.raises(InvalidArgumentError, match="passes 'x' through"):
        side_by_side(through, 2)
    with pytest.raises(InvalidArgumentError, match="'copies' must be an int >= 1"):
        side_by_side(_brick("Relu"), 0)


def test_a_further_copy_costs_about_a_run_of_the_brick_on_the_cpu() -> None:
    """On the CPU nothing overlaps: a further copy of a convolution costs about its own run less the
    per-call floor; a view (Flatten, aliased when its output is allocated by the run) next to nothing."""
    import time

    conv = _brick("Conv")
    inputs = _inputs(conv)
    options = ort.SessionOptions()  # as OrtConfig() runs it: one thread, optimizations off
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(conv.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, inputs)
    runs = []
    for _ in range(200):
        t0 = time.perf_counter()
        session.run(None, inputs)
        runs.append(time.perf_counter() - t0)
    alone = float(np.median(runs))
    further = repeat_time(conv, OrtConfig(), inputs)
    # the difference of two timings on a machine that swings: within an order of magnitude of the run
    assert 0.1 * alone < further < 3 * alone
    flatten = _brick("Flatten")
    assert repeat_time(flatten, OrtConfig(), _inputs(flatten)) < 0.3 * further
