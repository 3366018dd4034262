"""Where the time goes, as one HTML page that opens offline and can be shared.

:func:`model_report` gathers what the page shows of a model from a brick database: its
:class:`~dlbricks.estimator.Estimate` (interval, bounds, per-brick breakdown), its bricks (FLOPs and
bytes, for the roofline chart), which bricks were measured in the model's own context, its stored
whole-model run and the machine's calibrated peaks. :func:`render_report` turns reports (and, for
``evaluate --report``, the :class:`~dlbricks.estimator.Evaluation`) into one self-contained page:
inline CSS, figures as inline SVG (matplotlib, the ``plot`` extra), no script, nothing fetched.
"""

from __future__ import annotations

import html
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlbricks import Brick, InvalidArgumentError, __version__
from dlbricks.benchmarks_db import Store
from dlbricks.generators import Measurement, OrtConfig, collect_system_info

from .api import _decomposition, backend_name, estimate, peaks_key, store_peaks, threads_of
from .estimation import BrickContribution, Estimate, Peaks
from .evaluation import Evaluation, EvaluationRow
from .plot import (
    OpTime,
    RooflinePoint,
    SuitePoint,
    op_time_figure,
    require_matplotlib,
    roofline_figure,
    suite_figure,
    svg_of,
)
from .predict import FAR_DISTANCE, roofline_work

__all__ = ["ModelReport", "model_report", "render_report", "write_report", "check_report_path", "op_times",
           "brick_source"]

#: Bricks listed in each model's tables of heaviest bricks and of gaps to the lower bound.
TOP_BRICKS = 20


@dataclass(frozen=True, slots=True)
class ModelReport:
    """What the report shows of one model.

    ``bricks`` are its decomposition's bricks by signature (their FLOPs and bytes place them in the
    roofline chart); ``in_context`` the signatures measured again in the model's own context (the
    estimate read those); ``measured`` its stored whole-model run under the estimate's
    configuration, if any; ``peaks`` the machine's calibrated peaks, if any; ``machine`` and
    ``configuration`` say where and how it was measured, in words.
    """

    estimate: Estimate
    bricks: Mapping[str, Brick]
    in_context: frozenset[str] = frozenset()
    measured: Measurement | None = None
    peaks: Peaks | None = None
    machine: str = ""
    configuration: str = ""

    @property
    def measured_s(self) -> float | None:
        """The whole model's measured median (seconds), None where it was not measured."""
        m = self.measured
        return m.median_s if m is not None and m.ok and m.median_s else None

    @property
    def error(self) -> float | None:
        """estimate / measured - 1, None where the model was not measured whole."""
        measured = self.measured_s
        return None if measured is None else self.estimate.sequential_s / measured - 1.0


def model_report(model: Any, db: Store | str | os.PathLike[str], *, system: Any = None, config: Any = None,
                 granularity: str = "layer", on_missing: str = "error") -> ModelReport:
    """Gather a model's report from a brick database, reading it only.

    Parameters
    ----------
    model : path, ModelGraph, Decomposition or name
        As :func:`~dlbricks.estimator.estimate` takes it.
    db : Store or path
        The brick database (a path is opened read-only; a missing file is an error).
    system, config, granularity :
        As :func:`~dlbricks.estimator.estimate` takes them.
    on_missing : {"error", "predict"}
        Bricks without a measurement: refuse, or predict them (the report says which).
    """
    if on_missing not in ("error", "predict"):
        raise InvalidArgumentError(f"'on_missing' of a report must be 'error' or 'predict' (a report reads the "
                                   f"database only). Got {on_missing!r} instead.")
    if not isinstance(db, Store):
        with Store.open(db, create=False, readonly=True) as store:
            return model_report(model, store, system=system, config=config, granularity=granularity,
                                on_missing=on_missing)
    store = db
    here = system if system is not None else collect_system_info()
    cfg = config or OrtConfig()
    dec = _decomposition(model, store, granularity, cfg)
    est = estimate(dec, store, system=here, config=cfg, granularity=granularity, on_missing=on_missing)
    stored = store.models.has(dec.model_key)
    in_context = frozenset(r.key for r in store.measurements.in_context(
        dec.model_key, system=here, config_id=cfg.config_id, status="ok")) if stored else frozenset()
    measured = store.measurements.get(dec.model_key, here, cfg.config_id, kind="model") if stored else None
    return ModelReport(est, dict(dec.bricks), in_context, measured, store_peaks(store, here, peaks_key(cfg)),
                       _machine(store, here), _configuration(store, cfg))


def _machine(store: Store, system: Any) -> str:
    fingerprint = system if isinstance(system, str) else system.fingerprint
    record = next((s for s in store.systems.all() if s.fingerprint == fingerprint), None)
    if record is None:
        return f"system {fingerprint}"
    cores = f", {record.cores} cores" if record.cores else ""
    return f"{record.cpu}{cores} (system {fingerprint[:12]})"


def _configuration(store: Store, config: Any) -> str:
    record = next((b for b in store.systems.backends() if b.config_id == config.config_id), None)
    version = f" {record.version}" if record is not None and record.version else ""
    text = f"{backend_name(config)}{version} on {config.device}, {threads_of(config)} thread(s)"
    if isinstance(config, OrtConfig):
        text += f", optimizations {config.graph_optimization_level}"
    return f"{text} (configuration {config.config_id[:12]})"


def brick_source(c: BrickContribution, in_context: frozenset[str] = frozenset()) -> str:
    """How a brick's time was obtained, in words: measured (in the model's context, or as a
    brick), or predicted, by which model and how near the measured bricks."""
    if c.source == "predicted":
        where = "far from" if c.far else "near"
        if c.distance is not None:
            where += (f" measured bricks ({c.distance:.1f}x the cross-validation's distance to the nearest one; "
                      f"far beyond {FAR_DISTANCE:g}x)")
        else:
            where += " measured bricks"
        return f"predicted by the {c.predictor or '?'} model, {where}"
    return "measured in context" if c.signature in in_context else "measured"


def op_times(est: Estimate) -> list[OpTime]:
    """Seconds per op type in ``est`` (floor-corrected, per run), largest first, with the lower bound
    and roofline of each where every brick of that op type has them."""
    groups: dict[str, list[BrickContribution]] = {}
    for c in est.breakdown:
        groups.setdefault(c.op_type, []).append(c)

    def total(parts: list[BrickContribution], field: str) -> float | None:
        values = [getattr(c, field) for c in parts]
        return None if any(v is None for v in values) else sum(c.count * v for c, v in zip(parts, values, strict=True))

    out = [OpTime(op, sum(c.total_s for c in parts), total(parts, "lower_bound_s"), total(parts, "roofline_s"))
           for op, parts in groups.items()]
    return sorted(out, key=lambda o: (-o.estimate_s, o.op_type))


def _gap(c: BrickContribution) -> float | None:
    return None if c.lower_bound_s is None else c.total_s - c.count * c.lower_bound_s


def _roofline_points(report: ModelReport) -> tuple[list[RooflinePoint], int]:
    """The bricks placed in the roofline chart, and how many could not be (no FLOPs, no time)."""
    points, left = [], 0
    for c in report.estimate.breakdown:
        brick = report.bricks.get(c.signature)
        flops = roofline_work(brick)[0] if brick is not None else 0
        moved = brick.bytes_moved if brick is not None else 0
        if flops <= 0 or moved <= 0 or c.latency_s <= 0:
            left += 1
            continue
        points.append(RooflinePoint(c.op_type, flops / moved, flops / c.latency_s, c.share, c.source == "predicted"))
    return points, left


# ------------------------------------------------------------------------------------------ HTML
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#222;margin:0;
background:#f4f5f7}
main{max-width:1320px;margin:0 auto;padding:16px 28px 48px;background:#fff}
h1{font-size:22px;margin:8px 0 2px}
h2{font-size:18px;border-bottom:2px solid #1f77b4;padding-bottom:3px;margin:36px 0 8px}
h3{font-size:15px;margin:22px 0 6px}
p{margin:6px 0}
.meta,figcaption,.note{color:#555;font-size:12.5px}
nav a{margin-right:12px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0 14px}
.scroll{overflow-x:auto;max-width:100%}
th,td{padding:3px 7px;border-bottom:1px solid #e6e6e6;text-align:left;white-space:nowrap}
th{background:#f1f5fa;font-weight:600;white-space:normal;vertical-align:bottom}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.total td{font-weight:600;border-top:1px solid #999}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:18px;align-items:start}
figure{margin:0}
figure svg{width:100%;height:auto}
.warn{background:#fff4e5;border-left:4px solid #ff9800;padding:6px 10px;margin:8px 0}
.no{color:#b00020;font-weight:600}
.yes{color:#2e7d32}
.pred{color:#8a5a00}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms(seconds: float, scale: float = 1e3, digits: int = 3) -> str:
    """``seconds`` in ms (``scale`` 1e6: us) with ``digits`` decimals, more below 1 so that at least
    ``digits + 1`` significant figures show (a brick of microseconds in ms)."""
    value = scale * seconds
    if value == 0:
        return "0"
    return f"{value:.{min(max(digits, digits - math.floor(math.log10(abs(value)))), 9)}f}"


def _num(seconds: float | None, key: str = "", scale: float = 1e3, digits: int = 3) -> str:
    """A table cell of ``seconds`` shown in ms (``scale`` 1e6: us), its exact value in ``data-s``."""
    attrs = f' data-key="{_e(key)}"' if key else ""
    if seconds is None or not math.isfinite(seconds):
        return f'<td class="num"{attrs}>-</td>'
    return f'<td class="num"{attrs} data-s="{seconds!r}">{_ms(seconds, scale, digits)}</td>'


def _pct(value: float | None, key: str = "", signed: bool = False, digits: int = 1) -> str:
    attrs = f' data-key="{_e(key)}"' if key else ""
    if value is None or not math.isfinite(value):
        return f'<td class="num"{attrs}>-</td>'
    return f'<td class="num"{attrs} data-v="{value!r}">{100 * value:{"+" if signed else ""}.{digits}f}</td>'


def _text(value: object, key: str = "", cls: str = "") -> str:
    attrs = (f' data-key="{_e(key)}"' if key else "") + (f' class="{cls}"' if cls else "")
    return f"<td{attrs}>{_e(value)}</td>"


def _table(header: Sequence[str], rows: Sequence[str], numeric: Sequence[int] = (), cls: str = "") -> str:
    head = "".join(f'<th class="num">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(header))
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            "</table></div>")


def _figure(fig: Any, caption: str) -> str:
    return f"<figure>{svg_of(fig)}<figcaption>{_e(caption)}</figcaption></figure>"


def _anchor(name: str) -> str:
    return "model-" + "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)


def _yes(flag: bool | None) -> str:
    if flag is None:
        return "<td>-</td>"
    return '<td class="yes">yes</td>' if flag else '<td class="no">NO</td>'


def _hidden(key: str, seconds: float) -> str:
    """An exact value that the row's text shows in words (an interval's ends, a second bound)."""
    return f'<span hidden data-key="{_e(key)}" data-s="{seconds!r}"></span>'


def _headline(r: ModelReport, row_of_run: EvaluationRow | None = None) -> str:
    """The model's figures; with ``row_of_run`` (``evaluate --report``), the measured latency is set
    against the run's interval (its rounds' swing, the suite's other models) as the suite's table is."""
    est, measured = r.estimate, r.measured_s

    def row(label: str, seconds: float | None, key: str, note: str) -> str:
        return f"<tr><td>{_e(label)}</td>{_num(seconds, key)}<td>{note}</td></tr>"

    if r.error is None:
        whole = "not measured whole in this database under this configuration ('dlbricks validate' measures it)"
    else:
        low, high = (row_of_run.ci_low_s, row_of_run.ci_high_s) if row_of_run is not None else (est.ci_low_s,
                                                                                                 est.ci_high_s)
        inside = low <= (measured or 0.0) <= high
        whole = (_e(f"error {100 * r.error:+.1f}%, ") + ("inside" if inside else '<span class="no">outside</span>')
                 + (_e(f" the run's interval, {_ms(low)} – {_ms(high)} ms (its rounds' swing and the suite's other "
                       "models)") if row_of_run is not None else " the interval"))
    roof = ("each brick at the machine's peak FLOP/s or bandwidth for its weights" if est.roofline_s is not None
            else "no peaks calibrated: run 'dlbricks calibrate'")
    rows = [
        row("estimate (sum of bricks)", est.sequential_s, "sequential_s",
            _e(f"95% interval {_ms(est.ci_low_s)} – {_ms(est.ci_high_s)} ms")
            + _hidden("ci_low_s", est.ci_low_s) + _hidden("ci_high_s", est.ci_high_s)),
        row("measured whole", measured, "measured_s", whole),
        row("parallel estimate", est.parallel_s, "parallel_s", "critical path of the brick DAG"),
        row("lower bound", est.lower_bound_s, "lower_bound_s",
            _e(f"each brick at its fastest measured run and configuration, in sequence; "
               f"{_ms(est.lower_bound_parallel_s)} ms on the critical path")
            + _hidden("lower_bound_parallel_s", est.lower_bound_parallel_s)),
        row("roofline", est.roofline_s, "roofline_s", _e(roof)),
        row("per-run floor", est.floor_s, "floor_s",
            _e("added once per run (the runtime's call cost and the model's own layout reorders)")),
    ]
    if measured is not None and est.lower_bound_s > measured:
        rows.append('<tr><td colspan="3" class="no">the lower bound exceeds the measured latency: a bound that '
                    "does not hold (the machine swung between the runs, or the bricks' floors were off)</td></tr>")
    return _table(["", "ms", ""], rows, numeric=(1,), cls="headline")


def _facts(r: ModelReport) -> str:
    est = r.estimate
    said = [f"{est.layers} layers, {est.unique_bricks} unique bricks, granularity {est.granularity}",
            f"coverage {100 * est.coverage:.1f}% of occurrences measured; {len(est.predicted)} bricks predicted "
            f"({100 * est.predicted_share:.1f}% of the time"
            + (f", {100 * est.far_share:.1f}% far from measured bricks)" if est.far_share else ")"),
            f"{len(r.in_context & set(r.bricks))} bricks measured in this model's context"]
    if est.swing is not None:
        said.append(f"machine swing while the bricks were timed: {est.swing:.3f}x (90th percentile over median, "
                    "weighted by share)")
    said.append(f"the interval holds how far brick sums landed from whole runs for {est.references} stored model"
                f"{'s' if est.references != 1 else ''} (x{math.exp(est.composition_error):.3f} at 95%)"
                if est.references else "the interval holds the bricks' own uncertainty only: no other stored "
                                       "model measured whole tells how far brick sums land")
    out = "".join(f"<p class=\"note\">{_e(s)}.</p>" for s in said)
    if est.warning:
        out += f'<p class="warn">{_e(est.warning)}</p>'
    return out


def _op_table(ops: Sequence[OpTime], est: Estimate) -> str:
    counts: dict[str, tuple[int, int]] = {}
    for c in est.breakdown:
        unique, occ = counts.get(c.op_type, (0, 0))
        counts[c.op_type] = (unique + 1, occ + c.count)
    work = est.sequential_s - est.floor_s
    rows = [f'<tr data-op="{_e(o.op_type)}">{_text(o.op_type)}<td class="num">{counts[o.op_type][0]}</td>'
            f'<td class="num">{counts[o.op_type][1]}</td>{_num(o.estimate_s, "estimate_s")}'
            f'{_pct(o.estimate_s / work if work > 0 else None, "share")}{_num(o.lower_bound_s, "lower_bound_s")}'
            f'{_num(o.roofline_s, "roofline_s")}</tr>' for o in ops]
    rows.append(f'<tr class="total"><td>bricks, then the floor</td><td></td><td class="num">{len(est.breakdown)}</td>'
                f'{_num(work, "bricks_s")}<td></td><td></td><td></td></tr>')
    return _table(["op type", "unique", "occurrences", "estimate ms", "share %", "lower bound ms", "roofline ms"],
                  rows, numeric=(1, 2, 3, 4, 5, 6), cls="ops")


def _brick_table(r: ModelReport, top: int) -> str:
    rows = []
    for rank, c in enumerate(r.estimate.breakdown[:top], 1):
        brick = r.bricks.get(c.signature)
        flops = roofline_work(brick)[0] if brick is not None else 0
        moved = brick.bytes_moved if brick is not None else 0
        rate = f"{flops / c.latency_s / 1e9:.2f}" if flops and c.latency_s > 0 else "-"
        intensity = f"{flops / moved:.2f}" if flops and moved else "-"
        known = c.low_s is not None and c.high_s is not None
        interval = f"{_ms(c.low_s, 1e6, 1)} – {_ms(c.high_s, 1e6, 1)}" if known else "-"
        rows.append(f'<tr data-signature="{_e(c.signature)}"><td class="num">{rank}</td>'
                    f"<td><code>{_e(c.signature[:12])}</code></td>{_text(c.op_type)}<td class=\"num\">{c.count}</td>"
                    f'{_num(c.latency_s, "latency_s", 1e6, 1)}<td class="num">{interval}</td>'
                    f'{_num(c.total_s, "total_s")}{_pct(c.share, "share")}'
                    f'{_num(c.lower_bound_s, "lower_bound_s", 1e6, 1)}{_num(c.roofline_s, "roofline_s", 1e6, 1)}'
                    f'<td class="num">{rate}</td><td class="num">{intensity}</td>'
                    + _text(brick_source(c, r.in_context), "source", "pred" if c.source == "predicted" else "")
                    + "</tr>")
    more = len(r.estimate.breakdown) - top
    note = f'<p class="note">{more} lighter bricks not listed.</p>' if more > 0 else ""
    return _table(["#", "signature", "op type", "count", "µs each", "95% interval µs", "ms total", "share %",
                   "lower bound µs", "roofline µs", "GFLOP/s", "FLOPs/byte", "how obtained"], rows,
                  numeric=(0, 3, 4, 5, 6, 7, 8, 9, 10, 11), cls="bricks") + note


def _gap_tables(r: ModelReport, ops: Sequence[OpTime], top: int) -> str:
    est = r.estimate
    gaps = sorted(((c, _gap(c)) for c in est.breakdown if (_gap(c) or 0.0) > 0), key=lambda cg: -cg[1])
    total = sum(g for _, g in gaps)
    brick_rows = [f'<tr data-signature="{_e(c.signature)}"><td><code>{_e(c.signature[:12])}</code></td>'
                  f'{_text(c.op_type)}<td class="num">{c.count}</td>{_num(c.total_s, "total_s")}'
                  f'{_num(c.count * c.lower_bound_s, "lower_bound_s")}{_num(g, "gap_s")}'
                  f'{_pct(g / total if total else None, "gap_share")}'
                  + _text("its roofline" if c.roofline_s is not None and c.lower_bound_s <= c.roofline_s
                          else "its fastest measured run") + "</tr>"
                  for c, g in gaps[:top]]
    op_gaps = sorted(((o, o.estimate_s - o.lower_bound_s) for o in ops if o.lower_bound_s is not None),
                     key=lambda og: -og[1])
    op_rows = [f'<tr data-op="{_e(o.op_type)}">{_text(o.op_type)}{_num(o.estimate_s, "estimate_s")}'
               f'{_num(o.lower_bound_s, "lower_bound_s")}{_num(g, "gap_s")}'
               f'{_pct(g / total if total else None, "gap_share")}{_num(o.roofline_s, "roofline_s")}</tr>'
               for o, g in op_gaps if g > 0]
    said = (f"<p class=\"note\">The estimate lies {_ms(est.sequential_s - est.lower_bound_s)} ms above its "
            "lower bound. Each brick's gap is what its runs lost against its fastest one in any configuration "
            "measured (another kernel, a warm cache, no per-call overhead): where to look for a better algorithm, "
            "a fusion or less runtime overhead. A brick whose bound is its roofline had no faster run.</p>")
    return (said + "<h3>Gap to the lower bound by op type</h3>"
            + _table(["op type", "estimate ms", "lower bound ms", "gap ms", "share of the gap %", "roofline ms"],
                     op_rows, numeric=(1, 2, 3, 4, 5), cls="opgaps")
            + "<h3>Gap to the lower bound by brick</h3>"
            + _table(["signature", "op type", "count", "estimate ms", "lower bound ms", "gap ms", "share of the gap %",
                      "bound from"], brick_rows, numeric=(2, 3, 4, 5, 6), cls="gaps"))


def _model_section(r: ModelReport, top: int, row_of_run: EvaluationRow | None = None) -> str:
    est = r.estimate
    ops = op_times(est)
    points, left = _roofline_points(r)
    flops, bandwidth = (r.peaks.flops_per_s, r.peaks.bytes_per_s) if r.peaks is not None else (None, None)
    roof_caption = (f"{len(points)} bricks placed ({left} without FLOPs not shown); size: share of the estimate, "
                    "hollow: predicted. Intensity counts every byte a brick reads and writes; the roof is the "
                    "calibrated peak FLOP/s and memory bandwidth"
                    + ("." if r.peaks is not None else " (none calibrated: 'dlbricks calibrate')."))
    return (f'<section class="model" id="{_anchor(est.model)}" data-model="{_e(est.model)}">'
            f"<h2>{_e(est.model)}</h2><p class=\"meta\">{_e(r.machine)}; {_e(r.configuration)}</p>"
            + _headline(r, row_of_run) + _facts(r)
            + '<div class="grid">'
            + _figure(op_time_figure(ops, f"{est.model}: time by op type"),
                      "Light bar: the estimate; green: its lower bound (the light part is the gap to it); "
                      "tick: the roofline.")
            + _figure(roofline_figure(points, flops, bandwidth, f"{est.model}: roofline of its bricks"), roof_caption)
            + "</div><h3>Time by op type</h3>" + _op_table(ops, est)
            + "<h3>Heaviest bricks</h3>" + _brick_table(r, top)
            + _gap_tables(r, ops, top) + "</section>")


def _suite_points(reports: Sequence[ModelReport], evaluation: Evaluation | None) -> list[SuitePoint]:
    if evaluation is not None:
        return [SuitePoint(r.model, r.measured_s, r.estimated_s, r.ci_low_s, r.ci_high_s, r.lower_bound_s,
                           r.roofline_s) for r in evaluation.rows if r.measured_s > 0 and math.isfinite(r.measured_s)]
    return [SuitePoint(r.estimate.model, r.measured_s, r.estimate.sequential_s, r.estimate.ci_low_s,
                       r.estimate.ci_high_s, r.estimate.lower_bound_s, r.estimate.roofline_s)
            for r in reports if r.measured_s is not None]


def _suite_rows(reports: Sequence[ModelReport], evaluation: Evaluation | None) -> tuple[list[str], list[str]]:
    if evaluation is not None:
        header = ["model", "layers", "unique", "measured ms", "estimated ms", "95% interval ms", "error %", "inside",
                  "lower bound ms", "roofline ms", "bounds hold", "rounds", "swing", "swing ±%"]
        rows = [f'<tr data-model="{_e(r.model)}"><td><a href="#{_anchor(r.model)}">{_e(r.model)}</a></td>'
                f'<td class="num">{r.layers}</td><td class="num">{r.unique_bricks}</td>'
                f'{_num(r.measured_s, "measured_s")}{_num(r.estimated_s, "estimated_s")}'
                f'<td class="num">{_ms(r.ci_low_s)} – {_ms(r.ci_high_s)}</td>{_pct(r.error, "error", True)}'
                f'{_yes(r.covered)}{_num(r.lower_bound_s, "lower_bound_s")}{_num(r.roofline_s, "roofline_s")}'
                f'{_yes(r.bounds_hold)}<td class="num">{r.rounds or "-"}</td>'
                f'<td class="num">{"-" if r.swing is None else f"{r.swing:.2f}x"}</td>{_pct(r.pairing, "pairing")}</tr>'
                for r in evaluation.rows]
        return header, rows
    header = ["model", "layers", "unique", "measured ms", "estimated ms", "95% interval ms", "error %", "inside",
              "lower bound ms", "roofline ms", "coverage %", "bricks' swing"]
    rows = []
    for r in reports:
        est, measured = r.estimate, r.measured_s
        inside = None if measured is None else est.ci_low_s <= measured <= est.ci_high_s
        rows.append(f'<tr data-model="{_e(est.model)}"><td><a href="#{_anchor(est.model)}">{_e(est.model)}</a></td>'
                    f'<td class="num">{est.layers}</td><td class="num">{est.unique_bricks}</td>'
                    f'{_num(measured, "measured_s")}{_num(est.sequential_s, "estimated_s")}'
                    f'<td class="num">{_ms(est.ci_low_s)} – {_ms(est.ci_high_s)}</td>'
                    f'{_pct(r.error, "error", True)}{_yes(inside)}{_num(est.lower_bound_s, "lower_bound_s")}'
                    f'{_num(est.roofline_s, "roofline_s")}{_pct(est.coverage, "coverage")}'
                    f'<td class="num">{"-" if est.swing is None else f"{est.swing:.3f}x"}</td></tr>')
    return header, rows


def _swing_line(evaluation: Evaluation | None, reports: Sequence[ModelReport]) -> str:
    if evaluation is not None:
        paired = [r for r in evaluation.rows if r.swing is not None and r.pairing is not None]
        if not paired:
            return "Machine swing: not measured (whole models measured apart from their bricks)."
        swings, left = sorted(r.swing for r in paired), sorted(r.pairing for r in paired)
        return (f"Machine swing during the run: whole runs over their rounds spread "
                f"{swings[0]:.2f}–{swings[-1]:.2f}x "
                f"(p90/p10, median {swings[len(swings) // 2]:.2f}x); it left ±{100 * left[0]:.1f}–"
                f"{100 * left[-1]:.1f}% in the estimates against their measurements.")
    swings = sorted(r.estimate.swing for r in reports if r.estimate.swing is not None)
    if not swings:
        return "Machine swing: unknown (no brick kept its 90th percentile)."
    return (f"Machine swing while the bricks were timed: {swings[0]:.3f}–{swings[-1]:.3f}x (each brick's 90th "
            "percentile over its median, weighted by share; 'dlbricks evaluate' times each model with its bricks "
            "and reports the swing of its rounds).")


def _suite_section(reports: Sequence[ModelReport], evaluation: Evaluation | None) -> str:
    points = _suite_points(reports, evaluation)
    header, rows = _suite_rows(reports, evaluation)
    numeric = tuple(i for i, h in enumerate(header) if h not in ("model", "inside", "bounds hold"))
    errors = [abs(p.estimated_s / p.measured_s - 1) for p in points]
    inside = sum(p.low_s <= p.measured_s <= p.high_s for p in points)
    summary = (f"{len(points)} of {len(rows)} models measured whole: mean |error| "
               f"{100 * sum(errors) / len(errors):.2f}%, "
               f"max {100 * max(errors):.2f}%; {sum(e <= 0.05 for e in errors)} within ±5%; the measured latency "
               f"inside the 95% interval for {inside}." if points else "No model is measured whole in this database "
               "under this configuration: 'dlbricks validate' or 'dlbricks evaluate' measure them.")
    totals: dict[str, list[float | None]] = {}
    for r in reports:
        for o in op_times(r.estimate):
            t = totals.setdefault(o.op_type, [0.0, 0.0, 0.0])
            t[0] = t[0] + o.estimate_s  # type: ignore[operator]
            t[1] = None if t[1] is None or o.lower_bound_s is None else t[1] + o.lower_bound_s
            t[2] = None if t[2] is None or o.roofline_s is None else t[2] + o.roofline_s
    ops = ([OpTime(op, t[0], t[1], t[2]) for op, t in totals.items()] if totals  # type: ignore[arg-type]
           else [OpTime(op, s) for op, s in (evaluation.op_times if evaluation is not None else ())])
    return ('<section class="suite" id="suite"><h2>The suite: estimated against measured</h2>'
            + _table(header, rows, numeric=numeric, cls="suite")
            + f'<p class="note">{_e(summary)}</p><p class="note">{_e(_swing_line(evaluation, reports))}</p>'
            + ('<p class="note">The intervals of this table are the run\'s: what its rounds saw of the machine\'s '
               "swing and how far the suite's other models landed; each model's section shows its estimate from the "
               "database, as 'dlbricks estimate' gives it.</p>" if evaluation is not None else "")
            + '<div class="grid">'
            + _figure(suite_figure(points, "estimated against measured latency"),
                      "Log axes. Dot and bar: the estimate and its 95% interval; triangle: the lower bound; "
                      "dash: the roofline; dashed line: estimate = measured; grey band: ±5%.")
            + _figure(op_time_figure(ops, "time by op type, summed over the models' estimates"),
                      "Light bar: the estimates; green: their lower bounds; tick: their rooflines.")
            + "</div></section>")


def render_report(models: Sequence[ModelReport], evaluation: Evaluation | None = None, *,
                  title: str = "dlbricks report", top: int = TOP_BRICKS, database: str | None = None) -> str:
    """The report as one self-contained HTML page: a suite section (estimated against measured, on
    log axes) where there are several models or an evaluation, then a section per model. Nothing
    in it is fetched from anywhere: no script, inline CSS, figures as inline SVG.

    Raises
    ------
    InvalidArgumentError
        If matplotlib (the ``plot`` extra) is not installed, or there is nothing to report.
    """
    require_matplotlib()
    if not models and evaluation is None:
        raise InvalidArgumentError("a report needs at least one model.")
    machines = sorted({f"{r.machine}; {r.configuration}" for r in models})
    if evaluation is not None:
        s = evaluation.system
        machines = [(f"{s.cpu_model}, {s.physical_cores} cores; {backend_name(evaluation.config)} "
                     f"{s.onnxruntime_version or ''}, {threads_of(evaluation.config)} thread(s), "
                     f"{evaluation.granularity} granularity; the suite ran for {evaluation.elapsed_s:.0f} s")]
    names = [r.estimate.model for r in models]
    runs = {row.model: row for row in evaluation.rows} if evaluation is not None else {}
    suite = len(models) > 1 or evaluation is not None
    nav = ('<a href="#suite">suite</a>' if suite else "") + "".join(f'<a href="#{_anchor(n)}">{_e(n)}</a>'
                                                                   for n in names)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = (f"<header><h1>{_e(title)}</h1><p class=\"meta\">dlbricks {_e(__version__)}, {when}"
            + (f"; database <code>{_e(os.path.basename(database))}</code>" if database else "") + "</p>"
            + ("".join(f'<p class="meta">{_e(m)}</p>' for m in machines) if suite else "")
            + (f"<nav>{nav}</nav>" if len(names) > 1 else "")
            + "</header>"
            + (_suite_section(models, evaluation) if suite else "")
            + "".join(_model_section(r, top, runs.get(r.estimate.model)) for r in models)
            + '<footer><p class="note">Times are per run, in milliseconds unless marked µs; a brick\'s time is '
              "floor-corrected (the runtime's per-call cost is added once per model run). Each cell's exact value "
              "in seconds is in its data-s attribute.</p></footer>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><main>{body}</main></body></html>\n")


def check_report_path(path: str | os.PathLike[str], database: str | os.PathLike[str] | None = None) -> Path:
    """``path`` checked, writing nothing, as where a report can be written: not the database (nor its
    WAL files), not a folder, in a folder that exists and can be written.

    Raises
    ------
    InvalidArgumentError
        Naming the path and what is wrong with it.
    """
    out = Path(path)
    target = os.path.realpath(out)
    if database is not None:
        db = os.path.realpath(database)
        if target in (db, db + "-wal", db + "-shm", db + "-journal"):
            raise InvalidArgumentError(f"the report {os.fspath(out)!r} would overwrite the database "
                                       f"{os.fspath(database)!r}; give another file, e.g. report.html.")
    if out.is_dir():
        raise InvalidArgumentError(f"the report {os.fspath(out)!r} is a folder; give a file, e.g. "
                                   f"{out / 'report.html'}.")
    folder = Path(target).parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InvalidArgumentError(f"cannot write the report {os.fspath(out)!r}: {str(folder)!r} {what}.")
    if not os.access(folder, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise InvalidArgumentError(f"cannot write the report {os.fspath(out)!r}: permission denied.")
    return out


def write_report(path: str | os.PathLike[str], models: Sequence[ModelReport], evaluation: Evaluation | None = None,
                 *, title: str = "dlbricks report", top: int = TOP_BRICKS, database: str | None = None) -> Path:
    """Render the report (:func:`render_report`) and write it to ``path`` whole (a temporary file
    beside it, then renamed): a report that fails leaves no half page behind."""
    out = check_report_path(path, database)
    text = render_report(models, evaluation, title=title, top=top, database=database)
    folder = os.path.dirname(os.path.realpath(out))
    try:
        fd, temp = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(temp, 0o644)
            os.replace(temp, out)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
    except OSError as e:
        raise InvalidArgumentError(f"cannot write the report {os.fspath(out)!r}: {e.strerror or e}.") from e
    return out
