"""A :class:`Transport` on an Azure Event Hubs namespace (``azure.eventhub.aio``).

Entities are event hubs. One producer client per event hub is opened on first use
and kept until :meth:`~EventHubsTransport.aclose`.

Sending: messages without a ``partition_key`` go round robin; the others are sent
with ``partition_key=`` (the service hashes it to a partition), one SDK batch per
key or more when a key's messages exceed the size limit. Per key, order is kept.
All batches are built before the first is sent, so a message too large raises
``MessageRejected`` with nothing sent; when a later batch fails after earlier ones
landed, a transient failure is raised as ``OperationTimeout``. ``message_id``,
body and properties map to the ``EventData``'s; an event without a ``message_id``
(from another producer) reads as ``"eh-<partition>-<sequence number>"``.

Reading is pull-style on top of the SDK's push-style ``receive_batch``: one
background receive per (event hub, consumer group, partition) fills a buffer of
up to ``buffer_size`` events, and :meth:`~EventHubsTransport.read_partition` takes
from it. A call that continues where the previous one left off (the sequence
number of the last event returned, exclusive, as ``EventPosition`` is used by the
consumer) keeps that receive; any other position or owner level restarts it
(the old receive stops in the background: the SDK stops one in one-second steps).
An error ends the background receive; the next call returns the events buffered
before it, then raises it. ``max_wait=0`` returns what is buffered, so the first
read of a new position may be empty. The SDK's receive retries a lost connection
without telling anyone; so a read that finds nothing after ``idle_check_interval``
seconds of silence asks the namespace for the partition's properties, and raises
``NamespaceUnavailable`` if it does not answer. Events the SDK delivers again after
such a reconnect (sequence numbers already buffered) are dropped.
``PartitionEvent.offset`` is the SDK's string offset parsed as an int, or -1 when
it is not a whole number (possible on namespaces with geo-replication): position
by sequence number then.

Errors are mapped at this boundary (:func:`_map`), most specific first::

    SDK exception                                       geogateway error
    --------------------------------------------------  ---------------------------------
    any EventHubError with condition amqp:link:stolen   OwnershipLost  (1)
      or a message about a (higher) epoch
    OwnershipLostError (checkpoint stores)              OwnershipLost
    OperationTimeoutError (send timed out)              OperationTimeout
    EventDataError (the SDK refused the event)          MessageRejected
    AuthenticationError, token refused                  MessageRejected  (2)
      (status 401/403/404, unauthorized-access)
    AuthenticationError, otherwise                      NamespaceUnavailable  (2)
    EventHubError with a known AMQP condition           not-found, unauthorized-access,
      (ConnectError, ConnectionLostError,               message-size-exceeded, argument-
      EventDataSendError, ...)                          error, argument-out-of-range, not-
                                                        allowed: MessageRejected; timeout:
                                                        OperationTimeout; server-busy,
                                                        resource-limit-exceeded, internal-
                                                        error: NamespaceUnavailable
    EventHubError with a status code                    408 OperationTimeout, 400/401/403/
      (management requests)                             404/413 MessageRejected, 429/5xx
                                                        NamespaceUnavailable
    EventHubError wrapping an azure.core error          ClientAuthenticationError:
      (a credential that failed)                        MessageRejected; other:
                                                        NamespaceUnavailable
    ConnectError, ConnectionLostError,                  NamespaceUnavailable
      EventDataSendError, ClientClosedError, other
    azure.core ClientAuthenticationError                MessageRejected
    azure.core ServiceRequestError/ResponseError,       NamespaceUnavailable
      other AzureError
    TimeoutError (also no answer in operation_timeout)  OperationTimeout
    OSError (socket errors)                             NamespaceUnavailable
    ValueError, TypeError (SDK validation: an event     MessageRejected
      too large, no such partition)
    anything else                                       NamespaceUnavailable

(1) a reader with a higher owner level took the partition. The service also
disconnects a reader without an owner level then, which raises OwnershipLost too.
(2) a token the service refused is permanent; one that could not be obtained or
put in time (the SDK's "Authorization timeout") means the namespace is not answering.

Connection strings and keys never appear in reprs, logs or error messages.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.credentials_async import AsyncTokenCredential
from azure.eventhub import EventData, EventDataBatch, parse_connection_string
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

from gateway.transports._eventhubs_errors import map_error as _map
from gateway.transports._eventhubs_errors import outcome as _outcome
from gateway.transports._eventhubs_reading import PartitionReader
from gateway.transports._sdk_config import (
    SdkOptions,
    check_namespace_host,
    connection_string_parts,
    default_credential,
    host_of,
)
from gateway.transports._sdk_convert import amqp_properties
from gateway.transports._sdk_errors import Outcome
from gateway.transports._sdk_transport import GRACE, SdkTransport, check_entity
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

__all__ = ["EventHubsOptions", "EventHubsTransport"]

logger = logging.getLogger(__name__)
Credential = AsyncTokenCredential | AzureSasCredential | AzureNamedKeyCredential


@dataclass(frozen=True, kw_only=True)
class EventHubsOptions(SdkOptions):
    """Options of :class:`EventHubsTransport` (see :class:`SdkOptions` for the rest).

    Args:
        prefetch: events the SDK asks for ahead on each partition link.
        buffer_size: events a background partition receive holds for
            ``read_partition`` before it pauses.
        idle_check_interval: after this many seconds without news from the
            namespace, a ``read_partition`` that found nothing asks the namespace
            for the partition's properties (the SDK's receive retries a lost
            connection silently, so an outage would otherwise look like an idle
            partition).
    """

    prefetch: int = 300
    buffer_size: int = 1000
    idle_check_interval: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("prefetch", "buffer_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, not {value!r}")
        value = self.idle_check_interval
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"idle_check_interval must be a number of seconds > 0, "
                              f"not {value!r}")


# -- events -----------------------------------------------------------------------------


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


class EventHubsTransport(SdkTransport):
    """A :class:`Transport` on an Event Hubs namespace (see the module docstring).

    Args:
        fully_qualified_namespace: ``NAME.servicebus.windows.net``.
        credential: an Azure credential; default ``DefaultAzureCredential()`` from
            azure-identity (created here, closed by :meth:`aclose`).
        name: the namespace's name in the gateway; default the host name.
        **options: :class:`EventHubsOptions` fields: ``retry_total=0``,
            ``retry_backoff_factor=0.0``, ``retry_backoff_max=0.5``,
            ``retry_mode="exponential"``, ``operation_timeout=2.0``,
            ``probe_timeout=2.0``, ``probe_entity=None``, ``socket_timeout=0.2``, ``prefetch=300``,
            ``buffer_size=1000``, ``idle_check_interval=1.0``.

    Raises:
        ConfigError: an unknown option or bad value; azure-identity is missing.
    """

    #: Event Hubs: 1 MB an event (basic tier: 256 KB).
    max_message_size: int | None = 1 << 20
    _owned_credential: AsyncTokenCredential | None = None

    def __init__(self, fully_qualified_namespace: str, credential: Credential | None = None, *,
                 name: str | None = None, **options: Any) -> None:
        opts = EventHubsOptions.from_options(options, what="EventHubsTransport")
        check_namespace_host(fully_qualified_namespace)
        owned = (cast(AsyncTokenCredential, default_credential("Event Hubs"))
                 if credential is None else None)
        cred = cast(Credential, owned if owned is not None else credential)
        kwargs = opts.client_kwargs()

        def producer(entity: str) -> EventHubProducerClient:
            return EventHubProducerClient(fully_qualified_namespace, entity, cred, **kwargs)

        def consumer(entity: str, group: str) -> EventHubConsumerClient:
            return EventHubConsumerClient(fully_qualified_namespace, entity, group, cred, **kwargs)

        self._setup(host=host_of(fully_qualified_namespace), name=name, options=opts,
                    producer=producer, consumer=consumer, secrets=(), entity=None)
        self._owned_credential = owned  # closed by aclose

    @classmethod
    def from_connection_string(cls, conn_str: str, *, name: str | None = None,
                               **options: Any) -> EventHubsTransport:
        """A transport from a connection string (``Endpoint=sb://...;SharedAccessKey...``).

        ``UseDevelopmentEmulator=true`` connects without TLS, as the SDK does.

        Raises:
            ConfigError: a malformed connection string (never quoted), or a bad option.
        """
        opts = EventHubsOptions.from_options(options, what="EventHubsTransport")
        parts = connection_string_parts(conn_str)
        try:
            parse_connection_string(conn_str)
        except (ValueError, TypeError) as exc:
            detail = _map(exc, name or parts.host, action="configure", secrets=parts.secrets)
            raise ConfigError(f"unusable Event Hubs connection string: {detail}") from None
        kwargs = opts.client_kwargs()

        def producer(entity: str) -> EventHubProducerClient:
            return EventHubProducerClient.from_connection_string(
                conn_str, eventhub_name=entity, **kwargs)

        def consumer(entity: str, group: str) -> EventHubConsumerClient:
            return EventHubConsumerClient.from_connection_string(
                conn_str, group, eventhub_name=entity, **kwargs)

        self = cls.__new__(cls)
        self._setup(host=parts.host, name=name, options=opts, producer=producer,
                    consumer=consumer, secrets=parts.secrets, entity=parts.entity)
        return self

    def _setup(self, *, host: str, name: str | None, options: EventHubsOptions,
               producer: Callable[[str], EventHubProducerClient],
               consumer: Callable[[str, str], EventHubConsumerClient],
               secrets: tuple[str, ...], entity: str | None) -> None:
        self._name(host=host, name=name, secrets=secrets, entity=entity)
        self.options = options
        self._new_producer = producer
        self._new_consumer = consumer
        self._producers: dict[str, EventHubProducerClient] = {}
        # One send (or prepare_send) at a time per producer: the SDK's producer opens
        # its connection and links on first use, and two first uses at once open two.
        self._send_locks: dict[str, asyncio.Lock] = {}
        self._readers: dict[tuple[str, str, str], PartitionReader] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> EventHubsTransport:
        return self

    # -- plumbing -----------------------------------------------------------------------

    def _outcome(self, exc: BaseException) -> Outcome:
        return _outcome(exc)

    def _producer(self, entity: str) -> EventHubProducerClient:
        producer = self._producers.get(entity)
        if producer is None:
            try:
                producer = self._new_producer(entity)
            except (ValueError, TypeError) as exc:
                raise self._map(exc, f"open {entity!r}") from exc
            self._producers[entity] = producer
        return producer

    def _bound(self) -> float:
        return self.options.operation_timeout + GRACE

    # -- Transport ------------------------------------------------------------------------

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

    async def receive(self, entity: str, *, max_messages: int = 1, max_wait: float = 0.0,
                      mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> list[ReceivedMessage]:
        """Event hubs have no queues.

        Raises:
            MessageRejected: always.
        """
        raise MessageRejected(f"cannot receive from {entity!r} on Event Hubs namespace "
                              f"{self.namespace!r}: event hubs have no queues: use "
                              "ServiceBusTransport (or read_partition)")

    async def complete(self, received: ReceivedMessage) -> None:
        """Event hubs have no queues. Raises ``MessageRejected``."""
        await self.receive(received.entity)

    async def abandon(self, received: ReceivedMessage) -> None:
        """Event hubs have no queues. Raises ``MessageRejected``."""
        await self.receive(received.entity)

    async def dead_letter(self, received: ReceivedMessage, *, reason: str,
                          description: str = "") -> None:
        """Event hubs have no queues. Raises ``MessageRejected``."""
        await self.receive(received.entity)

    async def get_partition_ids(self, entity: str) -> list[str]:
        """The partition ids of an event hub, as the service lists them.

        Raises:
            MessageRejected: no such event hub, or access is refused.
            NamespaceUnavailable: the namespace is down.
            OperationTimeout: no answer in time.
        """
        check_entity(entity)
        self._last_entity = entity
        producer = self._producer(entity)
        return await self._call(f"list partitions of {entity!r}", producer.get_partition_ids,
                                seconds=self._bound())

    async def read_partition(self, entity: str, partition_id: str, *, position: EventPosition,
                             max_events: int = 100, max_wait: float = 0.0,
                             owner_level: int | None = None,
                             consumer_group: str = "$Default") -> list[PartitionEvent]:
        """Read events of one partition after ``position``, waiting up to ``max_wait``.

        ``EventPosition.earliest()`` reads from the first event; ``latest=True`` only
        events sent after the receive starts; ``offset``, ``sequence_number`` and
        ``enqueued_time`` after that value (from it with ``inclusive``). Continuing
        reads share one background receive (see the module docstring).

        Raises:
            OwnershipLost: a reader with a higher owner level took the partition.
            MessageRejected: no such event hub or partition, or access is refused.
            NamespaceUnavailable: the namespace is down.
            ConfigError: ``max_events`` below 1.
        """
        if max_events < 1:
            raise ConfigError(f"max_events must be at least 1, got {max_events}")
        check_entity(entity)
        self._last_entity = entity
        key = (entity, consumer_group, str(partition_id))
        reader = self._readers.get(key)
        if reader is not None and not reader.continues(position, owner_level):
            self._drop_reader(key, reader)
            reader = None
        if reader is None:
            try:
                client = self._new_consumer(entity, consumer_group)
            except (ValueError, TypeError) as exc:  # e.g. not the connection string's hub
                raise self._map(exc, f"open {entity!r}") from exc
            reader = PartitionReader(client, entity=entity, partition_id=str(partition_id),
                                     position=position, owner_level=owner_level,
                                     prefetch=self.options.prefetch,
                                     buffer_size=self.options.buffer_size,
                                     namespace=self.namespace)
            self._readers[key] = reader
        action = f"read partition {partition_id} of {entity!r}"
        async with reader.lock:
            return await self._take(key, reader, action, max_events=max_events,
                                    deadline=time.monotonic() + max(0.0, float(max_wait)))

    async def _take(self, key: tuple[str, str, str], reader: PartitionReader, action: str, *,
                    max_events: int, deadline: float) -> list[PartitionEvent]:
        interval = self.options.idle_check_interval
        while True:
            now = time.monotonic()
            # Wait in slices, so that a silent outage is noticed within idle_check_interval.
            wait = max(0.0, min(deadline - now, reader.heard + interval - now))
            try:
                events = await reader.take(max_events, wait)
            except Exception as exc:
                self._drop_reader(key, reader)
                raise self._map(exc, action) from exc
            now = time.monotonic()
            if events:
                return events
            if now - reader.heard >= interval:
                await self._check(key, reader, action)
            if now >= deadline:
                return []

    async def _check(self, key: tuple[str, str, str], reader: PartitionReader, action: str) -> None:
        # The SDK's receive retries a lost connection silently: ask the namespace itself.
        properties = functools.partial(self._producer(reader.entity).get_partition_properties,
                                       reader.partition_id)
        try:
            await self._call(action, properties, seconds=self.options.probe_timeout)
        except GatewayError as exc:
            self._drop_reader(key, reader)
            if isinstance(exc, TransportError):
                raise NamespaceUnavailable(str(exc), namespace=self.namespace) from exc
            raise
        reader.heard = time.monotonic()

    def _drop_reader(self, key: tuple[str, str, str], reader: PartitionReader) -> None:
        """Forget ``reader`` and stop it in the background (aclose waits for it)."""
        if self._readers.get(key) is reader:
            del self._readers[key]
        task = asyncio.get_running_loop().create_task(reader.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def probe(self) -> None:
        """Return when the namespace answers a management request (event hub properties).

        The event hub is ``probe_entity``, else the connection string's, else the
        last one used, else one that does not exist. A permanent refusal (no such
        event hub, unauthorized) is an answer too.

        Raises:
            NamespaceUnavailable: no answer within ``probe_timeout``, or an outage.
        """
        entity = self._probe_entity(self.options)
        producer = self._producer(entity)
        try:
            await self._call(f"probe of {entity!r}", producer.get_eventhub_properties,
                             seconds=self.options.probe_timeout)
        except TransportError as exc:
            raise NamespaceUnavailable(str(exc), namespace=self.namespace) from exc
        except MessageRejected:
            pass  # the namespace answered; the next operation raises the refusal

    async def aclose(self) -> None:
        """Stop partition receives and close producers. Safe to call twice.

        A later call opens new clients.
        """
        readers, self._readers = self._readers, {}
        producers, self._producers = self._producers, {}
        stopping, self._stopping = self._stopping, set()
        async with anyio.create_task_group() as group:
            for reader in readers.values():
                group.start_soon(reader.stop)
            await self._close_all((f"producer of {e!r}", p) for e, p in producers.items())
        if stopping:
            await asyncio.wait(stopping)
        credential, self._owned_credential = self._owned_credential, None
        await self._close_all([("credential", credential)] if credential else [])


