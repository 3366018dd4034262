"""Pieces shared by every CLI command group: error handling, model arguments, tables."""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from dlbricks import DlbricksError, InvalidArgumentError, ModelGraph, load_model
from dlbricks.generators import available_backends, get_backend
from dlbricks.model_zoo import build, list_models
from dlbricks.names import check_identifier, shown

__all__ = [
    "COUNT",
    "EXIT_INTERRUPTED",
    "FORMAT_BACKENDS",
    "BackendName",
    "DlbricksClickError",
    "DlbricksGroup",
    "FiniteFloat",
    "FiniteFloatRange",
    "backend_config",
    "backend_formats",
    "backend_option",
    "checked_names",
    "chosen_backend",
    "checked_system_id",
    "cli_advice",
    "failed_run_hint",
    "finite_floats",
    "format_table",
    "given_backend",
    "handle_errors",
    "infer_backend",
    "interrupted",
    "is_model_path",
    "iter_models",
    "model_format",
    "model_help",
    "model_options",
    "parse_input_shapes",
    "parse_shape_sweep",
    "sigint_watch",
]

F = TypeVar("F", bound=Callable[..., Any])


class DlbricksClickError(click.ClickException):
    """A one-line error with exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)


#: Exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class FiniteFloat(click.types.FloatParamType):
    """A float option that refuses ``nan`` and ``inf`` (which ``float()`` accepts) when it is parsed."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _finite(super().convert(value, param, ctx), self, param, ctx)


class FiniteFloatRange(click.FloatRange):
    """:class:`click.FloatRange` that refuses ``nan`` (which no bound stops) and ``inf``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _finite(super().convert(value, param, ctx), self, param, ctx)


def _finite(value: Any, kind: click.ParamType, param: click.Parameter | None, ctx: click.Context | None) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        kind.fail(f"{value} is not a finite number; give a number such as 0.01.", param, ctx)
    return value


#: The type of an option that counts what to show or do (``--top``): a positive int, since a
#: negative one would slice rows off the end.
COUNT = click.IntRange(min=1)


def finite_floats(command: click.Command) -> None:
    """Make every float option of ``command`` (and of its subcommands) refuse ``nan`` and ``inf`` at
    parsing, keeping its bounds: ``FLOAT`` becomes :class:`FiniteFloat`, a ``FloatRange``
    :class:`FiniteFloatRange`."""
    for param in command.params:
        kind = param.type
        if isinstance(kind, FiniteFloat | FiniteFloatRange):
            continue
        if isinstance(kind, click.FloatRange):
            param.type = FiniteFloatRange(kind.min, kind.max, kind.min_open, kind.max_open, kind.clamp)
        elif isinstance(kind, click.types.FloatParamType):
            param.type = FiniteFloat()
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            finite_floats(sub)


class DlbricksGroup(click.Group):
    """A click group whose commands exit 130 on Ctrl-C (click's own exit code is 1, "Aborted!"), and
    whose commands' float options refuse ``nan`` and ``inf`` when parsed (:func:`finite_floats`)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        finite_floats(cmd)
        super().add_command(cmd, name)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with sigint_watch() as seen, one_line_warnings():
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


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within the block, a warning shown is one line on stderr, ``Warning: ...``, in CLI syntax."""

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        text = str(message).strip().splitlines()
        click.echo(f"Warning: {cli_advice(text[0]) if text else category.__name__}", err=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


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
            raise DlbricksClickError(cli_advice(str(e).splitlines()[0]) if str(e) else type(e).__name__) from e
        except OSError as e:
            if e.errno != errno.ENAMETOOLONG:
                raise
            raise DlbricksClickError(f"the path {shown(str(e.filename))} is too long for this system "
                                     f"({e.strerror}); give a shorter path.") from e

    return wrapper  # type: ignore[return-value]


#: What to do about a MODEL argument that is neither a file nor a name a model can have.
MODEL_NAME_TODO = "give a model file, the name of a model stored in the database or a zoo model name"


def checked_names(values: Sequence[str], what: str, todo: str = MODEL_NAME_TODO) -> list[str]:
    """``values`` (model names, a suite's names, ids to look up), refused in one line where one is
    blank, holds a control character or is longer than a name may be (:func:`check_identifier`)."""
    return [check_identifier(value, what, todo) for value in values]


def checked_system_id(system_id: str | None) -> str | None:
    """``--system-id`` (or ``DLBRICKS_SYSTEM_ID``) as given, refused where it is blank, holds a
    control character or is too long: it is stored and printed as it is."""
    if system_id is None:
        return None
    return check_identifier(system_id, "--system-id (or DLBRICKS_SYSTEM_ID)",
                            "give a label, or unset it to use this machine's fingerprint")


_BOTH_HINTS = re.compile(r"input_shapes=\{'([^']+)': \(\.\.\.\)\} or --input-shape [^ ]+?=D,D,\.\.\.")
_SHAPES_HINT = re.compile(r"input_shapes=\{'([^']+)': \(([^)]*)\)\}")
_BATCH_HINT = re.compile(r"\bbatch_size=(\w+)")


_ON_MISSING_HINT = re.compile(r"on_missing='(\w+)'(?: or '(\w+)')?")


def cli_advice(message: str) -> str:
    """``message`` with the library's Python-syntax advice in CLI syntax: ``input_shapes={'x': (...)}``
    becomes ``--input-shape x=D,D,..``, ``batch_size=N`` becomes ``--batch-size N``,
    ``on_missing='predict' or 'measure'`` becomes ``--on-missing predict or measure``."""

    def shapes(m: re.Match[str]) -> str:
        dims = m.group(2).replace(" ", "") if m.lastindex == 2 else "..."
        return f"--input-shape {m.group(1)}=" + ("D,D,.." if dims in ("...", "") else dims)

    message = _BOTH_HINTS.sub(shapes, message)
    message = _SHAPES_HINT.sub(shapes, message)
    message = _BATCH_HINT.sub(r"--batch-size \1", message)
    message = _ON_MISSING_HINT.sub(lambda m: "--on-missing " + " or ".join(v for v in m.group(1, 2) if v), message)
    return re.sub(r"(?<![-\w])input_shapes\b", "--input-shape", message)


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


_BRACES = re.compile(r"\{([^{}]*)\}")


def parse_shape_sweep(batch_size: str | None, input_shapes: Sequence[str],
                      ) -> list[tuple[int | None, dict[str, tuple[int, ...]]]]:
    """Parse ``--batch-size`` and ``--input-shape`` options that may sweep one dimension.

    ``--batch-size 1,2,4,8`` sweeps the batch size; ``--input-shape input_ids=1,{64,128,256}`` sweeps
    the dimension in braces. Braces in several options (``input_ids`` and ``attention_mask``) move
    together, so they list as many values each. Returns one ``(batch_size, input_shapes)`` per point,
    in the order given: a single one where nothing sweeps.

    Raises
    ------
    InvalidArgumentError
        On bad syntax, a value given twice, or both options sweeping.
    """
    batches = _batch_sizes(batch_size)
    swept: dict[str, list[int]] = {}
    for value in input_shapes:
        groups = _BRACES.findall(value)
        if len(groups) > 1 or value.count("{") != len(groups) or value.count("}") != len(groups):
            raise InvalidArgumentError(f"--input-shape {value!r} is not NAME=D,D,.. with at most one {{D,D,..}} "
                                       f"group of values, e.g. --input-shape input_ids=1,{{64,128,256}}.")
        if groups:
            swept[value] = _sweep_values(f"--input-shape {value!r}", groups[0])
            try:
                parse_input_shapes([_BRACES.sub(str(swept[value][0]), value)])
            except InvalidArgumentError:
                raise InvalidArgumentError(f"--input-shape {value!r} is not NAME=D,D,.. with positive integers "
                                           f"and one {{D,D,..}} group, e.g. input_ids=1,{{64,128}}.") from None
    counts = sorted({len(v) for v in swept.values()})
    if len(counts) > 1:
        raise InvalidArgumentError(f"the {{..}} groups of --input-shape list {' and '.join(map(str, counts))} "
                                   "values; groups in several options move together, so give each as many.")
    if swept and len(batches) > 1:
        raise InvalidArgumentError("--batch-size and --input-shape {..} both sweep; sweep one dimension at a "
                                   "time (give the batch in --input-shape).")
    n = max(len(batches), *counts, 1)
    return [(batches[i if len(batches) > 1 else 0],
             parse_input_shapes([_BRACES.sub(str(swept[v][i]), v) if v in swept else v for v in input_shapes]))
            for i in range(n)]


def _batch_sizes(text: str | None) -> list[int | None]:
    """``--batch-size N`` or ``N,N,..`` as a list (``[None]`` if not given)."""
    if text is None:
        return [None]
    return list(_sweep_values(f"--batch-size {text!r}", text, example="--batch-size 1,2,4,8"))


def _sweep_values(what: str, text: str, example: str = "--input-shape input_ids=1,{64,128,256}") -> list[int]:
    """Comma-separated positive integers, none twice."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise InvalidArgumentError(f"{what} does not list positive integers separated by commas, e.g. {example}.")
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise InvalidArgumentError(f"{what} lists {twice} twice; give each value once.")
    return values


def iter_models(models: Sequence[str], zoo: str | None, batch_size: int | None,
                input_shapes: dict[str, tuple[int, ...]]) -> Iterator[ModelGraph]:
    """Load each MODEL (a path, or a zoo model name) and the models of ``--zoo TASK|all``."""
    names: list[str] = list(models)
    if zoo is not None:
        chosen = [m.name for m in list_models(None if zoo == "all" else zoo)]
        if not chosen:
            raise InvalidArgumentError(f"--zoo {zoo!r} selects no model; see 'dlbricks zoo list'.")
        names.extend(chosen)
    if not names:
        raise InvalidArgumentError("no model given; pass MODEL paths, zoo names or --zoo TASK|all.")
    for item in names:
        if is_model_path(item):
            graph = load_model(Path(item), input_shapes=input_shapes or None, batch_size=batch_size,
                               ignore_unknown_inputs=len(names) > 1)
            check_identifier(graph.name, "The model name", "rename the model file")  # stored and printed as it is
            yield graph
            continue
        check_identifier(item, "The model name", "give a model file or a zoo model name")
        yield load_model(build(item, batch_size=batch_size or 1), input_shapes=input_shapes or None,
                         name=item, ignore_unknown_inputs=len(names) > 1)


def is_model_path(item: str) -> bool:
    """Whether a MODEL argument names a file (one that exists, ends in .onnx or .json, or has a
    folder) rather than a stored or zoo model."""
    try:
        exists = Path(item).exists()
    except OSError:  # too long for a path: a name, refused as one
        exists = False
    return exists or item.lower().endswith((".onnx", ".json")) or "/" in item


def model_help(stored: bool = True) -> str:
    """What a MODEL argument may be, for the help of every command that takes one (``stored``: the
    command also finds models stored in its database by name)."""
    return ("MODEL is an ONNX file, an MXNet symbol file (NAME-symbol.json, with NAME-0000.params beside it), "
            + ("the name of a model stored in the database, " if stored else "")
            + "or a zoo model name (see 'dlbricks zoo list'). The runtime it runs in follows from its format "
              "(--backend to choose another).")


#: The runtime that runs each model format (``ModelSource.format``) unless --backend names another.
FORMAT_BACKENDS = {"onnx": "onnxruntime", "mxnet": "mxnet"}
#: Where the current command keeps --backend (or --framework) as given: ``(name, spelling)``.
_GIVEN_BACKEND = "dlbricks.backend"


def model_options(fn: F) -> F:
    fn = click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=D,D,..",
                      help="Concrete shape of an input (repeatable), e.g. data=1,3,224,224.")(fn)
    fn = click.option("--batch-size", type=int, default=None,
                      help="Value of the symbolic batch dimension.")(fn)
    fn = click.option("--zoo", default=None, metavar="TASK|all",
                      help="Add the built-in zoo models of a task (or all).")(fn)
    return click.argument("models", nargs=-1, metavar="MODEL...")(fn)


class BackendName(click.ParamType):
    """A registered backend's name (the registry is read when the option is parsed or shown, so a
    backend registered by a plugin is a choice too), or a ``module:attr`` import path of one."""

    name = "backend"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        names = available_backends()
        if value in names or (isinstance(value, str) and ":" in value):
            return value
        self.fail(f"{value!r} is not a registered backend; choose one of {', '.join(names)} or give a "
                  "'module:attr' path.", param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(available_backends()) + "]"


def _remember_backend(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Keep --backend (or --framework, its older spelling) as given, with the spelling used, for
    :func:`given_backend`; refuse both spellings naming different runtimes."""
    if value is None:
        return None
    spelling = param.opts[0]
    earlier = ctx.meta.get(_GIVEN_BACKEND)
    if earlier is not None and earlier[0] != value:
        raise click.BadParameter(f"{earlier[1]} {earlier[0]} and {spelling} {value} name different runtimes; "
                                 "give one.", ctx=ctx, param=param)
    ctx.meta[_GIVEN_BACKEND] = (value, spelling)
    return value


def backend_option(fn: F) -> F:
    """``--backend NAME`` (and ``--framework NAME``, its older spelling), default None: the runtime of
    the models' format (see :func:`infer_backend`). Read it with :func:`given_backend`."""
    fn = click.option("--framework", type=BackendName(), default=None, expose_value=False,
                      callback=_remember_backend, help="The older spelling of --backend.")(fn)
    return click.option("--backend", type=BackendName(), default=None, expose_value=False,
                        callback=_remember_backend,
                        help="The runtime the bricks run in: a registered backend or a 'module:attr' path. "
                             "Default: the models' own (mxnet for an MXNet symbol file, a gluon_ zoo model or "
                             "a stored MXNet model, else onnxruntime).")(fn)


def given_backend() -> tuple[str | None, str]:
    """The current command's --backend (or --framework) as given (None if neither was), and the
    spelling to name it by in messages."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_GIVEN_BACKEND) if ctx is not None else None
    return given if given is not None else (None, "--backend")


def model_format(model: ModelGraph | str) -> str | None:
    """The format of ``model``: a loaded graph's, or a name's where it tells (``*.json``: an MXNet
    symbol file; ``gluon_*``: a Gluon zoo model; ``*.onnx``); else None."""
    if isinstance(model, ModelGraph):
        return model.source.format
    name = str(model)
    if name.lower().endswith(".json") or name.startswith("gluon_"):
        return "mxnet"
    if name.lower().endswith(".onnx"):
        return "onnx"
    return None


def backend_formats(name: str) -> frozenset[str]:
    """The model formats that backend ``name`` runs: its ``model_formats`` where it declares them,
    else the formats whose default runtime it is (:data:`FORMAT_BACKENDS`), else ONNX (what the
    ``Backend`` protocol prepares)."""
    declared = getattr(get_backend(name), "model_formats", None)
    if declared is not None:
        return frozenset(declared)
    return frozenset({f for f, b in FORMAT_BACKENDS.items() if b == name} or {"onnx"})


def infer_backend(given: str | None, models: Mapping[str, str | None], option: str = "--backend") -> str:
    """The backend of a run over ``models`` (label -> :func:`model_format`): ``given`` (spelled
    ``option`` on the command line), checked to run every model's format, else the runtime of theirs.

    Models of unknown format (stored names) do not vote; with none that votes, onnxruntime.

    Raises
    ------
    InvalidArgumentError
        If the models are of different formats, or ``given`` does not run one's.
    """
    own: dict[str, str] = {}
    for label, fmt in models.items():
        if fmt is not None:
            own.setdefault(fmt, label)
    if given is not None:
        runs = backend_formats(given)
        other = next(((f, m) for f, m in own.items() if f not in runs), None)
        if other is not None:
            fmt, label = other
            raise InvalidArgumentError(f"{label} is an {fmt} model, which {option} {given} does not run. Use "
                                       f"{option} {FORMAT_BACKENDS.get(fmt, fmt)}, or leave {option} out.")
        return given
    if len(own) > 1:
        (f1, m1), (f2, m2) = list(own.items())[:2]
        raise InvalidArgumentError(f"{m1} is an {f1} model and {m2} an {f2} one; give the models of each format "
                                   f"in a run of their own.")
    return FORMAT_BACKENDS.get(next(iter(own), "onnx"), "onnxruntime")


def chosen_backend(models: Mapping[str, str | None]) -> str:
    """:func:`infer_backend` of the current command's --backend (or --framework) for ``models``
    (label -> :func:`model_format`)."""
    given, option = given_backend()
    return infer_backend(given, models, option)


def backend_config(name: str, *, threads: int | None = None, opt_level: str | None = None,
                   device: str | None = None) -> Any:
    """The configuration of backend ``name`` for a command's options (None: not given), built by the
    backend's ``config_from_options``; a backend without one takes none of them.

    Raises
    ------
    InvalidArgumentError
        If an option was given that the backend does not take.
    """
    backend = get_backend(name)
    from_options = getattr(backend, "config_from_options", None)
    if from_options is not None:
        return from_options(threads=threads, opt_level=opt_level, device=device)
    given = [f"{option} {value}" for option, value in (("--threads", threads), ("--opt-level", opt_level),
                                                       ("--device", device)) if value is not None]
    if given:
        raise InvalidArgumentError(f"backend {name!r} builds no configuration from options; leave out "
                                   f"{', '.join(given)} to measure under its default configuration.")
    return backend.default_config()


_OUT_OF_MEMORY = re.compile(r"MemoryError|bad_alloc|[Ff]ailed to allocate|[Cc]annot allocate memory|[Oo]ut of memory")


def failed_run_hint(first_error: str, backend: str) -> str:
    """What to try when every measurement of a run failed, the first with ``first_error``: a smaller
    shape where it ran out of memory, else whether the models run in ``backend``."""
    if _OUT_OF_MEMORY.search(first_error):
        return "the machine ran out of memory: give a smaller --batch-size or --input-shape"
    return (f"is {backend} the runtime these models run in? (--backend {backend}, or --framework {backend} as "
            "older scripts spell it, chooses it)")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int] | None = None) -> str:
    """A plain-text table; columns in ``right`` are right-aligned."""
    right = right or set()
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])
