"""Records of the zoo: :class:`ZooModel` (public) and the private entry that pairs it with its builder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._builder import GraphBuilder, Value

__all__ = ["ZooModel", "TASKS", "InputSpec", "Arch", "ZooEntry", "image_input", "entry"]

#: The tasks of the zoo, in display order.
TASKS: tuple[str, ...] = (
    "image_classification",
    "object_detection",
    "semantic_segmentation",
    "language",
    "speech_recognition",
    "recommendation",
)

#: One graph input: (name, shape at batch size 1, numpy dtype name).
InputSpec = tuple[str, tuple[int, ...], str]

#: An architecture: adds its layers to the builder from the graph inputs, returns the named outputs.
Arch = Callable[..., Mapping[str, Value]]


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One model of the built-in zoo.

    Attributes
    ----------
    name : str
        Unique name, as given to :func:`dlbricks.model_zoo.build` (``"resnet50_v1"``).
    task : str
        One of :data:`TASKS`.
    family : str
        Architecture family (``"resnet"``, ``"bert"``...).
    input_shapes : tuple of (str, tuple of int, str)
        Each graph input's name, shape at batch size 1 and numpy dtype name.
    expected_params : int
        Trainable parameters as the reference counts them (see ``params_source``).
    params_source : str
        Where ``expected_params`` comes from.
    value_ranges : tuple of (str, int, int)
        Valid ``[low, high)`` range of each integer input (token ids, embedding indices).
    description : str
        One line: the architecture and the definition it follows.
    """

    name: str
    task: str
    family: str
    input_shapes: tuple[InputSpec, ...]
    expected_params: int
    params_source: str
    value_ranges: tuple[tuple[str, int, int], ...] = ()
    description: str = ""

    def shapes(self, batch_size: int = 1) -> dict[str, tuple[int, ...]]:
        """Input shapes with the batch dimension set to ``batch_size``."""
        return {n: (batch_size, *s[1:]) for n, s, _ in self.input_shapes}

    def ranges(self) -> dict[str, tuple[int, int]]:
        """Valid ``[low, high)`` value range of each integer input."""
        return {n: (lo, hi) for n, lo, hi in self.value_ranges}


@dataclass(frozen=True, slots=True)
class ZooEntry:
    """A :class:`ZooModel` with the function that builds its layers (private to the zoo)."""

    model: ZooModel
    arch: Arch

    def build_graph(self, builder: GraphBuilder, inputs: list[Value]) -> Mapping[str, Value]:
        """Add the model's layers to ``builder`` and return its named outputs."""
        return self.arch(builder, *inputs)


def image_input(size: int | tuple[int, int] = 224, channels: int = 3, name: str = "input") -> tuple[InputSpec, ...]:
    """A single NCHW float image input at batch size 1."""
    h, w = (size, size) if isinstance(size, int) else size
    return ((name, (1, channels, h, w), "float32"),)


def entry(
    name: str,
    task: str,
    family: str,
    inputs: tuple[InputSpec, ...],
    params: int,
    source: str,
    arch: Arch,
    description: str,
    value_ranges: Mapping[str, tuple[int, int]] | None = None,
) -> ZooEntry:
    """Shorthand used by the family modules to declare one model."""
    ranges = tuple((k, int(lo), int(hi)) for k, (lo, hi) in (value_ranges or {}).items())
    model = ZooModel(name, task, family, inputs, int(params), source, ranges, description)
    return ZooEntry(model, arch)
