"""Estimates of a model's latency from its bricks' measurements.

:func:`estimate_decomposition` is the core: given a model's decomposition, the measurements of its
bricks under one backend configuration, optionally the measurements of the same bricks under other
configurations (for the lower bound) and the machine's peaks (for the roofline), it composes the
sequential and parallel estimates, the Benanza-style lower bounds, the physical bound, an uncertainty
interval, coverage and a per-brick breakdown.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from dlbricks import Brick, Decomposition
from dlbricks._errors import InvalidArgumentError
from dlbricks.estimator._compose import combined_halfwidth, critical_path, sequential
from dlbricks.estimator._predict import LatencyPredictor
from dlbricks.generators import Measurement

__all__ = ["Estimate", "BrickContribution", "Peaks", "estimate_decomposition", "ON_MISSING"]

ON_MISSING = ("error", "predict", "measure")


@dataclass(frozen=True, slots=True)
class Peaks:
    """Measured peaks of a machine: FLOP/s (float32 GEMM) and memory bandwidth in bytes/s."""

    flops_per_s: float
    bytes_per_s: float

    def roofline_s(self, brick: Brick) -> float:
        """max(FLOPs / peak FLOP/s, weight bytes / peak bandwidth): time no run can beat.

        FLOPs over a convolution's zero padding are left out (no implementation must do them),
        and so are activations on the memory side: inside a model they live in the cache
        (MXNet's memory pool is 6-13 MB for the Gluon zoo; onnxruntime's arena reuses its
        buffers), and a layer moving them runs faster than the stream bandwidth (MobileNet's
        ReLUs: 3-5x). Weights come from memory: each layer meets its own once per run.
        """
        flops, weight_bytes = _roofline_work(brick)
        return max(flops / self.flops_per_s, weight_bytes / self.bytes_per_s)


def _roofline_work(brick: Brick) -> tuple[int, int]:
    """What the roofline charges a brick: FLOPs off the zero padding, and its weights' bytes."""
    return max((brick.flops or 0) - brick.padding_flops, 0), brick.constant_bytes


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
    lower_bound_s: float | None  # fastest measured configuration, one occurrence (floor-corrected)
    roofline_s: float | None


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

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form."""
        from dataclasses import asdict

        return asdict(self)


def _halfwidth(m: Measurement) -> float:
    if m.ci_low_s is None or m.ci_high_s is None:
        return 0.0
    return max(m.ci_high_s - m.ci_low_s, 0.0) / 2


def _fastest(measurements: Sequence[Measurement]) -> float | None:
    """The brick at its fastest measured configuration: min over configs of (min - floor)."""
    values = [max((m.min_s or 0.0) - (m.floor_s or 0.0), 0.0) for m in measurements
              if m.ok and m.min_s is not None]
    return min(values) if values else None


def estimate_decomposition(
    dec: Decomposition,
    measurements: Mapping[str, Measurement],
    *,
    config_id: str,
    floor_s: float | None = None,
    on_missing: str = "error",
    predictor: LatencyPredictor | None = None,
    measure: Callable[[Sequence[Brick]], Mapping[str, Measurement]] | None = None,
    alternatives: Mapping[str, Sequence[Measurement]] | None = None,
    peaks: Peaks | None = None,
    brick_overhead_s: Mapping[str, float] | None = None,
    model_extra_s: float = 0.0,
    views: Collection[str] = (),
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
    predictor : LatencyPredictor, optional
        A fitted predictor, for ``on_missing="predict"``.
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
        zero beyond the per-call floor.
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
    latency = {sig: max(m.median_s - floor_s - overhead.get(sig, 0.0), 0.0)  # type: ignore[operator]
               for sig, m in found.items()}
    halfwidth = {sig: _halfwidth(m) for sig, m in found.items()}
    predicted: list[str] = []
    if missing:
        if on_missing == "error" or predictor is None:
            first = missing[0]
            raise InvalidArgumentError(
                f"{len(missing)} of {len(dec.bricks)} bricks of '{dec.model}' have no measurement "
                f"for configuration {config_id[:12]} (first: {first.signature[:12]} {first.op_type}); "
                f"benchmark them with 'dlbricks bench' or use on_missing='predict' or 'measure'.")
        for brick in missing:
            value = predictor.predict(brick)
            if value is None:
                raise InvalidArgumentError(
                    f"no measured brick to predict {brick.signature[:12]} ({brick.op_type}) from; "
                    f"benchmark some bricks first.")
            latency[brick.signature] = value
            model = predictor.model_for(brick)
            halfwidth[brick.signature] = value * (model.cv_error if model and model.cv_error == model.cv_error
                                                  else 0.5)
            predicted.append(brick.signature)
    latency.update({sig: 0.0 for sig in views if sig in latency})
    every = {sig: [m, *(alternatives or {}).get(sig, ())] for sig, m in found.items()}
    return _compose(dec, latency, halfwidth, floor_s + model_extra_s, config_id, predicted, every, peaks,
                    overhead)


def _compose(dec: Decomposition, latency: Mapping[str, float], halfwidth: Mapping[str, float],
             floor_s: float, config_id: str, predicted: Sequence[str],
             alternatives: Mapping[str, Sequence[Measurement]], peaks: Peaks | None,
             overhead: Mapping[str, float]) -> Estimate:
    node_latency = {o.index: latency[o.signature] + floor_s for o in dec.occurrences}
    seq = sequential(dec.dag, node_latency, floor_s)
    par = critical_path(dec.dag, node_latency, floor_s)
    counts = dec.counts()
    hw = combined_halfwidth(counts, halfwidth)
    lower = _lower_bounds(dec, alternatives, latency, floor_s, overhead)
    if peaks is not None:
        peaks = _reached(peaks, dec, lower[2], set(predicted))
    roof = {sig: peaks.roofline_s(b) for sig, b in dec.bricks.items()} if peaks else None
    total_work = seq - floor_s
    breakdown = tuple(sorted((
        BrickContribution(
            signature=sig, op_type=b.op_type, count=counts[sig], latency_s=latency[sig],
            total_s=counts[sig] * latency[sig],
            share=counts[sig] * latency[sig] / total_work if total_work > 0 else 0.0,
            source="predicted" if sig in predicted else "measured", halfwidth_s=halfwidth.get(sig, 0.0),
            lower_bound_s=lower[2].get(sig),
            roofline_s=roof[sig] if roof else None)
        for sig, b in dec.bricks.items()), key=lambda c: -c.total_s))
    predicted_set = set(predicted)
    measured_occ = sum(1 for o in dec.occurrences if o.signature not in predicted_set)
    return Estimate(
        model=dec.model, granularity=dec.granularity, config_id=config_id, layers=dec.layers,
        unique_bricks=len(dec.bricks), sequential_s=seq, parallel_s=par,
        ci_low_s=max(seq - hw, 0.0), ci_high_s=seq + hw,
        lower_bound_s=lower[0], lower_bound_parallel_s=lower[1],
        roofline_s=sum(counts[s] * r for s, r in roof.items()) if roof else None,
        floor_s=floor_s,
        coverage=measured_occ / len(dec.occurrences) if dec.occurrences else 1.0,
        predicted_share=sum(c.total_s for c in breakdown if c.source == "predicted") / total_work
        if total_work > 0 else 0.0,
        predicted=tuple(predicted), breakdown=breakdown)


def _reached(peaks: Peaks, dec: Decomposition, fastest: Mapping[str, float], predicted: set[str]) -> Peaks:
    """``peaks`` raised to the best rates the model's own bricks reached in their fastest runs.

    A peak is the best rate the machine was seen to reach, and this machine's speed drifts 10-20%
    within seconds: a calibration taken at another moment can sit below what a brick reached
    (the MXNet roofline of Inception-v3 rose 5% above its lower bound so). Only bricks of at least
    :data:`REACHED_MIN_S` count, so that the floor's uncertainty (a few microseconds) cannot inflate a
    rate; predicted bricks do not count.
    """
    flops, bandwidth = peaks.flops_per_s, peaks.bytes_per_s
    for sig, brick in dec.bricks.items():
        seconds = fastest.get(sig, 0.0)
        if sig in predicted or seconds < REACHED_MIN_S:
            continue
        work, weight_bytes = _roofline_work(brick)
        flops, bandwidth = max(flops, work / seconds), max(bandwidth, weight_bytes / seconds)
    return Peaks(flops, bandwidth)


def _lower_bounds(dec: Decomposition, alternatives: Mapping[str, Sequence[Measurement]],
                  latency: Mapping[str, float], floor_s: float, overhead: Mapping[str, float],
                  ) -> tuple[float, float, dict[str, float]]:
    """Sequential and parallel lower bounds: every brick at its fastest measured configuration
    (its minimum over samples and configurations); predicted bricks count at their prediction."""
    fastest: dict[str, float] = {}
    for sig in dec.bricks:
        value = _fastest(alternatives.get(sig, ()))
        if value is not None:
            value = max(value - overhead.get(sig, 0.0), 0.0)
        fastest[sig] = min(value, latency[sig]) if value is not None else latency[sig]
    node = {o.index: fastest[o.signature] + floor_s for o in dec.occurrences}
    return sequential(dec.dag, node, floor_s), critical_path(dec.dag, node, floor_s), fastest
