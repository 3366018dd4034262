"""The records of a :func:`~dlbricks.benchmarks_db.populate` run: what it is asked (:class:`BenchOptions`),
what it hands an executor (:class:`BenchJob`), what it reports as it goes (:class:`BenchProgress`) and
at the end (:class:`BenchReport`), and the claims and recording that keep one database consistent."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dlbricks import InvalidArgumentError

from .records import ClaimStatus, RecordOutcome
from .store import Store

if TYPE_CHECKING:
    from dlbricks.generators import Measurement

__all__ = ["CONTEXT_RULES", "BenchOptions", "BenchProgress", "BenchReport", "BenchJob", "Executor", "lease_for"]

#: What ``populate`` does with a stored brick measured in another model's context (``BenchOptions.contexts``).
CONTEXT_RULES = ("measure", "reuse")

#: Seconds a claim outlives the longest a measurement may take (worker start, floor, timeout).
LEASE_MARGIN_S = 180.0


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """How :func:`~dlbricks.benchmarks_db.populate` measures.

    Attributes
    ----------
    backend : str, default "onnxruntime"
        A registered ``dlbricks.generators`` backend.
    budget : dlbricks.generators.Budget, optional
        Default ``Budget()``; stored with each measurement. With ``target_ci`` it applies to whole
        models only.
    target_ci : float, optional
        Relative 95% half-width wanted of each model's estimate: new bricks are measured with the
        pilot budget, then each model's bricks get the further timed runs that the allocation asks
        for (see :mod:`~dlbricks.benchmarks_db.schedule`).
    moments : int, default 1
        Measure each brick that holds at least ``DOMINANT_SHARE`` of its model's time this many times
        in all, at different moments (after the model's other new bricks), and store them pooled.
    whole_models : sequence of ModelGraph, default ()
        Also time these whole models (for validation); their decompositions must be stored.
    store_models : bool, default True
        Store the models and bricks first (False if the caller stored them with their sources).
    retry_failed : bool, default False
        Measure again bricks whose stored measurement failed or timed out.
    keep_samples : bool, default False
        Store the raw samples of each measurement.
    lease_s : float, optional
        Claim duration; default :func:`lease_for` the budget.
    contexts : {"measure", "reuse"}, default "measure"
        ``"measure"``: a model's brick whose stored measurement was taken in a context unlike the
        model's (another brick before it, another reuse distance: :meth:`dlbricks.bricks.BrickContext.same_as`)
        is measured again in the model's context and stored for that model
        (``store.measurements.record(..., model=)``), which its estimates then use; ``"reuse"``: stored
        measurements stand for every model. Runs here only, not on an executor.
    """

    backend: str = "onnxruntime"
    budget: Any = None
    target_ci: float | None = None
    moments: int = 1
    whole_models: Sequence[Any] = ()
    store_models: bool = True
    retry_failed: bool = False
    keep_samples: bool = False
    lease_s: float | None = None
    contexts: str = "measure"

    def __post_init__(self) -> None:
        if self.contexts not in CONTEXT_RULES:
            raise InvalidArgumentError(f"'contexts' must be one of {list(CONTEXT_RULES)}. Got {self.contexts!r}.")
        moments = self.moments
        if isinstance(moments, bool) or not isinstance(moments, int) or moments < 1:
            raise InvalidArgumentError(f"'moments' must be an int >= 1. Got {moments!r} instead.")
        target = self.target_ci
        if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                                   or not 0 < target < 1):
            raise InvalidArgumentError(f"'target_ci' must be a number in (0, 1). Got {target!r} instead.")


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
    ``in_context`` counts bricks measured again in a model's context (``BenchOptions.contexts``).
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
    in_context: int = 0


def lease_for(budget: Any) -> float:
    """A lease long enough for one measurement under ``budget``: its worker may start, calibrate
    the floor and time the item, each bounded by ``budget.timeout``."""
    return 2.0 * float(budget.timeout) + LEASE_MARGIN_S


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
        return self.store.claims.take(task.key, system, task.config.config_id, lease_s=self.lease_s, kind=task.kind,
                                      retry_failed=self.retry_failed)

    def release(self, task: _Task, system: str) -> None:
        """Drop the claim on ``task`` for ``system`` without recording anything."""
        self.store.claims.release(task.key, system, task.config.config_id)

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


def _tasks_for(store: Store, systems: Sequence[str], cfg: Any, bricks: Mapping[str, Any], owner: Mapping[str, int],
               whole_models: Sequence[Any], retry_failed: bool) -> list[_Task]:
    """The bricks, then the whole models, without a measurement under ``cfg`` for any of ``systems``
    (with ``retry_failed``, a failed measurement counts as none)."""
    measured: set[str] = set(bricks)
    for sys_key in systems:
        measured -= set(store.measurements.unmeasured(sys_key, cfg.config_id, list(bricks), retry_failed=retry_failed))
    tasks = [_Task("brick", s, bricks[s].op_type, bricks[s], cfg, owner[s]) for s in bricks if s not in measured]
    models = {r.key for sys_key in systems
              for r in store.measurements.models(system=sys_key, config_id=cfg.config_id) if r.ok or not retry_failed}
    return tasks + [_Task("model", g.key, g.name, g, cfg) for g in whole_models if g.key not in models]


def _record_task(store: Store, task: _Task, m: Measurement, system: str, budget: Any,
                 overhead_s: float | None) -> RecordOutcome:
    """Store a brick's or a whole model's measurement and drop this store's claim on it."""
    if task.kind == "brick":
        return store.measurements.record(m, system, budget=budget, release=store.owner, overhead_s=overhead_s,
                                         context=getattr(task.item, "context", None))
    return store.measurements.record_model(m, system, budget=budget, release=store.owner)


def brick_overhead(backend: Any, item: Any, config: Any, m: Measurement) -> float | None:
    """What ``backend`` says a brick's own run does beyond its model (its optional
    ``brick_overhead_s``), at the speed it was timed; None for failed measurements."""
    overhead = getattr(backend, "brick_overhead_s", None)
    if overhead is None or not m.ok or m.median_s is None:
        return None
    return overhead(item, config, m.median_s - (m.floor_s or 0.0))


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
