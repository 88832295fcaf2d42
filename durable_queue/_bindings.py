"""Which namespaces the messages of each destination were buffered for.

A destination name such as ``*/orders`` or ``primary/orders`` says nothing about
*which* primary: a file written by a drill against one data directory could be
replayed into another, or into Azure. So the queue records, per destination, an
opaque owner text given by whoever buffers (the sender writes the namespaces'
kind and host or file, and the entity; never a key), and refuses to hand the
destination to a different owner while messages of the first one still wait.

Files written before this record existed have no ``bindings`` table; it is
created on the first ``bind``, so opening and inspecting such a file writes
nothing.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from replication import ConfigError

__all__ = ["BINDINGS_SCHEMA", "bind", "binding"]

BINDINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS bindings (
    destination TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    bound_at REAL NOT NULL
)
"""

_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'bindings'"


def binding(conn: sqlite3.Connection, destination: str) -> str | None:
    """The owner recorded for ``destination``, or ``None`` (none yet, or an old file)."""
    if conn.execute(_HAS_TABLE).fetchone() is None:
        return None
    row = conn.execute(
        "SELECT owner FROM bindings WHERE destination = ?", (destination,)
    ).fetchone()
    return None if row is None else str(row[0])


def bind(conn: sqlite3.Connection, path: Path, destination: str, owner: str) -> str | None:
    """Record ``owner`` for ``destination``; in a write transaction.

    A destination with no waiting messages is free to take a new owner.

    Raises:
        ConfigError: another owner is recorded and its messages still wait.

    Returns:
        The owner recorded before (``None``: none), so the caller can tell an old
        file's messages were claimed.
    """
    conn.execute(BINDINGS_SCHEMA)
    before = binding(conn, destination)
    if before == owner:
        return before
    if before is not None:
        waiting = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM messages WHERE destination = ? LIMIT 1)",
            (destination,),
        ).fetchone()[0]
        if waiting:
            raise ConfigError(
                f"queue file {path} holds messages for {destination!r} buffered for "
                f"{before}, not {owner}: replay it with the namespaces it was buffered "
                f"for (--primary/--secondary/--data-dir or --config), or use another "
                f"queue file"
            )
    conn.execute(
        "INSERT INTO bindings (destination, owner, bound_at) VALUES (?, ?, ?) "
        "ON CONFLICT (destination) DO UPDATE SET owner = excluded.owner, "
        "bound_at = excluded.bound_at",
        (destination, owner, time.time()),
    )
    return before
