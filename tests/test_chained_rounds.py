"""Chained rounds on real onnxruntime sessions: the bricks of a model prepared as a chain, and
``evaluate --rounds chained`` through the library and the command line."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import dlbricks
from dlbricks.cli import main
from dlbricks.generators import OrtConfig
from dlbricks.generators.ort import OrtBackend
from tests._models import resnet_like


def _chain() -> tuple[dlbricks.Decomposition, list[str], list]:
    dec = dlbricks.decompose(dlbricks.load_model(resnet_like(blocks=2, channels=8), batch_size=1, name="r2"))
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    models = [dec.in_context(k).to_onnx() for k in keys]
    return dec, keys, OrtBackend().prepare_chain(models, OrtConfig())


def _alone(brick: dlbricks.Brick, first: np.ndarray) -> np.ndarray:
    """The brick run in a session of its own on ``first``, its one input."""
    model = brick.to_onnx()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: first})[0]


def test_a_chain_feeds_each_brick_what_the_brick_before_it_wrote() -> None:
    """Run in the model's order, each chained brick reads the output the brick before it just wrote
    and computes what the brick computes alone on it; a Relu writes over its input, as inside the
    model, and every other brick writes a buffer apart from the one it reads."""
    dec, keys, chain = _chain()
    assert all(p is not None and p.copies == 1 for p in chain)  # no copies, one session a brick
    assert all(p.empty is not None for p in chain)  # each with a floor model of its own
    index = {k: i for i, k in enumerate(keys)}
    fed = in_place = 0
    for i, key in enumerate(keys):
        before = dec.previous(key)
        if before is None or before.signature not in index or index[before.signature] > i:
            continue
        writer, reader = chain[index[before.signature]], chain[i]
        if len(reader.session.get_inputs()) > 1:  # its other inputs read what other bricks wrote last
            continue
        writer.run()
        written = writer.outputs()[0].copy()
        if written.shape != reader._inputs[reader.session.get_inputs()[0].name].shape:
            continue
        reader.run()
        got = reader.outputs()[0]
        np.testing.assert_allclose(got, _alone(dec.bricks[key], written), rtol=1e-5, atol=1e-5)
        fed += 1
        if dec.bricks[key].op_types == ("Relu",):
            np.testing.assert_array_equal(writer.outputs()[0], got)  # the writer's buffer, overwritten
            in_place += 1
        else:
            np.testing.assert_array_equal(writer.outputs()[0], written)  # left as the writer wrote it
    assert fed >= 4 and in_place >= 1
    for p in chain:
        p.close()


def _masked_attention() -> onnx.ModelProto:
    """Scores scaled, plus -10000 where the mask is 0 (as a BERT built by hand masks), then a Softmax."""
    nodes = [helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
             helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Sub", ["one", "maskf"], ["inverted"]),
             helper.make_node("Mul", ["inverted", "least"], ["bias"]),
             helper.make_node("Add", ["scaled", "bias"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["probs"], axis=-1)]
    inits = [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.125]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("least", TensorProto.FLOAT, [], [-10000.0])]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 8, 8]),
                                               helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 1, 1, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 2, 8, 8])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_chain_feeds_a_masked_softmax_the_values_of_the_models_run() -> None:
    """A Softmax behind an attention mask keeps the scores of the model's run, -10000 among them,
    in a chain too: the brick before it writes values drawn from seeds, which would take the kernel
    off the slow path the mask's underflow takes in the model."""
    dec = dlbricks.decompose(dlbricks.load_model(_masked_attention(), name="attn"))
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    (softmax,) = [k for k in keys if dec.bricks[k].op_types == ("Softmax",)]
    assert dec.previous(softmax).signature in keys  # the Add before it is in the chain
    chain = OrtBackend().prepare_chain([dec.in_context(k).to_onnx() for k in keys], OrtConfig())
    for prepared in chain:
        prepared.run()
    brick = dec.bricks[softmax]
    kept = brick.inputs[0].statistics.recorded(brick.inputs[0].shape)
    assert kept is not None and kept.min() < -1e3
    expected = np.exp(kept - kept.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(chain[keys.index(softmax)].outputs()[0], expected, rtol=1e-5, atol=1e-7)
    for prepared in chain:
        prepared.close()


def _casts() -> onnx.ModelProto:
    """Float activations cast to int64 and back, then element-wise ops that write buffers of their own."""
    names = ["x", "r", "c1", "f1", "s", "n", "a", "e", "t"]
    ops = [("Relu", {}), ("Cast", {"to": TensorProto.INT64}), ("Cast", {"to": TensorProto.FLOAT}), ("Sigmoid", {}),
           ("Neg", {}), ("Abs", {}), ("Exp", {}), ("Floor", {})]
    nodes = [helper.make_node(op, [a], [b], **attrs)
             for (op, attrs), a, b in zip(ops, names[:-1], names[1:], strict=True)]
    graph = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_chain_shares_buffers_among_outputs_of_one_element_type() -> None:
    """A reader of a chain's shared buffer reads what was written there last: an int64 tensor read as
    float32 is denormals and NaNs (a MatMul ran 26x slower on them), so the shared buffers are pooled
    by element type, and a float brick never writes where an integer one did."""
    dec = dlbricks.decompose(dlbricks.load_model(_casts(), name="casts"))
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    chain = OrtBackend().prepare_chain([dec.in_context(k).to_onnx() for k in keys], OrtConfig())
    spans = {True: [], False: []}  # float32 or not: the memory each first output is written to
    for prepared in chain:
        prepared.run()
        out = prepared.binding.get_outputs()[0]
        nbytes = prepared.outputs()[0].nbytes
        spans[out.data_type() == "tensor(float)"].append((out.data_ptr(), out.data_ptr() + nbytes))

    def overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
        return a[0] < b[1] and b[0] < a[1]

    assert spans[True] and spans[False]
    assert not any(overlap(f, o) for f in spans[True] for o in spans[False])
    assert any(overlap(a, b) for i, a in enumerate(spans[True]) for b in spans[True][i + 1:])  # the shared buffers
    for prepared in chain:
        prepared.close()


def test_layer_bricks_rounds_are_chained_by_default_where_the_backend_chains_bricks_on_a_cpu() -> None:
    """onnxruntime on a CPU chains a model's bricks: the rounds of layer bricks are chained unless
    asked otherwise; fused bricks and a GPU's are bursts."""
    from dlbricks.estimator.api import CHAINED_ROUNDS, PAIRED_ROUNDS, default_rounds

    assert default_rounds(OrtConfig()) is CHAINED_ROUNDS
    assert default_rounds(OrtConfig(graph_optimization_level="all"), "fused") is PAIRED_ROUNDS
    assert default_rounds(OrtConfig(device="cuda")) is PAIRED_ROUNDS


def test_a_chain_is_for_the_cpu() -> None:
    with pytest.raises(dlbricks.InvalidArgumentError, match="CPU only"):
        OrtBackend().prepare_chain([], OrtConfig(device="cuda"))


def test_evaluate_with_chained_rounds_through_the_command_line(with_peaks) -> None:
    """``dlbricks evaluate --rounds chained`` on a small model: its table, with the rounds' line
    saying how many rounds of single calls it took."""
    db = with_peaks("c.db")
    result = CliRunner().invoke(main, ["evaluate", "--suite", "squeezenet1_1", "--db", str(db), "--budget", "quick",
                                       "--rounds", "chained"])
    assert result.exit_code == 0, result.output
    assert "squeezenet1_1" in result.output and "rounds of the whole model" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("squeezenet1_1 "))
    error = float(row.split()[5])
    assert abs(error) < 25.0  # a quick budget on a shared machine: the level, not the accuracy


@pytest.mark.slow  # a minute or two of a main job: the slow lane
def test_evaluate_fused_bricks_at_all_in_chained_rounds(with_peaks) -> None:
    """``dlbricks evaluate --opt-level all --granularity fused --rounds chained``: the rounds measure
    the fused bricks, and each stores what its own run does beyond its model (its layout reorders at
    level "all"), as the bricks' own pass does, so that its estimate can read it."""
    import sqlite3

    db = with_peaks("f.db")
    result = CliRunner().invoke(main, ["evaluate", "--suite", "squeezenet1_1", "--db", str(db), "--budget", "quick",
                                       "--opt-level", "all", "--granularity", "fused", "--rounds", "chained"])
    assert result.exit_code == 0, result.output
    assert "chained rounds" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("squeezenet1_1 "))
    assert abs(float(row.split()[5])) < 25.0  # a quick budget on a shared machine: the level, not the accuracy
    with sqlite3.connect(db) as conn:
        bricks = conn.execute("SELECT COUNT(*) FROM measurements WHERE status = 'ok'").fetchone()[0]
        overheads = conn.execute("SELECT COUNT(*) FROM brick_overheads").fetchone()[0]
    assert bricks > 0 and overheads == bricks


@pytest.mark.slow  # a minute or two of a main job: the slow lane
def test_chained_rounds_that_fail_leave_the_bricks_measured_apart(with_peaks, monkeypatch) -> None:
    """Where a model's chained rounds fail (a worker killed, a timeout), its bricks, which nothing else
    measured, are measured apart, and the model is still estimated."""
    from dlbricks.estimator import evaluation
    from dlbricks.estimator.api import CHAINED_ROUNDS
    from dlbricks.generators import Budget

    monkeypatch.setattr(evaluation, "measure_in_rounds", lambda *args, **kwargs: None)
    lines: list[str] = []
    ev = evaluation.evaluate(["squeezenet1_1"], with_peaks("failed.db"), budget=Budget.quick(),
                             lower_bound_sweep=False, say=lines.append, rounds=CHAINED_ROUNDS)
    assert any("its rounds failed" in line for line in lines)
    assert ev.rows[0].model == "squeezenet1_1" and ev.rows[0].estimated_s > 0 and ev.rows[0].rounds == 0


def test_evaluate_refuses_an_unknown_round_design(tmp_path) -> None:
    result = CliRunner().invoke(main, ["evaluate", "--suite", "squeezenet1_1", "--db", str(tmp_path / "x.db"),
                                       "--rounds", "sometimes"])
    assert result.exit_code == 2 and "sometimes" in result.output and not (tmp_path / "x.db").exists()


def test_bench_then_validate_with_chained_rounds(with_peaks, tmp_path) -> None:
    """``bench`` then ``validate --rounds chained`` on a user's own ONNX file: the model and its stored
    bricks timed in chained rounds, the row printed with its interval."""
    import onnx

    path = tmp_path / "r1.onnx"
    onnx.save(resnet_like(blocks=1, channels=8, batch=1), path)
    db = with_peaks("v.db")
    runner = CliRunner()
    bench = runner.invoke(main, ["bench", str(path), "--db", str(db), "--budget", "quick"])
    assert bench.exit_code == 0, bench.output
    result = runner.invoke(main, ["validate", str(path), "--db", str(db), "--budget", "quick", "--rounds", "chained"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("r1 "))
    assert "-" in row.split()[4]  # the interval
