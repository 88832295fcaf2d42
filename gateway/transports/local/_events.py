"""Partitioned entities of the local namespace: append, read from a position, the ends of
a partition, fencing.

Pure SQL over a connection that :class:`~._local_db.Database` has put in a
transaction. Each partition keeps ``next_seq`` (sequence numbers 0, 1, 2, ...)
and ``next_offset`` (the byte position of the next event: each event advances
it by its body size, at least 1, so offsets are strictly increasing).

Owner levels are leases (``owner_leases``), as on Event Hubs only open readers
fence: a reader's reads renew its lease, an equal or higher level takes the
partition over, a lower one is refused while the holder is alive. A lease ends when
its reader closes (its store closes), when its process is gone (same host: the pid
no longer runs) or after :data:`LEASE` seconds without a read.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.transports.base import EventPosition, PartitionEvent
from replication import Message, OwnershipLost

__all__ = [
    "LEASE",
    "Leases",
    "PartitionState",
    "append",
    "append_to",
    "check_owner",
    "claim_owner",
    "latest_sequence",
    "partition_for",
    "partition_state",
    "release_owners",
    "select",
]

_INSERT = (
    'INSERT INTO events (entity, partition, seq, "offset", message_id, body, '
    "partition_key, properties, enqueued_time, sections) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_COLUMNS = ('seq, "offset", message_id, body, partition_key, properties, enqueued_time, '
            "sections")
LEASE = 30.0
"""How long an owner level stays held without a read (seconds). Only open readers fence: a
closed reader releases its level at once, a reader whose process died (seen from this host)
as soon as that is noticed, any other after its lease."""
_HOST = socket.gethostname()


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
    sections: Sequence[bytes | None] | None = None,
) -> None:
    """Append ``messages`` to their partitions (by key, else round robin); ``sections``:
    each one's AMQP sections, when an AMQP client sent it (the emulator)."""
    state: dict[int, list[int]] = {}
    rows: list[tuple[Any, ...]] = []
    for m, kept in zip(messages, sections or [None] * len(messages), strict=True):
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
        rows.append((entity, p, st[0], st[1], m.message_id, m.body, m.partition_key, props, now,
                     kept))
        st[0] += 1
        st[1] += max(1, len(m.body))
    conn.executemany(_INSERT, rows)
    conn.executemany(
        "UPDATE partitions SET next_seq = ?, next_offset = ? WHERE entity = ? AND partition = ?",
        [(s, o, entity, p) for p, (s, o) in state.items()],
    )


def append_to(conn: sqlite3.Connection, entity: str, partition: int,
              messages: Sequence[Message], now: float,
              sections: Sequence[bytes | None] | None = None) -> None:
    """Append ``messages`` to one partition, whatever their keys (the emulator's
    sends to a partition id); ``sections`` as for :func:`append`."""
    seq, offset = conn.execute(
        "SELECT next_seq, next_offset FROM partitions WHERE entity = ? AND partition = ?",
        (entity, partition)).fetchone()
    rows: list[tuple[Any, ...]] = []
    for m, kept in zip(messages, sections or [None] * len(messages), strict=True):
        props = json.dumps(dict(m.properties)) if m.properties else None
        rows.append((entity, partition, seq, offset, m.message_id, m.body, m.partition_key,
                     props, now, kept))
        seq, offset = seq + 1, offset + max(1, len(m.body))  # as append() does
    conn.executemany(_INSERT, rows)
    conn.execute("UPDATE partitions SET next_seq = ?, next_offset = ? "
                 "WHERE entity = ? AND partition = ?", (seq, offset, entity, partition))


def latest_sequence(conn: sqlite3.Connection, entity: str, partition: int) -> int:
    """The sequence number the next event of the partition will get."""
    row = conn.execute(
        "SELECT next_seq FROM partitions WHERE entity = ? AND partition = ?", (entity, partition)
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, kw_only=True)
class PartitionState:
    """The first and last events of one partition; the ``last_*`` are None while it is empty."""

    first_sequence_number: int
    last_sequence_number: int | None
    last_offset: int | None
    last_enqueued_time: float | None


def partition_state(conn: sqlite3.Connection, entity: str, partition: int) -> PartitionState:
    """The first and last events of one partition."""
    first = conn.execute("SELECT MIN(seq) FROM events WHERE entity = ? AND partition = ?",
                         (entity, partition)).fetchone()[0]
    row = conn.execute(
        'SELECT seq, "offset", enqueued_time FROM events WHERE entity = ? AND '
        "partition = ? ORDER BY seq DESC LIMIT 1", (entity, partition)).fetchone()
    if row is None:
        return PartitionState(first_sequence_number=latest_sequence(conn, entity, partition),
                              last_sequence_number=None, last_offset=None,
                              last_enqueued_time=None)
    return PartitionState(first_sequence_number=first, last_sequence_number=row[0],
                          last_offset=row[1], last_enqueued_time=row[2])


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
) -> list[tuple[PartitionEvent, bytes | None]]:
    """Up to ``max_events`` events of the partition after ``position``, in order, each
    with its AMQP sections (None: not sent by an AMQP client)."""
    where, value = _where(position)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM events WHERE entity = ? AND partition = ? AND {where} "
        "ORDER BY seq LIMIT ?",
        (entity, partition, value, max_events),
    ).fetchall()
    pid = str(partition)
    return [
        (PartitionEvent(
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
        ), sections)
        for seq, offset, message_id, body, key, props, enqueued, sections in rows
    ]


def _process_alive(host: str, pid: int) -> bool:
    """Whether the process that took a lease may still run (False only when sure)."""
    if host != _HOST or os.name != "posix" or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists (another user's process)
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")  # killed, not yet reaped by its parent


def _held_by(row: tuple[Any, ...] | None, now: float) -> int | None:
    """The owner level of a live lease (None: nobody holds the partition)."""
    if row is None:
        return None
    level, _, host, pid, expires = row
    return int(level) if expires > now and _process_alive(host, pid) else None


def check_owner(
    conn: sqlite3.Connection, key: tuple[str, str, int], *, level: int, reader: str,
    claim: bool, now: float,
) -> bool:
    """Whether ``reader`` holds the partition with ``level`` and need not write.

    Args:
        key: entity, consumer group, partition.
        claim: the reader's first read (it takes the partition over); later reads
            must still hold it.

    Raises:
        OwnershipLost: a live reader with a higher owner level holds the partition, or
            (not claiming) another reader took it over.
    """
    entity, group, partition = key
    row = conn.execute(
        "SELECT owner_level, reader, host, pid, expires FROM owner_leases "
        "WHERE entity = ? AND consumer_group = ? AND partition = ?", key).fetchone()
    if row is not None and row[1] == reader:
        return bool(row[0] == level and row[4] - now >= LEASE / 2)  # renewed half-way
    held = _held_by(row, now)
    if held is None:
        return False  # nobody reads it (closed, expired or dead): take it
    where = f"partition {partition} of {entity!r} (consumer group {group!r})"
    if not claim:
        raise OwnershipLost(f"{where} was taken over by a reader with owner level {held} "
                            f"(this reader's: {level}): stop reading it")
    if level < held:
        raise OwnershipLost(f"{where} is read with owner level {held}, higher than this "
                            f"reader's {level}: stop reading it")
    return False  # an equal or higher level takes it over, as on Event Hubs


def claim_owner(
    conn: sqlite3.Connection, key: tuple[str, str, int], *, level: int, reader: str,
    claim: bool, now: float,
) -> None:
    """Record (or renew) ``reader``'s lease on the partition (in a write transaction).

    Raises:
        OwnershipLost: as :func:`check_owner`.
    """
    if not check_owner(conn, key, level=level, reader=reader, claim=claim, now=now):
        conn.execute(
            "INSERT INTO owner_leases (entity, consumer_group, partition, owner_level, "
            "reader, host, pid, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (entity, consumer_group, partition) DO UPDATE SET "
            "owner_level = excluded.owner_level, reader = excluded.reader, "
            "host = excluded.host, pid = excluded.pid, expires = excluded.expires",
            (*key, level, reader, _HOST, os.getpid(), now + LEASE),
        )


def release_owners(conn: sqlite3.Connection, readers: Sequence[str]) -> None:
    """End the leases of ``readers`` (closed readers stop fencing at once)."""
    conn.executemany("DELETE FROM owner_leases WHERE reader = ?", [(r,) for r in readers])


class Leases:
    """The readers of one store (a process's transport): which lease each read uses.

    A read with an owner level that this store already holds continues that reader;
    a new level is a new reader, which claims the partition. A reader that lost the
    partition is forgotten, so a later read claims it again (as a new SDK receiver
    would).
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, int], tuple[int, str]] = {}

    def reader(self, key: tuple[str, str, int], level: int) -> tuple[str, bool]:
        """The reader id for a read of ``key`` with ``level``, and whether it claims."""
        held = self._held.get(key)
        if held is not None and held[0] == level:
            return held[1], False
        return uuid.uuid4().hex, True

    def read(self, key: tuple[str, str, int], level: int, reader: str) -> None:
        """``reader`` read ``key`` with ``level``: it holds the partition."""
        self._held[key] = (level, reader)

    def lost(self, key: tuple[str, str, int], reader: str) -> None:
        """``reader`` lost ``key`` (another reader took it)."""
        held = self._held.get(key)
        if held is not None and held[1] == reader:
            del self._held[key]

    def drain(self) -> list[str]:
        """Forget every reader; return their ids (to release their leases)."""
        readers = [r for _, r in self._held.values()]
        self._held.clear()
        return readers
