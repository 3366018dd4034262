"""The error hierarchy of dlbricks: one root, meaningful subclasses.

Every error raised on purpose by dlbricks derives from :class:`DlbricksError`, and its message is
one line that names the file, node or value at fault and what to do about it. The CLI turns these
into a one-line message and exit code 2.
"""

from __future__ import annotations

__all__ = [
    "DlbricksError",
    "InvalidArgumentError",
    "ModelLoadError",
    "ShapeInferenceError",
    "UnrunnableBrickError",
    "BackendError",
    "BackendUnavailableError",
    "DatabaseError",
    "MissingBricksError",
    "TempDirError",
]


class DlbricksError(Exception):
    """Root of every error that dlbricks raises on purpose."""


class InvalidArgumentError(DlbricksError, ValueError):
    """An argument given by the user is not valid (bad shape string, negative batch size...)."""


class MissingBricksError(InvalidArgumentError):
    """Bricks of a model have no measurement in the database and the estimate was told to refuse
    (``on_missing="error"``); ``missing`` is how many."""

    def __init__(self, message: str, missing: int) -> None:
        super().__init__(message)
        self.missing = missing


class ModelLoadError(DlbricksError):
    """A model file cannot be read: missing, not ONNX, truncated, bad external data."""


class ShapeInferenceError(DlbricksError):
    """A tensor of the model has no concrete shape: a symbolic dimension without a hint."""


class UnrunnableBrickError(DlbricksError):
    """The runtime cannot run a brick (an op or type it does not implement)."""


class BackendError(DlbricksError):
    """A benchmark backend failed to prepare or run something."""


class BackendUnavailableError(BackendError):
    """The requested backend or device is not available on this machine."""


class DatabaseError(DlbricksError):
    """The brick database cannot be opened or written."""


class TempDirError(DlbricksError):
    """The temporary folder (``TMPDIR``) is full or cannot be written."""
