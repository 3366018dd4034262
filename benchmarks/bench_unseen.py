"""Unseen models: estimate a held-out model family from a database filled with the rest of the zoo.

Bricks used only by the held-out family are treated as never measured: they are predicted from the
measured bricks of the same op type (``on_missing="predict"``); bricks shared with other models are
reused. Prints, per held-out model, coverage, predicted share, estimate, measured latency and error,
for the predictor (linear model corrected by the nearest measured bricks) and, as the baseline in the
same run, for its linear model alone.
The database must hold the suite's measurements (``dlbricks evaluate --suite full --db F``), including
whole-model runs of the held-out models.

    python benchmarks/bench_unseen.py --db full.db --family densenet
"""

from __future__ import annotations

import argparse

from dlbricks.benchmarks_db import Store
from dlbricks.estimator import LatencyPredictor, estimate_decomposition
from dlbricks.generators import OrtConfig, collect_system_info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--family", default="densenet", help="name prefix of the held-out models")
    args = parser.parse_args()
    system = collect_system_info()
    config = OrtConfig()
    with Store(args.db) as store:
        models = store.models()
        held = [m for m in models if m.name.startswith(args.family)]
        rest = [m for m in models if not m.name.startswith(args.family)]
        if not held or not rest:
            raise SystemExit(f"{args.db}: need models of family {args.family!r} and others")
        seen = {o.signature for m in rest for o in store.occurrences(m.name)}
        measured = {sig: store.measurement(sig, system, config.config_id) for sig in seen}
        measured = {s: m for s, m in measured.items() if m is not None and m.ok}
        bricks = [store.brick(s) for s in measured]
        predictor = LatencyPredictor().fit_measurements(bricks, measured)
        linear = LatencyPredictor(neighbours=0).fit_measurements(bricks, measured)
        print(f"machine: {system.cpu_model} ({system.physical_cores} cores); database: {len(rest)} models, "
              f"{len(measured)} measured bricks; held out: {len(held)} models of family {args.family!r}")
        for op, model in sorted(predictor.models_.items()):
            print(f"  predictor {op:20s} n={model.n:4d} leave-one-out median |error| "
                  f"{100 * model.cv_error:.1f}% (linear alone {100 * linear.models_[op].cv_error:.1f}%)")
        errors: list[float] = []
        baseline: list[float] = []
        for rec in held:
            dec = store.decomposition(rec.name)
            whole = store.measurement(dec.model_key, system, config.config_id, kind="model")
            if whole is None or not whole.ok:
                print(f"{rec.name}: no whole-model measurement in the db; run dlbricks validate first")
                continue
            known = {s: m for s, m in measured.items() if s in dec.bricks}
            est = estimate_decomposition(dec, known, config_id=config.config_id, on_missing="predict",
                                         predictor=predictor)
            base = estimate_decomposition(dec, known, config_id=config.config_id, on_missing="predict",
                                          predictor=linear)
            error = est.sequential_s / whole.median_s - 1
            errors.append(abs(error))
            baseline.append(abs(base.sequential_s / whole.median_s - 1))
            print(f"{rec.name}: coverage {100 * est.coverage:.1f}% of occurrences, {len(est.predicted)} of "
                  f"{len(dec.bricks)} bricks predicted ({100 * est.predicted_share:.1f}% of the time); "
                  f"estimate {1e3 * est.sequential_s:.2f} ms, measured {1e3 * whole.median_s:.2f} ms, "
                  f"error {100 * error:+.1f}% (target within 10%); linear predictor alone "
                  f"{100 * (base.sequential_s / whole.median_s - 1):+.1f}%")
        if errors:
            print(f"mean |error| {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}%; "
                  f"linear predictor alone: mean {100 * sum(baseline) / len(baseline):.1f}%, "
                  f"max {100 * max(baseline):.1f}%")


if __name__ == "__main__":
    main()
