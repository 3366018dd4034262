"""The launch-queue probe's arithmetic on a simulated stream (no GPU): host and device times apart.

A fake driver plays one in-order stream: each memset and each run's kernels start when issued and
the stream is free, an event takes the time the stream reaches it. The host clock advances by what
issuing costs. The probe must read the host's issue time and the kernels' time apart, whichever
bounds the run, and give up on a run that makes its host wait.
"""

from __future__ import annotations

import pytest

from dlbricks.generators import OrtConfig
from dlbricks.generators._cuda import QueueProbe, cuda_probe

US = 1000  # nanoseconds


class FakeStream:
    """One in-order stream and a host clock, in nanoseconds."""

    def __init__(self, host_ns: int, cold_ns: int, warm_ns: int, memset_ns: int = 90 * US,
                 waits: bool = False) -> None:
        self.now = 0  # host clock
        self.free = 0  # when the stream has finished what was issued
        self.host_ns, self.cold_ns, self.warm_ns, self.memset_ns = host_ns, cold_ns, warm_ns, memset_ns
        self.waits = waits  # the run reads a result: its host waits for the stream
        self.events: dict[int, int] = {}
        self.last = "memset"

    def enqueue(self, duration: int) -> None:
        self.free = max(self.now, self.free) + duration

    def run(self) -> None:
        self.now += self.host_ns
        self.enqueue(self.cold_ns if self.last == "memset" else self.warm_ns)
        self.last = "run"
        if self.waits:
            self.now = max(self.now, self.free)

    def memsets(self, count: int) -> None:
        for _ in range(count):
            self.now += 2 * US
            self.enqueue(self.memset_ns)
        self.last = "memset"

    def driver(self, name: str, *args: object) -> None:
        if name == "cuEventRecord":
            self.events[id(args[0])] = max(self.now, self.free)


def fake_probe(stream: FakeStream) -> QueueProbe:
    probe = QueueProbe.__new__(QueueProbe)
    probe.cu = stream.driver  # type: ignore[assignment]
    probe._events = [object(), object(), object()]  # type: ignore[list-item]
    probe.memset_s = stream.memset_ns / 1e9
    probe.stream = None  # type: ignore[assignment]
    probe.clock = lambda: stream.now  # type: ignore[method-assign]
    probe._memsets = stream.memsets  # type: ignore[method-assign]
    probe.synchronize = lambda: setattr(stream, "now", max(stream.now, stream.free))  # type: ignore[method-assign]
    probe._elapsed_s = lambda a, b: (stream.events[id(b)] - stream.events[id(a)]) / 1e9  # type: ignore[method-assign]
    return probe


@pytest.mark.parametrize(("host_us", "cold_us", "warm_us"), [(10, 50, 40), (100, 5, 4), (30, 30, 30)])
def test_host_and_device_times_come_apart_whichever_bounds_the_run(host_us: int, cold_us: int, warm_us: int) -> None:
    stream = FakeStream(host_us * US, cold_us * US, warm_us * US)
    sample = fake_probe(stream).measure(stream.run)
    assert sample.host_s == pytest.approx(host_us * 1e-6)
    assert sample.device_s == pytest.approx(cold_us * 1e-6)
    assert sample.device_warm_s == pytest.approx(warm_us * 1e-6)


def test_a_run_longer_to_issue_than_the_memsets_gets_more_of_them() -> None:
    stream = FakeStream(host_ns=400 * US, cold_ns=20 * US, warm_ns=20 * US, memset_ns=90 * US)
    probe = fake_probe(stream)
    probe.memset_s = 1.0  # a wrong calibration: one memset looks long enough for anything
    assert probe.device_s(stream.run, 1, 400e-6) == pytest.approx(20e-6)


def test_a_run_whose_host_waits_for_its_kernels_has_no_device_time() -> None:
    stream = FakeStream(host_ns=10 * US, cold_ns=50 * US, warm_ns=50 * US, waits=True)
    sample = fake_probe(stream).measure(stream.run)
    assert sample.host_s == pytest.approx(60e-6)  # issued on an idle stream, it waits for its kernel
    assert sample.device_s is None and sample.device_warm_s is None


def test_without_a_cuda_driver_there_is_no_probe_and_no_stream_option() -> None:
    from dlbricks.generators.ort import _providers

    cuda_probe.cache_clear()
    if cuda_probe(0) is not None:
        pytest.skip("a CUDA driver is here: the CPU path is what this test checks")
    (cuda, cpu) = _providers(OrtConfig(device="cuda", onnxruntime_version="1"))
    assert cpu == "CPUExecutionProvider" and "user_compute_stream" not in cuda[1]


def test_a_further_copy_costs_the_difference_of_the_medians() -> None:
    """``repeat_s``: runs of one copy and of eight taken in turn; what the eight take beyond the
    one, over the seven further copies, whatever the noise of single runs."""
    from dlbricks.generators._cuda import repeat_s

    now = [0]
    one_ns, further_ns = 30 * US, 9 * US
    noise = iter([0, 4 * US, 0, 0, 50 * US, 0] * 100)

    def run(copies: int):
        def go() -> None:
            now[0] += one_ns + (copies - 1) * further_ns + next(noise)
        return go

    seconds = repeat_s(run(1), run(8), 8, rounds=9, warmup=1, clock=lambda: now[0])
    assert seconds == pytest.approx(further_ns / 1e9)
    with pytest.raises(ValueError, match="copies"):
        repeat_s(run(1), run(1), 1)
