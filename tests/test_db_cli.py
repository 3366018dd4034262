"""The ``bench`` command and the ``db`` group (in-process, with click's CliRunner), and
:func:`populate` with a fake runner."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys
from pathlib import Path

import click
import onnx
import pytest
from click.testing import CliRunner

import dlbricks
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.records import ClaimStatus
from dlbricks.benchmarks_db.schedule import dominant_bricks
from dlbricks.cli._db import bench, cli, db
from tests._models import unrunnable_model
from tests.test_db_support import config, decompositions, measurement, system_info, write_models

SYS = system_info()


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_every_command_has_help() -> None:
    def walk(cmd: click.Command, path: list[str]) -> list[list[str]]:
        paths = [path]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                paths += walk(sub, [*path, name])
        return paths

    for path in walk(cli, []):
        result = invoke(*path, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output, path
    assert {"bench", "db"} == set(cli.commands) and bench.name == "bench" and db.name == "db"


# ----------------------------------------------------------------------------------- bad --db
def _newer(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 42")
    conn.execute("PRAGMA application_id = 1684824690")
    conn.commit()
    conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", [["bench", "{model}", "--batch-size", "1"], ["db", "stats"],
                                     ["db", "export"]])
def test_bad_db_is_one_line_exit_2_and_nothing_written(tmp_path: Path, command: list[str]) -> None:
    model = str(write_models(tmp_path)["res16"])
    text = tmp_path / "notes.txt"
    text.write_text("these are not the bricks you are looking for\n" * 50)
    newer = tmp_path / "newer.db"
    _newer(newer)
    bad = {"not sqlite": (text, "not a SQLite database"), "newer schema": (newer, "newer than"),
           "missing folder": (tmp_path / "nope" / "x.db", r"does not exist|No database"),
           "a folder": (tmp_path, "is a folder")}
    if Path("/proc/self").exists():
        bad["unwritable"] = (Path("/proc/dlbricks-test.db"), "")
    for case, (path, message) in bad.items():
        before = {p: _digest(p) for p in tmp_path.iterdir() if p.is_file()}
        result = CliRunner().invoke(cli, [c.format(model=model) for c in command] + ["--db", str(path)])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2, (case, result.output)
        assert len(lines) == 1 and lines[0].startswith("Error: "), (case, lines)
        assert re.search(message, lines[0]), (case, lines)
        assert "Traceback" not in result.output
        assert {p: _digest(p) for p in tmp_path.iterdir() if p.is_file()} == before, case
    assert not Path("/proc/dlbricks-test.db").exists()


def test_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    model = str(write_models(tmp_path)["res16"])
    dbfile = str(tmp_path / "x.db")
    for extra, message in ((["--sweep", "threads"], "is not KEY=V1,V2"),
                           (["--sweep", "colour=red"], "no field 'colour'"),
                           (["--sweep", "threads=two"], "expected a int"),
                           (["--min-time", "5", "--max-time", "1"], "must not exceed")):
        result = CliRunner().invoke(cli, ["bench", model, "--batch-size", "1", "--db", dbfile, *extra])
        assert result.exit_code == 2 and message in result.output, (extra, result.output)
        assert len(result.output.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------- bench
def test_bench_measures_resumes_and_sweeps(tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    dbfile = tmp_path / "b.db"
    common = ["bench", str(paths["res16"]), str(paths["res16b"]), "--batch-size", "1", "--db", str(dbfile),
              "--budget", "quick", "--system-id", "test-box"]
    first = invoke(*common, "--whole-model")
    assert first.exit_code == 0, first.output
    assert "Measured 10 item(s) (0 failed)" in first.output  # 8 unique bricks + 2 whole models
    assert "[1/10] brick" in first.output and "ETA" in first.output
    again = invoke(*common)
    assert "Nothing to measure" in again.output
    sweep = invoke(*common, "--sweep", "opt-level=disable,all", "--sweep", "threads=1,2")
    assert "Measured 24 item(s)" in sweep.output and "4 configuration(s)" in sweep.output
    with Store(dbfile) as s:
        assert len(s.systems.backends()) == 4 and [x.fingerprint for x in s.systems.all()] == ["test-box"]
        assert len(s.measurements.bricks()) == 32 and len(s.measurements.models()) == 2
        assert s.systems.all()[0].details["fingerprint_override"] is True
    plan = invoke(*common, "--dry-run", "--sweep", "opt-level=basic,all")
    assert plan.exit_code == 0 and "graph_optimization_level=basic" in plan.output
    stats = invoke("db", "stats", "--db", str(dbfile))
    assert "test-box" in stats.output and "100%" in stats.output
    data = json.loads(invoke("db", "stats", "--db", str(dbfile), "--json").output)
    assert data["measurements"] == 32
    ops = invoke("db", "ops", "--db", str(dbfile))
    assert ops.exit_code == 2 and "give both" in ops.output  # four configurations
    cfg = data["backends"][0]["config_id"]
    ops = invoke("db", "ops", "--db", str(dbfile), "--config", cfg, "--model", "res16")
    assert ops.exit_code == 0 and "Conv" in ops.output
    out = tmp_path / "m.csv"
    exported = invoke("db", "export", "--db", str(dbfile), "--out", str(out))
    assert exported.exit_code == 0 and len(out.read_text().splitlines()) == 33


def test_bench_measures_dominant_bricks_at_several_moments(tmp_path: Path) -> None:
    """Real onnxruntime runs: with --moments 3 the bricks that dominate res8 are measured twice
    more and stored pooled (all their runs' samples counted, one run's samples kept); the others once."""
    paths = write_models(tmp_path)
    common = ["bench", str(paths["res8"]), "--batch-size", "1", "--budget", "quick", "--system-id", "test-box",
              "--keep-samples"]
    once = invoke(*common, "--db", str(tmp_path / "m1.db"))
    assert once.exit_code == 0 and "further measurement" not in once.output
    thrice = invoke(*common, "--moments", "3", "--db", str(tmp_path / "m3.db"))
    assert thrice.exit_code == 0, thrice.output
    again = {k: set(re.findall(rf"brick (\w{{12}}) \S+ \({k}/3\)", thrice.output)) for k in (2, 3)}
    count = int(re.search(r"; (\d+) further measurement\(s\) of dominant bricks", thrice.output)[1])
    assert again[2] == again[3] and count == 2 * len(again[2]) > 0
    with Store(tmp_path / "m3.db") as s:
        rows = {r.key[:12]: r for r in s.measurements.bricks()}
        assert 0 < len(again[2]) < len(rows) == len(s.models.decomposition("res8").bricks)
    for key, row in rows.items():
        pooled = row.n > len(row.samples_s)  # three runs' samples counted, the middle run's kept
        assert pooled == (key in again[2]), key
    assert invoke(*common, "--moments", "0", "--db", str(tmp_path / "m0.db")).exit_code == 2


def test_failed_bricks_are_recorded_and_retried_on_request(tmp_path: Path) -> None:
    model = tmp_path / "unrunnable.onnx"
    onnx.save(unrunnable_model(), model)
    dbfile = tmp_path / "f.db"
    common = ["bench", str(model), "--db", str(dbfile), "--budget", "quick"]
    first = invoke(*common)
    assert first.exit_code == 0 and "(1 failed)" in first.output, first.output
    with Store(dbfile) as s:
        (failed,) = s.measurements.bricks(status="failed")
        assert failed.error and s.bricks.get(failed.key).signature == failed.key
    assert "Nothing to measure" in invoke(*common).output
    retry = invoke(*common, "--retry-failed")
    assert "Measured 1 item(s) (1 failed)" in retry.output
    with Store(dbfile) as s:
        (again,) = s.measurements.bricks(status="failed")
        assert again.id == failed.id and again.created_at > failed.created_at


def test_db_merge_command(tmp_path: Path) -> None:
    dbs = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.db"
        with Store(path) as s:
            s.models.add(decompositions()[0])
            s.measurements.record_many([measurement(x) for x in decompositions()[0].bricks], system_info(name))
        dbs.append(str(path))
    result = invoke("db", "merge", *dbs, "-o", str(tmp_path / "c.db"))
    assert result.exit_code == 0, result.output
    assert "2 systems, 8 bricks, 16 measurements" in result.output
    bad = CliRunner().invoke(cli, ["db", "merge", dbs[0], str(tmp_path / "none.db"), "-o",
                                   str(tmp_path / "d.db")])
    assert bad.exit_code == 2 and not (tmp_path / "d.db").exists()


# ----------------------------------------------------------------------------------- populate
class FakeRunner:
    """Measures instantly; counts what it measured."""

    measured: list[str] = []
    items: list[object] = []

    def __init__(self, backend: str, cfg: object, budget: object, keep_samples: bool) -> None:
        self.cfg = cfg

    def measure(self, item: object) -> object:
        FakeRunner.measured.append(item.key)
        FakeRunner.items.append(item)
        return measurement(item.key, cfg=self.cfg)

    def close(self) -> None:
        pass


def test_populate_stops_resumes_and_skips_held_bricks() -> None:
    FakeRunner.measured = []
    FakeRunner.items = []
    dec = decompositions()[1]
    sigs = list(dec.bricks)
    with Store(":memory:") as store:
        store.models.add(dec)
        store.systems.record(SYS)
        store.systems.record_backend(config())
        assert store.claims.take(sigs[4], SYS, config().config_id, "someone-else") is ClaimStatus.CLAIMED
        seen = []
        report = populate(store, [dec], [config()], system=SYS, runner_factory=FakeRunner,
                          progress=seen.append, should_stop=lambda: len(seen) >= 3)
        assert report.interrupted and report.measured == 3 and FakeRunner.measured == sigs[:3]
        assert [p.done for p in seen] == [1, 2, 3] and seen[-1].left == len(sigs) - 3
        report = populate(store, [dec], [config()], system=SYS, runner_factory=FakeRunner)
        assert not report.interrupted and report.held == 1 and report.duplicates == 0
        assert report.measured == len(sigs) - 4
        assert sorted(FakeRunner.measured) == sorted(set(sigs) - {sigs[4]})
        assert [c.owner for c in store.claims.all()] == ["someone-else"]  # ours were all released
        assert store.measurements.unmeasured(SYS, config().config_id, sigs) == [sigs[4]]
        # every brick goes to the runner with the brick before it in the model
        assert all(isinstance(i, dlbricks.bricks.BrickInContext) for i in FakeRunner.items)
        assert {i.key: i.previous for i in FakeRunner.items} == {
            i.key: dec.previous(i.key) for i in FakeRunner.items}
        assert any(i.previous is not None for i in FakeRunner.items)


def test_populate_releases_the_claim_when_interrupted_mid_brick() -> None:
    class Interrupting(FakeRunner):
        def measure(self, item: object) -> object:
            raise KeyboardInterrupt

    with Store(":memory:") as store:
        with pytest.raises(KeyboardInterrupt):
            populate(store, decompositions()[:1], [config()], system=SYS, runner_factory=Interrupting)
        assert store.claims.all(live_only=False) == []
        assert store.measurements.bricks() == []


def test_populate_measures_dominant_bricks_at_several_moments_and_pools_them() -> None:
    """Bricks holding 5% or more of their model's time run ``moments`` times, after the model's
    other new bricks, round robin; the stored row pools them (median of medians, all samples)."""
    first, second = decompositions()
    big = list(first.bricks)[:2]  # first model: two bricks 100x the others
    shared = set(first.bricks) & set(second.bricks)
    calls: list[str] = []

    class Timed(FakeRunner):
        def measure(self, item: object) -> object:
            calls.append(item.key)
            median = (100e-5 if item.key in big else 1e-5) * (1 + 0.1 * calls.count(item.key))
            return measurement(item.key, median=median, cfg=self.cfg)

    def once(dec: dlbricks.Decomposition) -> dict[str, float]:
        return {s: 1.1e-5 * (100 if s in big else 1) for s in dec.bricks}

    with Store(":memory:") as store:
        seen = []
        report = populate(store, [first, second], [config()], BenchOptions(moments=3), system=SYS,
                          runner_factory=Timed, progress=seen.append)
        n_first = len(first.bricks)
        dominant = dominant_bricks(first, once(first))
        assert set(dominant) == set(big)
        assert calls[:n_first] == list(first.bricks)  # the first model's bricks once, in order
        assert calls[n_first:n_first + 4] == dominant + dominant  # then its dominant ones, round robin
        new_in_second = [s for s in dominant_bricks(second, once(second)) if s not in shared]
        assert report.remeasured == 4 + 2 * len(new_in_second)
        assert report.measured == len(set(first.bricks) | set(second.bricks))
        for sig in big:
            row = store.measurements.get(sig, SYS, config().config_id)
            assert row.n == 30 and row.median_s == pytest.approx(100e-5 * 1.2)
        small = next(s for s in first.bricks if s not in big)
        assert calls.count(small) == 1 and store.measurements.get(small, SYS, config().config_id).n == 10
        assert [p.label for p in seen if p.label.endswith("/3)")][:2] == [
            f"{first.bricks[s].op_type} (2/3)" for s in dominant]
    assert dominant_bricks(first, {s: 1e-5 for s in first.bricks}, share=0.99) == []
    with pytest.raises(dlbricks.InvalidArgumentError, match="'moments' must be an int >= 1"):
        populate(Store(":memory:"), [first], [config()], BenchOptions(moments=0), system=SYS, runner_factory=Timed)


def test_dominant_bricks_with_a_cover_add_the_largest_until_they_hold_it() -> None:
    """A model of many small bricks has none of 5%; with ``cover`` its largest ones are chosen, largest
    first, until they hold that share of its time (as ``validate --paired`` asks)."""
    first, _ = decompositions()
    counts = first.counts()
    medians = {s: 1e-5 * (i + 1) / counts[s] for i, s in enumerate(first.bricks)}  # brick i holds i + 1 parts
    total = sum(counts[s] * medians[s] for s in first.bricks)
    share = 1.01 * max(counts[s] * medians[s] for s in first.bricks) / total  # above every brick
    assert dominant_bricks(first, medians, share=share) == []
    chosen = dominant_bricks(first, medians, share=share, cover=0.5)
    held = [counts[s] * medians[s] / total for s in chosen]
    assert held == sorted(held, reverse=True) and chosen[0] == list(first.bricks)[-1]
    assert sum(held) >= 0.5 > sum(held[:-1])  # the least that reach the cover
    assert dominant_bricks(first, medians, share=share, cover=1.0) == sorted(
        first.bricks, key=lambda s: -counts[s] * medians[s])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_run_where_every_brick_failed_is_a_failure_with_its_reason(tmp_path: Path) -> None:
    """Bricks that cannot run in the backend (here an int16 Relu onnxruntime has no kernel for) are
    recorded as failed, and the command says so in one line with exit code 2."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.INT16, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT16, [2, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "int16_relu", [x], [y])
    model = tmp_path / "int16_relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    db = tmp_path / "fail.db"
    result = CliRunner().invoke(cli, ["bench", str(model), "--db", str(db), "--budget", "quick"])
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert "every measurement of this run failed" in last and "Traceback" not in result.output
    assert "--framework onnxruntime" in last
    with Store(db) as store:  # what was measured is kept: the failure is recorded
        assert [r.status for r in store.measurements.bricks()] == ["failed"]


def test_bench_takes_framework_as_other_commands_call_it(tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    db = tmp_path / "fw.db"
    args = ["bench", str(paths["res8"]), "--batch-size", "1", "--db", str(db), "--dry-run"]
    by_framework = CliRunner().invoke(cli, [*args, "--framework", "onnxruntime"])
    by_backend = CliRunner().invoke(cli, [*args, "--backend", "onnxruntime"])
    assert by_framework.exit_code == 0 and by_backend.exit_code == 0, by_framework.output + by_backend.output
    assert by_framework.output == by_backend.output
    unknown = CliRunner().invoke(cli, [*args, "--framework", "nope"])
    assert unknown.exit_code == 2 and "nope" in unknown.output and "Traceback" not in unknown.output


def test_bench_whole_model_prints_the_cost_of_bricks_against_whole_models(tmp_path: Path) -> None:
    paths = write_models(tmp_path)
    db = tmp_path / "cost.db"
    result = CliRunner().invoke(cli, ["bench", str(paths["res8"]), "--batch-size", "1", "--db", str(db),
                                      "--budget", "quick", "--whole-model"])
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    found = re.match(r"benchmarking time: unique bricks ([\d.]+) s, whole models ([\d.]+) s: wall speedup "
                     r"([\d.]+)x; one run of every model ([\d.]+) ms, of every unique brick ([\d.]+) ms: "
                     r"([\d.]+)x \(DLBricks' compute ratio\)", line)
    assert found, line
    with Store(db) as store:
        bricks = sum(r.wall_time_s for r in store.measurements.bricks())
        whole = sum(r.wall_time_s for r in store.measurements.models())
    assert float(found[1]) == pytest.approx(bricks, abs=0.06) and float(found[2]) == pytest.approx(whole, abs=0.06)
