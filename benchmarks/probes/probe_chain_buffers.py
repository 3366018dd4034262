"""Probe: where a chain's bricks read their inputs and write their outputs, and what it does to the
ratio of their sum to the whole model.

Usage::

    python benchmarks/probes/probe_chain_buffers.py MODEL [--feeds flow|guess|apart] [--rounds 60]
        [--repeats 3]

In one process (no worker), the whole model and its unique bricks prepared as a chain
(``OrtBackend.prepare_chain``, one thread, optimizations off), timed in chained rounds
(:func:`~dlbricks.generators.rounds.time_rounds`, ``--rounds`` rounds, ``--repeats`` times):

- ``--feeds flow``: each input reads the brick that writes it in the model
  (``Decomposition.feeds``), every output placed by its lifetime in one block: what ``evaluate``
  does;
- ``--feeds guess``: no data flow given: a brick's first input reads the brick before it, the others
  the last output of their shape and type;
- ``--feeds apart``: no chain: each brick prepared alone, reading and writing buffers of its own.

Printed per repeat: the whole model's median, the median over the rounds of the bricks' sum (each
brick's call less its floor call, times its occurrences) and their ratio; then the bricks that hold
1% of the model or more.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--feeds", choices=("flow", "guess", "apart"), default="flow")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = build(args.model)
    dec = dlbricks.decompose(dlbricks.load_model(model, name=args.model))
    keys = round_order(dec)
    counts = dec.counts()
    models = [dec.in_context(key).to_onnx() for key in keys]
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    if args.feeds == "apart":
        chain = [backend.prepare(m, replace(config, cache="warm")) for m in models]
    else:
        chain = backend.prepare_chain(models, config, dec.feeds(keys) if args.feeds == "flow" else None)
    kept = [(key, prepared) for key, prepared in zip(keys, chain, strict=True) if prepared is not None]
    bricks = [prepared for _, prepared in kept]
    weights = np.array([counts[key] for key, _ in kept], dtype=float)
    for prepared in bricks:
        prepared.run()
        prepared.empty()
    budget = replace(CHAINED_ROUNDS, min_rounds=args.rounds, max_rounds=args.rounds)
    for repeat in range(args.repeats):
        rounds = time_rounds(whole, bricks, list(weights.astype(int)), budget, rng=np.random.default_rng(repeat))
        calls = np.array(rounds.bricks_s)
        empties = np.array([e if e is not None else np.zeros(rounds.count) for e in rounds.empties_s])
        whole_s = np.array(rounds.whole_s)
        sums = weights @ (calls - empties)
        print(f"{args.model} --feeds {args.feeds} #{repeat}: whole {1e3 * np.median(whole_s):.3f} ms, bricks' sum "
              f"{1e3 * np.median(sums):.3f} ms, ratio {np.median(sums / whole_s):.3f}")
    net = np.median(calls - empties, axis=1) * weights
    for (key, _), share in zip(kept, net, strict=True):
        if share >= 0.01 * np.median(whole_s):
            print(f"  {key[:12]} {'/'.join(dec.bricks[key].op_types):<20} x{counts[key]:<3} {1e3 * share:7.3f} ms "
                  f"{100 * share / np.median(whole_s):5.1f}%")


if __name__ == "__main__":
    main()
