"""Shape sweeps: the option syntax, and one model estimated at several batch sizes through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from dlbricks.cli._util import parse_shape_sweep
from dlbricks.estimator.sweep import SweepShape, estimate_sweep
from tests._models import Builder


@pytest.mark.parametrize(("batch", "shapes", "expected"), [
    ("1,2,4", ("x=1,3",), [(1, {"x": (1, 3)}), (2, {"x": (1, 3)}), (4, {"x": (1, 3)})]),
    ("4", (), [(4, {})]),
    (None, (), [(None, {})]),
    (None, ("ids=1,{64,128}", "mask=1,{64,128}"),
     [(None, {"ids": (1, 64), "mask": (1, 64)}), (None, {"ids": (1, 128), "mask": (1, 128)})]),
    (None, ("x={2,3}x8", "y=5"), [(None, {"x": (2, 8), "y": (5,)}), (None, {"x": (3, 8), "y": (5,)})]),
])
def test_parse_shape_sweep(batch: str | None, shapes: tuple[str, ...], expected: list[object]) -> None:
    assert parse_shape_sweep(batch, shapes) == expected


@pytest.mark.parametrize(("batch", "shapes", "said"), [
    ("1,x", (), "positive integers"),
    ("0", (), "positive integers"),
    ("1,,2", (), "positive integers"),
    ("2,2", (), "lists 2 twice"),
    (None, ("x=1,{}",), "positive integers"),
    (None, ("x=1,{2,3",), "at most one"),
    (None, ("x={1,2},{3,4}",), "at most one"),
    (None, ("x=a,{1,2}",), "positive integers"),
    (None, ("x=1,{2,3}", "y={1,2,3}"), "list 2 and 3 values"),
    ("1,2", ("x=1,{2,3}",), "sweep one dimension at a time"),
])
def test_parse_shape_sweep_refuses_bad_syntax(batch: str | None, shapes: tuple[str, ...], said: str) -> None:
    with pytest.raises(dlbricks.InvalidArgumentError, match=said):
        parse_shape_sweep(batch, shapes)


def test_bad_sweep_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["estimate", "m.onnx", "--db", str(tmp_path / "b.db"), "--batch-size", "1,x"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--batch-size '1,x'" in result.output


def _half_shared() -> onnx.ModelProto:
    """x[N,8,16] -> Relu, and x averaged over the batch -> MatMul -> Relu: the bricks after the mean
    have the same shapes at every batch size."""
    b = Builder(3)
    per_item = b.op1("Relu", [b.op1("Mul", ["x", b.const(np.array(2.0, np.float32))])])
    mean = b.op1("ReduceMean", ["x"], axes=[0], keepdims=1)
    shared = b.op1("Relu", [b.op1("MatMul", [mean, b.weight((16, 16))])])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 16])
    return b.model([inp], [(per_item, TensorProto.FLOAT), (shared, TensorProto.FLOAT)], "half_shared")


def test_batch_sweep_measures_shared_bricks_once(tmp_path: Path) -> None:
    model, db = tmp_path / "half.onnx", tmp_path / "b.db"
    onnx.save(_half_shared(), model)
    signatures = [set(dlbricks.decompose(dlbricks.load_model(model, batch_size=n)).bricks) for n in (1, 2, 4)]
    union = set().union(*signatures)
    assert len(union) < sum(len(s) for s in signatures)  # the model does share bricks across batch sizes

    runner = CliRunner()
    result = runner.invoke(main, ["estimate", str(model), "--db", str(db), "--batch-size", "1,2,4",
                                  "--on-missing", "measure", "--budget", "quick", "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.output)
    assert [p["batch_size"] for p in points] == [1, 2, 4]
    assert [p["shape"] for p in points] == ["batch 1", "batch 2", "batch 4"]
    assert [p["estimate"]["unique_bricks"] for p in points] == [len(s) for s in signatures]
    assert [p["shared_bricks"] for p in points] == [0, len(signatures[1] & signatures[0]),
                                                    len(signatures[2] & (signatures[0] | signatures[1]))]
    assert sum(p["measured_bricks"] for p in points) == len(union)
    assert all(p["estimate"]["coverage"] == 1.0 and p["estimate"]["sequential_s"] > 0 for p in points)
    with Store.open(db, create=False, readonly=True) as store:
        measured = [r.key for r in store.measurements.bricks()]
    assert sorted(measured) == sorted(union)  # each brick measured once, shared ones too

    table = runner.invoke(main, ["estimate", str(model), "--db", str(db), "--batch-size", "1,2,4"])
    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if line.startswith("batch ")]
    assert len(rows) == 3 and "estimated ms" in table.output and "roofline ms" in table.output


def test_estimate_sweep_refuses_a_repeated_shape(tmp_path: Path) -> None:
    with pytest.raises(dlbricks.InvalidArgumentError, match="'batch 2' twice"):
        estimate_sweep(_half_shared(), tmp_path / "b.db", [2, SweepShape(batch_size=2)])
