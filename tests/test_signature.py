"""Signatures: invariant to names, sensitive to what decides cost, stable across processes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

import dlbricks
from tests import _models


def _signatures(model: onnx.ModelProto, **kw: object) -> list[str]:
    return [o.signature for o in dlbricks.decompose(model, **kw).occurrences]


def _rename_all(model: onnx.ModelProto, salt: str, order: list[int]) -> onnx.ModelProto:
    """Rename every tensor and node (names from the salt, in a drawn order)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    names: list[str] = []
    for vi in (*g.input, *g.output, *g.value_info):
        names.append(vi.name)
    names += [t.name for t in g.initializer]
    for node in g.node:
        names += [n for n in (*node.input, *node.output) if n]
    unique = list(dict.fromkeys(names))
    mapping = {name: f"{salt}{order[i % len(order)]}_{i}" for i, name in enumerate(unique)}

    def rn(name: str) -> str:
        return mapping.get(name, name) if name else name

    for vi in (*g.input, *g.output, *g.value_info):
        vi.name = rn(vi.name)
    for t in g.initializer:
        t.name = rn(t.name)
    def rename_nodes(nodes) -> None:  # type: ignore[no-untyped-def]
        for i, node in enumerate(nodes):
            node.name = f"{salt}node{order[i % len(order)]}_{i}"
            node.input[:] = [rn(n) for n in node.input]
            node.output[:] = [rn(n) for n in node.output]
            for attr in node.attribute:  # subgraphs read outer tensors by name
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                    rename_nodes(sub.node)
                    for vi in sub.output:
                        vi.name = rn(vi.name)

    rename_nodes(g.node)
    return out


MODELS = {"cnn": (_models.resnet_like, {"batch_size": 2}),
          "transformer": (_models.transformer_layer, {"batch_size": 2}),
          "lstm": (_models.lstm_model, {}), "control_flow": (_models.control_flow_model, {})}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(sorted(MODELS)),
       salt=st.text(alphabet="abcXYZ_./:", min_size=1, max_size=6),
       order=st.lists(st.integers(0, 999), min_size=1, max_size=10))
def test_renaming_keeps_every_signature(which: str, salt: str, order: list[int]) -> None:
    factory, kw = MODELS[which]
    model = factory()
    assert _signatures(_rename_all(model, salt, order), **kw) == _signatures(model, **kw)


def test_shape_changes_signature() -> None:
    a = set(_signatures(_models.resnet_like(), batch_size=1))
    b = set(_signatures(_models.resnet_like(), batch_size=2))
    assert not a & b


def test_attribute_changes_signature() -> None:
    model = _models.resnet_like()
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    bn = next(n for n in changed.graph.node if n.op_type == "BatchNormalization")
    bn.attribute.append(onnx.helper.make_attribute("epsilon", 1e-3))
    before = _signatures(model, batch_size=1)
    after = _signatures(changed, batch_size=1)
    differing = [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    assert differing == [1]  # exactly the BatchNormalization whose attribute changed


def test_default_attribute_written_out_keeps_signature() -> None:
    model = _models.resnet_like()
    explicit = onnx.ModelProto()
    explicit.CopyFrom(model)
    conv = next(n for n in explicit.graph.node if n.op_type == "Conv")
    conv.attribute.append(onnx.helper.make_attribute("group", 1))
    assert _signatures(model, batch_size=1) == _signatures(explicit, batch_size=1)


def test_semantic_constant_changes_signature() -> None:
    model = _models.split_model()
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    split_sizes = next(t for t in changed.graph.initializer if t.data_type == onnx.TensorProto.INT64)
    split_sizes.CopyFrom(numpy_helper.from_array(np.array([3, 2, 3], np.int64), split_sizes.name))
    changed.graph.ClearField("value_info")
    before, after = _signatures(model), _signatures(changed)
    assert before[0] != after[0]


def test_large_weights_do_not_change_signature() -> None:
    a = _models.resnet_like()
    b = onnx.ModelProto()
    b.CopyFrom(a)
    for t in b.graph.initializer:
        arr = numpy_helper.to_array(t)
        if arr.dtype == np.float32 and arr.size > 64:
            t.CopyFrom(numpy_helper.from_array(arr * 3.0 + 1.0, t.name))
    assert _signatures(a, batch_size=1) == _signatures(b, batch_size=1)


def test_signature_same_in_fresh_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.onnx"
    onnx.save(_models.transformer_layer(), path)
    code = ("import json, dlbricks; d = dlbricks.decompose(dlbricks.load_model(%r, batch_size=2)); "
            "print(json.dumps([o.signature for o in d.occurrences]))" % str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == _signatures(onnx.load(path), batch_size=2)
