"""Isolation: items that crash, raise or hang in the worker are recorded; the batch goes on.

These run real worker subprocesses with the FaultyBackend of ``tests/gen_fake_backends.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time

import pytest

from dlbricks import InvalidArgumentError
from dlbricks.generators import Budget, benchmark, register_backend
from dlbricks.generators._registry import unregister_backend
from dlbricks.generators.items import floor_model
from dlbricks.generators.runner import Runner
from tests.gen_fake_backends import FakeBrick, FaultyBackend, behavior_model

FAULTY = "tests.gen_fake_backends:FaultyBackend"
BUDGET = dataclasses.replace(Budget.quick(), timeout=1.5)


def test_crash_raise_and_hang_are_recorded_and_the_batch_goes_on() -> None:
    behaviors = ["ok", "kill", "ok", "raise", "ok", "hang", "ok", "segv", "exit", "ok"]
    items = [behavior_model(b, tag=str(i)) for i, b in enumerate(behaviors)]
    results = list(benchmark(items, backend=FAULTY, budget=BUDGET))
    assert len(results) == len(items)
    by_behavior = dict(zip(behaviors, results, strict=True))
    for m, behavior in zip(results, behaviors, strict=True):
        if behavior == "ok":
            assert m.status == "ok" and m.median_s > 0 and m.n >= BUDGET.min_runs, m
            assert m.floor_s is not None
    assert by_behavior["kill"].status == "failed"
    assert by_behavior["kill"].error == "worker killed by signal SIGKILL"
    assert by_behavior["segv"].status == "failed"
    assert by_behavior["segv"].error.startswith("worker killed by signal SIGSEGV")
    assert by_behavior["exit"].error == "worker exited with code 7"
    assert by_behavior["raise"].status == "failed"
    assert by_behavior["raise"].error == "RuntimeError: boom: this brick always fails"
    assert by_behavior["hang"].status == "timeout"
    assert by_behavior["hang"].error == "timed out after 1.5 s"
    assert 1.5 <= by_behavior["hang"].wall_time_s < 3.0
    for m in results:
        assert m.backend == "faulty"
        if not m.ok:
            assert m.n == 0 and m.median_s is None and not m.converged and "\n" not in m.error


def test_worker_is_replaced_after_a_crash_but_kept_after_an_exception() -> None:
    with Runner(FAULTY, budget=BUDGET) as runner:
        runner.measure(behavior_model("ok"))
        first = runner.worker_pid
        assert runner.measure(behavior_model("raise")).status == "failed"
        assert runner.worker_pid == first
        assert runner.measure(behavior_model("kill")).status == "failed"
        assert runner.worker_pid is None
        assert runner.measure(behavior_model("ok", tag="again")).ok
        assert runner.worker_pid not in (None, first)
    assert runner.worker_pid is None


def test_registered_backend_reaches_the_worker_with_its_thread_env() -> None:
    register_backend("gen-faulty", FaultyBackend)
    try:
        (m,) = benchmark([behavior_model("env")], backend="gen-faulty", budget=BUDGET)
    finally:
        unregister_backend("gen-faulty")
    assert m.status == "failed" and m.error == "RuntimeError: OMP_NUM_THREADS=3"


def test_benchmarkable_items_use_their_key_and_failing_to_onnx_is_recorded() -> None:
    bricks = [FakeBrick("sig-ok", behavior_model("ok")), FakeBrick("sig-broken", None)]
    ok, broken = benchmark(bricks, backend=FAULTY, budget=BUDGET)
    assert (ok.key, ok.status) == ("sig-ok", "ok")
    assert (broken.key, broken.status) == ("sig-broken", "failed")
    assert broken.error == "ValueError: brick sig-broken cannot be materialized"


def test_bad_items_are_rejected_at_once() -> None:
    with pytest.raises(InvalidArgumentError, match=r"Item 1 to benchmark must be an onnx\.ModelProto"):
        benchmark([behavior_model("ok"), 42], backend=FAULTY)
    with pytest.raises(InvalidArgumentError, match="'progress' must be callable"):
        benchmark([], backend=FAULTY, progress="yes")


def test_closing_the_iterator_stops_the_worker() -> None:
    items = [behavior_model("pid"), behavior_model("ok")]
    it = benchmark(items, backend=FAULTY, budget=BUDGET)
    pid = int(next(it).error.rpartition("=")[2])
    os.kill(pid, 0)  # alive while the batch runs
    it.close()  # the generator's finally closes the runner, which reaps its worker
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_held_model_is_timed_again_until_released_or_its_worker_dies() -> None:
    from tests.test_generators_ort import conv_model

    with Runner(budget=Budget.quick()) as runner:
        first = runner.hold(conv_model())
        pid = runner.worker_pid
        again = [runner.again(first.key) for _ in range(3)]
        assert first.ok and all(m.ok and m.key == first.key for m in again)
        assert runner.worker_pid == pid  # the same prepared session, no new worker
        assert all(0.25 < m.median_s / first.median_s < 4.0 for m in again)
        runner.release(first.key)
        gone = runner.again(first.key)
        assert gone.status == "failed" and "no model" in gone.error and "held" in gone.error
        runner.hold(conv_model())
        os.kill(runner.worker_pid, 9)
        assert runner.again(first.key).status == "failed"  # lost with its worker, recorded


def test_the_floor_is_calibrated_again_and_the_fastest_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A floor calibrated in a noisy moment would lower every estimate; a Runner calibrates again
    every FLOOR_REFRESH_S seconds and keeps the calibration whose one-node model ran fastest (its
    median), with the floor and the cost of a further node of that moment."""
    from dlbricks.generators import runner as _runner

    monkeypatch.setattr(_runner, "FLOOR_REFRESH_S", 0.0)
    with Runner(budget=Budget.quick()) as runner:
        asked = []
        request = runner._request
        runner._request = lambda key, kind, payload, **kw: asked.append(kind) or request(key, kind, payload, **kw)
        floors = [runner.floor() for _ in range(4)]
    assert asked == ["floor"] * 4
    medians = [f.median_s for f in floors]
    assert all(later <= earlier for earlier, later in itertools.pairwise(medians))
    assert all(f.floor_s > 0 and f.node_s > 0 and f.floor_s + f.node_s == pytest.approx(f.median_s) for f in floors)


def test_a_worker_pins_itself_to_the_core_its_environment_names(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from dlbricks.generators.util import CPU_ENV, last_core

    monkeypatch.setenv(CPU_ENV, str(last_core()))
    with Runner(budget=Budget.quick()) as runner:
        assert runner.measure(floor_model()).ok
        assert os.sched_getaffinity(runner.worker_pid) == {last_core()}
    monkeypatch.delenv(CPU_ENV)
    with Runner(budget=Budget.quick()) as runner:
        assert runner.measure(floor_model()).ok
        assert os.sched_getaffinity(runner.worker_pid) == os.sched_getaffinity(0)


def test_a_runner_waits_until_the_last_runners_threads_stop_spinning() -> None:
    """After a multi-threaded run, onnxruntime's pool threads spin on a core for tens of ms: another
    worker timing at once would run on what is left (a 2-thread SqueezeNet 3.2-7.9 ms against 3.2)."""
    from dlbricks.generators.runner import _LastReply
    from tests.gen_fake_backends import FakeClock

    clock, slept = FakeClock(), []
    last = _LastReply(clock=lambda: clock() / 1e9, sleep=slept.append)
    last.replied(runner=1, spin_s=0.06)
    clock.advance(10_000_000)
    last.settle(runner=1)  # its own threads: nothing to wait for
    assert slept == []
    last.settle(runner=2)
    assert slept == [pytest.approx(0.05)]
    clock.advance(100_000_000)
    last.settle(runner=2)
    assert len(slept) == 1


def test_two_threaded_runners_take_turns_with_a_pause_between_them(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from dlbricks.generators import OrtConfig
    from dlbricks.generators import runner as _runner
    from dlbricks.generators.ort import IDLE_SPIN_S

    slept: list[float] = []
    monkeypatch.setattr(_runner._LAST_REPLY, "sleep", lambda s: slept.append(s) or time.sleep(s))
    config = OrtConfig(intra_op_num_threads=2)
    with Runner(config=config, budget=Budget.quick()) as a, Runner(config=config, budget=Budget.quick()) as b:
        assert b.measure(floor_model()).ok and a.measure(floor_model()).ok  # both workers started
        slept.clear()
        assert a.measure(floor_model()).ok  # a's threads spin for a itself: no pause
        assert slept == []
        assert b.measure(floor_model()).ok and a.measure(floor_model()).ok  # each waits for the other
        assert len(slept) == 2 and all(0 < s <= IDLE_SPIN_S for s in slept)
    with Runner(budget=Budget.quick()) as one, Runner(budget=Budget.quick()) as other:
        one.measure(floor_model())
        slept.clear()
        one.measure(floor_model())
        other.measure(floor_model())  # one thread: no pool, nothing spins
    assert slept == []


def test_launch_queue_times_come_in_a_request_of_their_own_that_may_crash() -> None:
    from tests.gen_fake_backends import FakeConfig

    with Runner(FAULTY, FakeConfig("queue"), budget=BUDGET) as runner:
        fine = runner.measure(behavior_model("queue-ok"))
        assert fine.ok and (fine.host_s, fine.device_s, fine.device_warm_s) == (10e-6, 20e-6, 15e-6)
        crashed = runner.measure(behavior_model("queue-abort"))
        assert crashed.ok and crashed.median_s and crashed.host_s is None and crashed.device_s is None
        assert runner.worker_pid is None  # replaced on the next request
        assert runner.measure(behavior_model("queue-ok", tag="after")).device_s == 20e-6
    with Runner(FAULTY, budget=BUDGET) as runner:  # a backend config that takes none
        assert runner.measure(behavior_model("queue-ok", tag="plain")).host_s is None


def test_a_spare_worker_started_ahead_serves_the_request_after_close() -> None:
    """``prestart`` starts a worker that imports while the current one works; the request after
    ``close(keep_spare=True)`` takes it, and ``close()`` stops a spare nobody took."""
    with Runner(backend=FAULTY, budget=BUDGET, floor=False) as runner:
        assert runner.measure(behavior_model("ok", tag="a")).status == "ok"
        first = runner.worker_pid
        runner.prestart()
        spare = runner._spare
        assert spare is not None and spare.proc.pid != first
        runner.close(keep_spare=True)
        assert runner.measure(behavior_model("ok", tag="b")).status == "ok"
        assert runner.worker_pid == spare.proc.pid and runner._spare is None
        runner.prestart()
        unused = runner._spare
        runner.close()
        assert unused.proc.poll() is not None  # stopped with the runner's worker
    with Runner(backend=FAULTY, budget=BUDGET, floor=False) as runner:
        runner.prestart()
        dead = runner._spare
        dead.proc.kill()  # a spare that died before it was taken: a fresh worker stands in
        dead.proc.wait()
        assert runner.measure(behavior_model("ok", tag="c")).status == "ok"
        assert runner.worker_pid not in (None, dead.proc.pid)
