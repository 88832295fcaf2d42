"""The entities of a local namespace: their settings, and the catalogue that keeps them.

The catalogue creates entities and looks them up (with a cache) inside the store's
transactions.

Pure SQL over a connection that :class:`~._local_db.Database` has put in a
transaction, as in ``_local_queues`` and ``_local_events``.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.transports._topic_paths import split_subscription
from gateway.transports.local._queues import DEAD_LETTER_SUFFIX
from replication import ConfigError, MessageRejected

__all__ = [
    "Catalog",
    "Entity",
    "EntityInfo",
    "EntityKind",
    "partitioned_entity",
    "queue_entity",
]

_ENTITY_COLUMNS = ("name, kind, partitions, lock_duration, max_delivery_count, "
                   "max_message_size, dead_lettering_on_message_expiration, requires_session")


class EntityKind(str, enum.Enum):
    """What an entity of a local namespace is."""

    QUEUE = "queue"
    PARTITIONED = "partitioned"
    TOPIC = "topic"  # keeps nothing: copies what it is sent to its subscriptions
    SUBSCRIPTION = "subscription"  # TOPIC/Subscriptions/NAME, a queue in every other way


@dataclass(frozen=True, kw_only=True)
class EntityInfo:
    """One entity of a local namespace and its counts.

    ``partitions`` is 0 for a queue. ``active_count`` counts messages in a queue
    (locked ones too) or events in a partitioned entity; ``dead_letter_count``
    counts a queue's dead-letter sub-queue. ``lock_duration`` and
    ``max_delivery_count`` are 0 for a partitioned entity.
    ``dead_lettering_on_message_expiration``: a queue moves messages whose time to
    live is over to its dead-letter sub-queue (otherwise they are dropped).
    ``requires_session``: a session-enabled queue (every message has a session id, and
    it is received a session at a time).
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
    requires_session: bool = False


@dataclass(frozen=True, kw_only=True)
class Entity:
    """The settings of one entity, as its row in ``entities`` holds them."""

    name: str
    kind: EntityKind
    partitions: int
    lock_duration: float
    max_delivery_count: int
    max_message_size: int
    dead_lettering_on_message_expiration: bool = False
    requires_session: bool = False


def queue_entity(name: str, *, lock_duration: float, max_delivery_count: int,
                 max_message_size: int, dead_lettering_on_message_expiration: bool = False,
                 requires_session: bool = False) -> Entity:
    """A queue's settings, checked (``ConfigError``)."""
    if not lock_duration > 0 or max_delivery_count < 1 or max_message_size < 1:
        raise ConfigError("queue settings: lock_duration > 0, max_delivery_count >= 1 "
                          "and max_message_size >= 1 are required")
    return Entity(name=name, kind=EntityKind.QUEUE, partitions=0,
                  lock_duration=float(lock_duration),
                  max_delivery_count=max_delivery_count, max_message_size=max_message_size,
                  dead_lettering_on_message_expiration=bool(
                      dead_lettering_on_message_expiration),
                  requires_session=bool(requires_session))


def partitioned_entity(name: str, *, partitions: int, max_message_size: int) -> Entity:
    """A partitioned entity's settings, checked (``ConfigError``)."""
    if not 1 <= partitions <= 1024 or max_message_size < 1:
        raise ConfigError("partitioned entity settings: 1 <= partitions <= 1024 and "
                          "max_message_size >= 1 are required")
    return Entity(name=name, kind=EntityKind.PARTITIONED, partitions=partitions,
                  lock_duration=0.0, max_delivery_count=0,
                  max_message_size=max_message_size)


class Catalog:
    """The entities of one namespace file, as the store's transactions look them up.

    Args:
        namespace: the namespace's name, put on errors.
        auto_create: create a queue on first send or receive of an unknown name.
    """

    def __init__(self, *, namespace: str, auto_create: bool) -> None:
        self.namespace = namespace
        self.auto_create = auto_create
        # Entities are deleted or changed only through the emulator's administration
        # API, which calls forget(): a positive lookup is cached until then.
        self._entities: dict[str, Entity] = {}

    def forget(self, names: Iterable[str]) -> None:
        """Drop the cached settings of ``names`` (changed or deleted since)."""
        for name in names:
            self._entities.pop(name, None)

    def cached(self, name: str) -> Entity | None:
        """``name``'s settings if a lookup found them already (no read)."""
        return self._entities.get(name)

    def insert(self, conn: sqlite3.Connection, e: Entity) -> Entity:
        """Create ``e`` unless an entity of that name exists; return the one that does."""
        cur = conn.execute(
            "INSERT OR IGNORE INTO entities (name, kind, partitions, lock_duration, "
            "max_delivery_count, max_message_size, dead_lettering_on_message_expiration, "
            "requires_session) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (e.name, e.kind.value, e.partitions, e.lock_duration, e.max_delivery_count,
             e.max_message_size, int(e.dead_lettering_on_message_expiration),
             int(e.requires_session)),
        )
        if cur.rowcount and e.kind is EntityKind.PARTITIONED:
            conn.executemany(
                "INSERT INTO partitions VALUES (?, ?, 0, 0)",
                [(e.name, p) for p in range(e.partitions)],
            )
        found = self.lookup(conn, e.name)
        assert found is not None
        return found

    def lookup(self, conn: sqlite3.Connection, name: str) -> Entity | None:
        """The entity called exactly ``name``, or None."""
        cached = self._entities.get(name)
        if cached is not None:
            return cached
        row = conn.execute(f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE name = ?",
                           (name,)).fetchone()
        if row is None:
            return None
        entity = Entity(name=row[0], kind=EntityKind(row[1]), partitions=row[2],
                        lock_duration=row[3], max_delivery_count=row[4],
                        max_message_size=row[5],
                        dead_lettering_on_message_expiration=bool(row[6]),
                        requires_session=bool(row[7]))
        self._entities[name] = entity
        return entity

    def entity(self, conn: sqlite3.Connection, name: str, *, create: bool) -> Entity:
        """The entity called ``name``; with ``create`` and ``auto_create``, a new queue.

        Raises:
            MessageRejected: no such entity.
        """
        found = self.lookup(conn, name)
        if found is not None:
            return found
        if create and self.auto_create and split_subscription(name) is None:
            # Every caller of this runs in a write transaction.
            default = queue_entity(name, lock_duration=30.0, max_delivery_count=10,
                                   max_message_size=1 << 20)
            return self.insert(conn, default)
        raise MessageRejected(
            f"no such entity {name!r} in local://{self.namespace}: create it with "
            f"LocalNamespace({self.namespace!r}).create_queue(...), create_partitioned(...) "
            "or create_topic(...) and create_subscription(...)"
        )

    def queue_of(self, conn: sqlite3.Connection, entity: str) -> Entity:
        """The queue ``entity`` names (itself or its dead-letter sub-queue).

        Raises:
            MessageRejected: no such queue, or a partitioned entity.
        """
        base = entity.removesuffix(DEAD_LETTER_SUFFIX)
        found = self.entity(conn, base, create=True)
        if found.kind is EntityKind.TOPIC:
            raise MessageRejected(f"{entity!r} is a topic: receive from one of its "
                                  f"subscriptions, '{base}/Subscriptions/NAME'")
        if found.kind not in (EntityKind.QUEUE, EntityKind.SUBSCRIPTION):
            raise MessageRejected(f"{entity!r} is a partitioned entity, not a queue: "
                                  "read it with read_partition")
        return found

    def partitioned(self, conn: sqlite3.Connection, entity: str,
                    partition_id: str | None = None) -> tuple[Entity, int]:
        """A partitioned entity and the number of ``partition_id`` (-1 when None).

        Raises:
            MessageRejected: no such partitioned entity, or no such partition.
        """
        e = self.lookup(conn, entity)
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

    def find(self, conn: sqlite3.Connection, name: str) -> Entity | None:
        """The entity called ``name``, matched case-insensitively as Service Bus does."""
        row = conn.execute("SELECT name FROM entities WHERE name = ? COLLATE NOCASE "
                           "ORDER BY name = ? DESC LIMIT 1", (name, name)).fetchone()
        return None if row is None else self.lookup(conn, row[0])

    @staticmethod
    def infos(conn: sqlite3.Connection) -> list[EntityInfo]:
        """Every entity with its counts, by name."""
        counts = dict(conn.execute("SELECT entity, COUNT(*) FROM messages GROUP BY entity"))
        counts.update(conn.execute("SELECT entity, COUNT(*) FROM events GROUP BY entity"))
        rows = conn.execute(
            f"SELECT {_ENTITY_COLUMNS} FROM entities ORDER BY name").fetchall()
        return [
            EntityInfo(name=name, kind=EntityKind(kind), partitions=partitions,
                       active_count=counts.get(name, 0),
                       dead_letter_count=counts.get(name + DEAD_LETTER_SUFFIX, 0),
                       lock_duration=lock, max_delivery_count=mdc, max_message_size=size,
                       dead_lettering_on_message_expiration=bool(dle),
                       requires_session=bool(sessions))
            for name, kind, partitions, lock, mdc, size, dle, sessions in rows
        ]
