"""Figures of estimates and evaluations, drawn with matplotlib (the ``plot`` extra).

Each figure is drawn on a ``matplotlib.figure.Figure`` of its own (no pyplot, no global backend):
as SVG text for the HTML report (:func:`svg_of`: text kept as text, no metadata, nothing that a
browser would fetch), or as PNG files for ``evaluate --plot`` (:func:`plot_evaluation`). The
inputs are small records that :mod:`dlbricks.estimator.report` fills from estimates.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbricks import InvalidArgumentError

from .api import threads_of
from .evaluation import Evaluation

__all__ = [
    "PLOT_EXTRA",
    "SuitePoint",
    "OpTime",
    "RooflinePoint",
    "require_matplotlib",
    "suite_figure",
    "label_offsets",
    "op_time_figure",
    "roofline_figure",
    "svg_of",
    "plot_evaluation",
]

#: What installs the drawing library.
PLOT_EXTRA = "pip install 'dlbricks[plot]'"
#: Op types drawn in colours of their own in a roofline chart; the rest are "other".
ROOFLINE_OPS = 8
#: Op types drawn in a time-by-op-type chart; the rest are summed as "other".
OP_BARS = 12

_ESTIMATE, _BOUND, _ROOF, _MEASURED = "#1f77b4", "#2ca02c", "#7f7f7f", "#d62728"


@dataclass(frozen=True, slots=True)
class SuitePoint:
    """A model in the suite picture (seconds): its measured latency and its estimate with its
    interval and bounds."""

    model: str
    measured_s: float
    estimated_s: float
    low_s: float
    high_s: float
    lower_bound_s: float | None = None
    roofline_s: float | None = None


@dataclass(frozen=True, slots=True)
class OpTime:
    """An op type's seconds in an estimate (or a suite's estimates), with its lower bound and
    roofline where every brick of it has them."""

    op_type: str
    estimate_s: float
    lower_bound_s: float | None = None
    roofline_s: float | None = None


@dataclass(frozen=True, slots=True)
class RooflinePoint:
    """A brick in a roofline chart: FLOPs per byte it reads and writes, the FLOP/s it reached in
    the estimate, its share of the estimate, and whether its time was predicted."""

    op_type: str
    intensity: float
    flops_per_s: float
    share: float
    predicted: bool = False


def require_matplotlib() -> Any:
    """The ``matplotlib`` module, or a one-line error naming the extra that installs it."""
    try:
        import matplotlib
        from matplotlib.figure import Figure  # noqa: F401  (the API drawn with)
    except ImportError as e:
        raise InvalidArgumentError(f"drawing needs matplotlib, which is not installed: {PLOT_EXTRA}") from e
    return matplotlib


def _figure(width: float, height: float) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def svg_of(fig: Any) -> str:
    """``fig`` as an ``<svg>`` element to inline in HTML: text as text (no embedded glyphs), no
    metadata, no XML prolog or DOCTYPE (whose address a browser does not fetch, but which no
    inline SVG needs), ids salted so that every figure of a page draws the same way each time."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dlbricks",
                                "font.family": ["DejaVu Sans", "Helvetica", "Arial", "sans-serif"]}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    # HTML's parser puts an inline <svg> (and its xlink:href) in their namespaces itself
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text, count=2)
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)


def _ms(seconds: float) -> float:
    return 1e3 * seconds


def _plain_log(*axes: Any) -> None:
    """Log-scale ``axes`` ticked at 1, 2 and 5 of each decade, labelled as plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis in axes:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def label_offsets(x: Sequence[float], y: Sequence[float], labels: Sequence[str], *,
                  points_per_decade: float, font_pt: float = 7.0) -> list[float]:
    """Vertical offsets, in points, that keep the labels of points ``(x, y)`` on log axes apart: each
    label sits right of its point; one that would overlap a label placed before it (placed from the
    top down) moves down a line at a time, or up where moving down does not free it."""
    line, char = font_pt * 1.25, font_pt * 0.6
    boxes: list[tuple[float, float, float]] = []  # left, right, baseline of the labels placed, in points
    offsets = [0.0] * len(labels)
    for i in sorted(range(len(labels)), key=lambda i: -y[i]):
        left = math.log10(x[i]) * points_per_decade
        right = left + char * len(labels[i])
        base = math.log10(y[i]) * points_per_decade
        moves = (sign * k * line for k in range(len(labels) + 1) for sign in (-1, 1))
        dy = next((d for d in moves if _clear(boxes, left, right, base + d, line)), 0.0)
        offsets[i] = dy
        boxes.append((left, right, base + dy))
    return offsets


def _clear(boxes: Sequence[tuple[float, float, float]], left: float, right: float, base: float, line: float) -> bool:
    """Whether a label from ``left`` to ``right`` on ``base`` overlaps none of ``boxes``."""
    return all(r < left or right < lft or abs(base - b) >= line for lft, r, b in boxes)


def suite_figure(points: Sequence[SuitePoint], title: str = "") -> Any:
    """Estimated against measured latency on log axes: each estimate with its 95% interval, its
    lower bound and roofline below it, the diagonal of an exact estimate and a +-5% band."""
    fig = _figure(6.4, 6.0)
    ax = fig.subplots()
    if not points:
        ax.text(0.5, 0.5, "no model measured whole", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    x = [_ms(p.measured_s) for p in points]
    y = [_ms(p.estimated_s) for p in points]
    err = [[_ms(p.estimated_s - p.low_s) for p in points], [_ms(p.high_s - p.estimated_s) for p in points]]
    values = [v for p in points for v in (p.measured_s, p.low_s, p.high_s, p.lower_bound_s, p.roofline_s)
              if v is not None and v > 0]
    lo, hi = _ms(min(values)) / 1.5, _ms(max(values)) * 1.5
    line = [lo, hi]
    ax.fill_between(line, [v * 0.95 for v in line], [v * 1.05 for v in line], color="#dddddd", label="±5%",
                    zorder=0)
    ax.plot(line, line, color="black", linewidth=0.8, linestyle="--", label="estimate = measured", zorder=1)
    bounds = [(xi, _ms(p.lower_bound_s)) for xi, p in zip(x, points, strict=True) if p.lower_bound_s]
    roofs = [(xi, _ms(p.roofline_s)) for xi, p in zip(x, points, strict=True) if p.roofline_s]
    if roofs:
        ax.scatter(*zip(*roofs, strict=True), marker="_", s=120, color=_ROOF, label="roofline", zorder=2)
    if bounds:
        ax.scatter(*zip(*bounds, strict=True), marker="v", s=28, color=_BOUND, label="lower bound", zorder=3)
    ax.errorbar(x, y, yerr=err, fmt="o", markersize=5, color=_ESTIMATE, ecolor=_ESTIMATE, elinewidth=1.2,
                capsize=3, label="estimate (95% interval)", zorder=4)
    side = 6.4 * 72 * 0.75  # the square axes' side in points, about
    offsets = label_offsets(x, y, [p.model for p in points], points_per_decade=side / math.log10(hi / lo))
    for p, xi, yi, dy in zip(points, x, y, offsets, strict=True):
        ax.annotate(p.model, (xi, yi), fontsize=7, xytext=(5, -3 + dy), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.xaxis, ax.yaxis)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("estimated latency (ms)")
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    ax.grid(True, which="minor", linewidth=0.2, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def _other(ops: Sequence[OpTime], keep: int) -> list[OpTime]:
    """The ``keep - 1`` largest op types and the rest summed as "other" (where there are more)."""
    ranked = sorted(ops, key=lambda o: -o.estimate_s)
    if len(ranked) <= keep:
        return ranked
    head, tail = ranked[:keep - 1], ranked[keep - 1:]

    def total(field: str) -> float | None:
        values = [getattr(o, field) for o in tail]
        return None if any(v is None for v in values) else sum(values)

    return [*head, OpTime(f"other ({len(tail)} op types)", sum(o.estimate_s for o in tail),
                          total("lower_bound_s"), total("roofline_s"))]


def op_time_figure(ops: Sequence[OpTime], title: str = "") -> Any:
    """Milliseconds per op type, largest first: the estimate's bar, its lower bound drawn over it
    (the rest of the bar is the gap to the bound) and its roofline as a tick."""
    shown = _other(ops, OP_BARS)
    fig = _figure(6.4, 1.3 + 0.32 * max(len(shown), 1))
    ax = fig.subplots()
    names = [o.op_type for o in shown][::-1]
    rows = list(range(len(shown)))
    bound = [(r, _ms(o.lower_bound_s)) for r, o in zip(rows, shown[::-1], strict=True) if o.lower_bound_s is not None]
    ax.barh(rows, [_ms(o.estimate_s) for o in shown][::-1], height=0.7, color="#aec7e8",
            label="estimate (gap to the lower bound)" if bound else "estimate")
    if bound:
        ax.barh([r for r, _ in bound], [v for _, v in bound], height=0.36, color=_BOUND, label="lower bound")
    roof = [(r, _ms(o.roofline_s)) for r, o in zip(rows, shown[::-1], strict=True) if o.roofline_s]
    if roof:
        ax.scatter([v for _, v in roof], [r for r, _ in roof], marker="|", s=160, color="black", label="roofline",
                   zorder=3)
    ax.set_yticks(rows, names, fontsize=8)
    ax.set_xlabel("milliseconds per run")
    ax.grid(True, axis="x", linewidth=0.4, alpha=0.5)
    if title:
        ax.set_title(title, fontsize=9)
    fig.legend(fontsize=7, loc="outside lower center", ncols=3, frameon=False)
    return fig


def roofline_figure(points: Sequence[RooflinePoint], flops_per_s: float | None, bytes_per_s: float | None,
                    title: str = "") -> Any:
    """A roofline chart: each brick's arithmetic intensity against the FLOP/s it reached, log-log,
    sized by its share of the estimate (hollow where its time was predicted), under the roof of the
    machine's calibrated peak FLOP/s and memory bandwidth."""
    fig = _figure(6.4, 5.0)
    ax = fig.subplots()
    if not points:
        ax.text(0.5, 0.5, "no brick with FLOPs to place", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    totals: dict[str, float] = {}
    for p in points:
        totals[p.op_type] = totals.get(p.op_type, 0.0) + p.share
    named = sorted(totals, key=lambda op: -totals[op])[:ROOFLINE_OPS]
    colours = {op: f"C{i}" for i, op in enumerate(named)}
    for op in [*named, None]:
        group = [p for p in points if (p.op_type == op if op is not None else p.op_type not in colours)]
        if not group:
            continue
        colour = colours.get(op, "#999999") if op is not None else "#999999"
        sizes = [12 + 600 * p.share for p in group]
        faces = ["none" if p.predicted else colour for p in group]
        ax.scatter([p.intensity for p in group], [p.flops_per_s / 1e9 for p in group], s=sizes, facecolors=faces,
                   edgecolors=colour, linewidths=0.8, alpha=0.75, label=op or "other")
    xs = [p.intensity for p in points]
    x_lo, x_hi = min(xs) / 3, max(xs) * 3
    if flops_per_s and bytes_per_s:
        ridge = flops_per_s / bytes_per_s
        x_lo, x_hi = min(x_lo, ridge / 10), max(x_hi, ridge * 10)
        grid = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
        ax.plot(grid, [min(flops_per_s, g * bytes_per_s) / 1e9 for g in grid], color="black", linewidth=1.2,
                zorder=0)
        ax.annotate(f"peak {flops_per_s / 1e9:.1f} GFLOP/s", (x_hi, flops_per_s / 1e9), fontsize=7, ha="right",
                    va="bottom", xytext=(0, 2), textcoords="offset points")
        at = ridge / 4  # on the slope, the label above and left of it, where no brick can be
        ax.annotate(f"memory {bytes_per_s / 1e9:.1f} GB/s", (at, at * bytes_per_s / 1e9), fontsize=7, ha="right",
                    va="bottom", xytext=(-4, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax.xaxis, ax.yaxis)
    ax.set_xlim(x_lo, x_hi)
    ys = [p.flops_per_s / 1e9 for p in points] + ([flops_per_s / 1e9] if flops_per_s else [])
    ax.set_ylim(min(ys) / 3, max(ys) * 3)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte read and written)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.grid(True, which="major", linewidth=0.4, alpha=0.5)
    if title:
        ax.set_title(title, fontsize=9)
    legend = fig.legend(fontsize=7, loc="outside lower center", ncols=min(len(named) + 1, 5), frameon=False)
    for handle in legend.legend_handles:  # one size in the legend: a marker's size is its share
        handle.set_sizes([24])
    return fig


def _save_png(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=120)
    return path


def plot_evaluation(ev: Evaluation, out_dir: str | Path,
                    op_times: dict[str, float] | None = None) -> list[Path]:
    """Write ``estimated_vs_measured.png`` (log axes, each estimate's interval and bounds) and,
    given per-op times in seconds, ``time_by_op.png``."""
    require_matplotlib()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(f"--plot {out}: cannot create the folder ({e.strerror}).") from e
    points = [SuitePoint(r.model, r.measured_s, r.estimated_s, r.ci_low_s, r.ci_high_s, r.lower_bound_s,
                         r.roofline_s) for r in ev.rows if r.measured_s > 0 and math.isfinite(r.measured_s)]
    title = f"{ev.system.cpu_model}, {threads_of(ev.config)} thread(s), {ev.granularity}"
    paths = [_save_png(suite_figure(points, title), out / "estimated_vs_measured.png")]
    if op_times:
        ops = [OpTime(op, seconds) for op, seconds in op_times.items()]
        paths.append(_save_png(op_time_figure(ops, "time by op type, summed over the suite's estimates"),
                               out / "time_by_op.png"))
    return paths
