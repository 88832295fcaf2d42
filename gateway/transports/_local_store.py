"""The storage engine of a local namespace: entities, queues, partitioned entities.

Synchronous and blocking: :class:`~.local.LocalTransport` runs it in a worker
thread, :class:`~.local.LocalNamespace` calls it directly. Every queue operation
that changes state (send, claim, settle) is one write transaction, so a message is
never handed to two receivers at once, even across processes.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.transports import _local_events as events
from gateway.transports import _local_queues as queues
from gateway.transports._local_db import Database
from gateway.transports._local_queues import Queued
from gateway.transports.base import EventPosition, PartitionEvent, ReceivedMessage, ReceiveMode
from replication import ConfigError, GatewayError, Message, MessageRejected, OwnershipLost

__all__ = ["DEAD_LETTER_SUFFIX", "EntityInfo", "EntityKind", "PartitionState", "Queued", "Store"]
T = TypeVar("T")

DEAD_LETTER_SUFFIX = queues.DEAD_LETTER_SUFFIX
MAX_DELIVERY_REASON = queues.MAX_DELIVERY_REASON
_ENTITY_COLUMNS = ("name, kind, partitions, lock_duration, max_delivery_count, "
                   "max_message_size, dead_lettering_on_message_expiration")


class EntityKind(str, enum.Enum):
    """What an entity of a local namespace is."""

    QUEUE = "queue"
    PARTITIONED = "partitioned"


@dataclass(frozen=True, kw_only=True)
class EntityInfo:
    """One entity of a local namespace and its counts.

    ``partitions`` is 0 for a queue. ``active_count`` counts messages in a queue
    (locked ones too) or events in a partitioned entity; ``dead_letter_count``
    counts a queue's dead-letter sub-queue. ``lock_duration`` and
    ``max_delivery_count`` are 0 for a partitioned entity.
    ``dead_lettering_on_message_expiration``: a queue moves messages whose time to
    live is over to its dead-letter sub-queue (otherwise they are dropped).
    """

    name: str
    kind: EntityKind
    partitions: int
    active_count: int
    dead_letter_count: int
    lock_duration: float
    max_delivery_count: int
    max_message_size: int
    dead_lettering_on_message_expiration: bool = False


@dataclass(frozen=True, kw_only=True)
class _Entity:
    name: str
    kind: EntityKind
    partitions: int
    lock_duration: float
    max_delivery_count: int
    max_message_size: int
    dead_lettering_on_message_expiration: bool = False


@dataclass(frozen=True, kw_only=True)
class PartitionState:
    """The first and last events of one partition; the ``last_*`` are None while it is empty."""

    first_sequence_number: int
    last_sequence_number: int | None
    last_offset: int | None
    last_enqueued_time: float | None


def _props(message: Message) -> str | None:
    return json.dumps(dict(message.properties)) if message.properties else None


def _message(item: Message | Queued) -> Message:
    return item.message if isinstance(item, Queued) else item


class Store:
    """Entities, queues and partitioned entities in one namespace file.

    Args:
        path: the namespace file.
        namespace: the namespace's name, put on records and errors.
        auto_create: create a queue on first send or receive of an unknown name.
    """

    def __init__(self, path: str, *, namespace: str, auto_create: bool) -> None:
        self.db = Database(path, namespace=namespace)
        self.namespace = namespace
        self.auto_create = auto_create
        # Entities are never deleted and their settings never change, so a
        # positive lookup can be cached for the life of the store.
        self._entities: dict[str, _Entity] = {}
        self._round_robin = itertools.count()
        self._leases = events.Leases()

    def close(self) -> None:
        # Readers of this store are closed with it: their owner levels stop fencing.
        with contextlib.suppress(GatewayError):  # else they end with their lease
            self.release(self._leases.drain())
        self.db.close()

    def ping(self) -> None:
        """Read the namespace file once (raises when it is corrupt or unreadable)."""
        self.db.read(lambda conn: conn.execute("SELECT COUNT(*) FROM entities").fetchone())

    # -- entities ---------------------------------------------------------------

    def create(self, entity: _Entity) -> None:
        """Create ``entity``, or check that it already exists with the same settings."""
        if not entity.name or entity.name.endswith(DEAD_LETTER_SUFFIX) or len(entity.name) > 260:
            raise ConfigError(f"bad entity name {entity.name!r}: use 1-260 characters, "
                              f"not ending in {DEAD_LETTER_SUFFIX}")
        existing = self.db.write(lambda conn: self._insert_entity(conn, entity))
        if existing != entity:
            raise ConfigError(
                f"entity {entity.name!r} exists in local://{self.namespace} with other "
                f"settings ({existing}); use another name or the same settings"
            )

    @staticmethod
    def queue(name: str, *, lock_duration: float, max_delivery_count: int,
              max_message_size: int, dead_lettering_on_message_expiration: bool = False
              ) -> _Entity:
        if not lock_duration > 0 or max_delivery_count < 1 or max_message_size < 1:
            raise ConfigError("queue settings: lock_duration > 0, max_delivery_count >= 1 "
                              "and max_message_size >= 1 are required")
        return _Entity(name=name, kind=EntityKind.QUEUE, partitions=0,
                       lock_duration=float(lock_duration),
                       max_delivery_count=max_delivery_count, max_message_size=max_message_size,
                       dead_lettering_on_message_expiration=bool(
                           dead_lettering_on_message_expiration))

    @staticmethod
    def partitioned(name: str, *, partitions: int, max_message_size: int) -> _Entity:
        if not 1 <= partitions <= 1024 or max_message_size < 1:
            raise ConfigError("partitioned entity settings: 1 <= partitions <= 1024 and "
                              "max_message_size >= 1 are required")
        return _Entity(name=name, kind=EntityKind.PARTITIONED, partitions=partitions,
                       lock_duration=0.0, max_delivery_count=0,
                       max_message_size=max_message_size)

    def _insert_entity(self, conn: sqlite3.Connection, e: _Entity) -> _Entity:
        cur = conn.execute(
            "INSERT OR IGNORE INTO entities (name, kind, partitions, lock_duration, "
            "max_delivery_count, max_message_size, dead_lettering_on_message_expiration) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (e.name, e.kind.value, e.partitions, e.lock_duration, e.max_delivery_count,
             e.max_message_size, int(e.dead_lettering_on_message_expiration)),
        )
        if cur.rowcount and e.kind is EntityKind.PARTITIONED:
            conn.executemany(
                "INSERT INTO partitions VALUES (?, ?, 0, 0)",
                [(e.name, p) for p in range(e.partitions)],
            )
        found = self._lookup(conn, e.name)
        assert found is not None
        return found

    def _lookup(self, conn: sqlite3.Connection, name: str) -> _Entity | None:
        cached = self._entities.get(name)
        if cached is not None:
            return cached
        row = conn.execute(f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE name = ?",
                           (name,)).fetchone()
        if row is None:
            return None
        entity = _Entity(name=row[0], kind=EntityKind(row[1]), partitions=row[2],
                         lock_duration=row[3], max_delivery_count=row[4],
                         max_message_size=row[5],
                         dead_lettering_on_message_expiration=bool(row[6]))
        self._entities[name] = entity
        return entity

    def _entity(self, conn: sqlite3.Connection, name: str, *, create: bool) -> _Entity:
        found = self._lookup(conn, name)
        if found is not None:
            return found
        if create and self.auto_create:
            # Every caller of this runs in a write transaction.
            default = self.queue(name, lock_duration=30.0, max_delivery_count=10,
                                 max_message_size=1 << 20)
            return self._insert_entity(conn, default)
        raise MessageRejected(
            f"no such entity {name!r} in local://{self.namespace}: create it with "
            f"LocalNamespace({self.namespace!r}).create_queue(...) or create_partitioned(...)"
        )

    def _queue_of(self, conn: sqlite3.Connection, entity: str) -> _Entity:
        base = entity.removesuffix(DEAD_LETTER_SUFFIX)
        found = self._entity(conn, base, create=True)
        if found.kind is not EntityKind.QUEUE:
            raise MessageRejected(f"{entity!r} is a partitioned entity, not a queue: "
                                  "read it with read_partition")
        return found

    def entities(self) -> list[EntityInfo]:
        """Every entity of the namespace with its counts, by name."""
        def txn(conn: sqlite3.Connection) -> list[EntityInfo]:
            counts = dict(conn.execute("SELECT entity, COUNT(*) FROM messages GROUP BY entity"))
            counts.update(conn.execute("SELECT entity, COUNT(*) FROM events GROUP BY entity"))
            rows = conn.execute(
                f"SELECT {_ENTITY_COLUMNS} FROM entities ORDER BY name").fetchall()
            return [
                EntityInfo(name=name, kind=EntityKind(kind), partitions=partitions,
                           active_count=counts.get(name, 0),
                           dead_letter_count=counts.get(name + DEAD_LETTER_SUFFIX, 0),
                           lock_duration=lock, max_delivery_count=mdc, max_message_size=size,
                           dead_lettering_on_message_expiration=bool(dle))
                for name, kind, partitions, lock, mdc, size, dle in rows
            ]
        return self.db.read(txn)

    # -- send -------------------------------------------------------------------

    def send(self, entity: str, messages: Sequence[Message | Queued], now: float) -> None:
        """Append ``messages`` to a queue or a partitioned entity, all or none."""
        if entity.endswith(DEAD_LETTER_SUFFIX):
            raise MessageRejected(f"cannot send to the dead-letter sub-queue {entity!r}: "
                                  "send to the queue itself")

        self.db.write(lambda conn: self._send(conn, entity, messages, now))

    def _send(self, conn: sqlite3.Connection, entity: str, items: Sequence[Message | Queued],
              now: float) -> list[int]:
        e = self._entity(conn, entity, create=True)
        messages = [_message(item) for item in items]
        for m in messages:
            if m.size > e.max_message_size:
                raise MessageRejected(
                    f"message {m.message_id} is {m.size} bytes, over the "
                    f"{e.max_message_size}-byte limit of {entity!r}: make it smaller"
                )
        if e.kind is EntityKind.QUEUE:
            return queues.insert(conn, entity, items, now)
        events.append(conn, entity, e.partitions, messages, now, self._round_robin.__next__)
        return []

    def schedule(self, entity: str, messages: Sequence[Queued], now: float) -> list[int]:
        """Append ``messages`` to a queue (held back until their scheduled time).

        Returns:
            Their sequence numbers, which :meth:`cancel_scheduled` takes.

        Raises:
            MessageRejected: no such queue, a partitioned entity, or a message too large.
        """
        def txn(conn: sqlite3.Connection) -> list[int]:
            self._queue_of(conn, entity)
            return self._send(conn, entity, messages, now)
        return self.db.write(txn)

    def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int],
                         now: float) -> list[int]:
        """Remove scheduled messages that are not enqueued yet.

        Returns:
            The sequence numbers that name no such message (nothing is removed then).
        """
        def txn(conn: sqlite3.Connection) -> list[int]:
            self._queue_of(conn, entity)
            return queues.cancel_scheduled(conn, entity, sequence_numbers, now)
        return self.db.write(txn)

    # -- queues -----------------------------------------------------------------

    def receive(self, entity: str, *, max_messages: int, mode: ReceiveMode,
                now: float) -> list[ReceivedMessage]:
        """Claim up to ``max_messages`` available messages; [] when there are none."""
        return [r for r, _ in self.receive_sections(entity, max_messages=max_messages,
                                                    mode=mode, now=now)]

    def receive_sections(self, entity: str, *, max_messages: int, mode: ReceiveMode,
                         now: float) -> list[tuple[ReceivedMessage, bytes | None]]:
        """As :meth:`receive`, with each message's AMQP sections (None: sent by local://)."""
        def has_any(conn: sqlite3.Connection) -> bool:
            return bool(queues.available(conn, entity, now, 1))

        # Look before taking the write lock: an idle receiver polling an empty
        # queue then never competes with senders for it.
        if entity.removesuffix(DEAD_LETTER_SUFFIX) in self._entities and not self.db.read(has_any):
            return []
        return self.db.write(lambda conn: self._claim(conn, entity, max_messages, mode, now))

    def _claim(self, conn: sqlite3.Connection, entity: str, max_messages: int,
               mode: ReceiveMode, now: float) -> list[tuple[ReceivedMessage, bytes | None]]:
        q = self._queue_of(conn, entity)
        counts_deliveries = not entity.endswith(DEAD_LETTER_SUFFIX)
        peek = mode is ReceiveMode.PEEK_LOCK
        out: list[tuple[ReceivedMessage, bytes | None]] = []
        while len(out) < max_messages:
            rows = queues.available(conn, entity, now, max_messages - len(out))
            if not rows:
                break
            exhausted: list[tuple[int, str | None]] = []
            expired: list[tuple[int, str | None]] = []
            batch: list[tuple[ReceivedMessage, bytes | None]] = []
            for row in rows:
                seq, props, count = row[0], row[4], row[6]
                if counts_deliveries and queues.expired(row, now):
                    expired.append((seq, props))
                elif counts_deliveries and count >= q.max_delivery_count:
                    exhausted.append((seq, props))
                else:
                    batch.append(queues.received(
                        row, namespace=self.namespace, entity=entity,
                        lock_token=queues.new_lock_token() if peek else None,
                        delivery_count=count + 1,
                        locked_until=now + q.lock_duration if peek else None))
            queues.dead_letter(
                conn, entity, exhausted, MAX_DELIVERY_REASON,
                f"Message could not be consumed after {q.max_delivery_count} delivery attempts.",
            )
            self._expire(conn, q, entity, expired)
            received = [r for r, _ in batch]
            if peek:
                conn.executemany(
                    "UPDATE messages SET delivery_count = ?, lock_token = ?, locked_until = ? "
                    "WHERE seq = ?",
                    [(r.delivery_count, r.lock_token, r.locked_until, r.sequence_number)
                     for r in received],
                )
            else:
                conn.executemany("DELETE FROM messages WHERE seq = ?",
                                 [(r.sequence_number,) for r in received])
            out.extend(batch)
        return out

    def _expire(self, conn: sqlite3.Connection, q: _Entity, entity: str,
                rows: list[tuple[int, str | None]]) -> None:
        if q.dead_lettering_on_message_expiration:
            queues.dead_letter(conn, entity, rows, queues.EXPIRED_REASON,
                                   queues.EXPIRED_DESCRIPTION)
        else:
            conn.executemany("DELETE FROM messages WHERE seq = ?", [(seq,) for seq, _ in rows])

    def settle(self, received: ReceivedMessage, action: str, now: float, *,
               reason: str = "", description: str = "") -> None:
        """Complete, abandon or dead-letter one peek-locked delivery.

        Raises:
            MessageRejected: the lock is lost (expired, settled, or never held).
        """
        entity = received.entity
        if received.lock_token is None or received.namespace != self.namespace:
            raise MessageRejected(
                f"message {received.message_id} holds no lock in local://{self.namespace}: "
                "settle only messages received here in peek-lock mode"
            )
        if action == "dead_letter" and entity.endswith(DEAD_LETTER_SUFFIX):
            raise MessageRejected(f"message {received.message_id} is dead-lettered already: "
                                  "complete it instead")

        def txn(conn: sqlite3.Connection) -> None:
            q = self._queue_of(conn, entity)
            assert received.lock_token is not None
            if not queues.settle(conn, entity, received.lock_token, action, now,
                                 max_delivery_count=q.max_delivery_count, reason=reason,
                                 description=description):
                raise MessageRejected(
                    f"lock lost on message {received.message_id} of {entity!r}: it expired or "
                    "the message was settled; it will be delivered again, do not retry"
                )
        self.db.write(txn)

    # -- partitioned entities ---------------------------------------------------

    def _partitioned(self, conn: sqlite3.Connection, entity: str,
                     partition_id: str | None = None) -> tuple[_Entity, int]:
        e = self._lookup(conn, entity)
        if e is None or e.kind is not EntityKind.PARTITIONED:
            raise MessageRejected(
                f"no partitioned entity {entity!r} in local://{self.namespace}: create it "
                f"with LocalNamespace({self.namespace!r}).create_partitioned(...)"
            )
        if partition_id is None:
            return e, -1
        if not partition_id.isdigit() or int(partition_id) >= e.partitions:
            raise MessageRejected(f"{entity!r} has no partition {partition_id!r}: use one "
                                  f"of 0..{e.partitions - 1}")
        return e, int(partition_id)

    def partition_ids(self, entity: str) -> list[str]:
        e, _ = self.db.read(lambda conn: self._partitioned(conn, entity))
        return [str(p) for p in range(e.partitions)]

    def latest(self, entity: str, partition_id: str) -> int:
        """The sequence number the partition's next event will get."""
        def txn(conn: sqlite3.Connection) -> int:
            _, p = self._partitioned(conn, entity, partition_id)
            return events.latest_sequence(conn, entity, p)
        return self.db.read(txn)

    def read(self, entity: str, partition_id: str, *, position: EventPosition,
             max_events: int, owner_level: int | None, consumer_group: str,
             reader: str | None = None, claim: bool = False) -> list[PartitionEvent]:
        """Events after ``position``, fenced by ``owner_level`` when it is given.

        ``reader`` (with ``claim`` on its first read) names the reader holding the
        level; without it, this store's own readers are used (see ``events.Leases``).

        Raises:
            OwnershipLost: a reader with a higher owner level holds the partition, or
                another reader took it over from this one.
        """
        if owner_level is None:
            return self.db.read(lambda conn: self._select(conn, entity, partition_id,
                                                          position, max_events))
        key = (entity, consumer_group, int(partition_id) if partition_id.isdigit() else -1)
        own = reader is None
        if reader is None:
            reader, claim = self._leases.reader(key, owner_level)
        try:
            found = self._fenced(key, partition_id, owner_level, reader, claim,
                                 lambda conn: self._select(conn, entity, partition_id,
                                                           position, max_events))
        except OwnershipLost:
            self._leases.lost(key, reader)
            raise
        if own:
            self._leases.read(key, owner_level, reader)
        return found

    def release(self, readers: Sequence[str]) -> None:
        """End the owner-level leases of ``readers`` (they closed)."""
        if readers:
            self.db.write(lambda conn: events.release_owners(conn, readers))

    def _fenced(self, key: tuple[str, str, int], partition_id: str, level: int, reader: str,
                claim: bool, then: Callable[[sqlite3.Connection], T]) -> T:
        def txn(conn: sqlite3.Connection, write: bool) -> tuple[bool, T | None]:
            self._partitioned(conn, key[0], partition_id)
            now = time.time()
            if write:
                events.claim_owner(conn, key, level=level, reader=reader, claim=claim, now=now)
            elif not events.check_owner(conn, key, level=level, reader=reader, claim=claim,
                                        now=now):
                return False, None  # record the lease in a write transaction
            return True, then(conn)

        done, found = self.db.read(lambda conn: txn(conn, False))
        if not done:
            done, found = self.db.write(lambda conn: txn(conn, True))
        return found  # type: ignore[return-value]

    def _select(self, conn: sqlite3.Connection, entity: str, partition_id: str,
                position: EventPosition, max_events: int) -> list[PartitionEvent]:
        _, p = self._partitioned(conn, entity, partition_id)
        return events.select(conn, namespace=self.namespace, entity=entity, partition=p,
                             position=position, max_events=max_events)

    # -- by lock token and name (the AMQP emulator) ------------------------------

    def find(self, name: str) -> _Entity | None:
        """The entity called ``name``, matched case-insensitively as Service Bus does."""
        def txn(conn: sqlite3.Connection) -> _Entity | None:
            row = conn.execute("SELECT name FROM entities WHERE name = ? COLLATE NOCASE "
                               "ORDER BY name = ? DESC LIMIT 1", (name, name)).fetchone()
            return None if row is None else self._lookup(conn, row[0])
        found = self._entities.get(name)
        return found if found is not None else self.db.read(txn)

    def settle_tokens(self, entity: str, settlements: Sequence[tuple[str, str, str, str]],
                      now: float) -> list[bool]:
        """Settle deliveries of ``entity`` (a queue or its DLQ) by lock token, in one transaction.

        Each settlement is (lock token, action, reason, description), the action one of
        ``complete``, ``abandon``, ``dead_letter`` or ``release`` (an abandon that does
        not count as a delivery: the message never reached an application). Returns,
        for each, False when its lock is lost (expired, settled or unknown).
        """
        def txn(conn: sqlite3.Connection) -> list[bool]:
            q = self._queue_of(conn, entity)
            return [queues.settle(conn, entity, token, action, now,
                                  max_delivery_count=q.max_delivery_count, reason=reason,
                                  description=description)
                    for token, action, reason, description in settlements]
        return self.db.write(txn)

    def renew_locks(self, entity: str, lock_tokens: Sequence[str],
                    now: float) -> list[float | None]:
        """Extend each lock by the queue's lock duration; None for a lost lock."""
        def txn(conn: sqlite3.Connection) -> list[float | None]:
            until = now + self._queue_of(conn, entity).lock_duration
            out: list[float | None] = []
            for token in lock_tokens:
                cur = conn.execute(
                    "UPDATE messages SET locked_until = ? WHERE lock_token = ? AND entity = ? "
                    "AND locked_until > ?", (until, token, entity, now))
                out.append(until if cur.rowcount else None)
            return out
        return self.db.write(txn)

    def peek(self, entity: str, *, from_sequence: int, max_messages: int) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages from ``from_sequence`` on, locked or not, unchanged."""
        return [r for r, _ in self.peek_sections(entity, from_sequence=from_sequence,
                                                 max_messages=max_messages)]

    def peek_sections(self, entity: str, *, from_sequence: int,
                      max_messages: int) -> list[tuple[ReceivedMessage, bytes | None]]:
        """As :meth:`peek`, with each message's AMQP sections; scheduled messages too."""
        def txn(conn: sqlite3.Connection) -> list[tuple[ReceivedMessage, bytes | None]]:
            self._queue_of(conn, entity)
            rows = conn.execute(
                f"SELECT {queues.COLUMNS} FROM messages WHERE entity = ? AND seq >= ? "
                "ORDER BY seq LIMIT ?", (entity, from_sequence, max_messages)).fetchall()
            return [queues.received(row, namespace=self.namespace, entity=entity,
                                    lock_token=None, delivery_count=row[6], locked_until=None)
                    for row in rows]
        return self.db.read(txn)

    def send_many(self, batches: Sequence[tuple[str, str | None, Sequence[Message | Queued]]],
                  now: float) -> list[GatewayError | None]:
        """Append several batches in one transaction, each all or none (a savepoint).

        A batch is (entity, partition id or None, messages); a partition id sends to
        that partition of a partitioned entity. Returns each batch's error or None.
        """
        def one(conn: sqlite3.Connection, entity: str, partition_id: str | None,
                messages: Sequence[Message | Queued]) -> None:
            if entity.endswith(DEAD_LETTER_SUFFIX):
                raise MessageRejected(f"cannot send to the dead-letter sub-queue {entity!r}: "
                                      "send to the queue itself")
            if partition_id is None:
                self._send(conn, entity, messages, now)
            else:
                self._send_partition(conn, entity, partition_id,
                                     [_message(m) for m in messages], now)

        def txn(conn: sqlite3.Connection) -> list[GatewayError | None]:
            results: list[GatewayError | None] = []
            for batch in batches:
                conn.execute("SAVEPOINT batch")
                try:
                    one(conn, *batch)
                except GatewayError as exc:
                    conn.execute("ROLLBACK TO batch")
                    results.append(exc)
                else:
                    results.append(None)
                conn.execute("RELEASE batch")
            return results

        if len(batches) == 1:  # no savepoint needed: the transaction is the batch
            try:
                self.db.write(lambda conn: one(conn, *batches[0]))
            except GatewayError as exc:
                return [exc]
            return [None]
        return self.db.write(txn)

    def _send_partition(self, conn: sqlite3.Connection, entity: str, partition_id: str,
                        messages: Sequence[Message], now: float) -> None:
        e, p = self._partitioned(conn, entity, partition_id)
        for m in messages:
            if m.size > e.max_message_size:
                raise MessageRejected(
                    f"message {m.message_id} is {m.size} bytes, over the "
                    f"{e.max_message_size}-byte limit of {entity!r}: make it smaller")
        seq, offset = conn.execute(
            "SELECT next_seq, next_offset FROM partitions WHERE entity = ? AND partition = ?",
            (entity, p)).fetchone()
        rows: list[tuple[Any, ...]] = []
        for m in messages:
            rows.append((entity, p, seq, offset, m.message_id, m.body, m.partition_key,
                         _props(m), now))
            seq, offset = seq + 1, offset + max(1, len(m.body))  # as events.append does
        conn.executemany(
            'INSERT INTO events (entity, partition, seq, "offset", message_id, body, '
            "partition_key, properties, enqueued_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows)
        conn.execute("UPDATE partitions SET next_seq = ?, next_offset = ? "
                     "WHERE entity = ? AND partition = ?", (seq, offset, entity, p))

    def partition_state(self, entity: str, partition_id: str) -> PartitionState:
        """The first and last events of one partition (one read)."""
        def txn(conn: sqlite3.Connection) -> PartitionState:
            _, p = self._partitioned(conn, entity, partition_id)
            first = conn.execute("SELECT MIN(seq) FROM events WHERE entity = ? AND partition = ?",
                                 (entity, p)).fetchone()[0]
            row = conn.execute(
                'SELECT seq, "offset", enqueued_time FROM events WHERE entity = ? AND '
                "partition = ? ORDER BY seq DESC LIMIT 1", (entity, p)).fetchone()
            if row is None:
                return PartitionState(first_sequence_number=events.latest_sequence(conn, entity, p),
                                      last_sequence_number=None, last_offset=None,
                                      last_enqueued_time=None)
            return PartitionState(first_sequence_number=first, last_sequence_number=row[0],
                                  last_offset=row[1], last_enqueued_time=row[2])
        return self.db.read(txn)
