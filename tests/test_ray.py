"""The Ray executor on a real local Ray cluster (two nodes on this machine, more added per test).

Run by the CI ray lane (``.ci/ray_lane.sh``, the ``distributed`` extra); skipped where ray is not
installed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import dlbricks
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.ray import RayExecutor
from dlbricks.cli._db import cli
from dlbricks.generators import Budget, collect_system_info
from tests._models import resnet_like
from tests.test_db_support import bench_command, env, rows, run, write_models

pytestmark = [pytest.mark.ray, pytest.mark.skipif(os.name != "posix", reason="signals and /proc")]
ray = pytest.importorskip("ray", reason="needs the distributed extra (pip install 'dlbricks[distributed]')")
from ray.cluster_utils import Cluster  # noqa: E402

MEASURED = "SELECT signature, system, id, created_at FROM measurements ORDER BY id"
#: What a Ray worker process is called while it runs the measuring actor's ``measure``.
MEASURING_TITLE = b"ray::_NodeMeasurer.measure"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head node and one more node, one CPU each; this process connected as a driver."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture
def extra_node(cluster: Cluster) -> Iterator[object]:
    """Adds one node with the given environment for one test; removed after it."""
    added = []

    def add(**env_vars: str) -> object:
        node = cluster.add_node(num_cpus=1, env_vars=env_vars)
        cluster.wait_for_nodes()
        added.append(node)
        return node

    yield add
    for node in added:
        cluster.remove_node(node)


def _decomposition(blocks: int, channels: int, name: str) -> dlbricks.Decomposition:
    return dlbricks.decompose(dlbricks.load_model(resnet_like(blocks=blocks, channels=channels), batch_size=1,
                                                  name=name))


def _per_brick(db: Path) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for sig, system, _, _ in rows(db, MEASURED):
        counts[(sig, system)] += 1
    return dict(counts)


def _check_complete(db: Path, systems: set[str]) -> None:
    """Every brick has exactly one measurement on each of ``systems``; no claim is left."""
    bricks = {r[0] for r in rows(db, "SELECT signature FROM bricks")}
    assert _per_brick(db) == {(b, s): 1 for b in bricks for s in systems}
    assert rows(db, "SELECT COUNT(*) FROM claims") == [(0,)]
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]


def test_every_brick_measured_once_never_two_at_once_on_a_node(cluster: Cluster, tmp_path: Path) -> None:
    db = tmp_path / "ray.db"
    decs = [_decomposition(3, 16, "res16"), _decomposition(2, 8, "res8")]
    executor = RayExecutor()
    seen = []
    with Store(db) as store:
        report = populate(store, decs, None, BenchOptions(budget=Budget.quick()),
                          executor=executor, progress=seen.append)
    here = collect_system_info().fingerprint  # every node of this cluster is this machine
    bricks = len({s for d in decs for s in d.bricks})
    assert (report.bricks, report.todo, report.measured, report.failed) == (bricks, bricks, bricks, 0)
    assert report.systems == (here,) and report.nodes == 2 and report.retried == report.lost == 0
    _check_complete(db, {here})
    assert rows(db, "SELECT fingerprint FROM systems") == [(here,)]  # identical nodes share one system
    assert [p.done for p in seen] == list(range(1, bricks + 1)) and seen[-1].eta_s == 0
    assert {p.node for p in seen} == {n.name for n in executor.nodes_}
    by_node = defaultdict(list)
    for r in executor.runs_:
        by_node[r.node_id].append((r.started, r.ended))
    assert len(by_node) == 2 and all(len(v) >= 2 for v in by_node.values())  # both nodes measured
    for intervals in by_node.values():  # never two measurements at once on one node
        intervals.sort()
        assert all(later[0] >= earlier[1] for earlier, later in zip(intervals, intervals[1:]))
    assert all(r.overhead_s >= 0 for r in executor.runs_)  # the node measured within the round trip

    with Store(db) as store:  # a second run finds everything measured
        again = populate(store, decs, None, BenchOptions(budget=Budget.quick()), executor=RayExecutor())
    assert again.todo == again.measured == 0 and len(rows(db, MEASURED)) == bricks


def test_each_node_measures_every_brick_on_every_kind_of_node(cluster: Cluster, extra_node: object,
                                                               tmp_path: Path) -> None:
    labelled = extra_node(DLBRICKS_SYSTEM_ID="other-machine")
    db = tmp_path / "each.db"
    dec = _decomposition(2, 8, "res8")
    executor = RayExecutor(each_node=True)
    with Store(db) as store:
        report = populate(store, [dec], None, BenchOptions(budget=Budget.quick()), executor=executor)
    here = collect_system_info().fingerprint
    assert set(report.systems) == {here, "other-machine"} and report.nodes == 3
    assert report.measured == 2 * len(dec.bricks)
    _check_complete(db, {here, "other-machine"})
    assert {r.system for r in executor.runs_ if r.node_id == labelled.node_id} == {"other-machine"}
    stored = dict(rows(db, "SELECT fingerprint, details FROM systems"))
    assert set(stored) == {here, "other-machine"} and "machine_fingerprint" in stored["other-machine"]


def test_a_node_with_another_onnxruntime_is_refused_with_one_line(cluster: Cluster, extra_node: object,
                                                                  tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "onnxruntime"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.0.0+fake"\n')
    odd = extra_node(PYTHONPATH=str(fake.parent))
    lines: list[str] = []
    db = tmp_path / "refused.db"
    dec = _decomposition(2, 8, "res8")
    with Store(db) as store:
        report = populate(store, [dec], None, BenchOptions(budget=Budget.quick()),
                          executor=RayExecutor(log=lines.append))
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(f"Ray node {odd.node_ip_address} ") and odd.node_id[:8] in lines[0]
    assert "refused" in lines[0] and "0.0.0+fake" in lines[0]
    assert report.nodes == 2 and report.measured == len(dec.bricks)  # the other nodes measured everything
    _check_complete(db, {collect_system_info().fingerprint})


def _kill_a_measuring_actor(killed: list[int], stop: threading.Event) -> None:
    """Kill -9 the first Ray worker found running the measuring actor's ``measure``."""
    while not stop.is_set() and not killed:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                title = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(MEASURING_TITLE):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
                return
        time.sleep(0.005)


def test_a_killed_worker_loses_only_its_brick_which_another_node_measures(cluster: Cluster,
                                                                          tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    dec = _decomposition(2, 8, "res8")
    lines: list[str] = []
    executor = RayExecutor(log=lines.append)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_a_measuring_actor, args=(killed, stop), daemon=True)
    budget = Budget(warmup_time=0.005, min_time=0.2, min_runs=5, max_time=0.3, timeout=20.0)
    with Store(db) as store:
        killer.start()
        try:
            report = populate(store, [dec], None, BenchOptions(budget=budget), executor=executor)
        finally:
            stop.set()
            killer.join()
    assert len(killed) == 1
    lost = [r for r in executor.runs_ if r.status == "lost"]
    assert len(lost) == 1 and report.retried == 1 and report.lost == 0
    again = [r for r in executor.runs_ if r.key == lost[0].key and r.status != "lost"]
    assert len(again) == 1 and again[0].status == "ok" and again[0].node_id != lost[0].node_id
    assert len(lines) == 1 and "measuring it again on another node" in lines[0]
    assert report.measured == len(dec.bricks)
    _check_complete(db, {collect_system_info().fingerprint})


def test_a_killed_driver_is_resumed_with_no_duplicate_rows(cluster: Cluster, tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    db = tmp_path / "driver.db"
    cmd = bench_command(db, paths["res16"], paths["tr"],
                        extra=("--min-time", "0.05", "--executor", "ray", "--address", cluster.address))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    deadline = time.monotonic() + 120
    while len(rows(db, MEASURED)) < 5:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "bench made no progress"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    before = {sig: (i, created) for sig, _, i, created in rows(db, MEASURED)}
    total = rows(db, "SELECT COUNT(*) FROM bricks")[0][0]
    assert 5 <= len(before) < total == 32

    rerun = run(cmd)
    assert rerun.returncode == 0, rerun.stderr
    assert f"Measured {total - len(before)} item(s)" in rerun.stdout and "on 2 Ray node(s)" in rerun.stdout
    after = {sig: (i, created) for sig, _, i, created in rows(db, MEASURED)}
    assert all(after[sig] == before[sig] for sig in before)  # nothing finished was measured again
    _check_complete(db, {collect_system_info().fingerprint})


@pytest.mark.parametrize(("args", "message"), [
    (("--each-node",), "--address and --each-node are options of --executor ray."),
    (("--executor", "ray", "--moments", "2"), "are for local runs"),
    (("--executor", "ray", "--system-id", "lab-1"), "set DLBRICKS_SYSTEM_ID in its environment"),
])
def test_bench_refuses_what_the_ray_executor_does_not_take(tmp_path: Path, args: tuple[str, ...],
                                                           message: str) -> None:
    paths = write_models(tmp_path)
    result = CliRunner().invoke(cli, ["bench", str(paths["res8"]), "--batch-size", "1", "--db",
                                      str(tmp_path / "x.db"), *args])
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_without_ray_installed_the_ray_executor_says_how_to_get_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    paths = write_models(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    result = CliRunner().invoke(cli, ["bench", str(paths["res8"]), "--batch-size", "1", "--db",
                                      str(tmp_path / "x.db"), "--executor", "ray"])
    assert result.exit_code == 2 and "pip install 'dlbricks[distributed]'" in result.output
    assert len(result.output.strip().splitlines()) == 1
