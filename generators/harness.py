"""The timing harness: warm up, choose a batch size, then sample until the median is known.

Every figure of dlbricks (bricks, whole models, the floor) comes from :func:`time_calls` with the
same rules. It only needs a zero-argument ``run`` callable and a clock returning nanoseconds, so the
stopping rules are tested with a fake clock and a fake backend.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import onnx

from .budget import Budget
from .measurement import Measurement
from .protocols import Backend, BackendConfig, Prepared
from .stats import relative_ci_width, summarize

__all__ = ["Clock", "Timing", "measure_model", "measure_prepared", "paired_empty", "time_calls"]

Clock = Callable[[], int]
"""A monotonic clock returning integer nanoseconds, like ``time.perf_counter_ns``."""

MAX_INNER = 1_000_000
CHECK_GROWTH = 0.1  # re-check the stopping rule after 10% more samples
PLACEMENT_SHARE = 0.05  # of min_time, at most, for the untimed calls after buffer moves
#: Calls of the empty model timed right after each sample of a brick (:func:`sample`).
EMPTY_INNER = 5


@dataclass(frozen=True, slots=True)
class Timing:
    """What the harness observed for one runnable.

    Attributes
    ----------
    samples_s : tuple of float
        Per-call time of each timed sample (a batch of ``inner`` calls), in seconds.
    inner : int
        Calls per timed sample.
    converged : bool
        Whether the stopping rule was met before ``max_time``.
    warmup_calls : int
        Untimed calls made while warming up.
    warmup_s : float
        Seconds spent warming up.
    timed_s : float
        Seconds inside timed regions (the sum of all samples).
    sampling_s : float
        Wall seconds of the sampling phase (timed regions plus bookkeeping).
    prepare_s : float
        Seconds spent preparing the runnable before the harness started (sessions, session copies,
        the brick before it, bound buffers); 0 when it was prepared elsewhere.
    copies : int
        Copies of the runnable run round-robin (cold-cache emulation), 1 for a plain run.
    empty_s : float or None
        Where the runnable has an ``empty`` model beside it (the floor's one-node model, timed right
        after each sample): the per-call time of that model at the samples' own moments, paired
        (:func:`paired_empty`); None otherwise.
    """

    samples_s: tuple[float, ...]
    inner: int
    converged: bool
    warmup_calls: int
    warmup_s: float
    timed_s: float
    sampling_s: float
    prepare_s: float = 0.0
    copies: int = 1
    empty_s: float | None = None

    @property
    def harness_s(self) -> float:
        """Seconds inside the harness: warm-up and sampling."""
        return self.warmup_s + self.sampling_s


def time_calls(
    run: Callable[[], object] | Prepared,
    budget: Budget,
    clock: Clock = time.perf_counter_ns,
    *,
    warmed: bool = False,
) -> Timing:
    """Warm ``run`` up, then time it adaptively under ``budget``.

    Parameters
    ----------
    run : callable or Prepared
        One call of the thing to time, or a prepared model: its ``run`` is timed, and if it can
        ``relocate()`` its buffers the samples are spread over ``budget.placements`` placements.
    budget : Budget
        Warm-up time, minimum time and runs, maximum time, target CI width.
    clock : callable, default time.perf_counter_ns
        Integer nanoseconds; tests pass a fake clock that the fake backend advances.
    warmed : bool, default False
        Whether every copy of ``run`` has run before (a prepared model timed again): the warm-up then
        lasts ``budget.warmup_time`` only, instead of at least one call of each copy.

    Returns
    -------
    Timing
    """
    call: Callable[[], object] = run.run if hasattr(run, "run") else run
    prime: Callable[[], object] | None = getattr(run, "prime", None)
    copies = int(getattr(run, "copies", 1) or 1)
    warm_start = clock()
    warmup_calls, per_call_ns = warm_up(call, budget, clock, prime, min_calls=1 if warmed else copies)
    warm_end = clock()
    inner = choose_inner(per_call_ns, budget)
    relocate = getattr(run, "relocate", None)
    placements = choose_placements(per_call_ns, budget) if relocate is not None else 1
    empty: Callable[[], object] | None = getattr(run, "empty", None)
    empties: list[int] | None = None if empty is None else []
    if empty is not None:
        empty()
    if placements == 1:
        samples_ns, converged = sample(lambda _part: call, inner, budget, clock, prime, empty, empties)
    else:
        samples_ns, converged = sample(
            _placements(run, relocate, placements), inner, replace(budget, placements=placements), clock, prime,
            empty, empties,
        )
    sample_end = clock()
    per_call = np.asarray(samples_ns, dtype=np.float64) / (inner * 1e9)
    empty_s = None
    if empties:
        empty_s = paired_empty(per_call, np.asarray(empties, dtype=np.float64) / (EMPTY_INNER * 1e9))
    return Timing(
        samples_s=tuple(per_call.tolist()),
        inner=inner,
        converged=converged,
        warmup_calls=warmup_calls,
        warmup_s=(warm_end - warm_start) / 1e9,
        timed_s=sum(samples_ns) / 1e9,
        sampling_s=(sample_end - warm_end) / 1e9,
        copies=copies,
        empty_s=empty_s,
    )


def paired_empty(samples_s: np.ndarray, empties_s: np.ndarray) -> float:
    """The empty model's per-call time that, taken off the median sample, leaves the median of the
    paired differences: ``median(samples) - median(samples - empties)``, in seconds.

    Each sample of a brick is followed by a sample of the empty model (the floor's), so each pair
    meets one moment of the machine. A call of a brick of a few microseconds is mostly the fixed
    cost the empty model pays too, and this machine moves between phases up to twice as slow
    within a brick's measurement: the median of the differences keeps the brick's own cost at the
    moments it was timed, where the run's floor, calibrated at another, does not.
    """
    return float(np.median(samples_s) - np.median(samples_s - empties_s))


def warm_up(run: Callable[[], object], budget: Budget, clock: Clock,
            prime: Callable[[], object] | None = None, min_calls: int = 1) -> tuple[int, int]:
    """Call ``run`` until ``budget.warmup_time`` has passed (at least once), each call after an
    untimed ``prime()`` when given; then, without primes, until it has been called ``min_calls``
    times: a runnable of several session copies run round-robin has each copy's first run (lazy
    initialization) behind it before the first timed sample, however short the warm-up.

    Returns
    -------
    calls : int
        Number of warm-up calls.
    per_call_ns : int
        The fastest warm-up call, an estimate of the per-call time used to size batches.
    """
    deadline = clock() + int(budget.warmup_time * 1e9)
    calls = 0
    fastest = math.inf
    while True:
        if prime is not None:
            prime()
        t0 = clock()
        run()
        t1 = clock()
        calls += 1
        fastest = min(fastest, t1 - t0)
        if t1 >= deadline:
            break
    for _ in range(min_calls - calls):
        run()
    return max(calls, min_calls), int(fastest)


def choose_inner(per_call_ns: int, budget: Budget) -> int:
    """Calls per timed sample so that one sample lasts at least ``budget.sample_time``."""
    target_ns = budget.sample_time * 1e9
    inner = math.ceil(target_ns / max(per_call_ns, 1))
    return int(min(max(inner, 1), MAX_INNER))


def choose_placements(per_call_ns: int, budget: Budget) -> int:
    """Placements to spread over: at most ``budget.placements``, and few enough that the untimed
    call made after each move costs at most 5% of ``min_time`` (slow models stay in one place)."""
    affordable = int(PLACEMENT_SHARE * budget.min_time * 1e9 / max(per_call_ns, 1))
    return max(1, min(budget.placements, affordable))


def _placements(prepared: Prepared, relocate: Callable[[], object], count: int) -> Callable[[int], Callable[[], object]]:
    """``current(k)``: the run of placement ``k`` (relocating, then one untimed call, on a change)."""
    state = {"placement": 0}

    def current(k: int) -> Callable[[], object]:
        k = min(k, count - 1)
        if k != state["placement"]:
            relocate()
            prepared.run()  # the new buffers meet the next timed call warm, as the old ones did
            state["placement"] = k
        return prepared.run

    return current


def sample(
    current: Callable[[int], Callable[[], object]], inner: int, budget: Budget, clock: Clock,
    prime: Callable[[], object] | None = None, empty: Callable[[], object] | None = None,
    empties: list[int] | None = None,
) -> tuple[list[int], bool]:
    """Take timed samples of ``inner`` calls until the stopping rule or ``max_time``.

    With ``prime`` (a prepared model's untimed step, e.g. one that puts the caches in the state a
    layer meets inside a model), every call is timed on its own after a call of ``prime``, a sample
    is the sum of its ``inner`` timed calls, and ``min_time`` and the placements count the primes'
    time too (a brick of 30 us primed by a layer of 500 us would otherwise run for seconds).

    With ``empty`` (the floor's one-node model prepared beside the run), each sample is followed by
    an untimed call of it and a timed sample of :data:`EMPTY_INNER` calls, appended to
    ``empties`` (not counted in ``min_time``): the floor at the same moment (:func:`paired_empty`).

    ``current(k)`` gives the run to time once ``k`` of the ``budget.placements`` equal parts of
    ``min_time`` have been timed: the harness moves to the next buffer placement at those points.
    The rule is checked only once ``min_runs`` samples and ``min_time`` of timed runs are in, and
    then again after every 10% more samples, so the bookkeeping stays off the timed path.

    Returns
    -------
    samples_ns : list of int
        Duration of each sample (``inner`` calls), in nanoseconds.
    converged : bool
        Whether the CI of the median met ``budget.rel_ci`` before ``budget.max_time``.
    """
    min_ns = int(budget.min_time * 1e9)
    part_ns = max(min_ns // budget.placements, 1)
    deadline = clock() + int(budget.max_time * 1e9)
    next_check = budget.min_runs
    timed_ns = 0
    samples: list[int] = []
    append = samples.append
    repeat = itertools.repeat
    while True:
        run = current(timed_ns // part_ns)
        if prime is None:
            t0 = clock()
            for _ in repeat(None, inner):
                run()
            t1 = clock()
            took = t1 - t0
            spent = took
        else:
            took = spent = 0
            for _ in repeat(None, inner):
                tp = clock()
                prime()
                t0 = clock()
                run()
                t1 = clock()
                took += t1 - t0
                spent += t1 - tp
        append(took)
        if empty is not None and empties is not None:
            empty()  # untimed: the sample meets the moment's floor, not a call path the run evicted
            e0 = clock()
            for _ in repeat(None, EMPTY_INNER):
                empty()
            empties.append(clock() - e0)
        timed_ns += spent
        if len(samples) >= next_check and timed_ns >= min_ns:
            if relative_ci_width(np.asarray(samples)) <= budget.rel_ci:
                return samples, True
            next_check = len(samples) + max(1, int(len(samples) * CHECK_GROWTH))
        if t1 >= deadline:
            return samples, False


def measure_prepared(
    prepared: Prepared,
    key: str,
    backend_name: str,
    config: BackendConfig,
    budget: Budget,
    *,
    floor_s: float | None = None,
    keep_samples: bool = False,
    clock: Clock = time.perf_counter_ns,
    warmed: bool = False,
) -> tuple[Measurement, Timing]:
    """Time an already prepared model and summarize it (wall time covers timing only); ``warmed``
    as :func:`time_calls` takes it."""
    start = clock()
    timing = time_calls(prepared, budget, clock, warmed=warmed)
    wall = (clock() - start) / 1e9
    return timing_to_measurement(
        timing, key, backend_name, config, wall, floor_s=floor_s, keep_samples=keep_samples
    ), timing


def proof_measurement(key: str, backend_name: str, config: BackendConfig, prepare_s: float, *,
                      floor_s: float | None = None) -> tuple[Measurement, Timing]:
    """The record of a model prepared and held but not timed: the backend's ``prepare`` ran it once,
    which proves that it runs (a held whole model whose rounds then time it); no statistics, and
    ``prepare_s`` its preparation's seconds."""
    measurement = Measurement(key=key, status="ok", error=None, n=0, min_s=None, median_s=None, mean_s=None,
                              p90_s=None, p99_s=None, std_s=None, iqr_s=None, ci_low_s=None, ci_high_s=None,
                              wall_time_s=prepare_s, converged=False, backend=backend_name, config=config,
                              floor_s=floor_s)
    timing = Timing(samples_s=(), inner=1, converged=False, warmup_calls=0, warmup_s=0.0, timed_s=0.0,
                    sampling_s=0.0, prepare_s=prepare_s, copies=1)
    return measurement, timing


def measure_model(
    model: onnx.ModelProto,
    key: str,
    backend: Backend,
    config: BackendConfig,
    budget: Budget,
    *,
    floor_s: float | None = None,
    keep_samples: bool = False,
    clock: Clock = time.perf_counter_ns,
) -> tuple[Measurement, Timing]:
    """Prepare ``model`` with ``backend``, time it in this process, release it.

    Errors of the backend propagate; the worker turns them into failed measurements.
    """
    start = clock()
    prepared = backend.prepare(model, config)
    prepared_at = clock()
    try:
        timing = time_calls(prepared, budget, clock)
    finally:
        prepared.close()
    wall = (clock() - start) / 1e9
    timing = replace(timing, prepare_s=(prepared_at - start) / 1e9)
    measurement = timing_to_measurement(
        timing, key, backend.name, config, wall, floor_s=floor_s, keep_samples=keep_samples
    )
    return measurement, timing


def timing_to_measurement(
    timing: Timing,
    key: str,
    backend_name: str,
    config: BackendConfig,
    wall_time_s: float,
    *,
    floor_s: float | None,
    keep_samples: bool,
) -> Measurement:
    """The :class:`Measurement` record of a successful :class:`Timing`."""
    s = summarize(np.asarray(timing.samples_s))
    return Measurement(
        key=key,
        status="ok",
        error=None,
        n=s.n,
        min_s=s.min_s,
        median_s=s.median_s,
        mean_s=s.mean_s,
        p90_s=s.p90_s,
        p99_s=s.p99_s,
        std_s=s.std_s,
        iqr_s=s.iqr_s,
        ci_low_s=s.ci_low_s,
        ci_high_s=s.ci_high_s,
        wall_time_s=wall_time_s,
        converged=timing.converged,
        backend=backend_name,
        config=config,
        floor_s=floor_s,
        samples_s=timing.samples_s if keep_samples else None,
        empty_s=timing.empty_s,
    )
