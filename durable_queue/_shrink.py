"""Giving the space of drained messages back to the file system.

SQLite keeps the pages of deleted rows in the file for reuse: without this, a
queue that held a million messages during an outage stays that large (1.39 GB
measured) long after it was drained. New files are created with
``auto_vacuum = INCREMENTAL``; after a delete, when the queue is empty (and at
least ``MIN_FREE_BYTES_EMPTY`` is free) or the file is mostly free (``MOSTLY_FREE``
of its pages, at least ``MIN_FREE_BYTES``), ``PRAGMA incremental_vacuum`` moves
the live pages down and truncates the file. A file created before (``auto_vacuum = NONE``) cannot
vacuum incrementally until a full ``VACUUM`` converts it; that rewrites every
page, so it is done only when no message waits (the file is small then).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

__all__ = ["MIN_FREE_BYTES", "MIN_FREE_BYTES_EMPTY", "MOSTLY_FREE", "shrink"]

# Below this much free space a file is left alone: a queue in steady use reuses it.
# An empty queue is shrunk from less: there is nothing to move, only to cut off.
MIN_FREE_BYTES = 4 << 20
MIN_FREE_BYTES_EMPTY = 1 << 20
# "Mostly free": the share of the file's pages that are free. Draining a backlog
# FIFO frees pages at the front; vacuuming at 3/4 free moves the last quarter down,
# so over a whole drain at most a third of the messages' pages are moved once.
MOSTLY_FREE = 0.75

_INCREMENTAL = 2


def _pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def shrink(conn: sqlite3.Connection, *, empty: Callable[[], bool], force: bool = False) -> bool:
    """Truncate the free pages off the file when there are enough of them.

    Args:
        conn: an autocommit connection, not in a transaction.
        empty: whether no message waits (asked only when it matters).
        force: shrink whenever there is any free page (``DurableQueue.shrink``).

    Returns:
        Whether the file was vacuumed.
    """
    free = _pragma(conn, "freelist_count")
    if free == 0:
        return False
    if not force:
        free_bytes = free * _pragma(conn, "page_size")
        if free_bytes < MIN_FREE_BYTES_EMPTY:
            return False
        mostly = free_bytes >= MIN_FREE_BYTES and free >= _pragma(conn, "page_count") * MOSTLY_FREE
        if not mostly and not empty():
            return False
    if _pragma(conn, "auto_vacuum") == _INCREMENTAL:
        # executescript steps the pragma to the end; execute() frees one page.
        conn.executescript("PRAGMA incremental_vacuum;")
    elif empty():
        conn.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
        conn.execute("VACUUM")
    else:
        return False
    # In WAL mode the file is truncated when the WAL is checkpointed.
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return True
