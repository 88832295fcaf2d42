"""Leases on draining a destination: at most one replayer per destination at a time."""

from __future__ import annotations

import sqlite3

__all__ = ["acquire", "holder", "release"]

# Take a free or expired lease, or renew one's own; anyone else's live lease stays.
_ACQUIRE = """
INSERT INTO leases (destination, owner, expires_at) VALUES (?, ?, ?)
ON CONFLICT (destination) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE leases.owner = excluded.owner OR leases.expires_at <= ?
"""


def acquire(
    conn: sqlite3.Connection, destination: str, owner: str, *, until: float, now: float
) -> bool:
    """Take or renew the lease until ``until``; in a write transaction. Whether it is held."""
    return bool(conn.execute(_ACQUIRE, (destination, owner, until, now)).rowcount)


def release(conn: sqlite3.Connection, destination: str, owner: str) -> None:
    """Drop the lease if ``owner`` holds it; in a write transaction."""
    conn.execute("DELETE FROM leases WHERE destination = ? AND owner = ?", (destination, owner))


def holder(conn: sqlite3.Connection, destination: str, *, now: float) -> str | None:
    """Who holds an unexpired lease on ``destination`` at ``now``, if anyone."""
    sql = "SELECT owner FROM leases WHERE destination = ? AND expires_at > ?"
    row = conn.execute(sql, (destination, now)).fetchone()
    return None if row is None else str(row[0])
