"""Real processes on one database file: kill -9 and resume, Ctrl-C, three benches at once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_db_support import bench_command, env, rows, run, write_models

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and kill -9")

MEASURED = "SELECT signature, id, created_at FROM measurements ORDER BY id"


def _wait_for_measurements(db: Path, proc: subprocess.Popen[str], at_least: int) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        count = len(rows(db, MEASURED))
        if count >= at_least:
            return count
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("bench made no progress")


def _check_complete(db: Path) -> None:
    """Every brick has exactly one measurement; no claim is left; the file is sound."""
    bricks = {r[0] for r in rows(db, "SELECT signature FROM bricks")}
    per_brick = dict(rows(db, "SELECT signature, COUNT(*) FROM measurements GROUP BY signature, "
                              "system, config_id"))
    assert set(per_brick) == bricks and set(per_brick.values()) == {1}
    assert rows(db, "SELECT COUNT(*) FROM claims") == [(0,)]
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]


def test_kill_9_midway_loses_nothing_finished_and_resumes(tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    db = tmp_path / "crash.db"
    cmd = bench_command(db, paths["res16"], paths["tr"], extra=("--min-time", "0.05"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    _wait_for_measurements(db, proc, 5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    before = {sig: (i, created) for sig, i, created in rows(db, MEASURED)}
    total = rows(db, "SELECT COUNT(*) FROM bricks")[0][0]
    assert 5 <= len(before) < total == 32
    # the killed process still holds the lease on the brick it was measuring: dead, so stale
    assert len(rows(db, "SELECT * FROM claims")) <= 1

    rerun = run(cmd)
    assert rerun.returncode == 0, rerun.stderr
    assert f"Measured {total - len(before)} item(s)" in rerun.stdout
    after = {sig: (i, created) for sig, i, created in rows(db, MEASURED)}
    assert all(after[sig] == before[sig] for sig in before)  # nothing finished was measured again
    _check_complete(db)


def test_ctrl_c_stops_after_the_current_brick_and_says_how_to_resume(tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    db = tmp_path / "int.db"
    cmd = bench_command(db, paths["tr"], extra=("--min-time", "0.05"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    _wait_for_measurements(db, proc, 3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Run the same command again to resume" in err and "Traceback" not in err
    done = len(rows(db, MEASURED))
    assert 3 <= done < 24 and rows(db, "SELECT COUNT(*) FROM claims") == [(0,)]
    rerun = run(cmd)
    assert rerun.returncode == 0 and f"Measured {24 - done} item(s)" in rerun.stdout
    _check_complete(db)


def test_three_processes_share_one_file(tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    db = tmp_path / "shared.db"
    jobs = [(paths["res16"], paths["tr"]), (paths["tr"], paths["res8"]), (paths["res8"], paths["res16b"])]
    procs = [subprocess.Popen(bench_command(db, *models), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env()) for models in jobs]
    results = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert "locked" not in err and "Traceback" not in err
    measured = [int(re.search(r"Measured (\d+) item", out).group(1)) for out, _ in results]
    total = rows(db, "SELECT COUNT(*) FROM bricks")[0][0]
    assert total == 8 + 24 + 8
    assert sum(measured) == total  # no brick was measured twice
    _check_complete(db)


def test_a_model_and_its_bricks_run_in_rounds_in_two_workers(tmp_path: Path) -> None:
    """Two real workers, the runner's and then a fresh one, each hold a model and time it with its
    bricks in rounds: one whole run and one short measurement of each brick a round, each brick's
    runs stored in the model's context (a real store), the whole model's runs returned; each
    process's rounds are labelled, and a model that cannot run gives no rounds."""
    import dlbricks
    from dlbricks.benchmarks_db import Store
    from dlbricks.benchmarks_db.rounds import measure_in_rounds
    from dlbricks.generators import Budget, OrtConfig, collect_system_info
    from dlbricks.generators.rounds import RoundsBudget
    from dlbricks.generators.runner import Runner
    from tests._models import resnet_like

    budget = Budget.quick()
    graph = dlbricks.load_model(resnet_like(1, 8), batch_size=1, name="r1")
    dec = dlbricks.decompose(graph)
    system = collect_system_info()
    rounds = RoundsBudget(min_rounds=5, max_rounds=5, min_time=0.0, max_time=5.0)
    with Store(tmp_path / "r.db") as store, Runner("onnxruntime", OrtConfig(), budget) as runner:
        store.models.add(dec)
        for sig in dec.bricks:
            store.measurements.record(runner.measure(dec.in_context(sig)), system)
        pid = runner.worker_pid
        result = measure_in_rounds(store, dec, runner, graph, system, budget=budget, rounds=rounds, processes=2)
        assert runner.worker_pid not in (None, pid)
        assert result is not None  # two workers at least, more while their ratios disagree
        workers = len(result.rounds.groups())
        assert 2 <= workers <= 4 and result.rounds.process == tuple(p for p in range(workers) for _ in range(5))
        assert result.whole.ok and result.whole.n == 5 * workers and result.whole.key == graph.key
        assert set(result.bricks) == set(dec.bricks) and result.keys[0] == dec.occurrences[0].signature
        own = store.measurements.in_context(dec.model_key, system=system, config_id=OrtConfig().config_id)
        assert {r.key for r in own} == set(dec.bricks) and all(r.n == 5 * workers for r in own)
        ratio, low, high = result.ratio()
        assert 0 < low <= ratio <= high
        assert runner.rounds_error is None
        assert measure_in_rounds(store, dec, runner, b"not an onnx model", system, rounds=rounds) is None
        assert runner.rounds_error and "\n" not in runner.rounds_error  # why, in one line


def test_chained_rounds_of_a_model_that_shares_weights_call_each_use(tmp_path: Path) -> None:
    """A real worker times a model whose four MatMuls read one weight in chained rounds: the shared
    MatMul's brick is called four times a round (its time the mean of its calls) and the Relu's four
    times too (every occurrence in the model's order), and the bricks' time counts every call; a
    model of four weights of their own calls each brick once."""
    import dlbricks
    from dlbricks.benchmarks_db import Store
    from dlbricks.benchmarks_db.rounds import measure_in_rounds
    from dlbricks.generators import Budget, OrtConfig, collect_system_info
    from dlbricks.generators.rounds import RoundsBudget
    from dlbricks.generators.runner import Runner
    from tests._models import matmul_stack

    system = collect_system_info()
    rounds = RoundsBudget(min_rounds=4, max_rounds=4, min_time=0.0, max_time=5.0, chained=True)
    for shared in (True, False):
        graph = dlbricks.load_model(matmul_stack(shared, hidden=96), name="shared" if shared else "distinct")
        dec = dlbricks.decompose(graph)
        with Store(tmp_path / f"{shared}.db") as store, Runner("onnxruntime", OrtConfig(), Budget.quick()) as runner:
            store.models.add(dec)
            result = measure_in_rounds(store, dec, runner, graph, system, rounds=rounds, processes=1, all_bricks=True)
        assert result is not None and result.rounds.count == 4
        assert result.rounds.calls == ((4, 4) if shared else ())
        r, each = result.rounds, result.rounds.calls or (1, 1)
        calls = sum(n * (sum(row) + sum(floor)) for n, row, floor in zip(each, r.bricks_s, r.empties_s, strict=True))
        assert r.bricks_timed_s() == pytest.approx(calls)
