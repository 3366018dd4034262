"""How much time the harness may spend on one item, and when it may stop."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from dlbricks._errors import InvalidArgumentError

__all__ = ["Budget"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """The time budget and stopping rule of one measurement.

    The harness warms up for ``warmup_time``, then takes timed samples until it has at least
    ``min_runs`` samples and ``min_time`` seconds of timed runs *and* the 95% confidence interval of
    the median is narrower than ``rel_ci`` times the median; or until ``max_time`` seconds of
    sampling have passed (the measurement is then flagged ``converged=False``). One sample times a
    batch of calls chosen so that it lasts at least ``sample_time``. A worker that spends more than
    ``timeout`` seconds on one item is killed and the item recorded as ``"timeout"``.

    Parameters
    ----------
    warmup_time : float, default 0.02
        Seconds of untimed warm-up runs (at least one run).
    min_time : float, default 0.2
        Minimum seconds of timed runs.
    min_runs : int, default 10
        Minimum number of timed samples.
    max_time : float, default 2.0
        Maximum seconds of sampling; reaching it stops with ``converged=False``.
    rel_ci : float, default 0.02
        Target full width of the 95% CI of the median, relative to the median.
    timeout : float, default 60.0
        Seconds after which a worker busy with one item is killed (prepare included).
    sample_time : float, default 5e-05
        Minimum duration of one timed sample: small bricks are timed in batches this long.
    placements : int, default 16
        Buffer placements a measurement is spread over, at most, when the backend can move its
        buffers (``Prepared.relocate``): the first ``min_time`` is split evenly between them, so the
        median does not hang on where one allocation happened to land
        (``benchmarks/bench_placements.py`` shows the effect per brick). Fewer for slow models: the
        untimed call after each move stays under 5% of ``min_time``.

    Examples
    --------
    >>> Budget(min_time=0.5).max_time
    2.0
    """

    warmup_time: float = 0.02
    min_time: float = 0.2
    min_runs: int = 10
    max_time: float = 2.0
    rel_ci: float = 0.02
    timeout: float = 60.0
    sample_time: float = 5e-5
    placements: int = 16

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise InvalidArgumentError("Invalid Budget: " + "; ".join(problems) + ".")

    @classmethod
    def quick(cls) -> Budget:
        """A small budget for tests and smoke runs (tens of milliseconds per item)."""
        return cls(
            warmup_time=0.005,
            min_time=0.02,
            min_runs=5,
            max_time=0.2,
            rel_ci=0.05,
            timeout=20.0,
            sample_time=2e-5,
            placements=4,
        )

    def to_dict(self) -> dict[str, Any]:
        """The budget as a JSON-safe dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        """Rebuild a budget from :meth:`to_dict` output (unknown keys are rejected)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgumentError(f"Unknown Budget fields {unknown}; known: {sorted(known)}.")
        return cls(**data)


def _problems(budget: Budget) -> list[str]:
    """Every rule that ``budget`` breaks, as phrases."""
    problems = []
    for name in ("warmup_time", "min_time", "max_time", "rel_ci", "timeout", "sample_time"):
        value = getattr(budget, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"'{name}' must be a finite number. Got {value!r} instead")
        elif value < 0 or (value == 0 and name in ("max_time", "timeout", "rel_ci")):
            problems.append(f"'{name}' must be positive. Got {value!r} instead")
    for name in ("min_runs", "placements"):
        value = getattr(budget, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"'{name}' must be an int >= 1. Got {value!r} instead")
    if not problems and budget.min_time > budget.max_time:
        problems.append(f"'min_time' ({budget.min_time}) must not exceed 'max_time' ({budget.max_time})")
    return problems
