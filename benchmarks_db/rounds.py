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
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlbricks import Decomposition, InvalidArgumentError
from dlbricks.generators.rounds import Anchored, RoundsBudget, with_anchored
from dlbricks.generators.runner import ROUND_PROCESSES, rounds_in_processes
from dlbricks.generators.system import last_level_cache_bytes

from ._populate import _price_reorders
from .jobs import brick_overhead
from .store import Store

if TYPE_CHECKING:
    from dlbricks.generators import Measurement
    from dlbricks.generators.rounds import PairedRounds

__all__ = ["QUEUE_TIMES", "Reuse", "anchored_groups", "chain_warmed", "measure_in_rounds", "model_measurements",
           "round_order", "whole_warmed"]

#: Fields of a brick's stored measurement that its rounds do not take (the launch queue's times on an
#: accelerator, from requests of their own): kept from the stored measurement.
QUEUE_TIMES = ("host_s", "device_s", "device_warm_s", "repeat_s")
#: Footprint, in last-level caches, above which a model's rounds on a CPU leave out the untimed whole
#: run before each timed one (``RoundsBudget.warm_whole``): a run that touches more than twice the
#: cache leaves in it none of what the next run reads first, so the timed run meets the same caches
#: after a run of its own as after the bricks' turn (methodology, "No warm run for a model larger
#: than the cache").
WARM_WHOLE_MAX_LLC = 2.0


@dataclass(frozen=True, slots=True)
class Reuse:
    """Which bricks a model's chained rounds take from earlier rounds instead of timing them again.

    A brick that another model's rounds measured (stored in that model's context) is taken from
    there, with the other bricks of that earlier moment that this model uses, where that moment
    holds at least ``min_bricks`` of them; ``share`` of them, by rank of weight in this model
    (occurrences times stored median: the heaviest, then every ``round(1 / share)``-th), are timed
    again in the rounds as its anchors (:class:`~dlbricks.generators.rounds.Anchored`). Every brick
    the rounds time (an anchor, or one no earlier rounds timed) reads its first input as the model's
    layer does, just written: the taken brick that writes it runs before it in the chain (its
    feeder, whose figure is taken all the same: what it reads, nothing in the chain wrote), and only
    bricks whose writer costs no more than themselves are sampled as anchors. A Relu whose input the
    chain did not write ran 1.2-2.8x its time in the model's own rounds, and mobilenet_v2_0.5, whose
    new depthwise convolutions read inputs that taken bricks wrote, came out +10.7% (-2.0% with
    every brick timed)."""

    share: float = 0.25
    min_bricks: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.share, bool) or not isinstance(self.share, (int, float)) or not 0 < self.share <= 1:
            raise InvalidArgumentError(f"Reuse.share must be a number in (0, 1]. Got {self.share!r} instead.")
        if isinstance(self.min_bricks, bool) or not isinstance(self.min_bricks, int) or self.min_bricks < 2:
            raise InvalidArgumentError(f"Reuse.min_bricks must be an int >= 2. Got {self.min_bricks!r} instead.")


def anchored_groups(store: Store, dec: Decomposition, system: Any, config_id: str,
                    reuse: Reuse | None = None, *, again: bool = False,
                    among: Collection[str] | None = None) -> list[Anchored]:
    """The bricks of ``dec`` that its rounds may take from other models' rounds, grouped by the model
    whose rounds timed them (not those they took through anchors in turn; each brick from the model
    holding most of ``dec``'s bricks, the
    latest first among equals), with each group's anchors (:class:`Reuse`); groups too small to
    anchor are left out (their bricks are timed). Nothing where ``dec``'s own context holds a
    measurement of a brick already (its rounds ran before: they run again in full), unless ``again``
    (what the plan would be, the model's own rounds aside). ``among``: the model keys whose rounds
    may be taken from (default every other model in ``store``)."""
    reuse = reuse or Reuse()
    if not store.models.has(dec.model_key):
        return []
    if not again and store.measurements.in_context(dec.model_key, system=system, config_id=config_id, status="ok"):
        return []
    mine, counts = set(dec.bricks), dec.counts()
    sources = []
    for model in store.models.all():
        if model.key == dec.model_key or (among is not None and model.key not in among):
            continue
        rows = [r for r in store.measurements.in_context(model.key, system=system, config_id=config_id, status="ok")
                if r.key in mine and r.median_s and r.median_s > 0 and r.wall_time_s > 0]
        if rows:
            sources.append((len(rows), max(r.created_at for r in rows), rows))
    taken: set[str] = set()
    chosen = []
    for _, _, rows in sorted(sources, key=lambda s: (s[0], s[1]), reverse=True):
        rows = [r for r in rows if r.key not in taken]
        if len(rows) < reuse.min_bricks:
            continue
        taken |= {r.key for r in rows}
        chosen.append(sorted(rows, key=lambda r: (-counts[r.key] * r.median_s, r.key)))
    stored = {r.key: r.median_s for rows in chosen for r in rows}

    def writer(key: str) -> str | None:
        """The taken brick that writes ``key``'s first input in the model, if any."""
        before = dec.previous(key)
        return before.signature if before is not None and before.signature in taken else None

    def fit(key: str) -> bool:  # an anchor whose writer, run before it, costs no more than itself
        w = writer(key)
        return w is None or stored[w] <= stored[key]

    step = max(1, round(1 / reuse.share))
    plans = [(ranked, sampled) for ranked in chosen
             if 0 < len(sampled := {r.key for r in [r for r in ranked if fit(r.key)][::step]}) < len(ranked)]
    taken = {r.key for ranked, _ in plans for r in ranked}  # a group with no anchor, or nothing else, is timed
    anchors = set().union(*(sampled for _, sampled in plans))
    chained = (set(dec.bricks) - taken) | anchors  # what the rounds time
    feeders = {w for key in chained if (w := writer(key)) is not None and w not in anchors}
    groups = []
    for ranked, mine_anchors in plans:
        rest = [r for r in ranked if r.key not in mine_anchors]
        kept = [r for r in ranked if r.key in mine_anchors]
        groups.append(Anchored(
            keys=tuple(r.key for r in rest), counts=tuple(counts[r.key] for r in rest),
            medians_s=tuple(r.median_s for r in rest), mins_s=tuple(r.min_s or r.median_s for r in rest),
            empties_s=tuple(r.empty_s for r in rest), anchors=tuple(r.key for r in kept),
            anchor_medians_s=tuple(r.median_s for r in kept),
            feeders=tuple(r.key for r in rest if r.key in feeders)))
    return groups


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


def chain_warmed(rounds: RoundsBudget, dec: Decomposition, keys: Collection[str], device: str = "cpu",
                 cache_bytes: int | None = None) -> RoundsBudget:
    """``rounds`` without the untimed pass of the chain before its timed one (nor the sweep that
    follows it) where both ``dec``'s model and the chain of ``keys`` read more than
    :data:`WARM_WHOLE_MAX_LLC` last-level caches of weights in one run on a CPU: the chain's own
    reads then leave none of what its next pass reads first, with that pass or without, as inside
    the model; else ``rounds`` as given."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    limit = WARM_WHOLE_MAX_LLC * cache
    if (rounds.warm_chain and device.lower() == "cpu" and dec.footprint_bytes() > limit
            and sum(dec.bricks[k].constant_bytes for k in keys) > limit):
        return dataclasses.replace(rounds, warm_chain=False)
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
                      seed: int | None = None, all_bricks: bool = False,
                      reuse: Reuse | None = None) -> PairedRounds | None:
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
    groups = (anchored_groups(store, dec, system, runner.config.config_id, reuse)
              if all_bricks and reuse is not None else [])
    left_out = {k for g in groups for k in g.keys} - {k for g in groups for k in g.feeders}
    keys = [sig for sig in round_order(dec) if (all_bricks or sig in stored) and sig not in left_out]
    if not keys:
        return None
    counts = dec.counts()
    device = str(getattr(runner.config, "device", "cpu"))
    rounds = chain_warmed(whole_warmed(rounds or RoundsBudget(), dec, device), dec, keys, device)
    sweep = dec.deduplicated_weight_bytes() + sum(dec.bricks[k].constant_bytes for k in left_out)
    paired = rounds_in_processes(runner, whole, [dec.in_context(sig) for sig in keys], [counts[sig] for sig in keys],
                                 rounds, processes=processes, seed=seed, feeds=dec.feeds(keys),
                                 schedule=dec.schedule(keys), sweep_bytes=sweep)
    if paired is None:
        return None
    if groups:
        paired = with_anchored(paired, groups)
    bricks: Mapping[str, Measurement] = {sig: _with_queue_times(m, stored.get(sig)) for sig, m in paired.bricks.items()}
    for sig, m in bricks.items():
        store.measurements.record(m, system, budget=budget, rule="replace", context=dec.in_context(sig).context,
                                  model=dec.model_key)
        if all_bricks and not _measured(store.measurements.get(sig, system, runner.config.config_id)):
            item = dec.in_context(sig)
            store.measurements.record(m, system, budget=budget, rule="replace", context=item.context,
                                      overhead_s=brick_overhead(runner.backend, item, runner.config, m))
    return dataclasses.replace(paired, bricks=bricks)
