"""Sending to Event Hubs: events packed into batches, one partition key per batch."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from azure.eventhub import EventData, EventDataBatch
from azure.eventhub.aio import EventHubProducerClient

from gateway.transports._eventhubs_client import EventHubsBase
from gateway.transports._sdk_convert import amqp_properties
from gateway.transports._sdk_transport import check_entity
from replication import Message, OperationTimeout, TransportError

__all__ = ["EventHubsSending"]


def _outgoing(message: Message) -> EventData:
    event = EventData(message.body)
    event.message_id = message.message_id
    properties = amqp_properties(message.properties)
    if properties:
        event.properties = properties  # type: ignore[assignment]
    return event


def _by_key(messages: Sequence[Message]) -> dict[str | None, list[Message]]:
    groups: dict[str | None, list[Message]] = {}
    for message in messages:
        groups.setdefault(message.partition_key, []).append(message)
    return groups


async def _batches(producer: EventHubProducerClient,
                   messages: Sequence[Message]) -> list[EventDataBatch]:
    """Pack ``messages`` into batches: one partition key per batch, in order per key.

    Raises (SDK):
        ValueError: one event does not fit in an empty batch.
    """
    batches: list[EventDataBatch] = []
    for key, group in _by_key(messages).items():
        batch = await producer.create_batch(partition_key=key)
        batches.append(batch)
        for message in group:
            try:
                batch.add(_outgoing(message))
            except ValueError:
                if len(batch) == 0:
                    raise  # too large on its own
                batch = await producer.create_batch(partition_key=key)
                batches.append(batch)
                batch.add(_outgoing(message))
    return batches


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
            MessageRejected: a message is too large, the event hub does not exist,
                or access is refused; nothing was sent.
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
        batches = await self._call(action, lambda: _batches(producer, messages),
                                   seconds=self._bound())
        for index, batch in enumerate(batches):
            send = functools.partial(producer.send_batch, batch,
                                     timeout=self.options.operation_timeout)
            try:
                await self._call(action, send, seconds=self._bound())
            except TransportError as exc:
                if index == 0:
                    raise
                raise OperationTimeout(
                    f"{action} on namespace {self.namespace!r} failed after {index} of "
                    f"{len(batches)} batches landed: a retry may deliver duplicates ({exc})",
                    namespace=self.namespace) from exc
