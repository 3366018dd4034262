"""The floor: the per-call cost of an empty model under a configuration.

A brick's time includes the runtime's fixed cost per call (binding checks, thread pool wake-up) and
the cost of running one node (dispatch, allocating its output). The estimator subtracts the floor per
brick and adds it once per model run, so the floor is the cost of a call with no node at all: a model
run pays the per-node cost once per node, which each brick keeps. No runtime runs a model without
nodes, so it is extrapolated: the one-node :func:`~dlbricks.generators.items.floor_model` and a chain
of :data:`CHAIN_NODES` are measured with the same harness and budget as the bricks, and the floor is
the one-node time less the chain's time per further node (onnxruntime, one thread: 1.7 us for one
node, 0.16 us per further node; exploratory). Subtracting the one-node time instead left out 0.16 us
per layer of every model, 0.3-1.2% of small CNNs with hundreds of layers.

The chain is timed with the one-node model beside it, a sample of each in turn (the harness's
``empty``): timed apart, the two met different moments of a machine whose speed swings, and a further
node came out at 0.3-0.9 us. Their paired ratio gives a further node's cost as a share of the
one-node call, scaled to the one-node model's own measurement, so that the floor and the node cost
describe one moment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ._registry import get_backend
from .budget import Budget
from .harness import Clock, Timing, measure_model, measure_prepared
from .items import FLOOR_KEY, floor_model
from .measurement import Measurement
from .protocols import Backend, BackendConfig

__all__ = ["measure_floor", "node_cost", "CHAIN_NODES"]

#: Nodes of the chain whose time, against the one-node model's, gives the cost of a further node.
CHAIN_NODES = 33


def measure_floor(
    backend: Backend | str = "onnxruntime",
    config: BackendConfig | None = None,
    budget: Budget | None = None,
    *,
    details: bool = False,
    clock: Clock = time.perf_counter_ns,
) -> Any:
    """Measure the floor in this process (no worker, no isolation).

    Parameters
    ----------
    backend : Backend or str, default "onnxruntime"
        A backend object or a registered name.
    config : BackendConfig, optional
        Default: the backend's default configuration.
    budget : Budget, optional
        Default: ``Budget()``.
    details : bool, default False
        Also return the harness :class:`Timing` (as ``(measurement, timing)``).
    clock : callable, default time.perf_counter_ns

    Returns
    -------
    Measurement or tuple of (Measurement, Timing)
        The one-node model's measurement, keyed ``"dlbricks.floor:identity-float32-1"``; its
        ``floor_s`` is the floor extrapolated to no node, its median less ``node_s``, or its own
        median if the chain could not be measured; its ``node_s`` the cost of a further node
        (:func:`node_cost`) from the chain and the one-node model timed beside it, scaled to this
        measurement's median, None without the chain.
    """
    backend_obj = get_backend(backend) if isinstance(backend, str) else backend
    config = backend_obj.default_config() if config is None else config
    budget = Budget() if budget is None else budget
    backend_obj.check(config)
    measurement, timing = measure_model(floor_model(), FLOOR_KEY, backend_obj, config, budget, clock=clock)
    chain = _chain_beside_one_node(backend_obj, config, budget, clock)
    floor, node = measurement.median_s, None
    one = chain.empty_s if chain.ok else None  # the one-node model at the chain's moments
    if measurement.ok and floor is not None and chain.median_s is not None and one is not None and one > 0:
        node = node_cost(one, chain.median_s, CHAIN_NODES) * floor / one
        floor = max(floor - node, 0.0)
    measurement = dataclasses.replace(measurement, floor_s=floor, node_s=node)
    result: tuple[Measurement, Timing] = (measurement, timing)
    return result if details else measurement


class _Beside:
    """A prepared model with another's ``run`` as the harness's ``empty``: timed after each of its
    samples (:func:`~dlbricks.generators.harness.paired_empty`)."""

    def __init__(self, prepared: Any, empty: Callable[[], object]) -> None:
        self._prepared = prepared
        self.empty = empty

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prepared, name)


def _chain_beside_one_node(backend: Backend, config: BackendConfig, budget: Budget, clock: Clock) -> Measurement:
    """The chain of :data:`CHAIN_NODES` nodes timed with the one-node model beside it: its
    ``empty_s`` is the one-node model's time at the chain's own moments."""
    with contextlib.ExitStack() as stack:
        chain = backend.prepare(floor_model(CHAIN_NODES), config)
        stack.callback(chain.close)
        one = backend.prepare(floor_model(), config)
        stack.callback(one.close)
        return measure_prepared(_Beside(chain, one.run), FLOOR_KEY, backend.name, config, budget, clock=clock)[0]


def node_cost(one_node_s: float, chain_s: float, nodes: int) -> float:
    """The time of one further node of a model run, from a one-node call and a chain of ``nodes``
    nodes: the chain's time per further node (at least 0)."""
    return max(chain_s - one_node_s, 0.0) / (nodes - 1)
