"""Unseen models: predict models the database has never seen, and measure them whole in the same run.

Fills a database with the bricks of a suite of zoo models the way ``dlbricks evaluate`` does (short
budgets; each model measured whole and sampled again while its bricks are measured, a paired design
against the machine's drift), then estimates with ``on_missing="predict"`` two held-out sets:

- leave-one-family-out: for each zoo family of the suite, a predictor fitted on the bricks of the
  other families; bricks shared with them are reused, the family's own bricks are predicted;
- variants built here with :mod:`onnx.helper`, outside the zoo builder (a GPT-style decoder with Gemm
  projections, a narrower and deeper MatMul transformer, a Gemm MLP, a ConvNeXt-style CNN), from a
  predictor fitted on the whole suite;
- with ``--exports DIR``, models as users export them (``benchmarks/export_corpus.py``: torch.onnx
  and onnxruntime.quantization output, its ``corpus.json``), from the same predictor: the user's
  ``dlbricks estimate FILE --on-missing predict`` on a database they did not come from.

Per model it prints the error of the estimate, the predicted share of its time (and the share
predicted far from the data), whether the 95% interval covers the measured value (with the
composition error of the database's other models nearest in latency, as ``dlbricks estimate`` gives
it; the summary also sets it beside every reference model's pooled, and the bricks' intervals alone,
with the median width of each), and, for
reference, the error when every brick is measured (what prediction cannot beat).

    python benchmarks/bench_unseen.py                       # default suite, database in a temp dir
    python benchmarks/bench_unseen.py --db /tmp/unseen.db   # keep (and resume) the database
    python benchmarks/bench_unseen.py --db /tmp/full.db --suite full --families densenet,resnet
    python benchmarks/bench_unseen.py --db /tmp/default.db --exports /tmp/corpus --no-variants

Bricks, whole-model runs and peaks are kept in the database: run again on the same file, only what
is missing is measured, and the predictions are made afresh.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.estimator import Estimate, calibrate_peaks, evaluate
from dlbricks.estimator.api import last_level_cache, matvec_rates, memory_rate
from dlbricks.estimator.calibrate import merge_peaks
from dlbricks.estimator.estimation import (
    CompositionReference,
    Peaks,
    composition_error,
    estimate_decomposition,
    with_composition,
)
from dlbricks.estimator.evaluation import measure_whole, suite_models
from dlbricks.estimator.predict import LatencyPredictor
from dlbricks.generators import Budget, Measurement, OrtConfig, collect_system_info, get_backend
from dlbricks.generators.measurement import pool
from dlbricks.model_zoo import build, get_model

WHOLE_BUDGET = Budget(warmup_time=0.05, min_time=0.3, min_runs=5, max_time=1.5, rel_ci=0.02)
#: Rounds over the models measured whole here (pooled per model).
WHOLE_ROUNDS = 3


# ------------------------------------------------------------------------------------------ variants
class _Builder:
    """A tiny graph builder: nodes, seeded initializers, fresh names."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, shape: Sequence[int], scale: float = 0.02) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        name = self.name("shape")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], **attrs: object) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, name: str, x: str, shape: Sequence[int], y: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape))],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], initializer=self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def transformer(seq: int, hidden: int, heads: int, layers: int, proj: str, seed: int = 0) -> onnx.ModelProto:
    """A pre-norm decoder on ``[seq, hidden]`` with a causal mask; projections as ``proj`` nodes
    (``"Gemm"``: one node with bias, as exporters write linear layers; ``"MatMul"``: MatMul + Add)."""
    b = _Builder(seed)
    d = hidden // heads

    def linear(x: str, n_in: int, n_out: int) -> str:
        if proj == "Gemm":
            return b.op("Gemm", [x, b.const((n_in, n_out)), b.const((n_out,))])
        return b.op("Add", [b.op("MatMul", [x, b.const((n_in, n_out))]), b.const((n_out,))])

    def norm(x: str) -> str:
        return b.op("LayerNormalization", [x, b.const((hidden,), 1.0), b.const((hidden,))], axis=-1)

    mask = np.triu(np.full((seq, seq), -1e4, np.float32), 1)
    mask_name = "causal_mask"
    b.inits.append(numpy_helper.from_array(mask, mask_name))
    x = "x"
    for _ in range(layers):
        qkv = linear(norm(x), hidden, 3 * hidden)
        q, k, v = (b.name("q"), b.name("k"), b.name("v"))
        b.nodes.append(helper.make_node("Split", [qkv, b.ints([hidden] * 3)], [q, k, v], axis=1))
        def heads_of(t: str, perm: list[int]) -> str:
            return b.op("Transpose", [b.op("Reshape", [t, b.ints([seq, heads, d])])], perm=perm)

        scores = b.op("MatMul", [heads_of(q, [1, 0, 2]), heads_of(k, [1, 2, 0])])
        scores = b.op("Add", [b.op("Mul", [scores, _scalar(b, d ** -0.5)]), mask_name])
        ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), heads_of(v, [1, 0, 2])])
        ctx = b.op("Reshape", [b.op("Transpose", [ctx], perm=[1, 0, 2]), b.ints([seq, hidden])])
        x = b.op("Add", [x, linear(ctx, hidden, hidden)])
        h = linear(norm(x), hidden, 4 * hidden)
        h = b.op("Mul", [h, b.op("Sigmoid", [b.op("Mul", [h, _scalar(b, 1.702)])])])
        x = b.op("Add", [x, linear(h, 4 * hidden, hidden)])
    return b.model(f"decoder_{proj.lower()}", "x", (seq, hidden), x)


def _scalar(b: _Builder, value: float) -> str:
    name = b.name("scalar")
    b.inits.append(numpy_helper.from_array(np.asarray([value], np.float32), name))
    return name


def mlp(batch: int, widths: Sequence[int], seed: int = 1) -> onnx.ModelProto:
    """Gemm layers of ``widths`` with ReLUs, then a softmax."""
    b = _Builder(seed)
    x = "x"
    for n_in, n_out in zip(widths, widths[1:], strict=False):
        x = b.op("Gemm", [x, b.const((n_out, n_in)), b.const((n_out,))], transB=1)
        x = b.op("Relu", [x])
    return b.model("mlp", "x", (batch, widths[0]), b.op("Softmax", [x], axis=-1))


def convnext_like(size: int, widths: Sequence[int], depth: int, seed: int = 2) -> onnx.ModelProto:
    """A patchify stem, then per stage ``depth`` blocks of depthwise 7x7, BatchNorm, 1x1 to 4x and
    back with a ReLU, a residual Add; 2x2 downsampling between stages; pooled Gemm head."""
    b = _Builder(seed)
    c = widths[0]
    x = b.op("Conv", ["x", b.const((c, 3, 4, 4)), b.const((c,))], strides=[4, 4])
    for stage, width in enumerate(widths):
        if stage:
            x = b.op("Conv", [x, b.const((width, c, 2, 2)), b.const((width,))], strides=[2, 2])
            c = width
        for _ in range(depth):
            h = b.op("Conv", [x, b.const((c, 1, 7, 7)), b.const((c,))], group=c, pads=[3, 3, 3, 3])
            h = b.op("BatchNormalization", [h, b.const((c,), 1.0), b.const((c,)), b.const((c,)),
                                            _positive(b, c)])
            h = b.op("Relu", [b.op("Conv", [h, b.const((4 * c, c, 1, 1)), b.const((4 * c,))])])
            x = b.op("Add", [x, b.op("Conv", [h, b.const((c, 4 * c, 1, 1)), b.const((c,))])])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.model("convnext_like", "x", (1, 3, size, size), b.op("Gemm", [x, b.const((1000, c)), b.const((1000,))],
                                                                  transB=1))


def _positive(b: _Builder, c: int) -> str:
    name = b.name("var")
    b.inits.append(numpy_helper.from_array(np.ones((c,), np.float32), name))
    return name


VARIANTS: Mapping[str, Callable[[], onnx.ModelProto]] = {
    "decoder_gemm_768x2": lambda: transformer(128, 768, 12, 2, "Gemm"),
    "decoder_matmul_384x4": lambda: transformer(64, 384, 6, 4, "MatMul"),
    "mlp_gemm_64x512": lambda: mlp(64, (512, 2048, 1024, 1000)),
    "convnext_like_160": lambda: convnext_like(160, (48, 96, 192), 2),
}


# ------------------------------------------------------------------------------------------ running
@dataclass(frozen=True, slots=True)
class Row:
    """One held-out model's result."""

    model: str
    held_out: str
    est: Estimate
    measured_s: float
    all_measured_error: float | None  # the estimate from the model's own measured bricks
    bricks_only: tuple[float, float]  # the interval from the bricks' intervals alone
    pooled: tuple[float, float]  # with the composition error of every reference model, not the nearest

    @property
    def error(self) -> float:
        return self.est.sequential_s / self.measured_s - 1

    @property
    def covered(self) -> bool:
        return self.est.ci_low_s <= self.measured_s <= self.est.ci_high_s

    @property
    def covered_by_bricks(self) -> bool:
        return self.bricks_only[0] <= self.measured_s <= self.bricks_only[1]

    @property
    def covered_pooled(self) -> bool:
        return self.pooled[0] <= self.measured_s <= self.pooled[1]


def _measured(store: Store, dec: dlbricks.Decomposition, system: object, config_id: str) -> dict[str, Measurement]:
    found = {sig: store.measurements.get(sig, system, config_id) for sig in dec.bricks}
    return {s: m for s, m in found.items() if m is not None and m.ok and m.median_s}


def _views(dec: dlbricks.Decomposition) -> set[str]:
    ops = getattr(get_backend("onnxruntime"), "view_ops", frozenset())
    return {sig for sig, b in dec.bricks.items() if ops and set(b.op_types) <= ops}


def _print_row(row: Row) -> None:
    est = row.est
    reference = f"{100 * row.all_measured_error:+6.1f}%" if row.all_measured_error is not None else "   n/a"
    print(f"  {row.model:24s} {row.held_out:12s} {1e3 * row.measured_s:9.2f} {1e3 * est.sequential_s:9.2f} "
          f"{100 * row.error:+7.1f}% {100 * est.predicted_share:6.1f}% {100 * est.far_share:6.1f}% "
          f"[{1e3 * est.ci_low_s:8.2f}, {1e3 * est.ci_high_s:8.2f}] {'yes' if row.covered else 'NO ':3s} "
          f"{'yes' if row.covered_by_bricks else 'NO ':6s} {reference}")


def _summary(label: str, rows: Sequence[Row], within: float) -> None:
    if not rows:
        return
    errors = [abs(r.error) for r in rows]
    print(f"  {label}: {len(rows)} models, mean |error| {100 * np.mean(errors):.1f}%, max {100 * max(errors):.1f}%, "
          f"{sum(e <= within for e in errors)} within +-{100 * within:.0f}%, interval covers "
          f"{sum(r.covered for r in rows)}/{len(rows)} ({sum(r.covered_by_bricks for r in rows)}/{len(rows)} "
          f"from the bricks' intervals alone, {sum(r.covered_pooled for r in rows)}/{len(rows)} with every reference "
          f"model's composition error)")
    print(f"    median width (high / low): {_median_ratio([(r.est.ci_low_s, r.est.ci_high_s) for r in rows]):.2f}x "
          f"with the nearest reference models, {_median_ratio([r.pooled for r in rows]):.2f}x with every one, "
          f"{_median_ratio([r.bricks_only for r in rows]):.2f}x from the bricks alone")


def _median_ratio(intervals: Sequence[tuple[float, float]]) -> float:
    """The median of high / low over ``intervals`` (inf where a low end is 0)."""
    return float(np.median([high / low if low > 0 else math.inf for low, high in intervals]))


HEADER = (f"  {'model':24s} {'held out':12s} {'meas ms':>9s} {'est ms':>9s} {'error':>8s} {'pred':>7s} "
          f"{'far':>7s} {'95% interval (ms)':>20s} cov bricks {'all-measured'}")


def _wholes(store: Store, models: Mapping[str, tuple[dlbricks.ModelGraph, dlbricks.Decomposition]],
            system: object, config: OrtConfig) -> dict[str, Measurement]:
    """Each model measured whole: kept in the database, or measured and recorded where it is not.
    The models not kept are measured in :data:`WHOLE_ROUNDS` rounds, each round over all of them in
    turn, and each model's rounds pooled, so that a swing of the machine does not fall on one model
    alone."""
    found: dict[str, Measurement] = {}
    for name, (_, dec) in models.items():
        kept = store.measurements.get(dec.model_key, system, config.config_id, kind="model")
        if kept is not None and kept.ok and kept.median_s:
            found[name] = kept
    todo = [name for name in models if name not in found]
    rounds: dict[str, list[Measurement]] = {name: [] for name in todo}
    for _ in range(WHOLE_ROUNDS):
        for name in todo:
            rounds[name].append(measure_whole(models[name][0], config, WHOLE_BUDGET, workers=1))
    for name in todo:
        found[name] = pool(rounds[name])
        store.measurements.record_model(found[name], system, budget=WHOLE_BUDGET)
    return found


def _peaks(store: Store, system: object, config: OrtConfig) -> Peaks:
    """The machine's peaks: kept in the database, calibrated (and recorded, with the calibration's
    details) where they are not, or where they were kept without details."""
    kept = store.systems.peaks(system)
    if kept is None or "backends" not in kept.details:
        found = calibrate_peaks(config, Budget(min_time=0.1, max_time=0.5))
        store.systems.record_peaks(system, *merge_peaks(None, "onnxruntime", found))
        return found.peaks
    return Peaks(kept.flops_per_s, kept.bytes_per_s, kept.details.get("int_ops_per_s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database file (default: a new one in a temporary directory)")
    parser.add_argument("--suite", default="default",
                        help="'default', 'full' (every zoo model) or comma-separated zoo models")
    parser.add_argument("--families", default="",
                        help="comma-separated zoo families to hold out (default: every family of the suite)")
    parser.add_argument("--no-variants", action="store_true", help="skip the hand-built variants")
    parser.add_argument("--no-families", action="store_true", help="skip leave-one-family-out")
    parser.add_argument("--exports", type=Path, default=None,
                        help="a folder of benchmarks/export_corpus.py (corpus.json): predict its models too")
    parser.add_argument("--only", default="", help="comma-separated names of the --exports models to predict")
    args = parser.parse_args()
    start = time.perf_counter()
    path = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="bench_unseen_")) / "unseen.db"
    system, config, budget = collect_system_info(), OrtConfig(), Budget.quick()
    names = suite_models(args.suite)
    graphs = {n: dlbricks.load_model(build(n), name=n) for n in names}
    if not args.no_variants:
        graphs |= {n: dlbricks.load_model(make(), name=n) for n, make in VARIANTS.items()}
    exports = _exports(args.exports, args.only) if args.exports else {}
    decs = {n: dlbricks.decompose(g) for n, g in (graphs | exports).items()}
    family = {n: get_model(n).family for n in names}
    held = [f for f in args.families.split(",") if f] or list(dict.fromkeys(family.values()))
    held = [] if args.no_families else held
    with Store(path) as store:
        unpaired = [n for n in names
                    if store.measurements.get(decs[n].model_key, system, config.config_id, kind="model") is None]
        if unpaired:  # bricks and whole samples in each model's turn (a database of evaluate has them)
            evaluate(unpaired, store, config=config, budget=budget, lower_bound_sweep=False)
        populate(store, [decs[n] for n in graphs], [config], BenchOptions(budget=budget))
        print(f"machine: {system.cpu_model}; database {path}: {len(names)} zoo models and {len(graphs) - len(names)} "
              f"variants, {len({s for n in graphs for s in decs[n].bricks})} unique bricks measured with "
              f"Budget.quick ({time.perf_counter() - start:.0f} s)")
        measured = {n: _measured(store, decs[n], system, config.config_id) for n in graphs}
        to_run = [n for n in graphs if family.get(n, "variant") in held or n in VARIANTS]
        # the suite's own whole runs give the composition error that the exports' intervals carry
        whole = _wholes(store, {n: (graphs[n], decs[n]) for n in (list(graphs) if exports else to_run)},
                        system, config)
        # an export is measured whole (and kept, so that runs on one database compare predictions on
        # the same measurement); none of its bricks is measured
        for n in exports:
            store.models.add(decs[n])
        whole |= _wholes(store, {n: (g, decs[n]) for n, g in exports.items()}, system, config)
        peaks = _peaks(store, system, config)
    print(f"whole models and peaks measured ({time.perf_counter() - start:.0f} s); peaks "
          f"{peaks.flops_per_s / 1e9:.1f} GFLOP/s, {peaks.bytes_per_s / 1e9:.1f} GB/s")

    suite_bricks = {sig: brick for n in names for sig, brick in decs[n].bricks.items()}
    all_known = {s: m for n in names for s, m in measured[n].items()}
    llc = last_level_cache(None, system)
    with Store(path) as store:
        streamed, looped = memory_rate(store, system, llc), matvec_rates(store, system)
    full = LatencyPredictor().fit_measurements([suite_bricks[s] for s in all_known], all_known, peaks=peaks,
                                               cache_bytes=llc, memory_rate=streamed, step_rates=looped)
    reference = {n: _all_measured_error(decs[n], measured[n], whole[n], full, config.config_id, peaks)
                 for n in graphs if n in whole}

    def composition(models: Sequence[str]) -> list[CompositionReference]:
        """How far brick sums of ``models`` landed from their whole runs (those all measured)."""
        return [CompositionReference(m, float(whole[m].median_s), float(whole[m].median_s) * (1 + reference[m]))
                for m in models if reference.get(m) is not None]

    rows: dict[str, list[Row]] = {"family": [], "variants": [], "exports": []}
    print("\nleave-one-family-out (database: the suite less the family; "
          f"predicting {time.perf_counter() - start:.0f} s)")
    print(HEADER)
    for fam in held:
        rest = [n for n in names if family[n] != fam]
        known = {s: m for n in rest for s, m in measured[n].items()}
        predictor = LatencyPredictor().fit_measurements([suite_bricks[s] for s in known], known, peaks=peaks,
                                                        cache_bytes=llc, memory_rate=streamed,
                                                        step_rates=looped)
        for n in (n for n in names if family[n] == fam):
            rows["family"].append(_row(n, fam, decs[n], whole[n], known, predictor, config.config_id, peaks,
                                       composition([m for m in rest if m in reference]), reference[n]))
            _print_row(rows["family"][-1])
    if not args.no_variants:
        print("\nvariants built outside the zoo (database: the whole suite)")
        print(HEADER)
        for n in VARIANTS:
            rows["variants"].append(_row(n, "variant", decs[n], whole[n], all_known, full, config.config_id, peaks,
                                         composition([m for m in names if m in reference]), reference[n]))
            _print_row(rows["variants"][-1])
        classes = {op: m for op, m in full.models_.items() if op == "*" or ("+" not in op and op.islower())}
        print("  kernel classes:", ", ".join(f"{op} n={m.n} q={m.q:.2f}" for op, m in sorted(classes.items())))
    if exports:
        print("\nexports (database: the whole suite; nothing of the export measured but the whole model)")
        print(HEADER)
        for n in exports:
            known = {s: m for s, m in all_known.items() if s in decs[n].bricks}
            rows["exports"].append(_row(n, "export", decs[n], whole[n], known, full, config.config_id, peaks,
                                        composition([m for m in names if m in reference]), None))
            _print_row(rows["exports"][-1])
    print()
    _summary("leave-one-family-out", rows["family"], 0.2)
    _summary("variants", rows["variants"], 0.2)
    _summary("exports", rows["exports"], 0.2)
    _summary("all", rows["family"] + rows["variants"] + rows["exports"], 0.2)
    print("  targets (issue 23): a database of the default suite: every model within +-20%, mean at most 8%; "
          "of the full zoo less the family: within +-10%, mean at most 5%; intervals covering at least 80%")
    print(f"total {time.perf_counter() - start:.0f} s")


def _exports(folder: Path, only: str) -> dict[str, dlbricks.ModelGraph]:
    """The models of an export corpus (``corpus.json``), loaded at the shapes it lists."""
    import json

    entries = json.loads((folder / "corpus.json").read_text())
    wanted = {n for n in only.split(",") if n}
    return {e["name"]: dlbricks.load_model(folder / e["file"], input_shapes=e["inputs"], name=e["name"])
            for e in entries if not wanted or e["name"] in wanted}


def _row(name: str, held_out: str, dec: dlbricks.Decomposition, whole: Measurement,
         known: Mapping[str, Measurement], predictor: LatencyPredictor, config_id: str, peaks: Peaks,
         references: Sequence[CompositionReference], reference: float | None) -> Row:
    """The model's estimate, its interval with the composition error of the reference models
    nearest in latency (what ``dlbricks estimate`` prints), of every one, and of none."""
    own = {s: m for s, m in known.items() if s in dec.bricks}
    bare = estimate_decomposition(dec, own, config_id=config_id, on_missing="predict", predictor=predictor,
                                  peaks=peaks, views=_views(dec))
    est = with_composition(bare, composition_error(references, bare.sequential_s), len(references))
    pooled = with_composition(bare, composition_error(references, bare.sequential_s, neighbours=len(references)),
                              len(references))
    return Row(name, held_out, est, float(whole.median_s or 0.0), reference, (bare.ci_low_s, bare.ci_high_s),
               (pooled.ci_low_s, pooled.ci_high_s))


def _all_measured_error(dec: dlbricks.Decomposition, own: Mapping[str, Measurement], whole: Measurement,
                        predictor: LatencyPredictor, config_id: str, peaks: Peaks) -> float | None:
    """Error of the estimate from the model's own measured bricks (None when some failed)."""
    if not set(own) >= set(dec.bricks) - _views(dec) or not whole.median_s:
        return None
    est = estimate_decomposition(dec, own, config_id=config_id, on_missing="predict", predictor=predictor,
                                 peaks=peaks, views=_views(dec))
    return est.sequential_s / whole.median_s - 1


if __name__ == "__main__":
    main()
