"""Peak memory of loading and decomposing an MXNet export, beside the size of its parameters.

Usage (the mxnet environment)::

    python benchmarks/mxnet_memory.py gluon_vgg16 [gluoncv:faster_rcnn_resnet50_v1b_voc ...]

Each model is exported to a temporary folder (``net.export``: ``-symbol.json`` + ``-0000.params``,
random weights) by one subprocess, then loaded and decomposed by another, fresh one, which reports
its peak resident memory above what it holds once mxnet is imported (``VmHWM``) after each phase
of :func:`dlbricks.load_model` and of :func:`dlbricks.decompose` (the peak is reset between phases
through ``/proc/self/clear_refs``), so that what dominates shows. Names ``gluoncv:NAME`` need
gluoncv (``pip install gluoncv``, then ``numpy<1.24`` again); ``gluon_NAME`` is a model of
dlbricks' Gluon zoo; ``NAME@1,3,H,W`` gives the input shape of a GluonCV model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

EXPORT = r"""
import sys, os
os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
name, out = sys.argv[1], sys.argv[2]
if name.startswith("gluoncv:"):
    import mxnet as mx
    from gluoncv import model_zoo
    bare = name.split(":", 1)[1]
    try:
        net = model_zoo.get_model(bare, pretrained=False, pretrained_base=False)
    except TypeError:  # models without a base network take no pretrained_base
        net = model_zoo.get_model(bare, pretrained=False)
    net.initialize(mx.init.Normal(0.01))
    shape = tuple(int(d) for d in sys.argv[3].split(","))
    net.hybridize()
    net(mx.nd.random.normal(shape=shape))
    net.export(os.path.join(out, bare.replace(".", "_")))
    print(os.path.join(out, bare.replace(".", "_") + "-symbol.json"))
else:
    from dlbricks.model_zoo.gluon import export_gluon
    print(export_gluon(name, out))
"""

PHASES = r"""
import json, os, sys, time
os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet  # its own memory (the library) is not the model's
import dlbricks
from dlbricks import mxnet_frontend as fe

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM", "VmRSS")):
                yield line.split(":")[0], int(line.split()[1]) * 1024

def reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

phases = []
def wrap(module, fname):
    fn = getattr(module, fname)
    def wrapped(*a, **k):
        reset()
        t = time.perf_counter()
        out = fn(*a, **k)
        m = dict(hwm())
        phases.append([fname, m["VmHWM"], m["VmRSS"], time.perf_counter() - t])
        return out
    setattr(module, fname, wrapped)

for f in ("_read", "_infer", "_value_statistics"):
    wrap(fe, f)
path = sys.argv[1]
shape = sys.argv[2] if len(sys.argv) > 2 else ""
shapes = {"data": tuple(int(d) for d in shape.split(","))} if shape else None
base = dict(hwm())["VmRSS"]
reset()
t = time.perf_counter()
graph = dlbricks.load_model(path, input_shapes=shapes)
m = dict(hwm())
phases.append(["load_model (total)", m["VmHWM"], m["VmRSS"], time.perf_counter() - t])
reset()
t = time.perf_counter()
dec = dlbricks.decompose(graph)
m = dict(hwm())
phases.append(["decompose", m["VmHWM"], m["VmRSS"], time.perf_counter() - t])
peak = max(p[1] for p in phases)
print(json.dumps({"base": base, "peak": peak, "phases": phases, "layers": dec.layers,
                  "bricks": len(dec.bricks)}))
"""


def main(names: list[str]) -> None:
    rows = []
    for item in names:
        name, _, shape = item.partition("@")
        with tempfile.TemporaryDirectory() as tmp:
            args = [sys.executable, "-c", EXPORT, name, tmp] + ([shape] if shape else [])
            path = subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            params = sum(p.stat().st_size for p in Path(tmp).glob("*.params"))
            out = subprocess.run([sys.executable, "-c", PHASES, path, shape], check=False, capture_output=True,
                                 text=True)
            if out.returncode:
                print(f"{name}: failed: {out.stderr.strip().splitlines()[-1]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name}: {r['layers']} layers, {r['bricks']} unique bricks; params {params / 2**20:.0f} MiB; "
              f"process before loading {r['base'] / 2**20:.0f} MiB; peak {r['peak'] / 2**20:.0f} MiB "
              f"({(r['peak'] - r['base']) / params:.2f}x params above the start)")
        for phase, peak, rss, seconds in r["phases"]:
            print(f"  {phase:<22} peak {peak / 2**20:7.0f} MiB  after {rss / 2**20:7.0f} MiB  {seconds:6.1f} s")
        rows.append({"model": name, "params": params, **r})
    print(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1:] or ["gluon_vgg16"])
