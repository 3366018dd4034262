"""Fusion groups of OpenVINO's CPU plugin: which layers it runs as one kernel, read from its runtime model.

The CPU plugin compiles a model into executed kernels (``compiled_model.get_runtime_model()``): a
Convolution with the BatchNormalization folded into its weights and the Relu after it runs as one
kernel, a LayerNormalization pattern as one MVN... Each kernel's ``rt_info`` names the original
layers it runs (``originalLayersNames``). :func:`openvino_fusion_groups` maps those names back to the
layers of a :class:`~dlbricks.ModelGraph` (:func:`kernel_layers`) and returns a
:class:`~dlbricks.fusion.FusionPlan` whose groups are the kernels, so that a brick of
``decompose(graph, "fused", runtime="openvino")`` is one kernel that OpenVINO executes.

Layout reorders (``layerType`` "Reorder") that the plugin inserts where two kernels want different
memory layouts are not groups, as onnxruntime's NCHWc reorders are not: the plan counts them and names
the tensor each converts. Constants, inputs and outputs are no kernels.

openvino is imported lazily, inside :func:`runtime_kernels`: importing dlbricks does not need it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import onnx

from dlbricks.errors import BackendError, BackendUnavailableError, InvalidArgumentError
from dlbricks.fusion import FusionPlan
from dlbricks.graph import ModelGraph

__all__ = [
    "OPENVINO", "RuntimeKernel", "kernel_layers", "openvino_fusion_groups", "runtime_kernels",
    "REORDER_TYPE"
]

#: The name of the runtime whose fusion :func:`openvino_fusion_groups` reads (the granularity of its
#: decompositions is ``"fused:openvino"``).
OPENVINO = "openvino"
#: ``layerType`` of the runtime model's ops that run no layer of the model.
_NOT_KERNELS = frozenset({"Input", "Output", "Const", "Parameter", "Result"})
#: ``layerType`` of a layout conversion that the plugin inserts.
REORDER_TYPE = "Reorder"
_ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "u8": 1, "i8": 1, "boolean": 1}


@dataclass(frozen=True, slots=True)
class RuntimeKernel:
    """One op of OpenVINO's runtime model: its name (as the profiling counters report it), its
    ``layerType``, the original layer names it runs (``originalLayersNames``), the names of the ops
    it reads, the bytes of its first output and that output's memory layout (``outputLayouts``:
    ``abcd`` planar, ``acdb`` channels-last, ``aBcd16b`` blocked...)."""

    name: str
    layer_type: str
    originals: tuple[str, ...]
    inputs: tuple[str, ...]
    output_bytes: int = 0
    layout: str = ""


def runtime_kernels(compiled: Any) -> tuple[RuntimeKernel, ...]:
    """The ops of ``compiled`` (an ``openvino.CompiledModel``) in execution order, as
    :class:`RuntimeKernel`."""
    out = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()

        def text(key: str, info: Any = info) -> str:
            return str(info[key].astype(str)) if key in info else ""

        nbytes = 0
        if op.get_output_size() and op.get_output_partial_shape(0).is_static:
            numel = 1
            for d in op.get_output_shape(0):
                numel *= int(d)
            nbytes = numel * _ELEMENT_BYTES.get(text("outputPrecisions").split(",")[0], 4)
        out.append(RuntimeKernel(op.get_friendly_name(), text("layerType") or op.get_type_name(),
                                 tuple(filter(None, text("originalLayersNames").split(","))),
                                 tuple(v.get_node().get_friendly_name() for v in op.input_values()), nbytes,
                                 text("outputLayouts").split(",")[0]))
    return tuple(out)


def kernel_layers(kernels: Iterable[RuntimeKernel], model: onnx.ModelProto) -> dict[str, tuple[str, ...]]:
    """Each kernel (by name): the nodes of ``model`` that it runs, by name, in the model's order.

    They are read from the kernel's ``originalLayersNames``, each the name of a node, of a node's
    output (a model output's op takes the tensor's name) or of an op a node was decomposed into
    (``node/Suffix``); a node is claimed by the first kernel that names it. A transformation that
    renames what it fuses (a BatchNormalization folded into the convolution before it leaves a
    ``Multiply_N``) loses the first node: the producer of the kernel's first node's data input (input
    0) is added, and its own producer, for as long as no other kernel runs it and it computes from data
    (it has inputs and is no ``Constant``).
    """
    order = {node.name: i for i, node in enumerate(model.graph.node)}
    named = {out: node.name for node in model.graph.node for out in node.output}
    named.update({name: name for name in order})
    found: dict[str, list[str]] = {}
    claimed: set[str] = set()
    for kernel in kernels:
        nodes: list[str] = []
        for original in kernel.originals:
            node = named.get(original) or named.get(original.split("/", 1)[0])
            if node is not None and node not in claimed:
                nodes.append(node)
                claimed.add(node)
        found[kernel.name] = nodes
    producers = {out: node for node in model.graph.node for out in node.output}
    for nodes in found.values():
        first = model.graph.node[min(order[n] for n in nodes)] if nodes else None
        while first is not None and first.input:
            before = producers.get(first.input[0])
            if before is None or before.name in claimed or before.op_type == "Constant" or not before.input:
                break
            nodes.append(before.name)
            claimed.add(before.name)
            first = before
    return {kernel: tuple(sorted(nodes, key=order.__getitem__)) for kernel, nodes in found.items()}


def openvino_fusion_groups(model_graph: ModelGraph, threads: int = 1, precision: str = "f32") -> FusionPlan:
    """Group the layers of a model as OpenVINO's CPU plugin runs them (one group per executed kernel).

    Parameters
    ----------
    model_graph : ModelGraph
    threads : int, default 1
        ``INFERENCE_NUM_THREADS`` of the compilation (one stream, latency hint).
    precision : {"f32", "bf16", "f16"}, default "f32"
        ``INFERENCE_PRECISION_HINT``.

    Returns
    -------
    FusionPlan
        ``opt_level`` is :data:`OPENVINO`; ``kernels`` names each group's kernel; ``reorders`` counts
        the layout reorders between two kernels (not those of the model's inputs and outputs, which a
        brick reading a model input runs too), ``reorder_tensors`` the tensor each converts.
        Layers that no kernel names (folded into a constant, or renamed beyond recognition) join the
        group of their latest producer, or else of their first consumer. Every layer is in exactly one
        group; groups on a cycle of the group DAG are split into single layers.

    Raises
    ------
    BackendUnavailableError
        If openvino is not installed.
    BackendError
        If OpenVINO cannot read or compile the model.
    """
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise InvalidArgumentError(f"'threads' must be a non-negative int. Got {threads!r} instead.")
    model = model_graph.to_onnx()
    kernels = runtime_kernels(_compile(model, threads, precision, model_graph.name))
    return plan_from_kernels(model_graph, model, kernels)


def plan_from_kernels(model_graph: ModelGraph, model: onnx.ModelProto,
                      kernels: Sequence[RuntimeKernel]) -> FusionPlan:
    """The :class:`FusionPlan` of ``kernels`` (of ``model``, the ONNX form of ``model_graph``)."""
    runs = [k for k in kernels if k.layer_type not in _NOT_KERNELS and k.layer_type != REORDER_TYPE]
    mapped = kernel_layers(runs, model)
    layers = [layer.name for layer in model_graph.layers]
    known = set(layers)
    owner: dict[str, int] = {}
    labels: list[str] = []
    for kernel in runs:
        nodes = [n for n in mapped.get(kernel.name, ()) if n in known and n not in owner]
        if nodes:
            for n in nodes:
                owner[n] = len(labels)
            labels.append(f"{kernel.layer_type}[{kernel.name}]")
    _fold_leftovers(model_graph, layers, owner)
    groups = _split_cycles(model_graph, owner, len(labels))
    label_of = {g: labels[owner[g[0]]] if owner[g[0]] < len(labels) else "" for g in map(tuple, groups)}
    kinds = {k.name: k for k in kernels}
    between = [k for k in kernels if k.layer_type == REORDER_TYPE
               and all(kinds[i].layer_type not in _NOT_KERNELS for i in k.inputs if i in kinds)
               and not _feeds_output(k, kernels)]
    tensors = tuple(_converted_tensor(k, kinds, mapped, model) for k in between)
    position = {name: i for i, name in enumerate(layers)}
    ordered = tuple(tuple(sorted(g, key=position.__getitem__)) for g in groups)
    return FusionPlan(opt_level=OPENVINO, groups=ordered, kernels=tuple(label_of[tuple(g)] for g in groups),
                      reorders=len(between), reorder_tensors=tensors)


def _feeds_output(kernel: RuntimeKernel, kernels: Sequence[RuntimeKernel]) -> bool:
    """Whether ``kernel``'s output goes only to model outputs."""
    readers = [k for k in kernels if kernel.name in k.inputs]
    return bool(readers) and all(k.layer_type in _NOT_KERNELS for k in readers)


def _converted_tensor(reorder: RuntimeKernel, kinds: Mapping[str, RuntimeKernel],
                      mapped: Mapping[str, tuple[str, ...]], model: onnx.ModelProto) -> str:
    """The original tensor a reorder converts: the output of the last node of the kernel it reads
    ("" where that kernel runs no node)."""
    source = reorder.inputs[0] if reorder.inputs else ""
    nodes = mapped.get(source, ())
    if source not in kinds or not nodes:
        return ""
    last = next((n for n in model.graph.node if n.name == nodes[-1]), None)
    return last.output[0] if last is not None and last.output else ""


def _fold_leftovers(model_graph: ModelGraph, layers: Sequence[str], owner: dict[str, int]) -> None:
    """Give each layer that no kernel claimed the group of its latest claimed producer (in layer
    order), else of its first claimed consumer; a layer with neither gets a group of its own."""
    dag = model_graph.dag
    position = {name: i for i, name in enumerate(layers)}
    changed = True
    while changed:
        changed = False
        for name in layers:
            if name in owner:
                continue
            producers = sorted((p for p in dag.predecessors(name) if p in owner), key=position.__getitem__)
            consumers = sorted((c for c in dag.successors(name) if c in owner), key=position.__getitem__)
            if producers:
                owner[name] = owner[producers[-1]]
            elif consumers:
                owner[name] = owner[consumers[0]]
            else:
                continue
            changed = True
    fresh = max(owner.values(), default=-1) + 1
    for name in layers:
        if name not in owner:
            owner[name] = fresh
            fresh += 1


def _split_cycles(model_graph: ModelGraph, owner: dict[str, int], first_free: int) -> list[list[str]]:
    """The groups of ``owner`` in a topological order of the group DAG, after splitting every group on
    a cycle of it into single layers (so that each group runs as one convex brick)."""
    fresh = max(max(owner.values(), default=-1) + 1, first_free)
    while True:
        quotient = nx.DiGraph()
        quotient.add_nodes_from(set(owner.values()))
        quotient.add_edges_from((owner[u], owner[v]) for u, v in model_graph.dag.edges
                                if u in owner and v in owner and owner[u] != owner[v])
        try:
            cycle = nx.find_cycle(quotient)
        except nx.NetworkXNoCycle:
            break
        for group in {u for u, _ in cycle}:
            for name in [n for n, g in owner.items() if g == group][1:]:
                owner[name] = fresh
                fresh += 1
    position = {layer.name: i for i, layer in enumerate(model_graph.layers)}
    members: dict[int, list[str]] = {}
    for name, group in owner.items():
        members.setdefault(group, []).append(name)
    first = {g: min(position[n] for n in names) for g, names in members.items()}
    return [members[g] for g in nx.lexicographical_topological_sort(quotient, key=first.__getitem__)]


def _compile(model: onnx.ModelProto, threads: int, precision: str, name: str) -> Any:
    """``model`` read by OpenVINO's ONNX frontend and compiled for its CPU plugin."""
    try:
        import openvino as ov
    except ImportError as e:
        raise BackendUnavailableError(f"openvino cannot be imported ({e}); install the extra: "
                                      "pip install 'dlbricks[openvino]'") from e
    properties: dict[str, Any] = {"NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                                  "INFERENCE_PRECISION_HINT": precision}
    if threads:
        properties["INFERENCE_NUM_THREADS"] = threads
    try:
        frontend = ov.frontend.FrontEndManager().load_by_framework("onnx")
        read = frontend.convert(frontend.load(io.BytesIO(model.SerializeToString())))
        return ov.Core().compile_model(read, "CPU", properties)
    except Exception as e:  # noqa: BLE001 - openvino raises untyped errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BackendError(f"openvino could not compile model {name!r} to read its fusion groups: {first}") from e
