"""The built-in model zoo: 50+ published architectures built locally as ONNX models.

Nothing is downloaded: every model is written layer by layer with :mod:`onnx.helper` and deterministic
synthetic weights (seeded numpy), at opset 17 with concrete shapes.

Public submodules: ``registry`` (:func:`~dlbricks.model_zoo.registry.export` and the registry),
``spec`` (:class:`~dlbricks.model_zoo.spec.ZooModel`, the tasks), ``gluon`` (MXNet Gluon models).

Examples
--------
>>> from dlbricks.model_zoo import build, count_params, list_models
>>> len(list_models()) >= 50
True
>>> model = build("mobilenet_v2_1.0", batch_size=2)
>>> count_params(model)
3504872
"""

from ._params import count_params
from .registry import build, get_model, list_models

__all__ = [
    # registry
    "list_models",
    "get_model",
    "build",
    # analysis
    "count_params",
]
