"""Probe: when the machine swings, do a model's bricks speed up and slow down as much as the model?

Usage::

    python benchmarks/probes/probe_phase_ratio.py MODEL [MODEL ...] [--opt-level all] [--repeats 2]

MODEL is a zoo model name or an ONNX file. Each repeat is ``dlbricks validate MODEL`` (paired, the
default; fused bricks at ``--opt-level all``) into a fresh database. From its rounds, as timed (not
taken at the whole model's speed), per repeat: the error as printed; the rank correlation of the
whole run's time and the round's ratio (the bricks' calls less their empty models', over the whole
run); that ratio's median in the rounds whose whole run was faster than its median and in the
others; and the robust slope of the bricks' log time on the whole run's (1 where a phase slows both
alike, as ``Rounds.speed_factors`` assumes).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

from dlbricks.estimator import validate
from dlbricks.generators import OrtConfig


def describe(model: str, level: str) -> str:
    """One paired validation of ``model`` at ``level`` and how its bricks moved with its whole runs."""
    with tempfile.TemporaryDirectory() as tmp:
        v = validate(model, Path(tmp) / "probe.db", config=OrtConfig(graph_optimization_level=level),
                     granularity="fused" if level == "all" else "layer")
    rounds = v.rounds.rounds
    counts = np.asarray(v.rounds.counts, dtype=np.float64)
    whole = np.asarray(rounds.whole_s)
    empties = np.array([np.zeros(rounds.count) if e is None else np.asarray(e) for e in rounds.empties_s])
    net = counts @ (np.asarray(rounds.bricks_s) - empties)
    ratio = net / whole
    fast = whole <= np.median(whole)
    rho = stats.spearmanr(whole, ratio)[0]
    slope = stats.theilslopes(np.log(net), np.log(whole))[0]
    return (f"{Path(model).stem:20s} {level:7s} error {100 * v.error:+5.1f}%  swing {rounds.swing():.2f}  "
            f"rounds {rounds.count}  rho(whole, ratio) {rho:+.2f}  ratio: fast half {np.median(ratio[fast]):.3f}, "
            f"slow half {np.median(ratio[~fast]):.3f}  slope {slope:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--opt-level", default="disable")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for model in args.models:
        for _ in range(args.repeats):
            print(describe(model, args.opt_level), flush=True)


if __name__ == "__main__":
    main()
