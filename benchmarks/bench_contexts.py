"""What measuring a brick again in each model's own context changes, paired on one database.

Models are benched in order into one fresh database with ``contexts="reuse"`` (every stored brick
stands for every model: a brick shared with an earlier model keeps the measurement taken in that
model's context) and each is measured whole once (:func:`dlbricks.estimator.validate`). Then the
same database is filled again with ``contexts="measure"``: only the bricks whose stored context
differs from their context in a later model are measured, in that model's context. Each model's
estimate before and after is set against the same whole-model measurement, so the machine's drift
between the two is in the bricks measured again only. Prints per model: bricks measured again,
their seconds, the error before and after, and whether the bounds hold after.

The default models are two stacks of 12 MatMul (128 x 768 x 768) -> Relu layers, built here: one
with a weight per layer, then one whose layers all read one weight (cross-layer sharing, as in
ALBERT), which reuses every brick of the first. ``--models`` takes ONNX files or zoo names instead,
in the order they are benched.

Usage: ``python benchmarks/bench_contexts.py [--models A.onnx B.onnx ...] [--budget quick|default]
[--keep DIR]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dlbricks import ModelGraph, decompose, load_model
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.estimator import estimate, validate
from dlbricks.generators import Budget, OrtConfig
from dlbricks.model_zoo import build


def matmul_stack(shared: bool, layers: int = 12, rows: int = 128, hidden: int = 768) -> onnx.ModelProto:
    """``layers`` of MatMul -> Relu, every MatMul reading one weight (``shared``) or its own."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(layers):
        name = "w0" if shared else f"w{i}"
        if not shared or i == 0:
            weight = (rng.standard_normal((hidden, hidden)) * 0.05).astype(np.float32)
            inits.append(numpy_helper.from_array(weight, name))
        nodes += [helper.make_node("MatMul", [x, name], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "shared_stack" if shared else "distinct_stack",
                              [helper.make_tensor_value_info("x", f32, [rows, hidden])],
                              [helper.make_tensor_value_info(x, f32, [rows, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def load(spec: str, folder: Path) -> ModelGraph:
    """An ONNX file, a zoo name, or ``distinct_stack``/``shared_stack`` (built here)."""
    if spec in ("distinct_stack", "shared_stack"):
        path = folder / f"{spec}.onnx"
        onnx.save(matmul_stack(spec == "shared_stack"), path)
        return load_model(path)
    if Path(spec).exists():
        return load_model(spec)
    return load_model(build(spec), name=spec)


def run(specs: list[str], budget: Budget, folder: Path) -> None:
    graphs = [load(s, folder) for s in specs]
    decs = [decompose(g) for g in graphs]
    cfg = OrtConfig()
    with Store(folder / "contexts.db") as store:
        first = populate(store, decs, [cfg], BenchOptions(budget=budget, contexts="reuse"))
        whole = {g.name: validate(g, store, config=cfg, system=first.system) for g in graphs}
        t0 = time.monotonic()
        again = populate(store, decs, [cfg], BenchOptions(budget=budget, contexts="measure"))
        spent = time.monotonic() - t0
        print(f"bricks {first.measured} measured in {first.wall_s:.1f} s; {again.in_context} measured again in "
              f"a later model's context in {spent:.1f} s")
        print(f"{'model':<28} {'again':>5} {'measured ms':>11} {'before':>8} {'after':>8} {'bounds':>6}")
        for g, dec in zip(graphs, decs):
            v = whole[g.name]
            after = estimate(g, store, config=cfg, system=first.system)
            measured = v.measured.median_s or float("nan")
            n = len(store.measurements.in_context(dec.model_key, system=first.system))
            held = after.lower_bound_s <= measured and (after.roofline_s or 0.0) <= after.lower_bound_s
            print(f"{g.name:<28} {n:>5} {1e3 * measured:>11.3f} {100 * v.error:>+7.1f}% "
                  f"{100 * (after.sequential_s / measured - 1):>+7.1f}% {'yes' if held else 'NO':>6}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["distinct_stack", "shared_stack"])
    parser.add_argument("--budget", choices=("quick", "default"), default="default")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the models and database in this folder.")
    args = parser.parse_args(argv)
    budget = Budget.quick() if args.budget == "quick" else Budget()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args.models, budget, args.keep)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run(args.models, budget, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
