"""Length-prefixed pickle messages over pipes, with a deadline on the reading side."""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any, BinaryIO

__all__ = ["WorkerDiedError", "WorkerTimeoutError", "read_message", "read_message_blocking", "write_message"]

_HEADER = struct.Struct(">Q")


class WorkerTimeoutError(Exception):
    """No complete message arrived before the deadline."""


class WorkerDiedError(Exception):
    """The pipe closed: the process on the other side is gone."""


def write_message(stream: BinaryIO, message: Any) -> None:
    """Write one pickled message with its 8-byte length prefix, and flush."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)  # apart: a model's bytes are not copied once more to join them
    stream.flush()


def read_message(fd: int, timeout: float | None) -> Any:
    """Read one message from the file descriptor ``fd`` within ``timeout`` seconds.

    Raises
    ------
    WorkerTimeoutError
        If the message is not complete in time.
    WorkerDiedError
        If the pipe reaches end of file first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    header = _read_exactly(fd, _HEADER.size, deadline)
    (size,) = _HEADER.unpack(header)
    return pickle.loads(_read_exactly(fd, size, deadline))


def read_message_blocking(stream: BinaryIO) -> Any:
    """Read one message from a blocking binary stream (the worker's stdin); None at end of file."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    """``size`` bytes from ``fd``, waiting with select until ``deadline`` (monotonic seconds)."""
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            raise WorkerTimeoutError()
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise WorkerDiedError()
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
