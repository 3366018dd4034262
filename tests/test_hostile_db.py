"""Hostile databases, as a user meets them: columns dropped, impossible values, an older schema, a
dump and restore, merges of bad sources, hard links, kill -9, outputs that are databases, identifiers
that break tables, a missing Ray, a truncated file. Each refusal is one line with exit code 2, no
traceback, and the database keeps its bytes, its measurements and its models. Through click's runner
and through real subprocesses."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.generators import collect_system_info
from tests._models import resnet_like
from tests.test_db_support import config, env, measurement
from tests.test_hostile import _one_line_error, invoke


# ----------------------------------------------------------------------------------- helpers
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _state(path: Path) -> tuple[int, str, list[str]]:
    """What a database holds: its measurements, ``PRAGMA integrity_check``, its models' names."""
    count = int(_query(path, "SELECT COUNT(*) FROM measurements")[0][0])
    integrity = str(_query(path, "PRAGMA integrity_check")[0][0])
    return count, integrity, [str(r[0]) for r in _query(path, "SELECT name FROM models ORDER BY name")]


def _edit(path: Path, *statements: str) -> None:
    """Change a database behind dlbricks' back, as a user with the sqlite3 shell would."""
    conn = sqlite3.connect(path)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


def run(*args: str, **extra_env: str) -> tuple[str, int]:
    """``python -m dlbricks ARGS`` in a real process: its output (stdout and stderr) and exit code."""
    done = subprocess.run([sys.executable, "-m", "dlbricks", *args], capture_output=True, text=True,
                          env=env(**extra_env), timeout=300, check=False)
    return done.stdout + done.stderr, done.returncode


def _partials(folder: Path, out: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.startswith(f".{out.name}.") and ".partial" in p.name}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a small model and a database of its bricks, measured by hand on this machine."""
    folder = tmp_path_factory.mktemp("hostile_db")
    onnx.save(resnet_like(blocks=1, channels=8), folder / "good.onnx")
    graph = dlbricks.load_model(folder / "good.onnx", batch_size=1)
    dec = dlbricks.decompose(graph)
    with Store.open(folder / "base.db") as store:
        store.models.add(dec, source=graph.source)
        for signature in dec.bricks:
            store.measurements.record(measurement(signature, median=2e-5, cfg=config()), collect_system_info())
    return folder


@pytest.fixture()
def work(corpus: Path, tmp_path: Path) -> Path:
    """A private copy of the corpus."""
    for item in corpus.iterdir():
        shutil.copy(item, tmp_path / item.name)
    return tmp_path


# ----------------------------------------------------------------------------------- 5: db check
def test_a_missing_column_is_found_by_check_and_refused_by_bench_before_it_stores_anything(work: Path) -> None:
    db = work / "nocol.db"
    shutil.copy(work / "base.db", db)
    _edit(db, "ALTER TABLE measurements DROP COLUMN empty_s")
    before, state = _digest(db), _state(db)
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 2 and "missing column: measurements.empty_s" in output, output
    assert "restore a copy" in output.strip().splitlines()[-1]
    # another system: bench would store it, then fail on the first measurement
    line = _one_line_error(*run("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db),
                                "--budget", "quick", "--system-id", "another-machine"))
    assert str(db) in line and "lacks column empty_s" in line and "dlbricks db check" in line, line
    line = _one_line_error(*invoke("db", "stats", "--db", str(db)))
    assert "lacks column empty_s" in line
    assert _digest(db) == before and _state(db) == state
    assert _query(db, "SELECT COUNT(*) FROM systems") == [(1,)]


def test_impossible_values_are_found_by_check_and_marked_failed_by_upgrade(work: Path) -> None:
    db = work / "values.db"
    shutil.copy(work / "base.db", db)
    _edit(db, "UPDATE measurements SET median_s = -1 WHERE id = 1", "UPDATE measurements SET n = 0 WHERE id = 2",
          "UPDATE measurements SET ci_high_s = 9e999 WHERE id = 3",
          "UPDATE measurements SET min_s = 'fast' WHERE id = 4")
    before, state = _digest(db), _state(db)
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 2 and "Traceback" not in output, output
    for shown in ("median_s = -1.0", "n = 0", "ci_high_s = Inf", "min_s = 'fast'"):
        assert shown in output, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and f"dlbricks db upgrade --db {db}" in last and "--retry-failed" in last
    assert _digest(db) == before
    output, code = run("db", "upgrade", "--db", str(db))
    assert code == 0 and "marked 4 measurement(s)" in output and "--retry-failed" in output, output
    assert _state(db) == state
    assert _query(db, "SELECT id FROM measurements WHERE status = 'failed' ORDER BY id") == [(1,), (2,), (3,), (4,)]
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 0 and "ok" in output, output


def _make_version_8(db: Path) -> None:
    """The schema of dlbricks before migration 9: no ``empty_s`` columns, version 8."""
    _edit(db, *(f"ALTER TABLE {t} DROP COLUMN empty_s" for t in
                ("measurements", "model_measurements", "context_measurements")),
          "DELETE FROM schema_migrations WHERE version = 9", "PRAGMA user_version = 8")


def test_an_older_schema_is_named_by_check_with_the_command_that_migrates_it(work: Path) -> None:
    db = work / "old.db"
    shutil.copy(work / "base.db", db)
    _make_version_8(db)
    before, state = _digest(db), _state(db)
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 2 and "schema version 8 is older" in output, output
    assert f"dlbricks db upgrade --db {db}" in output.strip().splitlines()[-1]
    assert "db upgrade" in _one_line_error(*invoke("db", "stats", "--db", str(db)))
    assert _digest(db) == before
    output, code = run("db", "upgrade", "--db", str(db))
    assert code == 0 and "(was 8)" in output, output
    assert _state(db) == state
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 0 and "schema version 9" in output, output


# ----------------------------------------------------------------------------------- 6: dump and restore
def _dump_and_restore(source: Path, target: Path) -> None:
    """What ``sqlite3 SOURCE .dump | sqlite3 TARGET`` does: the tables' SQL and rows into a new file."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        dst.executescript("\n".join(src.iterdump()))
    finally:
        src.close()
        dst.close()


def test_a_dumped_and_restored_database_is_recognized_and_upgrade_writes_its_version_back(work: Path) -> None:
    db = work / "dumped.db"
    _dump_and_restore(work / "base.db", db)
    assert _query(db, "PRAGMA user_version") == [(0,)] and _query(db, "PRAGMA application_id") == [(0,)]
    state = _state(work / "base.db")
    output, code = invoke("db", "stats", "--db", str(db))
    assert code == 0 and "schema version 9" in output and "another application" not in output, output
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 2 and "dump and restore" in output, output
    assert f"dlbricks db upgrade --db {db}" in output.strip().splitlines()[-1]
    output, code = run("db", "upgrade", "--db", str(db))
    assert code == 0 and "wrote back the schema version" in output, output
    assert _query(db, "PRAGMA user_version") == [(9,)] and _query(db, "PRAGMA application_id") != [(0,)]
    assert _state(db) == state
    output, code = invoke("db", "check", "--db", str(db))
    assert code == 0, output


def test_a_dumped_database_merges_and_benches_as_the_original(work: Path) -> None:
    db = work / "dumped.db"
    _dump_and_restore(work / "base.db", db)
    output, code = invoke("db", "merge", str(db), "-o", str(work / "merged.db"))
    assert code == 0, output
    assert _state(work / "merged.db") == _state(work / "base.db")
    output, code = invoke("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db), "--dry-run")
    assert code == 0, output
    assert _state(db) == _state(work / "base.db")


# ----------------------------------------------------------------------------------- 7: merge
def test_merge_refuses_a_source_whose_brick_does_not_decode(work: Path) -> None:
    bad = work / "blob.db"
    shutil.copy(work / "base.db", bad)
    _edit(bad, "UPDATE bricks SET onnx = x'0affffff20676172626167' WHERE rowid = 1")
    out = work / "existing.db"
    shutil.copy(work / "base.db", out)
    before = {p: _digest(p) for p in (bad, out)}
    for target in (work / "new.db", out):
        line = _one_line_error(*invoke("db", "merge", str(work / "base.db"), str(bad), "-o", str(target)))
        assert str(bad) in line and "does not decode" in line and "db check" in line, line
    assert {p: _digest(p) for p in before} == before
    assert not (work / "new.db").exists() and not _partials(work, work / "new.db")


def test_merge_names_the_source_with_a_dangling_foreign_key(work: Path) -> None:
    bad = work / "dangling.db"
    shutil.copy(work / "base.db", bad)
    _edit(bad, "PRAGMA foreign_keys = OFF", "DELETE FROM bricks WHERE rowid = 2")
    out = work / "existing.db"
    shutil.copy(work / "base.db", out)
    before = {p: _digest(p) for p in (bad, out)}
    for target in (work / "new.db", out):
        line = _one_line_error(*run("db", "merge", str(bad), "-o", str(target)))
        assert str(bad) in line and "foreign key" in line and ".partial" not in line, line
    assert {p: _digest(p) for p in before} == before and not (work / "new.db").exists()
    with Store.open(out) as store, pytest.raises(dlbricks.errors.DatabaseError, match="dangling.db"):
        store.merge_from(bad)
    assert _state(out) == _state(work / "base.db")


def test_merge_and_export_refuse_a_hard_link_of_their_database(work: Path) -> None:
    db = work / "base.db"
    os.link(db, work / "hard.db")
    before, state = _digest(db), _state(db)
    line = _one_line_error(*invoke("db", "merge", str(db), "-o", str(work / "hard.db")))
    assert "is the database" in line and str(db) in line, line
    line = _one_line_error(*run("db", "export", "--db", str(db), "--out", str(work / "hard.db"), "--force"))
    assert "is the database" in line, line
    with Store.open(work / "hard.db") as store, pytest.raises(dlbricks.InvalidArgumentError, match="itself"):
        store.merge_from(db)
    assert _digest(db) == before and _state(db) == state


_STALLED_MERGE = """
import sys, time
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main

def stall(self, *args, **kwargs):
    print("merging", flush=True)
    time.sleep(300)

Store.merge_from = stall
main(sys.argv[1:])
"""


def _stalled_merge(source: Path, out: Path) -> subprocess.Popen[str]:
    """A real ``db merge`` process stopped inside its merge, its scratch database open."""
    proc = subprocess.Popen([sys.executable, "-c", _STALLED_MERGE, "db", "merge", str(source), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env())
    assert proc.stdout is not None and proc.stdout.readline().strip() == "merging"
    return proc


def test_the_next_merge_removes_what_a_merge_killed_with_kill_9_left(work: Path) -> None:
    out = work / "merged.db"
    running = _stalled_merge(work / "base.db", out)
    try:
        mine = _partials(work, out)
        killed = _stalled_merge(work / "base.db", out)
        left = _partials(work, out) - mine
        assert {Path(n).suffix for n in left} == {".partial", ".partial-wal", ".partial-shm"}, left
        killed.kill()  # SIGKILL
        killed.wait(timeout=30)
        assert killed.stdout is not None
        killed.stdout.close()
        assert _partials(work, out) == mine | left
        output, code = run("db", "merge", str(work / "base.db"), "-o", str(out))
        assert code == 0 and "Removed 3 scratch file(s)" in output, output
        assert _partials(work, out) == mine  # the running merge's files are kept
        assert _state(out) == _state(work / "base.db")
    finally:
        running.kill()
        running.wait(timeout=30)
        assert running.stdout is not None
        running.stdout.close()


# ----------------------------------------------------------------------------------- 8: export --force
def test_export_force_never_replaces_a_database(work: Path) -> None:
    db, other = work / "base.db", work / "ex.db"
    shutil.copy(db, other)
    (work / "link.csv").symlink_to(db)
    before, state = _digest(db), _state(db)
    for out, force in ((db, "--force"), (work / "link.csv", "--force"), (db, "")):
        args = ["db", "export", "--db", str(other), "--out", str(out), *([force] if force else [])]
        line = _one_line_error(*run(*args))
        assert "exists and is a SQLite database" in line and "never replaces" in line and str(out) in line, line
    line = _one_line_error(*invoke("db", "export", "--db", str(other), "--out", str(db), "--force"))
    assert "is a SQLite database" in line
    assert _digest(db) == before and _state(db) == state
    (work / "m.csv").write_text("old export\n")
    output, code = invoke("db", "export", "--db", str(other), "--out", str(work / "m.csv"), "--force")
    assert code == 0 and (work / "m.csv").read_text().startswith("id,"), output


# ----------------------------------------------------------------------------------- 10: identifiers
def test_a_system_id_with_control_characters_is_refused_before_the_database(work: Path) -> None:
    db, new = work / "base.db", work / "new.db"
    before, state = _digest(db), _state(db)
    hostile = "lab\n\x1b[31mred\x1b[0m"
    for target in (db, new):
        line = _one_line_error(*invoke("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(target),
                                       "--budget", "quick", "--system-id", hostile))
        assert "\x1b" not in line and "'lab\\n\\x1b[31mred" in line and "unprintable" in line, line
    assert not new.exists() and _digest(db) == before and _state(db) == state
    with Store.open(db) as store, pytest.raises(dlbricks.InvalidArgumentError, match="unprintable"):
        store.systems.record(collect_system_info(), fingerprint=hostile)
    assert _query(db, "SELECT COUNT(*) FROM systems") == [(1,)]


def test_a_system_id_of_100000_characters_is_refused_in_one_short_line(work: Path) -> None:
    db, new = work / "base.db", work / "new.db"
    before = _digest(db)
    for target in (db, new):
        line = _one_line_error(*run("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(target),
                                    "--budget", "quick", DLBRICKS_SYSTEM_ID="x" * 100_000))
        assert "100000 characters" in line and len(line) < 400, line[:500]
    assert not new.exists() and _digest(db) == before


def test_a_model_name_with_a_newline_is_refused_before_the_database(work: Path) -> None:
    model = work / "two\nlines.onnx"
    shutil.copy(work / "good.onnx", model)
    new = work / "new.db"
    line = _one_line_error(*invoke("bench", str(model), "--batch-size", "1", "--db", str(new), "--budget", "quick"))
    assert "'two\\nlines'" in line and "unprintable" in line, line
    assert not new.exists()


HOSTILE_NAMES = {"control": "lab\n\x1b[31mred\x1b[0m", "long": "m" * 100_000, "blank": "   "}
_WHY = {"control": "unprintable", "long": "100000 characters", "blank": "blank"}


@pytest.mark.parametrize("kind", sorted(HOSTILE_NAMES))
@pytest.mark.parametrize("command", ["estimate", "plan", "validate", "decompose", "bench"])
def test_every_command_refuses_a_model_name_that_would_break_its_tables(work: Path, kind: str,
                                                                       command: str) -> None:
    """A MODEL that is no file is a stored or zoo model's name: checked as bench checks names, in one
    short line, before any database is opened."""
    db, new = work / "base.db", work / "new.db"
    before, state = _digest(db), _state(db)
    extra = [] if command == "decompose" else ["--db", str(db)]
    line = _one_line_error(*invoke(command, HOSTILE_NAMES[kind], *extra))
    assert "The model name" in line and _WHY[kind] in line and "\x1b" not in line and len(line) < 400, line[:500]
    assert not new.exists() and _digest(db) == before and _state(db) == state


@pytest.mark.parametrize("command", ["estimate", "decompose", "plan"])
def test_a_model_file_whose_name_breaks_tables_is_refused_by_every_command(work: Path, command: str) -> None:
    """Estimate stores the model it measures, decompose and plan print its name: bench's check, everywhere."""
    model = work / "two\nlines\x1b[1m.onnx"
    shutil.copy(work / "good.onnx", model)
    db = work / "base.db"
    before, state = _digest(db), _state(db)
    extra = [] if command == "decompose" else ["--db", str(db)]
    line = _one_line_error(*invoke(command, str(model), "--batch-size", "1", *extra))
    assert "'two\\nlines\\x1b[1m'" in line and "unprintable" in line and "rename the model file" in line, line
    assert _digest(db) == before and _state(db) == state


def test_estimate_refuses_a_system_id_that_would_break_its_tables_before_measuring(work: Path) -> None:
    db = work / "base.db"
    before, state = _digest(db), _state(db)
    for system_id in ("lab\n\x1b[31mred", "x" * 100_000):
        for rule in ("auto", "measure", "error"):
            line = _one_line_error(*invoke("estimate", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db),
                                           "--on-missing", rule, "--system-id", system_id))
            assert "--system-id" in line and len(line) < 400 and "\x1b" not in line, line[:500]
    line = _one_line_error(*run("estimate", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db),
                                DLBRICKS_SYSTEM_ID="x" * 100_000))
    assert "100000 characters" in line and len(line) < 400, line[:500]
    assert _digest(db) == before and _state(db) == state


@pytest.mark.parametrize("option", ["--model", "--system", "--config"])
def test_db_ops_refuses_a_hostile_name_in_one_short_line(work: Path, option: str) -> None:
    db = work / "base.db"
    for value in HOSTILE_NAMES.values():
        line = _one_line_error(*invoke("db", "ops", "--db", str(db), option, value))
        assert line.startswith(f"Error: {option} ") and len(line) < 400 and "\x1b" not in line, line[:500]


def test_evaluate_refuses_a_hostile_suite_before_the_database(work: Path) -> None:
    """(A blank entry of the comma-separated list is no name: it is left out.)"""
    new = work / "new.db"
    for value in (HOSTILE_NAMES["control"], HOSTILE_NAMES["long"]):
        line = _one_line_error(*invoke("evaluate", "--suite", f"{value},nosuchmodel", "--db", str(new)))
        assert "The --suite model name" in line and len(line) < 400 and "\x1b" not in line, line[:500]
    assert not new.exists()


def test_the_library_refuses_to_store_or_look_up_a_hostile_model_name(work: Path) -> None:
    """store.models.add is where every command stores a model (validate and evaluate too)."""
    db = work / "base.db"
    state = _state(db)
    graph = dlbricks.load_model(work / "good.onnx", batch_size=1, name="two\nlines")
    with Store.open(db) as store:
        with pytest.raises(dlbricks.InvalidArgumentError, match="The model name 'two\\\\nlines' has the unprintable"):
            store.models.add(dlbricks.decompose(graph), source=graph.source)
        with pytest.raises(dlbricks.InvalidArgumentError, match="100000 characters long") as caught:
            store.models.get("m" * 100_000)
        assert len(str(caught.value)) < 400
    assert _state(db) == state


def test_a_path_too_long_for_the_system_is_one_line(work: Path) -> None:
    long = str(work / ("p" * 5000))
    for args in (["db", "stats", "--db", long], ["db", "merge", str(work / "base.db"), "-o", long],
                 ["bench", str(work / "good.onnx"), "--batch-size", "1", "--db", long, "--dry-run"]):
        line = _one_line_error(*invoke(*args))
        assert "too long" in line and len(line) < 400, line[:500]


# ----------------------------------------------------------------------------------- 12: ray, truncated file
def test_bench_on_ray_without_ray_touches_no_database(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    db, new = work / "base.db", work / "new.db"
    before, state = _digest(db), _state(db)
    for target in (new, db):
        line = _one_line_error(*invoke("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(target),
                                       "--budget", "quick", "--executor", "ray"))
        assert "needs ray" in line, line
    assert not new.exists() and _digest(db) == before and _state(db) == state


@pytest.mark.parametrize("size", [100, 4096, "half"])
def test_a_truncated_database_is_called_incomplete_not_unwritable(work: Path, size: int | str) -> None:
    data = (work / "base.db").read_bytes()
    db = work / "truncated.db"
    db.write_bytes(data[:len(data) // 2 if size == "half" else int(size)])
    before = _digest(db)
    for args in (["db", "stats", "--db", str(db)], ["db", "check", "--db", str(db)],
                 ["bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db), "--dry-run"],
                 ["db", "merge", str(db), "-o", str(work / "merged.db")]):
        line = _one_line_error(*invoke(*args))
        assert str(db) in line and "not a valid or complete SQLite database" in line, line
        assert "writable" not in line, line
    assert _digest(db) == before and not (work / "merged.db").exists()
