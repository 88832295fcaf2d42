"""Looking at a queue file from another process without writing to it.

A status page or a readiness check runs beside the senders that own the queue: it
must not create the file, switch its journal mode, take a lease or vacuum it, and it
must not wait long for their locks. :func:`read_stats` reads the backlog on a
read-only connection (SQLite ``mode=ro``); :func:`why_not_writable` says why a put
could not be written now (no directory, a damaged or foreign file, a full disk, no
permission), or ``None`` when it could.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from durable_queue import _inspect
from durable_queue._records import QueueStats
from durable_queue._space import RESERVE
from durable_queue._sqlite import _check_header, _check_identity
from durable_queue._sqlite_tx import free_bytes, mapped_errors
from replication import DurableQueueError

__all__ = ["read_stats", "why_not_writable"]


@dataclass(frozen=True)
class _Unopened:
    """What ``stats`` reports besides rows, for a file this process does not write."""

    path: Path
    max_messages: int | None = None
    max_bytes: int | None = None
    commits: int = 0


def read_stats(path: str | os.PathLike[str], *, busy_timeout: float = 1.0) -> QueueStats:
    """The backlog of the queue file at ``path``, read without writing anything.

    ``max_messages`` and ``max_bytes`` are ``None`` and ``commits`` 0: those belong to
    the handles that write it. The file is not modified; SQLite may leave an empty
    ``-wal`` and a ``-shm`` beside it (a WAL file is read through them), with its mode.

    Args:
        path: the queue file.
        busy_timeout: seconds to wait for a writer's lock.

    Raises:
        DurableQueueError: there is no file at ``path``, or it cannot be read.
        QueueCorrupt: the file is damaged or is not a geogateway queue.
    """
    file = Path(os.fspath(path))
    if not file.is_file():
        raise DurableQueueError(f"no queue file at {file}")
    _check_header(file)
    uri = f"{file.absolute().as_uri()}?mode=ro"
    with mapped_errors(file):
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None)
        try:
            if _check_identity(conn, file):
                # An empty file: no schema yet, nothing waits.
                return _inspect.empty_stats(_Unopened(file))
            conn.execute("BEGIN")  # one snapshot for all the counts
            return _inspect.stats(conn, _Unopened(file))
        finally:
            conn.close()


def why_not_writable(path: str | os.PathLike[str]) -> str | None:
    """Why a put to the queue file at ``path`` could not be written now, or ``None``.

    A missing file is writable when its directory is (the first put creates it). The
    file's header and identity are checked (a torn, truncated or foreign file is never
    written to), not every page: a damaged page deep in the file is found by the
    queue's own check before its first write other than a put.

    Args:
        path: the queue file.

    Returns:
        One line naming the file and what is wrong, or ``None``.
    """
    file = Path(os.fspath(path))
    parent = file.absolute().parent
    if not parent.is_dir():
        return f"the directory of queue file {file} does not exist ({parent})"
    if file.is_dir():
        return f"queue file {file} is a directory"
    if file.exists():
        try:
            read_stats(file)
        except DurableQueueError as exc:
            return str(exc)
        if not os.access(file, os.W_OK):
            return f"queue file {file} is not writable by this user"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the directory {parent} of queue file {file} is not writable by this user"
    free = free_bytes(file)
    if free < RESERVE:
        return (f"the disk of queue file {file} is full ({free:,} bytes free; a put leaves "
                f"{RESERVE:,} free for a replay)")
    return None
