"""The record of one measurement, shared with the database stage."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from dlbricks import DlbricksError, InvalidArgumentError

from ._registry import get_backend
from .protocols import BackendConfig

__all__ = ["QUEUE_FIELDS", "STATUSES", "Measurement", "OpaqueConfig", "combine", "pool", "relative_half_width",
           "spread_half_width"]

STATUSES = ("ok", "failed", "timeout")

_FLOAT_FIELDS = (
    "min_s",
    "median_s",
    "mean_s",
    "p90_s",
    "p99_s",
    "std_s",
    "iqr_s",
    "ci_low_s",
    "ci_high_s",
    "floor_s",
    "node_s",
    "empty_s",
    "host_s",
    "device_s",
    "device_warm_s",
)
#: Fields of a measurement on an accelerator (None elsewhere): what its launch queue needs.
QUEUE_FIELDS = ("host_s", "device_s", "device_warm_s", "repeat_s")


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """The configuration of a backend that is not installed here, kept as its dict.

    :meth:`Measurement.from_dict` falls back to it so that measurements of any backend (an MXNet
    GPU run read on a CPU-only laptop) can be loaded, compared and written back unchanged.
    """

    data_json: str

    @property
    def config_id(self) -> str:
        """The same hash that the original backend's config would report, if it was given."""
        data = json.loads(self.data_json)
        return str(data.get("config_id") or _hash_json(data))

    def to_dict(self) -> dict[str, Any]:
        """The stored dict, as it was read."""
        data = json.loads(self.data_json)
        data.pop("config_id", None)
        return data


@dataclass(frozen=True, slots=True)
class Measurement:
    """Statistics of one item (brick or model) timed on one backend configuration.

    All times are per call, in seconds. ``n`` is the number of timed samples (each sample is the
    mean of a batch of calls, see ``Budget.sample_time``); ``ci_low_s``/``ci_high_s`` bound the
    median with 95% confidence. ``wall_time_s`` is everything spent on the item: preparing the
    session, warming up and the timed runs. ``floor_s`` is the per-call cost of an empty model
    under the same configuration, which the estimator subtracts per brick; ``node_s`` the cost of one
    further node in that configuration (a chain's time per node), which a node doing no work of its
    own, such as a view, costs inside a model (None where the floor had no chain). ``empty_s`` is
    the floor's one-node model timed after each of the item's samples, paired with them (None where
    it was not): the per-call cost at the item's own moments, which the estimator sets against
    the run's floor (``floor_s + node_s``) to take the machine's drift out of a small brick's call.

    On CUDA a brick's measurement also holds the times of the launch queue (:data:`QUEUE_FIELDS`,
    medians, None elsewhere): ``host_s`` the calling thread's time to issue one run unsynchronized,
    ``device_s`` the kernels alone with a cold L2 cache (None where the host waits for them), and
    ``device_warm_s`` the kernels of a run that follows itself, and ``repeat_s`` what one further copy
    of the brick adds to a run that holds several side by side, the host issuing each while the device
    runs the one before, as inside a model (see :mod:`dlbricks.generators._cuda`).
    """

    key: str
    status: str
    error: str | None
    n: int
    min_s: float | None
    median_s: float | None
    mean_s: float | None
    p90_s: float | None
    p99_s: float | None
    std_s: float | None
    iqr_s: float | None
    ci_low_s: float | None
    ci_high_s: float | None
    wall_time_s: float
    converged: bool
    backend: str
    config: BackendConfig
    floor_s: float | None
    samples_s: tuple[float, ...] | None = None
    host_s: float | None = None
    device_s: float | None = None
    device_warm_s: float | None = None
    node_s: float | None = None
    repeat_s: float | None = None
    empty_s: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the item was measured (``status == "ok"``)."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: the fields, ``config`` as its dict, plus ``config_id``."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["config"] = self.config.to_dict()
        data["config_id"] = self.config.config_id
        if self.samples_s is not None:
            data["samples_s"] = list(self.samples_s)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        """Rebuild a measurement from :meth:`to_dict` output.

        The configuration is rebuilt by the backend registered under ``data["backend"]``; when
        that backend is not available here, it is kept as an :class:`OpaqueConfig`.

        Raises
        ------
        InvalidArgumentError
            If a field is missing or has the wrong type.
        """
        names = [f.name for f in fields(cls)]
        optional = ("samples_s", "node_s", "empty_s", *QUEUE_FIELDS)
        missing = [name for name in names if name not in data and name not in optional]
        if missing:
            raise InvalidArgumentError(f"A Measurement dict lacks the fields {missing}.")
        values = {name: data.get(name) for name in names}
        values["config"] = _config_from_dict(str(data["backend"]), data["config"], data.get("config_id"))
        samples = data.get("samples_s")
        values["samples_s"] = None if samples is None else tuple(float(s) for s in samples)
        return cls(**values)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise InvalidArgumentError(
                f"Measurement.status must be one of {STATUSES}. Got {self.status!r} instead."
            )
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise InvalidArgumentError(
                    f"Measurement.{name} must be a finite float or None. Got {value!r} instead."
                )


def pool(runs: Sequence[Measurement]) -> Measurement:
    """Measurements of one item from several processes or moments, pooled like pyperf does.

    One run's median depends on where its buffers landed in memory and on what the machine did
    meanwhile; the pooled result keeps the median of the per-run medians (the mean of the middle two
    for an even count) and the widest CI, with the samples and wall time of all of them. A failed
    run makes the result failed.
    """
    ok = [m for m in runs if m.ok]
    if len(ok) < len(runs):
        return next(m for m in runs if not m.ok)
    ok.sort(key=lambda m: m.median_s or 0.0)
    mid = ok[len(ok) // 2]
    return replace(mid, median_s=statistics.median(m.median_s or 0.0 for m in ok),
                   n=sum(m.n for m in ok), min_s=min(m.min_s or 0.0 for m in ok),
                   ci_low_s=min(m.ci_low_s or 0.0 for m in ok),
                   ci_high_s=max(m.ci_high_s or 0.0 for m in ok),
                   wall_time_s=sum(m.wall_time_s for m in ok), converged=all(m.converged for m in ok))


def combine(runs: Sequence[Measurement]) -> Measurement:
    """Measurements of one item taken at several moments and of unequal length, combined.

    The median is the sample-weighted median of the runs' medians (a short pilot does not pull a
    long further run halfway to itself); the CI around it has the inverse-variance half-width of
    the runs' CIs (the precision their timed runs bought together; the machine's drift between
    moments is the business of measuring at several moments). Wall times and sample counts add up.
    A failed run makes the result failed; one run is returned as it is.
    """
    ok = [m for m in runs if m.ok]
    if len(ok) < len(runs):
        return next(m for m in runs if not m.ok)
    if len(ok) == 1:
        return ok[0]
    ok.sort(key=lambda m: m.median_s or 0.0)
    half = sum(max(m.n, 1) for m in ok) / 2.0
    seen = 0.0
    mid = ok[-1]
    for m in ok:
        seen += max(m.n, 1)
        if seen >= half:
            mid = m
            break
    median = mid.median_s or 0.0
    widths = [relative_half_width(m) for m in ok]
    known = [w for w in widths if w is not None and w > 0]
    within = 1.0 / math.sqrt(sum(1.0 / w**2 for w in known)) if known else 0.0
    width = within * median
    return replace(mid, median_s=median, n=sum(m.n for m in ok), min_s=min(m.min_s or 0.0 for m in ok),
                   ci_low_s=max(median - width, 0.0), ci_high_s=median + width,
                   wall_time_s=sum(m.wall_time_s for m in ok), converged=all(m.converged for m in ok))


def relative_half_width(m: Measurement) -> float | None:
    """Half the width of ``m``'s 95% CI of the median over its median; None where it has none."""
    if m.ci_low_s is None or m.ci_high_s is None or not m.median_s:
        return None
    return (m.ci_high_s - m.ci_low_s) / 2.0 / m.median_s


def spread_half_width(m: Any) -> float | None:
    """Relative 95% half-width of ``m``'s median from the spread of its samples (their IQR, as a
    normal's): ``1.96 * 1.2533 * (IQR / 1.349) / sqrt(n) / median``. At a pilot's few samples it is
    far tighter than the distribution-free CI (at 8 samples, the whole range). None without an IQR."""
    if m.iqr_s is None or not m.median_s or m.n < 2:
        return None
    return 1.96 * 1.2533 * (m.iqr_s / 1.349) / math.sqrt(m.n) / m.median_s


def failed_measurement(
    key: str,
    status: str,
    error: str,
    *,
    wall_time_s: float,
    backend: str,
    config: BackendConfig,
    floor_s: float | None = None,
) -> Measurement:
    """A measurement of an item that could not be timed (``status`` failed or timeout)."""
    return Measurement(
        key=key,
        status=status,
        error=error,
        n=0,
        min_s=None,
        median_s=None,
        mean_s=None,
        p90_s=None,
        p99_s=None,
        std_s=None,
        iqr_s=None,
        ci_low_s=None,
        ci_high_s=None,
        wall_time_s=wall_time_s,
        converged=False,
        backend=backend,
        config=config,
        floor_s=floor_s,
    )


def _config_from_dict(backend: str, data: Mapping[str, Any], config_id: Any) -> BackendConfig:
    """The backend's own config for ``data``, or an :class:`OpaqueConfig` if it is not here."""
    try:
        return get_backend(backend).config_from_dict(data)
    except DlbricksError:
        opaque = dict(data)
        if config_id is not None:
            opaque["config_id"] = str(config_id)
        return OpaqueConfig(json.dumps(opaque, sort_keys=True))


def _hash_json(data: Any) -> str:
    """A short stable hash of a JSON-serializable value."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
