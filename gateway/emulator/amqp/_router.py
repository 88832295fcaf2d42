"""Which node a link attaches to: ``$cbs``, ``$management``, a queue, a topic (to send)
or one of its subscriptions (to receive: ``TOPIC/Subscriptions/SUB``), an event hub.

Addresses may carry a scheme and host (``amqps://host:port/orders``); they are
stripped, and entity names match case-insensitively, as on Service Bus. A link to
an entity needs a token for it (put on ``$cbs`` first, as the SDKs do), whose policy
has the ``Send`` right for a sender link and ``Listen`` for a receiver link (refused
with ``amqp:unauthorized-access`` otherwise); an unknown entity is refused with
``amqp:not-found`` (clients that put a token learn it earlier, from ``$cbs``'s 404).
An entity's ``$management`` node takes a token for the entity or for the node itself
(``ENTITY/$management``, the audience the JavaScript SDKs put), never the other way round.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gateway.amqp.server import (
    Handler,
    IncomingLink,
    Link,
    OutgoingLink,
    Replies,
    Reply,
    Requests,
    Right,
    app_property,
    put_token,
    status,
)
from gateway.emulator.amqp._eventhubs import (
    STOLEN,
    HubWriter,
    PartitionReader,
    manage_hub,
    parse_position,
)
from gateway.emulator.amqp._interfaces import NodeNamespace
from gateway.emulator.amqp._message_sessions import (
    SessionLocks,
    attach_session_reader,
    session_filter,
)
from gateway.emulator.amqp._servicebus import QueueReader, QueueWriter, manage_queue
from gateway.emulator.amqp._topics import refuse_topic_operation
from gateway.transports import DEAD_LETTER_SUFFIX, EntityKind
from gateway.transports.base import EventPosition
from replication import GatewayError

if TYPE_CHECKING:
    from gateway.amqp import AmqpMessage

__all__ = ["Router"]

_LOG = logging.getLogger("gateway.emulator")
_CONSUMER = re.compile(r"(?P<hub>.+)/consumergroups/(?P<group>[^/]+)/partitions/(?P<pid>[^/]+)",
                       re.IGNORECASE)
_PARTITION = re.compile(r"(?P<hub>.+)/partitions/(?P<pid>[^/]+)", re.IGNORECASE)
_MANAGEMENT = "$management"
_EPOCH = "com.microsoft:epoch"
#: The entities read as queues: queues and topics' subscriptions.
_QUEUES = (EntityKind.QUEUE, EntityKind.SUBSCRIPTION)
_SEND_OPERATIONS = ("com.microsoft:schedule-message", "com.microsoft:cancel-scheduled-message")


def _path(address: str) -> str:
    if "://" in address:
        address = urlsplit(address).path
    return address.strip("/")


def _claims(requests: IncomingLink, entity: str, request: AmqpMessage) -> Reply | None:
    """The refusal of a queue's management request whose token lacks the right: Send to
    schedule or cancel, Listen for the rest (peek, locks, settlement, sessions)."""
    operation = str(app_property(request, "operation"))
    right = Right.SEND if operation in _SEND_OPERATIONS else Right.LISTEN
    # A token for the entity covers its management node, and so does one for the node
    # itself (audience ENTITY/$management, the one @azure/service-bus puts).
    if requests.session.connection.authorized(f"{entity}/{_MANAGEMENT}", right):
        return None
    return Reply(properties=status(
        401, f"Unauthorized access. '{right.value}' claim(s) are required to perform this "
        f"operation. Resource: '{entity}'.", "amqp:unauthorized-access"))


class Router:
    """Binds each new link of a namespace to its node, or refuses it."""

    def __init__(self, namespace: NodeNamespace) -> None:
        self.namespace = namespace
        self.sessions = SessionLocks()

    def attach(self, link: Link) -> None:
        """Route ``link`` (asynchronously: entity lookups read the namespace file)."""
        self.namespace.spawn(self._attach(link))

    async def _attach(self, link: Link) -> None:
        try:
            await self._route(link, _path(link.address))
        except GatewayError as exc:
            link.refuse("amqp:internal-error", f"the namespace failed: {exc}")
        except Exception:
            _LOG.exception("attaching %r failed", link.address)
            link.refuse("amqp:internal-error", "the emulator failed to attach the link")

    async def _route(self, link: Link, path: str) -> None:
        lower = path.lower()
        if lower == "$cbs":
            self._node(link, put_token)
            return
        conn = link.session.connection
        if lower == _MANAGEMENT or lower.endswith("/" + _MANAGEMENT):
            await self._management(link, path[: -len(_MANAGEMENT)].rstrip("/"))
            return
        if not conn.authorized(path):
            link.refuse("amqp:unauthorized-access",
                        f"Unauthorized access to '{path}': put a token for it on $cbs first")
            return
        # The token's policy must hold the link's right, as the service's claims check.
        right = Right.SEND if isinstance(link, IncomingLink) else Right.LISTEN
        if not conn.authorized(path, right):
            link.refuse("amqp:unauthorized-access", f"Unauthorized access. '{right.value}' "
                        f"claim(s) are required to perform this operation. Resource: '{path}'.")
            return
        consumer = _CONSUMER.fullmatch(path) if isinstance(link, OutgoingLink) else None
        if consumer is not None:
            await self._reader(link, consumer["hub"], consumer["group"], consumer["pid"])
            return
        partition = _PARTITION.fullmatch(path) if isinstance(link, IncomingLink) else None
        if partition is not None:
            await self._hub_writer(link, partition["hub"], partition["pid"])
            return
        dead = lower.endswith(DEAD_LETTER_SUFFIX.lower())
        name = path[: -len(DEAD_LETTER_SUFFIX)] if dead else path
        entity = await self.namespace.run(self.namespace.store.find, name)
        if entity is None or (dead and entity.kind not in _QUEUES):
            self._not_found(link, path)
        elif isinstance(link, IncomingLink):
            if dead:
                link.refuse("amqp:not-allowed", "send to the queue, not to its dead-letter queue")
            elif entity.kind in (EntityKind.QUEUE, EntityKind.TOPIC):
                limit = self._queue_limit(entity.max_message_size)
                link.accept(QueueWriter(self.namespace, entity.name, limit),
                            max_message_size=limit)
            elif entity.kind is EntityKind.SUBSCRIPTION:
                link.refuse("amqp:not-allowed", f"{entity.name!r} is a subscription: send to "
                            f"its topic {entity.name.rsplit('/', 2)[0]!r}")
            else:
                await self._hub_writer(link, entity.name, None)
        elif isinstance(link, OutgoingLink) and entity.kind is EntityKind.TOPIC:
            link.refuse("amqp:not-allowed", f"{entity.name!r} is a topic: receive from one of "
                        f"its subscriptions, '{entity.name}/Subscriptions/NAME'")
        elif isinstance(link, OutgoingLink) and entity.kind in _QUEUES:
            wants_session, _ = session_filter(link)
            sessions = entity.requires_session and not dead
            if wants_session != sessions:
                link.refuse("amqp:not-allowed", (
                    f"{entity.name!r} requires sessions: receive it with a session receiver"
                    if sessions else f"{entity.name!r} is not session-enabled: receive it "
                    "without a session id"))
                return
            if sessions:
                await attach_session_reader(self.namespace, link, entity.name,
                                            entity.max_message_size, self.sessions)
                return
            full = entity.name + (DEAD_LETTER_SUFFIX if dead else "")
            link.accept(QueueReader(self.namespace, full, link),
                        max_message_size=entity.max_message_size)
        else:
            link.refuse("amqp:not-allowed", f"{entity.name!r} is an event hub: receive from "
                        f"'{entity.name}/ConsumerGroups/$Default/Partitions/<id>'")

    def _queue_limit(self, entity_limit: int) -> int:
        # A Service Bus namespace caps every queue (256 KiB on the standard tier).
        return min(entity_limit, self.namespace.max_message_size)

    def _not_found(self, link: Link, path: str) -> None:
        link.refuse("amqp:not-found", f"The messaging entity '{self.namespace.name}:{path}' "
                    "could not be found")

    def _node(self, link: Link, handler: Handler) -> None:
        if isinstance(link, IncomingLink):
            link.accept(Requests(self.namespace, handler))
        else:
            link.accept(Replies())

    async def _management(self, link: Link, entity_path: str) -> None:
        conn = link.session.connection
        if entity_path:
            # A token for the entity covers its management node; @azure/service-bus puts
            # one for the node itself (audience ENTITY/$management).
            if not conn.authorized(f"{entity_path}/$management"):
                link.refuse("amqp:unauthorized-access",
                            f"Unauthorized access to '{entity_path}/$management'")
                return
            dead = entity_path.lower().endswith(DEAD_LETTER_SUFFIX.lower())
            base = entity_path[: -len(DEAD_LETTER_SUFFIX)] if dead else entity_path
            entity = await self.namespace.run(self.namespace.store.find, base)
            if entity is not None and entity.kind is EntityKind.TOPIC and not dead:
                self._node(link, refuse_topic_operation)
                return
            if entity is None or entity.kind not in _QUEUES:
                self._not_found(link, entity_path)
                return
            name = entity.name + (DEAD_LETTER_SUFFIX if dead else "")
            ns = self.namespace
            limit = self._queue_limit(entity.max_message_size)

            sessions = self.sessions

            async def queue_op(requests: IncomingLink, request: AmqpMessage) -> Reply:
                refusal = _claims(requests, name, request)
                if refusal is not None:
                    return refusal
                lookup = functools.partial(sessions.token, requests.session.connection, name)
                return await manage_queue(ns, name, request, max_message_size=limit,
                                          sessions=lookup)

            self._node(link, queue_op)
            return
        if not conn.grants:
            link.refuse("amqp:unauthorized-access", "Unauthorized access to '$management'")
            return
        ns = self.namespace

        async def hub_op(requests: IncomingLink, request: AmqpMessage) -> Reply:
            # The credential first, as on the service: a hub no token covers is refused
            # (401) whether it exists or not.
            hub = str(app_property(request, "name") or "")
            # @azure/event-hubs puts its token for HUB/$management.
            if not requests.session.connection.authorized(f"{hub}/{_MANAGEMENT}"):
                return Reply(properties=status(401, f"Unauthorized access to '{hub}': put a "
                                               "token for it on $cbs first"))
            return await manage_hub(ns, request)

        self._node(link, hub_op)

    async def _hub_writer(self, link: Link, hub: str, partition_id: str | None) -> None:
        entity = await self.namespace.run(self.namespace.store.find, hub)
        if entity is None or entity.kind is not EntityKind.PARTITIONED:
            self._not_found(link, hub)
            return
        if partition_id is not None and not (
                partition_id.isdigit() and int(partition_id) < entity.partitions):
            self._not_found(link, f"{hub}/Partitions/{partition_id}")
            return
        link.accept(HubWriter(self.namespace, entity.name, entity.max_message_size,
                              partition_id), max_message_size=entity.max_message_size)

    async def _reader(self, link: Link, hub: str, group: str, partition_id: str) -> None:
        assert isinstance(link, OutgoingLink)
        entity = await self.namespace.run(self.namespace.store.find, hub)
        if entity is None or entity.kind is not EntityKind.PARTITIONED or not (
                partition_id.isdigit() and int(partition_id) < entity.partitions):
            self._not_found(link, f"{hub}/ConsumerGroups/{group}/Partitions/{partition_id}")
            return
        try:
            position = parse_position(link.source.filter if link.source else None)
        except ValueError as exc:
            link.refuse("com.microsoft:argument-error", str(exc))
            return
        if position.latest:
            # "Latest" is the end of the partition when the link attaches.
            latest = await self.namespace.run(self.namespace.store.latest, entity.name,
                                              partition_id)
            position = EventPosition(sequence_number=latest, inclusive=True)
        epoch = link.properties.get(_EPOCH)
        reader = PartitionReader(self.namespace, entity.name, group, partition_id, position,
                                 None if epoch is None else int(epoch))
        refusal = reader.claim(link)
        if refusal is not None:
            link.refuse(STOLEN, refusal)
            return
        link.accept(reader, max_message_size=entity.max_message_size)
