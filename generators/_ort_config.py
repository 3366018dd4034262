"""The configuration of the onnxruntime backend (:class:`OrtConfig`), apart from the backend
(:mod:`dlbricks.generators.ort`) so that what measures a brick's own session
(:mod:`dlbricks.generators.ort_kernels`) can take one without importing the backend.

onnxruntime is imported lazily, inside functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar

from dlbricks import InvalidArgumentError
from dlbricks.errors import BackendUnavailableError

from ._config import ConfigBase

__all__ = ["CACHE_STATES", "COLD_SPANS", "MEASUREMENT_METHOD", "OrtConfig", "installed_ort_version"]

DEVICES = ("cpu", "cuda")
EXECUTION_MODES = ("sequential", "parallel")
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
CUDNN_CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
CACHE_STATES = ("cold-weights", "cold", "warm")
#: How much data a brick's cold copies cycle through: what one run of the brick's model touches
#: (:attr:`~dlbricks.bricks.BrickInContext.reuse_bytes`), or twice the last-level cache.
COLD_SPANS = ("model", "cache")
#: Version of how bricks are measured, part of every :attr:`OrtConfig.config_id`: results measured
#: another way are another configuration, never mixed in one estimate. 1: each cold copy with its own
#: arena, at most 16 copies at level "all"; 2: the copies share one arena, one cap at every level; 3: the
#: copies span the data a run of the brick's model touches (``cold_span``); 4: the floor is extrapolated
#: to a call with no node (:mod:`dlbricks.generators.floor`); 5: a brick with less than
#: :data:`~dlbricks.generators.ort.MIN_COLD_WEIGHT_BYTES` of weights runs as one session in
#: ``cache="cold-weights"``; 6: the cold copies come nearest to their span rather than reach it
#: (:func:`~dlbricks.generators.ort.cold_copies`); 7: on a CPU the brick before a brick writes the
#: brick's first input (:meth:`~dlbricks.generators.ort.OrtPrepared._feed_from_previous`); 8: the copies
#: side by side that time a brick's repeat on an accelerator stay apart
#: (:data:`~dlbricks.generators.ort.KEEP_COPIES_APART`); 9: the brick before leaves alone a first input
#: that keeps its model's values (a masked Softmax's); 10: in chained rounds each input reads the
#: brick that writes it in the model and every output is placed by its lifetime in one block of
#: memory (:func:`~dlbricks.generators.ort.prepare_chain`); 11: chained rounds warm the chain with an
#: untimed pass, then read the weights deduplication took out of it, before its timed pass, and call a
#: brick whose occurrences share a weight at each of them (``RoundsBudget.warm_chain``,
#: :func:`~dlbricks.generators.rounds.sweeper`, :meth:`~dlbricks.Decomposition.schedule`); 12: a brick's
#: runs in rounds are taken at the whole model's speed in each round (:meth:`~dlbricks.generators.rounds.Rounds.speed_factors`), and a chained
#: round calls a brick at each use only where its uses read the same weights again; 13: a chained
#: brick's timed call follows a small matrix product that wakes the vector units (``ready``:
#: :func:`~dlbricks.generators.items.vector_warmup_model`); 14: a brick's figure from rounds is its mean
#: over the rounds whose bricks' sum is central, the same rounds for every brick, so that the bricks add
#: up to the model's ratio (:meth:`~dlbricks.generators.rounds.Rounds.central_weights`); 15: at level
#: "all" on a CPU a brick runs in the blocked layout its model's kernels pass to each other, without
#: the layout reorders at its edges (:func:`~dlbricks.generators.ort.native_brick`).
MEASUREMENT_METHOD = 15


def _ort() -> ModuleType:
    """Import onnxruntime, or say how to get it."""
    try:
        import onnxruntime
    except ImportError as e:
        raise BackendUnavailableError(
            f"onnxruntime cannot be imported ({e}); install it: pip install onnxruntime"
        ) from e
    return onnxruntime


def installed_ort_version() -> str:
    """The version of the onnxruntime that this process would use."""
    return str(_ort().__version__)


@dataclass(frozen=True, slots=True, kw_only=True)
class OrtConfig(ConfigBase):
    """A configuration of the onnxruntime backend.

    Parameters
    ----------
    device : {"cpu", "cuda"}, default "cpu"
        Execution provider: CPUExecutionProvider, or CUDAExecutionProvider (with CPU fallback for
        the ops CUDA lacks).
    intra_op_num_threads : int, default 1
        Threads inside an op (0 lets onnxruntime choose; 1 gives unimodal timings on small machines).
    inter_op_num_threads : int, default 1
        Threads across ops (used by ``execution_mode="parallel"``).
    execution_mode : {"sequential", "parallel"}, default "sequential"
    graph_optimization_level : {"disable", "basic", "extended", "all"}, default "disable"
    allow_spinning : bool, default True
        Whether idle pool threads spin (``session.intra_op/inter_op.allow_spinning``).
    enable_cpu_mem_arena : bool, default True
    device_id : int, default 0
        CUDA device ordinal.
    cudnn_conv_algo_search : {"EXHAUSTIVE", "HEURISTIC", "DEFAULT"}, default "EXHAUSTIVE"
        CUDA provider option.
    provider_options : mapping of str to str, default empty
        Further CUDA provider options, stored as a sorted tuple of pairs.
    cache : {"cold-weights", "cold", "warm"}, default "cold-weights"
        Cache state a *brick* meets (whole models always run one session again and again).
        ``"cold-weights"``: several copies of the brick's session, each with its own weights,
        sharing one input, one output and one arena, run round-robin, so that each run meets cold
        weights and a warm input and output, as a layer inside its model does. ``"cold"``: each copy
        its own output too. ``"warm"``: one session again and again (the lower bound's state). On
        CUDA a brick runs as one session (:data:`~dlbricks.generators.ort.CUDA_COPIES`). Why:
        methodology, "Cache state".
    cold_span : {"model", "cache"}, default "model"
        How much data the cold copies cycle through: what one run of the brick's model touches (its
        weights and live activations, carried by a :class:`~dlbricks.bricks.BrickInContext`), at most twice
        the last-level cache (``"model"``); or twice the last-level cache (``"cache"``).
    previous_layer : bool, default True
        With a cold ``cache``, run the brick before it in its model (carried by a
        :class:`~dlbricks.bricks.BrickInContext`) untimed before each timed run. Why: methodology, "The
        brick before".
    onnxruntime_version : str, default the installed version
        Part of the configuration: results of another version are another configuration.

    Examples
    --------
    >>> cfg = OrtConfig(graph_optimization_level="all")
    >>> cfg.to_dict()["graph_optimization_level"]
    'all'
    >>> len(cfg.config_id)
    16
    """

    backend: ClassVar[str] = "onnxruntime"
    measurement_method: ClassVar[int] = MEASUREMENT_METHOD

    device: str = "cpu"
    intra_op_num_threads: int = 1
    inter_op_num_threads: int = 1
    execution_mode: str = "sequential"
    graph_optimization_level: str = "disable"
    allow_spinning: bool = True
    enable_cpu_mem_arena: bool = True
    device_id: int = 0
    cudnn_conv_algo_search: str = "EXHAUSTIVE"
    provider_options: tuple[tuple[str, str], ...] = ()
    cache: str = "cold-weights"
    cold_span: str = "model"
    previous_layer: bool = True
    onnxruntime_version: str = field(default_factory=installed_ort_version)

    def __post_init__(self) -> None:
        if isinstance(self.provider_options, Mapping):
            pairs = tuple(sorted((str(k), str(v)) for k, v in self.provider_options.items()))
            object.__setattr__(self, "provider_options", pairs)
        problems = _config_problems(self)
        if problems:
            raise InvalidArgumentError("Invalid OrtConfig: " + "; ".join(problems) + ".")

    @property
    def threads(self) -> int:
        """Threads one run computes with (``intra_op_num_threads``)."""
        return self.intra_op_num_threads

    def to_dict(self) -> dict[str, Any]:
        """The configuration as a JSON-safe dict (``provider_options`` as a dict)."""
        data = ConfigBase.to_dict(self)
        data["provider_options"] = dict(self.provider_options)
        return data


def _config_problems(cfg: OrtConfig) -> list[str]:
    """Every rule that ``cfg`` breaks, as phrases naming the field and value."""
    problems = []
    choices = {
        "device": DEVICES,
        "execution_mode": EXECUTION_MODES,
        "graph_optimization_level": OPTIMIZATION_LEVELS,
        "cudnn_conv_algo_search": CUDNN_CONV_ALGO_SEARCHES,
        "cache": CACHE_STATES,
        "cold_span": COLD_SPANS,
    }
    for name, allowed in choices.items():
        value = getattr(cfg, name)
        if value not in allowed:
            options = ", ".join(repr(a) for a in allowed)
            problems.append(f"'{name}' must be one of {options}. Got {value!r} instead")
    for name in ("intra_op_num_threads", "inter_op_num_threads", "device_id"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"'{name}' must be an int >= 0. Got {value!r} instead")
    for name in ("allow_spinning", "enable_cpu_mem_arena", "previous_layer"):
        if not isinstance(getattr(cfg, name), bool):
            problems.append(f"'{name}' must be a bool. Got {getattr(cfg, name)!r} instead")
    if not isinstance(cfg.onnxruntime_version, str) or not cfg.onnxruntime_version:
        problems.append(f"'onnxruntime_version' must be a str. Got {cfg.onnxruntime_version!r} instead")
    pairs_ok = isinstance(cfg.provider_options, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
        for p in cfg.provider_options
    )
    if not pairs_ok:
        problems.append(f"'provider_options' must map str to str. Got {cfg.provider_options!r} instead")
    return problems
