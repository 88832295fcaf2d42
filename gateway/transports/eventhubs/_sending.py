"""Sending to Event Hubs: events packed into batches, one partition key per batch."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from azure.eventhub import EventData, EventDataBatch
from azure.eventhub.aio import EventHubProducerClient

from gateway.transports.eventhubs._client import EventHubsBase
from gateway.transports.sdk import amqp_properties, check_entity
from replication import Message, MessageTooLarge, OperationTimeout, TransportError

__all__ = ["EventHubsSending"]


def _outgoing(message: Message) -> EventData:
    event = EventData(message.body)
    event.message_id = message.message_id
    properties = amqp_properties(message.properties)
    if properties:
        event.properties = properties  # type: ignore[assignment]
    return event


def _by_key(messages: Sequence[Message]) -> dict[str | None, list[int]]:
    groups: dict[str | None, list[int]] = {}
    for index, message in enumerate(messages):
        groups.setdefault(message.partition_key, []).append(index)
    return groups


async def _batches(producer: EventHubProducerClient, messages: Sequence[Message],
                   where: str) -> list[tuple[EventDataBatch, list[int]]]:
    """Pack ``messages`` into batches: one partition key per batch, in order per key.

    Returns:
        Each batch with the indexes in ``messages`` of the events it holds.

    Raises:
        MessageTooLarge: one event does not fit in an empty batch.
    """
    batches: list[tuple[EventDataBatch, list[int]]] = []
    for key, group in _by_key(messages).items():
        batch, held = await producer.create_batch(partition_key=key), list[int]()
        batches.append((batch, held))
        for index in group:
            try:
                batch.add(_outgoing(messages[index]))
            except ValueError as exc:
                if len(batch) == 0:
                    raise _too_large(messages[index], batch, where) from exc
                batch, held = await producer.create_batch(partition_key=key), []
                batches.append((batch, held))
                try:
                    batch.add(_outgoing(messages[index]))
                except ValueError as again:
                    raise _too_large(messages[index], batch, where) from again
            held.append(index)
    return batches


def _too_large(message: Message, batch: EventDataBatch, where: str) -> MessageTooLarge:
    return MessageTooLarge(
        f"{where} was refused for good: message {message.message_id!r} is too large (it "
        f"does not fit in an empty batch of {batch.max_size_in_bytes} bytes): make it "
        "smaller", message_id=message.message_id)


def _landed_prefix(batches: Sequence[tuple[EventDataBatch, list[int]]]) -> int:
    """How many messages, from the first, the batches ``batches`` hold between them."""
    held = {index for _, indexes in batches for index in indexes}
    sent = 0
    while sent in held:
        sent += 1
    return sent


class EventHubsSending(EventHubsBase):
    """The sending half of :class:`~.eventhubs.EventHubsTransport`: :meth:`prepare_send`
    and :meth:`send` (see that module's docstring)."""

    _send_locks: dict[str, asyncio.Lock]

    def _init_sending(self) -> None:
        # One send (or prepare_send) at a time per producer: the SDK's producer opens
        # its connection and links on first use, and two first uses at once open two.
        self._send_locks = {}

    def _send_lock(self, entity: str) -> asyncio.Lock:
        lock = self._send_locks.get(entity)
        if lock is None:
            lock = self._send_locks[entity] = asyncio.Lock()
        return lock

    async def prepare_send(self, entity: str) -> None:
        """Open the connection and the round-robin sender link to ``entity`` (and learn
        its maximum message size), so the next send does not wait for them."""
        check_entity(entity)
        async with self._send_lock(entity):
            producer = self._producer(entity)
            await self._call(f"open a producer for {entity!r}", producer.create_batch,
                             seconds=self._bound())

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        """Send messages to an event hub (see the module docstring for batching).

        Raises:
            NamespaceUnavailable: the namespace is down; nothing was sent.
            OperationTimeout: no answer in ``operation_timeout``, or a later batch
                failed after earlier ones landed.
            MessageTooLarge: an event does not fit in a batch on its own
                (``message_id`` names it; nothing was sent), or the namespace refused
                a batch for size (``sent``: how many messages from the first landed
                with the batches before it; batches of other partition keys may
                have landed too).
            MessageRejected: the event hub does not exist, or access is refused;
                nothing was sent.
        """
        check_entity(entity)
        if not messages:
            return
        self._last_entity = entity
        action = f"send to {entity!r}"
        async with self._send_lock(entity):
            await self._send(entity, action, messages)

    async def _send(self, entity: str, action: str, messages: Sequence[Message]) -> None:
        producer = self._producer(entity)
        where = f"{action} on namespace {self.namespace!r}"
        batches = await self._call(action, lambda: _batches(producer, messages, where),
                                   seconds=self._bound())
        for index, (batch, _) in enumerate(batches):
            send = functools.partial(producer.send_batch, batch,
                                     timeout=self.options.operation_timeout)
            try:
                await self._call(action, send, seconds=self._bound())
            except MessageTooLarge as exc:
                if index == 0:
                    raise
                raise MessageTooLarge(
                    f"{exc} (batch {index + 1} of {len(batches)}; the ones before it landed)",
                    sent=_landed_prefix(batches[:index])) from exc
            except TransportError as exc:
                if index == 0:
                    raise
                raise OperationTimeout(
                    f"{action} on namespace {self.namespace!r} failed after {index} of "
                    f"{len(batches)} batches landed: a retry may deliver duplicates ({exc})",
                    namespace=self.namespace) from exc
