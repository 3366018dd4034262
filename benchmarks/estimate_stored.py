"""Estimate every model measured whole in a brick database, from the measurements it holds alone.

A database filled on another machine (a GPU run's, read on a laptop without one) carries its system,
its configurations and its whole-model measurements: this script estimates each stored model in the
configuration it was measured whole in, with that system's bricks, and prints the error against the
stored whole-model median, the lower bound and the roofline, and on CUDA the estimate of the model
captured in a CUDA graph (its kernels back to back, the floor once: ``Estimate.graph_s``) with its
share of the eager estimate. Nothing is measured. With
``--no-launch-queue`` a CUDA database is composed as the sequential sum of its bricks instead of
through the launch queue (``dlbricks.estimator.estimate(..., launch_queue=False)``); with
``--without-repeat`` the queue takes each brick's issue time from its run alone, as if the copies
side by side (``repeat_s``) had not been timed (a copy of the database without them is read).

    python benchmarks/estimate_stored.py --db cuda_layer.db [--no-launch-queue] [--without-repeat]

The H100 run of docs/gpu.md is ``benchmarks/data/h100_layer_2026-11-24.db.gz`` (gunzip it first).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from dataclasses import dataclass, fields

from dlbricks import DlbricksError
from dlbricks.benchmarks_db import Store
from dlbricks.estimator import estimate
from dlbricks.generators import OrtConfig


@dataclass(frozen=True)
class StoredConfig(OrtConfig):
    """A stored configuration under the id it was stored with: a database filled before a change of
    measurement method keeps its ids, which the current method would hash otherwise."""

    stored_id: str = ""

    @property
    def config_id(self) -> str:
        return self.stored_id


def _without_repeat(path: str, folder: str) -> str:
    """A copy of the database at ``path``, in ``folder``, with every ``repeat_s`` cleared."""
    copy = os.path.join(folder, "without_repeat.db")
    with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
        for table in ("measurements", "context_measurements", "model_measurements"):
            target.execute(f"UPDATE {table} SET repeat_s = NULL")
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="The brick database (read only).")
    parser.add_argument("--no-launch-queue", action="store_true", help="The sequential sum, even on CUDA.")
    parser.add_argument("--without-repeat", action="store_true",
                        help="Issue times from each brick's run alone (repeat_s left out).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlbricks-") as folder:
        try:
            store = Store(_without_repeat(args.db, folder) if args.without_repeat else args.db, readonly=True)
        except DlbricksError as e:
            raise SystemExit(f"estimate_stored: {e}") from None
        _report(store, args.no_launch_queue)
        store.close()


def _report(store: Store, no_launch_queue: bool) -> None:
    """Estimate every stored model measured whole and print the table."""
    configs = {b.config_id: b.options for b in store.systems.backends()}
    names = {m.key: m.name for m in store.models.all()}
    errors, held = [], 0
    print(f"{'model':20s} {'measured ms':>11s} {'estimated ms':>12s} {'error %':>8s} {'lower bound ms':>14s} "
          f"{'roofline ms':>11s}  bounds  {'CUDA graph ms':>13s}")
    for record in store.measurements.models():
        if not record.ok or record.config_id not in configs:
            continue
        base = OrtConfig.from_dict(configs[record.config_id])
        config = StoredConfig(**{f.name: getattr(base, f.name) for f in fields(base)}, stored_id=record.config_id)
        try:
            est = estimate(store.models.decomposition(record.key), store, system=record.system, config=config,
                           on_missing="predict", launch_queue=not no_launch_queue)
        except Exception as e:  # noqa: BLE001 - a model that cannot be estimated is a row, not the end
            print(f"{names.get(record.key, record.key):20s} cannot be estimated: {e}")
            continue
        measured = record.median_s or float("nan")
        error = est.sequential_s / measured - 1
        bounds = (est.roofline_s or 0.0) <= est.lower_bound_s <= measured
        errors.append(abs(error))
        held += bounds
        predicted = f"  ({100 * est.predicted_share:.0f}% predicted)" if est.predicted else ""
        graph = (f"{1e3 * est.graph_s:13.3f} ({est.graph_s / est.sequential_s:.2f}x)" if est.graph_s is not None
                 else f"{'-':>13s}")
        print(f"{names.get(record.key, record.key):20s} {1e3 * measured:11.3f} {1e3 * est.sequential_s:12.3f} "
              f"{100 * error:+8.1f} {1e3 * est.lower_bound_s:14.3f} {1e3 * (est.roofline_s or 0.0):11.3f}  "
              f"{'yes' if bounds else 'NO ':3s}  {graph}{predicted}")
    if errors:
        print(f"mean |error| {100 * sum(errors) / len(errors):.2f}%, max {100 * max(errors):.2f}%, within +-5%: "
              f"{sum(e <= 0.05 for e in errors)}/{len(errors)}, bounds {held}/{len(errors)}")


if __name__ == "__main__":
    main()
