"""The Store: schema, round trips, queries, the duplicate rule, claims, merge and export."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sqlite3
import subprocess
import sys
import time

import pytest
import sqlite_utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlbricks.benchmarks_db as bdb
from dlbricks import InvalidArgumentError
from dlbricks.benchmarks_db import Store, _migrations
from dlbricks.benchmarks_db.records import ClaimStatus, RecordOutcome
from dlbricks.errors import DatabaseError
from dlbricks.generators import Measurement, OrtConfig
from tests.test_db_support import config, decompositions, measurement, system_info

SYS = system_info()


@pytest.fixture
def store() -> Store:
    s = Store(":memory:")
    for dec in decompositions():
        s.models.add(dec)
    s.systems.record(SYS)
    yield s
    s.close()


def signatures(index: int = 0) -> list[str]:
    return list(decompositions()[index].bricks)


def test_public_api_is_pinned() -> None:
    assert sorted(bdb.__all__) == sorted(["Store", "populate", "BenchOptions"])
    assert all(hasattr(bdb, name) for name in bdb.__all__)


# ----------------------------------------------------------------------------------- schema
def test_new_file_has_schema_wal_and_plain_tables(tmp_path) -> None:
    path = tmp_path / "a.db"
    with Store(path) as s:
        assert s.schema_version == _migrations.SCHEMA_VERSION
        assert s.db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        tables = set(s.db.table_names())
    assert {"systems", "backends", "bricks", "models", "model_bricks", "model_edges", "measurements",
            "model_measurements", "claims", "schema_migrations"} <= tables
    with Store(path) as s:  # opening again applies nothing twice
        assert s.db.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == _migrations.SCHEMA_VERSION
    # browsable with the sqlite-utils CLI that users already have
    out = subprocess.run([sys.executable, "-m", "sqlite_utils", "tables", str(path), "--counts"],
                         capture_output=True, text=True, check=True).stdout
    assert '"table": "measurements"' in out


def test_an_older_database_is_migrated_in_place(tmp_path) -> None:
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    db = sqlite_utils.Database(conn)
    db.executescript(_migrations._V1)  # the first release's schema
    conn.execute("INSERT INTO schema_migrations VALUES (1, '0001_initial', '2025-01-01T00:00:00Z')")
    conn.execute("INSERT INTO systems (fingerprint, cpu, details, first_seen) VALUES ('old', 'x', '{}', '')")
    conn.execute(f"PRAGMA application_id = {_migrations.APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="to migrate it"):
        Store(path, readonly=True)
    with Store(path) as s:
        assert s.schema_version == _migrations.SCHEMA_VERSION == 9
        assert [x.fingerprint for x in s.systems.all()] == ["old"]
        assert s.systems.peaks("old") is None
        names = [r[0] for r in s.db.execute("SELECT name FROM schema_migrations ORDER BY version")]
        assert names == ["0001_initial", "0002_peaks", "0003_model_reorders", "0004_fused_overheads",
                         "0005_contexts", "0006_queue_times", "0007_node_cost", "0008_repeat_time",
                         "0009_empty_time"]
        assert "context" in s.db["measurements"].columns_dict and s.db["context_measurements"].count == 0
        assert {"host_s", "device_s", "device_warm_s", "node_s", "repeat_s", "empty_s"} <= set(
            s.db["context_measurements"].columns_dict)
        assert s.systems.overheads("old", "cfg", ["sig"]) == {} and s.systems.reorder_price("old", "cfg") is None


def test_reorder_prices_per_system_and_configuration(store: Store) -> None:
    cfg = config().config_id
    store.systems.record_backend(config())
    assert store.systems.reorder_price(SYS, cfg) is None
    store.systems.record_reorder_price(SYS, cfg, [1000, 100_000], [2e-11, 4e-11])
    store.systems.record_reorder_price(SYS, cfg, [1000, 100_000], [3e-11, 5e-11])  # calibrated again
    assert store.systems.reorder_price(SYS, cfg) == ((1000, 100_000), (3e-11, 5e-11))
    with pytest.raises(InvalidArgumentError, match="must ascend"):
        store.systems.record_reorder_price(SYS, cfg, [100_000, 1000], [2e-11, 4e-11])
    with pytest.raises(DatabaseError, match="record_backend"):
        store.systems.record_reorder_price(SYS, "no-such-config", [1000], [2e-11])


def test_peaks_per_system(store: Store) -> None:
    assert store.systems.peaks(SYS) is None
    store.systems.record_peaks(SYS, 1e11, 2e10, {"threads": 1})
    store.systems.record_peaks(SYS.fingerprint, 2e11, 3e10, {"threads": 2})  # recalibrated
    found = store.systems.peaks(SYS)
    assert found[:2] == (2e11, 3e10) and found.details == {"threads": 2}
    assert store.stats().peaks == (found,)
    with pytest.raises(InvalidArgumentError):
        store.systems.record_peaks(SYS, -1.0, 1.0)
    with pytest.raises(DatabaseError, match="systems.record"):
        store.systems.record_peaks("unknown-box", 1.0, 1.0)


def test_newer_schema_is_refused_and_left_untouched(tmp_path) -> None:
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE bricks (signature TEXT)")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=f"newer than version {_migrations.SCHEMA_VERSION}"):
        Store(path)
    assert path.read_bytes() == before
    assert not (tmp_path / "new.db-wal").exists()


def test_bad_files_are_refused_without_writing(tmp_path) -> None:
    text = tmp_path / "notes.db"
    text.write_bytes(b"not sqlite at all " * 100)
    with pytest.raises(DatabaseError, match="not a SQLite database"):
        Store(text)
    assert text.read_bytes() == b"not sqlite at all " * 100
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="another application"):
        Store(other)
    with pytest.raises(DatabaseError, match="does not exist"):
        Store(tmp_path / "missing" / "x.db")
    with pytest.raises(DatabaseError, match="is a folder"):
        Store(tmp_path)
    with pytest.raises(DatabaseError, match="No database"):
        Store(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()


# ----------------------------------------------------------------------------------- round trips
def test_brick_round_trip_keeps_signature_and_specs(store: Store) -> None:
    for dec in decompositions():
        for sig, brick in dec.bricks.items():
            back = store.bricks.get(sig)
            assert back.signature == sig and back.op_types == brick.op_types
            assert back.inputs == brick.inputs and back.outputs == brick.outputs
            assert back.constants == brick.constants and back.flops == brick.flops
        records = {r.signature: r for r in store.bricks.records(list(dec.bricks))}
        for sig, brick in dec.bricks.items():
            assert records[sig].inputs == brick.inputs and records[sig].outputs == brick.outputs
            assert records[sig].bytes_moved == brick.bytes_moved
    assert store.bricks.get(signatures()[0]).check_runnable() is None


def test_model_graph_round_trip(store: Store) -> None:
    for dec in decompositions():
        assert store.models.occurrences(dec.model) == dec.occurrences
        assert set(store.models.dag(dec.model).edges) == set(dec.dag.edges)
        assert {r.signature: r.count for r in store.models.bricks(dec.model)} == dec.counts()
        back = store.models.decomposition(dec.model_key[:10])
        assert back.model == dec.model and set(back.bricks) == set(dec.bricks)
        assert back.inputs == dec.inputs


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def measurements(draw: st.DrawFn) -> Measurement:
    status = draw(st.sampled_from(["ok", "failed", "timeout"]))
    stat = finite if status == "ok" else st.none()
    cfg = OrtConfig(intra_op_num_threads=draw(st.integers(0, 8)),
                    graph_optimization_level=draw(st.sampled_from(["disable", "basic", "all"])),
                    allow_spinning=draw(st.booleans()))
    return Measurement(
        key=draw(st.sampled_from(signatures())), status=status,
        error=None if status == "ok" else draw(st.text(max_size=40)), n=draw(st.integers(0, 2**62)),
        min_s=draw(stat), median_s=draw(stat), mean_s=draw(stat), p90_s=draw(stat), p99_s=draw(stat),
        std_s=draw(stat), iqr_s=draw(stat), ci_low_s=draw(stat), ci_high_s=draw(stat | st.none()),
        wall_time_s=draw(finite), converged=draw(st.booleans()), backend="onnxruntime", config=cfg,
        floor_s=draw(finite | st.none()), node_s=draw(finite | st.none()),
        **{name: draw(finite | st.none()) for name in ("host_s", "device_s", "device_warm_s", "repeat_s")},
        samples_s=draw(st.none() | st.lists(finite, max_size=20).map(tuple)))


@pytest.fixture(scope="module")
def shared() -> Store:
    s = Store(":memory:")
    s.models.add(decompositions()[0])
    yield s
    s.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=measurements())
def test_measurement_round_trip_loses_nothing(shared: Store, m: Measurement) -> None:
    shared.measurements.record(m, SYS, rule="replace")
    assert shared.measurements.get(m.key, SYS.fingerprint, m.config.config_id) == m
    (rec,) = shared.measurements.bricks(signatures=[m.key], config_id=m.config.config_id)
    assert (rec.key, rec.n, rec.samples_s, rec.runtime) == (m.key, m.n, m.samples_s, "onnxruntime")


# ----------------------------------------------------------------------------------- duplicates
def test_duplicate_rule_best(store: Store) -> None:
    sig, cid = signatures()[0], config().config_id
    assert store.measurements.record(measurement(sig, status="failed"), SYS) is RecordOutcome.INSERTED
    assert store.measurements.record(measurement(sig, n=10), SYS) is RecordOutcome.REPLACED  # ok beats failed
    assert store.measurements.record(measurement(sig, status="failed"), SYS) is RecordOutcome.KEPT
    assert store.measurements.record(measurement(sig, n=5), SYS) is RecordOutcome.KEPT  # fewer samples
    assert store.measurements.record(measurement(sig, n=50, median=3e-5), SYS) is RecordOutcome.REPLACED
    (rec,) = store.measurements.bricks(signatures=[sig])
    assert (rec.n, rec.median_s, rec.config_id) == (50, 3e-5, cid)
    assert store.measurements.record(measurement(sig, n=1), SYS, rule="newest") is RecordOutcome.REPLACED
    assert len(store.measurements.bricks()) == 1


def test_record_needs_the_brick(store: Store) -> None:
    with pytest.raises(DatabaseError, match="models.add"):
        store.measurements.record(measurement("f" * 64), SYS)
    with pytest.raises(InvalidArgumentError):
        store.measurements.record(measurement(signatures()[0]), SYS, rule="coin-flip")


# ----------------------------------------------------------------------------------- queries
def test_unmeasured_and_measurement_queries(store: Store) -> None:
    sigs = signatures(1)
    cid = config().config_id
    store.measurements.record_many([measurement(s) for s in sigs[:5]], SYS)
    store.measurements.record(measurement(sigs[5], status="timeout"), SYS)
    assert store.measurements.unmeasured(SYS, cid, sigs) == sigs[6:]
    assert store.measurements.unmeasured(SYS, cid, sigs, retry_failed=True) == sigs[5:]
    assert store.measurements.unmeasured(SYS, config(2).config_id, sigs) == sigs
    assert len(store.measurements.unmeasured(SYS, cid)) == len(set(signatures(0)) | set(sigs)) - 6
    assert len(store.measurements.bricks(model="transformer_layer", system=SYS)) == 6
    assert store.measurements.bricks(model="resnet_like") == []
    assert len(store.measurements.bricks(status="ok")) == 5
    assert [s.fingerprint for s in store.systems.all()] == [SYS.fingerprint]
    assert [b.config_id for b in store.systems.backends()] == [cid]
    assert store.systems.backends()[0].options["intra_op_num_threads"] == 1


def test_model_lookup(store: Store) -> None:
    dec = decompositions()[0]
    assert store.models.get("resnet_like").key == dec.model_key
    assert store.models.get(dec.model_key[:8]).name == "resnet_like"
    with pytest.raises(InvalidArgumentError, match="No model 'vgg'"):
        store.models.get("vgg")
    other = type(dec)(model="resnet_like", model_key="0" * 64, granularity="layer", inputs=dec.inputs,
                      bricks=dec.bricks, occurrences=dec.occurrences, dag=dec.dag)
    with pytest.raises(InvalidArgumentError, match="another model named 'resnet_like' with the same inputs"):
        store.models.add(other)  # a name never moves to other content
    alias = type(dec)(model="alias", model_key=dec.model_key, granularity="layer", inputs=dec.inputs,
                      bricks=dec.bricks, occurrences=dec.occurrences, dag=dec.dag)
    store.models.add(alias)  # the same content under another name keeps its stored name
    assert "alias" not in [m.name for m in store.models.all()]
    assert store.models.stored_name(dec.model_key) == "resnet_like"
    batch = dataclasses.replace(dec.inputs[0], shape=(2, *dec.inputs[0].shape[1:]))
    store.models.add(dataclasses.replace(other, inputs=(batch, *dec.inputs[1:])))  # another batch size
    with pytest.raises(InvalidArgumentError, match="names 2 models"):
        store.models.bricks("resnet_like")


def test_summaries_and_stats(store: Store) -> None:
    dec = decompositions()[0]
    store.measurements.record_many([measurement(s, median=1e-5) for s in dec.bricks], SYS)
    ops = {o.op_type: o for o in store.measurements.op_summary(model="resnet_like")}
    counts = dec.counts()
    conv = [s for s, b in dec.bricks.items() if b.op_type == "Conv"]
    assert ops["Conv"].occurrences == sum(counts[s] for s in conv)
    assert ops["Conv"].total_median_s == pytest.approx(1e-5 * ops["Conv"].occurrences)
    assert sum(o.occurrences for o in ops.values()) == len(dec.occurrences)
    everything = store.measurements.op_summary()
    assert sum(o.bricks for o in everything) == store.stats().bricks
    assert sum(o.measured for o in everything) == len(dec.bricks)
    cov = {c.name: c for c in store.measurements.coverage(system=SYS, config_id=config().config_id)}
    assert cov["resnet_like"].fraction == 1.0 and cov["transformer_layer"].measured == 0
    stats = store.stats()
    assert (stats.models, stats.measurements, stats.measurements_ok) == (2, len(dec.bricks), len(dec.bricks))
    assert {c.name for c in stats.coverage} == {"resnet_like", "transformer_layer"}
    store.measurements.record(measurement(signatures()[0], cfg=config(2)), SYS)
    with pytest.raises(InvalidArgumentError, match="give both"):
        store.measurements.op_summary()


def test_whole_model_measurements(store: Store) -> None:
    dec = decompositions()[1]
    assert store.measurements.record_model(measurement(dec.model_key, median=1e-3), SYS) is RecordOutcome.INSERTED
    (rec,) = store.measurements.models(model="transformer_layer")
    assert (rec.kind, rec.key, rec.median_s) == ("model", dec.model_key, 1e-3)
    assert store.measurements.get(dec.model_key, SYS, config().config_id, kind="model").median_s == 1e-3


# ----------------------------------------------------------------------------------- claims
def test_claims_leases_and_release(store: Store) -> None:
    sig, cid = signatures()[0], config().config_id
    store.systems.record_backend(config())
    assert store.claims.take(sig, SYS, cid, "a") is ClaimStatus.CLAIMED
    assert store.claims.take(sig, SYS, cid, "a") is ClaimStatus.CLAIMED  # renewal
    assert store.claims.take(sig, SYS, cid, "b") is ClaimStatus.HELD
    assert [c.owner for c in store.claims.all()] == ["a"]
    store.measurements.record(measurement(sig), SYS, release="a")
    assert store.claims.all() == []
    assert store.claims.take(sig, SYS, cid, "b") is ClaimStatus.MEASURED
    other = signatures()[1]
    assert store.claims.take(other, SYS, cid, "a", lease_s=0.01) is ClaimStatus.CLAIMED
    time.sleep(0.02)
    assert store.claims.take(other, SYS, cid, "b") is ClaimStatus.CLAIMED  # the lease expired
    store.claims.release(other, SYS, cid, "b")
    assert store.claims.all(live_only=False) == []


def test_claim_of_a_dead_process_on_this_host_is_stale(store: Store) -> None:
    sig, cid = signatures()[2], config().config_id
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.db.conn.execute(
        "INSERT INTO claims VALUES (?, 'brick', ?, ?, 'ghost', ?, ?, ?, ?)",
        (sig, SYS.fingerprint, cid, bdb.store.HOST, dead.pid, time.time(), time.time() + 3600))
    assert store.claims.take(sig, SYS, cid, "me") is ClaimStatus.CLAIMED
    store.db.conn.execute("UPDATE claims SET owner = 'remote', host = 'elsewhere' WHERE item = ?", (sig,))
    assert store.claims.take(sig, SYS, cid, "me") is ClaimStatus.HELD  # another host: trust the lease


# ----------------------------------------------------------------------------------- merge, export
def _filled(path, info, sigs, **kwargs) -> None:
    with Store(path) as s:
        for dec in decompositions():
            s.models.add(dec)
        s.measurements.record_many([measurement(sig, **kwargs) for sig in sigs], info)


def test_merge_keeps_both_systems_and_each_brick_once(tmp_path) -> None:
    a, b, c = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "c.db"
    sys_a, sys_b = system_info("cpu-a"), system_info("cpu-b")
    _filled(a, sys_a, signatures(0) + signatures(1))
    _filled(b, sys_b, signatures(1))
    with Store(a) as s:
        s.systems.record_peaks(sys_a, 1e11, 2e10)
    with Store(c) as merged:
        ra = merged.merge_from(a)
        rb = merged.merge_from(b)
        assert (ra.systems, ra.bricks, ra.models, ra.measurements_added) == (
            1, len(set(signatures(0) + signatures(1))), 2, len(set(signatures(0) + signatures(1))))
        assert (rb.systems, rb.bricks, rb.models, rb.measurements_added) == (1, 0, 0, len(signatures(1)))
        again = merged.merge_from(b)
        assert (again.measurements_added, again.measurements_replaced) == (0, 0)
        assert again.measurements_kept == len(signatures(1))
        stats = merged.stats()
        assert len(stats.systems) == 2 and stats.bricks == ra.bricks
        assert stats.measurements == ra.measurements_added + rb.measurements_added
        assert merged.systems.peaks(sys_a)[:2] == (1e11, 2e10) and merged.systems.peaks(sys_b) is None
        assert merged.integrity_check() == "ok"
        with pytest.raises(InvalidArgumentError, match="into itself"):
            merged.merge_from(c)


def test_merge_rules_resolve_duplicates(tmp_path) -> None:
    sig = signatures()[0]
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _filled(a, SYS, [sig], n=100, median=1e-5)
    time.sleep(0.001)
    _filled(b, SYS, [sig], n=20, median=2e-5)  # newer, fewer samples
    for rule, median in (("best", 1e-5), ("newest", 2e-5), ("keep", 1e-5)):
        with Store(":memory:") as s:
            s.merge_from(a)
            report = s.merge_from(b, rule=rule)
            assert report.measurements_replaced + report.measurements_kept == 1
            assert s.measurements.bricks()[0].median_s == median


def test_export_csv_and_json(store: Store, tmp_path) -> None:
    store.measurements.record_many([measurement(s, samples=(1e-5, 2e-5)) for s in signatures()], SYS)
    buf = io.StringIO()
    assert store.export("csv", buf) == len(signatures())
    table = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert {r["op_type"] for r in table} == {b.op_type for b in decompositions()[0].bricks.values()}
    out = tmp_path / "bricks.json"
    assert store.export("json", out, table="bricks") == store.stats().bricks
    data = json.loads(out.read_text())
    assert isinstance(data[0]["inputs"], list) and "onnx" not in data[0]
    buf = io.StringIO()
    store.export("json", buf)
    assert json.loads(buf.getvalue())[0]["samples"] == [1e-5, 2e-5]
    with pytest.raises(InvalidArgumentError):
        store.export("xml", buf)
