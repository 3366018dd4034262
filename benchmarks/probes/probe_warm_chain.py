"""Probe: does an untimed pass of the chain before its timed one in each round (``warm_chain``) bring a
model's bricks to the state its layers meet inside the model?

Usage::

    python benchmarks/probes/probe_warm_chain.py MODEL [MODEL ...] [--rounds 40] [--repeats 3]

In one process (no worker), each zoo model whole and its unique bricks prepared as a chain
(``OrtBackend.prepare_chain`` by the model's data flow, one thread, optimizations off), timed in
chained rounds (:func:`~dlbricks.generators.rounds.time_rounds`) with and without ``warm_chain``,
alternating, ``--repeats`` times each. Printed per model and design: the median over the rounds of
the bricks' sum (each call less its floor call, times its occurrences) over the whole model, each
repeat; the raw ratio, before the estimator's floor and node corrections.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

import dlbricks
from dlbricks.benchmarks_db.rounds import round_order
from dlbricks.estimator.api import CHAINED_ROUNDS
from dlbricks.generators import OrtConfig
from dlbricks.generators.ort import OrtBackend
from dlbricks.generators.rounds import time_rounds
from dlbricks.model_zoo import build


def ratios(name: str, rounds: int, repeats: int) -> dict[bool, list[float]]:
    """The raw ratio of each repeat, with (True) and without (False) a warm pass of the chain."""
    model = build(name)
    dec = dlbricks.decompose(dlbricks.load_model(model, name=name))
    keys = round_order(dec)
    counts = dec.counts()
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    chain = backend.prepare_chain([dec.in_context(k).to_onnx() for k in keys], config, dec.feeds(keys))
    kept = [(k, p) for k, p in zip(keys, chain, strict=True) if p is not None]
    bricks = [p for _, p in kept]
    weights = np.array([counts[k] for k, _ in kept], dtype=float)
    out: dict[bool, list[float]] = {False: [], True: []}
    for repeat in range(repeats):
        for warm in (False, True):
            budget = replace(CHAINED_ROUNDS, min_rounds=rounds, max_rounds=rounds, warm_chain=warm)
            r = time_rounds(whole, bricks, list(weights.astype(int)), budget, rng=np.random.default_rng(repeat))
            sums = weights @ (np.array(r.bricks_s) - np.array(r.empties_s))
            out[warm].append(float(np.median(sums / np.array(r.whole_s))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name in args.models:
        result = ratios(name, args.rounds, args.repeats)
        for warm, values in result.items():
            print(f"{name:<20} {'warm chain' if warm else 'cold chain'}: " + " ".join(f"{v:.3f}" for v in values),
                  flush=True)


if __name__ == "__main__":
    main()
