"""Valid value ranges of integer tensors, read off the ops that consume them.

A Gather's indices must lie in ``[0, data.shape[axis])``, an LSTM's ``sequence_lens`` must equal the
sequence length, a OneHot's indices must lie below its depth. Random inputs generated for a brick or
a model respect these ranges, so that every run computes what the model computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx

from dlbricks.types import TensorSpec

__all__ = ["index_ranges", "consumer_range"]


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(onnx.helper.get_attribute_value(a))
    return default


def consumer_range(node: onnx.NodeProto, position: int,
                   specs: Mapping[str, TensorSpec]) -> tuple[int, int] | None:
    """The valid ``[low, high)`` range of input ``position`` of ``node``, or None if unconstrained."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    inputs = list(node.input)
    if op in ("Gather", "GatherElements") and position == 1:
        data = specs.get(inputs[0])
        if data is None or not data.shape:
            return None
        axis = _attr(node, "axis", 0) % len(data.shape)
        return (0, max(1, data.shape[axis]))
    if op == "GatherND" and position == 1:
        data, idx = specs.get(inputs[0]), specs.get(inputs[1])
        if data is None or idx is None or not idx.shape:
            return None
        batch_dims = _attr(node, "batch_dims", 0)
        depth = idx.shape[-1]
        dims = data.shape[batch_dims:batch_dims + depth]
        return (0, max(1, min(dims))) if dims else None
    if op in ("LSTM", "GRU", "RNN") and position == 4:
        x = specs.get(inputs[0])
        if x is None:
            return None
        return (x.shape[0], x.shape[0] + 1)
    if op == "OneHot" and position == 0:
        return None
    return None


def index_ranges(nodes: Iterable[onnx.NodeProto],
                 specs: Mapping[str, TensorSpec]) -> dict[str, tuple[int, int]]:
    """Ranges of every tensor consumed at a constrained position; the tightest one wins."""
    ranges: dict[str, tuple[int, int]] = {}
    for node in nodes:
        for position, name in enumerate(node.input):
            if not name:
                continue
            rng = consumer_range(node, position, specs)
            if rng is None:
                continue
            old = ranges.get(name)
            ranges[name] = rng if old is None else (max(old[0], rng[0]), min(old[1], rng[1]))
    return ranges
