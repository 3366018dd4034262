"""A brick's context (the brick before it, its reuse distance) travels with its measurement: a model
whose context differs gets the brick measured again in its own, and its estimates use that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dlbricks
from dlbricks import InvalidArgumentError
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.schedule import out_of_context
from dlbricks.bricks import BrickContext
from dlbricks.decomposition import SCHEDULED_WEIGHT_BYTES
from dlbricks.estimator import estimate
from dlbricks.estimator.predict import floor_drift_s
from dlbricks.generators import Budget, OrtConfig

from . import _models

QUICK = Budget.quick()
MIB = 1 << 20
HIDDEN = 96  # a 36 KiB weight: above SCHEDULED_WEIGHT_BYTES


def _paths(tmp_path: Path) -> list[str]:
    """The distinct and the shared MatMul stack written as ONNX files, in that order."""
    paths = []
    for shared in (False, True):
        path = tmp_path / f"{'shared' if shared else 'distinct'}.onnx"
        path.write_bytes(_models.matmul_stack(shared, hidden=HIDDEN).SerializeToString())
        paths.append(str(path))
    return paths


def _decs(tmp_path: Path) -> tuple[dlbricks.Decomposition, dlbricks.Decomposition]:
    paths = _paths(tmp_path)
    return tuple(dlbricks.decompose(dlbricks.load_model(p)) for p in paths)  # type: ignore[return-value]


def _matmul(dec: dlbricks.Decomposition) -> str:
    return next(s for s, b in dec.bricks.items() if b.op_type == "MatMul")


def test_shared_weights_count_once_and_are_read_again_one_layer_later(tmp_path: Path) -> None:
    distinct, shared = _decs(tmp_path)
    weight = HIDDEN * HIDDEN * 4
    assert set(distinct.bricks) == set(shared.bricks)  # the same bricks: sharing is context, not signature
    assert len({o.weights for o in shared.occurrences if o.weights}) == 1
    assert len({o.weights for o in distinct.occurrences if o.weights}) == 4
    assert distinct.footprint_bytes() - shared.footprint_bytes() == 3 * weight
    sig = _matmul(shared)
    # between two reads of the shared weight only a Relu runs: no weights, the activations alive
    assert shared.reuse_bytes(sig) == shared.footprint_bytes() - weight
    assert distinct.reuse_bytes(sig) == distinct.footprint_bytes()
    assert shared.in_context(sig).context == BrickContext(None, shared.reuse_bytes(sig))


def test_a_chained_round_calls_a_brick_at_each_use_of_its_shared_weight(tmp_path: Path) -> None:
    """Where a brick's occurrences share a weight, a chained round calls every occurrence in the
    model's order; where they do not, each brick once."""
    distinct, shared = _decs(tmp_path)
    keys = list(dict.fromkeys(o.signature for o in shared.occurrences))
    assert distinct.schedule(keys) is None
    schedule = shared.schedule(keys)
    assert schedule is not None and len(schedule) == len(shared.occurrences)
    assert [keys[i] for i in schedule] == [o.signature for o in shared.occurrences]
    assert schedule.count(keys.index(_matmul(shared))) == 4


def test_a_chained_round_calls_once_a_brick_whose_uses_read_weights_of_their_own(tmp_path: Path) -> None:
    """Gemms that each read a weight of their own and share one bias (an exporter's merged constant)
    are called once a round; so is a shared weight small enough for the first-level cache."""
    for model in (_models.shared_bias_stack(), _models.matmul_stack(True, hidden=64)):
        dec = dlbricks.decompose(model)
        keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
        assert len(dec.occurrences) > len(keys) and dec.schedule(keys) is None
    assert 64 * 64 * 4 < SCHEDULED_WEIGHT_BYTES <= HIDDEN * HIDDEN * 4


def test_contexts_compare_by_previous_brick_and_cold_span() -> None:
    a = BrickContext("p", 1 * MIB)
    assert a.same_as(BrickContext("p", MIB + MIB // 4), cache_bytes=32 * MIB)
    assert not a.same_as(BrickContext("q", MIB), cache_bytes=32 * MIB)
    assert not a.same_as(BrickContext("p", 10 * MIB), cache_bytes=32 * MIB)
    # both beyond the cache: their cold copies span the same bytes
    assert BrickContext(None, 100 * MIB).same_as(BrickContext(None, 300 * MIB), cache_bytes=32 * MIB)
    assert BrickContext(None, None).same_as(BrickContext(None, 64 * MIB), cache_bytes=32 * MIB)
    assert BrickContext.from_json(a.to_json()) == a and BrickContext.from_json(None) is None
    with pytest.raises(InvalidArgumentError, match="contexts"):
        BenchOptions(contexts="sometimes")


def test_bench_measures_a_brick_again_where_its_context_differs(tmp_path: Path) -> None:
    distinct, shared = _decs(tmp_path)
    cfg = OrtConfig()
    with Store(tmp_path / "b.db") as store:
        first = populate(store, [distinct], [cfg], BenchOptions(budget=QUICK))
        assert first.in_context == 0 and first.measured == len(distinct.bricks)
        system = first.system
        sig = _matmul(distinct)
        row = store.measurements.bricks(system=system, config_id=cfg.config_id, signatures=[sig])[0]
        assert BrickContext.from_json(row.context) == distinct.in_context(sig).context

        second = populate(store, [shared], [cfg], BenchOptions(budget=QUICK))
        assert second.measured == 0 and second.in_context >= 1
        again = {r.key: r for r in store.measurements.in_context("shared", system=system)}
        assert sig in again and BrickContext.from_json(again[sig].context) == shared.in_context(sig).context
        assert store.measurements.in_context("distinct", system=system) == []
        assert out_of_context(store, shared, system, cfg.config_id, 32 * MIB) == []
        assert populate(store, [shared], [cfg], BenchOptions(budget=QUICK)).in_context == 0  # done once

        # the shared model's estimate uses its own context's time; the other model keeps the first
        by_brick = {c.signature: c for c in estimate(shared, store, system=system).breakdown}
        own = store.measurements.get(sig, system, cfg.config_id, model="shared")
        # a brick counts its time beyond the per-call floor, never below zero (this one is tiny)
        assert by_brick[sig].latency_s == pytest.approx(max(own.median_s - (own.floor_s or 0.0) - floor_drift_s(own), 0.0))
        first_m = store.measurements.get(sig, system, cfg.config_id)
        other = {c.signature: c for c in estimate(distinct, store, system=system).breakdown}
        assert other[sig].latency_s == pytest.approx(max(first_m.median_s - (first_m.floor_s or 0.0) - floor_drift_s(first_m), 0.0))


def test_reuse_leaves_stored_bricks_for_every_model(tmp_path: Path) -> None:
    distinct, shared = _decs(tmp_path)
    with Store(tmp_path / "r.db") as store:
        populate(store, [distinct], [OrtConfig()], BenchOptions(budget=QUICK))
        report = populate(store, [shared], [OrtConfig()], BenchOptions(budget=QUICK, contexts="reuse"))
        assert report.in_context == 0 and store.measurements.in_context("shared") == []


def test_cli_bench_says_what_it_measured_again_and_merge_keeps_it(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    db = str(tmp_path / "c.db")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dlbricks", *args], capture_output=True, text=True)

    assert cli("bench", paths[0], "--db", db, "--budget", "quick").returncode == 0
    out = cli("bench", paths[1], "--db", db, "--budget", "quick")
    assert out.returncode == 0, out.stderr
    assert "measured again in a model's own context" in out.stdout
    merged = str(tmp_path / "m.db")
    assert cli("db", "merge", db, "--out", merged).returncode == 0
    with Store(merged) as store:
        assert store.measurements.in_context("shared")
    est = cli("estimate", paths[1], "--db", db, "--json")
    assert est.returncode == 0, est.stderr
    assert json.loads(est.stdout)


def test_paired_validate_times_the_model_with_its_bricks_in_its_own_context(tmp_path: Path) -> None:
    """validate (paired by default) times the model with every brick in rounds: each brick's runs
    are stored in the model's context, one median a round; the first model's measurement is left."""
    from dlbricks.estimator import validate

    distinct, shared = _decs(tmp_path)
    with Store(tmp_path / "p.db") as store:
        system = populate(store, [distinct, shared], [OrtConfig()], BenchOptions(budget=QUICK)).system
        sig = _matmul(shared)
        first = store.measurements.get(sig, system, OrtConfig().config_id)
        v = validate(tmp_path / "shared.onnx", store, system=system, budget=QUICK)
        assert v.rounds is not None
        count = v.rounds.rounds.count
        assert v.measured.ok and v.measured.n == count >= 12  # the whole model's runs over the rounds
        after = store.measurements.get(sig, system, OrtConfig().config_id, model="shared")
        assert after.n == count  # in the model's own context...
        assert store.measurements.get(sig, system, OrtConfig().config_id).n == first.n  # ...not in the first model's
        assert v.estimate.breakdown and abs(v.error) < 1.0
        assert v.swing is not None and v.swing >= 1.0 and v.pairing is not None
        assert v.estimate.ci_low_s <= v.estimate.sequential_s <= v.estimate.ci_high_s


def test_paired_validate_times_every_brick_of_a_model_of_small_bricks(tmp_path: Path) -> None:
    """A model of many small bricks: every one of them is timed in the rounds beside the whole model,
    not only the largest; unpaired, validate leaves the stored bricks as they are."""
    from dlbricks.estimator import validate

    path = tmp_path / "widening.onnx"
    path.write_bytes(_models.widening_stack().SerializeToString())
    dec = dlbricks.decompose(dlbricks.load_model(str(path)))
    cfg = OrtConfig()
    with Store(tmp_path / "w.db") as store:
        system = populate(store, [dec], [cfg], BenchOptions(budget=QUICK)).system
        before = {s: store.measurements.get(s, system, cfg.config_id).n for s in dec.bricks}
        unpaired = validate(str(path), store, system=system, budget=QUICK, paired=False)
        assert unpaired.rounds is None and unpaired.swing is None
        assert not store.measurements.in_context(dec.model_key, system=system, config_id=cfg.config_id)
        v = validate(str(path), store, system=system, budget=QUICK)
        count = v.rounds.rounds.count
        own = {r.key: r.n for r in store.measurements.in_context(dec.model_key, system=system, config_id=cfg.config_id)}
        assert own == dict.fromkeys(dec.bricks, count)
        assert {s: store.measurements.get(s, system, cfg.config_id).n for s in dec.bricks} == before


def test_cli_per_brick_is_one_shape(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_models.matmul_stack(True).SerializeToString())
    out = subprocess.run([sys.executable, "-m", "dlbricks", "validate", str(path), "--db", str(tmp_path / "x.db"),
                          "--per-brick", "--batch-size", "1,2"], capture_output=True, text=True)
    assert out.returncode == 2 and "--per-brick" in out.stderr and "Traceback" not in out.stderr


def test_plan_lists_and_estimate_measures_bricks_stored_from_another_context(tmp_path: Path) -> None:
    from dlbricks.estimator import plan

    distinct, shared = _decs(tmp_path)
    cfg = OrtConfig()
    with Store(tmp_path / "e.db") as store:
        system = populate(store, [distinct], [cfg], BenchOptions(budget=QUICK)).system
        sig = _matmul(shared)
        before = plan(shared, store, system=system, budget=QUICK)
        again = [m for m in before.missing if m.why == "context"]
        assert sig in {m.signature for m in again} and not store.models.has(shared.model_key)
        assert all(m.predicted_s is not None and m.measure_s > 0 for m in again)

        est = estimate(shared, store, system=system, on_missing="measure", budget=QUICK)
        own = store.measurements.get(sig, system, cfg.config_id, model=shared.model_key)
        assert own is not None and own.ok  # measured in the shared model's context, kept for it
        by_brick = {c.signature: c for c in est.breakdown}
        # a brick counts its time beyond the per-call floor, never below zero (this one is tiny)
        assert by_brick[sig].latency_s == pytest.approx(max(own.median_s - (own.floor_s or 0.0) - floor_drift_s(own), 0.0))
        assert [m for m in plan(shared, store, system=system).missing if m.why == "context"] == []
        # reading only: a plain estimate measures nothing
        n = len(store.measurements.in_context(shared.model_key, system=system))
        estimate(shared, store, system=system)
        assert len(store.measurements.in_context(shared.model_key, system=system)) == n


def test_cli_plan_says_which_bricks_come_from_another_context(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    db = str(tmp_path / "p.db")
    run = [sys.executable, "-m", "dlbricks"]
    bench = subprocess.run([*run, "bench", paths[0], "--db", db, "--budget", "quick"], capture_output=True)
    assert bench.returncode == 0
    out = subprocess.run([*run, "plan", paths[1], "--db", db], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "0 of" in out.stdout and "in another model's context" in out.stdout
    assert "context" in out.stdout.split("why")[1]  # the table's rows say why
