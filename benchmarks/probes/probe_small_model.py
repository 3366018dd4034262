"""Where does a model of microsecond layers lose its sum? Its bricks against the model, raw onnxruntime.

``dlbricks evaluate --suite full`` estimates ncf_ml20m (15 layers, 13 us) and dlrm_criteo_kaggle (73
layers, 63 us) about 16% off with every brick measured. This probe times, with raw onnxruntime sessions
and IOBinding (1 thread, optimizations off), models taken in turn so that the machine's drift meets
all alike:

- the whole zoo model;
- each of its layer bricks, as dlbricks cuts it (:meth:`dlbricks.Brick.to_onnx`);
- the one-node Relu and a chain of 33 Relus, whose difference gives the zero-node floor (the
  generators' rule, :mod:`dlbricks.generators.floor`);
- with ``--prefixes``, the model cut after each layer (every tensor a later layer reads, and the
  model's outputs, made outputs), whose differences give each layer's cost inside the model;
- with ``--regions K1,K2,...``, the model cut at those node indices (graph order) into consecutive
  regions, each a model of its own (``onnx.utils.Extractor``: its inputs the tensors it reads from
  before it, its outputs those read after it), against its layers' bricks summed. Unlike
  ``--prefixes`` it holds each weight once, so it suits models of large tables (dlrm_criteo_kaggle).

and prints each brick less the floor beside its layer's cost in the model, and the bricks' sum plus
one floor against the whole model.

Usage: ``python benchmarks/probes/probe_small_model.py [--model ncf_ml20m] [--calls 3000] [--prefixes | --regions 8,62]``
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort
from probe_node_cost import _chain, time_calls

import dlbricks
from dlbricks import model_zoo


def _feeds(inputs: list[onnx.ValueInfoProto], seed: int) -> dict[str, np.ndarray]:
    """Random feeds for ``inputs``; integers 0 or 1, which every zoo table can index."""
    rng = np.random.default_rng(seed)
    out = {}
    for value in inputs:
        shape = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        out[value.name] = (rng.integers(0, 2, size=shape).astype(dtype) if np.issubdtype(dtype, np.integer)
                           else rng.random(shape).astype(dtype))
    return out


def _prefix(model: onnx.ModelProto, nodes: int) -> onnx.ModelProto:
    """``model`` cut after its first ``nodes`` nodes (topological order), every tensor they write that
    a later node or the model's output reads made an output (``onnx.utils.Extractor``: only the
    weights those nodes read are kept)."""
    graph = model.graph
    written = {o for n in graph.node[:nodes] for o in n.output}
    read_later = {i for n in graph.node[nodes:] for i in n.input} | {o.name for o in graph.output}
    return onnx.utils.Extractor(model).extract_model([i.name for i in graph.input], sorted(written & read_later))


def _region(model: onnx.ModelProto, start: int, stop: int) -> onnx.ModelProto:
    """Nodes ``start`` to ``stop`` (graph order) of ``model`` as a model: its inputs the graph inputs
    and tensors written before ``start`` that they read, its outputs the tensors they write that a
    later node or the model's output reads."""
    graph = model.graph
    nodes = graph.node[start:stop]
    written_before = {o for n in graph.node[:start] for o in n.output} | {i.name for i in graph.input}
    inputs = sorted({i for n in nodes for i in n.input} & written_before)
    written = {o for n in nodes for o in n.output}
    read_later = {i for n in graph.node[stop:] for i in n.input} | {o.name for o in graph.output}
    return onnx.utils.Extractor(model).extract_model(inputs, sorted(written & read_later))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ncf_ml20m", help="a zoo model")
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per repeat")
    parser.add_argument("--prefixes", action="store_true", help="also time the model cut after each layer")
    parser.add_argument("--regions", default="", help="node indices to cut the model at into regions, comma-separated")
    args = parser.parse_args()
    ort.set_default_logger_severity(3)  # the prefixes leave later layers' weights unused
    proto = model_zoo.build(args.model)
    dec = dlbricks.decompose(proto)
    models: dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]] = {
        "whole": (proto, _feeds(list(proto.graph.input), 0)),
        "Relu x1": (_chain("Relu", 1, 64, None), {"x": np.ones(64, np.float32)}),
        "Relu x33": (_chain("Relu", 33, 64, None), {"x": np.ones(64, np.float32)}),
    }
    for sig, brick in dec.bricks.items():
        model = brick.to_onnx()
        models[sig] = (model, _feeds(list(model.graph.input), 1))
    if args.prefixes:
        for k in range(1, len(proto.graph.node)):
            models[f"prefix {k}"] = (_prefix(proto, k), models["whole"][1])
    cuts = [0, *sorted(int(k) for k in args.regions.split(",") if k), len(proto.graph.node)]
    spans = list(zip(cuts[:-1], cuts[1:])) if args.regions else []
    for start, stop in spans:
        region = _region(proto, start, stop)
        models[f"region {start}"] = (region, _feeds(list(region.graph.input), 0))
    t = time_calls(models, args.calls, repeats=9)
    floor = t["Relu x1"] - (t["Relu x33"] - t["Relu x1"]) / 32
    counts = dec.counts()
    total = floor + sum(counts[s] * (t[s] - floor) for s in dec.bricks)
    print(f"{args.model}: whole {t['whole']:.3f} us; bricks less the floor, summed, plus one floor "
          f"{total:.3f} us ({100 * (total / t['whole'] - 1):+.1f}%); zero-node floor {floor:.3f} us")
    for start, stop in spans:
        inside = [o for o in dec.occurrences if start <= o.index < stop]
        summed = sum(t[o.signature] - floor for o in inside)
        region = t[f"region {start}"] - floor
        print(f"  nodes {start}-{stop - 1}: region less the floor {region:.3f} us, its bricks less the floor "
              f"summed {summed:.3f} us ({100 * (summed / region - 1):+.1f}%)")
    previous = floor
    print(f"  {'layer':>5s} {'op':10s} {'brick-floor':>11s} {'in model':>9s}")
    for occ in dec.occurrences:  # one layer per node, in the graph's order, for these models
        key = "whole" if occ.index + 1 == len(proto.graph.node) else f"prefix {occ.index + 1}"
        inside = f"{t[key] - previous:9.3f}" if key in t else "        -"
        previous = t.get(key, previous)
        print(f"  {occ.index:5d} {dec.bricks[occ.signature].op_type:10s} {t[occ.signature] - floor:11.3f} {inside}")


if __name__ == "__main__":
    main()
