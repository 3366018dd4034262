"""Object detectors with their box decoding in the graph: SSD300-VGG16 (Liu et al. 2016) and
SSDLite320-MobileNetV3-Large (torchvision), YOLOv3 and YOLOv3-tiny (Redmon & Farhadi 2018, darknet cfg).

Non-maximum suppression is left out (it is data dependent); the graphs end with decoded boxes and
per-class scores. Anchors and grids are ``Constant`` nodes, not parameters."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ._builder import GraphBuilder, Value
from ._classic import VGG_CONFIGS, vgg_features
from ._mobilenet import mobilenet_v3_features
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES"]

_COCO_CLASSES_SSD = 91  # torchvision's COCO label space, background included
_COCO_CLASSES_YOLO = 80


# ----------------------------------------------------------------------------------- SSD family
def _default_boxes(image: int, sizes: Sequence[int], ratios: Sequence[Sequence[int]], scales: Sequence[float],
                   steps: Sequence[int] | None) -> np.ndarray:
    """torchvision's DefaultBoxGenerator: (cx, cy, w, h) in pixels, location-major then box."""
    boxes = []
    for k, f in enumerate(sizes):
        s_k, s_prime = scales[k], math.sqrt(scales[k] * scales[k + 1])
        wh = [(s_k, s_k), (s_prime, s_prime)]
        for ar in ratios[k]:
            r = math.sqrt(ar)
            wh += [(s_k * r, s_k / r), (s_k / r, s_k * r)]
        wh_arr = np.clip(np.array(wh, np.float32), 0.0, 1.0)
        step = (image / steps[k]) if steps else f
        centers = (np.arange(f, dtype=np.float32) + 0.5) / step
        cy, cx = np.meshgrid(centers, centers, indexing="ij")
        ctr = np.stack([cx.ravel(), cy.ravel()], axis=-1)
        boxes.append(np.concatenate([np.repeat(ctr, len(wh), axis=0), np.tile(wh_arr, (f * f, 1))], axis=1))
    return np.concatenate(boxes).astype(np.float32) * np.float32(image)


def _ssd_outputs(b: GraphBuilder, maps: Sequence[Value], anchors_per_loc: Sequence[int], classes: int,
                 predictor: Callable[[GraphBuilder, Value, int], Value], image: int,
                 ratios: Sequence[Sequence[int]], scales: Sequence[float],
                 steps: Sequence[int] | None) -> dict[str, Value]:
    """Classification and regression heads on every map, then softmax scores and decoded boxes."""
    columns: dict[str, list[Value]] = {"cls": [], "reg": []}
    for i, (x, a) in enumerate(zip(maps, anchors_per_loc)):
        for kind, width in (("cls", classes), ("reg", 4)):
            with b.scope(f"head.{kind}.{i}"):
                y = predictor(b, x, a * width)
                n, _, h, w = y.shape
                y = b.transpose(b.reshape(y, (n, a, width, h, w)), (0, 3, 4, 1, 2))
                columns[kind].append(b.reshape(y, (n, -1, width)))
    logits, reg = b.concat(columns["cls"], axis=1), b.concat(columns["reg"], axis=1)
    anchors = _default_boxes(image, [m.shape[2] for m in maps], ratios, scales, steps)
    with b.scope("decode"):  # BoxCoder(weights=(10, 10, 5, 5)), boxes as (x1, y1, x2, y2)
        dxy, dwh = b.split(reg, [2, 2], axis=2)
        ctr_a, wh_a = b.const(anchors[None, :, :2], "anchor_ctr"), b.const(anchors[None, :, 2:], "anchor_wh")
        ctr = b.add(b.mul(b.mul(dxy, 0.1), wh_a), ctr_a)
        half = b.mul(b.mul(b.exp(b.mul(dwh, 0.2)), wh_a), 0.5)
        boxes = b.concat([b.sub(ctr, half), b.add(ctr, half)], axis=2)
        scores = b.softmax(logits, axis=-1)
    return {"boxes": boxes, "scores": scores}


def _conv_predictor(b: GraphBuilder, x: Value, out: int) -> Value:
    return b.conv(x, out, 3, gain=1.0)


def _ssd300_vgg16(b: GraphBuilder, x: Value) -> dict[str, Value]:
    # VGG16 up to conv5_3 (no pool5), pool3 in ceil mode so that conv4_3 is 38x38
    *taps, x = vgg_features(b, x, VGG_CONFIGS[16][:-1], ceil_pools=frozenset({2}))
    conv4_3 = taps[3]
    with b.scope("l2norm"):
        norm = b.max(b.reduce("ReduceL2", conv4_3, [1]), 1e-12)
        maps = [b.mul(b.div(conv4_3, norm), b.filled((1, conv4_3.channels, 1, 1), 20.0, "scale_weight"))]
    x = b.max_pool(x, 3, 1, padding=1)
    x = b.relu(b.conv(x, 1024, 3, padding=6, dilation=6, name="fc6"))
    maps.append(x := b.relu(b.conv(x, 1024, 1, name="fc7")))
    # (1x1 width, 3x3 width, stride, padding) of conv8_2 .. conv11_2
    for i, (mid, out, s, p) in enumerate([(256, 512, 2, 1), (128, 256, 2, 1), (128, 256, 1, 0), (128, 256, 1, 0)]):
        with b.scope(f"extra.{i}"):
            x = b.relu(b.conv(x, mid, 1))
            maps.append(x := b.relu(b.conv(x, out, 3, stride=s, padding=p)))
    ratios = [[2], [2, 3], [2, 3], [2, 3], [2], [2]]
    return _ssd_outputs(b, maps, [2 + 2 * len(r) for r in ratios], _COCO_CLASSES_SSD, _conv_predictor, 300,
                        ratios, [0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05], [8, 16, 32, 64, 100, 300])


_LITE_EPS = 1e-3


def _lite_predictor(b: GraphBuilder, x: Value, out: int) -> Value:
    y = b.conv_bn(x, x.channels, 3, groups=x.channels, act="relu6", eps=_LITE_EPS, name="dw")
    return b.conv(y, out, 1, gain=1.0, name="pw")


def _ssdlite320_mobilenet_v3(b: GraphBuilder, x: Value) -> dict[str, Value]:
    feats = mobilenet_v3_features(b, x, "large", reduced_tail=True)
    c4 = feats.strided[-1]
    maps = [feats.expansions[c4], feats.outputs[-1]]  # C4's expansion conv (stride 16), then C5
    x = maps[-1]
    for i, out in enumerate((512, 256, 256, 128)):
        with b.scope(f"extra.{i}"):
            x = b.conv_bn(x, out // 2, 1, act="relu6", eps=_LITE_EPS, name="pw1")
            x = b.conv_bn(x, out // 2, 3, stride=2, groups=out // 2, act="relu6", eps=_LITE_EPS, name="dw")
            maps.append(x := b.conv_bn(x, out, 1, act="relu6", eps=_LITE_EPS, name="pw2"))
    ratios = [[2, 3]] * 6
    scales = [0.2 + 0.75 * k / 5 for k in range(6)] + [1.0]
    return _ssd_outputs(b, maps, [6] * 6, _COCO_CLASSES_SSD, _lite_predictor, 320, ratios, scales, None)


# ----------------------------------------------------------------------------------- YOLO family
_YOLO_ANCHORS = ((10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119), (116, 90), (156, 198), (373, 326))
_TINY_ANCHORS = ((10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319))


def _dconv(b: GraphBuilder, x: Value, channels: int, kernel: int, stride: int = 1, gain: float = 1.0) -> Value:
    """Darknet's convolutional layer: conv without bias, BatchNorm, leaky ReLU(0.1)."""
    return b.conv_bn(x, channels, kernel, stride=stride, act="leaky", bn_gain=gain, name="conv")


def _yolo_layer(b: GraphBuilder, x: Value, anchors: Sequence[tuple[int, int]], image: int) -> Value:
    """Darknet's [yolo] layer: 1x1 prediction conv, then boxes decoded in pixels, sigmoid scores."""
    p = b.conv(x, len(anchors) * (5 + _COCO_CLASSES_YOLO), 1, gain=0.1, name="pred")  # keeps Exp tame
    n, _, h, w = p.shape
    a, k = len(anchors), 5 + _COCO_CLASSES_YOLO
    with b.scope("decode"):
        p = b.transpose(b.reshape(p, (n, a, k, h, w)), (0, 1, 3, 4, 2))
        xy, wh, conf = b.split(p, [2, 2, k - 4], axis=4)
        gy, gx = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
        grid = b.const(np.stack([gx, gy], axis=-1)[None, None], "grid")
        xy = b.mul(b.add(b.sigmoid(xy), grid), float(image // h))
        wh = b.mul(b.exp(wh), b.const(np.array(anchors, np.float32).reshape(1, a, 1, 1, 2), "anchors"))
        out = b.concat([xy, wh, b.sigmoid(conf)], axis=4)
        return b.reshape(out, (n, a * h * w, k))


def _darknet53(b: GraphBuilder, x: Value) -> list[Value]:
    """Darknet-53 (YOLOv3 paper, Table 1); returns the stride 8, 16 and 32 feature maps."""
    with b.scope("conv0"):
        x = _dconv(b, x, 32, 3)
    taps = []
    for s, (channels, blocks) in enumerate([(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]):
        with b.scope(f"down{s}"):
            x = _dconv(b, x, channels, 3, stride=2)
        for i in range(blocks):
            with b.scope(f"stage{s}.{i}"):
                y = _dconv(b, x, channels // 2, 1)
                x = b.add(x, _dconv(b, y, channels, 3, gain=0.2))
        taps.append(x)
    return taps[2:]


def _yolov3(b: GraphBuilder, x: Value) -> dict[str, Value]:
    image = x.shape[2]
    c3, c4, c5 = _darknet53(b, x)
    outputs, x = [], c5
    for i, (width, lateral) in enumerate([(512, c4), (256, c3), (128, None)]):
        with b.scope(f"head{i}"):
            for j in range(5):
                with b.scope(str(j)):
                    x = _dconv(b, x, width if j % 2 == 0 else 2 * width, 1 if j % 2 == 0 else 3)
            with b.scope("5"):
                y = _dconv(b, x, 2 * width, 3)
            outputs.append(_yolo_layer(b, y, _YOLO_ANCHORS[6 - 3 * i:9 - 3 * i], image))
            if lateral is not None:
                with b.scope("route"):
                    x = _dconv(b, x, width // 2, 1)
                x = b.concat([b.resize(x, lateral.shape[2:], mode="nearest"), lateral])
    return {"detections": b.concat(outputs, axis=1)}


def _yolov3_tiny(b: GraphBuilder, x: Value) -> dict[str, Value]:
    image = x.shape[2]
    for i, c in enumerate((16, 32, 64, 128, 256, 512)):
        with b.scope(f"conv{i}"):
            x = _dconv(b, x, c, 3)
        if c == 256:
            route = x
        # darknet's last 2x2 pooling has stride 1 and keeps 13x13 (one row/column of padding)
        x = b.max_pool(x, 2, 2) if c < 512 else b.max_pool(x, 2, 1, padding=(0, 0, 1, 1))
    with b.scope("conv6"):
        x = _dconv(b, x, 1024, 3)
    with b.scope("conv7"):
        x = _dconv(b, x, 256, 1)
    with b.scope("head0"):
        with b.scope("conv"):
            y = _dconv(b, x, 512, 3)
        out0 = _yolo_layer(b, y, _TINY_ANCHORS[3:], image)
    with b.scope("head1"):
        with b.scope("route"):
            x = _dconv(b, x, 128, 1)
        x = b.concat([b.resize(x, route.shape[2:], mode="nearest"), route])
        with b.scope("conv"):
            y = _dconv(b, x, 256, 3)
        out1 = _yolo_layer(b, y, _TINY_ANCHORS[:3], image)
    return {"detections": b.concat([out0, out1], axis=1)}


ENTRIES: tuple[ZooEntry, ...] = (
    entry("ssd300_vgg16", "object_detection", "ssd", image_input(300), 35_641_826, "torchvision ssd300_vgg16",
          _ssd300_vgg16, "SSD300 with VGG16 (Liu et al. 2016, Fig. 2; torchvision, COCO 91 classes)"),
    entry("ssdlite320_mobilenet_v3_large", "object_detection", "ssd", image_input(320), 3_440_060,
          "torchvision ssdlite320_mobilenet_v3_large", _ssdlite320_mobilenet_v3,
          "SSDLite320 with MobileNetV3-Large, reduced tail (Howard et al. 2019; torchvision, COCO)"),
    entry("yolov3", "object_detection", "yolo", image_input(416), 61_949_149,
          "darknet yolov3.cfg (keras-yolo3 trainable count)", _yolov3,
          "YOLOv3 with Darknet-53 (Redmon & Farhadi 2018; darknet yolov3.cfg, COCO 80 classes)"),
    entry("yolov3_tiny", "object_detection", "yolo", image_input(416), 8_852_366,
          "darknet yolov3-tiny.cfg (ultralytics model summary)", _yolov3_tiny,
          "YOLOv3-tiny (darknet yolov3-tiny.cfg, COCO 80 classes)"),
)

