"""Rounds: a model and its bricks timed in short interleaved rounds, so that both meet the same machine.

A shared machine changes speed by 10-60% in phases that last seconds. A brick measured at one moment
and its model at another differ by the machine, not by the method. In a round the model runs whole
once (after an untimed run that puts its data back in the caches) and each of its bricks for a
millisecond or two of the harness, in the model's order, each call after its prime (the brick before
it), so that it meets the caches as in the harness and inside its model; whether the whole model or
the bricks come first is drawn at random each round (randomized interleaving, Abedi and Brecht,
ICPE 2017). Rounds go on until the ratio of the bricks' sum to the whole model holds still
(:class:`RoundsBudget`). Every figure of a round comes from one process, in one round trip.

:func:`time_rounds` needs only prepared objects (``run``, and the optional ``prime`` and ``empty``
of :mod:`~dlbricks.generators.harness`) and a clock, so its rules are tested with a fake clock whose
speed changes in slow phases.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dlbricks import InvalidArgumentError

from .budget import Budget
from .harness import Clock, Timing, time_calls, timing_to_measurement
from .measurement import Measurement
from .stats import relative_ci_width

__all__ = ["Anchored", "PairedRounds", "Rounds", "RoundsBudget", "merge_paired", "paired_ratio", "sweeper",
           "time_rounds", "with_anchored"]

#: The spread of single bricks' ratios (now over then) assumed where a model's rounds have fewer than
#: three anchors to measure it from (:func:`with_anchored`): the order of what one minute of this
#: kind of machine differs from the next.
DEFAULT_TRANSFER_SPREAD = 0.10

#: The share of a worker process's rounds cut from each end before the bricks' and the ratio's
#: means over the rest (:meth:`Rounds.central_weights`): 0.4 keeps the middle fifth.
CENTRAL_TRIM = 0.4


@dataclass(frozen=True, slots=True)
class RoundsBudget:
    """The stopping rule of a model's rounds.

    Rounds go on until at least ``min_rounds`` rounds and ``min_time`` seconds are done *and* the
    95% confidence interval of the median per-round ratio (the bricks' sum over the whole model)
    is narrower than ``rel_ci`` of it, or until ``max_rounds`` rounds or ``max_time`` seconds (the
    rounds are then flagged as not converged), whichever comes first; ``max_time`` gives way to
    ``min_rounds`` (a model of seconds gets its least rounds all the same), down to ``least_rounds``
    (where fewer than ``min_rounds``) once ``long_time`` seconds are spent (a model of several seconds a run, whose every round averages
    its phases already).

    ``warm_whole``: an untimed run of the whole model before its timed one in each round, so that
    the timed run finds the caches as a model run in a loop leaves them, not as the bricks did.

    ``brick_warmup`` and ``brick_time``: each brick's turn in a round is a short measurement of the
    harness (:func:`~dlbricks.generators.harness.time_calls`): a warm-up of ``brick_warmup`` seconds, then timed
    calls, each after its prime, for ``brick_time`` seconds and three calls at least; the round takes
    their median. A single call after the rest of the round meets caches that the other bricks left
    (a 3 MB Relu of SqueezeNet ran in 103 us so, in 52 us in the harness and inside its model) and
    takes several calls to reach the state a layer meets inside its model; a millisecond of calls
    reaches it. A brick whose session copies cycle less than the last-level cache
    (``cycle_fits_cache``) warms a whole cycle of them first: a copy left since the last round is
    colder than the cycle's state, which is what the copies emulate.

    ``warm_chain`` (chained rounds): an untimed pass of the chain before its timed one in each round,
    as ``warm_whole`` gives the whole model, so that the timed calls find the caches as a chain run
    in a loop leaves them, not as the whole model's runs did.

    ``chained``: each brick's turn is one call, then one call of its own floor model (its ``empty``),
    on bricks prepared as a chain (the onnxruntime backend's ``prepare_chain``: one session each, no
    copies, each input read where the model's data flow writes it, outputs placed by their lifetimes
    in one block of memory), so that a round costs about what one run of the model's unique bricks
    costs (two with ``warm_chain``); without a chain-preparing backend (or off the CPU) the bricks'
    turns are bursts as above.
    """

    min_rounds: int = 12
    max_rounds: int = 400
    min_time: float = 1.0
    max_time: float = 12.0
    rel_ci: float = 0.02
    warm_whole: bool = True
    brick_warmup: float = 0.001
    brick_time: float = 0.002
    chained: bool = False
    warm_chain: bool = False
    least_rounds: int | None = None
    long_time: float = math.inf

    def __post_init__(self) -> None:
        for name in ("min_rounds", "max_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"RoundsBudget.{name} must be an int >= 1. Got {value!r} instead.")
        if self.max_rounds < self.min_rounds:
            raise InvalidArgumentError(f"RoundsBudget.max_rounds ({self.max_rounds}) must be at least "
                                       f"min_rounds ({self.min_rounds}).")
        least = self.least_rounds
        if least is not None and (isinstance(least, bool) or not isinstance(least, int) or least < 1):
            raise InvalidArgumentError(f"RoundsBudget.least_rounds must be an int >= 1 or None. Got {least!r} instead.")
        for name in ("min_time", "max_time", "rel_ci", "brick_warmup", "brick_time", "long_time"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidArgumentError(f"RoundsBudget.{name} must be a number >= 0. Got {value!r} instead.")


@dataclass(frozen=True, slots=True)
class Rounds:
    """What the rounds of one model timed, in seconds per call.

    Attributes
    ----------
    whole_s : tuple of float
        The whole model's timed run in each round.
    bricks_s : tuple of tuple of float
        Per brick (in the order given), the median of its timed calls in each round.
    empties_s : tuple of tuple of float or None
        Per brick, the floor's one-node model's per-call time paired with its calls in each round
        (:func:`~dlbricks.generators.harness.paired_empty`), where the brick had one prepared beside
        it; else None for that brick.
    whole_first : tuple of bool
        Whether the whole model came before the bricks in each round.
    bricks_min_s : tuple of float
        Per brick, its fastest call over every round (a lower bound keeps it).
    process : tuple of int
        The worker process each round ran in (:func:`merge_paired`); empty for rounds of one process.
    prepare_s : float
        Seconds the worker spent preparing the bricks it did not keep (every process's, merged).
    hold_s : float
        Seconds spent holding the whole model for the rounds: its session built and run once in the
        worker, every process's (merged); the whole model's setup beside :attr:`prepare_s`.
    calls : tuple of int
        Per brick, its calls a round where a chained round's schedule runs it more than once (its
        ``bricks_s`` then the mean of them); empty where each brick is called once a round.
    derived : int
        How many of the last bricks were not timed in these rounds: their per-round times are their
        measurements from earlier rounds brought to each round's moment by anchors that were
        (:func:`with_anchored`); they cost nothing here.
    converged : bool
        Whether the ratio's CI met the budget's ``rel_ci`` before ``max_rounds`` or ``max_time``.
    elapsed_s : float
        Seconds the rounds took (untimed runs included).
    """

    whole_s: tuple[float, ...]
    bricks_s: tuple[tuple[float, ...], ...]
    empties_s: tuple[tuple[float, ...] | None, ...]
    whole_first: tuple[bool, ...]
    converged: bool
    elapsed_s: float
    bricks_min_s: tuple[float, ...] = ()
    process: tuple[int, ...] = ()
    prepare_s: float = 0.0
    hold_s: float = 0.0
    calls: tuple[int, ...] = ()
    derived: int = 0

    @property
    def count(self) -> int:
        """Rounds done."""
        return len(self.whole_s)

    def bricks_timed_s(self) -> float:
        """Seconds of the bricks' calls and their floor models' calls over every round: what timing
        the bricks cost, beside :attr:`prepare_s` (the :attr:`derived` bricks' rows were not timed
        and count nothing)."""
        timed = len(self.bricks_s) - self.derived
        each = (self.calls or (1,) * len(self.bricks_s))[:timed]
        calls = sum(n * sum(row) for n, row in zip(each, self.bricks_s[:timed], strict=True))
        floors = sum(n * sum(row) for n, row in zip(each, self.empties_s[:timed], strict=True) if row is not None)
        return float(calls + floors)

    def whole_timed_s(self) -> float:
        """Seconds of the whole model's timed runs over every round: what timing the whole model
        cost, beside :attr:`hold_s` (its untimed runs before them, which restore the caches after
        the bricks, are the pairing's cost, in neither side)."""
        return float(sum(self.whole_s))

    def sums(self, counts: Sequence[int]) -> np.ndarray:
        """Per round, the bricks' times weighted by ``counts`` (occurrences per brick) and summed."""
        weights = np.asarray(counts, dtype=np.float64)
        if not self.bricks_s:
            return np.zeros(self.count)
        return weights @ np.asarray(self.bricks_s, dtype=np.float64)

    def groups(self) -> list[np.ndarray]:
        """The indices of the rounds of each worker process (one group for rounds of one process)."""
        if not self.process:
            return [np.arange(self.count)]
        labels = np.asarray(self.process)
        return [np.flatnonzero(labels == p) for p in dict.fromkeys(self.process)]

    def centre(self, values: Sequence[float]) -> float:
        """The typical value of a per-round series: its median, or with rounds from several worker
        processes the mean of each process's median, so that each process weighs the same whatever
        its number of rounds, and a bias that lasts as long as a process (the memory layout it drew)
        is averaged rather than picked by the median's side."""
        series = np.asarray(values, dtype=np.float64)
        return float(np.mean([np.median(series[g]) for g in self.groups()]))

    def central_weights(self, values: Sequence[float]) -> np.ndarray:
        """Per round, its weight in the trimmed mean of a per-round series ``values``: the middle
        fifth of each worker process's rounds by ``values`` (:data:`CENTRAL_TRIM` cut from each end,
        as :func:`scipy.stats.trim_mean` cuts), equal within a process, each process weighing the
        same. As robust as the median to a phase change within a round (up to 40% of rounds on one
        side), but a mean: ``weights @ series`` is a typical value of any other series over the same
        rounds, and it adds up: the weighted brick times, times their counts, sum to the weighted per-round sum.
        Each brick's own median does not (the sum of medians of right-skewed calls falls below the
        median of their sums, as the whole model's run holds every layer's occasional slow call)."""
        series = np.asarray(values, dtype=np.float64)
        weights = np.zeros(len(series))
        groups = self.groups()
        for g in groups:
            cut = int(CENTRAL_TRIM * len(g))
            middle = g[np.argsort(series[g], kind="stable")][cut:len(g) - cut]
            weights[middle] += 1.0 / (len(middle) * len(groups))
        return weights

    def speed_factors(self) -> np.ndarray:
        """Per round, the whole model's typical time (:meth:`centre`) over its time in that round:
        what brings the round's other times to the speed the machine had when the whole model ran
        at its typical time (1.0 in every round of a machine that held still)."""
        whole = np.asarray(self.whole_s, dtype=np.float64)
        return self.centre(whole) / whole if len(whole) else whole

    def swing(self) -> float:
        """How much the machine swung during the rounds: the whole model's 90th over its 10th
        percentile (1.0 for a machine that held still; nan with no round)."""
        if not self.whole_s:
            return math.nan
        p10, p90 = np.percentile(np.asarray(self.whole_s), [10, 90])
        return float(p90 / p10) if p10 > 0 else math.inf


def paired_ratio(rounds: Rounds, counts: Sequence[int], *, confidence: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The bricks' sum over the whole model, round by round, and its trimmed mean over the
    rounds (:meth:`~Rounds.central_weights`), with its ``confidence`` interval: ``(ratio, low, high)``.

    The ratio is taken in each round, then centred, not the centre of the sums over the centre of the
    whole runs: a slow phase that meets both sides of a round cancels in its ratio, while the two
    centres, each a median over the rounds, can each land on a different phase. Its centre is a mean
    of the middle rounds rather than their median so that the bricks' measurements, centred over the
    same rounds, add up to it (:func:`rounds_measurements`). The interval is a
    bootstrap over rounds (:func:`scipy.stats.bootstrap`): it holds what the machine's swing left in the ratio, narrow
    where bricks and whole met the same moments and wider where they did not. With rounds from
    several worker processes the rounds are resampled within each process (a stratified bootstrap,
    which scipy does not offer), and the interval is widened, in quadrature, by twice the standard
    error of the processes' own ratios: what the process each drew left in it."""
    from scipy import stats

    sums, whole = rounds.sums(counts), np.asarray(rounds.whole_s, dtype=np.float64)
    if len(whole) == 0 or np.any(whole <= 0):
        return math.nan, math.nan, math.nan
    per_round = sums / whole
    ratio = float(rounds.central_weights(per_round) @ per_round)
    if len(whole) < 3 or np.ptp(per_round) == 0:
        return ratio, ratio, ratio
    groups = rounds.groups()
    if len(groups) > 1:
        return _stratified_ratio(per_round, groups, ratio, confidence, resamples, seed)
    seeded = {"rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state":
              np.random.default_rng(seed)}  # scipy < 1.15 (the mxnet extra's) names it random_state
    result = stats.bootstrap((per_round,), _central_mean, vectorized=True, n_resamples=resamples,
                             confidence_level=confidence, method="percentile", **seeded)
    low, high = result.confidence_interval
    return ratio, float(min(low, ratio)), float(max(high, ratio))


def _central_mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean of the middle fifth of ``values`` along ``axis`` (:func:`scipy.stats.trim_mean`)."""
    from scipy import stats

    return stats.trim_mean(values, CENTRAL_TRIM, axis=axis)


def _stratified_ratio(per_round: np.ndarray, groups: Sequence[np.ndarray], ratio: float,
                      confidence: float, resamples: int, seed: int) -> tuple[float, float, float]:
    """:func:`paired_ratio` over several worker processes (``groups``: each one's rounds)."""
    rng = np.random.default_rng(seed)
    boot = np.zeros(resamples)
    for g in groups:
        picks = g[rng.integers(0, len(g), size=(resamples, len(g)))]
        boot += _central_mean(per_round[picks], axis=1) / len(groups)
    tail = 50 * (1 - confidence)
    low, high = np.percentile(boot, [tail, 100 - tail])
    own = np.array([_central_mean(per_round[g]) for g in groups])
    between = 2 * float(np.std(own, ddof=1)) / math.sqrt(len(own))
    low = ratio - math.hypot(ratio - float(low), between)
    high = ratio + math.hypot(float(high) - ratio, between)
    return ratio, float(min(low, ratio)), float(max(high, ratio))


def _timed(run: Callable[[], object], clock: Clock) -> int:
    t0 = clock()
    run()
    return clock() - t0


def brick_budget(budget: RoundsBudget) -> Budget:
    """The harness budget of a brick's turn in a round (see :class:`RoundsBudget`)."""
    return Budget(warmup_time=budget.brick_warmup, min_time=budget.brick_time, min_runs=3,
                  max_time=max(budget.brick_time, 1.0), rel_ci=1.0, placements=1)


def time_rounds(whole: Any, bricks: Sequence[Any], counts: Sequence[int], budget: RoundsBudget | None = None,
                clock: Clock = time.perf_counter_ns, rng: np.random.Generator | None = None,
                schedule: Sequence[int] | None = None, sweep: Callable[[], object] | None = None) -> Rounds:
    """Time ``whole`` (a prepared model) and ``bricks`` (its prepared bricks, in the model's order,
    each once a round with ``counts`` its occurrences) in interleaved rounds under ``budget``.

    Each brick's turn is a short measurement of the harness (:func:`brick_budget`: its prime before
    each call, and the floor's one-node model paired with its calls where it has one), or with
    ``budget.chained`` one call and one call of its ``empty``, its untimed ``ready`` (where it has
    one) just before the call. Whether the whole model comes first is drawn from ``rng`` each round.

    ``schedule`` (chained rounds only): the positions in ``bricks`` of a round's calls, in order, each
    brick at least once (:meth:`~dlbricks.Decomposition.schedule`: every occurrence of a model whose
    layers share weights, so that a shared weight is as warm at each call as at each of its uses in
    the model); a brick's time in a round is then the mean of its calls there, and its floor's too.

    ``sweep`` (with ``budget.warm_chain``): run between the chain's warm pass and its timed one, to
    touch what the model touches between two runs of a layer and the chain does not (the weights
    that deduplication took out of it: :func:`sweeper`).
    """
    budget = budget or RoundsBudget()
    rng = rng or np.random.default_rng()
    if len(counts) != len(bricks):
        raise InvalidArgumentError(f"time_rounds needs one count per brick: {len(counts)} counts for "
                                   f"{len(bricks)} bricks.")
    order_of_calls = _checked_schedule(schedule, len(bricks), budget)
    burst = brick_budget(budget)
    whole_run = whole.run
    weights = np.asarray(counts, dtype=np.float64)
    whole_ns: list[int] = []
    bricks_s: list[list[float]] = []
    empties_s: list[list[float]] = []
    order: list[bool] = []
    start = clock()
    min_ns, max_ns = int(budget.min_time * 1e9), int(budget.max_time * 1e9)
    long_ns = budget.long_time * 1e9
    least = min(budget.least_rounds or budget.min_rounds, budget.min_rounds)
    next_check = budget.min_rounds
    converged = False

    def run_whole() -> int:
        if budget.warm_whole:
            whole_run()
        return _timed(whole_run, clock)

    fastest = [math.inf] * len(bricks)
    singles = [(b.run, getattr(b, "empty", None)) for b in bricks]
    readies = [getattr(b, "ready", None) for b in bricks]

    calls_a_round = [int(n) for n in np.bincount(order_of_calls, minlength=len(bricks))] if bricks else []
    per_call = [1.0 / n for n in calls_a_round]

    def run_singles() -> tuple[list[float], list[float]]:
        times, empties = [0.0] * len(bricks), [0.0] * len(bricks)
        for i in order_of_calls:
            run, empty = singles[i]
            if readies[i] is not None:
                readies[i]()
            t = _timed(run, clock) / 1e9
            times[i] += t * per_call[i]
            fastest[i] = min(fastest[i], t)
            empties[i] += (_timed(empty, clock) / 1e9 if empty is not None else math.nan) * per_call[i]
        return times, empties

    def run_bricks() -> tuple[list[float], list[float]]:
        if budget.chained:
            if budget.warm_chain:
                for i in order_of_calls:
                    run, empty = singles[i]
                    run()
                    if empty is not None:
                        empty()
                if sweep is not None:
                    sweep()
            return run_singles()
        times, empties = [], []
        for i, brick in enumerate(bricks):
            timing = time_calls(brick, burst, clock, warmed=not getattr(brick, "cycle_fits_cache", False))
            times.append(float(np.median(timing.samples_s)))
            fastest[i] = min(fastest[i], min(timing.samples_s))
            empties.append(timing.empty_s if timing.empty_s is not None else math.nan)
        return times, empties

    while True:
        first = bool(rng.random() < 0.5)
        if first:
            w = run_whole()
            b, e = run_bricks()
        else:
            b, e = run_bricks()
            w = run_whole()
        whole_ns.append(w)
        bricks_s.append(b)
        empties_s.append(e)
        order.append(first)
        done, spent = len(whole_ns), clock() - start
        if (done >= budget.max_rounds or (spent >= max_ns and done >= budget.min_rounds)
                or (spent >= long_ns and done >= least)):
            break
        if done >= next_check and spent >= min_ns:
            ratios = (np.asarray(bricks_s) @ weights) / (np.asarray(whole_ns, dtype=np.float64) / 1e9)
            if relative_ci_width(ratios) <= budget.rel_ci:
                converged = True
                break
            next_check = done + max(1, done // 10)
    per_brick = np.asarray(bricks_s, dtype=np.float64).T if bricks else np.zeros((0, len(whole_ns)))
    per_empty = np.asarray(empties_s, dtype=np.float64).T if bricks else np.zeros((0, len(whole_ns)))
    has_empty = [not np.isnan(row).any() for row in per_empty]
    return Rounds(
        whole_s=tuple((np.asarray(whole_ns, dtype=np.float64) / 1e9).tolist()),
        bricks_s=tuple(tuple(row.tolist()) for row in per_brick),
        empties_s=tuple(tuple(row.tolist()) if has else None for row, has in zip(per_empty, has_empty, strict=True)),
        whole_first=tuple(order),
        converged=converged,
        elapsed_s=(clock() - start) / 1e9,
        bricks_min_s=tuple(fastest),
        calls=tuple(calls_a_round) if len(order_of_calls) > len(bricks) else (),
    )


def sweeper(nbytes: int) -> Callable[[], object] | None:
    """A call that reads ``nbytes`` of memory of its own (None for none): between a chain's warm pass
    and its timed one, it stands for the weights the model reads between two runs of a layer that
    the chain, holding each unique brick once, does not."""
    if nbytes < 8:
        return None
    block = np.ones(int(nbytes) // 8, dtype=np.float64)
    return block.sum


def _checked_schedule(schedule: Sequence[int] | None, bricks: int, budget: RoundsBudget) -> list[int]:
    """The positions of a round's calls: ``schedule``, checked (chained rounds only, positions of
    ``bricks``, each at least once), or each brick once in order."""
    if schedule is None:
        return list(range(bricks))
    positions = [int(i) for i in schedule]
    if not budget.chained:
        raise InvalidArgumentError("time_rounds takes a schedule only for chained rounds (RoundsBudget(chained=True)).")
    if any(not 0 <= i < bricks for i in positions) or set(positions) != set(range(bricks)):
        raise InvalidArgumentError(f"A round's schedule must name each of the {bricks} bricks' positions at least once "
                                   f"and no other. Got {positions!r} instead.")
    return positions


@dataclass(frozen=True, slots=True)
class PairedRounds:
    """A model's rounds as measurements: the whole model's and each brick's (by key), every one a
    summary of its runs over the same rounds, and the rounds themselves. ``transfer_half_width``:
    the relative 95% half-width that bricks taken from earlier rounds through anchors add to the
    ratio (:func:`with_anchored`; 0 where none were)."""

    whole: Measurement
    bricks: Mapping[str, Measurement]
    rounds: Rounds
    keys: tuple[str, ...]
    counts: tuple[int, ...]
    transfer_half_width: float = 0.0

    def ratio(self) -> tuple[float, float, float]:
        """:func:`paired_ratio` of these rounds, its interval widened in quadrature by
        :attr:`transfer_half_width`."""
        ratio, low, high = paired_ratio(self.rounds, self.counts)
        if self.transfer_half_width <= 0 or not math.isfinite(ratio):
            return ratio, low, high
        extra = self.transfer_half_width * ratio
        return ratio, ratio - math.hypot(ratio - low, extra), ratio + math.hypot(high - ratio, extra)


def rounds_measurements(rounds: Rounds, whole_key: str, keys: Sequence[str], counts: Sequence[int],
                        backend: str, config: Any, *, floor_s: float | None, node_s: float | None,
                        keep_samples: bool = False) -> PairedRounds:
    """Summarize ``rounds`` into one :class:`Measurement` per brick of ``keys`` and one of the whole
    model (its ``wall_time_s`` the rounds' time), each from its runs over the rounds (a brick's
    ``min_s`` its fastest call, not its fastest round), the brick's paired empty model (the median over
    the rounds) kept with it. A brick's ``wall_time_s`` is what it cost in the rounds: its calls and its
    empty model's, and an equal share of the bricks' preparation (:meth:`Rounds.bricks_timed_s` and
    :attr:`Rounds.prepare_s` over the model's bricks), so that a model's bricks add up to their side.

    A brick's times (and its empty model's) are taken at the whole model's speed: each round's times
    times that round's :meth:`~Rounds.speed_factors`, so that a slow phase that met a brick and the
    whole model in the same round leaves neither's figure. A brick's ``median_s`` and ``empty_s`` are
    then its mean over the middle fifth of the rounds by the bricks' weighted sum
    (:meth:`~Rounds.central_weights`), the same rounds for every brick, so that the bricks' sum over
    the whole model's centre is exactly the ratio of :func:`paired_ratio`. ``min_s`` and the seconds
    spent stay as timed; the whole model's ``median_s`` is its :meth:`~Rounds.centre`."""
    speed = rounds.speed_factors()
    central = rounds.central_weights(rounds.sums(counts) * speed)

    timed = len(keys) - rounds.derived
    prepare_each = rounds.prepare_s / timed if timed > 0 else 0.0

    def summary(key: str, samples: Sequence[float], empties: Sequence[float] | None,
                fastest: float | None = None, scaled: bool = True, calls: int = 1, derived: bool = False) -> Measurement:
        spent, raw_min = float(sum(samples)), float(min(samples)) if len(samples) else math.nan
        wall = (rounds.elapsed_s if not scaled else 0.0 if derived else
                prepare_each + calls * (spent + (float(sum(empties)) if empties is not None else 0.0)))
        if scaled:
            samples = np.asarray(samples, dtype=np.float64) * speed
        timing = Timing(samples_s=tuple(float(t) for t in samples), inner=1, converged=rounds.converged,
                        warmup_calls=0, warmup_s=0.0, timed_s=spent, sampling_s=rounds.elapsed_s)
        if empties is not None:
            timing = replace(timing, empty_s=float(central @ (np.asarray(empties, dtype=np.float64) * speed)))
        m = timing_to_measurement(timing, key, backend, config, wall, floor_s=floor_s, keep_samples=keep_samples)
        if scaled:
            m = replace(m, median_s=float(central @ samples))
        elif rounds.process:
            m = replace(m, median_s=rounds.centre(samples))
        if scaled and math.isfinite(raw_min):
            m = replace(m, min_s=raw_min)
        if fastest is not None and math.isfinite(fastest):
            m = replace(m, min_s=min(m.min_s or fastest, fastest))
        return replace(m, node_s=node_s)

    fastest = rounds.bricks_min_s or (None,) * len(keys)
    calls = rounds.calls or (1,) * len(keys)
    bricks = {key: summary(key, samples, empties, low, calls=n, derived=i >= timed)
              for i, (key, samples, empties, low, n) in enumerate(zip(keys, rounds.bricks_s, rounds.empties_s,
                                                                      fastest, calls, strict=True))}
    whole = summary(whole_key, rounds.whole_s, None, scaled=False)
    return PairedRounds(whole, bricks, rounds, tuple(keys), tuple(int(c) for c in counts))


def _part(paired: PairedRounds, keys: Sequence[str], process: int) -> Rounds:
    """``paired``'s rounds for ``keys`` only (a subset of its own), labelled with ``process``."""
    at = [paired.keys.index(k) for k in keys]
    r = paired.rounds
    return replace(r, bricks_s=tuple(r.bricks_s[i] for i in at), empties_s=tuple(r.empties_s[i] for i in at),
                   bricks_min_s=tuple(r.bricks_min_s[i] for i in at) if r.bricks_min_s else (),
                   calls=tuple(r.calls[i] for i in at) if r.calls else (),
                   process=(process,) * r.count)


def merge_paired(parts: Sequence[PairedRounds]) -> PairedRounds:
    """The rounds of one model timed in several worker processes, one after another, as one set
    (pyperf spreads its runs over processes for the same reason: a process draws its memory layout
    once, and a layer can run 10-15% faster or slower for as long as the process lives). Bricks
    missing from any part are left out; each measurement's ``median_s`` is the mean of the
    processes' medians (:meth:`Rounds.centre`), its ``floor_s`` the median of theirs."""
    if not parts:
        raise InvalidArgumentError("merge_paired needs at least one set of rounds.")
    if len(parts) == 1:
        return parts[0]
    keys = [k for k in parts[0].keys if all(k in p.keys for p in parts[1:])]
    counts = [parts[0].counts[parts[0].keys.index(k)] for k in keys]
    rounds = [_part(p, keys, i) for i, p in enumerate(parts)]
    merged = Rounds(
        whole_s=tuple(t for r in rounds for t in r.whole_s),
        bricks_s=tuple(tuple(t for r in rounds for t in r.bricks_s[i]) for i in range(len(keys))),
        empties_s=tuple(None if any(r.empties_s[i] is None for r in rounds)
                        else tuple(t for r in rounds for t in r.empties_s[i]) for i in range(len(keys))),
        whole_first=tuple(f for r in rounds for f in r.whole_first),
        converged=all(r.converged for r in rounds),
        elapsed_s=sum(r.elapsed_s for r in rounds),
        bricks_min_s=tuple(min(r.bricks_min_s[i] if r.bricks_min_s else math.inf for r in rounds)
                           for i in range(len(keys))),
        process=tuple(p for r in rounds for p in r.process),
        prepare_s=sum(r.prepare_s for r in rounds),
        hold_s=sum(r.hold_s for r in rounds),
        calls=tuple(max(r.calls[i] if r.calls else 1 for r in rounds) for i in range(len(keys)))
        if any(r.calls for r in rounds) else (),
    )
    whole = parts[0].whole
    floors = [p.whole.floor_s for p in parts if p.whole.floor_s is not None]
    return rounds_measurements(merged, whole.key, keys, counts, whole.backend, whole.config,
                               floor_s=float(np.median(floors)) if floors else None, node_s=whole.node_s,
                               keep_samples=whole.samples_s is not None)


@dataclass(frozen=True, slots=True)
class Anchored:
    """Bricks of a model that its rounds do not time, all measured at one earlier moment (another
    model's rounds), and the anchors that bring them to this moment: bricks of the same earlier
    moment timed again in these rounds.

    ``keys``, ``counts`` (occurrences in this model), ``medians_s``, ``mins_s`` and ``empties_s``
    (None where no floor model ran beside it) describe the bricks whose figures are taken, from their
    stored measurements; ``anchors`` are keys of the rounds and ``anchor_medians_s`` their stored
    medians from the same earlier moment. ``feeders``: those of ``keys`` that the rounds run all the
    same, to write an anchor's input just before it as the model does; their calls cost what they
    cost, but their figures are taken too (what they read, no brick of the chain wrote)."""

    keys: tuple[str, ...]
    counts: tuple[int, ...]
    medians_s: tuple[float, ...]
    mins_s: tuple[float, ...]
    empties_s: tuple[float | None, ...]
    anchors: tuple[str, ...]
    anchor_medians_s: tuple[float, ...]
    feeders: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        lengths = {len(self.keys), len(self.counts), len(self.medians_s), len(self.mins_s), len(self.empties_s)}
        if len(lengths) != 1 or len(self.anchors) != len(self.anchor_medians_s) or not self.anchors:
            raise InvalidArgumentError("Anchored needs one count, median, min and empty per key, and at least one "
                                       "anchor with one stored median each.")
        if not set(self.feeders) <= set(self.keys) or set(self.anchors) & set(self.keys):
            raise InvalidArgumentError("Anchored's feeders must be among its keys, and its anchors not.")
        if any(not t > 0 for t in (*self.medians_s, *self.anchor_medians_s)):
            raise InvalidArgumentError("Anchored needs stored medians above 0.")


def _kish(weights: np.ndarray) -> float:
    """The effective number of samples of ``weights`` (Kish): (sum w)^2 / sum w^2."""
    total = float(np.sum(weights))
    return total * total / float(np.sum(weights * weights)) if total > 0 else 0.0


def with_anchored(paired: PairedRounds, groups: Sequence[Anchored], *, confidence: float = 0.95) -> PairedRounds:
    """``paired`` with the bricks of ``groups`` joined as if timed in its rounds, each round's time
    of such a brick its stored median times the round's factor of its group: its anchors' weighted
    sum in that round over their stored sum (their times, times their counts). So a slow phase that
    met the round moves it as it moves the anchors, and the model's per-round ratio, its bricks' and
    its interval are those of rounds that timed every brick, less what the factor leaves out.

    A feeder's row in the rounds stays as what its calls cost, with no weight in the sums; its figure
    is taken as the others'. A group whose anchors did not all finish their rounds is left out. What
    the factor leaves out is
    how far a brick's own ratio (now over then) strays from its anchors': the weighted spread ``s``
    of the anchors' ratios (for a group of fewer than three anchors, the spread pooled over every
    group's anchors about their group's, or :data:`DEFAULT_TRANSFER_SPREAD` where that has fewer
    than two degrees of freedom) makes each group's
    stored sum ``W`` uncertain by ``z * s * sqrt(1/n_a + 1/n_b) * W``, with ``n_a`` and ``n_b`` the
    effective numbers (Kish) of anchors and bricks by weight, as two samples of one population of
    ratios; in quadrature over groups, over the estimate, that is the result's
    ``transfer_half_width``."""
    from scipy import stats

    at = {k: i for i, k in enumerate(paired.keys)}
    usable = [g for g in groups if all(a in at for a in g.anchors) and not (set(g.keys) - set(g.feeders)) & set(at)]
    if not usable:
        return paired
    fed = {k for g in usable for k in g.feeders if k in at}
    r = paired.rounds
    times = np.asarray(r.bricks_s, dtype=np.float64)
    counts = dict(zip(paired.keys, paired.counts, strict=True))
    rows: list[tuple[float, ...]] = []
    empties: list[tuple[float, ...] | None] = []
    for g in usable:
        weights = np.array([counts[a] for a in g.anchors], dtype=np.float64)
        factor = (weights @ times[[at[a] for a in g.anchors]]) / float(weights @ np.asarray(g.anchor_medians_s))
        rows += [tuple((factor * t).tolist()) for t in g.medians_s]
        empties += [None if e is None else tuple((factor * e).tolist()) for e in g.empties_s]
    keys = [*paired.keys, *(k for g in usable for k in g.keys)]
    all_counts = [*(0 if k in fed else c for k, c in zip(paired.keys, paired.counts, strict=True)),
                  *(c for g in usable for c in g.counts)]
    rounds = replace(r, bricks_s=r.bricks_s + tuple(rows), empties_s=r.empties_s + tuple(empties),
                     bricks_min_s=(r.bricks_min_s + tuple(m for g in usable for m in g.mins_s)) if r.bricks_min_s else (),
                     calls=(r.calls + (1,) * len(rows)) if r.calls else (), derived=r.derived + len(rows))
    whole = paired.whole
    joined = rounds_measurements(rounds, whole.key, keys, all_counts, whole.backend, whole.config,
                                 floor_s=whole.floor_s, node_s=whole.node_s, keep_samples=whole.samples_s is not None)
    if fed:  # a feeder's figure is its taken one (the later key), its cost its calls'
        joined = replace(joined, bricks={k: replace(m, wall_time_s=paired.bricks[k].wall_time_s) if k in fed else m
                                         for k, m in joined.bricks.items()})
    deviations: list[float] = []  # each anchor's ratio less its group's, over all groups
    groups_seen = []
    for g in usable:
        weight = np.array([counts[a] for a in g.anchors]) * np.asarray(g.anchor_medians_s)
        ratios = np.array([joined.bricks[a].median_s or math.nan for a in g.anchors]) / np.asarray(g.anchor_medians_s)
        centre = float(weight @ ratios / weight.sum())
        n = len(g.anchors)
        spread = float(np.sqrt(weight @ (ratios - centre) ** 2 / weight.sum() * n / (n - 1))) if n >= 3 else math.nan
        deviations += (ratios - centre).tolist()
        groups_seen.append((n, spread, centre, _kish(weight)))
    dof = len(deviations) - len(groups_seen)
    pooled = (math.sqrt(sum(d * d for d in deviations) / dof) if dof >= 2 else DEFAULT_TRANSFER_SPREAD)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    variance = 0.0
    for g, (n, spread, centre, n_a) in zip(usable, groups_seen, strict=True):
        stored = np.asarray(g.counts, dtype=np.float64) * np.asarray(g.medians_s)
        s_g = spread if n >= 3 else pooled
        variance += (z * s_g * math.sqrt(1 / n_a + 1 / _kish(stored)) * centre * float(stored.sum())) ** 2
    estimate = sum(c * (joined.bricks[k].median_s or 0.0) for k, c in zip(keys, all_counts, strict=True) if c)
    return replace(joined, transfer_half_width=math.sqrt(variance) / estimate if estimate > 0 else 0.0)
