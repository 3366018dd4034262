"""Turning the pipeline's objects into database rows (no SQL here; see :mod:`._sql`).

JSON columns are written compactly with sorted keys, so that equal values are equal text.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlbricks import Brick, Decomposition, InvalidArgumentError
from dlbricks.graph import ModelSource
from dlbricks.names import MAX_IDENTIFIER, identifier_problem, shown

from .records import QUEUE_FIELDS, STAT_FIELDS

if TYPE_CHECKING:
    from dlbricks.generators import Measurement

__all__ = ["now", "to_json", "fingerprint_of", "pid_alive", "brick_row", "model_rows",
           "measurement_row", "backend_row", "system_row", "identifier_problem", "shown", "MAX_IDENTIFIER"]

Row = dict[str, Any]


def now() -> str:
    """The current UTC time as ISO 8601 text with microseconds (sorts as text)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def to_json(value: Any) -> str:
    """Compact JSON text with sorted keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def fingerprint_of(system: Any) -> str:
    """The fingerprint of a system given as a str, a SystemRecord or a SystemInfo."""
    if isinstance(system, str):
        return system
    fingerprint = getattr(system, "fingerprint", None)
    if not isinstance(fingerprint, str):
        raise InvalidArgumentError(f"'system' must be a fingerprint str, a SystemRecord or a "
                                   f"SystemInfo. Got {type(system).__name__} instead.")
    return fingerprint


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is running (zombies count as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def brick_row(brick: Brick, added_at: str) -> Row:
    """A ``bricks`` row: the brick's description as JSON columns and its compact ONNX."""
    desc = brick.describe()
    return {"signature": brick.signature, "granularity": brick.granularity, "op_type": brick.op_type,
            "op_types": to_json(desc["op_types"]), "inputs": to_json(desc["inputs"]),
            "outputs": to_json(desc["outputs"]), "constants": to_json(desc["constants"]),
            "attributes": to_json(desc["attributes"]), "flops": brick.flops,
            "bytes_moved": brick.bytes_moved, "onnx": brick.to_bytes(), "added_at": added_at}


def reorder_rows(dec: Decomposition) -> list[Row]:
    """The ``model_reorders`` row of a decomposition whose model runs layout reorders (else none)."""
    if not dec.reorder_bytes:
        return []
    return [{"model": dec.model_key, "granularity": dec.granularity,
             "sizes": to_json([int(n) for n in dec.reorder_bytes])}]


def model_rows(dec: Decomposition, source: ModelSource | None,
               added_at: str) -> tuple[Row, list[Row], list[Row]]:
    """The ``models`` row (without ``source`` when None), ``model_bricks`` and ``model_edges`` rows."""
    model: Row = {"key": dec.model_key, "name": dec.model, "layers": dec.layers,
                  "inputs": to_json([s.to_dict() for s in dec.inputs]), "added_at": added_at}
    if source is not None:
        model["source"] = to_json({"format": source.format, "path": source.path, "sha256": source.sha256})
    occurrences = [{"model": dec.model_key, "granularity": dec.granularity, "idx": o.index,
                    "signature": o.signature, "nodes": to_json(list(o.nodes)),
                    "inputs": to_json(list(o.inputs)), "outputs": to_json(list(o.outputs)),
                    "weights": to_json(list(o.weights))}
                   for o in dec.occurrences]
    edges = [{"model": dec.model_key, "granularity": dec.granularity, "src": int(a), "dst": int(b)}
             for a, b in dec.dag.edges]
    return model, occurrences, edges


def system_row(info: Any, fingerprint: str | None, first_seen: str) -> Row:
    """A ``systems`` row from a SystemInfo; ``fingerprint`` overrides the machine's own."""
    if fingerprint is not None and (not isinstance(fingerprint, str) or not fingerprint.strip()):
        raise InvalidArgumentError(f"A system fingerprint must be a non-blank string. Got {fingerprint!r} "
                                   f"instead.")
    problem = None if fingerprint is None else identifier_problem(fingerprint)
    if problem is not None:
        raise InvalidArgumentError(f"The system id {shown(fingerprint or '')} {problem}; give printable text of "
                                   f"at most {MAX_IDENTIFIER} characters.")
    details = dict(info.to_dict())
    if fingerprint is not None:
        details.update(fingerprint=fingerprint, fingerprint_override=True,
                       machine_fingerprint=info.fingerprint)
    return {"fingerprint": fingerprint or info.fingerprint,
            "cpu": str(details.get("cpu_model") or "unknown"), "cores": details.get("physical_cores"),
            "logical_cores": details.get("logical_cores"), "memory": details.get("memory_total_bytes"),
            "os": details.get("os_release") or details.get("os"), "gpu": details.get("gpu_name"),
            "details": to_json(details), "first_seen": first_seen}


def backend_row(config: Any, runtime: str, version: str | None, first_seen: str) -> Row:
    """A ``backends`` row; ``version`` defaults to the config's ``<runtime>_version`` or ``version``."""
    options = config.to_dict()
    version = version or options.get(f"{runtime}_version") or options.get("version")
    return {"config_id": config.config_id, "runtime": runtime, "version": version,
            "device": options.get("device"), "options": to_json(options), "first_seen": first_seen}


def measurement_row(m: Measurement, item: str, system: str, budget: Any, created_at: str,
                    context: str | None = None) -> Row:
    """A ``measurements`` (``item="signature"``) or ``model_measurements`` (``"model"``) row;
    ``context`` is the JSON of the context a brick was measured in."""
    row: Row = {item: m.key, "system": system, "config_id": m.config.config_id, "status": m.status,
                "error": m.error, "n": m.n, "context": context}
    row.update({name: getattr(m, name) for name in STAT_FIELDS})
    row.update({"wall_time_s": m.wall_time_s, "converged": int(bool(m.converged)), "floor_s": m.floor_s,
                "samples": None if m.samples_s is None else json.dumps(list(m.samples_s)),
                "budget": None if budget is None else to_json(budget.to_dict()),
                "created_at": created_at})
    row.update({name: getattr(m, name, None) for name in (*QUEUE_FIELDS, "node_s", "empty_s")})
    return row
