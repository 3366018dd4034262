"""The arguments that every model loader takes (``batch_size``, ``input_shapes``), checked alike by
:func:`dlbricks.load_model` and :func:`dlbricks.load_mxnet`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dlbricks.errors import InvalidArgumentError

__all__ = ["check_batch_size", "check_input_shapes"]


def check_batch_size(batch_size: object) -> int | None:
    if batch_size is None:
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size <= 0:
        raise InvalidArgumentError(
            f"The 'batch_size' of load_model must be a positive int. Got {batch_size!r} instead.")
    return int(batch_size)


def check_input_shapes(input_shapes: Mapping[str, Sequence[int]] | None) -> dict[str, tuple[int, ...]]:
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise InvalidArgumentError(
            f"'input_shapes' must map input names to shapes, e.g. {{'x': (1, 3, 224, 224)}}. "
            f"Got {input_shapes!r} instead.")
    out: dict[str, tuple[int, ...]] = {}
    for key, dims in input_shapes.items():
        if isinstance(dims, str | bytes) or not isinstance(dims, Sequence) or not all(
                isinstance(d, int | np.integer) and not isinstance(d, bool) and d > 0 for d in dims):
            raise InvalidArgumentError(
                f"The shape of input '{key}' must be a sequence of positive ints. Got {dims!r} instead.")
        out[str(key)] = tuple(int(d) for d in dims)
    return out
