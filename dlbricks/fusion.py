"""Fusion groups: which layers of a model onnxruntime runs as one kernel, read from its optimized graph.

onnxruntime rewrites a model before running it: Conv+BatchNormalization+Relu become one FusedConv,
MatMul+Add a Gemm, attention, LayerNorm and GELU patterns single contrib ops, and at the "all" level
the CPU provider moves convolutions to the blocked NCHWc layout (domain ``com.microsoft.nchwc``).
:func:`fusion_groups` saves that optimized graph (:func:`optimized_model`) and maps every kernel of
it back to the layers of the :class:`~dlbricks.ModelGraph` it absorbed, so that a brick can be one
kernel that the runtime really executes.

The mapping
-----------
Tensor names that survive optimization are the anchors. A kernel whose inputs and outputs are all
original tensors absorbed the layers between them: ancestors of its outputs' producers that are not
ancestors of its inputs' producers and not yet assigned (kernels are visited in the topological
order of the optimized graph). So a layer the optimizer deleted (a weight Transpose it folded, an
Identity, a Dropout) joins the kernel that reads what it computed.
Layout conversions (ReorderInput/ReorderOutput, layout Transposes) are followed through: their
output names the same tensor as their input. Some optimizations rename tensors without an original
counterpart (NCHWc kernels write ``reorder_token_*``, MatMulAddFusion reshapes its operands to 2-D).
A kernel that touches such a tensor is matched by its *seed*: an unassigned layer of its op type
(``FusedConv``/NCHWc ``Conv`` -> Conv, ``Gemm`` -> Gemm or MatMul...) with the same attributes and
weight shape (NCHWc pads channels) that reads one of its anchored inputs or lies downstream of the
seed of a kernel feeding it; among those, the one that the kernel's name points to (onnxruntime
names an NCHWc kernel ``<tensor>_nchwc``), then the closest, then the earliest. A view kernel
(Reshape...) without a seed, such as the Reshapes to and from 2-D around a MatMulAddFusion Gemm,
absorbs nothing: its anchors pass on to its consumers and it is reported with their group.
Layers no kernel claimed (the epilogue that an NCHWc convolution fused: BatchNormalization, the
residual Add, Relu) join the group of their latest producer in kernel order, which is the kernel
that fused them; layers without producers join their first consumer's group. Every layer ends in
exactly one group. If the groups' DAG has a cycle, the groups on it are split into single layers
until it is acyclic, so that every group is convex and runs as one brick.

Quantized (QDQ) models
----------------------
A kernel that runs a QDQ node unit takes the DequantizeLinear layers feeding its seed and the
QuantizeLinear layers reading it: those onnxruntime folds into a quantized kernel (QLinearConv...)
or drops around an op that then runs on the 8-bit values (MaxPool, Reshape, Transpose...). An 8-bit
MaxPool after an NHWC QLinearConv runs as NhwcMaxPool (:data:`CHANNELS_LAST_KERNELS`); the plan marks
its group (:attr:`FusionPlan.channels_last`) and its brick is that kernel on NHWC tensors, since the
group's layers alone would run the NCHW 8-bit MaxPool. In a model quantized with uint8 activations
and int8 weights every QLinearConv runs NHWC (``channels_last``), on tensors the runtime names
afresh between two layout Transposes: a kernel's seed is then found through the QuantizeLinear and
DequantizeLinear layers that read the original tensor it reads.

Layout reorders
---------------
ReorderInput/ReorderOutput nodes (and Transposes inserted around NHWC kernels) convert tensors at
the entry and exit of an NCHWc region of the model: the runtime inserts them where a blocked-layout
kernel meets one that is not. They belong to the model's layout plan, not to any brick: a brick cut
from inside an NCHWc region would, run alone, convert its input and output itself, while in the
model the neighbouring kernels share the blocked tensor. So they are not groups; the plan counts them
(:attr:`FusionPlan.reorders`) and names the original tensor each converts
(:attr:`FusionPlan.reorder_tensors`) so that the estimator can add their cost once per model run.
``benchmarks/bench_reorder.py`` measures what one costs: on the development machine (AMD EPYC,
onnxruntime 1.31.1, one thread) a ReorderInput or ReorderOutput moves about 100 GB/s, some 19 us
per MiB of tensor plus the per-call floor, whether the tensor comes from cache or not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import onnx
from networkx.utils import UnionFind

from dlbricks.errors import BackendError, InvalidArgumentError
from dlbricks.graph import LayerNode, ModelGraph
from dlbricks.ortutil import session_options
from dlbricks.tempdir import in_temp_dir, temp_dir_error, temporary_directory

__all__ = ["CHANNELS_LAST_KERNELS", "NCHWC_DOMAIN", "OPT_LEVELS", "REORDER_OPS", "FusionPlan", "fusion_groups",
           "kernel_origin", "optimized_model"]

#: Graph optimization levels, as in ``OrtConfig.graph_optimization_level``.
OPT_LEVELS = ("disable", "basic", "extended", "all")

NCHWC_DOMAIN = "com.microsoft.nchwc"
NHWC_DOMAIN = "com.ms.internal.nhwc"
#: The kernels onnxruntime inserts at level "all" to move tensors into and out of the NCHWc layout.
REORDER_OPS = frozenset({"ReorderInput", "ReorderOutput"})
#: Kernels (domain, op type) that onnxruntime runs for an op of the original model only where the
#: op's input comes in NHWC layout from a neighbour (its transpose optimizer pushes the layout
#: through an 8-bit MaxPool after an NHWC QLinearConv), with the original op they run.
CHANNELS_LAST_KERNELS: Mapping[tuple[str, str], str] = {("com.microsoft", "NhwcMaxPool"): "MaxPool"}
#: Original op types a kernel's seed may have, in order of preference, where not its own op type.
_SEED_TYPES: Mapping[str, tuple[str, ...]] = {
    "Gemm": ("Gemm", "MatMul"),
    "QuickGelu": ("Sigmoid",),
    "Upsample": ("Upsample", "Resize"),
    f"{NCHWC_DOMAIN}:Conv": ("Conv", "BatchNormalization"),
    f"{NCHWC_DOMAIN}:Upsample": ("Upsample", "Resize"),
    # QDQ fusions: DequantizeLinear -> op -> QuantizeLinear run as one quantized kernel
    "QLinearConv": ("Conv",),
    "QLinearMatMul": ("MatMul",),
    "QGemm": ("Gemm", "MatMul"),
    "QLinearAdd": ("Add",),
    "QLinearMul": ("Mul",),
    "QLinearSigmoid": ("Sigmoid",),
    "QLinearLeakyRelu": ("LeakyRelu",),
    "QLinearSoftmax": ("Softmax",),
    "QLinearConcat": ("Concat",),
    "QLinearGlobalAveragePool": ("GlobalAveragePool",),
    "QLinearAveragePool": ("AveragePool",),
    "QLinearWhere": ("Where",),
    **{f"{domain}:{op}": (original,) for (domain, op), original in CHANNELS_LAST_KERNELS.items()},
    "MatMulIntegerToFloat": ("MatMulInteger", "MatMul"),
    "DynamicQuantizeMatMul": ("MatMulInteger", "MatMul"),
}
#: Kernels that run a QDQ node unit: the DequantizeLinear layers feeding their seed and the
#: QuantizeLinear layers reading its output are part of the kernel.
_QDQ_KERNELS = frozenset(op for op in _SEED_TYPES if op.startswith("QLinear") or op == "QGemm")
#: The layers of a QDQ model that quantize and dequantize activations around the ops between them.
_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: Position of the weight of a kernel whose weight is not its second input.
_WEIGHT_POSITION: Mapping[str, int] = {"QLinearConv": 3}
#: Ops that only change a tensor's shape: where one has no original counterpart, it is a helper.
_VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
#: Attributes that an optimizer adds to a kernel: not compared with the seed's.
_ADDED_ATTRIBUTES = frozenset({"activation", "activation_params", "alpha", "transA", "transB", "group"})
#: Prefix of the tensors that onnxruntime's InsertCastTransformer computes in float32 in place of
#: the float16 originals of the same name (where the CPU provider has no float16 kernel).
_PRECISION_FREE_PREFIX = "InsertedPrecisionFreeCast_"
#: Suffixes onnxruntime appends to the names of nodes its transformers create from others.
_TOKEN_SUFFIX = re.compile(r"(_token_\d+)+$")
#: Channel block sizes of the NCHWc layout (AVX2, AVX-512): NCHWc weights pad channels to them.
_NCHWC_BLOCKS = (8, 16)


@dataclass(frozen=True, slots=True)
class FusionPlan:
    """The layers of a model grouped as onnxruntime runs them at one optimization level.

    Attributes
    ----------
    opt_level : str
        One of :data:`OPT_LEVELS`.
    groups : tuple of tuple of str
        Layer names of the original graph; each layer in exactly one group, each group in the
        model's topological order, groups in a topological order of the group DAG.
    kernels : tuple of str
        For each group, the optimized node(s) it corresponds to, as ``op[name]`` joined by ``+``
        (empty when the runtime runs no kernel for it, e.g. a deleted Identity left alone).
    reorders : int
        Layout conversions the runtime inserted (ReorderInput/ReorderOutput, layout Transposes):
        a cost of the model, paid once per run, not of any group.
    reorder_tensors : tuple of str
        For each reorder, the original tensor it converts ("" where it has none).
    channels_last : tuple of bool
        For each group, whether its kernel is one that the runtime picks for an op in an NHWC
        region of the model only (:data:`CHANNELS_LAST_KERNELS`: a MaxPool on the 8-bit output of
        an NHWC QLinearConv runs as NhwcMaxPool), so that the group's own layers, run alone, would
        run another kernel.
    """

    opt_level: str
    groups: tuple[tuple[str, ...], ...]
    kernels: tuple[str, ...]
    reorders: int
    reorder_tensors: tuple[str, ...] = ()
    channels_last: tuple[bool, ...] = ()

    def layer_groups(self, graph: ModelGraph) -> tuple[tuple[LayerNode, ...], ...]:
        """The groups as :class:`LayerNode` tuples of ``graph``, ready for decomposition."""
        by_name = {layer.name: layer for layer in graph.layers}
        return tuple(tuple(by_name[name] for name in group) for group in self.groups)


def optimized_model(model_graph: ModelGraph, opt_level: str, threads: int = 1) -> onnx.ModelProto:
    """The model as onnxruntime's CPU provider optimizes it at ``opt_level``, weights included.

    Parameters
    ----------
    model_graph : ModelGraph
    opt_level : {"disable", "basic", "extended", "all"}
    threads : int, default 1
        ``intra_op_num_threads`` of the session that optimizes it.

    Returns
    -------
    onnx.ModelProto
        The saved optimized graph; at "all" it holds ``com.microsoft.nchwc`` nodes that only an
        onnxruntime on a machine of the same instruction set can run.

    Examples
    --------
    >>> import dlbricks
    >>> from dlbricks.model_zoo import build
    >>> graph = dlbricks.load_model(build("resnet18_v1"))
    >>> model = optimized_model(graph, "extended")
    >>> len(model.graph.node) < len(graph.layers)
    True
    """
    return _optimize(model_graph, opt_level, threads, weights=True)


def fusion_groups(model_graph: ModelGraph, opt_level: str, threads: int = 1) -> FusionPlan:
    """Group the layers of a model as onnxruntime fuses them at ``opt_level``.

    Parameters
    ----------
    model_graph : ModelGraph
    opt_level : {"disable", "basic", "extended", "all"}
    threads : int, default 1

    Returns
    -------
    FusionPlan

    Examples
    --------
    >>> import dlbricks
    >>> from dlbricks.model_zoo import build
    >>> graph = dlbricks.load_model(build("resnet18_v1"))
    >>> plan = fusion_groups(graph, "extended")
    >>> sorted(len(g) for g in plan.groups)[-1] > 1  # Conv+BatchNormalization+Relu in one kernel
    True
    >>> sum(len(g) for g in plan.groups) == len(graph.layers)
    True
    """
    proto = _optimize(model_graph, opt_level, threads, weights=False)
    return _Mapper(model_graph, proto.graph).plan(opt_level)


def kernel_origin(name: str) -> str:
    """The node name an onnxruntime kernel name derives from: ``name`` without the
    ``_token_<n>`` suffixes that the runtime's graph transformers append to the nodes they create
    (``conv_token_63`` for the QLinearConv that replaced node ``conv``).

    Examples
    --------
    >>> kernel_origin("features.0_token_63"), kernel_origin("a_token_1_token_2"), kernel_origin("conv")
    ('features.0', 'a', 'conv')
    """
    return _TOKEN_SUFFIX.sub("", name)


def _optimize(model_graph: ModelGraph, opt_level: str, threads: int, *, weights: bool) -> onnx.ModelProto:
    if opt_level not in OPT_LEVELS:
        raise InvalidArgumentError(f"'opt_level' must be one of {OPT_LEVELS}. Got {opt_level!r} instead.")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise InvalidArgumentError(f"'threads' must be a non-negative int. Got {threads!r} instead.")
    import onnxruntime as ort

    with temporary_directory("dlbricks-fusion-") as tmp:
        path = tmp / "optimized.onnx"
        # the NCHWc "hardware specific" warning is expected here
        options = session_options(opt_level, threads, optimized_path=str(path), external_weights=True)
        try:
            ort.InferenceSession(model_graph.to_onnx().SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
            return onnx.load(str(path), load_external_data=weights)
        except Exception as e:  # onnxruntime raises its own exception types
            if isinstance(e, OSError) and in_temp_dir(e):
                raise temp_dir_error(e) from e
            if _WRITE_FAILED.search(str(e)):
                raise temp_dir_error("onnxruntime could not save the optimized model there") from e
            raise BackendError(f"onnxruntime could not optimize model {model_graph.name!r} at level "
                               f"{opt_level!r}: {e}") from e


#: How onnxruntime says that it could not save the optimized model (its weights file, itself).
_WRITE_FAILED = re.compile(r"Failed to write|No space left|[Cc]ould not (?:open|write)|Permission denied")


def _is_channels_last(node: onnx.NodeProto) -> bool:
    """A kernel on NHWC tensors: of the internal NHWC domain, one of :data:`CHANNELS_LAST_KERNELS`, or
    a quantized kernel with ``channels_last`` set (as the saved optimized graph writes QLinearConv)."""
    return (node.domain == NHWC_DOMAIN or (node.domain, node.op_type) in CHANNELS_LAST_KERNELS
            or any(a.name == "channels_last" and a.i for a in node.attribute))


def _is_reorder(node: onnx.NodeProto, nhwc_tensors: set[str]) -> bool:
    """A layout conversion: an NCHWc reorder, or a Transpose next to an NHWC kernel."""
    if node.domain == NCHWC_DOMAIN and node.op_type in REORDER_OPS:
        return True
    return node.op_type == "Transpose" and not node.domain and any(
        t in nhwc_tensors for t in (*node.input, *node.output))


def _padded_equal(padded: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether a (possibly NCHWc-padded) weight shape is ``shape``: channels may be rounded up to
    a block size, kernel dimensions are equal."""
    if len(padded) != len(shape) or tuple(padded[2:]) != tuple(shape[2:]):
        return False
    return all(p == d or any(p == -(-d // b) * b for b in _NCHWC_BLOCKS)
               for p, d in zip(padded[:2], shape[:2], strict=True))


def _closest(reaches: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The smallest distance of each layer over several distance maps."""
    out: dict[str, int] = {}
    for reach in reaches:
        for name, d in reach.items():
            if d < out.get(name, d + 1):
                out[name] = d
    return out


def _kernel_label(node: onnx.NodeProto) -> str:
    op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
    return f"{op}[{node.name}]"


def _seed_types(node: onnx.NodeProto) -> tuple[str, ...]:
    """Original op types the seed of a kernel may have, preferred first."""
    op = node.op_type
    if op.startswith("Fused") and len(op) > len("Fused"):  # FusedConv, FusedGemm, FusedMatMul
        op = op[len("Fused"):]
    return _SEED_TYPES.get(f"{node.domain}:{op}") or _SEED_TYPES.get(op) or (op,)


class _Mapper:
    """Maps the nodes of one optimized graph to the layers of the original model."""

    def __init__(self, graph: ModelGraph, optimized: onnx.GraphProto) -> None:
        self.graph = graph
        self.dag = graph.dag
        self.nodes = list(optimized.node)
        self.init_dims = {t.name: tuple(t.dims) for t in optimized.initializer}
        self.index = {layer.name: i for i, layer in enumerate(graph.layers)}
        self.producer = {o: layer.name for layer in graph.layers for o in layer.outputs if o}
        self.readers: dict[str, list[str]] = {}
        for layer in graph.layers:
            for name in layer.all_inputs:
                self.readers.setdefault(name, []).append(layer.name)
        originals = {s.name for s in graph.inputs} | set(self.producer)
        nhwc = {t for n in self.nodes if _is_channels_last(n) for t in (*n.input, *n.output)}
        self.reorder = [i for i, n in enumerate(self.nodes) if _is_reorder(n, nhwc)]
        self.reorders = frozenset(self.reorder)
        self.classes = UnionFind(t for n in self.nodes for t in (*n.input, *n.output) if t)
        for i in self.reorder:
            self.classes.union(self.nodes[i].input[0], self.nodes[i].output[0])
        self.alias: dict[str, str] = {}
        for name in self.classes:
            if name in originals:
                self.alias.setdefault(self.classes[name], name)
        for name in self.classes:  # a float16 tensor that the runtime computes in float32 instead
            original = name.removeprefix(_PRECISION_FREE_PREFIX)
            if original != name and original in originals:
                self.alias.setdefault(self.classes[name], original)
        self.kdag = self._kernel_dag()
        self.made_by = {self.classes[o]: i for i, n in enumerate(self.nodes) if i not in self.reorders
                        for o in n.output if o}
        self.group_of: dict[str, int] = {}
        self.groups: list[list[str]] = []
        self.group_kernels: list[list[int]] = []
        self.group_rank: list[int] = []
        self.seeds: dict[int, str | None] = {}
        self.reaches: dict[int, Mapping[str, int]] = {}
        self.anchors: dict[int, frozenset[str]] = {}

    # -- the optimized graph ------------------------------------------------------------------

    def _kernel_dag(self) -> nx.DiGraph:
        kdag = nx.DiGraph()
        kdag.add_nodes_from(range(len(self.nodes)))
        made = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        for i, node in enumerate(self.nodes):
            kdag.add_edges_from((made[t], i) for t in node.input if t in made)
        return kdag

    def _aliased(self, tensor: str) -> str | None:
        return self.alias.get(self.classes[tensor]) if tensor else None

    def _maker(self, tensor: str) -> int | None:
        """The kernel (not a reorder) that computes ``tensor`` or the tensor it was reordered from."""
        return self.made_by.get(self.classes[tensor])

    def _is_constant_kernel(self, node: onnx.NodeProto) -> bool:
        """Computations dlbricks folded into constants at load time (Shape -> Gather -> Concat)."""
        outs = [o for o in node.output if o]
        return bool(outs) and all(self.graph.is_constant(o) for o in outs)

    def _successors(self, i: int) -> list[int]:
        """Kernels reading an output of kernel ``i``, looking through reorders."""
        found: set[int] = set()
        for j in self.kdag.successors(i):
            found.update([j] if j not in self.reorders else self._successors(j))
        return sorted(found)

    # -- per kernel -------------------------------------------------------------------------

    def _anchors(self, i: int) -> frozenset[str]:
        """Original tensors a kernel reads, looking through inputs that have none (helpers)."""
        if i not in self.anchors:
            found: set[str] = set()
            for tensor in self.nodes[i].input:
                if not tensor:
                    continue
                alias = self._aliased(tensor)
                maker = self._maker(tensor)
                if alias is not None:
                    found.add(alias)
                elif maker is not None:
                    found |= self._anchors(maker)
            self.anchors[i] = frozenset(found)
        return self.anchors[i]

    def _reach(self, tensor: str) -> Mapping[str, int]:
        """Layers where the seed of a kernel reading ``tensor`` may be, with their distance: the
        readers of an original tensor (0), else the layers downstream of the seed of the kernel
        that computes it (or of what that kernel reads, if it has no seed)."""
        alias = self._aliased(tensor)
        if alias is not None:
            return self._readers(alias)
        maker = self._maker(tensor)
        if maker is None:
            return {}
        if maker not in self.reaches:
            seed = self.seeds.get(maker)
            self.reaches[maker] = (nx.single_source_shortest_path_length(self.dag, seed) if seed
                                   else _closest(self._reach(t) for t in self.nodes[maker].input if t))
        return self.reaches[maker]

    def _readers(self, tensor: str) -> dict[str, int]:
        """The layers reading an original tensor (distance 0) and, through the QuantizeLinear and
        DequantizeLinear layers among them, the layers those feed (one further each): the seed of a
        quantized kernel reads the DequantizeLinear of the 8-bit tensor the kernel reads."""
        out: dict[str, int] = {}
        frontier = [(name, 0) for name in self.readers.get(tensor, ())]
        while frontier:
            name, distance = frontier.pop(0)
            if name in out:
                continue
            out[name] = distance
            if self.dag.nodes[name]["layer"].op_type in _QDQ_OPS:
                frontier += [(s, distance + 1) for s in self.dag.successors(name)]
        return out

    def _bound(self, i: int) -> set[str] | None:
        """Layers upstream of the anchored outputs of kernel ``i`` or of its successors."""
        for kernels in ([i], self._successors(i)):
            ends = {self.producer[a] for k in kernels for o in self.nodes[k].output
                    if (a := self._aliased(o)) is not None and a in self.producer}
            if ends:
                return ends.union(*(nx.ancestors(self.dag, e) for e in ends))
        return None

    def _seed(self, i: int) -> str | None:
        """The layer a kernel that touches renamed tensors is matched by: of its op type, closest
        to its first activation input, then to any input, then earliest."""
        node = self.nodes[i]
        reaches = [self._reach(t) for t in node.input if t and t not in self.init_dims
                   and not self.graph.is_constant(t)]
        if not reaches:
            return None
        first, closest = reaches[0], _closest(reaches)
        bound = self._bound(i)
        hint = self._hint(node)
        hinted = nx.ancestors(self.dag, hint) | {hint} if hint is not None else set()
        for op_type in _seed_types(node):
            candidates = [name for name in closest
                          if name not in self.group_of
                          and (bound is None or name in bound)
                          and self._compatible(node, self.dag.nodes[name]["layer"], op_type)]
            if candidates:
                return min(candidates, key=lambda n: (
                    n not in hinted, first.get(n, len(self.index)), closest[n], self.index[n]))
        return None

    def _hint(self, node: onnx.NodeProto) -> str | None:
        """The layer a kernel's name points to, if any: onnxruntime names an NCHWc kernel after the
        tensor it replaces (``<tensor>_nchwc``) and a fused one after its first node
        (``<node>/MatMulAddFusion``). Only a tie-breaker between equally good seeds."""
        base = re.sub(r"/[^/]*Fusion.*$", "", kernel_origin(node.name))
        base = re.sub(r"_nchwc$", "", base)
        if base in self.dag:
            return base
        return self.producer.get(base)

    def _compatible(self, node: onnx.NodeProto, layer: LayerNode, op_type: str) -> bool:
        if layer.op_type != op_type:
            return False
        mine = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        theirs = {a.name: onnx.helper.get_attribute_value(a) for a in layer.proto.attribute}
        if op_type == _seed_types(node)[0] and any(
                mine[k] != theirs[k] for k in mine.keys() & theirs.keys() if k not in _ADDED_ATTRIBUTES):
            return False
        weight = _WEIGHT_POSITION.get(node.op_type, 1)
        if op_type == "Conv" and len(node.input) > weight and len(layer.inputs) > 1:
            dims = self.init_dims.get(node.input[weight])
            if dims is not None and layer.inputs[1] in self.graph.constants:
                return _padded_equal(dims, self.graph.spec(layer.inputs[1]).shape)
        return True

    def _between(self, anchors: Iterable[str], outputs: Iterable[str]) -> set[str]:
        """Unassigned layers upstream of ``outputs`` and not upstream of ``anchors``."""
        free = nx.subgraph_view(self.dag, filter_node=lambda n: n not in self.group_of)
        ends = {self.producer[o] for o in outputs if o in self.producer} - self.group_of.keys()
        inside = ends.union(*(nx.ancestors(free, e) for e in ends))
        starts = {self.producer[a] for a in anchors if a in self.producer} - self.group_of.keys()
        return inside - starts.union(*(nx.ancestors(free, s) for s in starts))

    def _assign(self, layers: Iterable[str], group: int) -> None:
        for name in layers:
            self.group_of[name] = group
            self.groups[group].append(name)

    def _new_group(self, kernel: int | None, rank: int) -> int:
        self.groups.append([])
        self.group_kernels.append([] if kernel is None else [kernel])
        self.group_rank.append(rank)
        return len(self.groups) - 1

    # -- the whole graph ----------------------------------------------------------------------

    def plan(self, opt_level: str) -> FusionPlan:
        """Map every kernel in the optimized graph's topological order, then fold, split, report."""
        order = list(nx.lexicographical_topological_sort(self.kdag, key=lambda i: i))
        rank = {k: r for r, k in enumerate(order)}
        helpers: list[int] = []
        for i in order:
            if i in self.reorders or self._is_constant_kernel(self.nodes[i]):
                continue
            layers = self._absorbed(i)
            if layers:
                self._assign(sorted(layers, key=self.index.__getitem__), self._new_group(i, rank[i]))
            else:
                helpers.append(i)
        self._fold_leftovers(len(order))
        self._split_cycles()
        self._attach_helpers(helpers, rank)
        return self._result(opt_level)

    def _absorbed(self, i: int) -> set[str]:
        """The layers kernel ``i`` absorbed: its seed if it touches a renamed tensor, else those
        between its anchored inputs and outputs; none for a view helper without a seed."""
        node = self.nodes[i]
        anchors = self._anchors(i)  # in kernel order, so that the recursion stays shallow
        renamed = any(t and self._aliased(t) is None and not self.graph.is_constant(t)
                      and t not in self.init_dims for t in (*node.input, *node.output))
        seed = self.seeds[i] = self._seed(i) if renamed else None
        if seed is not None:
            return {seed} | self._qdq_unit(i, seed)
        if renamed and node.op_type in _VIEW_OPS and not node.domain:
            return set()
        return self._between(anchors, [a for o in node.output if (a := self._aliased(o)) is not None])

    def _qdq_unit(self, i: int, seed: str) -> set[str]:
        """The DequantizeLinear layers feeding ``seed`` and QuantizeLinear layers reading it that
        kernel ``i`` runs with it: onnxruntime's QDQ transformers fold them into a quantized kernel
        (DequantizeLinear -> Conv -> QuantizeLinear into QLinearConv) or drop them around an op
        that runs on the 8-bit values directly (its DropQDQNodesRules: MaxPool, Resize, Reshape,
        Transpose, Gather, Slice...).
        A DequantizeLinear is taken if no kernel claimed it before (its own kernel would come
        first), a QuantizeLinear if no kernel reading kernel ``i``'s outputs is a QuantizeLinear."""
        feeding = {p for p in self.dag.predecessors(seed)
                   if self.dag.nodes[p]["layer"].op_type == "DequantizeLinear"}
        quantized = self.nodes[i].op_type in _QDQ_KERNELS or not any(
            self.nodes[k].op_type == "QuantizeLinear" for k in self._successors(i))
        reading = {s for s in self.dag.successors(seed)
                   if quantized and self.dag.nodes[s]["layer"].op_type == "QuantizeLinear"}
        return (feeding | reading) - self.group_of.keys()

    def _fold_leftovers(self, last_rank: int) -> None:
        """Layers no kernel claimed join their latest producer's group, else their first
        consumer's, else a group of their own."""
        for layer in self.graph.layers:
            if layer.name in self.group_of:
                continue
            owners = {self.group_of[p] for p in self.dag.predecessors(layer.name) if p in self.group_of}
            if owners:
                self._assign([layer.name], max(owners, key=self.group_rank.__getitem__))
        for layer in reversed(self.graph.layers):
            if layer.name in self.group_of:
                continue
            owners = {self.group_of[s] for s in self.dag.successors(layer.name) if s in self.group_of}
            group = (min(owners, key=self.group_rank.__getitem__) if owners
                     else self._new_group(None, last_rank))
            self._assign([layer.name], group)

    def _quotient(self) -> nx.DiGraph:
        q = nx.DiGraph()
        q.add_nodes_from(g for g, members in enumerate(self.groups) if members)
        q.add_edges_from((self.group_of[u], self.group_of[v]) for u, v in self.dag.edges
                         if self.group_of[u] != self.group_of[v])
        return q

    def _split_cycles(self) -> None:
        """Split the groups on a cycle of the group DAG into single layers until none is left."""
        while not nx.is_directed_acyclic_graph(q := self._quotient()):
            for component in nx.strongly_connected_components(q):
                if len(component) < 2:
                    continue
                for g in component:
                    members, self.groups[g] = self.groups[g], self.groups[g][:1]
                    for name in members[1:]:
                        self._assign([name], self._new_group(None, self.group_rank[g]))
                        self.group_kernels[-1] = list(self.group_kernels[g])

    def _attach_helpers(self, helpers: Sequence[int], rank: Mapping[int, int]) -> None:
        """Report a kernel that absorbed no layer with the group of the nearest kernel it feeds."""
        owner = {k: g for g, ks in enumerate(self.group_kernels) for k in ks}
        for i in sorted(helpers, key=rank.__getitem__, reverse=True):
            near = [owner[k] for k in sorted(nx.descendants(self.kdag, i), key=rank.__getitem__)
                    if k in owner]
            if not near:
                near = [owner[k] for k in sorted(nx.ancestors(self.kdag, i), key=rank.__getitem__,
                                                 reverse=True) if k in owner]
            if near:
                self.group_kernels[near[0]].append(i)
                owner[i] = near[0]

    def _result(self, opt_level: str) -> FusionPlan:
        q = self._quotient()
        first = {g: min(self.index[n] for n in self.groups[g]) for g in q}
        ordered = list(nx.lexicographical_topological_sort(q, key=first.__getitem__))
        groups = tuple(tuple(sorted(self.groups[g], key=self.index.__getitem__)) for g in ordered)
        kernels = tuple("+".join(_kernel_label(self.nodes[k]) for k in sorted(self.group_kernels[g]))
                        for g in ordered)
        tensors = tuple(self._aliased(self.nodes[i].input[0]) or "" for i in self.reorder)
        channels_last = tuple(any((self.nodes[k].domain, self.nodes[k].op_type) in CHANNELS_LAST_KERNELS
                                  for k in self.group_kernels[g]) for g in ordered)
        return FusionPlan(opt_level=opt_level, groups=groups, kernels=kernels,
                          reorders=len(self.reorder), reorder_tensors=tensors, channels_last=channels_last)
