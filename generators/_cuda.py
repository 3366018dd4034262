"""Host and device times of one run on CUDA: what the issuing thread spends, and the kernels alone.

A brick timed alone on a GPU pays its launch and its kernels one after the other; inside a model the
host issues the next layer while the device runs this one. The estimator's launch queue
(:func:`dlbricks.estimator.queue.queue_latency`) needs both times of each brick, which one synchronous
latency cannot give. :class:`QueueProbe` measures them on the stream the sessions of this process run
on (onnxruntime's ``user_compute_stream``, created here through the CUDA driver API with ``ctypes``):

- **host**: a run issued with ``disable_synchronize_execution_providers`` on an idle stream, timed on
  the calling thread; the stream is synchronized, untimed, between runs.
- **device**: the stream is first held busy by memsets of a buffer larger than the L2 cache (which
  also evicts the brick's weights and inputs from it), then the run is issued, so that its kernels
  wait queued and then run back to back; CUDA events around them time the kernels alone. One run
  gives the time with a cold L2 (``device_s``); ``WARM_RUNS`` runs in a row give, from their
  difference, the time of a run that follows itself (``device_warm_s``). A measurement counts only
  when the host issued everything before the memsets ended (else the device would have waited for
  the host); otherwise the memsets are doubled and it is taken again.

Runs that make the host wait for the device (a kernel whose output the host reads) have no separate
device time: ``device_s`` is None, and the estimator counts such a brick as blocking.
"""

from __future__ import annotations

import ctypes
import functools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CudaDriverError", "QueueSample", "QueueProbe", "cuda_probe", "repeat_s", "NO_SYNC_ENTRY",
           "REPEAT_COPIES",
           "REPEAT_MAX_DEVICE_S"]

#: Run option that leaves the stream unsynchronized at the end of a run.
NO_SYNC_ENTRY = "disable_synchronize_execution_providers"
#: The driver API's library (installed with the NVIDIA driver).
LIBCUDA = "libcuda.so.1"
#: Bytes of the buffer whose memsets hold the stream busy (and evict the L2 cache: 50 MB on an H100).
BLOCKER_BYTES = 256 << 20
#: Host-timed runs per brick (the median is kept).
HOST_RUNS = 15
#: Device-timed repetitions of each kind (the median is kept).
DEVICE_REPEATS = 5
#: Runs in a row whose difference from one run gives the time of a run that follows itself.
WARM_RUNS = 6
#: The memsets must last this many times the host's time to issue the runs behind them.
BLOCK_MARGIN = 2.0
#: Attempts with doubled memsets before a run is declared to make its host wait.
BLOCK_ATTEMPTS = 4
CU_STREAM_NON_BLOCKING = 1
#: Copies of a brick side by side in the run whose time, against one copy's, gives ``repeat_s``.
REPEAT_COPIES = 4
#: Timed runs of each (one copy, all copies), taken in turn; the medians are kept.
REPEAT_ROUNDS = 15
#: Untimed runs of each before: a CUDA session's first runs search its cuDNN algorithms.
REPEAT_WARMUP = 2
#: Bricks whose kernels take longer are not timed side by side: a further copy costs its kernels'
#: time (a layer's host takes 5-15 us), and the copies of a slow kernel would take seconds.
REPEAT_MAX_DEVICE_S = 100e-6


@dataclass(frozen=True, slots=True)
class QueueSample:
    """Medians of one run's times on CUDA (seconds): the host's time to issue it, the device's time
    to run it with a cold L2 cache and after itself; device times None where the host waits. With
    ``repeat_s``, what one further copy of it adds to a run of several side by side (:func:`repeat_s`;
    None where it was not taken)."""

    host_s: float
    device_s: float | None
    device_warm_s: float | None
    repeat_s: float | None = None


class CudaDriverError(RuntimeError):
    """A CUDA driver call returned an error."""


class _Driver:
    """The few driver API calls the probe makes, each checked."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        elapsed = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        self.elapsed_fn = elapsed

    def __call__(self, name: str, *args: object) -> None:
        fn = self.elapsed_fn if name == "cuEventElapsedTime" else getattr(self._lib, name)
        code = fn(*args)
        if code != 0:
            raise CudaDriverError(f"{name} returned CUDA error {code}")


class QueueProbe:
    """The process's CUDA stream for sessions, with the events and buffer that time runs on it."""

    clock: Callable[[], int] = staticmethod(time.perf_counter_ns)  # host clock, integer nanoseconds

    def __init__(self, device_id: int, lib: ctypes.CDLL | None = None) -> None:
        self.cu = _Driver(lib if lib is not None else ctypes.CDLL(LIBCUDA))
        cu = self.cu
        cu("cuInit", ctypes.c_uint(0))
        device = ctypes.c_int()
        cu("cuDeviceGet", ctypes.byref(device), ctypes.c_int(device_id))
        context = ctypes.c_void_p()
        cu("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        cu("cuCtxSetCurrent", context)
        stream = ctypes.c_void_p()
        cu("cuStreamCreate", ctypes.byref(stream), ctypes.c_uint(CU_STREAM_NON_BLOCKING))
        self.stream = stream
        self._events = [self._event() for _ in range(3)]
        buffer = ctypes.c_uint64()
        cu("cuMemAlloc_v2", ctypes.byref(buffer), ctypes.c_size_t(BLOCKER_BYTES))
        self._buffer = buffer
        self.memset_s = self._time_memsets(4) / 4

    @property
    def stream_handle(self) -> int:
        """The stream's address, as onnxruntime's ``user_compute_stream`` option takes it."""
        return int(self.stream.value or 0)

    def _event(self) -> ctypes.c_void_p:
        event = ctypes.c_void_p()
        self.cu("cuEventCreate", ctypes.byref(event), ctypes.c_uint(0))
        return event

    def _memsets(self, count: int) -> None:
        for _ in range(count):
            self.cu("cuMemsetD32Async", self._buffer, ctypes.c_uint(0), ctypes.c_size_t(BLOCKER_BYTES // 4),
                    self.stream)

    def _elapsed_s(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        ms = ctypes.c_float()
        self.cu("cuEventElapsedTime", ctypes.byref(ms), start, end)
        return float(ms.value) / 1e3

    def _time_memsets(self, count: int) -> float:
        e0, e1, _ = self._events
        self.cu("cuEventRecord", e0, self.stream)
        self._memsets(count)
        self.cu("cuEventRecord", e1, self.stream)
        self.cu("cuEventSynchronize", e1)
        return self._elapsed_s(e0, e1)

    def synchronize(self) -> None:
        """Wait until the stream is idle."""
        self.cu("cuStreamSynchronize", self.stream)

    def host_s(self, run: Callable[[], object], runs: int = HOST_RUNS) -> float:
        """Median seconds the calling thread spends issuing ``run`` (unsynchronized) on an idle stream."""
        times = []
        for _ in range(runs):
            self.synchronize()
            t0 = self.clock()
            run()
            times.append(self.clock() - t0)
        self.synchronize()
        return statistics.median(times) / 1e9

    def device_s(self, run: Callable[[], object], runs: int, host_s: float) -> float | None:
        """Seconds the device spends on ``runs`` issues of ``run`` queued behind memsets, kernels
        alone; None if the host could not issue them before the memsets ended (it waited)."""
        e0, e1, e2 = self._events
        count = max(1, math.ceil(BLOCK_MARGIN * runs * host_s / max(self.memset_s, 1e-9)))
        for _ in range(BLOCK_ATTEMPTS):
            self.synchronize()
            t0 = self.clock()
            self.cu("cuEventRecord", e0, self.stream)
            self._memsets(count)
            self.cu("cuEventRecord", e1, self.stream)
            for _ in range(runs):
                run()
            issued = (self.clock() - t0) / 1e9  # from the memsets' first issue to the runs' last
            self.cu("cuEventRecord", e2, self.stream)
            self.cu("cuEventSynchronize", e2)
            if issued < self._elapsed_s(e0, e1):
                return self._elapsed_s(e1, e2)
            count *= 2
        return None

    def measure(self, run: Callable[[], object]) -> QueueSample:
        """The host time of ``run`` and its device times cold and after itself (medians)."""
        host = self.host_s(run)
        cold = [self.device_s(run, 1, host) for _ in range(DEVICE_REPEATS)]
        if any(c is None for c in cold):
            return QueueSample(host, None, None)
        many = [self.device_s(run, WARM_RUNS, host) for _ in range(DEVICE_REPEATS)]
        device = statistics.median(c for c in cold if c is not None)
        warm = None
        if all(m is not None for m in many):
            warm = max(statistics.median(m for m in many if m is not None) - device, 0.0) / (WARM_RUNS - 1)
        return QueueSample(host, device, warm)


def repeat_s(one: Callable[[], object], many: Callable[[], object], copies: int, *,
             rounds: int = REPEAT_ROUNDS, warmup: int = REPEAT_WARMUP,
             clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Seconds that one further copy of a brick adds to a run: ``one`` runs a single copy, ``many``
    runs ``copies`` side by side (synchronous runs both, built alike); each is timed ``rounds`` times,
    in turn, after ``warmup`` untimed runs, and the difference of their medians is shared among the
    ``copies - 1`` further copies (at least 0).

    Inside the run of several copies the host issues each copy while the device runs the one before,
    as it issues a model's layers: a further copy costs the larger of its host's time and its
    kernels', with its output allocated as a layer's is.
    """
    if copies < 2:
        raise ValueError(f"'copies' must be >= 2. Got {copies!r} instead.")
    for _ in range(warmup):
        one()
        many()
    ones, manys = [], []
    for _ in range(rounds):
        for run, times in ((one, ones), (many, manys)):
            t0 = clock()
            run()
            times.append(clock() - t0)
    return max(statistics.median(manys) - statistics.median(ones), 0.0) / (copies - 1) / 1e9


@functools.cache
def cuda_probe(device_id: int) -> QueueProbe | None:
    """This process's probe of CUDA device ``device_id``, or None where the driver is missing or
    refuses (no GPU here: bricks then keep their synchronous latency only)."""
    try:
        return QueueProbe(device_id)
    except (OSError, AttributeError, CudaDriverError):
        return None
