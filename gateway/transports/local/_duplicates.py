"""Duplicate detection of a local namespace's queue or topic (Service Bus's
``RequiresDuplicateDetection``): a message whose MessageId the entity took within its
window is accepted and dropped, as Service Bus does.

Pure SQL over a connection in a write transaction, as in ``_local_queues``: the ids an
entity took are rows of ``seen_ids`` with when they were taken; those older than the
window are deleted as the entity takes more.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from gateway.transports.local._queues import Queued
from replication import Message

__all__ = ["unseen"]

#: Ids looked up per statement (SQLite's older builds take 999 variables at most).
_CHUNK = 500

def _id(item: Message | Queued) -> str:
    return item.message.message_id if isinstance(item, Queued) else item.message_id


def unseen(conn: sqlite3.Connection, entity: str, items: Sequence[Message | Queued],
           now: float, window: float) -> list[Message | Queued]:
    """The items whose MessageId ``entity`` did not take within ``window`` seconds (the
    first of those repeated within ``items``), recorded as taken at ``now``."""
    conn.execute("DELETE FROM seen_ids WHERE entity = ? AND taken <= ?", (entity, now - window))
    ids: list[str] = list(dict.fromkeys(_id(i) for i in items))
    seen: set[str] = set()
    for at in range(0, len(ids), _CHUNK):
        chunk = ids[at:at + _CHUNK]
        seen.update(row[0] for row in conn.execute(
            f"SELECT message_id FROM seen_ids WHERE entity = ? AND message_id IN "
            f"({', '.join('?' * len(chunk))})", (entity, *chunk)))
    out: list[Message | Queued] = []
    for item in items:
        mid = _id(item)
        if mid not in seen:
            seen.add(mid)
            out.append(item)
    conn.executemany("INSERT OR REPLACE INTO seen_ids (entity, message_id, taken) "
                     "VALUES (?, ?, ?)", [(entity, _id(i), now) for i in out])
    return out
