"""Plain convolutional classifiers: AlexNet, VGG 11/13/16/19 (with and without BatchNorm), SqueezeNet
1.0/1.1, all following torchvision's definitions."""

from __future__ import annotations

import functools

from ._builder import GraphBuilder, Value
from .spec import ZooEntry, entry, image_input

__all__ = ["ENTRIES", "vgg_features", "VGG_CONFIGS"]

# Simonyan & Zisserman 2014, Table 1 (configurations A, B, D, E); "M" is a 2x2 max pooling.
VGG_CONFIGS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"),
}


def _mlp_classifier(b: GraphBuilder, x: Value, hidden: int = 4096, classes: int = 1000) -> Value:
    """Flatten, then two ReLU hidden layers and the output layer (dropout is a no-op at inference)."""
    x = b.flatten(x)
    for i in range(2):
        x = b.relu(b.linear(x, hidden, name=f"classifier.{3 * i}"))
    return b.linear(x, classes, name="classifier.6")


def vgg_features(b: GraphBuilder, x: Value, cfg: tuple[int | str, ...], batch_norm: bool = False,
                 ceil_pools: frozenset[int] = frozenset()) -> list[Value]:
    """VGG's conv trunk; returns the input of every max pooling and the final output.

    ``ceil_pools`` lists the pool indices run with ``ceil_mode`` (SSD's third pooling).
    """
    taps, pool = [], 0
    for i, v in enumerate(cfg):
        if v == "M":
            taps.append(x)
            x = b.max_pool(x, 2, 2, ceil_mode=pool in ceil_pools)
            pool += 1
            continue
        with b.scope(f"features.{i}"):
            x = b.conv(x, int(v), 3, padding=1)
            x = b.relu(b.batch_norm(x) if batch_norm else x)
    return [*taps, x]


def _vgg(b: GraphBuilder, x: Value, *, depth: int, batch_norm: bool) -> dict[str, Value]:
    x = vgg_features(b, x, VGG_CONFIGS[depth], batch_norm)[-1]
    return {"logits": _mlp_classifier(b, x)}  # AdaptiveAvgPool2d(7) is the identity at 224x224


def _alexnet(b: GraphBuilder, x: Value) -> dict[str, Value]:
    # (out, kernel, stride, padding, pool after?) : torchvision's single-GPU AlexNet (Krizhevsky 2014)
    for i, (c, k, s, p, pool) in enumerate([(64, 11, 4, 2, True), (192, 5, 1, 2, True), (384, 3, 1, 1, False),
                                             (256, 3, 1, 1, False), (256, 3, 1, 1, True)]):
        x = b.relu(b.conv(x, c, k, stride=s, padding=p, name=f"features.conv{i}"))
        if pool:
            x = b.max_pool(x, 3, 2)
    return {"logits": _mlp_classifier(b, x)}


def _fire(b: GraphBuilder, x: Value, squeeze: int, expand: int) -> Value:
    s = b.relu(b.conv(x, squeeze, 1, name="squeeze"))
    return b.concat([b.relu(b.conv(s, expand, 1, name="expand1x1")),
                     b.relu(b.conv(s, expand, 3, padding=1, name="expand3x3"))])


# Iandola et al. 2016, Table 1: (squeeze, expand) per fire module, "M" a 3x3/2 ceil-mode max pooling.
_SQUEEZENET = {
    "1_0": (96, 7, ("M", (16, 64), (16, 64), (32, 128), "M", (32, 128), (48, 192), (48, 192), (64, 256), "M",
                    (64, 256))),
    "1_1": (64, 3, ("M", (16, 64), (16, 64), "M", (32, 128), (32, 128), "M", (48, 192), (48, 192), (64, 256),
                    (64, 256))),
}


def _squeezenet(b: GraphBuilder, x: Value, *, version: str) -> dict[str, Value]:
    stem, k, cfg = _SQUEEZENET[version]
    x = b.relu(b.conv(x, stem, k, stride=2, padding=0, name="features.0"))
    for i, v in enumerate(cfg):
        if v == "M":
            x = b.max_pool(x, 3, 2, ceil_mode=True)
            continue
        with b.scope(f"fire{i}"):
            x = _fire(b, x, *v)
    x = b.relu(b.conv(x, 1000, 1, gain=1.0, name="classifier.1"))
    return {"logits": b.flatten(b.global_avg_pool(x))}


_VGG_PARAMS = {(11, False): 132_863_336, (11, True): 132_868_840, (13, False): 133_047_848,
               (13, True): 133_053_736, (16, False): 138_357_544, (16, True): 138_365_992,
               (19, False): 143_667_240, (19, True): 143_678_248}
_SQUEEZENET_PARAMS = {"1_0": 1_248_424, "1_1": 1_235_496}

ENTRIES: tuple[ZooEntry, ...] = (
    entry("alexnet", "image_classification", "alexnet", image_input(224), 61_100_840, "torchvision alexnet",
          _alexnet, "AlexNet (Krizhevsky 2014 'one weird trick' single-tower variant, torchvision)"),
    *(entry(f"vgg{d}{'_bn' if bn else ''}", "image_classification", "vgg", image_input(224),
            _VGG_PARAMS[d, bn], f"torchvision vgg{d}{'_bn' if bn else ''}",
            functools.partial(_vgg, depth=d, batch_norm=bn),
            f"VGG-{d}{' with BatchNorm' if bn else ''} (Simonyan & Zisserman 2014, Table 1)")
      for d in VGG_CONFIGS for bn in (False, True)),
    *(entry(f"squeezenet{v}", "image_classification", "squeezenet", image_input(224), _SQUEEZENET_PARAMS[v],
            f"torchvision squeezenet{v}", functools.partial(_squeezenet, version=v),
            f"SqueezeNet {v.replace('_', '.')} (Iandola et al. 2016; 1.1 from the SqueezeNet repo)")
      for v in _SQUEEZENET),
)
