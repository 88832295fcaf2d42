"""The Transport seam: one small async interface for "a namespace".

Every implementation (``local``, ``faults``; later the Azure SDK transports) maps
its own errors onto :mod:`gateway.errors` at the boundary. An outage is raised as
:class:`~gateway.errors.NamespaceUnavailable`, never reported as "no messages".
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from replication import Message, MessageRejected

__all__ = [
    "EventPosition",
    "PartitionEvent",
    "ReceiveMode",
    "ReceivedMessage",
    "SessionReceiver",
    "Transport",
]


class ReceiveMode(enum.Enum):
    """How a queue receive settles messages (as Service Bus does)."""

    PEEK_LOCK = "peek_lock"
    RECEIVE_AND_DELETE = "receive_and_delete"


@dataclass(frozen=True, kw_only=True)
class ReceivedMessage:
    """A message received from one namespace's queue, with its broker metadata.

    ``lock_token`` identifies this delivery for ``complete`` / ``abandon`` /
    ``dead_letter``; it is ``None`` for receive-and-delete.
    """

    message: Message
    namespace: str
    entity: str
    lock_token: str | None
    sequence_number: int
    delivery_count: int
    enqueued_time: float
    locked_until: float | None

    @property
    def message_id(self) -> str:
        return self.message.message_id

    @property
    def body(self) -> bytes:
        return self.message.body


@dataclass(frozen=True, kw_only=True)
class EventPosition:
    """Where to start reading a partition. Exactly one field is set.

    ``inclusive`` applies to ``offset`` and ``sequence_number``.
    """

    offset: int | None = None
    sequence_number: int | None = None
    enqueued_time: float | None = None
    latest: bool = False
    inclusive: bool = False

    def __post_init__(self) -> None:
        chosen = [
            self.offset is not None,
            self.sequence_number is not None,
            self.enqueued_time is not None,
            self.latest,
        ]
        if sum(chosen) > 1:
            raise ValueError("EventPosition takes one of offset, sequence_number, "
                             "enqueued_time, latest")

    @classmethod
    def earliest(cls) -> EventPosition:
        return cls(sequence_number=-1)


@dataclass(frozen=True, kw_only=True)
class PartitionEvent:
    """An event read from one partition of a partitioned entity."""

    message: Message
    namespace: str
    entity: str
    partition_id: str
    sequence_number: int
    offset: int
    enqueued_time: float


class SessionReceiver:
    """The lock on one session of a session-enabled queue, in one namespace.

    :meth:`Transport.accept_session` makes one. While it holds the lock, only it
    receives the session's messages, oldest first; settle them through the transport
    (``complete``, ``abandon``, ``dead_letter``, ``defer``). The lock lasts the queue's
    lock duration from :attr:`locked_until`'s last value: :meth:`renew_lock` before
    then, or another receiver may take the session. Use as ``async with`` or call
    :meth:`aclose`, which gives the session up (what it did not settle comes back).

    Every method raises ``SessionLockLost`` once the lock is gone (it expired, or
    another receiver took the session), and the transport's errors otherwise.
    """

    namespace: str = ""
    entity: str = ""
    session_id: str = ""
    #: When the lock expires unless renewed, in seconds since the epoch.
    locked_until: float = 0.0

    async def __aenter__(self) -> SessionReceiver:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None = None,
                        exc_value: BaseException | None = None,
                        traceback: TracebackType | None = None) -> None:
        await self.aclose()

    async def receive(self, *, max_messages: int = 1,
                      max_wait: float = 0.0) -> list[ReceivedMessage]:
        """Up to ``max_messages`` of the session's messages (peek-locked), oldest first,
        waiting up to ``max_wait`` seconds; an empty list only when none is available."""
        raise NotImplementedError()  # pragma: no cover

    async def renew_lock(self) -> float:
        """Extend the lock by the queue's lock duration; the new :attr:`locked_until`."""
        raise NotImplementedError()  # pragma: no cover

    async def get_state(self) -> bytes | None:
        """The session's state; ``None`` when it was never set or was cleared."""
        raise NotImplementedError()  # pragma: no cover

    async def set_state(self, state: bytes | None) -> None:
        """Replace the session's state; ``None`` clears it."""
        raise NotImplementedError()  # pragma: no cover

    async def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        """This session's deferred messages by sequence number (peek-locked), in that order.

        Raises:
            MessageRejected: a number names no deferred message of the session.
        """
        raise NotImplementedError()  # pragma: no cover

    async def aclose(self) -> None:
        """Give the session up. Safe to call twice."""


class Transport:
    """A namespace: queues with peek-lock and partitioned entities.

    Subclasses implement the methods that raise ``NotImplementedError``; all
    methods raise only :class:`~gateway.errors.GatewayError` subclasses.
    Use as ``async with transport:`` or call :meth:`aclose`.
    """

    #: The namespace's name as the gateway knows it ("primary", "secondary", ...).
    namespace: str = ""

    #: The largest message (``Message.size``, bytes) the namespace takes, if known.
    #: The sender refuses a larger message before buffering it for this namespace
    #: (``MessageRejected``), so it is not found out at replay. ``None``: no limit known.
    max_message_size: int | None = None

    @property
    def identity(self) -> str:
        """Which namespace this is, beyond its role name: its kind and host (or file),
        never a key. The durable queue records it with what it buffers."""
        kind = type(self).__name__.removesuffix("Transport").lower()
        return f"{kind}://{self.namespace}"

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        """Send messages to a queue or a partitioned entity, all or none.

        Raises:
            NamespaceUnavailable: the namespace is down; nothing was sent.
            OperationTimeout: the outcome is unknown; the messages may have landed.
            MessageRejected: too large, or no such entity; nothing was sent.
        """
        raise NotImplementedError()  # pragma: no cover

    async def receive(
        self,
        entity: str,
        *,
        max_messages: int = 1,
        max_wait: float = 0.0,
        mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
    ) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` from a queue, waiting up to ``max_wait`` seconds.

        Returns an empty list only when the queue really is empty; an outage raises.
        """
        raise NotImplementedError()  # pragma: no cover

    async def complete(self, received: ReceivedMessage) -> None:
        """Settle a peek-locked message as done (it is removed from the queue)."""
        raise NotImplementedError()  # pragma: no cover

    async def abandon(self, received: ReceivedMessage) -> None:
        """Release the lock so the message is delivered again (delivery count + 1)."""
        raise NotImplementedError()  # pragma: no cover

    async def dead_letter(
        self, received: ReceivedMessage, *, reason: str, description: str = ""
    ) -> None:
        """Move the message to the queue's dead-letter sub-queue with a reason."""
        raise NotImplementedError()  # pragma: no cover

    async def defer(self, received: ReceivedMessage) -> None:
        """Set a peek-locked message aside: it is delivered again only to
        :meth:`receive_deferred` (by its sequence number), until it is settled.

        Raises:
            MessageRejected: the lock is lost, or the transport does not defer.
        """
        raise MessageRejected(f"{type(self).__name__} cannot defer messages")

    async def receive_deferred(self, entity: str,
                               sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        """Deferred messages of a queue by sequence number (peek-locked), in that order.

        Settle them like any delivery (``abandon`` leaves a message deferred).

        Raises:
            MessageRejected: a number names no deferred message (nothing is received),
                or the transport does not defer.
        """
        raise MessageRejected(f"{type(self).__name__} cannot receive deferred messages")

    async def accept_session(self, entity: str, session_id: str | None = None, *,
                             max_wait: float = 0.0) -> SessionReceiver | None:
        """Lock a session of a session-enabled queue: ``session_id``, or (``None``) the
        session of the oldest available message that no receiver holds.

        Waits up to ``max_wait`` seconds for the session (or any session) to be free.

        Returns:
            The receiver holding the lock; ``None`` when the session stayed locked by
            another receiver, or no session had a message available.

        Raises:
            MessageRejected: the queue is not session-enabled, or the transport has no
                sessions.
            NamespaceUnavailable: the namespace is down.
        """
        raise MessageRejected(f"{type(self).__name__} has no sessions")

    async def get_partition_ids(self, entity: str) -> list[str]:
        """The partition ids of a partitioned entity, in order."""
        raise NotImplementedError()  # pragma: no cover

    async def read_partition(
        self,
        entity: str,
        partition_id: str,
        *,
        position: EventPosition,
        max_events: int = 100,
        max_wait: float = 0.0,
        owner_level: int | None = None,
        consumer_group: str = "$Default",
    ) -> list[PartitionEvent]:
        """Read events of one partition from ``position``.

        With ``owner_level`` set, a reader with a higher owner level on the same
        partition and consumer group makes this one fail with ``OwnershipLost``.
        """
        raise NotImplementedError()  # pragma: no cover

    async def prepare_send(self, entity: str) -> None:
        """Open ahead of time what sending to ``entity`` needs (a connection, a link), so
        that the first send, such as the first one after a failover, does not wait for
        it. The default does nothing.

        Raises:
            GatewayError: as :meth:`send` would; nothing is sent either way.
        """

    async def probe(self) -> None:
        """Return when the namespace answers; raise ``NamespaceUnavailable`` when not."""
        raise NotImplementedError()  # pragma: no cover

    async def aclose(self) -> None:
        """Release connections and files. Safe to call twice."""
