"""The command line on MXNet exports as users make them (``net.export``: a symbol file without shape
hints, its params beside it): one --framework, inferred from the file; --input-shape everywhere;
checks in MXNet; repeated node names; a missing params file said in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import dlbricks
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()

from mxnet.gluon import nn

from dlbricks.cli import main

SHAPE = "data=1,3,16,16"


def _export(block: object, folder: Path, name: str, shape: tuple[int, ...]) -> Path:
    """``block.export`` as users call it: hybridized, one forward, no shape hints in the file."""
    block.initialize(mx.init.Normal(0.1))
    block.hybridize()
    block(mx.nd.zeros(shape))
    block.export(str(folder / name))
    path = folder / f"{name}-symbol.json"
    data = next(n for n in json.loads(path.read_text())["nodes"] if n["name"] == "data")
    assert "__shape__" not in data.get("attrs", {})
    return path


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
                nn.Conv2DTranspose(4, 4, strides=2, padding=1), nn.GlobalAvgPool2D(), nn.Dense(10))
    return _export(net, tmp_path_factory.mktemp("export"), "tiny", (1, 3, 16, 16))


class _Twice(mx.gluon.HybridBlock):
    """One stage called twice, as GluonCV's Mask R-CNN does: its nodes' names repeat in the symbol."""

    def __init__(self) -> None:
        super().__init__()
        with self.name_scope():
            self.stage = nn.Conv2D(3, 3, padding=1)

    def hybrid_forward(self, F: object, x: object) -> object:
        return self.stage(self.stage(x))


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def test_decompose_checks_mxnet_bricks_in_mxnet(export: Path) -> None:
    code, out = _run("decompose", str(export), "--input-shape", SHAPE)
    assert code == 0, out
    assert "onnxruntime" not in out and "unrunnable" not in out
    assert out.count(" ok\n") >= 5  # every brick checked, in MXNet
    code, out = _run("decompose", str(export), "--input-shape", SHAPE, "--framework", "mxnet", "--json")
    assert code == 0 and all(b["runnable"] for b in json.loads(out)["bricks"])


def test_an_mxnet_brick_mxnet_cannot_run_is_reported() -> None:
    import onnx

    from dlbricks.mxnet_bricks import check_mxnet_runnable

    graph = dlbricks.load_model(mx.sym.relu(mx.sym.var("data"), name="r"), input_shapes={"data": (2, 3)})
    brick = next(iter(dlbricks.decompose(graph).bricks.values()))
    assert check_mxnet_runnable(brick) is None
    model = onnx.load_model_from_string(brick.to_bytes())
    model.graph.node[0].op_type = "NoSuchMxnetOp"
    reason = check_mxnet_runnable(dlbricks.Brick.from_bytes(model.SerializeToString()))
    assert reason and "NoSuchMxnetOp" in reason and "\n" not in reason


def test_the_wrong_framework_is_one_line_that_names_the_right_one(export: Path) -> None:
    code, out = _run("decompose", str(export), "--input-shape", SHAPE, "--framework", "onnxruntime")
    assert code == 2 and out.strip().count("\n") == 0
    assert "--framework mxnet" in out


def test_errors_advise_cli_syntax(export: Path) -> None:
    for command in (["decompose"], ["validate", "--db", "unused.db"], ["estimate", "--db", "unused.db"]):
        code, out = _run(*command, str(export))
        assert code == 2, out
        assert "--input-shape data=" in out and "input_shapes" not in out and "{" not in out, out


def test_repeated_node_names_load_made_unique(tmp_path: Path) -> None:
    path = _export(_Twice(), tmp_path, "twice", (1, 3, 8, 8))
    names = [n["name"] for n in json.loads(path.read_text())["nodes"] if n["op"] != "null"]
    assert len(names) == 2 and len(set(names)) == 1  # what GluonCV writes: MXNet runs it
    graph = dlbricks.load_model(path, input_shapes={"data": (1, 3, 8, 8)})
    assert len(graph) == 2 and len({la.name for la in graph.layers}) == 2
    code, out = _run("decompose", str(path), "--input-shape", "data=1,3,8,8")
    assert code == 0 and "layers: 2" in out, out


def test_a_symbol_file_without_its_params_says_so_in_one_line(export: Path, tmp_path: Path) -> None:
    alone = tmp_path / export.name
    alone.write_text(export.read_text())
    with pytest.warns(RuntimeWarning, match="no parameter file tiny-0000.params"):
        dlbricks.load_model(alone, input_shapes={"data": (1, 3, 16, 16)})
    code, out = _run("decompose", str(alone), "--input-shape", SHAPE, "--no-check")
    assert code == 0
    warned = [line for line in out.splitlines() if "parameter file" in line]
    assert len(warned) == 1 and warned[0].startswith("Warning: ")


def test_models_of_two_frameworks_in_one_run_are_refused(export: Path, tmp_path: Path) -> None:
    from tests._models import resnet_like

    onnx_path = tmp_path / "res.onnx"
    import onnx

    onnx.save(resnet_like(), onnx_path)
    code, out = _run("bench", str(export), str(onnx_path), "--input-shape", SHAPE, "--batch-size", "1",
                     "--db", str(tmp_path / "x.db"), "--dry-run")
    assert code == 2 and "in a run of their own" in out, out


def test_from_a_symbol_file_to_an_estimate_as_a_user_types_it(export: Path, tmp_path: Path) -> None:
    """decompose, bench, estimate, validate on an export, in a real process, no --framework given."""
    env = {k: v for k, v in os.environ.items() if k != "DLBRICKS_SYSTEM_ID"}  # estimate reads this machine's
    db = str(tmp_path / "cli.db")

    def dlb(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "dlbricks", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        return done.stdout

    assert "unique bricks" in dlb("decompose", str(export), "--input-shape", SHAPE)
    out = dlb("bench", str(export), "--input-shape", SHAPE, "--db", db, "--budget", "quick")
    assert "(0 failed)" in out
    assert "sequential estimate" in dlb("estimate", str(export), "--input-shape", SHAPE, "--db", db)
    assert "sequential estimate" in dlb("estimate", "tiny", "--db", db)  # stored: its framework from the db
    out = dlb("validate", str(export), "--input-shape", SHAPE, "--db", db, "--budget", "quick")
    assert "tiny" in out and "bounds hold" in out
