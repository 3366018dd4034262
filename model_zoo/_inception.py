"""Inception v3 (Szegedy et al. 2016), following torchvision's definition at 299x299."""

from __future__ import annotations

from collections.abc import Sequence

from ._builder import GraphBuilder, Value
from ._resnet import classifier_head
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES"]


def _cbr(b: GraphBuilder, x: Value, channels: int, kernel: int | tuple[int, int], stride: int = 1,
         padding: int | tuple[int, int] = 0) -> Value:
    """torchvision's BasicConv2d: conv without bias, BatchNorm(eps=1e-3), ReLU."""
    return b.conv_bn(x, channels, kernel, stride=stride, padding=padding, eps=1e-3, name="conv")


def _chain(b: GraphBuilder, x: Value, layers: Sequence[tuple]) -> Value:
    """A branch of (channels, kernel, stride, padding) convolutions."""
    for i, spec in enumerate(layers):
        with b.scope(str(i)):
            x = _cbr(b, x, *spec)
    return x


def _pool_branch(b: GraphBuilder, x: Value, channels: int) -> Value:
    return _cbr(b, b.avg_pool(x, 3, 1, padding=1), channels, 1)


_1x7, _7x1 = ((1, 7), (0, 3)), ((7, 1), (3, 0))


def _mixed(b: GraphBuilder, x: Value, kind: str, arg: int = 0) -> Value:
    """One Inception module: A (35x35), B (grid reduction), C (17x17), D (reduction), E (8x8)."""
    if kind == "A":
        branches = [_chain(b, x, [(64, 1)]),
                    _chain(b, x, [(48, 1), (64, 5, 1, 2)]),
                    _chain(b, x, [(64, 1), (96, 3, 1, 1), (96, 3, 1, 1)]),
                    _pool_branch(b, x, arg)]
    elif kind == "B":
        branches = [_chain(b, x, [(384, 3, 2)]),
                    _chain(b, x, [(64, 1), (96, 3, 1, 1), (96, 3, 2)]),
                    b.max_pool(x, 3, 2)]
    elif kind == "C":
        c7 = arg
        branches = [_chain(b, x, [(192, 1)]),
                    _chain(b, x, [(c7, 1), (c7, _1x7[0], 1, _1x7[1]), (192, _7x1[0], 1, _7x1[1])]),
                    _chain(b, x, [(c7, 1), (c7, _7x1[0], 1, _7x1[1]), (c7, _1x7[0], 1, _1x7[1]),
                                  (c7, _7x1[0], 1, _7x1[1]), (192, _1x7[0], 1, _1x7[1])]),
                    _pool_branch(b, x, 192)]
    elif kind == "D":
        branches = [_chain(b, x, [(192, 1), (320, 3, 2)]),
                    _chain(b, x, [(192, 1), (192, _1x7[0], 1, _1x7[1]), (192, _7x1[0], 1, _7x1[1]),
                                  (192, 3, 2)]),
                    b.max_pool(x, 3, 2)]
    else:  # "E": the 3x3 convolutions split into parallel 1x3 and 3x1
        def split_3x3(y: Value) -> Value:
            return b.concat([_chain(b, y, [(384, (1, 3), 1, (0, 1))]), _chain(b, y, [(384, (3, 1), 1, (1, 0))])])

        branches = [_chain(b, x, [(320, 1)]),
                    split_3x3(_chain(b, x, [(384, 1)])),
                    split_3x3(_chain(b, x, [(448, 1), (384, 3, 1, 1)])),
                    _pool_branch(b, x, 192)]
    return b.concat(branches)


# (name, kind, pool features or 7x7 width) : torchvision Mixed_5b .. Mixed_7c
_MODULES = [("Mixed_5b", "A", 32), ("Mixed_5c", "A", 64), ("Mixed_5d", "A", 64), ("Mixed_6a", "B", 0),
            ("Mixed_6b", "C", 128), ("Mixed_6c", "C", 160), ("Mixed_6d", "C", 160), ("Mixed_6e", "C", 192),
            ("Mixed_7a", "D", 0), ("Mixed_7b", "E", 0), ("Mixed_7c", "E", 0)]


def _inception_v3(b: GraphBuilder, x: Value) -> dict[str, Value]:
    for name, spec in [("Conv2d_1a_3x3", (32, 3, 2)), ("Conv2d_2a_3x3", (32, 3)), ("Conv2d_2b_3x3", (64, 3, 1, 1)),
                       ("maxpool1", None), ("Conv2d_3b_1x1", (80, 1)), ("Conv2d_4a_3x3", (192, 3)),
                       ("maxpool2", None)]:
        if spec is None:
            x = b.max_pool(x, 3, 2)
            continue
        with b.scope(name):
            x = _cbr(b, x, *spec)
    for name, kind, arg in _MODULES:
        with b.scope(name):
            x = _mixed(b, x, kind, arg)
    return {"logits": classifier_head(b, x)}


ENTRIES: tuple[ZooEntry, ...] = (
    entry("inception_v3", "image_classification", "inception", image_input(299), 23_834_568,
          "torchvision inception_v3 without the training-only AuxLogits (27,161,264 with them)",
          _inception_v3, "Inception v3 (Szegedy et al. 2016, Table 1; torchvision, inference graph)"),
)
