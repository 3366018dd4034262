"""Benanza's comparison across runtimes (``dlbricks compare``, ``estimator._across``): the lower bound
with each brick at its fastest runtime, and where one runtime beats the other, per op type and per
brick.

The tests on real bricks bench a zoo model with onnxruntime and OpenVINO into one database; they are
marked ``openvino`` (the CI openvino lane, ``.ci/openvino_lane.sh``) and skipped, with the reason,
where openvino is not installed. The comparison's arithmetic and the command's refusals run
everywhere.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import ModuleType

import onnx
import pytest
from click.testing import CliRunner

from dlbricks import InvalidArgumentError
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from dlbricks.estimator.across import BrickComparison, compare_bricks, compare_ops, compare_runtimes
from dlbricks.generators import OrtConfig, get_backend
from tests import _models

openvino = pytest.mark.openvino
#: A zoo CNN whose OpenVINO layer bricks run no slower than its model (on squeezenet1_1 they do not yet:
#: a MaxPool brick runs the planar kernel, and the bound across both runtimes landed 1% above its
#: measured OpenVINO model in one run of three; see docs/backends.md).
MODEL = "resnet18_v1"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def _state(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` with the sha256 of its bytes, but SQLite's -wal and -shm files (a
    reader of a WAL database makes them)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


# ----------------------------------------------------------------------------------- the arithmetic
def test_op_types_sum_their_bricks_and_name_the_faster_runtime() -> None:
    conv = BrickComparison("a" * 64, "Conv", 2, (300e-6, 200e-6))
    conv2 = BrickComparison("b" * 64, "Conv", 1, (50e-6, 80e-6))
    relu = BrickComparison("c" * 64, "Relu", 3, (10e-6, 0.0))
    assert (conv.best, conv.ratio) == (1, pytest.approx(1.5))
    assert conv.difference_s == pytest.approx(2 * 100e-6)
    assert relu.best == 1 and relu.ratio == float("inf") and relu.difference_s == pytest.approx(30e-6)
    ops = {o.op_type: o for o in compare_ops([conv, conv2, relu])}
    assert ops["Conv"].total_s == pytest.approx((650e-6, 480e-6))
    assert (ops["Conv"].bricks, ops["Conv"].occurrences, ops["Conv"].wins) == (2, 3, (1, 1))
    assert ops["Conv"].best == 1 and ops["Conv"].ratio == pytest.approx(650 / 480)
    assert [o.op_type for o in compare_ops([relu, conv, conv2])] == ["Conv", "Relu"]  # the largest first


def test_a_brick_of_several_models_counts_once_with_their_occurrences() -> None:
    """A brick two models share (each measured in its own context) is one row: occurrences summed, its
    times their occurrence-weighted mean; rows come largest saving first."""
    one = BrickComparison("a" * 64, "Conv", 1, (100e-6, 40e-6))
    other = BrickComparison("a" * 64, "Conv", 3, (120e-6, 60e-6))
    small = BrickComparison("b" * 64, "Add", 1, (5e-6, 6e-6))
    merged = compare_bricks([[one, small], [other]])
    assert [b.signature[0] for b in merged] == ["a", "b"]
    assert merged[0].count == 4 and merged[0].fastest_s == pytest.approx((115e-6, 55e-6))
    assert sum(o.total_s[0] for o in compare_ops(merged)) == pytest.approx(100e-6 + 360e-6 + 5e-6)


def test_configurations_must_be_of_several_runtimes(tmp_path: Path) -> None:
    with Store(":memory:") as store:
        with pytest.raises(InvalidArgumentError, match="at least two runtimes. Got 1 \\(onnxruntime\\)"):
            compare_runtimes("squeezenet1_1", store, [OrtConfig()])
        with pytest.raises(InvalidArgumentError, match="one configuration per runtime. Got several of onnxruntime"):
            compare_runtimes("squeezenet1_1", store, [OrtConfig(), OrtConfig(graph_optimization_level="all")])


# ----------------------------------------------------------------------------------- the command's refusals
def test_a_missing_database_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    code, out = _run("compare", MODEL, "--db", str(db))
    assert code == 2 and out.count("\n") == 1, out
    assert f"no database at '{db}'" in out
    assert list(tmp_path.iterdir()) == []


def test_a_database_of_one_runtime_is_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "one.db"
    with Store(db) as store:
        store.systems.record_backend(OrtConfig())
    before = _state(tmp_path)
    code, out = _run("compare", MODEL, "--db", str(db))
    assert code == 2 and out.count("\n") == 1, out
    assert "comparing runtimes takes configurations of at least two runtimes. Got 1 (onnxruntime)" in out
    code, out = _run("compare", "--db", str(db))
    assert code == 2 and "give MODELs or --suite" in out, out
    assert _state(tmp_path) == before


# ----------------------------------------------------------------------------------- real bricks
@pytest.fixture(scope="module")
def ov() -> ModuleType:
    """openvino; skips the tests that need it where the openvino extra is not installed (the core lane)."""
    return pytest.importorskip("openvino", reason="needs the openvino extra (pip install 'dlbricks[openvino]')")


@pytest.fixture(scope="module")
def both(ov: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with resnet18_v1's bricks and whole model measured by onnxruntime and by OpenVINO,
    each at its default configuration and with warm bricks (Benanza's bound takes each brick's fastest
    configuration), quick budget."""
    db = tmp_path_factory.mktemp("across") / "both.db"
    for backend in ("onnxruntime", "openvino"):
        code, out = _run("bench", MODEL, "--backend", backend, "--db", str(db), "--budget", "quick",
                         "--sweep", "cache=cold-weights,warm", "--whole-model")
        assert code == 0 and "(0 failed)" in out, out
    return db


def _configs() -> list[object]:
    return [OrtConfig(), get_backend("openvino").default_config()]


def _measured(store: Store, config_id: str) -> float:
    """The latest whole-model median stored for ``config_id``."""
    runs = store.measurements.models(model=MODEL, config_id=config_id, status="ok")
    return max(runs, key=lambda r: r.id).median_s


@openvino
def test_the_lower_bound_across_runtimes_holds_below_each_runtimes_own_and_where_that_holds_its_model(both: Path) -> None:
    with Store(both) as store:
        compared = compare_runtimes(MODEL, store, _configs())
        measured = {cfg.backend: _measured(store, cfg.config_id) for cfg in _configs()}
    assert compared.names == ("onnxruntime", "openvino")
    assert all(m > 0 for m in measured.values())
    # below each runtime's own lower bound, so below each runtime's model wherever that runtime's own
    # bound holds: onnxruntime's does; OpenVINO's layer bricks run planar kernels its model does not, and
    # their own lower bound came to 0.77-1.19 of its model on Intel Xeons (docs/backends.md)
    own = {side.runtime: side.lower_bound_s <= side.measured_s for side in compared.runtimes}
    assert own["onnxruntime"], compared.runtimes
    for side in compared.runtimes:
        if own[side.runtime]:
            assert compared.lower_bound_s <= side.measured_s, (compared.lower_bound_s, measured)
    assert compared.bound_holds == (compared.lower_bound_s <= min(measured.values()))
    assert compared.lower_bound_parallel_s <= compared.lower_bound_s
    for side in compared.runtimes:
        assert side.measured_s == measured[side.runtime]
        assert compared.lower_bound_s <= side.lower_bound_s, side
        assert compared.lower_bound_parallel_s <= side.lower_bound_parallel_s, side
        assert 0 < side.lower_bound_s <= side.estimate_s
    # each brick at its fastest runtime, plus the smallest floor
    fastest = sum(b.count * min(b.fastest_s) for b in compared.bricks)
    assert compared.floor_s == min(s.floor_s for s in compared.runtimes)
    assert compared.lower_bound_s == pytest.approx(fastest + compared.floor_s)
    # the op types split each runtime's own lower bound, less its floor, and the bricks split the op types
    for i, side in enumerate(compared.runtimes):
        assert sum(o.total_s[i] for o in compared.ops) == pytest.approx(side.lower_bound_s - side.floor_s)
    assert sum(o.bricks for o in compared.ops) == len(compared.bricks) == compared.unique_bricks
    # a difference the comparison must show: OpenVINO runs each Relu inside the convolution before it
    relu = next(o for o in compared.ops if o.op_type == "Relu")
    assert compared.names[relu.best] == "openvino" and relu.total_s[1] < relu.total_s[0]


@openvino
def test_the_comparison_on_the_command_line(both: Path, tmp_path: Path) -> None:
    code, out = _run("compare", MODEL, "--db", str(both), "--top", "5")
    assert code == 0, out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("op "))
    for column in ("onnxruntime ms", "openvino ms", "ratio", "faster", "won"):
        assert column in header, header
    across = next(line for line in lines if "fastest of each" in line)
    with Store(both) as store:
        holds = compare_runtimes(MODEL, store, _configs()).bound_holds
    assert across.split()[-1] == ("yes" if holds else "NO"), out
    assert len([line for line in lines if line.startswith(MODEL)]) == 3  # each runtime, then across both
    relu = next(line.split() for line in lines if line.startswith("Relu "))
    assert relu[6] == "openvino", relu
    bricks = lines[lines.index(next(line for line in lines if line.startswith("signature "))) + 2:]
    assert len([line for line in bricks if line[:12].isalnum() and len(line.split()) >= 7]) == 5
    with Store(both) as store:
        compared = compare_runtimes(MODEL, store, _configs())
    code, out = _run("compare", "--suite", MODEL, "--db", str(both), "--json")
    assert code == 0, out
    (model,) = json.loads(out)["models"]
    assert model["lower_bound_s"] == pytest.approx(compared.lower_bound_s)
    assert model["runtime_names"] == ["onnxruntime", "openvino"]
    assert {o["op_type"]: o["fastest"] for o in model["ops"]}["Relu"] == "openvino"
    # a model the database lacks is named and left out beside one it holds; alone, it is one line
    other = tmp_path / "cnn.onnx"
    onnx.save(_models.resnet_like(blocks=1, channels=8, batch=1), other)
    before = _state(both.parent)
    code, out = _run("compare", MODEL, str(other), "--db", str(both))
    assert code == 0 and "left out: " + str(other) + ": " in out and "--backend onnxruntime" in out, out
    code, out = _run("compare", str(other), "--db", str(both))
    assert code == 2 and out.count("\n") == 1 and "have no measurement in onnxruntime" in out, out
    code, out = _run("compare", MODEL, "--db", str(both), "--backend", "openvino", "--threads", "2")
    assert code == 2 and out.count("\n") == 1 and "at least two runtimes" in out, out
    assert _state(both.parent) == before
