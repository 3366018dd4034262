"""In-model times of every layer, from onnxruntime's own profiler.

Per-node kernel times inside the running model are the reference for explaining an estimate's error
per brick: a brick whose own time differs much from its layers' in-model time is measured out of its
context (cache state, fusion). The profiler costs time inside the kernel events too: MobileNet-v2's
152 profiled kernels summed to 10.26 ms against 9.22 ms for the unprofiled whole model (about 7 us per
layer), so a 5 us BatchNormalization brick looked twice as slow in the model as alone, while the same
brick run right after its producing convolution, without the profiler, took 8.0 against 7.8 us alone.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict

import numpy as np

from dlbricks import ModelGraph, random_inputs
from dlbricks._ortutil import session_options
from dlbricks.generators import OrtConfig

__all__ = ["in_model_times"]


def in_model_times(graph: ModelGraph, config: OrtConfig | None = None, runs: int = 30,
                   warmup: int = 5) -> dict[str, float]:
    """Median kernel time (seconds) of every layer inside the running model, by layer name."""
    import onnxruntime as ort

    config = config or OrtConfig()
    model = graph.to_onnx()
    for i, node in enumerate(model.graph.node):
        node.name = f"__dlb{i}"
    by_index = {layer.index: layer.name for layer in graph.layers}
    with tempfile.TemporaryDirectory() as tmp:
        options = session_options(config.graph_optimization_level, config.intra_op_num_threads,
                                  inter_threads=config.inter_op_num_threads,
                                  profile_prefix=os.path.join(tmp, "profile"))
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = random_inputs(graph.inputs, seed=0)
        for _ in range(warmup + runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    durations: dict[str, list[float]] = defaultdict(list)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.startswith("__dlb") and name.endswith("_kernel_time"):
            index = int(name[len("__dlb"):-len("_kernel_time")])
            if index in by_index:
                durations[by_index[index]].append(event["dur"] * 1e-6)
    return {name: float(np.median(d[warmup:] or d)) for name, d in durations.items()}
