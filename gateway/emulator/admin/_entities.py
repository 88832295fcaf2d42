"""Queues, topics, subscriptions and rules as the administration API changes them: in
the namespace's own file, where the AMQP side serves them from.

An entity created here is a row of the namespace file like a declared one, so it is
served at once and kept across restarts. What the file's tables do not model (the
properties Service Bus stores but the emulator does not act on: ``AutoDeleteOnIdle``,
``UserMetadata``, ``EnablePartitioning``...) and an entity's creation and update times
are kept beside it in ``admin_entities``, so that a get returns what a create or update
set. Deleting an entity deletes its messages (and a topic's subscriptions with theirs).

Every function here runs one transaction of the store's file (``Store.db``) and then
tells the store to forget what it cached of the entities it changed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.transports import (
    DEAD_LETTER_SUFFIX,
    EntityKind,
    Rule,
    Store,
    split_subscription,
    subscription_path,
)
from gateway.transports.filters import rules_to_json

__all__ = ["Counts", "Described", "EntityExists", "NoSuchEntity", "Settings", "administered",
           "create", "delete", "describe", "listing", "prepare", "set_rules", "update"]

# ``by_api``: created or changed through the API (a declaration no longer applies to it).
_SCHEMA = """CREATE TABLE IF NOT EXISTS admin_entities (
    name TEXT PRIMARY KEY COLLATE NOCASE, created REAL NOT NULL, updated REAL NOT NULL,
    extras TEXT NOT NULL DEFAULT '{}', by_api INTEGER NOT NULL DEFAULT 0)"""


class NoSuchEntity(LookupError):
    """The entity (or the topic of a subscription, the subscription of a rule) is missing."""


class EntityExists(ValueError):
    """An entity of that name exists already."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What a create or update asks for, in the store's terms (seconds, bytes).

    ``extras``: the properties kept as sent and given back (element name → text).
    """

    lock_duration: float = 60.0
    max_delivery_count: int = 10
    max_message_size: int = 1 << 20
    dead_lettering_on_message_expiration: bool = False
    requires_session: bool = False
    default_ttl: float | None = None
    forward_to: str | None = None
    duplicate_window: float | None = None
    extras: Mapping[str, str] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()  # a new subscription's (its default rule)


@dataclass(frozen=True, kw_only=True)
class Counts:
    """An entity's messages: active (locked ones too), dead-lettered, scheduled, bytes."""

    active: int = 0
    dead_letter: int = 0
    scheduled: int = 0
    size: int = 0

    @property
    def total(self) -> int:
        return self.active + self.dead_letter + self.scheduled


@dataclass(frozen=True, kw_only=True)
class Described:
    """One entity as the administration API shows it."""

    name: str  # a subscription's own name; a queue's or topic's path
    path: str  # its path in the namespace file
    kind: EntityKind
    settings: Settings
    counts: Counts
    created: float
    updated: float
    accessed: float
    subscription_count: int = 0


def prepare(store: Store, now: float) -> None:
    """Create the table of administration records if the file lacks it, and record
    entities it has not seen (declared ones: created ``now``)."""
    def txn(conn: sqlite3.Connection) -> None:
        conn.execute(_SCHEMA)
        conn.execute("INSERT OR IGNORE INTO admin_entities (name, created, updated) "
                     "SELECT name, ?, ? FROM entities", (now, now))
    store.db.write(txn)


def administered(store: Store) -> set[str]:
    """The entities (lower-case paths) created or changed through the API: the emulator
    leaves them as the API left them instead of declaring them again at its start."""
    def txn(conn: sqlite3.Connection) -> set[str]:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'admin_entities'"
                        ).fetchone() is None:
            return set()
        return {n.lower() for (n,) in conn.execute(
            "SELECT name FROM admin_entities WHERE by_api")}
    return store.db.read(txn)


# -- reading -----------------------------------------------------------------------------


def _name(conn: sqlite3.Connection, path: str) -> tuple[str, EntityKind] | None:
    row = conn.execute("SELECT name, kind FROM entities WHERE name = ? COLLATE NOCASE "
                       "ORDER BY name = ? DESC LIMIT 1", (path, path)).fetchone()
    return None if row is None else (row[0], EntityKind(row[1]))


def _counts(conn: sqlite3.Connection, paths: Sequence[str], now: float) -> Counts:
    active = dead = scheduled = size = 0
    for path in paths:
        for entity, is_scheduled, n, nbytes in conn.execute(
                "SELECT entity, visible_at IS NOT NULL AND visible_at > ?, COUNT(*), "
                "COALESCE(SUM(length(body) + COALESCE(length(sections), 0)), 0) FROM messages "
                "WHERE entity IN (?, ?) GROUP BY 1, 2", (now, path, path + DEAD_LETTER_SUFFIX)):
            size += nbytes
            if entity != path:
                dead += n
            elif is_scheduled:
                scheduled += n
            else:
                active += n
    return Counts(active=active, dead_letter=dead, scheduled=scheduled, size=size)


def _record(conn: sqlite3.Connection, path: str, now: float) -> tuple[float, float, dict[str, str]]:
    row = conn.execute("SELECT created, updated, extras FROM admin_entities WHERE name = ?",
                       (path,)).fetchone()
    if row is None:  # a declared entity: first seen now
        return now, now, {}
    return row[0], row[1], json.loads(row[2])


def _last_enqueued(conn: sqlite3.Connection, paths: Sequence[str]) -> float | None:
    found = [conn.execute("SELECT MAX(enqueued_time) FROM messages WHERE entity IN (?, ?)",
                          (p, p + DEAD_LETTER_SUFFIX)).fetchone()[0] for p in paths]
    return max((t for t in found if t is not None), default=None)


def _describe(store: Store, conn: sqlite3.Connection, path: str, kind: EntityKind,
              now: float) -> Described:
    (lock, deliveries, size, dead_letter_expired, sessions) = conn.execute(
        "SELECT lock_duration, max_delivery_count, max_message_size, "
        "dead_lettering_on_message_expiration, requires_session FROM entities WHERE name = ?",
        (path,)).fetchone()
    options = store.topics.options(conn, path)
    subscriptions = store.topics.subscriptions(conn, path) if kind is EntityKind.TOPIC else []
    created, updated, extras = _record(conn, path, now)
    paths = subscriptions if kind is EntityKind.TOPIC else [path]
    counts = _counts(conn, paths, now)
    last = _last_enqueued(conn, paths)
    settings = Settings(
        lock_duration=lock, max_delivery_count=deliveries, max_message_size=size,
        dead_lettering_on_message_expiration=bool(dead_letter_expired),
        requires_session=bool(sessions), default_ttl=options.default_ttl,
        forward_to=options.forward_to, duplicate_window=options.duplicate_window,
        extras=extras, rules=options.rules)
    split = split_subscription(path)
    return Described(name=split[1] if split else path, path=path, kind=kind,
                     settings=settings, counts=counts, created=created, updated=updated,
                     accessed=max(updated, last or 0.0), subscription_count=len(subscriptions))


def describe(store: Store, path: str, kind: EntityKind, now: float) -> Described | None:
    """The entity at ``path`` if it is of ``kind`` (None otherwise, as the service's
    empty feed)."""
    def txn(conn: sqlite3.Connection) -> Described | None:
        found = _name(conn, path)
        if found is None or found[1] is not kind:
            return None
        return _describe(store, conn, found[0], kind, now)
    return store.db.read(txn)


def listing(store: Store, kind: EntityKind, now: float, *,
            topic: str | None = None) -> list[Described]:
    """Every entity of ``kind`` by name (of ``topic`` for subscriptions).

    Raises:
        NoSuchEntity: ``topic`` is not a topic.
    """
    def txn(conn: sqlite3.Connection) -> list[Described]:
        if topic is None:
            names = [n for (n,) in conn.execute(
                "SELECT name FROM entities WHERE kind = ? ORDER BY lower(name)", (kind.value,))]
        else:
            found = _name(conn, topic)
            if found is None or found[1] is not EntityKind.TOPIC:
                raise NoSuchEntity(f"no topic {topic!r}")
            names = store.topics.subscriptions(conn, found[0])
        return [_describe(store, conn, n, kind, now) for n in names]
    return store.db.read(txn)


# -- changing ----------------------------------------------------------------------------


def _write_record(conn: sqlite3.Connection, path: str, now: float,
                  extras: Mapping[str, str], *, new: bool) -> None:
    created = now if new else _record(conn, path, now)[0]
    conn.execute("INSERT OR REPLACE INTO admin_entities (name, created, updated, extras, "
                 "by_api) VALUES (?, ?, ?, ?, 1)", (path, created, now, json.dumps(dict(extras))))


def create(store: Store, path: str, kind: EntityKind, settings: Settings,
           now: float) -> Described:
    """Create a queue, topic or subscription (``TOPIC/Subscriptions/NAME``).

    Raises:
        EntityExists: an entity of that name exists.
        NoSuchEntity: a subscription's topic does not exist.
        ConfigError: a bad name or setting.
    """
    existing = store.db.read(lambda conn: _name(conn, path))
    if existing is not None:
        raise EntityExists(f"{path!r} exists already")
    s = settings
    if kind is EntityKind.QUEUE:
        store.create(Store.queue(
            path, lock_duration=s.lock_duration, max_delivery_count=s.max_delivery_count,
            max_message_size=s.max_message_size,
            dead_lettering_on_message_expiration=s.dead_lettering_on_message_expiration,
            requires_session=s.requires_session))
        if (s.forward_to, s.default_ttl, s.duplicate_window) != (None, None, None):
            store.topics.set_queue_options(path, forward_to=s.forward_to,
                                           default_message_time_to_live=s.default_ttl,
                                           duplicate_detection_window=s.duplicate_window)
    elif kind is EntityKind.TOPIC:
        store.topics.create_topic(path, max_message_size=s.max_message_size,
                                  default_message_time_to_live=s.default_ttl,
                                  duplicate_detection_window=s.duplicate_window)
    else:
        split = split_subscription(path)
        assert split is not None
        topic = store.db.read(lambda conn: _name(conn, split[0]))
        if topic is None or topic[1] is not EntityKind.TOPIC:
            raise NoSuchEntity(f"no topic {split[0]!r}")
        path = subscription_path(topic[0], split[1])
        store.topics.create_subscription(
            topic[0], split[1], rules=s.rules, lock_duration=s.lock_duration,
            max_delivery_count=s.max_delivery_count,
            dead_lettering_on_message_expiration=s.dead_lettering_on_message_expiration,
            default_message_time_to_live=s.default_ttl, forward_to=s.forward_to,
            requires_session=s.requires_session)
    store.db.write(lambda conn: _write_record(conn, path, now, s.extras, new=True))
    found = describe(store, path, kind, now)
    assert found is not None
    return found


def update(store: Store, path: str, kind: EntityKind, settings: Settings,
           now: float) -> Described:
    """Change an entity's settings (its messages stay).

    Raises:
        NoSuchEntity: no such entity of that kind.
        ValueError: a setting Service Bus does not let change (``RequiresSession``).
    """
    s = settings

    def txn(conn: sqlite3.Connection) -> str:
        found = _name(conn, path)
        if found is None or found[1] is not kind:
            raise NoSuchEntity(f"no {kind.value} {path!r}")
        name = found[0]
        row = conn.execute("SELECT requires_session FROM entities WHERE name = ?",
                           (name,)).fetchone()
        if bool(row[0]) != s.requires_session and kind is not EntityKind.TOPIC:
            raise ValueError(f"the RequiresSession property of an existing {kind.value} "
                             "cannot be changed")
        if kind is EntityKind.TOPIC:
            conn.execute("UPDATE entities SET max_message_size = ? WHERE name = ?",
                         (s.max_message_size, name))
        else:
            conn.execute(
                "UPDATE entities SET lock_duration = ?, max_delivery_count = ?, "
                "max_message_size = ?, dead_lettering_on_message_expiration = ? "
                "WHERE name = ?", (s.lock_duration, s.max_delivery_count,
                                   s.max_message_size if kind is EntityKind.QUEUE else 1 << 20,
                                   int(s.dead_lettering_on_message_expiration), name))
        updated = conn.execute(
            "UPDATE entity_options SET forward_to = ?, default_ttl = ?, duplicate_window = ? "
            "WHERE entity = ?", (s.forward_to, s.default_ttl, s.duplicate_window, name))
        if not updated.rowcount:
            conn.execute("INSERT INTO entity_options (entity, forward_to, default_ttl, "
                         "duplicate_window) VALUES (?, ?, ?, ?)",
                         (name, s.forward_to, s.default_ttl, s.duplicate_window))
        _write_record(conn, name, now, s.extras, new=False)
        return str(name)

    name = store.db.write(txn)
    store.forget(name)
    found = describe(store, name, kind, now)
    assert found is not None
    return found


def delete(store: Store, path: str, kind: EntityKind | None = None) -> list[str]:
    """Delete an entity and its messages (a topic's subscriptions too).

    Returns:
        The paths deleted.

    Raises:
        NoSuchEntity: no such entity (of ``kind``, when given).
    """
    def txn(conn: sqlite3.Connection) -> list[str]:
        found = _name(conn, path)
        if found is None or (kind is not None and found[1] is not kind):
            raise NoSuchEntity(f"no entity {path!r}")
        name, found_kind = found
        gone = [name]
        if found_kind is EntityKind.TOPIC:
            gone += store.topics.subscriptions(conn, name)
        for entity in gone:
            for table, column in (("messages", "entity"), ("sessions", "entity"),
                                  ("seen_ids", "entity")):
                conn.execute(f"DELETE FROM {table} WHERE {column} IN (?, ?)",
                             (entity, entity + DEAD_LETTER_SUFFIX))
            for table, column in (("events", "entity"), ("partitions", "entity"),
                                  ("entity_options", "entity"), ("entities", "name"),
                                  ("admin_entities", "name")):
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (entity,))
            conn.execute("DELETE FROM sequences WHERE entity = lower(?)", (entity,))
        return gone

    gone = store.db.write(txn)
    store.forget(*gone)
    return gone


def set_rules(store: Store, subscription: str, rules: Sequence[Rule], now: float) -> None:
    """Replace the rules of a subscription (its path).

    Raises:
        NoSuchEntity: no such subscription.
    """
    def txn(conn: sqlite3.Connection) -> str:
        found = _name(conn, subscription)
        if found is None or found[1] is not EntityKind.SUBSCRIPTION:
            raise NoSuchEntity(f"no subscription {subscription!r}")
        conn.execute("UPDATE entity_options SET rules = ? WHERE entity = ?",
                     (rules_to_json(rules) if rules else None, found[0]))
        created, _, extras = _record(conn, found[0], now)
        conn.execute("INSERT OR REPLACE INTO admin_entities (name, created, updated, extras, "
                     "by_api) VALUES (?, ?, ?, ?, 1)", (found[0], created, now,
                                                       json.dumps(extras)))
        return str(found[0])

    store.forget(store.db.write(txn))

