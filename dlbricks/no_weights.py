"""Weight-free bricks (``decompose --out DIR --no-weights``): which constant values a brick keeps.

A brick written for someone else to measure keeps only the constant values without which it would
compute other shapes, do other work, or not run: :data:`KEPT_VALUES` says which, in words that the
CLI's help repeats. Every other constant is synthetic: weights and small float tensors and scalars
alike (normal values, or positive ones where the op needs them), integer tensors (positive, so that
no integer division meets zero), a gather's indices (uniform over the size of the axis it gathers,
so that they stay valid), bools (random), strings (empty).

A synthetic value that the brick's signature hashed (a scalar, an integer tensor, a gather's indices)
would give the brick, cut again, another signature; the brick records the digests of the values it
replaced (:data:`~dlbricks.bricks.DIGESTS_KEY`, what the signature itself already commits to) and
:func:`~dlbricks.decompose` takes them, so that its measurement elsewhere comes back under the signature
of the model's brick.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import onnx

from dlbricks._canonical import value_digest
from dlbricks._constants import (
    DIGESTS_KEY,
    GATHERS,
    INTEGER_WEIGHT_INPUTS,
    QUANTIZATION_PARAMETERS,
    SEMANTIC_INPUTS,
    ConstantSpec,
    index_kind,
    value_is_hashed,
)
from dlbricks._ranges import consumer_range
from dlbricks.errors import ModelLoadError
from dlbricks.types import TensorSpec

if TYPE_CHECKING:
    from dlbricks.bricks import Brick

__all__ = ["KEPT_VALUES", "recorded_digests", "without_values"]

#: The constant values a weight-free brick keeps, as its docstring and the CLI's help say it.
KEPT_VALUES = ("shapes, axes, pads, slice bounds, split sizes, Resize scales and sizes, TopK's k, Range "
               "bounds, Clip bounds, Pow exponents and the other inputs that decide an op's output shape or "
               "its work; the scales and zero points of quantized ops; the constants of a brick with an "
               "If, Loop or Scan subgraph; and constants whose values flow into one of those inside the "
               "brick. Node attributes (kernel sizes, strides, epsilons) are the op's own and stay too")


def without_values(brick: Brick) -> Brick:
    """``brick`` with synthetic values for every constant but :data:`KEPT_VALUES`, node names and doc
    strings dropped, and inner tensors renamed ``t0``, ``t1``...; its signature unchanged (the digests
    of the hashed values it replaced recorded in :attr:`~dlbricks.Brick.value_digests`)."""
    needed = _needed_values(brick)
    ranges = _index_ranges(brick)
    hashed = _hashed(brick)
    digests = dict(brick.value_digests)
    constants = []
    for const in brick.constants:
        name = const.spec.name
        if const.value is None or (const.exact and (name in needed or (name in ranges and ranges[name] is None))):
            constants.append(const)
            continue
        if const.exact and name in hashed:
            digests.setdefault(name, value_digest(onnx.numpy_helper.to_array(const.value)))
        constants.append(ConstantSpec(const.spec, False, _kind(const, ranges.get(name)), None))
    return replace(brick, constants=tuple(constants), nodes=anonymous_nodes(brick), weights="synthetic",
                   value_digests=tuple(sorted(digests.items())))


def anonymous_nodes(brick: Brick) -> tuple[onnx.NodeProto, ...]:
    """The brick's nodes without names or doc strings, their inner tensors renamed ``t0``, ``t1``..."""
    interface = ({s.name for s in brick.inputs} | {s.name for s in brick.outputs}
                 | {c.spec.name for c in brick.constants})
    renamed: dict[str, str] = {}
    nodes = []
    for node in brick.nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name, copy.doc_string = "", ""
        for field_ in (copy.input, copy.output):
            for i, name in enumerate(field_):
                if name and name not in interface:
                    field_[i] = renamed.setdefault(name, f"t{len(renamed)}")
        nodes.append(copy)
    return tuple(nodes)


def recorded_digests(model: onnx.ModelProto, label: str) -> dict[str, str]:
    """The digests a weight-free brick recorded of the values it replaced (constant name -> digest),
    {} for any other model.

    Raises
    ------
    ModelLoadError
        If the metadata is not a JSON object of names to digests.
    """
    text = next((p.value for p in model.metadata_props if p.key == DIGESTS_KEY), None)
    if text is None:
        return {}
    try:
        digests = json.loads(text)
    except ValueError:
        digests = None
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.isalnum()
                                                for k, v in digests.items()):
        raise ModelLoadError(f"{label}: metadata '{DIGESTS_KEY}' is not a JSON object of constant names to "
                             f"digests; remove it (only bricks written with --no-weights carry it).")
    return digests


def _kind(const: ConstantSpec, index_range: tuple[int, int] | None) -> str:
    """How a replaced constant's synthetic values are drawn: a gather's indices over their range,
    other integers positive, floats as the brick says (normal, or positive where the op needs it)."""
    if index_range is not None:
        return index_kind(*index_range)
    dtype = const.spec.dtype
    if dtype not in ("bfloat16", "string", "bool") and np.issubdtype(np.dtype(dtype), np.integer):
        return "positive"
    return const.synthetic


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _decides(node: onnx.NodeProto, position: int, direct: bool) -> bool:
    """Whether input ``position`` of ``node`` decides shapes or what the op computes (a gather's
    indices read straight from a constant do not: :func:`_index_ranges` keeps them valid)."""
    if _has_subgraph(node) or position in QUANTIZATION_PARAMETERS.get(node.op_type, frozenset()):
        return True
    if position not in SEMANTIC_INPUTS.get(node.op_type, frozenset()):
        return False
    return not (direct and node.op_type in GATHERS and position == 1)


def _needed_values(brick: Brick) -> set[str]:
    """Names of the constants whose values the brick needs (:data:`KEPT_VALUES`): read, straight or
    through other nodes of the brick, at an input that decides shapes or work."""
    names = [c.spec.name for c in brick.constants]
    if any(_has_subgraph(n) for n in brick.nodes):
        return set(names)
    needed = set()
    for name in names:
        direct, derived = {name}, set()
        for node in brick.nodes:
            if node.op_type == "Identity" and node.input and node.input[0] in direct:
                direct.update(o for o in node.output if o)
                continue
            reads = [(i, t in direct) for i, t in enumerate(node.input) if t in direct or t in derived]
            if any(_decides(node, i, is_direct) for i, is_direct in reads):
                needed.add(name)
            if reads:
                derived.update(o for o in node.output if o)
    return needed


def _aliases(brick: Brick) -> dict[str, str]:
    """Every tensor that is a constant, or an Identity's copy of one, mapped to the constant's name."""
    alias = {c.spec.name: c.spec.name for c in brick.constants}
    for node in brick.nodes:
        if node.op_type == "Identity" and node.input and node.input[0] in alias and node.output:
            alias[node.output[0]] = alias[node.input[0]]
    return alias


def _index_ranges(brick: Brick) -> dict[str, tuple[int, int] | None]:
    """For each constant that a gather reads as its indices, the range its values must lie in (the
    tightest over its gathers); None where the size of an axis gathered is not known."""
    alias = _aliases(brick)
    specs: dict[str, TensorSpec] = {s.name: s for s in (*brick.inputs, *brick.outputs)}
    constants = {c.spec.name: c.spec for c in brick.constants}
    specs.update({t: constants[c] for t, c in alias.items()})
    out: dict[str, tuple[int, int] | None] = {}
    for node in brick.nodes:
        if node.op_type not in GATHERS or len(node.input) < 2 or node.input[1] not in alias:
            continue
        name = alias[node.input[1]]
        found = consumer_range(node, 1, specs)
        old = out.get(name, (0, 2**62))
        out[name] = None if found is None or old is None else (max(old[0], found[0]), min(old[1], found[1]))
    return out


def _hashed(brick: Brick) -> set[str]:
    """Names of the constants whose values the brick's signature hashes (as :func:`~dlbricks.decompose`
    decides it from the positions they are read at)."""
    roles: dict[str, list[bool]] = {c.spec.name: [False, False, False] for c in brick.constants}
    tables = (SEMANTIC_INPUTS, INTEGER_WEIGHT_INPUTS, QUANTIZATION_PARAMETERS)
    for node in brick.nodes:
        for position, name in enumerate(node.input):
            if name in roles:
                roles[name] = [old or position in t.get(node.op_type, frozenset())
                               for old, t in zip(roles[name], tables, strict=True)]
    specs: Mapping[str, TensorSpec] = {c.spec.name: c.spec for c in brick.constants}
    return {name for name, (semantic, weight, parameter) in roles.items()
            if value_is_hashed(specs[name], semantic, weight, parameter)}
