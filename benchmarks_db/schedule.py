"""When bricks are measured, and how often: the local loop of :func:`~dlbricks.benchmarks_db.populate`.

:class:`LocalRun` measures a :class:`~dlbricks.benchmarks_db.jobs.BenchJob` in this process, one item at a
time: each brick claimed, measured in the generators' worker and recorded with its claim dropped in
one transaction. Then, as the options ask, model by model:

- ``moments > 1`` (the fixed rule): the bricks that hold at least :data:`DOMINANT_SHARE` of the
  model's measured time are measured ``moments - 1`` more times, round robin, and pooled
  (:func:`remeasure`).
- ``target_ci``: every new brick had a short pilot; the pilots' medians and noise give each brick's
  weight in the model, :func:`~dlbricks.generators.budget.allocate` says which bricks need more timed runs
  for the model's estimate to reach the target, and with ``moments > 1`` a brick is also measured at
  as many moments as its share needs to average the machine's drift (:func:`drift_moments`). The
  further runs are combined with the pilot, so the stored CI is what was done.

:func:`remeasure` also measures a model's bricks again for ``validate --unpaired``'s callers; the
paired design of the main job is :mod:`~dlbricks.benchmarks_db.rounds`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dlbricks import Decomposition
from dlbricks.bricks import BrickContext
from dlbricks.generators.budget import PILOT_BUDGET, BrickShare, allocate, model_ci, topup_budget
from dlbricks.generators.measurement import combine, pool, relative_half_width, spread_half_width
from dlbricks.generators.system import last_level_cache_bytes

from .jobs import (
    BenchJob,
    BenchOptions,
    BenchProgress,
    BenchReport,
    _Costs,
    _record_task,
    _Task,
    _tasks_for,
    brick_overhead,
)
from .records import ClaimStatus, RecordOutcome
from .store import Store

if TYPE_CHECKING:
    from dlbricks.generators import Measurement

__all__ = ["DOMINANT_SHARE", "LocalRun", "brick_shares", "dominant_bricks", "drift_moments", "out_of_context",
           "remeasure", "stored_context"]

#: Share of its model's measured time (count x median over the sum) that makes a brick dominant.
DOMINANT_SHARE = 0.05


def dominant_bricks(dec: Decomposition, medians: Mapping[str, float], share: float = DOMINANT_SHARE,
                    cover: float = 0.0) -> list[str]:
    """The bricks of ``dec`` that hold at least ``share`` of its time (count x median over the sum
    of them), given the medians of its measured bricks, and with ``cover`` as many more of the
    largest as it takes for the chosen ones to hold ``cover`` of that time; largest first."""
    counts = dec.counts()
    totals = {sig: counts[sig] * medians[sig] for sig in dec.bricks if medians.get(sig)}
    whole = sum(totals.values())
    chosen: list[str] = []
    held = 0.0
    for sig, t in sorted(totals.items(), key=lambda kv: -kv[1]):
        if whole <= 0 or (t < share * whole and held >= cover * whole):
            break
        chosen.append(sig)
        held += t
    return chosen


#: Least seconds of timed runs of a further measurement (drift moments).
MIN_TOPUP_S = 0.01
#: What a further measurement of a brick costs besides its timed runs (worker round trip, sessions,
#: cold copies, the brick before it, warm-up and primes): the allocation weighs it against timed
#: runs when it chooses how many bricks to measure again (a pilot of the main job: 16 ms for a
#: Sigmoid, 112 ms on average for a convolution).
TOPUP_COST_S = 0.02
#: Moments over which a model's estimate should average the machine's drift, with ``moments > 1``
#: and a ``target_ci`` (:func:`drift_moments`): a brick of 1/24 of its model or more is measured at
#: two moments at least, so that a burst of load on the machine during one short run cannot decide
#: a brick that matters.
DRIFT_MOMENTS = 24
#: Most seconds of timed runs the allocation gives one brick.
MAX_BRICK_S = 0.5
#: Relative half-width assumed for a brick whose measurement has no CI (too few samples).
UNKNOWN_HALF_WIDTH = 0.1


def remeasure(store: Store, dec: Decomposition, signatures: Sequence[str], measure: Callable[[Any], Any],
              system: str, config_id: str, budget: Any, *, rounds: int | None = 1,
              should_stop: Callable[[], bool] | None = None,
              after_each: Callable[[str, int, Any], object] | None = None,
              after_round: Callable[[int], bool] | None = None,
              overhead: Callable[[Any, Any], float | None] | None = None,
              own_context: bool = False) -> tuple[int, bool]:
    """Measure ``signatures`` (bricks of ``dec`` with an ok stored measurement) again, round robin,
    each in ``dec``'s context, and store each pooled with its stored measurement (median of their
    medians, see :func:`~dlbricks.generators.measurement.pool`).

    ``measure(item)`` returns a measurement. At most ``rounds`` rounds (None: until ``after_round(k)``,
    called after round ``k``, returns False); ``should_stop()`` is checked before each measurement and
    ``after_each(signature, round, measurement)`` called after it; ``overhead(item, pooled)`` gives
    the overhead stored with a pooled brick. With ``own_context``, a brick that ``dec``'s model has a
    measurement of in its own context (``store.measurements.record(..., model=)``) is pooled with that one and
    stored there. Returns the measurements made and whether ``should_stop`` ended the rounds (what
    was measured until then is pooled all the same)."""
    own: set[str] = set()
    if own_context and store.models.has(dec.model_key):
        own = {r.key for r in store.measurements.in_context(dec.model_key, system=system, config_id=config_id,
                                                            status="ok")}
    runs: dict[str, list[Any]] = {}
    contexts: dict[str, Any] = {}
    for sig in signatures:
        stored = store.measurements.get(sig, system, config_id, model=dec.model_key if sig in own else None)
        if stored is not None and stored.ok:
            runs[sig] = [stored]
            contexts[sig] = (dec.in_context(sig).context if sig in own
                             else stored_context(store, sig, system, config_id))
    made, stopped, k = 0, False, 0
    while runs and (rounds is None or k < rounds) and not stopped:
        for sig in list(runs):
            if should_stop is not None and should_stop():
                stopped = True
                break
            m = measure(dec.in_context(sig))
            made += 1
            if m.ok:
                runs[sig].append(m)
            if after_each is not None:
                after_each(sig, k, m)
        k += 1
        if not stopped and after_round is not None and not after_round(k):
            break
    for sig, measured in runs.items():
        if len(measured) > 1:
            pooled = pool(measured)
            if sig in own:
                store.measurements.record(pooled, system, budget=budget, rule="replace", context=contexts[sig],
                                          model=dec.model_key)
                continue
            store.measurements.record(pooled, system, budget=budget, rule="replace", context=contexts[sig],
                                      overhead_s=None if overhead is None else overhead(dec.in_context(sig), pooled))
    return made, stopped


def stored_context(store: Store, signature: str, system: Any, config_id: str) -> Any:
    """The :class:`~dlbricks.bricks.BrickContext` the stored measurement of a brick was first taken in
    (None where it has none, or none was stored)."""
    rows = store.measurements.bricks(system=system, config_id=config_id, signatures=[signature])
    return BrickContext.from_json(rows[0].context) if rows else None


def out_of_context(store: Store, dec: Decomposition, system: Any, config_id: str, cache_bytes: int) -> list[str]:
    """The bricks of ``dec`` whose ok stored measurement was taken in a context unlike theirs in
    ``dec`` (:meth:`dlbricks.bricks.BrickContext.same_as` on a cache of ``cache_bytes``) and that have no
    measurement in ``dec``'s context yet. A measurement stored without its context is left alone. A
    model not stored has none in its context: its measurements there are kept once it is stored."""
    done = set()
    if store.models.has(dec.model_key):
        done = {r.key for r in store.measurements.in_context(dec.model_key, system=system, config_id=config_id,
                                                             status="ok")}
    out = []
    for rec in store.measurements.bricks(system=system, config_id=config_id, signatures=list(dec.bricks), status="ok"):
        stored = BrickContext.from_json(rec.context)
        if stored is None or rec.key in done:
            continue
        if not dec.in_context(rec.key).context.same_as(stored, cache_bytes):
            out.append(rec.key)
    return out


def brick_shares(dec: Decomposition, measured: Mapping[str, Measurement]) -> list[Any]:
    """Each measured brick of ``dec`` as a :class:`~dlbricks.generators.budget.BrickShare`: occurrences
    times its median less the floor, the relative half-width of its median (from its samples'
    spread, :func:`~dlbricks.generators.measurement.spread_half_width`, else its CI), and the timed seconds
    behind it (samples times the longer of its median and a sample's least duration)."""
    counts = dec.counts()
    shares = []
    for sig in dec.bricks:
        m = measured.get(sig)
        if m is None or not m.ok or not m.median_s:
            continue
        width = spread_half_width(m)
        width = relative_half_width(m) if width is None else width
        shares.append(BrickShare(
            sig, counts[sig] * max(m.median_s - (m.floor_s or 0.0), 0.0),
            UNKNOWN_HALF_WIDTH if width is None else width,
            max(m.n, 1) * max(m.median_s, PILOT_BUDGET.sample_time)))
    return shares


def drift_moments(shares: Sequence[Any], estimate: float, effective: int) -> dict[str, int]:
    """Moments at which each brick should be measured so that the model's estimate averages the
    machine's drift over about ``effective`` moments, as a whole model sampled that many times does.

    A brick measured at ``k`` moments carries its share ``s`` of the drift's variance as ``s**2 / k``;
    the fewest runs for ``sum(s**2 / k) <= 1 / effective`` are ``k`` proportional to ``s`` (Neyman's
    rule again): ``k = ceil(s * sum(s) * effective)``, at least 1. A model of many small bricks
    averages its drift by itself (every brick once); an LSTM language model's two LSTM bricks, each
    a third of its time, get several moments each."""
    if estimate <= 0:
        return {s.key: 1 for s in shares}
    fractions = {s.key: s.total_s / estimate for s in shares}
    total = sum(fractions.values())
    return {k: max(1, math.ceil(f * total * effective - 1e-9)) for k, f in fractions.items()}


def _owed(shares: Sequence[Any], target_ci: float, estimate: float) -> dict[str, float]:
    """Further seconds of timed runs per brick for ``target_ci``, counting each further measurement's
    fixed cost (:data:`TOPUP_COST_S`): the bricks that carry most of the estimate's variance are
    measured again, as many of them as makes the total cheapest (Neyman's allocation among them, the
    others keeping what they have); where no choice reaches the target, all of them."""
    order = sorted(shares, key=lambda s: -(s.total_s * s.half_width) ** 2)
    best: tuple[float, dict[str, float]] | None = None
    for count in range(len(order) + 1):
        keep = {s.key for s in order[count:]}
        alloc = allocate(shares, target_ci, estimate_s=estimate, max_s=MAX_BRICK_S, keep=keep)
        if alloc.ci > target_ci * (1 + 1e-6) and count < len(order):
            continue
        owed = {s.key: alloc.extra_s(s) for s in shares if alloc.extra_s(s) > 0}
        cost = sum(owed.values()) + TOPUP_COST_S * len(owed)
        if best is None or cost < best[0]:
            best = (cost, owed)
        if alloc.ci <= target_ci * (1 + 1e-6) and not owed:
            break
    return {} if best is None else best[1]


def _allocate_model(store: Store, dec: Decomposition, config: Any, system: str, target_ci: float, runner: Any,
                    costs: _Costs, moments: int, fresh: set[str], *, record: Callable[[Any, Any], object],
                    progress: Callable[[Any, Any], object] | None) -> tuple[float | None, int]:
    """Measure again the bricks of ``dec`` that the allocation for ``target_ci`` owes time, each in
    ``dec``'s context, combined with what is stored; with ``moments > 1``, bricks first measured in
    this run (``fresh``) at the moments :func:`drift_moments` gives them (their further time split
    between them, round robin). Returns
    the relative half-width reached by the estimate and the number of further measurements."""
    stored = {r.key: r for r in store.measurements.bricks(system=system, config_id=config.config_id,
                                                          signatures=list(dec.bricks), status="ok")}
    shares = brick_shares(dec, stored)
    if not shares:
        return None, 0
    floor = next((m.floor_s for m in stored.values() if m.floor_s), 0.0) or 0.0
    estimate = sum(s.total_s for s in shares) + floor
    owed = _owed(shares, target_ci, estimate)
    rounds = {k: 1 for k in owed}
    if moments > 1:  # the machine drifts: a brick's runs at several moments, as many as its share asks
        for key, k in drift_moments(shares, estimate, DRIFT_MOMENTS).items():
            if key in fresh and k > 1:
                rounds[key] = k - 1
                owed[key] = max(owed.get(key, 0.0), MIN_TOPUP_S * (k - 1))
    runs: dict[str, list[Any]] = {k: [store.measurements.get(k, system, config.config_id)] for k in owed}
    done = 0
    for r in range(max(rounds.values(), default=0)):
        for key in sorted(owed, key=lambda k: -owed[k]):
            if r >= rounds.get(key, 1):
                continue
            item = dec.in_context(key)
            m = costs.measure(runner, item, topup_budget(owed[key] / rounds.get(key, 1)))
            done += 1
            if m.ok:
                runs[key].append(m)
            if progress is not None:
                progress(item, m)
    for key, measured in runs.items():
        if len(measured) > 1:
            combined = combine(measured)
            stored[key] = combined
            record(combined, dec.in_context(key))
    return model_ci(brick_shares(dec, stored), estimate), done




class LocalRun:
    """A :class:`~dlbricks.benchmarks_db.jobs.BenchJob` measured in this process, one item at a time, with
    the further measurements that ``options`` asks for (see the module docstring)."""

    def __init__(self, job: BenchJob, decs: Sequence[Decomposition], system: str, options: BenchOptions,
                 runner_factory: Callable[..., Any], backend: Any) -> None:
        self.job, self.decs, self.system, self.options = job, list(decs), system, options
        self.factory, self.backend = runner_factory, backend
        self.tasks: list[_Task] = []
        self.fresh: dict[str, set[str]] = {}  # config id -> bricks first measured in this run
        for cfg in job.configs:
            cfg_tasks = _tasks_for(job.store, [system], cfg, job.bricks, job.owner, job.whole_models,
                                   job.retry_failed)
            self.tasks += cfg_tasks
            self.fresh[cfg.config_id] = {t.key for t in cfg_tasks if t.kind == "brick"}
        self.runners: dict[str, Any] = {}
        self.counts = dict.fromkeys(("measured", "failed", "already", "held", "duplicates", "remeasured",
                                     "in_context"), 0)
        self.costs = _Costs()
        self.brick_budget = PILOT_BUDGET if options.target_ci is not None else None
        self.worst: list[float] = []
        self.spent = 0.0
        self.chunk: dict[str, tuple[_Task, Any]] = {}  # the current model's bricks measured in this run

    def run(self) -> BenchReport:
        """Measure every task, then what the options add; report what was done."""
        interrupted = False
        chunk_of: tuple[int, str] | None = None
        try:
            for done, task in enumerate(self.tasks, start=1):
                if (task.owner, task.config.config_id) != chunk_of:
                    chunk_of = (task.owner, task.config.config_id)
                    if not self._dominant_again(done - 1):
                        interrupted = True
                        break
                if self.job.stopping():
                    interrupted = True
                    break
                self._measure(done, task)
            if not interrupted:
                interrupted = not self._dominant_again(len(self.tasks))
            if not interrupted:
                interrupted = not self._in_context()
            if not interrupted and self.options.target_ci is not None:
                interrupted = not self._allocate()
        finally:
            for runner in self.runners.values():
                runner.close()
            self.job.store.claims.release_all()
        c, costs = self.counts, self.costs
        return BenchReport(self.system, tuple(cfg.config_id for cfg in self.job.configs), len(self.job.bricks),
                           len(self.tasks), c["measured"], c["failed"], c["already"], c["held"], c["duplicates"],
                           interrupted, time.monotonic() - self.job.started, c["remeasured"], costs.wall_s,
                           costs.setup_s, costs.timed_s, self.options.target_ci,
                           max(self.worst) if self.worst else None, in_context=c["in_context"])

    def _measure(self, done: int, task: _Task) -> None:
        """Claim ``task``, measure it and record it (or count who has it)."""
        store, cid = self.job.store, task.config.config_id
        state = self.job.claim(task, self.system)
        median, status, outcome = None, state.value, state
        self.costs.last = (None, None)
        if state is ClaimStatus.CLAIMED:
            t0 = time.monotonic()
            try:
                if task.kind == "brick":
                    m = self.costs.measure(self._runner(task.config), task.item, self.brick_budget)
                else:
                    m = self._runner(task.config).measure(task.item)
                overhead = self._overhead(task.item, task.config, m) if task.kind == "brick" else None
            except BaseException:
                store.claims.release(task.key, self.system, cid)
                raise
            budget = (self.brick_budget or self.job.budget) if task.kind == "brick" else self.job.budget
            outcome = _record_task(store, task, m, self.system, budget, overhead)
            self.spent += time.monotonic() - t0
            self.counts["measured"] += 1
            self.counts["failed"] += not m.ok
            self.counts["duplicates"] += outcome is not RecordOutcome.INSERTED and not self.job.retry_failed
            status, median = m.status, m.median_s
            if task.kind == "brick":
                self.chunk[task.key] = (task, m)
        else:
            self.counts["already" if state is ClaimStatus.MEASURED else "held"] += 1
        measured = self.counts["measured"]
        eta = self.spent / measured * (len(self.tasks) - done) if measured else None
        self._progress(done, task.kind, task.key, task.label, cid, status, median, outcome, eta, *self.costs.last)

    def _dominant_again(self, done: int) -> bool:
        """With ``moments > 1`` (and no target), measure the dominant bricks of the finished chunk
        again and pool them; False if told to stop."""
        moments = self.options.moments
        if moments == 1 or not self.chunk or self.options.target_ci is not None:
            self.chunk.clear()
            return True
        task = next(iter(self.chunk.values()))[0]
        cid, dec = task.config.config_id, self.decs[task.owner]
        stored = self.job.store.measurements.bricks(system=self.system, config_id=cid, signatures=list(dec.bricks),
                                                    status="ok")
        dominant = [sig for sig in dominant_bricks(dec, {r.key: r.median_s or 0.0 for r in stored})
                    if sig in self.chunk and self.chunk[sig][1].ok]
        chunk = dict(self.chunk)
        self.chunk.clear()

        def after_each(sig: str, k: int, m: Any) -> None:
            self.counts["remeasured"] += 1
            t = chunk[sig][0]
            self._progress(done, t.kind, t.key, f"{t.label} ({k + 2}/{moments})", cid, m.status, m.median_s,
                           RecordOutcome.REPLACED, None)

        runner = self._runner(task.config)
        _, stopped = remeasure(self.job.store, dec, dominant, lambda item: self.costs.measure(runner, item),
                               self.system, cid, self.job.budget, rounds=moments - 1, should_stop=self.job.stopping,
                               after_each=after_each, overhead=lambda item, m: self._overhead(item, task.config, m))
        return not stopped

    def _in_context(self) -> bool:
        """With ``contexts="measure"``: each model's bricks whose stored measurement was taken in
        another context (:func:`out_of_context`), measured again in the model's context and stored
        for it; False if told to stop."""
        if self.options.contexts != "measure":
            return True
        cache = last_level_cache_bytes()
        for cfg in self.job.configs:
            for dec in (d for d in self.decs if self.job.store.models.has(d.model_key)):
                for sig in out_of_context(self.job.store, dec, self.system, cfg.config_id, cache):
                    if self.job.stopping():
                        return False
                    item = dec.in_context(sig)
                    m = self.costs.measure(self._runner(cfg), item, None)
                    self.job.store.measurements.record(m, self.system, budget=self.job.budget, rule="replace",
                                                       context=item.context, model=dec.model_key)
                    self.counts["in_context"] += 1
                    self._progress(len(self.tasks), "brick", sig, f"{item.op_type} (in {dec.model}'s context)",
                                   cfg.config_id, m.status, m.median_s, RecordOutcome.INSERTED, None,
                                   *self.costs.last)
        return True

    def _allocate(self) -> bool:
        """With ``target_ci``: each model's further runs (:func:`_allocate_model`); False if told to stop."""
        total = len(self.tasks)
        for cfg in self.job.configs:
            for dec in self.decs:
                if self.job.stopping():
                    return False

                def record(m: Any, item: Any, c: Any = cfg) -> None:
                    self.job.store.measurements.record(m, self.system, budget=self.brick_budget, rule="replace",
                                                       overhead_s=self._overhead(item, c, m),
                                                       context=stored_context(self.job.store, item.key, self.system,
                                                                              c.config_id))

                def progress(t: Any, m: Any, d: Decomposition = dec, c: Any = cfg) -> None:
                    self._progress(total, "brick", t.key, f"{t.op_type} (+{d.model})", c.config_id, m.status,
                                   m.median_s, RecordOutcome.REPLACED, None)

                ci, again = _allocate_model(self.job.store, dec, cfg, self.system, float(self.options.target_ci or 0),
                                            self._runner(cfg), self.costs, self.options.moments,
                                            self.fresh[cfg.config_id], record=record, progress=progress)
                self.counts["remeasured"] += again
                if ci is not None:
                    self.worst.append(ci)
        return True

    def _runner(self, config: Any) -> Any:
        runner = self.runners.get(config.config_id)
        if runner is None:
            runner = self.runners[config.config_id] = self.factory(self.job.backend, config, self.job.budget,
                                                                    self.job.keep_samples)
        return runner

    def _overhead(self, item: Any, config: Any, m: Measurement) -> float | None:
        return brick_overhead(self.backend, item, config, m)

    def _progress(self, done: int, kind: str, key: str, label: str, config_id: str, status: str,
                  median: float | None, outcome: RecordOutcome | ClaimStatus, eta: float | None,
                  setup_s: float | None = None, timed_s: float | None = None) -> None:
        if self.job.progress is not None:
            self.job.progress(BenchProgress(done, len(self.tasks), kind, key, label, config_id, status, median,
                                            outcome, time.monotonic() - self.job.started, eta, None, setup_s,
                                            timed_s))
