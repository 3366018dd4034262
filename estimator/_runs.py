"""What an estimate checks before it predicts or measures anything: that its runtime runs the model at
the shapes given, and that the bricks it measures on demand can be measured.

An estimate is given only for a model that its runtime accepts at the shapes given
(:func:`check_runs`): no layer with an empty tensor, every layer loadable, and one run of the whole
model that finishes, within the time a measurement may take, in a worker subprocess. Where that run is
slow against the budget's timeout (a batch of 1500 images), the model's costliest bricks are also
measured once before anything is stored (:func:`probe_bricks`): a brick whose measurement cannot
finish at these shapes is refused up front, not stored as a failed brick.

Bricks measured on demand are measured through :func:`stop_on_failure`: the first brick that fails
stops the estimate, in one line naming it, and its failure is not stored. A brick of given shapes
that timed out or ran out of memory here failed for this machine and budget, not for what it is, and a
stored failure would be skipped by every later ``bench`` (``--retry-failed`` aside).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlbricks import BackendError, Decomposition, InvalidArgumentError, ModelGraph
from dlbricks.generators import Budget, Measurement
from dlbricks.generators.runner import Runner
from dlbricks.memory import shape_label

__all__ = ["PROBED_BRICKS", "PROBE_SHARE", "check_runs", "one_run", "probe_bricks", "stop_on_failure"]

#: One run of the whole model taking more than this share of the budget's timeout makes
#: :func:`check_runs` measure the model's costliest bricks once first: each brick is timed over at
#: least two runs of itself and of the brick before it, and a run of the model holds them all.
PROBE_SHARE = 0.25
#: Bricks :func:`probe_bricks` measures: the one with the most FLOPs and the one that moves the most bytes.
PROBED_BRICKS = 2
_TODO = "choose a smaller batch (batch_size=N) or smaller input_shapes"


def one_run(budget: Budget | None = None) -> Budget:
    """The budget of the run :func:`check_runs` makes of a whole model: one call, no warm-up, within
    ``budget``'s timeout (default :class:`~dlbricks.generators.Budget`'s, 60 s)."""
    timeout = (budget or Budget()).timeout
    return Budget(warmup_time=0.0, min_time=0.0, min_runs=1, max_time=timeout, rel_ci=1.0, timeout=timeout)


def check_runs(dec: Decomposition, graph: ModelGraph | None, config: Any, backend: str,
               budget: Budget | None = None, *, probe: bool = False) -> None:
    """Refuse a model that its runtime cannot run at the shapes given, before any of its bricks is
    predicted or measured: a layer whose tensors are empty at these shapes, a layer that onnxruntime
    cannot load (an op of a domain it does not know; the check ``decompose --check`` makes), or a
    model that fails, crashes or does not finish within ``budget``'s timeout when run once (in a
    worker subprocess: a channel count that does not match, a division by zero in a kernel, a batch
    too large to run in the time a measurement may take).

    Parameters
    ----------
    dec : Decomposition
        The model's bricks.
    graph : ModelGraph, optional
        The model to run once (None: a bare decomposition, checked brick by brick only).
    config : backend configuration
    backend : str
        The backend that runs ``config`` (only onnxruntime's models are run here).
    budget : Budget, optional
        The budget its bricks are measured under; its timeout bounds the run.
    probe : bool, default False
        Where the run takes more than :data:`PROBE_SHARE` of the timeout, also measure the costliest
        bricks once (:func:`probe_bricks`): for an estimate that measures bricks.

    Raises
    ------
    InvalidArgumentError
        Naming the model, the layer or the runtime's reason, and what to do.
    """
    for brick in dec.bricks.values():
        empty = next((s for s in (*brick.inputs, *brick.outputs) if 0 in s.shape), None)
        if empty is not None:
            raise InvalidArgumentError(
                f"model '{dec.model}' at these shapes gives its {brick.op_type} layer an empty tensor "
                f"({'x'.join(map(str, empty.shape))}): its runtime cannot run it, so nothing is estimated; "
                "give input shapes the model accepts (--input-shape, --batch-size).")
    if backend != "onnxruntime":
        return
    for brick in dec.bricks.values():
        reason = brick.check_runnable()
        if reason is not None:
            raise InvalidArgumentError(f"model '{dec.model}': its {brick.op_type} layer cannot run in onnxruntime "
                                       f"({reason}), so nothing is estimated or stored.")
    if graph is None:
        return
    limit = one_run(budget)
    with Runner(backend, config, limit, floor=False, keep_bytes=0) as runner:
        run = runner.measure(graph)
    if run.status == "timeout":
        raise InvalidArgumentError(
            f"one run of model '{dec.model}' at {shape_label(dec.inputs)} takes longer than the {limit.timeout:g} s "
            "a measurement may take, so its bricks cannot be measured at these shapes and nothing is estimated "
            f"or stored; {_TODO}.")
    if not run.ok:
        raise InvalidArgumentError(f"model '{dec.model}' does not run in onnxruntime at these shapes ({run.error}), "
                                   "so nothing is estimated or stored; give input shapes the model accepts "
                                   "(--input-shape, --batch-size).")
    if probe and (run.median_s or 0.0) > PROBE_SHARE * limit.timeout:
        probe_bricks(dec, config, backend, budget or Budget())


def probe_bricks(dec: Decomposition, config: Any, backend: str, budget: Budget) -> None:
    """Measure once, in their model's context and under ``budget``, the bricks of ``dec`` likeliest to
    be the slowest (the most FLOPs, the most bytes moved); nothing is stored.

    Raises
    ------
    InvalidArgumentError
        Where one of them cannot be measured (it timed out, ran out of memory): naming the brick, the
        shapes, the reason and what to do.
    """
    bricks = list(dec.bricks.values())
    costliest = [max(bricks, key=lambda b: b.flops or 0), max(bricks, key=lambda b: b.bytes_moved)]
    signatures = list(dict.fromkeys(b.signature for b in costliest))[:PROBED_BRICKS]
    with Runner(backend, config, budget, floor=False, keep_bytes=0) as runner:
        for signature in signatures:
            m = runner.measure(dec.in_context(signature))
            if not m.ok:
                brick = dec.bricks[signature]
                raise InvalidArgumentError(
                    f"brick {signature[:12]} ({brick.op_type}) of model '{dec.model}' at {shape_label(dec.inputs)} "
                    f"cannot be measured here ({m.error}), so nothing is estimated or stored; {_TODO}.")


class _StopOnFailure:
    """A runner for :func:`~dlbricks.benchmarks_db.populate` that raises where a measurement failed,
    so that the failure is not stored (populate drops the brick's claim and stops)."""

    def __init__(self, runner: Any, dec: Decomposition) -> None:
        self._runner = runner
        self._dec = dec

    def measure(self, item: Any, *, budget: Budget | None = None) -> Measurement:
        return self.measure_detailed(item, budget=budget)[0]

    def measure_detailed(self, item: Any, *, budget: Budget | None = None) -> tuple[Measurement, Any]:
        m, timing = self._runner.measure_detailed(item, budget=budget)
        if not m.ok:
            key = str(getattr(item, "key", "") or m.key)
            op = getattr(item, "op_type", None) or "model"
            raise BackendError(
                f"brick {key[:12]} ({op}) of model '{self._dec.model}' at {shape_label(self._dec.inputs)} could not "
                f"be measured here ({m.error}), so nothing is estimated; its failure is not stored (bricks measured "
                f"before it are kept); {_TODO}, or a budget with a longer timeout.")
        return m, timing

    def close(self) -> None:
        self._runner.close()


def stop_on_failure(dec: Decomposition) -> Callable[..., Any]:
    """A ``runner_factory`` for :func:`~dlbricks.benchmarks_db.populate` that measures ``dec``'s bricks
    with :class:`~dlbricks.generators.runner.Runner` and raises :class:`~dlbricks.BackendError` at the first
    that fails, instead of returning (and storing) the failure."""

    def factory(backend: str, config: Any, budget: Any, keep_samples: bool) -> _StopOnFailure:
        return _StopOnFailure(Runner(backend, config, budget, keep_samples=keep_samples), dec)

    return factory
