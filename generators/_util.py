"""Small helpers shared by the generators modules."""

from __future__ import annotations

__all__ = ["one_line"]

MAX_ERROR_CHARS = 500


def one_line(error: BaseException) -> str:
    """``"Type: first line of the message"``, cut to a few hundred characters."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
