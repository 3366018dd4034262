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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlbricks._decompose import Decomposition
from dlbricks._errors import InvalidArgumentError
from dlbricks.benchmarks_db._records import ClaimStatus, RecordOutcome
from dlbricks.benchmarks_db._store import Store

if TYPE_CHECKING:
    from dlbricks.generators import Measurement

__all__ = ["BenchProgress", "BenchReport", "populate", "lease_for", "dominant_bricks", "DOMINANT_SHARE"]

#: Seconds a claim outlives the longest a measurement may take (worker start, floor, timeout).
LEASE_MARGIN_S = 180.0
#: Share of its model's measured time (count x median over the sum) that makes a brick dominant.
DOMINANT_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class BenchProgress:
    """Where a :func:`populate` run stands after one item.

    ``done`` counts the items handled so far (measured, found measured, or held by another
    process) out of ``total``; ``eta_s`` extrapolates the mean time per measured item.
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
    ``remeasured`` counts the further measurements of dominant bricks (``moments``).
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


def populate(store: Store, decompositions: Iterable[Decomposition], configs: Sequence[Any] | None = None,
             *, backend: str = "onnxruntime", budget: Any = None, system: Any = None,
             system_id: str | None = None, store_models: bool = True, whole_models: Sequence[Any] = (),
             retry_failed: bool = False, keep_samples: bool = False, lease_s: float | None = None,
             progress: Callable[[BenchProgress], object] | None = None,
             should_stop: Callable[[], bool] | None = None,
             runner_factory: Callable[..., Any] | None = None, moments: int = 1) -> BenchReport:
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

    Returns
    -------
    BenchReport
    """
    from dlbricks.generators import Budget, collect_system_info, get_backend, pool
    from dlbricks.generators._runner import resolve_config

    if isinstance(moments, bool) or not isinstance(moments, int) or moments < 1:
        raise InvalidArgumentError(f"'moments' must be an int >= 1. Got {moments!r} instead.")
    started = time.monotonic()
    budget = Budget() if budget is None else budget
    lease = lease_for(budget) if lease_s is None else lease_s
    decs = list(decompositions)
    backend_obj = get_backend(backend)
    cfgs = [resolve_config(backend_obj, c) for c in (configs or [None])]
    for cfg in cfgs:
        backend_obj.check(cfg)
    sys_key = store.record_system(system or collect_system_info(), fingerprint=system_id).fingerprint
    if store_models:
        for dec in decs:
            store.add_decomposition(dec)
    bricks = {}
    owner: dict[str, int] = {}
    for i, dec in enumerate(decs):  # each brick with the brick before its first occurrence (BrickInContext)
        bricks.update({sig: dec.in_context(sig) for sig in dec.bricks if sig not in bricks})
        owner.update({sig: i for sig in dec.bricks if sig not in owner})
    tasks: list[_Task] = []
    for cfg in cfgs:
        store.record_backend(cfg, backend_obj.name, version=backend_obj.describe(cfg).get("version"))
        todo = store.unmeasured(sys_key, cfg.config_id, list(bricks), retry_failed=retry_failed)
        tasks += [_Task("brick", s, bricks[s].op_type, bricks[s], cfg, owner[s]) for s in todo]
        measured_models = {r.key for r in store.model_measurements(system=sys_key, config_id=cfg.config_id)
                           if r.ok or not retry_failed}
        tasks += [_Task("model", g.key, g.name, g, cfg) for g in whole_models if g.key not in measured_models]
    factory = runner_factory or _default_runner
    backend_overhead = getattr(backend_obj, "brick_overhead_s", None)

    def brick_overhead(item: Any, config: Any, m: Measurement) -> float | None:
        """What the backend says the brick's own run does beyond its model, at the speed it was timed."""
        if backend_overhead is None or not m.ok or m.median_s is None:
            return None
        return backend_overhead(item, config, m.median_s - (m.floor_s or 0.0))

    _price_reorders(store, decs, cfgs, backend_obj, sys_key)
    runners: dict[str, Any] = {}
    counts = {"measured": 0, "failed": 0, "already": 0, "held": 0, "duplicates": 0, "remeasured": 0}
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
        if moments == 1 or not chunk:
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
                m = runner_for(t.config).measure(t.item)
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
                             overhead_s=brick_overhead(chunk[sig][0].item, chunk[sig][0].config, pooled))
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
            if state is ClaimStatus.CLAIMED:
                t0 = time.monotonic()
                runner = runner_for(task.config)
                try:
                    m = runner.measure(task.item)
                    overhead = brick_overhead(task.item, task.config, m) if task.kind == "brick" else None
                except BaseException:
                    store.release(task.key, sys_key, cid)
                    raise
                if task.kind == "brick":
                    outcome = store.record(m, sys_key, budget=budget, release=store.owner, overhead_s=overhead)
                else:
                    outcome = store.record_model(m, sys_key, budget=budget, release=store.owner)
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
                                       median, outcome, time.monotonic() - started, eta))
        if not interrupted:
            interrupted = not measure_dominant_again(len(tasks))
    finally:
        for runner in runners.values():
            runner.close()
        store.release_all()
    return BenchReport(sys_key, tuple(c.config_id for c in cfgs), len(bricks), len(tasks),
                       counts["measured"], counts["failed"], counts["already"], counts["held"],
                       counts["duplicates"], interrupted, time.monotonic() - started, counts["remeasured"])


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


def _default_runner(backend: str, config: Any, budget: Any, keep_samples: bool) -> Any:
    from dlbricks.generators import Runner

    return Runner(backend, config, budget, keep_samples=keep_samples)
