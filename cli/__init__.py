"""The ``dlbricks`` command line: a thin layer over the library, above every stage of the pipeline.

Each command opens what it needs, calls public functions, and turns a :class:`DlbricksError` into a
one-line message with exit code 2. The layer may import every stage; no stage imports it. Its
modules: ``_util`` (what every command shares), ``_zoo`` (``zoo``), ``_db`` (``bench``, ``db``),
``_estimator`` (``estimate``, ``validate``, ``evaluate``, ...); this one holds the group
:func:`main` and ``decompose``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from dlbricks import Brick, BrickSet, InvalidArgumentError, decompose
from dlbricks.bricks import write_bricks
from dlbricks.decomposition import GRANULARITIES
from dlbricks.generators import get_backend
from dlbricks.mxnet_bricks import check_mxnet_runnable
from dlbricks.no_weights import KEPT_VALUES

from ._db import bench, db
from ._estimator import COMMANDS
from ._util import (
    DlbricksGroup,
    backend_option,
    chosen_backend,
    format_table,
    handle_errors,
    iter_models,
    model_format,
    model_help,
    model_options,
    parse_input_shapes,
)
from ._zoo import zoo

__all__ = ["main"]

#: How ``decompose --check`` checks a brick in the backends that declare no ``check_brick``: None if
#: it runs, else the reason (any other backend: onnxruntime's check of the brick's ONNX model).
CHECKS: dict[str, Callable[[Brick], str | None]] = {"onnxruntime": Brick.check_runnable,
                                                    "mxnet": check_mxnet_runnable}


def brick_check(backend: str) -> Callable[[Brick], str | None]:
    """How ``decompose --check`` checks a brick in ``backend``: its ``check_brick`` where it has one,
    else :data:`CHECKS`' entry, else onnxruntime's check."""
    own = getattr(get_backend(backend), "check_brick", None)
    return own if own is not None else CHECKS.get(backend, Brick.check_runnable)

@click.group(cls=DlbricksGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dlbricks")
def main() -> None:
    """dlbricks: benchmark deep-learning models brick by brick.

    Cut models into bricks (decompose), benchmark each unique brick once, store the results in
    SQLite, and estimate model latency from them.
    """


@main.command("decompose", help=f"Cut models into bricks and print the unique bricks.\n\n{model_help(stored=False)}")
@model_options
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="layer", show_default=True)
@click.option("--opt-level", type=click.Choice(("basic", "extended", "all")), default=None,
              help="For --granularity fused: the onnxruntime level whose fusions make the bricks "
                   "(default all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each unique brick as DIR/<signature>_<op>.onnx.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Check that the runtime the bricks run in (--backend) can run every brick.")
@backend_option
@click.option("--no-weights", is_flag=True,
              help="With --out: no names from the model, and synthetic values for every constant (weights, "
                   "scalars, integer tensors, a gather's indices drawn within range), so that a proprietary "
                   f"model's bricks can be measured elsewhere. Kept as they are: {KEPT_VALUES}.")
@handle_errors
def decompose_cmd(models: tuple[str, ...], zoo: str | None, batch_size: int | None,
                  input_shape: tuple[str, ...], granularity: str, opt_level: str | None, as_json: bool,
                  out: Path | None, check: bool, no_weights: bool) -> None:
    if batch_size is not None and batch_size <= 0:
        raise InvalidArgumentError(f"--batch-size must be a positive int. Got {batch_size} instead.")
    shapes = parse_input_shapes(input_shape)
    bs = BrickSet()
    own = {}
    for graph in iter_models(models, zoo, batch_size, shapes):
        bs.add(decompose(graph, granularity=granularity, opt_level=opt_level))
        own[graph.name] = model_format(graph)
    backend = chosen_backend(own)
    check_one = brick_check(backend) if check else None
    problems = {sig: check_one(b) for sig, b in bs.bricks.items()} if check_one is not None else {}
    problems = {k: v for k, v in problems.items() if v is not None}
    if no_weights and out is None:
        raise InvalidArgumentError("--no-weights changes the bricks that --out writes; give --out DIR.")
    if out is not None:
        _write_bricks(bs, out, no_weights)
    if as_json:
        click.echo(json.dumps(_brickset_json(bs, problems, check), indent=2))
    else:
        _print_tables(bs, problems, check)
    for sig, reason in problems.items():
        brick = bs.bricks[sig]
        click.echo(f"Error: brick {sig[:12]} ({brick.op_type}) of {', '.join(bs.model_names(sig))} "
                   f"is unrunnable in {backend} and will be skipped: {reason}", err=True)
    if problems:
        sys.exit(2)


def _write_bricks(bs: BrickSet, out: Path, no_weights: bool) -> None:
    try:
        write_bricks(bs.bricks.values(), out, no_weights=no_weights)
    except OSError as e:
        raise InvalidArgumentError(f"--out {out}: cannot write bricks ({e.strerror}); "
                                   f"choose a writable folder.") from e


def _brickset_json(bs: BrickSet, problems: dict[str, str], checked: bool) -> dict[str, Any]:
    counts = bs.counts()
    summary = bs.summary()
    return {
        "models": [{"name": n, "layers": la, "unique_bricks": u} for n, la, u in summary.per_model],
        "summary": {"models": summary.models, "layers": summary.layers,
                    "unique_bricks": summary.unique_bricks, "reuse_ratio": summary.reuse_ratio,
                    "shared_across_models": summary.shared_across_models},
        "bricks": [{**b.describe(), "count": counts[sig], "models": bs.model_names(sig),
                    "runnable": (sig not in problems) if checked else None,
                    "error": problems.get(sig)} for sig, b in bs.bricks.items()],
    }


def _fmt_flops(flops: int | None) -> str:
    if flops is None:
        return "unknown"
    return f"{flops / 1e6:.2f}"


def _fmt_shapes(specs: Sequence[Any]) -> str:
    return " ".join("x".join(map(str, s.shape)) or "scalar" for s in specs)


def _print_tables(bs: BrickSet, problems: dict[str, str], checked: bool) -> None:
    counts = bs.counts()
    rows = []
    for sig, b in sorted(bs.bricks.items(), key=lambda kv: (-counts[kv[0]], kv[1].op_type)):
        status = ("unrunnable" if sig in problems else "ok") if checked else "-"
        rows.append([sig[:12], b.op_type, _fmt_shapes(b.inputs), _fmt_shapes(b.outputs),
                     str(counts[sig]), str(len(bs.model_names(sig))), _fmt_flops(b.flops),
                     f"{b.bytes_moved / 1e6:.3f}", status])
    click.echo(format_table(["signature", "op", "inputs", "outputs", "count", "models", "MFLOPs", "MB",
                       "status"], rows, right={4, 5, 6, 7}))
    summary = bs.summary()
    click.echo("")
    click.echo(format_table(["model", "layers", "unique bricks"],
                      [[n, str(la), str(u)] for n, la, u in summary.per_model], right={1, 2}))
    click.echo("")
    click.echo(f"models: {summary.models}  layers: {summary.layers}  unique bricks: "
               f"{summary.unique_bricks}  reuse ratio (layers / unique bricks): "
               f"{summary.reuse_ratio:.2f}  bricks shared across models: "
               f"{summary.shared_across_models}")


for _command in (zoo, bench, db, *COMMANDS):  # the stages' commands
    main.add_command(_command)
