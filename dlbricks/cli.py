"""The ``dlbricks`` command line: a thin layer over the library.

Each command opens what it needs, calls public functions, and turns a :class:`DlbricksError` into a
one-line message with exit code 2.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from dlbricks._decompose import GRANULARITIES, BrickSet, decompose
from dlbricks._errors import DlbricksError, InvalidArgumentError
from dlbricks._graph import ModelGraph
from dlbricks._onnx_frontend import load_model

__all__ = ["main", "DlbricksClickError", "handle_errors", "parse_input_shapes", "iter_models"]

F = TypeVar("F", bound=Callable[..., Any])


class DlbricksClickError(click.ClickException):
    """A one-line error with exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)


def handle_errors(fn: F) -> F:
    """Turn library errors (and Ctrl-C) into one-line messages with exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DlbricksError as e:
            raise DlbricksClickError(str(e).splitlines()[0] if str(e) else type(e).__name__) from e

    return wrapper  # type: ignore[return-value]


def parse_input_shapes(values: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=D,D,..`` options into a mapping."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition("=")
        try:
            parsed = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            parsed = ()
        if not sep or not name or not parsed or any(d <= 0 for d in parsed):
            raise InvalidArgumentError(
                f"--input-shape {value!r} is not NAME=D,D,... with positive integers, "
                f"e.g. --input-shape input_ids=1,128.")
        shapes[name] = parsed
    return shapes


def iter_models(models: Sequence[str], zoo: str | None, batch_size: int | None,
                input_shapes: dict[str, tuple[int, ...]]) -> Iterator[ModelGraph]:
    """Load each MODEL (a path, or a zoo model name) and the models of ``--zoo TASK|all``."""
    names: list[str] = list(models)
    if zoo is not None:
        from dlbricks.model_zoo import list_models

        chosen = [m.name for m in list_models(None if zoo == "all" else zoo)]
        if not chosen:
            raise InvalidArgumentError(f"--zoo {zoo!r} selects no model; see 'dlbricks zoo list'.")
        names.extend(chosen)
    if not names:
        raise InvalidArgumentError("no model given; pass MODEL paths, zoo names or --zoo TASK|all.")
    for item in names:
        path = Path(item)
        if path.exists() or item.endswith(".onnx") or "/" in item:
            yield load_model(path, input_shapes=input_shapes or None, batch_size=batch_size)
            continue
        from dlbricks.model_zoo import build

        yield load_model(build(item, batch_size=batch_size or 1), input_shapes=input_shapes or None,
                         name=item)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dlbricks")
def main() -> None:
    """dlbricks: benchmark deep-learning models brick by brick.

    Cut models into bricks (decompose), benchmark each unique brick once, store the results in
    SQLite, and estimate model latency from them.
    """


def _model_options(fn: F) -> F:
    fn = click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=D,D,..",
                      help="Concrete shape of an input (repeatable).")(fn)
    fn = click.option("--batch-size", type=int, default=None,
                      help="Value of the symbolic batch dimension.")(fn)
    fn = click.option("--zoo", default=None, metavar="TASK|all",
                      help="Add the built-in zoo models of a task (or all).")(fn)
    return click.argument("models", nargs=-1, metavar="MODEL...")(fn)


@main.command("decompose")
@_model_options
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="layer", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each unique brick as DIR/<signature>_<op>.onnx.")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Check that onnxruntime can run every brick.")
@handle_errors
def decompose_cmd(models: tuple[str, ...], zoo: str | None, batch_size: int | None,
                  input_shape: tuple[str, ...], granularity: str, as_json: bool, out: Path | None,
                  check: bool) -> None:
    """Cut models into bricks and print the unique bricks.

    MODEL is an ONNX file or the name of a zoo model (see 'dlbricks zoo list').
    """
    if batch_size is not None and batch_size <= 0:
        raise InvalidArgumentError(f"--batch-size must be a positive int. Got {batch_size} instead.")
    shapes = parse_input_shapes(input_shape)
    bs = BrickSet()
    for graph in iter_models(models, zoo, batch_size, shapes):
        bs.add(decompose(graph, granularity=granularity))
    problems = {sig: b.check_runnable() for sig, b in bs.bricks.items()} if check else {}
    problems = {k: v for k, v in problems.items() if v is not None}
    if out is not None:
        _write_bricks(bs, out, problems)
    if as_json:
        click.echo(json.dumps(_brickset_json(bs, problems, check), indent=2))
    else:
        _print_tables(bs, problems, check)
    for sig, reason in problems.items():
        brick = bs.bricks[sig]
        click.echo(f"Error: brick {sig[:12]} ({brick.op_type}) of {', '.join(bs.model_names(sig))} "
                   f"is unrunnable in onnxruntime and will be skipped: {reason}", err=True)
    if problems:
        sys.exit(2)


def _write_bricks(bs: BrickSet, out: Path, problems: dict[str, str]) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for sig, brick in bs.bricks.items():
            path = out / f"{sig[:16]}_{brick.op_type.replace('+', '_')}.onnx"
            path.write_bytes(brick.to_onnx().SerializeToString())
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


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _print_tables(bs: BrickSet, problems: dict[str, str], checked: bool) -> None:
    counts = bs.counts()
    rows = []
    for sig, b in sorted(bs.bricks.items(), key=lambda kv: (-counts[kv[0]], kv[1].op_type)):
        status = ("unrunnable" if sig in problems else "ok") if checked else "-"
        rows.append([sig[:12], b.op_type, _fmt_shapes(b.inputs), _fmt_shapes(b.outputs),
                     str(counts[sig]), str(len(bs.model_names(sig))), _fmt_flops(b.flops),
                     f"{b.bytes_moved / 1e6:.3f}", status])
    click.echo(_table(["signature", "op", "inputs", "outputs", "count", "models", "MFLOPs", "MB",
                       "status"], rows, right={4, 5, 6, 7}))
    summary = bs.summary()
    click.echo("")
    click.echo(_table(["model", "layers", "unique bricks"],
                      [[n, str(la), str(u)] for n, la, u in summary.per_model], right={1, 2}))
    click.echo("")
    click.echo(f"models: {summary.models}  layers: {summary.layers}  unique bricks: "
               f"{summary.unique_bricks}  reuse ratio (layers / unique bricks): "
               f"{summary.reuse_ratio:.2f}  bricks shared across models: "
               f"{summary.shared_across_models}")


def _attach_plugins() -> None:
    """Attach the command groups of the later stages (each registers like a plugin would)."""
    try:
        from dlbricks.model_zoo.cli import zoo
    except ImportError:  # the zoo's CLI is optional while it is being built
        return
    main.add_command(zoo)


_attach_plugins()
