"""The built-in model zoo: 50+ published architectures built locally as ONNX models.

Nothing is downloaded: every model is written layer by layer with :mod:`onnx.helper` and deterministic
synthetic weights (seeded numpy), at opset 17 with concrete shapes.

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
from ._registry import build, export, get_model, list_models
from ._spec import TASKS, ZooModel

__all__ = [
    # records
    "ZooModel",
    "TASKS",
    # registry
    "list_models",
    "get_model",
    "build",
    "export",
    # analysis
    "count_params",
]
