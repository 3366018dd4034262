"""ResNet v1 (He et al. 2015, torchvision's v1.5 definition) and v2 (He et al. 2016, pre-activation,
MXNet Gluon's definition), depths 18 to 152; also the dilated backbone used by FCN and DeepLabv3."""

from __future__ import annotations

import functools

from ._builder import GraphBuilder, Value
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES", "resnet_v1_features", "classifier_head", "RESIDUAL_GAIN"]

#: Scale of the last norm (or conv) of every residual branch, so that 50 additions stay bounded.
RESIDUAL_GAIN = 0.2

# depth -> (bottleneck?, blocks per stage) : He et al. 2015, Table 1
_DEPTHS: dict[int, tuple[bool, tuple[int, int, int, int]]] = {
    18: (False, (2, 2, 2, 2)),
    34: (False, (3, 4, 6, 3)),
    50: (True, (3, 4, 6, 3)),
    101: (True, (3, 4, 23, 3)),
    152: (True, (3, 8, 36, 3)),
}
_WIDTHS = (64, 128, 256, 512)


def classifier_head(b: GraphBuilder, x: Value, classes: int = 1000) -> Value:
    """Global average pooling, flatten and the final fully connected layer."""
    return b.linear(b.flatten(b.global_avg_pool(x)), classes, name="fc")


def _v1_block(b: GraphBuilder, x: Value, planes: int, stride: int, dilation: int, bottleneck: bool) -> Value:
    out_channels = planes * 4 if bottleneck else planes
    if bottleneck:  # torchvision v1.5: the stride sits on the 3x3 convolution
        y = b.conv_bn(x, planes, 1, name="conv1")
        y = b.conv_bn(y, planes, 3, stride=stride, dilation=dilation, name="conv2")
        y = b.conv_bn(y, out_channels, 1, act=None, bn_gain=RESIDUAL_GAIN, name="conv3")
    else:
        y = b.conv_bn(x, planes, 3, stride=stride, name="conv1")
        y = b.conv_bn(y, planes, 3, act=None, bn_gain=RESIDUAL_GAIN, name="conv2")
    identity = x
    if stride != 1 or x.channels != out_channels:
        with b.scope("downsample"):
            identity = b.conv_bn(x, out_channels, 1, stride=stride, act=None, name="0")
    return b.relu(b.add(y, identity))


def resnet_v1_features(b: GraphBuilder, x: Value, depth: int,
                       dilate: tuple[bool, bool, bool] = (False, False, False)) -> list[Value]:
    """The torchvision ResNet trunk; returns the outputs of layer1..layer4.

    ``dilate`` replaces the stride of layer2..layer4 by dilation (``replace_stride_with_dilation``).
    """
    bottleneck, counts = _DEPTHS[depth]
    x = b.conv_bn(x, 64, 7, stride=2, padding=3, name="conv1")
    x = b.max_pool(x, 3, 2, padding=1)
    dilation = 1
    stages = []
    for i, (planes, n) in enumerate(zip(_WIDTHS, counts)):
        stride, previous = (1 if i == 0 else 2), dilation
        if i > 0 and dilate[i - 1]:
            dilation, stride = dilation * stride, 1
        for j in range(n):
            with b.scope(f"layer{i + 1}.{j}"):
                x = _v1_block(b, x, planes, stride if j == 0 else 1, previous if j == 0 else dilation, bottleneck)
        stages.append(x)
    return stages


def _resnet_v1(b: GraphBuilder, x: Value, *, depth: int) -> dict[str, Value]:
    return {"logits": classifier_head(b, resnet_v1_features(b, x, depth)[-1])}


def _v2_block(b: GraphBuilder, x: Value, channels: int, stride: int, bottleneck: bool) -> Value:
    pre = b.relu(b.batch_norm(x, name="bn1"))
    residual = x
    if stride != 1 or x.channels != channels:
        residual = b.conv(pre, channels, 1, stride=stride, bias=False, name="downsample")
    if bottleneck:
        y = b.conv(pre, channels // 4, 1, bias=False, name="conv1")
        y = b.conv(b.relu(b.batch_norm(y, name="bn2")), channels // 4, 3, stride=stride, bias=False, name="conv2")
        y = b.relu(b.batch_norm(y, name="bn3"))
    else:
        y = b.conv(pre, channels, 3, stride=stride, bias=False, name="conv1")
        y = b.relu(b.batch_norm(y, name="bn2"))
    last = ("conv3", 1) if bottleneck else ("conv2", 3)
    y = b.conv(y, channels, last[1], bias=False, gain=RESIDUAL_GAIN, name=last[0])
    return b.add(y, residual)


def _resnet_v2(b: GraphBuilder, x: Value, *, depth: int) -> dict[str, Value]:
    bottleneck, counts = _DEPTHS[depth]
    x = b.batch_norm(x, affine=False, name="data_bn")  # Gluon: BatchNorm(scale=False, center=False)
    x = b.conv_bn(x, 64, 7, stride=2, padding=3, name="conv0")
    x = b.max_pool(x, 3, 2, padding=1)
    for i, (width, n) in enumerate(zip(_WIDTHS, counts)):
        channels = width * 4 if bottleneck else width
        for j in range(n):
            with b.scope(f"stage{i + 1}.{j}"):
                x = _v2_block(b, x, channels, 2 if i > 0 and j == 0 else 1, bottleneck)
    x = b.relu(b.batch_norm(x, name="bn_final"))
    return {"logits": classifier_head(b, x)}


# torchvision's published counts (v1); v2 counts follow from the Gluon definition: v1 minus the
# projection shortcuts' BN, plus the final BN (the data BN has no trainable parameters).
_V1_PARAMS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032, 101: 44_549_160, 152: 60_192_808}
_V2_PARAMS = {18: 11_687_848, 34: 21_796_008, 50: 25_549_480, 101: 44_541_608, 152: 60_185_256}

ENTRIES: tuple[ZooEntry, ...] = tuple(
    entry(f"resnet{d}_v1", "image_classification", "resnet", image_input(224), _V1_PARAMS[d],
          "torchvision resnet (model card)", functools.partial(_resnet_v1, depth=d),
          f"ResNet-{d} v1.5 (He et al. 2015, Table 1; torchvision: stride on the 3x3 conv)")
    for d in _DEPTHS
) + tuple(
    entry(f"resnet{d}_v2", "image_classification", "resnet", image_input(224), _V2_PARAMS[d],
          "derived from the Gluon ResNetV2 definition (no published count)",
          functools.partial(_resnet_v2, depth=d),
          f"ResNet-{d} v2, pre-activation (He et al. 2016, Identity Mappings; MXNet Gluon resnet{d}_v2)")
    for d in _DEPTHS
)
