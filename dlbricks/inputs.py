"""Seeded random inputs that respect dtypes and valid value ranges.

The one generator of input data in dlbricks: the processor uses it for faithfulness checks and
runtime shape inference, and the benchmark generators for the inputs they bind.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from dlbricks.errors import InvalidArgumentError, UnrunnableBrickError
from dlbricks.types import TensorSpec, ValueStatistics

__all__ = ["DEFAULT_INT_RANGE", "QUANTIZED_RANGES", "ar1_noise", "random_array", "random_inputs", "statistics_array"]

DEFAULT_INT_RANGE = (0, 2)
"""Integers without a range: valid as an index into any non-empty axis, a boolean, a small count."""
QUANTIZED_RANGES = {"int8": (-128, 128), "uint8": (0, 256)}
"""8-bit integers without a range hold quantized values (activations of quantized models): their
whole range."""


def random_array(
    shape: tuple[int, ...],
    dtype: np.dtype | str,
    value_range: tuple[float, float] | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """A random array: floats standard normal (uniform in ``value_range`` if given), integers and
    booleans uniform in ``[low, high)`` (default :data:`DEFAULT_INT_RANGE`, the whole range of
    int8 and uint8: :data:`QUANTIZED_RANGES`).

    Raises
    ------
    InvalidArgumentError
        If ``value_range`` holds no value of an integer ``dtype``.
    UnrunnableBrickError
        If ``dtype`` is neither boolean, integer, floating nor complex.
    """
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        low, high = value_range or DEFAULT_INT_RANGE
        return rng.integers(max(int(low), 0), min(int(high), 2), size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        low, high = value_range or (QUANTIZED_RANGES.get(dtype.name) or DEFAULT_INT_RANGE)
        info = np.iinfo(dtype)
        low, high = max(math.ceil(low), info.min), min(math.ceil(high), info.max)
        if low >= high:
            raise InvalidArgumentError(
                f"The value range {value_range} holds no {dtype} value; give [low, high) with low < high."
            )
        return rng.integers(low, high, size=shape, dtype=dtype)
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        if value_range is None:
            return rng.standard_normal(size=shape, dtype=np.float32).astype(dtype, copy=False)
        return rng.uniform(value_range[0], value_range[1], size=shape).astype(dtype)
    raise UnrunnableBrickError(f"Cannot generate random inputs of dtype {dtype}.")


def ar1_noise(shape: tuple[int, ...], rho: float, rng: np.random.Generator) -> np.ndarray:
    """Standard normal values (float64) correlated ``rho`` with their neighbour along the last axis:
    an AR(1) process (:func:`scipy.signal.lfilter`) scaled to unit variance."""
    from scipy.signal import lfilter

    rho = float(np.clip(rho, -0.999, 0.999))
    return lfilter([math.sqrt(1.0 - rho * rho)], [1.0, -rho], rng.standard_normal(shape), axis=-1)


def statistics_array(shape: tuple[int, ...], dtype: np.dtype | str, statistics: ValueStatistics,
                     rng: np.random.Generator) -> np.ndarray:
    """A random feature map distributed like ``statistics``: per channel (axis 1) its mean and
    standard deviation, along each channel's flattened spatial plane an AR(1) process with its
    correlation. Where ``statistics`` kept the tensor's values themselves (see
    :class:`~dlbricks.types.ValueStatistics`), those values.

    Raises
    ------
    InvalidArgumentError
        If the shape has no channel axis or another number of channels than ``statistics``.
    """
    recorded = statistics.recorded(tuple(shape))
    if recorded is not None:
        return recorded.astype(dtype)
    channels = len(statistics.mean)
    if len(shape) < 3 or shape[1] != channels:
        raise InvalidArgumentError(
            f"Value statistics of {channels} channels do not fit a tensor of shape {list(shape)}.")
    plane = ar1_noise((shape[0], channels, math.prod(shape[2:])), statistics.correlation, rng)
    per_channel = (1, channels, 1)
    values = plane * np.reshape(statistics.std, per_channel) + np.reshape(statistics.mean, per_channel)
    return values.reshape(shape).astype(dtype)


def random_inputs(specs: Iterable[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """One random array per spec, keyed by name; the same seed gives the same arrays."""
    rng = np.random.default_rng(seed)
    return {spec.name: random_array(spec.shape, spec.dtype, spec.value_range, rng) for spec in specs}
