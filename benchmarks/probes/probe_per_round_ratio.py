"""Probe: does taking the ratio of a model's bricks to its whole run in each round, then centring it,
hold a model's error from one run to the next better than the quotient of the two sides' centres?

Usage::

    python benchmarks/probes/probe_per_round_ratio.py MODEL [MODEL ...] [--repeats 3]

MODEL is a zoo model name or an ONNX file. Each repeat is ``dlbricks validate MODEL`` (paired, the
default) into a fresh database, whose rounds give both figures: the error as printed, whose bricks
are taken at the whole model's speed in each round (so their sum over the whole run is the centred
per-round ratio), and the error the same estimate would have had with the quotient of the two
centres (the bricks' sum's and the whole runs', each the mean of the workers' medians), the design
before measuring method 12. Printed per model: both errors per repeat and their range.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from dlbricks.estimator import validate


def errors(model: str) -> tuple[float, float]:
    """``(per_round, quotient)``: one paired validation's error, and the same with the quotient of
    the two sides' centres in place of the centred per-round ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        v = validate(model, Path(tmp) / "probe.db")
    rounds = v.rounds.rounds
    per_round = v.rounds.ratio()[0]
    quotient = rounds.centre(rounds.sums(v.rounds.counts)) / rounds.centre(rounds.whole_s)
    return v.error, (1 + v.error) * quotient / per_round - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for model in args.models:
        runs = np.array([errors(model) for _ in range(args.repeats)]) * 100
        for label, column in (("per-round ratio", 0), ("quotient of centres", 1)):
            values = " ".join(f"{e:+5.1f}" for e in runs[:, column])
            print(f"{Path(model).stem:22s} {label:20s} {values}  range {np.ptp(runs[:, column]):4.1f} points",
                  flush=True)


if __name__ == "__main__":
    main()
