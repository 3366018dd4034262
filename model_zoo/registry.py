"""The zoo's registry: list, build and export models by name."""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Iterable
from pathlib import Path

import onnx

from dlbricks import InvalidArgumentError
from dlbricks.model_zoo import (
    _classic,
    _densenet,
    _detection,
    _efficient,
    _inception,
    _language,
    _mobilenet,
    _resnet,
    _segmentation,
    _speech_recsys,
)
from dlbricks.names import shown

from ._builder import GraphBuilder
from .gluon import build_gluon, list_gluon_models
from .spec import TASKS, ZooEntry, ZooModel

__all__ = ["list_models", "get_model", "build", "export", "EXTERNAL_DATA_THRESHOLD"]

#: Models whose weights exceed this many bytes are exported with ONNX external data.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000

_FAMILIES = (_resnet, _classic, _densenet, _inception, _mobilenet, _efficient, _detection, _segmentation, _language,
             _speech_recsys)
_DTYPES = {"float32": onnx.TensorProto.FLOAT, "int64": onnx.TensorProto.INT64}


@functools.cache
def _entries() -> dict[str, ZooEntry]:
    entries: dict[str, ZooEntry] = {}
    for module in _FAMILIES:
        for e in module.ENTRIES:
            if e.model.name in entries:  # pragma: no cover - guarded by the test suite
                raise RuntimeError(f"Duplicate zoo model name '{e.model.name}'.")
            entries[e.model.name] = e
    return entries


FRAMEWORKS = ("onnx", "mxnet")


def list_models(task: str | None = None, framework: str = "onnx") -> list[ZooModel]:
    """List the models of the zoo, optionally those of one task.

    Parameters
    ----------
    task : str, optional
        One of ``image_classification``, ``object_detection``, ``semantic_segmentation``,
        ``language``, ``speech_recognition``, ``recommendation``.
    framework : {"onnx", "mxnet"}
        ``"mxnet"``: the MXNet Gluon vision zoo (names prefixed ``gluon_``; needs the mxnet extra).

    Returns
    -------
    list of ZooModel
        In task order, then in declaration order.

    Raises
    ------
    InvalidArgumentError
        If ``task`` is not a task of the zoo.

    Examples
    --------
    >>> [m.name for m in list_models("recommendation")]
    ['dlrm_criteo_kaggle', 'ncf_ml20m']
    """
    if task is not None and task not in TASKS:
        raise InvalidArgumentError(f"Unknown zoo task {task!r}. Valid tasks: {', '.join(TASKS)}.")
    if framework not in FRAMEWORKS:
        raise InvalidArgumentError(f"Unknown zoo framework {framework!r}. Valid: {', '.join(FRAMEWORKS)}.")
    if framework == "mxnet":
        _require_mxnet()
        return [m for m in list_gluon_models() if task is None or m.task == task]
    models = [e.model for e in _entries().values() if task is None or e.model.task == task]
    return sorted(models, key=lambda m: TASKS.index(m.task))


def _require_mxnet() -> None:
    import importlib.util

    if importlib.util.find_spec("mxnet") is None:
        raise InvalidArgumentError(
            "the MXNet Gluon zoo needs the mxnet extra (Python 3.11, numpy<1.24): "
            "pip install -e '.[mxnet]' in its own environment.")


def _lookup(name: str) -> ZooEntry:
    entries = _entries()
    if not isinstance(name, str) or name not in entries:
        close = difflib.get_close_matches(str(name), list(entries), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise InvalidArgumentError(
            f"Unknown zoo model {shown(str(name))}.{hint} Run 'dlbricks zoo list' to see the valid names.")
    return entries[name]


def get_model(name: str) -> ZooModel:
    """Return the :class:`ZooModel` record of ``name`` (raises InvalidArgumentError if unknown)."""
    return _lookup(name).model


def _check_int(what: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive int" if minimum == 1 else "a non-negative int"
        raise InvalidArgumentError(f"The {what!r} of the model zoo must be {kind}. Got {value!r} instead.")
    return value


def build(name: str, batch_size: int = 1, seed: int = 0) -> onnx.ModelProto:
    """Build a zoo model with deterministic synthetic weights.

    Parameters
    ----------
    name : str
        A name from :func:`list_models` (``dlbricks zoo list``).
    batch_size : int, optional
        Size of the batch dimension of every input and output.
    seed : int, optional
        Seed of the weights; the same ``(name, batch_size, seed)`` gives byte-identical models.

    Returns
    -------
    onnx.ModelProto
        Opset 17, IR version 8, concrete shapes everywhere. Integer inputs have their valid
        ``[low, high)`` range in ``metadata_props["dlbricks.value_ranges"]`` (JSON).

    Raises
    ------
    InvalidArgumentError
        If the name is unknown or ``batch_size`` / ``seed`` are not valid.

    Notes
    -----
    Names prefixed ``gluon_`` build an MXNet Gluon model (the mxnet extra); it comes back as an
    ONNX-framed graph of ``org.mxnet`` nodes that :func:`dlbricks.load_model` reads with the MXNet
    frontend, and that the ``mxnet`` backend runs.
    """
    if name.startswith("gluon_"):
        _require_mxnet()
        return build_gluon(name, batch_size=batch_size, seed=seed).to_onnx()
    e = _lookup(name)
    _check_int("batch_size", batch_size, 1)
    _check_int("seed", seed, 0)
    b = GraphBuilder(name, seed=seed)
    ranges = e.model.ranges()
    inputs = [b.input(n, (batch_size, *shape[1:]), _DTYPES[dtype], ranges.get(n))
              for n, shape, dtype in e.model.input_shapes]
    for out_name, value in e.build_graph(b, inputs).items():
        b.output(value, out_name)
    b.set_metadata("dlbricks.zoo_model", name)
    return b.build()


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def export(names: Iterable[str] | str, out_dir: str | os.PathLike[str], batch_size: int = 1) -> list[Path]:
    """Build models and write each to ``<out_dir>/<name>.onnx``.

    Models whose weights exceed 1.8 GB are written with external data (``<name>.onnx.data``).

    Parameters
    ----------
    names : iterable of str, or str
        Zoo model names; all are validated before anything is written.
    out_dir : path-like
        Folder to write into (created if missing).
    batch_size : int, optional
        Batch size of the exported models.

    Returns
    -------
    list of Path
        The ``.onnx`` files written, in the order of ``names``.
    """
    names = [names] if isinstance(names, str) else list(names)
    if not names:
        raise InvalidArgumentError("export needs at least one zoo model name. Got none.")
    for name in names:
        _lookup(name)
    _check_int("batch_size", batch_size, 1)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        model = build(name, batch_size=batch_size)
        path = out / f"{name}.onnx"
        if _weight_bytes(model) > EXTERNAL_DATA_THRESHOLD:
            onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=f"{name}.onnx.data", size_threshold=1024)
        else:
            onnx.save_model(model, path)
        paths.append(path)
    return paths
