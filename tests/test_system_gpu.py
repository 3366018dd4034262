"""The GPU part of a machine's fingerprint: nvidia-smi and the onnxruntime build, checked on the CPU
with a stand-in nvidia-smi on PATH (a real subprocess) and the build's version attributes set."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from dlbricks.benchmarks_db import Store
from dlbricks.generators import collect_system_info


def _fake_smi(folder: Path, line: str) -> None:
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{line}'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)


def test_gpu_name_memory_driver_cuda_and_cudnn_are_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime.capi import build_and_package_info as info

    cpu = collect_system_info()
    _fake_smi(tmp_path, "NVIDIA H100 80GB HBM3, 580.159.04, 81559")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(info, "cuda_version", "13.0", raising=False)
    monkeypatch.setattr(info, "cudnn_version", "9.10", raising=False)
    gpu = collect_system_info()
    assert (gpu.gpu_name, gpu.gpu_driver, gpu.gpu_count) == ("NVIDIA H100 80GB HBM3", "580.159.04", 1)
    assert gpu.gpu_memory_bytes == 81559 * 2**20
    assert (gpu.cuda_version, gpu.cudnn_version) == ("13.0", "9.10")
    assert gpu.fingerprint != cpu.fingerprint  # another GPU or CUDA build is another system
    with Store(tmp_path / "g.db") as store:
        record = store.systems.record(gpu)
        assert record.gpu == "NVIDIA H100 80GB HBM3"
        assert record.details["cuda_version"] == "13.0" and record.details["gpu_memory_bytes"] == 81559 * 2**20


def test_a_machine_without_a_gpu_keeps_its_fingerprint() -> None:
    """The GPU fields that are unknown stay out of the hash: the fingerprint is the one computed
    before they were collected (the stable fields, memory in whole GiB)."""
    info = collect_system_info()
    assert info.gpu_memory_bytes is None and info.cuda_version is None
    data = {k: v for k, v in info.to_dict().items()
            if k not in ("fingerprint", "gpu_memory_bytes", "cuda_version", "cudnn_version")}
    data["memory_total_bytes"] = None if info.memory_total_bytes is None else round(info.memory_total_bytes / 2**30)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert info.fingerprint == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_nvidia_smi_that_fails_or_says_nothing_means_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    info = collect_system_info()
    assert (info.gpu_name, info.gpu_count, info.gpu_memory_bytes) == (None, 0, None)
