"""Helpers shared by the brick-database tests (no tests here): tiny models, fake systems and
hand-made measurements."""

from __future__ import annotations

import functools
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx

import dlbricks
from dlbricks.generators import Measurement, OrtConfig
from dlbricks.generators.system import SystemInfo
from tests._models import resnet_like, transformer_layer

ROOT = Path(__file__).resolve().parents[1]


def system_info(name: str = "test-cpu", cores: int = 2) -> SystemInfo:
    """A SystemInfo made by hand: its fingerprint depends on ``name`` and ``cores``."""
    return SystemInfo(cpu_model=name, architecture="x86_64", physical_cores=cores, logical_cores=cores,
                      cpu_isa=("avx2",), cache_bytes=(("L2", 1 << 20),), memory_total_bytes=8 << 30,
                      os="Linux", os_release="Test OS", kernel="6.0", python_version="3.11.0",
                      numpy_version="2.0", onnx_version="1.16", onnxruntime_version="1.31.1",
                      gpu_name=None, gpu_driver=None, gpu_count=0)


@functools.cache
def config(threads: int = 1, level: str = "disable") -> OrtConfig:
    """An onnxruntime configuration."""
    return OrtConfig(intra_op_num_threads=threads, graph_optimization_level=level)


def measurement(key: str, *, median: float = 1e-5, n: int = 10, status: str = "ok",
                cfg: OrtConfig | None = None, samples: tuple[float, ...] | None = None) -> Measurement:
    """A measurement made by hand (no runtime involved)."""
    ok = status == "ok"
    stats = {name: (median if ok else None) for name in (
        "min_s", "median_s", "mean_s", "p90_s", "p99_s", "ci_low_s", "ci_high_s")}
    stats.update(std_s=1e-7 if ok else None, iqr_s=2e-7 if ok else None)
    return Measurement(key=key, status=status, error=None if ok else "boom", n=n if ok else 0, **stats,
                       wall_time_s=0.25, converged=ok, backend="onnxruntime", config=cfg or config(),
                       floor_s=2e-6, samples_s=samples)


@functools.cache
def decompositions() -> tuple[dlbricks.Decomposition, ...]:
    """Decompositions of two small models (8 and 24 unique bricks)."""
    return (dlbricks.decompose(dlbricks.load_model(resnet_like(), batch_size=1, name="resnet_like")),
            dlbricks.decompose(dlbricks.load_model(transformer_layer(), batch_size=1,
                                                   name="transformer_layer")))


def write_models(folder: Path) -> dict[str, Path]:
    """ONNX files of small models with a symbolic batch dimension (use ``--batch-size 1``);
    ``res16`` and ``res8`` share no bricks; ``res16b`` shares all of its bricks with ``res16``."""
    models: dict[str, onnx.ModelProto] = {
        "res16": resnet_like(blocks=3, channels=16), "res16b": resnet_like(blocks=1, channels=16),
        "res8": resnet_like(blocks=2, channels=8), "tr": transformer_layer()}
    paths = {}
    for name, model in models.items():
        paths[name] = folder / f"{name}.onnx"
        onnx.save(model, paths[name])
    return paths


def bench_command(db: Path, *models: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """``python -m dlbricks bench`` with a small budget."""
    return [sys.executable, "-m", "dlbricks", "bench", *map(str, models), "--batch-size",
            "1", "--db", str(db), "--budget", "quick", *extra]


def env(**extra: str) -> dict[str, str]:
    """The environment for subprocesses (unbuffered, repo on the path)."""
    out = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return out


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output."""
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=300, **kwargs)


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of a query through a plain read-only sqlite3 connection ([] if the file is missing)."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        conn.close()
