"""A :class:`Brick`: a runnable unit cut from a model, and how it becomes a standalone ONNX model.

Constants of a brick are either *exact* (values copied from the model: every integer or bool
tensor, every tensor of at most :data:`EXACT_MAX_ELEMENTS` elements, every input at a semantic
position such as Reshape's shape or Resize's scales, every scale and zero point of a quantized
op) or *synthetic*
(large float weights, and the integer weights of quantized models: int8/uint8 tensors and the
inputs of :data:`INTEGER_WEIGHT_INPUTS`; generated from a seed derived from the signature, because
latency does not depend on their values). With ``weights="real"`` the model's own weights are kept
too. :meth:`Brick.without_weights` keeps fewer still: see :mod:`dlbricks.no_weights`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from dlbricks._constants import (
    DIGESTS_KEY,
    EXACT_MAX_ELEMENTS,
    GATHERS,
    INTEGER_WEIGHT_INPUTS,
    QUANTIZATION_PARAMETERS,
    QUANTIZED_INPUTS,
    SEMANTIC_INPUTS,
    ConstantSpec,
    index_kind,
    value_is_hashed,
)
from dlbricks.cost import padding_flops
from dlbricks.errors import InvalidArgumentError
from dlbricks.graph import VALUE_RANGES_KEY, VALUE_STATISTICS_KEY
from dlbricks.no_weights import anonymous_nodes, without_values
from dlbricks.types import TensorSpec, ValueStatistics, onnx_dtype_to_name

__all__ = [
    "BRICK_META_KEY", "DIGESTS_KEY", "EXACT_MAX_ELEMENTS", "INTEGER_WEIGHT_INPUTS",
    "QUANTIZATION_PARAMETERS", "QUANTIZED_INPUTS", "SEMANTIC_INPUTS", "SIGNATURE_KEY", "Brick",
    "BrickContext", "CONTEXT_SPAN_RATIO", "ConstantSpec", "anonymous_nodes", "index_kind",
    "value_is_hashed", "write_bricks", "split_previous", "PREVIOUS_KEY", "reuse_bytes", "BrickInContext"
]

#: metadata_props key of the brick description in serialized bricks.
BRICK_META_KEY = "dlbricks.brick"
#: Metadata key of a brick's signature in its ONNX model: what tells a backend that a model is a brick.
SIGNATURE_KEY = "dlbricks.signature"
#: Metadata key of the serialized ONNX model (base64) of the brick that runs before a brick in the
#: model it was cut from (:class:`BrickInContext`).
PREVIOUS_KEY = "dlbricks.previous"
#: Metadata key of the brick's reuse distance in its model (:attr:`BrickInContext.reuse_bytes`).
REUSE_KEY = "dlbricks.reuse_bytes"
#: Metadata key of a brick's model whose synthetic weights are left to :func:`materialize`.
DEFERRED_KEY = "dlbricks.deferred_weights"
WEIGHT_MODES = ("synthetic", "real")


@dataclass(frozen=True, slots=True, eq=False)
class Brick:
    """A runnable unit of one or more nodes, identified by its :attr:`signature`.

    Attributes
    ----------
    signature : str
        Canonical hash of what decides the brick's cost (64 hex digits).
    granularity : str
        ``"layer"`` (one node) or the grouping that produced it.
    op_types : tuple of str
        Op types of its nodes, in order.
    inputs, outputs : tuple of TensorSpec
        External activation inputs (``in0``...) and outputs (``out0``...).
    constants : tuple of ConstantSpec
        Constant inputs (``c0``...).
    flops : int or None
        Floating point operations of one run; None if an op is unknown.
    weights : str
        ``"synthetic"`` or ``"real"``: which weights :meth:`to_onnx` gives by default.
    value_digests : tuple of (str, str)
        For a brick of :meth:`without_weights`: the digests of the constant values it replaced that
        the signature hashed (constant name, digest), which :func:`~dlbricks.decompose` takes when
        it cuts the brick again, so that it keeps its signature.
    """

    signature: str
    granularity: str
    op_types: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    constants: tuple[ConstantSpec, ...]
    nodes: tuple[onnx.NodeProto, ...] = field(repr=False)
    opsets: tuple[tuple[str, int], ...] = field(repr=False)
    ir_version: int = field(default=8, repr=False)
    flops: int | None = None
    weights: str = "synthetic"
    functions: tuple[onnx.FunctionProto, ...] = field(default=(), repr=False)
    value_digests: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Brick) and other.signature == self.signature

    def __hash__(self) -> int:
        return hash(self.signature)

    @property
    def key(self) -> str:
        """What benchmarks and the database identify the brick by: its signature."""
        return self.signature

    @property
    def op_type(self) -> str:
        """The op types joined by ``+`` (``"Conv"``, ``"Conv+Relu"``)."""
        return "+".join(self.op_types)

    @property
    def padding_flops(self) -> int:
        """FLOPs of ``flops`` that its convolutions spend on zero padding (see
        :func:`dlbricks.cost.padding_flops`), for those whose input and weights the brick holds."""
        specs = {s.name: s for s in self.inputs} | {c.spec.name: c.spec for c in self.constants}
        return sum(padding_flops(n, specs.get(n.input[0]), specs.get(n.input[1]))
                   for n in self.nodes if n.op_type == "Conv" and len(n.input) > 1)

    @property
    def bytes_moved(self) -> int:
        """Bytes of its inputs, constants and outputs: what one run must read and write at least.

        A gather reads only the rows it fetches, so its data tensor (an embedding table of
        hundreds of MiB, say) counts as much as its output, not its whole size.
        """
        outputs = sum(s.nbytes for s in self.outputs)
        inputs = sum(s.nbytes for s in self.inputs)
        return inputs + self.constant_bytes + outputs - self._gathered_excess(self.inputs)

    @property
    def constant_bytes(self) -> int:
        """Bytes of its constants (weights) one run reads: a gather from a constant table counts
        the rows it fetches (its output), not the table."""
        return sum(c.spec.nbytes for c in self.constants) - self._gathered_excess([c.spec for c in self.constants])

    def _gathered_excess(self, specs: Sequence[TensorSpec]) -> int:
        """Bytes of a gather's data tensor, among ``specs``, that the gather does not read (the
        tensor itself, or the constant that Identity nodes of the brick hand to it)."""
        ops = [n for n in self.nodes if n.op_type != "Identity"]
        if len(ops) != 1 or ops[0].op_type not in GATHERS or not ops[0].input:
            return 0
        source = _identity_source(self.nodes, ops[0].input[0])
        data = [s for s in specs if s.name == source]
        return max(data[0].nbytes - sum(s.nbytes for s in self.outputs), 0) if data else 0

    @property
    def value_ranges(self) -> dict[str, tuple[int, int]]:
        """Valid ``[low, high)`` ranges of its integer inputs."""
        return {s.name: s.value_range for s in self.inputs if s.value_range is not None}

    def describe(self) -> dict[str, object]:
        """JSON-safe summary: signature, ops, specs, FLOPs and bytes."""
        return {
            "signature": self.signature,
            "granularity": self.granularity,
            "op_types": list(self.op_types),
            "attributes": [_attributes(n) for n in self.nodes],
            "inputs": [s.to_dict(statistics=False) for s in self.inputs],
            "outputs": [s.to_dict(statistics=False) for s in self.outputs],
            "constants": [{**c.spec.to_dict(statistics=False), "exact": c.exact} for c in self.constants],
            "flops": self.flops,
            "bytes_moved": self.bytes_moved,
        }

    def without_weights(self) -> Brick:
        """The brick with nothing of its model's but what it needs to compute the same shapes and do
        the same work.

        Every constant is synthetic (weights, small float tensors and scalars, integer and bool
        tensors; a gather's indices drawn over the size of the axis it gathers, so that they stay
        valid) except these, which keep their values: shapes, axes, pads, slice bounds, split sizes,
        Resize scales and sizes, TopK's k, Range bounds, Clip bounds, Pow exponents and the other
        inputs of :data:`SEMANTIC_INPUTS` that decide an op's output shape or its work; the scales
        and zero points of quantized ops; every constant of a brick with an If, Loop or Scan
        subgraph; and constants whose values flow into one of those inside the brick. Node
        attributes and the statistics of the brick's inputs (for a NonMaxSuppression's boxes and
        scores, their values in the model's run) are kept too. Nodes lose their names and doc
        strings, and tensors inside the brick are named ``t0``, ``t1``...

        The signature is unchanged; the digests of the hashed values replaced are recorded
        (:attr:`value_digests`, what the signature already commits to), so that the brick, cut
        again by :func:`~dlbricks.decompose`, has the same signature.
        """
        return without_values(self)

    # --------------------------------------------------------------------------- materialize
    def to_onnx(self, weights: str | None = None, *, deferred: bool = False) -> onnx.ModelProto:
        """The brick as a standalone ONNX model.

        Parameters
        ----------
        weights : {"synthetic", "real"}, optional
            ``"real"`` needs a brick decomposed with ``weights="real"``. Default: :attr:`weights`.
        deferred : bool, default False
            Leave synthetic weights empty (their shapes, kinds and seeds under
            :data:`DEFERRED_KEY`): :func:`materialize` draws the same values where the model runs,
            so that megabytes of random numbers do not travel to a worker.
        """
        weights = weights or self.weights
        if weights not in WEIGHT_MODES:
            raise InvalidArgumentError(
                f"'weights' must be one of {WEIGHT_MODES}. Got {weights!r} instead.")
        if weights == "real" and self.weights != "real":
            raise InvalidArgumentError(
                f"brick {self.signature[:12]} ({self.op_type}) was decomposed with synthetic weights; "
                f"decompose the model with weights='real' to materialize its real weights.")
        later: dict[str, list[Any]] = {}
        initializers = []
        for i, c in enumerate(self.constants):
            if deferred and not (c.value is not None and (c.exact or weights == "real")):
                later[c.spec.name] = [c.synthetic, _seed(self.signature, i)]
                initializers.append(_empty_tensor(c.spec))
            else:
                initializers.append(self._constant_tensor(i, c, weights))
        model = self._model(initializers)
        if later:
            model.metadata_props.add(key=DEFERRED_KEY, value=json.dumps(later))
        return model

    def _constant_tensor(self, index: int, const: ConstantSpec, weights: str) -> onnx.TensorProto:
        if const.value is not None and (const.exact or weights == "real"):
            tensor = onnx.TensorProto()
            tensor.CopyFrom(const.value)
            tensor.name = const.spec.name
            return tensor
        return onnx.numpy_helper.from_array(
            synthetic_array(const.spec, const.synthetic, _seed(self.signature, index)), const.spec.name)

    @property
    def value_statistics(self) -> dict[str, ValueStatistics]:
        """How its inputs' values are distributed in the model it was cut from (where known)."""
        return {s.name: s.statistics for s in self.inputs if s.statistics is not None}

    def _model(self, initializers: list[onnx.TensorProto], statistics: bool = True) -> onnx.ModelProto:
        graph = onnx.helper.make_graph(
            list(self.nodes), f"brick_{self.signature[:12]}",
            [s.to_value_info() for s in self.inputs], [s.to_value_info() for s in self.outputs],
            initializer=initializers)
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in self.opsets],
            ir_version=self.ir_version, producer_name="dlbricks")
        model.functions.extend(self.functions)
        model.metadata_props.add(key=VALUE_RANGES_KEY, value=json.dumps(
            {k: list(v) for k, v in self.value_ranges.items()}, sort_keys=True))
        if statistics and self.value_statistics:
            model.metadata_props.add(key=VALUE_STATISTICS_KEY, value=json.dumps(
                {k: v.to_dict() for k, v in self.value_statistics.items()}, sort_keys=True))
        model.metadata_props.add(key=SIGNATURE_KEY, value=self.signature)
        if self.value_digests:
            model.metadata_props.add(key=DIGESTS_KEY, value=json.dumps(dict(self.value_digests), sort_keys=True))
        return model

    def check_runnable(self) -> str | None:
        """None if onnxruntime can create a session for the brick, else the reason (one line)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 4
        try:
            ort.InferenceSession(self.to_onnx(weights="synthetic").SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises untyped errors
            text = " ".join(str(e).split())
            return text[:300] or type(e).__name__
        return None

    # --------------------------------------------------------------------------- storage
    def to_bytes(self) -> bytes:
        """Compact serialized form (ONNX with exact constants only); see :meth:`from_bytes`."""
        initializers = []
        for const in self.constants:
            if const.exact and const.value is not None:
                tensor = onnx.TensorProto()
                tensor.CopyFrom(const.value)
                tensor.name = const.spec.name
            else:
                tensor = _empty_tensor(const.spec)
            initializers.append(tensor)
        model = self._model(initializers, statistics=False)  # the inputs' specs below carry them
        meta = {"signature": self.signature, "granularity": self.granularity, "flops": self.flops,
                "constants": [[c.exact, c.synthetic] for c in self.constants],
                "inputs": [s.to_dict() for s in self.inputs]}
        model.metadata_props.add(key=BRICK_META_KEY, value=json.dumps(meta))
        return model.SerializeToString()

    @classmethod
    def from_bytes(cls, data: bytes) -> Brick:
        """Rebuild a brick (with synthetic weights) from :meth:`to_bytes`."""
        model = onnx.load_model_from_string(data)
        props = {p.key: p.value for p in model.metadata_props}
        meta = json.loads(props[BRICK_META_KEY])
        g = model.graph
        constants = []
        for tensor, (exact, synthetic) in zip(g.initializer, meta["constants"], strict=True):
            spec = TensorSpec(tensor.name, tuple(int(d) for d in tensor.dims),
                              onnx_dtype_to_name(tensor.data_type))
            constants.append(ConstantSpec(spec, exact, synthetic, tensor if exact else None))
        outputs = tuple(_spec_of(vi) for vi in g.output)
        return cls(
            signature=meta["signature"], granularity=meta["granularity"],
            op_types=tuple(n.op_type for n in g.node),
            inputs=tuple(TensorSpec.from_dict(d) for d in meta["inputs"]), outputs=outputs,
            constants=tuple(constants), nodes=tuple(g.node),
            opsets=tuple((o.domain, int(o.version)) for o in model.opset_import),
            ir_version=int(model.ir_version), flops=meta["flops"], weights="synthetic",
            functions=tuple(model.functions),
            value_digests=tuple(sorted(json.loads(props.get(DIGESTS_KEY, "{}")).items())))


def write_bricks(bricks: Iterable[Brick], out: str | Path, *, weights: str = "synthetic",
                 no_weights: bool = False) -> list[Path]:
    """Write each brick as ``out/<signature prefix>_<op types>.onnx``; the paths written.

    Parameters
    ----------
    bricks : iterable of Brick
    out : path
        Folder (created).
    weights : {"synthetic", "real"}
        Which weights each brick gets (see :meth:`Brick.to_onnx`).
    no_weights : bool
        Write :meth:`Brick.without_weights` instead: synthetic values for every constant but those
        that decide shapes and work (listed there), and no node or tensor names of the source model,
        so that a proprietary model's bricks can be measured elsewhere.
    """
    if no_weights and weights == "real":
        raise InvalidArgumentError("no_weights=True writes synthetic weights; it cannot be combined with "
                                   "weights='real'.")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for brick in bricks:
        path = folder / f"{brick.signature[:16]}_{brick.op_type.replace('+', '_')}.onnx"
        model = brick.without_weights().to_onnx() if no_weights else brick.to_onnx(weights)
        path.write_bytes(model.SerializeToString())
        paths.append(path)
    return paths


def _identity_source(nodes: Sequence[onnx.NodeProto], name: str) -> str:
    """The tensor that ``name`` copies through a chain of Identity nodes among ``nodes`` (``name``
    itself where no Identity writes it)."""
    writers = {n.output[0]: n for n in nodes if n.op_type == "Identity" and n.output and n.input}
    while name in writers:
        name = writers[name].input[0]
    return name


def _spec_of(vi: onnx.ValueInfoProto) -> TensorSpec:
    tt = vi.type.tensor_type
    return TensorSpec(vi.name, tuple(int(d.dim_value) for d in tt.shape.dim), onnx_dtype_to_name(tt.elem_type))


def _attributes(node: onnx.NodeProto) -> dict[str, object]:
    out: dict[str, object] = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list):
            value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        if isinstance(value, int | float | str) or (isinstance(value, list) and all(
                isinstance(v, int | float | str) for v in value)):
            out[attr.name] = value
        else:
            out[attr.name] = f"<{onnx.AttributeProto.AttributeType.Name(attr.type).lower()}>"
    return out


def _empty_tensor(spec: TensorSpec) -> onnx.TensorProto:
    """An initializer with ``spec``'s name, type and shape and no values (filled in elsewhere)."""
    return onnx.TensorProto(name=spec.name, data_type=spec.onnx_dtype, dims=list(spec.shape))


def _seed(signature: str, index: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{signature}:{index}".encode()).digest()[:8], "little")


def synthetic_array(spec: TensorSpec, kind: str, seed: int) -> np.ndarray:
    """Seeded synthetic weights: small normal values, or values in [0.5, 1.5) where positivity matters;
    integers uniform over their type's range (int8, uint8) or within +-1024 (int32 biases), in
    [1, 1024] for kind ``"positive"``, over ``[low, high)`` for :func:`index_kind`'s kind; random bools;
    empty strings."""
    rng = np.random.default_rng(seed)
    if spec.dtype == "string":
        return np.full(spec.shape, b"", dtype=object)
    dtype = np.dtype("float32") if spec.dtype == "bfloat16" else np.dtype(spec.dtype)
    if kind.startswith("range:"):
        low, high = (int(v) for v in kind.split(":")[1:3])
        return rng.integers(low, max(high, low + 1), size=spec.shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(size=spec.shape) < 0.5
    if np.issubdtype(dtype, np.integer):  # quantized weights over their type's range, int32 biases small
        info = np.iinfo(dtype)
        low = 1 if kind == "positive" else max(info.min, -1024)
        return rng.integers(low, min(info.max, 1023), size=spec.shape, dtype=dtype, endpoint=True)
    if not np.issubdtype(dtype, np.floating):
        return np.zeros(spec.shape, dtype=dtype)
    values = _pooled(kind == "positive", math.prod(spec.shape), rng).reshape(spec.shape)
    return values.astype(dtype, copy=False)


#: Values in each pool of synthetic float weights (:func:`_pooled`): 16 MiB of float32.
POOL_SIZE = 1 << 22


@functools.cache
def _pool(positive: bool) -> np.ndarray:
    """The process's pool of synthetic float32 weights, drawn once: normal with scale 0.05, or
    uniform over [0.5, 1.5) (``positive``)."""
    rng = np.random.default_rng(0x5EED)
    if positive:
        return rng.random(size=POOL_SIZE, dtype=np.float32) + np.float32(0.5)
    return rng.standard_normal(size=POOL_SIZE, dtype=np.float32) * np.float32(0.05)


def _pooled(positive: bool, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` float32 values copied from the pool at an offset drawn from ``rng``: the same
    distribution as drawing them, without drawing them (see CHANGELOG.md for what it saves); a
    tensor larger than the pool wraps around it."""
    pool = _pool(positive)
    if count <= len(pool):
        start = int(rng.integers(0, len(pool) - count + 1))
        return pool[start:start + count].copy()
    out = np.empty(count, dtype=np.float32)
    start, done = int(rng.integers(0, len(pool))), 0
    while done < count:
        n = min(count - done, len(pool) - start)
        out[done:done + n] = pool[start:start + n]
        done, start = done + n, 0
    return out


#: Two contexts of a brick whose cold spans differ by less than this factor measure alike
#: (:meth:`BrickContext.same_as`).
CONTEXT_SPAN_RATIO = 1.5


@dataclass(frozen=True, slots=True)
class BrickContext:
    """Where in a model a brick was measured: the signature of the brick that runs before it (None
    where a model input feeds it) and the bytes touched between two runs of it there (its reuse
    distance, :attr:`BrickInContext.reuse_bytes`). Stored with each measurement, so that a brick
    measured in one model's context is not taken for another model whose context differs."""

    previous: str | None = None
    reuse_bytes: int | None = None

    def same_as(self, other: BrickContext, cache_bytes: int) -> bool:
        """Whether a measurement in ``other`` stands for one in this context on a machine whose
        last-level cache holds ``cache_bytes``: the same previous brick, and cold spans (the reuse
        distance, at most the cache; unknown counts as the cache) within :data:`CONTEXT_SPAN_RATIO`."""
        if self.previous != other.previous:
            return False
        spans = sorted(max(1, min(cache_bytes, c.reuse_bytes or cache_bytes)) for c in (self, other))
        return spans[1] <= CONTEXT_SPAN_RATIO * spans[0]

    def to_json(self) -> str:
        return json.dumps({"previous": self.previous, "reuse_bytes": self.reuse_bytes}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> BrickContext | None:
        """The context stored as ``text`` (:meth:`to_json`); None for None (measured before contexts
        were stored)."""
        if not text:
            return None
        data = json.loads(text)
        return cls(data.get("previous"), data.get("reuse_bytes"))


@dataclass(frozen=True, slots=True)
class BrickInContext:
    """A brick to benchmark together with its context in the model it was cut from.

    Its ONNX model is the brick's, carrying ``previous``'s model under :data:`PREVIOUS_KEY`; a
    backend that emulates a layer's context inside a model runs ``previous`` untimed before each
    timed run (:func:`split_previous`). ``reuse_bytes`` (under :data:`REUSE_KEY`) is the layer's
    reuse distance, the bytes that pass through the caches between two reads of its weights inside
    the model run again and again: what one run of the model touches, weights and live activations,
    or less where other layers read the same weights (see
    :meth:`~dlbricks.Decomposition.reuse_bytes`); a backend's cold copies of the brick span that much
    (:func:`reuse_bytes`). Its key is the brick's signature: the context is part of how a
    configuration measures, not of what is measured (:attr:`context` is stored beside it).
    """

    brick: Brick
    previous: Brick | None = None
    reuse_bytes: int | None = None

    @property
    def key(self) -> str:
        return self.brick.signature

    @property
    def op_type(self) -> str:
        return self.brick.op_type

    @property
    def context(self) -> BrickContext:
        """The context it is measured in, as stored with its measurement."""
        return BrickContext(None if self.previous is None else self.previous.signature, self.reuse_bytes)

    def to_onnx(self) -> onnx.ModelProto:
        model = self.brick.to_onnx(deferred=True)
        if self.previous is not None:
            data = self.previous.to_onnx(deferred=True).SerializeToString()
            model.metadata_props.add(key=PREVIOUS_KEY, value=base64.b64encode(data).decode("ascii"))
        if self.reuse_bytes is not None:
            model.metadata_props.add(key=REUSE_KEY, value=str(int(self.reuse_bytes)))
        return model


def reuse_bytes(model: onnx.ModelProto) -> int | None:
    """The bytes a run of the model that ``model`` (a brick) was cut from touches (:data:`REUSE_KEY`),
    None where it does not say."""
    value = next((p.value for p in model.metadata_props if p.key == REUSE_KEY), None)
    return None if value is None else int(value)


def split_previous(model: onnx.ModelProto) -> tuple[onnx.ModelProto, onnx.ModelProto | None]:
    """``model`` without the model of the brick before it (:data:`PREVIOUS_KEY`), its weights drawn
    (:func:`materialize`), and that model as it is carried, its weights left to draw where it is
    prepared (None if it carries none). Backends build their sessions from the first: every session
    copy of a brick would otherwise hold the bytes of its previous brick too."""
    value = next((p.value for p in model.metadata_props if p.key == PREVIOUS_KEY), None)
    if value is None:
        return materialize(model), None
    own = onnx.ModelProto()
    own.CopyFrom(model)
    kept = [p for p in own.metadata_props if p.key != PREVIOUS_KEY]
    del own.metadata_props[:]
    own.metadata_props.extend(kept)
    return materialize(own), onnx.load_from_string(base64.b64decode(value))


def materialize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the synthetic weights that ``Brick.to_onnx(deferred=True)`` left empty drawn
    (the same values as without ``deferred``); ``model`` itself if it defers none."""
    value = next((p.value for p in model.metadata_props if p.key == DEFERRED_KEY), None)
    if value is None:
        return model
    later = json.loads(value)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [p for p in out.metadata_props if p.key != DEFERRED_KEY]
    del out.metadata_props[:]
    out.metadata_props.extend(kept)
    for tensor in out.graph.initializer:
        if tensor.name in later:
            kind, seed = later[tensor.name]
            spec = TensorSpec(tensor.name, tuple(int(d) for d in tensor.dims), onnx_dtype_to_name(tensor.data_type))
            tensor.CopyFrom(onnx.numpy_helper.from_array(synthetic_array(spec, kind, seed), tensor.name))
    return out
