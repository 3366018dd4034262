"""The MXNet part of the zoo: the 34 architectures of the Gluon vision model zoo.

Blocks come from ``mxnet.gluon.model_zoo.vision.get_model(name, pretrained=False)`` (nothing is ever
downloaded) and get deterministic weights drawn with numpy from a seed and each parameter's name:
He-normal convolution and dense weights, zero biases, BatchNorm statistics and affine parameters
near identity. The block's name prefix is fixed (``<name>_``), so the same ``(name, batch_size, seed)``
gives the same symbol and the same weights in any process. Zoo names are the Gluon names prefixed
with ``gluon_`` (``gluon_resnet50_v1``, ``gluon_mobilenetv2_1.0``).

mxnet is imported lazily; :func:`list_gluon_models` lists the models without it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from dlbricks import InvalidArgumentError, ModelGraph
from dlbricks.mxnet_bricks import to_ndarray
from dlbricks.mxnet_frontend import import_mxnet, load_mxnet

from .spec import ZooModel

__all__ = ["GLUON_PREFIX", "GLUON_MODELS", "list_gluon_models", "gluon_block", "build_gluon", "export_gluon"]

#: Zoo names of Gluon models start with this.
GLUON_PREFIX = "gluon_"
_SOURCE = "mxnet.gluon.model_zoo.vision 1.9.1 (trainable parameters)"
#: Gluon name -> (family, trainable parameters as Gluon counts them at 1000 classes).
GLUON_MODELS: dict[str, tuple[str, int]] = {
    "resnet18_v1": ("resnet", 11689512), "resnet34_v1": ("resnet", 21797672),
    "resnet50_v1": ("resnet", 25575912), "resnet101_v1": ("resnet", 44589800),
    "resnet152_v1": ("resnet", 60252648), "resnet18_v2": ("resnet", 11687848),
    "resnet34_v2": ("resnet", 21796008), "resnet50_v2": ("resnet", 25549480),
    "resnet101_v2": ("resnet", 44541608), "resnet152_v2": ("resnet", 60185256),
    "vgg11": ("vgg", 132863336), "vgg13": ("vgg", 133047848), "vgg16": ("vgg", 138357544),
    "vgg19": ("vgg", 143667240), "vgg11_bn": ("vgg", 132868840), "vgg13_bn": ("vgg", 133053736),
    "vgg16_bn": ("vgg", 138365992), "vgg19_bn": ("vgg", 143678248),
    "alexnet": ("alexnet", 61100840),
    "densenet121": ("densenet", 7978856), "densenet161": ("densenet", 28681000),
    "densenet169": ("densenet", 14149480), "densenet201": ("densenet", 20013928),
    "squeezenet1.0": ("squeezenet", 1248424), "squeezenet1.1": ("squeezenet", 1235496),
    "inceptionv3": ("inception", 23834568),
    "mobilenet1.0": ("mobilenet", 4231976), "mobilenet0.75": ("mobilenet", 2585560),
    "mobilenet0.5": ("mobilenet", 1331592), "mobilenet0.25": ("mobilenet", 470072),
    "mobilenetv2_1.0": ("mobilenet_v2", 3504960), "mobilenetv2_0.75": ("mobilenet_v2", 2627592),
    "mobilenetv2_0.5": ("mobilenet_v2", 1964736), "mobilenetv2_0.25": ("mobilenet_v2", 1516392),
}
INPUT_NAME = "data"


def _image_size(gluon_name: str) -> int:
    return 299 if gluon_name == "inceptionv3" else 224


def list_gluon_models() -> list[ZooModel]:
    """The Gluon vision models as :class:`ZooModel` records (names prefixed ``gluon_``).

    Examples
    --------
    >>> models = list_gluon_models()
    >>> len(models), models[0].name
    (34, 'gluon_resnet18_v1')
    """
    out = []
    for name, (family, params) in GLUON_MODELS.items():
        size = _image_size(name)
        out.append(ZooModel(
            name=GLUON_PREFIX + name, task="image_classification", family=family,
            input_shapes=((INPUT_NAME, (1, 3, size, size), "float32"),), expected_params=params,
            params_source=_SOURCE,
            description=f"MXNet Gluon {name} (mxnet.gluon.model_zoo.vision), random weights, "
                        f"{size}x{size} input"))
    return out


def _gluon_name(name: str) -> str:
    """The Gluon name of ``name`` (with or without the ``gluon_`` prefix)."""
    bare = name[len(GLUON_PREFIX):] if isinstance(name, str) and name.startswith(GLUON_PREFIX) else name
    if not isinstance(bare, str) or bare not in GLUON_MODELS:
        close = difflib.get_close_matches(str(name), [GLUON_PREFIX + n for n in GLUON_MODELS], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise InvalidArgumentError(f"Unknown Gluon zoo model {name!r}.{hint} Valid names: "
                                   f"{', '.join(GLUON_PREFIX + n for n in list(GLUON_MODELS)[:4])}... "
                                   f"(see list_gluon_models()).")
    return bare


def _check_int(what: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive int" if minimum == 1 else "a non-negative int"
        raise InvalidArgumentError(f"The {what!r} of the Gluon zoo must be {kind}. Got {value!r} instead.")
    return value


def _mx() -> ModuleType:
    return import_mxnet("the Gluon model zoo")


def gluon_block(name: str, batch_size: int = 1, seed: int = 0) -> Any:
    """A Gluon vision block with deterministic weights, initialized for ``batch_size``.

    Parameters
    ----------
    name : str
        ``gluon_resnet50_v1`` or ``resnet50_v1``.
    batch_size : int, default 1
    seed : int, default 0

    Returns
    -------
    mxnet.gluon.HybridBlock
        Not hybridized; its parameters are set.
    """
    bare = _gluon_name(name)
    _check_int("batch_size", batch_size, 1)
    _check_int("seed", seed, 0)
    mx = _mx()
    from mxnet.gluon.model_zoo import vision

    prefix = bare.replace(".", "_") + "_"
    block = vision.get_model(bare, pretrained=False, prefix=prefix)
    params = block.collect_params()
    for param in params.values():
        param.init = None  # zeros, not the block's own initializers: every value is set below
    block.initialize(mx.init.Zero())
    size = _image_size(bare)
    # the deferred shapes by shape inference, then every parameter allocated: a forward pass (what
    # finishes deferred initialization otherwise) took seconds for VGG
    block.infer_shape(mx.nd.zeros((batch_size, 3, size, size)))
    block.initialize(mx.init.Zero(), force_reinit=True)
    for param in params.values():
        param.set_data(to_ndarray(mx, _init_value(param.name, tuple(param.shape), seed)))
    return block


def _init_value(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """A parameter's value from its name: He-normal weights, near-identity BatchNorm."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    if name.endswith("weight") and len(shape) >= 2:
        fan_in = math.prod(shape[1:])
        return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)
    if name.endswith(("gamma", "running_var")):
        return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    if name.endswith(("beta", "running_mean")):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)
    return np.zeros(shape, np.float32)  # biases


def build_gluon(name: str, batch_size: int = 1, seed: int = 0) -> ModelGraph:
    """A Gluon vision model loaded as a :class:`ModelGraph` (``org.mxnet`` layers).

    Examples
    --------
    >>> graph = build_gluon("gluon_squeezenet1.1")  # doctest: +SKIP
    >>> graph.opsets  # doctest: +SKIP
    {'org.mxnet': 1}
    """
    bare = _gluon_name(name)
    size = _image_size(bare)
    block = gluon_block(bare, batch_size, seed)
    return load_mxnet(block, input_shapes={INPUT_NAME: (batch_size, 3, size, size)},
                      name=GLUON_PREFIX + bare)


def export_gluon(name: str, out_dir: str | os.PathLike[str], batch_size: int = 1, seed: int = 0) -> Path:
    """Write ``<out_dir>/gluon_<name>-symbol.json`` and ``-0000.params``, as ``HybridBlock.export`` does.

    The data variable carries its shape (``__shape__``), so ``dlbricks.load_mxnet(path)`` needs no
    ``input_shapes``; ``batch_size=`` at load time changes the batch.

    Returns
    -------
    Path
        The ``-symbol.json`` file.
    """
    bare = _gluon_name(name)
    mx = _mx()
    size = _image_size(bare)
    block = gluon_block(bare, batch_size, seed)
    sym = block(mx.sym.var(INPUT_NAME, shape=(batch_size, 3, size, size)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / f"{GLUON_PREFIX}{bare}"
    symbol_path = Path(f"{prefix}-symbol.json")
    symbol_path.write_text(json.dumps(json.loads(sym.tojson()), indent=2))
    aux = set(sym.list_auxiliary_states())
    params = {("aux:" if p.name in aux else "arg:") + p.name: p.data()
              for p in block.collect_params().values()}
    mx.nd.save(f"{prefix}-0000.params", params)
    return symbol_path
