"""Service Bus queues over the local namespace: send, receive and settle on links.

A message is refused when it is larger than the link's max-message-size (the
smaller of the queue's and the namespace's limit: 256 KiB by default, as on a
standard tier namespace), with ``amqp:link:message-size-exceeded`` as on Azure. A
batch is measured as azure-servicebus measures it when it packs one
(:func:`batch_size`), so a batch the SDK accepted as full is taken.
Receiving in peek-lock mode, the delivery tag is the lock token (as the SDKs read
it: a little-endian UUID), and the message carries ``x-opt-locked-until``. A
settlement the client waits for (it sends it unsettled) is answered with the
outcome it asked for, or ``rejected`` with ``com.microsoft:message-lock-lost`` when
the lock expired or the message was settled already. The ``modified`` outcome with
``undeliverable-here`` defers the message (azure-servicebus's ``defer_message``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from gateway.amqp import (
    BATCH_FORMAT,
    Accepted,
    AmqpMessage,
    DecodeError,
    DeliveryState,
    Error,
    Modified,
    Rejected,
    Released,
    Symbol,
    decode_message,
    split_batch,
)
from gateway.amqp.server import (
    Delivery,
    IncomingLink,
    Link,
    OutgoingLink,
    Terminus,
    lock_tag,
    queue_payload,
    stalled,
    to_queued,
    wait_first,
)
from gateway.emulator.amqp._interfaces import NodeNamespace
from gateway.emulator.amqp._servicebus_management import LOCK_LOST, manage_queue
from gateway.transports import DEAD_LETTER_SUFFIX, Queued
from gateway.transports.base import ReceivedMessage, ReceiveMode
from replication import GatewayError, Message, SessionLockLost

__all__ = ["ENVELOPE_ALLOWANCE", "LOCK_LOST", "QueueReader", "QueueWriter", "batch_size",
           "decode_delivery", "manage_queue", "rejected"]

_LOG = logging.getLogger("gateway.emulator")
SESSION_LOCK_LOST = "com.microsoft:session-lock-lost"
#: How long a receiver with credit and no messages waits before looking again.
_IDLE_POLL = 0.25
_MAX_CLAIM = 64
#: What a Service Bus batch's envelope may hold beyond its data sections without being
#: counted: azure-servicebus copies the first message's MessageId, SessionId (128
#: characters each, up to 4 UTF-8 bytes a character) and partition key onto the
#: envelope after it measured the batch. Anything beyond counts.
ENVELOPE_ALLOWANCE = 2048


def batch_size(payload_size: int, batch: AmqpMessage) -> int:
    """The size of a Service Bus batch as azure-servicebus counts it when it packs one.

    ``ServiceBusMessageBatch.add_message`` adds each message's encoded size plus the
    5 bytes (under 256) or 8 bytes (from 256) that frame it as a data section of the
    batch, starting from the encoded size of an empty envelope (0 bytes). The
    envelope's properties and partition key annotation are set from the first
    message afterwards and never counted: they are left out here too, up to
    :data:`ENVELOPE_ALLOWANCE` bytes.

    Args:
        payload_size: the size of the whole transfer payload, envelope included.
        batch: the decoded envelope.
    """
    counted = sum(len(chunk) + (5 if len(chunk) < 256 else 8) for chunk in batch.data or ())
    return counted + max(0, payload_size - counted - ENVELOPE_ALLOWANCE)


def rejected(condition: str, description: str) -> Rejected:
    return Rejected(error=Error(condition=Symbol(condition), description=description))


def decode_delivery(delivery: Delivery) -> list[AmqpMessage]:
    """The messages of a delivery (a batch holds several).

    Raises:
        DecodeError: the payload is not a message.
    """
    msg = decode_message(delivery.payload)
    return split_batch(msg) if delivery.message_format == BATCH_FORMAT else [msg]


class QueueWriter(Terminus):
    """A sender link to a queue (or an event hub, or one of its partitions)."""

    def __init__(self, namespace: NodeNamespace, entity: str, max_message_size: int,
                 partition_id: str | None = None) -> None:
        self.namespace = namespace
        self.entity = entity
        self.max_message_size = max_message_size
        self.partition_id = partition_id

    def on_delivery(self, link: IncomingLink, delivery: Delivery) -> None:
        try:
            # A single message is measured whole, before it is decoded; a batch once
            # its envelope is decoded, the way the SDK measured it.
            outer = (decode_message(delivery.payload)
                     if delivery.message_format == BATCH_FORMAT else None)
            size = len(delivery.payload) if outer is None else self.batch_size(delivery, outer)
            if size > self.max_message_size:
                link.settle(delivery, rejected(
                    "amqp:link:message-size-exceeded",
                    f"the {'batch' if outer else 'message'} is {size} bytes, over the "
                    f"{self.max_message_size}-byte limit of {self.entity!r}"))
                return
            messages = self.convert(delivery, outer)
        except (DecodeError, TypeError, ValueError) as exc:
            link.settle(delivery, rejected("amqp:decode-error", f"bad message: {exc}"))
            return
        self.namespace.append(self.entity, self.partition_id, messages,
                              functools.partial(self._stored, link, delivery))

    def batch_size(self, delivery: Delivery, outer: AmqpMessage) -> int:
        """The size of a batch delivery, as the SDK that packed it counts it."""
        return batch_size(len(delivery.payload), outer)

    def convert(self, delivery: Delivery, outer: AmqpMessage | None) -> Sequence[Message | Queued]:
        """The local messages of a delivery (``outer``: a batch's decoded envelope)."""
        if outer is not None:
            return [to_queued(chunk) for chunk in outer.data or ()]
        return [to_queued(delivery.payload)]

    def _stored(self, link: IncomingLink, delivery: Delivery, error: GatewayError | None) -> None:
        ns = self.namespace
        if error is not None:
            state: Accepted | Rejected = rejected("amqp:internal-error", str(error))
        elif ns.lose_reply():
            return  # stored, but the sender never hears of it (an injected fault)
        else:
            state = Accepted()
        if ns.state.latency > 0:
            ns.spawn(_later(ns, link.settle, delivery, state))
        else:
            link.settle(delivery, state)


async def _later(namespace: NodeNamespace, fn: Callable[..., None], *args: Any) -> None:
    """Call ``fn`` after the injected latency."""
    await namespace.delay()
    fn(*args)


_ACTIONS = {Accepted: "complete", Released: "release", Modified: "abandon", Rejected: "dead_letter"}


class QueueReader(Terminus):
    """A receiver link on a queue or its dead-letter sub-queue."""

    def __init__(self, namespace: NodeNamespace, entity: str, link: OutgoingLink) -> None:
        self.namespace = namespace
        self.entity = entity
        self.mode = ReceiveMode.RECEIVE_AND_DELETE if link.settled_mode else ReceiveMode.PEEK_LOCK
        self._wake = asyncio.Event()
        self._dlq_source = entity[: -len(DEAD_LETTER_SUFFIX)] if entity.endswith(
            DEAD_LETTER_SUFFIX) else None
        namespace.spawn(self._pump(link))

    def on_credit(self, link: OutgoingLink) -> None:
        self._wake.set()

    def on_detach(self, link: Link) -> None:
        self._wake.set()

    async def claim(self, count: int) -> list[tuple[ReceivedMessage, bytes | None]]:
        """Take up to ``count`` messages to deliver (locked, or deleted in receive-and-delete)."""
        ns = self.namespace
        return await ns.run(ns.store.receive_sections, self.entity, max_messages=count,
                            mode=self.mode, now=time.time())

    async def _pump(self, link: OutgoingLink) -> None:
        try:
            await self._deliver(link)
        except Exception:
            _LOG.exception("delivering to %r failed", link.address)
            link.detach("amqp:internal-error", "the emulator failed")

    async def _deliver(self, link: OutgoingLink) -> None:
        ns = self.namespace
        conn = link.session.connection
        while link.state != "detached":
            if await stalled(ns, conn):
                return
            if not link.can_send():
                link.drained()
                await link.wait_to_send(self._wake)
                continue
            changed = ns.changed(self.entity)
            try:
                received = await self.claim(min(link.credit, _MAX_CLAIM))
            except SessionLockLost as exc:
                link.detach(SESSION_LOCK_LOST, str(exc))
                return
            except GatewayError as exc:
                link.detach("amqp:internal-error", str(exc))
                return
            if not received:
                link.drained()
                self._wake.clear()
                await wait_first([changed.wait(), self._wake.wait()], _IDLE_POLL)
                continue
            await ns.delay()
            self._send(link, received)
            await conn.drain()

    def _send(self, link: OutgoingLink,
              received: list[tuple[ReceivedMessage, bytes | None]]) -> None:
        peek = self.mode is ReceiveMode.PEEK_LOCK
        unsent: list[tuple[str, str, str, str]] = []
        for r, sections in received:
            # Messages taken in receive-and-delete mode are gone from the queue: send
            # them even if the credit shrank meanwhile, rather than lose them.
            if peek and not link.can_send():
                assert r.lock_token is not None
                unsent.append((r.lock_token, "release", "", ""))
                continue
            payload = queue_payload(r, sections=sections, dead_letter_source=self._dlq_source,
                                    delivered=True)
            # A 16-byte tag either way: the SDK reads any tag as a UUID.
            tag = lock_tag(r.lock_token) if r.lock_token else r.sequence_number.to_bytes(16, "big")
            link.send(tag, payload, settled=not peek, token=r.lock_token)
        if unsent:
            self.namespace.store.settle_tokens(self.entity, unsent, time.time())

    def on_disposition(self, link: OutgoingLink, deliveries: list[tuple[int, object]],
                       state: object, settled: bool) -> None:
        if self.mode is not ReceiveMode.PEEK_LOCK:
            return
        replies = self._settle(deliveries, state)
        self.namespace.wrote([self.entity])
        if settled:
            return  # the peer does not wait for an answer
        if self.namespace.state.latency > 0:
            self.namespace.spawn(_later(self.namespace, _answer, link, replies))
        else:
            _answer(link, replies)

    def _settle(self, deliveries: list[tuple[int, object]],
                state: object) -> list[tuple[int, DeliveryState]]:
        """Apply a peer's outcome to deliveries; the answer to send for each."""
        action = _ACTIONS.get(type(state))
        reason = description = ""
        if isinstance(state, Modified) and state.undeliverable_here:
            action = "defer"  # received again only by its sequence number
        if action is None:
            refusal = rejected("amqp:not-implemented", f"the outcome {state!r} is not emulated")
            return [(delivery_id, refusal) for delivery_id, _ in deliveries]
        if isinstance(state, Rejected) and isinstance(state.error, Error):
            info = {str(k): v for k, v in (state.error.info or {}).items()}
            reason = str(info.get("DeadLetterReason") or "")
            description = str(info.get("DeadLetterErrorDescription")
                              or state.error.description or "")
        items = [(str(token), action, reason, description) for _, token in deliveries]
        try:
            results = self.namespace.store.settle_tokens(self.entity, items, time.time())
        except GatewayError as exc:
            failure = rejected("amqp:internal-error", str(exc))
            return [(delivery_id, failure) for delivery_id, _ in deliveries]
        lost = rejected(LOCK_LOST, "the lock on the message was lost: it expired or the "
                                   "message was settled already")
        # The SDK waits for the outcome it asked for; a dead-letter is echoed without error.
        echo = Rejected(error=None) if isinstance(state, Rejected) else cast(DeliveryState, state)
        return [(delivery_id, echo if ok else lost)
                for (delivery_id, _), ok in zip(deliveries, results, strict=True)]


def _answer(link: OutgoingLink, replies: list[tuple[int, DeliveryState]]) -> None:
    for delivery_id, state in replies:
        link.settled(delivery_id, state)
