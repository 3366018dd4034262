"""The harness's stopping rules (fake clock, fake backend), statistics, records and registry."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import onnx
import pytest
from scipy import stats

from dlbricks import BackendError, InvalidArgumentError
from dlbricks.generators import (
    Backend,
    Budget,
    Measurement,
    OrtConfig,
    available_backends,
    get_backend,
    register_backend,
)
from dlbricks.generators._registry import unregister_backend
from dlbricks.generators.api import measure
from dlbricks.generators.floor import CHAIN_NODES, measure_floor, node_cost
from dlbricks.generators.harness import measure_model, time_calls
from dlbricks.generators.items import floor_model
from dlbricks.generators.measurement import OpaqueConfig
from dlbricks.generators.stats import median_ci, summarize
from tests.gen_fake_backends import FakeBackend, FakeClock, FakeConfig

US = 1_000
MS = 1_000_000


def _budget(**changes: float) -> Budget:
    base = Budget(
        warmup_time=0.001,
        min_time=0.01,
        min_runs=10,
        max_time=0.5,
        rel_ci=0.02,
        timeout=10.0,
        sample_time=5e-5,
    )
    return dataclasses.replace(base, **changes)


def _fake(duration_ns) -> tuple[FakeClock, FakeBackend]:
    clock = FakeClock()
    return clock, FakeBackend(clock, duration_ns)


def test_a_further_nodes_cost_is_paired_with_the_one_node_model() -> None:
    """The machine runs twice as slow from the moment the chain is prepared: timed apart, a further
    node would cost (2 x 19 - 3) / 32 = 1.09 us; timed beside the one-node model, its share of a
    one-node call, 0.5 / 3, scaled to the one-node measurement, keeps 0.5 us and a floor of 2.5 us."""
    clock = FakeClock()
    backend = FakeBackend(clock, lambda: 0)

    def duration(model: onnx.ModelProto) -> int:
        slow = 2.0 if any(len(p.model.graph.node) == CHAIN_NODES for p in backend.prepared) else 1.0
        return int(slow * (3.0 + 0.5 * (len(model.graph.node) - 1)) * US)

    backend.duration_for = duration
    m = measure_floor(backend, FakeConfig(), _budget(), clock=clock)
    assert m.median_s == pytest.approx(3e-6)
    assert m.node_s == pytest.approx(0.5e-6) and m.floor_s == pytest.approx(2.5e-6)


def test_floor_is_extrapolated_to_a_call_without_nodes() -> None:
    """One node: 3 us; each further node of the chain 0.5 us more: the floor is 2.5 us."""
    clock = FakeClock()
    backend = FakeBackend(clock, lambda: 0)
    backend.duration_for = lambda model: int((3.0 + 0.5 * (len(model.graph.node) - 1)) * US)
    m = measure_floor(backend, FakeConfig(), _budget(), clock=clock)
    assert m.ok and m.median_s == pytest.approx(3e-6) and m.floor_s == pytest.approx(2.5e-6)
    assert m.node_s == pytest.approx(0.5e-6)
    assert [len(p.model.graph.node) for p in backend.prepared] == [1, CHAIN_NODES, 1]  # the chain beside one node
    assert node_cost(3e-6, 2e-6, 5) == 0.0  # noise never makes it negative
    assert node_cost(1e-6, 9e-6, 5) == pytest.approx(2e-6)
    assert [n.op_type for n in floor_model(3).graph.node] == ["Identity", "Relu", "Relu"]
    with pytest.raises(InvalidArgumentError, match="'nodes' must be an int >= 1"):
        floor_model(0)


def test_converges_on_steady_timings() -> None:
    rng = np.random.default_rng(0)
    clock, backend = _fake(lambda: int(10 * US * (1 + 0.001 * rng.standard_normal())))
    m = measure(floor_model(), backend, budget=_budget(), clock=clock)
    assert m.status == "ok" and m.converged
    assert m.median_s == pytest.approx(10e-6, rel=0.01)
    assert m.ci_low_s <= m.median_s <= m.ci_high_s
    assert (m.ci_high_s - m.ci_low_s) / m.median_s <= 0.02
    assert m.n >= 10
    assert m.wall_time_s < 0.5  # stopped long before max_time


def test_noisy_timings_stop_at_max_time_unconverged() -> None:
    rng = np.random.default_rng(1)
    clock, backend = _fake(lambda: int(rng.uniform(0.5, 1.5) * MS))
    budget = _budget(max_time=0.3)
    start = clock()
    m = measure(floor_model(), backend, budget=budget, clock=clock)
    assert m.status == "ok" and not m.converged
    elapsed_s = (clock() - start) / 1e9
    assert 0.3 <= elapsed_s <= 0.3 + 0.01 + 0.01  # max_time + warm-up + one sample
    assert m.n >= 200


def test_min_runs_respected_for_slow_items() -> None:
    clock, backend = _fake(lambda: 50 * MS)
    m = measure(floor_model(), backend, budget=_budget(min_time=0.01, min_runs=10, max_time=5.0), clock=clock)
    assert m.converged and m.n == 10


def test_min_time_respected_for_fast_items() -> None:
    clock, backend = _fake(lambda: 1 * MS)
    budget = _budget(min_time=0.2, min_runs=2, max_time=5.0, sample_time=1e-6)
    timing = time_calls(backend.prepare(floor_model(), FakeConfig()).run, budget, clock)
    assert timing.converged
    assert timing.timed_s >= 0.2 and len(timing.samples_s) >= 200


def test_timing_tells_preparation_from_the_harness() -> None:
    clock, backend = _fake(lambda: 1 * MS)
    prepare = backend.prepare

    def slow_prepare(model, config):
        clock.advance(30 * MS)  # sessions, copies, buffers
        return prepare(model, config)

    backend.prepare = slow_prepare
    budget = _budget(min_time=0.01, min_runs=5, max_time=1.0)
    m, timing = measure_model(floor_model(), "k", backend, FakeConfig(), budget, clock=clock)
    assert timing.prepare_s == pytest.approx(0.03) and timing.copies == 1
    assert m.wall_time_s == pytest.approx(timing.prepare_s + timing.harness_s)
    assert timing.timed_s <= timing.sampling_s


def test_max_time_wins_over_min_runs() -> None:
    clock, backend = _fake(lambda: 100 * MS)
    m = measure(floor_model(), backend, budget=_budget(min_runs=50, max_time=1.0), clock=clock)
    assert not m.converged and 10 <= m.n <= 11


def test_small_calls_are_timed_in_batches() -> None:
    clock, backend = _fake(lambda: 1 * US)
    run = backend.prepare(floor_model(), FakeConfig()).run
    timing = time_calls(run, _budget(sample_time=5e-5), clock)
    assert timing.inner == 50
    assert timing.samples_s[0] == pytest.approx(1e-6)
    assert timing.timed_s == pytest.approx(len(timing.samples_s) * 50e-6)


def test_warm_up_runs_at_least_warmup_time() -> None:
    clock, backend = _fake(lambda: 1 * MS)
    timing = time_calls(backend.prepare(floor_model(), FakeConfig()).run, _budget(warmup_time=0.02), clock)
    assert timing.warmup_calls == 20 and timing.warmup_s == pytest.approx(0.02)


class _MovablePrepared:
    """A fake prepared model that records when the harness moves its buffers."""

    def __init__(self, clock: FakeClock, duration_ns: int) -> None:
        self.clock, self.duration_ns = clock, duration_ns
        self.calls = 0
        self.moves: list[int] = []  # calls made before each move

    def run(self) -> None:
        self.calls += 1
        self.clock.advance(self.duration_ns)

    def relocate(self) -> None:
        self.moves.append(self.calls)

    def close(self) -> None:
        pass


def test_samples_are_spread_over_placements() -> None:
    clock = FakeClock()
    prepared = _MovablePrepared(clock, 10 * US)
    budget = _budget(min_time=0.04, placements=4, warmup_time=0.0, sample_time=1e-6)
    timing = time_calls(prepared, budget, clock)
    assert timing.converged and len(prepared.moves) == 3
    # one move per 10 ms of timed calls, each followed by one untimed call
    timed_calls_before = [calls - i for i, calls in enumerate(prepared.moves)]
    assert timed_calls_before == [1 + 1000, 1 + 2000, 1 + 3000]


def test_slow_models_stay_in_one_placement() -> None:
    clock = FakeClock()
    prepared = _MovablePrepared(clock, 50 * MS)
    timing = time_calls(prepared, _budget(min_time=0.2, placements=16, max_time=5.0), clock)
    assert timing.converged and prepared.moves == []


class _PrimedPrepared:
    """A run of 10 us after an untimed prime of 90 us (a previous layer), counting calls in order."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[str] = []

    def prime(self) -> None:
        self.calls.append("prime")
        self.clock.advance(90 * US)

    def run(self) -> None:
        self.calls.append("run")
        self.clock.advance(10 * US)

    def close(self) -> None:
        pass


def test_prime_runs_untimed_before_every_timed_call() -> None:
    clock = FakeClock()
    prepared = _PrimedPrepared(clock)
    timing = time_calls(prepared, _budget(min_time=0.02, warmup_time=0.0, sample_time=1e-6), clock)
    assert timing.converged
    assert timing.samples_s == pytest.approx([10e-6] * len(timing.samples_s))  # no prime in any sample
    assert prepared.calls[::2] == ["prime"] * (len(prepared.calls) // 2)
    assert prepared.calls[1::2] == ["run"] * (len(prepared.calls) // 2)
    # min_time counts the primes too: 0.02 s of prime + run is 200 runs, not 2000
    assert 200 <= len(timing.samples_s) <= 220


class _PhasedPrepared:
    """A brick whose machine switches phase every 7 calls of its own: fast, a call costs 3 us of
    fixed cost and 1 us of work; slow, twice both. Its empty model (the floor's) pays the fixed
    cost of the same phase."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.runs = 0

    def _slow(self) -> bool:
        return (self.runs // 7) % 3 != 0  # two slow phases in three

    def run(self) -> None:
        self.runs += 1
        self.clock.advance((8 if self._slow() else 4) * US)

    def empty(self) -> None:
        self.clock.advance((6 if self._slow() else 3) * US)

    def close(self) -> None:
        pass


def test_the_floors_model_is_timed_after_each_sample_at_the_same_moment() -> None:
    """Paired with the empty model's sample that follows it, each sample keeps its own work at its
    phase: the median sample (8 us, slow) less ``empty_s`` is the median difference (2 us), where
    the fast phase's floor (3 us) would leave 5 us."""
    clock = FakeClock()
    prepared = _PhasedPrepared(clock)
    timing = time_calls(prepared, _budget(min_time=0.02, warmup_time=0.0, sample_time=1e-6, rel_ci=0.5), clock)
    samples = np.asarray(timing.samples_s)
    assert np.median(samples) == pytest.approx(8e-6)
    assert timing.empty_s == pytest.approx(6e-6)
    assert np.median(samples) - timing.empty_s == pytest.approx(2e-6)
    plain = time_calls(_PrimedPrepared(clock), _budget(min_time=0.02, warmup_time=0.0, sample_time=1e-6), clock)
    assert plain.empty_s is None


def test_paired_empty_is_the_median_less_the_median_difference() -> None:
    from dlbricks.generators.harness import paired_empty

    samples = np.array([4e-6, 8e-6, 8e-6, 4e-6, 8e-6])
    empties = np.array([3e-6, 6e-6, 6e-6, 3e-6, 6e-6])
    assert paired_empty(samples, empties) == pytest.approx(8e-6 - 2e-6)
    assert paired_empty(samples, np.full(5, 3e-6)) == pytest.approx(3e-6)  # a steady floor: itself


def test_keep_samples_records_per_call_samples() -> None:
    clock, backend = _fake(itertools.cycle([10 * US, 12 * US]).__next__)
    m = measure(
        floor_model(), backend, budget=_budget(sample_time=1e-6, rel_ci=0.5), keep_samples=True, clock=clock
    )
    assert m.samples_s is not None and len(m.samples_s) == m.n
    assert min(m.samples_s) == pytest.approx(10e-6) and max(m.samples_s) == pytest.approx(12e-6)


@pytest.mark.parametrize("n", [6, 7, 10, 31, 100, 1001])
def test_median_ci_matches_scipy_quantile_test(n: int) -> None:
    x = np.random.default_rng(n).lognormal(size=n)
    ci = stats.quantile_test(x, q=np.median(x), p=0.5).confidence_interval(0.95)
    assert median_ci(x) == pytest.approx((ci.low, ci.high))


def test_median_ci_needs_six_samples() -> None:
    assert median_ci(np.arange(5.0)) is None
    assert summarize(np.arange(5.0)).ci_low_s is None


def test_summary_statistics() -> None:
    x = np.arange(1.0, 101.0)
    s = summarize(x)
    assert (s.n, s.min_s, s.median_s, s.mean_s) == (100, 1.0, 50.5, 50.5)
    assert s.p90_s == pytest.approx(np.percentile(x, 90))
    assert s.iqr_s == pytest.approx(stats.iqr(x))
    assert s.std_s == pytest.approx(np.std(x, ddof=1))


def test_budget_validation_is_one_line() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Budget(min_time=-1, min_runs=0)
    message = str(info.value)
    assert "\n" not in message
    assert "'min_time' must be positive. Got -1" in message and "'min_runs'" in message
    with pytest.raises(InvalidArgumentError, match="must not exceed 'max_time'"):
        Budget(min_time=5.0, max_time=1.0)


def test_budget_round_trip_and_quick() -> None:
    quick = Budget.quick()
    assert quick.max_time < Budget().max_time
    assert Budget.from_dict(json.loads(json.dumps(quick.to_dict()))) == quick


def _ok_measurement(config) -> Measurement:
    return Measurement(
        key="k",
        status="ok",
        error=None,
        n=3,
        min_s=1e-6,
        median_s=2e-6,
        mean_s=2e-6,
        p90_s=3e-6,
        p99_s=3e-6,
        std_s=1e-7,
        iqr_s=1e-7,
        ci_low_s=None,
        ci_high_s=None,
        wall_time_s=0.5,
        converged=True,
        backend="onnxruntime",
        config=config,
        floor_s=1e-6,
        samples_s=(1e-6, 2e-6, 3e-6),
    )


def test_measurement_json_round_trip() -> None:
    m = _ok_measurement(OrtConfig(intra_op_num_threads=2))
    data = json.loads(json.dumps(m.to_dict()))
    assert data["config_id"] == m.config.config_id
    assert Measurement.from_dict(data) == m


def test_measurement_of_unknown_backend_keeps_its_config() -> None:
    m = dataclasses.replace(_ok_measurement(FakeConfig("x")), backend="not-installed-here")
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert isinstance(back.config, OpaqueConfig)
    assert back.config.config_id == m.config.config_id
    assert back.config.to_dict() == m.config.to_dict()


def test_measurement_is_frozen_and_validates_status() -> None:
    m = _ok_measurement(FakeConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.n = 4  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError, match="status"):
        dataclasses.replace(m, status="great")


def test_registry_holds_builtins_and_fakes() -> None:
    assert "onnxruntime" in available_backends()
    assert isinstance(get_backend("onnxruntime"), Backend)
    clock = FakeClock()
    register_backend("gen-test-fake", lambda: FakeBackend(clock, lambda: 1 * US))
    try:
        assert get_backend("gen-test-fake").name == "fake"
        with pytest.raises(InvalidArgumentError, match="already registered"):
            register_backend("gen-test-fake", FakeConfig)
        m = measure(floor_model(), "gen-test-fake", budget=_budget(), clock=clock)
        assert m.ok and m.backend == "fake"
    finally:
        unregister_backend("gen-test-fake")
    assert "gen-test-fake" not in available_backends()


def test_registry_errors_are_clear() -> None:
    with pytest.raises(InvalidArgumentError, match="Unknown backend 'nope'; registered backends"):
        get_backend("nope")
    with pytest.raises(InvalidArgumentError, match="Cannot import backend"):
        get_backend("tests.gen_fake_backends:Missing")
    register_backend("gen-test-bad", FakeConfig)
    try:
        with pytest.raises(BackendError, match="does not implement"):
            get_backend("gen-test-bad")
    finally:
        unregister_backend("gen-test-bad")


def test_public_api_is_pinned() -> None:
    import dlbricks.generators as generators

    assert sorted(generators.__all__) == sorted([
        "benchmark", "Budget", "Measurement", "collect_system_info", "Backend", "OrtConfig", "register_backend",
        "unregister_backend", "get_backend", "available_backends",
    ])
    assert all(hasattr(generators, name) for name in generators.__all__)


@pytest.mark.parametrize("module", ["budget", "ort", "_registry", "system", "api", "runner"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    mod = importlib.import_module(f"dlbricks.generators.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


class _Copies:
    """A run of 10 us over ``copies`` session copies, counting its calls."""

    def __init__(self, clock: FakeClock, copies: int) -> None:
        self.clock = clock
        self.copies = copies
        self.calls = 0

    def run(self) -> None:
        self.calls += 1
        self.clock.advance(10 * US)


@pytest.mark.parametrize(("warmed", "least_warmup_calls"), [(False, 500), (True, 1)])
def test_warm_up_runs_every_copy_once_unless_already_warmed(warmed: bool, least_warmup_calls: int) -> None:
    clock = FakeClock()
    prepared = _Copies(clock, copies=500)
    budget = _budget(warmup_time=1e-4, min_time=1e-3, sample_time=1e-6)
    timing = time_calls(prepared, budget, clock, warmed=warmed)
    assert timing.copies == 500 and timing.warmup_calls >= least_warmup_calls
    if warmed:  # a kept model's copies ran before: the warm-up lasts warmup_time (10 calls of 10 us)
        assert timing.warmup_calls <= 11
