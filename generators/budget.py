"""How much time the harness may spend on one item, and when it may stop."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

from dlbricks import InvalidArgumentError

__all__ = ["Allocation", "Budget", "BrickShare", "PILOT_BUDGET", "allocate", "model_ci", "topup_budget"]


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


#: The first, short measurement of every brick (its pilot): a few milliseconds of timed runs and
#: at least 8 samples, with no CI target (the allocation judges the noise), that give its median
#: and noise, from which the allocation of a model-level ``target_ci`` decides which bricks are
#: measured again and for how long (:func:`allocate`).
PILOT_BUDGET = Budget(warmup_time=0.002, min_time=0.005, min_runs=8, max_time=0.05, rel_ci=1.0,
                      sample_time=1e-5, placements=2)


@dataclass(frozen=True, slots=True)
class BrickShare:
    """One brick's part in a model's estimate, as its measurements so far show it.

    Attributes
    ----------
    key : str
        The brick's signature.
    total_s : float
        Its share of the model's estimate: occurrences times its latency (less the floor).
    half_width : float
        Relative 95% half-width of its median after ``spent_s`` seconds of timed runs.
    spent_s : float
        Seconds of timed runs behind ``half_width``; the half-width shrinks as the square root of
        the time spent.
    """

    key: str
    total_s: float
    half_width: float
    spent_s: float


@dataclass(frozen=True, slots=True)
class Allocation:
    """Seconds of timed runs per brick that bring a model's estimate to a relative 95% half-width.

    ``seconds`` maps each brick to the timed seconds it should have in all (never less than what it
    has); ``ci`` is the relative half-width the model's estimate reaches with them (above
    ``target_ci`` only where bricks hit the cap); ``estimate_s`` is the estimate it is relative to.
    """

    seconds: Mapping[str, float]
    target_ci: float
    ci: float
    estimate_s: float

    def extra_s(self, share: BrickShare) -> float:
        """Seconds of timed runs still owed to ``share``'s brick."""
        return max(self.seconds.get(share.key, share.spent_s) - share.spent_s, 0.0)


def allocate(shares: Sequence[BrickShare], target_ci: float, *, estimate_s: float | None = None,
             max_s: float = 1.0, keep: Collection[str] = ()) -> Allocation:
    """Split the timed runs of a model's bricks so that its estimate reaches ``target_ci``.

    The estimate is the sum of the bricks' totals, so its variance is the sum of theirs; a brick's
    is ``(total_s * half_width)**2 * spent_s / t`` after ``t`` seconds. The least total time under
    the target is Neyman's allocation, ``t`` proportional to ``total_s * half_width * sqrt(spent_s)``
    (weight times noise); bricks whose share falls below what they already spent keep it (their
    variance is fixed) and the rest is split again, and no brick gets more than ``max_s``.

    Parameters
    ----------
    shares : sequence of BrickShare
        The model's bricks.
    target_ci : float
        Relative 95% half-width wanted of the model's estimate.
    estimate_s : float, optional
        The model's estimate; default the sum of ``total_s``.
    max_s : float, default 1.0
        Most seconds of timed runs for one brick.
    keep : collection of str, default ()
        Bricks that get no further time (they keep ``spent_s``; the others make up for them).

    Returns
    -------
    Allocation

    Examples
    --------
    >>> big = BrickShare("conv", total_s=9e-3, half_width=0.05, spent_s=0.01)
    >>> tiny = BrickShare("flatten", total_s=1e-5, half_width=0.05, spent_s=0.01)
    >>> a = allocate([big, tiny], target_ci=0.01)
    >>> a.seconds["conv"] > a.seconds["flatten"] == 0.01
    True
    """
    if isinstance(target_ci, bool) or not isinstance(target_ci, (int, float)) or not 0 < target_ci < 1:
        raise InvalidArgumentError(f"'target_ci' must be a number in (0, 1). Got {target_ci!r} instead.")
    estimate = sum(s.total_s for s in shares) if estimate_s is None else estimate_s
    weights = {s.key: _weight(s) for s in shares}
    budget = (target_ci * estimate) ** 2
    seconds = {s.key: s.spent_s for s in shares}
    fixed = {s.key: weights[s.key] ** 2 / s.spent_s for s in shares if s.key in keep and weights[s.key] > 0}
    while True:
        free = [s for s in shares if s.key not in fixed and weights[s.key] > 0]
        left = budget - sum(fixed.values())
        if not free:
            break
        total = sum(weights[s.key] for s in free)
        wanted = {s.key: weights[s.key] * total / left if left > 0 else math.inf for s in free}
        moved = False
        for s in free:
            t = wanted[s.key]
            if t <= s.spent_s or t >= max_s:
                t = s.spent_s if t <= s.spent_s else max(max_s, s.spent_s)
                fixed[s.key] = weights[s.key] ** 2 / t
                seconds[s.key] = t
                moved = True
        if not moved:
            seconds.update(wanted)
            break
    variance = sum(weights[k] ** 2 / seconds[k] for k in seconds if weights[k] > 0 and seconds[k] > 0)
    ci = math.sqrt(variance) / estimate if estimate > 0 else 0.0
    return Allocation(MappingProxyType(seconds), float(target_ci), ci, estimate)


def model_ci(shares: Sequence[BrickShare], estimate_s: float | None = None) -> float:
    """Relative 95% half-width of a model's estimate from its bricks' as they stand: their absolute
    half-widths combined in quadrature (bricks measured apart err independently), over the
    estimate (default the sum of their totals)."""
    estimate = sum(s.total_s for s in shares) if estimate_s is None else estimate_s
    if estimate <= 0:
        return 0.0
    return math.sqrt(sum((s.total_s * s.half_width) ** 2 for s in shares if math.isfinite(s.half_width))) / estimate


def _weight(share: BrickShare) -> float:
    """Neyman's weight of a brick: its total times its noise, per square root of a second."""
    if share.total_s <= 0 or share.spent_s <= 0 or not math.isfinite(share.half_width):
        return 0.0
    return share.total_s * share.half_width * math.sqrt(share.spent_s)


def topup_budget(seconds: float, *, warmup_time: float = 0.005, timeout: float = 60.0) -> Budget:
    """The budget of a further measurement that adds about ``seconds`` of timed runs to a brick:
    it stops once that much is timed (and 5 samples), or at twice as much."""
    seconds = max(float(seconds), 1e-3)
    return Budget(warmup_time=warmup_time, min_time=seconds, min_runs=5, max_time=2.0 * seconds + 0.01,
                  rel_ci=1.0, timeout=timeout, placements=max(1, min(16, int(seconds / 0.01))))
