"""Semantic segmentation: FCN and DeepLabv3 on dilated ResNets and MobileNetV3, LR-ASPP (torchvision
definitions, 21 VOC classes, with their auxiliary heads) and U-Net (Ronneberger et al. 2015)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ._builder import GraphBuilder, Value
from ._mobilenet import mobilenet_v3_features
from ._resnet import resnet_v1_features
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES"]

_CLASSES = 21
_Head = Callable[[GraphBuilder, Value], Value]
_SIZE = 512


def _fcn_head(b: GraphBuilder, x: Value, classes: int = _CLASSES) -> Value:
    """torchvision's FCNHead: 3x3 conv to in/4 channels, BN, ReLU, 1x1 classifier."""
    y = b.conv_bn(x, x.channels // 4, 3, name="0")
    return b.conv(y, classes, 1, gain=1.0, name="4")


def _aspp(b: GraphBuilder, x: Value, rates: tuple[int, ...] = (12, 24, 36), width: int = 256) -> Value:
    """Atrous spatial pyramid pooling (Chen et al. 2017, Fig. 5): 1x1, three dilated 3x3, image pooling."""
    branches = [b.conv_bn(x, width, 1, name="convs.0")]
    for i, rate in enumerate(rates):
        branches.append(b.conv_bn(x, width, 3, dilation=rate, name=f"convs.{i + 1}"))
    with b.scope("pooling"):
        pooled = b.conv_bn(b.global_avg_pool(x), width, 1, name="conv")
        branches.append(b.resize(pooled, x.shape[2:]))
    return b.conv_bn(b.concat(branches), width, 1, name="project")


def _deeplab_head(b: GraphBuilder, x: Value) -> Value:
    with b.scope("aspp"):
        x = _aspp(b, x)
    x = b.conv_bn(x, 256, 3, name="1")
    return b.conv(x, _CLASSES, 1, gain=1.0, name="4")


def _segmentation_outputs(b: GraphBuilder, size: tuple[int, ...], head: _Head, x: Value,
                          aux: Value) -> dict[str, Value]:
    with b.scope("classifier"):
        out = b.resize(head(b, x), size)
    with b.scope("aux_classifier"):
        aux_out = b.resize(_fcn_head(b, aux), size)
    return {"out": out, "aux": aux_out}


def _resnet_seg(b: GraphBuilder, x: Value, *, depth: int, head: _Head) -> dict[str, Value]:
    """FCN / DeepLabv3 on a ResNet with output stride 8; the aux head reads layer3."""
    *_, layer3, layer4 = resnet_v1_features(b, x, depth, dilate=(False, True, True))
    return _segmentation_outputs(b, x.shape[2:], head, layer4, layer3)


def _deeplabv3_mobilenet(b: GraphBuilder, x: Value) -> dict[str, Value]:
    feats = mobilenet_v3_features(b, x, "large", dilated=True)
    aux = feats.outputs[feats.strided[-3]]  # C2's first block: output stride 8
    return _segmentation_outputs(b, x.shape[2:], _deeplab_head, feats.outputs[-1], aux)


def _lraspp_mobilenet(b: GraphBuilder, x: Value) -> dict[str, Value]:
    """Lite R-ASPP (Howard et al. 2019, Fig. 10): high-level features gated by their pooled sigmoid,
    upsampled and added to a classifier of the stride-8 features."""
    feats = mobilenet_v3_features(b, x, "large", dilated=True)
    low, high = feats.outputs[feats.strided[-3]], feats.outputs[-1]
    with b.scope("classifier"):
        y = b.conv_bn(high, 128, 1, name="cbr")
        scale = b.sigmoid(b.conv(b.global_avg_pool(high), 128, 1, bias=False, gain=1.0, name="scale"))
        y = b.resize(b.mul(y, scale), low.shape[2:])
        y = b.add(b.conv(low, _CLASSES, 1, gain=1.0, name="low_classifier"),
                  b.conv(y, _CLASSES, 1, gain=1.0, name="high_classifier"))
    return {"out": b.resize(y, x.shape[2:])}


def _unet(b: GraphBuilder, x: Value, *, classes: int = 2) -> dict[str, Value]:
    """U-Net as in Ronneberger et al. 2015, Fig. 1: unpadded 3x3 convs, 2x2 up-convs, cropped skips."""
    def double_conv(y: Value, width: int) -> Value:
        return b.relu(b.conv(b.relu(b.conv(y, width, 3, padding=0, name="conv1")), width, 3, padding=0,
                             name="conv2"))

    skips = []
    for i, width in enumerate((64, 128, 256, 512)):
        with b.scope(f"down{i}"):
            skips.append(x := double_conv(x, width))
        x = b.max_pool(x, 2, 2)
    with b.scope("bottom"):
        x = double_conv(x, 1024)
    for i, skip in enumerate(reversed(skips)):
        with b.scope(f"up{i}"):
            x = b.conv_transpose(x, skip.channels, 2, 2)
            off = (skip.shape[2] - x.shape[2]) // 2  # crop the skip's center to the up-conv's size
            crop = b.slice(skip, [off, off], [off + x.shape[2], off + x.shape[3]], [2, 3])
            x = double_conv(b.concat([crop, x]), skip.channels)
    return {"out": b.conv(x, classes, 1, gain=1.0, name="final")}


ENTRIES: tuple[ZooEntry, ...] = (
    *(entry(f"{kind}_resnet{d}", "semantic_segmentation", kind, image_input(_SIZE), params,
            f"torchvision {kind}_resnet{d} (aux head included)",
            functools.partial(_resnet_seg, depth=d, head=head),
            f"{label} on a dilated ResNet-{d}, output stride 8, aux FCN head on layer3 (torchvision)")
      for kind, label, head, d, params in [
          ("fcn", "FCN (Long et al. 2015)", _fcn_head, 50, 35_322_218),
          ("fcn", "FCN (Long et al. 2015)", _fcn_head, 101, 54_314_346),
          ("deeplabv3", "DeepLabv3 (Chen et al. 2017)", _deeplab_head, 50, 42_004_074),
          ("deeplabv3", "DeepLabv3 (Chen et al. 2017)", _deeplab_head, 101, 60_996_202)]),
    entry("deeplabv3_mobilenet_v3_large", "semantic_segmentation", "deeplabv3", image_input(_SIZE), 11_029_328,
          "torchvision deeplabv3_mobilenet_v3_large (aux head included)", _deeplabv3_mobilenet,
          "DeepLabv3 on a dilated MobileNetV3-Large, output stride 16 (torchvision)"),
    entry("lraspp_mobilenet_v3_large", "semantic_segmentation", "lraspp", image_input(_SIZE), 3_221_538,
          "torchvision lraspp_mobilenet_v3_large", _lraspp_mobilenet,
          "LR-ASPP on a dilated MobileNetV3-Large (Howard et al. 2019; torchvision)"),
    entry("unet", "semantic_segmentation", "unet", image_input(572, channels=1), 31_030_658,
          "derived from Ronneberger et al. 2015, Fig. 1 (no published count)", _unet,
          "U-Net (Ronneberger et al. 2015, Fig. 1): 572x572 input, 388x388 2-class output"),
)
