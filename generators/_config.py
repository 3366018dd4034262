"""What every backend configuration shares: its id, its dict form and its rebuild from that dict."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, TypeVar

from dlbricks import InvalidArgumentError

__all__ = ["ConfigBase"]

C = TypeVar("C", bound="ConfigBase")


class ConfigBase:
    """Base of the frozen dataclasses that configure a backend (:class:`OrtConfig`, :class:`MxnetConfig`).

    A subclass sets ``backend`` (the registered backend's name) and ``measurement_method`` (the
    version of how its backend measures; a change gives every configuration a new id, so old
    measurements are measured again rather than mixed in), and says what it computes on
    (``device``) and with how many threads (``threads``).
    """

    __slots__ = ()
    backend: ClassVar[str]
    measurement_method: ClassVar[int]

    @property
    def config_id(self) -> str:
        """16 hex digits of the SHA-256 of the canonical JSON of the backend's name, :meth:`to_dict`
        and the measurement method."""
        payload = json.dumps({"backend": self.backend, **self.to_dict(), "method": self.measurement_method},
                             sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """The configuration as a JSON-safe dict, one key per field."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Rebuild a configuration from :meth:`to_dict` output (unknown keys are rejected)."""
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgumentError(
                f"Invalid {cls.__name__}: unknown fields {unknown}; known fields: {sorted(known)}.")
        return cls(**dict(data))
