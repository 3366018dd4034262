"""Counting the trainable parameters of an ONNX model the way torchvision and papers count them."""

from __future__ import annotations

import math
import os

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from dlbricks import InvalidArgumentError, ModelLoadError

__all__ = ["count_params"]

_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})

# Inputs that hold statistics or settings, not trained weights: op type -> input positions.
_NON_TRAINABLE_INPUTS: dict[str, frozenset[int]] = {
    "BatchNormalization": frozenset({3, 4}),  # running mean, running variance
    "Resize": frozenset({1, 2}),  # roi, scales
    "Upsample": frozenset({1}),
    "Clip": frozenset({1, 2}),
    "Pad": frozenset({2}),
}


def count_params(model: onnx.ModelProto | str | os.PathLike[str]) -> int:
    """Count the trainable parameters of a model.

    Counted: the elements of every floating-point initializer of rank >= 1. Not counted: integer and
    bool initializers (shapes, axes, indices), scalars, ``Constant`` nodes (anchors, masks), and
    initializers used only as BatchNormalization running mean / variance or as settings of Resize,
    Clip and Pad. This matches torchvision's ``sum(p.numel() for p in model.parameters())``.

    Parameters
    ----------
    model : onnx.ModelProto or path-like
        The model, or the path of an ``.onnx`` file (external data is not read: only dims count).

    Returns
    -------
    int
        The number of trainable parameters.

    Examples
    --------
    >>> from dlbricks.model_zoo import build
    >>> count_params(build("squeezenet1_1"))
    1235496
    """
    if isinstance(model, (str, os.PathLike)):
        try:
            model = onnx.load(os.fspath(model), load_external_data=False)
        except (OSError, DecodeError) as e:
            raise ModelLoadError(f"Cannot read the ONNX model '{os.fspath(model)}': {e}") from e
    if not isinstance(model, onnx.ModelProto):
        raise InvalidArgumentError(
            f"count_params expects an onnx.ModelProto or a path. Got {type(model).__name__} instead.")
    graph = model.graph
    trainable_use: dict[str, bool] = {}
    for node in graph.node:
        skip = _NON_TRAINABLE_INPUTS.get(node.op_type, frozenset())
        for i, name in enumerate(node.input):
            trainable_use[name] = trainable_use.get(name, False) or i not in skip
    total = 0
    for init in graph.initializer:
        if init.data_type in _FLOAT_TYPES and len(init.dims) > 0 and trainable_use.get(init.name, False):
            total += math.prod(init.dims)
    return total
