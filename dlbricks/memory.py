"""Sizes a model needs at the shapes asked for, checked against this machine's memory before anything runs.

A model loaded at a batch size or input shape too large for the machine would otherwise be measured
brick by brick, each brick failing for want of memory (and stored as failed), or reported as fine by
``decompose``. :func:`check_fits_memory` refuses it first, in one line naming the model, the shape,
the bytes it needs and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from dlbricks.errors import InvalidArgumentError
from dlbricks.types import TensorSpec

__all__ = ["INT64_MAX", "check_fits_memory", "check_input_sizes", "check_largest_tensor", "format_bytes",
           "memory_bytes", "shape_label"]

#: The largest dimension an ONNX shape holds (int64).
INT64_MAX = 2**63 - 1
_UNITS = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"))


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``os.sysconf``); None where the OS does not tell."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def format_bytes(n: int) -> str:
    """``n`` bytes in decimal units, e.g. ``3.2 PB``."""
    for scale, unit in _UNITS:
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def shape_label(inputs: Iterable[TensorSpec]) -> str:
    """The input shapes as the user gives them: ``input 'x' 1x3x224x224``."""
    shapes = [f"'{s.name}' {'x'.join(map(str, s.shape)) or 'scalar'}" for s in inputs]
    if not shapes:
        return "its shapes"
    return ("input " if len(shapes) == 1 else "inputs ") + ", ".join(shapes)


def check_fits_memory(model: str, inputs: Sequence[TensorSpec], needed: int, what: str,
                      memory: int | None = None) -> None:
    """Refuse a model whose run at ``inputs`` needs more than this machine's memory.

    Parameters
    ----------
    model : str
        The model's name, for the message.
    inputs : sequence of TensorSpec
        Its inputs at the shapes asked for.
    needed : int
        Bytes it needs (its largest tensor, or the bytes one run holds at once).
    what : str
        What ``needed`` counts, for the message: ``"its largest tensor, 'conv1'"``.
    memory : int, optional
        The memory to check against; default :func:`memory_bytes` (nothing is checked where the OS
        does not tell).

    Raises
    ------
    InvalidArgumentError
        If ``needed`` exceeds ``memory``.
    """
    memory = memory_bytes() if memory is None else memory
    if memory is None or needed <= memory:
        return
    raise InvalidArgumentError(
        f"model '{model}' at {shape_label(inputs)} needs {format_bytes(needed)} ({needed} bytes) for {what}, "
        f"more than this machine's {format_bytes(memory)} of memory; choose a smaller batch (batch_size=N) "
        "or smaller input_shapes.")


def check_input_sizes(model: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str],
                      memory: int | None = None) -> None:
    """Refuse input shapes that ONNX cannot hold (a dimension past int64) or whose tensor alone is
    larger than this machine's memory, before shape inference works with them.

    Raises
    ------
    InvalidArgumentError
        Naming the model, the input and its shape.
    """
    specs = [TensorSpec(name, shape, dtypes.get(name, "float32")) for name, shape in shapes.items()]
    for spec in specs:
        if any(d > INT64_MAX for d in spec.shape):
            raise InvalidArgumentError(
                f"model '{model}' at {shape_label([spec])}: a dimension is larger than ONNX holds "
                f"({INT64_MAX}); choose a smaller batch (batch_size=N) or smaller input_shapes.")
    if specs:
        largest = max(specs, key=lambda s: s.nbytes)
        check_fits_memory(model, specs, largest.nbytes, f"input '{largest.name}' alone", memory)


def check_largest_tensor(model: str, inputs: Sequence[TensorSpec], tensors: Iterable[TensorSpec],
                         memory: int | None = None) -> None:
    """Refuse a model one of whose ``tensors`` alone is larger than this machine's memory (see
    :func:`check_fits_memory`)."""
    largest = max(tensors, key=lambda s: s.nbytes, default=None)
    if largest is not None:
        check_fits_memory(model, inputs, largest.nbytes, f"its largest tensor, '{largest.name}'", memory)
