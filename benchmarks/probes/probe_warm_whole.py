"""Probe: does an untimed whole run before the timed one (``RoundsBudget.warm_whole``) change the
timed run of a model far larger than the last-level cache?

Usage::

    python benchmarks/probes/probe_warm_whole.py MODEL [MODEL ...] [--seconds 40]

MODEL is a zoo model name. In one process (no worker), one onnxruntime session (one thread,
optimizations off) times the model whole after one of two things, in random order each pair: a read
of a block twice the last-level cache ("sweep", what a round's bricks leave at most), or an untimed
run of the model itself ("whole", what the warm run gives). Printed per model: its footprint
(``Decomposition.footprint_bytes``) in MiB beside the cache, the median of each, and the median of
the paired ratios (sweep over whole): 1.00 where the warm run changes nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort

import dlbricks
from dlbricks.generators.system import last_level_cache_bytes
from dlbricks.model_zoo import build


def _session(model: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _feeds(session: ort.InferenceSession, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (np.zeros(shape, dtype=np.int64) if "int" in i.type
                         else rng.standard_normal(shape).astype(np.float32))
    return feeds


def probe(name: str, seconds: float, block: np.ndarray, rng: np.random.Generator) -> str:
    proto = build(name)
    dec = dlbricks.decompose(dlbricks.load_model(proto, name=name))
    session = _session(proto.SerializeToString())
    feeds = _feeds(session, rng)

    def timed() -> float:
        start = time.perf_counter_ns()
        session.run(None, feeds)
        return (time.perf_counter_ns() - start) / 1e6

    for _ in range(3):
        session.run(None, feeds)
    swept: list[float] = []
    warmed: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end or len(swept) < 15:
        for kind in rng.permutation(2):
            if kind == 0:
                block.sum()
                swept.append(timed())
            else:
                session.run(None, feeds)
                warmed.append(timed())
    a, b = np.asarray(swept), np.asarray(warmed)
    return (f"{name}: footprint {dec.footprint_bytes() / 2**20:.0f} MiB (cache {block.nbytes / 2**21:.1f} MiB); "
            f"after sweep {np.median(a):.2f} ms, after whole {np.median(b):.2f} ms; paired ratio "
            f"{np.median(a / b):.3f} ({len(a)} pairs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    block = np.ones(2 * last_level_cache_bytes() // 8, dtype=np.float64)
    for name in args.models:
        print(probe(name, args.seconds, block, rng), flush=True)


if __name__ == "__main__":
    main()
