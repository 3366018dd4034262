"""The estimator's commands through click's test runner, on small models with quick budgets."""

from __future__ import annotations

import dataclasses

import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from tests import _models


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small CNN file and a database with its bricks measured (quick budget)."""
    tmp = tmp_path_factory.mktemp("est")
    model = tmp / "cnn.onnx"
    onnx.save(_models.resnet_like(blocks=2, batch=1), model)
    db = tmp / "b.db"
    result = CliRunner().invoke(main, ["bench", str(model), "--db", str(db), "--budget", "quick",
                                       "--sweep", "cache=cold-weights,warm"])
    assert result.exit_code == 0, result.output
    return model, db


def test_estimate_table_and_json(filled: tuple[Path, Path]) -> None:
    model, db = filled
    runner = CliRunner()
    table = runner.invoke(main, ["estimate", str(model), "--db", str(db)])
    assert table.exit_code == 0, table.output
    assert "sequential estimate" in table.output and "coverage 100.0%" in table.output
    data = json.loads(runner.invoke(main, ["estimate", str(model), "--db", str(db), "--json"]).output)
    assert data["coverage"] == 1.0 and data["sequential_s"] > 0
    assert data["lower_bound_s"] <= data["sequential_s"]
    assert abs(sum(b["share"] for b in data["breakdown"]) - 1.0) < 1e-9


def test_estimate_missing_bricks_is_one_line(filled: tuple[Path, Path], tmp_path: Path) -> None:
    _, db = filled
    other = tmp_path / "other.onnx"
    onnx.save(_models.resnet_like(blocks=2, channels=24, batch=1), other)
    result = CliRunner().invoke(main, ["estimate", str(other), "--db", str(db), "--on-missing", "error"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "have no measurement" in result.output
    predicted = CliRunner().invoke(main, ["estimate", str(other), "--db", str(db), "--on-missing", "predict"])
    assert predicted.exit_code == 0, predicted.output
    assert "predicted" in predicted.output


def test_estimate_measures_what_a_database_filled_here_lacks_and_refuses_elsewhere(
        filled: tuple[Path, Path], tmp_path: Path) -> None:
    """--on-missing auto (the default): this machine is the target where it filled the database, so
    the missing bricks are measured (and said so); a database of another machine gets the refusal."""
    model, db = filled
    here = tmp_path / "here.db"
    here.write_bytes(db.read_bytes())
    other = tmp_path / "other.onnx"
    onnx.save(_models.resnet_like(blocks=2, channels=24, batch=1), other)
    args = ["estimate", str(other), "--db", str(here), "--budget", "quick"]
    measured = CliRunner().invoke(main, args)
    assert measured.exit_code == 0, measured.output
    assert "measuring them now" in measured.output and "coverage 100.0%" in measured.output
    with Store(here, readonly=True) as store:
        before = len(store.measurements.bricks())
    again = CliRunner().invoke(main, args)  # nothing lacking now: read only
    assert again.exit_code == 0 and "measuring" not in again.output, again.output
    with Store(here, readonly=True) as store:
        assert len(store.measurements.bricks()) == before

    elsewhere = tmp_path / "elsewhere.db"
    filled_there = CliRunner().invoke(main, ["bench", str(model), "--db", str(elsewhere), "--budget", "quick",
                                             "--system-id", "another-machine"])
    assert filled_there.exit_code == 0, filled_there.output
    refused = CliRunner().invoke(main, ["estimate", str(model), "--db", str(elsewhere)])
    assert refused.exit_code == 2 and "have no measurement" in refused.output, refused.output
    with Store(elsewhere, readonly=True) as store:
        assert {s.fingerprint for s in store.systems.all()} == {"another-machine"}


def test_validate_bounds_hold(filled: tuple[Path, Path]) -> None:
    model, db = filled
    result = CliRunner().invoke(main, ["validate", str(model), "--db", str(db), "--budget", "quick",
                                       "--per-brick", "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "in-model" in result.output
    assert "machine swing: whole runs over their rounds spread" in result.output
    # the database holds no other model measured whole: the interval says what it does not hold
    assert f"holds the bricks and the machine's swing only: no other model in {db}" in result.output
    with Store(db) as store:
        (rec,) = store.measurements.models(status="ok")
        assert rec.median_s > 0


def test_validate_again_stores_the_whole_run_its_bricks_met(filled: tuple[Path, Path]) -> None:
    """A second paired validate replaces the stored whole run with its own, as it replaces the bricks'
    runs in the model's context: the stored pair (what estimate and report read) is from one moment."""
    model, db = filled
    for k in range(2):
        result = CliRunner().invoke(main, ["validate", str(model), "--db", str(db), "--budget", "quick"])
        assert result.exit_code == 0, result.output
        row = next(line.split() for line in result.output.splitlines() if line.startswith(model.stem + " "))
        with Store(db) as store:
            (rec,) = store.measurements.models(status="ok")
            assert f"{rec.median_s * 1e3:.3f}" == row[1]
            if k == 0:  # a whole run of another moment with many more samples, which "best" would keep
                other = store.measurements.get(rec.key, rec.system, rec.config_id, kind="model")
                store.measurements.record_model(dataclasses.replace(other, n=100_000, median_s=1.0), rec.system)


def test_fused_estimates_are_kept_apart_from_layer_ones(filled: tuple[Path, Path], tmp_path: Path) -> None:
    """validate and estimate take --granularity; a fused estimate says so and uses fused bricks only."""
    model, _ = filled
    db = tmp_path / "fused.db"
    level = ["--opt-level", "extended", "--db", str(db)]
    validated = CliRunner().invoke(main, ["validate", str(model), *level, "--granularity", "fused",
                                          "--budget", "quick"])
    assert validated.exit_code == 0, validated.output
    fused = CliRunner().invoke(main, ["estimate", str(model), *level, "--granularity", "fused", "--json"])
    assert fused.exit_code == 0, fused.output
    data = json.loads(fused.output)
    assert data["granularity"] == "fused:extended" and data["coverage"] == 1.0
    assert {b["op_type"] for b in data["breakdown"]} >= {"Conv+BatchNormalization+Relu"}
    layer = CliRunner().invoke(main, ["estimate", str(model), *level, "--on-missing", "error"])
    assert layer.exit_code == 2 and "have no measurement" in layer.output


def test_calibrate_stores_peaks(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    result = CliRunner().invoke(main, ["calibrate", "--db", str(db), "--budget", "quick"])
    assert result.exit_code == 0, result.output
    from dlbricks.generators import collect_system_info

    with Store(db) as store:
        peaks = store.systems.peaks(collect_system_info())
    assert peaks is not None and peaks[0] > 1e8 and peaks[1] > 1e8
    assert set(peaks.details["backends"]) == {"onnxruntime"}
    from dlbricks.estimator.calibrate import GEMV_SIZES

    gemv = peaks.details["backends"]["onnxruntime"]["gemv"]
    assert [size for size, _ in gemv] == [4 * n * n for n in GEMV_SIZES]
    assert peaks[1] == max(rate for _, rate in gemv + peaks.details["backends"]["onnxruntime"]["stream"])


def test_profiler_events_match_layers_in_order() -> None:
    """MXNet's profiler names events by op type: they are matched to layers in order, engine events
    (WaitForVar) to none."""
    from dlbricks.estimator._mxnet_profile import match_events

    events = [("Convolution", 3.0), ("BatchNorm", 1.0), ("WaitForVar", 9.0), ("Activation", 0.5),
              ("Convolution", 2.0), ("Flatten", 0.1)]
    layers = [("conv0", "Convolution"), ("bn0", "BatchNorm"), ("relu0", "Activation"), ("conv1", "Convolution"),
              ("flat", "Flatten")]
    assert match_events(events, layers) == {"conv0": 3.0, "bn0": 1.0, "relu0": 0.5, "conv1": 2.0, "flat": 0.1}
    assert match_events(events[:2], layers) == {"conv0": 3.0, "bn0": 1.0}


def test_peaks_are_the_best_of_every_framework_calibrated() -> None:
    from collections import namedtuple

    from dlbricks.estimator.calibrate import Calibration
    from dlbricks.estimator.calibrate import calibrated_backends, merge_peaks
    from dlbricks.estimator.estimation import Peaks

    Stored = namedtuple("Stored", "flops_per_s bytes_per_s details")
    old = Stored(2e11, 5e10, {"gemm": [[256, 2e11]], "stream": []})  # a database from before per-framework peaks
    assert calibrated_backends(old) == {"onnxruntime"}
    mxnet = Calibration(Peaks(3e11, 4e10), ((256, 3e11),), ((1 << 20, 4e10),))
    flops, bandwidth, details = merge_peaks(old, "mxnet", mxnet)
    assert (flops, bandwidth) == (3e11, 5e10)
    assert calibrated_backends(Stored(flops, bandwidth, details)) == {"onnxruntime", "mxnet"}
    assert details["backends"]["onnxruntime"]["gemm"] == [[256, 2e11]]
    slower = Calibration(Peaks(1e11, 1e10), (), ())
    again = merge_peaks(Stored(flops, bandwidth, details), "mxnet", slower)
    assert again[:2] == (2e11, 5e10)  # a recalibration replaces that framework's figures


def test_an_accelerators_peaks_are_kept_apart_from_the_cpus() -> None:
    """A GPU calibration is stored beside the CPU's (details), and each configuration's roofline
    takes its own device's peaks: the GPU's would make every CPU roofline vanish."""
    from collections import namedtuple

    from dlbricks.estimator.calibrate import Calibration
    from dlbricks.estimator.api import peaks_key, store_peaks
    from dlbricks.estimator.calibrate import calibrated_backends, merge_peaks
    from dlbricks.estimator.estimation import Peaks
    from dlbricks.generators import OrtConfig

    Stored = namedtuple("Stored", "flops_per_s bytes_per_s details")

    class OneSystem:  # a store whose systems part knows the peaks of one system
        def __init__(self, record: object) -> None:
            self.record = record
            self.systems = self

        def peaks(self, system: object) -> object:
            return self.record

    cuda = OrtConfig(device="cuda")
    assert (peaks_key(OrtConfig()), peaks_key(cuda)) == ("onnxruntime", "onnxruntime:cuda")
    gpu = Calibration(Peaks(4e13, 3e12), ((4096, 4e13),), ((1 << 26, 3e12),))
    only_gpu = Stored(*merge_peaks(None, peaks_key(cuda), gpu))
    assert store_peaks(OneSystem(only_gpu), "s", "onnxruntime") is None  # no CPU calibrated yet
    assert store_peaks(OneSystem(only_gpu), "s", "onnxruntime:cuda") == Peaks(4e13, 3e12)
    cpu = Calibration(Peaks(5e10, 2e10), ((256, 5e10),), ((1 << 20, 2e10),))
    both = Stored(*merge_peaks(only_gpu, "onnxruntime", cpu))
    assert (both.flops_per_s, both.bytes_per_s) == (5e10, 2e10)
    assert calibrated_backends(both) == {"onnxruntime", "onnxruntime:cuda"}
    assert store_peaks(OneSystem(both), "s") == Peaks(5e10, 2e10)
    assert store_peaks(OneSystem(both), "s", "onnxruntime:cuda") == Peaks(4e13, 3e12)
    assert store_peaks(OneSystem(both), "s", "mxnet:gpu") is None


@pytest.mark.skipif("CUDAExecutionProvider" in __import__("onnxruntime").get_available_providers(),
                    reason="this machine has the CUDA provider (benchmarks/check_cuda.py runs there)")
@pytest.mark.parametrize("command", [["evaluate", "--suite", "squeezenet1_1"], ["calibrate"],
                                     ["validate", "squeezenet1_1"]])
def test_device_cuda_without_the_provider_is_one_clear_line(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "cuda.db"
    result = CliRunner().invoke(main, [*command, "--device", "cuda", "--db", str(db)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "CUDA requested but onnxruntime has no CUDAExecutionProvider" in lines[0]
    assert "Traceback" not in result.output


def test_evaluate_main_job_on_a_tiny_suite(with_peaks: Callable[[str], Path]) -> None:
    db = with_peaks("e.db")
    result = CliRunner().invoke(main, ["evaluate", "--suite", "squeezenet1_1", "--db", str(db), "--budget",
                                       "quick", "--quiet", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "squeezenet1_1" in result.output and "speedup" in result.output and "mean |error|" in result.output
    assert "suite: 1 models at batch 2," in result.output
    with Store(db) as store:
        assert [s.shape[0] for s in store.models.get("squeezenet1_1").inputs] == [2]


def test_evaluate_shows_layer_bricks_beside_fused_ones_in_one_run(with_peaks: Callable[[str], Path]) -> None:
    """--granularity both: fused bricks at the level, and in the same run layer bricks at that level,
    each column the estimate of its own decomposition from the run's database."""
    from dlbricks.estimator import estimate
    from dlbricks.generators import OrtConfig

    db = with_peaks("both.db")
    args = ["evaluate", "--suite", "mobilenet_v2_0.35", "--db", str(db), "--budget", "quick", "--quiet",
            "--opt-level", "extended"]
    result = CliRunner().invoke(main, [*args, "--granularity", "both"])
    assert result.exit_code == 0, result.output
    assert "layer est. ms" in result.output and "fused:extended granularity" in result.output
    line = next(x for x in result.output.splitlines() if x.startswith("layer bricks at the same level"))
    assert "within +-5%: " in line and "unique" in line
    row = next(x for x in result.output.splitlines() if x.startswith("mobilenet_v2_0.35")).split()
    printed = {"fused:extended": float(row[4]), "layer": float(row[11])}
    config = OrtConfig(graph_optimization_level="extended")
    with Store(db) as store:  # both decompositions stored and measured; each column is its own estimate
        for granularity, ms in printed.items():
            dec = store.models.decomposition("mobilenet_v2_0.35", granularity)
            assert 1e3 * estimate(dec, store, config=config).sequential_s == pytest.approx(ms, abs=6e-4)
        layer, fused = (store.models.decomposition("mobilenet_v2_0.35", g) for g in ("layer", "fused:extended"))
        assert len(layer.occurrences) > len(fused.occurrences)  # BatchNorms and clips fused away
    refused = CliRunner().invoke(main, ["evaluate", "--suite", "mobilenet_v2_0.35", "--db", str(db),
                                        "--granularity", "both"])
    assert refused.exit_code == 2 and "needs an optimization level that fuses" in refused.output


def test_bad_db_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "notes.db"
    bad.write_text("not a database\n" * 100)
    result = CliRunner().invoke(main, ["estimate", "squeezenet1_1", "--db", str(bad)])
    assert result.exit_code == 2 and result.output.count("\n") == 1


MEASURED_NOISE = 0.05  # speed swings of the reference machine within seconds (README, "How bricks are measured")


@pytest.mark.parametrize("factory", [lambda: _models.resnet_like(blocks=2, batch=1),
                                     lambda: _models.transformer_layer(seq=32, hidden=64)])
def test_bounds_are_bounds(factory, with_peaks: Callable[[str], Path]) -> None:  # type: ignore[no-untyped-def]
    """roofline <= lower bound <= measured, with the warm sweep giving each brick its fastest state.

    The whole model is measured seconds after its bricks, and the reference machine's speed swings
    by 1.3x and more within minutes: a bound above the measurement in one attempt is measured again
    (a fresh database, up to three attempts); a bound above it in all three fails."""
    from dataclasses import replace

    import dlbricks
    from dlbricks.benchmarks_db import BenchOptions, populate
    from dlbricks.estimator import validate
    from dlbricks.generators import Budget, OrtConfig

    graph = dlbricks.load_model(factory(), batch_size=1)
    budget = Budget(min_time=0.05, max_time=0.5)
    misses = []
    for attempt in range(3):
        with Store(with_peaks(f"b{attempt}.db")) as store:  # the peaks calibrated once for the session
            dec = dlbricks.decompose(graph)
            populate(store, [dec], [OrtConfig(), replace(OrtConfig(), cache="warm")], BenchOptions(budget=budget))
            v = validate(graph, store, budget=budget)
        est = v.estimate
        assert est.roofline_s is not None
        assert est.roofline_s <= est.lower_bound_s <= est.sequential_s
        assert est.lower_bound_parallel_s <= est.lower_bound_s
        if est.lower_bound_s <= v.measured.median_s * (1 + MEASURED_NOISE):
            return
        misses.append((est.lower_bound_s, v.measured.median_s))
    raise AssertionError(f"lower bound above the measured time in every attempt (bound, measured): {misses}")


def test_evaluate_times_a_brick_of_an_earlier_model_again_in_the_next_models_rounds(
        with_peaks: Callable[[str], Path]) -> None:
    """A brick that an earlier model of the run measured is timed again in the rounds of the next
    model that uses it, and stored in that model's context: its estimate reads no earlier moment."""
    from dlbricks.estimator import evaluation as _evaluate
    from dlbricks.generators import Budget, OrtConfig, collect_system_info

    lines: list[str] = []
    models = ["dlrm_criteo_kaggle", "ncf_ml20m"]
    db = with_peaks("s.db")
    short = dataclasses.replace(_evaluate.default_rounds(OrtConfig()), max_time=0.5)  # its least rounds, not its seconds
    ev = _evaluate.evaluate(models, db, budget=Budget.quick(), lower_bound_sweep=False, say=lines.append,
                            rounds=short)
    from dlbricks.model_zoo import build

    decs = [dlbricks.decompose(dlbricks.load_model(build(m), name=m)) for m in models]
    shared = set(decs[0].bricks) & set(decs[1].bricks)
    assert shared
    with Store(db) as store:
        own = {r.key: r for r in store.measurements.in_context(decs[1].model_key, system=collect_system_info(),
                                                                config_id=OrtConfig().config_id, status="ok")}
    assert shared <= set(own) and set(own) == set(decs[1].bricks)
    rounds = ev.rows[1].rounds
    assert rounds >= _evaluate.default_rounds(OrtConfig()).min_rounds
    assert all(own[sig].n == rounds for sig in shared)  # one median a round
    assert any(line.startswith(f"ncf_ml20m: {rounds} rounds of the whole model and {len(decs[1].bricks)} layer")
               for line in lines)
    assert [r.model for r in ev.rows] == models


def test_evaluate_times_each_model_with_its_bricks_in_rounds(with_peaks: Callable[[str], Path]) -> None:
    """The paired design: a model is held in its bricks' worker and timed with them, round after
    round; its stored latency is its median over the rounds, its interval holds what the rounds saw
    of the machine's swing, and the speedup counts the whole model's side of the rounds: its session in
    each process and its timed runs."""
    from dlbricks.estimator import evaluation as _evaluate
    from dlbricks.generators import Budget, OrtConfig, collect_system_info

    lines: list[str] = []
    db = with_peaks("p.db")
    ev = _evaluate.evaluate(["squeezenet1_1"], db, budget=Budget.quick(), lower_bound_sweep=False,
                            say=lines.append)
    row = ev.rows[0]
    with Store(db) as store:
        key = store.models.get("squeezenet1_1").key
        stored = store.measurements.get(key, collect_system_info(), OrtConfig().config_id, kind="model")
    assert stored is not None and stored.ok
    assert stored.n == row.rounds >= _evaluate.default_rounds(OrtConfig()).min_rounds  # one whole run a round
    assert stored.median_s == pytest.approx(row.measured_s)
    assert ev.whole_time_s == pytest.approx(stored.wall_time_s)
    assert 0 < ev.whole_setup_s < ev.whole_time_s
    timed = ev.whole_time_s - ev.whole_setup_s  # its timed runs, one a round: the median's share of them
    assert timed == pytest.approx(row.rounds * row.measured_s, rel=0.5)
    assert ev.rounds_s > timed and row.swing is not None and row.swing >= 1.0
    assert row.pairing is not None and row.pairing >= 0
    # the interval is at least as wide as what the swing left in the ratio
    assert row.ci_high_s >= row.estimated_s * (1 + row.pairing) * (1 - 1e-9)
    assert row.ci_low_s <= row.estimated_s / (1 + row.pairing) * (1 + 1e-9)


def test_plan_lists_what_the_database_lacks(filled: tuple[Path, Path], tmp_path: Path) -> None:
    """plan reads the database only: the measured model lacks nothing; another lists its missing bricks."""
    model, db = filled
    before = db.stat().st_mtime_ns
    done = CliRunner().invoke(main, ["plan", str(model), "--db", str(db)])
    assert done.exit_code == 0 and "0 of" in done.output, done.output
    other = tmp_path / "other.onnx"
    onnx.save(_models.resnet_like(blocks=2, channels=24, batch=1), other)
    result = CliRunner().invoke(main, ["plan", str(other), "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["missing"] and all(m["measure_s"] > 0 for m in plan["missing"])
    assert db.stat().st_mtime_ns == before


def test_decompose_no_weights_writes_bricks_without_the_models_names(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_models.resnet_like(blocks=1, channels=8, batch=1), model)
    out = tmp_path / "bricks"
    result = CliRunner().invoke(main, ["decompose", str(model), "--out", str(out), "--no-weights", "--no-check"])
    assert result.exit_code == 0, result.output
    names = {n.name for p in out.iterdir() for n in onnx.load(p).graph.node}
    source = {n.name for n in onnx.load(model).graph.node if n.name}
    assert list(out.iterdir()) and not names & source
    refused = CliRunner().invoke(main, ["decompose", str(model), "--no-weights"])
    assert refused.exit_code == 2 and "--out" in refused.output


def test_validate_finds_a_model_that_bench_stored_under_its_name(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """validate NAME loads the stored model again from its file, as estimate NAME reads it; a file
    that is gone is one line naming it."""
    monkeypatch.chdir(tmp_path)
    onnx.save(_models.resnet_like(blocks=1, channels=8, batch=1), "tiny.onnx")
    bench = CliRunner().invoke(main, ["bench", "tiny.onnx", "--db", "v.db", "--budget", "quick"])
    assert bench.exit_code == 0, bench.output
    result = CliRunner().invoke(main, ["validate", "tiny", "--db", "v.db", "--budget", "quick"])
    assert result.exit_code == 0, result.output
    row = next(x for x in result.output.splitlines() if x.startswith("tiny ")).split()
    assert float(row[1]) > 0 and float(row[2]) > 0  # measured whole and estimated
    Path("tiny.onnx").rename("moved.onnx")
    gone = CliRunner().invoke(main, ["validate", "tiny", "--db", "v.db", "--budget", "quick"])
    assert gone.exit_code == 2 and gone.output.count("\n") == 1
    assert "was stored from tiny.onnx, which is not there" in gone.output


def test_evaluate_sweep_needs_cuda_and_says_so_in_one_line(tmp_path) -> None:
    result = CliRunner().invoke(main, ["evaluate", "--suite", "resnet18_v1", "--sweep", "--db", str(tmp_path / "s.db")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--device cuda" in lines[0] and "Traceback" not in result.output


def test_models_run_in_their_cuda_graph_are_set_beside_the_graph_estimate_or_named_with_why_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``evaluate --cuda-graph``'s harness on a fake device's times: a model captured gets its run
    stored and its error beside the graph estimate; one the runtime refuses gets the first line of
    the reason, and no error."""
    from dlbricks.cli._estimator import _print_graphs
    from dlbricks.estimator import evaluation
    from dlbricks.estimator.evaluation import EvaluationRow
    from dlbricks.generators import OrtConfig, collect_system_info
    from tests.test_db_support import measurement

    graphed = OrtConfig(device="cuda", provider_options={"enable_cuda_graph": "1"})
    refusal = ("[ONNXRuntimeError] : 1 : FAIL : This session cannot use the CUDA Graph feature as requested by the "
               "user as all compute graph nodes have not been partitioned to the CUDA EP.\nmore lines")

    dec = dlbricks.decompose(_models.matmul_stack(shared=False, layers=2))

    def measure_graphed(graph: object, config: object, budget: object) -> dlbricks.generators.Measurement:
        if graph == "captured":
            return measurement(dec.model_key, median=2e-3, cfg=graphed)
        return dataclasses.replace(measurement(dec.model_key, status="failed", cfg=graphed), error=refusal)

    monkeypatch.setattr(evaluation, "measure_graphed", measure_graphed)
    row = EvaluationRow(model="m", layers=3, unique_bricks=2, measured_s=3e-3, estimated_s=3.1e-3, parallel_s=3e-3,
                        lower_bound_s=1e-3, roofline_s=None, ci_low_s=2.9e-3, ci_high_s=3.3e-3, graph_estimated_s=2.1e-3)
    system = collect_system_info()
    with Store.open(tmp_path / "g.db") as store:
        store.systems.record(system)
        store.models.add(dec)
        said: list[str] = []
        captured = evaluation._with_graph(row, "captured", graphed, store, system, None, said.append)
        refused = evaluation._with_graph(dataclasses.replace(row, model="r"), "refused", graphed, store, system, None,
                                         said.append)
        assert store.measurements.get(dec.model_key, system, graphed.config_id, kind="model").median_s == 2e-3
    assert captured.graph_error == pytest.approx(2.1 / 2.0 - 1)
    assert refused.graph_error is None and refused.graph_failure == refusal.splitlines()[0]

    class Suite:  # the two fields _print_graphs reads of an Evaluation
        rows = (captured, refused, row)
        graph_rows = (captured,)

    _print_graphs(Suite())  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("m in a CUDA graph: measured 2.000 ms, estimated 2.100 ms (its kernels back to back, the floor "
                        "once): +5.0%")
    assert lines[1] == f"r could not be captured in a CUDA graph: {refusal.splitlines()[0]}"
    assert lines[2].startswith("CUDA graphs: mean |error| 5.00%, max |error| 5.00%; within +-5%: 1/1") and "(1 of 2)" in lines[2]
