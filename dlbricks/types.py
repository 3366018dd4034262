"""Plain records shared by every stage: tensor specs and dtype helpers."""

from __future__ import annotations

import base64
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

__all__ = ["TensorSpec", "ValueStatistics", "onnx_dtype_to_name", "name_to_onnx_dtype", "runnable_ir_version"]


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


#: Largest tensor (float32 bytes) whose values a frontend keeps for an op whose time depends on them.
KEEP_VALUES_MAX_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class ValueStatistics:
    """How the values of a feature map are distributed in the model it belongs to.

    Some kernels branch on every value (MXNet's ``clip``, ReLU6): their time depends on the data,
    and a brick fed values unlike the model's runs at another speed (MobileNetV2's clip bricks:
    -14% on AR(1) feature maps, +45% on i.i.d. values, against their in-model time). Per channel
    (axis 1) the mean and standard deviation, and over the whole tensor the correlation of
    neighbouring values along the flattened spatial plane (axes 2...) of the standardized values,
    are what it takes to reproduce the in-model time (within 2% on MobileNetV2's clips).

    Other kernels depend on how the values are arranged, which no statistic reproduces: a
    non-maximum suppression's time follows the boxes that pass its threshold and overlap (GluonCV's
    YOLOv3: 4.7 ms on its own tensor, 6.3 ms on normal values, 10.3 ms on uniform ones). For their
    inputs the frontend keeps the tensor itself (``values``), which a brick is then fed.

    Attributes
    ----------
    mean, std : tuple of float
        Per channel.
    correlation : float
        Lag-1 correlation along the flattened spatial plane, in [-1, 1].
    values : str, optional
        The tensor's values in the model's run (little-endian float32, base64), where kept.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    correlation: float
    values: str | None = field(default=None, repr=False)

    def with_values(self, values: np.ndarray) -> ValueStatistics:
        """These statistics keeping ``values`` themselves (stored as float32)."""
        packed = base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii")
        return ValueStatistics(self.mean, self.std, self.correlation, packed)

    def recorded(self, shape: tuple[int, ...]) -> np.ndarray | None:
        """The kept values as a float32 array of ``shape``; None where none were kept or they do not
        fill that shape."""
        if self.values is None:
            return None
        flat = np.frombuffer(base64.b64decode(self.values), dtype="<f4")
        return flat.reshape(shape).astype(np.float32) if flat.size == math.prod(shape) else None

    @classmethod
    def of(cls, values: np.ndarray) -> ValueStatistics | None:
        """The statistics of a float array of rank >= 3 (batch, channel, spatial...); None for others."""
        if values.ndim < 3 or not np.issubdtype(values.dtype, np.floating) or values.size == 0:
            return None
        axes = tuple(i for i in range(values.ndim) if i != 1)
        data = values.astype(np.float64)
        mean = data.mean(axis=axes)
        std = data.std(axis=axes)
        shape = [1] * values.ndim
        shape[1] = -1
        z = (data - mean.reshape(shape)) / np.where(std > 0, std, 1.0).reshape(shape)
        plane = z.reshape(values.shape[0], values.shape[1], -1)
        pairs = plane[..., 1:] * plane[..., :-1]
        correlation = float(np.clip(pairs.mean(), -1.0, 1.0)) if pairs.size else 0.0
        return cls(_as_float32(mean), _as_float32(std), correlation)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (per-channel values as base64 float32)."""
        data: dict[str, Any] = {"mean": _pack(self.mean), "std": _pack(self.std), "correlation": self.correlation}
        if self.values is not None:
            data["values"] = self.values
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValueStatistics:
        """Inverse of :meth:`to_dict`."""
        return cls(_unpack(data["mean"]), _unpack(data["std"]), float(data["correlation"]), data.get("values"))


def _as_float32(values: np.ndarray) -> tuple[float, ...]:
    """Values as stored (float32), so that a round trip through :meth:`ValueStatistics.to_dict` is exact."""
    return tuple(float(v) for v in np.asarray(values, dtype=np.float32))


def _pack(values: tuple[float, ...]) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def _unpack(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in np.frombuffer(base64.b64decode(text), dtype="<f4"))


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
    statistics : ValueStatistics, optional
        How its values are distributed in the model (frontends that run the model fill it). Not
        part of what identifies the spec: equal specs may carry different statistics.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    value_range: tuple[int, int] | None = None
    statistics: ValueStatistics | None = field(default=None, compare=False, repr=False)

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
        return TensorSpec(name, self.shape, self.dtype, self.value_range, self.statistics)

    def with_range(self, value_range: tuple[int, int] | None) -> TensorSpec:
        """The same spec with a valid value range."""
        return TensorSpec(self.name, self.shape, self.dtype, value_range, self.statistics)

    def with_statistics(self, statistics: ValueStatistics | None) -> TensorSpec:
        """The same spec with the statistics of its values."""
        return TensorSpec(self.name, self.shape, self.dtype, self.value_range, statistics)

    def to_value_info(self) -> onnx.ValueInfoProto:
        """ONNX value info of this spec."""
        return onnx.helper.make_tensor_value_info(self.name, self.onnx_dtype, list(self.shape))

    def to_dict(self, statistics: bool = True) -> dict[str, Any]:
        """JSON-safe form (with the value statistics unless ``statistics`` is False). Without them, a
        spec whose statistics kept the values themselves carries their digest (``values_sha256``): a
        kernel fed such values runs at a speed of their own, so they are part of what a brick is."""
        out: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.value_range is not None:
            out["value_range"] = list(self.value_range)
        if statistics and self.statistics is not None:
            out["statistics"] = self.statistics.to_dict()
        elif self.values_digest is not None:
            out["values_sha256"] = self.values_digest
        return out

    @property
    def values_digest(self) -> str | None:
        """16 hex digits of the SHA-256 of the values its statistics kept; None where they kept none."""
        if self.statistics is None or self.statistics.values is None:
            return None
        return hashlib.sha256(self.statistics.values.encode("ascii")).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        """Inverse of :meth:`to_dict`."""
        vr = data.get("value_range")
        stats = data.get("statistics")
        return cls(data["name"], tuple(int(d) for d in data["shape"]), data["dtype"],
                   tuple(vr) if vr is not None else None,  # type: ignore[arg-type]
                   ValueStatistics.from_dict(stats) if stats is not None else None)

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]"
