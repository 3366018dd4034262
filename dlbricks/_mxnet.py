"""What the MXNet frontend, its bricks and the MXNet backend share: the ``org.mxnet`` domain and the
attributes its nodes carry, importing mxnet, copying arrays into it, binding without oneDNN fusion,
the oneDNN layouts its kernels read, and the one line of its errors worth showing.

mxnet is imported lazily, inside functions: importing this module does not import it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import numpy as np

from dlbricks.errors import ModelLoadError

__all__ = ["BLOCKING_OPS", "LAYOUTS_ATTR", "MXNET_DOMAIN", "POSITIVE_MXNET_INPUTS", "SUBGRAPH_ENV", "first_line",
           "import_mxnet", "runs_on_onednn_layouts", "to_ndarray", "unfused"]

#: Domain of the ONNX nodes that stand for MXNet ops.
MXNET_DOMAIN = "org.mxnet"
#: Inputs of MXNet ops that must be positive when synthetic (BatchNorm's moving variance).
POSITIVE_MXNET_INPUTS: Mapping[str, frozenset[int]] = {"BatchNorm": frozenset({4}),
                                                      "SyncBatchNorm": frozenset({4})}
#: Attribute of every ``org.mxnet`` node: the layout each input has in the model under oneDNN
#: (``onednn``: a blocked layout written by a oneDNN kernel; ``plain``; ``const``). Part of the
#: signature: a brick is measured with its inputs in the layout they have in the model.
LAYOUTS_ATTR = "dlbricks_input_layouts"
SUBGRAPH_ENV = "MXNET_SUBGRAPH_BACKEND"
#: Ops whose oneDNN kernel writes a blocked layout whatever its input's (MXNet 1.9, CPU).
BLOCKING_OPS = frozenset({"Convolution", "Deconvolution"})
#: Ops whose oneDNN kernel keeps its (first) input's layout; ``act_type`` restricts Activation.
_KEEPING_OPS = frozenset({"BatchNorm", "Pooling", "LRN", "elemwise_add", "_Plus", "_plus", "_add",
                          "add_n", "ElementWiseSum", "Concat", "concat", "Activation", "LeakyReLU"})
_ONEDNN_ACTS = frozenset({"relu", "sigmoid", "tanh", "softrelu", "leaky", "elu"})


def import_mxnet(label: str = "MXNet model") -> ModuleType:
    """Import mxnet, or raise :class:`ModelLoadError` saying how to install it."""
    try:
        import mxnet
    except ImportError as e:
        raise ModelLoadError(
            f"{label}: needs mxnet, which cannot be imported ({e}); install the extra: "
            f"pip install 'dlbricks[mxnet]' (Python 3.11 with numpy<1.24).") from e
    return mxnet


def to_ndarray(mx: Any, value: np.ndarray, ctx: Any = None) -> Any:
    """``value`` copied into a new NDArray of its dtype on ``ctx`` (default CPU).

    Unlike ``mx.nd.array`` it does not probe scipy.sparse (a deprecation warning per call).
    """
    out = mx.nd.empty(value.shape, ctx=ctx or mx.cpu(), dtype=value.dtype)
    out[:] = np.ascontiguousarray(value)
    return out


@contextlib.contextmanager
def unfused() -> Iterator[None]:
    """Bind without graph partitioning: MXNet reads ``MXNET_SUBGRAPH_BACKEND`` at every bind, and
    its default, oneDNN fusion, cannot bind a group of a model's internal tensors. The C++ log line
    MXNet writes to stderr for "NONE" at every bind is kept from the user's terminal."""
    old = os.environ.get(SUBGRAPH_ENV)
    os.environ[SUBGRAPH_ENV] = "NONE"
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
        if old is None:
            del os.environ[SUBGRAPH_ENV]
        else:
            os.environ[SUBGRAPH_ENV] = old


def runs_on_onednn_layouts(op: str, attrs: Mapping[str, str]) -> bool:
    """Whether MXNet 1.9's CPU kernel of ``op`` reads oneDNN's blocked layouts as they are (a oneDNN
    kernel); every other op reorders such an input to the plain layout on each call."""
    if op in BLOCKING_OPS:
        return True
    if op in ("Activation", "LeakyReLU"):
        return attrs.get("act_type", "leaky") in _ONEDNN_ACTS
    if op == "Pooling":
        return attrs.get("pool_type", "max") in ("max", "avg")
    return op in _KEEPING_OPS


def first_line(error: BaseException) -> str:
    """The informative line of an MXNet error (its last line that is not a stack frame)."""
    lines = [x.strip() for x in str(error).strip().splitlines() if x.strip()]
    useful = [x for x in lines if not x.startswith(("File ", "Traceback", "[bt]", "Stack trace", "["))
              or "Check failed" in x or "Error" in x]
    text = (useful or lines or [type(error).__name__])[-1]
    return text[:300]
