"""Decomposition and dedup: far fewer unique bricks than layers; models share bricks; costs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import dlbricks
from dlbricks.cli import main
from tests import _models


def test_repeated_blocks_deduplicate() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=16), batch_size=1)
    assert dec.layers == 3 + 16 * 7 + 3
    assert len(dec.bricks) <= 10
    counts = dec.counts()
    assert max(counts.values()) >= 32  # the block's Conv appears twice per block
    assert sum(counts.values()) == dec.layers


def test_two_models_share_bricks() -> None:
    bs = dlbricks.BrickSet.from_models([_models.resnet_like(blocks=2, batch=1),
                                        _models.resnet_like(blocks=5, batch=1)])
    first, second = (set(d.bricks) for d in bs.models.values())
    assert first == second  # same layers, different depth
    summary = bs.summary()
    assert summary.shared_across_models == len(first)
    assert summary.cross_model_ratio == pytest.approx(2.0)
    assert summary.layers == sum(d.layers for d in bs.models.values())


def test_brick_dag_follows_the_model() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    import networkx as nx

    assert nx.is_directed_acyclic_graph(dec.dag)
    assert dec.dag.number_of_nodes() == dec.layers
    adds = [o.index for o in dec.occurrences if dec.bricks[o.signature].op_type == "Add"]
    assert all(dec.dag.in_degree(i) == 2 for i in adds)  # residual add: two producers


def test_flops_and_bytes() -> None:
    dec = dlbricks.decompose(_models.resnet_like(channels=16), batch_size=1)
    conv = next(b for b in dec.bricks.values() if b.op_type == "Conv" and b.inputs[0].shape[1] == 16)
    # 16x16 output, 16 output channels, 16*3*3 multiply-adds each
    assert conv.flops == 2 * 16 * 16 * 16 * 16 * 9
    assert conv.bytes_moved == 4 * (16 * 16 * 16 * 2 + 16 * 16 * 9)
    reshape_like = [b for b in dlbricks.decompose(_models.transformer_layer(), batch_size=1).bricks.values()
                    if b.op_type in ("Reshape", "Transpose")]
    assert all(b.flops == 0 for b in reshape_like)


def test_padding_flops_leave_out_taps_over_zero_padding() -> None:
    """FLOPs count every tap; the roofline leaves out taps that read padding (exact per axis)."""
    from onnx import helper

    from dlbricks.cost import padding_flops
    from dlbricks.types import TensorSpec

    dec = dlbricks.decompose(_models.resnet_like(channels=16), batch_size=1)
    conv = next(b for b in dec.bricks.values() if b.op_type == "Conv" and b.inputs[0].shape[1] == 16)
    per_tap = 2 * 16 * 16  # Cout * Cin, multiply-add
    # 16x16, 3x3, padding 1: per axis 16 * 3 taps, 2 of them (the first and last output's outer tap) on padding
    assert conv.padding_flops == per_tap * (48 * 48 - 46 * 46)
    x, w = TensorSpec("x", (1, 8, 32, 32), "float32"), TensorSpec("w", (4, 8, 3, 3), "float32")
    atrous = helper.make_node("Conv", ["x", "w"], ["y"], pads=[36] * 4, dilations=[36, 36])
    assert padding_flops(atrous, x, w) == 2 * 4 * 8 * (96 * 96 - 32 * 32)  # only the centre tap reads x
    plain = helper.make_node("Conv", ["x", "w"], ["y"])  # no padding: nothing to leave out
    assert padding_flops(plain, x, w) == 0 and padding_flops(atrous, None, w) == 0
    from dlbricks.estimator.estimation import Peaks

    peaks = Peaks(flops_per_s=1e9, bytes_per_s=1e30)
    assert peaks.roofline_s(conv) == pytest.approx((conv.flops - conv.padding_flops) / 1e9)


def test_unknown_op_flops_are_unknown() -> None:
    dec = dlbricks.decompose(_models.control_flow_model())
    loop = next(b for b in dec.bricks.values() if b.op_type == "Loop")
    assert loop.flops is None


def test_brick_bytes_round_trip() -> None:
    dec = dlbricks.decompose(_models.transformer_layer(), batch_size=1)
    for brick in dec.bricks.values():
        back = dlbricks.Brick.from_bytes(brick.to_bytes())
        assert back.signature == brick.signature
        assert back.inputs == brick.inputs and back.outputs == brick.outputs
        assert [c.spec for c in back.constants] == [c.spec for c in brick.constants]
        onnx.checker.check_model(back.to_onnx(), full_check=True)


def test_cli_decompose_table_json_and_out(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(_models.resnet_like(blocks=3), path)
    runner = CliRunner()
    table = runner.invoke(main, ["decompose", str(path), "--batch-size", "1"])
    assert table.exit_code == 0, table.output
    assert "Conv" in table.output and "reuse ratio" in table.output
    out = tmp_path / "bricks"
    result = runner.invoke(main, ["decompose", str(path), "--batch-size", "1", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["summary"]["layers"] == 3 + 3 * 7 + 3
    assert report["summary"]["unique_bricks"] == len(report["bricks"]) == len(list(out.glob("*.onnx")))
    for file in out.glob("*.onnx"):
        onnx.checker.check_model(onnx.load(file), full_check=True)
    assert all(b["runnable"] for b in report["bricks"])


def test_every_command_has_help() -> None:
    runner = CliRunner()

    def walk(group, prefix):  # type: ignore[no-untyped-def]
        for name, cmd in group.commands.items():
            result = runner.invoke(main, [*prefix, name, "--help"])
            assert result.exit_code == 0, (prefix, name, result.output)
            assert "Usage" in result.output
            if hasattr(cmd, "commands"):
                walk(cmd, [*prefix, name])

    walk(main, [])


def test_a_gather_moves_the_rows_it_fetches_not_its_whole_table() -> None:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.zeros((100_000, 64), np.float32), "table")
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (brick,) = dlbricks.decompose(dlbricks.load_model(model)).bricks.values()
    out = 8 * 64 * 4
    assert brick.bytes_moved == 8 * 8 + out + out  # indices, the rows read, the rows written
    assert brick.constant_bytes == out  # the roofline's memory side: the rows read


def test_roofline_reads_weights_from_memory_and_activations_from_cache() -> None:
    """The memory side counts the constants a run reads (activations stay in the cache inside a
    model); a gather from a constant table reads only its rows (above)."""
    from dlbricks.estimator.estimation import Peaks

    dec = dlbricks.decompose(_models.resnet_like(channels=16), batch_size=1)
    relu = next(b for b in dec.bricks.values() if b.op_type == "Relu")
    conv = next(b for b in dec.bricks.values() if b.op_type == "Conv")
    memory_bound = Peaks(flops_per_s=1e30, bytes_per_s=1e9)
    assert relu.constant_bytes == 0 and memory_bound.roofline_s(relu) == pytest.approx(0, abs=1e-20)
    assert conv.constant_bytes == sum(c.spec.nbytes for c in conv.constants) > 0
    assert memory_bound.roofline_s(conv) == pytest.approx(conv.constant_bytes / 1e9)


def test_value_statistics_survive_storage_and_drive_the_inputs() -> None:
    """A brick input's in-model statistics travel with the brick (bytes, ONNX metadata), stay out of
    its signature, and the generators draw inputs distributed like them."""
    import dataclasses

    import numpy as np

    from dlbricks.generators.inputs import value_statistics
    from dlbricks.inputs import statistics_array
    from dlbricks.types import ValueStatistics

    rng = np.random.default_rng(0)
    shift = np.array([-3.0, 0.0, 2.0, 5.0]).reshape(1, 4, 1, 1)
    values = (rng.standard_normal((2, 4, 32, 32)) * np.array([1.0, 2.0, 0.5, 3.0]).reshape(1, 4, 1, 1) + shift)
    stats = ValueStatistics.of(values.astype(np.float32))
    assert stats is not None and ValueStatistics.of(np.zeros((3, 4), np.float32)) is None
    np.testing.assert_allclose(stats.mean, [-3, 0, 2, 5], atol=0.3)
    np.testing.assert_allclose(stats.std, [1, 2, 0.5, 3], rtol=0.15)
    assert abs(stats.correlation) < 0.1  # i.i.d. values
    assert ValueStatistics.from_dict(stats.to_dict()) == stats

    drawn = statistics_array((1, 4, 64, 64), np.float32, dataclasses.replace(stats, correlation=0.8), rng)
    again = ValueStatistics.of(drawn)
    assert drawn.dtype == np.float32 and again is not None
    np.testing.assert_allclose(again.mean, stats.mean, atol=0.3)
    np.testing.assert_allclose(again.std, stats.std, rtol=0.15)
    assert again.correlation == pytest.approx(0.8, abs=0.05)
    with pytest.raises(dlbricks.InvalidArgumentError, match="4 channels"):
        statistics_array((1, 3, 8, 8), np.float32, stats, rng)

    dec = dlbricks.decompose(_models.resnet_like(channels=4), batch_size=1)
    brick = next(b for b in dec.bricks.values() if b.op_type == "Relu" and b.inputs[0].shape[1] == 4)
    marked = dataclasses.replace(brick, inputs=(brick.inputs[0].with_statistics(stats),))
    assert marked.signature == brick.signature and marked.inputs == brick.inputs
    assert value_statistics(marked.to_onnx()) == {"in0": stats}
    assert value_statistics(brick.to_onnx()) == {}
    assert dlbricks.Brick.from_bytes(marked.to_bytes()).value_statistics == {"in0": stats}
    assert "statistics" not in json.dumps(marked.describe())


def test_a_brick_rides_with_the_brick_before_it() -> None:
    """Each brick's context is the brick that writes its first input at its first occurrence; its
    ONNX model carries that brick's model, and the key stays the brick's signature."""
    from dlbricks.bricks import PREVIOUS_KEY, split_previous

    dec = dlbricks.decompose(_models.resnet_like(blocks=1), batch_size=1)
    by_op = {dec.bricks[o.signature].op_type: o for o in reversed(dec.occurrences)}
    first = dec.occurrences[0]
    assert dec.previous(first.signature) is None  # fed by the model's input
    bn = by_op["BatchNormalization"]
    assert dec.previous(bn.signature).op_type == "Conv"
    add = by_op["Add"]
    writer = next(o for o in dec.occurrences if add_input(dec, add) in o.outputs)
    assert dec.previous(add.signature).signature == writer.signature
    item = dec.in_context(bn.signature)
    assert item.key == bn.signature
    own, carried = split_previous(item.to_onnx())
    assert carried is not None and [n.op_type for n in carried.graph.node] == ["Conv"]
    assert own.graph == dec.bricks[bn.signature].to_onnx().graph  # what sessions are built from: no passenger
    assert PREVIOUS_KEY in {p.key for p in item.to_onnx().metadata_props}
    assert split_previous(dec.in_context(first.signature).to_onnx())[1] is None
    assert split_previous(dec.bricks[bn.signature].to_onnx())[1] is None


def test_footprint_counts_every_weight_and_the_activations_alive_at_once() -> None:
    """A run of a model touches every layer's weights and, at its peak, the activations alive
    together; a brick in context carries that as its reuse distance."""
    from onnx import TensorProto, helper, numpy_helper

    from dlbricks.bricks import reuse_bytes

    f32 = TensorProto.FLOAT
    w1 = numpy_helper.from_array(np.ones((8, 4, 1, 1), np.float32), "w1")
    w2 = numpy_helper.from_array(np.ones((8, 8, 1, 1), np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"]), helper.make_node("Add", ["b", "c"], ["y"])]
    graph = helper.make_graph(nodes, "skip", [helper.make_tensor_value_info("x", f32, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", f32, [1, 8, 8, 8])], [w1, w2])
    dec = dlbricks.decompose(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    weights = (8 * 4 + 8 * 8) * 4
    feature_map = 8 * 8 * 8 * 4  # a, b, c and y; x is half of one
    # alive at the Add: b (read again by it), c and y; x and a died at the Relu
    assert dec.footprint_bytes() == weights + 3 * feature_map
    item = dec.in_context(dec.occurrences[-1].signature)
    assert item.reuse_bytes == dec.footprint_bytes()
    assert reuse_bytes(item.to_onnx()) == dec.footprint_bytes()
    assert reuse_bytes(item.brick.to_onnx()) is None


def add_input(dec: dlbricks.Decomposition, occurrence: object) -> str:
    first = next(o for o in dec.occurrences if o.signature == occurrence.signature)
    return first.inputs[0]


def test_kept_values_travel_with_the_brick_and_into_its_signature() -> None:
    """Statistics that kept a tensor's values (inputs of value-dependent ops) give those values back
    to the generators, survive the brick's bytes, and show in its description (the decomposition
    hashes them into its signature: tests/test_mxnet_backend.py)."""
    import dataclasses

    import numpy as np

    from dlbricks.inputs import statistics_array
    from dlbricks.types import ValueStatistics

    values = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    stats = ValueStatistics.of(values)
    kept = stats.with_values(values)
    assert ValueStatistics.from_dict(kept.to_dict()) == kept and kept != stats
    np.testing.assert_array_equal(kept.recorded((1, 4, 8, 8)), values)
    assert kept.recorded((1, 4, 8, 9)) is None and stats.recorded((1, 4, 8, 8)) is None
    np.testing.assert_array_equal(statistics_array((1, 4, 8, 8), np.float32, kept, np.random.default_rng(0)), values)

    dec = dlbricks.decompose(_models.resnet_like(channels=4), batch_size=1)
    brick = next(b for b in dec.bricks.values() if b.op_type == "Relu" and b.inputs[0].shape[1] == 4)
    marked = dataclasses.replace(brick, inputs=(brick.inputs[0].with_statistics(kept),))
    assert marked.describe()["inputs"][0]["values_sha256"]
    again = dlbricks.Brick.from_bytes(marked.to_bytes())
    np.testing.assert_array_equal(again.inputs[0].statistics.recorded((1, 4, 8, 8)), values)


def _nms_model(scale: float) -> onnx.ModelProto:
    """Boxes and scores from sigmoids of the inputs (``scale`` changes their values), then a
    non-maximum suppression."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Mul", ["x", "k"], ["xs"]),
        helper.make_node("Sigmoid", ["xs"], ["boxes"]),
        helper.make_node("Sigmoid", ["s"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "thr"], ["selected"]),
    ]
    inits = [helper.make_tensor("k", TensorProto.FLOAT, [], [scale]),
             helper.make_tensor("max", TensorProto.INT64, [1], [50]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
             helper.make_tensor("thr", TensorProto.FLOAT, [1], [0.6])]
    graph = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 4]),
                                              helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 256])],
                              [helper.make_tensor_value_info("selected", TensorProto.INT64, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_suppressions_boxes_and_scores_are_its_models_own() -> None:
    """An ONNX NonMaxSuppression's brick keeps the boxes and scores of the model's run on the seeded
    inputs a whole model gets, the onnxruntime backend feeds them, and other values make another
    brick."""
    import numpy as np

    from dlbricks.generators import OrtConfig
    from dlbricks.generators.ort import OrtBackend
    from dlbricks.inputs import random_inputs

    signatures = []
    for scale in (1.0, 3.0):
        graph = dlbricks.load_model(_nms_model(scale))
        x = random_inputs(graph.inputs, seed=0)
        expected = {"in0": 1 / (1 + np.exp(-scale * x["x"].astype(np.float64))), "in1": 1 / (1 + np.exp(-x["s"]))}
        dec = dlbricks.decompose(graph)
        nms = next(b for b in dec.bricks.values() if b.op_type == "NonMaxSuppression")
        for spec in nms.inputs[:2]:
            np.testing.assert_allclose(spec.statistics.recorded(spec.shape), expected[spec.name], rtol=1e-5, atol=1e-6)
        prepared = OrtBackend().prepare(nms.to_onnx(), OrtConfig(cache="warm"))
        for name in ("in0", "in1"):
            np.testing.assert_array_equal(prepared._inputs[name], nms.inputs[int(name[-1])].statistics.recorded(
                nms.inputs[int(name[-1])].shape))
        prepared.close()
        assert all(s.statistics is None for b in dec.bricks.values() if b is not nms for s in b.inputs)
        signatures.append(nms.signature)
    assert signatures[0] != signatures[1]


def test_a_softmax_behind_an_attention_mask_is_fed_the_masks_values() -> None:
    """A Softmax's brick keeps its input's values from the model's run, the mask's -3.4e38 among them,
    and the onnxruntime backend feeds them: its time depends on them on some processors."""
    from dlbricks.generators import OrtConfig
    from dlbricks.generators.ort import OrtBackend
    from dlbricks.inputs import random_inputs

    graph = dlbricks.load_model(_models.masked_softmax())
    x = random_inputs(graph.inputs, seed=0)
    expected = x["scores"] + (1.0 - x["mask"].astype(np.float32)) * np.finfo(np.float32).min
    assert (expected < -1e38).any()  # the seeded mask masks some positions
    dec = dlbricks.decompose(graph)
    softmax = next(b for b in dec.bricks.values() if b.op_type == "Softmax")
    (spec,) = softmax.inputs
    np.testing.assert_array_equal(spec.statistics.recorded(spec.shape), expected)
    prepared = OrtBackend().prepare(softmax.to_onnx(), OrtConfig(cache="warm"))
    np.testing.assert_array_equal(prepared._inputs["in0"], expected)
    prepared.close()
    # the brick before it (the Add), run before each timed call, leaves those values alone
    primed = OrtBackend().prepare(dec.in_context(softmax.signature).to_onnx(), OrtConfig(cache="cold-weights"))
    assert primed.previous is not None
    primed.prime()
    primed.run()
    masked = np.exp(expected - expected.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(primed.binding.copy_outputs_to_cpu()[0], masked / masked.sum(axis=-1, keepdims=True),
                               rtol=1e-5, atol=1e-7)
    primed.close()


def test_an_unmasked_softmax_keeps_no_values_and_its_bricks_stay_shared() -> None:
    """Without a mask a Softmax runs as fast on normal values: its input keeps no values, and two
    layers of the same shape share one brick."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=-1), helper.make_node("Softmax", ["p"], ["q"], axis=-1)]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    dec = dlbricks.decompose(dlbricks.load_model(model))
    (brick,) = dec.bricks.values()
    assert brick.inputs[0].statistics is None


def _two_masked_softmaxes(second_shape: tuple[int, ...]) -> onnx.ModelProto:
    """:func:`masked_softmax` and a second masked Softmax behind it, of ``second_shape``."""
    from onnx import TensorProto, helper

    model = _models.masked_softmax()
    model.graph.node.extend([helper.make_node("Reshape", ["probs", "shape2"], ["scores2"]),
                             helper.make_node("Add", ["scores2", "least"], ["again"]),
                             helper.make_node("Softmax", ["again"], ["probs2"], axis=-1)])
    model.graph.initializer.append(helper.make_tensor("shape2", TensorProto.INT64, [len(second_shape)], second_shape))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("probs2", TensorProto.FLOAT, list(second_shape)))
    return model


def test_masked_softmaxes_of_one_shape_share_the_first_ones_values_and_brick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A masked Softmax of the shape of an earlier one takes its values: the two layers share one brick,
    and the model runs only as far as the first (onnxruntime's ``only_execute_path_to_fetches``)."""
    import dlbricks._runtime_shapes as runtime

    asked: list[tuple[list[str], bool]] = []
    run = runtime.values_from_runtime

    def spy(proto, concrete, ranges, names, label, *, path_only=False):
        asked.append((list(names), path_only))
        return run(proto, concrete, ranges, names, label, path_only=path_only)

    monkeypatch.setattr(runtime, "values_from_runtime", spy)
    dec = dlbricks.decompose(dlbricks.load_model(_two_masked_softmaxes((1, 2, 8, 8))))
    (softmax,) = [b for b in dec.bricks.values() if b.op_type == "Softmax"]
    assert dec.counts()[softmax.signature] == 2
    assert (softmax.inputs[0].statistics.recorded(softmax.inputs[0].shape) < -1e38).any()
    assert asked == [(["masked"], True)]


def test_kept_values_stop_at_the_models_total(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``KEEP_VALUES_TOTAL_BYTES`` a further masked Softmax (of another shape) keeps no values."""
    import dlbricks.onnx_frontend as frontend

    monkeypatch.setattr(frontend, "KEEP_VALUES_TOTAL_BYTES", 2 * 8 * 8 * 4)
    dec = dlbricks.decompose(dlbricks.load_model(_two_masked_softmaxes((1, 4, 4, 8))))
    kept = [b.inputs[0].statistics is not None for b in dec.bricks.values() if b.op_type == "Softmax"]
    assert sorted(kept) == [False, True]


def test_a_mask_of_minus_ten_thousand_is_kept() -> None:
    """A BERT built by hand masks with -10000, whose exponential underflows as float32's least does:
    its Softmax's brick keeps the masked values too."""
    dec = dlbricks.decompose(dlbricks.load_model(_models.masked_softmax(least=-10000.0)))
    (softmax,) = [b for b in dec.bricks.values() if b.op_type == "Softmax"]
    (spec,) = softmax.inputs
    assert (spec.statistics.recorded(spec.shape) < -9000).any()


def test_a_model_without_a_mask_value_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose constants hold no value below ``MASKED_BELOW`` (here -50 added before a Softmax)
    is not run for its Softmax inputs, and its Softmax brick keeps no values."""
    import dlbricks._runtime_shapes as runtime

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was run for its Softmax inputs")

    monkeypatch.setattr(runtime, "values_from_runtime", refuse)
    dec = dlbricks.decompose(dlbricks.load_model(_models.masked_softmax(least=-50.0)))
    (softmax,) = [b for b in dec.bricks.values() if b.op_type == "Softmax"]
    assert softmax.inputs[0].statistics is None
