"""Seeded random inputs that respect dtypes and valid value ranges."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dlbricks._types import TensorSpec

__all__ = ["random_array", "random_inputs"]


def random_array(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """A random array for ``spec``: standard normal floats, integers within the valid range."""
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=spec.shape).astype(bool)
    dtype = np.dtype(spec.dtype)
    if np.issubdtype(dtype, np.integer):
        low, high = spec.value_range if spec.value_range is not None else (0, 2)
        return rng.integers(low, high, size=spec.shape, dtype=dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=spec.shape, dtype=np.float32).astype(dtype, copy=False)
    raise TypeError(f"no random generator for dtype {spec.dtype!r} of input '{spec.name}'")


def random_inputs(specs: Iterable[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """One random array per spec, keyed by name; the same seed gives the same arrays."""
    rng = np.random.default_rng(seed)
    return {spec.name: random_array(spec, rng) for spec in specs}
