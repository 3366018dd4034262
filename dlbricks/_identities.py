"""Identity layers that hand a constant to one layer, and the groups that take them in.

TorchScript's ONNX exporter writes a weight that several layers share (ALBERT's cross-layer
sharing) once, and hands it to each layer through its own ``Identity`` node: initializer ->
Identity -> MatMul. Without graph optimizations onnxruntime runs those Identities, so the MatMul's
weight is not an initializer and is packed at every call; with them, the Identity is folded away and
the weight prepacked. A brick that cuts the MatMul from its Identity takes the weight as a graph
input, which stays in the cache between runs; a brick that carries the Identity and the weight as a
constant runs what the model runs at every optimization level, and its weight goes cold between runs
as in the model. :func:`join_constant_identities` puts each such Identity (or chain of Identities)
in the group of the layer that reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlbricks.graph import LayerNode, ModelGraph

__all__ = ["constant_identities", "join_constant_identities"]


def _is_identity(layer: LayerNode) -> bool:
    """Whether ``layer`` is an ONNX Identity of one input."""
    return layer.op_type == "Identity" and layer.domain in ("", "ai.onnx") and len(layer.inputs) == 1


def constant_identities(graph: ModelGraph) -> dict[str, str]:
    """Identity layers that hand a constant to exactly one layer, each mapped to that layer's name.

    An Identity qualifies when its input is a constant of the model (an initializer, or a value the
    frontend folded) or the output of another qualifying Identity, and its output is not a model
    output and is read by exactly one layer, as an explicit input. A chain of Identities maps to
    the layer at its end, which is never an Identity that qualifies.

    Parameters
    ----------
    graph : ModelGraph

    Returns
    -------
    dict of str to str
        Identity layer name -> name of the layer that reads the constant through it.
    """
    readers: dict[str, dict[str, LayerNode]] = {}
    for layer in graph.layers:
        for name in layer.all_inputs:
            readers.setdefault(name, {})[layer.name] = layer
    model_outputs = {spec.name for spec in graph.outputs}
    reader_of: dict[str, str] = {}  # qualifying Identity -> its one reader
    forwarded: set[str] = set()  # outputs of qualifying Identities
    for layer in graph.layers:  # in topological order: a chain's head comes first
        if not _is_identity(layer) or not layer.outputs or not layer.outputs[0]:
            continue
        source, output = layer.inputs[0], layer.outputs[0]
        users = list(readers.get(output, {}).values())
        if not (graph.is_constant(source) or source in forwarded) or output in model_outputs:
            continue
        if len(users) != 1 or output not in users[0].inputs:
            continue
        reader_of[layer.name] = users[0].name
        forwarded.add(output)
    hosts: dict[str, str] = {}
    for name in reversed(list(reader_of)):  # a chain's tail is resolved before its head
        reader = reader_of[name]
        hosts[name] = hosts.get(reader, reader)
    return hosts


def join_constant_identities(graph: ModelGraph, groups: Sequence[tuple[LayerNode, ...]],
                             ) -> tuple[list[tuple[LayerNode, ...]], list[int]]:
    """``groups`` with every group made only of :func:`constant_identities` moved into the group of
    the layer that reads the constant, in front of that group's layers, in model order.

    Groups that already hold their Identities (onnxruntime's fusion groups at levels that fold
    them) are unchanged.

    Parameters
    ----------
    graph : ModelGraph
    groups : sequence of tuple of LayerNode
        Every layer of ``graph`` in exactly one group, groups in a topological order.

    Returns
    -------
    groups : list of tuple of LayerNode
        The groups left, in their order.
    kept : list of int
        For each group returned, its index in ``groups``.
    """
    hosts = constant_identities(graph)
    if not hosts:
        return list(groups), list(range(len(groups)))
    group_of = {layer.name: i for i, group in enumerate(groups) for layer in group}
    moved: dict[int, list[LayerNode]] = {}
    for i, group in enumerate(groups):
        if group and all(la.name in hosts and group_of[hosts[la.name]] != i for la in group):
            for layer in group:
                moved.setdefault(group_of[hosts[layer.name]], []).append(layer)
    dropped = {group_of[la.name] for layers in moved.values() for la in layers}
    position = {layer.name: i for i, layer in enumerate(graph.layers)}
    out: list[tuple[LayerNode, ...]] = []
    kept: list[int] = []
    for i, group in enumerate(groups):
        if i in dropped:
            continue
        joined = sorted(moved.get(i, ()), key=lambda la: position[la.name])
        out.append((*joined, *group))
        kept.append(i)
    return out, kept
