"""Decomposition of a :class:`ModelGraph` into bricks, and :class:`BrickSet`, their union over models."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import takewhile

import networkx as nx
import numpy as np
import onnx

from dlbricks._canonical import canonical_nodes, signature_of, value_digest
from dlbricks._constants import (
    EXACT_MAX_ELEMENTS,
    INTEGER_WEIGHT_INPUTS,
    POSITIVE_INPUTS,
    QUANTIZATION_PARAMETERS,
    SEMANTIC_INPUTS,
    ConstantSpec,
    value_is_hashed,
)
from dlbricks._identities import join_constant_identities
from dlbricks._mxnet_to_onnx import mxnet_brick_flops
from dlbricks._ranges import consumer_range
from dlbricks.bricks import WEIGHT_MODES, Brick, BrickInContext
from dlbricks.cost import node_flops
from dlbricks.errors import InvalidArgumentError
from dlbricks.fusion import CHANNELS_LAST_KERNELS, fusion_groups
from dlbricks.graph import LayerNode, ModelGraph
from dlbricks.memory import check_fits_memory
from dlbricks.mxnet_frontend import MXNET_DOMAIN
from dlbricks.no_weights import recorded_digests
from dlbricks.onnx_frontend import ModelLike, load_model
from dlbricks.ov_fusion import openvino_fusion_groups
from dlbricks.types import TensorSpec, runnable_ir_version

__all__ = ["GRANULARITIES", "BrickSet", "BrickSetSummary", "Decomposition", "Occurrence", "decompose"]

GRANULARITIES = ("layer", "fused")
#: Constants at least this large are an occurrence's weights (:attr:`Occurrence.weights`); smaller
#: ones (shapes, scalars), which many layers of a model name alike, are not taken for shared weights.
SHARED_WEIGHT_BYTES = 4096
#: A brick's weights read again at its next use count for a chained round's schedule
#: (:meth:`Decomposition.schedule`) from this size: smaller ones fit a first-level data cache, warm at
#: each use whatever runs between.
SCHEDULED_WEIGHT_BYTES = 32 * 1024
#: Optimization level of the fused granularity when none is given: onnxruntime's default.
DEFAULT_FUSION_LEVEL = "all"
#: Runtimes whose executed kernels the fused granularity can group layers by.
FUSION_RUNTIMES = ("onnxruntime", "openvino")


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One use of a brick in a model: its position in the model's brick DAG, the layers it covers,
    the model's tensors bound to the brick's inputs (``in0``...) and outputs (``out0``...), and the
    model's constants of :data:`SHARED_WEIGHT_BYTES` or more (its weights) that it reads, by name:
    two occurrences that name one share it."""

    index: int
    signature: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    weights: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Decomposition:
    """The bricks of one model: unique bricks, every occurrence in order, and the brick DAG.

    ``dag`` has one node per occurrence index (attribute ``signature``) and an edge wherever a
    tensor flows from one occurrence to another.
    """

    model: str
    model_key: str
    granularity: str
    inputs: tuple[TensorSpec, ...]
    bricks: Mapping[str, Brick]
    occurrences: tuple[Occurrence, ...]
    dag: nx.DiGraph
    instances: tuple[Brick, ...] | None = None  # one brick per occurrence, with weights="real"
    _memo: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    reorder_bytes: tuple[int, ...] = ()  # fused at "all": bytes of each layout reorder of the model

    @property
    def layers(self) -> int:
        """Number of layers (ONNX nodes that are not folded constants)."""
        return sum(len(o.nodes) for o in self.occurrences)

    def counts(self) -> dict[str, int]:
        """Occurrences per signature."""
        out: dict[str, int] = {}
        for occ in self.occurrences:
            out[occ.signature] = out.get(occ.signature, 0) + 1
        return out

    def previous(self, signature: str) -> Brick | None:
        """The brick that writes the first input of ``signature``'s first occurrence (None where a
        model input or a folded constant feeds it): the layer that runs just before it in the model."""
        first = next((o for o in self.occurrences if o.signature == signature), None)
        if first is None or not first.inputs:
            return None
        writer = next((o for o in self.occurrences[: first.index] if first.inputs[0] in o.outputs), None)
        return None if writer is None else self.bricks[writer.signature]

    def feeds(self, signatures: Sequence[str]) -> tuple[tuple[tuple[int, int] | None, ...], ...]:
        """Where each input of ``signatures``' bricks comes from in the model, for a round that runs
        each once in that order (chained rounds): per brick, per input of its first occurrence, the
        position in ``signatures`` of the brick that writes that tensor and the index of its
        output; None for a model input, or a tensor whose writer is not among the bricks before it.
        A tensor that a later occurrence of a brick writes comes from that brick's one run."""
        position = {s: i for i, s in enumerate(signatures)}
        first: dict[str, Occurrence] = {}
        written: dict[str, tuple[str, int]] = {}
        for occ in self.occurrences:
            first.setdefault(occ.signature, occ)
            written.update({name: (occ.signature, k) for k, name in enumerate(occ.outputs)})
        rows = []
        for j, signature in enumerate(signatures):
            row: list[tuple[int, int] | None] = []
            for name in first[signature].inputs if signature in first else ():
                writer, output = written.get(name, ("", 0))
                q = position.get(writer)
                row.append((q, output) if q is not None and q < j else None)
            rows.append(tuple(row))
        return tuple(rows)

    def schedule(self, signatures: Sequence[str]) -> tuple[int, ...] | None:
        """The calls of a chained round of ``signatures``' bricks where a brick's occurrences read the
        same weights again (a model that reuses a layer's parameters, as ALBERT does, its four
        projections one brick): such bricks, and those without weights, at each occurrence, the
        others at their first, in the model's order, as the position of the brick in ``signatures``,
        so that a shared weight is as warm at each call as at each use inside the model, where a
        round that runs each brick once meets it as cold as the rest of the round leaves it. A brick
        whose occurrences each read a set of weights of their own, even one sharing a constant with
        another's (an exporter that merged equal constants, such as LayerNorm's ones or zero biases),
        is called once: at each use it would find its one copy warm where the model reads others.
        None where no brick reads its weights again (of :data:`SCHEDULED_WEIGHT_BYTES` at least): each
        brick once, in ``signatures``' order."""
        read: dict[str, set[tuple[str, ...]]] = {}
        for occ in self.occurrences:
            read.setdefault(occ.signature, set()).add(tuple(sorted(occ.weights)))
        counts = self.counts()
        sharing = {sig for sig, sets in read.items() if len(sets) < counts[sig] and any(sets)
                   and self.bricks[sig].constant_bytes >= SCHEDULED_WEIGHT_BYTES}
        if not sharing:
            return None
        repeated = sharing | {sig for sig, sets in read.items() if not any(sets)}
        position = {s: i for i, s in enumerate(signatures)}
        calls, seen = [], set()
        for occ in self.occurrences:
            if occ.signature in position and (occ.signature in repeated or occ.signature not in seen):
                calls.append(position[occ.signature])
                seen.add(occ.signature)
        return tuple(calls)

    def footprint_bytes(self) -> int:
        """Bytes one run of the model touches: every occurrence's weights (rows read, for gathers;
        weights that an earlier occurrence read already are counted once) and the most activation
        bytes alive at once (a tensor lives from the occurrence that writes it, or the start for
        model inputs, to the last that reads it), as the runtime's memory planner reuses the space
        of dead tensors. Computed once."""
        if "footprint" not in self._memo:
            self._memo["footprint"] = self._weight_bytes(self.occurrences) + self._activation_peak()
        return self._memo["footprint"]

    def weight_bytes(self) -> int:
        """Bytes of weights one run of the model reads: every occurrence's constants, weights that
        an earlier occurrence read already counted once (the weight side of :meth:`footprint_bytes`)."""
        return self._weight_bytes(self.occurrences)

    def deduplicated_weight_bytes(self) -> int:
        """Bytes of weights one run of the model reads that its unique bricks, each once, do not: the
        :meth:`weight_bytes` of every occurrence less the constants of each unique brick (0 where
        nothing repeats). Between two calls of a brick, a chain of the unique bricks touches this
        much less than the model does between two runs of its layer."""
        return max(self.weight_bytes() - sum(b.constant_bytes for b in self.bricks.values()), 0)

    def reuse_bytes(self, signature: str) -> int:
        """The reuse distance of ``signature``'s first occurrence: the bytes touched between two
        reads of its weights in the model run again and again. Where another occurrence reads the
        same weights (a model that shares a layer's parameters), the weights of the occurrences
        from one read to the next, the fewest going either way round, plus the activation peak;
        else, and at most, :meth:`footprint_bytes`."""
        footprint = self.footprint_bytes()
        first = next((o for o in self.occurrences if o.signature == signature), None)
        if first is None or not first.weights:
            return footprint
        mine = set(first.weights)
        if not any(mine & set(o.weights) for o in self.occurrences if o.index != first.index):
            return footprint
        forward = self.occurrences[first.index + 1:] + self.occurrences[:first.index]
        gaps = (list(takewhile(lambda o: not mine & set(o.weights), order)) for order in (forward, forward[::-1]))
        return min(footprint, min(self._weight_bytes(gap) for gap in gaps) + self._activation_peak())

    def _weight_bytes(self, occurrences: Sequence[Occurrence]) -> int:
        """Weight bytes of ``occurrences``, an occurrence whose weights an earlier one of them read
        counting none."""
        seen: set[str] = set()
        total = 0
        for occ in occurrences:
            if not (occ.weights and set(occ.weights) <= seen):
                total += self.bricks[occ.signature].constant_bytes
            seen.update(occ.weights)
        return total

    def _activation_peak(self) -> int:
        """The most activation bytes alive at once in one run (see :meth:`footprint_bytes`), computed
        once."""
        if "peak" in self._memo:
            return self._memo["peak"]
        born: dict[str, int] = {}
        died: dict[str, int] = {}
        size: dict[str, int] = {}
        for step, occ in enumerate(self.occurrences):
            brick = self.bricks[occ.signature]
            for name, spec in zip(occ.inputs, brick.inputs, strict=False):
                born.setdefault(name, 0)
                size.setdefault(name, spec.nbytes)
                died[name] = step
            for name, spec in zip(occ.outputs, brick.outputs, strict=False):
                born[name] = step
                size[name] = spec.nbytes
                died.setdefault(name, len(self.occurrences) - 1)  # a model output lives to the end
        change = np.zeros(len(self.occurrences) + 1, dtype=np.int64)
        for name, start in born.items():
            change[start] += size[name]
            change[max(died[name], start) + 1] -= size[name]
        self._memo["peak"] = int(np.cumsum(change).max() if len(change) else 0)
        return self._memo["peak"]

    def in_context(self, signature: str) -> BrickInContext:
        """The brick ``signature`` as an item to benchmark with :meth:`previous` riding along and
        :meth:`reuse_bytes` as its reuse distance."""
        return BrickInContext(self.bricks[signature], self.previous(signature), self.reuse_bytes(signature))


@dataclass(frozen=True, slots=True)
class BrickSetSummary:
    """Summary figures of a :class:`BrickSet` (the paper's "layers repeat across models")."""

    models: int
    layers: int
    unique_bricks: int
    per_model: tuple[tuple[str, int, int], ...]  # (model, layers, unique bricks in the model)
    shared_across_models: int  # bricks used by two or more models

    @property
    def reuse_ratio(self) -> float:
        """Layers per unique brick: how many layer benchmarks one brick benchmark replaces."""
        return self.layers / self.unique_bricks if self.unique_bricks else 0.0

    @property
    def within_model_unique(self) -> int:
        """Sum over models of their unique bricks (dedup within each model only)."""
        return sum(u for _, _, u in self.per_model)

    @property
    def cross_model_ratio(self) -> float:
        """Gain of dedup across models on top of dedup within models."""
        return self.within_model_unique / self.unique_bricks if self.unique_bricks else 0.0


class BrickSet:
    """The unique bricks of many models, with each model's occurrences and brick DAG.

    Examples
    --------
    >>> import dlbricks
    >>> from dlbricks.model_zoo import build
    >>> bs = dlbricks.BrickSet.from_models([build("resnet18_v1"), build("resnet34_v1")])
    >>> s = bs.summary()
    >>> s.unique_bricks < s.layers
    True
    """

    def __init__(self) -> None:
        self.bricks: dict[str, Brick] = {}
        self.models: dict[str, Decomposition] = {}

    def __len__(self) -> int:
        return len(self.bricks)

    def __repr__(self) -> str:
        return f"BrickSet(models={len(self.models)}, unique_bricks={len(self.bricks)})"

    def add(self, decomposition: Decomposition) -> str:
        """Merge a model's decomposition; equal signatures become one brick.

        Returns the name the model has in the set: a different model of the same name gets a
        ``-2``, ``-3``... suffix; the same model (same key and granularity) added twice is kept once.
        """
        name = decomposition.model
        suffix = 1
        while name in self.models:
            known = self.models[name]
            if (known.model_key, known.granularity) == (decomposition.model_key, decomposition.granularity):
                return name
            suffix += 1
            name = f"{decomposition.model}-{suffix}"
        if name != decomposition.model:
            decomposition = replace(decomposition, model=name)
        self.models[name] = decomposition
        for sig, brick in decomposition.bricks.items():
            self.bricks.setdefault(sig, brick)
        return name

    @classmethod
    def from_models(cls, models: Iterable[ModelLike | ModelGraph], granularity: str = "layer",
                    weights: str = "synthetic") -> BrickSet:
        """Decompose every model and collect the bricks."""
        bs = cls()
        for model in models:
            bs.add(decompose(model, granularity=granularity, weights=weights))
        return bs

    def occurrences(self, signature: str) -> list[tuple[str, Occurrence]]:
        """Every (model, occurrence) of a brick."""
        return [(name, occ) for name, dec in self.models.items()
                for occ in dec.occurrences if occ.signature == signature]

    def counts(self) -> dict[str, int]:
        """Total occurrences of each brick over all models."""
        out: dict[str, int] = {}
        for dec in self.models.values():
            for sig, n in dec.counts().items():
                out[sig] = out.get(sig, 0) + n
        return out

    def model_names(self, signature: str) -> list[str]:
        """Models that use a brick."""
        return [name for name, dec in self.models.items() if signature in dec.bricks]

    def summary(self) -> BrickSetSummary:
        """Layers, unique bricks and reuse, per model and for the set."""
        per_model = tuple((name, dec.layers, len(dec.bricks)) for name, dec in self.models.items())
        users: dict[str, int] = {}
        for dec in self.models.values():
            for sig in dec.bricks:
                users[sig] = users.get(sig, 0) + 1
        return BrickSetSummary(
            models=len(self.models), layers=sum(p[1] for p in per_model),
            unique_bricks=len(self.bricks), per_model=per_model,
            shared_across_models=sum(1 for n in users.values() if n > 1))


def decompose(model: ModelLike | ModelGraph, granularity: str = "layer", *, weights: str = "synthetic",
              input_shapes: Mapping[str, Sequence[int]] | None = None,
              batch_size: int | None = None, opt_level: str | None = None,
              runtime: str = "onnxruntime") -> Decomposition:
    """Cut a model into bricks.

    Parameters
    ----------
    model : ModelGraph, path, bytes or onnx.ModelProto
        The model; anything but a ModelGraph is loaded with :func:`load_model`.
    granularity : {"layer", "fused"}
        ``"layer"``: one node per brick. ``"fused"``: one brick per kernel that onnxruntime runs at
        ``opt_level`` (the layers it fuses into one kernel form one brick, read from its optimized
        graph); the decomposition's granularity is then ``"fused:<opt_level>"``. At both, an
        Identity that hands a constant to one layer (a weight shared between layers, as TorchScript
        exports it) is in that layer's brick, the constant with it (see
        :func:`~dlbricks._identities.join_constant_identities`).
    opt_level : {"basic", "extended", "all"}, optional
        For ``granularity="fused"`` with onnxruntime's groups (default ``"all"``).
    runtime : {"onnxruntime", "openvino"}, default "onnxruntime"
        For ``granularity="fused"``: whose kernels the groups are. ``"openvino"``: one brick per
        kernel that OpenVINO's CPU plugin executes (one thread, f32), read from its runtime model
        (:func:`~dlbricks.ov_fusion.openvino_fusion_groups`); the granularity is then
        ``"fused:openvino"``, and it takes no ``opt_level``.
    weights : {"synthetic", "real"}
        ``"real"`` keeps the model's weights so bricks can reproduce its intermediate tensors.

    Returns
    -------
    Decomposition

    Raises
    ------
    InvalidArgumentError
        On a bad argument, or where one run of the model at these shapes holds more bytes at once
        (weights and live activations) than this machine's memory: nothing could measure it here.

    Examples
    --------
    >>> import dlbricks
    >>> from dlbricks.model_zoo import build
    >>> dec = dlbricks.decompose(build("resnet50_v1"))
    >>> dec.layers > 3 * len(dec.bricks)
    True
    """
    if granularity not in GRANULARITIES:
        raise InvalidArgumentError(
            f"'granularity' must be one of {GRANULARITIES}. Got {granularity!r} instead.")
    if weights not in WEIGHT_MODES:
        raise InvalidArgumentError(f"'weights' must be one of {WEIGHT_MODES}. Got {weights!r} instead.")
    graph = model if isinstance(model, ModelGraph) else load_model(
        model, input_shapes=input_shapes, batch_size=batch_size)
    if granularity == "layer":
        if runtime != "onnxruntime":
            raise InvalidArgumentError("'runtime' applies to granularity='fused' only.")
        if opt_level is not None:
            raise InvalidArgumentError("'opt_level' applies to granularity='fused' only.")
        groups, _ = join_constant_identities(graph, [(layer,) for layer in graph.layers])
        return _fits_memory(_decompose_groups(graph, groups, granularity, weights))
    if runtime not in FUSION_RUNTIMES:
        raise InvalidArgumentError(f"'runtime' must be one of {FUSION_RUNTIMES}. Got {runtime!r} instead.")
    if runtime == "openvino":
        if opt_level is not None:
            raise InvalidArgumentError("'opt_level' applies to onnxruntime's fusion only; leave it out with "
                                       "runtime='openvino'.")
        plan = openvino_fusion_groups(graph)
        level = plan.opt_level
    else:
        level = opt_level or DEFAULT_FUSION_LEVEL
        plan = fusion_groups(graph, level)
    groups, kept = join_constant_identities(graph, plan.layer_groups(graph))
    channels_last = tuple(plan.channels_last[i] for i in kept) if plan.channels_last else ()
    dec = _decompose_groups(graph, groups, f"fused:{level}", weights, channels_last)
    sizes = tuple(graph.spec(t).nbytes for t in plan.reorder_tensors if t)
    return _fits_memory(replace(dec, reorder_bytes=sizes))


def _fits_memory(dec: Decomposition) -> Decomposition:
    """``dec``, refused where one run of its model holds more bytes at once (weights and live
    activations, :meth:`Decomposition.footprint_bytes`) than this machine's memory."""
    check_fits_memory(dec.model, dec.inputs, dec.footprint_bytes(),
                      "one run (its weights and the activations alive at once)")
    return dec


def _decompose_groups(graph: ModelGraph, groups: Sequence[tuple[LayerNode, ...]], granularity: str,
                      weights: str, channels_last: Sequence[bool] = ()) -> Decomposition:
    ranges = {s.name: s.value_range for s in graph.inputs if s.value_range is not None}
    digests = recorded_digests(graph.proto, graph.name)  # a weight-free brick cut again: its own signature
    bricks: dict[str, Brick] = {}
    occurrences: list[Occurrence] = []
    owner: dict[str, int] = {}
    instances: list[Brick] = []
    for index, group in enumerate(groups):
        nhwc = index < len(channels_last) and channels_last[index]
        brick, inputs, outputs = _make_brick(graph, group, granularity, weights, ranges, bricks, nhwc, digests)
        bricks.setdefault(brick.signature, brick)
        if weights == "real":
            instances.append(brick)
        read = tuple(dict.fromkeys(n for la in group for n in la.all_inputs
                                   if graph.is_constant(n) and graph.spec(n).nbytes >= SHARED_WEIGHT_BYTES))
        occurrences.append(Occurrence(index, brick.signature, tuple(la.name for la in group),
                                      tuple(inputs), tuple(outputs), read))
        for layer in group:
            owner[layer.name] = index
    dag = nx.DiGraph()
    dag.add_nodes_from((o.index, {"signature": o.signature}) for o in occurrences)
    for u, v in graph.dag.edges:
        a, b = owner[u], owner[v]
        if a != b:
            dag.add_edge(a, b)
    return Decomposition(model=graph.name, model_key=graph.key, granularity=granularity,
                         inputs=graph.inputs, bricks=bricks, occurrences=tuple(occurrences), dag=dag,
                         instances=tuple(instances) if weights == "real" else None)


def _group_interface(graph: ModelGraph, group: tuple[LayerNode, ...],
                     ) -> tuple[list[str], list[str], list[str]]:
    """External activation inputs, constant inputs and outputs of a group, in order of first use."""
    produced = {o for la in group for o in la.outputs if o}
    inputs: dict[str, None] = {}
    constants: dict[str, None] = {}
    for layer in group:
        for name in layer.all_inputs:
            if name in produced:
                continue
            (constants if graph.is_constant(name) else inputs).setdefault(name, None)
    if len(group) == 1:
        outputs = [o for o in group[0].outputs if o]
    else:
        members = {la.name for la in group}
        consumed_outside = {t for la in graph.layers if la.name not in members for t in la.all_inputs}
        graph_outputs = {s.name for s in graph.outputs}
        outputs = [o for la in group for o in la.outputs
                   if o and (o in consumed_outside or o in graph_outputs)]
    return list(inputs), list(constants), outputs


def _make_brick(graph: ModelGraph, group: tuple[LayerNode, ...], granularity: str, weights: str,
                model_ranges: Mapping[str, tuple[int, int]], seen: Mapping[str, Brick],
                channels_last: bool = False, digests: Mapping[str, str] | None = None,
                ) -> tuple[Brick, list[str], list[str]]:
    inputs, constants, outputs = _group_interface(graph, group)
    protos = [la.proto for la in group]
    roles = _constant_roles(group, constants)
    unsigned: dict[str, np.ndarray] = {}
    retyped: set[str] = set()
    if granularity.startswith("fused:") and granularity != "fused:disable":
        protos, unsigned, retyped = _unsigned_pairs(graph, group, inputs, outputs)
        used = {n for p in protos for n in p.input} | {n for la in group for n in la.implicit_inputs}
        constants = [c for c in constants if c in used] + list(unsigned)
        roles.update(dict.fromkeys(unsigned, (False, False, False, True)))  # zero points
    nhwc = _channels_last_kernel(graph, group, inputs, outputs, retyped) if channels_last else None
    if nhwc is not None:
        protos, constants, unsigned = [nhwc], [], {}
    nodes = canonical_nodes(protos, inputs, constants, outputs)

    def spec_of(name: str) -> TensorSpec:
        spec = graph.spec(name)
        spec = TensorSpec(name, spec.shape, "uint8") if name in retyped else spec
        if nhwc is not None:  # the kernel's NHWC layout
            spec = TensorSpec(name, (spec.shape[0], *spec.shape[2:], spec.shape[1]), spec.dtype)
        return spec

    in_specs = tuple(spec_of(n).renamed(f"in{i}").with_range(
        _input_range(graph, group, n, model_ranges)) for i, n in enumerate(inputs))
    out_specs = tuple(spec_of(n).renamed(f"out{i}") for i, n in enumerate(outputs))
    const_specs = []
    sig_consts = []
    for i, name in enumerate(constants):
        array = unsigned.get(name)
        spec = (graph.spec(name) if array is None else TensorSpec(name, array.shape, "uint8")).renamed(f"c{i}")
        semantic, positive, integer_weight, parameter = roles[name]
        hashed = value_is_hashed(spec, semantic, integer_weight, parameter)
        exact = hashed or parameter or spec.numel <= EXACT_MAX_ELEMENTS
        recorded = (digests or {}).get(name) if array is None else None
        digest = (recorded or value_digest(graph.constant_array(name) if array is None else array)) if hashed else None
        value = (_constant_value(graph, name, exact, weights) if array is None
                 else onnx.numpy_helper.from_array(array, name))
        const_specs.append(ConstantSpec(spec, exact, "positive" if positive else "normal", value))
        sig_consts.append((spec.shape, spec.dtype, digest))
    domains = {la.domain for la in group} | {""}
    opsets = tuple(sorted((d, graph.opsets[d]) for d in domains if d in graph.opsets))
    if nhwc is not None:
        opsets = tuple(sorted({*opsets, (nhwc.domain, 1)}))
    recorded = [s.values_digest for s in in_specs]  # inputs of value-dependent ops
    signature = signature_of(
        granularity=granularity, nodes=nodes, opsets=dict(opsets),
        inputs=[(s.shape, s.dtype) for s in in_specs], constants=sig_consts,
        outputs=[(s.shape, s.dtype) for s in out_specs], extra={"values": recorded} if any(recorded) else None)
    existing = seen.get(signature)
    if existing is not None and weights == "synthetic":
        return existing, inputs, outputs
    brick = Brick(
        signature=signature, granularity=granularity, op_types=tuple(la.op_type for la in group),
        inputs=in_specs, outputs=out_specs, constants=tuple(const_specs), nodes=nodes, opsets=opsets,
        ir_version=runnable_ir_version(graph.ir_version, [
            onnx.helper.make_opsetid(d, v) for d, v in opsets]), flops=_group_flops(graph, group), weights=weights,
        functions=_functions(graph, group))
    if brick.flops is None and all(la.domain == MXNET_DOMAIN for la in group):
        brick = replace(brick, flops=mxnet_brick_flops(brick))
    return brick, inputs, outputs


def _channels_last_kernel(graph: ModelGraph, group: tuple[LayerNode, ...], inputs: Sequence[str],
                          outputs: Sequence[str], retyped: set[str]) -> onnx.NodeProto | None:
    """The one node that runs a group as the runtime does in an NHWC region of its model
    (:data:`~dlbricks.fusion.CHANNELS_LAST_KERNELS`: DequantizeLinear -> MaxPool -> QuantizeLinear
    on 8-bit values as an NhwcMaxPool), reading ``inputs[0]`` and writing ``outputs[0]`` in NHWC
    layout; None if the group is not one 4-D 8-bit op between its DequantizeLinear and
    QuantizeLinear, which then runs as its layers."""
    ops = [la for la in group if la.op_type not in ("DequantizeLinear", "QuantizeLinear")]
    kernel = next(((d, k) for (d, k), op in CHANNELS_LAST_KERNELS.items()
                   if len(ops) == 1 and ops[0].op_type == op), None)
    if kernel is None or len(inputs) != 1 or len(outputs) != 1:
        return None
    specs = [graph.spec(inputs[0]), graph.spec(outputs[0])]
    types = ["uint8" if s.name in retyped else s.dtype for s in specs]
    if any(len(s.shape) != 4 for s in specs) or types[0] != types[1] or types[0] not in ("int8", "uint8"):
        return None
    return onnx.helper.make_node(kernel[1], [inputs[0]], [outputs[0]], domain=kernel[0],
                                 **{a.name: onnx.helper.get_attribute_value(a) for a in ops[0].proto.attribute
                                    if a.name != "storage_order"})


#: Suffix of the uint8 zero point that replaces an int8 one in :func:`_unsigned_pairs`.
_UNSIGNED = ":uint8"


def _unsigned_pairs(graph: ModelGraph, group: tuple[LayerNode, ...], inputs: Sequence[str],
                    outputs: Sequence[str]) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray], set[str]]:
    """The group's nodes with the int8 tensors it shares with its neighbours through a
    QuantizeLinear -> DequantizeLinear pair made uint8, as onnxruntime does to the whole model on
    x86 before its QDQ fusions (QDQS8ToU8Transformer: a QuantizeLinear whose one reader is a
    DequantizeLinear, both of the same constant scalar int8 zero point; zero point + 128, the same
    dequantized values).

    A brick cut at such a pair would otherwise meet an int8 input (or output) that the runtime
    does not convert, and run its DequantizeLinear -> Conv -> QuantizeLinear unfused in float
    instead of as one QLinearConv. Returns the nodes (copies where rewritten), the uint8 zero
    points (named ``<int8 zero point>:uint8``) and the tensors made uint8.
    """
    if not any(la.op_type in ("QuantizeLinear", "DequantizeLinear") for la in group):
        return [la.proto for la in group], {}, set()
    readers: dict[str, list[LayerNode]] = {}
    for layer in graph.layers:
        for name in layer.inputs:
            readers.setdefault(name, []).append(layer)
    producer = {o: la for la in graph.layers for o in la.outputs if o}
    graph_outputs = {spec.name for spec in graph.outputs}

    def zero_point(layer: LayerNode, op_type: str) -> int | None:
        """The constant scalar int8 zero point of a QuantizeLinear or DequantizeLinear, else None."""
        zp = layer.inputs[2] if layer.op_type == op_type and len(layer.inputs) > 2 else ""
        if not graph.is_constant(zp) or graph.spec(zp).dtype != "int8" or graph.spec(zp).numel != 1:
            return None
        return int(graph.constant_array(zp).reshape(-1)[0])

    def is_pair(tensor: str) -> bool:
        """A QuantizeLinear whose one reader is a DequantizeLinear of the same zero point."""
        src, users = producer.get(tensor), readers.get(tensor, [])
        if src is None or len(users) != 1 or tensor in graph_outputs:
            return False
        zp = zero_point(src, "QuantizeLinear")
        return zp is not None and zero_point(users[0], "DequantizeLinear") == zp

    pairs = {name for name in (*inputs, *outputs) if is_pair(name)}
    protos: list[onnx.NodeProto] = []
    zero_points: dict[str, np.ndarray] = {}
    for layer in group:
        tensor = layer.inputs[0] if layer.op_type == "DequantizeLinear" else layer.outputs[0]
        if layer.op_type not in ("QuantizeLinear", "DequantizeLinear") or tensor not in pairs:
            protos.append(layer.proto)
            continue
        zp = layer.inputs[2]
        name = f"{zp}{_UNSIGNED}"
        zero_points[name] = (graph.constant_array(zp).astype(np.int16) + 128).astype(np.uint8)
        node = onnx.NodeProto()
        node.CopyFrom(layer.proto)
        node.input[2] = name
        protos.append(node)
    return protos, zero_points, pairs


def _constant_value(graph: ModelGraph, name: str, exact: bool, weights: str) -> onnx.TensorProto | None:
    """The value a brick keeps: a standalone copy of an exact constant (a reference into the model
    would keep the whole model, weights and all, alive), the model's own tensor for real weights."""
    if weights == "real":
        return graph.constants[name]
    if not exact:
        return None
    value = onnx.TensorProto()
    value.CopyFrom(graph.constants[name])
    return value


def _constant_roles(group: tuple[LayerNode, ...], constants: Sequence[str],
                    ) -> dict[str, tuple[bool, bool, bool, bool]]:
    """For each constant: (semantic, must be positive, integer weight, quantization parameter),
    from the positions where it is read."""
    tables = (SEMANTIC_INPUTS, POSITIVE_INPUTS, INTEGER_WEIGHT_INPUTS, QUANTIZATION_PARAMETERS)
    roles = {name: (False, False, False, False) for name in constants}
    for layer in group:
        positions = [table.get(layer.op_type, frozenset()) for table in tables]
        for position, name in enumerate(layer.inputs):
            if name in roles:
                roles[name] = tuple(  # type: ignore[assignment]
                    old or position in found for old, found in zip(roles[name], positions, strict=True))
        for name in layer.implicit_inputs:
            if name in roles:
                roles[name] = (True, *roles[name][1:])
    return roles


def _input_range(graph: ModelGraph, group: tuple[LayerNode, ...], name: str,
                 model_ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int] | None:
    found: tuple[int, int] | None = None
    for layer in group:
        for position, inp in enumerate(layer.inputs):
            if inp != name:
                continue
            rng = consumer_range(layer.proto, position, _SpecView(graph))
            if rng is not None:
                found = rng if found is None else (max(found[0], rng[0]), min(found[1], rng[1]))
    return found if found is not None else model_ranges.get(name)


class _SpecView(Mapping[str, TensorSpec]):
    """Read-only view of every tensor spec of a graph, constants included."""

    def __init__(self, graph: ModelGraph) -> None:
        self._graph = graph

    def __getitem__(self, name: str) -> TensorSpec:
        try:
            return self._graph.spec(name)
        except KeyError:
            raise KeyError(name) from None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._graph.tensors)

    def __len__(self) -> int:
        return len(self._graph.tensors)


def _group_flops(graph: ModelGraph, group: tuple[LayerNode, ...]) -> int | None:
    total = 0
    for layer in group:
        ins = [graph.spec(n) if n else None for n in layer.inputs]
        outs = [graph.spec(n) if n else None for n in layer.outputs]
        flops = node_flops(layer.proto, ins, outs)
        if flops is None:
            return None
        total += flops
    return total


def _functions(graph: ModelGraph, group: tuple[LayerNode, ...]) -> tuple[onnx.FunctionProto, ...]:
    used = {(la.domain, la.op_type) for la in group}
    return tuple(f for f in graph.proto.functions if (f.domain, f.name) in used)
