"""Read-only views of a queue file: stats and JSON-lines export (through sqlite-utils).

These run rarely (the CLI, dashboards), so they favour clarity over speed and use
sqlite-utils' row dictionaries; the dictionaries never leave this module.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any, Protocol, TextIO

import sqlite_utils

from durable_queue._bindings import binding
from durable_queue._records import DestinationStats, QueueStats
from durable_queue._rows import split_properties
from durable_queue._sqlite import file_bytes

__all__ = ["Inspected", "empty_stats", "export", "stats"]


class Inspected(Protocol):
    """What ``stats`` reports of a queue besides its rows: its file, caps and commits.

    ``DurableQueue`` has these; naming them here keeps this module below the queue.
    """

    @property
    def path(self) -> Path: ...

    @property
    def max_messages(self) -> int | None: ...

    @property
    def max_bytes(self) -> int | None: ...

    @property
    def commits(self) -> int: ...

_PER_DESTINATION = """
SELECT destination, count(*) AS count, sum(size) AS bytes, min(enqueued_at) AS oldest,
       0 AS dead
FROM messages GROUP BY destination
UNION ALL
SELECT destination, 0, 0, NULL, count(*) FROM dead_letters GROUP BY destination
"""

_EXPORT_COLUMNS = (
    "id, destination, message_id, partition_key, properties, body, enqueued_at, attempts"
)


def _database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    # Wrap the queue's own connection; no plugins, and leave its pragmas alone.
    return sqlite_utils.Database(conn, execute_plugins=False, recursive_triggers=False)


def stats(conn: sqlite3.Connection, queue: Inspected) -> QueueStats:
    """Per-destination and total counts of the queue behind ``conn``."""
    db = _database(conn)
    merged: dict[str, dict[str, Any]] = {}
    for row in db.query(_PER_DESTINATION):
        entry = merged.setdefault(
            row["destination"], {"count": 0, "bytes": 0, "oldest": None, "dead": 0}
        )
        entry["count"] += row["count"]
        entry["bytes"] += row["bytes"] or 0
        entry["dead"] += row["dead"]
        if row["oldest"] is not None:
            entry["oldest"] = row["oldest"]
    destinations = tuple(
        DestinationStats(
            destination=name,
            count=e["count"],
            bytes=e["bytes"],
            oldest_enqueued_at=e["oldest"],
            dead_letters=e["dead"],
            owner=binding(conn, name),
        )
        for name, e in sorted(merged.items())
    )
    return QueueStats(
        path=str(queue.path),
        destinations=destinations,
        count=sum(d.count for d in destinations),
        bytes=sum(d.bytes for d in destinations),
        dead_letters=sum(d.dead_letters for d in destinations),
        max_messages=queue.max_messages,
        max_bytes=queue.max_bytes,
        file_bytes=file_bytes(queue.path),
        commits=queue.commits,
    )


def empty_stats(queue: Inspected) -> QueueStats:
    """The stats of a queue file that has no schema yet: nothing waits."""
    return QueueStats(
        path=str(queue.path), destinations=(), count=0, bytes=0, dead_letters=0,
        max_messages=queue.max_messages, max_bytes=queue.max_bytes,
        file_bytes=file_bytes(queue.path), commits=queue.commits,
    )


def _body_fields(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8"), "body_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "body_encoding": "base64"}


def _line(row: dict[str, Any], *, dead: bool) -> str:
    props, session = split_properties(row["properties"])
    record = {
        "id": row["id"],
        "destination": row["destination"],
        "message_id": row["message_id"],
        "partition_key": row["partition_key"],
        "properties": props,
        **({"session_id": session} if session is not None else {}),
        "enqueued_at": row["enqueued_at"],
        "attempts": row["attempts"],
        **_body_fields(row["body"]),
        "dead_letter": dead,
    }
    if dead:
        record["reason"] = row["reason"]
        record["dead_lettered_at"] = row["dead_lettered_at"]
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"


def export(
    conn: sqlite3.Connection,
    fp: TextIO,
    destination: str | None,
    *,
    include_dead_letters: bool,
) -> int:
    """Write waiting (and optionally dead-lettered) messages as JSON lines."""
    db = _database(conn)
    where = "" if destination is None else "WHERE destination = ?"
    params = () if destination is None else (destination,)
    count = 0
    for row in db.query(f"SELECT {_EXPORT_COLUMNS} FROM messages {where} ORDER BY id", params):
        fp.write(_line(row, dead=False))
        count += 1
    if include_dead_letters:
        sql = (
            f"SELECT {_EXPORT_COLUMNS}, reason, dead_lettered_at FROM dead_letters "
            f"{where} ORDER BY id"
        )
        for row in db.query(sql, params):
            fp.write(_line(row, dead=True))
            count += 1
    return count
