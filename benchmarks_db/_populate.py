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
first measured briefly (its pilot, :data:`~dlbricks.generators.budget.PILOT_BUDGET`); then, model by model,
the pilots' medians and noise give each brick's weight in the model, and
:func:`~dlbricks.generators.budget.allocate` says which bricks need more timed runs for the model's
estimate to reach the target (a brick of 0.01% of its model keeps its pilot; a dominant one is
measured again). With ``moments > 1``, a brick is also measured at as many moments as its share
needs for the model's estimate to average the machine's drift (:func:`drift_moments`). The further
runs are combined with the pilot (:func:`~dlbricks.generators.measurement.combine`), so the stored CI is what
was done.

With an ``executor`` (:class:`~dlbricks.benchmarks_db.ray.RayExecutor`), the bricks are measured
elsewhere: :func:`populate` prepares a :class:`BenchJob` (configurations, unique bricks, claims and
recording), and the executor measures its tasks on its nodes while this process, the only writer,
claims and records each of them as above.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dlbricks import Decomposition, InvalidArgumentError
from dlbricks.generators import Budget, collect_system_info, get_backend
from dlbricks.generators.runner import Runner, resolve_config

from .jobs import BenchJob, BenchOptions, BenchProgress, BenchReport, Executor, lease_for
from .schedule import LocalRun
from .store import Store

__all__ = ["populate"]


def populate(store: Store, decompositions: Iterable[Decomposition], configs: Sequence[Any] | None = None,
             options: BenchOptions | None = None, *, system: Any = None, system_id: str | None = None,
             executor: Executor | None = None, runner_factory: Callable[..., Any] | None = None,
             progress: Callable[[BenchProgress], object] | None = None,
             should_stop: Callable[[], bool] | None = None) -> BenchReport:
    """Measure every brick of ``decompositions`` not yet measured for this system, per configuration.

    Parameters
    ----------
    store : Store
    decompositions : iterable of Decomposition
        Their unique bricks, in order of first use, are what gets measured.
    configs : sequence of backend configurations or mappings, optional
        Default: the backend's default configuration. Each is measured in turn (a sweep).
    options : BenchOptions, optional
        Backend, budget, precision target, moments, whole models, retries (default ``BenchOptions()``).
    system : SystemInfo, optional
        Default: ``collect_system_info()``.
    system_id : str, optional
        Record under this id instead of the machine's fingerprint (tests, labelling machines).
    executor : Executor, optional
        Measure elsewhere, e.g. ``RayExecutor()`` on the nodes of a Ray cluster, each node under its
        own system; this process still claims and records every item. Default: here, one item at a
        time (:class:`~dlbricks.benchmarks_db.schedule.LocalRun`). ``system``, ``system_id``,
        ``runner_factory``, ``moments > 1`` and ``target_ci`` are for local runs only.
    runner_factory : callable, optional
        ``runner_factory(backend, config, budget, keep_samples)`` returning an object with
        ``measure(item)`` and ``close()``; default ``dlbricks.generators.runner.Runner`` (tests pass fakes).
    progress : callable, optional
        Called with a :class:`BenchProgress` after each item.
    should_stop : callable, optional
        Checked before each item; when it returns true the run stops (``interrupted``).

    Returns
    -------
    BenchReport
    """
    options = options or BenchOptions()
    started = time.monotonic()
    budget = Budget() if options.budget is None else options.budget
    decs = list(decompositions)
    backend = get_backend(options.backend)
    cfgs = [resolve_config(backend, c) for c in (configs or [None])]
    if executor is not None:
        _check_executor_args(system, system_id, runner_factory, options)
    for cfg in cfgs:
        backend.check(cfg)
    sys_key = None
    if executor is None:
        sys_key = store.systems.record(system or collect_system_info(), fingerprint=system_id).fingerprint
    if options.store_models:
        for dec in decs:
            store.models.add(dec)
    bricks, owner = _unique_bricks(decs)  # each brick with the brick before its first occurrence
    for cfg in cfgs:
        store.systems.record_backend(cfg, backend.name, version=backend.describe(cfg).get("version"))
    job = BenchJob(store, options.backend, tuple(cfgs), budget,
                   lease_for(budget) if options.lease_s is None else options.lease_s, options.keep_samples,
                   options.retry_failed, bricks, owner, tuple(options.whole_models),
                   any(dec.reorder_bytes for dec in decs), progress, should_stop, started)
    if executor is not None:
        return executor.run(job)
    assert sys_key is not None
    _price_reorders(store, decs, cfgs, backend, sys_key)
    return LocalRun(job, decs, sys_key, options, runner_factory or _default_runner, backend).run()


def _unique_bricks(decs: Sequence[Decomposition]) -> tuple[dict[str, Any], dict[str, int]]:
    """Each unique brick of ``decs`` in the context of its first occurrence (BrickInContext), and the
    index of the decomposition it first occurs in."""
    bricks: dict[str, Any] = {}
    owner: dict[str, int] = {}
    for i, dec in enumerate(decs):
        bricks.update({sig: dec.in_context(sig) for sig in dec.bricks if sig not in bricks})
        owner.update({sig: i for sig in dec.bricks if sig not in owner})
    return bricks, owner


def _price_reorders(store: Store, decs: Sequence[Decomposition], configs: Sequence[Any], backend: Any,
                    system: str) -> None:
    """Calibrate and store the backend's price of a layout reorder (``calibrate_reorders``) under
    each configuration that has none yet, when some model runs reorders (``reorder_bytes``)."""
    calibrate = getattr(backend, "calibrate_reorders", None)
    if calibrate is None or not any(dec.reorder_bytes for dec in decs):
        return
    for cfg in configs:
        if store.systems.reorder_price(system, cfg.config_id) is None:
            price = calibrate(cfg)
            if price is not None:
                store.systems.record_reorder_price(system, cfg.config_id, *price)


def _check_executor_args(system: Any, system_id: str | None, runner_factory: Any, options: BenchOptions) -> None:
    """Refuse the arguments of :func:`populate` that only a local run has."""
    if system is not None or system_id is not None:
        raise InvalidArgumentError(
            "With an executor each node records under its own system: leave out 'system' and 'system_id' "
            "(--system-id); to label a node, set DLBRICKS_SYSTEM_ID in its environment before 'ray start'.")
    if runner_factory is not None:
        raise InvalidArgumentError("'runner_factory' is for local runs; an executor runs the default Runner.")
    if options.moments != 1 or options.target_ci is not None:
        raise InvalidArgumentError("'moments' > 1 and 'target_ci' (--moments, --target-ci) are for local runs; "
                                   "leave them out with an executor.")


def _default_runner(backend: str, config: Any, budget: Any, keep_samples: bool) -> Any:
    return Runner(backend, config, budget, keep_samples=keep_samples)
