"""Sending to Service Bus: an SDK sender per entity, messages packed into SDK batches."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.aio import ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError

from gateway.transports.sdk import GRACE, amqp_properties, check_entity
from gateway.transports.servicebus._client import ServiceBusBase
from gateway.transports.servicebus._errors import map_error as _map
from replication import Message, MessageTooLarge, OperationTimeout, TransportError

__all__ = ["ServiceBusSending"]


def _outgoing(message: Message) -> ServiceBusMessage:
    return ServiceBusMessage(
        message.body,
        message_id=message.message_id,
        partition_key=message.partition_key,
        session_id=message.session_id,
        application_properties=amqp_properties(message.properties),  # type: ignore[arg-type]
    )


class ServiceBusSending(ServiceBusBase):
    """The sending half of :class:`~.servicebus.ServiceBusTransport`: its senders,
    :meth:`prepare_send` and :meth:`send` (see that module's docstring)."""

    _senders: dict[str, ServiceBusSender]
    _send_locks: dict[str, asyncio.Lock]

    def _init_sending(self) -> None:
        self._senders = {}
        # One send (or prepare_send) at a time per sender: the SDK's sender opens its
        # connection on first use, and two first uses at once would open two.
        self._send_locks = {}

    def _sender(self, entity: str) -> ServiceBusSender:
        sender = self._senders.get(entity)
        if sender is None:
            try:
                # A queue sender sends to any entity path, topics included.
                sender = self._sdk().get_queue_sender(entity, **self.options.handler_kwargs())
            except (ValueError, TypeError) as exc:  # e.g. not the connection string's entity
                raise self._map(exc, f"open a sender to {entity!r}") from exc
            self._senders[entity] = sender
        return sender

    def _send_lock(self, entity: str) -> asyncio.Lock:
        lock = self._send_locks.get(entity)
        if lock is None:
            lock = self._send_locks[entity] = asyncio.Lock()
        return lock

    async def prepare_send(self, entity: str) -> None:
        """Open the connection and the sender link to ``entity`` (and learn its maximum
        message size), so the next send does not wait for them."""
        check_entity(entity)
        async with self._send_lock(entity):
            sender = self._sender(entity)
            await self._call(f"open a sender to {entity!r}", sender.create_message_batch,
                             seconds=self.options.operation_timeout + GRACE)

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        """Send messages to a queue or topic, in as few SDK batches as fit.

        Raises:
            NamespaceUnavailable: the namespace is down; nothing was sent.
            OperationTimeout: no answer in ``operation_timeout``, or a later SDK batch
                failed after earlier ones landed.
            MessageTooLarge: a message does not fit in an SDK batch on its own
                (``message_id`` names it; nothing was sent), or the namespace refused
                an SDK batch for size (``sent``: the messages of the SDK batches
                before it, which landed).
            MessageRejected: the entity does not exist, or access is refused;
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
        sender = self._sender(entity)
        bound = self.options.operation_timeout + GRACE
        outgoing = [_outgoing_checked(m, self.namespace, action) for m in messages]
        where = f"{action} on namespace {self.namespace!r}"
        batches = await self._call(action, lambda: _batches(sender, outgoing, where),
                                   seconds=bound)
        for index, batch in enumerate(batches):
            try:
                send = functools.partial(sender.send_messages, batch,
                                         timeout=self.options.operation_timeout)
                await self._call(action, send, seconds=bound)
            except MessageTooLarge as exc:
                if index == 0:
                    raise
                # The service measured differently from the SDK: the batches before
                # this one landed, and the caller may send the rest in smaller parts.
                raise MessageTooLarge(
                    f"{exc} (SDK batch {index + 1} of {len(batches)}; the ones before it "
                    "landed)", sent=sum(len(b) for b in batches[:index])) from exc
            except TransportError as exc:
                if isinstance(exc, OperationTimeout):
                    await self._drop_sender(entity)
                if index == 0:
                    raise
                raise OperationTimeout(
                    f"{action} on namespace {self.namespace!r} failed after {index} of "
                    f"{len(batches)} batches landed: a retry may deliver duplicates ({exc})",
                    namespace=self.namespace) from exc

    async def _drop_sender(self, entity: str) -> None:
        # Our own timeout cancelled the SDK mid-operation: start afresh next time.
        sender = self._senders.pop(entity, None)
        if sender is not None:
            await self._close(f"sender of {entity!r}", sender)

    async def _keep_or_close(self, entity: str, sender: ServiceBusSender) -> None:
        # Swap only when no send is using the old sender: a send holds the lock.
        if entity in self._senders and not self._send_lock(entity).locked():
            sender, self._senders[entity] = self._senders[entity], sender
            what = f"sender of {entity!r}"
        else:
            what = "probe sender"
        await self._close(what, sender)


def _outgoing_checked(message: Message, namespace: str, action: str) -> ServiceBusMessage:
    try:
        return _outgoing(message)
    except (ValueError, TypeError) as exc:
        raise _map(exc, namespace, action=action) from exc


async def _batches(sender: ServiceBusSender, messages: Sequence[ServiceBusMessage],
                   where: str) -> list[ServiceBusMessageBatch]:
    """Pack ``messages`` in order into as few batches as the link allows.

    Raises:
        MessageTooLarge: one message does not fit in an empty batch.
    """
    batches = [await sender.create_message_batch()]
    for message in messages:
        try:
            batches[-1].add_message(message)
        except MessageSizeExceededError as exc:
            if len(batches[-1]) == 0:
                raise _too_large(message, batches[-1], where) from exc
            batches.append(await sender.create_message_batch())
            try:
                batches[-1].add_message(message)
            except MessageSizeExceededError as again:
                raise _too_large(message, batches[-1], where) from again
    return batches


def _too_large(message: ServiceBusMessage, batch: ServiceBusMessageBatch,
               where: str) -> MessageTooLarge:
    return MessageTooLarge(
        f"{where} was refused for good: message {message.message_id!r} is too large (it "
        f"does not fit in an empty batch of {batch.max_size_in_bytes} bytes): make it "
        "smaller", message_id=message.message_id)
