"""Rounds on a fake clock whose speed changes in slow phases: the harness logic of the paired design."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dlbricks import InvalidArgumentError
from dlbricks.generators import Budget
from dlbricks.generators.harness import time_calls
from dlbricks.generators.rounds import Rounds, RoundsBudget, merge_paired, paired_ratio, rounds_measurements, time_rounds


class PhasedClock:
    """Nanoseconds of a machine whose speed changes in phases of 0.5-3 s, each 1.0-1.6x as slow as
    the fastest: a run of ``base`` nanoseconds takes ``base`` times the current phase's factor."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.ends = np.cumsum(rng.uniform(0.5e9, 3e9, size=400))
        self.factors = rng.uniform(1.0, 1.6, size=400)
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def factor(self) -> float:
        return float(self.factors[int(np.searchsorted(self.ends, self.now, side="right"))])

    def run_for(self, base_ns: float) -> None:
        self.now += int(base_ns * self.factor())


class FakeRun:
    """A prepared model or brick whose run takes ``base_us`` of the fake machine's time."""

    def __init__(self, clock: PhasedClock, base_us: float, prime_us: float | None = None) -> None:
        self.clock, self.base_ns = clock, base_us * 1e3
        if prime_us is not None:
            self.prime = lambda: clock.run_for(prime_us * 1e3)

    def run(self) -> None:
        self.clock.run_for(self.base_ns)


BRICKS_US = (800.0, 120.0, 2500.0, 40.0, 900.0)
COUNTS = (2, 3, 1, 4, 1)
WHOLE_US = sum(c * b for c, b in zip(COUNTS, BRICKS_US, strict=True))  # the model is its bricks' sum


def _bricks(clock: PhasedClock) -> list[FakeRun]:
    return [FakeRun(clock, us, prime_us=BRICKS_US[i - 1] if i else None) for i, us in enumerate(BRICKS_US)]


@pytest.mark.parametrize("seed", range(5))
def test_rounds_hold_the_ratio_where_a_schedule_of_blocks_is_off_by_the_phase(seed: int) -> None:
    """The whole model and its bricks in rounds: the ratio of the bricks' sum to the whole model is
    1 within 1% whatever the phases (1.0-1.6x); the same bricks measured in a block and the model in
    the next phase (the schedule before rounds) are off by the ratio of the two phases' speeds."""
    clock = PhasedClock(seed)
    whole, bricks = FakeRun(clock, WHOLE_US), _bricks(clock)
    rounds = time_rounds(whole, bricks, COUNTS, RoundsBudget(min_rounds=12, max_time=12.0), clock=clock,
                         rng=np.random.default_rng(seed))
    ratio, low, high = paired_ratio(rounds, COUNTS)
    assert ratio == pytest.approx(1.0, rel=0.01)
    assert low <= ratio <= high
    paired = rounds_measurements(rounds, "model", [f"b{i}" for i in range(len(BRICKS_US))], COUNTS, "fake",
                                 None, floor_s=None, node_s=None)  # type: ignore[arg-type]
    summed = sum(c * paired.bricks[f"b{i}"].median_s for i, c in enumerate(COUNTS))
    assert summed / paired.whole.median_s == pytest.approx(1.0, rel=0.02)
    for i in range(len(BRICKS_US)):  # a lower bound keeps the fastest call, not the fastest round
        assert paired.bricks[f"b{i}"].min_s == rounds.bricks_min_s[i] <= min(rounds.bricks_s[i])

    # blocks: every brick measured at the start of a phase, the whole model in the next one
    clock.now = int(clock.ends[10]) + 1
    block = Budget(warmup_time=0.001, min_time=0.02, min_runs=10, max_time=0.05, rel_ci=1.0)
    brick_s = [float(np.median(time_calls(b, block, clock, warmed=True).samples_s)) for b in bricks]
    assert clock.now < clock.ends[11]
    clock.now = int(clock.ends[11]) + 1
    whole_s = float(np.median(time_calls(whole, block, clock, warmed=True).samples_s))
    blocks = sum(c * t for c, t in zip(COUNTS, brick_s, strict=True)) / whole_s
    assert blocks == pytest.approx(clock.factors[11] / clock.factors[12], rel=1e-4)


def test_rounds_stop_when_the_ratio_holds_and_alternate_their_order() -> None:
    """A machine that holds still: the ratio's CI is met at the least rounds and time; the whole
    model comes first in about half of them."""
    clock = PhasedClock()
    clock.factors[:] = 1.0
    budget = RoundsBudget(min_rounds=40, min_time=0.0, max_time=60.0)
    rounds = time_rounds(FakeRun(clock, WHOLE_US), _bricks(clock), COUNTS, budget, clock=clock,
                         rng=np.random.default_rng(1))
    assert rounds.converged and rounds.count == 40
    assert 10 < sum(rounds.whole_first) < 30
    assert rounds.swing() == pytest.approx(1.0)


def test_rounds_give_up_at_their_time_limit_but_not_before_their_least_rounds() -> None:
    clock = PhasedClock()
    slow = RoundsBudget(min_rounds=3, max_rounds=3, min_time=0.0, max_time=0.001, rel_ci=0.0)
    rounds = time_rounds(FakeRun(clock, WHOLE_US), _bricks(clock), COUNTS, slow, clock=clock)
    assert rounds.count == 3 and not rounds.converged


def test_rounds_of_seconds_stop_at_their_least_rounds_once_their_long_time_is_spent() -> None:
    """A model whose round takes seconds: past ``long_time`` its rounds stop at ``least_rounds``, not
    ``min_rounds``; a model of short rounds is not affected."""
    clock = PhasedClock()
    budget = RoundsBudget(min_rounds=10, max_time=3.0, rel_ci=0.0, least_rounds=4, long_time=15.0)
    slow = [FakeRun(clock, 1e6 * us / WHOLE_US) for us in BRICKS_US]  # a second a round of bricks, about
    rounds = time_rounds(FakeRun(clock, 2e6), slow, COUNTS, budget, clock=clock)  # and 2 s of whole model
    assert rounds.count == 4 and not rounds.converged
    quick = time_rounds(FakeRun(clock, WHOLE_US), _bricks(clock), COUNTS, budget, clock=clock)
    assert quick.count >= 10


def _process(seed: int, brick_bias: float, whole_bias: float) -> object:
    """One worker process's rounds, on a phased machine where that process runs the heaviest brick
    ``brick_bias`` and the whole model ``whole_bias`` times as slow as its layout-free speed."""
    clock = PhasedClock(seed)
    bricks = _bricks(clock)
    bricks[2].base_ns *= brick_bias
    whole = FakeRun(clock, WHOLE_US * whole_bias)
    rounds = time_rounds(whole, bricks, COUNTS, RoundsBudget(min_rounds=12, max_time=6.0), clock=clock,
                         rng=np.random.default_rng(seed))
    return rounds_measurements(rounds, "model", [f"b{i}" for i in range(len(BRICKS_US))], COUNTS, "fake",
                               None, floor_s=1e-6 * (seed + 1), node_s=None)  # type: ignore[arg-type]


def test_rounds_over_processes_average_what_each_process_drew() -> None:
    """A bias that lasts as long as a worker process (the heaviest brick 15% slower in one process,
    7% faster in the other, the whole model 3% slower in the second): each process alone is off by
    its bias; the rounds of both are off by the mean of the two, each brick's figure its mean over the
    same middle rounds of each process at the whole model's speed, and the interval holds both
    processes' own ratios."""
    slow, fast = _process(1, 1.15, 1.0), _process(2, 0.93, 1.03)
    merged = merge_paired([slow, fast])
    assert merged.rounds.process == (0,) * slow.rounds.count + (1,) * fast.rounds.count
    assert merged.rounds.count == slow.rounds.count + fast.rounds.count and len(merged.rounds.groups()) == 2
    share = BRICKS_US[2] / WHOLE_US
    alone = [p.ratio()[0] for p in (slow, fast)]
    assert alone[0] == pytest.approx(1 + 0.15 * share, rel=0.01)
    assert alone[1] == pytest.approx((1 - 0.07 * share) / 1.03, rel=0.01)
    ratio, low, high = merged.ratio()
    assert ratio == pytest.approx((1 + 0.15 * share + (1 - 0.07 * share) / 1.03) / 2, rel=0.01)
    assert low <= min(alone) and max(alone) <= high
    speed = merged.rounds.speed_factors()
    whole = merged.whole.median_s
    assert whole == pytest.approx((slow.whole.median_s + fast.whole.median_s) / 2)
    for i, key in enumerate(merged.keys):
        at_speed = np.asarray(merged.rounds.bricks_s[i]) * speed
        central = merged.rounds.central_weights(merged.rounds.sums(merged.counts) * speed)
        assert merged.bricks[key].median_s == pytest.approx(central @ at_speed)
        assert merged.bricks[key].n == slow.bricks[key].n + fast.bricks[key].n
    summed = sum(c * merged.bricks[k].median_s for k, c in zip(merged.keys, merged.counts, strict=True))
    assert summed / whole == pytest.approx(ratio, rel=0.01)
    assert merged.whole.floor_s == pytest.approx(np.median([2e-6, 3e-6]))
    assert merge_paired([slow]) is slow


def test_further_processes_only_while_the_processes_disagree() -> None:
    """Two processes whose ratios differ by 7% leave their mean unknown to +-2%: a further worker is
    started; two that agree within a fraction of a percent are enough."""
    from dlbricks.generators.runner import _processes_agree

    assert not _processes_agree([_process(1, 1.15, 1.0), _process(2, 0.93, 1.03)], 0.02)
    assert _processes_agree([_process(1, 1.0, 1.0), _process(2, 1.0, 1.0)], 0.02)
    assert _processes_agree([_process(1, 1.15, 1.0)], 0.02)  # one process: nothing to compare


@pytest.mark.parametrize("bad", [{"least_rounds": 0}, {"least_rounds": 2.5}, {"long_time": -1},
                                 {"min_rounds": 0}, {"max_rounds": 2, "min_rounds": 3}, {"max_time": -1.0},
                                 {"brick_time": "1"}, {"min_rounds": True}])
def test_a_rounds_budget_refuses_what_cannot_run(bad: dict) -> None:
    with pytest.raises(InvalidArgumentError, match="RoundsBudget"):
        RoundsBudget(**bad)


def test_time_rounds_needs_a_count_per_brick() -> None:
    clock = PhasedClock()
    with pytest.raises(InvalidArgumentError, match="one count per brick"):
        time_rounds(FakeRun(clock, 1.0), _bricks(clock), COUNTS[:2], clock=clock)


class FakeSingle(FakeRun):
    """A brick of a chain: a first call in a round pays ``cold_us`` more (the session state that its
    floor model, run right after it, pays as well); a call right after another of the same brick
    does not."""

    def __init__(self, clock: PhasedClock, base_us: float, cold_us: float, empty_us: float) -> None:
        super().__init__(clock, base_us)
        self.cold_ns, self.empty_ns = cold_us * 1e3, empty_us * 1e3
        self.empty = lambda: clock.run_for(self.empty_ns + self.cold_ns)

    def run(self) -> None:
        self.clock.run_for(self.base_ns + self.cold_ns)


@pytest.mark.parametrize("seed", range(3))
def test_chained_rounds_take_one_call_and_its_own_floor_call_a_brick(seed: int) -> None:
    """Chained rounds: each brick runs once a round and its floor model once right after it, so a
    brick's call less its floor's holds the brick's own time within 1% whatever the phases, and the
    whole model's ratio holds as in the rounds of bursts."""
    clock = PhasedClock(seed)
    cold, empty = 8.0, 2.0
    bricks = [FakeSingle(clock, us, cold, empty) for us in BRICKS_US]
    budget = RoundsBudget(min_rounds=30, max_time=12.0, chained=True)
    whole = FakeRun(clock, WHOLE_US)
    rounds = time_rounds(whole, bricks, COUNTS, budget, clock=clock, rng=np.random.default_rng(seed))
    assert rounds.count >= 30
    calls, floors = np.asarray(rounds.bricks_s), np.asarray(rounds.empties_s)
    assert calls.shape == floors.shape == (len(BRICKS_US), rounds.count)  # one call and one floor call a round
    own = np.asarray(COUNTS) @ (calls - floors)  # per round: the bricks' own time, the cold session's taken off
    expected = sum(c * (us - empty) for c, us in zip(COUNTS, BRICKS_US, strict=True)) / WHOLE_US
    assert float(np.median(own / np.asarray(rounds.whole_s))) == pytest.approx(expected, rel=0.01)
    assert paired_ratio(rounds, COUNTS)[0] > expected  # the calls alone carry the cold session's cost


class SteadyClock(PhasedClock):
    """A machine that holds its speed."""

    def factor(self) -> float:
        return 1.0


class FakeCopies:
    """A brick of ``copies`` session copies run round-robin: a copy last called more than 5 ms ago
    (before the rest of a round, not one cycle of its copies) runs 1.3x as slow, its weights gone
    from the cache."""

    def __init__(self, clock: PhasedClock, base_us: float, copies: int, fits: bool) -> None:
        self.clock, self.base_ns, self.copies, self.cycle_fits_cache = clock, base_us * 1e3, copies, fits
        self._last = [-(10 ** 12)] * copies
        self._next = 0

    def run(self) -> None:
        k, self._next = self._next, (self._next + 1) % self.copies
        cold = self.clock.now - self._last[k] > 5e6
        self.clock.run_for(self.base_ns * (1.3 if cold else 1.0))
        self._last[k] = self.clock.now


@pytest.mark.parametrize("fits", [True, False])
def test_a_brick_whose_copies_cycle_in_the_cache_warms_a_cycle_in_each_round(fits: bool) -> None:
    """30 copies of a 100 us brick cycle in 3 ms, longer than a round's warm-up of 1 ms: where the
    cycle fits the cache, each round warms every copy first and times the cycle's state (100 us);
    without it the timed calls reach copies left since the last round (130 us) in most rounds (not
    where one round's bricks came last and the next round's first)."""
    clock = SteadyClock()
    brick = FakeCopies(clock, 100.0, copies=30, fits=fits)
    rounds = time_rounds(FakeRun(clock, 20_000.0), [brick], (1,), RoundsBudget(min_rounds=6, max_rounds=6),
                         clock=clock, rng=np.random.default_rng(0))
    medians = np.asarray(rounds.bricks_s[0])
    if fits:
        assert medians == pytest.approx(100e-6, rel=0.01)
    else:
        assert np.median(medians) > 1.25 * 100e-6


class FakeSharedWeight(FakeRun):
    """A brick whose weight the model uses again a layer later: a call within 1 ms of its last one
    finds the weight warm, a later one pays ``cold_us`` more."""

    def __init__(self, clock: PhasedClock, base_us: float, cold_us: float) -> None:
        super().__init__(clock, base_us)
        self.cold_ns, self.last = cold_us * 1e3, -(10 ** 15)

    def run(self) -> None:
        cold = self.clock.now - self.last > 1e6
        self.clock.run_for(self.base_ns + (self.cold_ns if cold else 0.0))
        self.last = self.clock.now


@pytest.mark.parametrize("seed", range(3))
def test_a_schedule_calls_a_shared_weight_brick_at_each_use_as_the_model_does(seed: int) -> None:
    """A model of a first layer and four uses of a shared-weight brick, a small layer between them:
    in the model the first use meets the weight cold and the next three warm. A round that calls the
    shared brick once meets it cold every time (23% high); a schedule of every occurrence gives the
    model's mean, its brick's time the mean of its calls, within 1% whatever the phases."""
    clock = PhasedClock(seed)
    counts = (1, 4, 3)
    whole = FakeRun(clock, 100.0 + (700.0 + 3 * 500.0) + 3 * 100.0)
    budget = RoundsBudget(min_rounds=30, max_time=12.0, chained=True)
    ratios = {}
    for schedule in (None, (0, 1, 2, 1, 2, 1, 2, 1)):
        bricks = [FakeRun(clock, 100.0), FakeSharedWeight(clock, 500.0, cold_us=200.0), FakeRun(clock, 100.0)]
        rounds = time_rounds(whole, bricks, counts, budget, clock=clock, rng=np.random.default_rng(seed),
                             schedule=schedule)
        assert len(rounds.bricks_s) == 3
        assert rounds.calls == ((1, 4, 3) if schedule else ())
        ratios[schedule is not None] = float(np.median(rounds.sums(counts) / np.asarray(rounds.whole_s)))
    assert ratios[True] == pytest.approx(1.0, rel=0.01)
    assert ratios[False] == pytest.approx(3200 / 2600, rel=0.01)


def test_a_schedule_names_each_brick_and_only_in_chained_rounds() -> None:
    clock = PhasedClock()
    bricks = [FakeRun(clock, 10.0), FakeRun(clock, 10.0)]
    with pytest.raises(InvalidArgumentError, match="chained"):
        time_rounds(FakeRun(clock, 20.0), bricks, (1, 1), RoundsBudget(), clock=clock, schedule=(0, 1))
    with pytest.raises(InvalidArgumentError, match="each of the 2 bricks"):
        time_rounds(FakeRun(clock, 20.0), bricks, (1, 1), RoundsBudget(chained=True), clock=clock, schedule=(0, 0))


class Eviction:
    """The caches of a fake machine: the whole model's run leaves them full of its own data."""

    def __init__(self) -> None:
        self.by_whole = True


class WholeThatEvicts(FakeRun):
    def __init__(self, clock: PhasedClock, base_us: float, caches: Eviction) -> None:
        super().__init__(clock, base_us)
        self.caches = caches

    def run(self) -> None:
        super().run()
        self.caches.by_whole = True


class BrickAfterTheWhole(FakeRun):
    """A chain's brick: a call right after the whole model ran pays ``cold_us`` more (the chain's
    data gone from the caches), as the first brick of a round that follows the model's runs does."""

    def __init__(self, clock: PhasedClock, base_us: float, cold_us: float, caches: Eviction) -> None:
        super().__init__(clock, base_us)
        self.cold_ns, self.caches = cold_us * 1e3, caches

    def run(self) -> None:
        self.clock.run_for(self.base_ns + (self.cold_ns if self.caches.by_whole else 0.0))
        self.caches.by_whole = False


@pytest.mark.parametrize("seed", range(3))
def test_a_warm_pass_of_the_chain_gives_its_bricks_the_state_of_a_chain_run_in_a_loop(seed: int) -> None:
    """The whole model's timed run follows an untimed one, so that it meets the caches as a model run
    in a loop leaves them; with ``warm_chain`` the chain's timed calls follow an untimed pass too,
    and the ratio holds at 1 within 1% whatever the phases; without it the round's first brick
    meets the whole model's data and the ratio comes out high."""
    clock = PhasedClock(seed)
    ratios = {}
    for warm in (False, True):
        caches = Eviction()
        bricks = [BrickAfterTheWhole(clock, us, cold_us=300.0, caches=caches) for us in BRICKS_US]
        budget = RoundsBudget(min_rounds=30, max_time=12.0, chained=True, warm_chain=warm)
        rounds = time_rounds(WholeThatEvicts(clock, WHOLE_US, caches), bricks, COUNTS, budget, clock=clock,
                             rng=np.random.default_rng(seed))
        ratios[warm] = float(np.median(rounds.sums(COUNTS) / np.asarray(rounds.whole_s)))
    assert ratios[True] == pytest.approx(1.0, rel=0.01)
    assert ratios[False] > 1.02


def test_a_sweep_runs_between_the_warm_pass_and_the_timed_one() -> None:
    """``sweep`` runs once a round, after the chain's warm pass and before its timed calls, and only
    with a warm pass; :func:`sweeper` reads a block of its own of the bytes asked (none for none)."""
    from dlbricks.generators.rounds import sweeper

    clock = SteadyClock()
    seen: list[str] = []

    class Logged(FakeRun):
        def run(self) -> None:
            seen.append("brick")
            super().run()

    for warm in (True, False):
        seen.clear()
        time_rounds(FakeRun(clock, 100.0), [Logged(clock, 10.0)], (1,),
                    RoundsBudget(min_rounds=3, max_rounds=3, chained=True, warm_chain=warm), clock=clock,
                    rng=np.random.default_rng(0), sweep=lambda: seen.append("sweep"))
        assert seen == (["brick", "sweep", "brick"] * 3 if warm else ["brick"] * 3)
    assert sweeper(0) is None
    assert sweeper(1 << 20)() == (1 << 20) // 8


def _bimodal_rounds(seed: int, n: int = 40, processes: int = 4) -> Rounds:
    """Rounds on a machine that runs each round at 1.0x or 1.5x (even odds), a phase change within
    a round one time in ten (the bricks then meet the other phase), 1% noise on each side; the
    bricks' sum (counts 1 and 2) is the whole model's time."""
    rng = np.random.default_rng(seed)
    phase = np.where(rng.random(n) < 0.5, 1.0, 1.5)
    bricks_phase = np.where(rng.random(n) < 0.1, 2.5 - phase, phase)
    noise = lambda: rng.normal(1.0, 0.01, n)  # noqa: E731
    return Rounds(whole_s=tuple(0.010 * phase * noise()),
                  bricks_s=(tuple(0.004 * bricks_phase * noise()), tuple(0.003 * bricks_phase * noise())),
                  empties_s=(None, None), whole_first=(True,) * n, converged=True, elapsed_s=1.0,
                  process=tuple(np.repeat(np.arange(processes), n // processes)))


def test_the_ratio_is_taken_in_each_round_so_two_medians_on_different_phases_do_not_move_it() -> None:
    """On a machine with two speeds, the bricks' sum over the whole model, taken in each round and then
    centred, holds within 1% of the truth in each of 20 runs and its interval covers it; the quotient
    of the two sides' centres, each a median that can land on either speed, is off by more than 5% in
    some of them. The bricks' measurements, taken at the whole model's speed, sum to the centred ratio."""
    quotients = []
    for seed in range(20):
        rounds = _bimodal_rounds(seed)
        ratio, low, high = paired_ratio(rounds, (1, 2))
        assert ratio == pytest.approx(1.0, abs=0.01)
        assert low <= 1.0 <= high
        quotients.append(rounds.centre(rounds.sums((1, 2))) / rounds.centre(rounds.whole_s))
        paired = rounds_measurements(rounds, "model", ["a", "b"], (1, 2), "fake", None,  # type: ignore[arg-type]
                                     floor_s=None, node_s=None)
        summed = paired.bricks["a"].median_s + 2 * paired.bricks["b"].median_s
        assert summed / paired.whole.median_s == pytest.approx(1.0, abs=0.015)
        assert paired.bricks["a"].min_s == min(rounds.bricks_s[0])  # the fastest call stays as timed
    assert max(abs(q - 1.0) for q in quotients) > 0.05


class VectorUnits:
    """A core that powers its wide vector units down after ``idle_us`` without a vector kernel: the
    next kernel then pays ``power_up_us`` (an AVX-512 Intel Xeon, methodology "Wide vector units
    between two calls")."""

    def __init__(self, clock: PhasedClock, idle_us: float, power_up_us: float) -> None:
        self.clock, self.idle_ns, self.power_up_ns = clock, idle_us * 1e3, power_up_us * 1e3
        self.last = -np.inf

    def kernel(self, base_ns: float) -> None:
        if self.clock.now - self.last > self.idle_ns:
            self.clock.run_for(self.power_up_ns)
        self.clock.run_for(base_ns)
        self.last = self.clock.now


class VectorBrick(FakeRun):
    """A chained brick whose kernel uses the vector units; its floor model runs no vector kernel and
    takes longer than the units stay up."""

    def __init__(self, clock: PhasedClock, base_us: float, units: VectorUnits, empty_us: float, warmup: bool) -> None:
        super().__init__(clock, base_us)
        self.units = units
        self.empty = lambda: clock.run_for(empty_us * 1e3)
        if warmup:
            self.ready = lambda: units.kernel(1e3)

    def run(self) -> None:
        self.units.kernel(self.base_ns)


class VectorModel(FakeRun):
    """The whole model: the bricks' kernels back to back, as many times as each occurs."""

    def __init__(self, clock: PhasedClock, units: VectorUnits) -> None:
        super().__init__(clock, WHOLE_US)
        self.units = units

    def run(self) -> None:
        for count, us in zip(COUNTS, BRICKS_US, strict=True):
            for _ in range(count):
                self.units.kernel(us * 1e3)


@pytest.mark.parametrize("seed", range(3))
def test_a_chained_brick_meets_the_vector_units_as_its_layer_does_in_the_model(seed: int) -> None:
    """Inside the model each kernel starts right after the previous one, so the vector units are up;
    in a chain the floor's call between two bricks lets them power down. With a ``ready`` run just
    before each timed call (untimed), the bricks' sum less their floors holds the model within 1%;
    without it, each call pays the units' power-up."""
    ratios = {}
    for warmup in (True, False):
        clock = SteadyClock(seed)
        units = VectorUnits(clock, idle_us=3.0, power_up_us=30.0)
        bricks = [VectorBrick(clock, us, units, empty_us=5.0, warmup=warmup) for us in BRICKS_US]
        rounds = time_rounds(VectorModel(clock, units), bricks, COUNTS,
                             RoundsBudget(min_rounds=10, max_rounds=10, chained=True), clock=clock,
                             rng=np.random.default_rng(seed))
        own = np.asarray(COUNTS) @ (np.asarray(rounds.bricks_s) - np.asarray(rounds.empties_s))
        ratios[warmup] = float(np.median(own / np.asarray(rounds.whole_s)))
    assert ratios[True] == pytest.approx(1.0, rel=0.01)
    assert ratios[False] > 1.03  # 30 us on most calls of 11 uses, against a 5.5 ms model


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_each_brick_of_the_rounds_costs_its_own_calls_and_a_share_of_the_preparation() -> None:
    """A brick's stored wall time is its calls and its empty model's over the rounds (a brick called
    twice a round counts both) plus an equal share of the preparation: a model's bricks add up to
    their side of the rounds, not each to the rounds' whole time."""
    rounds = Rounds(whole_s=(0.010,) * 4, bricks_s=((0.004,) * 4, (0.002,) * 4), empties_s=((0.001,) * 4, None),
                    whole_first=(True,) * 4, converged=True, elapsed_s=9.0, prepare_s=0.5, calls=(1, 2))
    paired = rounds_measurements(rounds, "model", ["a", "b"], (1, 2), "fake", None,  # type: ignore[arg-type]
                                 floor_s=None, node_s=None)
    assert paired.bricks["a"].wall_time_s == pytest.approx(0.25 + 4 * 0.004 + 4 * 0.001)
    assert paired.bricks["b"].wall_time_s == pytest.approx(0.25 + 2 * 4 * 0.002)
    assert sum(m.wall_time_s for m in paired.bricks.values()) == pytest.approx(
        rounds.prepare_s + rounds.bricks_timed_s())
    assert paired.whole.wall_time_s == 9.0


def test_the_bricks_add_up_to_the_ratio_where_each_layers_calls_are_sometimes_slow() -> None:
    """Each of 60 layers' calls now and then slow (one in five 50% slower, each call on its own): the
    whole model's run holds every layer's slow calls, so it takes the layers' mean times, while each
    brick's median is its fast time, and the medians' sum falls 9% short. The ratio holds within 2%
    and the bricks' measurements, centred over the same rounds, add up to it exactly."""
    rng = np.random.default_rng(0)
    layers, n = 60, 40
    base = rng.uniform(50e-6, 500e-6, layers)

    def calls() -> np.ndarray:
        return base[:, None] * np.where(rng.random((layers, n)) < 0.2, 1.5, 1.0)

    bricks, whole = calls(), calls().sum(axis=0)
    rounds = Rounds(whole_s=tuple(whole), bricks_s=tuple(tuple(row) for row in bricks), empties_s=(None,) * layers,
                    whole_first=(True,) * n, converged=True, elapsed_s=1.0, process=tuple(np.repeat([0, 1], n // 2)))
    counts = (1,) * layers
    keys = [f"b{i}" for i in range(layers)]
    ratio = paired_ratio(rounds, counts)[0]
    assert ratio == pytest.approx(1.0, abs=0.02)
    paired = rounds_measurements(rounds, "model", keys, counts, "fake", None,  # type: ignore[arg-type]
                                 floor_s=None, node_s=None)
    summed = sum(paired.bricks[k].median_s for k in keys)
    assert summed / paired.whole.median_s == pytest.approx(ratio, rel=1e-9)
    medians = sum(float(np.median(row * rounds.speed_factors())) for row in bricks)
    assert medians / paired.whole.median_s < 0.93
