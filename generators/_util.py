"""Small helpers shared by the generators modules."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from dlbricks._errors import BackendError

__all__ = ["closed", "one_line", "round_robin"]

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
