"""The boundaries of the generators stage: what a backend, a configuration and an item look like.

Backends are plain objects that satisfy :class:`Backend`; nothing has to inherit from anything.
A backend turns an ONNX model and a configuration into a :class:`Prepared` model that runs once per
call. The harness times ``Prepared.run`` and never looks inside a backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import onnx

__all__ = ["Backend", "BackendConfig", "Benchmarkable", "Prepared"]


@runtime_checkable
class BackendConfig(Protocol):
    """A frozen, hashable configuration of a backend (threads, device, optimization level...).

    ``backend`` names the registered backend that runs it, ``device`` what it computes on
    (``"cpu"``, or an accelerator: ``"cuda"``, ``"gpu"``), ``threads`` how many threads one run
    computes with. :class:`~dlbricks.generators._config.ConfigBase` gives a frozen dataclass the rest.
    """

    backend: str
    device: str
    threads: int

    @property
    def config_id(self) -> str:
        """A stable hash of everything in the configuration, library version included."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict that ``Backend.config_from_dict`` turns back into the same config."""
        ...


@runtime_checkable
class Prepared(Protocol):
    """A model made runnable by a backend: inputs and outputs bound once, ready to be timed.

    Two optional attributes change how the harness times it: ``relocate()`` (bind the buffers
    elsewhere; the samples are spread over several placements) and ``prime()`` (an untimed step
    before each timed call, e.g. the run of the layer before a brick in its model).
    """

    def run(self) -> None:
        """Run the model once (synchronously: the work is finished when this returns)."""
        ...

    def close(self) -> None:
        """Release the session and its buffers."""
        ...


@runtime_checkable
class Backend(Protocol):
    """A runtime that can prepare an ONNX model for a configuration and run it.

    Attributes
    ----------
    name : str
        The name stored with every measurement, e.g. ``"onnxruntime"``.
    view_ops : frozenset of str, optional
        Op types that the runtime runs inside a model as a view of their input, moving no data
        (onnxruntime's ``Reshape``...), where a brick of them, bound to an output of its own, copies
        its input: the estimator counts such bricks as free. Default: none.

    Optional methods, for runtimes whose bricks run work of their own that the model does not:
    ``brick_overhead_s(item, config, run_s) -> float | None``, seconds of such work in one run of a
    brick whose run took ``run_s`` seconds beyond the floor (``populate`` passes the timed median less
    the floor and stores the result with the measurement; the estimator subtracts it), and
    ``calibrate_reorders(config) -> (sizes, seconds_per_byte) | None``, the price of the model's
    own layout reorders (stored per configuration; the estimator adds them once per run); and
    ``idle_spin_s(config) -> float``, how long a worker's threads keep a core busy after a run
    (a :class:`~dlbricks.generators.runner.Runner` waits that long after another runner's reply before it
    times anything, so that one worker's spinning threads do not slow the next one's runs).

    Optional members that the command line and the estimator ask of a backend, so that none of them
    decides by a runtime's name (a new runtime is one module and one registry line):

    - ``config_from_options(*, threads=None, opt_level=None, device=None) -> BackendConfig``: the
        configuration of a command's ``--threads``, ``--opt-level`` and ``--device`` (None: the
        backend's default for that option); raises ``InvalidArgumentError`` for an option the runtime
        does not have (an optimization level where it has none, a device it cannot use). A backend
        without it takes no such option: its ``default_config()`` is used.
    - ``model_formats``: a frozenset of the model formats (``ModelSource.format``: ``"onnx"``,
        ``"mxnet"``) whose bricks it runs. Default: the format whose default runtime it is, else
        ``{"onnx"}``.
    - ``check_brick(brick) -> str | None``: None if the runtime can run ``brick`` (a
        :class:`Benchmarkable`), else the reason in one line (``dlbricks decompose --check``).
        Default: onnxruntime's check of the brick's model.
    - ``profile_kernels(model, config, feeds, *, runs, warmup) -> list[tuple[str, str, tuple[str, ...], float]]``:
        the kernels one run of the ONNX ``model`` executes under ``config`` with inputs ``feeds``, as
        ``(kernel, op type, nodes, seconds)``: each kernel's median time over ``runs`` runs after
        ``warmup``, with the names of the nodes of ``model`` it runs (several for a fused kernel, none
        for a kernel the runtime added; a layout reorder it added has op type ``"Reorder"``): the
        in-model times that ``dlbricks validate --per-brick`` sets beside each brick.
    - ``graph_config(config) -> BackendConfig | None``: ``config`` with a whole model captured in a
        device graph and replayed (onnxruntime's CUDA graphs), whose latency the estimator sets beside
        its graph estimate (``validate --cuda-graph``); None where the runtime or device has none.
        Default: none.
    - ``fusion_runtime``: the runtime whose executed kernels the backend's fused bricks are
        (``decompose(..., "fused", runtime=...)``, e.g. ``"openvino"``). Default: onnxruntime's
        groups at the configuration's optimization level.
    """

    name: str

    def default_config(self) -> BackendConfig:
        """The configuration used when the caller gives none."""
        ...

    def config_from_dict(self, data: Mapping[str, Any]) -> BackendConfig:
        """Rebuild a configuration from ``config.to_dict()`` (raises ``InvalidArgumentError``)."""
        ...

    def check(self, config: BackendConfig) -> None:
        """Raise ``InvalidArgumentError`` or ``BackendUnavailableError`` if ``config`` cannot run here."""
        ...

    def worker_env(self, config: BackendConfig) -> dict[str, str]:
        """Environment variables to set in a worker before it imports the runtime."""
        ...

    def prepare(self, model: onnx.ModelProto, config: BackendConfig) -> Prepared:
        """Build a session for ``model`` under ``config``, with inputs and outputs bound once."""
        ...

    def describe(self, config: BackendConfig) -> dict[str, Any]:
        """A JSON-safe description of the runtime and configuration (versions, providers...)."""
        ...


@runtime_checkable
class Benchmarkable(Protocol):
    """Anything with a stable key that can materialize itself as a standalone ONNX model.

    ``dlbricks.Brick`` and ``dlbricks.ModelGraph`` satisfy it: ``key`` is the brick signature (or
    the model key) and ``to_onnx()`` returns a model whose ``metadata_props`` may carry
    ``dlbricks.value_ranges``. One that holds its model serialized may also have ``onnx_bytes()``,
    which the workers are sent instead.
    """

    @property
    def key(self) -> str:
        """What is measured: a brick signature or a model key."""
        ...

    def to_onnx(self) -> onnx.ModelProto:
        """The standalone, runnable ONNX model."""
        ...
