"""What can be benchmarked: ONNX models, their bytes, or objects with ``key`` and ``to_onnx()``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx
import onnx.compose
from onnx import TensorProto, helper

from dlbricks import InvalidArgumentError

__all__ = ["FLOOR_KEY", "Item", "floor_model", "resolve_item", "side_by_side", "vector_warmup_model"]

FLOOR_KEY = "dlbricks.floor:identity-float32-1"


@dataclass(frozen=True, slots=True)
class Item:
    """One thing to measure: its key and a function that serializes its ONNX model."""

    key: str
    load: Callable[[], bytes]


def resolve_item(item: Any, position: int = 0) -> Item:
    """The key of ``item`` and how to get its model bytes.

    A raw ``onnx.ModelProto`` or ``bytes`` is keyed by the SHA-256 of its serialized bytes; a
    :class:`~dlbricks.generators.protocols.Benchmarkable` by its ``key``, its model built only when loaded
    (read from its ``onnx_bytes()`` where it has one: a model kept serialized is not parsed to be
    serialized again).

    Raises
    ------
    InvalidArgumentError
        If ``item`` is none of these.
    """
    if isinstance(item, onnx.ModelProto):
        data = item.SerializeToString()
        return Item(hashlib.sha256(data).hexdigest(), lambda: data)
    if isinstance(item, (bytes, bytearray, memoryview)):
        data = bytes(item)
        return Item(hashlib.sha256(data).hexdigest(), lambda: data)
    key = getattr(item, "key", None)
    to_onnx = getattr(item, "to_onnx", None)
    if isinstance(key, str) and key and callable(to_onnx):
        onnx_bytes = getattr(item, "onnx_bytes", None)  # its serialized model, where it has it at hand
        return Item(key, onnx_bytes if callable(onnx_bytes) else lambda: _serialize(to_onnx(), key))
    raise InvalidArgumentError(
        f"Item {position} to benchmark must be an onnx.ModelProto, its serialized bytes, or an "
        f"object with a 'key' str and a 'to_onnx()' method. Got {type(item).__name__} instead."
    )


def _serialize(model: Any, key: str) -> bytes:
    """The bytes of the model that ``to_onnx()`` returned for ``key``."""
    if not isinstance(model, onnx.ModelProto):
        raise InvalidArgumentError(
            f"to_onnx() of item {key!r} must return an onnx.ModelProto. Got {type(model).__name__}."
        )
    return model.SerializeToString()


def floor_model(nodes: int = 1) -> onnx.ModelProto:
    """The empty model whose per-call time is the floor: Identity on a 1-element float tensor; with
    ``nodes > 1``, followed by ``nodes - 1`` Relus on it (a chain no optimization level removes),
    whose extra time is what each further node of a model run costs."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InvalidArgumentError(f"'nodes' must be an int >= 1. Got {nodes!r} instead.")
    names = ["x", *(f"t{i}" for i in range(1, nodes)), "y"]
    ops = ["Identity", *["Relu"] * (nodes - 1)]
    chain = [helper.make_node(op, [a], [b]) for op, a, b in zip(ops, names[:-1], names[1:], strict=True)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph(chain, "dlbricks_floor", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


#: Rows and columns of :func:`vector_warmup_model`'s product: a few microseconds of the runtime's
#: widest float kernels, touching 3 KiB.
VECTOR_WARMUP_SIZE = 16


def vector_warmup_model(size: int = VECTOR_WARMUP_SIZE) -> onnx.ModelProto:
    """A ``size`` x ``size`` float MatMul with a constant right-hand side: run just before a chained
    brick's timed call, its matrix kernel leaves the core's vector units as a model's previous layer
    leaves them for the next (methodology, "Wide vector units between two calls")."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidArgumentError(f"'size' must be an int >= 1. Got {size!r} instead.")
    weight = helper.make_tensor("w", TensorProto.FLOAT, [size, size], [1.0 / size] * (size * size))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "dlbricks_vector_warmup", [x], [y],
                              [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def side_by_side(model: onnx.ModelProto, copies: int) -> onnx.ModelProto:
    """``copies`` copies of ``model``'s graph in one graph, run one after another by a sequential
    executor: every copy reads the same inputs and weights, and writes outputs of its own (copy ``i``
    after the first prefixes its nodes, tensors and outputs with ``c{i}_``). The metadata is dropped:
    the result is no brick.

    Raises
    ------
    InvalidArgumentError
        If ``copies`` is not an int >= 1, or an output of ``model`` is no node's (an input or a
        weight passed through, which a copy cannot write afresh).
    """
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise InvalidArgumentError(f"'copies' must be an int >= 1. Got {copies!r} instead.")
    graph = model.graph
    written = {name for node in graph.node for name in node.output}
    passed = [o.name for o in graph.output if o.name not in written]
    if passed:
        raise InvalidArgumentError(f"Model {graph.name!r} passes {passed[0]!r} through to its outputs; "
                                   "its copies cannot write it afresh.")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.metadata_props[:]
    for i in range(1, copies):
        copy = onnx.compose.add_prefix_graph(graph, f"c{i}_", rename_inputs=False, rename_initializers=False)
        result.graph.node.extend(copy.node)
        result.graph.output.extend(copy.output)
        result.graph.value_info.extend(copy.value_info)
    return result
