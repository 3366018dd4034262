"""Hostile inputs refused before anything runs: sizes too large for this machine, float options that
are not finite numbers, negative row counts, a temporary folder with no room; and bricks written
with ``--no-weights`` that keep no value of the model but the ones their help names. Each refusal is
one line with exit code 2, no traceback, and every database is left as it was. Through click's
runner and through real subprocesses."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.bricks import SIGNATURE_KEY
from dlbricks.cli import main
from dlbricks.generators import collect_system_info
from dlbricks.inputs import random_inputs
from tests._models import resnet_like
from tests.test_db_support import config, env, measurement
from tests.test_hostile import _one_line_error, invoke

HUGE = "1000000000000"  # a batch no machine holds: 3 PB of input for the tiny model below


# ----------------------------------------------------------------------------------- helpers
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _db_state(path: Path) -> tuple[int, int, str]:
    """Measurements, failed measurements, and ``PRAGMA integrity_check`` of a database."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        total = int(conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])
        failed = int(conn.execute("SELECT COUNT(*) FROM measurements WHERE status != 'ok'").fetchone()[0])
        return total, failed, str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def _subprocess(args: list[str], extra_env: dict[str, str] | None = None,
                preexec: object = None) -> subprocess.CompletedProcess[str]:
    """``python -m dlbricks ARGS`` in a real process."""
    return subprocess.run([sys.executable, "-m", "dlbricks", *args], capture_output=True, text=True,
                          env=env(**(extra_env or {})), timeout=300, preexec_fn=preexec,  # type: ignore[arg-type]
                          check=False)


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    """A folder with a tiny model (symbolic batch) and a database holding its bricks at batch 1,
    measured by hand on this machine."""
    onnx.save(resnet_like(blocks=1, channels=8), tmp_path / "good.onnx")
    graph = dlbricks.load_model(tmp_path / "good.onnx", batch_size=1)
    dec = dlbricks.decompose(graph)
    with Store.open(tmp_path / "good.db") as store:
        store.models.add(dec, source=graph.source)
        for signature in dec.bricks:
            store.measurements.record(measurement(signature, median=2e-5, cfg=config()), collect_system_info())
    return tmp_path


# ----------------------------------------------------------------------------------- sizes
def test_decompose_refuses_a_batch_this_machine_cannot_hold() -> None:
    """Not a table of bricks marked "ok": one line with the model, the shape, the bytes, what to do."""
    output, code = invoke("decompose", "squeezenet1_1", "--batch-size", HUGE)
    line = _one_line_error(output, code)
    assert "squeezenet1_1" in line and f"{HUGE}x3x224x224" in line and "bytes" in line, line
    assert "--batch-size" in line and "--input-shape" in line and "--framework" not in line, line
    assert " ok" not in output


def test_a_shape_past_what_onnx_holds_is_one_line(work: Path) -> None:
    line = _one_line_error(*invoke("decompose", str(work / "good.onnx"), "--input-shape",
                                   "x=1,3,99999999999999999999999,16"))
    assert "'good'" in line and "larger than ONNX holds" in line, line


@pytest.mark.parametrize("extra", [["--out", "OUT"], ["--out", "OUT", "--no-weights"], ["--json"], ["--no-check"],
                                   ["--granularity", "fused"]], ids=" ".join)
def test_decompose_refuses_an_impossible_batch_whatever_it_would_do_with_the_bricks(work: Path,
                                                                                    extra: list[str]) -> None:
    """The issue's --batch-size 1000000000 (1.5 PB of bricks): whether decompose would write the bricks,
    print them as JSON, describe them unchecked or group them as onnxruntime fuses them, it refuses the
    same way, in one line naming the shape, the bytes and what to do; no folder is written, no brick is
    called "ok"."""
    out = work / "bricks"
    args = [str(out) if a == "OUT" else a for a in extra]
    output, code = invoke("decompose", "squeezenet1_1", "--batch-size", "1000000000", *args)
    line = _one_line_error(output, code)
    assert "1000000000x3x224x224" in line and "more than this machine's" in line and "--batch-size" in line, line
    assert not out.exists()


def test_decompose_out_at_an_impossible_batch_in_a_real_process_writes_nothing(work: Path) -> None:
    out = work / "bricks"
    result = _subprocess(["decompose", str(work / "good.onnx"), "--batch-size", "1000000000", "--out", str(out)])
    line = _one_line_error(result.stdout + result.stderr, result.returncode)
    assert "'good'" in line and "1000000000x3x16x16" in line and "bytes" in line, line
    assert not out.exists()


def test_the_library_refuses_too_large_shapes_too(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_model refuses a tensor larger than the machine's memory; decompose a run whose weights
    and live activations are (here on a machine made small)."""
    with pytest.raises(dlbricks.InvalidArgumentError, match=r"model 'good' at input 'x' 1000000000000x3x16x16"):
        dlbricks.load_model(work / "good.onnx", batch_size=int(HUGE))
    with pytest.raises(dlbricks.InvalidArgumentError, match="input 'x' 1000000000000x3x16x16"):
        dlbricks.decompose(work / "good.onnx", input_shapes={"x": (int(HUGE), 3, 16, 16)})
    graph = dlbricks.load_model(work / "good.onnx", batch_size=64)
    needed = dlbricks.decompose(graph).footprint_bytes()
    largest = max(s.nbytes for s in graph.tensors.values())
    assert largest < needed
    monkeypatch.setattr("dlbricks.memory.memory_bytes", lambda: needed - 1)
    dlbricks.load_model(work / "good.onnx", batch_size=64)  # every tensor fits
    with pytest.raises(dlbricks.InvalidArgumentError, match=f"needs .* \\({needed} bytes\\) for one run"):
        dlbricks.decompose(graph)
    with pytest.raises(dlbricks.InvalidArgumentError, match="for one run"):
        dlbricks.decompose(graph, "fused")


def test_an_estimate_sweep_to_a_huge_batch_leaves_the_database_as_it_was(work: Path) -> None:
    """The issue's case: --batch-size 1,N under the default --on-missing auto on the user's database."""
    db = work / "good.db"
    before = (_digest(db), _db_state(db))
    line = _one_line_error(*invoke("estimate", str(work / "good.onnx"), "--db", str(db),
                                   "--batch-size", f"1,{HUGE}", "--budget", "quick"))
    assert f"{HUGE}x3x16x16" in line and "--batch-size" in line, line
    assert (_digest(db), _db_state(db)) == before
    assert before[1][1:] == (0, "ok")


def test_bench_at_a_huge_batch_stores_nothing(work: Path) -> None:
    db = work / "good.db"
    before = (_digest(db), _db_state(db))
    line = _one_line_error(*invoke("bench", str(work / "good.onnx"), "--batch-size", HUGE, "--db", str(db),
                                   "--budget", "quick"))
    assert "needs" in line and "memory" in line, line
    assert (_digest(db), _db_state(db)) == before


def test_a_huge_batch_in_a_real_process(work: Path) -> None:
    db = work / "good.db"
    before = (_digest(db), _db_state(db))
    result = _subprocess(["estimate", str(work / "good.onnx"), "--db", str(db), "--batch-size", f"1,{HUGE}"])
    line = _one_line_error(result.stdout + result.stderr, result.returncode)
    assert "more than this machine's" in line, line
    assert (_digest(db), _db_state(db)) == before


def test_a_memory_failure_is_not_blamed_on_the_framework() -> None:
    from dlbricks.cli._util import (
        failed_run_hint,  # for bench's message (cli/_db.py)
    )

    hint = failed_run_hint("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for "
                           "requested buffer of size 3072000000000", "onnxruntime")
    assert "--framework" not in hint and "--batch-size" in hint
    assert "--framework mxnet" in failed_run_hint("Could not find an implementation for Conv", "mxnet")


# ----------------------------------------------------------------------------------- --no-weights
def _secret_model() -> onnx.ModelProto:
    """A Gather of 500 int64 indices, a float scalar, an integer divisor, a bool mask and a shape."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(rng.standard_normal((1000, 16)).astype(np.float32), "table"),
             numpy_helper.from_array(rng.integers(0, 1000, 500).astype(np.int64), "indices"),
             numpy_helper.from_array(np.asarray(0.37, np.float32), "scale"),
             numpy_helper.from_array(rng.integers(3, 50, (500, 16)).astype(np.int64), "divisor"),
             numpy_helper.from_array(rng.random((500, 16)) < 0.3, "mask"),
             numpy_helper.from_array(np.asarray([16, 500], np.int64), "shape")]
    nodes = [helper.make_node("Gather", ["table", "indices"], ["g"], axis=0),
             helper.make_node("Mul", ["g", "scale"], ["m"]),
             helper.make_node("Cast", ["m"], ["mi"], to=TensorProto.INT64),
             helper.make_node("Div", ["mi", "divisor"], ["d"]),
             helper.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
             helper.make_node("Where", ["mask", "df", "x"], ["w"]),
             helper.make_node("Reshape", ["w", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "secret", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [500, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 500])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("granularity", ["layer", "fused"])
def test_no_weights_keeps_no_value_but_the_documented_ones(tmp_path: Path, granularity: str) -> None:
    """Every initializer written is synthetic but a Reshape's shape (which --help says is kept); each
    brick still runs, its gather's indices within range, and cut again keeps its signature."""
    model = tmp_path / "secret.onnx"
    onnx.save(_secret_model(), model)
    out = tmp_path / "bricks"
    output, code = invoke("decompose", str(model), "--out", str(out), "--no-weights", "--granularity", granularity)
    assert code == 0, output
    source = {t.name: numpy_helper.to_array(t) for t in _secret_model().graph.initializer}
    written_kinds = set()
    for path in sorted(out.iterdir()):
        written = onnx.load(path)
        signature = {p.key: p.value for p in written.metadata_props}[SIGNATURE_KEY]
        for tensor in written.graph.initializer:
            value = numpy_helper.to_array(tensor)
            written_kinds.add((value.dtype, value.shape))
            same = [name for name, old in source.items()
                    if old.dtype == value.dtype and old.shape == value.shape and old.tobytes() == value.tobytes()]
            read_by = [n.op_type for n in written.graph.node if tensor.name in n.input]
            assert same == (["shape"] if read_by == ["Reshape"] else []), (path.name, tensor.name, read_by)
        session = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, random_inputs(list(dlbricks.load_model(written).inputs), seed=0))
        if granularity == "layer":
            assert list(dlbricks.decompose(dlbricks.load_model(written)).bricks) == [signature]
    assert {(a.dtype, a.shape) for a in source.values()} <= written_kinds  # every constant was written
    help_text = invoke("decompose", "--help")[0]
    assert "a gather's indices" in " ".join(help_text.split()) and "Kept as they are: shapes" in " ".join(
        help_text.split())


# ----------------------------------------------------------------------------------- options
def _float_options() -> list[tuple[tuple[str, ...], str]]:
    """(command path, option) of every float option of the CLI."""
    found = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
            return
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, click.types.FloatParamType):
                found.append((path, param.opts[0]))

    walk(main, ())
    return found


def test_the_cli_has_float_options_to_check() -> None:
    assert {("bench", "--target-ci"), ("bench", "--min-time"), ("evaluate", "--target-ci")} <= {
        (" ".join(p), o) for p, o in _float_options()}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("path, option", _float_options(), ids=lambda x: " ".join(x) if isinstance(x, tuple) else x)
def test_every_float_option_refuses_what_is_not_a_finite_number(work: Path, path: tuple[str, ...], option: str,
                                                                value: str) -> None:
    db = work / "fresh.db"
    command = main.commands[path[0]]
    arguments = [str(work / "good.onnx")] if any(isinstance(p, click.Argument) for p in command.params) else []
    line = _one_line_error(*invoke(*path, *arguments, f"{option}={value}", "--db", str(db)))
    assert option in line and ("not a finite number" in line or "not in the range" in line), line
    assert not db.exists()


def test_target_ci_nan_in_a_real_process_creates_no_database(work: Path) -> None:
    db = work / "fresh.db"
    result = _subprocess(["bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db),
                          "--target-ci", "nan", "--dry-run"])
    line = _one_line_error(result.stdout + result.stderr, result.returncode)
    assert "'--target-ci'" in line and "nan is not a finite number" in line, line
    assert not db.exists()


@pytest.mark.parametrize("command", ["validate", "evaluate"])
def test_cuda_graphs_on_a_cpu_are_refused_before_the_database_is_opened(work: Path, command: str) -> None:
    db = work / "fresh.db"
    model = [str(work / "good.onnx"), "--batch-size", "1"] if command == "validate" else ["--suite", "squeezenet1_1"]
    line = _one_line_error(*invoke(command, *model, "--cuda-graph", "--db", str(db)))
    assert "CUDA graph" in line and "--device cuda" in line, line
    assert not db.exists()


@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_a_negative_top_is_refused(work: Path, command: str) -> None:
    db = work / "good.db"
    before = (_digest(db), _db_state(db))
    line = _one_line_error(*invoke(command, str(work / "good.onnx"), "--batch-size", "1", "--db", str(db),
                                   "--top", "-5"))
    assert "'--top'" in line and "-5" in line, line
    assert (_digest(db), _db_state(db)) == before


# ----------------------------------------------------------------------------------- temporary folder
def _wide_model(path: Path) -> None:
    """A model whose weights (256 KB) do not fit in a file of 64 KB."""
    w = numpy_helper.from_array(np.full((256, 256), 0.01, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def _small_files() -> None:
    """No file written may pass 64 KB: the temporary folder has no room for the optimized model."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))


@pytest.mark.parametrize("command", ["decompose", "bench"])
def test_a_full_temporary_folder_is_named_and_the_database_kept(work: Path, command: str) -> None:
    _wide_model(work / "wide.onnx")
    tmp = work / "tmp"
    tmp.mkdir()
    db = work / "good.db"
    before = (_digest(db), _db_state(db))
    extra = ["--db", str(db), "--budget", "quick"] if command == "bench" else []
    result = _subprocess([command, str(work / "wide.onnx"), "--granularity", "fused", *extra],
                         {"TMPDIR": str(tmp)}, _small_files)
    line = _one_line_error(result.stdout + result.stderr, result.returncode)
    assert str(tmp) in line and "TMPDIR" in line and "free space" in line and str(db) not in line, line
    assert (_digest(db), _db_state(db)) == before


def _many_bricks(db: Path, count: int = 3000) -> None:
    """Rows enough in ``bricks`` (copies of a stored row under other signatures, 3 KB of attributes
    each) that sorting them spills to SQLite's temporary files: ``db export --table bricks`` orders
    them by op type, which no index holds."""
    conn = sqlite3.connect(db)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(bricks)")]
        row = dict(zip(columns, conn.execute("SELECT * FROM bricks LIMIT 1").fetchone(), strict=True))
        rows = [[{**row, "signature": f"{k:064x}", "attributes": '{"pad":"' + "x" * 3000 + '"}'}[c] for c in columns]
                for k in range(count)]
        conn.executemany(f"INSERT INTO bricks ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", rows)
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("variable", ["TMPDIR", "SQLITE_TMPDIR"])
def test_sqlites_temporary_files_without_room_are_not_blamed_on_the_database(work: Path, variable: str) -> None:
    """A large sort of a database opened to read writes only SQLite's temporary files: where they find
    no room, the error names the temporary folder and the variable that chose it, not the database."""
    db = work / "good.db"
    _many_bricks(db)
    tmp = work / "tmp"
    tmp.mkdir()
    before = (_digest(db), _db_state(db))
    result = _subprocess(["db", "export", "--db", str(db), "--table", "bricks"], {variable: str(tmp)}, _small_files)
    line = _one_line_error(result.stderr, result.returncode)
    assert f"temporary folder {tmp} " in line and f"set {variable} to a folder with room" in line, line
    assert "disk may be full" not in line, line
    assert (_digest(db), _db_state(db)) == before


def test_a_write_without_room_is_blamed_on_the_fuller_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database written: its own folder where the temporary folder shares its file system or has more
    room (the disk message), the temporary folder where it is full or has less."""
    from dlbricks.tempdir import sqlite_temp_is_culprit

    temp, db = tmp_path / "tmp", tmp_path / "x.db"
    temp.mkdir()
    monkeypatch.delenv("SQLITE_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(temp))
    assert sqlite_temp_is_culprit(db, readonly=True) == str(temp)
    assert sqlite_temp_is_culprit(db, readonly=False) is None  # one file system: the disk is full
    room = {str(temp): 0, str(tmp_path): 10**9}
    monkeypatch.setattr("dlbricks.tempdir._device", lambda folder: 1 if str(folder) == str(temp) else 2)
    monkeypatch.setattr("dlbricks.tempdir.free_bytes", lambda folder: room[str(folder)])
    assert sqlite_temp_is_culprit(db, readonly=False) == str(temp)
    room[str(temp)] = 10**10
    assert sqlite_temp_is_culprit(db, readonly=False) is None
    from dlbricks.benchmarks_db.sql import is_failed_write

    assert not is_failed_write(sqlite3.OperationalError("disk I/O error"))  # a read: the database's own disk


def test_a_temporary_folder_with_no_room_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbricks.errors import TempDirError
    from dlbricks.tempdir import temporary_directory

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    no_room = f"in {tmp_path} \\(No space left on device\\); free space there"
    with pytest.raises(TempDirError, match=no_room), temporary_directory("x-") as folder:
        raise OSError(28, os.strerror(28), str(folder / "file"))
    with pytest.raises(OSError, match="elsewhere") as caught, temporary_directory("x-"):  # another folder's
        raise OSError(28, "elsewhere", "/dev/full")
    assert not isinstance(caught.value, TempDirError)
