"""The MXNet backend: configuration, executor bound once, CPU and GPU.

It runs models whose nodes are ``org.mxnet`` ONNX nodes: bricks cut from a model loaded with
:func:`dlbricks.load_mxnet` (``brick.to_onnx()``) and such whole models (``ModelGraph.to_onnx()``).
Each becomes an MXNet symbol (:func:`dlbricks.mxnet_bricks.model_to_symbol`) bound once to an
executor with its inputs, weights and outputs allocated once; a run is one ``forward(is_train=False)``
followed by ``wait_to_read`` on every output (MXNet's engine is asynchronous).

MXNet reads its engine, threading and oneDNN (MKLDNN) settings from environment variables when it is
imported, so the configuration lives in :meth:`MxnetBackend.worker_env`, which the worker sets
before importing anything. mxnet is imported lazily, inside functions.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import onnx

from dlbricks import InvalidArgumentError
from dlbricks.bricks import SIGNATURE_KEY, split_previous
from dlbricks.errors import BackendUnavailableError, UnrunnableBrickError
from dlbricks.inputs import ar1_noise
from dlbricks.mxnet_bricks import model_to_symbol, reorders_onednn_inputs, to_ndarray
from dlbricks.mxnet_frontend import first_line

from ._config import ConfigBase
from .inputs import random_inputs, statistics_array, value_statistics
from .items import floor_model
from ._ort_config import COLD_SPANS
from .ort import cold_copies, cold_span_bytes
from .util import CPU_ENV, closed, last_core, one_line, prepare_previous, round_robin

__all__ = [
    "MxnetBackend", "MxnetConfig", "MxnetPrepared", "activation_like", "installed_mxnet_version", "ENGINES"
]

CONTEXTS = ("cpu", "gpu")
ENGINES = ("ThreadedEnginePerDevice", "ThreadedEngine", "NaiveEngine")
CACHE_STATES = ("cold", "warm")
INPUT_KINDS = ("model", "activations", "normal")
#: Correlation of neighbouring values along the innermost axis of "activations" inputs: feature maps
#: after convolutions in Gluon CNNs change sign between neighbours about 25% of the time (measured
#: on mobilenetv2_1.0), which an AR(1) process with this coefficient reproduces.
ACTIVATION_CORRELATION = 0.75
#: Version of how bricks are measured, part of every :attr:`MxnetConfig.config_id` (as
#: :attr:`dlbricks.generators.OrtConfig.measurement_method` for onnxruntime). 1: each cold copy with its
#: own outputs; 2: the copies share the first executor's memory, as a model's layers share its pool,
#: and cycle through up to INPUT_VARIANTS input draws; 3: the copies span the data a run of the
#: brick's model touches (``cold_span``); 4: the floor is extrapolated to a call with no node; 5: the
#: cold copies come nearest to their span rather than reach it (``_ort.cold_copies``); 6: inputs in
#: oneDNN's layout of ops that reorder them are written again before each timed run; 7: a brick's
#: runs in rounds are taken at the whole model's speed in each round; 8: a brick's figure from rounds is
#: its mean over the rounds whose bricks' sum is central (``Rounds.central_weights``).
MEASUREMENT_METHOD = 8
#: Input draws that a brick's cold copies cycle through (feature-map inputs only), within
#: INPUT_VARIANT_BYTES together so that they stay in the cache: a kernel that branches on its data
#: (MXNet's clip) would otherwise learn an input it meets run after run, which inside a model it
#: cannot (docs/methodology.md, "MXNet bricks").
INPUT_VARIANTS = 8
INPUT_VARIANT_BYTES = 2 << 20
#: Seconds to leave after a run with more than one OpenMP thread before another worker times
#: anything (see :data:`dlbricks.generators.ort.IDLE_SPIN_S`): MXNet's OpenMP threads spin for a
#: while after a run (docs/methodology.md, "Several threads").
IDLE_SPIN_S = 0.02
_VARIANT_SEED_STRIDE = 7919
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def installed_mxnet_version() -> str:
    """The version of the installed mxnet package, read without importing it."""
    try:
        return metadata.version("mxnet")
    except metadata.PackageNotFoundError:
        for dist in ("mxnet-cu112", "mxnet-cu110", "mxnet-cu102", "mxnet-mkl"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    raise BackendUnavailableError(
        "mxnet is not installed; install the extra: pip install 'dlbricks[mxnet]' (Python 3.11, numpy<1.24)")


def _mx() -> ModuleType:
    """Import mxnet, or say how to get it."""
    try:
        import mxnet
    except ImportError as e:
        raise BackendUnavailableError(
            f"mxnet cannot be imported ({e}); install the extra: pip install 'dlbricks[mxnet]'") from e
    return mxnet


@dataclass(frozen=True, slots=True, kw_only=True)
class MxnetConfig(ConfigBase):
    """A configuration of the MXNet backend.

    Bricks are measured in the state a layer meets inside its model: cold weights, a warm input and
    output, the brick before it run just before, inputs drawn like the model's own tensors, the
    worker pinned to one core. ``docs/methodology.md`` ("MXNet bricks") gives the measurements
    behind each default.

    Parameters
    ----------
    context : {"cpu", "gpu"}, default "cpu"
    device_id : int, default 0
        GPU ordinal.
    mkldnn : bool, default True
        oneDNN (MKLDNN) kernels on CPU (``MXNET_MKLDNN_ENABLED``).
    fuse : bool, default False
        oneDNN graph fusion (``MXNET_SUBGRAPH_BACKEND=MKLDNN``: Convolution+BatchNorm+Activation
        run as one kernel in whole models). Off, every layer runs as its own kernel, as bricks do.
    engine : {"ThreadedEnginePerDevice", "ThreadedEngine", "NaiveEngine"}, default "ThreadedEnginePerDevice"
        ``MXNET_ENGINE_TYPE``; NaiveEngine runs every op synchronously in the calling thread.
    omp_threads : int, default 1
        Threads inside an op (``OMP_NUM_THREADS``, also MKL and OpenBLAS); 0 leaves them unset.
    worker_threads : int, default 1
        Engine threads running independent CPU ops in parallel (``MXNET_CPU_WORKER_NTHREADS``).
    inputs : {"model", "activations", "normal"}, default "model"
        Values a *brick* is fed (some kernels, such as ``clip``, run at a data-dependent speed).
        ``"model"``: each float input of rank >= 3 drawn with the statistics of the model's own
        tensor (:class:`~dlbricks.types.ValueStatistics`), ``"activations"`` where the brick carries
        none. ``"activations"``: standard normal values correlated along the innermost axis like a
        feature map (AR(1), :data:`ACTIVATION_CORRELATION`). ``"normal"``: i.i.d. standard normal.
        Whole models get i.i.d. standard normal inputs.
    model_layouts : bool, default True
        With oneDNN, feed each brick input in the layout it has in the model (the nodes'
        ``dlbricks_input_layouts``), so that a brick pays no reorder that the model does not; with
        ``cache="cold"``, a brick of an op without a oneDNN kernel, which reorders such an input on
        each call, has it written again, in that layout, before each timed run, as the layer before
        writes it inside the model.
    cache : {"cold", "warm"}, default "cold"
        Cache state a *brick* meets; whole models always run as users run them. ``"cold"``:
        executors of the brick, each with its own weights, sharing the first one's outputs and
        scratch memory, run round-robin, enough of them to span ``cold_span``; they cycle through up
        to :data:`INPUT_VARIANTS` draws of the input (within :data:`INPUT_VARIANT_BYTES`) so that a
        data-dependent kernel cannot learn it. ``"warm"``: one executor and one input again and
        again.
    cold_span : {"model", "cache"}, default "model"
        How much data the cold executors cycle through: what one run of the brick's model touches,
        at most twice the last-level cache (``"model"``), or twice the cache (``"cache"``); as
        :attr:`~dlbricks.generators.OrtConfig.cold_span`.
    previous_layer : bool, default True
        With ``cache="cold"``, each timed run of a brick that carries the brick before it in its
        model (a :class:`~dlbricks.bricks.BrickInContext`) follows an untimed run of that brick, on the
        same engine thread.
    pin_core : bool, default True
        With one OpenMP thread and one engine worker thread on CPU, run the worker process and its
        threads on one core (the last core this process may use), so that the engine's handoff of
        each op between threads does not depend on where the scheduler put them.
    mxnet_version : str, default the installed version

    Examples
    --------
    >>> cfg = MxnetConfig(mxnet_version="1.9.1")
    >>> cfg.worker_env()["MXNET_SUBGRAPH_BACKEND"]
    'NONE'
    >>> len(cfg.config_id)
    16
    """

    backend: ClassVar[str] = "mxnet"
    measurement_method: ClassVar[int] = MEASUREMENT_METHOD

    context: str = "cpu"
    device_id: int = 0
    mkldnn: bool = True
    fuse: bool = False
    engine: str = "ThreadedEnginePerDevice"
    omp_threads: int = 1
    worker_threads: int = 1
    inputs: str = "model"
    model_layouts: bool = True
    cache: str = "cold"
    cold_span: str = "model"
    previous_layer: bool = True
    pin_core: bool = True
    mxnet_version: str = field(default_factory=installed_mxnet_version)

    def __post_init__(self) -> None:
        problems = _config_problems(self)
        if problems:
            raise InvalidArgumentError("Invalid MxnetConfig: " + "; ".join(problems) + ".")

    @property
    def device(self) -> str:
        """What it computes on: ``context`` (``"cpu"`` or ``"gpu"``)."""
        return self.context

    @property
    def threads(self) -> int:
        """Threads one run computes with (``omp_threads``)."""
        return self.omp_threads

    def worker_env(self) -> dict[str, str]:
        """The environment variables that MXNet reads at import time for this configuration."""
        env = {
            "MXNET_ENGINE_TYPE": self.engine,
            "MXNET_MKLDNN_ENABLED": "1" if self.mkldnn else "0",
            "MXNET_SUBGRAPH_BACKEND": "MKLDNN" if self.fuse and self.mkldnn else "NONE",
            "MXNET_CPU_WORKER_NTHREADS": str(self.worker_threads),
            "MXNET_SUBGRAPH_VERBOSE": "0",
            "MXNET_STORAGE_FALLBACK_LOG_VERBOSE": "0",
        }
        if self.omp_threads:
            env.update({name: str(self.omp_threads) for name in THREAD_ENV_VARS})
        if self.pin_core and self.context == "cpu" and self.omp_threads == 1 and self.worker_threads == 1:
            env[CPU_ENV] = str(last_core())
        return env


def _config_problems(cfg: MxnetConfig) -> list[str]:
    """Every rule that ``cfg`` breaks, as phrases naming the field and value."""
    problems = []
    choices = {"context": CONTEXTS, "engine": ENGINES, "cache": CACHE_STATES, "inputs": INPUT_KINDS,
               "cold_span": COLD_SPANS}
    for name, allowed in choices.items():
        value = getattr(cfg, name)
        if value not in allowed:
            options = ", ".join(repr(a) for a in allowed)
            problems.append(f"'{name}' must be one of {options}. Got {value!r} instead")
    for name in ("device_id", "omp_threads"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"'{name}' must be an int >= 0. Got {value!r} instead")
    if isinstance(cfg.worker_threads, bool) or not isinstance(cfg.worker_threads, int) or cfg.worker_threads < 1:
        problems.append(f"'worker_threads' must be an int >= 1. Got {cfg.worker_threads!r} instead")
    for name in ("mkldnn", "fuse", "model_layouts", "previous_layer", "pin_core"):
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"'{name}' must be a bool. Got {getattr(cfg, name)!r} instead")
    if not isinstance(cfg.mxnet_version, str) or not cfg.mxnet_version:
        problems.append(f"'mxnet_version' must be a non-empty str. Got {cfg.mxnet_version!r} instead")
    return problems


class MxnetPrepared:
    """Executors bound once (each with its weights; memory and a few input draws shared), run
    round-robin.

    Attributes
    ----------
    executors : list of mx.executor.Executor
    copies : int
        Executors run round-robin (1 unless ``cache="cold"`` and the model is a brick).
    run : callable
        One synchronous run: forward, then wait until every output is written.
    previous : MxnetPrepared or None
        The brick that runs before this one in its model, prepared warm; when present, ``prime``
        (its run) is what the harness calls untimed before each timed run.
    written : sequence of mappings, optional
        Per input draw, the oneDNN-layout inputs to write again before each timed run: name ->
        (source, bound array). ``prime`` then also copies the sources of the executor that runs
        next into its bound inputs.
    empty : MxnetPrepared or None
        The floor's one-node model, prepared beside a brick on a CPU; its run is ``empty``, which the
        harness times after each of the brick's samples
        (:func:`~dlbricks.generators.harness.paired_empty`).
    """

    def __init__(self, executors: list[Any], keep: list[Any], previous: MxnetPrepared | None = None,
                 written: Sequence[Mapping[str, tuple[Any, Any]]] = (), empty: MxnetPrepared | None = None) -> None:
        self.executors = executors
        self.copies = len(executors)
        self._keep = keep  # the bound arrays
        self.previous = previous
        self.empty_model = empty
        if empty is not None:
            self.empty: Callable[[], object] = empty.run
        if not any(written):
            self.run: Callable[[], object] = round_robin([_one_run(e) for e in executors])
            if previous is not None:
                self.prime: Callable[[], object] = previous.run
            return
        runs = [_one_run(e) for e in executors]
        upcoming = [0]  # the executor that runs next; executor i reads input draw i % len(written)

        def run() -> None:
            i = upcoming[0]
            upcoming[0] = (i + 1) % len(runs)
            runs[i]()

        def prime() -> None:
            if previous is not None:
                previous.run()
            _write_inputs(written[upcoming[0] % len(written)])

        self.run = run
        self.prime = prime

    def outputs(self) -> list[np.ndarray]:
        """The outputs of the first executor's last run, as numpy arrays."""
        return [o.asnumpy() for o in self.executors[0].outputs]

    def close(self) -> None:
        """Release the executors and their arrays."""
        self.executors = []
        self._keep = []
        self.run = closed
        if self.previous is not None:
            self.previous.close()
            self.previous = None
        if hasattr(self, "prime"):
            self.prime = closed
        if self.empty_model is not None:
            self.empty_model.close()
            self.empty_model = None
            self.empty = closed


def _write_inputs(arrays: Mapping[str, tuple[Any, Any]]) -> None:
    """Copy each source into its bound input (both in oneDNN's blocked layout, which the copy keeps),
    and wait: the input a layer reads inside a model was just written by the layer before it."""
    for source, bound in arrays.values():
        source.copyto(bound)
    for _, bound in arrays.values():
        bound.wait_to_read()


def _one_run(executor: Any) -> Callable[[], None]:
    """``forward(is_train=False)`` and ``wait_to_read`` of each output, through MXNet's C API.

    ``Executor.forward`` also rebuilds its output list on every call; the executor's output arrays
    do not change between runs, so their handles are taken once.
    """
    from mxnet.base import _LIB, check_call

    forward = _LIB.MXExecutorForward
    wait = _LIB.MXNDArrayWaitToRead
    handle = executor.handle
    inference = ctypes.c_int(0)
    outputs = [o.handle for o in executor.outputs]

    def run() -> None:
        check_call(forward(handle, inference))
        for out in outputs:
            check_call(wait(out))

    return run


class MxnetBackend:
    """The MXNet backend (CPU with or without oneDNN, and GPU).

    Examples
    --------
    >>> MxnetBackend().name
    'mxnet'
    """

    name = "mxnet"

    def default_config(self) -> MxnetConfig:
        """``MxnetConfig()``: CPU, one thread, oneDNN kernels, no fusion, cold bricks."""
        return MxnetConfig()

    def config_from_dict(self, data: Mapping[str, Any]) -> MxnetConfig:
        """Rebuild an :class:`MxnetConfig` from its dict."""
        return MxnetConfig.from_dict(data)

    def check(self, config: Any) -> None:
        """Raise if ``config`` is not an :class:`MxnetConfig` that can run with this mxnet."""
        if not isinstance(config, MxnetConfig):
            raise InvalidArgumentError(
                f"The mxnet backend needs an MxnetConfig. Got {type(config).__name__} instead.")
        installed = installed_mxnet_version()
        if config.mxnet_version != installed:
            raise BackendUnavailableError(
                f"The MxnetConfig is for mxnet {config.mxnet_version} but {installed} is installed; "
                f"rebuild the config to measure here.")
        if config.context == "gpu":
            mx = _mx()
            if mx.context.num_gpus() <= config.device_id:
                raise BackendUnavailableError(
                    f"GPU {config.device_id} requested but mxnet sees {mx.context.num_gpus()} GPUs; install "
                    f"a CUDA build of mxnet (mxnet-cu112) on a machine with a GPU.")

    def worker_env(self, config: Any) -> dict[str, str]:
        """Engine, oneDNN and thread variables, set in a worker before it imports mxnet."""
        return config.worker_env()

    def idle_spin_s(self, config: Any) -> float:
        """How long the OpenMP threads spin after a run (:data:`IDLE_SPIN_S` with more than one thread
        on the CPU, nothing with one)."""
        return IDLE_SPIN_S if config.context == "cpu" and config.omp_threads != 1 else 0.0

    def describe(self, config: Any) -> dict[str, Any]:
        """Version, build features, the environment that this process runs under, the configuration."""
        mx = _mx()
        features = [f.name for f in mx.runtime.Features().values() if f.enabled]
        return {
            "backend": self.name,
            "version": mx.__version__,
            "features": features,
            "environment": {k: os.environ.get(k) for k in config.worker_env()},
            "config": config.to_dict(),
            "config_id": config.config_id,
        }

    def prepare(self, model: onnx.ModelProto, config: Any, *, timed: bool = True) -> MxnetPrepared:
        """Build the symbol, draw random inputs, bind executors once, run once; beside a brick that
        will be ``timed`` on a CPU, the floor's one-node model too (``empty``), as the onnxruntime
        backend does. The brick before a brick is prepared untimed: it only runs before each timed run.

        Raises
        ------
        UnrunnableBrickError
            If the model is not an MXNet model (``org.mxnet`` nodes) or MXNet cannot run it.
        """
        self.check(config)
        _warn_environment(config)
        mx = _mx()
        model, before = split_previous(model)
        built = model_to_symbol(model)
        brick = _is_brick(model)
        ctx = mx.gpu(config.device_id) if config.context == "gpu" else mx.cpu()
        drawn = random_inputs(model, list(built.input_names))
        variants = [drawn]
        if brick and config.inputs != "normal":
            count = _input_variants(drawn) if config.cache == "cold" else 1
            variants = [_feature_maps(model, drawn, config.inputs, v) for v in range(count)]
        onednn = brick and config.model_layouts and config.mkldnn and config.context == "cpu"
        plain = [{k: to_ndarray(mx, v, ctx) for k, v in arrays.items()} for arrays in variants]
        inputs = [_bound_inputs(mx, arrays, built.input_layouts if onednn else {}) for arrays in plain]
        first = _bind(mx, built, inputs[0], ctx, model)
        executors = [first]
        if config.cache == "cold" and brick:
            outputs = [o.asnumpy() for o in first.outputs]
            copies = cold_copies(model, outputs, span_bytes=cold_span_bytes(model, config.cold_span))
            executors += [_bind(mx, built, inputs[i % len(inputs)], ctx, model, shared=first)
                          for i in range(1, copies)]
        previous = None
        if brick and config.cache == "cold" and config.previous_layer:
            previous = prepare_previous(partial(self.prepare, timed=False), before, config)
        written = [{k: (_to_onednn(mx, arrays[k]), v) for k, v in bound.items()
                    if built.input_layouts.get(k) == "onednn" and v is not arrays[k]}
                   for arrays, bound in zip(plain, inputs, strict=True)
                   ] if onednn and config.cache == "cold" and reorders_onednn_inputs(model) else []
        empty = self.prepare(floor_model(), config) if timed and brick and config.context == "cpu" else None
        return MxnetPrepared(executors, inputs, previous, written, empty)

    def config_from_options(self, *, threads: int | None = None, opt_level: str | None = None,
                            device: str | None = None) -> MxnetConfig:
        """The configuration of a command's ``--threads`` (``omp_threads``) and ``--device`` (``cuda``:
        the gpu context); None leaves the default.

        Raises
        ------
        InvalidArgumentError
            For an ``opt_level`` (onnxruntime's levels; MXNet fuses with ``fuse``).
        """
        if opt_level is not None:
            raise InvalidArgumentError(f"--opt-level is onnxruntime's graph optimization level; the mxnet backend "
                                       f"has none (its oneDNN fusion is --sweep fuse=1): leave out --opt-level "
                                       f"{opt_level}.")
        given = {"omp_threads": threads, "context": None if device is None else ("gpu" if device == "cuda" else device)}
        return MxnetConfig(**{k: v for k, v in given.items() if v is not None})


def _input_variants(arrays: Mapping[str, np.ndarray]) -> int:
    """How many input draws a brick's cold copies cycle through: :data:`INPUT_VARIANTS`, fewer
    where they would not fit :data:`INPUT_VARIANT_BYTES` together."""
    size = max(sum(a.nbytes for a in arrays.values()), 1)
    return int(max(1, min(INPUT_VARIANTS, INPUT_VARIANT_BYTES // size)))


def _bound_inputs(mx: ModuleType, arrays: Mapping[str, Any], layouts: Mapping[str, str]) -> dict[str, Any]:
    """``arrays`` (NDArrays), those that ``layouts`` marks ``"onednn"`` in that layout."""
    return {k: _to_onednn(mx, v) if layouts.get(k) == "onednn" else v for k, v in arrays.items()}


def _feature_maps(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray], kind: str,
                  variant: int = 0) -> dict[str, np.ndarray]:
    """``arrays`` redrawn as feature maps: with their in-model statistics (``kind == "model"``,
    where the brick carries them), else :func:`activation_like`; each ``variant`` another draw."""
    stats = value_statistics(model) if kind == "model" else {}
    out = {}
    for i, (name, array) in enumerate(arrays.items()):
        seed = i + _VARIANT_SEED_STRIDE * variant
        if name in stats and np.issubdtype(array.dtype, np.floating):
            out[name] = statistics_array(array.shape, array.dtype, stats[name], np.random.default_rng(seed))
        else:
            out[name] = activation_like(array, seed=seed)
    return out


def activation_like(array: np.ndarray, seed: int = 0, rho: float = ACTIVATION_CORRELATION) -> np.ndarray:
    """``array``'s shape and dtype filled like a feature map: standard normal values, correlated
    ``rho`` with their neighbour along the innermost axis. Other arrays are returned unchanged."""
    if array.ndim < 3 or not np.issubdtype(array.dtype, np.floating):
        return array
    return ar1_noise(array.shape, rho, np.random.default_rng(seed)).astype(array.dtype)


def _to_onednn(mx: ModuleType, array: Any) -> Any:
    """The same values in the blocked layout a oneDNN convolution writes (4-D and 5-D float32).

    An identity 1x1 convolution computes it exactly (each output is one input times 1.0); other
    arrays are returned unchanged.
    """
    if array.ndim not in (4, 5) or array.dtype != np.float32:
        return array
    channels = array.shape[1]
    kernel = (1,) * (array.ndim - 2)
    eye = np.eye(channels, dtype=np.float32).reshape(channels, channels, *kernel)
    out = mx.nd.Convolution(array, to_ndarray(mx, eye, array.context), kernel=kernel,
                            num_filter=channels, no_bias=True)
    out.wait_to_read()
    return out


def _bind(mx: ModuleType, built: Any, inputs: Mapping[str, Any], ctx: Any, model: onnx.ModelProto,
          shared: Any = None) -> Any:
    """One executor with its own weights, the shared ``inputs``, run once.

    With ``shared`` (an executor of the same symbol) its outputs and scratch memory are
    ``shared``'s (``bind(shared_exec=...)``), as a model's layers share their executor's memory
    pool; without, its own.
    """
    args = dict(inputs)
    args.update({k: to_ndarray(mx, v, ctx) for k, v in built.arg_params.items()})
    aux = {k: to_ndarray(mx, v, ctx) for k, v in built.aux_params.items()}
    try:
        executor = built.symbol.bind(ctx, args=args, aux_states=aux, grad_req="null", shared_exec=shared)
        executor.forward(is_train=False)
        for out in executor.outputs:
            out.wait_to_read()
    except mx.base.MXNetError as e:
        raise UnrunnableBrickError(f"mxnet cannot run model {model.graph.name!r}: {first_line(e)}") from e
    except Exception as e:  # MXNet raises untyped errors from bind's argument checks
        raise UnrunnableBrickError(f"mxnet cannot bind model {model.graph.name!r}: {one_line(e)}") from e
    return executor


def _is_brick(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is a dlbricks brick (it carries its signature), not a whole model."""
    return any(p.key == SIGNATURE_KEY for p in model.metadata_props)


_warned: set[str] = set()


def _warn_environment(config: MxnetConfig) -> None:
    """Warn once per configuration if this process does not run under its environment.

    MXNet read these variables when it was imported; a measurement taken in-process (``measure``)
    under other values does not measure ``config``. Workers always run under it.
    """
    wrong = {k: v for k, v in config.worker_env().items() if os.environ.get(k) != v and "VERBOSE" not in k}
    if wrong and config.config_id not in _warned:
        _warned.add(config.config_id)
        first = next(iter(wrong))
        warnings.warn(
            f"This process runs mxnet with {first}={os.environ.get(first)!r}, not {wrong[first]!r} as the "
            f"MxnetConfig says; measure in a worker (dlbricks.generators.benchmark) or set the variables "
            f"before importing mxnet.", RuntimeWarning, stacklevel=3)
