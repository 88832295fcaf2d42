"""A client's sender link to a queue: each delivery goes through the entity's geo sender.

A delivery (one message, or a batch the SDK packed) is settled ``accepted`` only once
``AsyncGeoSender.send_batch`` returned, that is once a namespace took the messages or
they are on disk in the durable queue: where ``GeoSender.send`` would have returned.
A refusal for good is settled ``rejected`` with the service's condition (see
``_outcomes``). The deliveries of one link are sent one after the other, in the order
they came, so a link keeps its messages' order as a sender keeps its calls'.

MessageIds are kept; a message sent without one gets one here (a UUID), which both
copies carry. What the geo sender carries of a message is what
:class:`replication.Message` holds: the body, the MessageId, the SessionId, the
partition key and the application properties.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

from gateway.amqp import (
    BATCH_FORMAT,
    Accepted,
    DecodeError,
    DeliveryState,
    decode_message,
    split_batch,
)
from gateway.amqp.server import Delivery, IncomingLink, ServerNamespace, Terminus, to_local
from gateway.proxy._outcomes import condition, describe, rejected
from replication import GatewayError, Message

if TYPE_CHECKING:
    from gateway.proxy._backend import GeoBackend

__all__ = ["SendNode", "messages_of"]

_LOG = logging.getLogger("gateway.proxy")


def messages_of(delivery: Delivery) -> list[Message]:
    """The geo messages of a delivery (a batch holds several).

    Raises:
        DecodeError, TypeError, ValueError: the payload is not a message the
            gateway can carry.
    """
    msg = decode_message(delivery.payload)
    parts = split_batch(msg) if delivery.message_format == BATCH_FORMAT else [msg]
    return [to_local(part) for part in parts]


class SendNode(Terminus):
    """A sender link to one entity, attached to that entity's geo sender."""

    def __init__(self, namespace: ServerNamespace, backend: GeoBackend, entity: str) -> None:
        self.namespace = namespace
        self.backend = backend
        self.entity = entity
        self._pending: collections.deque[Delivery] = collections.deque()
        self._running = False

    def on_delivery(self, link: IncomingLink, delivery: Delivery) -> None:
        self._pending.append(delivery)
        if not self._running:
            self._running = True
            self.namespace.spawn(self._work(link))

    async def _work(self, link: IncomingLink) -> None:
        try:
            while self._pending:
                delivery = self._pending.popleft()
                state = await self.backend.track(self._send(delivery))
                link.settle(delivery, state)
        finally:
            self._running = False

    async def _send(self, delivery: Delivery) -> DeliveryState:
        try:
            messages = messages_of(delivery)
        except (DecodeError, TypeError, ValueError) as exc:
            return rejected("amqp:decode-error", f"bad message: {exc}")
        try:
            sender = await self.backend.sender(self.entity)
            await sender.send_batch(messages)
        except GatewayError as exc:
            _LOG.info("a send to %r was refused: %s", self.entity, describe(exc))
            return rejected(condition(exc), describe(exc))
        return Accepted()
