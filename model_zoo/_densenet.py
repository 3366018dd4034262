"""DenseNet 121/161/169/201 (Huang et al. 2017, Table 1), following torchvision's definition."""

from __future__ import annotations

import functools

from ._builder import GraphBuilder, Value
from ._resnet import classifier_head
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES"]

# depth -> (growth rate, layers per dense block, stem width), bottleneck width is 4 * growth
_CONFIGS: dict[int, tuple[int, tuple[int, ...], int]] = {
    121: (32, (6, 12, 24, 16), 64),
    161: (48, (6, 12, 36, 24), 96),
    169: (32, (6, 12, 32, 32), 64),
    201: (32, (6, 12, 48, 32), 64),
}
_PARAMS = {121: 7_978_856, 161: 28_681_000, 169: 14_149_480, 201: 20_013_928}


def _bn_relu_conv(b: GraphBuilder, x: Value, channels: int, kernel: int, i: int) -> Value:
    x = b.relu(b.batch_norm(x, name=f"norm{i}"))
    return b.conv(x, channels, kernel, bias=False, name=f"conv{i}")


def _dense_block(b: GraphBuilder, x: Value, layers: int, growth: int) -> Value:
    features = [x]
    for i in range(layers):
        with b.scope(f"denselayer{i + 1}"):
            # torchvision concatenates all previous outputs at the input of every layer
            y = b.concat(features) if len(features) > 1 else features[0]
            y = _bn_relu_conv(b, y, 4 * growth, 1, 1)
            features.append(_bn_relu_conv(b, y, growth, 3, 2))
    return b.concat(features)


def _densenet(b: GraphBuilder, x: Value, *, depth: int) -> dict[str, Value]:
    growth, blocks, stem = _CONFIGS[depth]
    x = b.conv_bn(x, stem, 7, stride=2, padding=3, name="features.conv0")
    x = b.max_pool(x, 3, 2, padding=1)
    for i, layers in enumerate(blocks):
        with b.scope(f"denseblock{i + 1}"):
            x = _dense_block(b, x, layers, growth)
        if i < len(blocks) - 1:
            with b.scope(f"transition{i + 1}"):
                x = b.avg_pool(_bn_relu_conv(b, x, x.channels // 2, 1, 1), 2, 2)
    x = b.relu(b.batch_norm(x, name="features.norm5"))
    return {"logits": classifier_head(b, x)}


ENTRIES: tuple[ZooEntry, ...] = tuple(
    entry(f"densenet{d}", "image_classification", "densenet", image_input(224), _PARAMS[d],
          f"torchvision densenet{d}", functools.partial(_densenet, depth=d),
          f"DenseNet-{d}-BC (Huang et al. 2017, Table 1; torchvision)")
    for d in _CONFIGS
)
