"""What a database's estimates would be with another cost of a further node, nothing measured again.

Each stored floor calibration keeps its one-node time (``floor_s + node_s``); ``--ratio`` sets its
cost of a further node to that share of it (the paired calibration's, as
``python benchmarks/probes/probe_floor_pairing.py`` measures it) and its floor to the rest. A copy of the
database is rewritten so, and every model with a whole-model measurement is estimated from both,
against that measurement: per model the error both ways, then the mean |error| and the counts within
+-5% and +-10%.

Usage: ``python benchmarks/probes/reanalyse_node_cost.py --db full.db --ratio 0.089 [--work DIR]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from dlbricks.benchmarks_db import Store
from dlbricks.estimator import estimate


def rewrite(db: Path, ratio: float) -> None:
    """Set every stored calibration's node cost to ``ratio`` of its one-node time, its floor to the rest."""
    with Store(db) as store:
        for table in ("measurements", "model_measurements", "context_measurements"):
            store.db.conn.execute(f"UPDATE {table} SET floor_s = (floor_s + node_s) * (1 - ?), "
                                  f"node_s = (floor_s + node_s) * ? WHERE node_s IS NOT NULL", (ratio, ratio))
        store.db.conn.commit()


def errors(db: Path) -> dict[str, float]:
    """Each measured model's estimate error against its stored whole-model median."""
    with Store(db) as store:
        measured = {(r.key, r.system): r.median_s for r in store.measurements.models(status="ok")}
        names = {key: store.models.get(key).name for key, _ in measured}
    out = {}
    for (key, system), median in measured.items():
        name = names[key]
        if name not in out and median:
            out[name] = estimate(name, db, system=system).sequential_s / median - 1
    return out


def summary(errs: dict[str, float]) -> str:
    sizes = [abs(e) for e in errs.values()]
    return (f"mean |error| {100 * statistics.mean(sizes):.2f}%, within +-5% {sum(s <= 0.05 for s in sizes)}/"
            f"{len(sizes)}, within +-10% {sum(s <= 0.10 for s in sizes)}/{len(sizes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--ratio", type=float, required=True, help="a further node's share of a one-node call")
    parser.add_argument("--work", type=Path, default=None, help="folder for the rewritten copy (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dlbricks-node-"))
    copy = work / "rewritten.db"
    shutil.copyfile(args.db, copy)
    rewrite(copy, args.ratio)
    stored, rewritten = errors(args.db), errors(copy)
    print(f"{'model':30s} {'stored':>8s} {'ratio ' + str(args.ratio):>12s}")
    for name in sorted(stored, key=lambda n: -abs(stored[n])):
        print(f"{name:30s} {100 * stored[name]:+7.1f}% {100 * rewritten.get(name, float('nan')):+11.1f}%")
    print(f"stored:    {summary(stored)}")
    print(f"rewritten: {summary(rewritten)}")


if __name__ == "__main__":
    main()
