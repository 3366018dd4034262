"""Small helpers shared by the generators modules."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from dlbricks import BackendError
from dlbricks.errors import UnrunnableBrickError

__all__ = ["CPU_ENV", "closed", "last_core", "one_line", "pin_to_core", "prepare_previous", "round_robin"]

#: Environment variable naming the one CPU a worker process (and every thread it starts) runs on.
CPU_ENV = "DLBRICKS_CPU"

MAX_ERROR_CHARS = 500


def one_line(error: BaseException) -> str:
    """``"Type: first line of the message"``, cut to a few hundred characters."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def round_robin(runs: Sequence[Callable[[], object]]) -> Callable[[], object]:
    """One call of the next of ``runs`` in turn (``runs[0]`` itself when there is one)."""
    if len(runs) == 1:
        return runs[0]
    cycle = itertools.cycle(runs)

    def run() -> None:
        next(cycle)()

    return run


def closed() -> None:
    """What a closed prepared model runs: an error."""
    raise BackendError("This prepared model was closed.")


def last_core() -> int:
    """The highest-numbered CPU this process may run on."""
    return max(os.sched_getaffinity(0))


def pin_to_core() -> None:
    """Run this process, and the threads it starts from now on, on the CPU that :data:`CPU_ENV`
    names (nothing when it is unset). Called first thing in worker processes."""
    cpu = os.environ.get(CPU_ENV)
    if cpu:
        os.sched_setaffinity(0, {int(cpu)})


def prepare_previous(prepare: Callable[[Any, Any], Any], model: Any, config: Any) -> Any:
    """The brick before a brick (``model``, None for none), prepared warm with ``prepare`` under
    ``config``: what the harness runs untimed before each timed run of the brick. A previous brick
    that cannot run here gives None: the brick is measured without it rather than not at all."""
    if model is None:
        return None
    try:
        return prepare(model, replace(config, cache="warm"))
    except UnrunnableBrickError:
        return None

