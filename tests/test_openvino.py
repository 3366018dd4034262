"""The OpenVINO backend (its CPU plugin), added as one module and one registry line: configuration,
a zoo model and a brick run and measured for real, the command line choosing it from the registry
(bench, estimate, validate --per-brick, calibrate, decompose --check), and its errors in one line.

The tests marked ``openvino`` run in the CI openvino lane (``.ci/openvino_lane.sh``, the openvino
extra) and are skipped, with the reason, where openvino is not installed; the missing-openvino test
runs everywhere.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from dlbricks.generators import (
    Budget,
    available_backends,
    benchmark,
    collect_system_info,
    get_backend,
)

import dlbricks
from dlbricks import InvalidArgumentError
from dlbricks.errors import BackendUnavailableError, UnrunnableBrickError
from tests import _models

openvino = pytest.mark.openvino


@pytest.fixture(scope="module")
def ov() -> ModuleType:
    """openvino; skips the tests that need it where the openvino extra is not installed (the core lane)."""
    return pytest.importorskip("openvino", reason="needs the openvino extra (pip install 'dlbricks[openvino]')")


@pytest.fixture(scope="module")
def squeezenet() -> dlbricks.ModelGraph:
    from dlbricks.model_zoo import build

    return dlbricks.load_model(build("squeezenet1_1"), name="squeezenet1_1")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small CNN file (batch 1)."""
    path = tmp_path_factory.mktemp("ov") / "tiny.onnx"
    onnx.save(_models.resnet_like(blocks=1, channels=8, batch=1), path)
    return path


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


# ----------------------------------------------------------------------------------- config
@openvino
def test_config_defaults_and_properties(ov: ModuleType) -> None:
    from dlbricks.generators._openvino import OpenvinoConfig

    backend = get_backend("openvino")
    assert "openvino" in available_backends()
    cfg = backend.default_config()
    assert isinstance(cfg, OpenvinoConfig) and (cfg.backend, cfg.device, cfg.threads) == ("openvino", "cpu", 1)
    props = cfg.properties()
    assert props["INFERENCE_NUM_THREADS"] == 1 and props["NUM_STREAMS"] == 1
    assert props["PERFORMANCE_HINT"] == "LATENCY" and props["INFERENCE_PRECISION_HINT"] == "f32"
    assert backend.config_from_dict(cfg.to_dict()) == cfg
    assert backend.config_from_options(threads=2).threads == 2
    assert len({cfg.config_id, OpenvinoConfig(threads=2).config_id, OpenvinoConfig(cache="warm").config_id}) == 3
    described = backend.describe(cfg)
    assert described["version"].startswith(importlib.metadata.version("openvino"))


@openvino
@pytest.mark.parametrize("fields, message", [
    ({"threads": -1}, "'threads' must be an int >= 0. Got -1"),
    ({"streams": 0}, "'streams' must be an int >= 1"),
    ({"inference_precision": "f64"}, "'inference_precision' must be one of 'f32', 'bf16', 'f16'. Got 'f64'"),
    ({"device": "cuda"}, "'device' must be one of 'cpu'"),
    ({"cache": "lukewarm"}, "'cache' must be one of"),
    ({"cpu_pinning": "yes"}, "'cpu_pinning' must be a bool"),
])
def test_bad_config_values_are_one_line(ov: ModuleType, fields: dict[str, object], message: str) -> None:
    from dlbricks.generators._openvino import OpenvinoConfig

    with pytest.raises(InvalidArgumentError) as info:
        OpenvinoConfig(**fields)  # type: ignore[arg-type]
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="unknown fields \\['colour'\\]"):
        OpenvinoConfig.from_dict({"colour": "red"})


@openvino
@pytest.mark.parametrize("extra, message", [
    (["--opt-level", "all"], "the openvino backend has no optimization levels"),
    (["--device", "cuda"], "the openvino backend runs on the CPU plugin only"),
    (["--sweep", "inference_precision=f64"], "'inference_precision' must be one of"),
    (["--threads", "100000"], "logical cores"),
])
def test_bad_options_are_one_line_errors(ov: ModuleType, tiny: Path, tmp_path: Path, extra: list[str],
                                         message: str) -> None:
    code, out = _run("bench", str(tiny), "--backend", "openvino", "--db", str(tmp_path / "x.db"), *extra)
    assert code == 2 and message in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "x.db").exists()


def test_a_missing_openvino_is_one_line_that_says_what_to_install(tiny: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Where openvino is not installed (the core lane, or simulated here), choosing it is one line
    naming the extra; the registry still lists it."""
    version = importlib.metadata.version

    def without_openvino(name: str) -> str:
        if name == "openvino":
            raise importlib.metadata.PackageNotFoundError(name)
        return version(name)

    monkeypatch.setattr(importlib.metadata, "version", without_openvino)
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    assert "openvino" in available_backends()
    with pytest.raises(BackendUnavailableError, match=r"pip install 'dlbricks\[openvino\]'"):
        get_backend("openvino").default_config()
    for command in (["bench", str(tiny)], ["estimate", str(tiny)], ["validate", str(tiny)], ["calibrate"]):
        code, out = _run(*command, "--backend", "openvino", "--db", str(tmp_path / "m.db"))
        assert code == 2 and out.count("\n") == 1, (command, out)
        assert "openvino is not installed; install the extra: pip install 'dlbricks[openvino]'" in out
    assert not (tmp_path / "m.db").exists()


# ----------------------------------------------------------------------------------- running
@openvino
def test_a_zoo_model_and_a_brick_run_and_match_onnxruntime(ov: ModuleType, squeezenet: dlbricks.ModelGraph) -> None:
    """The whole model computes what onnxruntime computes from the same inputs (f32 inference); a brick
    in its model's context runs as compiled copies with the brick before it as its prime."""
    import onnxruntime as ort

    backend = get_backend("openvino")
    cfg = backend.default_config()
    whole = backend.prepare(squeezenet.to_onnx(), cfg)
    try:
        assert whole.copies == 1 and not hasattr(whole, "prime") and not hasattr(whole, "empty")
        whole.run()
        (out,) = whole.outputs()
        session = ort.InferenceSession(squeezenet.to_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {i.name: np.asarray(t.data) for i, t in zip(session.get_inputs(),
                                                               whole.requests[0].input_tensors, strict=True)}
        (expected,) = session.run(None, feeds)
        np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-4)
    finally:
        whole.close()
    dec = dlbricks.decompose(squeezenet)
    conv = next(o.signature for o in dec.occurrences[1:] if dec.bricks[o.signature].op_types == ("Conv",))
    brick = backend.prepare(dec.in_context(conv).to_onnx(), cfg)
    try:
        assert brick.copies >= 1 and callable(brick.prime) and callable(brick.empty)
        brick.prime()
        brick.run()
        brick.empty()
    finally:
        brick.close()
    with pytest.raises(Exception, match="closed"):
        brick.run()


@openvino
def test_an_unrunnable_model_is_one_line_naming_it(ov: ModuleType) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.nowhere")], "nowhere", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.nowhere", 1)],
                              ir_version=8)
    with pytest.raises(UnrunnableBrickError, match="openvino cannot read model 'nowhere'") as info:
        get_backend("openvino").prepare(model, get_backend("openvino").default_config())
    assert "\n" not in str(info.value) and "Exception from src" not in str(info.value)


@openvino
def test_measurements_in_a_worker_are_stored(ov: ModuleType, squeezenet: dlbricks.ModelGraph) -> None:
    dec = dlbricks.decompose(squeezenet)
    items = [squeezenet, *(dec.in_context(o.signature) for o in dec.occurrences[:3])]
    cfg = get_backend("openvino").default_config()
    measured = list(benchmark(items, backend="openvino", config=cfg, budget=Budget.quick()))
    assert all(m.ok and m.median_s and m.median_s > 0 for m in measured), [m.error for m in measured]
    assert all(m.backend == "openvino" and m.config.config_id == cfg.config_id for m in measured)
    assert measured[0].median_s > max(m.median_s for m in measured[1:])  # the whole model outlasts a brick
    assert all(m.floor_s is not None and 0 < m.floor_s < measured[0].median_s for m in measured)
    system = collect_system_info()
    with Store(":memory:") as store:
        store.models.add(dec, squeezenet.source)
        for m in measured[1:]:
            store.measurements.record(m, system)
        stored = store.measurements.bricks(system=system, config_id=cfg.config_id)
        assert {r.key for r in stored} == {m.key for m in measured[1:]}
        (row,) = [b for b in store.systems.backends() if b.config_id == cfg.config_id]
        assert row.version and row.version.startswith(importlib.metadata.version("openvino"))


@openvino
def test_a_chain_reads_each_input_where_its_model_writes_it(ov: ModuleType, tiny: Path) -> None:
    """Chained rounds are OpenVINO's default on the CPU (``prepare_chain``): each brick prepared warm
    with the floor's model and a vector warm-up beside it, and each floating-point input that an
    earlier brick writes in the model bound to that brick's output memory, so that one pass of the
    chain in the model's order writes each input before its reader reads it."""
    from dlbricks.benchmarks_db.rounds import round_order
    from dlbricks.estimator.api import default_rounds

    cfg = get_backend("openvino").default_config()
    assert default_rounds(cfg).chained and default_rounds(cfg, "fused").chained
    dec = dlbricks.decompose(dlbricks.load_model(onnx.load(tiny), name="tiny"))
    keys = round_order(dec)
    feeds = dec.feeds(keys)
    chain = get_backend("openvino").prepare_chain([dec.in_context(k).to_onnx() for k in keys], cfg, feeds)
    try:
        assert len(chain) == len(keys) and all(p is not None and p.copies == 1 for p in chain)
        shared = 0
        for j, row in enumerate(feeds):
            reader = chain[j].requests[0]
            for k, feed in enumerate(row):
                if feed is None:
                    continue
                writer = chain[feed[0]].requests[0]
                shared += np.shares_memory(np.asarray(reader.get_input_tensor(k).data),
                                           np.asarray(writer.get_output_tensor(feed[1]).data))
        assert shared >= len(keys) - 1, (shared, feeds)  # every brick but the first reads one before it
        for _ in range(2):
            for prepared in chain:
                prepared.ready()
                prepared.run()
                prepared.empty()
        assert all(np.isfinite(o).all() for p in chain for o in p.outputs())
    finally:
        for prepared in chain:
            if prepared is not None:
                prepared.close()


@openvino
def test_a_pooling_bricks_context_runs_the_layout_its_model_runs(ov: ModuleType,
                                                                  squeezenet: dlbricks.ModelGraph) -> None:
    """A MaxPool brick after a Relu brick: compiled after that Relu alone, it gets a planar tensor; in
    its model a convolution (with the Relu inside its kernel) hands it over in the plugin's own
    layout. The context its overhead is taken against starts at a convolution (``_anchored``), so
    its pooling kernel runs the layout the model's pooling kernels run."""
    from dlbricks.generators._openvino import _anchored, _compile, _joined
    from dlbricks.model_zoo import build

    from dlbricks.ov_fusion import runtime_kernels

    props = get_backend("openvino").default_config().properties()

    def pooling_layouts(model: onnx.ModelProto) -> set[str]:
        compiled = _compile(ov, model.SerializeToString(), props, model.graph.name)
        return {k.layout for k in runtime_kernels(compiled) if k.layer_type == "Pooling"}

    dec = dlbricks.decompose(squeezenet)
    sig = next(s for s, b in dec.bricks.items() if b.op_type == "MaxPool"
               and (p := dec.in_context(s).previous) is not None and p.op_types == ("Relu",))
    brick, previous = dec.bricks[sig], dec.in_context(sig).previous
    in_model = pooling_layouts(build("squeezenet1_1"))
    pair = _joined(previous.to_onnx(), brick.to_onnx())
    assert pair is not None
    assert pooling_layouts(_anchored(pair)) <= in_model, (pooling_layouts(_anchored(pair)), in_model)
    assert pooling_layouts(pair) == {"abcd"}  # the planar kernel, which the model does not run
    assert "abcd" not in in_model


def _silu_model() -> onnx.ModelProto:
    """A convolution and a SiLU after it (x * Sigmoid(x)), as EfficientNet's."""
    b = _models.Builder(4)
    x = b.op1("Conv", ["x", b.weight((16, 8, 3, 3))], pads=[1, 1, 1, 1])
    out = b.op1("Mul", [x, b.op1("Sigmoid", [x])])
    return b.model([onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, 16, 16])],
                   [(out, onnx.TensorProto.FLOAT)], "silu")


@openvino
@pytest.mark.parametrize(("model", "brick_op", "previous_op", "kernels", "fused"), [
    # the frontend's LSTMSequence, named by no layer; the Reshape of its output names the LSTM and the
    # Squeeze before, which the LSTMSequence runs
    (_models.lstm_model(), "LSTM", "Squeeze", {"RNNSeq"}, True),
    (_models.transformer_layer(), "LayerNormalization", "Add", {"MVN"}, False),  # an MVN, named by no layer
    (_models.transformer_layer(), "Transpose", "Reshape", {"Transpose"}, False),  # a Transpose layer
    (_models.resnet_like(blocks=1, channels=8), "Relu", "BatchNormalization", set(), True),  # fused before
    (_silu_model(), "Sigmoid", "Conv", set(), True),  # fused into the convolution's kernel
], ids=["lstm", "layer-norm", "transpose", "fused-relu", "fused-sigmoid"])
def test_a_bricks_kernels_in_context_are_those_that_run_its_layers(ov: ModuleType, model: onnx.ModelProto,
                                                                  brick_op: str, previous_op: str,
                                                                  kernels: set[str], fused: bool) -> None:
    """In a pair of a brick and the brick before it compiled as one model, the brick's kernels (among
    them those of ``kernels``' types) are
    those that run its layers and no layer before: also a kernel that the ONNX frontend made (and so
    names no layer) whose output goes to the brick's, and a Transpose layer's kernel; none where the
    plugin fused the brick into the kernel before it (a kernel of both, which counts as the layer
    before's)."""
    from dlbricks.generators._openvino import (
        BRICK,
        FUSED,
        _compile,
        _joined,
        pair_sides,
    )

    from dlbricks.ov_fusion import runtime_kernels

    fixed = model.graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_value")
    dec = dlbricks.decompose(dlbricks.load_model(model, batch_size=None if fixed else 1, name=model.graph.name))
    sig = next(s for s, b in dec.bricks.items() if b.op_types == (brick_op,)
               and (p := dec.in_context(s).previous) is not None and p.op_types == (previous_op,))
    pair = _joined(dec.in_context(sig).previous.to_onnx(), dec.bricks[sig].to_onnx())
    assert pair is not None
    ran = runtime_kernels(_compile(ov, pair.SerializeToString(),
                                   get_backend("openvino").default_config().properties(), "pair"))
    sides = pair_sides(ran, pair)
    mine = {k.layer_type for k in ran if sides.get(k.name) == BRICK}
    assert kernels <= mine and (kernels or not mine), (mine, [(k.name, k.layer_type, k.originals) for k in ran])
    assert (FUSED in sides.values()) == fused, sides


# ----------------------------------------------------------------------------------- the command line
@openvino
def test_bench_estimate_and_validate_through_the_command_line(ov: ModuleType, tiny: Path, tmp_path: Path) -> None:
    """bench --backend openvino fills the database under OpenVINO's configuration; estimate and
    validate --per-brick read it (per-layer in-model times from OpenVINO's profiling counters)."""
    from dlbricks.generators._openvino import OpenvinoConfig

    db = str(tmp_path / "ov.db")
    code, out = _run("bench", str(tiny), "--backend", "openvino", "--db", db, "--budget", "quick")
    assert code == 0 and "Measured 8 item(s) (0 failed)" in out, out
    code, out = _run("estimate", str(tiny), "--backend", "openvino", "--db", db, "--json")
    assert code == 0, out
    est = json.loads(out)
    assert est["config_id"] == OpenvinoConfig().config_id and est["coverage"] == 1.0 and est["sequential_s"] > 0
    code, out = _run("estimate", str(tiny), "--db", db, "--on-missing", "error")  # onnxruntime: nothing measured
    assert code == 2 and "have no measurement" in out
    code, out = _run("validate", str(tiny), "--framework", "openvino", "--db", db, "--budget", "quick",
                     "--per-brick", "--top", "20")
    assert code == 0, out
    row = next(line for line in out.splitlines() if line.startswith("tiny "))
    measured, estimated = (float(v) for v in row.split()[1:3])
    assert measured > 0 and estimated > 0
    assert "in-model ms" in out and "(profiler)" in out
    table = out[out.index("in-model ms"):].splitlines()[2:]
    conv = [line.split() for line in table if line.split()[1:2] == ["Conv"]]
    assert conv and all(float(r[4]) > 0 for r in conv), out  # the fused Conv+BN+Relu kernels on the Conv bricks
    with Store(db) as store:
        (whole,) = store.measurements.models(status="ok")
        assert whole.config_id == OpenvinoConfig().config_id and whole.median_s > 0


@openvino
def test_the_backend_must_run_the_models_format(ov: ModuleType, tmp_path: Path) -> None:
    code, out = _run("estimate", "gluon_mobilenet0.25", "--backend", "openvino", "--db", str(tmp_path / "g.db"))
    assert code == 2 and "is an mxnet model, which --backend openvino does not run. Use --backend mxnet" in out
    code, out = _run("decompose", "squeezenet1_1", "--backend", "openvino", "--framework", "mxnet")
    assert code == 2 and "name different runtimes" in out and out.count("\n") == 1, out


@openvino
def test_decompose_checks_bricks_in_openvino(ov: ModuleType, tiny: Path) -> None:
    code, out = _run("decompose", str(tiny), "--backend", "openvino", "--json")
    assert code == 0, out
    bricks = json.loads(out)["bricks"]
    assert bricks and all(b["runnable"] for b in bricks)


@openvino
def test_calibrate_stores_openvinos_own_peaks(ov: ModuleType, tmp_path: Path) -> None:
    """calibrate --backend openvino runs the calibration models in OpenVINO and stores its peaks under
    its own name (the CPU's peaks are the best over every runtime calibrated)."""
    db = tmp_path / "peaks.db"
    code, out = _run("calibrate", "--backend", "openvino", "--db", str(db), "--budget", "quick")
    assert code == 0 and "with openvino, 1 thread(s)" in out, out
    with Store(db) as store:
        peaks = store.systems.peaks(collect_system_info())
    own = peaks.details["backends"]
    assert set(own) == {"openvino"} and own["openvino"]["flops_per_s"] > 1e8 and own["openvino"]["int_gemm"]
    assert not own["openvino"]["conv_nchwc"]  # onnxruntime's layout only
    assert (peaks[0], peaks[1]) == (own["openvino"]["flops_per_s"], own["openvino"]["bytes_per_s"])


# ----------------------------------------------------------------------------------- accuracy
@pytest.fixture(scope="module")
def tiny_graph(tiny: Path) -> dlbricks.ModelGraph:
    return dlbricks.load_model(tiny, name="tiny")


@openvino
def test_fused_bricks_are_the_kernels_openvino_runs(ov: ModuleType, squeezenet: dlbricks.ModelGraph,
                                                    tiny_graph: dlbricks.ModelGraph) -> None:
    """decompose(..., "fused", runtime="openvino") groups the layers as OpenVINO's runtime model runs
    them: every layer in exactly one group, a Conv with its Relu (and BatchNormalization) one brick,
    the plugin's layout reorders in no group."""
    for graph in (tiny_graph, squeezenet):
        dec = dlbricks.decompose(graph, "fused", runtime="openvino")
        assert dec.granularity == "fused:openvino"
        covered = [n for o in dec.occurrences for n in o.nodes]
        assert sorted(covered) == sorted(layer.name for layer in graph.layers)
        ops = {dec.bricks[o.signature].op_types for o in dec.occurrences}
        assert not any("Reorder" in kinds for kinds in ops)
        assert any(kinds[0] == "Conv" and kinds[-1] == "Relu" for kinds in ops), ops
        assert all(kinds != ("Relu",) for kinds in ops if graph is squeezenet)  # every Relu is in its Conv
    assert len(dlbricks.decompose(squeezenet, "fused", runtime="openvino").occurrences) < len(squeezenet.layers)
    with pytest.raises(InvalidArgumentError, match="'opt_level' applies to onnxruntime's fusion only"):
        dlbricks.decompose(tiny_graph, "fused", runtime="openvino", opt_level="all")
    with pytest.raises(InvalidArgumentError, match="'runtime' must be one of"):
        dlbricks.decompose(tiny_graph, "fused", runtime="tvm")


@openvino
def test_a_bricks_overhead_is_what_its_model_does_not_run(ov: ModuleType, squeezenet: dlbricks.ModelGraph) -> None:
    """A Relu brick that OpenVINO fuses into the Conv before it is all overhead at layer granularity;
    a Conv brick runs with channels-last edges (no reorder to subtract) where the plugin computes it
    channels-last; a brick that reads the model's input keeps the reorder of that input; the share
    scales the timed run."""
    from dlbricks.generators._openvino import (
        OpenvinoConfig,
        _compile,
        _layout_kernels_run,
        brick_channels_last,
        brick_overhead_share,
    )

    from dlbricks.ov_fusion import runtime_kernels

    cfg = OpenvinoConfig()
    backend = get_backend("openvino")
    dec = dlbricks.decompose(squeezenet)
    first, relu = dec.occurrences[0], dec.occurrences[1]
    assert dec.bricks[relu.signature].op_types == ("Relu",) and dec.previous(relu.signature) is not None
    assert brick_overhead_share(dec.bricks[relu.signature], dec.previous(relu.signature), cfg) == 1.0
    assert backend.brick_overhead_s(dec.in_context(relu.signature), cfg, 2e-4) == pytest.approx(2e-4)
    conv = dec.bricks[first.signature]
    assert conv.op_types == ("Conv",) and dec.previous(first.signature) is None
    data = conv.to_onnx().SerializeToString()
    assert brick_channels_last(ov, data, cfg.properties(), "conv", reads_layer=True) == "edges"
    assert brick_channels_last(ov, data, cfg.properties(), "conv", reads_layer=False) == "outputs"
    model = conv.to_onnx()
    assert _layout_kernels_run(ov, model, cfg.properties(), "edges") == 0.0  # its reorders only relabel
    assert _layout_kernels_run(ov, model, cfg.properties(), "") > 0.0  # in and out: what a plain brick pays
    kinds = [k.layer_type for k in runtime_kernels(_compile(ov, data, cfg.properties(), "conv", channels_last="edges"))]
    assert "Convolution" in kinds
    assert brick_overhead_share(conv, None, cfg) == 0.0  # its input's reorder is the model's too
    assert backend.brick_overhead_s(object(), cfg, 1e-3) is None


@openvino
@pytest.mark.parametrize("granularity", ["layer", "fused"])
def test_estimates_hold_against_the_whole_model(ov: ModuleType, squeezenet: dlbricks.ModelGraph,
                                                granularity: str) -> None:
    """Paired validation of a zoo CNN in OpenVINO (warm bricks, to keep the lane short): the estimate,
    each brick less what its model does not run, lands within 50% (layer) and 30% (fused) of the whole
    model timed in the same rounds; a layer brick's correction takes the whole of each Relu, which runs
    inside its Convolution's kernel in the model, and little of each Convolution (under 30% of their
    time; 22% in one CI run, under 20% before); the fused bricks' lower
    bound stays below their estimate and within 10% above the model: it is no bound in OpenVINO yet
    (0.63-0.90 of the model in ten runs, 1.03 in one CI run on an Intel Xeon with 1 MiB of L2 a core). The bounds guard against the gross errors of a missing
    correction (+87% before the brick-edge corrections), not the accuracy still to reach
    (docs/backends.md, "What is still off"): layer and fused landed at +14.7% and +11.1% on the AMD
    EPYC reference machine; on an Intel Xeon, in seven runs, layer +12.0..+31.1% (its MaxPool bricks
    run a planar kernel) and fused +2.8..+21.6%. Where the model is slower than its bricks (a CI
    machine: layer bricks less their corrections at -20.8%), a test that the correction moves the sum
    nearer to the model would depend on the machine; the test of what it removes does not."""
    from dlbricks.estimator import validate
    from dlbricks.generators.rounds import RoundsBudget

    cfg = get_backend("openvino").config_from_dict({**get_backend("openvino").default_config().to_dict(),
                                                    "cache": "warm"})
    with Store(":memory:") as store:
        result = validate(squeezenet, store, config=cfg, granularity=granularity, budget=Budget.quick(),
                          rounds=RoundsBudget(min_rounds=4, min_time=0.2, max_time=1.0, rel_ci=0.05))
        dec = dlbricks.decompose(squeezenet, "fused", runtime="openvino") if granularity == "fused" else \
            dlbricks.decompose(squeezenet)
        system = collect_system_info()
        stored = {s: store.measurements.get(s, system, cfg.config_id) for s in dec.bricks}
        overheads = store.systems.overheads(system, cfg.config_id, list(dec.bricks))
    raw = sum(stored[o.signature].median_s - stored[o.signature].floor_s for o in dec.occurrences)
    corrected = raw - sum(overheads.get(o.signature, 0.0) for o in dec.occurrences)
    measured = result.measured.median_s
    assert overheads and corrected < raw
    assert abs(result.error) <= (0.50 if granularity == "layer" else 0.30), (granularity, result.error)
    if granularity == "layer":  # its Relu bricks run inside the Convolutions' kernels in the model
        by_op: dict[str, list[float]] = {"Relu": [0.0, 0.0], "Conv": [0.0, 0.0]}
        for o in dec.occurrences:
            if (op := dec.bricks[o.signature].op_type) in by_op:
                by_op[op][0] += stored[o.signature].median_s - stored[o.signature].floor_s
                by_op[op][1] += overheads.get(o.signature, 0.0)
        assert by_op["Relu"][1] == pytest.approx(by_op["Relu"][0], rel=0.05), by_op
        assert by_op["Conv"][1] < 0.3 * by_op["Conv"][0], by_op  # 0.22 in one CI run on a slow night
    else:  # its warm bricks, each at its fastest: below the estimate, and near or below the model (0.63-1.03 of it)
        assert result.estimate.lower_bound_s <= result.estimate.sequential_s
        assert result.estimate.lower_bound_s <= 1.10 * measured, (result.estimate.lower_bound_s, measured)
