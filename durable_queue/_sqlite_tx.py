"""Writing to SQLite safely: one transaction at a time, retried while the file is busy,
with sqlite3's errors mapped onto the project's tree (busy, or a corrupt file)."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import tenacity

from replication import DurableQueueError, QueueCorrupt, QueueFull

__all__ = [
    "busy_retrying",
    "corrupt_message",
    "disk_full_message",
    "free_bytes",
    "is_busy",
    "is_corrupt",
    "is_full",
    "mapped_errors",
    "transaction",
    "translate",
]

T = TypeVar("T")

_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_FULL = 13  # SQLITE_FULL: SQLite's answer to ENOSPC


def corrupt_message(path: Path, detail: str, *, modified: bool = False) -> str:
    """The one-line ``QueueCorrupt`` text: what is wrong, what was done, what to do.

    Args:
        modified: this handle wrote to the file before the damage was found (it
            removed delivered messages, say); else the file was not modified.
    """
    done = (
        "nothing was written to it once the damage was found" if modified
        else "it was not modified"
    )
    return (
        f"queue file {path} is corrupt ({detail}); {done}: copy the messages that can "
        f"still be read into a new queue file with `geogateway queue salvage -q {path} "
        f"-o NEW`, replay NEW, and move {path} aside"
    )


def disk_full_message(path: Path, needed: int | None = None) -> str:
    """The one-line ``QueueFull`` text for a full disk: how much is free, how much to free."""
    free = free_bytes(path)
    want = "free space there"
    if needed is not None and needed > free:
        want = f"free at least {needed - free:,} more bytes there"
    return (
        f"queue file {path}: the disk is full ({free:,} bytes free in "
        f"{path.absolute().parent}); the write was not stored: {want}, or move the queue "
        f"to a larger disk"
    )


def free_bytes(path: Path) -> int:
    """Bytes free for this user on the file system holding ``path`` (0 when unknown)."""
    try:
        return shutil.disk_usage(path.absolute().parent).free
    except OSError:
        return 0


def _code(exc: sqlite3.Error) -> int | None:
    # sqlite_errorcode exists from Python 3.11; 3.10 falls back to the text below.
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (busy), worth retrying."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = _code(exc)
    if code is not None:
        return code in _BUSY_CODES
    text = str(exc)
    return "locked" in text or "busy" in text


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database or disk is full"."""
    if not isinstance(exc, sqlite3.Error):
        return False
    code = _code(exc)
    if code is not None:
        return code == _FULL
    return "is full" in str(exc)


def is_corrupt(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's "database disk image is malformed" (or not a database)."""
    code = _code(exc)
    if code is not None:
        return code in _CORRUPT_CODES
    text = str(exc)
    return "malformed" in text or "not a database" in text


def translate(
    exc: sqlite3.Error, path: Path, *, modified: bool = False, needed: int | None = None
) -> DurableQueueError:
    """Map a sqlite3 error onto the project's error tree.

    Args:
        modified: for a damaged file, whether this handle wrote to it before.
        needed: for a full disk, the free bytes the failed write needed, if known.
    """
    if is_corrupt(exc):
        return QueueCorrupt(corrupt_message(path, str(exc), modified=modified))
    if is_full(exc):
        return QueueFull(disk_full_message(path, needed))
    if is_busy(exc):
        return DurableQueueError(
            f"queue file {path} stayed locked by another process past the busy timeout; "
            f"retry, or raise busy_timeout"
        )
    return DurableQueueError(f"queue file {path}: {exc}")


@contextlib.contextmanager
def mapped_errors(path: Path) -> Iterator[None]:
    """Re-raise any sqlite3 error inside the block as a ``DurableQueueError``."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translate(exc, path) from exc


def transaction(
    conn: sqlite3.Connection,
    work: Callable[[sqlite3.Connection], T],
    *,
    begin: str = "BEGIN IMMEDIATE",
) -> T:
    """Run ``work`` in one transaction on an autocommit connection; roll back on error.

    The project's SQLite stores (this queue, the dedup store, the local namespaces)
    all write through this and :func:`busy_retrying`.
    """
    conn.execute(begin)
    try:
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def busy_retrying(timeout: float) -> tenacity.Retrying:
    """Retry on SQLITE_BUSY until ``timeout`` seconds have passed.

    ``busy_timeout`` already makes SQLite wait; this covers the cases where it
    returns SQLITE_BUSY at once (WAL recovery, a racing schema creation).
    """
    return tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_random_exponential(multiplier=0.005, max=0.25),
        retry=tenacity.retry_if_exception(is_busy),
        reraise=True,
    )
