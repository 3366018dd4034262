"""Fake backends for the generators tests: a fake-clock backend and a misbehaving one.

``FaultyBackend`` is imported by worker subprocesses (through the registry or the import path
``"tests.gen_fake_backends:FaultyBackend"``), so it must stay importable at module level.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import onnx
from onnx import TensorProto, helper

BEHAVIOR_KEY = "gen_fake.behavior"


@dataclass(frozen=True, slots=True)
class FakeConfig:
    """A minimal backend configuration."""

    label: str = "fake"

    @property
    def config_id(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict()).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FakeClock:
    """A clock in integer nanoseconds that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += int(ns)


class _FakePrepared:
    def __init__(self, clock: FakeClock, duration_ns: Callable[[], int], model: onnx.ModelProto | None = None) -> None:
        self.clock = clock
        self.duration_ns = duration_ns
        self.model = model
        self.calls = 0

    def run(self) -> None:
        self.calls += 1
        self.clock.advance(self.duration_ns())

    def close(self) -> None:
        pass


class FakeBackend:
    """Each run advances ``clock`` by ``duration_ns()`` nanoseconds (or, if set,
    ``duration_for(model)``); nothing else happens."""

    name = "fake"

    def __init__(self, clock: FakeClock, duration_ns: Callable[[], int]) -> None:
        self.clock = clock
        self.duration_ns = duration_ns
        self.duration_for: Callable[[onnx.ModelProto], int] | None = None
        self.prepared: list[_FakePrepared] = []

    def default_config(self) -> FakeConfig:
        return FakeConfig()

    def config_from_dict(self, data: Mapping[str, Any]) -> FakeConfig:
        return FakeConfig(**data)

    def check(self, config: Any) -> None:
        pass

    def worker_env(self, config: Any) -> dict[str, str]:
        return {}

    def prepare(self, model: onnx.ModelProto, config: Any) -> _FakePrepared:
        duration_for = self.duration_for
        duration = self.duration_ns if duration_for is None else (lambda: duration_for(model))
        prepared = _FakePrepared(self.clock, duration, model)
        self.prepared.append(prepared)
        return prepared

    def describe(self, config: Any) -> dict[str, Any]:
        return {"backend": self.name, "config": config.to_dict()}


class _FaultyPrepared:
    def __init__(self, behavior: str) -> None:
        self.behavior = behavior

    def run(self) -> None:
        behavior = self.behavior
        if behavior == "ok":
            sum(range(20))
        elif behavior == "raise":
            raise RuntimeError("boom: this brick always fails")
        elif behavior == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif behavior == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif behavior == "exit":
            os._exit(7)
        elif behavior == "hang":
            time.sleep(3600)
        elif behavior == "pid":
            raise RuntimeError(f"pid={os.getpid()}")
        elif behavior in ("queue-ok", "queue-abort"):
            sum(range(20))
        elif behavior == "env":
            raise RuntimeError(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")

    def queue_times(self, repeat: bool = True) -> Any:
        """Launch-queue times (a backend on an accelerator): fixed ones, or a crash for
        ``"queue-abort"`` (an unsynchronized run that brings its process down)."""
        from dlbricks.generators._cuda import QueueSample

        if self.behavior == "queue-abort":
            os.abort()
        return QueueSample(host_s=10e-6, device_s=20e-6, device_warm_s=15e-6)

    def close(self) -> None:
        pass


class FaultyBackend:
    """Runs each model according to its ``gen_fake.behavior`` metadata (default ``"ok"``)."""

    name = "faulty"

    def default_config(self) -> FakeConfig:
        return FakeConfig("faulty")

    def config_from_dict(self, data: Mapping[str, Any]) -> FakeConfig:
        return FakeConfig(**data)

    def check(self, config: Any) -> None:
        pass

    def worker_env(self, config: Any) -> dict[str, str]:
        return {"OMP_NUM_THREADS": "3"}

    def takes_queue_times(self, config: Any) -> bool:
        return bool(config.label == "queue")

    def prepare(self, model: onnx.ModelProto, config: Any) -> _FaultyPrepared:
        props = {p.key: p.value for p in model.metadata_props}
        return _FaultyPrepared(props.get(BEHAVIOR_KEY, "ok"))

    def describe(self, config: Any) -> dict[str, Any]:
        return {"backend": self.name, "config": config.to_dict()}


def behavior_model(behavior: str, tag: str = "") -> onnx.ModelProto:
    """An Identity model tagged with the behavior the FaultyBackend must show."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph([node], f"{behavior}{tag}", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model.metadata_props.add(key=BEHAVIOR_KEY, value=behavior)
    return model


@dataclass
class FakeBrick:
    """A Benchmarkable: a key and a to_onnx() that may fail."""

    key: str
    model: onnx.ModelProto | None

    def to_onnx(self) -> onnx.ModelProto:
        if self.model is None:
            raise ValueError(f"brick {self.key} cannot be materialized")
        return self.model
