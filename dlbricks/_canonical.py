"""Canonical form of a group of nodes and its signature.

Canonical form: tensors renamed by role and order of first use (``in0`` external inputs, ``c0``
constants, ``out0`` outputs, ``t0`` internal tensors, scoped names inside subgraphs), node names and
doc strings dropped, attributes sorted. The signature hashes that form together with what decides
cost: attributes with their schema defaults filled in, the version of each op's definition (not the
model's opset, so Conv at opset 13 and 17 share a signature), shapes and dtypes of inputs, outputs
and constants, and the exact values of semantic constants.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import onnx

__all__ = ["SIGNATURE_VERSION", "canonical_nodes", "signature_of", "value_digest"]

#: Bump when the signature's content changes: old databases then hold other signatures.
SIGNATURE_VERSION = 1


class _Renamer:
    """Renames tensors through nested scopes (subgraphs see their outer scope)."""

    def __init__(self, top: Mapping[str, str]) -> None:
        self.scopes: list[dict[str, str]] = [dict(top)]
        self.counter = 0

    def lookup(self, name: str) -> str:
        if not name:
            return ""
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.define(name)

    def define(self, name: str, canonical: str | None = None) -> str:
        if not name:
            return ""
        if canonical is None:
            canonical = f"t{self.counter}" if len(self.scopes) == 1 else f"s{len(self.scopes)}_{self.counter}"
            self.counter += 1
        self.scopes[-1][name] = canonical
        return canonical

    def node(self, node: onnx.NodeProto) -> onnx.NodeProto:
        out = onnx.NodeProto(op_type=node.op_type, domain=node.domain)
        out.input.extend(self.lookup(n) for n in node.input)
        for attr in sorted(node.attribute, key=lambda a: a.name):
            new = out.attribute.add()
            new.CopyFrom(attr)
            new.ClearField("doc_string")
            if attr.type == onnx.AttributeProto.GRAPH:
                new.g.CopyFrom(self.graph(attr.g))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                del new.graphs[:]
                new.graphs.extend(self.graph(g) for g in attr.graphs)
        out.output.extend(self.scopes[-1].get(n) or self.define(n) if n else "" for n in node.output)
        return out

    def graph(self, graph: onnx.GraphProto) -> onnx.GraphProto:
        self.scopes.append({})
        out = onnx.GraphProto(name="body")
        for vi in graph.input:
            new = out.input.add()
            new.CopyFrom(vi)
            new.name = self.define(vi.name)
            new.ClearField("doc_string")
        for init in graph.initializer:
            new = out.initializer.add()
            new.CopyFrom(init)
            new.name = self.define(init.name)
        out.node.extend(self.node(n) for n in graph.node)
        for vi in graph.output:
            new = out.output.add()
            new.CopyFrom(vi)
            new.name = self.lookup(vi.name)
            new.ClearField("doc_string")
        self.scopes.pop()
        return out


def canonical_nodes(nodes: Sequence[onnx.NodeProto], inputs: Sequence[str], constants: Sequence[str],
                    outputs: Sequence[str]) -> tuple[onnx.NodeProto, ...]:
    """Copies of ``nodes`` with canonical tensor names.

    ``inputs``, ``constants`` and ``outputs`` become ``in{i}``, ``c{i}`` and ``out{i}``.
    """
    top = {name: f"in{i}" for i, name in enumerate(inputs)}
    top.update({name: f"c{i}" for i, name in enumerate(constants)})
    renamer = _Renamer(top)
    for i, name in enumerate(outputs):
        renamer.scopes[0][name] = f"out{i}"
    return tuple(renamer.node(n) for n in nodes)


def value_digest(array: np.ndarray) -> str:
    """Short hash of an array's dtype, shape and bytes."""
    h = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:20]


@lru_cache(maxsize=4096)
def _schema_info(op_type: str, domain: str, opset: int) -> tuple[int, tuple[tuple[str, Any], ...]]:
    """Since-version of the op definition in effect, and its attribute defaults."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return opset, ()
    defaults = []
    for name, attr in schema.attributes.items():
        if attr.default_value.type != onnx.AttributeProto.UNDEFINED:
            defaults.append((name, _attr_json(attr.default_value)))
    return int(schema.since_version), tuple(sorted(defaults))


def _attr_json(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        return float(np.float32(value))
    if isinstance(value, onnx.TensorProto):
        return value_digest(onnx.numpy_helper.to_array(value))
    if isinstance(value, onnx.GraphProto):
        return onnx.printer.to_text(value)
    if isinstance(value, list):
        return [_scalar_json(v) for v in value]
    return _scalar_json(value)


def _scalar_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        return float(np.float32(value))
    if isinstance(value, onnx.GraphProto):
        return onnx.printer.to_text(value)
    if isinstance(value, onnx.TensorProto):
        return value_digest(onnx.numpy_helper.to_array(value))
    if isinstance(value, int | str):
        return value
    return str(value)


def _node_json(node: onnx.NodeProto, opsets: Mapping[str, int]) -> list[Any]:
    domain = node.domain or ""
    since, defaults = _schema_info(node.op_type, domain, opsets.get(domain, 1))
    attrs = dict(defaults)
    attrs.update({a.name: _attr_json(a) for a in node.attribute})
    return [domain, node.op_type, since, list(node.input), list(node.output), sorted(attrs.items())]


def signature_of(*, granularity: str, nodes: Iterable[onnx.NodeProto], opsets: Mapping[str, int],
                 inputs: Iterable[tuple[tuple[int, ...], str]],
                 constants: Iterable[tuple[tuple[int, ...], str, str | None]],
                 outputs: Iterable[tuple[tuple[int, ...], str]], extra: Any = None) -> str:
    """The signature: sha256 of the canonical description of a brick (64 hex digits)."""
    desc = {
        "v": SIGNATURE_VERSION,
        "granularity": granularity,
        "nodes": [_node_json(n, opsets) for n in nodes],
        "inputs": [[list(s), d] for s, d in inputs],
        "constants": [[list(s), d, v] for s, d, v in constants],
        "outputs": [[list(s), d] for s, d in outputs],
    }
    if extra is not None:
        desc["extra"] = extra
    blob = json.dumps(desc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
