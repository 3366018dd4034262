"""What taking bricks from earlier models' rounds would save on a suite, read from a database whose
rounds timed every brick of every model (``dlbricks evaluate --suite S --no-reuse --db DB``).

For each model in the suite's order, the bricks that its chained rounds would take from the models
before it through anchors (:func:`dlbricks.benchmarks_db.rounds.anchored_groups` with those models as
the only sources) cost nothing; every other brick costs the wall time stored with its measurement in
the model's context (its calls over the rounds and its share of the preparation). Prints, per model,
its bricks, how many would be taken, its bricks' time and the whole model's as stored, and for the
suite the wall speedup as measured and as it would be. Reads the database only.

Usage: ``python benchmarks/probes/probe_reuse_plan.py --db DB [--suite full] [--share 0.25]``
"""

from __future__ import annotations

import argparse

from dlbricks import decompose, load_model
from dlbricks.benchmarks_db import Store
from dlbricks.benchmarks_db.rounds import Reuse, anchored_groups
from dlbricks.estimator.evaluation import suite_models
from dlbricks.generators import OrtConfig
from dlbricks.model_zoo import build


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--suite", default="full")
    parser.add_argument("--share", type=float, default=0.25)
    parser.add_argument("--min-bricks", type=int, default=4)
    args = parser.parse_args()
    config = OrtConfig()
    reuse = Reuse(share=args.share, min_bricks=args.min_bricks)
    store = Store.open(args.db, create=False, readonly=True)
    system = store.systems.all()[0].fingerprint
    earlier: set[str] = set()
    totals = {"bricks": 0.0, "kept": 0.0, "whole": 0.0}
    print(f"{'model':<24} {'bricks':>6} {'taken':>6} {'bricks s':>9} {'kept s':>8} {'whole s':>8}")
    for name in suite_models(args.suite):
        dec = decompose(load_model(build(name), batch_size=1, name=name), "layer")
        own = {r.key: r.wall_time_s for r in store.measurements.in_context(
            dec.model_key, system=system, config_id=config.config_id, status="ok")}
        whole = store.measurements.models(model=dec.model_key, system=system, config_id=config.config_id,
                                          status="ok")
        taken = {k for g in anchored_groups(store, dec, system, config.config_id, reuse, again=True, among=earlier)
                 for k in set(g.keys) - set(g.feeders)}
        bricks_s = sum(own.values())
        kept_s = sum(t for k, t in own.items() if k not in taken)
        whole_s = whole[0].wall_time_s if whole else 0.0
        totals["bricks"] += bricks_s
        totals["kept"] += kept_s
        totals["whole"] += whole_s
        earlier.add(dec.model_key)
        print(f"{name:<24} {len(dec.bricks):>6} {len(taken):>6} {bricks_s:>9.2f} {kept_s:>8.2f} {whole_s:>8.2f}")
    print(f"suite: bricks {totals['bricks']:.1f} s, whole models {totals['whole']:.1f} s: "
          f"{totals['whole'] / totals['bricks']:.2f}x as measured; with anchors "
          f"{totals['kept']:.1f} s: {totals['whole'] / totals['kept']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
