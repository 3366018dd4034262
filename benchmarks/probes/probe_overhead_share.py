"""Probe: how much of a fused brick's stored overhead should an estimate at level "all" subtract?

Usage::

    python benchmarks/probes/probe_overhead_share.py --db DB [--db DB ...]

DB is a database filled at ``--opt-level all --granularity fused`` by ``bench`` then ``validate`` (the
export corpus's, ``benchmarks/bench_export_corpus.py --opt-level all``). Nothing is measured: every
model measured whole in it is estimated again four ways, the estimator's rule for a brick's overhead
(``_overhead_at``, its layout reorders and the kernels its model fuses away) swapped for each:
``share`` (the rule: the stored overhead as a share of the time used, here a single call in the
model's chained rounds), ``seconds`` (the stored seconds of the brick's own warm run), ``half`` (half
the share) and ``none``; printed, each model's error each way and each way's mean |error|.
"""

from __future__ import annotations

import argparse
import statistics

import dlbricks.estimator.api as api
from dlbricks.benchmarks_db import Store
from dlbricks.estimator import estimate
from dlbricks.generators import OrtConfig, collect_system_info

SHARE = api._overhead_at  # the rule under study
RULES = {
    "share": SHARE,
    "seconds": lambda signature, overhead_s, *rest: overhead_s,
    "half": lambda *args: 0.5 * SHARE(*args),
    "none": lambda *args: 0.0,
}


def errors(db: str) -> dict[str, dict[str, float]]:
    """Per model measured whole at level "all" in ``db``, its estimate's error under each rule."""
    config, system = OrtConfig(graph_optimization_level="all"), collect_system_info()
    found: dict[str, dict[str, float]] = {}
    with Store(db, readonly=True) as store:
        for record in store.models.all():
            try:
                dec = store.models.decomposition(record.name, "fused:all")
            except Exception:  # noqa: BLE001 - a model stored at other granularities only
                continue
            whole = store.measurements.get(dec.model_key, system, config.config_id, kind="model")
            if whole is None or not whole.ok or not whole.median_s:
                continue
            row = {}
            for name, rule in RULES.items():
                api._overhead_at = rule
                try:
                    row[name] = estimate(dec, store, system=system, config=config, composition=False).sequential_s / whole.median_s - 1
                finally:
                    api._overhead_at = SHARE
            found[record.name] = row
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", required=True, help="A database filled at level all (repeatable).")
    for db in parser.parse_args().db:
        rows = errors(db)
        print(f"{db}: {len(rows)} models, error % by rule")
        print(f"{'model':28s}" + "".join(f"{name:>9s}" for name in RULES))
        for model, row in sorted(rows.items()):
            print(f"{model:28s}" + "".join(f"{100 * row[name]:+9.1f}" for name in RULES))
        for name in RULES:
            errs = [abs(row[name]) for row in rows.values()]
            print(f"  {name:8s} mean |error| {100 * statistics.mean(errs):.2f}%, within +-5%: "
                  f"{sum(e <= 0.05 for e in errs)}/{len(errs)}")


if __name__ == "__main__":
    main()
