"""Output files: query results written as CSV or JSON (no SQL here: rows come from :mod:`._sql`),
the checks that an output never replaces a database, and the scratch files a merge builds."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import socket
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from dlbricks import InvalidArgumentError

from ._rows import pid_alive

__all__ = ["FORMATS", "JSON_COLUMNS", "write_rows", "check_output", "same_file", "is_sqlite_file",
           "scratch_path", "remove_stale_scratch"]

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


#: The first bytes of a SQLite database, of its write-ahead log (two byte orders) and of its rollback journal.
SQLITE_MAGICS = (b"SQLite format 3\x00", bytes.fromhex("377f0682"), bytes.fromhex("377f0683"),
                 bytes.fromhex("d9d505f920a163d7"))
#: This machine's name as it appears in a scratch file's name.
_HOST = re.sub(r"[^A-Za-z0-9-]", "_", socket.gethostname())


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same path once symlinks are resolved, or (hard links,
    bind mounts) the same device and inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file that begins as a SQLite database, WAL or journal does."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise InvalidArgumentError(f"Cannot read {path} ({e.strerror}) to check that it is not a database; "
                                   f"choose another output file.") from e
    return head.startswith(SQLITE_MAGICS)


def check_output(out: str | os.PathLike[str], databases: Sequence[str], *, overwrite: bool,
                 into_database: bool = False) -> None:
    """Refuse an output path that is one of ``databases`` (or their journals), as a path, a symlink
    or a hard link; that exists when ``overwrite`` is False; or, unless the output is itself a
    database merged into (``into_database``), that is a SQLite file, whatever ``overwrite`` says."""
    target = os.path.realpath(os.fspath(out))
    for db in databases:
        if db == ":memory:":
            continue
        for suffix in ("", "-wal", "-shm", "-journal"):
            if same_file(out, os.fspath(db) + suffix):
                raise InvalidArgumentError(f"The output {out} is the database {db}{suffix} itself; choose "
                                           f"another output file.")
    if os.path.isdir(target):
        raise InvalidArgumentError(f"The output {out} is a folder; give a file path.")
    if not into_database and is_sqlite_file(out):
        raise InvalidArgumentError(f"The output {out} exists and is a SQLite database; an export never replaces a "
                                   f"database, even with --force: choose another output file.")
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


def scratch_path(out: str | os.PathLike[str]) -> str:
    """A new file name beside ``out`` (naming this host and process) for building it before it is
    renamed into place."""
    folder, name = os.path.split(os.path.abspath(out))
    return os.path.join(folder, f".{name}.{_HOST}.{os.getpid()}.partial")


def remove_stale_scratch(out: str | os.PathLike[str]) -> list[str]:
    """Delete the scratch files of ``out`` (with their ``-wal``, ``-shm`` and ``-journal``) that a
    process of this host left when it was killed: those whose process is gone. A scratch file of a
    running process, or of another host, is kept. Returns the names deleted."""
    folder, name = os.path.split(os.path.abspath(out))
    pattern = re.compile(rf"\.{re.escape(name)}\.(?:(?P<host>.+)\.)?(?P<pid>\d{{1,9}})\.partial(?:-wal|-shm|-journal)?")
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = pattern.fullmatch(entry)
        if match is None or match["host"] not in (None, _HOST) or pid_alive(int(match["pid"])):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, entry))
            removed.append(entry)
    return removed
