"""A :class:`Transport` on an Azure Event Hubs namespace (``azure.eventhub.aio``).

Entities are event hubs. One producer client per event hub is opened on first use
and kept until :meth:`~EventHubsTransport.aclose`.

Sending: messages without a ``partition_key`` go round robin; the others are sent
with ``partition_key=`` (the service hashes it to a partition), one SDK batch per
key or more when a key's messages exceed the size limit. Per key, order is kept.
All batches are built before the first is sent, so a message too large raises
``MessageTooLarge`` (naming it in ``message_id``) with nothing sent; when a later
batch fails after earlier ones landed, a transient failure is raised as
``OperationTimeout``, and a refusal for size as ``MessageTooLarge`` whose ``sent``
counts the messages, from the first, that landed. ``message_id``,
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

Errors are mapped at this boundary (:func:`~._eventhubs_errors.map_error`), most specific
first::

    SDK exception                                       geogateway error
    --------------------------------------------------  ---------------------------------
    any EventHubError with condition amqp:link:stolen   OwnershipLost  (1)
      or a message about a (higher) epoch
    OwnershipLostError (checkpoint stores)              OwnershipLost
    OperationTimeoutError (send timed out)              OperationTimeout
    EventDataError (the SDK refused the event)          MessageRejected; MessageTooLarge
                                                        with message-size-exceeded
    AuthenticationError, token refused                  MessageRejected  (2)
      (status 401/403/404, unauthorized-access)
    AuthenticationError, otherwise                      NamespaceUnavailable  (2)
    EventHubError with a known AMQP condition           not-found, unauthorized-access,
      (ConnectError, ConnectionLostError,               argument-error, argument-out-of-
      EventDataSendError, ...)                          range, not-allowed: MessageRejected;
                                                        message-size-exceeded:
                                                        MessageTooLarge; timeout:
                                                        OperationTimeout; server-busy,
                                                        resource-limit-exceeded, internal-
                                                        error: NamespaceUnavailable
    EventHubError with a status code                    408 OperationTimeout, 400/401/403/
      (management requests)                             404 MessageRejected, 413
                                                        MessageTooLarge, 429/5xx
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
import logging
from collections.abc import Callable
from typing import Any, cast

import anyio
from azure.core.credentials_async import AsyncTokenCredential
from azure.eventhub import parse_connection_string
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient

from gateway.transports.base import ReceivedMessage, ReceiveMode
from gateway.transports.eventhubs._client import EventHubsOptions
from gateway.transports.eventhubs._errors import map_error as _map
from gateway.transports.eventhubs._reading import EventHubsReading
from gateway.transports.eventhubs._sending import EventHubsSending
from gateway.transports.sdk import (
    Credential,
    check_credential,
    check_entity,
    check_namespace_host,
    connection_string_parts,
    default_credential,
    host_of,
)
from replication import (
    ConfigError,
    MessageRejected,
    NamespaceMisconfigured,
    NamespaceUnavailable,
    TransportError,
)

__all__ = ["EventHubsOptions", "EventHubsTransport"]

logger = logging.getLogger(__name__)


# Sending and reading share only the options and the producers (EventHubsBase), so each
# half lives in a module of its own; here are construction, management calls and closing.
class EventHubsTransport(EventHubsSending, EventHubsReading):
    """A :class:`Transport` on an Event Hubs namespace (see the module docstring).

    Args:
        fully_qualified_namespace: ``NAME.servicebus.windows.net``.
        credential: an Azure credential; default ``DefaultAzureCredential()`` from
            azure-identity (created here, closed by :meth:`aclose`). One passed in is
            its owner's to close.
        name: the namespace's name in the gateway; default the host name.
        use_development_emulator: connect without TLS, to the host's own port, as
            ``UseDevelopmentEmulator=true`` in a connection string does (an emulator).
        **options: :class:`EventHubsOptions` fields: ``retry_total=0``,
            ``retry_backoff_factor=0.0``, ``retry_backoff_max=0.5``,
            ``retry_mode="exponential"``, ``operation_timeout=2.0``,
            ``probe_timeout=2.0``, ``probe_entity=None``, ``socket_timeout=0.2``, ``prefetch=300``,
            ``buffer_size=1000``, ``idle_check_interval=1.0``.

    Raises:
        ConfigError: an unknown option or bad value; a credential the async SDK
            cannot use (a sync one); azure-identity is missing.
    """

    #: Event Hubs: 1 MB an event (basic tier: 256 KB).
    max_message_size: int | None = 1 << 20
    _owned_credential: AsyncTokenCredential | None = None

    def __init__(self, fully_qualified_namespace: str, credential: Credential | None = None, *,
                 name: str | None = None, use_development_emulator: bool = False,
                 **options: Any) -> None:
        opts = EventHubsOptions.from_options(options, what="EventHubsTransport")
        check_namespace_host(fully_qualified_namespace)
        owned = (cast(AsyncTokenCredential, default_credential("Event Hubs"))
                 if credential is None else None)
        cred = owned if owned is not None else check_credential(credential)
        kwargs = opts.client_kwargs()
        if use_development_emulator:
            kwargs["use_tls"] = False  # what the SDK's own UseDevelopmentEmulator=true sets

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
        self._producers = {}
        self._init_sending()
        self._init_reading()

    async def __aenter__(self) -> EventHubsTransport:
        return self

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

    async def probe(self) -> None:
        """Return when the namespace answers a management request (event hub properties).

        The event hub is ``probe_entity``, else the connection string's, else the
        last one used, else one that does not exist. A permanent refusal (no such
        event hub) is an answer too.

        Raises:
            NamespaceMisconfigured: it refuses the credentials, or its host name does
                not resolve.
            NamespaceUnavailable: no answer within ``probe_timeout``, or an outage.
        """
        entity = self._probe_entity(self.options)
        producer = self._producer(entity)
        try:
            await self._call(f"probe of {entity!r}", producer.get_eventhub_properties,
                             seconds=self.options.probe_timeout)
        except NamespaceMisconfigured:
            raise  # unusable as configured: it stays so until the configuration changes
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
