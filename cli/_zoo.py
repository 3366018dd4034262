"""``dlbricks zoo``: list and export the models of the built-in zoo.

The group is attached to the main ``dlbricks`` command::

    dlbricks zoo list --task language
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from dlbricks import DlbricksError
from dlbricks.model_zoo import list_models
from dlbricks.model_zoo.registry import export
from dlbricks.model_zoo.spec import TASKS, ZooModel

__all__ = ["zoo", "ZooCliError"]


class ZooCliError(click.ClickException):
    """A library error shown as one line, exit code 2 (like click's usage errors)."""

    exit_code = 2


@contextmanager
def _library_errors() -> Iterator[None]:
    try:
        yield
    except DlbricksError as e:
        raise ZooCliError(str(e)) from e
    except OSError as e:
        raise ZooCliError(f"Cannot write the exported model: {e}") from e


def _inputs(model: ZooModel) -> str:
    """Inputs as ``name:shape[:dtype]``; runs like ``sparse_0 .. sparse_25`` of one spec are folded."""
    runs: list[list[tuple[str, tuple[int, ...], str]]] = []
    for spec in model.input_shapes:
        prev = runs[-1][-1] if runs else None
        if prev and prev[1:] == spec[1:] and prev[0].rstrip("0123456789") == spec[0].rstrip("0123456789") != spec[0]:
            runs[-1].append(spec)
        else:
            runs.append([spec])
    parts = []
    for run in runs:
        name = run[0][0] if len(run) < 3 else f"{run[0][0]}..{run[-1][0]}"
        _, shape, dtype = run[0]
        parts.append(f"{name}:{'x'.join(map(str, shape))}{'' if dtype == 'float32' else ':' + dtype}")
    return ", ".join(parts)


def _as_json(model: ZooModel) -> dict[str, object]:
    ranges = model.ranges()
    return {"name": model.name, "task": model.task, "family": model.family,
            "inputs": [{"name": n, "shape": list(s), "dtype": d,
                        **({"value_range": list(ranges[n])} if n in ranges else {})}
                       for n, s, d in model.input_shapes],
            "expected_params": model.expected_params, "params_source": model.params_source,
            "description": model.description}


def _table(rows: list[tuple[str, ...]], echo: Callable[[str], None]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.rjust(w) if i == len(r) - 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        echo("  ".join(cells).rstrip())


@click.group(name="zoo")
def zoo() -> None:
    """The built-in model zoo: 50+ published architectures built locally (no download)."""


@zoo.command("list")
@click.option("--task", type=click.Choice(TASKS), default=None, help="Only the models of this task.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option("--framework", type=click.Choice(("onnx", "mxnet")), default="onnx", show_default=True,
              help="mxnet: the MXNet Gluon vision zoo (needs the mxnet extra).")
def list_command(task: str | None, as_json: bool, framework: str) -> None:
    """List the zoo's models: name, task, family, input shapes (batch 1), parameters."""
    with _library_errors():
        models = list_models(task, framework)
    if as_json:
        click.echo(json.dumps([_as_json(m) for m in models], indent=1))
        return
    rows = [("name", "task", "family", "inputs", "params")]
    rows += [(m.name, m.task, m.family, _inputs(m), f"{m.expected_params:,}") for m in models]
    _table(rows, click.echo)


@zoo.command("export")
@click.argument("names", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, writable=True),
              help="Folder to write <name>.onnx into (created if missing).")
@click.option("--batch-size", default=1, show_default=True, type=int, help="Batch dimension of the models.")
def export_command(names: tuple[str, ...], out_dir: str, batch_size: int) -> None:
    """Build zoo models NAMES... and write them as ONNX files."""
    with _library_errors():
        paths = export(names, out_dir, batch_size=batch_size)
    for path in paths:
        click.echo(str(path))

