"""Chained rounds on real onnxruntime sessions: the bricks of a model prepared as a chain, and
``evaluate --rounds chained`` through the library and the command line."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import dlbricks
from dlbricks.cli import main
from dlbricks.generators import OrtConfig
from dlbricks.generators.ort import OrtBackend
from tests._models import masked_softmax, resnet_like


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


def test_a_chain_draws_only_the_inputs_it_does_not_feed() -> None:
    """An input that the chain feeds is prepared as zeros, never drawn (its reader reads the chain's
    memory); one whose feed the chain cannot take (the first brick has no brick before it) keeps its
    own buffer with drawn values."""
    dec = dlbricks.decompose(dlbricks.load_model(resnet_like(blocks=2, channels=8), batch_size=1, name="r2"))
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    feeds = [list(row) for row in dec.feeds(keys)]
    feeds[0] = [(0, 0)]  # itself: no feed a chain can take
    chain = OrtBackend().prepare_chain([dec.in_context(k).to_onnx() for k in keys], OrtConfig(), feeds)
    own = chain[0]._inputs[chain[0].session.get_inputs()[0].name]
    assert np.count_nonzero(own) > 0.9 * own.size
    fed = [j for j, row in enumerate(feeds) if j and all(f is not None for f in row)]
    assert len(fed) >= 4
    for j in fed:
        assert not any(a.any() for a in chain[j]._inputs.values())
    for prepared in chain:
        prepared.run()
    assert all(np.isfinite(p.outputs()[0]).all() for p in chain)
    for prepared in chain:
        prepared.close()


def test_a_chain_of_fused_bricks_at_all_runs_them_in_the_models_layout() -> None:
    """At level "all" each convolution brick of a chain runs in its model's blocked layout, and a blocked input whose feed the chain cannot take is drawn in that layout: in
    shufflenet_v2_x0_5 the branches' convolutions read the channel shuffle's output, which is not
    blocked. Every brick is prepared and runs."""
    from dlbricks.model_zoo import build

    config = OrtConfig(graph_optimization_level="all")
    dec = dlbricks.decompose(dlbricks.load_model(build("shufflenet_v2_x0_5")), "fused", opt_level="all")
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    feeds = dec.feeds(keys)
    chain = OrtBackend().prepare_chain([dec.in_context(k).to_onnx() for k in keys], config, feeds)
    assert all(p is not None for p in chain)
    blocked = [p for k, p in zip(keys, chain, strict=True)
               if {i.name for i in p.session.get_inputs()} - {x.name for x in dec.bricks[k].inputs}]
    assert len(blocked) >= len(keys) // 3
    drawn = [p for p in blocked if any(a.any() for a in p._inputs.values())]
    assert drawn  # a blocked input no brick of the chain writes in that layout
    for prepared in chain:
        prepared.run()
    assert all(np.isfinite(p.outputs()[0]).all() for p in chain)
    for prepared in chain:
        prepared.close()


def test_a_chain_feeds_a_masked_softmax_the_values_of_the_models_run() -> None:
    """A Softmax behind an attention mask keeps the scores of the model's run, -10000 among them,
    in a chain too: the brick before it writes values drawn from seeds, which would take the kernel
    off the slow path the mask's underflow takes in the model."""
    dec = dlbricks.decompose(dlbricks.load_model(masked_softmax(least=-10000.0), name="attn"))
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


def test_feeds_name_the_brick_that_writes_each_input_in_the_model() -> None:
    """A round's bricks read what the model's data flow says: a residual Add reads the block's
    input and its last BatchNorm, not merely the brick before it; the model's input comes from
    nowhere in the chain."""
    dec = dlbricks.decompose(dlbricks.load_model(resnet_like(blocks=2, channels=8), batch_size=1, name="r2"))
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    feeds = dec.feeds(keys)
    first = {}
    for occ in dec.occurrences:
        first.setdefault(occ.signature, occ)
    writers = {name: occ for occ in dec.occurrences for name in occ.outputs}
    assert feeds[0] == (None,)  # the first conv reads the model's input
    checked = 0
    for j, key in enumerate(keys):
        for name, feed in zip(first[key].inputs, feeds[j], strict=True):
            writer = writers.get(name)
            if feed is None:
                assert writer is None or keys.index(writer.signature) >= j
                continue
            assert keys[feed[0]] == writer.signature and writer.outputs[feed[1]] == name
            checked += 1
    adds = [j for j, k in enumerate(keys) if dec.bricks[k].op_types == ("Add",)]
    assert adds and all(len({f for f in feeds[j] if f is not None}) == 2 for j in adds)  # two writers
    assert checked >= len(keys) - 1


def test_a_chain_keeps_each_input_as_its_writer_left_it_until_its_reader_runs() -> None:
    """Every output of a chain lives in one block of memory, placed by its lifetime: run in the
    model's order, each brick finds every input it reads from the chain exactly as the brick that
    writes it left it (no brick in between wrote over it: a float brick never reads another's
    bits), and outputs that are dead by then share the block's memory."""
    dec = dlbricks.decompose(dlbricks.load_model(resnet_like(blocks=2, channels=8), batch_size=1, name="r2"))
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    feeds = dec.feeds(keys)
    chain = OrtBackend().prepare_chain([dec.in_context(k).to_onnx() for k in keys], OrtConfig(), feeds)
    assert all(p is not None for p in chain)
    written: dict[tuple[int, int], np.ndarray] = {}
    read = 0
    for j, prepared in enumerate(chain):
        for feed in feeds[j]:
            if feed is None:
                continue
            source = chain[feed[0]].binding.get_outputs()[feed[1]]
            assert any(isinstance(v, ort.OrtValue) and v.data_ptr() == source.data_ptr() for v in prepared._values)
            np.testing.assert_array_equal(source.numpy(), written[feed])
            read += 1
        prepared.run()
        for o, out in enumerate(prepared.outputs()):
            written[(j, o)] = out.copy()
    assert read >= len(keys) - 1
    places = [(v.data_ptr(), v.data_ptr() + w.nbytes) for p in chain
              for v, w in zip(p.binding.get_outputs(), p.outputs(), strict=True)]
    total = sum(end - start for start, end in places)
    assert max(e for _, e in places) - min(s for s, _ in places) < total  # dead outputs' memory reused
    for prepared in chain:
        prepared.close()


def test_each_chained_brick_runs_a_small_matrix_product_before_its_call_without_touching_its_data() -> None:
    """Every brick of a chain has a ``ready``: one small MatMul session shared by the chain (a real
    onnxruntime run), which leaves each brick's inputs and outputs as they were."""
    from dlbricks.generators.items import VECTOR_WARMUP_SIZE, vector_warmup_model

    warmup = vector_warmup_model()
    onnx.checker.check_model(warmup, full_check=True)
    x = np.arange(VECTOR_WARMUP_SIZE ** 2, dtype=np.float32).reshape(VECTOR_WARMUP_SIZE, VECTOR_WARMUP_SIZE)
    session = ort.InferenceSession(warmup.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ np.full_like(x, 1 / VECTOR_WARMUP_SIZE), rtol=1e-6)
    with pytest.raises(dlbricks.InvalidArgumentError, match="'size'"):
        vector_warmup_model(0)
    _, _, chain = _chain()
    assert all(callable(p.ready) for p in chain)
    assert len({p.ready for p in chain}) == 1  # one session for the chain
    for prepared in chain:
        prepared.run()
        before = [o.copy() for o in prepared.outputs()]
        prepared.ready()
        for got, was in zip(prepared.outputs(), before, strict=True):
            np.testing.assert_array_equal(got, was)
    for prepared in chain:
        prepared.close()


def test_chain_offsets_never_overlap_buffers_alive_at_once() -> None:
    """The placement of a chain's outputs on stand-in bricks (their output types only): buffers alive
    at the same time never overlap, a dead one's place is taken by the next that fits, and an
    output written in place takes its input's place."""
    from types import SimpleNamespace

    from dlbricks.generators.ort import ALIGN, _chain_offsets

    def brick(*sizes: int) -> SimpleNamespace:
        return SimpleNamespace(_output_types=[((n,), np.dtype(np.float32)) for n in sizes])

    chain = [brick(1000), brick(1000), brick(500, 500), brick(1000), brick(1000)]
    reads = [[], [(0, 0)], [(0, 0)], [(1, 0), (2, 0), (2, 1)], [(3, 0)]]
    offsets, size = _chain_offsets(chain, reads, {(4, 0): (3, 0)})
    life = {(0, 0): (0, 2), (1, 0): (1, 3), (2, 0): (2, 3), (2, 1): (2, 3), (3, 0): (3, 4)}
    nbytes = {(j, o): chain[j]._output_types[o][0][0] * 4 for j, o in life}
    for a in life:
        assert offsets[a] % ALIGN == 0
        for b in life:
            alive_together = a < b and life[a][1] >= life[b][0]
            if alive_together:
                assert offsets[a] + nbytes[a] <= offsets[b] or offsets[b] + nbytes[b] <= offsets[a]
    assert offsets[(4, 0)] == offsets[(3, 0)]  # in place
    assert offsets[(3, 0)] == 0  # the first output's place, dead by then
    assert size < sum(nbytes.values())


def test_layer_bricks_rounds_are_chained_by_default_where_the_backend_chains_bricks_on_a_cpu() -> None:
    """onnxruntime on a CPU chains a model's bricks: the rounds of layer and fused bricks are chained
    unless asked otherwise; both granularities at once and a GPU's are bursts."""
    from dlbricks.estimator.api import CHAINED_ROUNDS, PAIRED_ROUNDS, default_rounds

    assert default_rounds(OrtConfig()) is CHAINED_ROUNDS
    assert default_rounds(OrtConfig(graph_optimization_level="all"), "fused") is CHAINED_ROUNDS
    assert default_rounds(OrtConfig(graph_optimization_level="all"), "both") is PAIRED_ROUNDS
    assert default_rounds(OrtConfig(device="cuda")) is PAIRED_ROUNDS
    assert default_rounds(OrtConfig(device="cuda", graph_optimization_level="all"), "fused") is PAIRED_ROUNDS


def test_a_model_far_larger_than_the_cache_runs_whole_without_an_untimed_run_before_each_timed_one() -> None:
    """A model touching more than twice the last-level cache in one run leaves none of what its next
    run reads first: its rounds on a CPU leave out the untimed whole run (half of their whole-model
    time); a model within the cache, or one on a GPU, keeps it."""
    from dlbricks.benchmarks_db.rounds import WARM_WHOLE_MAX_LLC, whole_warmed
    from dlbricks.estimator.api import CHAINED_ROUNDS

    dec = dlbricks.decompose(dlbricks.load_model(resnet_like(), name="resnet_like", batch_size=1))
    footprint = dec.footprint_bytes()
    big = int(footprint / WARM_WHOLE_MAX_LLC) - 1  # the model is just over twice this cache
    assert whole_warmed(CHAINED_ROUNDS, dec, "cpu", cache_bytes=big).warm_whole is False
    assert whole_warmed(CHAINED_ROUNDS, dec, "cpu", cache_bytes=big + 2) is CHAINED_ROUNDS
    assert whole_warmed(CHAINED_ROUNDS, dec, "cuda", cache_bytes=big) is CHAINED_ROUNDS
    assert whole_warmed(CHAINED_ROUNDS, dec, "cpu", cache_bytes=big).warm_chain  # the bricks' side stands


def test_a_chain_whose_weights_far_exceed_the_cache_runs_without_an_untimed_pass_before_each_timed_one() -> None:
    """Where the model and the chain itself each read more than twice the last-level cache of
    weights, the chain's untimed pass leaves none of what its timed pass reads first: it is left
    out; a chain within the cache (all of it, or the few bricks of a chain of anchors), or on a GPU,
    keeps it."""
    from dlbricks.benchmarks_db.rounds import WARM_WHOLE_MAX_LLC, chain_warmed
    from dlbricks.estimator.api import CHAINED_ROUNDS

    dec = dlbricks.decompose(dlbricks.load_model(resnet_like(), name="resnet_like", batch_size=1))
    keys = list(dec.bricks)
    weights = sum(dec.bricks[k].constant_bytes for k in keys)
    big = int(min(weights, dec.footprint_bytes()) / WARM_WHOLE_MAX_LLC) - 1
    assert chain_warmed(CHAINED_ROUNDS, dec, keys, "cpu", cache_bytes=big).warm_chain is False
    assert chain_warmed(CHAINED_ROUNDS, dec, keys, "cpu", cache_bytes=big).warm_whole  # the whole side stands
    assert chain_warmed(CHAINED_ROUNDS, dec, keys, "cpu", cache_bytes=int(weights / WARM_WHOLE_MAX_LLC) + 1) \
        is CHAINED_ROUNDS
    lightest = min(keys, key=lambda k: dec.bricks[k].constant_bytes)
    assert chain_warmed(CHAINED_ROUNDS, dec, [lightest], "cpu", cache_bytes=big) is CHAINED_ROUNDS
    assert chain_warmed(CHAINED_ROUNDS, dec, keys, "cuda", cache_bytes=big) is CHAINED_ROUNDS


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
    assert re.search(r"whole models [\d.]+ s \(setup [\d.]+ s, timed runs [\d.]+ s\): wall speedup [\d.]+x, each "
                     r"side in the same [\d.]+ s of chained rounds", result.output), result.output
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


@pytest.mark.untimed
def test_the_suite_reads_each_model_back_from_where_it_saved_it_for_its_turn(tmp_path) -> None:
    """``evaluate`` saves each zoo model's whole ONNX when it decomposes the suite and reads it back
    at the model's turn instead of building, checking and loading it again: the same key and the
    same bytes; where the folder cannot be written the model is built again."""
    from dlbricks.estimator import evaluation
    from dlbricks.generators import OrtConfig as Config
    from dlbricks.benchmarks_db import Store

    store = Store(tmp_path / "s.db")
    graphs, brickset, _ = evaluation._decompose_suite(["squeezenet1_1"], store, "layer", Config(), 1, tmp_path)
    saved = graphs["squeezenet1_1"]
    built = dlbricks.load_model(dlbricks.model_zoo.build("squeezenet1_1"), name="squeezenet1_1")
    assert isinstance(saved, evaluation._SavedModel)
    assert saved.key == built.key == brickset.models["squeezenet1_1"].model_key
    assert saved.to_onnx().SerializeToString() == built.to_onnx().SerializeToString()
    unwritable = evaluation._Built(["squeezenet1_1"], 1, tmp_path / "missing")
    unwritable.save(built)
    again = unwritable["squeezenet1_1"]
    assert isinstance(again, dlbricks.ModelGraph) and again.key == built.key
    with pytest.raises(KeyError):
        graphs["resnet18_v1"]
