"""MobileNet v1 (Howard et al. 2017), v2 (Sandler et al. 2018) and v3 (Howard et al. 2019) at several
width multipliers; v3's trunk is shared with SSDLite, LR-ASPP and DeepLabv3 heads."""

from __future__ import annotations

import functools
from typing import NamedTuple

from ._builder import GraphBuilder, Value
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES", "make_divisible", "mobilenet_v3_features", "se_block"]


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round a width to a multiple of ``divisor``, never below 90% of ``v`` (TF/torchvision rule)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def se_block(b: GraphBuilder, x: Value, squeeze: int, act: str, gate: str) -> Value:
    """Squeeze-and-excitation: pool, 1x1 reduce, ``act``, 1x1 expand, ``gate``, rescale ``x``."""
    with b.scope("se"):
        s = b.activation(b.conv(b.global_avg_pool(x), squeeze, 1, name="fc1"), act)
        s = b.activation(b.conv(s, x.channels, 1, gain=1.0, name="fc2"), gate)
        return b.mul(x, s)


# ----------------------------------------------------------------------------------- MobileNet v1
# Howard et al. 2017, Table 1: (pointwise width, depthwise stride) of the 13 separable blocks
_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1))


def _mobilenet_v1(b: GraphBuilder, x: Value, *, alpha: float) -> dict[str, Value]:
    x = b.conv_bn(x, int(32 * alpha), 3, stride=2, act="relu6", name="conv1")
    for i, (width, stride) in enumerate(_V1_BLOCKS):
        with b.scope(f"block{i + 1}"):
            x = b.conv_bn(x, x.channels, 3, stride=stride, groups=x.channels, act="relu6", name="dw")
            x = b.conv_bn(x, int(width * alpha), 1, act="relu6", name="pw")
    logits = b.linear(b.flatten(b.global_avg_pool(x)), 1000, name="fc")
    return {"probabilities": b.softmax(logits)}


# ----------------------------------------------------------------------------------- MobileNet v2
# Sandler et al. 2018, Table 2: (expansion t, channels c, repeats n, stride s)
_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
               (6, 320, 1, 1))


def _inverted_residual_v2(b: GraphBuilder, x: Value, out: int, stride: int, t: int) -> Value:
    y = x
    if t != 1:
        y = b.conv_bn(y, round(x.channels * t), 1, act="relu6", name="expand")
    y = b.conv_bn(y, y.channels, 3, stride=stride, groups=y.channels, act="relu6", name="dw")
    residual = stride == 1 and x.channels == out
    y = b.conv_bn(y, out, 1, act=None, bn_gain=0.2 if residual else 1.0, name="project")
    return b.add(x, y) if residual else y


def _mobilenet_v2(b: GraphBuilder, x: Value, *, width: float) -> dict[str, Value]:
    x = b.conv_bn(x, make_divisible(32 * width), 3, stride=2, act="relu6", name="features.0")
    k = 1
    for t, c, n, s in _V2_SETTING:
        for i in range(n):
            with b.scope(f"features.{k}"):
                x = _inverted_residual_v2(b, x, make_divisible(c * width), s if i == 0 else 1, t)
            k += 1
    x = b.conv_bn(x, make_divisible(1280 * max(1.0, width)), 1, act="relu6", name=f"features.{k}")
    return {"logits": b.linear(b.flatten(b.global_avg_pool(x)), 1000, name="classifier.1")}


# ----------------------------------------------------------------------------------- MobileNet v3
class _V3Block(NamedTuple):
    kernel: int
    expanded: int
    out: int
    se: bool
    act: str
    stride: int


# Howard et al. 2019, Tables 1 and 2 (torchvision's _mobilenet_v3_conf)
_V3_LARGE = (
    _V3Block(3, 16, 16, False, "relu", 1), _V3Block(3, 64, 24, False, "relu", 2),
    _V3Block(3, 72, 24, False, "relu", 1), _V3Block(5, 72, 40, True, "relu", 2),
    _V3Block(5, 120, 40, True, "relu", 1), _V3Block(5, 120, 40, True, "relu", 1),
    _V3Block(3, 240, 80, False, "hswish", 2), _V3Block(3, 200, 80, False, "hswish", 1),
    _V3Block(3, 184, 80, False, "hswish", 1), _V3Block(3, 184, 80, False, "hswish", 1),
    _V3Block(3, 480, 112, True, "hswish", 1), _V3Block(3, 672, 112, True, "hswish", 1),
    _V3Block(5, 672, 160, True, "hswish", 2), _V3Block(5, 960, 160, True, "hswish", 1),
    _V3Block(5, 960, 160, True, "hswish", 1),
)
_V3_SMALL = (
    _V3Block(3, 16, 16, True, "relu", 2), _V3Block(3, 72, 24, False, "relu", 2),
    _V3Block(3, 88, 24, False, "relu", 1), _V3Block(5, 96, 40, True, "hswish", 2),
    _V3Block(5, 240, 40, True, "hswish", 1), _V3Block(5, 240, 40, True, "hswish", 1),
    _V3Block(5, 120, 48, True, "hswish", 1), _V3Block(5, 144, 48, True, "hswish", 1),
    _V3Block(5, 288, 96, True, "hswish", 2), _V3Block(5, 576, 96, True, "hswish", 1),
    _V3Block(5, 576, 96, True, "hswish", 1),
)
_V3 = {"large": (_V3_LARGE, 1280), "small": (_V3_SMALL, 1024)}
_V3_EPS = 1e-3


class V3Features(NamedTuple):
    """Outputs of torchvision's ``features[i]`` (``outputs``), the stride-2 block indices (C1..C4)
    and, per block, the output of its expansion conv (``expansions``, SSDLite taps C4's)."""

    outputs: list[Value]
    strided: list[int]
    expansions: dict[int, Value]


def mobilenet_v3_features(b: GraphBuilder, x: Value, arch: str, *, reduced_tail: bool = False,
                          dilated: bool = False) -> V3Features:
    """The MobileNetV3 trunk (first conv, bnecks, last 1x1 conv of 6x the last width)."""
    blocks, _ = _V3[arch]
    div, tail_start = (2 if reduced_tail else 1), len(blocks) - 3  # the last 3 blocks form stage C4
    outputs, strided, expansions = [], [], {}
    with b.scope("features.0"):
        x = b.conv_bn(x, 16, 3, stride=2, act="hswish", eps=_V3_EPS)
    outputs.append(x)
    for i, cfg in enumerate(blocks, start=1):
        tail = i - 1 >= tail_start
        expanded = cfg.expanded // div if i - 1 > tail_start else cfg.expanded
        out = cfg.out // div if tail else cfg.out
        dilation = 2 if dilated and tail else 1
        stride = 1 if dilation > 1 else cfg.stride
        with b.scope(f"features.{i}"):
            y = x
            if expanded != x.channels:
                y = b.conv_bn(y, expanded, 1, act=cfg.act, eps=_V3_EPS, name="expand")
                expansions[i] = y
            y = b.conv_bn(y, expanded, cfg.kernel, stride=stride, dilation=dilation, groups=expanded,
                          act=cfg.act, eps=_V3_EPS, name="dw")
            if cfg.se:
                y = se_block(b, y, make_divisible(expanded // 4), "relu", "hsigmoid")
            residual = cfg.stride == 1 and x.channels == out
            y = b.conv_bn(y, out, 1, act=None, eps=_V3_EPS, bn_gain=0.2 if residual else 1.0, name="project")
            x = b.add(x, y) if residual else y
        if cfg.stride > 1:
            strided.append(i)
        outputs.append(x)
    with b.scope(f"features.{len(blocks) + 1}"):
        x = b.conv_bn(x, 6 * x.channels, 1, act="hswish", eps=_V3_EPS)
    outputs.append(x)
    return V3Features(outputs, strided, expansions)


def _mobilenet_v3(b: GraphBuilder, x: Value, *, arch: str) -> dict[str, Value]:
    x = mobilenet_v3_features(b, x, arch).outputs[-1]
    x = b.hard_swish(b.linear(b.flatten(b.global_avg_pool(x)), _V3[arch][1], name="classifier.0"))
    return {"logits": b.linear(x, 1000, name="classifier.3")}


# Keras Applications' trainable counts for v1 (paper Table 6: 4.2M / 2.6M / 1.3M / 0.5M).
_V1_PARAMS = {1.0: 4_231_976, 0.75: 2_585_560, 0.5: 1_331_592, 0.25: 470_072}
# torchvision for 1.0; other widths derived from the torchvision definition (TF-slim README:
# 6.06M / 2.61M / 1.95M / 1.66M for 1.4 / 0.75 / 0.5 / 0.35)
_V2_PARAMS = {1.4: 6_108_776, 1.0: 3_504_872, 0.75: 2_636_424, 0.5: 1_968_680, 0.35: 1_677_128}

ENTRIES: tuple[ZooEntry, ...] = (
    *(entry(f"mobilenet_v1_{a}", "image_classification", "mobilenet", image_input(224), _V1_PARAMS[a],
            "Keras Applications MobileNet (trainable)" if a == 1.0 else
            "derived from the Keras MobileNet definition (paper Table 6, rounded)",
            functools.partial(_mobilenet_v1, alpha=a), f"MobileNet v1, width {a} (Howard et al. 2017, Table 1)")
      for a in _V1_PARAMS),
    *(entry(f"mobilenet_v2_{w}", "image_classification", "mobilenet", image_input(224), _V2_PARAMS[w],
            "torchvision mobilenet_v2" if w == 1.0 else
            "derived from the torchvision MobileNetV2 definition (TF-slim README, rounded)",
            functools.partial(_mobilenet_v2, width=w),
            f"MobileNet v2, width {w} (Sandler et al. 2018, Table 2; torchvision)")
      for w in _V2_PARAMS),
    entry("mobilenet_v3_large", "image_classification", "mobilenet", image_input(224), 5_483_032,
          "torchvision mobilenet_v3_large", functools.partial(_mobilenet_v3, arch="large"),
          "MobileNet v3 Large (Howard et al. 2019, Table 1; torchvision)"),
    entry("mobilenet_v3_small", "image_classification", "mobilenet", image_input(224), 2_542_856,
          "torchvision mobilenet_v3_small", functools.partial(_mobilenet_v3, arch="small"),
          "MobileNet v3 Small (Howard et al. 2019, Table 2; torchvision)"),
)
