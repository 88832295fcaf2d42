"""Sessions and deferred messages of the local namespace's queues: plain SQL.

A session-enabled queue hands out its messages a session at a time. A receiver first
takes the lock of one session (a named one, or the session of the oldest available
message whose session nobody holds: "next available"); the lock lasts the queue's
lock duration and is renewed explicitly. Only the holder receives that session's
messages, oldest first; each delivery is locked as long as the session's lock (a
renewal extends them all), and settles by its own lock token, as on Service Bus. When
a lock expires the session can be taken by another receiver: taking it releases the
deliveries of the lock before (they are delivered again, delivery count kept), and
the old holder's settlements and renewals fail as "lock lost". A session also keeps
a state (bytes) that its holder reads and writes.

A deferred message (``_local_queues.settle(..., "defer")``) is received only by its
sequence number (:func:`receive_deferred`), and then settles like any delivery.

Pure SQL over a connection that :class:`~._local_db.Database` has put in a
transaction, as in ``_local_queues``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from gateway.transports.base import ReceivedMessage, ReceiveMode
from gateway.transports.local import _queues as queues

__all__ = ["accept", "any_available", "get_state", "holds", "receive_deferred", "release",
           "renew", "set_state"]

# The session of the oldest message that is available, whose session nobody holds.
_NEXT_AVAILABLE = (
    "SELECT m.session_id FROM messages m WHERE m.entity = ? AND m.session_id IS NOT NULL "
    "AND m.deferred = 0 AND (m.visible_at IS NULL OR m.visible_at <= ?) "
    "AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.entity = m.entity "
    "AND s.session_id = m.session_id AND s.locked_until > ?) ORDER BY m.seq LIMIT 1"
)
_LOCK = ("INSERT INTO sessions (entity, session_id, lock_token, locked_until) "
         "VALUES (?, ?, ?, ?) ON CONFLICT (entity, session_id) DO UPDATE SET "
         "lock_token = excluded.lock_token, locked_until = excluded.locked_until")
_RELEASE_DELIVERIES = ("UPDATE messages SET lock_token = NULL, locked_until = NULL "
                       "WHERE entity = ? AND session_id = ? AND lock_token IS NOT NULL")


def any_available(conn: sqlite3.Connection, entity: str, now: float) -> bool:
    """Whether some session nobody holds has a message available."""
    return conn.execute(_NEXT_AVAILABLE, (entity, now, now)).fetchone() is not None


def accept(conn: sqlite3.Connection, entity: str, session_id: str | None, *, token: str,
           now: float, lock_duration: float) -> tuple[str, float] | None:
    """Lock ``session_id`` (``None``: the next available session) with ``token``.

    Returns:
        The session and its lock's expiry; ``None`` when another receiver holds that
        session, or (next available) no session has an available message.
    """
    if session_id is None:
        row = conn.execute(_NEXT_AVAILABLE, (entity, now, now)).fetchone()
        if row is None:
            return None
        session_id = str(row[0])
    else:
        row = conn.execute("SELECT locked_until FROM sessions WHERE entity = ? AND "
                           "session_id = ?", (entity, session_id)).fetchone()
        if row is not None and row[0] is not None and row[0] > now:
            return None
    until = now + lock_duration
    conn.execute(_LOCK, (entity, session_id, token, until))
    # What an earlier holder received and never settled is delivered again.
    conn.execute(_RELEASE_DELIVERIES, (entity, session_id))
    return session_id, until


def holds(conn: sqlite3.Connection, entity: str, session_id: str, token: str,
          now: float) -> float | None:
    """The expiry of ``token``'s lock on the session; ``None`` when it is lost."""
    row = conn.execute("SELECT lock_token, locked_until FROM sessions WHERE entity = ? AND "
                       "session_id = ?", (entity, session_id)).fetchone()
    if row is None or row[0] != token or row[1] is None or row[1] <= now:
        return None
    return float(row[1])


def renew(conn: sqlite3.Connection, entity: str, session_id: str, token: str, *,
          now: float, lock_duration: float) -> float | None:
    """Extend ``token``'s lock (and its deliveries' locks); ``None`` when it is lost."""
    if holds(conn, entity, session_id, token, now) is None:
        return None
    until = now + lock_duration
    conn.execute("UPDATE sessions SET locked_until = ? WHERE entity = ? AND session_id = ?",
                 (until, entity, session_id))
    conn.execute("UPDATE messages SET locked_until = ? WHERE entity = ? AND session_id = ? "
                 "AND lock_token IS NOT NULL", (until, entity, session_id))
    return until


def release(conn: sqlite3.Connection, entity: str, session_id: str, token: str,
            now: float) -> None:
    """Give up ``token``'s lock (if it still holds); its unsettled deliveries come back."""
    if holds(conn, entity, session_id, token, now) is None:
        return
    conn.execute("UPDATE sessions SET lock_token = NULL, locked_until = NULL "
                 "WHERE entity = ? AND session_id = ?", (entity, session_id))
    conn.execute(_RELEASE_DELIVERIES, (entity, session_id))


def get_state(conn: sqlite3.Connection, entity: str, session_id: str) -> bytes | None:
    row = conn.execute("SELECT state FROM sessions WHERE entity = ? AND session_id = ?",
                       (entity, session_id)).fetchone()
    return None if row is None or row[0] is None else bytes(row[0])


def set_state(conn: sqlite3.Connection, entity: str, session_id: str,
              state: bytes | None) -> None:
    conn.execute("UPDATE sessions SET state = ? WHERE entity = ? AND session_id = ?",
                 (state, entity, session_id))


def receive_deferred(conn: sqlite3.Connection, entity: str, sequence_numbers: Sequence[int],
                     *, namespace: str, mode: ReceiveMode, now: float, locked_until: float,
                     session_id: str | None = None
                     ) -> tuple[list[tuple[ReceivedMessage, bytes | None]], list[int]]:
    """Receive deferred messages of ``entity`` (of one session, when given) by sequence number.

    Peek-lock locks each until ``locked_until`` (delivery count + 1); receive-and-delete
    deletes it. All or none: when a number names no deferred message that is free
    (unknown, not deferred, locked, of another session), nothing is received.

    Returns:
        The messages in the order asked for, and the numbers not found.
    """
    wanted = list(dict.fromkeys(int(s) for s in sequence_numbers))
    if not wanted:
        return [], []
    marks = ", ".join("?" * len(wanted))
    where, args = ("AND session_id = ? ", (session_id,)) if session_id is not None else ("", ())
    rows: dict[int, Any] = {row[0]: row for row in conn.execute(
        f"SELECT {queues.COLUMNS} FROM messages WHERE entity = ? {where}AND deferred = 1 "
        f"AND (locked_until IS NULL OR locked_until <= ?) AND {queues.NUMBER} IN ({marks})",
        (entity, *args, now, *wanted))}
    missing = [seq for seq in wanted if seq not in rows]
    if missing:
        return [], missing
    peek = mode is ReceiveMode.PEEK_LOCK
    out = [queues.received(rows[seq], namespace=namespace, entity=entity,
                           lock_token=queues.new_lock_token() if peek else None,
                           delivery_count=rows[seq][6] + 1,
                           locked_until=locked_until if peek else None) for seq in wanted]
    if peek:
        conn.executemany(
            "UPDATE messages SET delivery_count = ?, lock_token = ?, locked_until = ? "
            "WHERE seq = ?",
            [(r.delivery_count, r.lock_token, r.locked_until, rows[r.sequence_number][-1])
             for r, _ in out])
    else:
        conn.executemany("DELETE FROM messages WHERE seq = ?", [(rows[n][-1],) for n in wanted])
    return out, []
