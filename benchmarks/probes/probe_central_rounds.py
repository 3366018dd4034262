"""Probe: do a model's bricks, each centred over its rounds on its own, add up to the model's ratio?

Usage::

    python benchmarks/probes/probe_central_rounds.py MODEL [MODEL ...]

MODEL is a zoo model name or an ONNX file. Each is ``dlbricks validate MODEL`` (paired, the default)
into a fresh database. From its rounds, printed per model: the bricks' calls less their empty
models', at the whole model's speed, over the whole model's centre, three ways: the centre of the
per-round sums (the paired ratio's way), each brick's own median summed (the estimate through
measuring method 13 for onnxruntime), and each brick's mean over the rounds whose sum is central
(``Rounds.central_weights``, the estimate since); and the error the estimate had each way.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from dlbricks.estimator import validate


def compare(model: str) -> str:
    """One paired validation of ``model``, its net sums three ways and its error two ways."""
    with tempfile.TemporaryDirectory() as tmp:
        v = validate(model, Path(tmp) / "probe.db")
    rounds, counts = v.rounds.rounds, np.asarray(v.rounds.counts, dtype=np.float64)
    speed = rounds.speed_factors()
    calls = np.asarray(rounds.bricks_s, dtype=np.float64) * speed
    empties = np.array([np.zeros(rounds.count) if e is None else np.asarray(e) for e in rounds.empties_s]) * speed
    whole = rounds.centre(rounds.whole_s)
    of_sums = rounds.centre(counts @ (calls - empties)) / whole
    medians = sum(c * (rounds.centre(b) - rounds.centre(e)) for c, b, e in zip(counts, calls, empties)) / whole
    central = rounds.central_weights(counts @ calls)
    means = float(counts @ (calls - empties) @ central) / whole
    medians_error = (1 + v.error) * medians / means - 1
    return (f"{Path(model).stem:20s} swing {rounds.swing():.2f}  net sums over whole: centre of sums {of_sums:.3f}, "
            f"sum of medians {medians:.3f}, central rounds {means:.3f}  error: medians {100 * medians_error:+5.1f}%, "
            f"central rounds {100 * v.error:+5.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    for model in args.models:
        print(compare(model), flush=True)


if __name__ == "__main__":
    main()
