"""The library entry points: benchmark many items in a worker, or measure one in-process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import onnx

from dlbricks import InvalidArgumentError

from ._registry import get_backend
from .budget import Budget
from .harness import Clock, measure_model
from .items import Item, resolve_item
from .measurement import Measurement
from .protocols import Backend, BackendConfig
from .runner import Runner, resolve_config

__all__ = ["ProgressCallback", "benchmark", "calibrate_floor", "measure"]

ProgressCallback = Callable[[int, int, Measurement], object]
"""Called as ``progress(done, total, measurement)`` after each item."""


def benchmark(
    items: Iterable[Any],
    backend: str = "onnxruntime",
    config: BackendConfig | Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    progress: ProgressCallback | None = None,
    keep_samples: bool = False,
    repeat: bool = True,
) -> Iterator[Measurement]:
    """Measure each item in an isolated worker subprocess; yield one measurement per item, in order.

    The floor of the configuration is calibrated once, before the first item, and recorded in every
    measurement. An item that raises, crashes the worker or exceeds ``budget.timeout`` is yielded
    with ``status`` ``"failed"`` or ``"timeout"`` and the reason; the worker is replaced and the
    batch goes on.

    Parameters
    ----------
    items : iterable
        ``onnx.ModelProto`` (keyed by the SHA-256 of its bytes), serialized model ``bytes``, or
        :class:`~dlbricks.generators.protocols.Benchmarkable` objects (``key`` and ``to_onnx()``, such as
        ``dlbricks.Brick``). The iterable is read in full at once, to validate it and count it.
    backend : str, default "onnxruntime"
        A registered backend name or a ``"module:attr"`` import path.
    config : BackendConfig or mapping, optional
        Default: the backend's default configuration (``OrtConfig()``).
    budget : Budget, optional
        Default: ``Budget()``.
    progress : callable, optional
        ``progress(done, total, measurement)`` after each item.
    keep_samples : bool, default False
        Keep raw per-call samples in ``Measurement.samples_s``.
    repeat : bool, default True
        On an accelerator, also time copies of each brick side by side (``repeat_s``; see
        :class:`~dlbricks.generators.runner.Runner`).

    Returns
    -------
    iterator of Measurement

    Raises
    ------
    InvalidArgumentError
        At once, if an item, the backend, the configuration or the budget is not valid.
    BackendUnavailableError
        At once, if the configuration cannot run here (e.g. CUDA without CUDAExecutionProvider).

    Examples
    --------
    >>> from dlbricks.generators import Budget, benchmark
    >>> from dlbricks.generators.items import floor_model
    >>> [m.status for m in benchmark([floor_model()], budget=Budget.quick())]
    ['ok']
    """
    resolved = [resolve_item(item, i) for i, item in enumerate(items)]
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(f"'progress' must be callable. Got {type(progress).__name__} instead.")
    runner = Runner(backend, config, budget, keep_samples=keep_samples, repeat=repeat)
    return _run_all(runner, resolved, progress)


def _run_all(runner: Runner, items: list[Item], progress: ProgressCallback | None) -> Iterator[Measurement]:
    """Measure ``items`` with ``runner``, closing its worker however the iteration ends."""
    try:
        for done, item in enumerate(items, start=1):
            measurement = runner.measure(item)
            if progress is not None:
                progress(done, len(items), measurement)
            yield measurement
    finally:
        runner.close()


def calibrate_floor(
    config: BackendConfig | Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    *,
    backend: str = "onnxruntime",
) -> Measurement:
    """Measure the floor of a configuration in a worker subprocess, like any other item.

    The floor is the per-call time of an empty model (Identity on a 1-element tensor); its
    ``median_s`` (also in ``floor_s``) is what :func:`benchmark` records with every measurement.
    """
    with Runner(backend, config, budget) as runner:
        return runner.floor()


def measure(
    item: Any,
    backend: str | Backend = "onnxruntime",
    config: BackendConfig | Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    *,
    keep_samples: bool = False,
    floor_s: float | None = None,
    clock: Clock = time.perf_counter_ns,
) -> Measurement:
    """Measure one item in this process, without isolation (errors of the backend propagate).

    Useful for tests (with a fake backend and a fake ``clock``) and for overhead studies; batches
    should use :func:`benchmark`, which survives crashes and hangs.
    """
    resolved = resolve_item(item)
    backend_obj = get_backend(backend) if isinstance(backend, str) else backend
    config_obj = resolve_config(backend_obj, config)
    backend_obj.check(config_obj)
    budget = Budget() if budget is None else budget
    model = onnx.load_from_string(resolved.load())
    measurement, _ = measure_model(
        model,
        resolved.key,
        backend_obj,
        config_obj,
        budget,
        floor_s=floor_s,
        keep_samples=keep_samples,
        clock=clock,
    )
    return measurement
