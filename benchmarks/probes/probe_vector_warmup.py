"""Probe: is a chained brick's first call slow because of its data, or because the core's vector units
have powered down since the last vector kernel?

Usage::

    python benchmarks/probes/probe_vector_warmup.py MODEL [--rounds 25]

MODEL is a zoo model name. In one process (no worker), the model whole and its unique bricks
prepared as a chain (``OrtBackend.prepare_chain`` by the model's data flow, one thread,
optimizations off). Each round runs every design below once, in an order drawn at random: an
untimed and a timed whole run, an untimed pass of the chain, then each brick called once (timed) and
its empty model after it, with something run untimed just before each call:

- ``nothing``: the chain as it was before ``ready`` (measuring method 12);
- ``matmul``: a 16 x 16 MatMul session of onnxruntime's (the chain's ``ready``, method 13): a few
  microseconds of the same vector kernels, touching 3 KiB;
- ``matmul+200us``, ``matmul+1ms``: the same, then a busy wait of that long with no vector work;
- ``numpy``: a 16 x 16 float32 product by numpy's BLAS (other code, the same vector units);
- ``wait200us``: the busy wait alone.

Printed per design: the bricks' calls less their empty models', times their occurrences, over the
whole model (the raw ratio, before the estimator's corrections), and the medians of the heaviest
bricks' calls.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

import dlbricks
from dlbricks.benchmarks_db.rounds import round_order
from dlbricks.generators import OrtConfig
from dlbricks.generators.items import vector_warmup_model
from dlbricks.generators.ort import OrtBackend
from dlbricks.model_zoo import build


def _ns(call: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    call()
    return time.perf_counter_ns() - start


def _wait(us: float) -> Callable[[], None]:
    def wait() -> None:
        end = time.perf_counter_ns() + int(us * 1e3)
        while time.perf_counter_ns() < end:
            pass
    return wait


def probe(name: str, rounds: int) -> None:
    model = build(name)
    dec = dlbricks.decompose(dlbricks.load_model(model, name=name))
    keys, counts = round_order(dec), dec.counts()
    config, backend = OrtConfig(), OrtBackend()
    whole = backend.prepare(model, config)
    chain = backend.prepare_chain([dec.in_context(k).to_onnx() for k in keys], config, dec.feeds(keys))
    kept = [(k, p) for k, p in zip(keys, chain, strict=True) if p is not None]
    matmul = backend.prepare(vector_warmup_model(), replace(config, cache="warm"), timed=False).run
    small = np.random.default_rng(0).random((16, 16), dtype=np.float32)
    wait200, wait1000 = _wait(200), _wait(1000)
    designs: dict[str, Callable[[], object] | None] = {
        "nothing": None, "matmul": matmul, "matmul+200us": lambda: (matmul(), wait200()),
        "matmul+1ms": lambda: (matmul(), wait1000()), "numpy": lambda: small @ small, "wait200us": wait200}
    calls = {d: {k: [] for k, _ in kept} for d in designs}
    empties = {d: {k: [] for k, _ in kept} for d in designs}
    whole_ns: list[int] = []
    order = list(designs)
    rng = np.random.default_rng(1)
    for _ in range(rounds):
        rng.shuffle(order)
        for design in order:
            whole.run()
            whole_ns.append(_ns(whole.run))
            for _, p in kept:
                p.run()
                p.empty()
            before = designs[design]
            for k, p in kept:
                if before is not None:
                    before()
                calls[design][k].append(_ns(p.run))
                empties[design][k].append(_ns(p.empty))
    w = float(np.median(whole_ns))
    heaviest = sorted(kept, key=lambda kp: -counts[kp[0]] * np.median(calls["nothing"][kp[0]]))[:4]
    print(f"{name}: whole {w / 1e6:.2f} ms; bricks' calls less their empty models' over the whole model, "
          f"and the heaviest bricks' calls (us)")
    for design in designs:
        ratio = sum(counts[k] * (np.median(calls[design][k]) - np.median(empties[design][k])) for k, _ in kept) / w
        tops = " ".join(f"{dec.bricks[k].op_type} x{counts[k]} {np.median(calls[design][k]) / 1e3:.0f}"
                        for k, _ in heaviest)
        print(f"  {design:<13} {ratio:.3f}   {tops}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    probe(args.model, args.rounds)


if __name__ == "__main__":
    main()
