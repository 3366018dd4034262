"""The launch-queue model: a host issuing bricks in order, a device running them (times given, no GPU)."""

from __future__ import annotations

import networkx as nx
import pytest

from dlbricks import InvalidArgumentError
from dlbricks.estimator.queue import QueueTimes, queue_critical_path, queue_latency

Q = QueueTimes


def test_host_bound_device_bound_and_mixed() -> None:
    host_bound = [Q(10e-6, 2e-6)] * 5  # the device waits for each launch
    assert queue_latency(host_bound) == pytest.approx(5 * 10e-6 + 2e-6)
    device_bound = [Q(1e-6, 50e-6)] * 4  # launches run ahead; the kernels queue
    assert queue_latency(device_bound) == pytest.approx(1e-6 + 4 * 50e-6)
    mixed = [Q(5e-6, 1e-6), Q(5e-6, 20e-6), Q(5e-6, 1e-6), Q(5e-6, 1e-6)]
    # issues end at 5, 10, 15, 20; kernels: 5-6, 10-30, 30-31, 31-32
    assert queue_latency(mixed) == pytest.approx(32e-6)


def test_a_blocking_host_is_the_sequential_sum() -> None:
    times = [Q(3e-6, 7e-6), Q(1e-6, 1e-6), Q(4e-6, 0.0)]
    assert queue_latency(times, blocking=True) == pytest.approx(sum(t.host_s + t.device_s for t in times))
    assert queue_latency(times) <= queue_latency(times, blocking=True)
    assert queue_latency([]) == 0.0


def test_branches_overlap_on_the_device_not_on_the_host() -> None:
    dag = nx.DiGraph([(0, 1), (0, 2), (1, 3), (2, 3)])  # a diamond
    times = {0: Q(1e-6, 10e-6), 1: Q(1e-6, 30e-6), 2: Q(1e-6, 30e-6), 3: Q(1e-6, 5e-6)}
    # 0 runs 1-11; 1 and 2 issued at 2 and 3, both start at 11, end 41; 3 issued at 4, runs 41-46
    assert queue_critical_path(dag, times) == pytest.approx(46e-6)
    in_order = queue_latency([times[i] for i in range(4)])
    assert queue_critical_path(dag, times) <= in_order == pytest.approx(76e-6)
    host_only = {i: Q(10e-6, 0.0) for i in range(4)}
    assert queue_critical_path(dag, host_only) == pytest.approx(40e-6)  # the host issues one at a time


def test_bounds_keep_their_order_under_the_same_rule() -> None:
    """Faster kernels (the lower bound) and kernels at the roofline never make the queue longer."""
    dag = nx.path_graph(6, create_using=nx.DiGraph)
    measured = {i: Q(4e-6, (i + 1) * 3e-6) for i in dag}
    fastest = {i: Q(t.host_s, 0.8 * t.device_s) for i, t in measured.items()}
    roofline = {i: Q(0.0, 0.5 * t.device_s) for i, t in measured.items()}
    values = [queue_critical_path(dag, t) for t in (roofline, fastest, measured)]
    assert values == sorted(values)


def test_bad_orders_and_times_are_refused() -> None:
    dag = nx.DiGraph([(0, 1)])
    times = {0: Q(1e-6, 1e-6), 1: Q(1e-6, 1e-6)}
    with pytest.raises(InvalidArgumentError, match="before one it depends on"):
        queue_critical_path(dag, times, order=[1, 0])
    with pytest.raises(InvalidArgumentError, match="every occurrence"):
        queue_critical_path(dag, times, order=[0])
    with pytest.raises(InvalidArgumentError, match=">= 0"):
        Q(-1e-6, 0.0)


def test_a_cuda_graph_runs_the_kernels_back_to_back_and_no_host_between() -> None:
    from dlbricks.estimator.queue import graph_latency

    host_bound = [Q(10e-6, 2e-6)] * 5  # eager: the device waits for each launch; in a graph it does not
    assert graph_latency(host_bound) == pytest.approx(5 * 2e-6)
    assert graph_latency(host_bound) < queue_latency(host_bound)
    device_bound = [Q(1e-6, 50e-6)] * 4
    assert graph_latency(device_bound) == pytest.approx(4 * 50e-6) == pytest.approx(queue_latency(device_bound) - 1e-6)
    assert graph_latency([Q(3e-6, 0.0)]) == 0.0  # a view: no kernel, and no host in the graph
    assert graph_latency([Q(3e-6, 1e-6), Q(5e-6, 0.0, blocking=True)]) is None  # a host that waits is no graph
    assert graph_latency([]) == 0.0
