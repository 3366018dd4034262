"""Composition rules: from per-brick latencies to a model's latency.

- sequential: sum over occurrences of (brick latency - floor), plus the floor once per model run;
- parallel: the critical path of the brick DAG (floor-corrected node weights), plus one floor;
- uncertainty: a brick's CI half-width counts once per occurrence (the same measurement is reused,
  so its error is fully correlated within a brick) and bricks combine in quadrature (independent
  measurements).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import networkx as nx

__all__ = ["sequential", "critical_path", "combined_halfwidth"]

_SINK = "__sink__"


def sequential(dag: nx.DiGraph, latency: Mapping[int, float], floor_s: float = 0.0) -> float:
    """Floor-corrected sum of the latencies of every occurrence (DAG node) plus one floor."""
    return sum(max(latency[n] - floor_s, 0.0) for n in dag.nodes) + floor_s


def critical_path(dag: nx.DiGraph, latency: Mapping[int, float], floor_s: float = 0.0) -> float:
    """Length of the longest path through the DAG with floor-corrected node weights, plus one floor.

    Node weights are moved onto edges (each edge weighs its source) with a sink after every node,
    so that :func:`networkx.dag_longest_path_length` does the work.
    """
    if dag.number_of_nodes() == 0:
        return floor_s
    weighted = nx.DiGraph()
    for node in dag.nodes:
        w = max(latency[node] - floor_s, 0.0)
        weighted.add_edge(node, _SINK, weight=w)
        for succ in dag.successors(node):
            weighted.add_edge(node, succ, weight=w)
    return float(nx.dag_longest_path_length(weighted, weight="weight")) + floor_s


def combined_halfwidth(counts: Mapping[str, int], halfwidth: Mapping[str, float]) -> float:
    """Half-width of the sum's CI: per brick ``count * halfwidth``, combined in quadrature."""
    return math.sqrt(sum((counts[sig] * halfwidth.get(sig, 0.0)) ** 2 for sig in counts))
