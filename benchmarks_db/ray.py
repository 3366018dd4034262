"""Fill a database from a Ray cluster: one measuring actor per node, this process the only writer.

:class:`RayExecutor` is the ``executor`` of :func:`~dlbricks.benchmarks_db.populate` (``dlbricks bench
--executor ray``). It starts one actor on every node of the cluster that has a CPU, pinned to it
(``NodeAffinitySchedulingStrategy``) and holding all of its CPUs, so that Ray schedules nothing else
there and the node measures one item at a time. Each actor collects its node's
:class:`~dlbricks.generators.system.SystemInfo` on the node and checks that the node can run the backend
configurations (the same onnxruntime version as this process); a node that cannot is refused with
one line naming it. The actor measures with the same :class:`~dlbricks.generators.runner.Runner` (worker
subprocess, harness) as a local run.

This process keeps the queue: it claims an item for the node's system just before sending it,
records each reply as it arrives (one transaction, the claim dropped with it), and reports progress.
An actor or node that dies mid-item gives that item back: its claim is dropped and the item goes to
another node (the node's actor is started again if the node lives). A killed driver leaves claims
of a dead process, which the next run takes over: running the same command again resumes.

Ray is imported only when :meth:`RayExecutor.run` is called (``pip install 'dlbricks[distributed]'``).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbricks import DlbricksError, InvalidArgumentError
from dlbricks.errors import BackendUnavailableError
from dlbricks.generators import collect_system_info, get_backend
from dlbricks.generators.runner import Runner

from .jobs import BenchJob, BenchProgress, BenchReport, _Costs, _Task, brick_overhead
from .records import ClaimStatus, RecordOutcome

__all__ = ["RayExecutor", "NodeReport", "NodeRun", "LABEL_ENV", "import_ray"]

#: A node's environment variable (set before ``ray start``) that labels its system in the database.
LABEL_ENV = "DLBRICKS_SYSTEM_ID"
#: Seconds a node's actor may take to start and describe its node before the node is refused.
READY_TIMEOUT_S = 120.0
#: Times an item is sent out again after the actor measuring it died, before it is left unmeasured.
MAX_ATTEMPTS = 3
#: Seconds between two looks at ``should_stop`` while items are in flight.
POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What a node's actor says about its node: Ray's node id, its address, its system (collected
    on the node), its label (:data:`LABEL_ENV`), and why it cannot measure (None when it can)."""

    node_id: str
    address: str
    system: Any
    label: str | None
    problem: str | None

    @property
    def name(self) -> str:
        """The node as log lines name it: its address and the start of its id."""
        return f"{self.address} ({self.node_id[:8]})"


@dataclass(frozen=True, slots=True)
class NodeRun:
    """One item sent to a node: ``submitted`` and ``received`` by this process, ``started`` and
    ``ended`` on the node (``time.monotonic()`` of each machine, so compare them within one machine
    only); ``status`` is the measurement's, or
    ``"lost"`` when the node's actor died with it."""

    node_id: str
    system: str
    kind: str
    key: str
    status: str
    submitted: float
    started: float | None
    ended: float | None
    received: float

    @property
    def overhead_s(self) -> float | None:
        """Seconds of the round trip not spent measuring on the node (Ray's cost of the item)."""
        if self.started is None or self.ended is None:
            return None
        return (self.received - self.submitted) - (self.ended - self.started)


@dataclass(frozen=True, slots=True)
class _Reply:
    measurement: Any
    timing: Any
    overhead_s: float | None
    started: float
    ended: float


class _NodeMeasurer:
    """The actor on one node: describes the node and measures items there, one at a time."""

    def __init__(self, backend: str, configs: Sequence[Any], budget: Any, keep_samples: bool) -> None:
        self.backend_name = backend
        self.configs = list(configs)
        self.budget = budget
        self.keep_samples = keep_samples
        self.runners: dict[int, Any] = {}

    def describe(self) -> NodeReport:
        """This node's id, address, system and label, and what keeps it from measuring, if anything."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        address = ray.util.get_node_ip_address()
        label = os.environ.get(LABEL_ENV, "").strip() or None
        try:
            system = collect_system_info()
            backend = get_backend(self.backend_name)
            for config in self.configs:
                backend.check(config)
        except Exception as e:  # noqa: BLE001 - any reason a node cannot measure refuses it, with that reason
            return NodeReport(node_id, address, None, label, _one_line(e))
        return NodeReport(node_id, address, system, label, None)

    def measure(self, index: int, kind: str, item: Any) -> _Reply:
        """Measure ``item`` (a brick or a whole model) under configuration ``index``, as a local run does."""
        started = time.monotonic()
        runner = self._runner(index)
        overhead = None
        if kind == "brick":
            m, timing = runner.measure_detailed(item)
            overhead = brick_overhead(runner.backend, item, runner.config, m)
        else:
            m, timing = runner.measure(item), None
        return _Reply(m, timing, overhead, started, time.monotonic())

    def calibrate_reorders(self, index: int) -> Any:
        """The backend's price of a layout reorder under configuration ``index`` on this node, or None."""
        calibrate = getattr(get_backend(self.backend_name), "calibrate_reorders", None)
        return None if calibrate is None else calibrate(self.configs[index])

    def close(self) -> None:
        """Stop the node's worker subprocesses."""
        for runner in self.runners.values():
            runner.close()
        self.runners.clear()

    def _runner(self, index: int) -> Any:
        runner = self.runners.get(index)
        if runner is None:
            runner = self.runners[index] = Runner(self.backend_name, self.configs[index], self.budget,
                                                  keep_samples=self.keep_samples)
        return runner


def _one_line(error: BaseException) -> str:
    """``"Type: first line of the message"``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def import_ray() -> Any:
    """The ray module; :class:`BackendUnavailableError` saying how to install it when it is missing."""
    try:
        import ray
    except ImportError as e:
        raise BackendUnavailableError("The Ray executor needs ray: pip install 'dlbricks[distributed]' "
                                      f"(import ray failed: {e}).") from e
    return ray


@dataclass(slots=True)
class _Node:
    """A node that measures, as the driver tracks it."""

    report: NodeReport
    system: str
    actor: Any
    busy: bool = False


@dataclass(slots=True)
class _Pending:
    """An item waiting for a node: ``system`` set when it must be measured on that kind of node
    (``each_node``); ``avoid`` holds the nodes whose actor died measuring it."""

    task: _Task
    system: str | None
    attempts: int = 0
    avoid: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Flight:
    pending: _Pending
    node: _Node
    submitted: float


class RayExecutor:
    """Measure on the nodes of a Ray cluster, one item at a time per node, each node under its own system.

    Parameters
    ----------
    address : str, optional
        The cluster to connect to, as ``ray.init(address=...)`` takes it (``"auto"``, ``"ray://host:10001"``,
        ``"host:6379"``); default: Ray's own choice (``RAY_ADDRESS``, a cluster started on this machine
        with ``ray start``, else a new single-node one). Ignored when ray is already initialized.
    each_node : bool, default False
        Measure every item on every distinct kind of node (a fleet of targets); by default an item is
        measured once, on whichever node is free, and counts as measured on any of the nodes' systems.
    log : callable, optional
        Called with one line for each node refused or lost, and each item given up; default
        ``warnings.warn``.

    Attributes
    ----------
    nodes_ : tuple of NodeReport
        After :meth:`run`: every node found, refused ones with their ``problem``.
    runs_ : tuple of NodeRun
        After :meth:`run`: every item sent to a node, in the order the replies came.

    Notes
    -----
    A node's system is the fingerprint of :func:`~dlbricks.generators.collect_system_info` run on the
    node (identical machines share it), or the value of ``DLBRICKS_SYSTEM_ID`` in the node's
    environment. Every node needs dlbricks and the same onnxruntime version as this process.
    """

    def __init__(self, *, address: str | None = None, each_node: bool = False,
                 log: Callable[[str], object] | None = None) -> None:
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise InvalidArgumentError(f"'address' must be a non-empty str or None. Got {address!r} instead.")
        self.address = address
        self.each_node = bool(each_node)
        self.log = log or (lambda line: warnings.warn(line, RuntimeWarning, stacklevel=3))
        self.nodes_: tuple[NodeReport, ...] = ()
        self.runs_: tuple[NodeRun, ...] = ()

    def run(self, job: BenchJob) -> BenchReport:
        """Measure ``job``'s items on the cluster; record each as it arrives; report what was done."""
        ray = import_ray()
        started_ray = _connect(ray, self.address)
        nodes: list[_Node] = []
        try:
            nodes = self._start_nodes(ray, job)
            if job.reorders:
                _price_reorders(ray, job, nodes)
            return _Loop(ray, job, nodes, self.each_node, self.log, self).run()
        finally:
            _stop_nodes(ray, nodes)
            job.store.claims.release_all()
            if started_ray:
                ray.shutdown()

    def _start_nodes(self, ray: Any, job: BenchJob) -> list[_Node]:
        """An actor on every live node with a CPU; the nodes that cannot measure refused (logged)."""
        candidates = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
        actors = [_spawn(ray, job, n["NodeID"], int(n["Resources"]["CPU"])) for n in candidates]
        reports = _describe(ray, actors, [n["NodeID"] for n in candidates],
                            [n.get("NodeManagerAddress", "?") for n in candidates])
        self.nodes_ = tuple(reports)
        nodes, refused = [], []
        for actor, report in zip(actors, reports, strict=True):
            if report.problem is None:
                system = job.store.systems.record(report.system, fingerprint=report.label).fingerprint
                nodes.append(_Node(report, system, actor))
            else:
                refused.append(f"Ray node {report.name} refused: {report.problem}")
                self.log(refused[-1])
                ray.kill(actor)
        if not nodes:
            why = "; ".join(refused) or "the cluster has no live node with a CPU"
            raise BackendUnavailableError(f"No node of the Ray cluster can measure: {why}.")
        return nodes


def _connect(ray: Any, address: str | None) -> bool:
    """Connect to the cluster unless ray is initialized already; True if this call connected."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise BackendUnavailableError(f"Cannot connect to the Ray cluster at {address or '(default)'}: "
                                      f"{_one_line(e)}") from e
    return True


def _spawn(ray: Any, job: BenchJob, node_id: str, cpus: int) -> Any:
    """A measuring actor pinned to ``node_id``, holding its ``cpus`` so that Ray runs nothing beside it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_class = ray.remote(_NodeMeasurer)
    return actor_class.options(
        num_cpus=cpus, max_restarts=0, max_concurrency=1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(job.backend, job.configs, job.budget, job.keep_samples)


def _describe(ray: Any, actors: Sequence[Any], node_ids: Sequence[str], addresses: Sequence[str]) -> list[NodeReport]:
    """Each actor's :class:`NodeReport`; an actor that fails to start or answer in time refuses its node."""
    refs = [a.describe.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=READY_TIMEOUT_S) if refs else ([], [])
    reports = []
    for ref, node_id, address in zip(refs, node_ids, addresses, strict=True):
        if ref not in ready:
            reports.append(NodeReport(node_id, address, None, None,
                                      f"its dlbricks actor did not start within {READY_TIMEOUT_S:g} s "
                                      f"(are its CPUs held by other Ray work?)"))
            continue
        try:
            reports.append(ray.get(ref))
        except ray.exceptions.RayError as e:
            reports.append(NodeReport(node_id, address, None, None,
                                      f"its dlbricks actor failed to start: {_ray_reason(e)}"))
    return reports


def _ray_reason(error: BaseException) -> str:
    """The first line of a Ray error that says what went wrong (the cause, when Ray wraps one)."""
    cause = getattr(error, "cause", None)
    return _one_line(cause if isinstance(cause, BaseException) else error)


def _price_reorders(ray: Any, job: BenchJob, nodes: Sequence[_Node]) -> None:
    """Calibrate the price of a layout reorder on one node of each system that has none yet."""
    for system, node in {n.system: n for n in nodes}.items():
        for i, cfg in enumerate(job.configs):
            if job.store.systems.reorder_price(system, cfg.config_id) is None:
                price = ray.get(node.actor.calibrate_reorders.remote(i))
                if price is not None:
                    job.store.systems.record_reorder_price(system, cfg.config_id, *price)


def _stop_nodes(ray: Any, nodes: Sequence[_Node]) -> None:
    """Close every actor's workers, then end the actors."""
    refs = []
    for node in nodes:
        try:
            refs.append(node.actor.close.remote())
        except ray.exceptions.RayError:
            pass
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=10)
    for node in nodes:
        ray.kill(node.actor)


class _Loop:
    """The driver's loop: send items to free nodes, record replies as they arrive, resend lost items."""

    def __init__(self, ray: Any, job: BenchJob, nodes: list[_Node], each_node: bool,
                 log: Callable[[str], object], executor: RayExecutor) -> None:
        self.ray, self.job, self.nodes, self.log, self.executor = ray, job, nodes, log, executor
        systems = sorted({n.system for n in nodes})
        self.systems = systems
        self.queue: list[_Pending] = []
        for cfg in job.configs:
            if each_node:
                self.queue += [_Pending(t, s) for s in systems for t in job.tasks([s], cfg)]
            else:
                self.queue += [_Pending(t, None) for t in job.tasks(systems, cfg)]
        self.total = len(self.queue)
        self.flights: dict[Any, _Flight] = {}
        self.runs: list[NodeRun] = []
        self.counts = {"measured": 0, "failed": 0, "already": 0, "held": 0, "duplicates": 0, "retried": 0,
                       "lost": 0}
        self.costs = _Costs()
        self.done = 0
        self.used: set[str] = set()

    def run(self) -> BenchReport:
        interrupted = False
        try:
            while self.queue or self.flights:
                if self.job.stopping():
                    interrupted = True
                    self.queue.clear()
                else:
                    self._dispatch()
                if not self.flights:
                    if self.queue:  # no node can take what is left
                        self._give_up_unplaceable()
                    continue
                ready, _ = self.ray.wait(list(self.flights), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    self._receive(ref)
        finally:
            self.executor.runs_ = tuple(self.runs)
        c = self.counts
        return BenchReport(", ".join(self.systems), tuple(cfg.config_id for cfg in self.job.configs),
                           len(self.job.bricks), self.total, c["measured"], c["failed"], c["already"], c["held"],
                           c["duplicates"], interrupted, time.monotonic() - self.job.started, 0,
                           self.costs.wall_s, self.costs.setup_s, self.costs.timed_s,
                           systems=tuple(self.systems), nodes=len(self.used), retried=c["retried"], lost=c["lost"])

    # ------------------------------------------------------------------------------ sending
    def _dispatch(self) -> None:
        """Send the next item each free node can take (claimed for its system first)."""
        for node in self.nodes:
            while not node.busy:
                pending = self._next_for(node)
                if pending is None:
                    break
                state = self.job.claim(pending.task, node.system)
                if state is not ClaimStatus.CLAIMED:
                    self.counts["already" if state is ClaimStatus.MEASURED else "held"] += 1
                    self._progress(pending.task, state.value, None, state, None)
                    continue
                index = self.job.configs.index(pending.task.config)
                submitted = time.monotonic()  # before the call: the node may start before it returns
                ref = node.actor.measure.remote(index, pending.task.kind, pending.task.item)
                self.flights[ref] = _Flight(pending, node, submitted)
                node.busy = True

    def _next_for(self, node: _Node) -> _Pending | None:
        """The first queued item that ``node`` may take: of its system (when one is asked), and not
        one whose actor died on this node while another node could take it."""
        for i, pending in enumerate(self.queue):
            if pending.system not in (None, node.system):
                continue
            if node.report.node_id in pending.avoid and self._others_can_take(pending, node):
                continue
            return self.queue.pop(i)
        return None

    def _others_can_take(self, pending: _Pending, node: _Node) -> bool:
        return any(n is not node and n.report.node_id not in pending.avoid
                   and pending.system in (None, n.system) for n in self.nodes)

    def _give_up_unplaceable(self) -> None:
        """Leave unmeasured the queued items that no live node can take (their kind of node is gone)."""
        for pending in self.queue:
            self.counts["lost"] += 1
            self.log(f"{pending.task.kind} {pending.task.key[:12]} ({pending.task.label}) left unmeasured: no live "
                     f"node of system {pending.system} is left; run again to measure it.")
            self._progress(pending.task, "lost", None, RecordOutcome.KEPT, None)
        self.queue.clear()

    # ------------------------------------------------------------------------------ receiving
    def _receive(self, ref: Any) -> None:
        flight = self.flights.pop(ref)
        node, task = flight.node, flight.pending.task
        node.busy = False
        try:
            reply: _Reply = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:  # the actor raised: a bug or an unusable backend
            self.job.release(task, node.system)
            cause = e.as_instanceof_cause()
            if isinstance(cause, DlbricksError):
                raise cause from None
            raise
        except self.ray.exceptions.RayError as e:  # the actor or its node died mid-item
            self._lost(flight, e)
            return
        m = reply.measurement
        outcome = self.job.record(task, m, node.system, reply.overhead_s)
        self.costs.add(m, reply.timing)
        self.counts["measured"] += 1
        self.counts["failed"] += not m.ok
        self.counts["duplicates"] += outcome is not RecordOutcome.INSERTED and not self.job.retry_failed
        self.used.add(node.report.node_id)
        self.runs.append(NodeRun(node.report.node_id, node.system, task.kind, task.key, m.status, flight.submitted,
                                 reply.started, reply.ended, time.monotonic()))
        self._progress(task, m.status, m.median_s, outcome, node)

    def _lost(self, flight: _Flight, error: BaseException) -> None:
        """The actor measuring ``flight`` died: drop the claim, resend the item, restart or drop the node."""
        pending, node = flight.pending, flight.node
        self.job.release(pending.task, node.system)
        self.runs.append(NodeRun(node.report.node_id, node.system, pending.task.kind, pending.task.key, "lost",
                                 flight.submitted, None, None, time.monotonic()))
        pending.attempts += 1
        pending.avoid.add(node.report.node_id)
        alive = self._restart(node)
        where = "restarted" if alive else "gone; dropped from this run"
        if pending.attempts >= MAX_ATTEMPTS:
            self.counts["lost"] += 1
            self.log(f"Ray node {node.report.name} lost {pending.task.kind} {pending.task.key[:12]} "
                     f"({_ray_reason(error)}); node {where}. Lost {pending.attempts} times: left unmeasured; "
                     f"run again to measure it.")
            self._progress(pending.task, "lost", None, RecordOutcome.KEPT, node)
            return
        self.counts["retried"] += 1
        self.log(f"Ray node {node.report.name} lost {pending.task.kind} {pending.task.key[:12]} "
                 f"({_ray_reason(error)}); node {where}; measuring it again on another node.")
        self.queue.insert(0, pending)

    def _restart(self, node: _Node) -> bool:
        """Start a new actor on ``node`` if it is alive and still describes itself the same; else drop it."""
        alive = {n["NodeID"]: n for n in self.ray.nodes() if n.get("Alive")}
        info = alive.get(node.report.node_id)
        if info is not None:
            actor = _spawn(self.ray, self.job, node.report.node_id, int(info["Resources"].get("CPU", 1)))
            report = _describe(self.ray, [actor], [node.report.node_id], [node.report.address])[0]
            if report.problem is None:
                node.actor = actor
                return True
            self.ray.kill(actor)
        self.nodes.remove(node)
        if not self.nodes:
            raise BackendUnavailableError("Every node of the Ray cluster was lost; what was measured is saved: "
                                          "run the same command again to resume.")
        return False

    def _progress(self, task: _Task, status: str, median: float | None, outcome: RecordOutcome | ClaimStatus,
                  node: _Node | None) -> None:
        self.done += 1
        if self.job.progress is None:
            return
        elapsed = time.monotonic() - self.job.started
        measured = self.counts["measured"]
        eta = elapsed / measured * (self.total - self.done) if measured else None
        self.job.progress(BenchProgress(self.done, self.total, task.kind, task.key, task.label,
                                        task.config.config_id, status, median, outcome, elapsed, eta,
                                        None if node is None else node.report.name))
