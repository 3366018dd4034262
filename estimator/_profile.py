"""In-model times of every layer, from the runtime's own profiler: onnxruntime's, or that of a backend
with ``profile_kernels`` (OpenVINO's profiling counters).

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from dlbricks import InvalidArgumentError, ModelGraph
from dlbricks.fusion import REORDER_OPS, kernel_origin
from dlbricks.generators import OrtConfig, get_backend
from dlbricks.generators.ort_kernels import kernel_medians
from dlbricks.inputs import random_inputs
from dlbricks.onnx_frontend import unique_dequantize
from dlbricks.ortutil import session_options

__all__ = ["InModelTimes", "in_model_times"]

_NCHWC_SUFFIX = "_nchwc"
#: The op type of a layout reorder that a backend's ``profile_kernels`` reports (a kernel of no node).
_REORDER = "Reorder"


@dataclass(frozen=True, slots=True)
class InModelTimes:
    """Median kernel times (seconds) inside the running model, from the runtime's profiler.

    ``layers``: by layer name; a kernel that runs several layers (fused) counts on one of them, so
    sum over a brick's layers. ``reorders_s``: the layout reorders the runtime inserted (onnxruntime
    at level "all", OpenVINO's CPU plugin), which belong to no layer. ``kernels``: kernels one run
    executes; ``total_s``: their sum. ``unmapped``: the kernels matched to no layer and no reorder,
    which count in ``total_s`` only.
    """

    layers: dict[str, float]
    reorders_s: float
    kernels: int
    total_s: float
    unmapped: tuple[str, ...] = ()


def in_model_times(graph: ModelGraph, config: Any = None, runs: int = 30, warmup: int = 5) -> InModelTimes:
    """Profile ``graph`` under ``config`` (default ``OrtConfig()``) and attribute each kernel's median
    time to its layers.

    A backend with ``profile_kernels`` (see :class:`~dlbricks.generators.Backend`) profiles the
    model itself and names the nodes each kernel runs; a fused kernel counts on the first of them.
    onnxruntime's profiler is read here: a kernel is matched to a layer by the node name it reports
    (layers are renamed ``__dlb<index>`` first) or, for kernels the optimizer created (fusions; the
    NCHWc transformer names a kernel after its output), by the layer that produced that output or
    whose name leads the kernel's. Kernels matched nowhere count in ``total_s`` only, and are named
    in ``unmapped``.

    Raises
    ------
    InvalidArgumentError
        If ``config``'s backend is neither onnxruntime nor one with ``profile_kernels``.
    """
    config = config or OrtConfig()
    model, owner = _numbered(graph)
    profile = getattr(get_backend(config.backend), "profile_kernels", None)
    if profile is not None:
        kernels = profile(model, config, random_inputs(graph.inputs, seed=0), runs=runs, warmup=warmup)
        return _attributed(kernels, owner)
    if not isinstance(config, OrtConfig):
        raise InvalidArgumentError(f"the {config.backend} backend gives no in-model per-layer times (it has no "
                                   "profile_kernels); leave out --per-brick (per_brick=False).")
    return _ort_times(graph, model, owner, config, runs, warmup)


def _numbered(graph: ModelGraph) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``graph``'s model with node ``i`` named ``__dlb<i>`` (node ``i`` is the layer of index ``i``),
    and the layer name of each such node name and of each node's outputs."""
    model = graph.to_onnx()
    # the DequantizeLinear copies the runtime makes, made first, as the loader made them: node i is
    # the layer of index i, and each copy's kernel is its own layer's
    nodes = unique_dequantize(list(model.graph.node), {o.name for o in model.graph.output})
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    for i, node in enumerate(model.graph.node):
        node.name = f"__dlb{i}"
    by_index = {layer.index: layer.name for layer in graph.layers}
    owner = {f"__dlb{i}": by_index[i] for i in by_index}
    owner.update({out: by_index[i] for i, node in enumerate(model.graph.node) if i in by_index
                  for out in node.output})
    return model, owner


def _attributed(kernels: Sequence[tuple[str, str, Sequence[str], float]], owner: dict[str, str]) -> InModelTimes:
    """A backend's profiled kernels ``(kernel, op type, nodes, seconds)`` attributed to the layers
    that ``owner`` names for their nodes (a fused kernel to its first node's); reorders apart."""
    layers: dict[str, float] = defaultdict(float)
    reorders = 0.0
    unmapped = []
    for kernel, op, nodes, seconds in kernels:
        layer = next((owner[n] for n in nodes if n in owner), None)
        if layer is not None:
            layers[layer] += seconds
        elif op == _REORDER and not nodes:
            reorders += seconds
        else:
            unmapped.append(kernel)
    return InModelTimes(dict(layers), reorders, len(kernels), sum(k[3] for k in kernels), tuple(unmapped))


def _ort_times(graph: ModelGraph, model: onnx.ModelProto, owner: dict[str, str], config: OrtConfig, runs: int,
               warmup: int) -> InModelTimes:
    """onnxruntime's profile of ``model`` (``graph`` numbered by :func:`_numbered`) under ``config``."""
    import onnxruntime as ort

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
    medians = kernel_medians(events, warmup)
    layers: dict[str, float] = defaultdict(float)
    reorders = 0.0
    unmapped = []
    for kernel, (op, t) in medians.items():
        if op in REORDER_OPS:
            reorders += t
            continue
        layer = _owner_of(kernel, owner)
        if layer is not None:
            layers[layer] += t
        else:
            unmapped.append(kernel)
    return InModelTimes(dict(layers), reorders, len(medians), sum(t for _, t in medians.values()), tuple(unmapped))


def _owner_of(kernel: str, owner: dict[str, str]) -> str | None:
    """The layer a profiled kernel name belongs to: the node itself, a node a transformer replaced
    (``__dlb3_token_63``: :func:`~dlbricks.fusion.kernel_origin`), a kernel named after a layer's
    output (``<output>_nchwc``), or one named after a layer's node (``__dlb3/QuickGeluFusion/``,
    ``__dlb3/duplicated``)."""
    found = owner.get(kernel)
    if found is None:
        base = kernel_origin(kernel)
        found = owner.get(base) or owner.get(base.removesuffix(_NCHWC_SUFFIX))
        if found is None and base.startswith("__dlb"):
            found = owner.get(base.split("/", 1)[0])
    return found
