"""The registry of benchmark backends: a name maps to a factory that builds a backend.

Built-in backends are registered exactly as a third-party one would be: with
:func:`register_backend`, given either a callable or a lazy ``"module:attr"`` import path (so that
registering onnxruntime does not import it). Packages may also declare backends under the entry
point group ``dlbricks.backends``. A name that is not registered but contains a colon is resolved as
an import path, which is how a worker subprocess finds a backend defined outside dlbricks.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from dlbricks import BackendError, InvalidArgumentError

from .protocols import Backend

__all__ = [
    "BackendFactory",
    "available_backends",
    "get_backend",
    "register_backend",
    "unregister_backend",
]

BackendFactory = Callable[[], Backend] | str
"""A zero-argument callable returning a backend, or the import path ``"module:attr"`` of one."""

ENTRY_POINT_GROUP = "dlbricks.backends"

_BUILTINS: dict[str, str] = {
    "onnxruntime": "dlbricks.generators.ort:OrtBackend",
    "mxnet": "dlbricks.generators.mxnet:MxnetBackend",
    "openvino": "dlbricks.generators._openvino:OpenvinoBackend",
}

_registry: dict[str, BackendFactory] = {}
_loaded_defaults = False


def register_backend(name: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Register a backend factory under ``name``.

    Parameters
    ----------
    name : str
        The name users pass as ``backend=``.
    factory : callable or str
        A zero-argument callable (a class works) returning a :class:`Backend`, or a lazy import
        path ``"package.module:attr"`` to such a callable.
    replace : bool, default False
        Overwrite an existing registration instead of raising.

    Raises
    ------
    InvalidArgumentError
        If ``name`` is empty or already registered and ``replace`` is false.

    Examples
    --------
    >>> from dlbricks.generators import register_backend, unregister_backend
    >>> register_backend("my-ort", "dlbricks.generators.ort:OrtBackend")
    >>> unregister_backend("my-ort")
    """
    _load_defaults()
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"A backend name must be a non-empty str. Got {name!r} instead.")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise InvalidArgumentError(
            f"The factory of backend {name!r} must be callable or a 'module:attr' string. "
            f"Got {factory!r} instead."
        )
    if name in _registry and not replace:
        raise InvalidArgumentError(
            f"Backend {name!r} is already registered; pass replace=True to overwrite it."
        )
    _registry[name] = factory


def unregister_backend(name: str) -> None:
    """Remove the backend registered under ``name`` (no error if it is not registered)."""
    _load_defaults()
    _registry.pop(name, None)


def available_backends() -> list[str]:
    """The names of all registered backends, sorted."""
    _load_defaults()
    return sorted(_registry)


def get_backend(name: str) -> Backend:
    """Build the backend registered under ``name`` (or found at the import path ``name``).

    Raises
    ------
    InvalidArgumentError
        If no backend has that name and it is not an importable ``"module:attr"`` path.
    BackendError
        If the factory fails or returns something that is not a :class:`Backend`.
    """
    _load_defaults()
    factory = _registry.get(name)
    if factory is None and ":" in name:
        factory = name
    if factory is None:
        raise InvalidArgumentError(
            f"Unknown backend {name!r}; registered backends: {available_backends()}. "
            "Register one with dlbricks.generators.register_backend or pass 'module:attr'."
        )
    if isinstance(factory, str):
        factory = import_object(factory)
    try:
        backend = factory()
    except Exception as e:
        raise BackendError(f"Building backend {name!r} failed: {type(e).__name__}: {e}") from e
    if not isinstance(backend, Backend):
        raise BackendError(
            f"The factory of backend {name!r} returned {type(backend).__name__}, "
            "which does not implement the dlbricks.generators.Backend protocol."
        )
    return backend


def import_object(path: str) -> Any:
    """Import ``"package.module:attr"`` and return the attribute.

    Raises
    ------
    InvalidArgumentError
        If the path is malformed, the module cannot be imported or has no such attribute.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise InvalidArgumentError(f"An import path must look like 'module:attr'. Got {path!r}.")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise InvalidArgumentError(f"Cannot import backend {path!r}: {type(e).__name__}: {e}") from e
    return obj


def portable_registry() -> dict[str, BackendFactory]:
    """The registrations that can be sent to a worker subprocess (those that pickle)."""
    _load_defaults()
    portable: dict[str, BackendFactory] = {}
    for name, factory in _registry.items():
        try:
            pickle.dumps(factory)
        except Exception:  # lambdas and local classes stay in this process
            continue
        portable[name] = factory
    return portable


def _load_defaults() -> None:
    """Register the built-ins and the entry-point backends, once, on first use."""
    global _loaded_defaults
    if _loaded_defaults:
        return
    _loaded_defaults = True
    for name, path in _BUILTINS.items():
        _registry.setdefault(name, path)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _registry.setdefault(ep.name, ep.value)
