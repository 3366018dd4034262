"""The launch queue on recorded data: an H200 run's stored times give back its printed estimates.

``data/h200_fused_all_run1_excerpt.json`` holds the stored measurements of two models of the run
``dlbricks evaluate --device cuda --opt-level all --granularity fused`` of 2026-11-28 (docs/gpu.md),
written by ``python benchmarks/explain_gpu_records.py h200_fused_all_run1_2026-11-28.db --excerpt
tests/data/h200_fused_all_run1_excerpt.json --model squeezenet1_1 --model bert_base --printed
h200_fused_all_run1.txt``. The estimator must compose them into the estimates that run printed: a
regression test on recorded times, not a fit to the whole models' measurements.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import networkx as nx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlbricks import Brick, Decomposition
from dlbricks.decomposition import Occurrence
from dlbricks.estimator.estimation import estimate_decomposition, issue_time
from dlbricks.generators import Measurement, get_backend
from tests._scripts import load_script

EXCERPT = Path(__file__).parent / "data" / "h200_fused_all_run1_excerpt.json"


def _records() -> dict[str, Any]:
    return json.loads(EXCERPT.read_text())


def _model(data: dict[str, Any], name: str) -> tuple[Decomposition, dict[str, Measurement], dict[str, Any]]:
    """The recorded model ``name`` as a decomposition of stand-in bricks (their signatures and op
    types: all that the launch queue reads of them) and its bricks' stored measurements."""
    config = data["configuration"]
    keys = [b["measurement"]["key"] for b in data["bricks"]]
    model = next(m for m in data["models"] if m["name"] == name)
    used = {keys[i] for i in model["occurrences"]}
    bricks = {b["measurement"]["key"]: b for b in data["bricks"] if b["measurement"]["key"] in used}
    stand_ins = {sig: Brick(sig, model["granularity"], tuple(b["op_types"]), (), (), (), (), ())
                 for sig, b in bricks.items()}
    occurrences = tuple(Occurrence(i, keys[k], (f"n{i}",)) for i, k in enumerate(model["occurrences"]))
    dag = nx.DiGraph()
    dag.add_nodes_from((o.index, {"signature": o.signature}) for o in occurrences)
    dag.add_edges_from(tuple(edge) for edge in model["edges"])
    dec = Decomposition(name, name, model["granularity"], (), stand_ins, occurrences, dag)
    measured = {sig: Measurement.from_dict({**b["measurement"], "backend": config["backend"],
                                            "config": config["config"]})
                for sig, b in bricks.items()}
    return dec, measured, model


def _views(dec: Decomposition) -> set[str]:
    ops = get_backend("onnxruntime").view_ops
    return {sig for sig, b in dec.bricks.items() if set(b.op_types) <= ops}


@pytest.mark.parametrize("name", ["squeezenet1_1", "bert_base"])
def test_the_launch_queue_gives_back_the_recorded_h200_estimates(name: str) -> None:
    dec, measured, model = _model(_records(), name)
    est = estimate_decomposition(dec, measured, config_id="h200", views=_views(dec))
    assert est.sequential_s == pytest.approx(model["estimate_s"], rel=1e-12)
    assert round(1e3 * est.sequential_s, 3) == model["printed_estimate_ms"]  # as the GPU run printed it
    assert est.parallel_s == pytest.approx(model["parallel_s"], rel=1e-12)
    # the stored lower bound held each kernel at its roofline too, which the excerpt leaves out
    assert est.lower_bound_s == pytest.approx(model["lower_bound_s"], rel=1e-5)


@pytest.mark.parametrize("name", ["squeezenet1_1", "bert_base"])
def test_the_recorded_estimates_lie_between_the_queues_limits(name: str) -> None:
    """Overlapped, the host's issue times and the kernels' times are each a floor under the queue,
    their sum a ceiling; the sum of the bricks' latencies (no queue) lies above it."""
    dec, measured, _ = _model(_records(), name)
    views = _views(dec)
    est = estimate_decomposition(dec, measured, config_id="h200", views=views)
    summed = estimate_decomposition(dec, measured, config_id="h200", views=views, launch_queue=False)
    host = device = 0.0
    for o in dec.occurrences:
        m = measured[o.signature]
        latency = m.median_s - est.floor_s  # no floor drift (empty_s) and no roofline in these records
        if o.signature in views:
            host += m.repeat_s
            continue
        host += issue_time(latency, m.device_warm_s, m.repeat_s)
        device += m.device_warm_s
    assert est.floor_s + max(host, device) <= est.sequential_s <= est.floor_s + host + device + 1e-12
    assert est.sequential_s < summed.sequential_s


def _script() -> ModuleType:
    return load_script("explain_gpu_records")


def _conv(activation: str | None) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, dtype=np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c" if activation else "y"], pads=[1, 1, 1, 1])]
    if activation:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    graph = helper.make_graph(nodes, "brick", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnxruntime_merges_copies_side_by_side_that_share_their_first_node() -> None:
    """Copies that read the same input and weights compute their first node alike: onnxruntime's
    common-subexpression elimination keeps one (the graph's outputs stay), so that a further copy of
    a Conv+Relu brick costs a Relu; a one-node brick's copies all stay."""
    script = _script()
    assert script.copies_merged(_conv("Relu"))
    assert not script.copies_merged(_conv(None))
    # without that rewrite the copies stay apart, each fused as the brick alone: what the repeat's
    # session now turns off
    from dlbricks.generators.ort import KEEP_COPIES_APART

    assert not script.copies_merged(_conv("Relu"), disabled=list(KEEP_COPIES_APART))
