"""Does a model's time depend on its attention mask? Per op type, with the seeded mask and with ones.

dlbricks measures a model whole on seeded random inputs (:func:`dlbricks.generators.inputs.random_inputs`):
an integer attention mask comes out 0 or 1 at random, so half the positions are masked, and a
torch export adds float32's least value (-3.4e38) to those scores before its Softmax. This probe runs
each model in onnxruntime's profiler (1 thread, 30 runs, the level given) twice, on those inputs and
on the same inputs with every input whose name holds "mask" set to ones, and prints each op type's
kernel time a run side by side, then each whole run's median timed apart (IOBinding-free
``session.run``, 40 runs each, interleaved).

Usage: ``python benchmarks/probes/probe_masked_softmax.py MODEL.onnx [...] [--opt-level disable|all]``
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict

import numpy as np
import onnx
import onnxruntime as ort

from dlbricks.generators.inputs import random_inputs
from dlbricks.ortutil import session_options

RUNS = 30


def op_times(path: str, feeds: dict[str, np.ndarray], opt_level: str) -> dict[str, float]:
    """Microseconds a run per op type, from onnxruntime's profiler over :data:`RUNS` runs."""
    with tempfile.TemporaryDirectory() as tmp:
        options = session_options(opt_level, 1, profile_prefix=os.path.join(tmp, "profile"))
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        for _ in range(RUNS):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    times: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["args"]["op_name"]] += e["dur"] / RUNS
    return dict(times)


def whole_medians(path: str, inputs: dict[str, dict[str, np.ndarray]], opt_level: str) -> dict[str, float]:
    """Milliseconds of a whole run on each set of inputs, medians of 40 runs taken in turn."""
    session = ort.InferenceSession(path, session_options(opt_level, 1), providers=["CPUExecutionProvider"])
    samples: dict[str, list[float]] = {name: [] for name in inputs}
    for _ in range(40):
        for name, feeds in inputs.items():
            session.run(None, feeds)
            start = time.perf_counter()
            session.run(None, feeds)
            samples[name].append(time.perf_counter() - start)
    return {name: float(np.median(v)) * 1e3 for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--opt-level", default="disable", choices=["disable", "all"])
    args = parser.parse_args()
    for path in args.models:
        seeded = random_inputs(onnx.load(path))
        ones = {k: (np.ones_like(v) if "mask" in k.lower() else v) for k, v in seeded.items()}
        if all(a is b for a, b in zip(seeded.values(), ones.values(), strict=True)):
            print(f"{path}: no input named like a mask")
            continue
        masked, unmasked = op_times(path, seeded, args.opt_level), op_times(path, ones, args.opt_level)
        print(f"{path} ({args.opt_level}): op type, us a run with the seeded mask, with a mask of ones")
        for op in sorted(masked, key=lambda o: -masked[o])[:12]:
            print(f"  {op:26s} {masked[op]:9.1f} {unmasked.get(op, 0.0):9.1f}")
        whole = whole_medians(path, {"seeded": seeded, "ones": ones}, args.opt_level)
        print(f"  whole run: {whole['seeded']:.3f} ms with the seeded mask, {whole['ones']:.3f} ms with ones")


if __name__ == "__main__":
    main()
