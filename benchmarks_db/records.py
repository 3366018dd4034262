"""The records that the store returns: frozen, slotted dataclasses, one per kind of row.

Rows never leave the database stage as dicts: :class:`~dlbricks.benchmarks_db.Store` turns each
row into one of these records. JSON columns are parsed (tensor specs become
:class:`~dlbricks.types.TensorSpec`), times are seconds, timestamps are ISO 8601 UTC strings.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from dlbricks.graph import ModelSource
from dlbricks.types import TensorSpec

from ._migrations import SCHEMA_VERSION

__all__ = [
    "CheckReport",
    "UpgradeReport",
    "SystemRecord",
    "BackendRecord",
    "BrickRecord",
    "ModelRecord",
    "MeasurementRecord",
    "ClaimStatus",
    "Claim",
    "RecordOutcome",
    "OpSummary",
    "Coverage",
    "DbStats",
    "MergeReport",
    "PeaksRecord",
    "QUEUE_FIELDS",
    "STAT_FIELDS",
]

#: The statistics columns shared by ``measurements`` and ``model_measurements`` (seconds).
#: The launch-queue columns of the measurement tables (seconds; None off accelerators).
QUEUE_FIELDS = ("host_s", "device_s", "device_warm_s", "repeat_s")
STAT_FIELDS = ("min_s", "median_s", "mean_s", "p90_s", "p99_s", "std_s", "iqr_s", "ci_low_s",
               "ci_high_s")


def _specs(text: str | None) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec.from_dict(d) for d in json.loads(text or "[]"))


@dataclass(frozen=True, slots=True)
class SystemRecord:
    """A row of ``systems``: the machine a measurement was taken on.

    ``details`` is the full ``SystemInfo.to_dict()``; ``fingerprint`` is its stable hash, or the
    id given with ``--system-id`` (then ``details["fingerprint_override"]`` is true).
    """

    fingerprint: str
    cpu: str
    cores: int | None
    logical_cores: int | None
    memory_bytes: int | None
    os: str | None
    gpu: str | None
    details: Mapping[str, Any]
    first_seen: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SystemRecord:
        """Build the record from a ``systems`` row."""
        return cls(row["fingerprint"], row["cpu"], row["cores"], row["logical_cores"], row["memory"],
                   row["os"], row["gpu"], json.loads(row["details"]), row["first_seen"])


class PeaksRecord(NamedTuple):
    """A row of ``peaks``: a machine's measured peak FLOP/s and memory bandwidth (bytes/s).

    A named tuple whose first two items are the peaks, so ``flops, bandwidth = record[:2]``.
    """

    flops_per_s: float
    bytes_per_s: float
    system: str
    details: Mapping[str, Any]
    measured_at: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> PeaksRecord:
        """Build the record from a ``peaks`` row."""
        return cls(row["flops_per_s"], row["bytes_per_s"], row["system"], json.loads(row["details"]),
                   row["measured_at"])


@dataclass(frozen=True, slots=True)
class BackendRecord:
    """A row of ``backends``: one runtime configuration (``config_id`` hashes all of it)."""

    config_id: str
    runtime: str
    version: str | None
    device: str | None
    options: Mapping[str, Any]
    first_seen: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BackendRecord:
        """Build the record from a ``backends`` row."""
        return cls(row["config_id"], row["runtime"], row["version"], row["device"],
                   json.loads(row["options"]), row["first_seen"])


@dataclass(frozen=True, slots=True)
class BrickRecord:
    """A row of ``bricks`` without its ONNX bytes (``store.bricks.get(signature)`` rebuilds the brick).

    ``count`` is the number of occurrences in the model it was asked for (0 otherwise).
    """

    signature: str
    granularity: str
    op_type: str
    op_types: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    constants: tuple[Mapping[str, Any], ...]
    attributes: tuple[Mapping[str, Any], ...]
    flops: int | None
    bytes_moved: int
    count: int = 0

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> BrickRecord:
        """Build the record from a ``bricks`` row (with an optional ``count`` column)."""
        return cls(row["signature"], row["granularity"], row["op_type"],
                   tuple(json.loads(row["op_types"])), _specs(row["inputs"]), _specs(row["outputs"]),
                   tuple(json.loads(row["constants"])), tuple(json.loads(row["attributes"])),
                   row["flops"], row["bytes_moved"], row.get("count") or 0)


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """A row of ``models``: a model at concrete input shapes (``key`` hashes content and shapes)."""

    key: str
    name: str
    source: ModelSource | None
    inputs: tuple[TensorSpec, ...]
    layers: int
    added_at: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ModelRecord:
        """Build the record from a ``models`` row."""
        src = json.loads(row["source"]) if row["source"] else None
        source = ModelSource(src["format"], src["path"], src["sha256"]) if src else None
        return cls(row["key"], row["name"], source, _specs(row["inputs"]), row["layers"],
                   row["added_at"])


@dataclass(frozen=True, slots=True)
class MeasurementRecord:
    """A row of ``measurements`` (``kind="brick"``, ``key`` a signature) or of
    ``model_measurements`` (``kind="model"``, ``key`` a model key), with its runtime name.

    The fields mirror ``dlbricks.generators.Measurement``; ``store.measurements.get`` rebuilds one.
    """

    id: int
    kind: str
    key: str
    system: str
    config_id: str
    runtime: str
    status: str
    error: str | None
    n: int
    min_s: float | None
    median_s: float | None
    mean_s: float | None
    p90_s: float | None
    p99_s: float | None
    std_s: float | None
    iqr_s: float | None
    ci_low_s: float | None
    ci_high_s: float | None
    wall_time_s: float
    converged: bool
    floor_s: float | None
    samples_s: tuple[float, ...] | None
    budget: Mapping[str, Any] | None
    created_at: str
    context: str | None = None  # JSON of the dlbricks.bricks.BrickContext it was measured in (bricks)
    host_s: float | None = None  # launch queue (accelerators): see dlbricks.generators.Measurement
    device_s: float | None = None
    device_warm_s: float | None = None
    node_s: float | None = None  # the floor's cost of one further node: see dlbricks.generators.Measurement
    repeat_s: float | None = None  # launch queue: a further copy's time in one run (see Measurement)
    empty_s: float | None = None  # the floor's model timed beside it: see dlbricks.generators.Measurement

    @property
    def ok(self) -> bool:
        """Whether the item was measured (``status == "ok"``)."""
        return self.status == "ok"

    @classmethod
    def from_row(cls, row: Mapping[str, Any], kind: str) -> MeasurementRecord:
        """Build the record from a ``measurements``/``model_measurements`` row joined with
        ``backends.runtime``."""
        samples = json.loads(row["samples"]) if row["samples"] is not None else None
        budget = json.loads(row["budget"]) if row["budget"] is not None else None
        return cls(
            id=row["id"], kind=kind, key=row["model"] if kind == "model" else row["signature"],
            system=row["system"], config_id=row["config_id"], runtime=row["runtime"],
            status=row["status"], error=row["error"], n=row["n"],
            **{name: row[name] for name in STAT_FIELDS},
            wall_time_s=row["wall_time_s"], converged=bool(row["converged"]), floor_s=row["floor_s"],
            samples_s=tuple(float(s) for s in samples) if samples is not None else None,
            budget=budget, created_at=row["created_at"], context=row["context"] if "context" in row.keys() else None,
            **{name: row[name] for name in (*QUEUE_FIELDS, "node_s", "empty_s") if name in row.keys()})


class ClaimStatus(enum.Enum):
    """What :meth:`Claims.take` found: the claim is ours, or the item is measured, or another
    live owner holds it."""

    CLAIMED = "claimed"
    MEASURED = "measured"
    HELD = "held"


class RecordOutcome(enum.Enum):
    """What :meth:`Measurements.record` did: a new row, a replaced row, or the existing row kept
    (the existing measurement was better by the duplicate rule)."""

    INSERTED = "inserted"
    REPLACED = "replaced"
    KEPT = "kept"


@dataclass(frozen=True, slots=True)
class Claim:
    """A row of ``claims``: a lease on measuring ``item`` for one system and configuration."""

    item: str
    kind: str
    system: str
    config_id: str
    owner: str
    host: str
    pid: int
    claimed_at: float
    expires_at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Claim:
        """Build the record from a ``claims`` row."""
        return cls(row["item"], row["kind"], row["system"], row["config_id"], row["owner"],
                   row["host"], row["pid"], row["claimed_at"], row["expires_at"])


@dataclass(frozen=True, slots=True)
class OpSummary:
    """Per op type: unique bricks, occurrences (when a model is given), how many are measured,
    and the sum of their median times (over unique bricks, or over occurrences for a model)."""

    op_type: str
    bricks: int
    occurrences: int
    measured: int
    failed: int
    total_median_s: float
    total_flops: int

    @property
    def mean_median_s(self) -> float | None:
        """Mean median time of the measured bricks."""
        return self.total_median_s / self.measured if self.measured else None


@dataclass(frozen=True, slots=True)
class Coverage:
    """How much of a model (at one granularity) is measured for one system and configuration."""

    model: str
    name: str
    granularity: str
    system: str | None
    config_id: str | None
    unique_bricks: int
    measured: int
    failed: int
    occurrences: int
    occurrences_measured: int

    @property
    def fraction(self) -> float:
        """Share of the model's unique bricks with an ok measurement."""
        return self.measured / self.unique_bricks if self.unique_bricks else 0.0


@dataclass(frozen=True, slots=True)
class DbStats:
    """What a database holds: counts, schema version, and coverage per model."""

    path: str
    schema_version: int
    systems: tuple[SystemRecord, ...]
    backends: tuple[BackendRecord, ...]
    bricks: int
    models: int
    measurements: int
    measurements_ok: int
    model_measurements: int
    live_claims: int
    coverage: tuple[Coverage, ...]
    peaks: tuple[PeaksRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What :meth:`Store.merge_from` took from another database.

    ``added`` rows were new; ``replaced`` rows won over this database's row by the merge rule;
    ``kept`` rows lost to it.
    """

    source: str
    rule: str
    systems: int
    backends: int
    bricks: int
    models: int
    measurements_added: int
    measurements_replaced: int
    measurements_kept: int
    model_measurements_added: int
    model_measurements_replaced: int
    model_measurements_kept: int


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What ``dlbricks db check`` found in a database file; ``ok`` when nothing is wrong.

    ``schema_version`` is the file's (``version_lost``: recovered from ``schema_migrations``
    because a dump and restore emptied the header); ``bad_values`` are ok measurements with an
    impossible value (a median of -1, no samples).
    """

    path: str
    schema_version: int
    integrity: tuple[str, ...]
    missing_tables: tuple[str, ...]
    foreign_keys: tuple[str, ...]
    bad_bricks: tuple[str, ...]
    bricks: int
    missing_columns: tuple[str, ...] = ()
    bad_values: tuple[str, ...] = ()
    version_lost: bool = False

    @property
    def damaged(self) -> bool:
        """Whether the file lost something that only a copy can give back (pages, tables, columns,
        rows that others refer to, bricks)."""
        return bool(self.integrity != ("ok",) or self.missing_tables or self.missing_columns
                    or self.foreign_keys or self.bad_bricks)

    @property
    def ok(self) -> bool:
        """Whether the file passed every check."""
        return (not self.damaged and not self.bad_values and not self.version_lost
                and self.schema_version == SCHEMA_VERSION)

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per problem found (empty when ``ok``)."""
        lines = []
        if self.version_lost:
            lines.append(f"schema version: the file's header lost it (PRAGMA user_version and application_id "
                         f"are 0, as after a dump and restore); schema_migrations records version "
                         f"{self.schema_version}")
        if self.schema_version < SCHEMA_VERSION:
            lines.append(f"schema version {self.schema_version} is older than this dlbricks' "
                         f"{SCHEMA_VERSION}")
        lines += [f"integrity: {line}" for line in self.integrity if line != "ok"]
        lines += [f"missing table: {t}" for t in self.missing_tables]
        lines += [f"missing column: {c}" for c in self.missing_columns]
        lines += [f"foreign key: {f}" for f in self.foreign_keys]
        lines += [f"brick {sig[:16]} does not decode" for sig in self.bad_bricks]
        lines += [f"impossible value: {v}" for v in self.bad_values]
        return tuple(lines)

    @property
    def advice(self) -> str:
        """One line: how many problems, and the commands that repair them (empty when ``ok``)."""
        if self.ok:
            return ""
        fixes = [what for what, found in (("migrates the schema", self.schema_version < SCHEMA_VERSION),
                                          ("writes the lost schema version back", self.version_lost),
                                          ("marks the measurements with impossible values failed",
                                           bool(self.bad_values))) if found]
        repairs = []
        if self.damaged:
            repairs.append("restore a copy, or fill a new database with 'dlbricks bench'")
        elif fixes:
            repairs.append(f"run 'dlbricks db upgrade --db {self.path}' (it {', '.join(fixes)})")
            if self.bad_values:
                repairs.append(f"then 'dlbricks bench MODEL --db {self.path} --retry-failed' to measure them again")
        state = "is damaged" if self.damaged else "needs a repair"
        return f"{self.path} {state}: {len(self.problems)} problem(s) above; {'; '.join(repairs)}."


@dataclass(frozen=True, slots=True)
class UpgradeReport:
    """What ``dlbricks db upgrade`` did: the schema version before and after, whether it wrote back
    a version that a dump and restore lost, and how many impossible measurements it marked failed."""

    path: str
    from_version: int
    to_version: int
    version_restored: bool
    marked_failed: int
