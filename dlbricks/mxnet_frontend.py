"""MXNet frontend: read a symbol (JSON file, ``mx.sym.Symbol`` or Gluon ``HybridBlock``) into a ModelGraph.

The result is the same :class:`~dlbricks.ModelGraph` as for ONNX models: every MXNet op becomes a
:class:`~dlbricks.graph.LayerNode` whose ``proto`` is an ``onnx.NodeProto`` of domain ``org.mxnet``, its
``op_type`` the MXNet op name and its attributes the MXNet attributes as strings; weights become
``onnx.TensorProto`` constants; data variables become graph inputs. :func:`dlbricks.decompose` then
works unchanged (canonical names, signatures, dedup, brick DAG). Shapes and dtypes come from MXNet's
own inference (``get_internals().infer_shape`` / ``infer_type``).

Each node also carries :data:`LAYOUTS_ATTR`, the memory layout each of its inputs has in the model
when MXNet runs with oneDNN (blocked after convolutions and the ops that keep their input's layout,
plain after the others): a oneDNN kernel fed a plain input reorders it first, which costs a Concat
ten times its own time, so the MXNet backend feeds each brick its inputs in the model's layout.

mxnet is imported lazily, inside functions: ``import dlbricks`` works without it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import re
import warnings
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from dlbricks._arguments import check_batch_size, check_input_shapes
from dlbricks._mxnet import (
    BLOCKING_OPS,
    LAYOUTS_ATTR,
    MXNET_DOMAIN,
    POSITIVE_MXNET_INPUTS,
    first_line,
    import_mxnet,
    runs_on_onednn_layouts,
    to_ndarray,
)
from dlbricks.bricks import synthetic_array
from dlbricks.errors import InvalidArgumentError, ModelLoadError, ShapeInferenceError
from dlbricks.graph import LayerNode, ModelGraph, ModelSource
from dlbricks.inputs import random_inputs
from dlbricks.mxnet_bricks import is_mxnet_onnx, model_to_symbol
from dlbricks.types import KEEP_VALUES_MAX_BYTES, TensorSpec, ValueStatistics

__all__ = ["LAYOUTS_ATTR", "MXNET_DOMAIN", "MXNET_OPSET", "first_line", "import_mxnet", "is_mxnet_model",
           "load_mxnet", "runs_on_onednn_layouts"]

#: Version of that domain (the representation, not MXNet's version).
MXNET_OPSET = 1
IR_VERSION = 8
#: Inputs that MXNet's kernels of an op write to when it runs (BatchNorm sets a fixed gamma to 1).
_WRITTEN_INPUTS: Mapping[str, tuple[int, ...]] = {"BatchNorm": (1,), "SyncBatchNorm": (1,),
                                                  "_contrib_SyncBatchNorm": (1,)}
_DATA_NAME = re.compile(r"^data\d*$")
_MX_DTYPES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64",
              7: "bool"}

SymbolLike = str | os.PathLike | onnx.ModelProto | Any  # also an mx.sym.Symbol or a gluon.HybridBlock


def is_mxnet_model(model: object) -> bool:
    """Whether :func:`dlbricks.load_model` should hand ``model`` to :func:`load_mxnet`.

    True for a path ending in ``.json``, for an ``mx.sym.Symbol`` or a Gluon block (any class of
    whose bases lives in ``mxnet``), and for an ``onnx.ModelProto`` importing the ``org.mxnet``
    domain (``ModelGraph.to_onnx()`` of an MXNet model). Never imports mxnet.
    """
    if isinstance(model, str | os.PathLike):
        return os.fspath(model).lower().endswith(".json")
    if isinstance(model, onnx.ModelProto):
        return any(op.domain == MXNET_DOMAIN for op in model.opset_import)
    return any(cls.__module__.split(".")[0] == "mxnet" for cls in type(model).__mro__)


@dataclass(frozen=True, slots=True)
class _Source:
    """What was read: the symbol, its parameters, where it came from."""

    symbol: Any
    params: dict[str, Any]  # numpy arrays, or NDArrays read from a file
    path: Path | None
    label: str
    name: str
    shape_hints: dict[str, tuple[int, ...]]
    data_names: tuple[str, ...] | None = None  # known data inputs (an org.mxnet ONNX model's inputs)


def load_mxnet(
    symbol: SymbolLike,
    params: str | os.PathLike | Mapping[str, Any] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch_size: int | None = None,
    name: str | None = None,
    *,
    ignore_unknown_inputs: bool = False,
) -> ModelGraph:
    """Load an MXNet model into a :class:`ModelGraph` with concrete shapes everywhere.

    Parameters
    ----------
    symbol : path, mx.sym.Symbol, gluon.HybridBlock or onnx.ModelProto
        A ``*-symbol.json`` file, a symbol, an initialized Gluon ``HybridBlock`` (traced with
        symbolic inputs named after ``input_shapes``, as ``HybridBlock.export`` does), or the ONNX
        form of an MXNet model (``ModelGraph.to_onnx()``: ``org.mxnet`` nodes, weights included).
    params : path or mapping, optional
        A ``.params`` file (``arg:``/``aux:`` keys, as ``export`` and ``save_checkpoint`` write)
        or a mapping of name to array. Default: for a file ``P-symbol.json``, ``P-0000.params``
        beside it if present (else the highest epoch ``P-NNNN.params``); for a block, its own
        parameters. Without parameters the weights are synthetic (seeded).
    input_shapes : mapping of str to sequence of int, optional
        Shapes of the data inputs. Default: the ``__shape__`` hints of the data variables.
    batch_size : int, optional
        Replaces the leading dimension of every data input (also a ``0`` in a ``__shape__`` hint).
    name : str, optional
        Default: the file name without ``-symbol.json``, or the symbol's / block's name.
    ignore_unknown_inputs : bool
        Ignore ``input_shapes`` entries that name no variable (one set of shapes for many models).

    Returns
    -------
    ModelGraph
        Layers are ``org.mxnet`` nodes; ``opsets == {"org.mxnet": 1}``; ``source.format == "mxnet"``.
        Every feature map's spec carries its :class:`~dlbricks.types.ValueStatistics` in one run of the
        model (on CPU, one op at a time) on seeded standard normal inputs:
        MXNet bricks are fed values drawn with them.

    Raises
    ------
    ModelLoadError
        Missing or unreadable files, mxnet not installed, uninitialized blocks.
    ShapeInferenceError
        A data input without a shape, or a shape MXNet cannot propagate.
    InvalidArgumentError
        Bad ``input_shapes`` / ``batch_size``, or an input name the model does not have.
    """
    batch_size = check_batch_size(batch_size)
    shapes = check_input_shapes(input_shapes)
    src = _read(symbol, params, shapes)
    if ignore_unknown_inputs:
        known = set(src.symbol.list_arguments())
        shapes = {k: v for k, v in shapes.items() if k in known}
    data_names = _data_inputs(src, shapes)
    data_shapes = _data_shapes(src, data_names, shapes, batch_size)
    return _build(src, data_shapes, name)


# ----------------------------------------------------------------------------------- reading
def _read(symbol: SymbolLike, params: Any, shapes: Mapping[str, tuple[int, ...]]) -> _Source:
    if isinstance(symbol, str | os.PathLike):
        return _read_file(Path(symbol), params)
    if isinstance(symbol, onnx.ModelProto):
        return _read_onnx(symbol)
    mx = import_mxnet("<mxnet object>")
    if isinstance(symbol, mx.sym.Symbol):
        label = f"<mxnet symbol {symbol.name}>"
        weights = _read_params(params, label) if params is not None else {}
        return _Source(_unique_symbol(mx, symbol), weights, None, label, symbol.name or "model", _hints(symbol))
    if isinstance(symbol, mx.gluon.HybridBlock):
        src = _read_block(mx, symbol, params, shapes)
        return _Source(_unique_symbol(mx, src.symbol), src.params, src.path, src.label, src.name, src.shape_hints)
    raise InvalidArgumentError(
        f"load_mxnet takes a path to a *-symbol.json file, an mx.sym.Symbol or a gluon.HybridBlock. "
        f"Got {type(symbol).__name__} instead.")


def _read_file(path: Path, params: Any) -> _Source:
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file; check the path.")
    if not path.is_file():
        raise ModelLoadError(f"{path}: is not a file; pass the path of a *-symbol.json file.")
    try:
        text = path.read_text()
        graph = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{path}: is not a JSON file ({e}); pass an MXNet *-symbol.json file.") from e
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) or "heads" not in graph:
        raise ModelLoadError(f"{path}: is not an MXNet symbol (no 'nodes' and 'heads'); export the model "
                             f"with HybridBlock.export or Symbol.save.")
    mx = import_mxnet(str(path))
    if unique_names(graph):
        text = json.dumps(graph)
    try:
        sym = mx.sym.load_json(text)
    except mx.base.MXNetError as e:
        raise ModelLoadError(f"{path}: MXNet cannot read the symbol ({first_line(e)}); re-export it.") from e
    stem = path.name[: -len("-symbol.json")] if path.name.endswith("-symbol.json") else path.stem
    if params is None:
        params = _default_params(path, stem)
        if params is None:
            warnings.warn(f"{path}: no parameter file {stem}-0000.params beside it; its weights are synthetic "
                          f"(seeded): latencies hold, outputs are not the model's.", RuntimeWarning, stacklevel=4)
    weights = _read_params(params, str(path)) if params is not None else {}
    return _Source(sym, weights, path, str(path), stem, _hints(sym))


def unique_names(graph: dict[str, Any]) -> int:
    """Make the node names of a symbol's JSON unique, in place; return how many were renamed.

    MXNet addresses nodes by position, so a symbol may repeat a name (GluonCV calls one stage
    twice): MXNet loads and runs it. An op node that repeats an earlier name becomes ``NAME_1``,
    ``NAME_2``... (the first free one); a variable that repeats one is the same variable (MXNet binds
    arguments by name), so its readers read the first.
    """
    nodes = graph["nodes"]
    names = {n["name"] for n in nodes}
    first: dict[str, int] = {}
    alias: dict[int, int] = {}
    renamed = 0
    for index, node in enumerate(nodes):
        name = node["name"]
        if name not in first:
            first[name] = index
            continue
        if node["op"] == "null" and nodes[first[name]]["op"] == "null":
            alias[index] = first[name]
            continue
        k = 1
        while f"{name}_{k}" in names:
            k += 1
        node["name"] = f"{name}_{k}"
        names.add(node["name"])
        first[node["name"]] = index
        renamed += 1
    if alias:
        for node in nodes:
            node["inputs"] = [[alias.get(r[0], r[0]), *r[1:]] for r in node["inputs"]]
        graph["heads"] = [[alias.get(r[0], r[0]), *r[1:]] for r in graph["heads"]]
    return renamed + len(alias)


def _unique_symbol(mx: ModuleType, symbol: Any) -> Any:
    """``symbol``, or its copy with unique node names (see :func:`unique_names`)."""
    graph = json.loads(symbol.tojson())
    return mx.sym.load_json(json.dumps(graph)) if unique_names(graph) else symbol


def _read_onnx(model: onnx.ModelProto) -> _Source:
    """An MXNet model in its ONNX form (``ModelGraph.to_onnx()`` of a graph loaded by load_mxnet)."""
    label = f"<org.mxnet model {model.graph.name or 'in memory'}>"
    if not is_mxnet_onnx(model):
        raise InvalidArgumentError(f"{label}: has nodes of domains other than {MXNET_DOMAIN}; load it with "
                                   f"dlbricks.load_model.")
    built = model_to_symbol(model)
    hints = {vi.name: tuple(int(d.dim_value) for d in vi.type.tensor_type.shape.dim) for vi in model.graph.input}
    params = {**built.arg_params, **built.aux_params}
    return _Source(built.symbol, params, None, label, model.graph.name or "model", hints, built.input_names)


def _default_params(path: Path, stem: str) -> Path | None:
    exact = path.with_name(f"{stem}-0000.params")
    if exact.is_file():
        return exact
    epochs = sorted(p for p in path.parent.glob(f"{stem}-*.params") if re.fullmatch(r"\d{4}", p.stem[-4:]))
    return epochs[-1] if epochs else None


def _read_params(params: Any, label: str) -> dict[str, np.ndarray]:
    """Parameters by variable name (``arg:``/``aux:`` prefixes removed), as numpy arrays (a file's as
    the NDArrays MXNet read, which nothing else holds)."""
    owned = isinstance(params, str | os.PathLike)
    if isinstance(params, str | os.PathLike):
        file = Path(params)
        if not file.is_file():
            raise ModelLoadError(f"{label}: parameter file {file} does not exist; pass params=... or "
                                 f"put it beside the symbol.")
        mx = import_mxnet(label)
        try:
            loaded = mx.nd.load(str(file))
        except mx.base.MXNetError as e:
            raise ModelLoadError(f"{file}: is not an MXNet .params file ({first_line(e)}); re-export the "
                                 f"model.") from e
        if not isinstance(loaded, dict):
            raise ModelLoadError(f"{file}: holds a list of arrays, not named parameters; save them with "
                                 f"names (HybridBlock.export).")
        params = loaded
    if not isinstance(params, Mapping):
        raise InvalidArgumentError(f"{label}: 'params' must be a path or a mapping of name to array. "
                                   f"Got {type(params).__name__} instead.")
    out: dict[str, Any] = {}
    for key, value in params.items():  # a file's NDArrays kept as they are: copied once, into the model
        bare = key.split(":", 1)[1] if key.startswith(("arg:", "aux:")) else key
        out[bare] = value if hasattr(value, "asnumpy") and owned else (
            value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value))
    return out


def _read_block(mx: ModuleType, block: Any, params: Any, shapes: Mapping[str, tuple[int, ...]]) -> _Source:
    label = f"<gluon block {block.name}>"
    if not shapes:
        raise ShapeInferenceError(f"{label}: a Gluon block has no input shapes; give "
                                  f"input_shapes={{'data': (1, 3, 224, 224)}}.")
    sym = block(*[mx.sym.var(n) for n in shapes])
    if isinstance(sym, list | tuple):
        sym = mx.sym.Group(list(sym))
    if params is not None:
        weights = _read_params(params, label)
    else:
        weights = _block_params(mx, block, shapes, label)
    return _Source(sym, weights, None, label, block.name, {})


def _block_params(mx: ModuleType, block: Any, shapes: Mapping[str, tuple[int, ...]],
                  label: str) -> dict[str, np.ndarray]:
    """The block's parameters; one forward pass finishes a deferred initialization."""
    collected = list(block.collect_params().values())
    for attempt in range(2):
        try:
            return {p.name: p.data().asnumpy() for p in collected}
        except mx.gluon.parameter.DeferredInitializationError as e:
            if attempt:
                raise ModelLoadError(f"{label}: parameters stay uninitialized ({first_line(e)}).") from e
            block(*[mx.nd.zeros(s) for s in shapes.values()])
        except RuntimeError as e:
            raise ModelLoadError(f"{label}: its parameters are not initialized ({first_line(e)}); call "
                                 f"block.initialize() first.") from e
    raise AssertionError("unreachable")  # pragma: no cover


def _hints(sym: Any) -> dict[str, tuple[int, ...]]:
    """``__shape__`` hints of variables (``mx.sym.var('data', shape=...)``)."""
    hints = {}
    for var, attrs in sym.attr_dict().items():
        text = attrs.get("__shape__")
        if text:
            try:
                dims = tuple(int(d) for d in re.findall(r"-?\d+", text))
            except ValueError:  # pragma: no cover - regex only yields ints
                continue
            hints[var] = dims
    return hints


# ----------------------------------------------------------------------------------- inputs
def _data_inputs(src: _Source, shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """Variables that are data inputs, in the order of the symbol's arguments.

    Those named in ``input_shapes``, and those without a parameter named ``data``, ``data0``... or
    ``*_label``; every other variable is a weight (synthetic where ``params`` lacks it).
    """
    args = list(src.symbol.list_arguments())
    unknown = sorted(set(shapes) - set(args))
    if unknown:
        raise InvalidArgumentError(f"{src.label}: has no input named {unknown[0]!r}; its variables "
                                   f"include {', '.join(args[:5])}.")
    data = [a for a in args if a in shapes or (src.data_names is not None and a in src.data_names) or (
        src.data_names is None and a not in src.params and (_DATA_NAME.match(a) or a.endswith("_label")))]
    if not data:
        raise ShapeInferenceError(f"{src.label}: cannot tell its data inputs (none is named 'data'); name "
                                  f"them with input_shapes={{'{args[0] if args else 'data'}': (...)}}.")
    if src.params:
        aux = src.symbol.list_auxiliary_states()
        missing = [a for a in (*args, *aux) if a not in src.params and a not in data]
        if missing:
            warnings.warn(f"{src.label}: {len(missing)} weights are not in the parameters (first: "
                          f"'{missing[0]}'); they get synthetic values.", RuntimeWarning, stacklevel=3)
    return data


def _data_shapes(src: _Source, names: Sequence[str], shapes: Mapping[str, tuple[int, ...]],
                 batch_size: int | None) -> dict[str, tuple[int, ...]]:
    """Shapes of the data inputs: given, else ``__shape__`` hints, else inferred from the others
    (a ``softmax_label`` follows from ``data``)."""
    out: dict[str, tuple[int, ...]] = {}
    for n in names:
        dims = list(shapes.get(n) or src.shape_hints.get(n) or ())
        if dims and batch_size is not None:
            dims[0] = batch_size
        if dims and all(d > 0 for d in dims):
            out[n] = tuple(dims)
    missing = [n for n in names if n not in out]
    if missing:
        inferred = _partial_shapes(src, out)
        for n in missing:
            dims = list(inferred.get(n) or shapes.get(n) or src.shape_hints.get(n) or ())
            if dims and all(d > 0 for d in dims):
                out[n] = tuple(dims)
                continue
            hint = f"give it with input_shapes={{'{n}': (...)}}"
            if not dims:
                raise ShapeInferenceError(f"{src.label}: data input '{n}' has no shape; {hint}.")
            axis = next(i for i, d in enumerate(dims) if d <= 0)
            extra = " or batch_size=N" if axis == 0 else ""
            raise ShapeInferenceError(f"{src.label}: data input '{n}' has unknown dimension {dims[axis]} "
                                      f"at axis {axis}; {hint}{extra}.")
    return {n: out[n] for n in names}


def _partial_shapes(src: _Source, known: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Argument shapes that MXNet infers from ``known`` ones (empty where it cannot)."""
    if not known:
        return {}
    mx = import_mxnet(src.label)
    try:
        arg_shapes, _, _ = src.symbol.infer_shape_partial(**known)
    except mx.base.MXNetError:
        return {}
    if arg_shapes is None:
        return {}
    return {n: tuple(s) for n, s in zip(src.symbol.list_arguments(), arg_shapes, strict=True) if s}


# ----------------------------------------------------------------------------------- graph
def _build(src: _Source, data_shapes: Mapping[str, tuple[int, ...]], name: str | None) -> ModelGraph:
    specs = _infer(src, data_shapes)
    graph = json.loads(src.symbol.tojson())
    nodes = graph["nodes"]
    outputs_of = [_node_outputs(n, specs) for n in nodes]
    weights: list[str] = []
    layers: list[LayerNode] = []
    positive = _positive_variables(nodes)
    layouts: dict[str, str] = {}
    for index, node in enumerate(nodes):
        if node["op"] == "null":
            var = node["name"]
            if var not in data_shapes:
                weights.append(var)
            layouts[var] = "plain" if var in data_shapes else "const"
            continue
        inputs = tuple(_input_name(src.label, nodes, outputs_of, ref, node["name"]) for ref in node["inputs"])
        attrs = _attributes(node)
        in_layouts = [layouts[i] for i in inputs]
        out = _output_layout(node["op"], attrs, in_layouts)
        layouts.update((o, out) for o in outputs_of[index])
        attrs[LAYOUTS_ATTR] = ",".join(in_layouts)
        proto = onnx.helper.make_node(node["op"], list(inputs), list(outputs_of[index]), name=node["name"],
                                      domain=MXNET_DOMAIN, **attrs)
        layers.append(LayerNode(node["name"], node["op"], MXNET_DOMAIN, inputs, outputs_of[index], proto=proto))
    heads = [_input_name(src.label, nodes, outputs_of, ref, "the graph outputs") for ref in graph["heads"]]
    inputs = tuple(specs[n] for n in data_shapes)
    outputs = tuple(specs[h] for h in heads)
    weight_set = set(weights)
    tensors = {k: v for k, v in specs.items() if k not in weight_set}
    name = name or src.name
    proto = _model_proto(name, layers, inputs, outputs, tensors)
    arrays = {var: _weight(src, var, specs[var], var in positive) for var in weights}
    stats = _value_statistics(src.label, src.symbol, arrays, inputs, [o for layer in layers for o in layer.outputs])
    constants: dict[str, onnx.TensorProto] = {}
    for var in weights:  # each weight then held once: in the model's initializers, which constants refer to
        tensor = proto.graph.initializer.add()
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(arrays.pop(var).asnumpy()), var))
        constants[var] = tensor
    release_memory(import_mxnet(src.label))
    tensors = {k: v.with_statistics(stats.get(k)) for k, v in tensors.items()}
    return ModelGraph(
        name=name, layers=tuple(layers), inputs=inputs, outputs=outputs, tensors=tensors,
        constants=constants, opsets={MXNET_DOMAIN: MXNET_OPSET}, ir_version=IR_VERSION,
        source=ModelSource("mxnet", str(src.path) if src.path else None, _content_hash(graph, constants)),
        proto=proto)


def _infer(src: _Source, data_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, TensorSpec]:
    """Shape and dtype of every output of every node (variables included), by name."""
    mx = import_mxnet(src.label)
    internals = src.symbol.get_internals()
    names = internals.list_outputs()
    known = {k: v.shape for k, v in src.params.items() if k in set(names)}
    dtypes = {n: _var_dtype(src.symbol, n) for n in data_shapes}
    dtypes.update({k: v.dtype for k, v in src.params.items() if k in set(names)})
    try:
        _, shapes, _ = internals.infer_shape(**known, **data_shapes)
        _, types, _ = internals.infer_type(**dtypes)
    except mx.base.MXNetError as e:
        raise ShapeInferenceError(f"{src.label}: MXNet shape inference failed: {first_line(e)}") from e
    if shapes is None or types is None:
        raise ShapeInferenceError(f"{src.label}: MXNet cannot infer every shape from the data inputs "
                                  f"{dict(data_shapes)}; check input_shapes.")
    specs = {}
    for n, shape, dtype in zip(names, shapes, types, strict=True):
        if not shape or any(d <= 0 for d in shape):
            raise ShapeInferenceError(f"{src.label}: tensor '{n}' has no concrete shape ({shape}); give "
                                      f"input_shapes of every data input.")
        specs[n] = TensorSpec(n, tuple(int(d) for d in shape), np.dtype(dtype).name)
    return specs


def _value_statistics(label: str, symbol: Any, weights: Mapping[str, Any], inputs: Sequence[TensorSpec],
                      names: Sequence[str]) -> dict[str, ValueStatistics]:
    """Statistics of the feature maps (float, rank >= 3) ``names`` in one run of the model on seeded
    standard normal inputs (those a whole model is measured with), by tensor name.

    ``weights`` are the NDArrays of the symbol's constant arguments and auxiliary states, used as
    they are. The model runs one op at a time, in the symbol's order (MXNet's imperative
    invocation of each node with its attributes, as ``mx.nd`` functions do; inference mode): each
    output is summarized as it is produced and dropped after its last reader, so that the run holds
    the weights and the tensors live at one point of the model, not an executor's static plan of
    every tensor. Each feature map is read through one copy (:func:`_array_statistics`); the weights
    are left as read (inputs that an op's kernel writes to are given copies). A feature map read by
    an op of :data:`VALUE_DEPENDENT_OPS` keeps its values too, up to
    :data:`~dlbricks.types.KEEP_VALUES_MAX_BYTES`.

    Raises
    ------
    ModelLoadError
        If MXNet cannot run the model.
    """
    mx = import_mxnet(label)
    wanted = set(names)
    seen: dict[str, ValueStatistics | None] = {}
    graph = json.loads(symbol.tojson())
    visible = set(symbol.get_internals().list_outputs())
    readers = Counter((int(ref[0]), int(ref[1])) for node in graph["nodes"] for ref in node["inputs"])
    recorded = _value_dependent_inputs(graph["nodes"], visible)
    arrays = {**weights, **{k: to_ndarray(mx, v) for k, v in random_inputs(inputs).items()}}
    live: dict[tuple[int, int], Any] = {}
    try:
        for index, node in enumerate(graph["nodes"]):
            if node["op"] == "null":
                live[(index, 0)] = arrays[node["name"]]
                continue
            refs = [(int(ref[0]), int(ref[1])) for ref in node["inputs"]]
            args = [live[ref] for ref in refs]
            for position in _WRITTEN_INPUTS.get(node["op"], ()):  # the model's weights stay as read
                if position < len(args):
                    args[position] = args[position].copy()
            outputs = _invoke(mx, node["op"], args, _attributes(node))
            del args
            for position, (out, array) in enumerate(zip(_node_outputs(node, visible), outputs, strict=False)):
                if out in wanted and out not in seen:
                    seen[out] = _array_statistics(mx, array)
                    if out in recorded and seen[out] is not None and array.size * 4 <= KEEP_VALUES_MAX_BYTES:
                        seen[out] = seen[out].with_values(array.asnumpy())
                if readers[(index, position)]:
                    live[(index, position)] = array
            del outputs
            for ref in refs:
                readers[ref] -= 1
                if not readers[ref]:
                    del live[ref]
            release_memory(mx)
    except mx.base.MXNetError as e:
        raise ModelLoadError(f"{label}: MXNet cannot run the model: {first_line(e)}") from e
    return {k: v for k, v in seen.items() if v is not None}


#: MXNet ops whose time depends on how their input's values are arranged, not only on how they are
#: distributed: a brick of one is fed its model's own tensor (:meth:`ValueStatistics.with_values`).
VALUE_DEPENDENT_OPS = frozenset({"_contrib_box_nms", "_contrib_box_non_maximum_suppression",
                                 "_contrib_MultiBoxDetection"})


def _value_dependent_inputs(nodes: Sequence[Mapping[str, Any]], visible: set[str]) -> set[str]:
    """Names of the tensors that ops of :data:`VALUE_DEPENDENT_OPS` read."""
    names = set()
    for node in nodes:
        if node["op"] in VALUE_DEPENDENT_OPS:
            for ref in node["inputs"]:
                outputs = _node_outputs(nodes[int(ref[0])], visible)
                if int(ref[1]) < len(outputs):
                    names.add(outputs[int(ref[1])])
    return names


def _array_statistics(mx: ModuleType, array: Any) -> ValueStatistics | None:
    """:func:`feature_statistics` of NDArray ``array`` (CPU), read through one copy of it.

    The copy (``NDArray.copy``, in the default layout whatever the layout of ``array``) is read in
    place, through a numpy view of its memory (``MXNDArrayGetData``): ``asnumpy`` would cost two
    copies of an array held in a oneDNN layout (reordered, then copied). ``array`` keeps its layout,
    so the ops that read it next run as they do in the model.
    """
    if array.size == 0 or array.stype != "default" or len(array.shape) < 3:
        return feature_statistics(array.asnumpy())
    dtype = np.dtype(array.dtype)
    if not np.issubdtype(dtype, np.floating):
        return None
    copy = array.copy()
    copy.wait_to_read()
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(copy.handle, ctypes.byref(pointer)))
    buffer = (ctypes.c_char * (copy.size * dtype.itemsize)).from_address(pointer.value)
    view = np.frombuffer(buffer, dtype=dtype).reshape(copy.shape)
    view.flags.writeable = False
    statistics = feature_statistics(view)
    del view, buffer, copy  # the view first: it reads the copy's memory
    return statistics


def _invoke(mx: ModuleType, op: str, args: Sequence[Any], attrs: Mapping[str, str]) -> list[Any]:
    """Outputs (the visible ones) of MXNet op ``op`` on NDArrays ``args``, attributes as strings:
    what the generated ``mx.nd`` function of the op does, for an op known by its registered name."""
    handle = mx.base.OpHandle()
    mx.base.check_call(mx.base._LIB.NNGetOpHandle(mx.base.c_str(op), ctypes.byref(handle)))
    return mx.nd._internal._imperative_invoke(handle.value, list(args), list(attrs), list(attrs.values()), None,
                                              False, True)


#: Feature maps of more elements than this are summarized a block of (batch, channel) planes at a
#: time: a whole-tensor pass in float64 costs 8 bytes an element, several times over (Faster
#: R-CNN's 300 regions of interest: 230 MB in float32, 1.4 GB of temporaries).
STATISTICS_BLOCK = 1 << 20


def feature_statistics(values: np.ndarray) -> ValueStatistics | None:
    """:meth:`ValueStatistics.of`, in float64 temporaries of a block of planes at a time.

    Arrays of at most :data:`STATISTICS_BLOCK` elements are summarized whole, by
    ``ValueStatistics.of``; larger ones a block of (batch, channel) planes of about that many
    elements at a time, in three passes (per-channel mean, standard deviation, lag-1 correlation of
    the standardized planes), which differ from the whole computation only in the order of float64
    sums.
    """
    shape = values.shape
    if values.ndim < 3 or not np.issubdtype(values.dtype, np.floating) or values.size == 0:
        return None
    if values.size <= STATISTICS_BLOCK:
        return ValueStatistics.of(values)
    channels, plane = shape[1], math.prod(shape[2:])
    rows = values.reshape(-1, plane)
    step = max(1, STATISTICS_BLOCK // plane)

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, rows.shape[0], step):
            stop = min(start + step, rows.shape[0])
            yield rows[start:stop].astype(np.float64), np.arange(start, stop) % channels

    count = shape[0] * plane
    sums = np.zeros(channels)
    for block, channel in blocks():
        sums += np.bincount(channel, block.sum(axis=1), channels)
    mean = sums / count
    squares = np.zeros(channels)
    for block, channel in blocks():
        squares += np.bincount(channel, ((block - mean[channel, None]) ** 2).sum(axis=1), channels)
    std = np.sqrt(squares / count)
    scale = np.where(std > 0, std, 1.0)
    products = 0.0
    for block, channel in blocks():
        z = (block - mean[channel, None]) / scale[channel, None]
        products += float((z[:, 1:] * z[:, :-1]).sum())
    pairs = rows.shape[0] * (plane - 1)
    correlation = float(np.clip(products / pairs, -1.0, 1.0)) if pairs else 0.0
    return ValueStatistics(tuple(float(v) for v in mean.astype(np.float32)),
                           tuple(float(v) for v in std.astype(np.float32)), correlation)


def release_memory(mx: ModuleType) -> None:
    """Wait until MXNet has freed the arrays no longer referenced (its engine frees them
    asynchronously), then hand the C heap's free pages back to the system (glibc's
    ``malloc_trim``; elsewhere nothing): MXNet's engine threads and numpy free large arrays into
    malloc arenas that otherwise stay resident (after one run of Faster R-CNN: twice its parameters).
    """
    mx.nd.waitall()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def _var_dtype(sym: Any, var: str) -> str:
    code = sym.attr_dict().get(var, {}).get("__dtype__")
    return _MX_DTYPES.get(int(code), "float32") if code not in (None, "") else "float32"


def _node_outputs(node: Mapping[str, Any], specs: Collection[str]) -> tuple[str, ...]:
    """Names of a node's visible outputs, as ``get_internals().list_outputs()`` names them."""
    name = node["name"]
    if node["op"] == "null":
        return (name,)
    if f"{name}_output" in specs:
        return (f"{name}_output",)
    outs = []
    while f"{name}_output{len(outs)}" in specs:
        outs.append(f"{name}_output{len(outs)}")
    return tuple(outs)


def _input_name(label: str, nodes: Sequence[Mapping[str, Any]], outputs_of: Sequence[tuple[str, ...]],
                ref: Sequence[int], consumer: str) -> str:
    source, index = int(ref[0]), int(ref[1])
    outs = outputs_of[source]
    if index >= len(outs):
        raise ModelLoadError(f"{label}: '{consumer}' reads hidden output {index} of node "
                             f"'{nodes[source]['name']}' ({nodes[source]['op']}); it is not supported.")
    return outs[index]


def _attributes(node: Mapping[str, Any]) -> dict[str, str]:
    """The op's attributes as strings, without MXNet's ``__metadata__`` ones."""
    attrs = node.get("attrs") or node.get("param") or {}
    return {k: str(v) for k, v in sorted(attrs.items()) if not k.startswith("__")}


def _output_layout(op: str, attrs: Mapping[str, str], in_layouts: Sequence[str]) -> str:
    """The layout of an op's outputs in a model run with oneDNN (MXNet 1.9 CPU kernels).

    Convolutions write blocked layouts; BatchNorm, pooling, supported activations, sums and
    concatenations keep their input's; every other op (clip, Dropout, Flatten...) writes plain.
    Measured on MXNet 1.9.1 by feeding each op's output to a Concat, which is ten times faster on
    blocked inputs.
    """
    if op in BLOCKING_OPS:
        return "onednn"
    if runs_on_onednn_layouts(op, attrs):
        data = [x for x in in_layouts if x != "const"]
        return "onednn" if data and data[0] == "onednn" else "plain"
    return "plain"


def _positive_variables(nodes: Sequence[Mapping[str, Any]]) -> set[str]:
    out = set()
    for node in nodes:
        for position in POSITIVE_MXNET_INPUTS.get(node["op"], frozenset()):
            if position < len(node["inputs"]):
                out.add(nodes[node["inputs"][position][0]]["name"])
    return out


def _weight(src: _Source, var: str, spec: TensorSpec, positive: bool) -> Any:
    """Weight ``var`` as an NDArray (taken out of ``src.params``): a file's own array, else a copy
    of the given or synthetic (seeded) value."""
    mx = import_mxnet(src.label)
    value = src.params.pop(var, None)
    if value is None:
        seed = int.from_bytes(hashlib.sha256(f"{src.name}:{var}".encode()).digest()[:8], "little")
        value = synthetic_array(spec, "positive" if positive else "normal", seed)
    elif tuple(value.shape) != spec.shape:
        raise ModelLoadError(f"{src.label}: parameter '{var}' has shape {tuple(value.shape)} but the symbol "
                             f"needs {spec.shape}; the params do not belong to this symbol.")
    return value if isinstance(value, mx.nd.NDArray) else to_ndarray(mx, np.asarray(value))


def _model_proto(name: str, layers: Sequence[LayerNode], inputs: Sequence[TensorSpec],
                 outputs: Sequence[TensorSpec], tensors: Mapping[str, TensorSpec]) -> onnx.ModelProto:
    """The model's ONNX form, without its initializers (the caller adds them one by one)."""
    io = {s.name for s in (*inputs, *outputs)}
    graph = onnx.helper.make_graph(
        [la.proto for la in layers], name, [s.to_value_info() for s in inputs],
        [s.to_value_info() for s in outputs],
        value_info=[s.to_value_info() for n, s in tensors.items() if n not in io])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(MXNET_DOMAIN, MXNET_OPSET)],
                                  ir_version=IR_VERSION, producer_name="dlbricks-mxnet")


def _content_hash(graph: Mapping[str, Any], constants: Mapping[str, onnx.TensorProto]) -> str:
    """Hash of the ops, their attributes and wiring (by name, not position) and every weight."""
    names = [n["name"] for n in graph["nodes"]]
    nodes = sorted([n["op"], n["name"], _attributes(n), [[names[r[0]], r[1]] for r in n["inputs"]]]
                   for n in graph["nodes"])
    heads = [[names[r[0]], r[1]] for r in graph["heads"]]
    h = hashlib.sha256(json.dumps({"nodes": nodes, "heads": heads}, sort_keys=True).encode())
    for key in sorted(constants):
        tensor = constants[key]
        h.update(key.encode())
        h.update(str(list(tensor.dims)).encode())
        h.update(tensor.raw_data if tensor.raw_data else tensor.SerializeToString(deterministic=True))
    return h.hexdigest()
