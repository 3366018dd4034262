"""Random inputs of the right dtype and a realistic range for an ONNX model.

Value ranges come from the model's ``metadata_props`` key ``dlbricks.value_ranges``: a JSON object
``{"input_name": [low, high]}`` with ``low`` inclusive and ``high`` exclusive. The arrays themselves
come from the processor's :func:`dlbricks.inputs.random_array`: without a range, float inputs are
standard normal, int8 and uint8 inputs (quantized activations) span their type's range, and other
integer inputs are drawn from ``[0, 2)``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
from onnx import helper

from dlbricks import InvalidArgumentError
from dlbricks.errors import ShapeInferenceError, UnrunnableBrickError
from dlbricks.graph import VALUE_RANGES_KEY, VALUE_STATISTICS_KEY
from dlbricks.inputs import DEFAULT_INT_RANGE, random_array, statistics_array
from dlbricks.types import ValueStatistics

__all__ = [
    "DEFAULT_INT_RANGE",
    "VALUE_RANGES_KEY",
    "VALUE_STATISTICS_KEY",
    "input_specs",
    "random_array",
    "random_inputs",
    "statistics_array",
    "value_ranges",
    "value_statistics",
]


def value_ranges(model: onnx.ModelProto) -> dict[str, tuple[float, float]]:
    """The ``dlbricks.value_ranges`` metadata of ``model``, validated.

    Raises
    ------
    InvalidArgumentError
        If the metadata is not a JSON object of ``[low, high]`` pairs with ``low < high``.
    """
    raw = next((p.value for p in model.metadata_props if p.key == VALUE_RANGES_KEY), None)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(
            f"The metadata {VALUE_RANGES_KEY!r} of model {model.graph.name!r} is not JSON: {e}."
        ) from e
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"The metadata {VALUE_RANGES_KEY!r} must be a JSON object. Got {raw!r} instead."
        )
    return {name: _parse_range(name, value) for name, value in data.items()}


def value_statistics(model: onnx.ModelProto) -> dict[str, ValueStatistics]:
    """The ``dlbricks.value_statistics`` metadata of ``model`` (a brick's inputs' in-model
    distributions), by input name.

    Raises
    ------
    InvalidArgumentError
        If the metadata is not a JSON object of statistics.
    """
    raw = next((p.value for p in model.metadata_props if p.key == VALUE_STATISTICS_KEY), None)
    if raw is None:
        return {}
    try:
        return {name: ValueStatistics.from_dict(value) for name, value in json.loads(raw).items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise InvalidArgumentError(
            f"The metadata {VALUE_STATISTICS_KEY!r} of model {model.graph.name!r} is not a JSON object of "
            f"value statistics ({type(e).__name__}: {e}); rebuild the brick with Brick.to_onnx().") from e


def _parse_range(name: str, value: object) -> tuple[float, float]:
    """One ``[low, high]`` pair of the value-range metadata."""
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        and all(math.isfinite(v) for v in value)
        and value[0] < value[1]
    )
    if not ok:
        raise InvalidArgumentError(
            f"The value range of input {name!r} in {VALUE_RANGES_KEY!r} must be [low, high] "
            f"with low < high. Got {value!r} instead."
        )
    return value[0], value[1]


def input_specs(
    model: onnx.ModelProto, names: list[str] | None = None
) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """Name, concrete shape and numpy dtype of the graph inputs that are not initializers.

    Raises
    ------
    ShapeInferenceError
        If an input has a symbolic or unknown dimension.
    UnrunnableBrickError
        If an input is not a tensor of a numpy-representable type.
    """
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers or (names is not None and value.name not in names):
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise UnrunnableBrickError(f"Input {value.name!r} is not a tensor; only tensors can be fed.")
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError) as e:
            raise UnrunnableBrickError(
                f"Input {value.name!r} has ONNX element type {tensor.elem_type}, which has no numpy dtype."
            ) from e
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
        if not tensor.HasField("shape") or any(d is None for d in dims):
            raise ShapeInferenceError(
                f"Input {value.name!r} of model {model.graph.name!r} has shape "
                f"{_shape_text(tensor)}; bricks need concrete shapes."
            )
        specs.append((value.name, dims, dtype))
    return specs


def random_inputs(
    model: onnx.ModelProto, names: list[str] | None = None, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random arrays for the inputs of ``model`` (those in ``names``, default all), seeded."""
    ranges = value_ranges(model)
    rng = np.random.default_rng(seed)
    return {
        name: random_array(shape, dtype, ranges.get(name), rng)
        for name, shape, dtype in input_specs(model, names)
    }


def _shape_text(tensor: onnx.TypeProto.Tensor) -> str:
    """A tensor type's shape as text, symbolic dims by name, unknown ones as '?'."""
    if not tensor.HasField("shape"):
        return "unknown (no shape)"
    dims: list[str] = []
    for d in tensor.shape.dim:
        dims.append(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
    return "[" + ", ".join(dims) + "]"
