"""The onnxruntime backend: configuration, session, IOBinding, CPU and CUDA.

onnxruntime is imported lazily, inside functions, so that importing dlbricks (or reading
measurements) does not load it, and so that a worker can set its thread variables first.
"""

from __future__ import annotations

import base64
import functools
import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from types import ModuleType
from typing import Any

import numpy as np
import onnx
from onnx import helper

from dlbricks import BackendError, InvalidArgumentError
from dlbricks.bricks import PREVIOUS_KEY, SIGNATURE_KEY, reuse_bytes, split_previous
from dlbricks.errors import BackendUnavailableError, UnrunnableBrickError

from . import ort_kernels
from ._cuda import NO_SYNC_ENTRY, REPEAT_COPIES, REPEAT_MAX_DEVICE_S, cuda_probe, repeat_s
from ._ort_config import OrtConfig, _ort
from .inputs import input_specs, random_inputs, value_ranges, value_statistics
from .items import floor_model, side_by_side, vector_warmup_model
from .system import last_level_cache_bytes
from .util import closed, one_line, prepare_previous, round_robin

__all__ = ["OrtBackend", "OrtConfig", "OrtPrepared", "repeat_time", "last_level_cache_bytes"]

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Most session copies of one brick: enough for a small brick's copies to span twice the last-level
#: cache (fewer leave its weights in the cache, faster than in its model; see "Enough copies" in
#: docs/methodology.md).
MAX_COLD_COPIES = 128
#: Session copies of a brick on CUDA, in every cache state. Each copy has a CUDA execution provider of
#: its own (stream, cuDNN and cuBLAS handles, arena), and running copies round-robin costs far more
#: than the cache misses they emulate: on an H100 (onnxruntime-gpu 1.31.1), a ResNet-18 Relu brick ran
#: in 21 us as one session and 124-139 us as 128 copies, and its first 3x3 convolution in 45 us and
#: 3.7-4.0 ms (each copy searches its cuDNN algorithms on its first runs).
CUDA_COPIES = 1
THREAD_POOLS_ENV = "DLBRICKS_ORT_THREAD_POOLS"
#: Seconds to leave after a multi-threaded worker's run before another worker times anything: with
#: spinning on, onnxruntime's pool threads keep spinning for about 30 ms after a run returns
#: (exploratory: a 2-thread SqueezeNet session burned 30-34 ms of CPU in the 50-500 ms after its last
#: run, and none in the next seconds). In ``evaluate --threads 2`` the whole model's short samples,
#: taken right after a brick, ran on one free core: SqueezeNet 3.2-7.9 ms against 3.2 ms alone.
IDLE_SPIN_S = 0.06
#: Graph optimizers off in the session of a brick's copies side by side (:func:`repeat_time`): at level
#: ``basic`` and above onnxruntime's common-subexpression elimination merges nodes that compute the same
#: op from the same inputs, so four copies of a Conv+Relu that read one input and one weight ran as one
#: Conv and four Relus, and the repeat came out as one Relu's cost (119 of the 548 fused bricks of the
#: default suite at ``all``, in ten patterns).
KEEP_COPIES_APART = ("CommonSubexpressionElimination",)
#: Weights below which a brick in ``cache="cold-weights"`` runs as one session: its copies share
#: their input, output and scratch, so with (almost) no weights they have no data of their own to
#: keep cold, and each copy costs a session to create (a Relu brick of MobileNet-v2 ran as 84).
MIN_COLD_WEIGHT_BYTES = 4096
#: The CUDA provider's option that captures a model in a CUDA graph (:meth:`OrtBackend.graph_config`).
CUDA_GRAPH_OPTION = "enable_cuda_graph"
#: Ops whose onnxruntime CPU kernels are registered with ``Alias(0, 0)``: inside a model their output
#: is their input's buffer with another shape (exploratory: a Relu, Reshape, Relu chain on 4 MB ran in
#: 212 us, the same with a Flatten, an Unsqueeze or an Identity added, 340 us with an Add of zero),
#: while a brick of them, bound to an output buffer of its own, copies its input.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
#: Session option that makes a session allocate from the process's registered (shared) allocators.
USE_ENV_ALLOCATORS = "session.use_env_allocators"


def installed_onnxruntimes() -> set[str]:
    """The onnxruntime distributions installed (``onnxruntime``, ``onnxruntime-gpu``...): each
    installs the same ``onnxruntime`` package, and the last one installed wins."""
    from importlib.metadata import distributions

    names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in distributions()}
    return {n for n in names if n == "onnxruntime" or n.startswith("onnxruntime-")}


def no_cuda_message(available: list[str], installed: set[str]) -> str:
    """What to do when CUDA is asked for and onnxruntime has no CUDAExecutionProvider, given the
    onnxruntime distributions installed (:func:`installed_onnxruntimes`)."""
    said = f"CUDA requested but onnxruntime has no CUDAExecutionProvider (available: {available}); "
    others = " ".join(sorted(installed - {"onnxruntime-gpu"}))
    if "onnxruntime-gpu" not in installed:
        cpu = others or "onnxruntime"
        return (said + f"install onnxruntime-gpu in place of {cpu}: "
                f"pip uninstall -y {cpu} && pip install onnxruntime-gpu")
    if others:
        return (said + f"onnxruntime-gpu is installed beside {others}, which share its package: "
                f"pip uninstall -y {others} && pip install --force-reinstall --no-deps onnxruntime-gpu")
    return (said + "onnxruntime-gpu is installed but found no GPU: check the driver and the CUDA and cuDNN "
            "libraries it needs")


class OrtPrepared:
    """Sessions with their inputs and outputs bound once, run by ``run_with_iobinding``.

    Attributes
    ----------
    session : onnxruntime.InferenceSession
        The first copy.
    binding : onnxruntime.IOBinding
        The first copy's binding.
    copies : int
        Sessions run round-robin (1 for a whole model or ``cache="warm"``).
    run : callable
        One synchronous run; on CPU with one copy it is ``session.run_with_iobinding`` bound to
        ``binding``.
    """

    def __init__(
        self,
        ort: ModuleType,
        sessions: list[Any],
        inputs: dict[str, np.ndarray],
        first_outputs: list[Any],
        config: OrtConfig,
        previous: Any = None,
        weight_bytes: int = 0,
        model: onnx.ModelProto | None = None,
        empty: Any = None,
        kept: frozenset[str] = frozenset(),
    ) -> None:
        #: Inputs fed their model's own values (:func:`_seeded_inputs`), which the prime leaves alone.
        self._kept = kept
        self.session = sessions[0]
        #: The brick, where ``queue_times`` also times copies of it side by side (CUDA), else None.
        self.model = model
        self.copies = len(sessions)
        self._ort = ort
        self._sessions = sessions
        self._inputs = inputs
        self._output_types = [(np.asarray(a).shape, np.asarray(a).dtype) for a in first_outputs]
        self._config = config
        self._values: list[Any] = []  # keeps bound inputs and outputs (and their numpy buffers) alive
        self.binding: Any = None
        self.run: Any = closed
        self.previous = previous
        self._bind(inputs)
        if previous is not None:  # what the harness runs untimed before each timed run
            self.prime: Any = previous.run
        #: The floor's one-node model, prepared beside a brick on a CPU: the harness times it after
        #: each of the brick's samples (:func:`~dlbricks.generators.harness.paired_empty`).
        self.empty_model = empty
        if empty is not None:
            self.empty: Any = empty.run
        outputs = sum(math.prod(shape) * dtype.itemsize for shape, dtype in self._output_types)
        #: Bytes its sessions and buffers hold (weights and outputs of every copy, inputs, the brick
        #: before it when it owns it): what a worker's cache of prepared items counts.
        self.nbytes = (self.copies * (weight_bytes + outputs) + sum(a.nbytes for a in inputs.values())
                       + int(getattr(previous, "nbytes", 0)))
        #: Whether one cycle of its copies (weights and outputs) fits the last-level cache: then a copy
        #: untouched since the last round is colder than one a cycle ago, the state its copies
        #: emulate, and a short measurement in a round warms a whole cycle first.
        self.cycle_fits_cache = (self.copies > 1 and config.device == "cpu"
                                 and self.copies * (weight_bytes + outputs) < last_level_cache_bytes())

    def relocate(self) -> None:
        """Bind fresh copies of the inputs and fresh outputs: the same run at other addresses.

        Timings of memory-bound kernels depend by a few percent on where their buffers land (cache
        set conflicts, page placement); the harness spreads a measurement over several placements
        so that its median does not depend on one draw.
        """
        previous = self._values  # alive until the new buffers are allocated, so they differ
        self._bind({name: array.copy() for name, array in self._inputs.items()})
        del previous

    def _bind(self, inputs: dict[str, np.ndarray]) -> None:
        """Bind ``inputs`` (shared by every copy) and new outputs (shared unless ``cache="cold"``)."""
        ort, config = self._ort, self._config
        device, device_id = config.device, config.device_id
        values: list[Any] = list(inputs.values())
        input_values = {
            name: ort.OrtValue.ortvalue_from_numpy(array, device, device_id) for name, array in inputs.items()
        }
        values += input_values.values()
        self._feed_from_previous(input_values)
        bindings = []
        shared_outputs: list[Any] | None = None
        for session in self._sessions:
            binding = session.io_binding()
            for name, value in input_values.items():
                binding.bind_ortvalue_input(name, value)
            outputs = shared_outputs or [
                ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, device, device_id)
                for shape, dtype in self._output_types
            ]
            if config.cache == "cold-weights":
                shared_outputs = outputs
            for meta, value in zip(session.get_outputs(), outputs, strict=True):
                binding.bind_ortvalue_output(meta.name, value)
            values += outputs
            if device == "cuda":
                binding.synchronize_inputs()
                binding.synchronize_outputs()
            bindings.append(binding)
        self._values = values
        self.binding = bindings[0]
        on_cuda = device == "cuda"
        self.run = round_robin([_one_run(s, b, on_cuda) for s, b in zip(self._sessions, bindings, strict=True)])

    def _feed_from_previous(self, input_values: dict[str, Any]) -> None:
        """On a CPU, bind the output of the brick before (``previous``) that matches this brick's
        first input in shape and floating dtype to that input's buffer, so that the prime writes what
        the timed run reads, as the layer before writes a layer's input inside a model: the input is
        then in the caches because it was just written, whatever ran before the prime (the other
        bricks of a model's rounds, see :mod:`~dlbricks.generators.rounds`)."""
        previous = self.previous
        if previous is None or self._config.device != "cpu" or not input_values:
            return
        name = self._sessions[0].get_inputs()[0].name
        array = self._inputs.get(name)
        if array is None or not np.issubdtype(array.dtype, np.floating) or name in self._kept:
            return  # an input that keeps its model's values: the prime would write others over them
        for meta, (shape, dtype) in zip(previous.session.get_outputs(), previous._output_types, strict=True):
            if tuple(shape) == tuple(array.shape) and dtype == array.dtype:
                previous.binding.bind_ortvalue_output(meta.name, input_values[name])
                return

    def bind_value(self, name: str, value: Any, array: np.ndarray, *, output: bool) -> None:
        """Bind ``value`` (an ``OrtValue`` over ``array``, kept alive with it) to the input or output
        ``name`` of the first copy's binding, in place of what :meth:`_bind` allocated (a chain of
        bricks: :func:`prepare_chain`)."""
        if output:
            self.binding.bind_ortvalue_output(name, value)
        else:
            self.binding.bind_ortvalue_input(name, value)
        self._values += [value, array]

    def queue_times(self, repeat: bool = True) -> Any:
        """On CUDA, the host's time to issue one run and the device's time to run it, and (``repeat``)
        for a brick whose kernels take at most :data:`~dlbricks.generators._cuda.REPEAT_MAX_DEVICE_S`
        what a further copy adds to a run of several (:func:`repeat_time`)
        (:class:`~dlbricks.generators._cuda.QueueSample`, see :mod:`~dlbricks.generators._cuda`);
        None on the CPU, or where the CUDA driver cannot be reached from here."""
        if self._config.device != "cuda" or self.binding is None:
            return None
        probe = cuda_probe(self._config.device_id)
        if probe is None:
            return None
        options = self._ort.RunOptions()
        options.add_run_config_entry(NO_SYNC_ENTRY, "1")
        try:
            sample = probe.measure(functools.partial(self.session.run_with_iobinding, self.binding, options))
        except RuntimeError:  # a driver call or an unsynchronized run refused: the latency stands alone
            return None
        device = sample.device_warm_s if sample.device_warm_s is not None else sample.device_s
        if not repeat or self.model is None or device is None or device > REPEAT_MAX_DEVICE_S:
            return sample
        try:
            return replace(sample, repeat_s=repeat_time(self.model, self._config, self._inputs))
        except (UnrunnableBrickError, RuntimeError):  # copies that cannot load or run: the rest stands
            return sample

    def outputs(self) -> list[np.ndarray]:
        """The bound outputs of the last run, copied to host memory."""
        return list(self.binding.copy_outputs_to_cpu())

    def close(self) -> None:
        """Release the bindings, buffers and sessions."""
        self.binding = None
        self._values = []
        self._inputs = {}
        self._sessions = []
        self.session = None
        self.model = None
        self.run = closed
        if self.previous is not None:
            self.previous.close()
            self.previous = None
            self.prime = closed
        if self.empty_model is not None:
            self.empty_model.close()
            self.empty_model = None
            self.empty = closed


def _one_run(session: Any, binding: Any, on_cuda: bool) -> Any:
    run_with_iobinding = session.run_with_iobinding
    if not on_cuda:
        return functools.partial(run_with_iobinding, binding)
    synchronize = binding.synchronize_outputs

    def run() -> None:
        run_with_iobinding(binding)
        synchronize()

    return run


class OrtBackend:
    """The onnxruntime backend (CPU and CUDA execution providers).

    Examples
    --------
    >>> backend = OrtBackend()
    >>> backend.name
    'onnxruntime'
    """

    name = "onnxruntime"
    view_ops = VIEW_OPS

    def default_config(self) -> OrtConfig:
        """``OrtConfig()``: CPU, one thread, optimizations off."""
        return OrtConfig()

    def config_from_dict(self, data: Mapping[str, Any]) -> OrtConfig:
        """Rebuild an :class:`OrtConfig` from its dict."""
        return OrtConfig.from_dict(data)

    def check(self, config: Any) -> None:
        """Raise if ``config`` is not an :class:`OrtConfig` that can run with this onnxruntime."""
        if not isinstance(config, OrtConfig):
            raise InvalidArgumentError(
                f"The onnxruntime backend needs an OrtConfig. Got {type(config).__name__} instead."
            )
        ort = _ort()
        if config.onnxruntime_version != ort.__version__:
            raise BackendUnavailableError(
                f"The OrtConfig is for onnxruntime {config.onnxruntime_version} but "
                f"{ort.__version__} is installed; rebuild the config to measure here."
            )
        available = ort.get_available_providers()
        if config.device == "cuda" and "CUDAExecutionProvider" not in available:
            raise BackendUnavailableError(no_cuda_message(available, installed_onnxruntimes()))

    def worker_env(self, config: Any) -> dict[str, str]:
        """Thread variables for OpenMP/MKL/OpenBLAS matching ``intra_op_num_threads`` (none for 0).

        With more than one thread and spinning on, the worker also runs every session on one pair of
        process-wide thread pools (:data:`THREAD_POOLS_ENV`): a brick runs as several session copies
        (the cache emulation of ``cache="cold-weights"``), and copies with pools of their own leave
        spinning threads behind that take the cores from the copy that runs next.
        """
        env = {}
        if config.intra_op_num_threads:
            env = {name: str(config.intra_op_num_threads) for name in THREAD_ENV_VARS}
        if uses_global_pools(config):
            env[THREAD_POOLS_ENV] = f"{config.intra_op_num_threads},{config.inter_op_num_threads}"
        return env

    def idle_spin_s(self, config: Any) -> float:
        """How long this configuration's pool threads spin after a run (:data:`IDLE_SPIN_S` on a
        CPU with more than one thread and spinning on; nothing with one thread, which has no pool)."""
        return IDLE_SPIN_S if uses_global_pools(config) else 0.0

    def takes_queue_times(self, config: Any) -> bool:
        """Whether a :class:`~dlbricks.generators.runner.Runner` asks each measured item for its launch-queue
        times (``OrtPrepared.queue_times``): on CUDA."""
        return getattr(config, "device", "cpu") == "cuda"

    def describe(self, config: Any) -> dict[str, Any]:
        """Runtime version, available providers and the configuration."""
        ort = _ort()
        return {
            "backend": self.name,
            "version": ort.__version__,
            "available_providers": ort.get_available_providers(),
            "config": config.to_dict(),
            "config_id": config.config_id,
            "shared_thread_pools": uses_global_pools(config),
        }

    def brick_overhead_s(self, item: Any, config: Any, run_s: float) -> float | None:
        """Seconds of a fused brick's own run at level "all" that its model does not run: NCHWc
        reorders at its edges and kernels the model fuses away (the brick's session profiled in this
        process, after the brick before it when ``previous_layer``, as it was timed; once per brick
        and context in a process, whatever the cache mode), as their share of the profiled run times
        ``run_s``, the brick's timed median less the floor. None for other items and levels and for
        the GPU. See :mod:`dlbricks.generators.ort_kernels`."""
        brick = getattr(item, "brick", item)
        if (config.graph_optimization_level != "all" or config.device != "cpu"
                or not getattr(brick, "granularity", "layer").startswith("fused")):
            return None
        previous = getattr(item, "previous", None) if config.previous_layer else None
        kernels = ort_kernels.brick_session_kernels(brick, "all", config.intra_op_num_threads, previous)
        return kernels.leftover_share * max(run_s, 0.0)

    def calibrate_reorders(self, config: Any) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
        """The cost of one NCHWc layout reorder by size under ``config`` (level "all" on the CPU), as
        (sizes in bytes, seconds per byte); None elsewhere. See :func:`calibrate_reorder`."""
        if config.graph_optimization_level != "all" or config.device != "cpu":
            return None
        cost = ort_kernels.calibrate_reorder(config)
        return cost.sizes, cost.seconds_per_byte

    def prepare(self, model: onnx.ModelProto, config: Any, *, timed: bool = True,
                fed: Collection[int] = ()) -> OrtPrepared:
        """Build the session, draw random inputs, bind inputs and outputs once on the device; beside a
        brick that will be ``timed`` on a CPU, the floor's one-node model too (``empty``). The brick
        before a brick is prepared untimed: it only runs before each timed run. Floating-point inputs
        at the positions ``fed`` (of the session's inputs) start as zeros: a chain binds them to the
        outputs of other bricks (:func:`prepare_chain`), so drawing their values would be wasted.

        Raises
        ------
        BackendUnavailableError
            If the configuration asks for a provider that is not available.
        UnrunnableBrickError
            If onnxruntime cannot load or run the model.
        """
        self.check(config)
        ort = _ort()
        model, before = split_previous(model)
        model, session_config = native_brick(model, config)
        data = model.SerializeToString()  # once for every copy
        session = _make_session(ort, model, session_config, data=data)
        names = [i.name for i in session.get_inputs()]
        inputs = _seeded_inputs(model, names, zeros={names[k] for k in fed if 0 <= k < len(names)})
        try:
            first = session.run(None, inputs)
        except Exception as e:
            raise UnrunnableBrickError(
                f"onnxruntime cannot run model {model.graph.name!r}: {one_line(e)}"
            ) from e
        sessions = [session]
        copies = session_copies(model, first, config)
        if copies > 1:
            shared = config.device == "cpu" and config.enable_cpu_mem_arena
            if shared:
                sessions = [_make_session(ort, model, session_config, shared_arena=True, data=data)]
            sessions += [_make_session(ort, model, session_config, shared_arena=shared, data=data)
                         for _ in range(copies - 1)]
        previous = None
        if config.cache in ("cold", "cold-weights") and config.previous_layer and _is_brick(model):
            previous = prepare_previous(functools.partial(self.prepare, timed=False), before, config)
        empty = self.prepare(floor_model(), config) if timed and config.device == "cpu" and _is_brick(model) else None
        keep = model if config.device == "cuda" and _is_brick(model) else None
        kept = frozenset(name for name, stats in value_statistics(model).items() if stats.values is not None)
        return OrtPrepared(ort, sessions, inputs, first, config, previous, weight_bytes(model), keep, empty, kept)

    def prepare_chain(self, models: Sequence[onnx.ModelProto], config: Any,
                      feeds: Sequence[Sequence[Feed]] | None = None) -> list[OrtPrepared | None]:
        """The bricks of one model prepared as a chain for rounds of single calls on a CPU, each input
        read where ``feeds`` says (:func:`prepare_chain`)."""
        if getattr(config, "device", "cpu") != "cpu":
            raise InvalidArgumentError("Chained rounds run on a CPU only. Got device "
                                       f"{config.device!r} instead; use the rounds of bursts there.")
        self.check(config)
        return prepare_chain(self, models, config, feeds)

    def config_from_options(self, *, threads: int | None = None, opt_level: str | None = None,
                            device: str | None = None) -> OrtConfig:
        """The configuration of a command's ``--threads`` (``intra_op_num_threads``), ``--opt-level``
        (``graph_optimization_level``) and ``--device``; None leaves the default."""
        given = {"intra_op_num_threads": threads, "graph_optimization_level": opt_level, "device": device}
        return OrtConfig(**{k: v for k, v in given.items() if v is not None})

    def graph_config(self, config: OrtConfig) -> OrtConfig | None:
        """``config`` with the model captured in a CUDA graph and replayed (the CUDA provider's
        ``enable_cuda_graph``): what a user who cares about batch-1 latency on a GPU runs. onnxruntime
        refuses such a session where a node of the model runs on the CPU, or copies between the two.
        None on the CPU."""
        if config.device != "cuda":
            return None
        return replace(config, provider_options={**dict(config.provider_options), CUDA_GRAPH_OPTION: "1"})


#: Ops whose onnxruntime CPU kernels are registered ``MayInplace(0, 0)`` (the unary activations):
#: inside a model the memory planner lets them write over their input where it dies there, so a
#: chain's brick of one of them writes the buffer it reads.
IN_PLACE_OPS = frozenset({"Elu", "HardSigmoid", "LeakyRelu", "Relu", "Selu", "Sigmoid", "Softplus", "Softsign",
                          "Tanh", "ThresholdedRelu"})
#: Largest output placed in a chain's shared memory; a larger one keeps its own buffer.
MAX_SLOT_BYTES = 256 << 20
#: Alignment of an output's place in a chain's shared memory, as onnxruntime aligns its allocations.
ALIGN = 64
#: Where one input of a chained brick is read from: (position of the brick that writes it, index of
#: that brick's output), or None for a buffer of its own.
Feed = tuple[int, int] | None


def native_brick(model: onnx.ModelProto, config: OrtConfig) -> tuple[onnx.ModelProto, OrtConfig]:
    """The model and configuration a brick's sessions run: at level "all" on the CPU, the brick in
    the blocked layout its model's kernels pass to each other, without the layout reorders at its
    edges, run at level "disable" (:func:`~dlbricks.generators.ort_kernels.native_layout`); else as
    given. A brick measured so needs none of those reorders taken out of its time, and meets its
    input where the brick before it in a chain left it, in the model's layout."""
    if config.graph_optimization_level != "all" or config.device != "cpu" or not _is_brick(model):
        return model, config
    native = ort_kernels.native_layout(model, config.intra_op_num_threads or 1)
    if native is None:
        return model, config
    return native, replace(config, graph_optimization_level="disable")


def _previous_signature(model: onnx.ModelProto) -> str | None:
    """The signature of the brick that ``model`` (a brick in its context) carries as the one before
    it, None where it carries none."""
    value = next((p.value for p in model.metadata_props if p.key == PREVIOUS_KEY), None)
    if value is None:
        return None
    before = onnx.load_from_string(base64.b64decode(value))
    return next((p.value for p in before.metadata_props if p.key == SIGNATURE_KEY), None)


def _aligned(nbytes: int, align: int = ALIGN) -> np.ndarray:
    """``nbytes`` of uninitialized memory starting on an ``align``-byte boundary, as onnxruntime's
    own allocations do."""
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def prepare_chain(backend: OrtBackend, models: Sequence[onnx.ModelProto], config: OrtConfig,
                  feeds: Sequence[Sequence[Feed]] | None = None) -> list[OrtPrepared | None]:
    """Prepare ``models``, the bricks of one model in its order (each as its
    :class:`~dlbricks.bricks.BrickInContext` gives it, carrying the brick before it), as a chain for rounds
    of single calls on a CPU (``RoundsBudget(chained=True)``); None for a brick onnxruntime cannot
    prepare.

    - One session each (``cache="warm"``: no copies, no brick run before it), with the floor's
      one-node model of its own beside it (``empty``). Run after its brick, that model meets the
      session state a single call of a brick meets among other sessions: here some 8 us a call,
      against 2 us for the same model run again and again, which the floor's calibration sees.
    - Each input reads the output that writes it in the model (``feeds``, one entry per input of
      each brick: :meth:`~dlbricks.Decomposition.feeds`), where that brick is in the chain and shape and
      type match: a round in the model's order writes each input before its reader reads it, as the
      model does. Such an input is prepared as zeros, not drawn (the chain's first run writes it);
      one whose feed the chain cannot take is drawn then, as any input of its own. Without
      ``feeds``, a brick's first input reads the brick before it in the model (the one it carries)
      and its other inputs the last output of their shape and type. An input
      that keeps its values from the model's run (a masked Softmax's scores, a NonMaxSuppression's
      boxes: :class:`~dlbricks.types.ValueStatistics` ``values``) keeps its own buffer: what another
      brick writes from seeded values would take the kernel off the path its values take in the model.
    - Every output lives in one block of memory shared by the chain, from the brick that writes it
      to the last one that reads it, at the lowest place free over that span
      (:func:`_chain_offsets`), as onnxruntime's memory planner places a model's tensors: a brick writes
      memory that bricks just before it touched, not a buffer of its own last touched a round ago.
      A brick of one op of :data:`IN_PLACE_OPS` writes over its input where the input dies there,
      as it does inside the model.

    - Each brick's ``ready`` runs a small matrix product (:func:`~dlbricks.generators.items.vector_warmup_model`,
      one session shared by the chain) just before its timed call: inside the model a layer's kernel
      starts microseconds after the previous layer's, while a chained call follows its session's
      overhead, the floor's model and the round's own code, long enough for a CPU that powers its
      wide vector units down when they idle to start the brick's kernel at reduced throughput
      (methodology, "Wide vector units between two calls").

    The other bricks of the round then pass through the caches between two calls of a brick as the
    model's other layers do, so the brick's weights are as cold as in the model without copies.
    """
    warm = replace(config, cache="warm")
    given = list(feeds or [])
    chain: list[OrtPrepared | None] = []
    for j, model in enumerate(models):
        fed = [k for k, feed in enumerate(given[j]) if feed is not None] if j < len(given) else []
        try:
            chain.append(backend.prepare(model, warm, fed=fed))
        except UnrunnableBrickError:
            chain.append(None)
    warmup = backend.prepare(vector_warmup_model(), warm, timed=False)
    for prepared in chain:
        if prepared is not None:
            prepared.ready = warmup.run
    if feeds is None:
        feeds = _guessed_feeds(models, chain)
    rows = list(feeds)[:len(chain)]
    reads = [_checked_feeds(chain, j, row) for j, row in enumerate(rows)] + [[] for _ in range(len(chain) - len(rows))]
    owner = _in_place_owners(models, chain, reads)
    offsets, size = _chain_offsets(chain, reads, owner)
    _draw_unread(models, chain, given, reads, set(offsets), warm)
    if not offsets:
        return chain
    block = _aligned(size)
    views: dict[tuple[int, int], tuple[Any, np.ndarray]] = {}
    for (j, o), offset in sorted(offsets.items()):
        shape, dtype = chain[j]._output_types[o]
        nbytes = _bytes_of(shape, dtype)
        array = block[offset:offset + nbytes].view(dtype).reshape(shape)
        views[(j, o)] = (_ort().OrtValue.ortvalue_from_numpy(array), array)
    for j, prepared in enumerate(chain):
        if prepared is None:
            continue
        for k, meta in enumerate(prepared.session.get_inputs()):
            source = reads[j][k] if k < len(reads[j]) else None
            if source is not None and source in views:
                prepared.bind_value(meta.name, *views[source], output=False)
        for o, meta in enumerate(prepared.session.get_outputs()):
            if (j, o) in views:
                prepared.bind_value(meta.name, *views[(j, o)], output=True)
    return chain


def _draw_unread(models: Sequence[onnx.ModelProto], chain: Sequence[OrtPrepared | None],
                 given: Sequence[Sequence[Feed]], reads: Sequence[Sequence[Feed]],
                 placed: Collection[tuple[int, int]], config: OrtConfig) -> None:
    """Draw the values of each input that was prepared as zeros for a feed (``given``) that the
    chain does not read after all (not in ``reads``, or read from an output not ``placed`` in its
    memory: another shape or type, a brick left out): it keeps its own buffer, which then holds
    what :func:`_seeded_inputs` draws, as any input of its own (of the model its session runs under
    ``config``: :func:`native_brick`)."""
    for j, prepared in enumerate(chain):
        if prepared is None or j >= len(given):
            continue
        for k, meta in enumerate(prepared.session.get_inputs()):
            read = reads[j][k] if k < len(reads[j]) else None
            if k < len(given[j]) and given[j][k] is not None and (read is None or read not in placed):
                run = native_brick(split_previous(models[j])[0], config)[0]
                prepared._inputs[meta.name][...] = _seeded_inputs(run, [meta.name])[meta.name]


def _bytes_of(shape: Sequence[int], dtype: Any) -> int:
    return int(math.prod(shape)) * np.dtype(dtype).itemsize


def _shared(prepared: OrtPrepared, o: int) -> bool:
    """Whether output ``o`` of ``prepared`` goes to a chain's shared memory: a number or a bool, of
    at most :data:`MAX_SLOT_BYTES`."""
    shape, dtype = prepared._output_types[o]
    return np.dtype(dtype).kind in "biuf" and _bytes_of(shape, dtype) <= MAX_SLOT_BYTES


def _guessed_feeds(models: Sequence[onnx.ModelProto], chain: Sequence[OrtPrepared | None]) -> list[list[Feed]]:
    """Feeds of a chain whose model's data flow is not given: a brick's first input from the brick
    it carries as the one before it, where that one is earlier in the chain; every other input (and
    the first where that does not match) from the last output of its shape and type before it."""
    position = {}
    for j, model in enumerate(models):
        signature = next((p.value for p in model.metadata_props if p.key == SIGNATURE_KEY), None)
        position.setdefault(signature, j)
    recent: dict[tuple[tuple[int, ...], np.dtype], tuple[int, int]] = {}
    rows: list[list[Feed]] = []
    for j, (model, prepared) in enumerate(zip(models, chain, strict=True)):
        row: list[Feed] = []
        if prepared is not None:
            q = position.get(_previous_signature(model))
            for k, meta in enumerate(prepared.session.get_inputs()):
                mine = prepared._inputs.get(meta.name)
                kind = None if mine is None else (tuple(mine.shape), mine.dtype)
                before = q is not None and q < j and chain[q] is not None and \
                    (tuple(chain[q]._output_types[0][0]), np.dtype(chain[q]._output_types[0][1])) == kind
                row.append((q, 0) if k == 0 and before else recent.get(kind) if kind else None)
            for o, (shape, dtype) in enumerate(prepared._output_types):
                recent[(tuple(shape), np.dtype(dtype))] = (j, o)
        rows.append(row)
    return rows


def _checked_feeds(chain: Sequence[OrtPrepared | None], j: int, row: Sequence[Feed]) -> list[Feed]:
    """``row``, the feeds of brick ``j``'s inputs, keeping those it can read: a floating-point input
    that does not keep its values (an integer one keeps the valid indices it was drawn with), from
    an earlier brick of the chain, of the input's shape and type."""
    prepared = chain[j]
    if prepared is None:
        return []
    out: list[Feed] = []
    for meta, feed in zip(prepared.session.get_inputs(), row, strict=False):
        mine = prepared._inputs.get(meta.name)
        if feed is None or mine is None or not np.issubdtype(mine.dtype, np.floating) or meta.name in prepared._kept \
                or not 0 <= feed[0] < j:
            out.append(None)
            continue
        writer = chain[feed[0]]
        if writer is None or feed[1] >= len(writer._output_types) or not _shared(writer, feed[1]):
            out.append(None)
            continue
        shape, dtype = writer._output_types[feed[1]]
        out.append(feed if (tuple(shape), np.dtype(dtype)) == (tuple(mine.shape), mine.dtype) else None)
    return out


def _in_place_owners(models: Sequence[onnx.ModelProto], chain: Sequence[OrtPrepared | None],
                     reads: Sequence[Sequence[Feed]]) -> dict[tuple[int, int], tuple[int, int]]:
    """Outputs written over an input (a brick of one op of :data:`IN_PLACE_OPS` whose first input,
    of the output's shape and type, dies there), each mapped to the output whose memory it takes."""
    last = _last_reads(reads)
    owner: dict[tuple[int, int], tuple[int, int]] = {}
    for j, (model, prepared) in enumerate(zip(models, chain, strict=True)):
        nodes = model.graph.node
        source = reads[j][0] if prepared is not None and reads[j] else None
        if source is None or len(nodes) != 1 or nodes[0].op_type not in IN_PLACE_OPS \
                or nodes[0].domain not in ("", "ai.onnx") or last.get(source) != j:
            continue
        if prepared._output_types[0] == chain[source[0]]._output_types[source[1]]:
            owner[(j, 0)] = owner.get(source, source)
    return owner


def _last_reads(reads: Sequence[Sequence[Feed]]) -> dict[tuple[int, int], int]:
    """The last brick that reads each output."""
    last: dict[tuple[int, int], int] = {}
    for j, row in enumerate(reads):
        for source in row:
            if source is not None:
                last[source] = j
    return last


def _chain_offsets(chain: Sequence[OrtPrepared | None], reads: Sequence[Sequence[Feed]],
                   owner: Mapping[tuple[int, int], tuple[int, int]]) -> tuple[dict[tuple[int, int], int], int]:
    """The place of every shared output of ``chain`` in one block of memory, and the block's size:
    each buffer (an output, with those written over it: ``owner``) lives from the brick that writes
    it to the last that reads it, and takes the lowest aligned place that no buffer alive then
    holds, as onnxruntime's memory pattern places a model's tensors by their lifetimes."""
    last = _last_reads(reads)
    span: dict[tuple[int, int], list[int]] = {}  # buffer -> [first brick, last brick, bytes]
    for j, prepared in enumerate(chain):
        if prepared is None:
            continue
        for o, (shape, dtype) in enumerate(prepared._output_types):
            if not _shared(prepared, o):
                continue
            buffer = owner.get((j, o), (j, o))
            entry = span.setdefault(buffer, [j, j, _bytes_of(shape, dtype)])
            entry[1] = max(entry[1], last.get((j, o), j))
    placed: list[tuple[int, int, int, int]] = []  # first, last, start, end
    where: dict[tuple[int, int], int] = {}
    for buffer, (first, end, nbytes) in sorted(span.items(), key=lambda item: (item[1][0], item[0][1])):
        alive = sorted((start, stop) for born, dies, start, stop in placed if dies >= first and born <= end)
        offset = 0
        for start, stop in alive:
            if offset + nbytes <= start:
                break
            offset = max(offset, -(-stop // ALIGN) * ALIGN)
        placed.append((first, end, offset, offset + nbytes))
        where[buffer] = offset
    offsets = {out: where[owner.get(out, out)] for j, p in enumerate(chain) if p is not None
               for out in ((j, o) for o in range(len(p._output_types))) if owner.get(out, out) in where}
    return offsets, max((e for _, _, _, e in placed), default=0)


def repeat_time(model: onnx.ModelProto, config: OrtConfig, inputs: Mapping[str, np.ndarray],
                copies: int | None = None) -> float:
    """Seconds that one further copy of ``model`` adds to a run of ``copies`` (default
    :data:`~dlbricks.generators._cuda.REPEAT_COPIES`) side by side under ``config``: one copy and
    ``copies`` (:func:`~dlbricks.generators.items.side_by_side`), each in a session of its own with
    ``inputs`` bound on the device and its outputs allocated by each run, as a model's layers' are,
    timed in turn (:func:`~dlbricks.generators._cuda.repeat_s`).

    Raises
    ------
    UnrunnableBrickError
        If onnxruntime cannot load the copies.
    """
    copies = REPEAT_COPIES if copies is None else copies
    ort = _ort()
    runs, held = [], []
    for count in (1, copies):
        session = _make_session(ort, side_by_side(model, count), config, disabled_optimizers=KEEP_COPIES_APART)
        binding = session.io_binding()
        for name, array in inputs.items():
            value = ort.OrtValue.ortvalue_from_numpy(array, config.device, config.device_id)
            binding.bind_ortvalue_input(name, value)
            held.append(value)
        for meta in session.get_outputs():
            binding.bind_output(meta.name, config.device, config.device_id)
        if config.device == "cuda":
            binding.synchronize_inputs()
        held.append(session)
        runs.append(_one_run(session, binding, config.device == "cuda"))
    return repeat_s(runs[0], runs[1], copies)


#: Most bytes of random inputs a process keeps for :func:`_seeded_inputs`.
INPUT_CACHE_BYTES = 256 << 20
_input_cache: dict[tuple[Any, ...], list[np.ndarray]] = {}


def _seeded_inputs(model: onnx.ModelProto, names: list[str], zeros: Collection[str] = ()) -> dict[str, np.ndarray]:
    """:func:`random_inputs` of ``model``, each a fresh copy of arrays drawn once per process for the
    same shapes, dtypes and value ranges: the values the seeded generator draws, drawn once for
    every brick that meets those inputs instead of once per brick. An input whose statistics kept
    its model's values (a non-maximum suppression's boxes and scores) gets those values; a
    floating-point input named in ``zeros`` that keeps none, zeros."""
    ranges = value_ranges(model)
    specs = input_specs(model, names)
    statistics = value_statistics(model)
    kept = {name: statistics[name].recorded(tuple(shape)) for name, shape, _ in specs if name in statistics}
    blank = {name: np.zeros(shape, dtype) for name, shape, dtype in specs
             if name in zeros and kept.get(name) is None and np.issubdtype(np.dtype(dtype), np.floating)}
    if blank:
        drawn = _seeded_inputs(model, [name for name in names if name not in blank])
        return {name: blank[name] if name in blank else drawn[name] for name in names}
    key = tuple((tuple(shape), np.dtype(dtype).str, ranges.get(name)) for name, shape, dtype in specs)
    arrays = _input_cache.get(key)
    if arrays is None:
        drawn = random_inputs(model, names)
        arrays = [drawn[name] for name, _, _ in specs]
        held = sum(a.nbytes for kept in _input_cache.values() for a in kept)
        if held + sum(a.nbytes for a in arrays) > INPUT_CACHE_BYTES:
            _input_cache.clear()
        _input_cache[key] = arrays
    return {name: (kept[name] if kept.get(name) is not None else array).astype(dtype, copy=True)
            for (name, _, dtype), array in zip(specs, arrays, strict=True)}


def _make_session(ort: ModuleType, model: onnx.ModelProto, config: OrtConfig,
                  shared_arena: bool = False, data: bytes | None = None,
                  disabled_optimizers: Sequence[str] = ()) -> Any:
    """An InferenceSession for ``model`` (serialized as ``data`` when given) with the options and
    providers of ``config``, without ``disabled_optimizers`` (onnxruntime's graph transformers by
    name); with ``shared_arena`` its CPU allocations come from this process's one shared arena
    (:func:`_register_shared_arena`)."""
    options = _session_options(ort, config)
    if shared_arena:
        _register_shared_arena(ort)
        options.add_session_config_entry(USE_ENV_ALLOCATORS, "1")
    try:
        data = model.SerializeToString() if data is None else data
        extra = {"disabled_optimizers": list(disabled_optimizers)} if disabled_optimizers else {}
        session = ort.InferenceSession(data, options, providers=_providers(config), **extra)
    except Exception as e:
        raise UnrunnableBrickError(
            f"onnxruntime cannot load model {model.graph.name!r}: {one_line(e)}"
        ) from e
    if config.device == "cuda" and session.get_providers()[0] != "CUDAExecutionProvider":
        raise BackendUnavailableError(
            f"CUDA requested but the session runs on {session.get_providers()}; "
            "check the CUDA and cuDNN libraries that onnxruntime-gpu needs."
        )
    return session


@functools.cache
def _register_shared_arena(ort: ModuleType) -> None:
    """Register one CPU arena for this process that sessions opt into with :data:`USE_ENV_ALLOCATORS`.

    Inside a model every layer allocates its scratch buffers (im2col, packing) from the session's one
    arena, so a layer finds them where the previous layer left them, in cache. Cold copies of a brick
    each with an arena of their own would cycle as many scratch buffers as copies: a ResNet-50 3x3
    convolution (256 channels at 14x14, 1.8 MB of im2col) ran in 1.33 ms so, 1.23 ms with the copies on
    one arena, 1.19 ms inside the model (exploratory script, one run each).
    """
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, None)


def _session_options(ort: ModuleType, config: OrtConfig) -> Any:
    """SessionOptions carrying the threads, mode, optimization level, spinning and arena."""
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    modes = {
        "sequential": ort.ExecutionMode.ORT_SEQUENTIAL,
        "parallel": ort.ExecutionMode.ORT_PARALLEL,
    }
    options = ort.SessionOptions()
    if not _use_global_pools(ort, options, config):
        options.intra_op_num_threads = config.intra_op_num_threads
        options.inter_op_num_threads = config.inter_op_num_threads
    options.execution_mode = modes[config.execution_mode]
    options.graph_optimization_level = levels[config.graph_optimization_level]
    options.enable_cpu_mem_arena = config.enable_cpu_mem_arena
    options.log_severity_level = 3
    spin = "1" if config.allow_spinning else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    return options


def uses_global_pools(config: OrtConfig) -> bool:
    """Whether a worker for ``config`` shares its thread pools across sessions (see ``worker_env``)."""
    return config.allow_spinning and config.device == "cpu" and (
        config.intra_op_num_threads != 1 or config.inter_op_num_threads != 1
    )


@functools.cache
def _global_pools(ort: ModuleType, sizes: str) -> tuple[int, int]:
    """Create this process's global thread pools once, from ``"intra,inter"``."""
    intra, inter = (int(n) for n in sizes.split(","))
    ort.set_global_thread_pool_sizes(intra, inter)
    return intra, inter


def _use_global_pools(ort: ModuleType, options: Any, config: OrtConfig) -> bool:
    """Point ``options`` at the process's global pools if this process has them (a worker set up
    by :meth:`OrtBackend.worker_env`); refuse a configuration with other thread counts there."""
    sizes = os.environ.get(THREAD_POOLS_ENV)
    if not sizes:
        return False
    pools = _global_pools(ort, sizes)
    if pools != (config.intra_op_num_threads, config.inter_op_num_threads) or not uses_global_pools(config):
        raise BackendError(
            f"This worker runs on shared thread pools of {pools[0]} intra-op and {pools[1]} inter-op "
            f"threads ({THREAD_POOLS_ENV}={sizes}); measure configuration {config.config_id} in its own "
            "worker (a Runner per configuration)."
        )
    options.use_per_session_threads = False
    return True


def _providers(config: OrtConfig) -> list[Any]:
    """The provider list: CPU alone, or CUDA with its options (and this process's stream, where the
    driver can be reached: :func:`~dlbricks.generators._cuda.cuda_probe`) then CPU as fallback."""
    if config.device == "cpu":
        return ["CPUExecutionProvider"]
    cuda_options = {
        "device_id": str(config.device_id),
        "cudnn_conv_algo_search": config.cudnn_conv_algo_search,
        **dict(config.provider_options),
    }
    probe = cuda_probe(config.device_id)
    if probe is not None:  # the stream whose runs the probe times (queue_times)
        cuda_options["user_compute_stream"] = str(probe.stream_handle)
    return [("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"]


def _is_brick(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is a dlbricks brick (it carries its signature), not a whole model."""
    return any(p.key == SIGNATURE_KEY for p in model.metadata_props)


def session_copies(model: onnx.ModelProto, outputs: list[Any], config: OrtConfig) -> int:
    """Sessions of ``model`` that ``prepare`` runs round-robin: :func:`cold_copies` for a brick in a
    cold state on the CPU (1 for a brick with less than :data:`MIN_COLD_WEIGHT_BYTES` of weights in
    ``"cold-weights"``), :data:`CUDA_COPIES` on CUDA, else 1."""
    if config.cache not in ("cold", "cold-weights") or not _is_brick(model):
        return 1
    if config.device != "cpu":
        return CUDA_COPIES
    if config.cache == "cold-weights" and weight_bytes(model) < MIN_COLD_WEIGHT_BYTES:
        return 1
    return cold_copies(model, outputs, span_bytes=cold_span_bytes(model, config.cold_span))


def cold_span_bytes(model: onnx.ModelProto, cold_span: str) -> int | None:
    """The bytes that the cold copies of brick ``model`` should span under ``cold_span``: what a run
    of its model touches (``"model"``, where the brick carries it), else None (the cache's rule)."""
    return reuse_bytes(model) if cold_span == "model" else None


def cold_copies(model: onnx.ModelProto, outputs: list[Any], llc_bytes: int | None = None,
                max_copies: int = MAX_COLD_COPIES, span_bytes: int | None = None) -> int:
    """Copies of a session whose weights and outputs together come nearest to spanning twice the
    smaller of the last-level cache and ``span_bytes`` (default: the cache): the span over the
    footprint of one copy, rounded to the nearest whole copy, between 1 and ``max_copies``.

    Rounding up instead overshot by up to a copy: ncf_ml20m's first Gemm (264 KB) cycled 4 copies,
    1.06 MB, for a span of 0.86 MB, past this machine's 1 MiB L2 cache, which the model's 0.43 MB run
    stays in (see "Enough copies" in docs/methodology.md).
    """
    llc = llc_bytes if llc_bytes is not None else last_level_cache_bytes()
    span = 2 * (llc if span_bytes is None else min(llc, span_bytes))
    footprint = max(weight_bytes(model) + sum(np.asarray(o).nbytes for o in outputs), 1)
    return int(min(max_copies, max(1, round(span / footprint))))


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of ``model``'s initializers (its weights), strings left out."""
    return sum(
        math.prod(t.dims) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        for t in model.graph.initializer
        if t.data_type != onnx.TensorProto.STRING
    )
