"""Administration and control of a local namespace: entities, outages and faults.

Taking the namespace down and up, or injecting faults, acts on every client in
every process.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.transports.filters import Rule
from gateway.transports.local._control import ControlFile, namespace_files, validate_faults
from gateway.transports.local._entities import EntityInfo
from gateway.transports.local._store import Store

__all__ = ["LocalNamespace", "NamespaceStatus", "PartitionInfo"]

_paths = namespace_files  # the name and data directory checks live with the control file


@dataclass(frozen=True, kw_only=True)
class NamespaceStatus:
    """A local namespace as its control file describes it.

    ``hang``: its clients' operations wait, unanswered, until the hang is cleared (a
    hung namespace is still ``up``: nothing fails fast).
    """

    name: str
    up: bool
    latency: float
    lost_replies: float
    path: str
    hang: bool = False


@dataclass(frozen=True, kw_only=True)
class PartitionInfo:
    """The newest event of one partition of a partitioned entity.

    All three ``last_*`` are ``None`` while the partition is empty; sequence numbers
    start at 0, so ``last_sequence_number + 1`` events were ever appended.
    """

    partition_id: str
    last_sequence_number: int | None
    last_offset: int | None
    last_enqueued_time: float | None


class LocalNamespace:
    """Administration and control of one local namespace (synchronous).

    Any process may create one for the same name and data directory; they all
    share the namespace file and its control file. Administration works while
    the namespace is down (only clients see the outage).

    Args:
        name: the namespace's name, which names its files.
        data_dir: the data directory; see :func:`default_data_dir`.
        auto_create: create a queue on first send or receive of an unknown name.

    Raises:
        ConfigError: a bad name.
    """

    def __init__(self, name: str, *, data_dir: str | os.PathLike[str] | None = None,
                 auto_create: bool = True) -> None:
        self.path, control = _paths(name, data_dir)
        self.name = name
        self._store = Store(self.path, namespace=name, auto_create=auto_create)
        self._control = ControlFile(control)

    def __enter__(self) -> LocalNamespace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the namespace file. Safe to call twice."""
        self._store.close()

    def create_queue(self, name: str, *, lock_duration: float = 30.0,
                     max_delivery_count: int = 10, max_message_size: int = 1 << 20,
                     dead_lettering_on_message_expiration: bool = False,
                     requires_session: bool = False,
                     forward_to: str | None = None,
                     default_message_time_to_live: float | None = None,
                     duplicate_detection_window: float | None = None) -> None:
        """Create a queue; do nothing when it exists with the same settings.

        A message whose time to live is over (one sent through the emulator with a
        time to live, or past ``default_message_time_to_live`` seconds) is never
        delivered: with ``dead_lettering_on_message_expiration`` it moves to the
        dead-letter sub-queue (reason ``TTLExpiredException``), otherwise it is
        dropped, as on Service Bus. With ``forward_to`` (a queue or a topic) what is
        sent to the queue goes there instead. With ``duplicate_detection_window``
        (seconds), a message whose MessageId the queue took within it is accepted and
        dropped (Service Bus's duplicate detection).

        ``requires_session``: a session-enabled queue. Every message sent to it needs a
        ``session_id``, and it is received a session at a time
        (``LocalTransport.accept_session``), each session's messages in order by one
        receiver holding the session's lock (``lock_duration``, renewed explicitly).

        Raises:
            ConfigError: bad settings, or the entity exists with other settings.
            NamespaceUnavailable: the namespace file is corrupt or unreadable.
        """
        self._store.create(Store.queue(
            name, lock_duration=lock_duration, max_delivery_count=max_delivery_count,
            max_message_size=max_message_size,
            dead_lettering_on_message_expiration=dead_lettering_on_message_expiration,
            requires_session=requires_session))
        if (forward_to, default_message_time_to_live, duplicate_detection_window) != (
                None, None, None):
            self._store.topics.set_queue_options(
                name, forward_to=forward_to,
                default_message_time_to_live=default_message_time_to_live,
                duplicate_detection_window=duplicate_detection_window)

    def create_partitioned(self, name: str, *, partitions: int = 4,
                           max_message_size: int = 1 << 20) -> None:
        """Create a partitioned entity; do nothing when it exists with the same settings.

        Raises:
            ConfigError: bad settings, or the entity exists with other settings.
            NamespaceUnavailable: the namespace file is corrupt or unreadable.
        """
        self._store.create(Store.partitioned(name, partitions=partitions,
                                             max_message_size=max_message_size))

    def create_topic(self, name: str, *, max_message_size: int = 1 << 20,
                     default_message_time_to_live: float | None = None,
                     duplicate_detection_window: float | None = None) -> None:
        """Create a topic; do nothing when it exists with the same settings.

        A message sent to the topic is copied to each of its subscriptions whose rules
        select it; with no subscription it is dropped, as on Service Bus.
        ``default_message_time_to_live`` (seconds) caps the time to live of its messages;
        with ``duplicate_detection_window`` (seconds) a message whose MessageId the topic
        took within it is accepted and dropped.

        Raises:
            ConfigError: bad settings, or the entity exists with other settings.
            NamespaceUnavailable: the namespace file is corrupt or unreadable.
        """
        self._store.topics.create_topic(
            name, max_message_size=max_message_size,
            default_message_time_to_live=default_message_time_to_live,
            duplicate_detection_window=duplicate_detection_window)

    def create_subscription(self, topic: str, name: str, *, rules: Sequence[Rule] = (),
                            lock_duration: float = 30.0, max_delivery_count: int = 10,
                            dead_lettering_on_message_expiration: bool = False,
                            default_message_time_to_live: float | None = None,
                            forward_to: str | None = None,
                            requires_session: bool = False) -> None:
        """Create subscription ``name`` of ``topic``: the entity ``TOPIC/Subscriptions/NAME``.

        Receive from it as from a queue (its dead letters from
        ``TOPIC/Subscriptions/NAME/$DeadLetterQueue``). ``rules`` select and annotate
        the topic's messages (default: one true filter, ``$Default``);
        ``forward_to`` sends its copies on to a queue or topic instead.
        ``requires_session``: a session-enabled subscription, received a session at a time
        like such a queue; a message without a session id it would take is refused.

        Raises:
            ConfigError: no such topic; bad settings or rules (a SQL filter that does
                not parse names the rule and the character); it exists with others.
            NamespaceUnavailable: the namespace file is corrupt or unreadable.
        """
        self._store.topics.create_subscription(
            topic, name, rules=rules, lock_duration=lock_duration,
            max_delivery_count=max_delivery_count,
            dead_lettering_on_message_expiration=dead_lettering_on_message_expiration,
            default_message_time_to_live=default_message_time_to_live, forward_to=forward_to,
            requires_session=requires_session)

    def rules(self, subscription: str) -> tuple[Rule, ...]:
        """The rules of a subscription (``TOPIC/Subscriptions/NAME``).

        Raises:
            MessageRejected: no such subscription.
        """
        return self._store.db.read(lambda conn: self._store.topics.rules_of(conn, subscription))

    def entities(self) -> list[EntityInfo]:
        """Every entity with its counts, sorted by name.

        Raises:
            NamespaceUnavailable: the namespace file is corrupt or unreadable.
        """
        return self._store.entities()

    def partition_info(self, entity: str) -> list[PartitionInfo]:
        """The last sequence number, offset and enqueued time of each partition.

        One read of the namespace file (it is administration: it works while the
        namespace is down, and takes no owner level).

        Returns:
            One record per partition, in partition order.

        Raises:
            MessageRejected: no such partitioned entity.
            NamespaceUnavailable: the namespace file is corrupt or unreadable.
        """
        self._store.partition_ids(entity)  # raises for an unknown or non-partitioned entity

        def txn(conn: sqlite3.Connection) -> list[PartitionInfo]:
            rows = conn.execute(
                'SELECT p.partition, p.next_seq, e."offset", e.enqueued_time FROM partitions p '
                "LEFT JOIN events e ON e.entity = p.entity AND e.partition = p.partition "
                "AND e.seq = p.next_seq - 1 WHERE p.entity = ? ORDER BY p.partition",
                (entity,),
            ).fetchall()
            return [
                PartitionInfo(
                    partition_id=str(partition),
                    last_sequence_number=next_seq - 1 if next_seq > 0 else None,
                    last_offset=None if offset is None else int(offset),
                    last_enqueued_time=None if enqueued is None else float(enqueued),
                )
                for partition, next_seq, offset, enqueued in rows
            ]

        return self._store.db.read(txn)

    def down(self) -> None:
        """Take the namespace down for every client, in every process, until :meth:`up`."""
        self._write(down=True)

    def up(self) -> None:
        """Bring the namespace back: not down and not hung (latency and lost replies stay)."""
        self._write(down=False, hang=False)

    def hang(self) -> None:
        """Make the namespace hang for every client, in every process, until :meth:`unhang`.

        A hung namespace accepts and answers nothing: every operation of a
        ``LocalTransport`` on it waits (cancellable) without failing, and the emulator
        serving it accepts connections but sends no frame. It is not down: nothing
        fails fast. :meth:`up` clears it too.
        """
        self._write(hang=True)

    def unhang(self) -> None:
        """Clear :meth:`hang`: waiting operations proceed (and the emulator's stalled
        connections are closed, so that clients reconnect)."""
        self._write(hang=False)

    def set_faults(self, *, latency: float = 0.0, lost_replies: float = 0.0) -> None:
        """Set the faults of every client's operations, in every process.

        Both are set at once: an argument left out is cleared to 0. A hang
        (:meth:`hang`) is kept.

        Args:
            latency: seconds added before each operation.
            lost_replies: the probability (0 to 1) that a send lands but its caller
                gets ``OperationTimeout``; 1.0 loses every reply.

        Raises:
            ConfigError: a negative latency or a probability outside 0..1.
        """
        validate_faults(latency=latency, lost_replies=lost_replies)
        self._write(latency=float(latency), lost_replies=float(lost_replies))

    def status(self) -> NamespaceStatus:
        """Whether the namespace is up, hung, and its faults."""
        state = self._control.read()
        return NamespaceStatus(name=self.name, up=not state.down, latency=state.latency,
                               lost_replies=state.lost_replies, path=self.path,
                               hang=state.hang)

    def _write(self, **changes: float | bool) -> None:
        # update() keeps the fields not changed (a hang survives set_faults).
        self._control.update(**changes)
