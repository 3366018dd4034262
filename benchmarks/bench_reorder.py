"""What does one NCHWc layout reorder cost on this machine?

At ``graph_optimization_level="all"`` onnxruntime's CPU provider runs convolutions and pools in the
blocked NCHWc layout and inserts ReorderInput (NCHW -> NCHWc) and ReorderOutput (NCHWc -> NCHW)
nodes where the blocked region of a model begins and ends. ``dlbricks.fusion.fusion_groups``
counts them per model (``FusionPlan.reorders``, ``FusionPlan.reorder_tensors``): their cost belongs
to the model, once per run, not to any brick. This script measures that cost with the project's harness, on
one-node models in the ``com.microsoft.nchwc`` domain over the activation sizes of typical CNNs, and
prints per reorder: the median with the floor (an empty model's per-call cost) subtracted, and the
bandwidth it implies (bytes read + written).

Usage: ``python benchmarks/bench_reorder.py [--quick] [--threads N] [--cache warm|cold]``
"""

from __future__ import annotations

import argparse

import onnx
from onnx import TensorProto, helper

from dlbricks.fusion import NCHWC_DOMAIN
from dlbricks.generators import Budget, OrtConfig, collect_system_info
from dlbricks.generators.floor import measure_floor
from dlbricks.generators.harness import measure_model
from dlbricks.generators.ort import OrtBackend

#: (channels, height and width) of typical activations: ResNet-50 stages, MobileNet, VGG.
SHAPES = ((64, 112), (256, 56), (512, 28), (1024, 14), (2048, 7), (32, 112), (96, 56), (512, 14))
#: MLAS pads NCHWc channels to its block size: 16 with AVX-512, 8 with AVX2 (both divide these).
BLOCK = 16


def reorder_model(op: str, channels: int, hw: int) -> onnx.ModelProto:
    """One ReorderInput or ReorderOutput on a (1, channels, hw, hw) float tensor, or both chained
    (``op="ReorderInput+ReorderOutput"``)."""
    shape = [1, channels, hw, hw]
    padded = [1, -(-channels // BLOCK) * BLOCK, hw, hw]
    nodes, name = [], "x"
    for i, kind in enumerate(op.split("+")):
        attrs = {"channels": channels} if kind == "ReorderOutput" else {}
        nodes.append(helper.make_node(kind, [name], [f"y{i}"], domain=NCHWC_DOMAIN, **attrs))
        name = f"y{i}"
    first_in = padded if op.startswith("ReorderOutput") else shape
    graph = helper.make_graph(
        nodes, op.replace("+", "_"),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, first_in)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(NCHWC_DOMAIN, 1)], ir_version=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="use Budget.quick() (smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="intra_op_num_threads (default 1)")
    parser.add_argument("--cache", default="warm", choices=["warm", "cold", "cold-weights"],
                        help="cache state (default warm: in a model the input was just written)")
    args = parser.parse_args()
    budget = Budget.quick() if args.quick else Budget()
    # "disable": the optimizer would cancel a ReorderInput -> ReorderOutput pair
    config = OrtConfig(intra_op_num_threads=args.threads, graph_optimization_level="disable",
                       cache=args.cache)
    backend = OrtBackend()
    info = collect_system_info()
    print(f"machine: {info.cpu_model}, L3 {dict(info.cache_bytes).get('L3', 0) >> 20} MiB, "
          f"onnxruntime {info.onnxruntime_version}; threads {args.threads}, cache {args.cache}")
    floor = measure_floor(backend, config, budget).median_s
    print(f"floor (empty model, per call): {floor * 1e6:.2f} us")
    print(f"{'op':<28}{'tensor':>20}{'MiB':>8}{'median us':>12}{'- floor us':>12}{'GB/s':>8}")
    for op in ("ReorderInput", "ReorderOutput", "ReorderInput+ReorderOutput"):
        for channels, hw in SHAPES:
            model = reorder_model(op, channels, hw)
            m, _ = measure_model(model, f"{op}-{channels}x{hw}", backend, config, budget)
            if not m.ok:
                print(f"{op:<28}{f'1x{channels}x{hw}x{hw}':>20}  FAILED: {m.error}")
                continue
            net = max(m.median_s - floor, 1e-9)
            mib = channels * hw * hw * 4 / 2**20
            moved = 2 * mib * 2**20 * op.count("Reorder")  # each reorder reads and writes it once
            print(f"{op:<28}{f'1x{channels}x{hw}x{hw}':>20}{mib:>8.2f}{m.median_s * 1e6:>12.2f}"
                  f"{net * 1e6:>12.2f}{moved / net / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
