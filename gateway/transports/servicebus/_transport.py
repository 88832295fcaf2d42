"""A :class:`Transport` on an Azure Service Bus namespace (``azure.servicebus.aio``).

Entities: a queue ``"orders"``; a topic subscription ``"topic/Subscriptions/sub"``
to receive (send to ``"topic"``); ``".../$DeadLetterQueue"`` after either to receive
dead letters. One sender per entity and one receiver per (entity, receive mode) are
opened on first use and kept until :meth:`~ServiceBusTransport.aclose`.

Sending: a batch is split into as few SDK batches as the link allows (the SDK
takes the limit from the link's ``com.microsoft:max-message-batch-size``, else
256 KB, or 1 MB on Premium). All of them are built before the first is sent, so
a message too large raises ``MessageTooLarge`` (naming it in ``message_id``) with
nothing sent. Only a batch that fits in one SDK batch is sent all or none; when a
later SDK batch fails, the earlier ones have landed, so a transient failure is raised
as ``OperationTimeout`` (a replay may deliver duplicates, which the receive side
removes by ``MessageId``), and a refusal for size as ``MessageTooLarge`` whose
``sent`` counts the messages that landed (the geo sender sends the rest in halves).

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
Sessions: ``accept_session`` opens an SDK session receiver (a named session or the
next available one) whose lock is renewed only when asked; ``defer`` and
``receive_deferred`` map to the SDK's deferral. A message's ``session_id`` is the
SDK's ``session_id`` both ways.

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

Errors are mapped at this boundary (:func:`~._servicebus_errors.map_error`), most specific
first::

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
    MessageSizeExceededError                           MessageTooLarge (a MessageRejected)
    MessagingEntityNotFoundError                       MessageRejected
    MessagingEntityAlreadyExistsError                  MessageRejected
    SessionCannotBeLockedError                         MessageRejected       (3)
    SessionLockLostError                               SessionLockLost (a MessageRejected)
    MessageLockLostError,                              MessageRejected ("lock lost")  (4)
      MessageNotFoundError, MessageAlreadySettled,
      AutoLockRenewFailed, AutoLockRenewTimeout
    ServiceBusError (other)                            by what it wraps, then by its AMQP
                                                       condition or status code, else
                                                       NamespaceUnavailable
    azure.core ClientAuthenticationError               MessageRejected  (no token for good)
    azure.core ServiceRequestError/ResponseError       NamespaceUnavailable (token endpoint
                                                       or host unreachable)
    azure.core HttpResponseError                       by status: 408 OperationTimeout,
                                                       413 MessageTooLarge, other 4xx
                                                       MessageRejected, 429/5xx
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
(3) ``accept_session`` returns ``None`` for it (another receiver holds the session).
(4) as on the local transport: permanent for that delivery (retrying cannot
succeed) and the message itself is delivered again; ``GeoReceiver`` logs it.

Connection strings and keys never appear in reprs, logs or error messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from azure.core.credentials_async import AsyncTokenCredential
from azure.servicebus.aio import ServiceBusClient

from gateway.transports.base import EventPosition, PartitionEvent
from gateway.transports.sdk import (
    Credential,
    check_credential,
    check_namespace_host,
    connection_string_parts,
    default_credential,
    host_of,
)
from gateway.transports.servicebus._client import ServiceBusOptions
from gateway.transports.servicebus._receiving import ServiceBusReceiving
from gateway.transports.servicebus._sending import ServiceBusSending
from replication import (
    ConfigError,
    MessageRejected,
    NamespaceMisconfigured,
    NamespaceUnavailable,
    TransportError,
)

__all__ = ["ServiceBusOptions", "ServiceBusTransport"]

logger = logging.getLogger(__name__)


# Sending and receiving share only the options and the SDK client (ServiceBusBase), so
# each half lives in a module of its own; here are construction, the probe and closing.
class ServiceBusTransport(ServiceBusSending, ServiceBusReceiving):
    """A :class:`Transport` on a Service Bus namespace (see the module docstring).

    Args:
        fully_qualified_namespace: ``NAME.servicebus.windows.net``.
        credential: an Azure credential; default ``DefaultAzureCredential()`` from
            azure-identity (created here, closed by :meth:`aclose`). One passed in is
            its owner's to close.
        name: the namespace's name in the gateway; default the host name.
        use_development_emulator: connect without TLS, to the host's own port, as
            ``UseDevelopmentEmulator=true`` in a connection string does (an emulator).
        **options: :class:`ServiceBusOptions` fields: ``retry_total=0``,
            ``retry_backoff_factor=0.0``, ``retry_backoff_max=0.5``,
            ``retry_mode="exponential"``, ``operation_timeout=2.0``,
            ``probe_timeout=2.0``, ``probe_entity=None``, ``socket_timeout=0.2``, ``keep_alive=0``,
            ``max_lock_renewal_duration=300.0``, ``prefetch_count=0``.

    Raises:
        ConfigError: an unknown option or bad value; a credential the async SDK
            cannot use (a sync one); azure-identity is missing.
    """

    #: Service Bus standard tier: 256 KB a message (premium takes 1 MB and more).
    max_message_size: int | None = 256 * 1024
    _owned_credential: AsyncTokenCredential | None = None

    def __init__(self, fully_qualified_namespace: str, credential: Credential | None = None, *,
                 name: str | None = None, use_development_emulator: bool = False,
                 **options: Any) -> None:
        opts = ServiceBusOptions.from_options(options, what="ServiceBusTransport")
        check_namespace_host(fully_qualified_namespace)
        owned = (cast(AsyncTokenCredential, default_credential("Service Bus"))
                 if credential is None else None)
        cred = owned if owned is not None else check_credential(credential)
        kwargs = self._client_kwargs(opts)
        if use_development_emulator:
            kwargs["use_tls"] = False  # what the SDK's own UseDevelopmentEmulator=true sets

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
            self._client = factory()
        except (ValueError, TypeError) as exc:
            detail = self._map(exc, "configure")
            raise ConfigError(f"unusable Service Bus connection settings: {detail}") from None
        self._init_sending()
        self._init_receiving()
        self._owned_credential = None

    async def __aenter__(self) -> ServiceBusTransport:
        return self

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
        is an answer too: the next operation raises ``MessageRejected``.
        When this transport sends to that entity, the new sender replaces its cached
        one (whose connection may have died in the outage), so the next send (a
        replay, typically) does not open another connection; otherwise it is closed.

        Raises:
            NamespaceMisconfigured: it refuses the credentials, or its host name does
                not resolve.
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
        except NamespaceMisconfigured:
            await self._close("probe sender", sender)
            raise  # unusable as configured: it stays so until the configuration changes
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

