"""The worker subprocess: ``python -m dlbricks.generators._worker``.

It reads length-prefixed pickled requests on stdin and answers on the original stdout, which it
keeps for itself: file descriptor 1 is pointed at stderr so that whatever a runtime prints cannot
corrupt the protocol. The parent sets the thread variables in its environment before it starts, so
they are in place before any runtime is imported. A request that raises is answered with the
exception's one-line text; a crash or a hang is the parent's business (it kills and replaces us).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, BinaryIO

from dlbricks.errors import UnrunnableBrickError

from ._cache import PreparedCache, digest
from ._ipc import read_message_blocking, write_message
from ._registry import get_backend, register_backend
from .floor import measure_floor
from .harness import measure_prepared, proof_measurement
from .rounds import sweeper, time_rounds
from .util import one_line, pin_to_core

__all__ = ["main"]

#: Floor measurements taken in a row per request; the fastest is kept (:func:`_floor`).
FLOOR_REPEATS = 3


class _State:
    """The worker's caches: backends by name, held items by key, items kept prepared for reuse."""

    def __init__(self) -> None:
        self.backends: dict[str, Any] = {}
        self.held: dict[str, tuple[Any, Any, Any]] = {}  # key -> (prepared, backend, config)
        self.kept = PreparedCache(0)
        #: Bricks prepared ahead of their rounds (``prepare``): whole model's key, prepared, seconds
        #: spent, configuration
        self.ahead: tuple[str, list[tuple[int, str, Any, bool]], float, Any] | None = None


def main() -> int:
    """Serve requests until end of input or an ``exit`` request."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    pin_to_core()  # before a runtime starts its threads
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin: BinaryIO = sys.stdin.buffer
    state = _State()
    while True:
        request = read_message_blocking(stdin)
        if request is None or request[0] == "exit":
            out.flush()
            sys.stderr.flush()
            os._exit(0)  # no teardown of sessions and arrays that the parent would wait for
        write_message(out, _answer(state, request))


def _answer(state: _State, request: tuple[str, Any]) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", "Type: message")`` for one request."""
    kind, payload = request
    try:
        if kind == "init":
            state.kept.max_bytes = int(payload.get("cache_bytes", 0))
            return "ok", _init(payload)
        if kind == "measure":
            return "ok", _measure(state, payload)
        if kind == "floor":
            return "ok", _floor(state, payload)
        if kind == "again":
            return "ok", _again(state, payload)
        if kind == "release":
            return "ok", _release(state, payload)
        if kind == "queue":
            return "ok", _queue(state, payload)
        if kind == "rounds":
            return "ok", _rounds(state, payload)
        if kind == "prepare":
            return "ok", _prepare_ahead(state, payload)
        if kind == "timed":
            return _timed_answer(state, payload)
        raise ValueError(f"unknown request {kind!r}")
    except Exception as e:  # every failure of an item is reported, not fatal
        return "error", one_line(e)


def _init(payload: dict[str, Any]) -> dict[str, Any]:
    """Adopt the parent's ``sys.path`` and backend registrations; import the heavy modules now."""
    import scipy.stats  # noqa: F401 - so that the first measurement does not pay for it

    for entry in reversed(payload["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    for name, factory in payload["registry"].items():
        register_backend(name, factory, replace=True)
    return {"pid": os.getpid()}


def _backend(state: _State, name: str) -> Any:
    """The backend named ``name``, built once per worker."""
    if name not in state.backends:
        state.backends[name] = get_backend(name)
    return state.backends[name]


def _measure(state: _State, payload: dict[str, Any]) -> Any:
    """Prepare and time one model, or time it again if it is kept prepared (the same bytes under
    the same configuration); returns ``(Measurement, Timing)``. Unless held, the prepared model is
    then kept for reuse (:class:`~dlbricks.generators._cache.PreparedCache`) or closed."""
    import dataclasses
    import time

    import onnx

    backend = _backend(state, payload["backend"])
    config = payload["config"]
    hold = payload.get("hold")
    key = None if hold else digest(payload["model"], config.config_id)  # a held model is never kept
    prepared = None if key is None else state.kept.take(key)
    kept = prepared is not None
    prepare_s = 0.0
    if prepared is None:
        model = onnx.load_from_string(payload["model"])
        start = time.perf_counter()
        prepared = backend.prepare(model, config)
        prepare_s = time.perf_counter() - start
    if hold:
        _release(state, payload)
        state.held[payload["key"]] = (prepared, backend, config)
        if payload.get("proof"):  # preparing it ran it once: it runs; its rounds time it
            return proof_measurement(payload["key"], backend.name, config, prepare_s, floor_s=payload.get("floor_s"))
    try:
        measurement, timing = measure_prepared(prepared, payload["key"], backend.name, config, payload["budget"],
                                               floor_s=payload.get("floor_s"),
                                               keep_samples=payload.get("keep_samples", False), warmed=kept)
    except BaseException:
        if kept:
            state.kept.drop(key)
        elif not hold:
            prepared.close()
        raise
    if not hold and getattr(config, "device", "cpu") != "cpu":
        prepared.close()  # an accelerator's session holds device memory (arena, library workspaces)
    elif key is not None:
        state.kept.keep(key, prepared, value_s=measurement.median_s or 0.0)
    return measurement, dataclasses.replace(timing, prepare_s=prepare_s)


def _again(state: _State, payload: dict[str, Any]) -> Any:
    """Time a held model again (it stays prepared); returns ``(Measurement, Timing)``."""
    if payload["key"] not in state.held:
        raise KeyError(f"no model {payload['key'][:12]} is held in this worker; measure it with hold=True")
    prepared, backend, config = state.held[payload["key"]]
    return measure_prepared(prepared, payload["key"], backend.name, config, payload["budget"],
                            floor_s=payload.get("floor_s"), keep_samples=payload.get("keep_samples", False),
                            warmed=True)


def _timed_answer(state: _State, request: tuple[str, Any]) -> tuple[str, Any]:
    """The answer to ``request`` with the seconds it took here: ``(status, (seconds, result))``, for
    a request sent ahead (a spare worker's setup while the parent goes on), whose wall time the
    parent cannot take since it does not wait for it."""
    import time

    start = time.perf_counter()
    status, result = _answer(state, request)
    return status, (time.perf_counter() - start, result)


def _chains(payload: dict[str, Any], backend: Any) -> bool:
    """Whether the bricks of a rounds request are prepared as one chain (chained rounds on a CPU,
    by a backend that prepares chains)."""
    config = payload["config"]
    return bool(payload["budget"].chained and getattr(config, "device", "cpu") == "cpu"
                and hasattr(backend, "prepare_chain"))


def _prepare_bricks(state: _State, payload: dict[str, Any]) -> tuple[list[tuple[int, str, Any, bool]], float]:
    """The bricks of a rounds request, prepared: each taken from the kept items or prepared (and
    each of its copies run once), or, for chained rounds on a CPU, all prepared as a chain by the
    backend (``prepare_chain``); a brick that cannot be prepared is left out. Returns ``(position,
    cache key ("" in a chain), prepared, taken from the cache)`` for each, and the seconds spent."""
    import time

    import onnx

    backend = _backend(state, payload["backend"])
    config = payload["config"]
    start = time.perf_counter()
    prepared: list[tuple[int, str, Any, bool]] = []
    try:
        if _chains(payload, backend):
            models = [onnx.load_from_string(b) for b in payload["bricks"]]
            for position, item in enumerate(backend.prepare_chain(models, config, payload.get("feeds"))):
                if item is not None:
                    item.run()
                    item.empty()
                    prepared.append((position, "", item, False))
            return prepared, time.perf_counter() - start
        for position, model_bytes in enumerate(payload["bricks"]):
            key = digest(model_bytes, config.config_id)
            item = state.kept.take(key)
            kept = item is not None
            if item is None:
                try:
                    item = backend.prepare(onnx.load_from_string(model_bytes), config)
                except UnrunnableBrickError:
                    continue
                for _ in range(int(getattr(item, "copies", 1) or 1)):
                    item.run()
            prepared.append((position, key, item, kept))
    except BaseException:
        _close_bricks(state, prepared, config, None)
        raise
    return prepared, time.perf_counter() - start


def _close_bricks(state: _State, prepared: list[tuple[int, str, Any, bool]], config: Any, rounds: Any) -> None:
    """Close the bricks of a rounds request, or keep them again (not a chain's, not on an
    accelerator), each valued at its median over ``rounds`` (0 without rounds)."""
    import numpy as np

    on_device = getattr(config, "device", "cpu") != "cpu"
    for i, (_, key, item, _) in enumerate(prepared):
        if on_device or not key:  # a chain's sessions are its own: closed with it
            item.close()
        else:
            value = float(np.median(rounds.bricks_s[i])) if rounds is not None else 0.0
            state.kept.keep(key, item, value_s=value)


def _prepare_ahead(state: _State, payload: dict[str, Any]) -> Any:
    """Prepare the bricks of the rounds that a later ``rounds`` request of the whole model
    ``payload["whole"]`` times (:func:`_prepare_bricks`), and keep them for it; the bricks prepared
    ahead before are closed. Returns ``(bricks prepared, seconds spent)``."""
    _drop_ahead(state)
    prepared, prepare_s = _prepare_bricks(state, payload)
    state.ahead = (payload["whole"], prepared, prepare_s, payload["config"])
    return len(prepared), prepare_s


def _drop_ahead(state: _State) -> None:
    """Close the bricks prepared ahead, if any."""
    if state.ahead is not None:
        _, prepared, _, config = state.ahead
        state.ahead = None
        _close_bricks(state, prepared, config, None)


def _rounds(state: _State, payload: dict[str, Any]) -> Any:
    """Time a held whole model and its bricks in interleaved rounds
    (:func:`~dlbricks.generators.rounds.time_rounds`), the bricks prepared ahead for this whole
    model (``payload["ahead"]``, see :func:`_prepare_ahead`) or prepared now (:func:`_prepare_bricks`).
    Returns ``(Rounds, included brick positions, seconds spent preparing)``; the bricks are kept
    again after (closed in a chain or on an accelerator)."""
    from dataclasses import replace

    import numpy as np

    if payload["whole"] not in state.held:
        raise KeyError(f"no model {payload['whole'][:12]} is held in this worker; measure it with hold=True")
    whole = state.held[payload["whole"]][0]
    backend = _backend(state, payload["backend"])
    config = payload["config"]
    if payload.get("ahead"):
        if state.ahead is None or state.ahead[0] != payload["whole"]:
            raise KeyError(f"no bricks of model {payload['whole'][:12]} were prepared ahead in this worker")
        _, prepared, prepare_s, _ = state.ahead
        state.ahead = None
    else:
        _drop_ahead(state)
        prepared, prepare_s = _prepare_bricks(state, payload)
    chain = _chains(payload, backend)
    rounds = None
    try:
        counts = [payload["counts"][p] for p, _, _, _ in prepared]
        budget = payload["budget"] if chain or not payload["budget"].chained else \
            replace(payload["budget"], chained=False)  # no chain here (another backend, a GPU): bursts
        at = {p[0]: i for i, p in enumerate(prepared)}
        schedule = [at[p] for p in payload["schedule"] if p in at] if chain and payload.get("schedule") else None
        sweep = sweeper(payload.get("sweep_bytes") or 0) if chain and budget.warm_chain else None
        rounds = time_rounds(whole, [p[2] for p in prepared], counts, budget,
                             rng=np.random.default_rng(payload.get("seed")), schedule=schedule, sweep=sweep)
    finally:
        _close_bricks(state, prepared, config, rounds)
    return rounds, tuple(p[0] for p in prepared), prepare_s


def _queue(state: _State, payload: dict[str, Any]) -> Any:
    """The launch-queue times of a held model (its prepared ``queue_times(repeat=...)``), None where
    it has none."""
    held = state.held.get(payload["key"])
    queue_times = getattr(held[0], "queue_times", None) if held is not None else None
    return queue_times(repeat=payload.get("repeat", True)) if queue_times is not None else None


def _release(state: _State, payload: dict[str, Any]) -> None:
    """Close a held model (nothing if none is held under the key)."""
    held = state.held.pop(payload["key"], None)
    if held is not None:
        held[0].close()


def _floor(state: _State, payload: dict[str, Any]) -> Any:
    """The floor of a configuration: of :data:`FLOOR_REPEATS` calibrations in a row, the one whose
    one-node model ran fastest (a constant cost that noise only adds to; the first runs of a fresh
    process pay its start). Not the lowest floor: that would pick the calibration whose cost of a
    further node, taken off it, came out highest."""
    backend = _backend(state, payload["backend"])
    runs = [measure_floor(backend, payload["config"], payload["budget"], details=True)
            for _ in range(FLOOR_REPEATS)]
    ok = [run for run in runs if run[0].ok]
    return min(ok, key=lambda run: run[0].median_s) if ok else runs[-1]


if __name__ == "__main__":
    sys.exit(main())
