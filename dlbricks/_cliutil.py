"""Pieces shared by every CLI command group: error handling, model arguments, tables."""

from __future__ import annotations

import contextlib
import functools
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from dlbricks._errors import DlbricksError, InvalidArgumentError
from dlbricks._graph import ModelGraph
from dlbricks._onnx_frontend import load_model

__all__ = ["DlbricksClickError", "DlbricksGroup", "EXIT_INTERRUPTED", "interrupted", "sigint_watch",
           "handle_errors", "parse_input_shapes", "iter_models", "model_options", "format_table"]

F = TypeVar("F", bound=Callable[..., Any])


class DlbricksClickError(click.ClickException):
    """A one-line error with exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)


#: Exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class DlbricksGroup(click.Group):
    """A click group whose commands exit 130 on Ctrl-C (click's own exit code is 1, "Aborted!")."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with sigint_watch() as seen:
                try:
                    code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
                except Exception:
                    if seen:  # Ctrl-C inside an extension module's import surfaces as ImportError
                        interrupted()
                    raise
                if seen:  # Ctrl-C that a library caught and went on from
                    interrupted()
        except click.Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt) or isinstance(e.__context__, KeyboardInterrupt):
                interrupted()
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            interrupted()
        except click.UsageError as e:  # one line: the error and where help is
            where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            click.echo(f"Error: {e.format_message()}{where}", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


@contextlib.contextmanager
def sigint_watch() -> Iterator[list[int]]:
    """Within the block, Ctrl-C raises KeyboardInterrupt as usual and is also recorded in the list
    yielded (non-empty once pressed), so that an error it caused elsewhere can be told apart."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def on_sigint(signum: int, frame: Any) -> None:
        seen.append(signum)
        signal.default_int_handler(signum, frame)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupted() -> NoReturn:
    """Say that Ctrl-C stopped the command and exit with code 130."""
    click.echo("Interrupted.", err=True)
    sys.exit(EXIT_INTERRUPTED)


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
            parsed = tuple(int(d) for d in re.split(r"[,x]", dims.strip()))
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
            yield load_model(path, input_shapes=input_shapes or None, batch_size=batch_size,
                             ignore_unknown_inputs=len(names) > 1)
            continue
        from dlbricks.model_zoo import build

        yield load_model(build(item, batch_size=batch_size or 1), input_shapes=input_shapes or None,
                         name=item, ignore_unknown_inputs=len(names) > 1)


def model_options(fn: F) -> F:
    fn = click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=D,D,..",
                      help="Concrete shape of an input (repeatable).")(fn)
    fn = click.option("--batch-size", type=int, default=None,
                      help="Value of the symbolic batch dimension.")(fn)
    fn = click.option("--zoo", default=None, metavar="TASK|all",
                      help="Add the built-in zoo models of a task (or all).")(fn)
    return click.argument("models", nargs=-1, metavar="MODEL...")(fn)



def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int] | None = None) -> str:
    """A plain-text table; columns in ``right`` are right-aligned."""
    right = right or set()
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])
