"""dlbricks: cut deep-learning models into bricks, benchmark each unique brick once, estimate."""

from dlbricks._errors import (
    BackendError,
    BackendUnavailableError,
    DatabaseError,
    DlbricksError,
    InvalidArgumentError,
    ModelLoadError,
    ShapeInferenceError,
    UnrunnableBrickError,
)

__version__ = "0.1.0"

__all__ = [
    # errors
    "DlbricksError",
    "InvalidArgumentError",
    "ModelLoadError",
    "ShapeInferenceError",
    "UnrunnableBrickError",
    "BackendError",
    "BackendUnavailableError",
    "DatabaseError",
]
