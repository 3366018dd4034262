"""Do buffer placements make a brick's median reproducible? Spread of medians over preparations.

For a few small memory-bound bricks of the harness benchmark's set (and one convolution), prepares
the brick ``--preparations`` times in this process and measures it once per preparation, with the
harness in one buffer placement (``Budget(placements=1)``) and spread over 4 and 16; prints the
coefficient of variation of the medians for each. Same process, interleaved per brick, 1 thread.

Usage: ``python benchmarks/bench_placements.py [--preparations 8]``
"""

from __future__ import annotations

import argparse
import statistics

from bench_harness import zoo_bricks

from dlbricks.generators import Budget, OrtConfig, collect_system_info
from dlbricks.generators.harness import time_calls
from dlbricks.generators.ort import OrtBackend

BRICKS = (3, 26, 10, 15)  # BatchNormalization, Relu, Clip, Conv in zoo_bricks() order
PLACEMENTS = (1, 4, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preparations", type=int, default=8)
    args = parser.parse_args()
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, {info.physical_cores} cores, onnxruntime {info.onnxruntime_version}")
    bricks = zoo_bricks()
    backend, config = OrtBackend(), OrtConfig()
    for index in BRICKS:
        brick = bricks[index]
        model = brick.to_onnx()
        medians: dict[int, list[float]] = {p: [] for p in PLACEMENTS}
        for _ in range(args.preparations):
            for placements in PLACEMENTS:
                prepared = backend.prepare(model, config)
                timing = time_calls(prepared, Budget(placements=placements))
                prepared.close()
                medians[placements].append(statistics.median(timing.samples_s))
        cv = {p: statistics.stdev(m) / statistics.mean(m) for p, m in medians.items()}
        print(f"#{index} {brick.op_type} {brick.outputs[0].shape}: median "
              f"{statistics.median(medians[1]) * 1e6:.2f} us; cv of medians over {args.preparations} "
              "preparations: " + ", ".join(f"{p} placement(s) {100 * c:.2f}%" for p, c in cv.items()))


if __name__ == "__main__":
    main()
