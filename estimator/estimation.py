"""Estimates of a model's latency from its bricks' measurements.

:func:`estimate_decomposition` is the core: given a model's decomposition, the measurements of its
bricks under one backend configuration, optionally the measurements of the same bricks under other
configurations (for the lower bound) and the machine's peaks (for the roofline), it composes the
sequential and parallel estimates, the Benanza-style lower bounds, the physical bound, an uncertainty
interval, coverage and a per-brick breakdown.

The interval combines what each brick's time rests on: a measured brick its CI (bricks independent,
in quadrature), a predicted one its predictor's conformal interval (see
:mod:`dlbricks.estimator.predict`); bricks predicted by the same model err together, so their
intervals add up linearly before they join the rest in quadrature. An estimate whose predicted
share is large, or that rests on bricks far from every measured one, carries a ``warning``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from dlbricks import Brick, Decomposition, InvalidArgumentError, MissingBricksError
from dlbricks.generators import Budget, Measurement

from ._compose import critical_path, sequential
from .predict import (
    ALPHA,
    LatencyPredictor,
    Prediction,
    Predictor,
    computes_on_8bit,
    conformal_quantile,
    floor_drift_s,
    roofline_work,
)
from .queue import QueueTimes, graph_latency, queue_critical_path, queue_latency

__all__ = [
    "joined_interval",
    "paired_interval",
    "ON_MISSING",
    "WARN_FAR_SHARE",
    "WARN_PREDICTED_SHARE",
    "COMPOSITION_NEIGHBOURS",
    "BrickContribution",
    "CompositionReference",
    "Estimate",
    "MissingBrick",
    "Peaks",
    "Plan",
    "composition_error",
    "computes_on_8bit",
    "estimate_decomposition",
    "issue_time",
    "measure_time_s",
    "plan_decomposition",
    "with_composition",
]

ON_MISSING = ("error", "predict", "measure")
#: An estimate with at least this share of its time predicted carries a warning.
WARN_PREDICTED_SHARE = 0.3
#: An estimate with at least this share of its time predicted far from the data carries a warning.
WARN_FAR_SHARE = 0.1
#: Reference models, nearest in latency, whose composition errors bound an estimate's: 19 is the
#: fewest with a finite split-conformal 95% quantile.
COMPOSITION_NEIGHBOURS = 20


@dataclass(frozen=True, slots=True)
class Peaks:
    """Measured peaks of a machine: FLOP/s (float32 GEMM), memory bandwidth in bytes/s, and integer
    ops/s (8-bit GEMM) where calibrated.

    ``int_ops_per_s`` bounds the bricks that compute on 8-bit values (:func:`computes_on_8bit`:
    quantized models' ConvInteger, MatMulInteger, QLinearConv, and the QuantizeLinear ->
    DequantizeLinear units that the runtime fuses into them): integer kernels can beat the float
    peak. Such a brick is charged at the higher of the two peaks, since it may run float kernels too.
    """

    flops_per_s: float
    bytes_per_s: float
    int_ops_per_s: float | None = None
    #: The share of each brick's weight bytes that must come from memory in a run of its model
    #: (:meth:`for_model`); 1.0, every weight from memory, unless a model's weights fit the caches.
    weight_share: float = 1.0

    def for_model(self, weight_bytes: int, cache_bytes: int | None) -> Peaks:
        """These peaks for a model that reads ``weight_bytes`` of weights a run on a machine whose
        caches hold ``cache_bytes``: run after run, at best the caches keep ``cache_bytes`` of
        them, so at least ``weight_bytes - cache_bytes`` come from memory, charged to each brick
        in proportion (``weight_share``). A model whose weights fit the caches is bounded by its
        arithmetic alone. Unknown caches (None) leave every weight to memory."""
        if cache_bytes is None or weight_bytes <= 0:
            return replace(self, weight_share=1.0)
        return replace(self, weight_share=max(weight_bytes - cache_bytes, 0) / weight_bytes)

    def compute_peak(self, brick: Brick) -> float:
        """The peak that bounds ``brick``'s arithmetic: the float one, or for a brick computing on
        8-bit values the higher of the float and integer ones."""
        if self.int_ops_per_s is None or not computes_on_8bit(brick):
            return self.flops_per_s
        return max(self.flops_per_s, self.int_ops_per_s)

    def roofline_s(self, brick: Brick) -> float:
        """max(FLOPs / peak ops/s, weight bytes / peak bandwidth): time no run can beat.

        FLOPs over a convolution's zero padding are left out (no implementation must do them),
        and so are activations on the memory side: inside a model they live in the cache
        (MXNet's memory pool is 6-13 MB for the Gluon zoo; onnxruntime's arena reuses its
        buffers), and a layer moving them runs faster than the stream bandwidth (MobileNet's
        ReLUs: 3-5x). Weights come from memory, each layer meeting its own once per run, but for
        the share that the caches can keep from one run to the next (:meth:`for_model`). The peak
        ops/s is :meth:`compute_peak`.
        """
        flops, weight_bytes = _roofline_work(brick)
        return max(flops / self.compute_peak(brick), self.weight_share * weight_bytes / self.bytes_per_s)


_roofline_work = roofline_work


#: Bricks whose fastest floor-corrected run is at least this long show the rate the machine reached.
REACHED_MIN_S = 100e-6


@dataclass(frozen=True, slots=True)
class BrickContribution:
    """One brick's part of an estimate (times in seconds, floor-corrected, per model run)."""

    signature: str
    op_type: str
    count: int
    latency_s: float  # one occurrence, floor-corrected
    total_s: float  # count * latency_s
    share: float  # of the sequential estimate
    source: str  # "measured" | "predicted"
    halfwidth_s: float  # CI half-width of one occurrence
    lower_bound_s: float | None  # fastest measured, floor-corrected, one occurrence; at least the roofline
    roofline_s: float | None
    low_s: float | None = None  # interval of one occurrence (measured: its CI; predicted: conformal)
    high_s: float | None = None
    predictor: str | None = None  # the model that predicted it (op type, kernel class or "*")
    far: bool = False  # predicted far from every measured brick of its model
    # predicted: distance to the nearest brick its model was fitted on, in that model's d_ref (far beyond FAR_DISTANCE)
    distance: float | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """A model's estimated latency with bounds, uncertainty, coverage and breakdown (seconds)."""

    model: str
    granularity: str
    config_id: str
    layers: int
    unique_bricks: int
    sequential_s: float
    parallel_s: float
    ci_low_s: float
    ci_high_s: float
    lower_bound_s: float
    lower_bound_parallel_s: float
    roofline_s: float | None
    floor_s: float  # added once per run: the calibrated floor plus the model's own layout reorders
    coverage: float  # share of occurrences whose brick was measured
    predicted_share: float  # share of the sequential estimate that is predicted
    predicted: tuple[str, ...]  # signatures of predicted bricks
    breakdown: tuple[BrickContribution, ...]
    far_share: float = 0.0  # share of the sequential estimate predicted far from measured bricks
    warning: str | None = None  # why the estimate should not be trusted as it is, if it should not
    composition_error: float = 0.0  # |ln(sum / whole)| joined into the interval (see with_composition)
    references: int = 0  # stored models measured whole that gave composition_error
    # how much the machine swung while the measured bricks were timed: their runs' 90th percentile over
    # their median, weighted by each brick's share of the estimate (None where no brick has one)
    swing: float | None = None
    # on a GPU, the model captured in a CUDA graph: its kernels back to back plus the floor once
    # (:func:`~dlbricks.estimator.queue.graph_latency`); None where a brick has no device time
    graph_s: float | None = None

    @property
    def warn(self) -> bool:
        """Whether a large share is predicted, or predicted far from the data (see ``warning``)."""
        return self.warning is not None

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form."""
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True, slots=True)
class CompositionReference:
    """A model measured whole beside the estimate from its own measured bricks (seconds)."""

    model: str
    measured_s: float
    estimated_s: float

    @property
    def log_error(self) -> float:
        """``|ln(estimated / measured)|``."""
        return abs(math.log(self.estimated_s / self.measured_s))


def composition_error(references: Iterable[CompositionReference], latency_s: float, *,
                      neighbours: int = COMPOSITION_NEIGHBOURS, alpha: float = ALPHA) -> float:
    """How far a sum of measured bricks may land from its whole model, for a model of ``latency_s``:
    the split-conformal ``1 - alpha`` quantile of the log errors of the ``neighbours`` references
    nearest in log latency (the largest of them where they are too few for that level; 0 without
    any). Conditioning on latency keeps tiny models, whose sums miss by more, from widening the
    interval of large ones (a Mondrian-style split of the calibration set)."""
    usable = [r for r in references if r.measured_s > 0 and r.estimated_s > 0]
    if not usable or latency_s <= 0:
        return 0.0
    near = sorted(usable, key=lambda r: (abs(math.log(r.measured_s / latency_s)), r.model))[:neighbours]
    errors = [r.log_error for r in near]
    bound = conformal_quantile(errors, alpha)
    return bound if math.isfinite(bound) else max(errors)


def with_composition(est: Estimate, log_error: float, references: int) -> Estimate:
    """``est`` with the composition error ``log_error`` (of ``references`` models) joined into its
    interval in quadrature, in log space (:func:`composition_error`)."""
    seq = est.sequential_s
    down, up = _with_composition(seq, seq - est.ci_low_s, est.ci_high_s - seq, log_error)
    return replace(est, ci_low_s=max(seq - down, 0.0), ci_high_s=seq + up, composition_error=log_error,
                   references=references)


def _halfwidth(m: Measurement) -> float:
    if m.ci_low_s is None or m.ci_high_s is None:
        return 0.0
    return max(m.ci_high_s - m.ci_low_s, 0.0) / 2


def _fastest(measurements: Sequence[Measurement]) -> float | None:
    """The brick at its fastest measured configuration: min over configs of (min - floor), less the
    floor's drift at its moments where that was up (never more: a bound stays a bound)."""
    values = [max((m.min_s or 0.0) - (m.floor_s or 0.0) - max(floor_drift_s(m), 0.0), 0.0) for m in measurements
              if m.ok and m.min_s is not None]
    return min(values) if values else None


def estimate_decomposition(
    dec: Decomposition,
    measurements: Mapping[str, Measurement],
    *,
    config_id: str,
    floor_s: float | None = None,
    on_missing: str = "error",
    predictor: Predictor | None = None,
    measure: Callable[[Sequence[Brick]], Mapping[str, Measurement]] | None = None,
    alternatives: Mapping[str, Sequence[Measurement]] | None = None,
    peaks: Peaks | None = None,
    brick_overhead_s: Mapping[str, float] | None = None,
    model_extra_s: float = 0.0,
    views: Collection[str] = (),
    composition_error: float = 0.0,
    launch_queue: bool = True,
) -> Estimate:
    """Compose a model's latency from its bricks.

    Parameters
    ----------
    dec : Decomposition
        The model's bricks and brick DAG.
    measurements : mapping of signature to Measurement
        Measurements under the configuration being estimated (``config_id``).
    floor_s : float, optional
        Per-call floor of the configuration; default: the measurements' own ``floor_s``.
    on_missing : {"error", "predict", "measure"}
        What to do with bricks that have no ok measurement.
    predictor : Predictor, optional
        A fitted predictor (a :class:`LatencyPredictor` or any :class:`Predictor`), for
        ``on_missing="predict"``; given ``peaks`` through its ``with_peaks`` (a
        :class:`LatencyPredictor` fitted without them is fitted again with them).
    measure : callable, optional
        Measures bricks now, for ``on_missing="measure"``.
    alternatives : mapping of signature to measurements, optional
        Measurements of the bricks under other configurations (lower bound); each brick's own
        measurement always counts.
    peaks : Peaks, optional
        The machine's peaks (roofline).
    brick_overhead_s : mapping of signature to seconds, optional
        Work a brick's own run does that the model does not do per brick (layout reorders of a
        fused brick at "all"): subtracted from the brick.
    model_extra_s : float
        Work the model does once per run that no brick holds (its own layout reorders): added once.
    views : collection of signatures
        Bricks that the runtime runs inside a model as views of their inputs (a backend's
        ``view_ops``): their measured time is a copy that the model does not make, so they count
        only what a node costs beyond the per-call floor (:func:`view_cost`).
    composition_error : float
        Log error of a sum of measured bricks against the whole model, ``|ln(sum / whole)|`` at the
        interval's level (from validation runs of other models: how far brick sums landed from
        whole-model runs); it joins the bricks' own interval in quadrature, in log space, so the
        interval stays above zero and as wide above as an error of that size needs.
    launch_queue : bool, default True
        Where every measured brick has launch-queue times (``host_s``: CUDA), compose the sequential
        and parallel estimates and the lower bound through the launch queue
        (:mod:`dlbricks.estimator.queue`); False, or without them, the sequential sum.
    """
    if on_missing not in ON_MISSING:
        raise InvalidArgumentError(f"'on_missing' must be one of {ON_MISSING}. Got {on_missing!r} instead.")
    found = {sig: m for sig, m in measurements.items() if sig in dec.bricks and m.ok and m.median_s}
    missing = [b for sig, b in dec.bricks.items() if sig not in found]
    if missing and on_missing == "measure":
        if measure is None:
            raise InvalidArgumentError("on_missing='measure' needs a backend to measure with.")
        found.update({s: m for s, m in measure(missing).items() if m.ok and m.median_s})
        missing = [b for sig, b in dec.bricks.items() if sig not in found]
    if floor_s is None:
        floors = [m.floor_s for m in found.values() if m.floor_s is not None]
        floor_s = min(floors) if floors else 0.0
    overhead = brick_overhead_s or {}
    latency = {sig: max(m.median_s - floor_s - floor_drift_s(m) - overhead.get(sig, 0.0), 0.0)  # type: ignore[operator]
               for sig, m in found.items()}
    halfwidth = {sig: _halfwidth(m) for sig, m in found.items()}
    predicted: list[str] = []
    predictions: dict[str, Prediction] = {}
    if missing:
        if on_missing == "error" or predictor is None:
            first = missing[0]
            failed = sum(1 for b in missing if b.signature in measurements)
            why = f" ({failed} of them failed to measure)" if failed else ""
            todo = ("no predictor was given: pass a fitted LatencyPredictor" if on_missing == "predict"
                    else "benchmark them with 'dlbricks bench' (--retry-failed for failed ones), or "
                         "estimate with on_missing='predict' or 'measure'")
            raise MissingBricksError(
                f"{len(missing)} of {len(dec.bricks)} bricks of '{dec.model}' have no measurement "
                f"for configuration {config_id[:12]}{why} (first: {first.signature[:12]} {first.op_type}); "
                f"{todo}.", len(missing))
        predictor = predictor.with_peaks(peaks)
        for brick in missing:
            found_prediction = predictor.prediction(brick)
            if found_prediction is None:
                raise InvalidArgumentError(
                    f"no measured brick to predict {brick.signature[:12]} ({brick.op_type}) from; "
                    f"benchmark some bricks first.")
            predictions[brick.signature] = found_prediction
            latency[brick.signature] = found_prediction.seconds
            predicted.append(brick.signature)
    node_s = view_cost(found.values())
    latency.update({sig: min(latency[sig], node_s) for sig in views if sig in latency})
    predictions = {sig: p for sig, p in predictions.items() if sig not in views}
    every = {sig: [m, *(alternatives or {}).get(sig, ())] for sig, m in found.items()}
    return _compose(dec, latency, halfwidth, floor_s + model_extra_s, config_id, predicted, every, peaks,
                    overhead, predictions, composition_error, launch_queue, frozenset(views))


def view_cost(measurements: Iterable[Measurement]) -> float:
    """What a view costs inside a model beyond the per-call floor: a node that does no work of its
    own still passes through the runtime's executor, as each further node of the floor's chain does
    (``node_s``, the median over ``measurements``); 0 where none was measured with it. A view
    brick's own time is no guide: it copies its input to an output of its own.
    """
    costs = [m.node_s for m in measurements if m.node_s is not None]
    return statistics.median(costs) if costs else 0.0


def _compose(dec: Decomposition, latency: Mapping[str, float], halfwidth: Mapping[str, float],
             floor_s: float, config_id: str, predicted: Sequence[str],
             alternatives: Mapping[str, Sequence[Measurement]], peaks: Peaks | None,
             overhead: Mapping[str, float], predictions: Mapping[str, Prediction],
             composition_error: float = 0.0, launch_queue: bool = True,
             views: Collection[str] = frozenset()) -> Estimate:
    latency = dict(latency)
    predicted_set = set(predicted)
    roof = None
    if peaks is not None:
        fastest = _bounds(dec, latency, alternatives, floor_s, overhead, launch_queue, views)[1][2]
        peaks = _reached(peaks, dec, fastest, predicted_set)
        roof = {sig: peaks.roofline_s(b) for sig, b in dec.bricks.items()}
        latency = {sig: max(t, roof[sig]) for sig, t in latency.items()}  # as in _at_least
    predictions = {sig: _above(p, roof[sig]) if roof else p for sig, p in predictions.items()}
    latency.update({sig: p.seconds for sig, p in predictions.items()})
    (seq, par), lower = _bounds(dec, latency, alternatives, floor_s, overhead, launch_queue, views, roof)
    graph = _graph_time(dec, latency, alternatives, views) if launch_queue else None
    counts = dec.counts()
    down, up = _with_composition(seq, *_interval(counts, halfwidth, predictions), composition_error)
    total_work = seq - floor_s
    breakdown = tuple(sorted((
        _contribution(sig, b, counts[sig], latency[sig], total_work, halfwidth.get(sig, 0.0),
                      predictions.get(sig), sig in predicted_set, lower[2].get(sig), roof[sig] if roof else None)
        for sig, b in dec.bricks.items()), key=lambda c: -c.total_s))
    measured_occ = sum(1 for o in dec.occurrences if o.signature not in predicted_set)
    share = sum(c.total_s for c in breakdown if c.source == "predicted") / total_work if total_work > 0 else 0.0
    far = sum(c.total_s for c in breakdown if c.far) / total_work if total_work > 0 else 0.0
    return Estimate(
        model=dec.model, granularity=dec.granularity, config_id=config_id, layers=dec.layers,
        unique_bricks=len(dec.bricks), sequential_s=seq, parallel_s=par,
        ci_low_s=max(seq - down, 0.0), ci_high_s=seq + up,
        lower_bound_s=lower[0], lower_bound_parallel_s=lower[1],
        roofline_s=sum(counts[s] * r for s, r in roof.items()) if roof else None,
        floor_s=floor_s,
        coverage=measured_occ / len(dec.occurrences) if dec.occurrences else 1.0,
        predicted_share=share, predicted=tuple(predicted), breakdown=breakdown, far_share=far,
        warning=_warning(share, far, len(predicted)), graph_s=None if graph is None else floor_s + graph)


def _with_composition(seq: float, down: float, up: float, log_error: float) -> tuple[float, float]:
    """Half-widths (below, above) of an interval of ``seq`` with a log error ``log_error`` of the
    composition itself joined in quadrature in log space (unchanged where it is 0)."""
    if log_error <= 0 or seq <= 0:
        return down, up
    below = math.log(seq / (seq - down)) if down < seq else math.inf
    above = math.log1p(up / seq)
    return (seq * -math.expm1(-math.hypot(below, log_error)),
            seq * math.expm1(math.hypot(above, log_error)))


def joined_interval(seq: float, low: float, high: float, log_error: float) -> tuple[float, float]:
    """The interval ``[low, high]`` of ``seq`` with a log error ``log_error`` joined in quadrature in
    log space (unchanged where it is 0)."""
    down, up = _with_composition(seq, seq - low, high - seq, log_error)
    return max(seq - down, 0.0), seq + up


def paired_interval(est: Estimate, log_half_width: float) -> Estimate:
    """``est`` with its interval at least ``log_half_width`` wide on each side, in log space: the
    swing that a model's rounds left in the ratio of its bricks' sum to its whole runs
    (:meth:`~dlbricks.generators.rounds.PairedRounds.ratio`). The rounds' spread already holds the bricks'
    own sampling error, so the wider of the two is kept, not their sum."""
    seq = est.sequential_s
    if seq <= 0 or log_half_width <= 0:
        return est
    below = math.log(seq / est.ci_low_s) if 0 < est.ci_low_s < seq else (0.0 if est.ci_low_s >= seq else math.inf)
    above = math.log(est.ci_high_s / seq) if est.ci_high_s > seq else 0.0
    below, above = max(below, log_half_width), max(above, log_half_width)
    return replace(est, ci_low_s=seq * math.exp(-below), ci_high_s=seq * math.exp(above))


def _above(prediction: Prediction, floor_s: float) -> Prediction:
    """``prediction`` held at or above a roofline of ``floor_s``."""
    if prediction.seconds >= floor_s and prediction.low_s >= floor_s:
        return prediction
    seconds = max(prediction.seconds, floor_s)
    return replace(prediction, seconds=seconds, low_s=max(prediction.low_s, floor_s),
                   high_s=max(prediction.high_s, seconds), floor_s=max(prediction.floor_s, floor_s))


def _interval(counts: Mapping[str, int], halfwidth: Mapping[str, float],
              predictions: Mapping[str, Prediction]) -> tuple[float, float]:
    """Half-widths (below, above) of the model's interval: measured bricks' CIs in quadrature, and
    per predicting model the sum of its bricks' intervals (their errors go together), in quadrature
    with the rest."""
    measured = sum((counts[sig] * halfwidth.get(sig, 0.0)) ** 2 for sig in counts if sig not in predictions)
    down: dict[str, float] = {}
    up: dict[str, float] = {}
    for sig, p in predictions.items():
        down[p.model] = down.get(p.model, 0.0) + counts[sig] * (p.seconds - p.low_s)
        up[p.model] = up.get(p.model, 0.0) + counts[sig] * (p.high_s - p.seconds)
    return (math.sqrt(measured + sum(v * v for v in down.values())),
            math.sqrt(measured + sum(v * v for v in up.values())))


def _contribution(sig: str, brick: Brick, count: int, latency: float, total_work: float, halfwidth: float,
                  prediction: Prediction | None, predicted: bool, lower_bound: float | None,
                  roofline: float | None) -> BrickContribution:
    low, high = ((prediction.low_s, prediction.high_s) if prediction is not None
                 else (max(latency - halfwidth, 0.0), latency + halfwidth))
    return BrickContribution(
        signature=sig, op_type=brick.op_type, count=count, latency_s=latency, total_s=count * latency,
        share=count * latency / total_work if total_work > 0 else 0.0,
        source="predicted" if predicted else "measured",
        halfwidth_s=(high - low) / 2 if prediction is not None else halfwidth,
        lower_bound_s=lower_bound, roofline_s=roofline, low_s=low, high_s=high,
        predictor=prediction.model if prediction is not None else None,
        far=prediction is not None and prediction.far,
        distance=prediction.distance if prediction is not None else None)


def _warning(share: float, far: float, bricks: int) -> str | None:
    """Why an estimate with a large predicted share, or one far from the data, is to be read with
    care; None when it is not."""
    if share < WARN_PREDICTED_SHARE and far < WARN_FAR_SHARE:
        return None
    text = f"{100 * share:.0f}% of the estimate is predicted ({bricks} bricks never measured)"
    if far >= WARN_FAR_SHARE:
        text += f", {100 * far:.0f}% from bricks far from every measured brick"
    return text + "; measure them (--on-missing measure) for a figure that rests on measurements."


def _reached(peaks: Peaks, dec: Decomposition, fastest: Mapping[str, float], predicted: set[str]) -> Peaks:
    """``peaks`` raised to the best rates the model's own bricks reached in their fastest runs.

    A peak is the best rate the machine was seen to reach, and this machine's speed drifts 10-20%
    within seconds: a calibration taken at another moment can sit below what a brick reached
    (the MXNet roofline of Inception-v3 rose 5% above its lower bound so). Only bricks of at least
    :data:`REACHED_MIN_S` count, so that the floor's uncertainty (a few microseconds) cannot inflate a
    rate; predicted bricks do not count. A brick computing on 8-bit values (:func:`computes_on_8bit`)
    raises the integer peak (set to the float one where none was calibrated), not the float one.
    """
    flops, bandwidth, integer = peaks.flops_per_s, peaks.bytes_per_s, peaks.int_ops_per_s or peaks.flops_per_s
    for sig, brick in dec.bricks.items():
        seconds = fastest.get(sig, 0.0)
        if sig in predicted or seconds < REACHED_MIN_S:
            continue
        work, weight_bytes = _roofline_work(brick)
        if computes_on_8bit(brick):
            integer = max(integer, work / seconds)
        else:
            flops = max(flops, work / seconds)
        bandwidth = max(bandwidth, peaks.weight_share * weight_bytes / seconds)
    return Peaks(flops, bandwidth, integer, peaks.weight_share)


def _lower_bounds(dec: Decomposition, alternatives: Mapping[str, Sequence[Measurement]],
                  latency: Mapping[str, float], floor_s: float, overhead: Mapping[str, float],
                  roof: Mapping[str, float],
                  ) -> tuple[float, float, dict[str, float]]:
    """Sequential and parallel lower bounds: every brick at its fastest measured configuration
    (its minimum over samples and configurations); predicted bricks count at their prediction.
    No brick counts below its roofline (``roof``; see :func:`_at_least`)."""
    fastest: dict[str, float] = {}
    for sig in dec.bricks:
        value = _fastest(alternatives.get(sig, ()))
        if value is not None:
            value = max(value - overhead.get(sig, 0.0), 0.0)
        fastest[sig] = min(value, latency[sig]) if value is not None else latency[sig]
    return _at_least(dec, fastest, roof, floor_s)


def _at_least(dec: Decomposition, fastest: dict[str, float], roof: Mapping[str, float],
              floor_s: float) -> tuple[float, float, dict[str, float]]:
    """Sequential and parallel lower bounds of bricks at ``fastest``, each held at or above its
    roofline: both bound the brick's time, so their maximum does too. A floor-corrected time under
    the roofline is the floor correction's error (a microsecond MatMul, its share of the per-call
    floor taken off, can come out faster than its arithmetic at the machine's peak)."""
    fastest = {sig: max(t, roof.get(sig, 0.0)) for sig, t in fastest.items()}
    node = {o.index: fastest[o.signature] + floor_s for o in dec.occurrences}
    return sequential(dec.dag, node, floor_s), critical_path(dec.dag, node, floor_s), fastest


def _bounds(dec: Decomposition, latency: Mapping[str, float], alternatives: Mapping[str, Sequence[Measurement]],
            floor_s: float, overhead: Mapping[str, float], launch_queue: bool, views: Collection[str] = (),
            roof: Mapping[str, float] | None = None,
            ) -> tuple[tuple[float, float], tuple[float, float, dict[str, float]]]:
    """The (sequential, parallel) estimates and the lower bounds with each brick's fastest time:
    through the launch queue where the bricks have its times (and ``launch_queue``), else summed.
    With ``roof``, each brick's rooflines, no brick's fastest time counts below its roofline."""
    roof = roof or {}
    queue = _queue_times(dec, latency, alternatives, views) if launch_queue else None
    if queue is not None:
        return _queued(dec, queue, floor_s), _queued_lower_bounds(dec, queue, alternatives, floor_s, roof)
    node_latency = {o.index: latency[o.signature] + floor_s for o in dec.occurrences}
    estimates = sequential(dec.dag, node_latency, floor_s), critical_path(dec.dag, node_latency, floor_s)
    return estimates, _lower_bounds(dec, alternatives, latency, floor_s, overhead, roof)


def _queue_times(dec: Decomposition, latency: Mapping[str, float],
                 measured: Mapping[str, Sequence[Measurement]],
                 views: Collection[str] = ()) -> dict[str, QueueTimes] | None:
    """Each brick's times in an accelerator's launch queue, where measured bricks have them
    (``host_s``: a CUDA measurement), else None.

    The device's time is its kernels' after a run of themselves (``device_warm_s``), as the brick's
    latency was timed. The host's is :func:`issue_time`. A view (``views``) runs no kernel inside a
    model: its host's time alone, what a further copy of it adds to a run (``repeat_s``), else its
    latency. Its unsynchronized issue time (``host_s``) is not used: onnxruntime's runs without
    synchronization cost the host more than synchronous ones (see docs/gpu.md). A brick whose host
    waits for its kernels (no device time), a predicted one, and one measured without queue times
    are counted as blocking, for their latency, as in the sequential sum."""
    own = {sig: ms[0] for sig, ms in measured.items() if ms}
    if not any(m.host_s is not None for m in own.values()):
        return None
    times = {}
    for sig in dec.bricks:
        m = own.get(sig)
        device = None if m is None else (m.device_warm_s if m.device_warm_s is not None else m.device_s)
        if sig in views or latency[sig] == 0.0:
            repeat = None if m is None else m.repeat_s
            times[sig] = QueueTimes(latency[sig] if repeat is None else repeat, 0.0)
        elif m is None or m.host_s is None or device is None:
            times[sig] = QueueTimes(latency[sig], 0.0, blocking=True)
        else:
            times[sig] = QueueTimes(issue_time(latency[sig], device, m.repeat_s), device)
    return times


def _graph_time(dec: Decomposition, latency: Mapping[str, float], measured: Mapping[str, Sequence[Measurement]],
                views: Collection[str]) -> float | None:
    """The occurrences' kernels back to back (:func:`~dlbricks.estimator.queue.graph_latency`), each
    brick at the device time the launch queue gives it (a view none); None off an accelerator, or
    where a brick has no device time (a predicted one, or one whose probe failed)."""
    queue = _queue_times(dec, latency, measured, views)
    return None if queue is None else graph_latency([queue[o.signature] for o in dec.occurrences])


def issue_time(latency_s: float, device_s: float, repeat_s: float | None) -> float:
    """Seconds the host spends issuing a brick inside a model, from its floor-corrected latency
    (a synchronous run alone), its kernels' time and what a further copy of it adds to a run of
    several side by side (``repeat_s``; None where not measured).

    A further copy costs the larger of its host's time and its kernels': where that is more than its
    kernels, the host is the limit and ``repeat_s`` is its time, allocating its output and all, as
    a layer's inside a model. Else (or without ``repeat_s``) the host's time is read off the run
    alone: its latency less its kernels (a run with no node is the floor, and the brick's kernels
    run as it issues them, the last one after), at most ``repeat_s``.
    """
    alone = max(latency_s - device_s, 0.0)
    if repeat_s is None:
        return alone
    return repeat_s if repeat_s > device_s else min(alone, repeat_s)


def _queued(dec: Decomposition, queue: Mapping[str, QueueTimes], floor_s: float) -> tuple[float, float]:
    """Sequential and parallel estimates through the launch queue: the occurrences issued in the
    model's order into one stream, and with independent ones overlapping on the device; plus the
    floor once."""
    seq = queue_latency([queue[o.signature] for o in dec.occurrences])
    order = [o.index for o in dec.occurrences]
    par = queue_critical_path(dec.dag, {o.index: queue[o.signature] for o in dec.occurrences}, order)
    return floor_s + seq, floor_s + min(par, seq)


def _queued_lower_bounds(dec: Decomposition, queue: Mapping[str, QueueTimes],
                         alternatives: Mapping[str, Sequence[Measurement]], floor_s: float,
                         roof: Mapping[str, float]) -> tuple[float, float, dict[str, float]]:
    """Benanza's lower bound through the launch queue: every kernel at its fastest measured device
    time (a run after itself, in any configuration measured), none waiting for its host; a blocking
    brick at its queue time; none below its roofline (``roof``). Sequential (one stream) and
    parallel (the DAG's critical path)."""
    fastest: dict[str, float] = {}
    for sig, t in queue.items():
        devices = [d for m in alternatives.get(sig, ()) for d in (m.device_warm_s, m.device_s) if d is not None]
        fastest[sig] = t.host_s + t.device_s if t.blocking else min([t.device_s, *devices])
    return _at_least(dec, fastest, roof, floor_s)


# ------------------------------------------------------------------------------------------ planning
#: Fixed cost of measuring one brick beyond its warm-up and samples: sessions, bindings, the worker.
MEASURE_SETUP_S = 0.05


def measure_time_s(seconds: float, budget: Budget) -> float:
    """About how long measuring a brick of ``seconds`` per run takes under ``budget``: setup,
    warm-up, and samples until ``min_runs`` and ``min_time``, at most ``max_time``."""
    sampling = min(max(budget.min_time, budget.min_runs * seconds), max(budget.max_time, seconds))
    return MEASURE_SETUP_S + budget.warmup_time + sampling


@dataclass(frozen=True, slots=True)
class MissingBrick:
    """A brick of a model that the database lacks (times in seconds, one occurrence)."""

    signature: str
    op_type: str
    count: int
    predicted_s: float | None  # None where nothing could predict it; the stored time for "context"
    share: float  # of the model's estimate (0 where not predicted)
    measure_s: float  # about how long measuring it takes
    far: bool  # predicted far from every measured brick
    why: str = "unmeasured"  # "unmeasured", "failed", or "context": measured in another model's context


@dataclass(frozen=True, slots=True)
class Plan:
    """What a model lacks in a database: its missing bricks, largest share first, their share of
    the estimate and the time to measure them (``dlbricks plan``); then the bricks stored from
    another model's context unlike theirs here, which ``estimate --on-missing measure`` measures
    again (``why="context"``)."""

    model: str
    unique_bricks: int
    missing: tuple[MissingBrick, ...]
    predicted_share: float
    measure_s: float
    estimate: Estimate | None  # with the missing bricks predicted, where they could be

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form."""
        from dataclasses import asdict

        return asdict(self)


def plan_decomposition(dec: Decomposition, measurements: Mapping[str, Measurement], *, config_id: str,
                       predictor: LatencyPredictor | None = None, budget: Budget | None = None,
                       peaks: Peaks | None = None, views: Collection[str] = (),
                       other_contexts: Collection[str] = ()) -> Plan:
    """The bricks of ``dec`` without an ok measurement, with their predicted share and the time to
    measure them (under ``budget``, default ``Budget()``), then those of ``other_contexts`` (measured
    in another model's context), with their stored share. Without a predictor, or with one that
    cannot predict, times to measure count each brick at its floor."""
    budget = budget or Budget()
    found = {sig for sig, m in measurements.items() if sig in dec.bricks and m.ok and m.median_s}
    missing = [sig for sig in dec.bricks if sig not in found]
    est = None
    if not missing or (predictor is not None and getattr(predictor, "models_", None)):
        est = estimate_decomposition(dec, measurements, config_id=config_id, on_missing="predict",
                                     predictor=predictor, peaks=peaks, views=views)
    parts = {c.signature: c for c in est.breakdown} if est else {}
    floors = [m.floor_s for m in measurements.values() if m.floor_s]
    floor = min(floors) if floors else 0.0
    counts = dec.counts()

    def row(sig: str, why: str) -> MissingBrick:
        part = parts.get(sig)
        return MissingBrick(sig, dec.bricks[sig].op_type, counts[sig], part.latency_s if part else None,
                            part.share if part else 0.0, measure_time_s((part.latency_s if part else 0.0) + floor,
                                                                        budget),
                            bool(part and part.far), why)

    failed = {sig for sig in missing if sig in measurements}
    lacking = sorted((row(s, "failed" if s in failed else "unmeasured") for s in missing),
                     key=lambda r: (-r.share, r.signature))
    again = sorted((row(s, "context") for s in other_contexts if s in found), key=lambda r: (-r.share, r.signature))
    rows = (*lacking, *again)
    return Plan(dec.model, len(dec.bricks), rows, est.predicted_share if est else float(bool(missing)),
                sum(r.measure_s for r in rows), est)
