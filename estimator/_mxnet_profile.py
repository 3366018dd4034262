"""In-model times of every layer of an MXNet model, from MXNet's own profiler.

The counterpart of :func:`~dlbricks.estimator._profile.in_model_times` for models that run in
MXNet. MXNet reads its engine and oneDNN settings when it is imported, so the profile runs in a
subprocess under the configuration's environment (:meth:`MxnetConfig.worker_env`), on the same
executor the harness measures whole models with, with bulk execution off
(``MXNET_EXEC_BULK_EXEC_INFERENCE=0``) so that every operator is an event of its own. Events carry
the operator's type, not the node's name: they are matched to layers in execution order
(:class:`difflib.SequenceMatcher` over the op types, so that engine events such as ``WaitForVar``
match no layer).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dlbricks import BackendError, ModelGraph
from dlbricks.generators.mxnet import MxnetBackend, MxnetConfig
from dlbricks.generators.util import pin_to_core

from ._profile import InModelTimes

__all__ = ["mxnet_in_model_times", "match_events"]

PROFILE_ENV = {"MXNET_EXEC_BULK_EXEC_INFERENCE": "0"}
_TIMEOUT_S = 600


def mxnet_in_model_times(graph: ModelGraph, config: Any, runs: int = 30, warmup: int = 5) -> InModelTimes:
    """Profile the MXNet model ``graph`` under ``config`` (an ``MxnetConfig``) in a subprocess and
    give each layer its operator's median time.

    Raises
    ------
    BackendError
        If the profiling subprocess fails (its last line of output says why).
    """
    with tempfile.TemporaryDirectory() as tmp:
        model_path, out_path = Path(tmp, "model.onnx"), Path(tmp, "profile.json")
        model_path.write_bytes(graph.to_onnx().SerializeToString())
        (Path(tmp) / "config.json").write_text(json.dumps(config.to_dict()))
        env = {**os.environ, **config.worker_env(), **PROFILE_ENV}
        done = subprocess.run(
            [sys.executable, "-m", "dlbricks.estimator._mxnet_profile", tmp, str(runs), str(warmup)],
            env=env, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
        if done.returncode != 0 or not out_path.exists():
            lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
            raise BackendError(f"profiling MXNet model '{graph.name}' failed: {lines[-1]}")
        events = [(op, float(t)) for op, t in json.loads(out_path.read_text())]
    layers = match_events(events, [(layer.name, layer.op_type) for layer in graph.layers])
    return InModelTimes(layers, 0.0, len(events), sum(t for _, t in events))


def match_events(events: list[tuple[str, float]], layers: list[tuple[str, str]]) -> dict[str, float]:
    """Each layer's time: the events of one run ``(op type, seconds)`` matched to the layers
    ``(name, op type)`` in order; unmatched events belong to no layer."""
    matcher = difflib.SequenceMatcher(None, [op for op, _ in events], [op for _, op in layers], autojunk=False)
    times: dict[str, float] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            times[layers[block.b + k][0]] = events[block.a + k][1]
    return times


def _profile(folder: Path, runs: int, warmup: int) -> list[tuple[str, float]]:
    """In the subprocess: the median duration of each operator event of one run, in order."""
    import onnx

    mx = __import__("mxnet")
    model = onnx.load_model(str(folder / "model.onnx"))
    config = MxnetConfig.from_dict(json.loads((folder / "config.json").read_text()))
    prepared = MxnetBackend().prepare(model, config)
    for _ in range(warmup):
        prepared.run()
    trace = folder / "trace.json"
    mx.profiler.set_config(profile_all=True, filename=str(trace))
    mx.profiler.set_state("run")
    for _ in range(runs):
        prepared.run()
    mx.nd.waitall()
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    prepared.close()
    return _per_position(json.loads(trace.read_text())["traceEvents"], runs)


def _per_position(events: list[dict], runs: int) -> list[tuple[str, float]]:
    """Operator events (begin/end pairs) split into ``runs`` equal runs: per position in a run, the op
    type and median duration in seconds."""
    spans: list[tuple[str, float]] = []
    begun: dict[Any, tuple[str, float]] = {}
    for event in events:
        if event.get("cat") != "operator":
            continue
        key = (event.get("tid"), event.get("name"))
        if event.get("ph") == "B":
            begun[key] = (event["name"], event["ts"])
        elif event.get("ph") == "E" and key in begun:
            name, start = begun.pop(key)
            spans.append((name, (event["ts"] - start) * 1e-6))
    if not spans or len(spans) % runs:
        raise BackendError(f"the MXNet profile holds {len(spans)} operator events, not {runs} equal runs")
    per_run = len(spans) // runs
    durations: dict[int, list[float]] = defaultdict(list)
    for i, (_, seconds) in enumerate(spans):
        durations[i % per_run].append(seconds)
    return [(spans[i][0], float(np.median(durations[i]))) for i in range(per_run)]


def main(argv: list[str]) -> int:
    pin_to_core()  # as the workers that measure the bricks and the whole model
    folder, runs, warmup = Path(argv[0]), int(argv[1]), int(argv[2])
    events = _profile(folder, runs, warmup)
    (folder / "profile.json").write_text(json.dumps(events))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
