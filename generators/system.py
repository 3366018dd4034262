"""The fingerprint of the machine a measurement was taken on.

Collected from ``/proc``, ``/sys``, ``platform`` and ``nvidia-smi`` when present; psutil is not
needed. The fingerprint hashes what determines performance (hardware, OS, library versions), not
what changes from minute to minute (free memory, hostname, uptime).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["SystemInfo", "collect_system_info", "last_level_cache_bytes"]

ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm",
)  # fmt: skip
GIB = 1 << 30
COMMAND_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemInfo:
    """Hardware, OS and library versions of a machine.

    Attributes
    ----------
    cpu_model : str
    architecture : str
        ``platform.machine()``, e.g. ``"x86_64"``.
    physical_cores, logical_cores : int
    cpu_isa : tuple of str
        The vector extensions among :data:`ISA_FLAGS` that the CPU reports.
    cache_bytes : tuple of (str, int)
        Per-core cache sizes by level, e.g. ``(("L1d", 49152), ..., ("L3", 33554432))``.
    memory_total_bytes : int or None
    os, os_release, kernel : str
    python_version, numpy_version, onnx_version : str
    onnxruntime_version : str or None
    gpu_name, gpu_driver : str or None
        From ``nvidia-smi`` when it exists; ``gpu_count`` GPUs were found.
    gpu_memory_bytes : int or None
        The first GPU's memory (``nvidia-smi``).
    cuda_version, cudnn_version : str or None
        What the onnxruntime build was made for (``onnxruntime.capi.build_and_package_info``; a CPU
        build has neither). These three enter the fingerprint only when known, so that a machine
        without a GPU keeps the fingerprint it had before they were collected.
    """

    cpu_model: str
    architecture: str
    physical_cores: int
    logical_cores: int
    cpu_isa: tuple[str, ...]
    cache_bytes: tuple[tuple[str, int], ...]
    memory_total_bytes: int | None
    os: str
    os_release: str
    kernel: str
    python_version: str
    numpy_version: str | None
    onnx_version: str | None
    onnxruntime_version: str | None
    gpu_name: str | None
    gpu_driver: str | None
    gpu_count: int
    gpu_memory_bytes: int | None = None
    cuda_version: str | None = None
    cudnn_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field, plus ``fingerprint``."""
        data = self._fields()
        data["fingerprint"] = self.fingerprint
        return data

    @property
    def fingerprint(self) -> str:
        """16 hex digits of the SHA-256 of the stable fields (memory rounded to whole GiB)."""
        data = self._fields()
        total = self.memory_total_bytes
        data["memory_total_bytes"] = None if total is None else round(total / GIB)
        for name in _OPTIONAL_FIELDS:
            if data[name] is None:
                del data[name]
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _fields(self) -> dict[str, Any]:
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["cpu_isa"] = list(self.cpu_isa)
        data["cache_bytes"] = {name: size for name, size in self.cache_bytes}
        return data


#: Fields that enter the fingerprint only when known (see :class:`SystemInfo`).
_OPTIONAL_FIELDS = ("gpu_memory_bytes", "cuda_version", "cudnn_version")


def collect_system_info() -> SystemInfo:
    """Collect the :class:`SystemInfo` of this machine (imports onnxruntime to read its version).

    Examples
    --------
    >>> info = collect_system_info()
    >>> info.logical_cores >= 1 and len(info.fingerprint) == 16
    True
    """
    cpuinfo = _read_text("/proc/cpuinfo")
    gpu_name, gpu_driver, gpu_count, gpu_memory = _nvidia_gpus()
    cuda, cudnn = _onnxruntime_cuda()
    return SystemInfo(
        cpu_model=_cpu_model(cpuinfo),
        architecture=platform.machine(),
        physical_cores=_physical_cores(cpuinfo),
        logical_cores=os.cpu_count() or 1,
        cpu_isa=_cpu_isa(cpuinfo),
        cache_bytes=_cache_sizes(),
        memory_total_bytes=_memory_total(),
        os=platform.system(),
        os_release=_os_release(),
        kernel=platform.release(),
        python_version=platform.python_version(),
        numpy_version=_version("numpy"),
        onnx_version=_version("onnx"),
        onnxruntime_version=_onnxruntime_version(),
        gpu_name=gpu_name,
        gpu_driver=gpu_driver,
        gpu_count=gpu_count,
        gpu_memory_bytes=gpu_memory,
        cuda_version=cuda,
        cudnn_version=cudnn,
    )


def _read_text(path: str) -> str:
    """The text of ``path``, or '' when it cannot be read."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _run(args: list[str]) -> str:
    """The stdout of a short command, or '' if it is missing or fails."""
    if shutil.which(args[0]) is None:
        return ""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _cpuinfo_values(cpuinfo: str, key: str) -> list[str]:
    """Every value of ``key`` in /proc/cpuinfo text."""
    pattern = re.compile(rf"^{re.escape(key)}\s*:\s*(.*)$", re.MULTILINE)
    return [m.group(1).strip() for m in pattern.finditer(cpuinfo)]


def _cpu_model(cpuinfo: str) -> str:
    """The CPU's marketing name."""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        values = _cpuinfo_values(cpuinfo, key)
        if values and values[0]:
            return values[0]
    if sys.platform == "darwin":
        brand = _run(["sysctl", "-n", "machdep.cpu.brand_string"]).strip()
        if brand:
            return brand
    return platform.processor() or platform.machine() or "unknown"


def _physical_cores(cpuinfo: str) -> int:
    """Distinct (socket, core) pairs from /proc/cpuinfo, else lscpu, else the logical count."""
    sockets = _cpuinfo_values(cpuinfo, "physical id")
    cores = _cpuinfo_values(cpuinfo, "core id")
    if sockets and len(sockets) == len(cores):
        return len(set(zip(sockets, cores, strict=True)))
    pairs = {line for line in _run(["lscpu", "-p=CORE,SOCKET"]).splitlines() if line and line[0] != "#"}
    return len(pairs) or os.cpu_count() or 1


def _cpu_isa(cpuinfo: str) -> tuple[str, ...]:
    """The vector extensions in the CPU flags (x86 'flags' or ARM 'Features')."""
    values = _cpuinfo_values(cpuinfo, "flags") or _cpuinfo_values(cpuinfo, "Features")
    present = set(values[0].split()) if values else set()
    return tuple(flag for flag in ISA_FLAGS if flag in present)


def last_level_cache_bytes() -> int:
    """Size of the largest cache of this machine (32 MiB when the OS does not tell)."""
    sizes = [size for _, size in _cache_sizes()]
    return max(sizes) if sizes else 32 << 20


def _cache_sizes() -> tuple[tuple[str, int], ...]:
    """Cache sizes of CPU 0 from sysfs, named L1d, L1i, L2, L3."""
    sizes: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level = _read_text(str(index / "level")).strip()
        kind = _read_text(str(index / "type")).strip()
        size = _parse_size(_read_text(str(index / "size")).strip())
        if not level or size is None:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        sizes[f"L{level}{suffix}"] = size
    return tuple(sorted(sizes.items()))


def _parse_size(text: str) -> int | None:
    """'48K' -> 49152; None when it is not a size."""
    match = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text, re.IGNORECASE)
    if not match:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(match.group(1)) * scale


def _memory_total() -> int | None:
    """Total physical memory in bytes."""
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", _read_text("/proc/meminfo"), re.MULTILINE)
    if match:
        return int(match.group(1)) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _os_release() -> str:
    """The distribution's pretty name, or ``platform.platform()``."""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', _read_text("/etc/os-release"), re.MULTILINE)
    return match.group(1) if match else platform.platform()


def _version(distribution: str) -> str | None:
    """The installed version of a distribution, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _onnxruntime_version() -> str | None:
    """The version of the onnxruntime module this process imports (CPU or GPU build)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


def _nvidia_gpus() -> tuple[str | None, str | None, int, int | None]:
    """Name, driver and memory (bytes) of the first NVIDIA GPU, and how many there are (via nvidia-smi)."""
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"])
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    if not rows:
        return None, None, 0, None
    name, driver, memory = (rows[0] + ["", "", ""])[:3]
    mib = int(memory) if memory.isdigit() else None
    return name or None, driver or None, len(rows), None if mib is None else mib * 2**20


def _onnxruntime_cuda() -> tuple[str | None, str | None]:
    """The CUDA and cuDNN versions the imported onnxruntime was built for (None for a CPU build)."""
    try:
        from onnxruntime.capi import build_and_package_info as info
    except ImportError:
        return None, None
    cuda, cudnn = getattr(info, "cuda_version", None), getattr(info, "cudnn_version", None)
    return (str(cuda) if cuda else None), (str(cudnn) if cudnn else None)
