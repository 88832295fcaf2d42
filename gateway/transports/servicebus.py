"""A :class:`Transport` on an Azure Service Bus namespace (``azure.servicebus.aio``).

Entities: a queue ``"orders"``; a topic subscription ``"topic/Subscriptions/sub"``
to receive (send to ``"topic"``); ``".../$DeadLetterQueue"`` after either to receive
dead letters. One sender per entity and one receiver per (entity, receive mode) are
opened on first use and kept until :meth:`~ServiceBusTransport.aclose`.

Sending: a batch is split into as few SDK batches as the link allows (the SDK
takes the limit from the link's ``com.microsoft:max-message-batch-size``, else
256 KB, or 1 MB on Premium). All of them are built before the first is sent, so
a message too large raises ``MessageRejected`` with nothing sent. Only a batch that
fits in one SDK batch is sent all or none; when a later SDK batch fails, the
earlier ones have landed, so a transient failure is raised as ``OperationTimeout``
(a replay may deliver duplicates, which the receive side removes by ``MessageId``).

Mapping: ``message_id``, ``body`` (one data section) and ``application_properties``
map one to one. ``partition_key`` goes to the SDK's ``partition_key``: partitioned
entities route by it and every entity keeps it as a message annotation, so it
comes back on receive. Service Bus refuses keys longer than 128 characters (the
SDK raises, and so does :meth:`~ServiceBusTransport.send`: ``MessageRejected``).
Received property values that are not str/int/float/bool/None become ``str``; a
message without a ``message_id`` (from another producer) gets ``"sb-seq-<sequence
number>"``, stable across redeliveries.

Receiving: a receiver link is opened (within ``operation_timeout``) before
``receive`` waits, so that a short ``max_wait`` does not cut the opening short.

Peek-lock: the SDK message of each delivery is kept by its lock token until it is
settled or its lock is lost; :meth:`~ServiceBusTransport.complete` and friends settle
through the receiver that received it. While the application handles a message,
the SDK's ``AutoLockRenewer`` renews its lock until it is settled or
``max_lock_renewal_duration`` seconds have passed (0 turns renewal off); then the
lock expires and the message is delivered again. The renewer looks once a second
and renews a lock 10 s before it expires (a shorter lock when three quarters of its
whole seconds are left), so locks under about 4 s may expire anyway; Service Bus's
shortest is 5 s. ``ReceivedMessage.locked_until`` is the lock's expiry when it was
received; renewals do not update it.
``ReceivedMessage.delivery_count`` counts this delivery (1 the first time), as
Service Bus's ``DeliveryCount`` and the local transport do; the Python SDK reports
the AMQP header, which counts the earlier ones.

Errors are mapped at this boundary (:func:`_map`), most specific first::

    SDK exception                                      geogateway error
    -------------------------------------------------  ----------------------------------
    ServiceBusConnectionError                          NamespaceUnavailable
    ServiceBusCommunicationError                       NamespaceUnavailable
    ServiceBusServerBusyError                          NamespaceUnavailable
    ServiceBusQuotaExceededError                       NamespaceUnavailable  (1)
    MessagingEntityDisabledError                       NamespaceUnavailable  (1)
    ServiceBusAuthenticationError, token refused       MessageRejected       (2)
      (status 401/403/404, unauthorized-access)
    ServiceBusAuthenticationError, otherwise           NamespaceUnavailable  (2)
    ServiceBusAuthorizationError                       MessageRejected
    OperationTimeoutError                              OperationTimeout
    MessageSizeExceededError                           MessageRejected
    MessagingEntityNotFoundError                       MessageRejected
    MessagingEntityAlreadyExistsError                  MessageRejected
    SessionCannotBeLockedError                         MessageRejected       (3)
    MessageLockLostError, SessionLockLostError,        MessageRejected ("lock lost")  (4)
      MessageNotFoundError, MessageAlreadySettled,
      AutoLockRenewFailed, AutoLockRenewTimeout
    ServiceBusError (other)                            by what it wraps, then by its AMQP
                                                       condition or status code, else
                                                       NamespaceUnavailable
    azure.core ClientAuthenticationError               MessageRejected  (no token for good)
    azure.core ServiceRequestError/ResponseError       NamespaceUnavailable (token endpoint
                                                       or host unreachable)
    azure.core HttpResponseError                       by status: 408 OperationTimeout,
                                                       4xx MessageRejected, 429/5xx
                                                       NamespaceUnavailable
    TimeoutError (also no answer in operation_timeout) OperationTimeout
    OSError (socket errors)                            NamespaceUnavailable
    ValueError, TypeError (SDK validation)             MessageRejected
    anything else                                      NamespaceUnavailable

(1) the entity is full or disabled on this namespace only: the other namespace may
take the message, so it fails over rather than being refused for good.
(2) a token the service refused is permanent; a token that could not be obtained
or put in time (the SDK's "Authorization timeout", a dropped connection) means
the namespace is not answering.
(3) geogateway does not use sessions; an entity that requires them cannot be used.
(4) as on the local transport: permanent for that delivery (retrying cannot
succeed) and the message itself is delivered again; ``GeoReceiver`` logs it.

Connection strings and keys never appear in reprs, logs or error messages.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.credentials_async import AsyncTokenCredential
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageBatch,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import (
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusReceiver,
    ServiceBusSender,
)
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
)

from gateway.transports._sdk_config import (
    SdkOptions,
    check_namespace_host,
    connection_string_parts,
    default_credential,
    host_of,
)
from gateway.transports._sdk_convert import (
    amqp_properties,
    body_bytes,
    epoch_seconds,
    properties_from,
    text_or_none,
)
from gateway.transports._sdk_errors import Outcome
from gateway.transports._sdk_transport import GRACE, SdkTransport, check_entity
from gateway.transports._servicebus_errors import map_error as _map
from gateway.transports._servicebus_errors import outcome as _outcome
from gateway.transports.base import EventPosition, PartitionEvent, ReceivedMessage, ReceiveMode
from replication import (
    ConfigError,
    GatewayError,
    Message,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    TransportError,
)

__all__ = ["ServiceBusOptions", "ServiceBusTransport"]

logger = logging.getLogger(__name__)
Credential = AsyncTokenCredential | AzureSasCredential | AzureNamedKeyCredential

#: Service Bus cannot receive without waiting: ``max_wait`` is raised to this.
_MIN_WAIT = 0.25


@dataclass(frozen=True, kw_only=True)
class ServiceBusOptions(SdkOptions):
    """Options of :class:`ServiceBusTransport` (see :class:`SdkOptions` for the rest).

    Args:
        max_lock_renewal_duration: seconds the lock of a peek-locked message is
            renewed while it is not settled; 0 turns renewal off.
        prefetch_count: messages a receiver fetches ahead (the SDK's default, 0,
            keeps unreceived messages available to other receivers).
        keep_alive: seconds between the SDK's keep-alive reads on an idle link (its
            default is 30); 0 turns them off, as azure-eventhub's producer has them.
            With them on, an SDK sender or receiver that failed waits for its
            keep-alive task (which sleeps a second at a time) before it reports the
            error: up to a second more before a failover. A connection the service
            drops while idle is reopened by the next call (a send's retry).
    """

    max_lock_renewal_duration: float = 300.0
    prefetch_count: int = 0
    keep_alive: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        value = self.max_lock_renewal_duration
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigError(
                f"max_lock_renewal_duration must be a number of seconds >= 0, not {value!r}")
        for name in ("prefetch_count", "keep_alive"):
            count = getattr(self, name)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"{name} must be a whole number >= 0, not {count!r}")

    def handler_kwargs(self) -> dict[str, Any]:
        """What every SDK sender and receiver is given: they do not inherit these
        from their client."""
        return {"socket_timeout": self.socket_timeout, "keep_alive": self.keep_alive}


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


def _outgoing(message: Message) -> ServiceBusMessage:
    return ServiceBusMessage(
        message.body,
        message_id=message.message_id,
        partition_key=message.partition_key,
        application_properties=amqp_properties(message.properties),  # type: ignore[arg-type]
    )


def _incoming(msg: ServiceBusReceivedMessage) -> Message:
    message_id = text_or_none(msg.message_id) or f"sb-seq-{msg.sequence_number}"
    return Message(body_bytes(msg.body), message_id=message_id,
                   partition_key=text_or_none(msg.partition_key),
                   properties=properties_from(msg.application_properties))


@dataclass
class _Held:
    """A peek-locked delivery: the SDK message and the receiver that must settle it."""

    message: ServiceBusReceivedMessage
    receiver: ServiceBusReceiver



class ServiceBusTransport(SdkTransport):
    """A :class:`Transport` on a Service Bus namespace (see the module docstring).

    Args:
        fully_qualified_namespace: ``NAME.servicebus.windows.net``.
        credential: an Azure credential; default ``DefaultAzureCredential()`` from
            azure-identity (created here, closed by :meth:`aclose`).
        name: the namespace's name in the gateway; default the host name.
        **options: :class:`ServiceBusOptions` fields: ``retry_total=0``,
            ``retry_backoff_factor=0.0``, ``retry_backoff_max=0.5``,
            ``retry_mode="exponential"``, ``operation_timeout=2.0``,
            ``probe_timeout=2.0``, ``probe_entity=None``, ``socket_timeout=0.2``, ``keep_alive=0``,
            ``max_lock_renewal_duration=300.0``, ``prefetch_count=0``.

    Raises:
        ConfigError: an unknown option or bad value; azure-identity is missing.
    """

    #: Service Bus standard tier: 256 KB a message (premium takes 1 MB and more).
    max_message_size: int | None = 256 * 1024
    _owned_credential: AsyncTokenCredential | None = None

    def __init__(self, fully_qualified_namespace: str, credential: Credential | None = None, *,
                 name: str | None = None, **options: Any) -> None:
        opts = ServiceBusOptions.from_options(options, what="ServiceBusTransport")
        check_namespace_host(fully_qualified_namespace)
        owned = (cast(AsyncTokenCredential, default_credential("Service Bus"))
                 if credential is None else None)
        cred = cast(Credential, owned if owned is not None else credential)
        kwargs = self._client_kwargs(opts)

        def factory() -> ServiceBusClient:
            return ServiceBusClient(fully_qualified_namespace, cred, **kwargs)

        self._setup(host=host_of(fully_qualified_namespace), name=name, options=opts,
                    factory=factory, secrets=(), entity=None)
        self._owned_credential = owned  # closed by aclose

    @classmethod
    def from_connection_string(cls, conn_str: str, *, name: str | None = None,
                               **options: Any) -> ServiceBusTransport:
        """A transport from a connection string (``Endpoint=sb://...;SharedAccessKey...``).

        ``UseDevelopmentEmulator=true`` connects without TLS, as the SDK does.

        Raises:
            ConfigError: a malformed connection string (never quoted), or a bad option.
        """
        opts = ServiceBusOptions.from_options(options, what="ServiceBusTransport")
        parts = connection_string_parts(conn_str)
        kwargs = cls._client_kwargs(opts)

        def factory() -> ServiceBusClient:
            return ServiceBusClient.from_connection_string(conn_str, **kwargs)

        self = cls.__new__(cls)
        self._setup(host=parts.host, name=name, options=opts, factory=factory,
                    secrets=parts.secrets, entity=parts.entity)
        return self

    @staticmethod
    def _client_kwargs(opts: ServiceBusOptions) -> dict[str, Any]:
        return {**opts.client_kwargs(), "try_timeout": opts.operation_timeout}

    def _setup(self, *, host: str, name: str | None, options: ServiceBusOptions,
               factory: Callable[[], ServiceBusClient], secrets: tuple[str, ...],
               entity: str | None) -> None:
        self._name(host=host, name=name, secrets=secrets, entity=entity)
        self.options = options
        self._factory = factory
        try:
            # Building the client validates the connection string; it does not connect.
            self._client: ServiceBusClient | None = factory()
        except (ValueError, TypeError) as exc:
            detail = self._map(exc, "configure")
            raise ConfigError(f"unusable Service Bus connection settings: {detail}") from None
        self._senders: dict[str, ServiceBusSender] = {}
        self._receivers: dict[tuple[str, ReceiveMode], ServiceBusReceiver] = {}
        self._receive_locks: dict[tuple[str, ReceiveMode], anyio.Lock] = {}
        # One send (or prepare_send) at a time per sender: the SDK's sender opens its
        # connection on first use, and two first uses at once would open two.
        self._send_locks: dict[str, asyncio.Lock] = {}
        self._held: dict[str, _Held] = {}
        self._renewer: AutoLockRenewer | None = None
        self._owned_credential = None

    async def __aenter__(self) -> ServiceBusTransport:
        return self

    # -- plumbing -----------------------------------------------------------------------

    def _outcome(self, exc: BaseException) -> Outcome:
        return _outcome(exc)

    def _sdk(self) -> ServiceBusClient:
        if self._client is None:
            self._client = self._factory()
        return self._client

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
            if until is None or until < now - 1.0:
                del self._held[token]

    # -- Transport ------------------------------------------------------------------------

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
            MessageRejected: a message is too large, the entity does not exist, or
                access is refused; nothing was sent.
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
        batches = await self._call(action, lambda: _batches(sender, outgoing), seconds=bound)
        for index, batch in enumerate(batches):
            try:
                send = functools.partial(sender.send_messages, batch,
                                         timeout=self.options.operation_timeout)
                await self._call(action, send, seconds=bound)
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

    async def get_partition_ids(self, entity: str) -> list[str]:
        """Service Bus entities are not read by partition.

        Raises:
            MessageRejected: always.
        """
        raise MessageRejected(f"Service Bus namespace {self.namespace!r} has no partitions "
                              f"to list for {entity!r}: use EventHubsTransport for event hubs")

    async def read_partition(self, entity: str, partition_id: str, *, position: EventPosition,
                             max_events: int = 100, max_wait: float = 0.0,
                             owner_level: int | None = None,
                             consumer_group: str = "$Default") -> list[PartitionEvent]:
        """Service Bus entities are not read by partition.

        Raises:
            MessageRejected: always.
        """
        raise MessageRejected(f"Service Bus namespace {self.namespace!r} has no partitions "
                              f"to read in {entity!r}: use EventHubsTransport for event hubs")

    async def probe(self) -> None:
        """Return when the namespace answers: a sender link opens on a new connection.

        The entity is ``probe_entity``, else the connection string's, else the last
        one used, else one that does not exist. A permanent refusal (no such entity,
        unauthorized) is an answer too: the next operation raises ``MessageRejected``.
        When this transport sends to that entity, the new sender replaces its cached
        one (whose connection may have died in the outage), so the next send (a
        replay, typically) does not open another connection; otherwise it is closed.

        Raises:
            NamespaceUnavailable: no answer within ``probe_timeout``, or an outage.
        """
        entity = self._probe_entity(self.options)
        try:
            # A new sender, hence a new connection: a cached link proves nothing about now.
            sender = self._sdk().get_queue_sender(entity, **self.options.handler_kwargs())
        except (ValueError, TypeError) as exc:  # e.g. not the connection string's entity
            logger.info("probe of %s: refused: %s", self.namespace,
                        self._map(exc, f"probe of {entity!r}"))
            return
        try:
            await self._call(f"probe of {entity!r}", sender.__aenter__,
                             seconds=self.options.probe_timeout)
        except TransportError as exc:
            await self._close("probe sender", sender)
            raise NamespaceUnavailable(str(exc), namespace=self.namespace) from exc
        except MessageRejected as exc:
            await self._close("probe sender", sender)
            logger.info("probe of %s: the namespace answers but refuses: %s", self.namespace, exc)
            return
        except BaseException:
            await self._close("probe sender", sender)
            raise
        await self._keep_or_close(entity, sender)

    async def _keep_or_close(self, entity: str, sender: ServiceBusSender) -> None:
        # Swap only when no send is using the old sender: a send holds the lock.
        if entity in self._senders and not self._send_lock(entity).locked():
            sender, self._senders[entity] = self._senders[entity], sender
            what = f"sender of {entity!r}"
        else:
            what = "probe sender"
        await self._close(what, sender)

    async def aclose(self) -> None:
        """Stop lock renewal and close receivers, senders and the client. Safe to call twice.

        Unsettled peek-locked messages are delivered again when their locks expire.
        A later call opens new links.
        """
        renewer, self._renewer = self._renewer, None
        receivers, self._receivers = self._receivers, {}
        senders, self._senders = self._senders, {}
        self._held.clear()
        self._receive_locks.clear()
        handlers: list[tuple[str, Any]] = [("lock renewer", renewer)] if renewer else []
        handlers += [(f"receiver of {entity!r}", r) for (entity, _), r in receivers.items()]
        handlers += [(f"sender of {entity!r}", s) for entity, s in senders.items()]
        await self._close_all(handlers)
        client, self._client = self._client, None
        credential, self._owned_credential = self._owned_credential, None
        await self._close_all([("client", client)] if client else [])
        await self._close_all([("credential", credential)] if credential else [])


def _outgoing_checked(message: Message, namespace: str, action: str) -> ServiceBusMessage:
    try:
        return _outgoing(message)
    except (ValueError, TypeError) as exc:
        raise _map(exc, namespace, action=action) from exc


async def _batches(sender: ServiceBusSender,
                   messages: Sequence[ServiceBusMessage]) -> list[ServiceBusMessageBatch]:
    """Pack ``messages`` in order into as few batches as the link allows.

    Raises (SDK):
        MessageSizeExceededError: one message does not fit in an empty batch.
    """
    batches = [await sender.create_message_batch()]
    for message in messages:
        try:
            batches[-1].add_message(message)
        except MessageSizeExceededError:
            if len(batches[-1]) == 0:
                raise  # too large on its own
            batches.append(await sender.create_message_batch())
            batches[-1].add_message(message)
    return batches
