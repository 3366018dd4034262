"""Does taking the floor's drift at each brick's moments off steady the estimates of small models?

For each of ``--models`` (zoo models of microsecond layers by default), ``--runs`` times, in a fresh
database: ``dlbricks.estimator.validate`` (the whole model measured, then its bricks, each sample of a
brick followed by a sample of the floor's one-node model: ``empty_s``), and the estimate again from
a copy of that database with every ``empty_s`` cleared (the estimator then subtracts the run's
floor alone, as it did before). Prints each run's whole model, both estimates and their errors, then
per model the range (largest over smallest) of each over the runs and the median |error|.

With ``--framework mxnet`` (the mxnet environment) the models are Gluon zoo models measured in MXNet.

Usage: ``python benchmarks/probes/probe_floor_drift.py [--models ncf_ml20m,dlrm_criteo_kaggle] [--runs 4]
[--framework onnxruntime|mxnet]``
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
from typing import Any

from dlbricks.estimator import estimate, validate
from dlbricks.generators import collect_system_info


def _without_drift(path: str, folder: str) -> str:
    """A copy of the database at ``path`` with every ``empty_s`` cleared."""
    copy = os.path.join(folder, "without_drift.db")
    with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
        source.backup(target)
        for table in ("measurements", "context_measurements"):
            target.execute(f"UPDATE {table} SET empty_s = NULL")
    return copy


def _config(framework: str) -> Any:
    """The default configuration of ``framework`` (None: the estimator's own, onnxruntime)."""
    if framework == "mxnet":
        from dlbricks.generators.mxnet import MxnetConfig

        return MxnetConfig()
    return None


def _one_run(model: str, config: Any = None) -> tuple[float, float, float]:
    """(whole, estimate, estimate without the drift) of ``model`` in a fresh database, seconds."""
    with tempfile.TemporaryDirectory(prefix="dlbricks-drift-") as folder:
        path = os.path.join(folder, "bricks.db")
        v = validate(model, path, config=config)
        plain = estimate(model, _without_drift(path, folder), config=config, composition=False)
        return float(v.measured.median_s or 0.0), v.estimate.sequential_s, plain.sequential_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="ncf_ml20m,dlrm_criteo_kaggle", help="zoo models, comma-separated")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--framework", choices=("onnxruntime", "mxnet"), default="onnxruntime")
    args = parser.parse_args()
    config = _config(args.framework)
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, {info.physical_cores} cores, onnxruntime {info.onnxruntime_version}")
    print(f"{'model':20s} {'run':>3s} {'whole us':>9s} {'with us':>8s} {'error':>7s} {'without us':>10s} {'error':>7s}")
    results: dict[str, list[tuple[float, float, float]]] = {}
    for run in range(1, args.runs + 1):
        for model in [m for m in args.models.split(",") if m]:
            whole, with_drift, without = _one_run(model, config)
            results.setdefault(model, []).append((whole, with_drift, without))
            print(f"{model:20s} {run:3d} {whole * 1e6:9.2f} {with_drift * 1e6:8.2f} {100 * (with_drift / whole - 1):+6.1f}% "
                  f"{without * 1e6:10.2f} {100 * (without / whole - 1):+6.1f}%", flush=True)
    for model, rows in results.items():
        cols = list(zip(*rows, strict=True))
        spread = [max(c) / min(c) for c in cols]
        errors = [statistics.median(abs(e / w - 1) for w, e in zip(cols[0], c, strict=True)) for c in cols[1:]]
        print(f"{model}: range over {len(rows)} runs: whole {spread[0]:.2f}x, with the drift taken off "
              f"{spread[1]:.2f}x (median |error| {100 * errors[0]:.1f}%), without {spread[2]:.2f}x "
              f"({100 * errors[1]:.1f}%)")


if __name__ == "__main__":
    main()
