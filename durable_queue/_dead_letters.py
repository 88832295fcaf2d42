"""The dead-letter table: messages a namespace rejected for good, kept with the reason."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from durable_queue._records import DeadLetteredMessage
from durable_queue._rows import COLUMNS, dead_from_row, message_from_row
from durable_queue._store import Store
from replication import QueueFull

__all__ = ["listing", "move", "requeue"]

_SELECT = f"SELECT {COLUMNS}, attempts, size, reason, dead_lettered_at FROM dead_letters"
# The failed attempt that got it rejected counts too.
_COPY = f"""
INSERT INTO dead_letters ({COLUMNS}, attempts, size, reason, dead_lettered_at)
SELECT {COLUMNS}, attempts + 1, size, ?, ? FROM messages WHERE id = ?
"""


def move(conn: sqlite3.Connection, store: Store, row_id: int, reason: str) -> None:
    """Move waiting message ``row_id`` to the dead letters; in a write transaction.

    Nothing happens when it is no longer waiting.
    """
    conn.execute(_COPY, (reason, time.time(), row_id))
    store.remove(conn, "WHERE id = ?", (row_id,))


def listing(
    conn: sqlite3.Connection, where: str, params: Sequence[str], limit: int
) -> list[DeadLetteredMessage]:
    """Dead letters matching ``where``, oldest first, at most ``limit``."""
    sql = f"{_SELECT} {where} ORDER BY id LIMIT ?"
    return [dead_from_row(r) for r in conn.execute(sql, (*params, limit))]


def requeue(conn: sqlite3.Connection, store: Store, where: str, params: Sequence[str]) -> int:
    """Move dead letters matching ``where`` back to the tail of their destination, all
    or none; in a write transaction.

    Raises:
        QueueFull: they would not all fit.

    Returns:
        How many were moved.
    """
    rows = conn.execute(f"{_SELECT} {where} ORDER BY id", params).fetchall()
    results, _ = store.insert(conn, [(r[1], message_from_row(r[2:6])) for r in rows])
    for result in results:
        if isinstance(result, QueueFull):
            raise result
    conn.executemany("DELETE FROM dead_letters WHERE id = ?", [(r[0],) for r in rows])
    return len(rows)
