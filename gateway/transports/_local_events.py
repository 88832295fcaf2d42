"""Partitioned entities of the local namespace: append, read from a position, fencing.

Pure SQL over a connection that :class:`~._local_db.Database` has put in a
transaction. Each partition keeps ``next_seq`` (sequence numbers 0, 1, 2, ...)
and ``next_offset`` (the byte position of the next event: each event advances
it by its body size, at least 1, so offsets are strictly increasing).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from replication import Message, OwnershipLost

from .base import EventPosition, PartitionEvent

__all__ = [
    "append",
    "check_owner",
    "claim_owner",
    "latest_sequence",
    "partition_for",
    "select",
]

_INSERT = (
    'INSERT INTO events (entity, partition, seq, "offset", message_id, body, '
    "partition_key, properties, enqueued_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_COLUMNS = 'seq, "offset", message_id, body, partition_key, properties, enqueued_time'


def partition_for(partition_key: str, partitions: int) -> int:
    """The partition of a key: stable across processes and runs (not ``hash()``)."""
    digest = hashlib.blake2b(partition_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


def append(
    conn: sqlite3.Connection,
    entity: str,
    partitions: int,
    messages: Sequence[Message],
    now: float,
    next_round_robin: Callable[[], int],
) -> None:
    """Append ``messages`` to their partitions (by key, else round robin)."""
    state: dict[int, list[int]] = {}
    rows: list[tuple[Any, ...]] = []
    for m in messages:
        if m.partition_key is not None:
            p = partition_for(m.partition_key, partitions)
        else:
            p = next_round_robin() % partitions
        st = state.get(p)
        if st is None:
            row = conn.execute(
                "SELECT next_seq, next_offset FROM partitions WHERE entity = ? AND partition = ?",
                (entity, p),
            ).fetchone()
            st = state[p] = [row[0], row[1]]
        props = json.dumps(dict(m.properties)) if m.properties else None
        rows.append((entity, p, st[0], st[1], m.message_id, m.body, m.partition_key, props, now))
        st[0] += 1
        st[1] += max(1, len(m.body))
    conn.executemany(_INSERT, rows)
    conn.executemany(
        "UPDATE partitions SET next_seq = ?, next_offset = ? WHERE entity = ? AND partition = ?",
        [(s, o, entity, p) for p, (s, o) in state.items()],
    )


def latest_sequence(conn: sqlite3.Connection, entity: str, partition: int) -> int:
    """The sequence number the next event of the partition will get."""
    row = conn.execute(
        "SELECT next_seq FROM partitions WHERE entity = ? AND partition = ?", (entity, partition)
    ).fetchone()
    return int(row[0]) if row else 0


def _where(position: EventPosition) -> tuple[str, float]:
    op = ">=" if position.inclusive else ">"
    if position.offset is not None:
        return f'"offset" {op} ?', position.offset
    if position.enqueued_time is not None:
        # Enqueued times are compared to the millisecond, the precision Event Hubs (and
        # the emulator) report them in: starting from an event's own reported time,
        # inclusive, returns that event; exclusive, what was enqueued after that ms.
        return f"round(enqueued_time * 1000) {op} ?", round(position.enqueued_time * 1000)
    if position.sequence_number is not None:
        return f"seq {op} ?", position.sequence_number
    # latest is resolved to a sequence number before the first read (see
    # LocalTransport.read_partition); an empty position means "from the start".
    return "seq > ?", -1


def select(
    conn: sqlite3.Connection,
    *,
    namespace: str,
    entity: str,
    partition: int,
    position: EventPosition,
    max_events: int,
) -> list[PartitionEvent]:
    """Up to ``max_events`` events of the partition after ``position``, in order."""
    where, value = _where(position)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM events WHERE entity = ? AND partition = ? AND {where} "
        "ORDER BY seq LIMIT ?",
        (entity, partition, value, max_events),
    ).fetchall()
    pid = str(partition)
    return [
        PartitionEvent(
            message=Message(
                body=body,
                message_id=message_id,
                partition_key=key,
                properties=json.loads(props) if props else {},
            ),
            namespace=namespace,
            entity=entity,
            partition_id=pid,
            sequence_number=seq,
            offset=offset,
            enqueued_time=enqueued,
        )
        for seq, offset, message_id, body, key, props, enqueued in rows
    ]


def check_owner(
    conn: sqlite3.Connection, entity: str, consumer_group: str, partition: int, level: int
) -> bool:
    """Whether ``level`` is already the partition's recorded owner level.

    Raises:
        OwnershipLost: a reader with a higher owner level took the partition.
    """
    row = conn.execute(
        "SELECT owner_level FROM readers WHERE entity = ? AND consumer_group = ? "
        "AND partition = ?",
        (entity, consumer_group, partition),
    ).fetchone()
    if row is not None and level < row[0]:
        raise OwnershipLost(
            f"partition {partition} of {entity!r} (consumer group {consumer_group!r}) "
            f"is read with owner level {row[0]}, higher than this reader's {level}: "
            "stop reading it"
        )
    return row is not None and row[0] == level


def claim_owner(
    conn: sqlite3.Connection, entity: str, consumer_group: str, partition: int, level: int
) -> None:
    """Record ``level`` as the partition's owner level (in a write transaction).

    Raises:
        OwnershipLost: a reader with a higher owner level took the partition.
    """
    if not check_owner(conn, entity, consumer_group, partition, level):
        conn.execute(
            "INSERT INTO readers (entity, consumer_group, partition, owner_level) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (entity, consumer_group, partition) "
            "DO UPDATE SET owner_level = excluded.owner_level",
            (entity, consumer_group, partition, level),
        )
