"""dlbricks: cut deep-learning models into bricks, benchmark each unique brick once, estimate.

The processor stage: load a model (:func:`load_model`), cut it into bricks (:func:`decompose`),
collect the unique bricks of many models (:class:`BrickSet`).

The names below are what a user needs first. The public submodules hold the rest, for the stages
and for scripts: ``errors`` (every error class), ``decomposition`` (occurrences, granularities),
``bricks`` (a brick's metadata and contexts), ``graph`` and ``types`` (the model's records),
``onnx_frontend`` and ``mxnet_frontend`` (loading), ``inputs`` (synthetic inputs), ``fusion`` and
``ov_fusion`` (runtime kernels), ``cost``, ``memory``, ``names``, ``no_weights``, ``ortutil``,
``tempdir``, ``mxnet_bricks``. Modules whose names start with ``_`` are private.
"""

from dlbricks.bricks import Brick
from dlbricks.decomposition import BrickSet, Decomposition, decompose
from dlbricks.errors import (
    BackendError,
    DlbricksError,
    InvalidArgumentError,
    MissingBricksError,
    ModelLoadError,
)
from dlbricks.graph import ModelGraph
from dlbricks.onnx_frontend import load_model

__version__ = "0.1.0"

__all__ = [
    # loading
    "load_model",
    "ModelGraph",
    # decomposition
    "decompose",
    "Decomposition",
    "Brick",
    "BrickSet",
    # errors (all of them: dlbricks.errors)
    "DlbricksError",
    "InvalidArgumentError",
    "MissingBricksError",
    "ModelLoadError",
    "BackendError",
]
