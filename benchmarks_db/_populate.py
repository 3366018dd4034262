"""Fill a database: measure the bricks of models that are not measured yet, one at a time.

:func:`populate` is what ``dlbricks bench`` runs. For each backend configuration it lists the
bricks without a measurement for this system, then for each one: claims it (a lease row, in a
write transaction), measures it in the generators' isolated worker, and records the measurement
and drops the claim in one transaction. So a killed run loses at most the brick it was measuring,
a re-run resumes, and several processes on one file never measure a brick twice.

A brick that holds a large share of its model's time decides that model's estimate alone, and one
measurement catches the machine at one moment (this machine's speed drifts by 10-20% from one
second to the next). With ``moments > 1``, once a model's new bricks are measured, those that hold
at least :data:`DOMINANT_SHARE` of the model's measured time are measured again ``moments - 1``
times, round robin, and the runs are pooled (median of their medians, like a whole model measured in
several processes), the pooled measurement replacing the first.

With ``target_ci`` (a relative 95% half-width wanted of each model's estimate), every new brick is
first measured briefly (its pilot, :data:`~dlbricks.generators.PILOT_BUDGET`); then, model by model,
the pilots' medians and noise give each brick's weight in the model, and
:func:`~dlbricks.generators.allocate` says which bricks need more timed runs for the model's
estimate to reach the target (a brick of 0.01% of its model keeps its pilot; a dominant one is
measured again). With ``moments > 1``, a brick is also measured at as many moments as its share
needs for the model's estimate to average the machine's drift (:func:`drift_moments`). The further
runs are combined with the pilot (:func:`~dlbricks.generators.combine`), so the stored CI is what
was done.

With an ``executor`` (:class:`~dlbricks.benchmarks_db.RayExecutor`), the bricks are measured
elsewhere: :func:`populate` prepares a :class:`BenchJob` (configurations, unique bricks, claims and
recording), and the executor measures its tasks on its nodes while this process, the only writer,
claims and records each of them as above.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dlbricks._decompose import Decomposition
from dlbricks._errors import InvalidArgumentError

from ._records import ClaimStatus, RecordOutcome
from ._store import Store

if TYPE_CHECKING:
    from dlbricks.generators import Measurement

__all__ = ["BenchProgress", "BenchReport", "BenchJob", "Executor", "populate", "lease_for", "dominant_bricks",
           "DOMINANT_SHARE"]

#: Seconds a claim outlives the longest a measurement may take (worker start, floor, timeout).
LEASE_MARGIN_S = 180.0
#: Share of its model's measured time (count x median over the sum) that makes a brick dominant.
DOMINANT_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class BenchProgress:
    """Where a :func:`populate` run stands after one item.

    ``done`` counts the items handled so far (measured, found measured, or held by another
    process) out of ``total``; ``eta_s`` extrapolates the mean time per measured item; ``setup_s``
    and ``timed_s`` split a brick's measurement into time outside and inside its timed runs. ``node``
    names the node that measured it when an executor ran it elsewhere (None here).
    """

    done: int
    total: int
    kind: str
    key: str
    label: str
    config_id: str
    status: str
    median_s: float | None
    outcome: RecordOutcome | ClaimStatus
    elapsed_s: float
    eta_s: float | None
    node: str | None = None
    setup_s: float | None = None
    timed_s: float | None = None

    @property
    def left(self) -> int:
        """Items not handled yet."""
        return self.total - self.done


@dataclass(frozen=True, slots=True)
class BenchReport:
    """What a :func:`populate` run did.

    ``measured`` items got a new measurement (``failed`` of them not ok); ``already`` were found
    measured when claimed (by an earlier run or another process); ``held`` were left to another
    live process; ``duplicates`` counts recordings that met an existing row (0 unless leases
    expired while a brick was being measured); ``interrupted`` is true if ``should_stop`` ended it;
    ``remeasured`` counts the further measurements of dominant bricks (``moments``) and, with a
    ``target_ci``, the further measurements that the allocation asked for. ``wall_s`` is the time
    spent measuring bricks (request to reply, further measurements included), of which ``setup_s``
    outside the harness (worker round trip, sessions, cold copies, the brick before it, buffers),
    ``timed_s`` inside timed regions; ``worst_ci`` is the largest relative half-width that the
    allocation reached for a model's estimate (None without ``target_ci``). With an executor,
    ``systems`` lists the systems its nodes recorded under, ``nodes`` the nodes that measured,
    ``retried`` the items that a lost worker or node gave back to be measured again, and ``lost``
    the items given up after too many such losses (left unmeasured: a re-run measures them).
    """

    system: str
    configs: tuple[str, ...]
    bricks: int
    todo: int
    measured: int
    failed: int
    already: int
    held: int
    duplicates: int
    interrupted: bool
    elapsed_s: float
    remeasured: int = 0
    wall_s: float = 0.0
    setup_s: float = 0.0
    timed_s: float = 0.0
    target_ci: float | None = None
    worst_ci: float | None = None
    systems: tuple[str, ...] = ()
    nodes: int = 0
    retried: int = 0
    lost: int = 0


def lease_for(budget: Any) -> float:
    """A lease long enough for one measurement under ``budget``: its worker may start, calibrate
    the floor and time the item, each bounded by ``budget.timeout``."""
    return 2.0 * float(budget.timeout) + LEASE_MARGIN_S


def dominant_bricks(dec: Decomposition, medians: Mapping[str, float], share: float = DOMINANT_SHARE) -> list[str]:
    """The bricks of ``dec`` that hold at least ``share`` of its time (count x median over the sum
    of them), given the medians of its measured bricks; largest first."""
    counts = dec.counts()
    totals = {sig: counts[sig] * medians[sig] for sig in dec.bricks if medians.get(sig)}
    whole = sum(totals.values())
    return [sig for sig, t in sorted(totals.items(), key=lambda kv: -kv[1]) if whole > 0 and t >= share * whole]


@dataclass(frozen=True, slots=True)
class _Task:
    kind: str
    key: str
    label: str
    item: Any
    config: Any
    owner: int = -1  # index of the decomposition whose bricks' chunk it belongs to (-1: a model)


@dataclass(frozen=True, slots=True)
class BenchJob:
    """What :func:`populate` hands an :class:`Executor`: the configurations and unique bricks to
    measure, and the claims and recording that keep one database consistent.

    ``bricks`` maps each unique brick's signature to what is measured (the brick in the context of
    its first occurrence), in order of first use. The executor measures on its nodes; only this
    process writes to ``store``.
    """

    store: Store
    backend: str
    configs: tuple[Any, ...]
    budget: Any
    lease_s: float
    keep_samples: bool
    retry_failed: bool
    bricks: Mapping[str, Any]
    owner: Mapping[str, int]
    whole_models: tuple[Any, ...]
    reorders: bool
    progress: Callable[[BenchProgress], object] | None
    should_stop: Callable[[], bool] | None
    started: float

    def tasks(self, systems: Sequence[str], config: Any) -> list[_Task]:
        """The bricks, then the whole models, measured under ``config`` on none of ``systems``."""
        return _tasks_for(self.store, systems, config, self.bricks, self.owner, self.whole_models,
                          self.retry_failed)

    def claim(self, task: _Task, system: str) -> ClaimStatus:
        """Claim ``task`` for ``system`` (a lease of ``lease_s``), as a local run does."""
        return self.store.claim(task.key, system, task.config.config_id, lease_s=self.lease_s, kind=task.kind,
                                retry_failed=self.retry_failed)

    def release(self, task: _Task, system: str) -> None:
        """Drop the claim on ``task`` for ``system`` without recording anything."""
        self.store.release(task.key, system, task.config.config_id)

    def record(self, task: _Task, m: Measurement, system: str, overhead_s: float | None) -> RecordOutcome:
        """Store the measurement of ``task`` under ``system`` and drop its claim, in one transaction."""
        return _record_task(self.store, task, m, system, self.budget, overhead_s)

    def stopping(self) -> bool:
        """Whether ``should_stop`` asks the run to stop."""
        return self.should_stop is not None and bool(self.should_stop())


class Executor(Protocol):
    """Where :func:`populate` measures when not in this process (e.g. :class:`RayExecutor`)."""

    def run(self, job: BenchJob) -> BenchReport:
        """Measure ``job``'s tasks, claiming and recording each through ``job``; report what was done."""
        ...


def _unique_bricks(decs: Sequence[Decomposition]) -> tuple[dict[str, Any], dict[str, int]]:
    """Each unique brick of ``decs`` in the context of its first occurrence (BrickInContext), and the
    index of the decomposition it first occurs in."""
    bricks: dict[str, Any] = {}
    owner: dict[str, int] = {}
    for i, dec in enumerate(decs):
        bricks.update({sig: dec.in_context(sig) for sig in dec.bricks if sig not in bricks})
        owner.update({sig: i for sig in dec.bricks if sig not in owner})
    return bricks, owner


def _tasks_for(store: Store, systems: Sequence[str], cfg: Any, bricks: Mapping[str, Any], owner: Mapping[str, int],
               whole_models: Sequence[Any], retry_failed: bool) -> list[_Task]:
    """The bricks, then the whole models, without a measurement under ``cfg`` for any of ``systems``
    (with ``retry_failed``, a failed measurement counts as none)."""
    measured: set[str] = set(bricks)
    for sys_key in systems:
        measured -= set(store.unmeasured(sys_key, cfg.config_id, list(bricks), retry_failed=retry_failed))
    tasks = [_Task("brick", s, bricks[s].op_type, bricks[s], cfg, owner[s]) for s in bricks if s not in measured]
    models = {r.key for sys_key in systems
              for r in store.model_measurements(system=sys_key, config_id=cfg.config_id) if r.ok or not retry_failed}
    return tasks + [_Task("model", g.key, g.name, g, cfg) for g in whole_models if g.key not in models]


def _record_task(store: Store, task: _Task, m: Measurement, system: str, budget: Any,
                 overhead_s: float | None) -> RecordOutcome:
    """Store a brick's or a whole model's measurement and drop this store's claim on it."""
    if task.kind == "brick":
        return store.record(m, system, budget=budget, release=store.owner, overhead_s=overhead_s)
    return store.record_model(m, system, budget=budget, release=store.owner)


def brick_overhead(backend: Any, item: Any, config: Any, m: Measurement) -> float | None:
    """What ``backend`` says a brick's own run does beyond its model (its optional
    ``brick_overhead_s``), at the speed it was timed; None for failed measurements."""
    overhead = getattr(backend, "brick_overhead_s", None)
    if overhead is None or not m.ok or m.median_s is None:
        return None
    return overhead(item, config, m.median_s - (m.floor_s or 0.0))


def populate(store: Store, decompositions: Iterable[Decomposition], configs: Sequence[Any] | None = None,
             *, backend: str = "onnxruntime", budget: Any = None, system: Any = None,
             system_id: str | None = None, store_models: bool = True, whole_models: Sequence[Any] = (),
             retry_failed: bool = False, keep_samples: bool = False, lease_s: float | None = None,
             progress: Callable[[BenchProgress], object] | None = None,
             should_stop: Callable[[], bool] | None = None,
             runner_factory: Callable[..., Any] | None = None, moments: int = 1,
             target_ci: float | None = None, executor: Executor | None = None) -> BenchReport:
    """Measure every brick of ``decompositions`` not yet measured for this system, per configuration.

    Parameters
    ----------
    store : Store
    decompositions : iterable of Decomposition
        Their unique bricks, in order of first use, are what gets measured.
    configs : sequence of backend configurations or mappings, optional
        Default: the backend's default configuration. Each is measured in turn (a sweep).
    backend : str, default "onnxruntime"
        A registered ``dlbricks.generators`` backend.
    budget : dlbricks.generators.Budget, optional
        Default ``Budget()``; stored with each measurement.
    system : SystemInfo, optional
        Default: ``collect_system_info()``.
    system_id : str, optional
        Record under this id instead of the machine's fingerprint (tests, labelling machines).
    store_models : bool, default True
        Store the models and bricks first (pass False if the caller stored them with sources).
    whole_models : sequence of ModelGraph, optional
        Also time these whole models (for validation); their decompositions must be stored.
    retry_failed : bool, default False
        Measure again bricks whose stored measurement failed or timed out.
    keep_samples : bool, default False
        Store the raw samples of each measurement.
    lease_s : float, optional
        Claim duration; default :func:`lease_for` the budget.
    progress : callable, optional
        Called with a :class:`BenchProgress` after each item.
    should_stop : callable, optional
        Checked before each item; when it returns true the run stops (``interrupted``).
    runner_factory : callable, optional
        ``runner_factory(backend, config, budget, keep_samples)`` returning an object with
        ``measure(item)`` and ``close()``; default ``dlbricks.generators.Runner`` (tests pass fakes).
    moments : int, default 1
        Measure each brick that holds at least :data:`DOMINANT_SHARE` of its model's time this many
        times in all, at different moments (after the model's other new bricks), and store them
        pooled (see the module docstring).
    target_ci : float, optional
        Relative 95% half-width wanted of each model's estimate: new bricks are measured with the
        pilot budget, then each model's bricks get the further timed runs that the allocation asks
        for (see the module docstring); ``budget`` then applies to whole models only.
    executor : Executor, optional
        Measure elsewhere, e.g. ``RayExecutor()`` on the nodes of a Ray cluster, each node under its
        own system; this process still claims and records every item. Default: here, one item at a
        time. ``system``, ``system_id``, ``runner_factory``, ``moments > 1`` and ``target_ci`` are
        for local runs only.

    Returns
    -------
    BenchReport
    """
    from dlbricks.generators import PILOT_BUDGET, Budget, collect_system_info, get_backend, pool, resolve_config

    if isinstance(moments, bool) or not isinstance(moments, int) or moments < 1:
        raise InvalidArgumentError(f"'moments' must be an int >= 1. Got {moments!r} instead.")
    if target_ci is not None and (isinstance(target_ci, bool) or not isinstance(target_ci, (int, float))
                                  or not 0 < target_ci < 1):
        raise InvalidArgumentError(f"'target_ci' must be a number in (0, 1). Got {target_ci!r} instead.")
    started = time.monotonic()
    budget = Budget() if budget is None else budget
    lease = lease_for(budget) if lease_s is None else lease_s
    decs = list(decompositions)
    backend_obj = get_backend(backend)
    cfgs = [resolve_config(backend_obj, c) for c in (configs or [None])]
    if executor is not None:
        _check_executor_args(system, system_id, runner_factory, moments, target_ci)
    for cfg in cfgs:
        backend_obj.check(cfg)
    if executor is None:
        sys_key = store.record_system(system or collect_system_info(), fingerprint=system_id).fingerprint
    if store_models:
        for dec in decs:
            store.add_decomposition(dec)
    bricks, owner = _unique_bricks(decs)  # each brick with the brick before its first occurrence
    for cfg in cfgs:
        store.record_backend(cfg, backend_obj.name, version=backend_obj.describe(cfg).get("version"))
    if executor is not None:
        return executor.run(BenchJob(store, backend, tuple(cfgs), budget, lease, keep_samples, retry_failed, bricks,
                                     owner, tuple(whole_models), any(dec.reorder_bytes for dec in decs), progress,
                                     should_stop, started))
    tasks: list[_Task] = []
    fresh: dict[str, set[str]] = {}  # config id -> bricks first measured in this run
    for cfg in cfgs:
        cfg_tasks = _tasks_for(store, [sys_key], cfg, bricks, owner, whole_models, retry_failed)
        tasks += cfg_tasks
        fresh[cfg.config_id] = {t.key for t in cfg_tasks if t.kind == "brick"}
    factory = runner_factory or _default_runner

    def overhead_of(item: Any, config: Any, m: Measurement) -> float | None:
        return brick_overhead(backend_obj, item, config, m)

    _price_reorders(store, decs, cfgs, backend_obj, sys_key)
    runners: dict[str, Any] = {}
    counts = {"measured": 0, "failed": 0, "already": 0, "held": 0, "duplicates": 0, "remeasured": 0}
    costs = _Costs()
    brick_budget = PILOT_BUDGET if target_ci is not None else None
    worst: list[float] = []
    interrupted = False
    spent = 0.0
    chunk: dict[str, tuple[_Task, Any]] = {}  # the current model's bricks measured in this run

    def runner_for(config: Any) -> Any:
        runner = runners.get(config.config_id)
        if runner is None:
            runner = runners[config.config_id] = factory(backend, config, budget, keep_samples)
        return runner

    def measure_dominant_again(done: int) -> bool:
        """Measure the dominant bricks of the finished chunk again; False if told to stop."""
        if moments == 1 or not chunk or target_ci is not None:
            chunk.clear()
            return True
        task = next(iter(chunk.values()))[0]
        cid = task.config.config_id
        dec = decs[task.owner]
        stored = store.measurements(system=sys_key, config_id=cid, signatures=list(dec.bricks), status="ok")
        runs = {sig: [m] for sig, (_, m) in chunk.items() if m.ok}
        dominant = [sig for sig in dominant_bricks(dec, {r.key: r.median_s or 0.0 for r in stored})
                    if sig in runs]
        for k in range(2, moments + 1):
            for sig in dominant:
                if should_stop is not None and should_stop():
                    return False
                t = chunk[sig][0]
                m = costs.measure(runner_for(t.config), t.item)
                counts["remeasured"] += 1
                if m.ok:
                    runs[sig].append(m)
                if progress is not None:
                    progress(BenchProgress(done, len(tasks), t.kind, t.key, f"{t.label} ({k}/{moments})",
                                           cid, m.status, m.median_s, RecordOutcome.REPLACED,
                                           time.monotonic() - started, None))
        for sig in dominant:
            if len(runs[sig]) > 1:
                pooled = pool(runs[sig])
                store.record(pooled, sys_key, budget=budget, rule="replace",
                             overhead_s=overhead_of(chunk[sig][0].item, chunk[sig][0].config, pooled))
        chunk.clear()
        return True

    chunk_of: tuple[int, str] | None = None
    try:
        for done, task in enumerate(tasks, start=1):
            if (task.owner, task.config.config_id) != chunk_of:
                chunk_of = (task.owner, task.config.config_id)
                if not measure_dominant_again(done - 1):
                    interrupted = True
                    break
            if should_stop is not None and should_stop():
                interrupted = True
                break
            cid = task.config.config_id
            state = store.claim(task.key, sys_key, cid, lease_s=lease, kind=task.kind,
                                retry_failed=retry_failed)
            median = None
            status = state.value
            outcome: RecordOutcome | ClaimStatus = state
            costs.last = (None, None)
            if state is ClaimStatus.CLAIMED:
                t0 = time.monotonic()
                runner = runner_for(task.config)
                try:
                    if task.kind == "brick":
                        m = costs.measure(runner, task.item, brick_budget)
                    else:
                        m = runner.measure(task.item)
                    overhead = overhead_of(task.item, task.config, m) if task.kind == "brick" else None
                except BaseException:
                    store.release(task.key, sys_key, cid)
                    raise
                outcome = _record_task(store, task, m, sys_key,
                                       (brick_budget or budget) if task.kind == "brick" else budget, overhead)
                spent += time.monotonic() - t0
                counts["measured"] += 1
                counts["failed"] += not m.ok
                counts["duplicates"] += outcome is not RecordOutcome.INSERTED and not retry_failed
                status, median = m.status, m.median_s
                if task.kind == "brick":
                    chunk[task.key] = (task, m)
            else:
                counts["already" if state is ClaimStatus.MEASURED else "held"] += 1
            if progress is not None:
                eta = spent / counts["measured"] * (len(tasks) - done) if counts["measured"] else None
                progress(BenchProgress(done, len(tasks), task.kind, task.key, task.label, cid, status,
                                       median, outcome, time.monotonic() - started, eta, None, *costs.last))
        if not interrupted:
            interrupted = not measure_dominant_again(len(tasks))
        if not interrupted and target_ci is not None:
            for cfg in cfgs:
                for dec in decs:
                    if should_stop is not None and should_stop():
                        interrupted = True
                        break
                    ci, again = _allocate_model(
                        store, dec, cfg, sys_key, float(target_ci), runner_for(cfg), costs, moments,
                        fresh[cfg.config_id],
                        record=lambda m, item, c=cfg: store.record(m, sys_key, budget=brick_budget, rule="replace",
                                                                   overhead_s=overhead_of(item, c, m)),
                        progress=None if progress is None else lambda t, m, d=dec: progress(BenchProgress(
                            len(tasks), len(tasks), "brick", t.key, f"{t.op_type} (+{d.model})", cfg.config_id,
                            m.status, m.median_s, RecordOutcome.REPLACED, time.monotonic() - started, None)))
                    counts["remeasured"] += again
                    if ci is not None:
                        worst.append(ci)
    finally:
        for runner in runners.values():
            runner.close()
        store.release_all()
    return BenchReport(sys_key, tuple(c.config_id for c in cfgs), len(bricks), len(tasks),
                       counts["measured"], counts["failed"], counts["already"], counts["held"],
                       counts["duplicates"], interrupted, time.monotonic() - started, counts["remeasured"],
                       costs.wall_s, costs.setup_s, costs.timed_s, target_ci, max(worst) if worst else None)


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


class _Costs:
    """Wall, setup and timed seconds of the brick measurements of one :func:`populate` run."""

    def __init__(self) -> None:
        self.wall_s = self.setup_s = self.timed_s = 0.0
        self.last: tuple[float | None, float | None] = (None, None)  # the last measurement's setup, timed

    def measure(self, runner: Any, item: Any, budget: Any = None) -> Measurement:
        """``runner``'s measurement of ``item`` (under ``budget`` when given), its costs added up."""
        kwargs = {} if budget is None else {"budget": budget}
        detailed = getattr(runner, "measure_detailed", None)
        if detailed is None:
            m = runner.measure(item, **kwargs)
            timing = None
        else:
            m, timing = detailed(item, **kwargs)
        self.add(m, timing)
        return m

    def add(self, m: Measurement, timing: Any) -> None:
        """Add the costs of a measurement taken elsewhere (``timing`` None when it failed)."""
        self.wall_s += m.wall_time_s
        self.last = (None, None)
        if timing is not None:
            self.last = (max(m.wall_time_s - timing.warmup_s - timing.sampling_s, 0.0), timing.timed_s)
            self.setup_s += self.last[0]
            self.timed_s += timing.timed_s


def brick_shares(dec: Decomposition, measured: Mapping[str, Measurement]) -> list[Any]:
    """Each measured brick of ``dec`` as a :class:`~dlbricks.generators.BrickShare`: occurrences
    times its median less the floor, the relative half-width of its median (from its samples'
    spread, :func:`~dlbricks.generators.spread_half_width`, else its CI), and the timed seconds
    behind it (samples times the longer of its median and a sample's least duration)."""
    from dlbricks.generators import PILOT_BUDGET, BrickShare, relative_half_width, spread_half_width

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
    from dlbricks.generators import allocate

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
    from dlbricks.generators import combine, model_ci, topup_budget

    stored = {r.key: r for r in store.measurements(system=system, config_id=config.config_id,
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
    runs: dict[str, list[Any]] = {k: [store.measurement(k, system, config.config_id)] for k in owed}
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


def _price_reorders(store: Store, decs: Sequence[Decomposition], configs: Sequence[Any], backend: Any,
                    system: str) -> None:
    """Calibrate and store the backend's price of a layout reorder (``calibrate_reorders``) under
    each configuration that has none yet, when some model runs reorders (``reorder_bytes``)."""
    calibrate = getattr(backend, "calibrate_reorders", None)
    if calibrate is None or not any(dec.reorder_bytes for dec in decs):
        return
    for cfg in configs:
        if store.reorder_price(system, cfg.config_id) is None:
            price = calibrate(cfg)
            if price is not None:
                store.record_reorder_price(system, cfg.config_id, *price)


def _check_executor_args(system: Any, system_id: str | None, runner_factory: Any, moments: int,
                         target_ci: float | None) -> None:
    """Refuse the arguments of :func:`populate` that only a local run has."""
    if system is not None or system_id is not None:
        raise InvalidArgumentError(
            "With an executor each node records under its own system: leave out 'system' and 'system_id' "
            "(--system-id); to label a node, set DLBRICKS_SYSTEM_ID in its environment before 'ray start'.")
    if runner_factory is not None:
        raise InvalidArgumentError("'runner_factory' is for local runs; an executor runs the default Runner.")
    if moments != 1 or target_ci is not None:
        raise InvalidArgumentError("'moments' > 1 and 'target_ci' (--moments, --target-ci) are for local runs; "
                                   "leave them out with an executor.")


def _default_runner(backend: str, config: Any, budget: Any, keep_samples: bool) -> Any:
    from dlbricks.generators import Runner

    return Runner(backend, config, budget, keep_samples=keep_samples)
