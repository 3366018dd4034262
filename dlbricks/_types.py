"""Plain records shared by every stage: tensor specs and dtype helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

__all__ = ["TensorSpec", "onnx_dtype_to_name", "name_to_onnx_dtype", "runnable_ir_version"]


def runnable_ir_version(ir_version: int, opsets: object) -> int:
    """The lowest IR version that the opsets allow, never above the model's own.

    New onnx releases stamp models with IR versions that released runtimes refuse; the opsets
    decide what the model needs.
    """
    needed = onnx.helper.find_min_ir_version_for(list(opsets), ignore_unknown=True)  # type: ignore[call-overload]
    return max(3, min(int(ir_version), int(needed))) if ir_version else int(needed)


def onnx_dtype_to_name(elem_type: int) -> str:
    """Return the numpy-style name of an ONNX element type (``1`` -> ``"float32"``)."""
    if elem_type == onnx.TensorProto.BFLOAT16:
        return "bfloat16"
    if elem_type == onnx.TensorProto.STRING:
        return "string"
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name


def name_to_onnx_dtype(name: str) -> int:
    """Return the ONNX element type of a numpy-style dtype name (``"int64"`` -> ``7``)."""
    if name == "bfloat16":
        return onnx.TensorProto.BFLOAT16
    if name == "string":
        return onnx.TensorProto.STRING
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(name))


def _itemsize(dtype: str) -> int:
    if dtype == "bfloat16":
        return 2
    if dtype == "string":
        return 8
    return np.dtype(dtype).itemsize


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor of concrete shape.

    Parameters
    ----------
    name : str
        Tensor name (canonical ``in0``/``out0`` names inside a brick).
    shape : tuple of int
        Concrete dimensions; ``()`` for a scalar.
    dtype : str
        numpy-style dtype name (``"float32"``, ``"int64"``...).
    value_range : tuple of int, optional
        ``[low, high)`` of valid values for index-like integer inputs (Gather indices, lengths).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    value_range: tuple[int, int] | None = None

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.numel * _itemsize(self.dtype)

    @property
    def onnx_dtype(self) -> int:
        """ONNX element type."""
        return name_to_onnx_dtype(self.dtype)

    def renamed(self, name: str) -> TensorSpec:
        """The same spec under another name."""
        return TensorSpec(name, self.shape, self.dtype, self.value_range)

    def with_range(self, value_range: tuple[int, int] | None) -> TensorSpec:
        """The same spec with a valid value range."""
        return TensorSpec(self.name, self.shape, self.dtype, value_range)

    def to_value_info(self) -> onnx.ValueInfoProto:
        """ONNX value info of this spec."""
        return onnx.helper.make_tensor_value_info(self.name, self.onnx_dtype, list(self.shape))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        out: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.value_range is not None:
            out["value_range"] = list(self.value_range)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        """Inverse of :meth:`to_dict`."""
        vr = data.get("value_range")
        return cls(data["name"], tuple(int(d) for d in data["shape"]), data["dtype"],
                   tuple(vr) if vr is not None else None)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]"
