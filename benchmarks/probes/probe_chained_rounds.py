"""Exploratory probe for the benchmarking-cost issue: a model's bricks measured in chained rounds,
one run of each brick a round, with none of dlbricks' corrections, in three variants.

Usage::

    python benchmarks/probes/probe_chained_rounds.py MODEL [--rounds 40] [--floor shared|own]
        [--outputs own|slots]

One onnxruntime session per unique brick (one thread, optimizations off, no copies, no brick run
before it), each brick's first input bound to the output buffer of the brick that writes it in the
model, where shapes match, so that a round of the bricks in the model's order writes each input just
before its reader reads it, as the model does, and the other bricks of the round pass through the
caches between two runs of a brick, as the model's other layers do. Each round: the whole model once
and each brick once (whole first or bricks first at random), each run timed alone with
``perf_counter_ns``, each followed by one run of a floor model, whose time is taken off the brick's:

- ``--floor shared``: one floor model for every brick (it stays warm: about 2 us a call here);
  ``--floor own``: a floor model of its own for each brick, which meets the session state a single
  call among other sessions meets (about 8 us a call here).
- ``--outputs own``: each brick writes an output buffer of its own, last touched a round ago;
  ``--outputs slots``: first outputs go to three shared buffers in turn, never the one the brick
  reads, and a one-node Relu writes over its input, as the model's memory planner lets a layer
  write the space of a tensor that has just died.

Printed: the time to prepare the sessions, the per-round ratio of the bricks' sum (each brick times
its occurrences, less its floor run, plus one floor run for the model's own call) to the whole run
(median and its 95% interval over the rounds), and the time the bricks' runs took against the
whole runs'. ``--floor own --outputs slots`` is what ``dlbricks evaluate --rounds chained`` does
(``prepare_chain`` of the onnxruntime backend), before the estimator's corrections.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort
from onnx import helper

import dlbricks
from dlbricks.generators.inputs import random_inputs
from dlbricks.generators.items import floor_model
from dlbricks.generators.stats import median_ci
from dlbricks.model_zoo import build

SLOTS = 3


def _options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return options


class Bound:
    """A session with its inputs and outputs bound once (the outputs allocated from a first run, or
    the first one over ``out``, a view of a shared buffer)."""

    def __init__(self, model: object, feeds_from: dict[str, ort.OrtValue] | None = None) -> None:
        self.session = ort.InferenceSession(model.SerializeToString(), _options(),  # type: ignore[attr-defined]
                                            providers=["CPUExecutionProvider"])
        names = [i.name for i in self.session.get_inputs()]
        arrays = random_inputs(model, names)  # type: ignore[arg-type]
        self.first = self.session.run(None, arrays)
        self.binding = self.session.io_binding()
        self.values = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in arrays.items()}
        self.arrays = arrays
        if feeds_from:
            self.values.update(feeds_from)
        for n, v in self.values.items():
            self.binding.bind_ortvalue_input(n, v)
        self.kinds = [(tuple(a.shape), a.dtype) for a in self.first]
        self.outputs = [ort.OrtValue.ortvalue_from_numpy(np.empty_like(a)) for a in self.first]
        self.slot: int | None = None
        self._bind_outputs()
        self.run = lambda: self.session.run_with_iobinding(self.binding)

    def _bind_outputs(self) -> None:
        for meta, v in zip(self.session.get_outputs(), self.outputs, strict=True):
            self.binding.bind_ortvalue_output(meta.name, v)

    def write_to(self, value: ort.OrtValue, slot: int | None, keep: np.ndarray) -> None:
        self.outputs[0], self.slot, self.keep = value, slot, keep
        self._bind_outputs()


def _timed(run: object) -> int:
    t0 = time.perf_counter_ns()
    run()  # type: ignore[operator]
    return time.perf_counter_ns() - t0


def _run_bricks(runs: list, empties: list, times: np.ndarray, floors: np.ndarray) -> None:
    """Each brick once in order, timed alone, each followed by one timed run of its floor model."""
    clock = time.perf_counter_ns
    for i, run in enumerate(runs):
        t0 = clock()
        run()
        t1 = clock()
        empties[i]()
        floors[i] = clock() - t1
        times[i] = t1 - t0


def _chain(dec: dlbricks.Decomposition, keys: list[str], slots: bool) -> tuple[dict[str, Bound], int]:
    """Each brick's session, its first input bound to its writer's first output where they match."""
    bricks: dict[str, Bound] = {}
    chained = 0
    buffers: list[np.ndarray] = []
    pick = 0
    for key in keys:
        model = dec.bricks[key].to_onnx()
        prev = dec.previous(key)
        feeds, writer = None, None
        if prev is not None and prev.signature in bricks:
            writer = bricks[prev.signature]
            weights = {t.name for t in model.graph.initializer}
            first_input = next((i for i in model.graph.input if i.name not in weights), None)
            if first_input is not None:
                tensor = first_input.type.tensor_type
                kind = (tuple(d.dim_value for d in tensor.shape.dim), helper.tensor_dtype_to_np_dtype(tensor.elem_type))
                if kind == writer.kinds[0]:
                    feeds = {first_input.name: writer.outputs[0]}
                    chained += 1
                else:
                    writer = None
        brick = bricks[key] = Bound(model, feeds)
        if not slots or not brick.first or brick.first[0].dtype != np.float32:
            continue
        if feeds and writer is not None and dec.bricks[key].op_types == ("Relu",) and brick.kinds[0] == writer.kinds[0]:
            brick.write_to(writer.outputs[0], writer.slot, writer.keep if writer.slot is not None else writer.first[0])
            continue
        if not buffers:
            biggest = max(dec.bricks[k].outputs[0].nbytes for k in keys)
            buffers = [np.zeros(biggest // 4 + 16, dtype=np.float32) for _ in range(SLOTS)]
        pick = (pick + 1) % SLOTS
        if feeds and writer is not None and pick == writer.slot:
            pick = (pick + 1) % SLOTS
        n = brick.first[0].size
        view = buffers[pick][:n].reshape(brick.first[0].shape)
        brick.write_to(ort.OrtValue.ortvalue_from_numpy(view), pick, view)
    return bricks, chained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--floor", choices=("shared", "own"), default="shared")
    parser.add_argument("--outputs", choices=("own", "slots"), default="own")
    args = parser.parse_args()
    graph = dlbricks.load_model(build(args.model), name=args.model)
    dec = dlbricks.decompose(graph)
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    counts = np.asarray([dec.counts()[k] for k in keys], dtype=np.float64)
    start = time.perf_counter()
    whole = Bound(graph.to_onnx())
    bricks, chained = _chain(dec, keys, args.outputs == "slots")
    shared = Bound(floor_model())
    empties = ([Bound(floor_model()).run for _ in keys] if args.floor == "own" else [shared.run] * len(keys))
    prepared = time.perf_counter() - start
    rng = np.random.default_rng(0)
    runs = [b.run for b in bricks.values()]
    for r in runs + empties:  # one untimed pass
        r()
    whole.run()
    ratios, whole_ns, bricks_ns, floor_ns = [], [], [], []
    times = np.empty(len(runs))
    floors = np.empty(len(runs))
    for _ in range(args.rounds):
        if rng.random() < 0.5:
            w = _timed(whole.run)
            _run_bricks(runs, empties, times, floors)
        else:
            _run_bricks(runs, empties, times, floors)
            w = _timed(whole.run)
        floor = float(np.median(floors))
        estimate = float(np.maximum(times - floors, 0.0) @ counts) + floor
        ratios.append(estimate / w)
        whole_ns.append(w)
        bricks_ns.append(float(times.sum() + floors.sum()))
        floor_ns.append(floor)
    r = np.asarray(ratios)
    ci = median_ci(r)
    print(f"{args.model} (--floor {args.floor} --outputs {args.outputs}): {len(keys)} unique bricks, {chained} "
          f"chained to the brick before them; sessions prepared in {prepared:.2f} s "
          f"({1e3 * prepared / len(keys):.1f} ms a brick)")
    print(f"bricks' sum over whole, per round: median {np.median(r):.3f} "
          f"[{ci[0]:.3f}, {ci[1]:.3f}] over {args.rounds} rounds; whole {np.median(whole_ns) / 1e6:.3f} ms; "
          f"floor run {np.median(floor_ns) / 1e3:.1f} us")
    print(f"time in a round: bricks and floor runs {np.median(bricks_ns) / 1e6:.3f} ms against the whole run "
          f"{np.median(whole_ns) / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
