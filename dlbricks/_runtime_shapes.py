"""Shapes that static inference cannot resolve (data-dependent ops), read off one onnxruntime run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from dlbricks.errors import ShapeInferenceError
from dlbricks.inputs import random_inputs
from dlbricks.types import TensorSpec, onnx_dtype_to_name, runnable_ir_version

__all__ = ["shapes_from_runtime", "values_from_runtime"]


def shapes_from_runtime(proto: onnx.ModelProto, concrete: Mapping[str, tuple[int, ...]],
                        ranges: Mapping[str, tuple[int, int]], names: Sequence[str],
                        label: str) -> dict[str, TensorSpec]:
    """Run the model once on random inputs with ``names`` exposed as outputs; return their specs.

    ``label`` names the model and the first tensor of ``names`` (with the node that computes it)
    in the error raised when the run fails.
    """
    values = values_from_runtime(proto, concrete, ranges, names, label)
    return {n: TensorSpec(n, tuple(v.shape), v.dtype.name) for n, v in values.items()}


def values_from_runtime(proto: onnx.ModelProto, concrete: Mapping[str, tuple[int, ...]],
                        ranges: Mapping[str, tuple[int, int]], names: Sequence[str],
                        label: str, *, path_only: bool = False) -> dict[str, np.ndarray]:
    """The values of ``names`` in one run of the model (onnxruntime, CPU, optimizations off) on the
    seeded random inputs a whole model is measured with; with ``path_only``, a run of only the nodes
    that ``names`` need (onnxruntime's ``only_execute_path_to_fetches``). ``label`` as
    :func:`shapes_from_runtime`'s."""
    import onnxruntime as ort

    model = _path_to(proto, names) if path_only else None
    if model is None:
        model = onnx.ModelProto()
        model.CopyFrom(proto)
        existing = {o.name for o in model.graph.output}
        for name in names:
            if name not in existing:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
    model.ir_version = runnable_ir_version(proto.ir_version, proto.opset_import)
    dtypes = {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.input}
    specs = [TensorSpec(n, s, onnx_dtype_to_name(dtypes[n]), ranges.get(n)) for n, s in concrete.items()]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        wanted = [o.name for o in session.get_outputs() if o.name in set(names)]
        run_options = ort.RunOptions()
        run_options.only_execute_path_to_fetches = path_only
        values = session.run(wanted, random_inputs(specs, seed=0), run_options)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = ("dlbricks runs the ops that onnxruntime implements: re-export the model with standard "
                "ops" if "is not a registered function/op" in first or "NOT_IMPLEMENTED" in first
                else "give input_shapes or re-export the model with static shapes")
        raise ShapeInferenceError(
            f"{label} has no inferred shape, and running the model to find it failed ({first}); "
            f"{hint}.") from e
    return dict(zip(wanted, values, strict=True))


def _path_to(proto: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto | None:
    """``proto`` cut to the nodes that ``names`` depend on, with the initializers they read, every
    input and ``names`` as its outputs; None where a node holds a subgraph (whose outer names this
    does not follow). Serializing and loading a BERT-large whole cost 10 s more than its first layer;
    ``onnx.utils.Extractor`` first infers the shapes of the whole model."""
    graph = proto.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node for a in n.attribute):
        return None
    needed = set(names)
    nodes = []
    for node in reversed(graph.node):  # a valid model lists its nodes in topological order
        if needed.intersection(node.output):
            nodes.append(node)
            needed.update(i for i in node.input if i)
    cut = onnx.helper.make_graph(
        list(reversed(nodes)), graph.name, list(graph.input), [onnx.ValueInfoProto(name=n) for n in names],
        [t for t in graph.initializer if t.name in needed],
        sparse_initializer=[t for t in graph.sparse_initializer if t.values.name in needed])
    model = onnx.helper.make_model(cut, opset_imports=list(proto.opset_import), functions=list(proto.functions))
    return model
