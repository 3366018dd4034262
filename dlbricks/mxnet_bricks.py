"""MXNet bricks: a brick (or a whole MXNet-loaded model) of ``org.mxnet`` nodes as an MXNet symbol.

Bricks cut from an MXNet model keep the MXNet ops as ``org.mxnet`` ONNX nodes, so that they share
the decomposition, signatures and storage of ONNX bricks. Here they turn back into MXNet: the
brick's ONNX form (``brick.to_onnx()``, whose initializers hold its exact, real or synthetic weights)
is rewritten as MXNet's symbol JSON (variables ``in0``... for inputs and ``c0``... for constants,
one op node per ``org.mxnet`` node with its string attributes) and loaded with
``mx.sym.load_json``. The same function serves whole models (``ModelGraph.to_onnx()`` of a graph
loaded by :func:`dlbricks.load_mxnet`), which have the same representation.

The floor models of the generators (an ONNX ``Identity``, then ``Relu``s) map to MXNet's ``identity``
and ``relu``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from dlbricks._mxnet import (
    LAYOUTS_ATTR,
    MXNET_DOMAIN,
    POSITIVE_MXNET_INPUTS,
    first_line,
    import_mxnet,
    runs_on_onednn_layouts,
    to_ndarray,
    unfused,
)
from dlbricks.errors import UnrunnableBrickError
from dlbricks.inputs import random_inputs

__all__ = [
    "MxnetModel", "brick_to_symbol", "check_mxnet_runnable", "is_mxnet_onnx", "model_to_symbol",
    "to_ndarray", "reorders_onednn_inputs"
]

#: ONNX ops (default domain) that have an exact MXNet counterpart, for the floor models (one
#: Identity; a chain of an Identity and Relus).
_ONNX_TO_MXNET = {"Identity": "identity", "Relu": "relu"}
_MXNET_VERSION_ATTR = {"mxnet_version": ["int", 10901]}


@dataclass(frozen=True, slots=True)
class MxnetModel:
    """An MXNet symbol with everything needed to bind it.

    Attributes
    ----------
    symbol : mx.sym.Symbol
    arg_params, aux_params : dict of str to numpy.ndarray
        Values of the constant arguments and auxiliary states (BatchNorm moving statistics).
    input_names : tuple of str
        Data inputs, in the order of the ONNX graph inputs.
    output_names : tuple of str
        The ONNX graph outputs that the symbol's outputs stand for, in order.
    input_layouts : dict of str to str
        Layout each data input has in the model it was cut from when MXNet runs with oneDNN
        (``"onednn"`` or ``"plain"``, from the nodes' ``dlbricks_input_layouts`` attribute).
    """

    symbol: Any
    arg_params: dict[str, np.ndarray] = field(repr=False)
    aux_params: dict[str, np.ndarray] = field(repr=False)
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    input_layouts: dict[str, str] = field(default_factory=dict)


def is_mxnet_onnx(model: onnx.ModelProto) -> bool:
    """Whether every node of ``model`` is an ``org.mxnet`` node."""
    return len(model.graph.node) > 0 and all(n.domain == MXNET_DOMAIN for n in model.graph.node)


def brick_to_symbol(brick: Any, weights: str | None = None,
                    ) -> tuple[Any, dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """A brick of ``org.mxnet`` nodes as an MXNet symbol with its parameters.

    Parameters
    ----------
    brick : Brick
        A brick cut from a model loaded with :func:`dlbricks.load_mxnet`.
    weights : {"synthetic", "real"}, optional
        As for :meth:`Brick.to_onnx` (default: the brick's own mode).

    Returns
    -------
    symbol : mx.sym.Symbol
    arg_params, aux_params : dict of str to mx.nd.NDArray
        Constants ``c0``... split into arguments and auxiliary states.
    input_names : tuple of str
        ``in0``, ``in1``...: the data inputs to bind.

    Raises
    ------
    UnrunnableBrickError
        If the brick has nodes of another domain.
    """
    mx = import_mxnet(f"brick {brick.signature[:12]}")
    model = model_to_symbol(brick.to_onnx(weights=weights))
    arg = {k: to_ndarray(mx, model.arg_params.pop(k)) for k in list(model.arg_params)}  # one copy at a time
    aux = {k: to_ndarray(mx, model.aux_params.pop(k)) for k in list(model.aux_params)}
    return model.symbol, arg, aux, model.input_names


def check_mxnet_runnable(brick: Any) -> str | None:
    """None if MXNet (CPU) can bind the brick and run it once on synthetic inputs, else the reason (one line).

    The MXNet counterpart of :meth:`Brick.check_runnable`: what the mxnet backend does before timing.
    """
    try:
        mx = import_mxnet(f"brick {brick.signature[:12]}")
        _run_once(mx, brick)
    except UnrunnableBrickError as e:
        return str(e).splitlines()[0]
    except Exception as e:  # noqa: BLE001 - MXNet raises untyped errors from bind and its kernels
        return first_line(e) or type(e).__name__
    return None


def _run_once(mx: Any, brick: Any) -> None:
    """Bind the brick on synthetic weights and inputs and run it once (its arrays freed on return)."""
    symbol, arg, aux, names = brick_to_symbol(brick, weights="synthetic")
    for name, value in random_inputs(brick.inputs).items():
        if name in names:
            arg[name] = to_ndarray(mx, value)
    with unfused():
        executor = symbol.bind(mx.cpu(), args=arg, aux_states=aux, grad_req="null")
    executor.forward(is_train=False)
    mx.nd.waitall()


def model_to_symbol(model: onnx.ModelProto) -> MxnetModel:
    """Rebuild the MXNet symbol of an ONNX model of ``org.mxnet`` nodes (a brick or a whole model).

    Synthetic values of positive-only inputs (BatchNorm's moving variance) are made positive with
    ``abs``, which leaves real variances unchanged.

    Raises
    ------
    UnrunnableBrickError
        If a node is neither ``org.mxnet`` nor a default-domain op with an MXNet counterpart, or if
        MXNet rejects the symbol.
    """
    label = f"model {model.graph.name!r}"
    mx = import_mxnet(label)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    inputs = [vi.name for vi in g.input if vi.name not in inits]
    positive = _positive_constants(g, inits)
    nodes: list[dict[str, Any]] = []
    where: dict[str, tuple[int, int]] = {}

    def variable(name: str) -> None:
        where[name] = (len(nodes), 0)
        nodes.append({"op": "null", "name": name, "inputs": []})

    for name in inputs:
        variable(name)
    used = {n for node in g.node for n in node.input if n}
    for name in inits:
        if name in used and name not in where:
            variable(name)
    arg_nodes = list(range(len(nodes)))
    for index, node in enumerate(g.node):
        op = _mxnet_op(node, label)
        refs = []
        for name in node.input:
            if name not in where:
                raise UnrunnableBrickError(f"{label}: node {index} ({node.op_type}) reads '{name}', which no "
                                           f"input, constant or earlier node provides.")
            refs.append([*where[name], 0])
        for k, out in enumerate(node.output):
            where[out] = (len(nodes), k)
        nodes.append({"op": op, "name": node.name or f"n{index}", "attrs": _string_attrs(node),
                      "inputs": refs})
    missing = [vi.name for vi in g.output if vi.name not in where]
    if missing:
        raise UnrunnableBrickError(f"{label}: output '{missing[0]}' is produced by no node.")
    heads = [[*where[vi.name], 0] for vi in g.output]
    text = json.dumps({"nodes": nodes, "arg_nodes": arg_nodes, "heads": heads, "attrs": _MXNET_VERSION_ATTR})
    try:
        symbol = mx.sym.load_json(text)
        aux_names = set(symbol.list_auxiliary_states())
        arg_names = set(symbol.list_arguments())
    except mx.base.MXNetError as e:
        raise UnrunnableBrickError(f"{label}: MXNet rejects the symbol: {first_line(e)}") from e
    arg_params: dict[str, np.ndarray] = {}
    aux_params: dict[str, np.ndarray] = {}
    for name, tensor in inits.items():
        if name not in arg_names and name not in aux_names:
            continue
        value = numpy_helper.to_array(tensor)
        if name in positive:
            value = np.abs(value)
        (aux_params if name in aux_names else arg_params)[name] = value
    return MxnetModel(symbol, arg_params, aux_params, tuple(n for n in inputs if n in arg_names),
                      tuple(vi.name for vi in g.output), _input_layouts(g, set(inputs)))


def _mxnet_op(node: onnx.NodeProto, label: str) -> str:
    if node.domain == MXNET_DOMAIN:
        return node.op_type
    if node.domain in ("", "ai.onnx") and node.op_type in _ONNX_TO_MXNET and not node.attribute:
        return _ONNX_TO_MXNET[node.op_type]
    raise UnrunnableBrickError(
        f"{label}: node '{node.name or node.op_type}' is {node.op_type} of domain '{node.domain}'; the "
        f"mxnet backend runs MXNet models (org.mxnet nodes, from dlbricks.load_mxnet); use the "
        f"onnxruntime backend for ONNX models.")


def _input_layouts(graph: onnx.GraphProto, inputs: set[str]) -> dict[str, str]:
    """Layout of each data input, as its first consumer's layouts attribute says."""
    out: dict[str, str] = {}
    for node in graph.node:
        attr = next((a for a in node.attribute if a.name == LAYOUTS_ATTR), None)
        if attr is None:
            continue
        for name, layout in zip(node.input, attr.s.decode().split(","), strict=False):
            if name in inputs:
                out.setdefault(name, layout)
    return out


def reorders_onednn_inputs(model: onnx.ModelProto) -> bool:
    """Whether an op of MXNet brick ``model`` has no oneDNN kernel in MXNet 1.9, so that it reorders
    an input in oneDNN's blocked layout to the plain one on each call (``elemwise_mul``, ``clip``...)."""
    return any(not runs_on_onednn_layouts(node.op_type, _string_attrs(node))
               for node in model.graph.node if node.domain == MXNET_DOMAIN)


def _string_attrs(node: onnx.NodeProto) -> dict[str, str]:
    """The MXNet attributes of a node (dlbricks' own annotations left out)."""
    out = {}
    for attr in node.attribute:
        if attr.name.startswith("dlbricks_"):
            continue
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def _positive_constants(graph: onnx.GraphProto, inits: Mapping[str, onnx.TensorProto]) -> set[str]:
    out = set()
    for node in graph.node:
        if node.domain != MXNET_DOMAIN:
            continue
        for position in POSITIVE_MXNET_INPUTS.get(node.op_type, frozenset()):
            if position < len(node.input) and node.input[position] in inits:
                out.add(node.input[position])
    return out

