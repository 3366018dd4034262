"""ONNX frontend: read a model, resolve symbolic dimensions, infer every shape, fold constants.

Shape inference runs on a *skeleton* of the model (large weights replaced by typed graph inputs), so
its cost does not grow with the weights; onnx's data propagation resolves shape arithmetic, and
computations whose inputs are all known (Constant nodes, Shape -> Gather -> Concat chains) are folded
into constants with onnx's reference evaluator, then inference runs again with the folded values.
What inference still cannot resolve (data-dependent shapes) is read off one onnxruntime run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dlbricks import _runtime_shapes
from dlbricks._arguments import check_batch_size, check_input_shapes
from dlbricks._ranges import index_ranges
from dlbricks.errors import InvalidArgumentError, ModelLoadError, ShapeInferenceError
from dlbricks.graph import VALUE_RANGES_KEY, LayerNode, ModelGraph, ModelSource
from dlbricks.memory import check_input_sizes, check_largest_tensor
from dlbricks.mxnet_frontend import is_mxnet_model, load_mxnet
from dlbricks.types import KEEP_VALUES_MAX_BYTES, TensorSpec, ValueStatistics, onnx_dtype_to_name

__all__ = ["FOLD_MAX_ELEMENTS", "QUANTIZATION_OPS", "load_model", "unique_dequantize"]

#: A computation is folded into a constant only if its inputs and outputs are at most this large.
FOLD_MAX_ELEMENTS = 4096
_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli", "Dropout"}
#: Ops that stay layers even on constant inputs: onnxruntime's own constant folding skips
#: DequantizeLinear so that its QDQ fusions (DequantizeLinear -> Conv -> QuantizeLinear into
#: QLinearConv...) find the pattern, and without optimizations the model runs them on every call.
QUANTIZATION_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
ModelLike = str | os.PathLike | onnx.ModelProto | bytes


def load_model(
    model: ModelLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch_size: int | None = None,
    *,
    name: str | None = None,
    ignore_unknown_inputs: bool = False,
) -> ModelGraph:
    """Load an ONNX model into a :class:`ModelGraph` with concrete shapes everywhere.

    Parameters
    ----------
    model : path, bytes, onnx.ModelProto, or an MXNet model
        The model. A path may use external data (weights in side files in its folder). An MXNet
        ``*-symbol.json`` (params found beside it), ``mx.sym.Symbol`` or Gluon ``HybridBlock`` loads
        through the MXNet frontend (the ``mxnet`` extra) into the same ModelGraph.
    input_shapes : mapping of str to sequence of int, optional
        Concrete shapes of inputs, overriding the model's dimensions.
    batch_size : int, optional
        Value for the symbolic leading dimension of inputs.
    name : str, optional
        Name of the model; defaults to the file stem or the graph name.
    ignore_unknown_inputs : bool
        Ignore ``input_shapes`` entries that name no input (for one set of shapes over many models).

    Returns
    -------
    ModelGraph

    Raises
    ------
    InvalidArgumentError
        On a bad argument, or where a tensor of the model at these shapes is alone larger than this
        machine's memory (before onnxruntime runs it to find a shape inference missed).

    Examples
    --------
    >>> import dlbricks
    >>> from dlbricks.model_zoo import build
    >>> graph = dlbricks.load_model(build("squeezenet1.1"))
    >>> len(graph) > 50
    True
    """
    if is_mxnet_model(model):  # an MXNet symbol file, symbol, Gluon block, or org.mxnet ModelProto
        return _checked(load_mxnet(model, input_shapes=input_shapes, batch_size=batch_size, name=name,
                                   ignore_unknown_inputs=ignore_unknown_inputs))
    batch_size = check_batch_size(batch_size)
    shapes = check_input_shapes(input_shapes)
    proto, path = _read(model)
    if is_mxnet_model(proto):
        return _checked(load_mxnet(proto, input_shapes=input_shapes, batch_size=batch_size,
                                   name=name or (Path(path).stem if path is not None else None),
                                   ignore_unknown_inputs=ignore_unknown_inputs))
    label = str(path) if path is not None else f"<model {proto.graph.name or 'in memory'}>"
    name = name or (Path(path).stem if path is not None else (proto.graph.name or "model"))
    _check_valid(proto, label, path)
    if ignore_unknown_inputs:
        names = {vi.name for vi in proto.graph.input}
        shapes = {k: v for k, v in shapes.items() if k in names}
    concrete = _concrete_inputs(proto, label, shapes, batch_size)
    check_input_sizes(name, concrete, _input_dtypes(proto))
    opsets = {op.domain or "": int(op.version) for op in proto.opset_import}
    nodes = unique_dequantize(list(proto.graph.node), {o.name for o in proto.graph.output})
    specs, known, folded = _infer_and_fold(proto, nodes, concrete, opsets, label)
    # before any onnxruntime run below (shapes inference missed, values of value-dependent ops)
    check_largest_tensor(name, [specs[n] for n in concrete if n in specs], specs.values())
    ranges = _model_value_ranges(proto, nodes, folded, specs, label)
    constants = _constants(proto, known, folded, nodes)
    layers = _layers(nodes, folded)
    _require_specs(layers, specs, constants, proto, concrete, ranges, label)
    _check_reshapes(layers, specs, label)
    _keep_values(layers, specs, proto, concrete, ranges, label)
    inputs = tuple(specs[n].with_range(ranges.get(n)) for n in concrete)
    outputs = tuple(specs[o.name] for o in proto.graph.output if o.name in specs)
    sha = _content_hash(proto)
    return ModelGraph(
        name=name,
        layers=layers,
        inputs=inputs,
        outputs=outputs,
        tensors={k: v for k, v in specs.items() if k not in constants},
        constants=constants,
        opsets=opsets,
        ir_version=int(proto.ir_version),
        source=ModelSource("onnx", str(path) if path is not None else None, sha),
        proto=proto,
        folded=tuple(nodes[i].name or f"{nodes[i].op_type}_{i}" for i in sorted(folded)),
    )


def _checked(graph: ModelGraph) -> ModelGraph:
    """``graph``, refused if one of its tensors alone is larger than this machine's memory."""
    check_largest_tensor(graph.name, graph.inputs, [*graph.inputs, *graph.tensors.values()])
    return graph


# ----------------------------------------------------------------------------------- reading
def _read(model: ModelLike) -> tuple[onnx.ModelProto, Path | None]:
    if isinstance(model, onnx.ModelProto):
        _check_proto(model, "<in-memory model>")
        return model, None
    if isinstance(model, bytes):
        return _parse(model, "<bytes>"), None
    if not isinstance(model, str | os.PathLike):
        raise InvalidArgumentError(
            f"load_model takes a path, bytes or an onnx.ModelProto. Got {type(model).__name__} instead.")
    path = Path(model)
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file; check the path.")
    if not path.is_file():
        raise ModelLoadError(f"{path}: is not a file; pass the path of an .onnx file.")
    try:
        proto = _parse(path.read_bytes(), str(path))
    except PermissionError as e:
        raise ModelLoadError(f"{path}: cannot be read ({e.strerror}); check its permissions.") from e
    _load_external_data(proto, path)
    return proto, path


def _parse(data: bytes, label: str) -> onnx.ModelProto:
    try:
        proto = onnx.load_model_from_string(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelLoadError(
            f"{label}: is not a valid ONNX file (truncated or not ONNX: {e}); re-export the model.") from e
    _check_proto(proto, label)
    return proto


def _check_proto(proto: onnx.ModelProto, label: str) -> None:
    if not proto.HasField("graph") or proto.ir_version <= 0 or not proto.opset_import:
        raise ModelLoadError(
            f"{label}: is not an ONNX model (no graph, IR version or opset); re-export the model.")


def _check_valid(proto: onnx.ModelProto, label: str, path: Path | None) -> None:
    """Refuse a model that onnxruntime would refuse to load: what ``onnx.checker`` finds (IR version,
    tensors defined twice, initializers of the wrong size...) and node names used twice."""
    # onnxruntime takes graph inputs and outputs without a shape field; the checker does not: give
    # them one for the check only
    shapeless = [vi.type.tensor_type for vi in (*proto.graph.input, *proto.graph.output)
                 if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
    for tt in shapeless:
        tt.shape.SetInParent()
    try:
        try:
            onnx.checker.check_model(proto)
        except ValueError:  # over protobuf's 2 GB: the checker reads the file itself
            if path is not None:
                onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as e:
        detail = " ".join(str(e).split("==>")[0].split())
        node = re.search(r"Bad node spec for node\. Name: (\S*) OpType: (\S+)", str(e))
        where = f" at node '{node.group(1)}' ({node.group(2)})" if node else ""
        raise ModelLoadError(f"{label}: is not a valid ONNX model{where} ({detail}); fix or re-export it.") from e
    finally:
        for tt in shapeless:
            tt.ClearField("shape")
    seen: set[str] = set()
    for node in proto.graph.node:
        if node.name and node.name in seen:
            raise ModelLoadError(f"{label}: two nodes are named '{node.name}', which onnxruntime refuses; "
                                 f"give each node its own name or re-export the model.")
        seen.add(node.name)


def _load_external_data(proto: onnx.ModelProto, path: Path) -> None:
    base = path.parent.resolve()
    external = [t for t in external_data_helper._get_all_tensors(proto)
                if external_data_helper.uses_external_data(t)]
    for tensor in external:
        location = external_data_helper.ExternalDataInfo(tensor).location
        target = (base / location).resolve()
        if os.path.isabs(location) or not target.is_relative_to(base):
            raise ModelLoadError(
                f"{path}: tensor '{tensor.name}' points to external data '{location}' outside the "
                f"model's folder; move the data file next to the model.")
        if not target.is_file():
            raise ModelLoadError(
                f"{path}: external data file '{location}' of tensor '{tensor.name}' is missing; "
                f"copy it into {base}.")
    if external:
        try:
            external_data_helper.load_external_data_for_model(proto, str(base))
        except (OSError, ValueError, onnx.checker.ValidationError) as e:
            raise ModelLoadError(f"{path}: external data cannot be read ({e}); re-export the model.") from e


def _content_hash(proto: onnx.ModelProto) -> str:
    """Hash of the graph and of every weight's bytes (stable across processes)."""
    h = hashlib.sha256()
    graph = onnx.GraphProto()
    graph.node.extend(proto.graph.node)
    graph.input.extend(proto.graph.input)
    graph.output.extend(proto.graph.output)
    h.update(graph.SerializeToString(deterministic=True))
    for init in proto.graph.initializer:
        h.update(init.name.encode())
        h.update(bytes(str(list(init.dims)), "ascii"))
        h.update(init.raw_data if init.raw_data else init.SerializeToString(deterministic=True))
    return h.hexdigest()


# ----------------------------------------------------------------------------------- shapes
def _concrete_inputs(proto: onnx.ModelProto, label: str, shapes: Mapping[str, tuple[int, ...]],
                     batch_size: int | None) -> dict[str, tuple[int, ...]]:
    initializers = {t.name for t in proto.graph.initializer}
    graph_inputs = [vi for vi in proto.graph.input if vi.name not in initializers]
    unknown = sorted(set(shapes) - {vi.name for vi in graph_inputs})
    if unknown:
        raise InvalidArgumentError(
            f"{label}: has no input named {unknown[0]!r}; its inputs are "
            f"{', '.join(vi.name for vi in graph_inputs)}.")
    out: dict[str, tuple[int, ...]] = {}
    for vi in graph_inputs:
        if not vi.type.HasField("tensor_type"):
            raise ShapeInferenceError(f"{label}: input '{vi.name}' is not a tensor; only tensor inputs "
                                      f"are supported.")
        out[vi.name] = _input_shape(vi, label, shapes.get(vi.name), batch_size)
    return out


def _input_dtypes(proto: onnx.ModelProto) -> dict[str, str]:
    """The dtype name of each tensor input whose element type numpy knows."""
    out = {}
    for vi in proto.graph.input:
        try:
            out[vi.name] = onnx_dtype_to_name(vi.type.tensor_type.elem_type)
        except (KeyError, TypeError, ValueError):  # no element type, or one numpy lacks (float8...)
            continue
    return out


def _input_shape(vi: onnx.ValueInfoProto, label: str, given: tuple[int, ...] | None,
                 batch_size: int | None) -> tuple[int, ...]:
    tt = vi.type.tensor_type
    hint = f"give it with input_shapes={{'{vi.name}': (...)}} or --input-shape {vi.name}=D,D,..."
    if given is not None:
        if tt.HasField("shape") and len(tt.shape.dim) != len(given):
            raise InvalidArgumentError(
                f"{label}: input '{vi.name}' has rank {len(tt.shape.dim)}, but the given shape "
                f"{given} has rank {len(given)}.")
        return given
    if not tt.HasField("shape"):
        raise ShapeInferenceError(f"{label}: input '{vi.name}' has no shape; {hint}.")
    dims: list[int] = []
    for axis, dim in enumerate(tt.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            if axis == 0 and batch_size is not None and dim.dim_value != batch_size:
                raise InvalidArgumentError(
                    f"{label}: input '{vi.name}' has a fixed batch dimension {dim.dim_value}; "
                    f"batch_size={batch_size} cannot change it (export the model with a symbolic "
                    f"batch dimension or use input_shapes).")
            dims.append(int(dim.dim_value))
        elif axis == 0 and batch_size is not None:
            dims.append(batch_size)
        elif dim.HasField("dim_value"):
            raise ShapeInferenceError(
                f"{label}: input '{vi.name}' has size {dim.dim_value} at axis {axis}: a tensor with no "
                f"elements has no latency to measure; {hint} with positive sizes.")
        else:
            symbol = dim.dim_param or "?"
            raise ShapeInferenceError(
                f"{label}: input '{vi.name}' has symbolic dimension '{symbol}' at axis {axis}; "
                f"{hint}" + (" or batch_size=N" if axis == 0 else "") + ".")
    return tuple(dims)


def _skeleton(proto: onnx.ModelProto, nodes: list[onnx.NodeProto], concrete: Mapping[str, tuple[int, ...]],
              known: Mapping[str, np.ndarray], skip: set[int]) -> onnx.ModelProto:
    """The model without its large weights (they become typed inputs) and without folded nodes."""
    sk = onnx.ModelProto(ir_version=proto.ir_version)
    sk.opset_import.extend(proto.opset_import)
    sk.functions.extend(proto.functions)
    g = sk.graph
    g.node.extend(n for i, n in enumerate(nodes) if i not in skip)
    dtypes = {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.input}
    for name, shape in concrete.items():
        g.input.append(onnx.helper.make_tensor_value_info(name, dtypes[name], list(shape)))
    for init in proto.graph.initializer:
        if init.name in known:
            continue
        if _numel(init.dims) <= FOLD_MAX_ELEMENTS:
            g.initializer.append(init)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    for name, arr in known.items():
        g.initializer.append(numpy_helper.from_array(arr, name))
    g.output.extend(proto.graph.output)
    return sk


def _infer_and_fold(proto: onnx.ModelProto, nodes: list[onnx.NodeProto],
                    concrete: Mapping[str, tuple[int, ...]], opsets: Mapping[str, int], label: str,
                    ) -> tuple[dict[str, TensorSpec], dict[str, np.ndarray], set[int]]:
    """Infer shapes and fold constants until a fixed point (at most a few rounds)."""
    known: dict[str, np.ndarray] = {}
    folded: set[int] = set()
    specs: dict[str, TensorSpec] = {}
    for _ in range(4):
        inferred = _infer(_skeleton(proto, nodes, concrete, known, folded), label)
        specs.update(inferred)
        newly = _fold(proto, nodes, specs, known, folded, opsets)
        if not newly:
            break
        if all(o in specs for i, n in enumerate(nodes) if i not in folded for o in n.output if o):
            break
    return specs, known, folded


def _infer(model: onnx.ModelProto, label: str) -> dict[str, TensorSpec]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ShapeInferenceError(f"{label}: shape inference failed: {first}") from e
    specs: dict[str, TensorSpec] = {}
    g = inferred.graph
    for vi in (*g.input, *g.value_info, *g.output):
        spec = _spec_of(vi)
        if spec is not None:
            specs[vi.name] = spec
    for init in g.initializer:
        specs[init.name] = TensorSpec(init.name, tuple(int(d) for d in init.dims),
                                      onnx_dtype_to_name(init.data_type))
    return specs


def _spec_of(vi: onnx.ValueInfoProto) -> TensorSpec | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or tt.elem_type == 0:
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return TensorSpec(vi.name, tuple(dims), onnx_dtype_to_name(tt.elem_type))


def _numel(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims)


# ----------------------------------------------------------------------------------- folding
def _fold(proto: onnx.ModelProto, nodes: list[onnx.NodeProto], specs: dict[str, TensorSpec],
          known: dict[str, np.ndarray], folded: set[int], opsets: Mapping[str, int]) -> int:
    """Fold every node whose result is a small constant; returns how many were folded."""
    small_inits = {t.name: t for t in proto.graph.initializer if _numel(t.dims) <= FOLD_MAX_ELEMENTS}
    count = 0
    for i, node in enumerate(nodes):
        if i in folded:
            continue
        values = _fold_node(node, specs, known, small_inits, opsets)
        if values is None:
            continue
        folded.add(i)
        count += 1
        for name, arr in zip(node.output, values, strict=False):
            if name:
                known[name] = arr
                specs[name] = TensorSpec(name, tuple(arr.shape), arr.dtype.name)
    return count


def _fold_node(node: onnx.NodeProto, specs: Mapping[str, TensorSpec], known: dict[str, np.ndarray],
               small_inits: Mapping[str, onnx.TensorProto], opsets: Mapping[str, int],
               ) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in _NONDETERMINISTIC | QUANTIZATION_OPS:
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    if node.op_type in ("Shape", "Size"):
        src = specs.get(node.input[0])
        if src is None:
            return None
        return [_shape_value(node, src.shape)]
    inputs = [n for n in node.input if n]
    if node.op_type != "Constant" and not inputs:
        return None
    feeds: dict[str, np.ndarray] = {}
    for name in inputs:
        arr = known.get(name)
        if arr is None and name in small_inits:
            arr = numpy_helper.to_array(small_inits[name])
        if arr is None:
            return None
        feeds[name] = arr
    for out in node.output:
        spec = specs.get(out)
        if out and spec is not None and spec.numel > FOLD_MAX_ELEMENTS:
            return None
    try:
        values = ReferenceEvaluator(_one_node_model(node, opsets)).run(None, feeds)
    except Exception:  # noqa: BLE001 - the reference runtime lacks some ops: keep the node a layer
        return None
    arrays = [np.asarray(v) for v in values]
    if any(a.size > FOLD_MAX_ELEMENTS or a.dtype == object for a in arrays):
        return None
    return arrays


def _one_node_model(node: onnx.NodeProto, opsets: Mapping[str, int]) -> onnx.ModelProto:
    """``node`` alone in a model of the model's opsets: the reference evaluator, given a bare node,
    runs the latest version of its op (Unsqueeze-13 for an opset-11 Unsqueeze with an ``axes``
    attribute, which then fails)."""
    untyped = [onnx.helper.make_value_info(n, onnx.TypeProto()) for n in node.input if n]
    outputs = [onnx.helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n]
    graph = onnx.helper.make_graph([node], "fold", untyped, outputs)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(math.prod(shape), dtype=np.int64)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return np.array(shape[start:end], dtype=np.int64)


def _constants(proto: onnx.ModelProto, known: Mapping[str, np.ndarray], folded: set[int],
               nodes: list[onnx.NodeProto]) -> dict[str, onnx.TensorProto]:
    constants = {t.name: t for t in proto.graph.initializer}
    produced = {o for i in folded for o in nodes[i].output if o}
    for name in produced:
        constants[name] = numpy_helper.from_array(known[name], name)
    return constants


def unique_dequantize(nodes: list[onnx.NodeProto], graph_outputs: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` with each DequantizeLinear copied once per further consumer, as onnxruntime runs it.

    onnxruntime's ``EnsureUniqueDQForNodeUnit`` transformer runs at every optimization level (unless
    ``session.disable_quant_qdq`` is set): a DequantizeLinear read by several node inputs is copied so
    that each input reads a copy of its own (the first keeps the original, unless the original is a
    model output or read inside a subgraph, when every input gets a copy). Each copy runs, so a
    model with shared DequantizeLinears runs more of them than it has. The copies are inserted after
    the original, named ``<name>/duplicated`` (then ``_1``, ``_2``...), and their readers read them.
    """
    readers: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(nodes):
        for slot, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((i, slot))
    implicit = {name for node in nodes for name in _implicit_inputs(node)}
    out: list[onnx.NodeProto] = []
    renamed: dict[tuple[int, int], str] = {}
    for i, node in enumerate(nodes):
        node = _with_inputs(node, [renamed.get((i, slot), name) for slot, name in enumerate(node.input)])
        out.append(node)
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        edges = readers.get(node.output[0], [])
        keep_first = node.output[0] not in graph_outputs and node.output[0] not in implicit
        for k, edge in enumerate(edges[1:] if keep_first else edges):
            suffix = "/duplicated" + (f"_{k}" if k else "")
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = f"{node.name or f'DequantizeLinear_{i}'}{suffix}"
            copy.ClearField("output")
            copy.output.append(node.output[0] + suffix)
            renamed[edge] = copy.output[0]
            out.append(copy)
    return out


def _with_inputs(node: onnx.NodeProto, inputs: list[str]) -> onnx.NodeProto:
    """``node``, or a copy of it reading ``inputs`` where they differ from its own."""
    if list(node.input) == inputs:
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.ClearField("input")
    copy.input.extend(inputs)
    return copy


def _layers(nodes: list[onnx.NodeProto], folded: set[int]) -> tuple[LayerNode, ...]:
    layers: list[LayerNode] = []
    used: set[str] = set()
    for i, node in enumerate(nodes):
        if i in folded:
            continue
        name = node.name or f"{node.op_type}_{i}"
        if name in used:
            name = f"{name}_{i}"
        used.add(name)
        layers.append(LayerNode(name=name, op_type=node.op_type, domain=node.domain or "",
                                inputs=tuple(node.input), outputs=tuple(node.output),
                                implicit_inputs=_implicit_inputs(node), proto=node, index=i))
    return tuple(layers)


def _implicit_inputs(node: onnx.NodeProto) -> tuple[str, ...]:
    """Outer-scope names read inside the node's subgraphs, in order of first use."""
    found: dict[str, None] = {}
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            for name in _free_names(graph):
                found.setdefault(name, None)
    return tuple(found)


def _free_names(graph: onnx.GraphProto) -> list[str]:
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    free: list[str] = []
    for node in graph.node:
        for name in node.input:
            if name and name not in defined and name not in free:
                free.append(name)
        for name in _implicit_inputs(node):
            if name not in defined and name not in free:
                free.append(name)
        defined.update(o for o in node.output if o)
    return free


# ----------------------------------------------------------------------------------- ranges
def _model_value_ranges(proto: onnx.ModelProto, nodes: list[onnx.NodeProto], folded: set[int],
                        specs: Mapping[str, TensorSpec], label: str) -> dict[str, tuple[int, int]]:
    """Valid ranges of integer tensors: from consumers (Gather indices...) and the model's metadata."""
    ranges = index_ranges([n for i, n in enumerate(nodes) if i not in folded], specs)
    for prop in proto.metadata_props:
        if prop.key == VALUE_RANGES_KEY:
            try:
                given = json.loads(prop.value)
                ranges.update({k: (int(v[0]), int(v[1])) for k, v in given.items()})
            except (ValueError, TypeError, IndexError, KeyError) as e:
                raise ModelLoadError(
                    f"{label}: metadata '{VALUE_RANGES_KEY}' is not valid JSON of "
                    f"{{name: [low, high]}} ({e}); fix or remove it.") from e
    return ranges


# ----------------------------------------------------------------------------------- fallback
def _require_specs(layers: tuple[LayerNode, ...], specs: dict[str, TensorSpec],
                   constants: Mapping[str, onnx.TensorProto], proto: onnx.ModelProto,
                   concrete: Mapping[str, tuple[int, ...]], ranges: Mapping[str, tuple[int, int]],
                   label: str) -> None:
    """Make sure every activation has a concrete spec; ask onnxruntime for the ones inference missed."""
    missing = [t for layer in layers for t in (*layer.all_inputs, *layer.outputs)
               if t and t not in specs and t not in constants]
    if not missing:
        return
    def where(tensor: str) -> str:
        producer = next((la for la in layers if tensor in la.outputs), None)
        if producer is None:
            return ""
        op = f"{producer.domain}:{producer.op_type}" if producer.domain else producer.op_type
        return f" produced by node '{producer.name}' ({op})"

    missing = list(dict.fromkeys(missing))
    specs.update(_runtime_shapes.shapes_from_runtime(proto, concrete, ranges, missing,
                                                     f"{label}: tensor '{missing[0]}'{where(missing[0])}"))
    still = [t for t in missing if t not in specs]
    if still:
        raise ShapeInferenceError(
            f"{label}: tensor '{still[0]}'{where(still[0])} has no concrete shape; give input_shapes or "
            f"re-export the model with static shapes.")


#: Standard ops whose time depends on their input's values, not only on how they are distributed: a
#: non-maximum suppression's follows the boxes that pass its threshold and overlap; a Softmax behind an
#: attention mask reads the mask's huge negative values (float32's least, -3.4e38, from torch's
#: exports; -10000 in a BERT built by hand), whose exponentials underflow and some x86 processors
#: compute on a slow path (on an Intel Xeon, a BERT's four Softmax layers took 445 us each in the
#: model against 25 us each for their brick fed normal values). Their inputs keep their values in
#: the model's run (:meth:`~dlbricks.types.ValueStatistics.with_values`), which their bricks are fed.
VALUE_DEPENDENT_OPS = frozenset({"NonMaxSuppression", "Softmax"})
#: Of these, the ops whose input keeps its values only where it is masked, holding a value below
#: :data:`MASKED_BELOW`: an unmasked Softmax runs as fast on normal values, and its bricks stay shared
#: across layers and models.
MASK_DEPENDENT_OPS = frozenset({"Softmax"})
#: A value below this is a mask's: its exponential underflows float32 (below -87.3) however the
#: Softmax shifts its row, and a Softmax's scores stay far above it (masks add -10000 or -3.4e38).
MASKED_BELOW = -1e3
#: Most bytes of values a model's bricks keep in all (a BERT-large at 384 tokens would keep 226 MB of
#: masked scores): past it, the further tensors get statistics of normal values, as before.
KEEP_VALUES_TOTAL_BYTES = 64 << 20


def _keep_values(layers: tuple[LayerNode, ...], specs: dict[str, TensorSpec], proto: onnx.ModelProto,
                 concrete: Mapping[str, tuple[int, ...]], ranges: Mapping[str, tuple[int, int]],
                 label: str) -> None:
    """Give the float tensors (rank >= 3, up to :data:`~dlbricks.types.KEEP_VALUES_MAX_BYTES`) that
    ops of :data:`VALUE_DEPENDENT_OPS` read statistics that keep their values in one onnxruntime run
    of the model on the seeded inputs a whole model is measured with (none where it cannot run).

    A masked Softmax's input of the shape of an earlier one's takes the earlier one's values: the
    mask, the same in every layer, is what its time follows, so its layers keep sharing one brick,
    and the model runs only as far as the first of each shape (``only_execute_path_to_fetches``)."""
    readers = [(t, la.op_type) for la in layers if la.op_type in VALUE_DEPENDENT_OPS and la.domain in ("", "ai.onnx")
               for t in la.all_inputs[:2] if t in specs and len(specs[t].shape) >= 3
               and specs[t].numel * 4 <= KEEP_VALUES_MAX_BYTES]
    if not readers:
        return
    names = list(dict.fromkeys(t for t, _ in readers))
    masked_only = {t for t in names if all(op in MASK_DEPENDENT_OPS for u, op in readers if u == t)}
    if masked_only and not _has_mask_constant(proto):  # no value that low to add: nothing to run for
        names = [t for t in names if t not in masked_only]
        if not names:
            return
    first_of_shape = {t: next(u for u in names if u in masked_only and specs[u].shape == specs[t].shape
                              and specs[u].dtype == specs[t].dtype) for t in names if t in masked_only}
    fetched = [t for t in names if first_of_shape.get(t, t) == t]
    try:
        values = _runtime_shapes.values_from_runtime(proto, concrete, ranges, fetched,
                                                     f"{label}: tensor '{fetched[0]}'", path_only=True)
    except ShapeInferenceError:  # a model onnxruntime cannot run: its bricks get random values, as others
        return
    kept: dict[str, ValueStatistics] = {}
    total = 0
    for name in fetched:
        array = values.get(name)
        if array is None or (name in masked_only and not (array < MASKED_BELOW).any()):
            continue
        stats = ValueStatistics.of(array)
        if stats is not None and total + array.size * 4 <= KEEP_VALUES_TOTAL_BYTES:
            total += array.size * 4
            kept[name] = stats.with_values(array)
    for name in names:
        if first_of_shape.get(name, name) in kept:
            specs[name] = specs[name].with_statistics(kept[first_of_shape.get(name, name)])


def _has_mask_constant(proto: onnx.ModelProto, most_elements: int = 1024) -> bool:
    """Whether a small constant of ``proto`` (an initializer or a Constant node's value, at most
    ``most_elements``) holds a float below :data:`MASKED_BELOW`: what a mask adds to the scores it
    masks (a model without one is not run for its Softmax inputs)."""
    tensors = [t for t in proto.graph.initializer if math.prod(t.dims) <= most_elements]
    tensors += [a.t for n in proto.graph.node if n.op_type == "Constant" for a in n.attribute
                if a.name == "value" and math.prod(a.t.dims) <= most_elements]
    for tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            continue
        if tensor.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
            values = numpy_helper.to_array(tensor)
            if values.size and float(np.min(values)) < MASKED_BELOW:
                return True
    return False


def _check_reshapes(layers: tuple[LayerNode, ...], specs: Mapping[str, TensorSpec], label: str) -> None:
    """Refuse a Reshape whose output holds another number of elements than its input: onnxruntime
    loads such a model and fails on its first run."""
    for layer in layers:
        if layer.op_type != "Reshape" or layer.domain not in ("", "ai.onnx") or not layer.outputs:
            continue
        data, out = specs.get(layer.all_inputs[0]), specs.get(layer.outputs[0])
        if data is not None and out is not None and data.numel != out.numel:
            raise ShapeInferenceError(
                f"{label}: node '{layer.name}' (Reshape) cannot reshape {data.numel} elements "
                f"{tuple(data.shape)} into shape {tuple(out.shape)} ({out.numel} elements); fix the "
                f"model's target shape or the input shapes given.")
