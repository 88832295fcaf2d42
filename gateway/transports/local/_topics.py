"""Topics and subscriptions of a local namespace, and the options queues share with them.

A topic keeps no message of its own: a message sent to it is copied, in the same
transaction, to every subscription whose rules select it (:func:`._filters.copies`),
and a subscription is a queue in every other way (peek-lock, lock expiry, delivery
count, its dead-letter sub-queue, time to live), named ``TOPIC/Subscriptions/SUB``
(:mod:`._topic_paths`). A topic without subscriptions takes messages and drops them,
as Service Bus does.

Options a queue, a topic or a subscription may have beyond its row in ``entities`` are
kept in ``entity_options``: the topic of a subscription and its rules (JSON), where its
messages are forwarded (``forward_to``: a queue or a topic, up to
:data:`MAX_FORWARD_HOPS` hops, as on Service Bus), and the default time to live of its
messages (``default_ttl``, seconds: a message's time to live is the smaller of its own
and the entity's; a topic's default applies to its subscriptions' copies too), and the
window of its duplicate detection (``duplicate_window``: a MessageId it took within it
is accepted and dropped, ``_local_duplicates``).

Messages sent through the emulator carry their AMQP sections: their system properties
are read for filters, and the edits of an action are written into them, by the
:class:`SectionsCodec` the emulator gives its store. A message sent through
``local://`` has no system properties but its MessageId and partition key, so an
action's ``SET sys.X`` (other than ``PartitionKey``) has nowhere to go on it: that is
logged once per rule, and the copy goes on without it.

Pure SQL over a connection in a transaction, as in ``_local_queues``.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.transports._topic_paths import (
    canonical_entity,
    split_subscription,
    subscription_path,
)
from gateway.transports.filters import (
    DEFAULT_RULE,
    Copy,
    MessageView,
    Rule,
    copies,
    rules_from_json,
    rules_to_json,
)
from gateway.transports.local import _queues as queues
from gateway.transports.local._db import Database
from gateway.transports.local._duplicates import unseen
from gateway.transports.local._entities import Catalog, Entity, EntityKind, queue_entity
from gateway.transports.local._queues import Queued
from replication import ConfigError, Message, MessageRejected, PropertyValue

__all__ = ["MAX_FORWARD_HOPS", "EntityOptions", "SectionsCodec", "Topics"]

logger = logging.getLogger("gateway.transports.local")

#: How many times a message may be forwarded (Service Bus allows 4 hops).
MAX_FORWARD_HOPS = 4

_OPTIONS = ("SELECT topic, rules, forward_to, default_ttl, duplicate_window FROM entity_options "
            "WHERE entity = ?")


class SectionsCodec(Protocol):
    """Reads and edits the AMQP sections a message sent through the emulator keeps."""

    def system_properties(self, sections: bytes) -> Mapping[str, PropertyValue]:
        """The system properties of a message, by canonical name (``To``, ``Label``...)."""

    def edit(self, sections: bytes, *, system: Mapping[str, PropertyValue],
             user_set: Mapping[str, PropertyValue], user_removed: Collection[str]) -> bytes:
        """``sections`` with system properties and application properties changed."""


@dataclass(frozen=True, kw_only=True)
class EntityOptions:
    """What ``entity_options`` holds for one entity (see the module docstring)."""

    topic: str | None = None
    rules: tuple[Rule, ...] = ()
    forward_to: str | None = None
    default_ttl: float | None = None
    #: Seconds within which a MessageId taken already is dropped (duplicate detection).
    duplicate_window: float | None = None


_NONE = EntityOptions()


def _ttl(value: float | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{what}: default_message_time_to_live must be a number of seconds "
                          f"above 0, not {value!r}")
    return float(value)


def _window(value: float | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{what}: duplicate_detection_window must be a number of seconds "
                          f"above 0, not {value!r}")
    return float(value)


def _shorter(own: float | None, default: float | None) -> float | None:
    return default if own is None else own if default is None else min(own, default)


class Topics:
    """Creates topics and subscriptions, and delivers what is sent to topics and queues.

    Args:
        db: the namespace file.
        catalog: its entities.
        namespace: the namespace's name, for errors.
        codec: reads and edits the AMQP sections of messages (the emulator's store).
    """

    def __init__(self, db: Database, catalog: Catalog, *, namespace: str,
                 codec: SectionsCodec | None = None) -> None:
        self.db, self.catalog, self.namespace, self.codec = db, catalog, namespace, codec
        # Options change only through the emulator's administration API, which calls
        # forget(); a missing row is cached too.
        self._options: dict[str, EntityOptions] = {}
        self._warned: set[tuple[str, str]] = set()

    def forget(self, names: Collection[str]) -> None:
        """Drop the cached options of ``names`` (changed or deleted since)."""
        for name in names:
            self._options.pop(name, None)

    # -- administration -------------------------------------------------------------

    def create_topic(self, name: str, *, max_message_size: int = 1 << 20,
                     default_message_time_to_live: float | None = None,
                     duplicate_detection_window: float | None = None) -> None:
        """Create a topic; do nothing when it exists with the same settings.

        Raises:
            ConfigError: a bad name or setting, or the entity exists with other settings.
        """
        if (not name or split_subscription(name) is not None or len(name) > 260
                or name.lower().endswith("/$deadletterqueue")):
            raise ConfigError(f"bad topic name {name!r}: use 1-260 characters, not a "
                              "subscription's or a dead-letter queue's path")
        if max_message_size < 1:
            raise ConfigError("topic settings: max_message_size >= 1 is required")
        entity = Entity(name=name, kind=EntityKind.TOPIC, partitions=0, lock_duration=0.0,
                        max_delivery_count=0, max_message_size=max_message_size)
        options = EntityOptions(default_ttl=_ttl(default_message_time_to_live, name),
                                duplicate_window=_window(duplicate_detection_window, name))
        self._create(entity, options)

    def create_subscription(self, topic: str, name: str, *, rules: Sequence[Rule] = (),
                            lock_duration: float = 30.0, max_delivery_count: int = 10,
                            dead_lettering_on_message_expiration: bool = False,
                            default_message_time_to_live: float | None = None,
                            forward_to: str | None = None,
                            requires_session: bool = False) -> None:
        """Create a subscription of an existing topic; nothing when it exists alike.

        ``rules`` default to Service Bus's ``$Default`` rule (a true filter).
        ``requires_session``: a session-enabled subscription, received a session at a
        time; a message without a session id that it would take is refused at the send.

        Raises:
            ConfigError: no such topic, a bad name, rule or setting, or the subscription
                exists with other settings.
        """
        if not name or "/" in name or len(name) > 50:
            raise ConfigError(f"bad subscription name {name!r}: use 1-50 characters, no '/'")
        rules = tuple(rules) or (DEFAULT_RULE,)
        if not all(isinstance(r, Rule) for r in rules):
            raise ConfigError("rules must be Rule records (gateway.transports.Rule)")
        if len({r.name for r in rules}) != len(rules):
            raise ConfigError(f"subscription {name!r} has two rules of one name")
        path = subscription_path(topic, name)
        if forward_to is not None and (not forward_to or forward_to == path):
            raise ConfigError(f"subscription {path!r}: forward_to names another queue or topic")
        entity = dataclasses.replace(
            queue_entity(path, lock_duration=lock_duration,
                         max_delivery_count=max_delivery_count, max_message_size=1 << 20,
                         dead_lettering_on_message_expiration=(
                             dead_lettering_on_message_expiration),
                         requires_session=requires_session),
            kind=EntityKind.SUBSCRIPTION)
        options = EntityOptions(topic=topic, rules=rules, forward_to=forward_to,
                                default_ttl=_ttl(default_message_time_to_live, path))
        self._create(entity, options)

    def set_queue_options(self, name: str, *, forward_to: str | None = None,
                          default_message_time_to_live: float | None = None,
                          duplicate_detection_window: float | None = None) -> None:
        """Give an existing queue its forwarding, default time to live and duplicate
        detection (once).

        Raises:
            ConfigError: no such queue, or it has other options already.
        """
        if forward_to is not None and (not forward_to or forward_to == name):
            raise ConfigError(f"queue {name!r}: forward_to names another queue or topic")
        options = EntityOptions(forward_to=forward_to,
                                default_ttl=_ttl(default_message_time_to_live, name),
                                duplicate_window=_window(duplicate_detection_window, name))

        def txn(conn: sqlite3.Connection) -> EntityOptions:
            found = self.catalog.lookup(conn, name)
            if found is None or found.kind is not EntityKind.QUEUE:
                raise ConfigError(f"no queue {name!r} in local://{self.namespace}")
            return self._insert_options(conn, name, options)
        self._check_same(name, options, self.db.write(txn))

    def _create(self, entity: Entity, options: EntityOptions) -> None:
        def txn(conn: sqlite3.Connection) -> tuple[Entity, EntityOptions]:
            if options.topic is not None:
                found = self.catalog.lookup(conn, options.topic)
                if found is None or found.kind is not EntityKind.TOPIC:
                    raise ConfigError(f"no topic {options.topic!r} in local://"
                                      f"{self.namespace}: create the topic first")
            existing = self.catalog.insert(conn, entity)
            return existing, self._insert_options(conn, entity.name, options)

        existing, kept = self.db.write(txn)
        if existing != entity:
            raise ConfigError(f"entity {entity.name!r} exists in local://{self.namespace} "
                              f"with other settings ({existing}); use another name or the "
                              "same settings")
        self._check_same(entity.name, options, kept)

    def _insert_options(self, conn: sqlite3.Connection, name: str,
                        options: EntityOptions) -> EntityOptions:
        conn.execute(
            "INSERT OR IGNORE INTO entity_options (entity, topic, rules, forward_to, "
            "default_ttl, duplicate_window) VALUES (?, ?, ?, ?, ?, ?)",
            (name, options.topic, rules_to_json(options.rules) if options.rules else None,
             options.forward_to, options.default_ttl, options.duplicate_window))
        self._options.pop(name, None)
        return self.options(conn, name)

    def _check_same(self, name: str, wanted: EntityOptions, kept: EntityOptions) -> None:
        if kept != wanted:
            raise ConfigError(f"entity {name!r} exists in local://{self.namespace} with other "
                              f"options ({kept}); use another name or the same options")

    def options(self, conn: sqlite3.Connection, name: str) -> EntityOptions:
        """The options of entity ``name`` (none: :class:`EntityOptions` defaults)."""
        found = self._options.get(name)
        if found is None:
            row = conn.execute(_OPTIONS, (name,)).fetchone()
            found = _NONE if row is None else EntityOptions(
                topic=row[0], rules=rules_from_json(row[1]) if row[1] else (),
                forward_to=row[2], default_ttl=row[3], duplicate_window=row[4])
            self._options[name] = found
        return found

    def rules_of(self, conn: sqlite3.Connection, subscription: str) -> tuple[Rule, ...]:
        """The rules of a subscription.

        Raises:
            MessageRejected: no such subscription.
        """
        path = canonical_entity(subscription)
        found = self.catalog.lookup(conn, path)
        if found is None or found.kind is not EntityKind.SUBSCRIPTION:
            raise MessageRejected(f"no subscription {subscription!r} in local://"
                                  f"{self.namespace}")
        return self.options(conn, path).rules

    def subscriptions(self, conn: sqlite3.Connection, topic: str) -> list[str]:
        """The subscription paths of ``topic``, by name."""
        return [name for (name,) in conn.execute(
            "SELECT entity FROM entity_options WHERE topic = ? ORDER BY entity", (topic,))]

    # -- delivery, inside the store's write transaction --------------------------------

    def deliver(self, conn: sqlite3.Connection, e: Entity, entity: str,
                items: Sequence[Message | Queued], now: float, hops: int = 0) -> list[int]:
        """Put ``items`` in a queue or a topic's subscriptions (following forwarding).

        Returns:
            The sequence numbers of the rows written (a topic's: every copy's).

        Raises:
            MessageRejected: a subscription named, or forwarding that goes nowhere.
        """
        if e.kind is EntityKind.SUBSCRIPTION:
            topic = split_subscription(e.name)
            raise MessageRejected(f"cannot send to the subscription {entity!r}: send to its "
                                  f"topic {topic[0] if topic else '?'!r}")
        options = self.options(conn, e.name)
        if options.duplicate_window is not None:
            items = unseen(conn, e.name, items, now, options.duplicate_window)
        if e.kind is EntityKind.TOPIC:
            return self._publish(conn, e, items, now, hops)
        if options.forward_to is not None:
            return self._forward(conn, e.name, options, items, now, hops)
        _check_sessions(e, entity, items)
        if options.default_ttl is not None:
            items = _with_ttl(items, options.default_ttl)
        return queues.insert(conn, entity, items, now)

    def _forward(self, conn: sqlite3.Connection, source: str, options: EntityOptions,
                 items: Sequence[Message | Queued], now: float, hops: int) -> list[int]:
        target = options.forward_to
        assert target is not None
        found = self.catalog.lookup(conn, target)
        if hops >= MAX_FORWARD_HOPS or found is None or found.kind not in (
                EntityKind.QUEUE, EntityKind.TOPIC):
            why = (f"more than {MAX_FORWARD_HOPS} hops" if hops >= MAX_FORWARD_HOPS
                   else f"{target!r} is not a queue or topic of local://{self.namespace}")
            raise MessageRejected(f"{source!r} forwards to {target!r}: {why}")
        if options.default_ttl is not None:
            items = _with_ttl(items, options.default_ttl)
        return self.deliver(conn, found, target, items, now, hops + 1)

    def _publish(self, conn: sqlite3.Connection, topic: Entity,
                 items: Sequence[Message | Queued], now: float, hops: int) -> list[int]:
        default = self.options(conn, topic.name).default_ttl
        sent: Sequence[Message | Queued] = items if default is None else _with_ttl(items, default)
        views: list[tuple[Queued, MessageView]] | None = None  # made once a rule needs them
        seqs: list[int] = []
        for path in self.subscriptions(conn, topic.name):
            options = self.options(conn, path)
            out: Sequence[Message | Queued]
            if options.rules == (DEFAULT_RULE,):
                out = sent  # the common case: every message, as sent
            else:
                if views is None:
                    views = [(q, self._view(q)) for q in map(_queued, sent)]
                out = [self._copy(q, c, path) for q, view in views
                       for c in copies(options.rules, view)]
            if not out:
                continue
            subscription = self.catalog.lookup(conn, path)
            if subscription is not None:
                _check_sessions(subscription, path, out)
            if options.forward_to is not None:
                seqs += self._forward(conn, path, options, out, now, hops)
            else:
                if options.default_ttl is not None:
                    out = _with_ttl(out, options.default_ttl)
                seqs += queues.insert(conn, path, out, now)
        return seqs

    def _view(self, q: Queued) -> MessageView:
        m, codec, sections = q.message, self.codec, q.sections

        def system() -> dict[str, Any]:
            found: dict[str, Any] = {"MessageId": m.message_id, "PartitionKey": m.partition_key}
            if codec is not None and sections is not None:
                found.update(codec.system_properties(sections))
            return found
        return MessageView(user=m.properties, system=system)

    def _copy(self, q: Queued, c: Copy, path: str) -> Queued:
        if c.user is None and not c.system:
            return q
        m = q.message
        user = dict(m.properties) if c.user is None else c.user
        key = c.system.get("PartitionKey", m.partition_key)
        message = Message(m.body, message_id=m.message_id, partition_key=(
            None if key is None else str(key)), properties=user)
        sections = q.sections
        if sections is not None and self.codec is not None:
            changed = {k: v for k, v in user.items()
                       if k not in m.properties or not _identical(m.properties[k], v)}
            sections = self.codec.edit(sections, system=c.system, user_set=changed,
                                       user_removed=[k for k in m.properties if k not in user])
        elif set(c.system) - {"PartitionKey"}:
            self._warn(path, user.get("RuleName"), sorted(c.system))
        return dataclasses.replace(q, message=message, sections=sections)

    def _warn(self, path: str, rule: Any, names: list[str]) -> None:
        key = (path, str(rule))
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("rule %r of %s sets sys.%s on a message sent through local://, "
                           "which has no such property: the copy is delivered without it",
                           rule, path, ", sys.".join(names))


def _check_sessions(e: Entity, entity: str, items: Sequence[Message | Queued]) -> None:
    if not e.requires_session:
        return
    for item in items:
        m = _queued(item).message
        if m.session_id is None:
            raise MessageRejected(
                f"message {m.message_id} has no session id and {entity!r} is session-enabled: "
                "set Message(session_id=...)")


def _identical(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _queued(item: Message | Queued) -> Queued:
    return item if isinstance(item, Queued) else Queued(message=item)


def _with_ttl(items: Sequence[Message | Queued], default: float | None) -> list[Queued]:
    out: list[Queued] = []
    for item in items:
        q = _queued(item)
        ttl = _shorter(q.time_to_live, default)
        out.append(q if ttl == q.time_to_live else dataclasses.replace(q, time_to_live=ttl))
    return out

