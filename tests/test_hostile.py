"""Bad input and faults, as a hostile user meets them: each gets one line and exit code 2 (130 for
Ctrl-C), no traceback, and every database is left as it was (same bytes, same measurement count,
``PRAGMA integrity_check`` ok). Through click's runner and through real subprocesses."""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from dlbricks.generators import collect_system_info
from tests._models import resnet_like, transformer_layer
from tests.test_db_support import ROOT, config, env, measurement

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals, rlimits and file modes")

DLBRICKS = str(Path(sys.executable).parent / "dlbricks")


# ----------------------------------------------------------------------------------- helpers
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _count(path: Path, *, immutable: bool = False) -> int:
    """Measurements in a database; ``immutable`` reads it without creating its WAL files."""
    conn = sqlite3.connect(f"file:{path}?mode=ro" + ("&immutable=1" if immutable else ""), uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])
    finally:
        conn.close()


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def _one_line_error(output: str, code: int, exit_code: int = 2) -> str:
    lines = output.strip().splitlines()
    assert code == exit_code, output
    assert "Traceback" not in output, output
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    return lines[0]


def invoke(*args: str) -> tuple[str, int]:
    """A CLI command's output (stdout and stderr) and exit code."""
    result = CliRunner().invoke(main, list(args))
    return result.output, result.exit_code


def _fill(db: Path, model: Path, *, status: str = "ok") -> None:
    """A database holding the model's bricks, measured by hand on this machine."""
    graph = dlbricks.load_model(model, batch_size=1)
    dec = dlbricks.decompose(graph)
    with Store.open(db) as store:
        store.models.add(dec, source=graph.source)
        for signature in dec.bricks:
            store.measurements.record(measurement(signature, median=2e-5, status=status, cfg=config()),
                                      collect_system_info())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a good model, a filled database, damaged copies and bad models."""
    folder = tmp_path_factory.mktemp("hostile")
    good = resnet_like(blocks=1, channels=8)
    onnx.save(good, folder / "good.onnx")
    onnx.save(transformer_layer(), folder / "other.onnx")
    _fill(folder / "good.db", folder / "good.onnx")
    _damaged_copies(folder)
    _bad_models(folder, good)
    (folder / "notes.txt").write_text("not a database\n" * 100)
    return folder


def _damaged_copies(folder: Path) -> None:
    good = folder / "good.db"
    shutil.copy(good, folder / "dropped.db")
    conn = sqlite3.connect(folder / "dropped.db")
    conn.execute("DROP TABLE model_bricks")
    conn.commit()
    conn.close()
    shutil.copy(good, folder / "pages.db")
    with open(folder / "pages.db", "r+b") as f:  # 8 KB of random bytes in the middle of the file
        f.seek(max(4096, good.stat().st_size // 2 - 4096))
        f.write(np.random.default_rng(0).bytes(8192))
    shutil.copy(good, folder / "blob.db")
    conn = sqlite3.connect(folder / "blob.db")
    conn.execute("UPDATE bricks SET onnx = ? WHERE rowid = (SELECT MIN(rowid) FROM bricks WHERE op_types "
                 "LIKE '%Conv%')", (b"\x0a\xff\xff\xff garbage",))
    conn.commit()
    conn.close()


def _variant(good: onnx.ModelProto, change: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(good)
    change(model)
    return model


def _bad_models(folder: Path, good: onnx.ModelProto) -> None:
    def dup_node(m: onnx.ModelProto) -> None:
        m.graph.node[1].name = m.graph.node[0].name

    def dup_tensor(m: onnx.ModelProto) -> None:
        m.graph.node[2].output[0] = m.graph.node[1].output[0]

    def ir99(m: onnx.ModelProto) -> None:
        m.ir_version = 99

    def wrong_size(m: onnx.ModelProto) -> None:
        init = m.graph.initializer[0]
        init.raw_data = numpy_helper.to_array(init).tobytes()[:-8]

    def zero_dim(m: onnx.ModelProto) -> None:
        m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 0

    for name, change in (("dup_node", dup_node), ("dup_tensor", dup_tensor), ("ir99", ir99),
                         ("wrong_size", wrong_size), ("zero_dim", zero_dim)):
        onnx.save(_variant(good, change), folder / f"{name}.onnx")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])
    shape = numpy_helper.from_array(np.array([4, 4], dtype=np.int64), "shape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")], "g", [x], [y],
                              [shape])
    reshape = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    reshape.ir_version = 8
    onnx.save(reshape, folder / "bad_reshape.onnx")
    (folder / "truncated.onnx").write_bytes((folder / "good.onnx").read_bytes()[:500])


@pytest.fixture()
def work(corpus: Path, tmp_path: Path) -> Path:
    """A private copy of the corpus (commands may not damage it, but a test must not depend on that)."""
    for item in corpus.iterdir():
        shutil.copy(item, tmp_path / item.name)
    return tmp_path


# ----------------------------------------------------------------------------------- bad models
BAD_MODELS = {"dup_node": "two nodes are named", "dup_tensor": "single static assignment",
              "ir99": "ir_version 99", "wrong_size": "raw_data size", "zero_dim": "size 0 at axis 2",
              "bad_reshape": "cannot reshape 6 elements", "truncated": "not a valid ONNX file"}


@pytest.mark.parametrize("name", sorted(BAD_MODELS))
@pytest.mark.parametrize("command", ["decompose", "estimate", "bench", "validate"])
def test_invalid_models_are_refused_and_the_db_is_untouched(work: Path, name: str, command: str) -> None:
    db = work / "good.db"
    before = (_digest(db), _count(db))
    model = str(work / f"{name}.onnx")
    args = {"decompose": ["decompose", model, "--batch-size", "1"],
            "estimate": ["estimate", model, "--batch-size", "1", "--db", str(db)],
            "bench": ["bench", model, "--batch-size", "1", "--db", str(db)],
            "validate": ["validate", model, "--batch-size", "1", "--db", str(db)]}[command]
    line = _one_line_error(*invoke(*args))
    assert BAD_MODELS[name] in line and f"{name}.onnx" in line, line
    assert (_digest(db), _count(db)) == before


def test_a_bad_model_never_creates_the_database(work: Path) -> None:
    for args in (["bench", str(work / "missing.onnx"), "--db", str(work / "new.db")],
                 ["bench", str(work / "ir99.onnx"), "--db", str(work / "new.db")],
                 ["estimate", str(work / "good.onnx"), "--batch-size", "1", "--db", str(work / "typo.db")],
                 ["db", "stats", "--db", str(work / "typo.db")]):
        _one_line_error(*invoke(*args))
    assert not (work / "new.db").exists() and not (work / "typo.db").exists()


# ----------------------------------------------------------------------------------- damaged databases
DAMAGED = {"dropped": "table model_bricks is missing", "pages": "is damaged", "blob": "does not decode"}


def _commands(work: Path, db: Path) -> dict[str, list[str]]:
    model = str(work / "good.onnx")
    return {"estimate": ["estimate", model, "--batch-size", "1", "--db", str(db)],
            "estimate by name": ["estimate", "good", "--db", str(db)],
            "stats": ["db", "stats", "--db", str(db)],
            "ops": ["db", "ops", "--db", str(db)],
            "export": ["db", "export", "--db", str(db), "--out", str(work / "out.csv")],
            "bench": ["bench", model, "--batch-size", "1", "--db", str(db), "--dry-run"],
            "validate": ["validate", model, "--batch-size", "1", "--db", str(db)],
            "calibrate": ["calibrate", "--db", str(db)],
            "merge": ["db", "merge", str(db), "-o", str(work / "merged.db")]}


#: Which commands read what the blob case damages (a brick's bytes): the others never decode one.
BLOB_READERS = {"estimate by name"}


COMMANDS = ("estimate", "estimate by name", "stats", "ops", "export", "bench", "validate", "calibrate", "merge")


@pytest.mark.parametrize("case, command", [(case, command) for case in sorted(DAMAGED) for command in COMMANDS
                                           if case != "blob" or command in BLOB_READERS])
def test_damaged_databases_get_one_line_and_stay_as_they_were(work: Path, case: str, command: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dlbricks.cli._estimator.calibrate_peaks", _no_measuring)
    db = work / f"{case}.db"
    before = _digest(db)
    line = _one_line_error(*invoke(*_commands(work, db)[command]))
    assert DAMAGED[case] in line and str(db) in line and "db check" in line, line
    assert _digest(db) == before
    assert not (work / "out.csv").exists() and not (work / "merged.db").exists()


def _no_measuring(*args: object, **kwargs: object) -> None:
    raise AssertionError("calibrate measured before checking its database")


def test_db_check_reports_each_kind_of_damage(work: Path) -> None:
    output, code = invoke("db", "check", "--db", str(work / "good.db"))
    assert code == 0 and "ok" in output
    for case, problem in (("dropped", "missing table: model_bricks"), ("pages", "integrity:"),
                          ("blob", "does not decode")):
        before = _digest(work / f"{case}.db")
        output, code = invoke("db", "check", "--db", str(work / f"{case}.db"))
        assert code == 2 and problem in output and "Traceback" not in output, output
        assert output.strip().splitlines()[-1].startswith("Error: ")
        assert _digest(work / f"{case}.db") == before
    report = Store.check(work / "blob.db")
    assert not report.ok and len(report.bad_bricks) == 1 and report.integrity == ("ok",)


def test_files_that_are_not_dlbricks_databases(work: Path) -> None:
    other = work / "other_app.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE models (name TEXT)")  # a table name dlbricks uses, but not dlbricks'
    conn.commit()
    conn.close()
    for db, message in ((other, "another application"), (work / "notes.txt", "not a SQLite database")):
        before = _digest(db)
        for args in (["bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db), "--dry-run"],
                     ["db", "stats", "--db", str(db)], ["db", "check", "--db", str(db)]):
            line = _one_line_error(*invoke(*args))
            assert message in line and "writable" not in line, line
        assert _digest(db) == before


# ----------------------------------------------------------------------------------- outputs
def test_export_never_overwrites_a_database_or_a_file(work: Path) -> None:
    db = work / "good.db"
    other = work / "other.db"
    shutil.copy(db, other)
    (work / "link.db").symlink_to(db)
    before = {p: _digest(p) for p in (db, other)}
    for out, message in ((db, "is the database"), (work / "link.db", "is the database"),
                         (Path(str(db) + "-wal"), "is the database"), (other, "exists")):
        line = _one_line_error(*invoke("db", "export", "--db", str(db), "--out", str(out)))
        assert message in line, line
    assert {p: _digest(p) for p in before} == before and _count(db) == _count(other)
    assert not Path(str(db) + "-wal").exists() or _integrity(db) == "ok"
    output, code = invoke("db", "export", "--db", str(db), "--out", str(work / "m.csv"))
    assert code == 0, output
    line = _one_line_error(*invoke("db", "export", "--db", str(db), "--out", str(work / "m.csv")))
    assert "--force" in line
    output, code = invoke("db", "export", "--db", str(db), "--out", str(work / "m.csv"), "--force",
                          "--format", "json")
    assert code == 0 and (work / "m.csv").read_text().startswith("["), output
    assert not [p for p in work.iterdir() if p.name.endswith(".tmp")]


def test_merge_refuses_its_sources_as_output_and_names_a_damaged_input(work: Path) -> None:
    db = work / "good.db"
    before = _digest(db)
    line = _one_line_error(*invoke("db", "merge", str(db), "-o", str(db)))
    assert "is the database" in line
    (work / "alias.db").symlink_to(db)
    line = _one_line_error(*invoke("db", "merge", str(db), "-o", str(work / "alias.db")))
    assert "is the database" in line
    line = _one_line_error(*invoke("db", "merge", str(db), str(work / "pages.db"), "-o", str(work / "m.db")))
    assert str(work / "pages.db") in line and "damaged" in line
    assert _digest(db) == before and not (work / "m.db").exists()
    assert not [p for p in work.iterdir() if p.name.endswith(".partial")]


# ----------------------------------------------------------------------------------- values
@pytest.mark.parametrize("extra, message", [
    (["--threads", "0"], "0 is not in the range"),
    (["--threads", "100000"], "logical cores"),
    (["--sweep", "threads=0,1"], "between 1 and"),
    (["--moments", "1000"], "1000 is not in the range"),
    (["--system-id", "  "], "blank"),
])
def test_configuration_values_are_checked_before_the_db(work: Path, extra: list[str], message: str) -> None:
    db = work / "fresh.db"
    line = _one_line_error(*invoke("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db),
                                   *extra))
    assert message in line, line
    assert not db.exists()


def test_a_blank_system_id_is_refused_by_the_library() -> None:
    with Store(":memory:") as store, pytest.raises(dlbricks.InvalidArgumentError, match="non-blank"):
        store.systems.record(collect_system_info(), fingerprint=" ")


def test_nothing_to_measure_says_how_to_retry_failed_bricks(work: Path) -> None:
    db = work / "failed.db"
    _fill(db, work / "good.onnx", status="timeout")
    result = CliRunner().invoke(main, ["bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db)])
    assert result.exit_code == 0 and "Nothing to measure" in result.output, result.output
    assert "--retry-failed" in result.output


def test_estimate_takes_the_shapes_its_error_suggests(work: Path) -> None:
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, work / "sym.onnx")
    line = _one_line_error(*invoke("estimate", str(work / "sym.onnx"), "--db", str(work / "good.db")))
    assert "--input-shape x=" in line
    output, code = invoke("estimate", str(work / "sym.onnx"), "--input-shape", "x=2,8", "--db",
                          str(work / "good.db"), "--on-missing", "predict")
    assert code == 0 and "model sym:" in output and "predicted" in output, output


def test_estimate_without_measurements_gives_the_cli_options(work: Path) -> None:
    """A model with no measured brick: one line naming its options in CLI syntax, no Python keyword."""
    line = _one_line_error(*invoke("estimate", str(work / "other.onnx"), "--batch-size", "1", "--db",
                                   str(work / "good.db"), "--on-missing", "error"))
    assert "--on-missing predict or measure" in line and "on_missing" not in line, line


def test_ctrl_c_in_any_command_exits_130(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("dlbricks.cli._estimator.estimate", interrupt)
    output, code = invoke("estimate", str(work / "good.onnx"), "--batch-size", "1", "--db", str(work / "good.db"))
    assert code == 130 and output.strip() == "Interrupted.", output


# ----------------------------------------------------------------------------------- real processes
def _read_only(folder: Path, args: list[str]) -> list[str]:
    """A command that sees ``folder`` read-only: by its mode when not root; as root (whom modes do not
    stop), through a read-only bind mount in a private mount namespace."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return args
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder), *args]


def _run(args: list[str], preexec: Callable[[], None] | None = None,
         read_only: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [DLBRICKS, *args] if read_only is None else _read_only(read_only, [DLBRICKS, *args])
    return subprocess.run(command, capture_output=True, text=True, env=env(), timeout=300, preexec_fn=preexec)


def test_read_only_files_and_folders(work: Path) -> None:
    folder = work / "ro"
    folder.mkdir()
    for name in ("good.db", "good.onnx"):
        shutil.copy(work / name, folder / name)
        (folder / name).chmod(0o444)
    db = folder / "good.db"
    before = (_digest(db), _count(db, immutable=True))
    stats = _run(["db", "stats", "--db", str(db)], read_only=folder)
    assert stats.returncode == 0 and "measurements: " in stats.stdout, stats.stderr
    est = _run(["estimate", str(folder / "good.onnx"), "--batch-size", "1", "--db", str(db)], read_only=folder)
    assert est.returncode == 0 and "sequential estimate" in est.stdout, est.stderr
    bench = _run(["bench", str(folder / "good.onnx"), "--batch-size", "1", "--db", str(db), "--retry-failed"],
                 read_only=folder)
    line = _one_line_error(bench.stdout + bench.stderr, bench.returncode)
    assert "read-only" in line and str(db) in line, line
    new = _run(["bench", str(folder / "good.onnx"), "--batch-size", "1", "--db", str(folder / "new.db")],
               read_only=folder)
    assert "read-only" in _one_line_error(new.stdout + new.stderr, new.returncode)
    folder.chmod(0o755)
    assert sorted(p.name for p in folder.iterdir()) == ["good.db", "good.onnx"]
    assert (_digest(db), _count(db, immutable=True)) == before


def test_a_full_disk_stops_bench_with_one_line_and_loses_nothing(work: Path) -> None:
    db = work / "good.db"
    before = _count(db)
    limit = db.stat().st_size + 8192  # the file may not grow by more than 8 KB: the WAL fills it up

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = _run(["bench", str(work / "good.onnx"), str(work / "other.onnx"), "--batch-size", "1", "--db", str(db),
                   "--budget", "quick"], small_disk)
    line = _one_line_error(result.stdout + result.stderr, result.returncode)
    assert "disk may be full" in line and str(db) in line, line
    assert _integrity(db) == "ok" and _count(db) >= before


def _started(proc: subprocess.Popen[str]) -> list[str]:
    """Read the stderr of a process run with PYTHONPROFILEIMPORTTIME=1 until its console script has
    imported the launcher (the interpreter's own start, site and all, is done); the lines read."""
    lines = []
    for line in proc.stderr:  # type: ignore[union-attr]
        lines.append(line)
        if line.rstrip().endswith("| dlbricks_launcher"):
            break
    return lines


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8, 1.5])
def test_ctrl_c_at_start_up_exits_130_without_a_traceback(work: Path, delay: float) -> None:
    """Ctrl-C ``delay`` seconds after the interpreter has started the console script (a SIGINT within
    the interpreter's own start-up, before any of our code runs, is CPython's to report)."""
    db = work / "fresh.db"
    proc = subprocess.Popen([DLBRICKS, "bench", str(work / "good.onnx"), str(work / "other.onnx"), "--batch-size",
                             "1", "--db", str(db), "--budget", "quick"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**env(), "PYTHONPROFILEIMPORTTIME": "1"},
                            start_new_session=True)
    head = _started(proc)
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to the whole process group
    out, rest = proc.communicate(timeout=120)
    err = "".join(line for line in (*head, *rest.splitlines(keepends=True)) if not line.startswith("import time:"))
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "Traceback" not in err and "install onnxruntime" not in err, err
    assert err.strip().splitlines()[-1].startswith("Interrupted"), err
    if db.exists():
        assert _integrity(db) == "ok"
        con = sqlite3.connect(db)
        # Ctrl-C may land before the schema is written: the next run creates it in the same file
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'measurements'").fetchone():
            per_brick = con.execute("SELECT COUNT(*) FROM measurements GROUP BY signature").fetchall()
            assert all(n == 1 for (n,) in per_brick)
        con.close()


@pytest.mark.slow
@pytest.mark.untimed
def test_kill_9_at_twenty_random_moments_loses_and_duplicates_nothing() -> None:
    """benchmarks/kill9_soak.py: 20 kills -9 mid-run, each followed by the file's checks, then a run
    that finishes the job."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kill9_soak.py"), "--kills", "20"],
                            capture_output=True, text=True, env=env(), timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20 kills mid-run" in result.stdout and ": 0 with rows lost" in result.stdout, result.stdout
    assert "the last run finished the job" in result.stdout, result.stdout
