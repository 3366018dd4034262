"""The main job: on this machine, for a suite of zoo models, decompose, benchmark the unique bricks,
estimate every model, measure every model whole, and report the paper's table.

Benchmarking time is compared under one stopping rule (the same :class:`Budget` for bricks and whole
models): the sum of the stored ``wall_time_s`` of the suite's unique bricks (session creation,
warm-up and timed runs) against the same sum over the whole models.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from dlbricks import BrickSet, Decomposition, InvalidArgumentError, ModelGraph, decompose, load_model
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.rounds import Reuse, measure_in_rounds
from dlbricks.generators import Budget, Measurement, OrtConfig, benchmark, collect_system_info, get_backend
from dlbricks.generators.budget import PILOT_BUDGET
from dlbricks.generators.measurement import pool
from dlbricks.generators.rounds import PairedRounds, RoundsBudget
from dlbricks.generators.runner import Runner, lock_waited_s
from dlbricks.generators.system import SystemInfo
from dlbricks.model_zoo import build, list_models

from .api import (
    PAIRED_ROUNDS,
    TRUSTED_SWING,
    backend_name,
    capture_failure,
    chains_bricks,
    default_rounds,
    estimate,
    fusion_options,
    graph_config,
    measure_graphed,
    open_store,
    peaks_key,
    ratio_half_width,
    threads_of,
)
from ._whole import DEFAULT_TARGET_CI, EVALUATE_BUDGET, WHOLE_WORKERS, measure_whole
from .calibrate import calibrate_peaks, calibrated_backends, merge_peaks
from .estimation import CompositionReference, composition_error, joined_interval, paired_interval

__all__ = ["DEFAULT_SUITE", "GRANULARITIES", "EvaluationRow", "Evaluation", "evaluate", "measure_whole", "pool",
           "suite_models", "EVALUATE_BUDGET", "WHOLE_WORKERS", "DEFAULT_TARGET_CI"]

#: The default suite: models of every task, small enough to finish in minutes on 2 cores.
DEFAULT_SUITE = ("resnet18_v1", "resnet50_v1", "mobilenet_v2_1.0", "squeezenet1_1", "inception_v3",
                 "densenet121", "efficientnet_b0", "shufflenet_v2_x1_0", "yolov3_tiny", "bert_base",
                 "lstm_lm_medium", "wav2letter_mfcc")
#: Granularities of the main job: "both" estimates fused bricks and, in the same run, layer bricks at
#: the same optimization level (the comparison column).
GRANULARITIES = ("layer", "fused", "both")
#: The peaks' runs in ``evaluate`` (a roofline's peaks take each kernel's fastest run; a tenth of a
#: second of runs per size, a quarter at most, finds it within a few percent of ``calibrate_peaks``'
#: default budget, in a fraction of its time).
CALIBRATION_BUDGET = Budget(warmup_time=0.05, min_time=0.1, max_time=0.25)
#: The default suite of the MXNet path: Gluon vision models of several families.
DEFAULT_MXNET_SUITE = ("gluon_resnet18_v1", "gluon_resnet50_v1", "gluon_resnet50_v2", "gluon_mobilenet1.0",
                       "gluon_mobilenetv2_1.0", "gluon_squeezenet1.1", "gluon_densenet121",
                       "gluon_inceptionv3", "gluon_alexnet")


def suite_models(suite: str, framework: str = "onnx") -> list[str]:
    """Model names of ``default`` or ``full`` (every zoo model of the framework), or a list."""
    if suite == "default":
        known = {m.name for m in list_models(framework=framework)}
        chosen = DEFAULT_MXNET_SUITE if framework == "mxnet" else DEFAULT_SUITE
        return [n for n in chosen if n in known]
    if suite == "full":
        return [m.name for m in list_models(framework=framework)]
    return [n.strip() for n in suite.split(",") if n.strip()]


@dataclass(frozen=True, slots=True)
class EvaluationRow:
    """One model of the table (seconds)."""

    model: str
    layers: int
    unique_bricks: int
    measured_s: float
    estimated_s: float
    parallel_s: float
    lower_bound_s: float
    roofline_s: float | None
    ci_low_s: float
    ci_high_s: float
    layer_estimated_s: float | None = None  # layer bricks at the same level (granularity "both")
    algorithm_gap_s: float | None = None  # with the algorithm sweep: default kernels' device time over the best's
    rounds: int = 0  # rounds of the whole model and its bricks (0: measured apart)
    swing: float | None = None  # the whole model's 90th over 10th percentile over its rounds
    pairing: float | None = None  # relative 95% half-width the swing left in the estimate over the measured
    graph_estimated_s: float | None = None  # on a GPU: the model in a CUDA graph, its kernels back to back
    graph_measured_s: float | None = None  # with cuda_graph: the model run captured in a CUDA graph
    graph_failure: str | None = None  # with cuda_graph: why the runtime could not capture it

    @property
    def covered(self) -> bool:
        """Whether the measured latency lies inside the estimate's interval."""
        return self.ci_low_s <= self.measured_s <= self.ci_high_s

    @property
    def half_width(self) -> float:
        """The interval's relative half-width (its width over twice the estimate)."""
        return (self.ci_high_s - self.ci_low_s) / (2 * self.estimated_s) if self.estimated_s else math.inf

    @property
    def error(self) -> float:
        """estimated / measured - 1."""
        return self.estimated_s / self.measured_s - 1.0

    @property
    def layer_error(self) -> float | None:
        """The layer bricks' estimate / measured - 1, where the run estimated it too."""
        return None if self.layer_estimated_s is None else self.layer_estimated_s / self.measured_s - 1.0

    @property
    def graph_error(self) -> float | None:
        """The CUDA-graph estimate / the model measured in its CUDA graph - 1, where both exist."""
        if self.graph_estimated_s is None or not self.graph_measured_s:
            return None
        return self.graph_estimated_s / self.graph_measured_s - 1.0

    @property
    def bounds_hold(self) -> bool:
        """roofline <= lower bound <= measured."""
        return self.lower_bound_s <= self.measured_s and (
            self.roofline_s is None or self.roofline_s <= self.lower_bound_s)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The table and the suite's figures."""

    rows: tuple[EvaluationRow, ...]
    op_times: tuple[tuple[str, float], ...]  # op type -> seconds summed over the suite's estimates
    layers: int
    unique_bricks: int
    brick_time_s: float
    whole_time_s: float
    model_latency_s: float  # sum over the suite's models of their measured latency
    unique_brick_latency_s: float  # sum over the suite's unique bricks of their measured latency
    system: SystemInfo
    config: Any  # OrtConfig or MxnetConfig
    elapsed_s: float
    granularity: str = "layer"
    layer_unique_bricks: int | None = None  # granularity "both": the layer bricks measured beside
    # Of the bricks' measuring time, outside the harness (round trip, sessions, copies, the brick before)
    # and inside timed regions; without a target_ci, populate's measurements only (both configurations).
    brick_setup_s: float = 0.0
    brick_timed_s: float = 0.0
    whole_setup_s: float = 0.0  # chained rounds: of whole_time_s, each process's session of the whole model
    target_ci: float | None = None  # relative 95% half-width asked of each model's estimate
    worst_ci: float | None = None  # the largest that the bricks' allocation reached for a model
    rounds_s: float = 0.0  # seconds of the rounds that set each model beside its bricks (validation)
    bricks_in_rounds: bool = False  # the rounds measured both sides (chained): each side's time is its own
    lock_waited_s: float = 0.0  # seconds waited for another dlbricks process's timing (in no time above)
    batch_size: int = 1  # every model built at this batch
    taken_bricks: int = 0  # chained rounds: bricks of a model taken from an earlier model's rounds through anchors

    @property
    def layer_rows(self) -> tuple[EvaluationRow, ...]:
        """The rows with a layer-brick estimate (granularity "both")."""
        return tuple(r for r in self.rows if r.layer_error is not None)

    @property
    def within_target(self) -> int:
        """Models whose estimate's relative CI half-width is within ``target_ci`` (all without one)."""
        if self.target_ci is None:
            return len(self.rows)
        return sum((r.ci_high_s - r.ci_low_s) / 2 <= self.target_ci * r.estimated_s * (1 + 1e-9) for r in self.rows)

    @property
    def graph_rows(self) -> tuple[EvaluationRow, ...]:
        """The rows whose model was measured in a CUDA graph and estimated so (``cuda_graph``)."""
        return tuple(r for r in self.rows if r.graph_error is not None)

    @property
    def covered(self) -> int:
        """Models whose measured latency lies inside their estimate's interval."""
        return sum(r.covered for r in self.rows)

    @property
    def median_half_width(self) -> float:
        """The median relative half-width of the rows' intervals."""
        return float(np.median([r.half_width for r in self.rows])) if self.rows else math.nan

    @property
    def speedup(self) -> float:
        """Time benchmarking whole models / time benchmarking the unique bricks."""
        return self.whole_time_s / self.brick_time_s if self.brick_time_s else math.inf

    @property
    def time_dedup_ratio(self) -> float:
        """Sum of model latencies / sum of unique brick latencies: what one run of every unique brick
        saves over one run of every model; the speedup that a fixed-iteration stopping rule tends to
        as the iteration count grows (computed from the measured medians)."""
        return self.model_latency_s / self.unique_brick_latency_s if self.unique_brick_latency_s else math.inf

    @property
    def mean_abs_error(self) -> float:
        return sum(abs(r.error) for r in self.rows) / len(self.rows) if self.rows else 0.0

    @property
    def max_abs_error(self) -> float:
        return max((abs(r.error) for r in self.rows), default=0.0)


def _measured(m: Measurement | None) -> bool:
    return m is not None and m.ok


def evaluate(models: Sequence[str], db: Store | str | os.PathLike[str], *, config: Any = None,
             budget: Budget | None = None, lower_bound_sweep: bool = True,
             granularity: str = "layer", say: Callable[[str], object] = lambda s: None,
             target_ci: float | None = None, algorithm_sweep: bool = False,
             rounds: RoundsBudget | None = None, cuda_graph: bool = False, batch_size: int = 1,
             reuse: Reuse | None = Reuse()) -> Evaluation:
    """Run the main job over zoo models (names) and return the table.

    Bricks are measured once each in the estimate's configuration, and (``lower_bound_sweep``) once
    more with warm caches, the fastest state a brick can meet, for the lower bound; on CUDA the launch
    queue's times already hold each brick's kernels after themselves, which its lower bound takes,
    and the warm run is left out. The suite runs model by model: the whole model and every one of
    its bricks run in interleaved rounds
    (:func:`~dlbricks.benchmarks_db.rounds.measure_in_rounds`), so that its estimate and its measured
    latency come from the same moments of the machine: for layer and fused bricks on a CPU with onnxruntime,
    rounds of single calls on its bricks prepared as a chain, which measure both sides, each side's
    time the benchmarking speedup's (:data:`~dlbricks.estimator.api.CHAINED_ROUNDS`); elsewhere the
    model is measured whole first (the measurement whose time the speedup counts) and its new bricks
    are measured, then rounds of short bursts of each (:data:`PAIRED_ROUNDS`). Each
    brick's runs over the rounds are stored in the model's context; the model's measured latency is
    its median over the rounds, and its interval holds what the rounds saw of the machine's swing
    (:func:`~dlbricks.estimator.estimation.paired_interval`) and how far the suite's other models landed from
    their measurements (leave-one-out). Peaks are calibrated once per system.

    With ``target_ci`` (a fraction, e.g. :data:`DEFAULT_TARGET_CI`; None, the default, for the rule
    above, every brick under ``budget``), the bricks
    are measured for a relative 95% half-width of each model's estimate instead of one stopping rule
    each: every new brick briefly (its pilot), then the further runs that the allocation of the
    target asks for, in the model's turn and context (see :func:`~dlbricks.benchmarks_db.populate`),
    and the whole models until their median's CI is within the same half-width (``budget`` with
    ``rel_ci = 2 * target_ci``). The lower-bound sweep measures each brick with the pilot budget.

    With ``algorithm_sweep`` (CUDA only), the bricks whose kernels cuDNN or cuBLAS choose
    (:data:`ALGORITHM_OPS`) are measured once more in each configuration of
    :func:`algorithm_configs` (pilot budget): the lower bound takes each at its fastest, and each row
    gets the gap between the estimate's kernels and the best ones found.

    ``batch_size`` builds every model at that batch (on a GPU, where the device rather than the host
    becomes the limit).

    With ``cuda_graph`` (CUDA only), each model is also measured captured in a CUDA graph
    (:func:`~dlbricks.estimator.api.graph_config`), after its rounds, and set beside its estimate's
    ``graph_s`` (its kernels back to back); a model the runtime cannot capture gets the reason.

    ``reuse`` (chained rounds): the bricks that an earlier model's rounds timed are taken from there
    where enough of them come from one such model, and only a share of them, its anchors, is timed
    again in the later model's rounds, which bring the rest to their moment
    (:func:`~dlbricks.benchmarks_db.rounds.measure_in_rounds`); None to time every brick of every
    model in its own rounds.

    ``rounds`` is the rounds' budget (default :func:`~dlbricks.estimator.api.default_rounds`:
    :data:`~dlbricks.estimator.api.CHAINED_ROUNDS`, rounds of single calls on bricks prepared as a
    chain, for layer and fused bricks where the backend chains bricks on a CPU, else :data:`PAIRED_ROUNDS`,
    rounds of bursts).
    """
    start, waited = time.perf_counter(), lock_waited_s()
    store = open_store(db)
    system = collect_system_info()
    target_ci = _target(target_ci)
    budget = budget or EVALUATE_BUDGET
    if target_ci is not None:
        budget = replace(budget, rel_ci=2 * target_ci)
    config = config or OrtConfig()
    get_backend(backend_name(config)).check(config)  # before anything is stored: a missing provider is one line
    _check_granularity(granularity, config)
    sweep = algorithm_configs(config) if algorithm_sweep else []
    graphed = graph_config(config) if cuda_graph else None
    with _model_folder() as folder:  # each model's whole ONNX, kept for its turn
        graphs, brickset, layer_set = _decompose_suite(models, store, granularity, config, batch_size, folder)
        summary = brickset.summary()
        say(f"{summary.models} models, {summary.layers} layers, {summary.unique_bricks} unique bricks")
        _calibrate_once(store, system, config, say)
        queued = getattr(get_backend(backend_name(config)), "takes_queue_times", lambda config: False)(config)
        configs = [config] + ([replace(config, cache="warm")] if lower_bound_sweep and not queued else [])
        turns = [_Turns(brickset, configs, target_ci)] + (
            [_Turns(layer_set, [config], target_ci)] if granularity == "both" else [])
        rounds = rounds or default_rounds(config, granularity)
        bricks_in_rounds = _bricks_in_rounds(rounds, config)
        whole_time, whole_setup, rounds_s, paired = _measure_suite(graphs, brickset, turns, store, system, config,
                                                                     budget, say, rounds, reuse)
        taken = sum(p.rounds.derived for p in paired.values())
        if sweep:
            _sweep_algorithms(brickset, sweep, store, system, backend_name(config), say)
        brick_records = store.measurements.bricks(system=system, config_id=config.config_id,
                                                  signatures=list(brickset.bricks))
        rows, op_times = _rows(models, brickset, layer_set if granularity == "both" else None, store, system, config,
                               paired, say)
        if graphed is not None:
            rows = [_with_graph(r, graphs[r.model], graphed, store, system, budget, say) for r in rows]
        if sweep:
            rows = [replace(r, algorithm_gap_s=algorithm_gap_s(brickset.models[r.model], store, system, config, sweep))
                    for r in rows]
        return Evaluation(rows=tuple(rows), op_times=tuple(sorted(op_times.items(), key=lambda kv: -kv[1])),
                          layers=summary.layers, unique_bricks=summary.unique_bricks,
                          brick_time_s=(sum(t.setup_s + t.timed_s for t in turns) if bricks_in_rounds
                                        else sum(r.wall_time_s or 0.0 for r in brick_records)), whole_time_s=whole_time,
                          model_latency_s=sum(r.measured_s for r in rows),
                          unique_brick_latency_s=sum(r.median_s or 0.0 for r in brick_records if r.ok),
                          system=system, config=config, elapsed_s=time.perf_counter() - start,
                          granularity=next(iter(brickset.models.values())).granularity if brickset.models else "layer",
                          layer_unique_bricks=layer_set.summary().unique_bricks if granularity == "both" else None,
                          brick_setup_s=turns[0].setup_s, brick_timed_s=turns[0].timed_s, target_ci=target_ci,
                          worst_ci=max(turns[0].cis) if turns[0].cis else None, rounds_s=rounds_s,
                          lock_waited_s=lock_waited_s() - waited, bricks_in_rounds=bricks_in_rounds,
                          whole_setup_s=whole_setup, batch_size=batch_size, taken_bricks=taken)


#: Ops whose kernels a library chooses among algorithms (cuDNN's convolution search, cuBLAS with or
#: without TF32): the bricks that the algorithm sweep measures again.
ALGORITHM_OPS = frozenset({"Conv", "ConvTranspose", "FusedConv", "MatMul", "Gemm", "FusedMatMul", "FusedGemm",
                           "Attention", "MultiHeadAttention"})


def algorithm_configs(config: Any) -> list[OrtConfig]:
    """The configurations of the algorithm sweep beside ``config`` (CUDA): each cuDNN convolution
    algorithm search (EXHAUSTIVE, HEURISTIC, DEFAULT) with TF32 as configured, and the configured
    search with TF32 off.

    Raises
    ------
    InvalidArgumentError
        If ``config`` is not an onnxruntime configuration on CUDA.
    """
    if not isinstance(config, OrtConfig) or config.device != "cuda":
        raise InvalidArgumentError("the algorithm sweep varies cuDNN's convolution search and TF32, which only "
                                   "CUDA has: add --device cuda, or leave --sweep out.")
    options = dict(config.provider_options)
    searches = [replace(config, cudnn_conv_algo_search=a) for a in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
                if a != config.cudnn_conv_algo_search]
    no_tf32 = replace(config, provider_options={**options, "use_tf32": "0"})
    return [*searches, *([no_tf32] if options.get("use_tf32") != "0" else [])]


def _sweep_algorithms(brickset: BrickSet, configs: Sequence[OrtConfig], store: Store, system: Any, backend: str,
                      say: Callable[[str], object]) -> None:
    """Measure the bricks of :data:`ALGORITHM_OPS` in each of ``configs`` (pilot budget) and store them."""
    bricks = [b for b in brickset.bricks.values() if ALGORITHM_OPS & set(b.op_types)]
    for cfg in configs:
        todo = set(store.measurements.unmeasured(system, cfg.config_id, [b.signature for b in bricks]))
        say(f"algorithm sweep: {len(todo)} bricks, cudnn_conv_algo_search {cfg.cudnn_conv_algo_search}, "
            f"use_tf32 {dict(cfg.provider_options).get('use_tf32', 'default')}")
        chosen = [b for b in bricks if b.signature in todo]
        for m in benchmark(chosen, backend=backend, config=cfg, budget=PILOT_BUDGET, repeat=False):
            store.measurements.record(m, system, budget=PILOT_BUDGET)


def algorithm_gap_s(dec: Decomposition, store: Store, system: Any, config: Any, sweep: Sequence[Any]) -> float:
    """Seconds per run of ``dec`` by which its kernels under ``config`` are slower than the fastest
    of ``sweep`` and ``config``: each occurrence's device time after itself (its latency where there
    is none) under ``config``, less the least of them over the configurations."""
    def device(m: Measurement | None) -> float | None:
        if m is None or not m.ok:
            return None
        return m.device_warm_s if m.device_warm_s is not None else m.device_s

    gap = 0.0
    counts = dec.counts()
    for sig in dec.bricks:
        own = device(store.measurements.get(sig, system, config.config_id))
        if own is None:
            continue
        others = [device(store.measurements.get(sig, system, c.config_id)) for c in sweep]
        gap += counts[sig] * max(own - min([own, *(t for t in others if t is not None)]), 0.0)
    return gap


def _check_granularity(granularity: str, config: Any) -> None:
    """Refuse a granularity that is not one of :data:`GRANULARITIES`, or fused bricks without fusion."""
    if granularity not in GRANULARITIES:
        raise InvalidArgumentError(f"'granularity' must be one of {GRANULARITIES}. Got {granularity!r} instead.")
    if granularity != "layer" and fusion_options(config).get("opt_level") == "disable":  # raises without fusion
        raise InvalidArgumentError(f"--granularity {granularity} needs an optimization level that fuses: "
                                   "--opt-level basic, extended or all.")


@contextlib.contextmanager
def _model_folder() -> Iterator[Path | None]:
    """A temporary folder for the suite's models (removed afterwards), or None where the temporary
    folder cannot be written: the models are then built again at their turn."""
    try:
        holder = tempfile.TemporaryDirectory(prefix="dlbricks-models-", ignore_cleanup_errors=True)
    except OSError:
        yield None
        return
    with holder as name:
        yield Path(name)


@dataclass(frozen=True, slots=True)
class _SavedModel:
    """A zoo model as the whole-model measurements take it (``key``, ``to_onnx()``), read back from
    the bytes saved when the suite was decomposed instead of built and loaded again."""

    name: str
    key: str
    path: Path

    def to_onnx(self) -> onnx.ModelProto:
        return onnx.load_model_from_string(self.onnx_bytes())

    def onnx_bytes(self) -> bytes:
        return self.path.read_bytes()


class _Built(Mapping[str, "ModelGraph | _SavedModel"]):
    """The suite's zoo models by name, each at ``batch_size``, none kept in memory: the full zoo's
    weights (some 10 GB) do not fit beside the rest of a job in the memory of a small machine. A
    model saved in ``folder`` when the suite was decomposed is read back from there (a fraction of
    building, checking and loading it again); one that could not be saved is built again."""

    def __init__(self, models: Sequence[str], batch_size: int, folder: Path | None = None) -> None:
        self._models = list(dict.fromkeys(models))
        self._batch_size = batch_size
        self._folder = folder
        self._saved: dict[str, _SavedModel] = {}

    def save(self, graph: ModelGraph) -> None:
        """Keep ``graph``'s whole model on disk for its turn, if there is room (else it is built again)."""
        if self._folder is None:
            return
        path = self._folder / f"{len(self._saved)}.onnx"
        try:
            path.write_bytes(graph.to_onnx().SerializeToString())
        except (OSError, ValueError):  # no room, or over protobuf's 2 GB: built again at its turn
            path.unlink(missing_ok=True)
            return
        self._saved[graph.name] = _SavedModel(graph.name, graph.key, path)

    def __getitem__(self, name: str) -> ModelGraph | _SavedModel:
        if name not in self._models:
            raise KeyError(name)
        if name in self._saved:
            return self._saved[name]
        return load_model(build(name, batch_size=self._batch_size), name=name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)


def _decompose_suite(models: Sequence[str], store: Store, granularity: str, config: Any,
                     batch_size: int = 1, folder: Path | None = None) -> tuple[_Built, BrickSet, BrickSet]:
    """Build each zoo model at ``batch_size`` and decompose it, storing it; the models' whole ONNX
    (saved in ``folder`` where given: :class:`_Built`), the bricks of ``granularity`` and, with
    "both", the layer bricks beside them (else an empty set)."""
    options = {} if granularity == "layer" else fusion_options(config)
    graphs = _Built(models, batch_size, folder)
    brickset, layer_set = BrickSet(), BrickSet()
    for name in models:
        graph = load_model(build(name, batch_size=batch_size), name=name)
        dec = decompose(graph, "layer" if granularity == "layer" else "fused", **options)
        store.models.add(dec, graph.source)
        brickset.add(dec)
        if granularity == "both":
            layer_dec = decompose(graph, "layer")
            store.models.add(layer_dec, graph.source)
            layer_set.add(layer_dec)
        graphs.save(graph)
    return graphs, brickset, layer_set


def _bricks_in_rounds(rounds: RoundsBudget, config: Any) -> bool:
    """Whether the rounds measure the bricks themselves: chained rounds on a CPU, with a backend that
    prepares a chain (each brick once a round, no copies; the populate pass and the warm sweep are
    left out, and the bricks' benchmarking time is what their side of the rounds took)."""
    return rounds.chained and chains_bricks(config)


def _calibrate_once(store: Store, system: SystemInfo, config: Any, say: Callable[[str], object]) -> None:
    """Calibrate and store the peaks of ``config``'s backend and device unless the system has them."""
    stored = store.systems.peaks(system)
    key = peaks_key(config)
    if stored is not None and key in calibrated_backends(stored):
        return
    say(f"calibrating peak FLOP/s and bandwidth with {key} (roofline)")
    cal_config = config if backend_name(config) != "onnxruntime" else OrtConfig(
        intra_op_num_threads=threads_of(config) or 1, device=config.device, device_id=config.device_id)
    store.systems.record_peaks(system, *merge_peaks(stored, key, calibrate_peaks(cal_config, CALIBRATION_BUDGET)))


def _measure_suite(graphs: Mapping[str, ModelGraph], brickset: BrickSet, turns: Sequence[_Turns], store: Store,
                   system: SystemInfo, config: Any, budget: Budget, say: Callable[[str], object],
                   rounds: RoundsBudget = PAIRED_ROUNDS,
                   reuse: Reuse | None = None) -> tuple[float, float, float, dict[str, PairedRounds]]:
    """Measure the suite model by model; returns the whole models' benchmarking time, its setup
    in chained rounds, the rounds' time and each model's rounds.

    With chained rounds (:func:`_bricks_in_rounds`) the rounds measure both sides: the whole model
    and every one of its bricks run in them (:func:`_in_rounds`), one set of rounds per granularity,
    and each side's time is its own (the whole model's: its session in each process and its timed
    runs; the bricks': their preparation and their calls). Otherwise each model is first measured
    whole (the measurement whose time the speedup counts), its new bricks are measured (then the
    warm sweep that gives each brick its fastest state for the lower bound), and then the rounds
    pair them. The first set of rounds' whole runs are the model's measurement; where they failed,
    the model is measured whole apart. A model measured whole by an earlier run of the database has
    its new bricks measured and no rounds."""
    backend = backend_name(config)
    chained = _bricks_in_rounds(rounds, config)
    whole_time = whole_setup = rounds_time = 0.0
    paired: dict[str, PairedRounds] = {}
    workers = _KeptRunners(repeat_for=config.config_id)
    try:
        for seed, (name, graph) in enumerate(graphs.items()):
            dec = brickset.models[name]
            workers.restart(config)  # each model's bricks and rounds in a worker of its own
            runner = workers(backend, config, budget, False).runner
            earlier = _measured(store.measurements.get(dec.model_key, system, config.config_id, kind="model"))
            first = None
            if not earlier and not chained:
                say(f"{name}: whole model")
                first = runner.measure(graph)
            if earlier or not chained:  # chained rounds measure the bricks themselves
                for turn in turns:
                    turn.measure(name, store, workers, backend, budget, system, say)
            if earlier:
                continue
            whole = first
            if first is None or first.ok:
                for k, turn in enumerate(turns):
                    result = _in_rounds(store, turn.brickset.models[name], runner, graph, system, budget, seed, say,
                                        rounds, reuse)
                    if result is None:
                        if chained:  # nothing else measures its bricks: measure them apart
                            turn.measure(name, store, workers, backend, budget, system, say)
                        continue
                    if chained:
                        turn.setup_s += result.rounds.prepare_s
                        turn.timed_s += result.rounds.bricks_timed_s()
                    rounds_time += result.rounds.elapsed_s
                    if k == 0:
                        paired[name] = result
                        if first is None:
                            whole_setup += result.rounds.hold_s
                        whole = (replace(result.whole, key=first.key, wall_time_s=first.wall_time_s) if first
                                 else replace(result.whole, wall_time_s=result.rounds.hold_s
                                              + result.rounds.whole_timed_s()))
            if whole is None:  # its rounds failed: the whole model apart
                say(f"{name}: whole model")
                whole = runner.measure(graph)
            whole_time += whole.wall_time_s or 0.0
            # from rounds: it replaces the whole run stored, as the bricks' runs in them do
            store.measurements.record_model(whole, system, budget=budget,
                                            rule="replace" if name in paired else "best")
    finally:
        workers.close()
    return whole_time, whole_setup, rounds_time, paired


def _in_rounds(store: Store, dec: Decomposition, runner: Runner, graph: ModelGraph, system: SystemInfo,
               budget: Budget, seed: int, say: Callable[[str], object],
               rounds: RoundsBudget = PAIRED_ROUNDS, reuse: Reuse | None = None) -> PairedRounds | None:
    """``dec``'s model and its bricks in rounds (:data:`PAIRED_ROUNDS` in each of
    :data:`~dlbricks.generators.runner.ROUND_PROCESSES` workers of ``runner``: the one that measured the
    model's new bricks, then fresh ones); None where they failed."""
    result = measure_in_rounds(store, dec, runner, graph, system, budget=budget, rounds=rounds, seed=seed,
                               all_bricks=_bricks_in_rounds(rounds, runner.config), reuse=reuse)
    if result is None:
        reason = getattr(runner, "rounds_error", None) or "no process finished its rounds"
        say(f"{dec.model}: its rounds failed ({reason}); its bricks measured apart, its whole model apart")
        return None
    ratio, low, high = result.ratio()
    taken = result.rounds.derived
    anchored = (f" ({taken} of them taken from earlier models' rounds through anchors among the rest, "
                f"+-{100 * result.transfer_half_width:.1f}%)" if taken else "")
    say(f"{dec.model}: {result.rounds.count} rounds of the whole model and {len(result.bricks)} {dec.granularity} "
        f"bricks{anchored} in {len(result.rounds.groups())} processes, {result.rounds.elapsed_s:.1f} s; whole {1e3 * result.whole.median_s:.2f} ms, swing "
        f"{result.rounds.swing():.2f}x (p90/p10); bricks' sum over whole {ratio:.3f} [{low:.3f}, {high:.3f}]")
    return result


def _rows(models: Sequence[str], brickset: BrickSet, layer_set: BrickSet | None, store: Store, system: SystemInfo,
          config: Any, paired: dict[str, PairedRounds],
          say: Callable[[str], object]) -> tuple[list[EvaluationRow], dict[str, float]]:
    """Each model's row (its estimate against its stored whole measurement) and the time per op type;
    each interval then joins how far the suite's other models landed (:func:`_leave_one_out`)."""
    rows = []
    op_times: dict[str, float] = {}
    for name in models:
        dec = brickset.models[name]
        measured = store.measurements.get(dec.model_key, system, config.config_id, kind="model")
        if not _measured(measured):
            raise InvalidArgumentError(f"model '{name}' could not be measured whole: "
                                       f"{measured.error if measured else 'no measurement'}")
        est = estimate(dec, store, system=system, config=config, composition=False)
        for c in est.breakdown:
            op_times[c.op_type] = op_times.get(c.op_type, 0.0) + c.total_s
        layer_est = (estimate(layer_set.models[name], store, system=system, config=config,
                              composition=False).sequential_s
                     if layer_set is not None else None)
        result = paired.get(name)
        pairing = None
        if result is not None:
            pairing = ratio_half_width(result)
            est = paired_interval(est, math.log1p(pairing))
        rows.append(EvaluationRow(
            model=name, layers=dec.layers, unique_bricks=len(dec.bricks),
            measured_s=measured.median_s or float("nan"), estimated_s=est.sequential_s,
            parallel_s=est.parallel_s, lower_bound_s=est.lower_bound_s, roofline_s=est.roofline_s,
            ci_low_s=est.ci_low_s, ci_high_s=est.ci_high_s, layer_estimated_s=layer_est,
            rounds=0 if result is None else result.rounds.count,
            swing=None if result is None else result.rounds.swing(),
            pairing=pairing, graph_estimated_s=est.graph_s))
        say(f"{name}: measured {1e3 * rows[-1].measured_s:.2f} ms, estimated "
            f"{1e3 * est.sequential_s:.2f} ms ({100 * rows[-1].error:+.1f}%)")
    return _leave_one_out(rows), op_times


def _with_graph(row: EvaluationRow, graph: ModelGraph, config: Any, store: Store, system: SystemInfo,
                budget: Budget, say: Callable[[str], object]) -> EvaluationRow:
    """``row`` with its model measured captured in a CUDA graph (stored where it ran), or the reason
    the runtime gave for not capturing it (its first line)."""
    say(f"{row.model}: whole model in a CUDA graph")
    m = measure_graphed(graph, config, budget)
    if not m.ok:
        return replace(row, graph_failure=capture_failure(m))
    store.measurements.record_model(m, system, budget=budget)
    return replace(row, graph_measured_s=m.median_s)


def _leave_one_out(rows: Sequence[EvaluationRow]) -> list[EvaluationRow]:
    """Each row's interval joined in quadrature, in log space, with how far the sums of the suite's
    other models landed from their measurements (:func:`~dlbricks.estimator.estimation.composition_error`, the
    row's own model left out): the rounds hold the machine's swing, the other models the method's.
    A model whose rounds the swing left wider than :data:`~dlbricks.estimator.TRUSTED_SWING` is no
    reference: its error is the machine's, not the method's."""
    references = [CompositionReference(r.model, r.measured_s, r.estimated_s) for r in rows
                  if r.pairing is None or r.pairing <= TRUSTED_SWING]
    out = []
    for row in rows:
        others = [ref for ref in references if ref.model != row.model]
        low, high = joined_interval(row.estimated_s, row.ci_low_s, row.ci_high_s,
                                    composition_error(others, row.estimated_s))
        out.append(replace(row, ci_low_s=low, ci_high_s=high))
    return out


def _target(target_ci: float | None) -> float | None:
    """``target_ci`` checked: a fraction in (0, 1), or None."""
    if target_ci is None:
        return None
    if isinstance(target_ci, (bool, str)) or not isinstance(target_ci, (int, float)) or not 0 < target_ci < 1:
        raise InvalidArgumentError(
            f"'target_ci' must be a number in (0, 1) or None. Got {target_ci!r} instead.")
    return float(target_ci)


class _Turns:
    """One granularity's bricks, measured model by model in each model's turn: its new bricks
    (``populate``); the rounds that follow hold every brick of the model, shared ones included."""

    def __init__(self, brickset: BrickSet, configs: Sequence[Any], target_ci: float | None = None) -> None:
        self.brickset = brickset
        self.configs = list(configs)
        self.target_ci = target_ci
        self.setup_s = 0.0  # estimate configuration: seconds outside the harness
        self.timed_s = 0.0  # estimate configuration: seconds inside timed regions
        self.cis: list[float] = []  # the relative CI half-width of each model's estimate

    def measure(self, name: str, store: Store, workers: _KeptRunners, backend: str, budget: Budget,
                system: Any, say: Callable[[str], object]) -> None:
        dec = self.brickset.models[name]
        tick = lambda p: say(_progress_line(p))  # noqa: E731
        if self.target_ci is not None:
            report = populate(store, [dec], self.configs[:1],
                              BenchOptions(backend=backend, budget=budget, store_models=False, contexts="reuse",
                                           target_ci=self.target_ci),
                              system=system, runner_factory=workers, progress=tick)
            self.setup_s += report.setup_s
            self.timed_s += report.timed_s
            if report.worst_ci is not None:
                self.cis.append(report.worst_ci)
            if self.configs[1:]:
                populate(store, [dec], self.configs[1:],
                         BenchOptions(backend=backend, budget=PILOT_BUDGET, store_models=False, contexts="reuse"),
                         system=system, runner_factory=workers, progress=tick)
            return
        report = populate(store, [dec], self.configs,
                          BenchOptions(backend=backend, budget=budget, store_models=False, contexts="reuse"),
                          system=system, runner_factory=workers, progress=tick)
        self.setup_s += report.setup_s  # both configurations here
        self.timed_s += report.timed_s


class _KeptRunners:
    """A ``runner_factory`` for :func:`populate` whose runners outlive each call (one per
    configuration, closed by :meth:`close`), so that a suite run model by model calibrates each
    floor once; :meth:`restart` gives the next model a fresh worker."""

    def __init__(self, repeat_for: str | None = None) -> None:
        self._runners: dict[str, Runner] = {}
        self._repeat_for = repeat_for  # the configuration whose bricks are timed side by side on a GPU

    def __call__(self, backend: str, config: Any, budget: Any, keep_samples: bool) -> _Kept:
        key = f"{backend}/{config.config_id}"
        if key not in self._runners:
            self._runners[key] = Runner(backend, config, budget, keep_samples=keep_samples,
                                        repeat=self._repeat_for in (None, config.config_id))
        return _Kept(self._runners[key])

    def restart(self, config: Any) -> None:
        """Stop the worker of ``config``'s runner, if any: the next request starts a fresh one, or
        takes the spare that the last rounds started (the runner keeps its floor)."""
        for key, runner in self._runners.items():
            if key.endswith(f"/{config.config_id}"):
                runner.close(keep_spare=True)

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()


@dataclass(frozen=True, slots=True)
class _Kept:
    """A kept runner as :func:`populate` sees it: ``close`` leaves the worker running."""

    runner: Runner

    def measure(self, item: Any, *, budget: Budget | None = None) -> Measurement:
        return self.runner.measure(item, budget=budget)

    def measure_detailed(self, item: Any, *, budget: Budget | None = None) -> tuple[Measurement, Any]:
        return self.runner.measure_detailed(item, budget=budget)

    def close(self) -> None:
        pass


def _progress_line(p: object) -> str:
    done, total = getattr(p, "done", 0), getattr(p, "total", 0)
    eta = getattr(p, "eta_s", None)
    return f"bricks {done}/{total}" + (f", about {eta:.0f} s left" if eta is not None else "")
