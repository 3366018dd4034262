"""The launch queue of an accelerator: a host that issues kernels in order, a device that runs them.

On a GPU at batch 1 a model is often bound by its host: while one kernel runs, the host issues the
next, so that the model's latency is not the sum of each brick's launch and run, which a brick timed
alone pays one after the other. Given each brick's host time (what the issuing thread spends on it)
and device time (the kernel alone), :func:`queue_latency` simulates one host thread issuing the
occurrences in order into one in-order stream, each starting on the device when it has been issued
and the device is free; :func:`queue_critical_path` lets independent occurrences of the brick DAG
overlap on the device (as many streams as it takes), with the host still issuing one at a time.
The sequential sum is the special case of a host that waits for each kernel (``blocking=True``).
:func:`graph_latency` is the model captured in a CUDA graph: the host issues the whole graph once,
and the kernels run back to back.

Pure arithmetic over stored times: tested on the CPU with hand-built DAGs and given times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from dlbricks import InvalidArgumentError

__all__ = ["QueueTimes", "graph_latency", "queue_latency", "queue_critical_path"]


@dataclass(frozen=True, slots=True)
class QueueTimes:
    """Seconds one occurrence costs the host that issues it and the device that runs it."""

    host_s: float
    device_s: float
    blocking: bool = False  # the host waits for the device before issuing it (it reads a result)

    def __post_init__(self) -> None:
        if not (self.host_s >= 0 and self.device_s >= 0):
            raise InvalidArgumentError(f"host and device times must be >= 0 seconds. Got {self.host_s!r} and "
                                       f"{self.device_s!r}.")


def queue_latency(times: Sequence[QueueTimes], *, blocking: bool = False) -> float:
    """Seconds from the first issue to the end of the last kernel, occurrences issued in order into
    one in-order stream: occurrence ``i`` is issued once the host has issued ``0..i-1`` (and, with
    ``blocking`` or where its own ``blocking`` is set, once their kernels ended: with ``blocking``
    the sequential sum of host and device times), and runs when it is issued and the device is
    free."""
    host = device = 0.0
    for t in times:
        host = (max(host, device) if blocking or t.blocking else host) + t.host_s
        device = max(host, device) + t.device_s
    return max(host, device)


def graph_latency(times: Sequence[QueueTimes]) -> float | None:
    """Seconds of the occurrences' kernels back to back, as a model captured in a CUDA graph runs
    them: one launch of the graph issues every kernel, so no host time stands between them (the
    replay's own cost, one per run, is the caller's). None where an occurrence's host waits for its
    kernels (``blocking``): a result read back by the host, or a brick with no device time, has no
    place in a captured graph."""
    if any(t.blocking for t in times):
        return None
    return float(sum(t.device_s for t in times))


def queue_critical_path(dag: nx.DiGraph, times: Mapping[int, QueueTimes], order: Sequence[int] | None = None) -> float:
    """Seconds to run ``dag`` (occurrence index -> its successors) when one host thread issues the
    occurrences in ``order`` (default: the smallest-index topological order) and each runs on the
    device as soon as it is issued and its predecessors ended, beside any other kernel (the device's
    streams are not the limit): the launch-queue counterpart of the critical path."""
    order = list(nx.lexicographical_topological_sort(dag)) if order is None else list(order)
    if set(order) != set(dag.nodes) or len(order) != len(dag):
        raise InvalidArgumentError("'order' must list every occurrence of the DAG once.")
    ended: dict[int, float] = {}
    host = 0.0
    for node in order:
        if any(p not in ended for p in dag.predecessors(node)):
            raise InvalidArgumentError(f"'order' issues occurrence {node} before one it depends on.")
        if times[node].blocking:
            host = max([host, *ended.values()])
        host += times[node].host_s
        start = max([host, *(ended[p] for p in dag.predecessors(node))])
        ended[node] = start + times[node].device_s
    return max([host, *ended.values()], default=0.0)
