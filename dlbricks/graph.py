"""The frontend-neutral graph IR: :class:`ModelGraph`, a networkx DAG of layer nodes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import onnx

from dlbricks.types import TensorSpec, onnx_dtype_to_name, runnable_ir_version

__all__ = ["LayerNode", "ModelGraph", "ModelSource", "VALUE_RANGES_KEY", "VALUE_STATISTICS_KEY"]

#: metadata_props key under which models and bricks carry the valid ranges of integer inputs.
VALUE_RANGES_KEY = "dlbricks.value_ranges"
#: metadata_props key of a brick's input statistics: ``{"in0": ValueStatistics.to_dict()}``.
VALUE_STATISTICS_KEY = "dlbricks.value_statistics"


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where a model came from: format (``onnx``), path (None for in-memory) and content hash."""

    format: str
    path: str | None
    sha256: str


@dataclass(frozen=True, slots=True)
class LayerNode:
    """One layer of a model: an ONNX node with its tensor names.

    ``implicit_inputs`` are outer-scope tensors read by the node's subgraphs (If/Loop/Scan).
    """

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    implicit_inputs: tuple[str, ...] = ()
    proto: onnx.NodeProto = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    index: int = -1  # position of the node in the source graph (-1: not from a graph node)

    @property
    def all_inputs(self) -> tuple[str, ...]:
        """Explicit (non-empty) then implicit inputs, without duplicates, in order."""
        seen: dict[str, None] = {}
        for name in (*self.inputs, *self.implicit_inputs):
            if name:
                seen.setdefault(name, None)
        return tuple(seen)


class ModelGraph:
    """A loaded model: layers in a DAG, every tensor with a concrete spec, constants by name.

    Build one with :func:`dlbricks.load_model`. Nodes of :attr:`dag` are layer names, each with a
    ``layer`` attribute (:class:`LayerNode`); an edge ``u -> v`` carries the ``tensors`` that ``u``
    produces and ``v`` reads. Constant-foldable computations (Constant nodes, shape arithmetic)
    are not layers: their results are in :attr:`constants`.
    """

    def __init__(
        self,
        *,
        name: str,
        layers: tuple[LayerNode, ...],
        inputs: tuple[TensorSpec, ...],
        outputs: tuple[TensorSpec, ...],
        tensors: Mapping[str, TensorSpec],
        constants: Mapping[str, onnx.TensorProto],
        opsets: Mapping[str, int],
        ir_version: int,
        source: ModelSource,
        proto: onnx.ModelProto,
        folded: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.layers = layers
        self.inputs = inputs
        self.outputs = outputs
        self.tensors = dict(tensors)
        self.constants = dict(constants)
        self.opsets = dict(opsets)
        self.ir_version = ir_version
        self.source = source
        self.proto = proto
        self.folded = folded
        self.dag = _build_dag(layers, self.constants)
        self._arrays: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:
        return (f"ModelGraph(name={self.name!r}, layers={len(self.layers)}, "
                f"inputs={[str(s) for s in self.inputs]})")

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[LayerNode]:
        return iter(self.layers)

    @property
    def key(self) -> str:
        """Identity of the model at these input shapes: hash of its content and input specs."""
        desc = json.dumps([self.source.sha256, [s.to_dict() for s in self.inputs]], sort_keys=True)
        return hashlib.sha256(desc.encode()).hexdigest()

    def is_constant(self, name: str) -> bool:
        """Whether tensor ``name`` is a constant (initializer or folded value)."""
        return name in self.constants

    def constant_array(self, name: str) -> np.ndarray:
        """The value of constant ``name`` as a numpy array (cached)."""
        arr = self._arrays.get(name)
        if arr is None:
            arr = onnx.numpy_helper.to_array(self.constants[name])
            self._arrays[name] = arr
        return arr

    def spec(self, name: str) -> TensorSpec:
        """The spec of any tensor, activation or constant."""
        spec = self.tensors.get(name)
        if spec is not None:
            return spec
        tensor = self.constants[name]
        return TensorSpec(name, tuple(int(d) for d in tensor.dims), onnx_dtype_to_name(tensor.data_type))

    def value_ranges(self) -> dict[str, tuple[int, int]]:
        """Valid ``[low, high)`` ranges of the model's integer inputs, where known."""
        return {s.name: s.value_range for s in self.inputs if s.value_range is not None}

    def to_onnx(self) -> onnx.ModelProto:
        """The whole model as ONNX with concrete input shapes and value-range metadata."""
        model = onnx.ModelProto()
        model.CopyFrom(self.proto)
        model.ir_version = runnable_ir_version(self.proto.ir_version, self.proto.opset_import)
        initializer_names = {t.name for t in model.graph.initializer}
        concrete = {s.name: s for s in self.inputs}
        kept = [vi for vi in model.graph.input if vi.name not in initializer_names or vi.name in concrete]
        del model.graph.input[:]
        for vi in kept:
            spec = concrete.get(vi.name)
            model.graph.input.append(spec.to_value_info() if spec is not None else vi)
        _set_metadata(model, VALUE_RANGES_KEY, json.dumps(
            {k: list(v) for k, v in self.value_ranges().items()}, sort_keys=True))
        return model


def _set_metadata(model: onnx.ModelProto, key: str, value: str) -> None:
    for prop in model.metadata_props:
        if prop.key == key:
            prop.value = value
            return
    model.metadata_props.add(key=key, value=value)


def _build_dag(layers: tuple[LayerNode, ...], constants: Mapping[str, object]) -> nx.DiGraph:
    """Layer DAG: an edge from each producer to each consumer of an activation tensor."""
    dag = nx.DiGraph()
    producer: dict[str, str] = {}
    for layer in layers:
        dag.add_node(layer.name, layer=layer)
        for tensor in layer.all_inputs:
            src = producer.get(tensor)
            if src is None or tensor in constants:
                continue
            if dag.has_edge(src, layer.name):
                dag.edges[src, layer.name]["tensors"].append(tensor)
            else:
                dag.add_edge(src, layer.name, tensors=[tensor])
        for tensor in layer.outputs:
            if tensor:
                producer[tensor] = layer.name
    return dag
