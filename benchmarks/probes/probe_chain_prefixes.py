"""Probe: where along a model its chained bricks' sum parts from the model, by timing the model's
prefixes beside the chain.

Usage::

    python benchmarks/probes/probe_chain_prefixes.py MODEL [--cuts 20] [--seconds 40]

In one process: the whole model, its unique bricks prepared as a chain (``OrtBackend.prepare_chain``
with the model's data flow), and ``--cuts`` prefixes of the model (its occurrences up to a cut, every
tensor still needed after the cut an output; ``onnx.utils.Extractor``). For ``--seconds``, rounds of
the chain (:func:`~dlbricks.generators.rounds.time_rounds`, three rounds at a time) alternate with one
run of each prefix in random order. Printed per cut: the chain's cumulative sum up to it (each
occurrence its brick's call less its floor call), the prefix's median, their ratio, and the segment
since the last cut (its bricks' op types and their calls in us). A prefix's extra outputs cost what
the model does not, so a single segment is rough; the cumulative ratio says where the sum parts.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from onnx.utils import Extractor

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
    parser.add_argument("--cuts", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    model = build(args.model)
    graph = dlbricks.load_model(model, name=args.model)
    dec = dlbricks.decompose(graph)
    occurrences = sorted(dec.occurrences, key=lambda o: o.index)
    keys = round_order(dec)
    counts = dec.counts()
    models = [dec.in_context(key).to_onnx() for key in keys]
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    chain = backend.prepare_chain(models, config, dec.feeds(keys))
    kept = [(key, prepared) for key, prepared in zip(keys, chain, strict=True) if prepared is not None]
    bricks = [prepared for _, prepared in kept]
    readers: dict[str, list[int]] = {}
    for i, occ in enumerate(occurrences):
        for name in occ.inputs:
            readers.setdefault(name, []).append(i)
    outputs = {o.name for o in model.graph.output}
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    extractor = Extractor(model)
    cuts = sorted(set(np.linspace(0, len(occurrences) - 1, args.cuts + 1).astype(int).tolist()[1:]))
    prefixes = []
    for cut in cuts:
        live = [name for occ in occurrences[:cut + 1] for name in occ.outputs
                if name in outputs or any(r > cut for r in readers.get(name, []))]
        prefixes.append(backend.prepare(extractor.extract_model(inputs, list(dict.fromkeys(live))), config))
    for prepared in bricks:
        prepared.run()
        prepared.empty()
    rng = np.random.default_rng(0)
    prefix_s: list[list[float]] = [[] for _ in prefixes]
    calls, whole_s = [], []
    budget = replace(CHAINED_ROUNDS, min_rounds=3, max_rounds=3)
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        rounds = time_rounds(whole, bricks, [counts[k] for k, _ in kept], budget, rng=rng)
        empties = np.array([e if e is not None else np.zeros(rounds.count) for e in rounds.empties_s])
        calls.append(np.array(rounds.bricks_s) - empties)
        whole_s += rounds.whole_s
        for j in rng.permutation(len(prefixes)):
            t = time.perf_counter_ns()
            prefixes[j].run()
            prefix_s[j].append((time.perf_counter_ns() - t) / 1e9)
    net = dict(zip([k for k, _ in kept], np.median(np.concatenate(calls, axis=1), axis=1), strict=True))
    print(f"{args.model}: whole {1e3 * np.median(whole_s):.3f} ms over {len(whole_s)} rounds")
    last_sum = last_prefix = 0.0
    last_cut = -1
    for cut, samples in zip(cuts, prefix_s, strict=True):
        segment = occurrences[last_cut + 1:cut + 1]
        total = sum(net.get(o.signature, 0.0) for o in occurrences[:cut + 1])
        prefix = float(np.median(samples))
        ops = ",".join(f"{'/'.join(dec.bricks[o.signature].op_types)}:{1e6 * net.get(o.signature, 0.0):.0f}"
                       for o in segment)
        gap = prefix - last_prefix
        print(f"  through {cut:4d}: chain {1e3 * total:8.3f} prefix {1e3 * prefix:8.3f} ms, ratio {total / prefix:.3f};"
              f" segment {1e3 * (total - last_sum):.3f} vs {1e3 * gap:.3f} ms ({ops})")
        last_sum, last_prefix, last_cut = total, prefix, cut


if __name__ == "__main__":
    main()
