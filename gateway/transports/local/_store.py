"""The storage engine of a local namespace: entities, queues, partitioned entities.

Synchronous and blocking: :class:`~.local.LocalTransport` runs it in a worker
thread, :class:`~.local.LocalNamespace` calls it directly. Every queue operation
that changes state (send, claim, settle) is one write transaction, so a message is
never handed to two receivers at once, even across processes.

:class:`Store` holds the transactions; what runs inside them is plain SQL in the
modules beside it: the entities (``_local_entities``), the queues (``_local_queues``)
and the partitioned entities (``_local_events``); topics, subscriptions and the
options of queues are :attr:`Store.topics` (``_local_topics``), sessions and deferred
messages :attr:`Store.sessions` (``_local_session_store``).
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from gateway.transports.base import EventPosition, PartitionEvent, ReceivedMessage, ReceiveMode
from gateway.transports.local import _events as events
from gateway.transports.local import _queues as queues
from gateway.transports.local._db import Database
from gateway.transports.local._entities import (
    Catalog,
    Entity,
    EntityInfo,
    EntityKind,
    partitioned_entity,
    queue_entity,
)
from gateway.transports.local._events import PartitionState
from gateway.transports.local._queues import Queued
from gateway.transports.local._session_store import SessionStore
from gateway.transports.local._topics import SectionsCodec, Topics
from replication import (
    ConfigError,
    GatewayError,
    Message,
    MessageRejected,
    MessageTooLarge,
    OwnershipLost,
)

__all__ = ["DEAD_LETTER_SUFFIX", "EntityInfo", "EntityKind", "PartitionState", "Queued", "Store"]
T = TypeVar("T")

DEAD_LETTER_SUFFIX = queues.DEAD_LETTER_SUFFIX
"""The path suffix of an entity's dead-letter sub-queue (``QUEUE/$DeadLetterQueue``)."""


def _message(item: Message | Queued) -> Message:
    return item.message if isinstance(item, Queued) else item


def _sections(item: Message | Queued) -> bytes | None:
    return item.sections if isinstance(item, Queued) else None


def _check_sizes(e: Entity, entity: str, messages: Sequence[Message]) -> None:
    for m in messages:
        if m.size > e.max_message_size:
            raise MessageTooLarge(
                f"message {m.message_id} is {m.size} bytes, over the "
                f"{e.max_message_size}-byte limit of {entity!r}: make it smaller",
                message_id=m.message_id,
            )


def _no_sessions(e: Entity, entity: str) -> None:
    if e.requires_session and not entity.endswith(DEAD_LETTER_SUFFIX):
        raise MessageRejected(f"{entity!r} is session-enabled: receive it a session at a time "
                              "(accept_session), not with a plain receiver")


class Store:
    """Entities, queues and partitioned entities in one namespace file.

    Args:
        path: the namespace file.
        namespace: the namespace's name, put on records and errors.
        auto_create: create a queue on first send or receive of an unknown name.
        codec: reads and edits the AMQP sections of messages sent through the emulator,
            for subscription rules (``_local_topics``).
    """

    def __init__(self, path: str, *, namespace: str, auto_create: bool,
                 codec: SectionsCodec | None = None) -> None:
        self.db = Database(path, namespace=namespace)
        self.namespace = namespace
        self._catalog = Catalog(namespace=namespace, auto_create=auto_create)
        #: Topics and subscriptions, and the options of queues (forwarding, time to live).
        self.topics = Topics(self.db, self._catalog, namespace=namespace, codec=codec)
        self._round_robin = itertools.count()
        self._leases = events.Leases()
        #: Sessions of session-enabled queues, and deferred messages.
        self.sessions = SessionStore(self.db, self._catalog, namespace=namespace)

    def close(self) -> None:
        # Readers of this store are closed with it: their owner levels stop fencing.
        with contextlib.suppress(GatewayError):  # else they end with their lease
            self.release(self._leases.drain())
        self.db.close()

    def ping(self) -> None:
        """Read the namespace file once (raises when it is corrupt or unreadable)."""
        self.db.read(lambda conn: conn.execute("SELECT COUNT(*) FROM entities").fetchone())

    # -- entities ---------------------------------------------------------------

    #: The settings of a new queue or partitioned entity, checked; :meth:`create` takes them.
    queue = staticmethod(queue_entity)
    partitioned = staticmethod(partitioned_entity)

    def create(self, entity: Entity) -> None:
        """Create ``entity``, or check that it already exists with the same settings."""
        if not entity.name or entity.name.endswith(DEAD_LETTER_SUFFIX) or len(entity.name) > 260:
            raise ConfigError(f"bad entity name {entity.name!r}: use 1-260 characters, "
                              f"not ending in {DEAD_LETTER_SUFFIX}")
        existing = self.db.write(lambda conn: self._catalog.insert(conn, entity))
        if existing != entity:
            raise ConfigError(
                f"entity {entity.name!r} exists in local://{self.namespace} with other "
                f"settings ({existing}); use another name or the same settings"
            )

    def forget(self, *names: str) -> None:
        """Drop what this store cached of entities ``names``: their settings or options
        were changed, or they were deleted, in the namespace file (the emulator's
        administration API does so). Other stores on the file keep theirs until reopened."""
        self._catalog.forget(names)
        self.topics.forget(names)

    def entities(self) -> list[EntityInfo]:
        """Every entity of the namespace with its counts, by name."""
        return self.db.read(self._catalog.infos)

    def find(self, name: str) -> Entity | None:
        """The entity called ``name``, matched case-insensitively as Service Bus does."""
        found = self._catalog.cached(name)
        return found if found is not None else self.db.read(
            lambda conn: self._catalog.find(conn, name))

    # -- send -------------------------------------------------------------------

    def send(self, entity: str, messages: Sequence[Message | Queued], now: float) -> None:
        """Append ``messages`` to a queue or a partitioned entity, all or none."""
        if entity.endswith(DEAD_LETTER_SUFFIX):
            raise MessageRejected(f"cannot send to the dead-letter sub-queue {entity!r}: "
                                  "send to the queue itself")

        self.db.write(lambda conn: self._send(conn, entity, messages, now))

    def _send(self, conn: sqlite3.Connection, entity: str, items: Sequence[Message | Queued],
              now: float) -> list[int]:
        e = self._catalog.entity(conn, entity, create=True)
        messages = [_message(item) for item in items]
        _check_sizes(e, entity, messages)
        if e.kind is not EntityKind.PARTITIONED:
            return self.topics.deliver(conn, e, entity, items, now)
        events.append(conn, entity, e.partitions, messages, now, self._round_robin.__next__,
                      sections=[_sections(item) for item in items])
        return []

    def schedule(self, entity: str, messages: Sequence[Queued], now: float) -> list[int]:
        """Append ``messages`` to a queue (held back until their scheduled time).

        Returns:
            Their sequence numbers, which :meth:`cancel_scheduled` takes.

        Raises:
            MessageRejected: no such queue, a partitioned entity, or a message too large.
        """
        def txn(conn: sqlite3.Connection) -> list[int]:
            self._catalog.queue_of(conn, entity)
            return self._send(conn, entity, messages, now)
        return self.db.write(txn)

    def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int],
                         now: float) -> list[int]:
        """Remove scheduled messages that are not enqueued yet.

        Returns:
            The sequence numbers that name no such message (nothing is removed then).
        """
        def txn(conn: sqlite3.Connection) -> list[int]:
            self._catalog.queue_of(conn, entity)
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
        cached = self._catalog.cached(entity.removesuffix(DEAD_LETTER_SUFFIX))
        if cached is not None:
            _no_sessions(cached, entity)
        known = cached is not None and cached.kind in (EntityKind.QUEUE, EntityKind.SUBSCRIPTION)
        if known and not self.db.read(has_any):
            return []
        return self.db.write(lambda conn: self._claim(conn, entity, max_messages, mode, now))

    def _claim(self, conn: sqlite3.Connection, entity: str, max_messages: int,
               mode: ReceiveMode, now: float) -> list[tuple[ReceivedMessage, bytes | None]]:
        q = self._catalog.queue_of(conn, entity)
        _no_sessions(q, entity)
        return queues.claim(conn, entity, namespace=self.namespace, max_messages=max_messages,
                            mode=mode, now=now, lock_duration=q.lock_duration,
                            max_delivery_count=q.max_delivery_count,
                            dead_letter_expired=q.dead_lettering_on_message_expiration)

    def settle(self, received: ReceivedMessage, action: str, now: float, *,
               reason: str = "", description: str = "") -> None:
        """Complete, abandon or dead-letter one peek-locked delivery.

        Raises:
            MessageRejected: the lock is lost (expired, settled, or never held).
        """
        entity = received.entity
        refused = queues.not_held(received, self.namespace)
        if refused is not None:
            raise refused
        if action == "dead_letter" and entity.endswith(DEAD_LETTER_SUFFIX):
            raise MessageRejected(f"message {received.message_id} is dead-lettered already: "
                                  "complete it instead")

        def txn(conn: sqlite3.Connection) -> None:
            q = self._catalog.queue_of(conn, entity)
            assert received.lock_token is not None
            if not queues.settle(conn, entity, received.lock_token, action, now,
                                 max_delivery_count=q.max_delivery_count, reason=reason,
                                 description=description):
                raise queues.lock_lost(received)
        self.db.write(txn)

    def complete_many(self, received: Sequence[ReceivedMessage], now: float
                      ) -> list[MessageRejected | None]:
        """Complete peek-locked deliveries in one transaction: for each, None, or the
        ``MessageRejected`` :meth:`settle` would raise for it (the others are completed)."""
        results = [queues.not_held(r, self.namespace) for r in received]
        todo = [r for r, refused in zip(received, results, strict=True) if refused is None]

        def txn(conn: sqlite3.Connection) -> list[bool]:
            counts = {e: self._catalog.queue_of(conn, e).max_delivery_count
                      for e in {r.entity for r in todo}}
            return [queues.settle(conn, r.entity, r.lock_token or "", "complete", now,
                                  max_delivery_count=counts[r.entity]) for r in todo]
        done = iter(self.db.write(txn) if todo else [])
        for i, r in enumerate(received):
            if results[i] is None and not next(done):
                results[i] = queues.lock_lost(r)
        return results

    # -- partitioned entities ---------------------------------------------------

    def partition_ids(self, entity: str) -> list[str]:
        e, _ = self.db.read(lambda conn: self._catalog.partitioned(conn, entity))
        return [str(p) for p in range(e.partitions)]

    def latest(self, entity: str, partition_id: str) -> int:
        """The sequence number the partition's next event will get."""
        def txn(conn: sqlite3.Connection) -> int:
            _, p = self._catalog.partitioned(conn, entity, partition_id)
            return events.latest_sequence(conn, entity, p)
        return self.db.read(txn)

    def read(self, entity: str, partition_id: str, *, position: EventPosition,
             max_events: int, owner_level: int | None, consumer_group: str,
             reader: str | None = None, claim: bool = False) -> list[PartitionEvent]:
        """Events after ``position``, fenced by ``owner_level`` when it is given (as
        :meth:`read_sections`, without the sections)."""
        return [e for e, _ in self.read_sections(
            entity, partition_id, position=position, max_events=max_events,
            owner_level=owner_level, consumer_group=consumer_group, reader=reader,
            claim=claim)]

    def read_sections(self, entity: str, partition_id: str, *, position: EventPosition,
                      max_events: int, owner_level: int | None, consumer_group: str,
                      reader: str | None = None, claim: bool = False,
                      ) -> list[tuple[PartitionEvent, bytes | None]]:
        """Events after ``position``, fenced by ``owner_level`` when it is given, each
        with its AMQP sections (None: not sent by an AMQP client).

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
            self._catalog.partitioned(conn, key[0], partition_id)
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
                position: EventPosition, max_events: int,
                ) -> list[tuple[PartitionEvent, bytes | None]]:
        _, p = self._catalog.partitioned(conn, entity, partition_id)
        return events.select(conn, namespace=self.namespace, entity=entity, partition=p,
                             position=position, max_events=max_events)

    # -- by lock token and name (the AMQP emulator) ------------------------------

    def settle_tokens(self, entity: str, settlements: Sequence[tuple[str, str, str, str]],
                      now: float) -> list[bool]:
        """Settle deliveries of ``entity`` (a queue or its DLQ) by lock token, in one transaction.

        Each settlement is (lock token, action, reason, description), the action one of
        ``complete``, ``abandon``, ``dead_letter`` or ``release`` (an abandon that does
        not count as a delivery: the message never reached an application). Returns,
        for each, False when its lock is lost (expired, settled or unknown).
        """
        def txn(conn: sqlite3.Connection) -> list[bool]:
            q = self._catalog.queue_of(conn, entity)
            return [queues.settle(conn, entity, token, action, now,
                                  max_delivery_count=q.max_delivery_count, reason=reason,
                                  description=description)
                    for token, action, reason, description in settlements]
        return self.db.write(txn)

    def renew_locks(self, entity: str, lock_tokens: Sequence[str],
                    now: float) -> list[float | None]:
        """Extend each lock by the queue's lock duration; None for a lost lock."""
        def txn(conn: sqlite3.Connection) -> list[float | None]:
            until = now + self._catalog.queue_of(conn, entity).lock_duration
            return queues.renew_locks(conn, entity, lock_tokens, until, now)
        return self.db.write(txn)

    def peek(self, entity: str, *, from_sequence: int, max_messages: int) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages from ``from_sequence`` on, locked or not, unchanged."""
        return [r for r, _ in self.peek_sections(entity, from_sequence=from_sequence,
                                                 max_messages=max_messages)]

    def peek_sections(self, entity: str, *, from_sequence: int,
                      max_messages: int) -> list[tuple[ReceivedMessage, bytes | None]]:
        """As :meth:`peek`, with each message's AMQP sections; scheduled messages too."""
        def txn(conn: sqlite3.Connection) -> list[tuple[ReceivedMessage, bytes | None]]:
            self._catalog.queue_of(conn, entity)
            return queues.peek(conn, entity, namespace=self.namespace,
                               from_sequence=from_sequence, max_messages=max_messages)
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
                self._send_partition(conn, entity, partition_id, messages, now)

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
                        items: Sequence[Message | Queued], now: float) -> None:
        e, p = self._catalog.partitioned(conn, entity, partition_id)
        messages = [_message(item) for item in items]
        _check_sizes(e, entity, messages)
        events.append_to(conn, entity, p, messages, now,
                         sections=[_sections(item) for item in items])

    def partition_state(self, entity: str, partition_id: str) -> PartitionState:
        """The first and last events of one partition (one read)."""
        def txn(conn: sqlite3.Connection) -> PartitionState:
            _, p = self._catalog.partitioned(conn, entity, partition_id)
            return events.partition_state(conn, entity, p)
        return self.db.read(txn)
