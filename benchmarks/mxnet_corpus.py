"""MXNet models as users export them: GluonCV networks through the command line, one row each.

Usage (the mxnet environment, gluoncv installed)::

    python benchmarks/mxnet_corpus.py [--out DIR] [--models a,b,c] [--budget quick|default] [--db FILE]
                                      [--contexts measure|reuse] [--paired]

Each model is built by GluonCV with random weights (``pretrained=False``: nothing is downloaded),
hybridized and exported (``net.export``: ``NAME-symbol.json`` + ``NAME-0000.params``) into ``--out``
(default a temporary folder; exports already there are kept). Then the command line runs on it exactly
as a user types it, each command a subprocess::

    dlbricks decompose NAME-symbol.json --input-shape data=1,3,H,W --json
    dlbricks bench     NAME-symbol.json --input-shape data=1,3,H,W --db DB --budget B
    dlbricks validate  NAME-symbol.json --input-shape data=1,3,H,W --db DB --budget B [--paired]

One row per model: layers, unique bricks, the size of its parameters, the peak resident memory of
``decompose`` (the process tree's, from ``os.wait4``) and its ratio to the parameters, the measured,
estimated, lower-bound and roofline times, the error and whether the bounds hold (roofline <= lower
bound <= measured); then the mean |error|, the models within +-5% and those whose bounds hold. A model
that GluonCV cannot build offline is skipped with its reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: GluonCV model -> input shape (NCHW, small: the corpus is about shapes of graphs, not of inputs).
MODELS: dict[str, tuple[int, ...]] = {
    "cifar_resnet20_v1": (1, 3, 32, 32),
    "resnet18_v1b": (1, 3, 128, 128),
    "mobilenetv3_small": (1, 3, 128, 128),
    "vgg11": (1, 3, 128, 128),
    "fcn_resnet50_voc": (1, 3, 256, 256),
    "deeplab_resnet50_ade": (1, 3, 256, 256),
    "ssd_512_mobilenet1.0_voc": (1, 3, 256, 256),
    "yolo3_mobilenet1.0_voc": (1, 3, 256, 256),
    "simple_pose_resnet18_v1b": (1, 3, 128, 96),
    "mobile_pose_mobilenetv3_small": (1, 3, 128, 96),
}

EXPORT = r"""
import os, sys, warnings
warnings.simplefilter("ignore")
os.environ.setdefault("MXNET_SUBGRAPH_BACKEND", "NONE")
import mxnet as mx
from gluoncv import model_zoo
name, prefix = sys.argv[1], sys.argv[2]
shape = tuple(int(d) for d in sys.argv[3].split(","))
try:
    net = model_zoo.get_model(name, pretrained=False, pretrained_base=False)
except TypeError:  # models without a base network take no pretrained_base
    net = model_zoo.get_model(name, pretrained=False)
net.initialize(mx.init.Normal(0.01))
x = mx.nd.random.normal(shape=shape)
net(x)
net.hybridize()
net(x)
net.export(prefix)
"""


@dataclass
class Row:
    """One model's figures (times in ms, sizes in MB); ``skipped`` says why a model has none."""

    model: str
    shape: str
    layers: int | None = None
    unique_bricks: int | None = None
    params_mb: float | None = None
    decompose_rss_mb: float | None = None
    base_rss_mb: float | None = None  # a process that imports mxnet and dlbricks, nothing loaded
    measured_ms: float | None = None
    estimate_ms: float | None = None
    error: float | None = None  # estimate / measured - 1
    lower_bound_ms: float | None = None
    roofline_ms: float | None = None
    bounds_hold: bool | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each command
    skipped: str | None = None

    @property
    def rss_ratio(self) -> float | None:
        """Peak resident memory of decompose over the size of the parameters."""
        if self.decompose_rss_mb is None or not self.params_mb:
            return None
        return self.decompose_rss_mb / self.params_mb

    @property
    def above_base_ratio(self) -> float | None:
        """Peak resident memory of decompose above the imports' own, over the size of the parameters."""
        if self.decompose_rss_mb is None or self.base_rss_mb is None or not self.params_mb:
            return None
        return (self.decompose_rss_mb - self.base_rss_mb) / self.params_mb


def _shape_arg(shape: tuple[int, ...]) -> str:
    return "data=" + ",".join(str(d) for d in shape)


def export(name: str, folder: Path, shape: tuple[int, ...], python: str = sys.executable) -> Path:
    """``folder/NAME-symbol.json`` of GluonCV's ``name`` (built, initialized and exported by a fresh
    Python process unless it is already there).

    Raises
    ------
    RuntimeError
        With GluonCV's last line of error where the model cannot be built offline.
    """
    prefix = folder / name.replace(".", "_")
    symbol = Path(f"{prefix}-symbol.json")
    if symbol.exists() and Path(f"{prefix}-0000.params").exists():
        return symbol
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([python, "-c", EXPORT, name, str(prefix), ",".join(map(str, shape))],
                          capture_output=True, text=True, check=False)
    if done.returncode or not symbol.exists():
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"\w*(Error|Exception)\b", line)]
        raise RuntimeError((errors or lines or [f"exit code {done.returncode}"])[-1])
    return symbol


def _run(args: list[str]) -> tuple[str, float, float]:
    """Run ``args``; its stdout, its process tree's peak resident memory (bytes) and its wall time.

    Raises
    ------
    RuntimeError
        With the command and its last lines of output where it fails.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if proc.returncode:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(args[:2])} exited {proc.returncode}: {tail}")
    return text, usage.ru_maxrss * 1024.0, time.perf_counter() - start


def base_rss(python: str = sys.executable) -> float:
    """Peak resident memory (bytes) of a process of ``python`` that imports mxnet and dlbricks'
    command line: pass the interpreter the ``dlbricks`` command runs in (:func:`command_python`),
    whose packages may differ (gluoncv's environment imports pandas with them)."""
    code = ("import os; os.environ.setdefault('MXNET_SUBGRAPH_BACKEND', 'NONE'); "
            "import mxnet, dlbricks, dlbricks.cli")
    return _run([python, "-c", code])[1]


def command_python(command: list[str]) -> str:
    """The Python interpreter that ``command`` (:func:`dlbricks_command`) runs: its script's
    ``#!`` line, or the command's own first word when that is a Python."""
    first = Path(command[0])
    try:
        line = first.read_bytes().split(b"\n", 1)[0]
    except OSError:
        return command[0]
    if line.startswith(b"#!"):
        interpreter = line[2:].decode().split()
        if interpreter and Path(interpreter[0]).name.startswith("python"):
            return interpreter[0]
    return command[0] if first.name.startswith("python") else sys.executable


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_validate(text: str) -> dict[str, object]:
    """The figures of the (one) model row of ``dlbricks validate``'s table."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if "measured ms" in line and "bounds hold" in line)
    row = next(line for line in lines[head + 1:] if line.strip() and not set(line.strip()) <= set("-+| "))
    cells = dict(zip(re.split(r"\s{2,}", lines[head].strip()), re.split(r"\s{2,}", row.strip()), strict=False))
    error = _number(cells.get("error %", ""))
    return {"measured_ms": _number(cells.get("measured ms", "")), "estimate_ms": _number(cells.get("estimated ms", "")),
            "error": None if error is None else error / 100.0,
            "lower_bound_ms": _number(cells.get("lower bound ms", "")), "roofline_ms": _number(cells.get("roofline ms", "")),
            "bounds_hold": cells.get("bounds hold") == "yes", "inside": cells.get("inside") == "yes"}


def dlbricks_command() -> list[str]:
    """The ``dlbricks`` command of this Python's environment (``python -m dlbricks`` without one)."""
    script = Path(sys.executable).with_name("dlbricks")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dlbricks"]


def measure_model(symbol: Path, shape: tuple[int, ...], db: Path, budget: str = "quick",
                  dlbricks: list[str] | None = None, contexts: str = "measure", paired: bool = False) -> Row:
    """Decompose, bench and validate one export through the command line, as a user types it."""
    exe = dlbricks or dlbricks_command()
    model = symbol.name.removesuffix("-symbol.json")
    row = Row(model=model, shape="x".join(map(str, shape)))
    params = Path(str(symbol).removesuffix("-symbol.json") + "-0000.params")
    row.params_mb = params.stat().st_size / 1e6
    shape_args = ["--input-shape", _shape_arg(shape)]
    text, rss, row.seconds["decompose"] = _run([*exe, "decompose", str(symbol), *shape_args, "--json"])
    summary = json.loads(text[text.index("{"):])["summary"]
    row.layers, row.unique_bricks = summary["layers"], summary["unique_bricks"]
    row.decompose_rss_mb = rss / 1e6
    _, _, row.seconds["bench"] = _run([*exe, "bench", str(symbol), *shape_args, "--db", str(db),
                                       "--budget", budget, "--contexts", contexts])
    text, _, row.seconds["validate"] = _run([*exe, "validate", str(symbol), *shape_args, "--db", str(db),
                                             "--budget", budget, *(["--paired"] if paired else [])])
    for key, value in parse_validate(text).items():
        setattr(row, key, value)
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[Row]) -> None:
    """The rows, then the mean |error|, the models within +-5% and those whose bounds hold."""
    head = ["model", "input", "layers", "unique", "params MB", "decomp. RSS MB", "RSS/params", "above base/params",
            "measured ms", "estimate ms", "error %", "lower bd ms", "roofline ms", "bounds"]
    table = [head]
    for r in rows:
        if r.skipped:
            print(f"skipped {r.model}: {r.skipped}")
            continue
        table.append([r.model, r.shape, str(r.layers), str(r.unique_bricks), _fmt(r.params_mb, ".1f"),
                      _fmt(r.decompose_rss_mb, ".0f"), _fmt(r.rss_ratio, ".2f"),
                      _fmt(r.above_base_ratio, ".2f"), _fmt(r.measured_ms, ".3f"),
                      _fmt(r.estimate_ms, ".3f"), _fmt(None if r.error is None else 100 * r.error, "+.1f"),
                      _fmt(r.lower_bound_ms, ".3f"), _fmt(r.roofline_ms, ".3f"),
                      "-" if r.bounds_hold is None else ("yes" if r.bounds_hold else "NO")])
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    for line in table:
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
    done = [r for r in rows if r.error is not None]
    if done:
        mean = sum(abs(r.error) for r in done) / len(done)  # type: ignore[arg-type]
        within = sum(1 for r in done if abs(r.error) <= 0.05)  # type: ignore[arg-type]
        hold = sum(1 for r in done if r.bounds_hold)
        print(f"\n{len(done)} models: mean |error| {100 * mean:.1f}%, {within} within +-5%, "
              f"bounds hold on {hold}")


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="keep the exports here (default: a temp dir)")
    parser.add_argument("--models", default=None, help="comma-separated slice of: " + ",".join(MODELS))
    parser.add_argument("--budget", choices=("quick", "default"), default="quick")
    parser.add_argument("--db", type=Path, default=None, help="brick database (default: in the export folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--contexts", choices=("measure", "reuse"), default="measure",
                        help="bench's --contexts: reuse keeps bricks measured in an earlier model's context")
    parser.add_argument("--paired", action="store_true", help="validate with --paired (whole model in turns with "
                        "its dominant bricks)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory(prefix="mxnet_corpus_") as tmp:
        folder = args.out or Path(tmp)
        db = args.db or folder / "corpus.db"
        exe = dlbricks_command()
        if not db.exists():
            _run([*exe, "calibrate", "--db", str(db)])  # peaks for the roofline
        base = base_rss(command_python(dlbricks_command())) / 1e6
        print(f"a process importing mxnet and dlbricks peaks at {base:.0f} MB", flush=True)
        rows = []
        for name in names:
            shape = MODELS[name]
            try:
                symbol = export(name, folder, shape)
            except RuntimeError as e:
                rows.append(Row(model=name, shape="x".join(map(str, shape)), skipped=f"cannot build offline: {e}"))
                print(f"skipped {name}: {rows[-1].skipped}", flush=True)
                continue
            try:
                rows.append(measure_model(symbol, shape, db, args.budget, exe, args.contexts, args.paired))
                rows[-1].base_rss_mb = base
            except RuntimeError as e:
                rows.append(Row(model=name, shape="x".join(map(str, shape)), skipped=str(e)))
            r = rows[-1]
            print(f"{name}: " + (r.skipped or f"{r.measured_ms} ms measured, {r.estimate_ms} ms estimated, "
                                 f"lower bound {r.lower_bound_ms} ms, commands "
                                 + ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items())), flush=True)
        print()
        print_table(rows)
        if args.json:
            records = [asdict(r) | {"rss_ratio": r.rss_ratio, "above_base_ratio": r.above_base_ratio} for r in rows]
            args.json.write_text(json.dumps(records, indent=2))
    return rows


if __name__ == "__main__":
    main()
