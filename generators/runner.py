"""The parent side of isolation: a long-lived worker subprocess, replaced when an item kills it.

:class:`Runner` sends one item at a time to a worker (``python -m dlbricks.generators._worker``),
waits for the answer at most ``budget.timeout`` seconds, and turns every way an item can go wrong
into a :class:`Measurement` with ``status`` ``"failed"`` or ``"timeout"`` and a one-line reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dlbricks import BackendError, InvalidArgumentError

from ._cache import DEFAULT_CACHE_BYTES
from ._ipc import WorkerDiedError, WorkerTimeoutError, read_message, write_message
from ._registry import get_backend, portable_registry
from .budget import Budget
from .harness import Timing
from .items import FLOOR_KEY, Item, resolve_item
from .measurement import Measurement, failed_measurement
from .protocols import Backend, BackendConfig
from .rounds import PairedRounds, RoundsBudget, merge_paired, rounds_measurements
from .util import one_line

__all__ = ["ROUND_PROCESSES", "Runner", "resolve_config", "rounds_in_processes", "lock_waited_s"]

STARTUP_TIMEOUT_S = 120.0
EXIT_GRACE_S = 5.0
WORKER_MODULE = "dlbricks.generators._worker"
#: Worker processes a model's rounds are spread over (:func:`rounds_in_processes`): at least
#: ``ROUND_PROCESSES``, more, up to ``MAX_ROUND_PROCESSES``, while the processes' own ratios disagree by
#: more than ``PROCESS_REL_CI``.
ROUND_PROCESSES = 2
MAX_ROUND_PROCESSES = 4
#: Relative 95% half-width of the mean of the processes' ratios (twice its standard error) at which
#: :func:`rounds_in_processes` starts no further process.
PROCESS_REL_CI = 0.02
#: Budget of holding a whole model in a fresh worker for its rounds (one placement). The hold times
#: nothing (``proof``): preparing the model runs it once, which proves it runs, and the rounds time it.
_HOLD_BUDGET = Budget(warmup_time=0.0, min_time=0.0, min_runs=1, max_time=1e-9, rel_ci=1.0, placements=1)


def resolve_config(backend: Backend, config: Any) -> BackendConfig:
    """``config`` as the backend's config object: None gives the default, a mapping is parsed."""
    if config is None:
        return backend.default_config()
    if isinstance(config, Mapping):
        return backend.config_from_dict(config)
    return config


#: Set to 0 to let this process time while another dlbricks process times on the same machine.
TIMING_LOCK_ENV = "DLBRICKS_TIMING_LOCK"
#: Seconds a request waits for another process's measurement before it says so on stderr.
LOCK_NOTICE_S = 2.0


class _MachineLock:
    """One measurement at a time on this machine, across processes: every request to a worker holds
    an exclusive ``flock`` on a file in the temporary directory while it runs. Two processes timing
    at once share the cores: a run of 17 ms that another process's worker preempts takes twice as
    long, while a brick's calls of microseconds mostly escape (an evaluate run beside a test suite
    measured EfficientNet-B0 at 34.6 ms whole, 17.3 ms alone). The second process waits, request by
    request, and says once that it waits. The lock goes with the process (the kernel drops it)."""

    def __init__(self) -> None:
        self._file: Any = None
        self._told = False
        #: Seconds this process's requests have waited for another process's, in all.
        self.waited_s = 0.0

    def _open(self) -> Any:
        if self._file is None:
            path = os.path.join(tempfile.gettempdir(), "dlbricks-timing.lock")
            self._file = open(path, "a+b")  # noqa: SIM115 - held for the process's life
        return self._file

    @contextlib.contextmanager
    def held(self) -> Any:
        if os.environ.get(TIMING_LOCK_ENV, "1") == "0":
            yield
            return
        import fcntl

        try:
            lock = self._open()
        except OSError:  # no writable temporary directory: time without the lock rather than not at all
            yield
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.waited_s += time.monotonic() - waited
            if time.monotonic() - waited > LOCK_NOTICE_S and not self._told:
                self._told = True
                print(f"dlbricks: waited {time.monotonic() - waited:.0f} s for another dlbricks process timing on "
                      f"this machine (set {TIMING_LOCK_ENV}=0 to time beside it anyway)", file=sys.stderr)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_MACHINE = _MachineLock()


def lock_waited_s() -> float:
    """Seconds this process's measurements have waited, in all, for another dlbricks process's
    measurements on this machine (the timing lock): time that no measurement's ``wall_time_s``
    counts."""
    return _MACHINE.waited_s


class _Worker:
    """One worker subprocess and its pipes; its stderr goes to a temporary file."""

    def __init__(self, env: dict[str, str], keep_bytes: int = 0, *, wait: bool = True) -> None:
        """Start the worker and send it its ``init``; with ``wait`` read the answer now, holding the
        machine's timing lock as every request does; else :meth:`ready` reads it later (a spare
        imports the runtime meanwhile, outside the lock)."""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        self.proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            process_group=0,  # Ctrl-C at a terminal reaches the driver only; it decides when we stop
        )
        self._started = False
        self._ahead: list[tuple[str, str]] = []  # (kind, key) of requests sent ahead, answers not yet read
        self._answers: dict[tuple[str, str], Any] = {}  # answers read, not yet taken
        self._writer: threading.Thread | None = None
        init = {"sys_path": list(sys.path), "registry": portable_registry(), "cache_bytes": keep_bytes}
        assert self.proc.stdin is not None
        try:
            write_message(self.proc.stdin, ("init", init))
        except (BrokenPipeError, OSError):
            pass  # ready() reads why it died
        if wait:
            with _MACHINE.held():  # a start on the critical path waits its turn, as every request does
                self.ready()

    def ready(self) -> _Worker:
        """Wait for the answer to ``init``: the worker has imported the runtime and serves requests.

        Raises
        ------
        BackendError
            If the worker died or did not answer within :data:`STARTUP_TIMEOUT_S`.
        """
        if self._started:
            return self
        assert self.proc.stdout is not None
        try:
            status, reply = read_message(self.proc.stdout.fileno(), STARTUP_TIMEOUT_S)
        except (WorkerDiedError, WorkerTimeoutError) as e:
            reason = self.death_reason() if isinstance(e, WorkerDiedError) else "did not start in time"
            self.kill()
            raise BackendError(f"The benchmark worker failed to start: {reason}.") from e
        if status != "ok":
            self.kill()
            raise BackendError(f"The benchmark worker failed to start: {reply}.")
        self._started = True
        return self

    @property
    def has_ahead(self) -> bool:
        """Whether requests sent ahead have answers not yet taken."""
        return bool(self._ahead or self._answers)

    def ahead_for(self, key: str) -> bool:
        """Whether a request sent ahead about ``key`` has its answer not yet taken."""
        return any(k == key for _, k in (*self._ahead, *self._answers))

    def send_ahead(self, requests: Sequence[tuple[str, str, tuple[str, Any]]]) -> None:
        """Send ``requests`` (each ``(kind, key, message)``) now, from a thread, and read their answers
        later (:meth:`settle` and :meth:`take_ahead`), so that the caller goes on while this worker
        starts on them. Each is wrapped in a ``timed`` request: its answer carries the seconds it
        took in the worker."""
        self._join_writer(None)
        self._ahead.extend((kind, key) for kind, key, _ in requests)
        messages = [("timed", message) for _, _, message in requests]
        self._writer = threading.Thread(target=self._write_all, args=(messages,), daemon=True)
        self._writer.start()

    def _write_all(self, messages: Sequence[tuple[str, Any]]) -> None:
        assert self.proc.stdin is not None
        for message in messages:
            try:
                write_message(self.proc.stdin, message)
            except (BrokenPipeError, OSError, ValueError):  # the worker died, or was closed: its reader says so
                return

    def _join_writer(self, timeout: float | None) -> bool:
        """Wait for the requests sent ahead to be written; whether they are."""
        if self._writer is not None:
            self._writer.join(timeout)
            if self._writer.is_alive():
                return False
            self._writer = None
        return True

    def settle(self, timeout: float) -> None:
        """Wait until the worker has started and answered every request sent ahead, at most
        ``timeout`` seconds for each answer, and keep the answers for :meth:`take_ahead`.

        Raises
        ------
        BackendError
            If the worker did not start.
        WorkerTimeoutError, WorkerDiedError
            As :meth:`request`.
        """
        self.ready()
        assert self.proc.stdout is not None
        while self._ahead:
            kind_key = self._ahead.pop(0)
            self._answers[kind_key] = read_message(self.proc.stdout.fileno(), timeout)
        self._join_writer(None)

    def take_ahead(self, kind: str, key: str, timeout: float) -> tuple[str, Any] | None:
        """The answer ``(status, (seconds, result))`` to the request sent ahead as ``(kind, key)``,
        waiting at most ``timeout`` seconds for each answer up to it; None where none was sent (the
        other answers wait for their own requests; the next :meth:`request` drops them).

        Raises
        ------
        WorkerTimeoutError, WorkerDiedError
            As :meth:`request`.
        """
        if (kind, key) in self._ahead:
            with _MACHINE.held():
                self.settle(timeout)
        return self._answers.pop((kind, key), None)

    def _drop_ahead(self, timeout: float) -> None:
        """Read and drop the answers to the requests sent ahead."""
        self.settle(timeout)
        self._answers.clear()

    def request(self, message: tuple[str, Any], timeout: float) -> tuple[str, Any]:
        """Send ``message`` and wait at most ``timeout`` seconds for the answer (the answers to
        requests sent ahead and not taken are read and dropped first)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._drop_ahead(timeout)
        with _MACHINE.held():
            try:
                write_message(self.proc.stdin, message)
            except (BrokenPipeError, OSError) as e:
                raise WorkerDiedError() from e
            return read_message(self.proc.stdout.fileno(), timeout)

    def death_reason(self) -> str:
        """Why the worker is gone: its exit signal or code, and its last line of stderr."""
        try:
            code = self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return "worker closed its output but is still running"
        if code < 0:
            try:
                reason = f"worker killed by signal {signal.Signals(-code).name}"
            except ValueError:
                reason = f"worker killed by signal {-code}"
        else:
            reason = f"worker exited with code {code}"
        tail = self._stderr_tail()
        return f"{reason} (stderr: {tail})" if tail else reason

    def _stderr_tail(self) -> str:
        """The last non-empty line the worker wrote to stderr."""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 4096))
        lines = [x.strip() for x in self._stderr.read().decode(errors="replace").splitlines()]
        lines = [x for x in lines if x]
        return lines[-1][:300] if lines else ""

    def kill(self) -> None:
        """Kill the worker at once and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close_files()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within a few seconds."""
        if self.proc.poll() is None and self._join_writer(EXIT_GRACE_S):
            try:
                assert self.proc.stdin is not None
                write_message(self.proc.stdin, ("exit", None))
                self.proc.wait(timeout=EXIT_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def _close_files(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


#: Seconds between two floor calibrations of a Runner (the fastest is kept). A brick measured with
#: its floor's one-node model paired beside it takes the floor's drift from that model; the
#: calibration sets the floor added once per run and the cost of a further node.
FLOOR_REFRESH_S = 120.0


@dataclasses.dataclass(slots=True)
class _LastReply:
    """The runner that last got a reply in this process, and until when its worker's threads may
    still spin (its backend's ``idle_spin_s``): another runner's request waits until then."""

    runner: int = 0
    spin_until: float = 0.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], object] = time.sleep

    def settle(self, runner: int) -> None:
        """Wait, unless ``runner`` got the last reply itself, until the last worker's threads rest."""
        wait = self.spin_until - self.clock()
        if runner != self.runner and wait > 0:
            self.sleep(wait)

    def replied(self, runner: int, spin_s: float) -> None:
        self.runner, self.spin_until = runner, self.clock() + spin_s


_LAST_REPLY = _LastReply()


class Runner:
    """Measure items one at a time in an isolated, long-lived worker subprocess.

    Parameters
    ----------
    backend : str, default "onnxruntime"
        A registered backend name, or an import path ``"module:attr"`` to a backend factory.
    config : BackendConfig or mapping, optional
        The backend configuration (default: the backend's default).
    budget : Budget, optional
        Default: ``Budget()``.
    keep_samples : bool, default False
        Keep the raw per-call samples in each measurement.
    floor : bool, default True
        Calibrate the floor before the first item and again every :data:`FLOOR_REFRESH_S` seconds,
        keeping the fastest, and record it in every measurement.
    keep_bytes : int, default 2 GiB
        Bytes of prepared items the worker keeps between measurements (0: none): an item measured
        again is timed without being prepared again (see :mod:`dlbricks.generators._cache`).
    repeat : bool, default True
        On an accelerator, also time copies of each brick side by side (``repeat_s``, the host's time
        in the launch queue); False takes its other queue times only (a sweep that wants kernels).

    Raises
    ------
    InvalidArgumentError
        If the backend, configuration or budget is not valid.
    BackendUnavailableError
        If the configuration cannot run on this machine (CUDA without the CUDA provider).

    Notes
    -----
    Runners of one process take turns: after a reply from one runner's worker, another runner waits
    until that worker's idle threads stop spinning (its backend's optional ``idle_spin_s``, e.g. 60 ms
    for multi-threaded onnxruntime) before it sends anything, so that a paired design (a model held in
    one worker, its bricks in another) times neither on the cores the other's threads still hold.

    Examples
    --------
    >>> from dlbricks.generators import Budget
    >>> from dlbricks.generators.items import floor_model
    >>> from dlbricks.generators.runner import Runner
    >>> with Runner(budget=Budget.quick()) as runner:
    ...     runner.measure(floor_model()).status
    'ok'
    """

    def __init__(
        self,
        backend: str = "onnxruntime",
        config: BackendConfig | Mapping[str, Any] | None = None,
        budget: Budget | None = None,
        *,
        keep_samples: bool = False,
        floor: bool = True,
        keep_bytes: int = DEFAULT_CACHE_BYTES,
        repeat: bool = True,
    ) -> None:
        if not isinstance(backend, str):
            raise InvalidArgumentError(
                "The 'backend' of a Runner must be a registered name or a 'module:attr' path "
                f"(the worker imports it). Got {type(backend).__name__} instead."
            )
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidArgumentError(f"'budget' must be a Budget. Got {type(budget).__name__} instead.")
        self.backend_name = backend
        self.backend = get_backend(backend)
        self.config = resolve_config(self.backend, config)
        self.backend.check(self.config)
        self.budget = Budget() if budget is None else budget
        self.keep_samples = keep_samples
        #: Why the last :meth:`rounds` returned None (one line); None after rounds that ran.
        self.rounds_error: str | None = None
        if isinstance(keep_bytes, bool) or not isinstance(keep_bytes, int) or keep_bytes < 0:
            raise InvalidArgumentError(f"'keep_bytes' must be an int >= 0. Got {keep_bytes!r} instead.")
        self._calibrate = floor
        self._keep_bytes = keep_bytes
        self._floor: Measurement | None = None
        self._floor_at = 0.0
        self._worker: _Worker | None = None
        self._spare: _Worker | None = None
        self._reserve: _Worker | None = None  # a further spare, started while the spare is set up
        self._idle_spin_s = getattr(self.backend, "idle_spin_s", lambda config: 0.0)(self.config)
        self._queue = bool(getattr(self.backend, "takes_queue_times", lambda config: False)(self.config))
        self._repeat = bool(repeat)

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pid(self) -> int | None:
        """The process id of the current worker, or None when none is running."""
        return None if self._worker is None else self._worker.proc.pid

    def close(self, *, keep_spare: bool = False) -> None:
        """Stop the worker (a later measurement starts a new one), and the spare one started by
        :meth:`prestart` unless ``keep_spare`` (the next request then takes it)."""
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.close()
        if not keep_spare:
            for spare in (self._spare, self._reserve):
                if spare is not None:
                    spare.kill()
            self._spare = self._reserve = None

    def start(self) -> None:
        """Start the worker now (take the spare, or start a fresh one) unless one is running."""
        self._ensure_worker()

    def prestart(self) -> None:
        """Start a spare worker now, without waiting for it, so that it imports the runtime while the
        current worker measures: the request after the next :meth:`close` takes it ready (a worker's
        start, some 1-2 s of imports, is then off the critical path). Its start runs beside the current
        worker's timing on another core; the paired rounds are what should run then, since both of
        their sides meet it. Where the spare is set up for the next process (:meth:`prestart_rounds`),
        a reserve starts instead, which becomes the spare when the next request takes that one."""
        if self._spare is None:
            self._spare, self._reserve = self._reserve or self._new_worker(wait=False), None
        elif self._reserve is None and self._spare.has_ahead:  # the spare is set up for the next process
            self._reserve = self._new_worker(wait=False)

    def prestart_rounds(self, whole: Item, items: Sequence[Item], counts: Sequence[int], budget: RoundsBudget, *,
                        feeds: Sequence[Sequence[tuple[int, int] | None]] | None = None) -> None:
        """:meth:`prestart`, and where a run computes with one thread on a CPU of several cores, have
        the spare hold ``whole`` and prepare ``items`` for its rounds (as :meth:`measure_detailed`
        with ``hold`` and :meth:`rounds` would), on the core the current worker leaves free while it
        sets up too; :meth:`settle_spare` waits for it before the current worker times, and the
        requests after the next :meth:`close` take what it prepared. Nothing is sent ahead where the
        spare has requests pending."""
        self.prestart()
        spare = self._spare
        if spare is None or spare.has_ahead or not _prepares_beside(self.config):
            return
        spare.send_ahead(self._setup_requests(whole, items, counts, budget, feeds))

    def prepare_rounds(self, whole: Item, items: Sequence[Item], counts: Sequence[int], budget: RoundsBudget, *,
                       feeds: Sequence[Sequence[tuple[int, int] | None]] | None = None) -> None:
        """Have the current worker, which holds ``whole``, prepare ``items`` for its :meth:`rounds` now
        (unless it did so as the spare), and wait for it: its setup and the spare's
        (:meth:`prestart_rounds`) then run at the same time, and the rounds are timed alone."""
        worker = self._ensure_worker()
        if worker.ahead_for(whole.key) or not _prepares_beside(self.config):
            return
        worker.send_ahead(self._setup_requests(whole, items, counts, budget, feeds)[1:])
        try:
            with _MACHINE.held():
                worker.settle(self.budget.timeout + sum(1 for _ in items))
        except (WorkerTimeoutError, WorkerDiedError):
            self._replace_worker()

    def settle_spare(self) -> None:
        """Wait until the spare has done what :meth:`prestart_rounds` sent it (its answers are kept
        for the requests that take it), so that nothing sets up beside a worker's timing. A spare
        that died or did not answer in time is dropped: the next request starts a fresh worker."""
        if self._spare is None or not self._spare.has_ahead:
            return
        try:
            self._spare.settle(self.budget.timeout + STARTUP_TIMEOUT_S)
        except (BackendError, WorkerTimeoutError, WorkerDiedError):
            self.drop_spare()

    def _setup_requests(self, whole: Item, items: Sequence[Item], counts: Sequence[int], budget: RoundsBudget,
                        feeds: Sequence[Sequence[tuple[int, int] | None]] | None) -> list[tuple[str, str, Any]]:
        """The requests that set a worker up for ``whole``'s rounds: hold it, prepare its bricks."""
        hold = {"key": whole.key, "model": whole.load(), "backend": self.backend_name, "config": self.config,
                "budget": _HOLD_BUDGET, "keep_samples": self.keep_samples, "floor_s": self._floor_s(), "hold": True,
                "proof": True}
        bricks = {"whole": whole.key, "bricks": [item.load() for item in items], "counts": list(counts),
                  "backend": self.backend_name, "config": self.config, "budget": budget, "feeds": feeds}
        return [("measure", whole.key, ("measure", hold)), ("prepare", whole.key, ("prepare", bricks))]

    def spare_holds(self, key: str) -> bool:
        """Whether the spare worker was set up ahead to hold the model ``key``
        (:meth:`prestart_rounds`) and its answers are not taken yet."""
        return self._spare is not None and self._spare.ahead_for(key)

    def drop_spare(self) -> None:
        """Kill the spare worker, if any (one prepared ahead for rounds that will not run); the
        reserve, if any, becomes the spare."""
        if self._spare is not None:
            spare, self._spare, self._reserve = self._spare, self._reserve, None
            spare.kill()

    def _take_ahead(self, kind: str, key: str) -> tuple[float, Any] | None:
        """What the current worker did ahead as ``(kind, key)``: ``(seconds, result)``, or None where
        it did not, or failed (the caller then asks again)."""
        worker = self._ensure_worker()
        try:
            reply = worker.take_ahead(kind, key, self.budget.timeout)
        except (WorkerTimeoutError, WorkerDiedError):
            self._replace_worker()
            return None
        if reply is None or reply[0] != "ok":
            return None
        return reply[1]

    def floor(self) -> Measurement:
        """The floor measurement of this configuration: calibrated before the first item, again
        every :data:`FLOOR_REFRESH_S` seconds, the one whose one-node model ran fastest kept.

        The floor is a constant cost per call that the machine's noise only adds to, and every
        brick's estimate subtracts it: one calibration in a noisy moment (17.6 us against 7.1 us
        for MXNet in one run of the main job) lowered every estimate of that run by the difference
        times the model's layers (-11% on MobileNet-1.0).
        """
        if self._floor is None or (self._floor.ok and time.monotonic() - self._floor_at > FLOOR_REFRESH_S):
            payload = {"backend": self.backend_name, "config": self.config, "budget": self.budget}
            floor, _ = self._request(FLOOR_KEY, "floor", payload)
            self._floor_at = time.monotonic()
            if self._floor is None or (floor.ok and (floor.median_s or 0.0) < (self._floor.median_s or 0.0)):
                self._floor = floor
            if not self._floor.ok:
                warnings.warn(
                    f"Floor calibration failed ({self._floor.error}); measurements get floor_s=None.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self._floor

    def measure(self, item: Any, *, budget: Budget | None = None) -> Measurement:
        """Measure one item (model, bytes or Benchmarkable) in the worker, under ``budget`` (default
        the runner's)."""
        return self.measure_detailed(item, budget=budget)[0]

    def hold(self, item: Any) -> Measurement:
        """Measure one item and keep it prepared in the worker, to time it :meth:`again` later.

        Paired designs use it: a whole model held in one worker and sampled again now and then while
        its bricks are measured in another meets the same moments of a drifting machine. The held
        model is lost if the worker dies (``again`` then returns a failed measurement).
        """
        return self.measure_detailed(item, hold=True)[0]

    def again(self, key: str, budget: Budget | None = None) -> Measurement:
        """Time the item held under ``key`` again, under ``budget`` (default the runner's)."""
        floor_s = self._floor_s()
        payload = {"key": key, "budget": budget or self.budget, "floor_s": floor_s,
                   "keep_samples": self.keep_samples}
        return self._with_node_cost(self._request(key, "again", payload, floor_s=floor_s)[0])

    def rounds(self, whole_key: str, items: Sequence[Any], counts: Sequence[int],
               budget: RoundsBudget | None = None, *, seed: int | None = None,
               feeds: Sequence[Sequence[tuple[int, int] | None]] | None = None,
               schedule: Sequence[int] | None = None, sweep_bytes: int = 0) -> PairedRounds | None:
        """Time the model held under ``whole_key`` (see :meth:`hold`) and ``items`` (its bricks, in
        the model's order, with ``counts`` their occurrences) in interleaved rounds in the worker
        (:func:`~dlbricks.generators.rounds.time_rounds`), and summarize each into a measurement
        over the same rounds. Bricks the worker keeps prepared are timed on their sessions; the
        others are prepared first. A brick that cannot be prepared is left out of the result.
        ``feeds`` says where each brick's inputs come from in the model, for chained rounds
        (:meth:`~dlbricks.Decomposition.feeds`), and ``schedule`` the positions of ``items`` that a
        chained round calls, in order (:meth:`~dlbricks.Decomposition.schedule`; default each once),
        and ``sweep_bytes`` what a chained round reads between the chain's warm pass and its timed
        one (:meth:`~dlbricks.Decomposition.deduplicated_weight_bytes`; :func:`~dlbricks.generators.rounds.sweeper`).
        Returns None where the rounds failed (the worker died or timed out, or no whole model is
        held): the caller keeps what it had."""
        budget = budget or RoundsBudget()
        self.rounds_error = None
        resolved = [item if isinstance(item, Item) else resolve_item(item) for item in items]
        try:
            models = [r.load() for r in resolved]
        except Exception as e:  # a brick that cannot materialize: no rounds, the stored figures stand
            self.rounds_error = f"a brick cannot be loaded: {one_line(e)}"
            return None
        floor_s = self._floor_s()
        node_s = None if self._floor is None else self._floor.node_s
        _LAST_REPLY.settle(id(self))
        ahead = self._take_ahead("prepare", whole_key) is not None  # its bricks prepared while it was the spare
        worker = self._ensure_worker()
        payload = {"whole": whole_key, "bricks": None if ahead else models, "ahead": ahead, "counts": list(counts),
                   "backend": self.backend_name, "config": self.config, "budget": budget, "seed": seed,
                   "feeds": feeds, "schedule": None if schedule is None else list(schedule),
                   "sweep_bytes": int(sweep_bytes)}
        # preparing what the worker does not keep, then the rounds: at most the budget's time twice over
        timeout = self.budget.timeout + 2 * budget.max_time + sum(1 for _ in models)
        try:
            status, reply = worker.request(("rounds", payload), timeout)
        except (WorkerTimeoutError, WorkerDiedError) as e:
            self._replace_worker()
            self.rounds_error = f"the worker {'timed out' if isinstance(e, WorkerTimeoutError) else 'died'}"
            return None
        _LAST_REPLY.replied(id(self), self._idle_spin_s)
        if status != "ok":
            self.rounds_error = str(reply)
            return None
        timed, included, prepare_s = reply
        timed = dataclasses.replace(timed, prepare_s=prepare_s)
        keys = [resolved[i].key for i in included]
        return rounds_measurements(timed, whole_key, keys, [counts[i] for i in included], self.backend.name,
                                   self.config, floor_s=floor_s, node_s=node_s, keep_samples=self.keep_samples)

    def _with_node_cost(self, measurement: Measurement) -> Measurement:
        """``measurement`` with the floor's cost of one further node (``node_s``), where the floor
        has one."""
        if not measurement.ok or self._floor is None or self._floor.node_s is None:
            return measurement
        return dataclasses.replace(measurement, node_s=self._floor.node_s)

    def release(self, key: str) -> None:
        """Close the item held under ``key`` (nothing if the worker holds none)."""
        if self._worker is None:
            return
        try:
            self._worker.request(("release", {"key": key}), self.budget.timeout)
        except (WorkerTimeoutError, WorkerDiedError):
            self._replace_worker()

    def measure_detailed(self, item: Any, *, hold: bool = False, budget: Budget | None = None,
                         proof: bool = False) -> tuple[Measurement, Timing | None]:
        """Measure one item under ``budget`` (default the runner's); also return the harness
        :class:`Timing` (None if it failed), whose ``prepare_s``, ``warmup_s`` and ``sampling_s``
        against the measurement's ``wall_time_s`` tell setup from timed runs. With ``hold`` and
        ``proof``, the item is prepared (which runs it once) and held, and nothing is timed: its
        measurement says only that it runs (:func:`~dlbricks.generators.harness.proof_measurement`)."""
        resolved = item if isinstance(item, Item) else resolve_item(item)
        floor_s = self._floor_s()
        self._ensure_worker()
        if hold:
            ahead = self._take_ahead("measure", resolved.key)
            if ahead is not None:  # held by this worker while it was the spare
                seconds, (measurement, timing) = ahead
                return self._with_node_cost(dataclasses.replace(measurement, wall_time_s=seconds)), timing
        start = time.perf_counter()
        try:
            model = resolved.load()
        except Exception as e:  # a brick that cannot materialize is a failed item
            return self._failure(resolved.key, "failed", one_line(e), start, floor_s), None
        queue = self._queue and not hold
        payload = {
            "key": resolved.key,
            "model": model,
            "backend": self.backend_name,
            "config": self.config,
            "budget": budget or self.budget,
            "keep_samples": self.keep_samples,
            "floor_s": floor_s,
            "hold": hold or queue,
            "proof": hold and proof,
        }
        measurement, timing = self._request(resolved.key, "measure", payload, start=start, floor_s=floor_s)
        measurement = self._with_node_cost(measurement)
        if queue:
            measurement = self._with_queue_times(resolved.key, measurement)
        return measurement, timing

    def _with_queue_times(self, key: str, measurement: Measurement) -> Measurement:
        """``measurement`` with the launch-queue times of the item held under ``key`` (the backend's
        ``takes_queue_times``: CUDA), taken in a request of their own and the item then released.
        Their runs leave the device unsynchronized: a worker that dies of them costs those times
        only, never the measurement."""
        if not measurement.ok or self._worker is None:
            self.release(key)
            return measurement
        try:
            status, sample = self._worker.request(("queue", {"key": key, "repeat": self._repeat}),
                                                  self.budget.timeout)
        except (WorkerTimeoutError, WorkerDiedError):
            self._replace_worker()
            return measurement
        self.release(key)
        if status != "ok" or sample is None:
            return measurement
        return dataclasses.replace(measurement, host_s=sample.host_s, device_s=sample.device_s,
                                   device_warm_s=sample.device_warm_s, repeat_s=getattr(sample, "repeat_s", None))

    def _floor_s(self) -> float | None:
        """The floor (extrapolated to no node), calibrating it first if asked to; None if it failed."""
        if not self._calibrate:
            return None
        return self.floor().floor_s

    def _ensure_worker(self) -> _Worker:
        """The running worker, started if there is none."""
        if self._worker is None:
            spare, self._spare, self._reserve = self._spare, self._reserve, None
            if spare is not None:
                with contextlib.suppress(BackendError):  # a spare that died: a fresh worker says why
                    self._worker = spare.ready()
            if self._worker is None:
                self._worker = self._new_worker(wait=True)
        return self._worker

    def _new_worker(self, *, wait: bool) -> _Worker:
        env = dict(os.environ)
        env.update(self.backend.worker_env(self.config))
        return _Worker(env, self._keep_bytes, wait=wait)

    def _request(
        self,
        key: str,
        kind: str,
        payload: dict[str, Any],
        *,
        start: float | None = None,
        floor_s: float | None = None,
    ) -> tuple[Measurement, Timing | None]:
        """Send a measure/floor request; map crashes, timeouts and errors to measurements."""
        worker = self._ensure_worker()
        _LAST_REPLY.settle(id(self))
        start = time.perf_counter() if start is None else start
        timeout = self.budget.timeout
        waited = _MACHINE.waited_s
        try:
            status, reply = worker.request((kind, payload), timeout)
        except WorkerTimeoutError:
            self._replace_worker()
            return self._failure(key, "timeout", f"timed out after {timeout:g} s", start, floor_s), None
        except WorkerDiedError:
            reason = worker.death_reason()
            self._replace_worker()
            return self._failure(key, "failed", reason, start, floor_s), None
        _LAST_REPLY.replied(id(self), self._idle_spin_s)
        if status != "ok":
            return self._failure(key, "failed", str(reply), start, floor_s), None
        measurement, timing = reply
        wall = time.perf_counter() - start - (_MACHINE.waited_s - waited)  # not the wait for another process
        return dataclasses.replace(measurement, wall_time_s=wall), timing

    def _replace_worker(self) -> None:
        """Kill the current worker; the next request starts a fresh one."""
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.kill()

    def _failure(self, key: str, status: str, error: str, start: float, floor_s: float | None) -> Measurement:
        """A failed or timed-out measurement of ``key``."""
        return failed_measurement(
            key,
            status,
            error,
            wall_time_s=time.perf_counter() - start,
            backend=self.backend.name,
            config=self.config,
            floor_s=floor_s,
        )


def _processes_agree(parts: Sequence[PairedRounds], rel_ci: float) -> bool:
    """Whether the mean of ``parts``' ratios (bricks' sum over whole model, one per worker process)
    is known to ``rel_ci`` (twice its standard error, relative)."""
    ratios = np.array([p.ratio()[0] for p in parts])
    if len(ratios) < 2 or not np.all(np.isfinite(ratios)) or ratios.mean() <= 0:
        return True
    return bool(2 * ratios.std(ddof=1) / math.sqrt(len(ratios)) <= rel_ci * ratios.mean())


def rounds_in_processes(runner: Runner, whole: Any, items: Sequence[Any], counts: Sequence[int],
                        rounds: RoundsBudget | None = None, *, processes: int = ROUND_PROCESSES,
                        max_processes: int = MAX_ROUND_PROCESSES, rel_ci: float = PROCESS_REL_CI,
                        seed: int | None = None,
                        feeds: Sequence[Sequence[tuple[int, int] | None]] | None = None,
                        schedule: Sequence[int] | None = None, sweep_bytes: int = 0) -> PairedRounds | None:
    """Time ``whole`` (a model) and ``items`` (its bricks, in the model's order, with ``counts`` their
    occurrences) in interleaved rounds (:meth:`Runner.rounds`, ``rounds`` its budget in each
    process) in worker processes of ``runner``, one after another: its current worker (as the
    caller left it), then a fresh one for each further set (the runner's worker is replaced; its
    floor is kept); the rounds of all of them as one set
    (:func:`~dlbricks.generators.rounds.merge_paired`).

    A worker can run a layer 5-15% faster or slower than another, for as long as it lives, and its
    whole model by a different amount: wav2letter's 71 ms convolution ran at 70.0 ms in one
    long-lived worker and at 81.8 ms in another, at 72-74 ms in fresh ones; lstm_lm_medium's LSTM at
    3.22-3.47 ms in six fresh ones. So ``processes`` workers at least, and further ones, up to
    ``max_processes``, while the mean of their ratios is not known to ``rel_ci`` (pyperf spreads its
    runs over processes for the same reason). ``feeds``, ``schedule``, ``sweep_bytes``: see :meth:`Runner.rounds`.

    On a CPU with a core to spare and runs of one thread, the worker that the next of the first
    ``processes`` takes holds ``whole`` and prepares its bricks while the current one does the same
    (:meth:`Runner.prestart_rounds`, :meth:`Runner.prepare_rounds`), and the current one's rounds
    wait for both (:meth:`Runner.settle_spare`): setting up beside a worker's timing moved the
    estimates of the largest models by 1-3 points. Returns None where no process finished its rounds (why: ``runner.rounds_error``)."""
    for name, value in (("processes", processes), ("max_processes", max_processes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"'{name}' must be an int >= 1. Got {value!r} instead.")
    resolved = [item if isinstance(item, Item) else resolve_item(item, i) for i, item in enumerate([whole, *items])]
    runner.rounds_error = None
    try:  # serialized once for every process
        whole_item, *brick_items = [_loaded(item) for item in resolved]
    except Exception as e:  # a model that cannot materialize: no rounds, the stored figures stand
        runner.rounds_error = f"a model cannot be loaded: {one_line(e)}"
        return None
    parts: list[PairedRounds] = []
    budget = rounds or RoundsBudget()
    for p in range(max(processes, max_processes)):
        if p >= processes and (not parts or _processes_agree(parts, rel_ci)):
            break
        if p:
            runner.close(keep_spare=True)  # the next request starts a fresh worker, or takes the spare
        runner.start()
        if p + 1 < processes:  # the next process sets up while this one does
            runner.prestart_rounds(whole_item, brick_items, counts, budget, feeds=feeds)
        held = runner.measure_detailed(whole_item, hold=True, budget=_HOLD_BUDGET, proof=True)[0]
        if not held.ok:
            runner.rounds_error = f"the whole model failed: {held.error}"
            continue
        runner.prepare_rounds(whole_item, brick_items, counts, budget, feeds=feeds)
        runner.settle_spare()  # nothing sets up while this one times
        runner.prestart()  # a further worker imports meanwhile: the next to set up, or the next model's
        part = runner.rounds(held.key, brick_items, counts, rounds, seed=None if seed is None else seed * 97 + p,
                             feeds=feeds, schedule=schedule, sweep_bytes=sweep_bytes)
        runner.release(held.key)
        if part is not None:
            parts.append(dataclasses.replace(part, rounds=dataclasses.replace(part.rounds,
                                                                              hold_s=held.wall_time_s or 0.0)))
    if runner.spare_holds(whole_item.key):  # set up for a process that did not run
        runner.drop_spare()
    return merge_paired(parts) if parts else None


def _prepares_beside(config: Any) -> bool:
    """Whether a spare worker may set up beside the current worker's setup under ``config``: runs of
    one thread on a CPU, with another core to spare."""
    return (getattr(config, "device", "cpu") == "cpu" and getattr(config, "threads", 1) == 1
            and len(os.sched_getaffinity(0)) > 1)


def _loaded(item: Item) -> Item:
    """``item`` with its model serialized now and kept: an item that a model's rounds send to every
    process."""
    data = item.load()
    return Item(item.key, lambda: data)
