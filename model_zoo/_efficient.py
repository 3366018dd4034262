"""ShuffleNet v2 (Ma et al. 2018) at 0.5x to 2.0x and EfficientNet-B0 (Tan & Le 2019), following
torchvision's definitions."""

from __future__ import annotations

import functools

from ._builder import GraphBuilder, Value
from ._mobilenet import se_block
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES"]

# ----------------------------------------------------------------------------------- ShuffleNet v2
# Ma et al. 2018, Table 5: output channels of conv1, stages 2-4 and conv5; units per stage 4, 8, 4
_SHUFFLE_WIDTHS = {"0.5": (24, 48, 96, 192, 1024), "1.0": (24, 116, 232, 464, 1024),
                   "1.5": (24, 176, 352, 704, 1024), "2.0": (24, 244, 488, 976, 2048)}
_SHUFFLE_PARAMS = {"0.5": 1_366_792, "1.0": 2_278_604, "1.5": 3_503_624, "2.0": 7_393_996}


def _channel_shuffle(b: GraphBuilder, x: Value, groups: int = 2) -> Value:
    n, c, h, w = x.shape
    x = b.reshape(x, (n, groups, c // groups, h, w))
    return b.reshape(b.transpose(x, (0, 2, 1, 3, 4)), (n, -1, h, w))


def _shuffle_unit(b: GraphBuilder, x: Value, out: int, stride: int) -> Value:
    half = out // 2
    if stride == 1:
        left, right = b.split(x, [x.channels // 2, x.channels // 2])
    else:
        with b.scope("branch1"):
            left = b.conv_bn(x, x.channels, 3, stride=stride, groups=x.channels, act=None, name="dw")
            left = b.conv_bn(left, half, 1, name="pw")
        right = x
    with b.scope("branch2"):
        y = b.conv_bn(right, half, 1, name="pw1")
        y = b.conv_bn(y, half, 3, stride=stride, groups=half, act=None, name="dw")
        y = b.conv_bn(y, half, 1, name="pw2")
    return _channel_shuffle(b, b.concat([left, y]))


def _shufflenet_v2(b: GraphBuilder, x: Value, *, width: str) -> dict[str, Value]:
    widths = _SHUFFLE_WIDTHS[width]
    x = b.conv_bn(x, widths[0], 3, stride=2, name="conv1")
    x = b.max_pool(x, 3, 2, padding=1)
    for s, (out, repeats) in enumerate(zip(widths[1:4], (4, 8, 4))):
        for i in range(repeats):
            with b.scope(f"stage{s + 2}.{i}"):
                x = _shuffle_unit(b, x, out, 2 if i == 0 else 1)
    x = b.conv_bn(x, widths[4], 1, name="conv5")
    return {"logits": b.linear(b.reduce("ReduceMean", x, [2, 3], keepdims=False), 1000, name="fc")}


# ----------------------------------------------------------------------------------- EfficientNet-B0
# Tan & Le 2019, Table 1: (expansion, kernel, stride, output channels, layers)
_B0_STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def _mbconv(b: GraphBuilder, x: Value, expand: int, kernel: int, stride: int, out: int) -> Value:
    y = x
    if expand != 1:
        y = b.conv_bn(y, x.channels * expand, 1, act="silu", name="expand")
    y = b.conv_bn(y, y.channels, kernel, stride=stride, groups=y.channels, act="silu", name="dw")
    y = se_block(b, y, max(1, x.channels // 4), "silu", "sigmoid")
    residual = stride == 1 and x.channels == out
    y = b.conv_bn(y, out, 1, act=None, bn_gain=0.2 if residual else 1.0, name="project")
    return b.add(y, x) if residual else y


def _efficientnet_b0(b: GraphBuilder, x: Value) -> dict[str, Value]:
    x = b.conv_bn(x, 32, 3, stride=2, act="silu", name="features.0")
    for s, (expand, kernel, stride, out, layers) in enumerate(_B0_STAGES):
        for i in range(layers):
            with b.scope(f"features.{s + 1}.{i}"):
                x = _mbconv(b, x, expand, kernel, stride if i == 0 else 1, out)
    x = b.conv_bn(x, 1280, 1, act="silu", name="features.8")
    return {"logits": b.linear(b.flatten(b.global_avg_pool(x)), 1000, name="classifier.1")}


ENTRIES: tuple[ZooEntry, ...] = (
    *(entry(f"shufflenet_v2_x{w.replace('.', '_')}", "image_classification", "shufflenet", image_input(224),
            _SHUFFLE_PARAMS[w], f"torchvision shufflenet_v2_x{w.replace('.', '_')}",
            functools.partial(_shufflenet_v2, width=w), f"ShuffleNet v2 {w}x (Ma et al. 2018, Table 5)")
      for w in _SHUFFLE_WIDTHS),
    entry("efficientnet_b0", "image_classification", "efficientnet", image_input(224), 5_288_548,
          "torchvision efficientnet_b0", _efficientnet_b0, "EfficientNet-B0 (Tan & Le 2019, Table 1)"),
)
