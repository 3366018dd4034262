"""Temporary files, and errors that name the temporary folder rather than blame another file.

Where the temporary folder (``TMPDIR``) is full or cannot be written, what fails is a file that the
user never named; :func:`temp_dir_error` says which folder it is and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dlbricks.errors import TempDirError

__all__ = ["free_bytes", "in_temp_dir", "sqlite_temp_dir", "sqlite_temp_error", "sqlite_temp_is_culprit",
           "temp_dir_error", "temp_dir_is_full", "temporary_directory"]

#: Errors of a folder that is full or cannot be written.
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})
#: Free bytes below which a temporary folder counts as full.
FULL_BELOW_BYTES = 1 << 20


def temp_dir_error(reason: BaseException | str, folder: str | os.PathLike[str] | None = None) -> TempDirError:
    """The one-line error of a write into the temporary folder (default :func:`tempfile.gettempdir`)
    that failed: ``reason`` is the error, or what failed."""
    if isinstance(reason, OSError) and reason.strerror:
        text = reason.strerror
    else:
        text = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
    where = os.fspath(folder) if folder is not None else tempfile.gettempdir()
    return TempDirError(f"cannot write temporary files in {where} ({text}); free space there, or set TMPDIR "
                        "to a folder with room.")


def in_temp_dir(error: OSError, folder: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``error`` is a full or unwritable folder at or under ``folder`` (default: the
    temporary folder); an error that names no file (a failed ``write``) is taken to be there."""
    if error.errno not in _NO_ROOM:
        return False
    where = Path(folder if folder is not None else tempfile.gettempdir()).resolve()
    name = error.filename
    if name is None:
        return True
    path = Path(os.fsdecode(name)).resolve()
    return path == where or where in path.parents


def sqlite_temp_dir() -> str:
    """The folder SQLite writes its temporary files in (large sorts, statement journals): the first
    of ``SQLITE_TMPDIR``, ``TMPDIR``, /var/tmp, /usr/tmp and /tmp that is a writable folder, else ".",
    as SQLite's unix VFS picks it."""
    candidates = [os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp"]
    return next((c for c in candidates if c and os.path.isdir(c) and os.access(c, os.W_OK | os.X_OK)), ".")


def temp_dir_is_full(folder: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``folder`` (default :func:`sqlite_temp_dir`) has less than 1 MiB free: a write that
    failed for want of room (SQLite's "database or disk is full") may have failed there, not in the
    database's own folder."""
    try:
        return shutil.disk_usage(folder if folder is not None else sqlite_temp_dir()).free < FULL_BELOW_BYTES
    except OSError:
        return False


def free_bytes(folder: str | os.PathLike[str]) -> int | None:
    """Bytes free in the file system of ``folder``; None where it cannot be asked."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _device(folder: str | os.PathLike[str]) -> int | None:
    try:
        return os.stat(folder).st_dev
    except OSError:
        return None


def sqlite_temp_is_culprit(database: str | os.PathLike[str], readonly: bool) -> str | None:
    """The folder SQLite writes its temporary files in (:func:`sqlite_temp_dir`) where a write for
    ``database`` that failed for want of room ("database or disk is full", "disk I/O error") more
    likely failed there than beside the database: always for a database opened read-only (nothing
    of it is written; large sorts and statement journals go to the temporary folder), else where
    the two folders are on different file systems and the temporary one is full or has less room.
    None where the database's own folder is the likelier one."""
    temp = sqlite_temp_dir()
    if readonly:
        return temp
    folder = os.path.dirname(os.path.abspath(os.fspath(database)))
    device = _device(temp)
    if device is None or device == _device(folder):
        return None
    temp_free, db_free = free_bytes(temp), free_bytes(folder)
    if temp_free is None:
        return None
    if temp_free < FULL_BELOW_BYTES or (db_free is not None and temp_free < db_free):
        return temp
    return None


def sqlite_temp_error(database: str | os.PathLike[str], folder: str, detail: str) -> TempDirError:
    """The one-line error of SQLite's temporary files for ``database`` that could not be written in
    ``folder``: which variable chose the folder, its free space, and what to do."""
    variable = "SQLITE_TMPDIR" if os.environ.get("SQLITE_TMPDIR") == folder else "TMPDIR"
    free = free_bytes(folder)
    room = "" if free is None else f", {_size(free)} free there"
    return TempDirError(f"cannot write SQLite's temporary files for {os.fspath(database)} in the temporary folder "
                        f"{folder} ({detail}{room}); free space there, or set {variable} to a folder with room, "
                        "and run the same command again (the database is as it was before the command).")


def _size(n: int) -> str:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[Path]:
    """A fresh folder in the temporary folder, removed afterwards (:class:`tempfile.TemporaryDirectory`).

    Raises
    ------
    TempDirError
        Where the temporary folder is full or cannot be written (making the folder, or a file in
        it, fails with an ``OSError``), naming it and saying to free space or set ``TMPDIR``.
    """
    try:
        holder = tempfile.TemporaryDirectory(prefix=prefix)
    except OSError as e:
        raise temp_dir_error(e) from e
    with holder as name:
        try:
            yield Path(name)
        except OSError as e:
            if not in_temp_dir(e):
                raise
            raise temp_dir_error(e) from e
