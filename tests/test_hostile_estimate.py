"""Estimates of what cannot run are refused, and an estimate reads the system it is told to: one line,
exit code 2, the database unchanged."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import dlbricks
from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from dlbricks.estimator import estimate
from dlbricks.generators import Budget, collect_system_info
from tests.test_db_support import config, measurement
from tests.test_hostile import _count, _digest, _integrity, _one_line_error, corpus, invoke, work  # noqa: F401

pytestmark = pytest.mark.skipif(os.name != "posix", reason="as the hostile corpus")


def _unchanged(db: Path, digest: str, count: int) -> None:
    assert _digest(db) == digest and _count(db) == count and _integrity(db) == "ok"


def test_a_model_whose_channels_do_not_match_its_shapes_is_not_estimated(work: Path) -> None:
    db = work / "good.db"
    digest, count = _digest(db), _count(db)
    line = _one_line_error(*invoke("estimate", str(work / "good.onnx"), "--input-shape", "x=1,5,16,16", "--db",
                                   str(db), "--on-missing", "predict"))
    assert "does not run in onnxruntime at these shapes" in line and "--input-shape" in line, line
    _unchanged(db, digest, count)


def test_a_model_whose_layers_would_be_empty_is_not_estimated(work: Path) -> None:
    """SqueezeNet at 8x8 pixels: its later layers get 0x0 feature maps, which no runtime runs."""
    from dlbricks.model_zoo import build

    name = build("squeezenet1_1").graph.input[0].name
    db = work / "good.db"
    digest, count = _digest(db), _count(db)
    for rule in ("predict", "measure"):
        line = _one_line_error(*invoke("estimate", "squeezenet1_1", "--input-shape", f"{name}=1,3,8,8", "--db",
                                       str(db), "--on-missing", rule))
        assert "empty tensor" in line and "squeezenet1_1" in line, line
    _unchanged(db, digest, count)


def test_an_op_nothing_here_can_run_is_not_predicted(work: Path) -> None:
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="custom", domain="com.example")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x0"], ["x"], name="relu"), node], "custom",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    onnx.save(model, work / "custom.onnx")
    db = work / "good.db"
    digest, count = _digest(db), _count(db)
    line = _one_line_error(*invoke("estimate", str(work / "custom.onnx"), "--db", str(db), "--on-missing",
                                   "predict"))
    assert "cannot run in onnxruntime" in line and "Frobnicate" in line, line
    _unchanged(db, digest, count)


def test_estimate_reads_the_system_id_bench_recorded_under(work: Path) -> None:
    """A database filled under DLBRICKS_SYSTEM_ID (as 'bench' records it) is read under it by
    'estimate', from the environment or --system-id; without it, its bricks are not this machine's."""
    db = work / "lab.db"
    graph = dlbricks.load_model(work / "good.onnx", batch_size=1)
    dec = dlbricks.decompose(graph)
    with Store.open(db) as store:
        store.models.add(dec, source=graph.source)
        lab = store.systems.record(collect_system_info(), fingerprint="lab").fingerprint
        for signature in dec.bricks:
            store.measurements.record(measurement(signature, median=2e-5, cfg=config()), lab)
    digest, count = _digest(db), _count(db)
    args = ["estimate", str(work / "good.onnx"), "--batch-size", "1", "--db", str(db), "--on-missing", "error"]
    from_env = CliRunner().invoke(main, args, env={"DLBRICKS_SYSTEM_ID": "lab"})
    assert from_env.exit_code == 0 and "model good" in from_env.output, from_env.output
    assert "machine swing: the bricks' runs spread 1.000x while they were timed" in from_env.output
    given = CliRunner().invoke(main, [*args, "--system-id", "lab"])
    assert given.exit_code == 0 and given.output == from_env.output
    line = _one_line_error(*invoke(*args))
    assert f"{len(dec.bricks)} of {len(dec.bricks)} bricks" in line, line
    line = _one_line_error(*invoke(*args, "--system-id", " "))
    assert "--system-id" in line and "blank" in line
    _unchanged(db, digest, count)


def test_estimate_refuses_a_negative_top(work: Path) -> None:
    output, code = invoke("estimate", str(work / "good.onnx"), "--batch-size", "1", "--db", str(work / "good.db"),
                          "--top", "-5")
    assert code == 2 and "--top" in output and "Traceback" not in output


def _names(db: Path) -> list[str]:
    with Store.open(db, create=False, readonly=True) as store:
        return [m.name for m in store.models.all()]


def test_a_stored_model_is_never_relabelled_and_a_name_never_moves(work: Path) -> None:
    """A model's name labels its content: the same content benched under another file name keeps
    its stored name; other content under a stored name (same inputs) is refused; after a merge of
    two such databases, the name is ambiguous and estimate lists the models it names."""
    from tests._models import resnet_like

    onnx.save(resnet_like(blocks=1, channels=12), work / "other_net.onnx")
    onnx.save(resnet_like(blocks=1, channels=8), work / "alias.onnx")  # good.onnx's content
    db = work / "names.db"
    bench = ["bench", "--batch-size", "1", "--db", str(db), "--dry-run"]
    assert invoke(bench[0], str(work / "good.onnx"), *bench[1:])[1] == 0
    output, code = invoke(bench[0], str(work / "alias.onnx"), *bench[1:])
    assert code == 0 and "the same model (same content and inputs) as 'good'" in output, output
    assert _names(db) == ["good"]
    (work / "good.onnx").rename(work / "good_first.onnx")
    (work / "other_net.onnx").rename(work / "good.onnx")
    digest = _digest(db)
    line = _one_line_error(*invoke(bench[0], str(work / "good.onnx"), *bench[1:]))
    assert "another model named 'good' with the same inputs" in line and "rename" in line, line
    assert _digest(db) == digest and _names(db) == ["good"] and _integrity(db) == "ok"
    second = work / "second.db"
    assert invoke("bench", str(work / "good.onnx"), "--batch-size", "1", "--db", str(second), "--dry-run")[1] == 0
    merged = work / "merged.db"
    assert invoke("db", "merge", str(db), str(second), "-o", str(merged))[1] == 0
    assert _names(merged) == ["good", "good"]
    line = _one_line_error(*invoke("estimate", "good", "--db", str(merged), "--on-missing", "predict"))
    assert "'good' names 2 models" in line, line


HOLD_S = 4.0
HOLD = f"""
import fcntl, os, sys, tempfile, time
lock = open(os.path.join(tempfile.gettempdir(), "dlbricks-timing.lock"), "a+b")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep({HOLD_S})
"""
#: The longest the holder below keeps the lock; it lets go as soon as the test writes a line.
HOLD_MAX_S = 120.0
HOLD_UNTIL_TOLD = f"""
import fcntl, os, select, sys, tempfile
lock = open(os.path.join(tempfile.gettempdir(), "dlbricks-timing.lock"), "a+b")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
select.select([sys.stdin], [], [], {HOLD_MAX_S})
"""
WAITING = "for another dlbricks process timing on this machine"


def _blocked_on(path: str) -> bool:
    """Whether a process waits for an flock on ``path`` (Linux: a ``->`` line of /proc/locks naming
    its inode)."""
    inode = f":{os.stat(path).st_ino} "
    with open("/proc/locks") as locks:
        return any("->" in line and inode in line for line in locks)


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="tells a blocked flock from /proc/locks (Linux)")
def test_a_second_process_waits_for_the_one_timing_on_this_machine(work: Path) -> None:
    """Two processes timing at once share the cores and measure each other: a 'bench' started while
    another dlbricks process times waits for it, and says so once. The holder keeps the lock until
    the bench is seen waiting for it, then longer than the wait that is worth a line (a fixed hold
    ended before a loaded machine had the bench started and its model cut)."""
    import tempfile

    from dlbricks.generators.runner import LOCK_NOTICE_S

    holder = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_TOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lock = os.path.join(tempfile.gettempdir(), "dlbricks-timing.lock")
        bench = subprocess.Popen([sys.executable, "-m", "dlbricks", "bench", str(work / "good.onnx"), "--batch-size",
                                  "1", "--db", str(work / "new.db"), "--budget", "quick"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + HOLD_MAX_S / 2
        while not _blocked_on(lock) and bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        blocked = _blocked_on(lock)
        time.sleep(LOCK_NOTICE_S + 1.0)
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        _, stderr = bench.communicate(timeout=300)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert blocked, stderr
    assert bench.returncode == 0, stderr
    assert stderr.count(WAITING) == 1, stderr
    assert stderr.index(WAITING) < stderr.index("[1/"), stderr  # it waited before it timed a brick


def test_the_wait_for_another_process_is_in_no_measurement() -> None:
    """A measurement that waited for another process's timing does not count the wait in its wall
    time (the benchmarking time it adds up to); the process's wait is kept apart."""
    from dlbricks.generators import Budget, OrtConfig
    from dlbricks.generators.items import floor_model
    from dlbricks.generators.runner import Runner, lock_waited_s

    with Runner("onnxruntime", OrtConfig(), Budget.quick()) as runner:
        runner.floor()
        alone = runner.measure(floor_model())
        before = lock_waited_s()
        holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            start = time.monotonic()
            waited = runner.measure(floor_model())
            elapsed = time.monotonic() - start
        finally:
            holder.wait(timeout=30)
    assert alone.ok and waited.ok
    assert elapsed >= HOLD_S - 1.0  # it did wait
    assert lock_waited_s() - before >= HOLD_S - 1.0
    assert waited.wall_time_s < elapsed - (HOLD_S - 1.0)


# ----------------------------------------------------------------------------------- sizes the budget cannot hold
def _content(db: Path) -> tuple[int, int, str, list[str]]:
    """Measurements, failed ones, ``PRAGMA integrity_check`` and the models' names of a database."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        total, failed = conn.execute("SELECT COUNT(*), COUNT(*) FILTER (WHERE status != 'ok') "
                                     "FROM measurements").fetchone()
        names = [str(r[0]) for r in conn.execute("SELECT name FROM models ORDER BY name")]
    finally:
        conn.close()
    return int(total), int(failed), _integrity(db), names


def test_a_model_whose_one_run_outlasts_the_budget_is_refused_before_anything_is_stored(work: Path) -> None:
    """SqueezeNet at batch 1500, made quick: one run of the whole model takes longer than a measurement
    may (the budget's timeout), so none of its bricks could be measured: refused up front, naming the
    shape, not 35 bricks stored as failed and an estimate of the rest."""
    db = work / "good.db"
    digest, before = _digest(db), _content(db)
    graph = dlbricks.load_model(work / "good.onnx", batch_size=64)
    with pytest.raises(dlbricks.InvalidArgumentError,
                       match=r"one run of model 'good' at input 'x' 64x3x16x16 takes longer than the 0.001 s"):
        estimate(graph, db, on_missing="measure", budget=Budget(timeout=0.001))
    assert _digest(db) == digest and _content(db) == before


def test_a_brick_that_fails_when_measured_for_an_estimate_stops_it_and_is_not_stored(work: Path) -> None:
    """Bricks measured on demand that cannot be measured (each one's warm-up outlasts the budget's
    timeout here): the estimate stops at the first in one line, and its failure is not stored as the
    brick's, so a later bench or estimate measures it again."""
    db = work / "good.db"
    before = _content(db)
    dec = dlbricks.decompose(dlbricks.load_model(work / "good.onnx", batch_size=1))
    with pytest.warns(RuntimeWarning, match="Floor calibration failed"), pytest.raises(
            dlbricks.BackendError, match=r"brick \w{12} \(Conv\) of model 'good' at input 'x' 1x3x16x16 could not be "
                                         r"measured here \(timed out after 0.3 s\).*its failure is not stored"):
        estimate(dec, db, config=config(threads=2), on_missing="measure", budget=Budget(warmup_time=1.0, timeout=0.3))
    assert _content(db) == before
    with Store.open(db, readonly=True) as store:
        assert store.claims.all() == []


def test_the_costliest_bricks_are_tried_first_where_the_model_is_slow_against_the_budget(work: Path) -> None:
    """What check_runs does when one run of the model takes over a quarter of the budget's timeout: the
    bricks likeliest to be slowest are measured once, unstored, and one that cannot be is refused."""
    from dlbricks.estimator._runs import PROBE_SHARE, probe_bricks

    assert 0 < PROBE_SHARE < 1
    dec = dlbricks.decompose(dlbricks.load_model(work / "good.onnx", batch_size=1))
    with pytest.raises(dlbricks.InvalidArgumentError, match=r"brick \w{12} \(Conv\) of model 'good' at input 'x' "
                                                            r"1x3x16x16 cannot be measured here \(timed out after 0.3 s\)"):
        probe_bricks(dec, config(), "onnxruntime", Budget(warmup_time=1.0, timeout=0.3))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
