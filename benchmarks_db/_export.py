"""Writing query results as CSV or JSON (no SQL here: rows come from :mod:`._sql`)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from dlbricks._errors import InvalidArgumentError

__all__ = ["FORMATS", "JSON_COLUMNS", "write_rows", "check_output"]

FORMATS = ("csv", "json")
#: Columns holding JSON text; the JSON export nests them as values instead of strings.
JSON_COLUMNS = frozenset({"samples", "budget", "details", "options", "op_types", "inputs", "outputs",
                          "constants", "attributes", "source", "nodes"})


@contextlib.contextmanager
def _stream(out: Any) -> Iterator[IO[str]]:
    """A text stream as given, or a temporary file beside the path ``out`` that is renamed onto it
    once complete: an interrupted export leaves no half-written file."""
    if hasattr(out, "write"):
        yield out
        return
    path = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise InvalidArgumentError(f"Cannot write {out}: {e.strerror}; choose a writable path.") from e
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # the permissions a plain open() would give
    try:
        with open(fd, "w", newline="", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    except OSError as e:
        raise InvalidArgumentError(f"Cannot write {out}: {e.strerror}; choose a writable path.") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def check_output(out: str | os.PathLike[str], databases: Sequence[str], *, overwrite: bool) -> None:
    """Refuse an output path that is one of ``databases`` (or their journals), symlinks resolved, or
    that exists when ``overwrite`` is False."""
    target = os.path.realpath(os.fspath(out))
    for db in databases:
        if db == ":memory:":
            continue
        for suffix in ("", "-wal", "-shm", "-journal"):
            if target == os.path.realpath(os.fspath(db) + suffix):
                raise InvalidArgumentError(f"The output {out} is the database {db}{suffix} itself; choose "
                                           f"another output file.")
    if os.path.isdir(target):
        raise InvalidArgumentError(f"The output {out} is a folder; give a file path.")
    if os.path.lexists(out) and not overwrite:
        raise InvalidArgumentError(f"The output {out} exists; choose a new file, or pass --force "
                                   f"(overwrite=True) to replace it.")


def write_rows(out: Any, fmt: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Write ``rows`` to ``out`` (a path or a text stream) as CSV with a header, or as a JSON array
    of objects; return the number of rows."""
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"'fmt' must be one of {FORMATS}. Got {fmt!r} instead.")
    count = 0
    with _stream(out) as f:
        if fmt == "csv":
            writer = csv.writer(f)
            writer.writerow(columns)
            for row in rows:
                writer.writerow(row)
                count += 1
            return count
        f.write("[")
        for row in rows:
            obj = {c: json.loads(v) if c in JSON_COLUMNS and isinstance(v, str) else v
                   for c, v in zip(columns, row, strict=True)}
            f.write(("\n" if count == 0 else ",\n") + json.dumps(obj))
            count += 1
        f.write("\n]\n" if count else "]\n")
    return count
