"""Probe: what does a brick's first call in a chained round cost beyond a second call right after it?

Usage::

    python benchmarks/probes/probe_first_call.py MODEL [--rounds 60] [--top 12]

MODEL is a zoo model name. In one process (no worker), the model whole and its unique bricks
prepared as a chain (``OrtBackend.prepare_chain`` by the model's data flow, one thread,
optimizations off). Each round: an untimed and a timed whole run, an untimed pass of the chain, then
each brick in the chain's order called twice, its empty model between the two calls. Printed: the
bricks' first calls less their empty models', times their occurrences, over the whole model, and the
same for the second calls; then the bricks whose first call costs most beyond their second (times
their occurrences), with the medians of each call and of the empty model.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import dlbricks
from dlbricks.benchmarks_db.rounds import round_order
from dlbricks.generators import OrtConfig
from dlbricks.generators.ort import OrtBackend
from dlbricks.model_zoo import build


def _us(call: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - start) / 1e3


def probe(name: str, rounds: int, top: int) -> None:
    model = build(name)
    dec = dlbricks.decompose(dlbricks.load_model(model, name=name))
    keys, counts = round_order(dec), dec.counts()
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    chain = backend.prepare_chain([dec.in_context(k).to_onnx() for k in keys], config, dec.feeds(keys))
    kept = [(k, p) for k, p in zip(keys, chain, strict=True) if p is not None]
    first: dict[str, list[float]] = {k: [] for k, _ in kept}
    second: dict[str, list[float]] = {k: [] for k, _ in kept}
    empty: dict[str, list[float]] = {k: [] for k, _ in kept}
    whole_us = []
    for _ in range(rounds):
        whole.run()
        whole_us.append(_us(whole.run))
        for _, p in kept:
            p.run()
            p.empty()
        for k, p in kept:
            first[k].append(_us(p.run))
            empty[k].append(_us(p.empty))
            second[k].append(_us(p.run))
    med = {k: (float(np.median(first[k])), float(np.median(second[k])), float(np.median(empty[k]))) for k, _ in kept}
    w = float(np.median(whole_us))
    firsts = sum(counts[k] * (f - e) for k, (f, _, e) in med.items())
    seconds = sum(counts[k] * (s - e) for k, (_, s, e) in med.items())
    print(f"{name}: whole {w / 1e3:.2f} ms; first calls less empties {firsts / w:.3f} of it, second calls {seconds / w:.3f}")
    for k in sorted(med, key=lambda k: -counts[k] * (med[k][0] - med[k][1]))[:top]:
        f, s, e = med[k]
        brick = dec.bricks[k]
        print(f"  {k[:12]} {brick.op_type:<18} x{counts[k]:<3} first {f:7.1f} us, second {s:7.1f} us, "
              f"empty {e:5.1f} us; weights {brick.constant_bytes / 1024:.0f} KB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    probe(args.model, args.rounds, args.top)


if __name__ == "__main__":
    main()
