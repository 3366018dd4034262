"""Probe: does an untimed pass of the chain before its timed one in each round (``warm_chain``) bring a
model's bricks to the state its layers meet inside the model, and with what read between the two
passes?

Usage::

    python benchmarks/probes/probe_warm_chain.py MODEL [MODEL ...] [--rounds 40] [--repeats 3]
        [--designs cold warm sweep every]

MODEL is a zoo model name or an ONNX file. In one process (no worker), each model whole and its
unique bricks prepared as a chain (``OrtBackend.prepare_chain`` by the model's data flow, one
thread, optimizations off), timed in chained rounds (:func:`~dlbricks.generators.rounds.time_rounds`)
in the ``--designs`` asked (default the first three), alternating, ``--repeats`` times each: no warm
pass ("cold"), a warm pass ("warm"), a warm pass then a read of the weights deduplication took out
of the chain ("sweep": ``Decomposition.deduplicated_weight_bytes``,
:func:`~dlbricks.generators.rounds.sweeper`), and a warm pass with every brick called at each of its
occurrences in the model's order ("every": the chain then runs what the model runs, deduplicated
layers and their activations included; a brick's time is the mean of its calls). Each brick's timed
call follows its ``ready`` as in the main job. Printed per
model and design: the median over the rounds of the bricks' sum (each call less its floor call,
times its occurrences) over the whole model, each repeat; the raw ratio, before the estimator's floor
and node corrections.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

import dlbricks
from dlbricks.benchmarks_db.rounds import round_order
from dlbricks.estimator.api import CHAINED_ROUNDS
from dlbricks.generators import OrtConfig
from dlbricks.generators.ort import OrtBackend
from dlbricks.generators.rounds import sweeper, time_rounds
from dlbricks.model_zoo import build


DESIGNS = ("cold", "warm", "sweep", "every")


def ratios(name: str, rounds: int, repeats: int, designs: tuple[str, ...] = DESIGNS[:3]) -> dict[str, list[float]]:
    """The raw ratio of each repeat in each of ``designs`` (of :data:`DESIGNS`)."""
    model = onnx.load(name) if name.endswith(".onnx") else build(name)
    dec = dlbricks.decompose(dlbricks.load_model(model, name=Path(name).stem))
    keys = round_order(dec)
    counts = dec.counts()
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    chain = backend.prepare_chain([dec.in_context(k).to_onnx() for k in keys], config, dec.feeds(keys))
    kept = [(k, p) for k, p in zip(keys, chain, strict=True) if p is not None]
    bricks = [p for _, p in kept]
    weights = np.array([counts[k] for k, _ in kept], dtype=float)
    sweep = sweeper(dec.deduplicated_weight_bytes())
    position = {k: i for i, (k, _) in enumerate(kept)}
    every = tuple(position[o.signature] for o in dec.occurrences if o.signature in position)
    out: dict[str, list[float]] = {d: [] for d in designs}
    for repeat in range(repeats):
        for design in designs:
            budget = replace(CHAINED_ROUNDS, min_rounds=rounds, max_rounds=rounds, warm_chain=design != "cold")
            r = time_rounds(whole, bricks, list(weights.astype(int)), budget, rng=np.random.default_rng(repeat),
                            sweep=sweep if design == "sweep" else None, schedule=every if design == "every" else None)
            sums = weights @ (np.array(r.bricks_s) - np.array(r.empties_s))
            out[design].append(float(np.median(sums / np.array(r.whole_s))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--designs", nargs="+", choices=DESIGNS, default=list(DESIGNS[:3]))
    args = parser.parse_args()
    for name in args.models:
        result = ratios(name, args.rounds, args.repeats, tuple(args.designs))
        for design, values in result.items():
            print(f"{Path(name).stem:<20} {design:<5}: " + " ".join(f"{v:.3f}" for v in values), flush=True)


if __name__ == "__main__":
    main()
