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
import io
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import onnx

from dlbricks._bricks import SIGNATURE_KEY, split_previous
from dlbricks._errors import BackendUnavailableError, InvalidArgumentError, UnrunnableBrickError

from ._config import ConfigBase
from ._inputs import input_specs, random_inputs, value_statistics
from ._items import floor_model
from ._ort import CACHE_STATES, COLD_SPANS, session_copies, weight_bytes
from ._util import closed, prepare_previous, round_robin

__all__ = ["OpenvinoBackend", "OpenvinoConfig", "OpenvinoPrepared", "installed_openvino_version"]

#: What to run to get the backend.
INSTALL_HINT = "pip install 'dlbricks[openvino]'"
DEVICES = ("cpu",)
PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRECISIONS = ("f32", "bf16", "f16")
EXECUTION_MODES = ("PERFORMANCE", "ACCURACY")
#: Version of how bricks are measured, part of every :attr:`OpenvinoConfig.config_id` (as
#: :data:`dlbricks.generators._ort.MEASUREMENT_METHOD` for onnxruntime).
MEASUREMENT_METHOD = 1
#: The op type of a kernel that the CPU plugin inserts to change a tensor's layout (no node of the
#: model runs in it), as :meth:`OpenvinoBackend.profile_kernels` reports it.
REORDER = "Reorder"


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
        :class:`~dlbricks.BrickInContext`) untimed before each timed run, writing the brick's first
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
        compiled = _compile(ov, data, config.properties(), model.graph.name)
        request = compiled.create_infer_request()
        inputs = _drawn_inputs(model)
        tensors = {name: ov.Tensor(array, shared_memory=True) for name, array in inputs.items()}
        outputs = _bind(ov, request, compiled, tensors, name=model.graph.name)
        _infer(request, model.graph.name)
        first = [np.asarray(t.data) for t in request.output_tensors]
        requests, held = [request], [compiled, inputs, tensors, outputs]
        copies = session_copies(model, first, config) if _is_brick(model) else 1
        for _ in range(copies - 1):
            copy = _compile(ov, data, config.properties(), model.graph.name)
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


def _compile(ov: ModuleType, data: bytes, properties: Mapping[str, Any], name: str) -> Any:
    """``data`` (a serialized ONNX model) read by OpenVINO's ONNX frontend, with weights of its own,
    compiled for the CPU plugin under ``properties``."""
    try:
        frontend = ov.frontend.FrontEndManager().load_by_framework("onnx")
        read = frontend.convert(frontend.load(io.BytesIO(data)))
    except Exception as e:  # noqa: BLE001 - the frontend raises untyped errors
        raise UnrunnableBrickError(f"openvino cannot read model {name!r}: {_ov_error(e)}") from e
    try:
        return _core().compile_model(read, "CPU", dict(properties))
    except Exception as e:  # noqa: BLE001 - the plugin raises untyped errors
        raise UnrunnableBrickError(f"openvino cannot compile model {name!r}: {_ov_error(e)}") from e


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
    except Exception as e:  # noqa: BLE001 - the plugin raises untyped errors
        raise UnrunnableBrickError(f"openvino cannot bind the inputs and outputs of model {name!r}: "
                                   f"{_ov_error(e)}") from e
    return list(outputs)


def _infer(request: Any, name: str) -> None:
    """One synchronous inference of ``request``."""
    try:
        request.infer()
    except Exception as e:  # noqa: BLE001 - the plugin raises untyped errors
        raise UnrunnableBrickError(f"openvino cannot run model {name!r}: {_ov_error(e)}") from e


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
    name, shape, dtype = specs[0]
    request = previous.requests[0]
    for i, tensor in enumerate(request.output_tensors):
        if tuple(tensor.shape) == tuple(shape) and np.asarray(tensor.data).dtype == dtype:
            request.set_output_tensor(i, tensors[name])
            return


def _original_nodes(compiled: Any, model: onnx.ModelProto) -> dict[str, tuple[str, ...]]:
    """Each kernel of the runtime model (by its name, as the profiling counters report it): the nodes
    of ``model`` that it runs, by name, in the model's order.

    They are read from the kernel's ``originalLayersNames``, each the name of a node, of a node's
    output (a model output's op takes the tensor's name) or of an op a node was decomposed into
    (``node/Suffix``). A transformation that renames what it fuses (a BatchNormalization folded into
    the convolution before it leaves a ``Multiply_N``) loses the first node: the producer of the
    kernel's first node's data input (input 0) is added, and its own producer, for as long as no
    other kernel runs it and it computes from data (it has inputs and is no ``Constant``).
    """
    order = {node.name: i for i, node in enumerate(model.graph.node)}
    named = {out: node.name for node in model.graph.node for out in node.output}
    named.update({name: name for name in order})
    found: dict[str, list[str]] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        originals = str(info["originalLayersNames"].astype(str)) if "originalLayersNames" in info else ""
        nodes: list[str] = []
        for original in filter(None, originals.split(",")):
            node = named.get(original) or named.get(original.split("/", 1)[0])
            if node is not None and node not in nodes:
                nodes.append(node)
        found[op.get_friendly_name()] = nodes
    claimed = {n for nodes in found.values() for n in nodes}
    producers = {out: node for node in model.graph.node for out in node.output}
    for nodes in found.values():
        first = model.graph.node[min(order[n] for n in nodes)] if nodes else None
        while first is not None and first.input:
            before = producers.get(first.input[0])
            if before is None or before.name in claimed or before.op_type == "Constant" or not before.input:
                break
            nodes.append(before.name)
            claimed.add(before.name)
            first = before
    return {kernel: tuple(sorted(nodes, key=order.__getitem__)) for kernel, nodes in found.items()}


def _is_brick(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is a dlbricks brick (it carries its signature), not a whole model."""
    return any(p.key == SIGNATURE_KEY for p in model.metadata_props)


def _ov_error(error: BaseException) -> str:
    """OpenVINO's message in one line: the lines that say what went wrong, not where it was raised
    (``Exception from src/...``), cut to a few hundred characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("Exception from ")] or lines
    text = f"{type(error).__name__}: {' '.join(said)}" if said else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
