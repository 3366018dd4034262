"""Estimating models from a brick database, and validating estimates against whole-model runs."""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dlbricks import Brick, Decomposition, DlbricksError, InvalidArgumentError, ModelGraph, decompose, load_model
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.rounds import measure_in_rounds, model_measurements
from dlbricks.benchmarks_db.schedule import out_of_context
from dlbricks.generators import Budget, Measurement, OrtConfig, collect_system_info, get_backend
from dlbricks.generators.system import last_level_cache_bytes
from dlbricks.generators.ort_kernels import ReorderCost
from dlbricks.generators.protocols import BackendConfig
from dlbricks.generators.rounds import PairedRounds, RoundsBudget
from dlbricks.generators.runner import Runner
from dlbricks.model_zoo import build
from dlbricks.names import check_identifier

from ._mxnet_profile import mxnet_in_model_times
from ._profile import InModelTimes, in_model_times
from ._runs import check_runs, stop_on_failure
from ._whole import EVALUATE_BUDGET, measure_whole
from .estimation import (
    COMPOSITION_NEIGHBOURS,
    CompositionReference,
    Estimate,
    Peaks,
    Plan,
    composition_error,
    estimate_decomposition,
    paired_interval,
    plan_decomposition,
    with_composition,
)
from .predict import LatencyPredictor, Predictor, brick_call_s

__all__ = [
    "CHAINED_ROUNDS", "PAIRED_ROUNDS", "ROUND_DESIGNS", "TRUSTED_SWING", "chains_bricks", "default_rounds", "estimate",
    "composition_references", "validate", "plan", "Validation", "open_store", "last_level_cache",
    "matvec_rates", "memory_rate", "backend_name", "capture_failure", "device_of", "graph_config", "peaks_key", "threads_of",
    "cache_capacity"
]

#: The rounds of a paired validation and of each model of ``evaluate``, in each of its
#: :data:`~dlbricks.generators.runner.ROUND_PROCESSES` worker processes
#: (:class:`~dlbricks.generators.rounds.RoundsBudget`): one whole run and one short measurement of each of the
#: model's bricks a round, until the ratio of their sums holds to +-1% (95%), 6 rounds and half a second
#: at least, 4 s at most (a model of seconds gets its 6 rounds all the same).
PAIRED_ROUNDS = RoundsBudget(min_rounds=6, min_time=0.5, max_time=4.0, rel_ci=0.02)
#: Rounds of single calls on bricks prepared as a chain (``RoundsBudget.chained``): a round costs
#: about two runs of the model's unique bricks (an untimed pass, ``warm_chain``, then the timed one),
#: so more rounds fit in the same time; 10 a process at least, which a model of a quarter second or
#: more takes beyond the 3 s (its whole run twice a round, and its bricks twice). Most models stop on the 3 s, not on their CI: the processes, two to
#: four, are what spreads a model's rounds over the machine's phases. A model whose rounds are long
#: (ten of them over 8 s a process: a run of about half a second or more) stops at 3 rounds a process
#: once 8 s are spent: each of its rounds spans several of the machine's phases already.
CHAINED_ROUNDS = RoundsBudget(min_rounds=10, min_time=0.2, max_time=3.0, rel_ci=0.02, chained=True, warm_chain=True,
                              least_rounds=3, long_time=8.0)
#: The rounds ``evaluate --rounds`` chooses among.
ROUND_DESIGNS = {"bursts": PAIRED_ROUNDS, "chained": CHAINED_ROUNDS}


def chains_bricks(config: Any) -> bool:
    """Whether ``config``'s backend measures bricks in chained rounds: on a CPU, with a backend that
    prepares a model's bricks as a chain (onnxruntime's ``prepare_chain``)."""
    return (getattr(config, "device", "cpu") == "cpu"
            and hasattr(get_backend(backend_name(config)), "prepare_chain"))


def default_rounds(config: Any, granularity: str = "layer") -> RoundsBudget:
    """The rounds of a paired run under ``config`` when none are asked for: :data:`CHAINED_ROUNDS`
    for layer or fused bricks where the backend chains bricks on a CPU (:func:`chains_bricks`), else
    :data:`PAIRED_ROUNDS` (and for granularity "both")."""
    return CHAINED_ROUNDS if granularity in ("layer", "fused") and chains_bricks(config) else PAIRED_ROUNDS
#: Relative half-width that the machine's swing may leave in an estimate (the 95% interval of the
#: ratio of a model's bricks to its whole runs over their rounds) before its figure is said not to be
#: trusted.
TRUSTED_SWING = 0.03

def open_store(db: Store | str | os.PathLike[str]) -> Store:
    """The Store for ``db`` (a Store is returned as it is)."""
    return db if isinstance(db, Store) else Store.open(db)


def _decompose(graph: ModelGraph, granularity: str, config: BackendConfig) -> Decomposition:
    """Layer bricks, or fused bricks as the configuration's runtime groups layers into kernels."""
    if granularity == "fused":
        return decompose(graph, "fused", **fusion_options(config))
    return decompose(graph, granularity)


def _label(granularity: str, config: BackendConfig) -> str:
    if granularity != "fused":
        return granularity
    options = fusion_options(config)
    return f"fused:{options.get('opt_level') or options.get('runtime')}"


def fusion_options(config: Any) -> dict[str, str]:
    """``decompose``'s keywords for the fused bricks of ``config``: the runtime whose executed kernels
    its backend's fused bricks are (its ``fusion_runtime``, e.g. ``{"runtime": "openvino"}``), else
    onnxruntime's groups at the configuration's optimization level (``{"opt_level": "all"}``).

    Raises
    ------
    InvalidArgumentError
        For a backend that neither names a fusion runtime nor has optimization levels.
    """
    runtime = getattr(get_backend(backend_name(config)), "fusion_runtime", None)
    if runtime is not None:
        return {"runtime": runtime}
    level = getattr(config, "graph_optimization_level", None)
    if not isinstance(config, OrtConfig) or level is None:
        raise InvalidArgumentError(f"granularity 'fused' needs a backend that says which layers it fuses; "
                                   f"models run in {backend_name(config)} take granularity 'layer'.")
    return {"opt_level": level}


def _decomposition(model: Any, store: Store, granularity: str, config: OrtConfig) -> Decomposition:
    if isinstance(model, Decomposition):
        return model
    if isinstance(model, str) and not os.path.exists(model) and not model.endswith(".onnx"):
        if _is_stored(store, model):  # an ambiguous name is refused, listing the models it names
            return store.models.decomposition(model, _label(granularity, config))
        return _decompose(load_model(build(model), name=model), granularity, config)
    graph = model if isinstance(model, ModelGraph) else load_model(model)
    return _decompose(graph, granularity, config)


def _is_stored(store: Store, name_or_key: str) -> bool:
    """Whether ``name_or_key`` names or keys a stored model (one or several), as
    :meth:`~dlbricks.benchmarks_db.Models.get` takes it."""
    prefix = len(name_or_key) >= 6
    return any(m.name == name_or_key or m.key == name_or_key or (prefix and m.key.startswith(name_or_key))
               for m in store.models.all())


def backend_name(config: BackendConfig) -> str:
    """The registered backend that runs a configuration (``OrtConfig`` -> onnxruntime)."""
    return config.backend


def device_of(config: BackendConfig) -> str:
    """Where a configuration computes: ``"cpu"``, or its accelerator (``"cuda"``, ``"gpu"``)."""
    return config.device


def graph_config(config: BackendConfig) -> BackendConfig:
    """The configuration that runs a whole model captured in a CUDA graph beside ``config``'s eager
    runs (the backend's ``graph_config``).

    Raises
    ------
    InvalidArgumentError
        If ``config``'s backend or device has no such graphs.
    """
    ask = getattr(get_backend(backend_name(config)), "graph_config", None)
    graphed = None if ask is None else ask(config)
    if graphed is None:
        raise InvalidArgumentError(f"{backend_name(config)} on {device_of(config)} captures no CUDA graph: "
                                   "ask for CUDA graphs with onnxruntime on --device cuda.")
    return graphed


def peaks_key(config: Any) -> str:
    """Whose peaks a configuration's roofline takes: its backend's name on the CPU, ``name:device``
    on an accelerator (``onnxruntime:cuda``, ``mxnet:gpu``), calibrated and stored apart."""
    device, name = device_of(config), backend_name(config)
    return name if device == "cpu" else f"{name}:{device}"


def threads_of(config: BackendConfig) -> int:
    """Threads a configuration computes with (onnxruntime intra-op, MXNet OpenMP)."""
    return config.threads


def _system_key(system: Any) -> Any:
    return system if system is not None else collect_system_info()


def _lookup(store: Store, dec: Decomposition, system: Any, config_id: str) -> dict[str, Measurement]:
    """The stored measurement of each brick of ``dec`` (in its own context where it has one)."""
    return model_measurements(store, dec, system, config_id)


def other_contexts(store: Store, dec: Decomposition, system: Any, config: Any) -> list[str]:
    """The bricks of ``dec`` whose stored measurement was taken in another model's context unlike
    theirs in ``dec`` and not yet again in ``dec``'s (:func:`~dlbricks.benchmarks_db.schedule.out_of_context`,
    on ``system``'s last-level cache): what ``bench`` measures again for the model."""
    cache = last_level_cache(store, system)
    return out_of_context(store, dec, system, config.config_id, cache or last_level_cache_bytes())


def _alternatives(store: Store, dec: Decomposition, system: Any, config: Any, *, same_runtime: bool = False,
                  ) -> dict[str, list[Measurement]]:
    """Measurements of the bricks under every configuration of this system with the same threads (with
    ``same_runtime``, of ``config``'s runtime only)."""
    out: dict[str, list[Measurement]] = {}
    for rec in store.systems.backends():
        if rec.config_id == config.config_id or _stored_threads(rec) != threads_of(config):
            continue
        if same_runtime and rec.runtime != backend_name(config):
            continue
        for sig, m in _lookup(store, dec, system, rec.config_id).items():
            out.setdefault(sig, []).append(m)
    return out


def _stored_threads(record: Any) -> int | None:
    """Threads of a stored backend configuration (its ``threads``, rebuilt by its backend), or None
    where its backend is not installed here or cannot rebuild it."""
    options = record.options if isinstance(record.options, Mapping) else {}
    try:
        return threads_of(get_backend(record.runtime).config_from_dict(options))
    except DlbricksError:
        return None


def _predictor(store: Store, system: Any, config_id: str, peaks: Peaks | None = None) -> LatencyPredictor:
    records = [r for r in store.measurements.bricks(system=system, config_id=config_id, status="ok")]
    latency = {r.key: r.median_s - brick_call_s(r) for r in records if r.median_s is not None}
    bricks = [store.bricks.get(sig) for sig in latency]
    cache = last_level_cache(store, system)
    return LatencyPredictor().fit(bricks, latency, peaks=peaks, cache_bytes=cache,
                                  memory_rate=memory_rate(store, system, cache), step_rates=matvec_rates(store, system))


def memory_rate(store: Any, system: Any, cache_bytes: int | None) -> float | None:
    """Bytes/s at which the calibrated matrix-vector product read weights larger than
    ``cache_bytes`` again and again (the smallest such size calibrated on the CPU by
    ``dlbricks calibrate``), or None where none was. The calibrated Adds are left out: a recurrent
    step runs the matrix-vector product's loop over its weights, not an Add's two read streams and
    one write stream."""
    if not cache_bytes:
        return None
    return next((rate for size, rate in matvec_rates(store, system) if size > cache_bytes), None)


def matvec_rates(store: Any, system: Any) -> tuple[tuple[int, float], ...]:
    """The calibrated matrix-vector products of ``system`` on the CPU as ``(weight bytes, bytes/s)``,
    smallest first, each size at the best rate of the backends calibrated (``dlbricks
    calibrate``); empty where none was."""
    getter = getattr(getattr(store, "systems", None), "peaks", None)
    stored = None if getter is None else getter(system)
    if stored is None:
        return ()
    best: dict[int, float] = {}
    cpu = [record for key, record in (stored.details.get("backends") or {}).items() if ":" not in key]
    for size, rate in (point for record in cpu for point in record.get("gemv") or ()):
        best[int(size)] = max(best.get(int(size), 0.0), float(rate))
    return tuple(sorted(best.items()))


def _cache_sizes(store: Any, system: Any) -> tuple[tuple[str, int], ...]:
    """``(level, bytes)`` of the caches of ``system`` (a ``SystemInfo``, or a fingerprint stored in
    ``store``); empty where they are not known."""
    sizes = getattr(system, "cache_bytes", None)
    if sizes is not None:
        return tuple(sizes)
    fingerprint = getattr(system, "fingerprint", system)
    stored = getattr(getattr(store, "systems", None), "all", lambda: [])()
    record = next((r for r in stored if r.fingerprint == fingerprint), None)
    return tuple(((record.details or {}).get("cache_bytes") or {}).items()) if record else ()


def last_level_cache(store: Any, system: Any) -> int | None:
    """Bytes of the largest cache of ``system`` (a ``SystemInfo``, or a fingerprint stored in
    ``store``), or None where it is not known."""
    return max((size for _, size in _cache_sizes(store, system)), default=None)


def cache_capacity(store: Any, system: Any) -> int | None:
    """Bytes of data the caches of ``system`` (a ``SystemInfo``, or a fingerprint stored in
    ``store``) hold at most: every data or unified level summed (a victim cache holds lines the
    level above does not), or None where they are not known."""
    return sum(size for name, size in _cache_sizes(store, system) if not name.endswith("i")) or None


def estimate(model: Any, db: Store | str | os.PathLike[str], *, system: Any = None,
             config: OrtConfig | None = None, granularity: str = "layer", on_missing: str = "error",
             budget: Budget | None = None, peaks: Peaks | None = None, launch_queue: bool = True,
             composition: bool = True, predictor: Predictor | None = None) -> Estimate:
    """Estimate a model's latency from the brick database.

    Parameters
    ----------
    model : path, ModelProto, ModelGraph, Decomposition or name
        A model, or the name of a model stored in the db (or of a zoo model).
    db : Store or path
        The brick database.
    system : SystemInfo or fingerprint, optional
        Whose measurements to use; default: this machine.
    config : OrtConfig, optional
        The configuration to estimate (default: 1 thread, optimizations off, bricks measured in
        their in-model cache state).
    on_missing : {"error", "predict", "measure"}
        Bricks without a measurement: refuse, predict them from measured bricks of the same op
        type, or measure them now (and store them).
    budget : Budget, optional
        For ``on_missing="measure"``.
    peaks : Peaks, optional
        Default: the peaks stored for the system by ``dlbricks calibrate``.
    launch_queue : bool, default True
        On an accelerator, compose through the launch queue where the bricks have its times
        (:func:`estimate_decomposition`); False, as on the CPU: the sequential sum.
    composition : bool, default True
        Widen the interval by how far the brick sums of the database's other models, those nearest
        in latency, landed from their whole runs (:func:`composition_references`,
        :func:`~dlbricks.estimator.estimation.composition_error`): the bricks' own intervals do not hold the
        error of composing them. Unchanged where the database has no such model.
    predictor : Predictor, optional
        For ``on_missing="predict"``: what predicts the missing bricks (any :class:`Predictor`);
        default: a :class:`LatencyPredictor` fitted on the database's measured bricks.

    Raises
    ------
    InvalidArgumentError
        If ``predictor`` is not a :class:`Predictor`, or is given without ``on_missing="predict"``.
    """
    _check_predictor(predictor, on_missing)
    store = open_store(db)
    system = _system_key(system)
    cfg = config or OrtConfig()
    dec = _decomposition(model, store, granularity, cfg)
    if on_missing in ("predict", "measure"):
        measured = _lookup(store, dec, system, cfg.config_id)
        if any(s not in measured or not measured[s].ok for s in dec.bricks):
            measure = on_missing == "measure"
            if measure:
                _check_storable(dec, system)
            check_runs(dec, _graph_of(model, store), cfg, backend_name(cfg), budget, probe=measure)
    est = _estimate_decomposition(dec, store, system, cfg, on_missing, budget, peaks, launch_queue,
                                  predictor=predictor)
    est = replace(est, swing=bricks_swing(est, _lookup(store, dec, system, cfg.config_id)))
    if not composition:
        return est
    references = composition_references(store, system=system, config=cfg, granularity=granularity,
                                        near_s=est.sequential_s, exclude=(dec.model_key,))
    if not references:
        return est
    return with_composition(est, composition_error(references, est.sequential_s), len(references))


def _check_predictor(predictor: Any, on_missing: str) -> None:
    """Refuse a ``predictor`` that is not a :class:`Predictor`, or one given where nothing is predicted."""
    if predictor is None:
        return
    if not isinstance(predictor, Predictor):
        raise InvalidArgumentError(f"'predictor' must have with_peaks(peaks) and prediction(brick) (a Predictor). "
                                   f"Got {type(predictor).__name__} instead.")
    if on_missing != "predict":
        raise InvalidArgumentError(f"a predictor predicts missing bricks: pass on_missing='predict' with it. "
                                   f"Got on_missing={on_missing!r} instead.")


def _check_storable(dec: Decomposition, system: Any) -> None:
    """Refuse, before anything is measured or stored, a model name or system id that the database
    would refuse to store (blank, unprintable, too long)."""
    check_identifier(dec.model, "The model name", "rename the model file")
    if isinstance(system, str):
        check_identifier(system, "The system id", "give a label, or leave it out to use this machine's fingerprint")


def bricks_swing(est: Estimate, measured: Mapping[str, Measurement]) -> float | None:
    """How much the machine swung while ``est``'s measured bricks were timed: each brick's 90th
    percentile over its median, weighted by its share of the estimate (None where none has them)."""
    weighted = total = 0.0
    for c in est.breakdown:
        m = measured.get(c.signature)
        if c.source != "measured" or m is None or not m.ok or not m.median_s or m.p90_s is None:
            continue
        weighted += c.share * m.p90_s / m.median_s
        total += c.share
    return weighted / total if total > 0 else None


def _graph_of(model: Any, store: Store) -> ModelGraph | None:
    """The model graph behind ``model`` where there is one to run (None for a bare decomposition or a
    name whose file is gone)."""
    if isinstance(model, ModelGraph):
        return model
    if isinstance(model, Decomposition):
        return None
    if isinstance(model, str) and not os.path.exists(model) and not model.endswith(".onnx"):
        try:
            return _stored_graph(store, model) or load_model(build(model), name=model)
        except InvalidArgumentError:
            return None
    return load_model(model)


def composition_references(store: Store, *, system: Any = None, config: OrtConfig | None = None,
                           granularity: str = "layer", near_s: float | None = None,
                           count: int = COMPOSITION_NEIGHBOURS, exclude: Collection[str] = ()
                           ) -> list[CompositionReference]:
    """Stored models measured whole under ``config`` on ``system`` (each its latest ok run), beside
    the estimate from their own measured bricks: up to ``count`` of them, those nearest in log
    latency to ``near_s`` first (every one without ``near_s``). Models whose bricks are not all
    measured, or not stored at ``granularity``, are passed over; ``exclude`` holds model keys."""
    system = _system_key(system)
    cfg = config or OrtConfig()
    latest: dict[str, Any] = {}
    for run in store.measurements.models(system=system, config_id=cfg.config_id, status="ok"):
        if run.median_s and run.key not in exclude and (run.key not in latest or run.id > latest[run.key].id):
            latest[run.key] = run
    runs = sorted(latest.values(), key=lambda r: (0.0 if near_s is None or near_s <= 0
                                                   else abs(math.log(r.median_s / near_s)), r.key))
    found: list[CompositionReference] = []
    for run in runs:
        if len(found) >= count:
            break
        try:
            dec = store.models.decomposition(run.key, _label(granularity, cfg))
            est = _estimate_decomposition(dec, store, system, cfg, "error", None, None, True)
        except InvalidArgumentError:
            continue
        found.append(CompositionReference(dec.model, float(run.median_s), est.sequential_s))
    return found


def _estimate_decomposition(dec: Decomposition, store: Store, system: Any, cfg: OrtConfig, on_missing: str,
                            budget: Budget | None, peaks: Peaks | None, launch_queue: bool, *,
                            same_runtime: bool = False, predictor: Predictor | None = None) -> Estimate:
    """:func:`estimate` of a decomposition, its interval from its bricks alone; with ``same_runtime``,
    its lower bound from the configurations of ``cfg``'s runtime alone; ``predictor`` (default: one
    fitted on the database) for ``on_missing="predict"``."""
    measured = _lookup(store, dec, system, cfg.config_id)

    def measure(bricks: Sequence[Brick]) -> dict[str, Measurement]:
        """Measure ``bricks``, and every brick of the model stored from another context again in the
        model's (bench's rule): the model is stored, to keep those measurements for it."""
        _check_storable(dec, system)
        store.bricks.add(bricks)
        foreign = isinstance(system, str)
        populate(store, [dec], [cfg], BenchOptions(backend=backend_name(cfg), budget=budget),
                 system=None if foreign else system, system_id=system if foreign else None,
                 runner_factory=stop_on_failure(dec))  # a brick that fails stops the estimate, unstored
        found = _lookup(store, dec, system, cfg.config_id)
        measured.update(found)
        return {b.signature: found[b.signature] for b in bricks if b.signature in found}

    missing = [s for s in dec.bricks if s not in measured or not measured[s].ok]  # failed ones too
    if peaks is None:
        peaks = store_peaks(store, system, peaks_key(cfg))
    if predictor is None and missing and on_missing == "predict":
        predictor = _predictor(store, system, cfg.config_id, peaks)
    if peaks is not None and ":" not in peaks_key(cfg):  # a CPU's caches keep a small model's weights
        peaks = peaks.for_model(dec.weight_bytes(), cache_capacity(store, system))
    if on_missing == "measure" and (missing or other_contexts(store, dec, system, cfg)):
        measure([dec.bricks[s] for s in missing])  # first: at fused:all their overheads are stored with them
    overhead, extra = _reorder_costs(dec, cfg, store, system, measured)
    return estimate_decomposition(
        dec, measured, config_id=cfg.config_id, on_missing=on_missing, predictor=predictor,
        measure=measure, alternatives=_alternatives(store, dec, system, cfg, same_runtime=same_runtime), peaks=peaks,
        brick_overhead_s=overhead, model_extra_s=extra, views=view_bricks(dec, backend_name(cfg)),
        launch_queue=launch_queue)


def view_bricks(dec: Decomposition, backend: str) -> set[str]:
    """Signatures of ``dec``'s bricks made only of ops that ``backend`` runs as views of their
    input inside a model (its ``view_ops``)."""
    ops = getattr(get_backend(backend), "view_ops", frozenset())
    return {sig for sig, b in dec.bricks.items() if ops and set(b.op_types) <= ops}


def _reorder_costs(dec: Decomposition, config: BackendConfig, store: Store, system: Any,
                   measured: Mapping[str, Measurement]) -> tuple[dict[str, float], float]:
    """What each measured brick's own run does beyond its model, from the database (layout reorders
    at its edges, kernels the model fuses away: its backend's ``brick_overhead_s``, stored with the
    measurement, subtracted from its time, for the lower bound too), and the model's own layout
    reorders (``dec.reorder_bytes``, priced by size by its backend's ``calibrate_reorders``, added
    once). Nothing on an accelerator, and nothing for a backend that has neither.

    Raises
    ------
    InvalidArgumentError
        Where the backend stores overheads and some measured bricks of ``dec`` have none (measured
        by another dlbricks), or the model has reorders and the backend prices them but the database
        holds no price.
    """
    backend = get_backend(backend_name(config))
    if device_of(config) != "cpu" or not hasattr(backend, "brick_overhead_s"):
        return {}, 0.0
    ran = [s for s in dec.bricks if s in measured]
    overhead = store.systems.overheads(system, config.config_id, ran)
    lacking = [s for s in ran if s not in overhead]
    priced = hasattr(backend, "calibrate_reorders") and bool(dec.reorder_bytes)
    price = store.systems.reorder_price(system, config.config_id) if priced else None
    if (lacking and (overhead or dec.reorder_bytes)) or (priced and price is None):
        what = (f"{len(lacking)} of its measured bricks have no stored overhead (first {lacking[0][:12]})"
                if lacking else "the database has no reorder price")
        raise InvalidArgumentError(
            f"cannot estimate '{dec.model}' at {dec.granularity} from {store.path}: {what} for configuration "
            f"{config.config_id[:12]}; measure the bricks with 'dlbricks bench {dec.model} --granularity "
            f"{dec.granularity.split(':')[0]} --backend {backend_name(config)}' under this configuration (this "
            "dlbricks), or estimate with on_missing='measure'.")
    extra = ReorderCost(*price).total(dec.reorder_bytes) if price is not None else 0.0
    return {s: _overhead_at(s, v, store, system, config.config_id, measured[s]) for s, v in overhead.items()}, extra


def _overhead_at(signature: str, overhead_s: float, store: Store, system: Any, config_id: str,
                 used: Measurement) -> float:
    """A brick's stored overhead at the time the estimate takes for it (``used``): the backend gave it
    as a share of the brick's own run (its median less the floor, :func:`~dlbricks.benchmarks_db.jobs.brick_overhead`), so a time
    measured elsewhere (a single call in a model's chained rounds, where the reorders meet colder
    memory than in the brick's own warm calls) takes the same share of itself. The stored value where
    either run lacks a time above its floor."""
    own = store.measurements.get(signature, system, config_id)
    if own is None or own.median_s is None or used.median_s is None:
        return overhead_s
    own_s, used_s = own.median_s - (own.floor_s or 0.0), used.median_s - (used.floor_s or 0.0)
    return overhead_s * used_s / own_s if own_s > 0 and used_s > 0 else overhead_s


def store_peaks(store: Store, system: Any, key: str = "onnxruntime") -> Peaks | None:
    """The peaks stored for a system by ``dlbricks calibrate``, if any: the CPU's (the best of every
    framework calibrated on it, with the integer peak where one was measured), or an accelerator's
    own for a ``key`` of :func:`peaks_key` such as ``onnxruntime:cuda``."""
    getter = getattr(getattr(store, "systems", None), "peaks", None)
    found = None if getter is None else getter(system)
    if found is None:
        return None
    backends = found.details.get("backends") or {}
    if ":" not in key:  # the CPU's: none where only an accelerator was calibrated
        cpu = not backends or any(":" not in k for k in backends)
        return Peaks(found[0], found[1], found.details.get("int_ops_per_s")) if cpu else None
    own = backends.get(key)
    return None if own is None else Peaks(own["flops_per_s"], own["bytes_per_s"], own.get("int_ops_per_s"))


@dataclass(frozen=True, slots=True)
class Validation:
    """An estimate beside the whole model's measured latency (seconds).

    ``in_model`` (with ``per_brick=True``): per occurrence index, the in-model time of its layers
    from onnxruntime's profiler, to set beside each brick's own time; ``profile`` the whole profile
    (the model's layout reorders, its kernels and their sum). ``rounds`` (paired, the default): the
    rounds in which the whole model and its bricks were timed together; ``rounds_error`` why they
    failed where they did (the model then measured whole apart, its bricks as stored). ``graph`` (with
    ``cuda_graph=True``): the whole model measured captured in a CUDA graph, to set beside the
    estimate's ``graph_s``; a failed measurement where the runtime could not capture it.
    """

    estimate: Estimate
    measured: Measurement
    decomposition: Decomposition
    in_model: Mapping[int, float] | None = None
    profile: InModelTimes | None = None
    rounds: PairedRounds | None = None
    graph: Measurement | None = None
    rounds_error: str | None = None

    @property
    def error(self) -> float:
        """Relative error of the sequential estimate: estimate / measured - 1."""
        return self.estimate.sequential_s / self.measured.median_s - 1.0  # type: ignore[operator]

    @property
    def bounds_hold(self) -> bool:
        """roofline <= lower bound <= measured."""
        lb = self.estimate.lower_bound_s
        roof = self.estimate.roofline_s
        ok = lb <= (self.measured.median_s or 0.0)
        return ok and (roof is None or roof <= lb)

    @property
    def covered(self) -> bool:
        """Whether the measured latency lies inside the estimate's interval."""
        return self.estimate.ci_low_s <= (self.measured.median_s or 0.0) <= self.estimate.ci_high_s

    @property
    def swing(self) -> float | None:
        """The whole model's 90th over 10th percentile over its rounds (None unpaired)."""
        return None if self.rounds is None else self.rounds.rounds.swing()

    @property
    def pairing(self) -> float | None:
        """The relative 95% half-width that the machine's swing left in the ratio of the bricks to
        the whole runs over their rounds (None unpaired)."""
        return None if self.rounds is None else ratio_half_width(self.rounds)

    @property
    def graph_error(self) -> float | None:
        """Relative error of the CUDA-graph estimate against the model run in its CUDA graph: None
        where either is missing (not asked, not captured, a brick without device times)."""
        if self.graph is None or not self.graph.ok or not self.graph.median_s or self.estimate.graph_s is None:
            return None
        return self.estimate.graph_s / self.graph.median_s - 1.0


def validate(model: Any, db: Store | str | os.PathLike[str], *, system: Any = None,
             config: OrtConfig | None = None, granularity: str = "layer", budget: Budget | None = None,
             on_missing: str = "measure", per_brick: bool = False, paired: bool = True,
             rounds: RoundsBudget | None = None, cuda_graph: bool = False) -> Validation:
    """Measure the whole model with the same harness, store the run, and compare with the estimate.

    Paired (the default), the model is held in a worker beside its bricks and timed with them in
    interleaved rounds (``rounds``, default :func:`default_rounds`: chained for layer and fused bricks
    on a CPU with onnxruntime;
    :func:`~dlbricks.benchmarks_db.rounds.measure_in_rounds`): the estimate reads each brick's runs over
    the rounds and the measured latency is the whole model's median over the same rounds, so that
    both meet the same moments of the machine; the interval holds what the rounds saw of its swing
    (:func:`paired_interval`) and how far the database's other models landed from their whole runs
    (:func:`composition_error`). Unpaired, the model is measured whole in three workers and compared
    with the bricks as stored, whenever they were measured. With ``per_brick``, also profile the model
    in its runtime (onnxruntime's profiler, or MXNet's for an ``MxnetConfig``) to give each
    occurrence's in-model time. With ``cuda_graph``, also measure the model captured in a CUDA graph
    (:func:`graph_config`; one worker, one buffer placement: a captured graph keeps its addresses),
    to set beside the estimate's ``graph_s``.
    """
    store = open_store(db)
    system = _system_key(system)
    graph = model if isinstance(model, ModelGraph) else None
    if graph is None:
        if isinstance(model, str) and not os.path.exists(model) and not model.endswith(".onnx"):
            graph = _stored_graph(store, model)
            if graph is None:
                graph = load_model(build(model), name=model)
        else:
            graph = load_model(model)
    cfg = config or OrtConfig()
    graphed = graph_config(cfg) if cuda_graph else None  # refused before any measuring
    dec = _decompose(graph, granularity, cfg)
    store.models.add(dec, graph.source)
    budget = budget or EVALUATE_BUDGET
    result = failure = None
    if paired:
        estimate(dec, store, system=system, config=config, on_missing=on_missing, budget=budget)  # bricks first
        whole, result, failure = _paired_rounds(graph, dec, store, system, cfg, budget,
                                                rounds or default_rounds(cfg, granularity))
    else:
        whole = measure_whole(graph, cfg, budget, backend=backend_name(cfg))
    # paired: the whole run of these rounds replaces the one stored, as the bricks' runs in them do
    store.measurements.record_model(whole, system, budget=budget, rule="replace" if paired and whole.ok else "best")
    if not whole.ok:
        raise InvalidArgumentError(f"model '{graph.name}' could not be measured whole: {whole.error}")
    est = estimate(dec, store, system=system, config=config,
                   on_missing=on_missing, budget=budget, composition=False)
    if result is not None:
        est = paired_interval(est, math.log1p(ratio_half_width(result)))
    references = composition_references(store, system=system, config=cfg, granularity=granularity,
                                        near_s=est.sequential_s, exclude=(dec.model_key,))
    if references:
        est = with_composition(est, composition_error(references, est.sequential_s), len(references))
    captured = None if graphed is None else measure_graphed(graph, graphed, budget)
    if captured is not None and captured.ok:
        store.measurements.record_model(captured, system, budget=budget)
    in_model = None
    if per_brick:
        if backend_name(config) == "mxnet":
            times = mxnet_in_model_times(graph, config)
        else:
            times = in_model_times(graph, config)
        in_model = {o.index: sum(times.layers.get(n, 0.0) for n in o.nodes) for o in dec.occurrences}
        return Validation(est, whole, dec, in_model, times, result, captured, failure)
    return Validation(est, whole, dec, in_model, rounds=result, graph=captured, rounds_error=failure)


def capture_failure(measured: Measurement) -> str | None:
    """Why the runtime could not run a model in its CUDA graph: the first line of the failed
    measurement's error (at most 200 characters); None where it ran."""
    if measured.ok:
        return None
    return (measured.error or "failed").strip().splitlines()[0][:200]


def measure_graphed(graph: ModelGraph, config: BackendConfig, budget: Budget) -> Measurement:
    """``graph`` measured whole under ``config`` (a :func:`graph_config`) in one worker, at one buffer
    placement (a captured graph replays at the addresses it was captured with); a failed measurement,
    its error the runtime's, where the runtime could not capture it."""
    return measure_whole(graph, config, replace(budget, placements=1), workers=1, backend=backend_name(config))


def ratio_half_width(paired: PairedRounds) -> float:
    """The relative 95% half-width of the ratio of a model's bricks to its whole runs over their
    rounds (:meth:`~dlbricks.generators.rounds.PairedRounds.ratio`), the wider side; 0 where it has none."""
    ratio, low, high = paired.ratio()
    if not (ratio > 0 and low > 0 and math.isfinite(high)):
        return 0.0
    return math.expm1(max(math.log(high / ratio), math.log(ratio / low)))


def _paired_rounds(graph: ModelGraph, dec: Decomposition, store: Store, system: Any, config: Any,
                   budget: Budget, rounds: RoundsBudget) -> tuple[Measurement, PairedRounds | None, str | None]:
    """The model measured whole and held in a worker, then timed with its bricks in rounds
    (:func:`~dlbricks.benchmarks_db.rounds.measure_in_rounds`, which stores each brick's runs in the
    model's context): the whole model's measurement over the rounds (its first measurement's wall
    time), the rounds, and None. Where the rounds fail, the first measurement, None and why."""
    with Runner(backend_name(config), config, budget) as runner:
        first = runner.measure(graph)
        if not first.ok:
            return first, None, None
        result = measure_in_rounds(store, dec, runner, graph, system, budget=budget, rounds=rounds)
        failure = runner.rounds_error or "no process finished its rounds"
    if result is None:
        return first, None, failure
    return replace(result.whole, key=first.key, wall_time_s=first.wall_time_s), result, None


def _stored_graph(store: Store, name: str) -> ModelGraph | None:
    """The model stored under ``name``, loaded again from the file it came from (ONNX, or an MXNet
    symbol file) at the shapes it was stored with; None if no model has that name or it came from
    no file.

    Raises
    ------
    InvalidArgumentError
        If the file it came from is gone.
    """
    if not _is_stored(store, name):
        return None
    record = store.models.get(name)  # an ambiguous name is refused, listing the models it names
    source = record.source
    if source is None or source.path is None:
        return None
    if not os.path.exists(source.path):
        raise InvalidArgumentError(f"model '{name}' was stored from {source.path}, which is not there (a "
                                   "relative path is from where it was stored): pass the model file instead.")
    return load_model(source.path, {s.name: list(s.shape) for s in record.inputs}, name=name)


def plan(model: Any, db: Store | str | os.PathLike[str], *, system: Any = None, config: OrtConfig | None = None,
         granularity: str = "layer", budget: Budget | None = None) -> Plan:
    """What a model lacks in a database: :func:`plan_decomposition` for a model (a path, ModelProto,
    ModelGraph, Decomposition or name), under the database's stored peaks (see :func:`estimate`)."""
    store = open_store(db)
    system = _system_key(system)
    cfg = config or OrtConfig()
    dec = _decomposition(model, store, granularity, cfg)
    measured = _lookup(store, dec, system, cfg.config_id)
    peaks = store_peaks(store, system, peaks_key(cfg))
    lacking = any(s not in measured or not measured[s].ok for s in dec.bricks)
    predictor = _predictor(store, system, cfg.config_id, peaks) if lacking else None
    return plan_decomposition(dec, measured, config_id=cfg.config_id, predictor=predictor, budget=budget,
                              peaks=peaks, views=view_bricks(dec, backend_name(cfg)),
                              other_contexts=other_contexts(store, dec, system, cfg))
