"""Explain a recorded CUDA run's errors from the measurements its database holds, per model and per op type.

Nothing is measured. For each model measured whole in the database, the estimate is taken apart:
each occurrence's launch-queue times as the estimator composes them (the host's issue time,
:func:`dlbricks.estimator.estimation.issue_time`, and the kernels' time after a run of themselves), the sum of
each, the queue's result (:func:`dlbricks.estimator.queue.queue_latency`, checked equal to
:func:`dlbricks.estimator.estimate`'s), the whole model's stored median and fastest run, and the
error. Then, per op type, where the host's and the device's time go; and what the estimate would be

- with the issue time read off the brick's run alone (``repeat_s`` left out) for the bricks whose
  copies side by side onnxruntime merges into one node (its common-subexpression elimination, a
  level-1 rewrite: copies that read the same inputs and weights share their first node, so that a
  further copy costs the last node alone; checked here on the CPU provider with the stored brick);
- with each brick's kernels in the model as timed after the L2 cache was emptied (``device_s``)
  instead of after a run of themselves (``device_warm_s``), the host's times as stored (an upper
  bound of a kernel inside a model: its weights and its inputs both come from memory);
- with both.

Each listed model is flagged with the terms that take at least half of its error away, and whether
the whole model itself ran as fast as the estimate in some of its rounds (``--printed``: what the run
printed, whose lines ``NAME: whole model sampled N times, medians A-B ms`` give each turn's range).
``host/occ`` is the host time per occurrence, added to every occurrence, that would make the queue
land on the measured median: a uniform per-node cost (onnxruntime's executor) would show as one value
across models and runs.

    python benchmarks/explain_gpu_records.py DB [DB ...] [--printed TXT ...] [--ops MODEL ...]
    python benchmarks/explain_gpu_records.py DB --excerpt OUT.json --model NAME [--model NAME] [--printed TXT]

``--excerpt`` writes the stored measurements of a few models (each brick's record as the library
reads it, the models' occurrence order and DAG, the estimate) as JSON, for a regression test on
recorded data (``tests/test_gpu_records.py``). The H200 databases of docs/gpu.md are in the shared
data folder (see its README); gunzip them first.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from dlbricks.benchmarks_db import Store
from dlbricks.benchmarks_db.rounds import model_measurements
from dlbricks.estimator import estimate
from dlbricks.estimator.estimation import estimate_decomposition, issue_time
from dlbricks.estimator.queue import QueueTimes, queue_latency
from dlbricks.generators import OrtConfig, get_backend

#: The models that issue 48 lists, flagged by default.
ISSUE_MODELS = ("squeezenet1_1", "bert_base", "mobilenet_v2_1.0", "efficientnet_b0", "inception_v3",
                "lstm_lm_medium", "shufflenet_v2_x1_0")
#: Copies side by side in the measurement of ``repeat_s`` (``dlbricks.generators._cuda.REPEAT_COPIES``).
COPIES = 4
#: The what-ifs, each a change of the estimate's queue times.
VARIANTS = ("merged", "cold", "both")
_PRINTED = re.compile(r"^(\S+): whole model sampled (\d+) times, medians ([\d.]+)-([\d.]+) ms")
_ROW = re.compile(r"^(\S+)\s+\d+\s+\d+\s+([\d.]+)\s+([\d.]+)\s+[+-][\d.]+\s")


@dataclass(frozen=True)
class StoredConfig(OrtConfig):
    """A stored configuration under the id it was stored with (the current code hashes it otherwise)."""

    stored_id: str = ""

    @property
    def config_id(self) -> str:
        return self.stored_id


@dataclass(frozen=True, slots=True)
class BrickTimes:
    """One brick of a model: its stored queue times and how the estimate uses them (seconds)."""

    signature: str
    op_type: str
    count: int  # occurrences in the model
    latency_s: float  # floor-corrected, as the estimate composes it
    device_s: float | None  # kernels after the L2 cache was emptied
    device_warm_s: float | None  # kernels after a run of themselves (what the estimate takes)
    repeat_s: float | None  # what a further copy added to a run of copies side by side
    view: bool  # runs no kernel inside a model (the backend's view_ops)
    merged: bool | None  # onnxruntime merges its copies side by side (None: not checked)

    def queue(self, variant: str = "stored") -> QueueTimes:
        """Its times in the launch queue, as the estimator composes them, or under ``variant``."""
        warm = self.device_warm_s if self.device_warm_s is not None else self.device_s
        repeat = None if variant in ("merged", "both") and self.merged else self.repeat_s
        if self.view or self.latency_s == 0.0:
            return QueueTimes(self.latency_s if repeat is None else repeat, 0.0)
        if warm is None:  # measured without queue times: waits for the device, counts its latency
            return QueueTimes(self.latency_s, 0.0, blocking=True)
        # the host's time is read off runs whose kernels met a warm cache; only the model's kernels go cold
        cold = self.device_s if variant in ("cold", "both") and self.device_s is not None else warm
        return QueueTimes(issue_time(self.latency_s, warm, repeat), cold)


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """One model's estimate taken apart, beside its whole-model measurement (seconds)."""

    name: str
    granularity: str
    occurrences: int
    floor_s: float
    estimate_s: float  # the library's estimate
    host_s: float  # sum of the occurrences' issue times
    device_s: float  # sum of their kernels' times
    measured_s: float  # the whole model's stored median
    fastest_s: float | None  # its fastest run
    rounds: tuple[float, float] | None  # the range of its rounds' medians, as the run printed it
    whole_swing: float | None  # its p90 over its median
    bricks_swing: float | None  # the bricks' p90 over median, weighted by share (Estimate.swing)
    weight_bytes: int
    variants: dict[str, float]  # what-if -> estimate
    merged_host_s: float  # issue time of occurrences whose copies onnxruntime merges
    host_per_occurrence_s: float | None  # host time per occurrence that lands the queue on the median

    @property
    def error(self) -> float:
        return self.estimate_s / self.measured_s - 1

    def error_of(self, variant: str) -> float:
        return self.variants[variant] / self.measured_s - 1

    @property
    def bound(self) -> str:
        return "host" if self.host_s >= self.device_s else "device"

    @property
    def within_rounds(self) -> bool | None:
        """Whether the whole model ran as fast as the estimate in some round (fastest run up to the
        slowest round's median); None without the printed range."""
        if self.rounds is None:
            return None
        return (self.fastest_s or self.rounds[0] * 1e-3) <= self.estimate_s <= self.rounds[1] * 1e-3

    def explained_by(self) -> list[str]:
        """The terms that take at least half of the error away, and the whole model's own swing; else
        the side that bounds the queue (its kernels inside the model, or the host's time per layer)."""
        terms = [v for v in VARIANTS if abs(self.error_of(v)) <= abs(self.error) / 2]
        if self.within_rounds:
            terms.append("swing")
        if not terms and self.bound == "device":
            terms.append("kernels in the model")
        elif not terms and self.host_per_occurrence_s is not None and abs(self.host_per_occurrence_s) >= 1e-6:
            terms.append("host per layer")
        return terms


# ------------------------------------------------------------------------------------ the records
def open_records(path: str) -> tuple[Store, dict[str, OrtConfig]]:
    """The database at ``path`` (read only) and its configurations under their stored ids."""
    store = Store(path, readonly=True)
    configs = {}
    for b in store.systems.backends():
        base = OrtConfig.from_dict(b.options)
        configs[b.config_id] = StoredConfig(**{f.name: getattr(base, f.name) for f in fields(base)},
                                            stored_id=b.config_id)
    return store, configs


def read_printed(path: str | None) -> dict[str, tuple[float, float]]:
    """Each model's range of round medians (ms) from what a run printed."""
    if path is None:
        return {}
    found = {}
    for line in Path(path).read_text().splitlines():
        match = _PRINTED.match(line.strip())
        if match:
            found[match.group(1)] = (float(match.group(3)), float(match.group(4)))
    return found


def read_printed_estimates(path: str | None) -> dict[str, float]:
    """Each model's estimate (ms) from the table that a run printed."""
    if path is None:
        return {}
    rows = (_ROW.match(line) for line in Path(path).read_text().splitlines())
    return {m.group(1): float(m.group(3)) for m in rows if m}


def copies_merged(model: Any, copies: int = COPIES, *, disabled: Sequence[str] = ()) -> bool:
    """Whether onnxruntime runs ``copies`` copies of ``model`` side by side (as ``repeat_s`` is
    measured) in fewer nodes than ``copies`` times the model's own: its level-1 rewrites, which
    every provider runs, merge the copies' nodes that compute the same thing from the same inputs
    (common-subexpression elimination); a graph output is never merged, so the last node stays.
    ``disabled``: onnxruntime's optimizers left out of both sessions (its ``disabled_optimizers``)."""
    import onnx
    import onnxruntime as ort

    from dlbricks.generators.items import side_by_side

    def nodes(proto: Any) -> int:
        with tempfile.TemporaryDirectory(prefix="dlbricks-cse-") as folder:
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.log_severity_level = 3
            options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
            ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=list(disabled))
            return len(onnx.load(options.optimized_model_filepath).graph.node)

    return nodes(side_by_side(model, copies)) < copies * nodes(model)


def explain(path: str, printed: dict[str, tuple[float, float]] | None = None, *, check_copies: bool = True,
            keep: Callable[[str], bool] = lambda name: True) -> tuple[list[ModelRecord], dict[str, list[BrickTimes]]]:
    """Every model of the database at ``path`` measured whole (that ``keep`` keeps): its record and
    its bricks' times. With ``check_copies``, whether onnxruntime merges each brick's copies side by
    side is checked on the CPU provider (only where optimizations were on and copies were timed)."""
    store, configs = open_records(path)
    names = {m.key: m.name for m in store.models.all()}
    merged: dict[str, bool | None] = {}
    records, bricks = [], {}
    try:
        for rec in store.measurements.models(status="ok"):
            name = names.get(rec.key, rec.key)
            if rec.config_id not in configs or not rec.median_s or not keep(name):
                continue
            config = configs[rec.config_id]
            dec = store.models.decomposition(rec.key)
            est = estimate(dec, store, system=rec.system, config=config, on_missing="predict")
            stored = model_measurements(store, dec, rec.system, rec.config_id)
            views = get_backend(config.backend).view_ops
            counts = dec.counts()
            latency = {c.signature: c.latency_s for c in est.breakdown}
            times = {}
            for sig, brick in dec.bricks.items():
                m = stored.get(sig)
                if sig not in merged:
                    merged[sig] = (None if not check_copies else False
                                   if config.graph_optimization_level == "disable" or m is None or m.repeat_s is None
                                   else copies_merged(brick.to_onnx()))
                times[sig] = BrickTimes(sig, brick.op_type, counts[sig], latency[sig],
                                        None if m is None else m.device_s, None if m is None else m.device_warm_s,
                                        None if m is None else m.repeat_s, set(brick.op_types) <= views, merged[sig])
            queue = [times[o.signature].queue() for o in dec.occurrences]
            recomputed = est.floor_s + queue_latency(queue)
            if not math.isclose(recomputed, est.sequential_s, rel_tol=1e-9):
                raise SystemExit(f"explain_gpu_records: {name}: the queue of its stored times gives "
                                 f"{1e3 * recomputed:.4f} ms, the estimator {1e3 * est.sequential_s:.4f} ms; "
                                 "the estimator composes its queue otherwise than this script reads it.")
            variants = {v: est.floor_s + queue_latency([times[o.signature].queue(v) for o in dec.occurrences])
                        for v in VARIANTS}
            records.append(ModelRecord(
                name, dec.granularity, len(queue), est.floor_s, est.sequential_s,
                sum(t.host_s for t in queue), sum(t.device_s for t in queue), float(rec.median_s), rec.min_s,
                (printed or {}).get(name), (rec.p90_s / rec.median_s) if rec.p90_s else None, est.swing,
                dec.weight_bytes(), variants,
                sum(q.host_s for o, q in zip(dec.occurrences, queue, strict=True) if times[o.signature].merged),
                host_to_close(queue, est.floor_s, float(rec.median_s))))
            bricks[name] = sorted(times.values(), key=lambda b: -b.count * b.queue().host_s)
    finally:
        store.close()
    return records, bricks


def host_to_close(queue: Sequence[QueueTimes], floor_s: float, measured_s: float) -> float | None:
    """The host time ``x`` that, added to every occurrence's issue time (none below 0), lands
    ``floor_s`` plus the queue on ``measured_s``; None where no ``x`` can (the kernels alone are
    longer)."""
    def total(x: float) -> float:
        return floor_s + queue_latency([QueueTimes(max(t.host_s + x, 0.0), t.device_s, t.blocking) for t in queue])

    low, high = -max((t.host_s for t in queue), default=0.0), 1e-3
    if total(low) > measured_s or total(high) < measured_s:
        return None
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if total(mid) < measured_s else (low, mid)
    return (low + high) / 2


# ------------------------------------------------------------------------------------------ output
def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def print_models(path: str, records: Sequence[ModelRecord]) -> None:
    """The estimate's parts beside the whole model, one row per model."""
    print(f"\n## {os.path.basename(path)}: the estimate's parts against the whole model\n")
    print("| model | occ | floor us | host ms | device ms | bound | estimate ms | measured ms | error % | gap ms | "
          "fastest ms | vs fastest % | rounds ms | whole p90/med | bricks p90/med | host/occ us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in records:
        rounds = "-" if r.rounds is None else f"{r.rounds[0]:.2f}-{r.rounds[1]:.2f}"
        close = "-" if r.host_per_occurrence_s is None else f"{1e6 * r.host_per_occurrence_s:+.2f}"
        print(f"| {r.name} | {r.occurrences} | {1e6 * r.floor_s:.1f} | {_ms(r.host_s)} | {_ms(r.device_s)} | "
              f"{r.bound} | {_ms(r.estimate_s)} | {_ms(r.measured_s)} | {_pct(r.error)} | "
              f"{_ms(r.measured_s - r.estimate_s)} | {_ms(r.fastest_s)} | "
              f"{_pct(r.estimate_s / r.fastest_s - 1 if r.fastest_s else None)} | {rounds} | "
              f"{r.whole_swing or 0:.2f} | {r.bricks_swing or 0:.2f} | {close} |")
    errors = [abs(r.error) for r in records]
    print(f"\nmean |error| {100 * statistics.mean(errors):.2f}%, within +-5%: {sum(e <= 0.05 for e in errors)}/"
          f"{len(errors)} (host, device: the sums of the occurrences' issue and kernel times; host/occ: the host "
          "time per occurrence that lands the queue on the measured median)")


def print_whatifs(records: Sequence[ModelRecord], listed: Sequence[str]) -> None:
    """The error under each what-if, and what explains the listed models'."""
    print("\n### What-ifs: error % of the queue with other times (nothing measured again)\n")
    print("| model | weights MB | merged copies' host share | stored | copies merged: run alone | kernels cold "
          "| both | explained by |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        flag = ", ".join(r.explained_by()) or "-" if r.name in listed else ""
        share = r.merged_host_s / r.host_s if r.host_s else 0.0
        print(f"| {r.name} | {r.weight_bytes / 1e6:.1f} | {100 * share:.0f}% | {_pct(r.error)} | "
              f"{_pct(r.error_of('merged'))} | {_pct(r.error_of('cold'))} | {_pct(r.error_of('both'))} | {flag} |")
    for variant in ("stored", *VARIANTS):
        errors = [abs(r.error if variant == "stored" else r.error_of(variant)) for r in records]
        print(f"{variant}: mean |error| {100 * statistics.mean(errors):.2f}%, within +-5%: "
              f"{sum(e <= 0.05 for e in errors)}/{len(errors)}")
    print("(explained by: the what-ifs that take at least half of the error away; swing: the whole model's "
          "fastest run <= estimate <= its slowest round's median; else, kernels in the model where the queue is "
          "bound by the device, host per layer where by the host and |host/occ| >= 1 us)")


def print_ops(name: str, bricks: Sequence[BrickTimes]) -> None:
    """Where one model's host and device time go, per op type."""
    by: dict[str, list[BrickTimes]] = {}
    for b in bricks:
        by.setdefault(b.op_type, []).append(b)
    host = sum(b.count * b.queue().host_s for b in bricks) or 1.0
    device = sum(b.count * b.queue().device_s for b in bricks) or 1.0
    print(f"\n### {name}: per op type (us per occurrence; alone: its run alone less its kernels)\n")
    print("| op type | occ | host share | device share | host | repeat | alone | kernels warm | kernels cold | "
          "copies merged |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for op, group in by.items():
        n = sum(b.count for b in group)

        def mean(values: list[tuple[int, float | None]]) -> str:
            kept = [(c, v) for c, v in values if v is not None]
            return "-" if not kept else f"{1e6 * sum(c * v for c, v in kept) / sum(c for c, _ in kept):.1f}"

        h = sum(b.count * b.queue().host_s for b in group)
        d = sum(b.count * b.queue().device_s for b in group)
        merged = sum(b.count for b in group if b.merged)
        row = (f"| {op} | {n} | {100 * h / host:.0f}% | {100 * d / device:.0f}% | {1e6 * h / n:.1f} | "
               f"{mean([(b.count, b.repeat_s) for b in group])} | "
               f"{mean([(b.count, max(b.latency_s - (b.device_warm_s or 0.0), 0.0)) for b in group])} | "
               f"{mean([(b.count, b.device_warm_s) for b in group])} | "
               f"{mean([(b.count, b.device_s) for b in group])} | {merged}/{n} |")
        rows.append((h, row))
    for _, row in sorted(rows, key=lambda r: -r[0]):
        print(row)


def print_copies(path: str, bricks: dict[str, list[BrickTimes]]) -> None:
    """Bricks whose copies side by side onnxruntime merges, against their kernels' time."""
    unique = {b.signature: b for group in bricks.values() for b in group if b.repeat_s is not None}
    if not any(b.merged is not None for b in unique.values()):
        return
    print(f"\n### {os.path.basename(path)}: copies side by side (repeat_s) against the kernels after themselves\n")
    print("| copies | bricks | repeat below kernels | median repeat / kernels |")
    print("|---|---|---|---|")
    for flag in (True, False):
        group = [b for b in unique.values() if b.merged is flag and b.device_warm_s]
        if group:
            below = sum(b.repeat_s < b.device_warm_s for b in group)  # type: ignore[operator]
            ratio = statistics.median(b.repeat_s / b.device_warm_s for b in group)  # type: ignore[operator]
            ops = sorted({b.op_type for b in group}) if flag else []
            print(f"| {'merged (' + ', '.join(ops) + ')' if flag else 'kept apart'} | {len(group)} | {below} | "
                  f"{ratio:.2f} |")


def print_runs(runs: Sequence[tuple[str, list[ModelRecord]]]) -> None:
    """Models measured in several runs of the same granularity: how much the whole model and the
    estimate moved between them."""
    first_name, first = runs[0]
    for other_name, other in runs[1:]:
        paired = {r.name: r for r in other if r.granularity == first[0].granularity} if first else {}
        rows = [(r, paired[r.name]) for r in first if r.name in paired]
        if not rows:
            continue
        print(f"\n### {os.path.basename(other_name)} against {os.path.basename(first_name)}: the same models again\n")
        print("| model | measured ratio | estimate ratio | error % then | error % now |")
        print("|---|---|---|---|---|")
        for a, b in rows:
            print(f"| {a.name} | {b.measured_s / a.measured_s:.2f} | {b.estimate_s / a.estimate_s:.2f} | "
                  f"{_pct(a.error)} | {_pct(b.error)} |")
        moved = [abs(math.log(b.measured_s / a.measured_s)) for a, b in rows]
        est = [abs(math.log(b.estimate_s / a.estimate_s)) for a, b in rows]
        print(f"\nmedian |log ratio|: measured {statistics.median(moved):.3f}, estimate {statistics.median(est):.3f}")


# ----------------------------------------------------------------------------------------- excerpt
def write_excerpt(path: str, out: str, models: Sequence[str], printed: str | None = None) -> None:
    """The stored measurements of ``models`` as JSON: each brick's record as the library reads it
    (its configuration once, beside the bricks), each model's occurrences (indices into the bricks)
    and DAG, its estimate, its whole-model median, and (``printed``: what the run printed) the
    estimate in ms as the run printed it. The estimate from the excerpt (no database, no peaks)
    must equal the stored one; a model whose roofline changes it is refused."""
    shown = read_printed_estimates(printed)
    store, configs = open_records(path)
    names = {m.key: m.name for m in store.models.all()}
    bricks: dict[str, dict[str, Any]] = {}
    chosen, config = [], None
    try:
        for rec in store.measurements.models(status="ok"):
            name = names.get(rec.key, rec.key)
            if name not in models or rec.config_id not in configs:
                continue
            dec = store.models.decomposition(rec.key)
            est = estimate(dec, store, system=rec.system, config=configs[rec.config_id], on_missing="predict")
            stored = model_measurements(store, dec, rec.system, rec.config_id)
            ops = get_backend(configs[rec.config_id].backend).view_ops
            views = {s for s, b in dec.bricks.items() if set(b.op_types) <= ops}
            bare = estimate_decomposition(dec, stored, config_id=rec.config_id, views=views)
            if not math.isclose(bare.sequential_s, est.sequential_s, rel_tol=1e-12):
                raise SystemExit(f"explain_gpu_records: {name}'s estimate needs its roofline; pick another model.")
            for sig, m in stored.items():
                row = m.to_dict()
                row.pop("config_id")
                config = {"backend": row.pop("backend"), "config": row.pop("config"), "stored_config_id": rec.config_id}
                row.pop("samples_s", None)
                bricks[sig] = {"op_types": list(dec.bricks[sig].op_types), "measurement": row}
            chosen.append((name, dec, rec, est))
    finally:
        store.close()
    order = {sig: i for i, sig in enumerate(sorted(bricks))}
    data = {"source": os.path.basename(path), "configuration": config,
            "bricks": [bricks[sig] for sig in sorted(bricks)],
            "models": [{"name": name, "granularity": dec.granularity, "estimate_s": est.sequential_s,
                        "printed_estimate_ms": shown.get(name),
                        "parallel_s": est.parallel_s, "lower_bound_s": est.lower_bound_s, "measured_s": rec.median_s,
                        "occurrences": [order[o.signature] for o in dec.occurrences],
                        "edges": sorted([int(a), int(b)] for a, b in dec.dag.edges)}
                       for name, dec, rec, est in chosen]}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {out}: {len(chosen)} models, {len(bricks)} bricks, {os.path.getsize(out)} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", nargs="+", help="Brick databases of CUDA runs (read only).")
    parser.add_argument("--printed", action="append", default=[],
                        help="What each run printed (its .txt), in the order of the databases.")
    parser.add_argument("--ops", action="append", default=None,
                        help="Models whose op types to show (default: those issue 48 lists).")
    parser.add_argument("--no-copies-check", action="store_true",
                        help="Do not ask onnxruntime (CPU) whether it merges each brick's copies.")
    parser.add_argument("--json", help="Also write every record here.")
    parser.add_argument("--excerpt", help="Write the stored measurements of --model models here (JSON), and stop.")
    parser.add_argument("--model", action="append", default=[], help="A model for --excerpt.")
    args = parser.parse_args()
    if args.excerpt:
        if len(args.db) != 1 or not args.model:
            parser.error("--excerpt takes one database and at least one --model.")
        write_excerpt(args.db[0], args.excerpt, args.model, args.printed[0] if args.printed else None)
        return
    ops = args.ops if args.ops is not None else list(ISSUE_MODELS)
    runs, dump = [], {}
    for i, path in enumerate(args.db):
        printed = read_printed(args.printed[i] if i < len(args.printed) else None)
        records, bricks = explain(path, printed, check_copies=not args.no_copies_check)
        print_models(path, records)
        print_whatifs(records, ISSUE_MODELS)
        print_copies(path, bricks)
        for name in ops:
            if name in bricks:
                print_ops(name, bricks[name])
        runs.append((path, records))
        dump[path] = {"models": [asdict(r) for r in records],
                      "bricks": {n: [asdict(b) for b in group] for n, group in bricks.items()}}
    if len(runs) > 1:
        print_runs(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
