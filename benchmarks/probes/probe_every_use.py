"""Probe: does a chain that runs each unique brick once meet the caches as the model's layers do, or
do the layers that deduplication took out of it (and what they write and read) change what the
others meet?

Usage::

    python benchmarks/probes/probe_every_use.py MODEL [MODEL ...] [--rounds 30] [--repeats 2]

MODEL is a zoo model name. In one process (no worker), each model whole and its unique bricks
prepared as a chain (``OrtBackend.prepare_chain`` by the model's data flow, one thread,
optimizations off), timed in chained rounds (:func:`~dlbricks.generators.rounds.time_rounds` with
``CHAINED_ROUNDS``: a warm pass, the deduplicated weights read) two ways, alternating: each brick
called once a round as the main job does (``Decomposition.schedule``: "once"), and every brick called
at each of its occurrences in the model's order ("every": the chain then runs what the model runs).
Printed per model and design: the median over the rounds of the bricks' sum (each brick's mean call
less its floor call, times its occurrences) over the whole model, each repeat; the raw ratio, before
the estimator's floor and node corrections.
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
from dlbricks.generators.rounds import sweeper, time_rounds
from dlbricks.model_zoo import build


def ratios(name: str, rounds: int, repeats: int) -> dict[str, list[float]]:
    """The raw ratio of each repeat, each brick called once a round and at each use."""
    model = build(name)
    dec = dlbricks.decompose(dlbricks.load_model(model, name=name))
    keys = round_order(dec)
    counts = dec.counts()
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    chain = backend.prepare_chain([dec.in_context(k).to_onnx() for k in keys], config, dec.feeds(keys))
    kept = [k for k, p in zip(keys, chain, strict=True) if p is not None]
    bricks = [p for p in chain if p is not None]
    position = {k: i for i, k in enumerate(kept)}
    weights = np.array([counts[k] for k in kept], dtype=float)
    schedules = {"once": dec.schedule(kept),
                 "every": tuple(position[o.signature] for o in dec.occurrences if o.signature in position)}
    sweep = sweeper(dec.deduplicated_weight_bytes())
    budget = replace(CHAINED_ROUNDS, min_rounds=rounds, max_rounds=rounds)
    out: dict[str, list[float]] = {d: [] for d in schedules}
    for repeat in range(repeats):
        for design, schedule in schedules.items():
            r = time_rounds(whole, bricks, list(weights.astype(int)), budget, rng=np.random.default_rng(repeat),
                            schedule=schedule, sweep=sweep if design == "once" else None)
            sums = weights @ (np.array(r.bricks_s) - np.array(r.empties_s))
            out[design].append(float(np.median(sums / np.array(r.whole_s))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for name in args.models:
        for design, values in ratios(name, args.rounds, args.repeats).items():
            print(f"{name:<20} {design:<5}: " + " ".join(f"{v:.3f}" for v in values), flush=True)


if __name__ == "__main__":
    main()
