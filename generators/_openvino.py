"""The OpenVINO backend: its CPU plugin, one inference request per compiled model, bound once.

It runs ONNX models (bricks and whole models): OpenVINO's ONNX frontend reads the model from its
bytes, the CPU plugin compiles it under the configuration's properties (threads, streams,
performance hint, inference precision...), inputs are drawn as the onnxruntime backend draws them
and bound, with preallocated outputs, to an ``InferRequest`` once; a run is one synchronous
``InferRequest.infer()``. A brick is measured in the state it meets inside its model, as on
onnxruntime: several compiled copies with weights of their own run round-robin
(``cache="cold-weights"``), the brick before it run untimed before each timed run.

openvino is imported lazily, inside functions: importing dlbricks does not need it, and a missing
install is one line that says which extra to install.
"""

from __future__ import annotations

import functools
import hashlib
import io
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import onnx
from onnx import compose, helper, numpy_helper

from dlbricks import InvalidArgumentError
from dlbricks.bricks import split_previous
from dlbricks.errors import BackendUnavailableError, UnrunnableBrickError
from dlbricks.ov_fusion import (
    OPENVINO,
    REORDER_TYPE,
    RuntimeKernel,
    kernel_layers,
    runtime_kernels,
)

from ._config import ConfigBase
from ._ort_config import CACHE_STATES, COLD_SPANS
from .inputs import input_specs, random_inputs, value_statistics
from .items import floor_model, vector_warmup_model
from .ort import _is_brick, session_copies, weight_bytes
from .util import closed, prepare_previous, round_robin

__all__ = ["OpenvinoBackend", "OpenvinoConfig", "OpenvinoPrepared", "installed_openvino_version"]

#: What to run to get the backend.
INSTALL_HINT = "pip install 'dlbricks[openvino]'"
DEVICES = ("cpu",)
PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRECISIONS = ("f32", "bf16", "f16")
EXECUTION_MODES = ("PERFORMANCE", "ACCURACY")
#: Version of how bricks are measured, part of every :attr:`OpenvinoConfig.config_id` (as
#: :attr:`dlbricks.generators.OrtConfig.measurement_method` for onnxruntime). 3: a brick's runs in
#: rounds are taken at the whole model's speed in each round; 4: chained rounds
#: (:meth:`OpenvinoBackend.prepare_chain`) on a CPU, and a pooling or Concat brick's overhead taken
#: against the layout a convolution hands over (:func:`in_context_s`); 5: a brick's kernels in
#: context include the kernels the ONNX frontend made for its layers and its Transpose layers'
#: (:func:`pair_sides`); 6: a brick's figure from rounds is its mean over the rounds whose bricks' sum is
#: central (:meth:`~dlbricks.generators.rounds.Rounds.central_weights`).
MEASUREMENT_METHOD = 6
#: The op type of a kernel that the CPU plugin inserts to change a tensor's layout (no node of the
#: model runs in it), as :meth:`OpenvinoBackend.profile_kernels` reports it.
REORDER = REORDER_TYPE
#: How a brick takes its tensors (:func:`brick_channels_last`): as its ONNX model says (NCHW), with
#: NHWC outputs, or with NHWC inputs and outputs.
PLAIN, NHWC_OUTPUTS, NHWC_EDGES = "", "outputs", "edges"


def installed_openvino_version() -> str:
    """The version of the installed openvino package, read without importing it."""
    try:
        return metadata.version("openvino")
    except metadata.PackageNotFoundError:
        raise BackendUnavailableError(f"openvino is not installed; install the extra: {INSTALL_HINT}") from None


def _ov() -> ModuleType:
    """Import openvino, or say how to get it."""
    try:
        import openvino
    except ImportError as e:
        raise BackendUnavailableError(f"openvino cannot be imported ({e}); install the extra: {INSTALL_HINT}") from e
    return openvino


@functools.cache
def _core() -> Any:
    """This process's one ``openvino.Core`` (it loads the plugins once)."""
    return _ov().Core()


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenvinoConfig(ConfigBase):
    """A configuration of the OpenVINO backend (its CPU plugin).

    Parameters
    ----------
    device : {"cpu"}, default "cpu"
    threads : int, default 1
        Threads one inference computes with (``INFERENCE_NUM_THREADS``); 0 lets OpenVINO choose.
    streams : int, default 1
        Inference streams (``NUM_STREAMS``): one request runs in one stream.
    performance_hint : {"LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"}, default "LATENCY"
        ``PERFORMANCE_HINT``; the explicit threads and streams take precedence over what it implies.
    inference_precision : {"f32", "bf16", "f16"}, default "f32"
        ``INFERENCE_PRECISION_HINT``. The CPU plugin's own default is bf16 on CPUs with bf16
        instructions, which would time another computation than the model's float32 one.
    execution_mode : {"PERFORMANCE", "ACCURACY"}, default "PERFORMANCE"
        ``EXECUTION_MODE_HINT``.
    cpu_pinning : bool, default False
        ``ENABLE_CPU_PINNING``: off, the inference threads run where the operating system puts
        them, as onnxruntime's do.
    denormals_optimization : bool, default False
        ``CPU_DENORMALS_OPTIMIZATION`` (flush denormals to zero).
    cache : {"cold-weights", "cold", "warm"}, default "cold-weights"
        Cache state a *brick* meets, as :attr:`~dlbricks.generators.OrtConfig.cache`: compiled
        copies of the brick, each with its own weights, sharing one input and (``"cold-weights"``)
        one output, run round-robin; ``"warm"``: one compiled model again and again. Whole models
        always run one compiled model.
    cold_span : {"model", "cache"}, default "model"
        How much data the cold copies cycle through, as :attr:`~dlbricks.generators.OrtConfig.cold_span`.
    previous_layer : bool, default True
        With a cold ``cache``, run the brick before it in its model (carried by a
        :class:`~dlbricks.bricks.BrickInContext`) untimed before each timed run, writing the brick's first
        input.
    openvino_version : str, default the installed version
        Part of the configuration: results of another version are another configuration.

    Examples
    --------
    >>> cfg = OpenvinoConfig(openvino_version="2024.6.0")
    >>> cfg.properties()["INFERENCE_NUM_THREADS"]
    1
    >>> len(cfg.config_id)
    16
    """

    backend: ClassVar[str] = "openvino"
    measurement_method: ClassVar[int] = MEASUREMENT_METHOD

    device: str = "cpu"
    threads: int = 1
    streams: int = 1
    performance_hint: str = "LATENCY"
    inference_precision: str = "f32"
    execution_mode: str = "PERFORMANCE"
    cpu_pinning: bool = False
    denormals_optimization: bool = False
    cache: str = "cold-weights"
    cold_span: str = "model"
    previous_layer: bool = True
    openvino_version: str = field(default_factory=installed_openvino_version)

    def __post_init__(self) -> None:
        problems = _config_problems(self)
        if problems:
            raise InvalidArgumentError("Invalid OpenvinoConfig: " + "; ".join(problems) + ".")

    @property
    def device_id(self) -> int:
        """The device ordinal: 0 (the CPU plugin has one device)."""
        return 0

    def properties(self) -> dict[str, Any]:
        """The CPU plugin's properties for ``Core.compile_model``, by their OpenVINO keys."""
        props: dict[str, Any] = {
            "NUM_STREAMS": self.streams,
            "PERFORMANCE_HINT": self.performance_hint,
            "INFERENCE_PRECISION_HINT": self.inference_precision,
            "EXECUTION_MODE_HINT": self.execution_mode,
            "ENABLE_CPU_PINNING": self.cpu_pinning,
            "CPU_DENORMALS_OPTIMIZATION": self.denormals_optimization,
        }
        if self.threads:
            props["INFERENCE_NUM_THREADS"] = self.threads
        return props


def _config_problems(cfg: OpenvinoConfig) -> list[str]:
    """Every rule that ``cfg`` breaks, as phrases naming the field and value."""
    problems = []
    choices = {"device": DEVICES, "performance_hint": PERFORMANCE_HINTS, "inference_precision": PRECISIONS,
               "execution_mode": EXECUTION_MODES, "cache": CACHE_STATES, "cold_span": COLD_SPANS}
    for name, allowed in choices.items():
        value = getattr(cfg, name)
        if value not in allowed:
            options = ", ".join(repr(a) for a in allowed)
            problems.append(f"'{name}' must be one of {options}. Got {value!r} instead")
    for name, low in (("threads", 0), ("streams", 1)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            problems.append(f"'{name}' must be an int >= {low}. Got {value!r} instead")
    for name in ("cpu_pinning", "denormals_optimization", "previous_layer"):
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"'{name}' must be a bool. Got {getattr(cfg, name)!r} instead")
    if not isinstance(cfg.openvino_version, str) or not cfg.openvino_version:
        problems.append(f"'openvino_version' must be a non-empty str. Got {cfg.openvino_version!r} instead")
    return problems


class OpenvinoPrepared:
    """Compiled copies of a model, each with one inference request bound once, run round-robin.

    Attributes
    ----------
    requests : list of openvino.InferRequest
        One per compiled copy (1 for a whole model or ``cache="warm"``).
    copies : int
    run : callable
        One synchronous inference of the next copy.
    previous : OpenvinoPrepared or None
        The brick before this one in its model, prepared warm; its run is ``prime``, which the
        harness calls untimed before each timed run.
    empty : callable, optional
        The floor's one-node model, prepared beside a brick; the harness times it after each sample.
    nbytes : int
        Bytes its copies and buffers hold (weights and outputs of every copy, inputs, the brick
        before): what a worker's cache of prepared items counts.
    """

    def __init__(self, requests: list[Any], held: list[Any], previous: OpenvinoPrepared | None = None,
                 empty: OpenvinoPrepared | None = None, nbytes: int = 0) -> None:
        self.requests = requests
        self.copies = len(requests)
        self._held = held  # the compiled models and the bound tensors
        self.previous = previous
        self.empty_model = empty
        self.nbytes = nbytes + int(getattr(previous, "nbytes", 0))
        self.run: Any = round_robin([r.infer for r in requests])
        if previous is not None:
            self.prime: Any = previous.run
        if empty is not None:
            self.empty: Any = empty.run

    def outputs(self) -> list[np.ndarray]:
        """The first copy's outputs of its last run, copied."""
        return [np.array(t.data, copy=True) for t in self.requests[0].output_tensors]

    def close(self) -> None:
        """Release the requests, the compiled models and their buffers."""
        self.requests = []
        self._held = []
        self.run = closed
        if self.previous is not None:
            self.previous.close()
            self.previous = None
            self.prime = closed
        if self.empty_model is not None:
            self.empty_model.close()
            self.empty_model = None
            self.empty = closed


class OpenvinoBackend:
    """The OpenVINO backend (CPU plugin).

    Examples
    --------
    >>> OpenvinoBackend().name
    'openvino'
    """

    name = "openvino"
    #: The model formats it runs (ONNX, through OpenVINO's ONNX frontend).
    model_formats = frozenset({"onnx"})
    #: Whose executed kernels its fused bricks are: ``decompose(graph, "fused", runtime=...)`` groups
    #: the layers as its CPU plugin runs them (granularity ``"fused:openvino"``).
    fusion_runtime = OPENVINO

    def default_config(self) -> OpenvinoConfig:
        """``OpenvinoConfig()``: CPU, one thread, one stream, latency hint, f32, cold bricks."""
        return OpenvinoConfig()

    def config_from_dict(self, data: Mapping[str, Any]) -> OpenvinoConfig:
        """Rebuild an :class:`OpenvinoConfig` from its dict."""
        return OpenvinoConfig.from_dict(data)

    def config_from_options(self, *, threads: int | None = None, opt_level: str | None = None,
                            device: str | None = None) -> OpenvinoConfig:
        """The configuration of a command's ``--threads`` and ``--device`` (None: the default).

        Raises
        ------
        InvalidArgumentError
            For an ``opt_level`` (OpenVINO applies its own graph transformations, always) or a
            device other than the CPU.
        """
        if opt_level is not None:
            raise InvalidArgumentError(f"the openvino backend has no optimization levels (it compiles every model "
                                       f"with its own transformations); leave out --opt-level {opt_level}.")
        if device not in (None, "cpu"):
            raise InvalidArgumentError(f"the openvino backend runs on the CPU plugin only; leave out --device "
                                       f"{device} or give --device cpu.")
        return OpenvinoConfig() if threads is None else OpenvinoConfig(threads=threads)

    def check(self, config: Any) -> None:
        """Raise if ``config`` is not an :class:`OpenvinoConfig` that the installed openvino can run."""
        if not isinstance(config, OpenvinoConfig):
            raise InvalidArgumentError(
                f"The openvino backend needs an OpenvinoConfig. Got {type(config).__name__} instead.")
        installed = installed_openvino_version()
        if config.openvino_version != installed:
            raise BackendUnavailableError(
                f"The OpenvinoConfig is for openvino {config.openvino_version} but {installed} is installed; "
                "rebuild the config to measure here.")
        devices = _core().available_devices
        if "CPU" not in devices:
            raise BackendUnavailableError(f"openvino has no CPU plugin here (devices: {devices}); reinstall "
                                          f"it: {INSTALL_HINT}")

    def worker_env(self, config: Any) -> dict[str, str]:
        """Nothing: every setting is a property of the compiled model."""
        return {}

    def describe(self, config: Any) -> dict[str, Any]:
        """Runtime version, the CPU it compiles for and the configuration."""
        ov = _ov()
        return {
            "backend": self.name,
            "version": ov.get_version(),
            "device": _core().get_property("CPU", "FULL_DEVICE_NAME"),
            "config": config.to_dict(),
            "config_id": config.config_id,
        }

    def prepare(self, model: onnx.ModelProto, config: Any, *, timed: bool = True) -> OpenvinoPrepared:
        """Read the model from its bytes, compile it, draw its inputs, bind them and preallocated
        outputs to one inference request per compiled copy, run once; beside a brick that will be
        ``timed``, the floor's one-node model too (``empty``). The brick before a brick is prepared
        untimed: it only runs before each timed run.

        Raises
        ------
        UnrunnableBrickError
            If OpenVINO cannot read, compile or run the model.
        """
        self.check(config)
        ov = _ov()
        model, before = split_previous(model)
        data = model.SerializeToString()
        nhwc = (brick_channels_last(ov, data, config.properties(), model.graph.name, reads_layer=before is not None)
                if _is_brick(model) else PLAIN)
        compiled = _compile(ov, data, config.properties(), model.graph.name, channels_last=nhwc)
        request = compiled.create_infer_request()
        inputs = _channels_last_inputs(_drawn_inputs(model), nhwc)
        tensors = {name: ov.Tensor(array, shared_memory=True) for name, array in inputs.items()}
        outputs = _bind(ov, request, compiled, tensors, name=model.graph.name)
        _infer(request, model.graph.name)
        first = [np.asarray(t.data) for t in request.output_tensors]
        requests, held = [request], [compiled, inputs, tensors, outputs]
        internal = _internal_bytes(compiled, layouts=nhwc == PLAIN)
        copies = session_copies(model, first + [internal], config) if _is_brick(model) else 1
        for _ in range(copies - 1):
            copy = _compile(ov, data, config.properties(), model.graph.name, channels_last=nhwc)
            copy_request = copy.create_infer_request()
            shared = outputs if config.cache == "cold-weights" else None
            copy_outputs = _bind(ov, copy_request, copy, tensors, shared, name=model.graph.name)
            requests.append(copy_request)
            held += [copy, copy_outputs]
        previous = None
        if config.cache in ("cold", "cold-weights") and config.previous_layer and _is_brick(model):
            previous = prepare_previous(functools.partial(self.prepare, timed=False), before, config)
            _feed_from(previous, model, tensors)
        empty = self.prepare(floor_model(), config) if timed and _is_brick(model) else None
        nbytes = (copies * (weight_bytes(model) + sum(a.nbytes for a in first))
                  + sum(a.nbytes for a in inputs.values()))
        return OpenvinoPrepared(requests, held, previous, empty, nbytes)

    def prepare_chain(self, models: Sequence[onnx.ModelProto], config: Any,
                      feeds: Sequence[Sequence[tuple[int, int] | None]] | None = None) -> list[OpenvinoPrepared | None]:
        """The bricks of one model, in its order, prepared as a chain for rounds of single calls
        (``RoundsBudget(chained=True)``); None for a brick the CPU plugin cannot compile.

        Each brick is prepared warm (one compiled model, no copies, no brick run before it) with the
        floor's one-node model beside it, and its untimed ``ready`` runs a small matrix product just
        before its timed call, as onnxruntime's chain does. Each floating-point input that a brick
        earlier in the chain writes in the model (``feeds``: per brick, per input, the position of
        the brick that writes it and that brick's output, :meth:`~dlbricks.Decomposition.feeds`) is
        bound to that output's tensor, so that a round writes each input before its reader reads it,
        as the model does (:func:`_read_from`); an input whose values the model's run kept (a
        non-maximum suppression's boxes) keeps its own. Unlike onnxruntime's chain, each output keeps
        its own buffer: the tensors are not laid out by their lifetimes in one block.
        """
        self.check(config)
        warm = replace(config, cache="warm")
        chain: list[OpenvinoPrepared | None] = []
        for model in models:
            try:
                chain.append(self.prepare(model, warm))
            except UnrunnableBrickError:
                chain.append(None)
        warmup = self.prepare(vector_warmup_model(), warm, timed=False)
        for j, (model, prepared) in enumerate(zip(models, chain, strict=True)):
            if prepared is None:
                continue
            prepared.ready = warmup.run
            prepared._held.append(warmup)
            row = feeds[j] if feeds is not None and j < len(feeds) else ()
            brick, _ = split_previous(model)
            names = [name for name, _, _ in input_specs(brick)]
            kept = {name for name, stats in value_statistics(brick).items() if stats.values is not None}
            for name, feed in zip(names, row, strict=False):
                writer = chain[feed[0]] if feed is not None and 0 <= feed[0] < j else None
                if writer is not None and name not in kept:
                    _read_from(prepared, name, writer, feed[1])
        return chain

    def brick_overhead_s(self, item: Any, config: Any, run_s: float) -> float | None:
        """Seconds of a brick's own run that its model does not run, as their share of the brick's
        profiled run (:func:`brick_overhead_share`, read from the CPU plugin's profiling counters
        once per brick, context and process) times ``run_s``, the brick's timed median less the
        floor: the layout reorders the plugin adds at the brick's edges, and all of a layer brick
        that the plugin fuses into the kernel of the layer before it. None for an item that is no
        brick."""
        brick = getattr(item, "brick", item)
        if not hasattr(brick, "to_bytes") or not hasattr(brick, "signature"):
            return None
        previous = getattr(item, "previous", None)
        share = brick_overhead_share(brick, previous, config)
        return share * max(run_s, 0.0)

    def check_brick(self, brick: Any) -> str | None:
        """None if OpenVINO's CPU plugin compiles ``brick`` (its ``to_onnx()`` model), else the reason
        (one line): what ``decompose --check`` asks of the backend the bricks run in."""
        model = brick.to_onnx()
        try:
            _compile(_ov(), model.SerializeToString(), self.default_config().properties(), model.graph.name)
        except UnrunnableBrickError as e:
            return str(e)
        return None

    def profile_kernels(self, model: onnx.ModelProto, config: Any, feeds: Mapping[str, np.ndarray], *,
                        runs: int = 30, warmup: int = 5) -> list[tuple[str, str, tuple[str, ...], float]]:
        """Each kernel that a run of ``model`` executes under ``config``, from the CPU plugin's
        profiling counters (``PERF_COUNT``): ``(kernel, op type, nodes, seconds)``, its median time
        over ``runs`` runs after ``warmup``, with the nodes of ``model`` it runs, by name, in the
        model's order (:func:`_original_nodes`); a layout reorder that the plugin inserted has op type
        :data:`REORDER` and no node, and so has a kernel whose originals name no node of ``model``.

        Raises
        ------
        UnrunnableBrickError
            If OpenVINO cannot read, compile or run the model.
        """
        self.check(config)
        ov = _ov()
        compiled = _compile(ov, model.SerializeToString(), {**config.properties(), "PERF_COUNT": True},
                            model.graph.name)
        request = compiled.create_infer_request()
        tensors = {name: ov.Tensor(np.ascontiguousarray(array), shared_memory=True) for name, array in feeds.items()}
        outputs = _bind(ov, request, compiled, tensors, name=model.graph.name)
        times: dict[str, list[float]] = {}
        kinds: dict[str, str] = {}
        for i in range(warmup + runs):
            _infer(request, model.graph.name)
            if i < warmup:
                continue
            for info in request.get_profiling_info():
                if info.status == info.Status.EXECUTED:
                    times.setdefault(info.node_name, []).append(info.real_time.total_seconds())
                    kinds[info.node_name] = info.node_type
        del outputs
        nodes = _original_nodes(compiled, model)
        return [(kernel, kinds[kernel], nodes.get(kernel, ()), statistics.median(values))
                for kernel, values in times.items()]


#: Most profiled runs that split a brick's run into kernels; fewer for slow bricks, so that they last
#: about :data:`PROFILE_TIME_S`.
PROFILE_RUNS = 40
PROFILE_TIME_S = 0.05
_PROFILE_WARMUP = 3


def brick_overhead_share(brick: Any, previous: Any, config: OpenvinoConfig) -> float:
    """The share of a brick's own run (its profiled kernels' medians) that its model does not run.

    Where a layer before writes the brick's first input (``previous``), the two are compiled as one
    model (``previous``'s output feeding the brick, :func:`in_context_s`) and the brick's share is
    what its kernels take there (the kernels that run only its layers, layout reorders left out) over
    what its own run's kernels take: a Relu that the plugin fuses into the Convolution before it has
    no kernel of its own there (share 1); a Convolution brick that converts its input and output from
    and to NCHW does not convert them there; a MaxPool gets the channels-last tensor, and kernel,
    that the Convolution before it hands over. At least 0: a brick faster alone keeps its time.

    Without ``previous`` (a brick that reads a model input), or where the two cannot be compiled
    together: the layout reorders that the plugin inserts before its outputs (a model input's reorder
    is the model's too).

    Parameters
    ----------
    brick : dlbricks.Brick
    previous : dlbricks.Brick or None
        The brick that writes ``brick``'s first input in its model.
    config : OpenvinoConfig
    """
    granularity = getattr(brick, "granularity", "layer")
    key = (brick.signature, None if previous is None else previous.signature, granularity, config.config_id)
    if key not in _SHARES:
        _SHARES[key] = _overhead_share(brick, previous, granularity, config)
    return _SHARES[key]


#: :func:`brick_overhead_share` of each brick, context and configuration, in this process.
_SHARES: dict[tuple[str, str | None, str, str], float] = {}


def _overhead_share(brick: Any, before: Any, granularity: str, config: OpenvinoConfig) -> float:
    model = brick.to_onnx()
    data = model.SerializeToString()
    nhwc = brick_channels_last(_ov(), data, config.properties(), model.graph.name, reads_layer=before is not None)
    times, ran = _kernel_medians(model, config, channels_last=nhwc)
    total = sum(times.values())
    in_context = None if before is None else in_context_s(brick, before, config)
    if in_context is not None:  # an in-place Concat alone runs no kernel, only the copies of its run
        own = max(total, _run_s(model, config, channels_last=nhwc))
        return min(1.0, max(0.0, 1.0 - in_context / own)) if own > 0.0 else 0.0
    if total <= 0.0:
        return 0.0
    kernels = {k.name: k for k in ran}
    layers = _layer_names(model)
    edges = sum(t for name, t in times.items() if name in kernels and _inserted(kernels[name], layers)
                and _edge_reorder(kernels[name], kernels, reads_layer=before is not None))
    return min(1.0, edges / total)


def _edge_reorder(kernel: RuntimeKernel, kernels: Mapping[str, RuntimeKernel], *, reads_layer: bool) -> bool:
    """Whether ``kernel`` is a layout reorder at the brick's edge that its model does not run: one
    that reads a brick input (``Input``) where a layer writes that input in the model
    (``reads_layer``), or one whose output goes only to brick outputs (``Output``)."""
    if kernel.layer_type not in _LAYOUT_OPS:
        return False
    sources = [kernels[i].layer_type for i in kernel.inputs if i in kernels]
    if sources and all(t == "Input" for t in sources):
        return reads_layer
    readers = [k.layer_type for k in kernels.values() if kernel.name in k.inputs]
    return bool(readers) and all(t == "Output" for t in readers)


def _kernel_medians(model: onnx.ModelProto, config: OpenvinoConfig, *,
                    channels_last: str = PLAIN) -> tuple[dict[str, float], tuple[RuntimeKernel, ...]]:
    """Each executed kernel of ``model`` compiled under ``config`` (with NHWC edges where
    ``channels_last``) with profiling on: its median ``real_time`` in seconds over up to
    :data:`PROFILE_RUNS` runs after a few warm-up runs; and the ops of that compiled model's runtime
    model (kernel names differ from one compilation to the next: the frontend numbers the ops it
    creates)."""
    compiled, request, outputs = _warm_request(model, config, channels_last=channels_last, profiled=True)
    start = time.perf_counter()
    _infer(request, model.graph.name)
    runs = int(min(PROFILE_RUNS, max(3, PROFILE_TIME_S / max(time.perf_counter() - start, 1e-9))))
    times: dict[str, list[float]] = {}
    for _ in range(runs):
        _infer(request, model.graph.name)
        for info in request.get_profiling_info():
            if info.status == info.Status.EXECUTED:
                times.setdefault(info.node_name, []).append(info.real_time.total_seconds())
    del outputs
    return {name: statistics.median(values) for name, values in times.items()}, runtime_kernels(compiled)


def _warm_request(model: onnx.ModelProto, config: OpenvinoConfig, *, channels_last: str,
                  profiled: bool) -> tuple[Any, Any, Any]:
    """``model`` compiled under ``config`` (with NHWC edges where ``channels_last``, with profiling
    where ``profiled``), an infer request bound to drawn inputs, run a few times: ``(compiled model,
    request, its bound outputs)``; the outputs must outlive the request's runs."""
    ov = _ov()
    properties = {**config.properties(), "PERF_COUNT": True} if profiled else config.properties()
    compiled = _compile(ov, model.SerializeToString(), properties, model.graph.name, channels_last=channels_last)
    request = compiled.create_infer_request()
    inputs = _channels_last_inputs(_drawn_inputs(model), channels_last)
    tensors = {name: ov.Tensor(array, shared_memory=True) for name, array in inputs.items()}
    outputs = _bind(ov, request, compiled, tensors, name=model.graph.name)
    for _ in range(_PROFILE_WARMUP):
        _infer(request, model.graph.name)
    return compiled, request, outputs


def _run_s(model: onnx.ModelProto, config: OpenvinoConfig, *, channels_last: str = PLAIN) -> float:
    """Seconds of one run of ``model`` compiled under ``config`` (without profiling) less one run of
    the floor's one-node model, each the median of a loop of runs as long as the profiled ones: what
    a brick's timed median less its floor holds. Beyond its kernels' ``real_time`` a brick's run moves
    its inputs and outputs between its own tensors and the plugin's memory, which its model does
    once, at its edges."""
    def median_run(one: onnx.ModelProto, nhwc: str) -> float:
        _, request, outputs = _warm_request(one, config, channels_last=nhwc, profiled=False)
        samples = []
        while len(samples) < PROFILE_RUNS and sum(samples) < PROFILE_TIME_S:
            start = time.perf_counter()
            _infer(request, one.graph.name)
            samples.append(time.perf_counter() - start)
        del outputs
        return statistics.median(samples)

    return max(0.0, median_run(model, channels_last) - median_run(floor_model(), PLAIN))


def in_context_s(brick: Any, previous: Any, config: OpenvinoConfig) -> float | None:
    """Seconds that ``brick``'s own kernels take when ``previous``'s output (the one of ``brick``'s
    first input's shape and dtype) feeds its first input in one compiled model: the profiled medians
    of the kernels that are the brick's there (:func:`pair_sides`; none where the plugin fused its
    layers into a kernel of ``previous``'s). A pooling or Concat brick after a ``previous`` with no
    convolution gets a convolution before the pair (:func:`_anchored`), so that it meets the layout
    it meets in a CNN. None where the two cannot be joined or compiled."""
    pair = _joined(previous.to_onnx(), brick.to_onnx())
    if pair is None:
        return None
    if set(brick.op_types) & LAYOUT_FOLLOWERS and not set(previous.op_types) & _CONVOLUTIONS:
        pair = _anchored(pair)
    try:
        times, kernels = _kernel_medians(pair, config)
    except UnrunnableBrickError:
        return None
    return sum(times.get(k, 0.0) for k, side in pair_sides(kernels, pair).items() if side == BRICK)


def _layer_names(model: onnx.ModelProto) -> set[str]:
    """The names of ``model``'s nodes and of their outputs: what a kernel's original layers name."""
    return {name for node in model.graph.node for name in (node.name, *node.output)}


def _inserted(kernel: RuntimeKernel, layers: set[str]) -> bool:
    """Whether ``kernel`` is a layout op that the plugin inserted: one that names none of ``layers``
    (:func:`_layer_names`), unlike a Transpose layer's kernel."""
    return kernel.layer_type in _LAYOUT_OPS and not any(o.split("/", 1)[0] in layers for o in kernel.originals)


#: :func:`pair_sides`: a kernel of the brick's layers only, of the brick's layers and the ones before
#: it (the plugin fused them), of the layers before it only, of the anchors (:func:`_anchored`).
BRICK, FUSED, BEFORE, ANCHOR = "brick", "fused", "before", "anchor"


def pair_sides(kernels: Sequence[RuntimeKernel], pair: onnx.ModelProto) -> dict[str, str]:
    """Each kernel of a joined pair's runtime model that runs layers, by name: whose layers it runs,
    :data:`BRICK` (the second model's, ``b_``, only), :data:`FUSED` (the brick's and those of the
    model before it, ``p_``), :data:`BEFORE` (the layers before only) or :data:`ANCHOR` (an anchor's,
    maybe with layers fused into it). The brick's kernels are:

    - a kernel whose layers (:func:`dlbricks.ov_fusion.kernel_layers`) are all the brick's; a layout
      op counts where it runs one of the pair's layers (a Transpose layer, which the plugin runs as a
      ``Transpose`` kernel), not where the plugin inserted it;
    - a kernel that computes from data but names no layer, because the ONNX frontend made its op (an
      LSTM becomes an ``LSTMSequence``, a LayerNormalization an ``MVN``): it is the brick's where
      what reads its output, followed through such kernels, reaches a kernel of the brick's layers or
      the pair's output, and no kernel of the layers before.
    """
    work = [k for k in kernels if k.layer_type not in ("Input", "Output", "Const")]
    layers = kernel_layers([k for k in work if k.layer_type not in _LAYOUT_OPS], pair)
    claimed = {n for nodes in layers.values() for n in nodes}
    named = {out: node.name for node in pair.graph.node for out in node.output}
    named.update({node.name: node.name for node in pair.graph.node})
    for k in work:
        if k.layer_type in _LAYOUT_OPS:
            layers[k.name] = tuple(dict.fromkeys(n for n in (named.get(o.split("/", 1)[0]) for o in k.originals)
                                                 if n is not None and n not in claimed))
    by_name = {k.name: k for k in kernels}
    readers: dict[str, list[RuntimeKernel]] = {}
    for k in kernels:
        for source in k.inputs:
            readers.setdefault(source, []).append(k)

    def computes(k: RuntimeKernel) -> bool:
        return k.layer_type not in _LAYOUT_OPS and any(
            by_name[i].layer_type != "Const" for i in k.inputs if i in by_name)

    def direct(k: RuntimeKernel) -> set[str]:
        """The pair's layers that ``k`` names itself (:func:`kernel_layers` adds the unclaimed layers
        before a kernel's first one, which the plugin may have fused into a kernel of no name)."""
        return {n for n in (named.get(o) or named.get(o.split("/", 1)[0]) for o in k.originals) if n is not None}

    def sides(k: RuntimeKernel) -> set[str]:
        """Whose layers the kernels that read ``k`` run (``b_``, or ``p_`` for any other), following
        readers that name no layer; the pair's outputs count as the model's whose they are."""
        found: set[str] = set()
        seen, todo = {k.name}, list(readers.get(k.name, ()))
        while todo:
            r = todo.pop()
            if r.name in seen:
                continue
            seen.add(r.name)
            nodes = direct(r)
            if r.layer_type == "Output":  # a model output's op takes the tensor's name (stubs: outputs no one reads)
                found.update(side for side in (_FIRST, _SECOND) if r.name.startswith(side))
            elif nodes:
                found.add(_SECOND if all(n.startswith(_SECOND) for n in nodes) else _FIRST)
            else:
                todo.extend(readers.get(r.name, ()))
        return found

    found = {}
    for k in work:
        nodes = layers.get(k.name, ())
        if nodes:
            ours = [n.startswith(_SECOND) for n in nodes]
            anchored = any(n.startswith(_ANCHOR) for n in nodes)
            found[k.name] = BRICK if all(ours) else ANCHOR if anchored else FUSED if any(ours) else BEFORE
        elif computes(k):
            found[k.name] = BRICK if sides(k) == {_SECOND} else BEFORE
    return found


_FIRST, _SECOND, _ANCHOR = "p_", "b_", "a_"
#: Op types whose CPU kernel takes the layout of the tensor it gets: planar after a model input or an
#: elementwise op, channels-last (or blocked) after a convolution, a different kernel at a different
#: speed (a MaxPool of squeezenet1_1 on an AVX-512 Xeon: 2.0 ms planar, 0.55-0.74 ms channels-last).
LAYOUT_FOLLOWERS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat"})
_CONVOLUTIONS = frozenset({"Conv", "ConvTranspose"})


def _anchored(pair: onnx.ModelProto) -> onnx.ModelProto:
    """``pair`` with a 1x1 identity Convolution (its nodes named ``a_``) writing each of its inputs
    that is a 4-D float tensor of static shape. Inside a CNN the tensors a pooling or a Concat reads
    come, through elementwise layers, from convolutions, whose layout the plugin keeps; a pair that
    starts at an elementwise layer would hand over planar tensors and time the planar kernel. The
    anchors' kernels, and the layers the plugin fuses into them, are not the brick's."""
    inits = {i.name for i in pair.graph.initializer}
    anchored = onnx.ModelProto()
    anchored.CopyFrom(pair)
    for k, graph_input in enumerate(i for i in anchored.graph.input if i.name not in inits):
        tensor = graph_input.type.tensor_type
        dims = tensor.shape.dim
        if tensor.elem_type != onnx.TensorProto.FLOAT or len(dims) != 4 or not all(d.HasField("dim_value") for d in dims):
            continue
        channels, name = dims[1].dim_value, graph_input.name
        graph_input.name = _ANCHOR + name
        weight = np.eye(channels, dtype=np.float32).reshape(channels, channels, 1, 1)
        anchored.graph.initializer.append(numpy_helper.from_array(weight, f"{_ANCHOR}weight{k}"))
        anchored.graph.node.insert(0, helper.make_node("Conv", [graph_input.name, f"{_ANCHOR}weight{k}"], [name],
                                                       name=f"{_ANCHOR}anchor{k}"))
    return anchored


def _joined(first: onnx.ModelProto, second: onnx.ModelProto) -> onnx.ModelProto | None:
    """One model running ``first`` then ``second``, the output of ``first`` that matches the
    shape and dtype of ``second``'s first input feeding it; node names are set (to their first
    output's name, prefixed ``p_`` and ``b_``). None where no output matches or they cannot be
    joined."""
    wanted = input_specs(second)
    if not wanted:
        return None
    _, shape, dtype = wanted[0]
    source = next((name for name, out_shape, out_dtype in _output_specs(first)
                   if tuple(out_shape) == tuple(shape) and out_dtype == dtype), None)
    if source is None:
        return None
    for model in (first, second):
        del model.metadata_props[:]
        for node in model.graph.node:
            node.name = node.name or (node.output[0] if node.output else node.op_type)
    try:
        joined = compose.merge_models(first, second, io_map=[(source, wanted[0][0])],
                                           prefix1=_FIRST, prefix2=_SECOND)
    except Exception:  # noqa: BLE001 - onnx.compose raises untyped errors; then nothing is fused
        return None
    return joined


def _output_specs(model: onnx.ModelProto) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """``(name, shape, dtype)`` of each output of ``model`` of a static shape."""
    out = []
    for vi in model.graph.output:
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
            out.append((vi.name, tuple(d.dim_value for d in dims), dtype))
    return out


def _compile(ov: ModuleType, data: bytes, properties: Mapping[str, Any], name: str, *,
             channels_last: str = PLAIN) -> Any:
    """``data`` (a serialized ONNX model) read by OpenVINO's ONNX frontend, with weights of its own,
    compiled for the CPU plugin under ``properties``; with ``channels_last`` :data:`NHWC_OUTPUTS` its
    4-D outputs, with :data:`NHWC_EDGES` its 4-D inputs and outputs are NHWC tensors
    (``PrePostProcessor`` layouts; the model's own layout stays NCHW)."""
    try:
        frontend = ov.frontend.FrontEndManager().load_by_framework("onnx")
        read = frontend.convert(frontend.load(io.BytesIO(data)))
        if channels_last != PLAIN:
            read = _nhwc_edges(ov, read, inputs=channels_last == NHWC_EDGES)
    except Exception as e:
        raise UnrunnableBrickError(f"openvino cannot read model {name!r}: {_ov_error(e)}") from e
    try:
        return _core().compile_model(read, "CPU", dict(properties))
    except Exception as e:
        raise UnrunnableBrickError(f"openvino cannot compile model {name!r}: {_ov_error(e)}") from e


def _nhwc_edges(ov: ModuleType, model: Any, *, inputs: bool) -> Any:
    """``model`` (an ``openvino.Model``) with each 4-D output, and input where ``inputs``, an NHWC
    tensor."""
    from openvino.preprocess import PrePostProcessor

    ppp = PrePostProcessor(model)
    for i, port in enumerate(model.inputs):
        if inputs and port.get_partial_shape().rank.get_length() == 4:
            ppp.input(i).tensor().set_layout(ov.Layout("NHWC"))
            ppp.input(i).model().set_layout(ov.Layout("NCHW"))
    for i, port in enumerate(model.outputs):
        if port.get_partial_shape().rank.get_length() == 4:
            ppp.output(i).model().set_layout(ov.Layout("NCHW"))
            ppp.output(i).tensor().set_layout(ov.Layout("NHWC"))
    return ppp.build()


#: ``layerType`` of the runtime ops that move a tensor into another layout.
_LAYOUT_OPS = frozenset({REORDER, "Transpose"})


def brick_channels_last(ov: ModuleType, data: bytes, properties: Mapping[str, Any], name: str, *,
                        reads_layer: bool = True) -> str:
    """How brick ``data`` takes its tensors (:func:`_compile`'s ``channels_last``): with NHWC outputs,
    and NHWC inputs where a layer writes its input in its model (``reads_layer``; a model's input is
    NCHW, and the model converts it too), where so compiled the CPU plugin spends less time in layout reorders
    and transposes than compiled plain (:data:`PLAIN`): its kernels then take the channels-last
    tensors they compute in as they find them inside the model (a convolution), and the brick converts
    nothing at its edges that its model does not.
    """
    key = (hashlib.sha256(data).hexdigest(), tuple(sorted(properties.items())), reads_layer)
    if key not in _CHANNELS_LAST:
        _CHANNELS_LAST[key] = _channels_last(ov, data, properties, name, NHWC_EDGES if reads_layer else NHWC_OUTPUTS)
    return _CHANNELS_LAST[key]


#: :func:`brick_channels_last` of each brick (by the digest of its bytes), properties and context.
_CHANNELS_LAST: dict[tuple[str, tuple[tuple[str, Any], ...], bool], str] = {}


def _channels_last(ov: ModuleType, data: bytes, properties: Mapping[str, Any], name: str, nhwc: str) -> str:
    model = onnx.load_from_string(data)
    specs = input_specs(model) + _output_specs(model)
    if not any(len(shape) == 4 and np.issubdtype(dtype, np.floating) for _, shape, dtype in specs):
        return PLAIN
    plain = _layout_kernels_run(ov, model, properties, PLAIN)
    if not plain:
        return PLAIN
    try:
        return nhwc if _layout_kernels_run(ov, model, properties, nhwc) < plain else PLAIN
    except UnrunnableBrickError:
        return PLAIN


def _layout_kernels_run(ov: ModuleType, model: onnx.ModelProto, properties: Mapping[str, Any],
                        channels_last: str) -> float:
    """Seconds of the layout reorders and transposes that a run of ``model`` (compiled under
    ``properties`` with ``channels_last`` edges) executes, by the CPU plugin's profiling counters (the
    least over a few runs; a reorder that only relabels a layout is in the runtime model but does not
    run)."""
    compiled = _compile(ov, model.SerializeToString(), {**properties, "PERF_COUNT": True}, model.graph.name,
                        channels_last=channels_last)
    request = compiled.create_infer_request()
    inputs = _channels_last_inputs(_drawn_inputs(model), channels_last)
    tensors = {name: ov.Tensor(array, shared_memory=True) for name, array in inputs.items()}
    outputs = _bind(ov, request, compiled, tensors, name=model.graph.name)
    spent = []
    for _ in range(_PROFILE_WARMUP):
        _infer(request, model.graph.name)
        spent.append(sum(info.real_time.total_seconds() for info in request.get_profiling_info()
                         if info.status == info.Status.EXECUTED and info.node_type in _LAYOUT_OPS))
    del outputs
    return min(spent)


def _channels_last_inputs(inputs: Mapping[str, np.ndarray], channels_last: str) -> dict[str, np.ndarray]:
    """``inputs`` with each 4-D array in NHWC order (contiguous) where ``channels_last`` is
    :data:`NHWC_EDGES`."""
    if channels_last != NHWC_EDGES:
        return dict(inputs)
    return {name: np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else a
            for name, a in inputs.items()}


def _bind(ov: ModuleType, request: Any, compiled: Any, tensors: Mapping[str, Any],
          outputs: Sequence[Any] | None = None, *, name: str) -> list[Any]:
    """Bind ``tensors`` (by input name) and ``outputs`` (by position; new ones where not given, for
    outputs of a static shape) to ``request`` of model ``name``; returns the outputs bound."""
    try:
        for input_name, tensor in tensors.items():
            request.set_tensor(input_name, tensor)
        if outputs is None:
            outputs = [ov.Tensor(port.get_element_type(), port.get_shape()) if port.get_partial_shape().is_static
                       else None for port in compiled.outputs]
        for i, tensor in enumerate(outputs):
            if tensor is not None:
                request.set_output_tensor(i, tensor)
    except Exception as e:
        raise UnrunnableBrickError(f"openvino cannot bind the inputs and outputs of model {name!r}: "
                                   f"{_ov_error(e)}") from e
    return list(outputs)


def _infer(request: Any, name: str) -> None:
    """One synchronous inference of ``request``."""
    try:
        request.infer()
    except Exception as e:
        raise UnrunnableBrickError(f"openvino cannot run model {name!r}: {_ov_error(e)}") from e


def _internal_bytes(compiled: Any, *, layouts: bool = True) -> np.ndarray:
    """A stand-in (no memory behind it) whose ``nbytes`` are the bytes each compiled copy holds of its
    own beyond its weights and outputs: the outputs of its kernels that no model output takes (layout
    reorders at its edges where ``layouts``, tensors between its kernels), from the runtime model.
    The cold copies of a brick count them, so that the copies span what they should."""
    kernels = runtime_kernels(compiled)
    kinds = {k.name: k.layer_type for k in kernels}
    internal = 0
    for kernel in kernels:
        readers = [kinds[k.name] for k in kernels if kernel.name in k.inputs]
        if not layouts and kernel.layer_type in _LAYOUT_OPS:
            continue
        if kernel.layer_type not in _NO_MEMORY and not (readers and all(r == "Output" for r in readers)):
            internal += kernel.output_bytes
    return np.broadcast_to(np.uint8(0), (internal,))


#: ``layerType`` of runtime ops that hold no memory of a compiled copy's own (beyond its weights).
_NO_MEMORY = frozenset({"Input", "Output", "Const", "Reshape"})


def _drawn_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs of ``model`` as the onnxruntime backend draws them: :func:`random_inputs` (seeded,
    within the model's value ranges), an input whose statistics kept its model's values (a
    non-maximum suppression's boxes and scores) with those values."""
    drawn = random_inputs(model)
    statistics_ = value_statistics(model)
    for name, shape, dtype in input_specs(model):
        kept = statistics_[name].recorded(tuple(shape)) if name in statistics_ else None
        if kept is not None:
            drawn[name] = np.ascontiguousarray(kept, dtype=dtype)
    return drawn


def _feed_from(previous: OpenvinoPrepared | None, model: onnx.ModelProto, tensors: Mapping[str, Any]) -> None:
    """Bind the output of the brick before (``previous``) that matches this brick's first input in
    shape and floating dtype to that input's tensor, so that the prime writes what the timed run
    reads, as the layer before writes it inside the model (as onnxruntime's backend does)."""
    specs = input_specs(model)
    if previous is None or not specs or not np.issubdtype(specs[0][2], np.floating):
        return
    name, _, dtype = specs[0]
    shape = tuple(tensors[name].shape)  # NHWC where the brick runs channels-last
    request = previous.requests[0]
    for i, tensor in enumerate(request.output_tensors):
        if tuple(tensor.shape) == shape and np.asarray(tensor.data).dtype == dtype:
            request.set_output_tensor(i, tensors[name])
            return


def _read_from(reader: OpenvinoPrepared, name: str, writer: OpenvinoPrepared, output: int) -> bool:
    """Bind ``reader``'s floating-point input ``name`` to ``writer``'s output tensor ``output`` where both
    hold the same element type and bytes: the tensor itself where their shapes match, else a view of
    its memory in the input's shape (a channels-last output read by a brick that takes NCHW: the
    values move, which no kernel's time depends on). Returns whether it was bound."""
    request = reader.requests[0]
    if output >= len(writer.requests[0].output_tensors):
        return False
    source = writer.requests[0].get_output_tensor(output)
    target = request.get_tensor(name)
    data = np.asarray(target.data)
    if source.element_type != target.element_type or not np.issubdtype(data.dtype, np.floating) \
            or source.byte_size != target.byte_size:
        return False
    if tuple(source.shape) != tuple(target.shape):
        view = np.asarray(source.data).reshape(tuple(target.shape))
        source = _ov().Tensor(view, shared_memory=True)
        reader._held.append(view)
    request.set_tensor(name, source)
    reader._held.append(source)
    return True


def _original_nodes(compiled: Any, model: onnx.ModelProto) -> dict[str, tuple[str, ...]]:
    """Each kernel of the runtime model (by its name, as the profiling counters report it): the nodes
    of ``model`` that it runs, by name, in the model's order (:func:`dlbricks.ov_fusion.kernel_layers`
    of its ``originalLayersNames``)."""
    return kernel_layers(runtime_kernels(compiled), model)




def _ov_error(error: BaseException) -> str:
    """OpenVINO's message in one line: the lines that say what went wrong, not where it was raised
    (``Exception from src/...``), cut to a few hundred characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("Exception from ")] or lines
    text = f"{type(error).__name__}: {' '.join(said)}" if said else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
