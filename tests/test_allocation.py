"""The allocation of a model-level precision target to bricks (:func:`allocate`), the combination
of a pilot with further runs (:func:`combine`), and :func:`populate` with ``target_ci`` on a fake
runner whose noise shrinks with the time it is given."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import pytest

import dlbricks
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.schedule import DRIFT_MOMENTS, brick_shares, drift_moments
from dlbricks.generators import Budget, Measurement
from dlbricks.generators.budget import PILOT_BUDGET, BrickShare, allocate, model_ci
from dlbricks.generators.harness import Timing
from dlbricks.generators.measurement import combine, relative_half_width
from tests.test_db_support import config, decompositions, measurement, system_info

SYS = system_info()
CV = 0.05  # relative spread of one sample of the fake runner


def test_a_brick_of_tiny_weight_gets_less_time_than_a_dominant_one() -> None:
    dominant = BrickShare("conv", total_s=9e-3, half_width=0.05, spent_s=0.01)
    tiny = BrickShare("flatten", total_s=1e-6, half_width=0.05, spent_s=0.01)
    noisy = BrickShare("add", total_s=1e-3, half_width=0.20, spent_s=0.01)
    quiet = BrickShare("relu", total_s=1e-3, half_width=0.02, spent_s=0.01)
    a = allocate([dominant, tiny, noisy, quiet], target_ci=0.01)
    assert a.seconds["flatten"] == tiny.spent_s  # keeps its pilot
    assert a.seconds["conv"] > a.seconds["add"] > a.seconds["relu"]  # weight times noise
    assert a.ci == pytest.approx(0.01)
    assert a.extra_s(tiny) == 0.0 and a.extra_s(dominant) == pytest.approx(a.seconds["conv"] - 0.01)


def test_the_allocation_reaches_the_target_and_is_the_least_time_that_does() -> None:
    shares = [BrickShare(f"b{i}", total_s=1e-4 * (i + 1) ** 2, half_width=0.03 + 0.01 * i, spent_s=0.005)
              for i in range(8)]
    a = allocate(shares, target_ci=0.005)
    after = [replace(s, half_width=s.half_width * math.sqrt(s.spent_s / a.seconds[s.key])) for s in shares]
    assert model_ci(after) == pytest.approx(0.005, rel=1e-6) == pytest.approx(a.ci, rel=1e-6)
    # moving time from one brick to another under the same total misses the target
    keys = [s.key for s in shares]
    moved = dict(a.seconds)
    moved[keys[-1]] *= 0.9
    moved[keys[0]] += 0.1 * a.seconds[keys[-1]]
    worse = [replace(s, half_width=s.half_width * math.sqrt(s.spent_s / moved[s.key])) for s in shares]
    assert model_ci(worse) > 0.005


def test_the_cap_is_kept_and_the_ci_says_what_it_reaches() -> None:
    share = BrickShare("only", total_s=1e-3, half_width=0.5, spent_s=0.01)
    a = allocate([share], target_ci=0.001, max_s=0.5)
    assert a.seconds["only"] == 0.5 and a.ci == pytest.approx(0.5 * math.sqrt(0.01 / 0.5))
    with pytest.raises(dlbricks.InvalidArgumentError, match="'target_ci' must be a number in"):
        allocate([share], target_ci=0)


def test_combine_follows_the_longer_run_and_narrows_the_ci() -> None:
    pilot = _fake(1e-4, 8, "k", scale=1.03)
    longer = _fake(1e-4, 400, "k")
    both = combine([pilot, longer])
    assert both.median_s == longer.median_s and both.n == 408
    assert relative_half_width(both) < relative_half_width(pilot)
    assert both.wall_time_s == pytest.approx(pilot.wall_time_s + longer.wall_time_s)
    assert combine([longer]) is longer
    failed = replace(pilot, status="failed", error="boom")
    assert combine([failed, longer]).status == "failed"


class NoisyRunner:
    """A fake runner: a brick's median is fixed by its key, its CI shrinks as the square root of the
    samples that the budget's time buys; it records the budgets it was given."""

    given: dict[str, list[Budget]] = {}
    medians: dict[str, float] = {}

    def __init__(self, backend: str, cfg: object, budget: Budget, keep_samples: bool) -> None:
        self.cfg = cfg
        self.budget = budget

    def measure_detailed(self, item: object, *, budget: Budget | None = None) -> tuple[Measurement, Timing]:
        budget = budget or self.budget
        NoisyRunner.given.setdefault(item.key, []).append(budget)
        median = NoisyRunner.medians.get(item.key, 2e-5)
        n = max(budget.min_runs, math.ceil(budget.min_time / max(median, PILOT_BUDGET.sample_time)))
        m = replace(_fake(median, n, item.key), config=self.cfg)
        timed = n * max(median, PILOT_BUDGET.sample_time)
        timing = Timing(samples_s=(median,), inner=1, converged=True, warmup_calls=1, warmup_s=0.001,
                        timed_s=timed, sampling_s=timed, prepare_s=0.02)
        return replace(m, wall_time_s=timed + 0.021 + 0.005), timing

    def measure(self, item: object, *, budget: Budget | None = None) -> Measurement:
        return self.measure_detailed(item, budget=budget)[0]

    def close(self) -> None:
        pass


def _fake(median: float, n: int, key: str, scale: float = 1.0) -> Measurement:
    half = 1.96 * CV * math.sqrt(math.pi / 2) / math.sqrt(n) * median
    base = measurement(key, median=median * scale, n=n)
    return replace(base, ci_low_s=median * scale - half, ci_high_s=median * scale + half, floor_s=0.0,
                   iqr_s=1.349 * CV * median * scale)


@pytest.mark.parametrize("target", [0.02, 0.005])
def test_populate_reaches_the_target_with_pilots_for_tiny_bricks(target: float) -> None:
    dec = decompositions()[1]
    sigs = list(dec.bricks)
    dominant, tiny = sigs[0], sigs[-1]
    NoisyRunner.given = {}
    NoisyRunner.medians = {s: 2e-5 for s in sigs} | {dominant: 1e-3, tiny: 1e-6}
    with Store(":memory:") as store:
        report = populate(store, [dec], [config()], BenchOptions(target_ci=target, moments=1),
                          system=SYS, runner_factory=NoisyRunner)
        stored = {m.key: m for m in store.measurements.bricks(system=SYS, config_id=config().config_id)}
        reached = model_ci(brick_shares(dec, stored))
    assert reached <= target * 1.05
    assert report.worst_ci is not None and report.worst_ci <= target * 1.05 and report.target_ci == target
    assert NoisyRunner.given[tiny] == [PILOT_BUDGET]  # measured once, briefly
    time_of = {k: sum(b.min_time for b in budgets) for k, budgets in NoisyRunner.given.items()}
    assert time_of[dominant] > time_of[tiny] and len(NoisyRunner.given[dominant]) > 1
    assert report.remeasured >= 1 and report.measured == len(sigs)
    assert report.wall_s == pytest.approx(report.setup_s + report.timed_s + 0.001 * (report.measured
                                                                                     + report.remeasured), rel=1e-6)


def test_populate_measures_a_dominant_brick_at_as_many_moments_as_its_share_needs() -> None:
    """Drift: a brick of most of its model's time is measured at about DRIFT_MOMENTS moments (as the
    whole model is sampled), the model's small bricks once each."""
    dec = decompositions()[0]
    sigs = list(dec.bricks)
    NoisyRunner.given = {}
    NoisyRunner.medians = {s: 1e-5 for s in sigs} | {sigs[1]: 1e-3}
    with Store(":memory:") as store:
        populate(store, [dec], [config()], BenchOptions(target_ci=0.02, moments=3),
                 system=SYS, runner_factory=NoisyRunner)
        stored = {m.key: m for m in store.measurements.bricks(system=SYS, config_id=config().config_id)}
        row = store.measurements.get(sigs[1], SYS, config().config_id)
    shares = brick_shares(dec, stored)
    share = next(s.total_s for s in shares if s.key == sigs[1]) / sum(s.total_s for s in shares)
    moments = drift_moments(shares, sum(s.total_s for s in shares), DRIFT_MOMENTS)
    assert share > 0.8 and moments[sigs[1]] == math.ceil(share * DRIFT_MOMENTS)
    assert len(NoisyRunner.given[sigs[1]]) == moments[sigs[1]]  # the pilot, then the other moments
    assert all(len(NoisyRunner.given[s]) == 1 for s in sigs if moments[s] == 1)
    assert row.n == sum(max(b.min_runs, math.ceil(b.min_time / 1e-3)) for b in NoisyRunner.given[sigs[1]])


def test_populate_refuses_a_bad_target() -> None:
    with pytest.raises(dlbricks.InvalidArgumentError, match="'target_ci' must be a number in"):
        populate(Store(":memory:"), decompositions()[:1], [config()], BenchOptions(target_ci=1.5),
                 system=SYS, runner_factory=NoisyRunner)


def test_the_main_job_checks_its_target_and_measures_whole_models_to_the_same_half_width() -> None:
    from dlbricks.estimator.evaluation import DEFAULT_TARGET_CI, EVALUATE_BUDGET, _target

    assert _target(None) is None and _target(0.02) == 0.02
    assert EVALUATE_BUDGET.rel_ci == 2 * DEFAULT_TARGET_CI  # whole models to the same half-width
    for bad in ("0.01", 0, 1.5, True):
        with pytest.raises(dlbricks.InvalidArgumentError, match="'target_ci' must be a number in"):
            _target(bad)  # type: ignore[arg-type]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
