"""Receiving from Service Bus: receivers, peek-locked deliveries, their renewal and settling."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import AutoLockRenewer, ServiceBusReceiver
from azure.servicebus.exceptions import OperationTimeoutError, SessionCannotBeLockedError

from gateway.transports.base import ReceivedMessage, ReceiveMode
from gateway.transports.sdk import (
    GRACE,
    body_bytes,
    check_entity,
    epoch_seconds,
    properties_from,
    text_or_none,
)
from gateway.transports.servicebus._client import ServiceBusBase
from gateway.transports.servicebus._sessions import ServiceBusSessionReceiver
from replication import ConfigError, GatewayError, Message, MessageRejected, TransportError

__all__ = ["ServiceBusReceiving"]

logger = logging.getLogger("gateway.transports.servicebus")

#: Service Bus cannot receive without waiting: ``max_wait`` is raised to this.
_MIN_WAIT = 0.25


# -- entities ---------------------------------------------------------------------------

_SUB_QUEUES = {"$deadletterqueue": ServiceBusSubQueue.DEAD_LETTER,
               "$transferdeadletterqueue": ServiceBusSubQueue.TRANSFER_DEAD_LETTER}


@dataclass(frozen=True)
class _Source:
    """Where a receiver reads: a queue, or a topic's subscription; maybe a sub-queue."""

    name: str
    subscription: str | None
    sub_queue: ServiceBusSubQueue | None


def _source(entity: str) -> _Source:
    parts = entity.split("/") if isinstance(entity, str) else []
    sub_queue = _SUB_QUEUES.get(parts[-1].lower()) if len(parts) > 1 else None
    if sub_queue is not None:
        parts = parts[:-1]
    if len(parts) == 1 and parts[0]:
        return _Source(parts[0], None, sub_queue)
    if len(parts) == 3 and parts[1].lower() == "subscriptions" and parts[0] and parts[2]:
        return _Source(parts[0], parts[2], sub_queue)
    raise ConfigError(f"bad Service Bus entity {entity!r}: use QUEUE, TOPIC/Subscriptions/SUB, "
                      "either followed by /$DeadLetterQueue")


# -- messages ---------------------------------------------------------------------------


def _incoming(msg: ServiceBusReceivedMessage) -> Message:
    message_id = text_or_none(msg.message_id) or f"sb-seq-{msg.sequence_number}"
    return Message(body_bytes(msg.body), message_id=message_id,
                   partition_key=text_or_none(msg.partition_key),
                   properties=properties_from(msg.application_properties),
                   session_id=text_or_none(msg.session_id))


@dataclass
class _Held:
    """A peek-locked delivery: the SDK message and the receiver that must settle it."""

    message: ServiceBusReceivedMessage
    receiver: ServiceBusReceiver


class ServiceBusReceiving(ServiceBusBase):
    """The receiving half of :class:`~.servicebus.ServiceBusTransport`: its receivers,
    :meth:`receive` and the settlement of peek-locked deliveries (see that module's
    docstring)."""

    _receivers: dict[tuple[str, ReceiveMode], ServiceBusReceiver]
    _receive_locks: dict[tuple[str, ReceiveMode], anyio.Lock]
    _held: dict[str, _Held]
    _renewer: AutoLockRenewer | None

    def _init_receiving(self) -> None:
        self._receivers = {}
        self._receive_locks = {}
        self._held = {}
        self._renewer = None

    def _lock_renewer(self) -> AutoLockRenewer | None:
        if self.options.max_lock_renewal_duration <= 0:
            return None
        if self._renewer is None:
            self._renewer = AutoLockRenewer(
                max_lock_renewal_duration=self.options.max_lock_renewal_duration,
                on_lock_renew_failure=self._renewal_failed)
        return self._renewer

    async def _renewal_failed(self, renewable: object, error: Exception | None) -> None:
        if error is not None:
            logger.warning("lock renewal on %s stopped: %s", self.namespace,
                           self._map(error, "renew lock"))

    def _receiver(self, entity: str, mode: ReceiveMode) -> ServiceBusReceiver:
        key = (entity, mode)
        receiver = self._receivers.get(key)
        if receiver is None:
            source = _source(entity)
            peek = mode is ReceiveMode.PEEK_LOCK
            kwargs: dict[str, Any] = {
                "sub_queue": source.sub_queue,
                "receive_mode": (ServiceBusReceiveMode.PEEK_LOCK if peek
                                 else ServiceBusReceiveMode.RECEIVE_AND_DELETE),
                "prefetch_count": self.options.prefetch_count,
                "auto_lock_renewer": self._lock_renewer() if peek else None,
                **self.options.handler_kwargs(),
            }
            try:
                if source.subscription is None:
                    receiver = self._sdk().get_queue_receiver(source.name, **kwargs)
                else:
                    receiver = self._sdk().get_subscription_receiver(
                        source.name, source.subscription, **kwargs)
            except (ValueError, TypeError) as exc:  # e.g. not the connection string's entity
                raise self._map(exc, f"open a receiver on {entity!r}") from exc
            self._receivers[key] = receiver
        return receiver

    def _prune(self) -> None:
        # Deliveries never settled (a crashed handler) are forgotten once their lock
        # expired: settling them fails as "lock lost" either way.
        now = time.time()
        for token, held in list(self._held.items()):
            until = epoch_seconds(held.message.locked_until_utc)
            session = held.receiver.session
            if until is None and session is not None:
                # A session's messages are locked as long as the session (the SDK says
                # None for theirs).
                until = epoch_seconds(session.locked_until_utc)
            if until is None or until < now - 1.0:
                del self._held[token]

    async def receive(self, entity: str, *, max_messages: int = 1, max_wait: float = 0.0,
                      mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> list[ReceivedMessage]:
        """Receive up to ``max_messages``, waiting up to ``max_wait`` seconds (at least 0.25).

        Use ``"QUEUE/$DeadLetterQueue"`` (or ``"TOPIC/Subscriptions/SUB/$DeadLetterQueue"``)
        to receive dead letters. Peek-locked messages have their locks renewed until
        settled (see the module docstring).

        Returns:
            The messages; an empty list only when none arrived in time.

        Raises:
            NamespaceUnavailable: the namespace is down.
            OperationTimeout: the namespace did not answer in time.
            MessageRejected: no such entity, or access is refused.
            ConfigError: ``max_messages`` below 1, or a malformed entity.
        """
        if max_messages < 1:
            raise ConfigError(f"max_messages must be at least 1, got {max_messages}")
        check_entity(entity)
        self._last_entity = _source(entity).name
        receiver = self._receiver(entity, mode)
        wait = max(float(max_wait), _MIN_WAIT)
        lock = self._receive_locks.setdefault((entity, mode), anyio.Lock())
        action = f"receive from {entity!r}"
        bound = self.options.operation_timeout + GRACE
        async with lock:
            # Open (or reopen after an outage) first: a short wait must not bound the open.
            await self._call(action, receiver.__aenter__, seconds=bound)
            got = await self._call(
                action, lambda: receiver.receive_messages(max_message_count=max_messages,
                                                          max_wait_time=wait),
                seconds=wait + bound)
        return self._delivered(got, receiver, entity, mode)

    def _delivered(self, got: list[ServiceBusReceivedMessage], receiver: ServiceBusReceiver,
                   entity: str, mode: ReceiveMode) -> list[ReceivedMessage]:
        """The records of SDK messages ``receiver`` received; peek-locked ones are held
        for settling."""
        self._prune()
        result = []
        for msg in got:
            locked = mode is ReceiveMode.PEEK_LOCK and msg.lock_token
            token = str(msg.lock_token) if locked else None
            if token is not None:
                self._held[token] = _Held(msg, receiver)
            result.append(ReceivedMessage(
                message=_incoming(msg), namespace=self.namespace, entity=entity,
                lock_token=token, sequence_number=msg.sequence_number or 0,
                delivery_count=(msg.delivery_count or 0) + 1,
                enqueued_time=epoch_seconds(msg.enqueued_time_utc) or 0.0,
                locked_until=epoch_seconds(msg.locked_until_utc) if token else None))
        return result

    async def _settle(self, received: ReceivedMessage, how: str,
                      settle: Callable[[_Held], Awaitable[None]]) -> None:
        action = f"{how} {received.message_id!r} on {received.entity!r}"
        token = received.lock_token
        held = self._held.get(token) if token is not None else None
        if held is None or received.namespace != self.namespace:
            raise MessageRejected(
                f"{action} on namespace {self.namespace!r} failed: lock lost (expired, settled "
                "already, or not received in peek-lock by this transport); do not retry, the "
                "message is delivered again")
        try:
            await self._call(action, lambda: settle(held),
                             seconds=self.options.operation_timeout + GRACE)
        except TransportError:
            raise  # the lock may still hold: settling again may succeed
        except GatewayError:
            self._held.pop(token, None)  # type: ignore[arg-type]
            raise
        self._held.pop(token, None)  # type: ignore[arg-type]

    async def complete(self, received: ReceivedMessage) -> None:
        """Remove a peek-locked message from its queue.

        Raises:
            MessageRejected: the lock is lost (expired or settled); do not retry.
            NamespaceUnavailable: the namespace is down.
            OperationTimeout: no answer in time; the message may or may not be settled.
        """
        await self._settle(received, "complete",
                           lambda h: h.receiver.complete_message(h.message))

    async def abandon(self, received: ReceivedMessage) -> None:
        """Release the lock so the message is delivered again (delivery count + 1).

        Raises:
            MessageRejected: the lock is lost (expired or settled); do not retry.
            NamespaceUnavailable: the namespace is down.
            OperationTimeout: no answer in time.
        """
        await self._settle(received, "abandon", lambda h: h.receiver.abandon_message(h.message))

    async def dead_letter(self, received: ReceivedMessage, *, reason: str,
                          description: str = "") -> None:
        """Move the message to its entity's ``$DeadLetterQueue`` with a reason.

        Service Bus records them as the ``DeadLetterReason`` and
        ``DeadLetterErrorDescription`` properties of the dead letter.

        Raises:
            MessageRejected: the lock is lost, or the message is a dead letter already.
            NamespaceUnavailable: the namespace is down.
            OperationTimeout: no answer in time.
        """
        if _source(received.entity).sub_queue is not None:
            raise MessageRejected(f"{received.message_id!r} on {received.entity!r} is a dead "
                                  "letter already")
        await self._settle(received, "dead-letter", lambda h: h.receiver.dead_letter_message(
            h.message, reason=reason, error_description=description))

    async def defer(self, received: ReceivedMessage) -> None:
        """Set a peek-locked message aside until :meth:`receive_deferred` asks for it.

        Raises:
            MessageRejected: the lock is lost (expired or settled); do not retry.
            NamespaceUnavailable: the namespace is down.
            OperationTimeout: no answer in time.
        """
        await self._settle(received, "defer", lambda h: h.receiver.defer_message(h.message))

    async def receive_deferred(self, entity: str,
                               sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        """Deferred messages by sequence number, peek-locked (see ``Transport``).

        Raises:
            MessageRejected: a number names no deferred message, or the entity requires
                sessions (use the session's receiver).
            NamespaceUnavailable: the namespace is down.
        """
        check_entity(entity)
        receiver = self._receiver(entity, ReceiveMode.PEEK_LOCK)
        lock = self._receive_locks.setdefault((entity, ReceiveMode.PEEK_LOCK), anyio.Lock())
        action = f"receive deferred messages of {entity!r}"
        bound = self.options.operation_timeout + GRACE
        async with lock:
            await self._call(action, receiver.__aenter__, seconds=bound)
            got = await self._call(
                action, lambda: receiver.receive_deferred_messages(list(sequence_numbers)),
                seconds=bound)
        return self._delivered(got, receiver, entity, ReceiveMode.PEEK_LOCK)

    async def accept_session(self, entity: str, session_id: str | None = None, *,
                             max_wait: float = 0.0) -> ServiceBusSessionReceiver | None:
        """Lock a session of a queue or subscription (see ``Transport.accept_session``).

        Service Bus answers "no session free" with a timeout: for the next available
        session, an ``OperationTimeoutError`` of the SDK within ``max_wait`` returns
        ``None`` (no answer at all within ``max_wait`` and ``operation_timeout`` is an
        ``OperationTimeout``); a named session another receiver holds returns ``None``.

        Raises:
            MessageRejected: no such entity, or it does not require sessions.
            NamespaceUnavailable, OperationTimeout: the namespace failed or hangs.
        """
        check_entity(entity)
        source = _source(entity)
        if source.sub_queue is not None:
            raise MessageRejected(f"{entity!r} is a sub-queue: it has no sessions")
        self._last_entity = source.name
        wait = max(float(max_wait), _MIN_WAIT)
        kwargs: dict[str, Any] = {
            "session_id": NEXT_AVAILABLE_SESSION if session_id is None else session_id,
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK, "max_wait_time": wait,
            "prefetch_count": self.options.prefetch_count, **self.options.handler_kwargs()}
        try:
            receiver = (self._sdk().get_queue_receiver(source.name, **kwargs)
                        if source.subscription is None else self._sdk().get_subscription_receiver(
                            source.name, source.subscription, **kwargs))
        except (ValueError, TypeError) as exc:
            raise self._map(exc, f"open a session receiver on {entity!r}") from exc
        bound = self.options.operation_timeout + GRACE
        try:
            await self._call(f"accept a session of {entity!r}", receiver.__aenter__,
                             seconds=wait + bound)
        except GatewayError as exc:
            await self._close("session receiver", receiver)
            cause = exc.__cause__
            if isinstance(cause, SessionCannotBeLockedError) or (
                    session_id is None and isinstance(cause, OperationTimeoutError)):
                return None
            raise
        except BaseException:
            # Cancelled: the link may hold a session's lock already; give it back.
            with anyio.CancelScope(shield=True):
                await self._close("session receiver", receiver)
            raise
        return ServiceBusSessionReceiver(receiver, namespace=self.namespace, entity=entity,
                                         call=self._call, deliver=self._delivered,
                                         close=self._close, bound=bound)

