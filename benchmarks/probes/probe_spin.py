"""Do one worker's threads slow the next worker's runs? The pause between multi-threaded workers.

With spinning on, onnxruntime's pool threads keep a core busy for a while after a run returns. A
paired design (``dlbricks evaluate``) alternates two workers: a model held whole in one, its bricks
in another. This probe measures both sides of that:

1. how much CPU an idle multi-threaded session burns in the first milliseconds after its last run;
2. a model held in one worker and timed in short samples (the whole model's paired samples), each
   right after a short run of another worker at the same threads: with the pause a Runner leaves
   (the backend's ``idle_spin_s``) and without it, interleaved.

Usage: ``python benchmarks/probes/probe_spin.py [--model squeezenet1_1] [--threads 2] [--rounds 10]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

from dlbricks import load_model
from dlbricks.generators import Budget, OrtConfig, collect_system_info
from dlbricks.generators import runner as _runner
from dlbricks.generators.runner import Runner
from dlbricks.model_zoo import build

#: A short sample of a held model: no warm-up beyond one call, then runs until 20 ms have passed.
SAMPLE = Budget(warmup_time=0.0, min_time=0.02, min_runs=1, max_time=1.0, rel_ci=1.0)


def idle_cpu_after_run(model: bytes, threads: int, windows_s: list[float]) -> list[tuple[float, float]]:
    """CPU seconds this process burns in each idle window right after 20 runs of ``model``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    feeds = {first.name: np.random.default_rng(0).random(first.shape, dtype=np.float32)}
    burned = []
    for window in windows_s:
        for _ in range(20):
            session.run(None, feeds)
        cpu, start = time.process_time(), time.perf_counter()
        while time.perf_counter() - start < window:
            time.sleep(0.0005)
        burned.append((window, time.process_time() - cpu))
    return burned


def paired_samples(name: str, threads: int, rounds: int) -> dict[str, list[float]]:
    """Medians (ms) of ``name`` held in one worker, each sample right after a run in another worker,
    with the Runner's pause and without it (alternating)."""
    graph = load_model(build(name), name=name)
    config = OrtConfig(intra_op_num_threads=threads)
    pause = _runner._LAST_REPLY.sleep
    medians: dict[str, list[float]] = {"pause": [], "no pause": []}
    with Runner(config=config, budget=SAMPLE) as held, Runner(config=config, budget=SAMPLE) as other:
        key = held.hold(graph).key
        other_key = other.hold(graph).key
        for _ in range(rounds):
            for mode in medians:
                _runner._LAST_REPLY.sleep = pause if mode == "pause" else (lambda s: None)
                other.again(other_key)
                medians[mode].append(1e3 * (held.again(key).median_s or float("nan")))
    _runner._LAST_REPLY.sleep = pause
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="squeezenet1_1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, {info.logical_cores} logical cores; onnxruntime {ort.__version__}; "
          f"{args.model}, {args.threads} threads")
    model = build(args.model).SerializeToString()
    for window, cpu in idle_cpu_after_run(model, args.threads, [0.005, 0.01, 0.02, 0.05, 0.1, 0.5]):
        print(f"idle {1e3 * window:5.0f} ms after the last run: {1e3 * cpu:5.1f} ms of CPU")
    medians = paired_samples(args.model, args.threads, args.rounds)
    for mode, values in medians.items():
        print(f"held model right after another worker's run, {mode:8s}: median of medians "
              f"{statistics.median(values):.3f} ms, range {min(values):.3f}-{max(values):.3f} ms")


if __name__ == "__main__":
    main()
