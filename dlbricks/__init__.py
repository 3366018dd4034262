"""dlbricks: cut deep-learning models into bricks, benchmark each unique brick once, estimate.

The processor stage: load a model (:func:`load_model`), cut it into bricks (:func:`decompose`),
collect the unique bricks of many models (:class:`BrickSet`).
"""

from dlbricks._bricks import Brick, BrickContext, BrickInContext, ConstantSpec
from dlbricks._canonical import SIGNATURE_VERSION
from dlbricks._decompose import (
    GRANULARITIES,
    BrickSet,
    BrickSetSummary,
    Decomposition,
    Occurrence,
    decompose,
)
from dlbricks._errors import (
    BackendError,
    BackendUnavailableError,
    DatabaseError,
    DlbricksError,
    InvalidArgumentError,
    MissingBricksError,
    ModelLoadError,
    ShapeInferenceError,
    UnrunnableBrickError,
)
from dlbricks._graph import LayerNode, ModelGraph, ModelSource
from dlbricks._inputs import random_inputs
from dlbricks._onnx_frontend import load_model
from dlbricks._types import TensorSpec, ValueStatistics

__version__ = "0.1.0"

__all__ = [
    # loading
    "load_model",
    "ModelGraph",
    "ModelSource",
    "LayerNode",
    "TensorSpec",
    "ValueStatistics",
    # decomposition
    "decompose",
    "Decomposition",
    "Occurrence",
    "Brick",
    "BrickInContext",
    "BrickContext",
    "ConstantSpec",
    "BrickSet",
    "BrickSetSummary",
    "GRANULARITIES",
    "SIGNATURE_VERSION",
    "random_inputs",
    # errors
    "DlbricksError",
    "InvalidArgumentError",
    "MissingBricksError",
    "ModelLoadError",
    "ShapeInferenceError",
    "UnrunnableBrickError",
    "BackendError",
    "BackendUnavailableError",
    "DatabaseError",
]
