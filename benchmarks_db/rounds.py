"""A model and its bricks measured in the same rounds: the paired design of ``evaluate`` and ``validate``.

The whole model and its bricks are held in worker processes, one after another
(:func:`~dlbricks.generators.runner.rounds_in_processes`), each of which times one whole run and a short
measurement of each brick, in the model's order, round after round. Each brick's runs over the rounds
are stored as its measurement in the model's context, for that model alone, so that its estimate
and its whole runs come from the same moments of the machine, and no other model's estimate reads
a moment that its own whole runs did not meet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dlbricks import Decomposition
from dlbricks.generators.rounds import RoundsBudget
from dlbricks.generators.runner import ROUND_PROCESSES, rounds_in_processes
from dlbricks.generators.system import last_level_cache_bytes

from ._populate import _price_reorders
from .jobs import brick_overhead
from .store import Store

if TYPE_CHECKING:
    from dlbricks.generators import Measurement
    from dlbricks.generators.rounds import PairedRounds

__all__ = ["QUEUE_TIMES", "measure_in_rounds", "model_measurements", "round_order", "whole_warmed"]

#: Fields of a brick's stored measurement that its rounds do not take (the launch queue's times on an
#: accelerator, from requests of their own): kept from the stored measurement.
QUEUE_TIMES = ("host_s", "device_s", "device_warm_s", "repeat_s")
#: Footprint, in last-level caches, above which a model's rounds on a CPU leave out the untimed whole
#: run before each timed one (``RoundsBudget.warm_whole``): a run that touches more than twice the
#: cache leaves in it none of what the next run reads first, so the timed run meets the same caches
#: after a run of its own as after the bricks' turn (methodology, "No warm run for a model larger
#: than the cache").
WARM_WHOLE_MAX_LLC = 2.0


def round_order(dec: Decomposition) -> list[str]:
    """The unique bricks of ``dec`` in the order of their first occurrence: the order of a round."""
    return list(dict.fromkeys(o.signature for o in dec.occurrences))


def whole_warmed(rounds: RoundsBudget, dec: Decomposition, device: str = "cpu",
                 cache_bytes: int | None = None) -> RoundsBudget:
    """``rounds`` without the untimed whole run before each timed one where ``dec``'s model touches
    more than :data:`WARM_WHOLE_MAX_LLC` last-level caches (``cache_bytes``, default this machine's)
    in one run on a CPU; else ``rounds`` as given."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    if rounds.warm_whole and device.lower() == "cpu" and dec.footprint_bytes() > WARM_WHOLE_MAX_LLC * cache:
        return dataclasses.replace(rounds, warm_whole=False)
    return rounds


def model_measurements(store: Store, dec: Decomposition, system: Any, config_id: str) -> dict[str, Measurement]:
    """The stored measurement of each brick of ``dec``: the one taken in ``dec``'s own context where
    one was (``store.measurements.record(..., model=)``: rounds, or ``bench`` measuring it again there), else the
    brick's; failed ones included."""
    own: set[str] = set()
    if store.models.has(dec.model_key):
        own = {r.key for r in store.measurements.in_context(dec.model_key, system=system, config_id=config_id,
                                                            status="ok")}
    found = {}
    for sig in dec.bricks:
        m = store.measurements.get(sig, system, config_id, model=dec.model_key if sig in own else None)
        if m is not None:
            found[sig] = m
    return found


def _measured(m: Measurement | None) -> bool:
    return m is not None and m.ok


def _with_queue_times(measured: Measurement, stored: Measurement | None) -> Measurement:
    if stored is None:
        return measured
    return dataclasses.replace(measured, **{f: getattr(stored, f) for f in QUEUE_TIMES})


def measure_in_rounds(store: Store, dec: Decomposition, runner: Any, whole: Any, system: Any, *,
                      budget: Any = None, rounds: RoundsBudget | None = None, processes: int = ROUND_PROCESSES,
                      seed: int | None = None, all_bricks: bool = False) -> PairedRounds | None:
    """Time ``whole`` (``dec``'s model) with each of its bricks that has an ok stored measurement in
    interleaved rounds, in ``processes`` worker processes of ``runner`` one after another (its
    current one, then fresh ones: :func:`~dlbricks.generators.runner.rounds_in_processes`; ``rounds`` the
    budget in each, default :class:`~dlbricks.generators.rounds.RoundsBudget`), and store each brick's runs
    over the rounds as its measurement in the model's context (the model must be stored; ``budget`` is
    stored with each row). With ``all_bricks``, every brick of the model joins the rounds, measured
    or not, and a brick with no measurement of its own outside a model's context gets its runs over
    the rounds as that too, with what its backend says its own run does beyond its model (a fused
    brick's reorders at level "all": ``brick_overhead_s``), and the backend's price of a layout
    reorder is calibrated where the database has none, as :func:`~dlbricks.benchmarks_db.populate`
    does (the rounds are then how the bricks are measured: chained rounds). On a CPU, a model that
    touches more than twice the last-level cache in one run runs whole without an untimed run
    before each timed one (:func:`whole_warmed`). Returns
    the rounds as measurements (the whole model's is the caller's to store), or None where the
    rounds failed: what was stored stands."""
    if all_bricks and dec.reorder_bytes:  # the rounds stand in for populate: the price it would calibrate
        store.systems.record(system)
        store.systems.record_backend(runner.config, runner.backend.name,
                                     version=runner.backend.describe(runner.config).get("version"))
        _price_reorders(store, [dec], [runner.config], runner.backend, system)
    stored = {k: m for k, m in model_measurements(store, dec, system, runner.config.config_id).items() if m.ok}
    keys = [sig for sig in round_order(dec) if all_bricks or sig in stored]
    if not keys:
        return None
    counts = dec.counts()
    rounds = whole_warmed(rounds or RoundsBudget(), dec, str(getattr(runner.config, "device", "cpu")))
    paired = rounds_in_processes(runner, whole, [dec.in_context(sig) for sig in keys], [counts[sig] for sig in keys],
                                 rounds, processes=processes, seed=seed, feeds=dec.feeds(keys),
                                 schedule=dec.schedule(keys), sweep_bytes=dec.deduplicated_weight_bytes())
    if paired is None:
        return None
    bricks: Mapping[str, Measurement] = {sig: _with_queue_times(m, stored.get(sig)) for sig, m in paired.bricks.items()}
    for sig, m in bricks.items():
        store.measurements.record(m, system, budget=budget, rule="replace", context=dec.in_context(sig).context,
                                  model=dec.model_key)
        if all_bricks and not _measured(store.measurements.get(sig, system, runner.config.config_id)):
            item = dec.in_context(sig)
            store.measurements.record(m, system, budget=budget, rule="replace", context=item.context,
                                      overhead_s=brick_overhead(runner.backend, item, runner.config, m))
    return dataclasses.replace(paired, bricks=bricks)
