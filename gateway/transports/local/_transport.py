"""The embedded local namespace: ``local://NAME``, one SQLite file per namespace.

``DATA_DIR/NAME.db`` holds the entities (queues with peek-lock, lock expiry,
delivery count and dead-letter; partitioned entities with sequence numbers,
offsets, partition keys and owner-level fencing) and ``DATA_DIR/NAME.control.json``
says whether the namespace is up and which faults it injects. Several processes
may use one namespace at once; any of them may take it down::

    LocalNamespace("primary").down()   # what `geogateway namespace down primary` does

Every operation of every :class:`LocalTransport` on it then raises
:class:`~gateway.errors.NamespaceRefused` (a ``NamespaceUnavailable``: the namespace
said no, so a sender fails over without retrying it; a receive that is waiting raises
it too, at its next poll, within 50 ms) until ``up()``.

``LocalNamespace("primary").hang()`` is the gray failure: the namespace accepts and
never answers. Every operation (send, receive, settle, partition reads and ids,
probe) then waits, without failing, until ``unhang()`` or ``up()`` (it proceeds
within 50 ms of that) or until the namespace goes down (``NamespaceUnavailable``).
The wait is cancellable: a caller's deadline or cancel scope abandons it at once.
An operation waits before it touches the namespace file, so an abandoned one never
happens: a send abandoned while the namespace hangs never lands, a receive locks
nothing. One already under way when the hang begins (its SQLite transaction takes
well under a millisecond) completes and answers. A receive waiting for messages is
held while the namespace hangs, past its ``max_wait``: a hung namespace does not
answer "no messages".

Settling (complete / abandon / dead-letter) a delivery whose lock expired, or that
was settled already, raises :class:`~gateway.errors.MessageRejected` ("lock lost"):
like Service Bus's ``MessageLockLostError`` it is permanent for that delivery
(retrying cannot succeed), and the message itself is delivered again.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from gateway._support.blocking import run_blocking
from gateway.transports._topic_paths import canonical_entity
from gateway.transports.base import (
    EventPosition,
    PartitionEvent,
    ReceivedMessage,
    ReceiveMode,
    Transport,
)
from gateway.transports.local._control import NAME as _NAME
from gateway.transports.local._control import (
    ControlFile,
    ControlState,
    default_data_dir,
    namespace_files,
)
from gateway.transports.local._entities import EntityInfo, EntityKind
from gateway.transports.local._namespace import LocalNamespace, NamespaceStatus, PartitionInfo
from gateway.transports.local._session_receiver import LocalSessionReceiver, accept_session
from gateway.transports.local._store import Store
from replication import (
    ConfigError,
    Message,
    MessageRejected,
    NamespaceRefused,
    OperationTimeout,
)

__all__ = [
    "EntityInfo",
    "EntityKind",
    "LocalNamespace",
    "LocalTransport",
    "NamespaceStatus",
    "PartitionInfo",
    "default_data_dir",
    "namespace_files",
]

_paths = namespace_files  # the name and data directory checks live with the control file


T = TypeVar("T")

#: Receive and read_partition poll with these pauses (growing) while they wait.
_FIRST_PAUSE, _MAX_PAUSE = 0.01, 0.05


class LocalTransport(Transport):
    """A :class:`Transport` on a local namespace (see the module docstring).

    SQLite work runs in a worker thread, one call at a time per transport, so a
    namespace file locked by another process never blocks the event loop. Use a
    transport from one event loop (its thread limiter belongs to that loop). While
    the namespace hangs, every operation waits, cancellable, without holding that
    thread.

    Args:
        name: the namespace's name.
        data_dir: the data directory; see :func:`default_data_dir`.
        auto_create: create a queue on first send or receive of an unknown name;
            otherwise an unknown entity raises ``MessageRejected``.
        clock: wall-clock time for enqueued times and lock expiry (shared by
            processes, hence ``time.time``); waiting uses ``time.monotonic``.
        rng: decides which replies are lost when ``lost_replies`` is below 1.

    Raises:
        ConfigError: a bad name.
    """

    # The default limit of its entities (``create_queue(max_message_size=...)``); an
    # entity created with another limit is checked at send, as always.
    max_message_size: int | None = 1 << 20

    @property
    def identity(self) -> str:
        """``local://`` and the namespace file's absolute path (its data dir and name)."""
        return f"local://{os.path.abspath(self.path)}"

    def __init__(self, name: str, *, data_dir: str | os.PathLike[str] | None = None,
                 auto_create: bool = True, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.path, control = _paths(name, data_dir)
        self.namespace = name
        self._store = Store(self.path, namespace=name, auto_create=auto_create)
        self._control = ControlFile(control)
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._limiter: anyio.CapacityLimiter | None = None
        # Where a "latest" read of each partition stands, per owner level: asked again,
        # it goes on from there, as the Event Hubs transport's continuing receive does
        # (resolved anew, events sent between two reads would be skipped).
        self._latest: dict[tuple[str, str, str], tuple[int | None, EventPosition]] = {}

    @classmethod
    def from_url(cls, url: str, *, data_dir: str | os.PathLike[str] | None = None
                 ) -> LocalTransport:
        """A transport for ``local://NAME``.

        Raises:
            ConfigError: the url is not ``local://NAME``.
        """
        parts = urlsplit(url) if isinstance(url, str) else None
        if (parts is None or parts.scheme != "local" or parts.path not in ("", "/")
                or parts.query or parts.fragment or not _NAME.fullmatch(parts.netloc)):
            raise ConfigError(f"bad local namespace url {url!r}: expected local://NAME with "
                              "NAME of letters, digits, '.', '_' or '-'")
        return cls(parts.netloc, data_dir=data_dir)

    async def __aenter__(self) -> LocalTransport:
        # Narrows Transport.__aenter__'s return type for `async with ... as t`.
        return self

    # -- plumbing ---------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._limiter is None:
            # One worker at a time: the connection is not shared between threads.
            self._limiter = anyio.CapacityLimiter(1)
        # In a worker thread, or inline on a sync GeoSender's own loop thread.
        return await run_blocking(functools.partial(fn, *args), self._limiter)

    def _check(self) -> ControlState:
        state = self._control.read()
        if state.down:
            raise NamespaceRefused(
                f"namespace {self.namespace!r} (local://{self.namespace}) is down: bring it "
                f"back with `geogateway namespace up {self.namespace}`",
                namespace=self.namespace,
            )
        return state

    async def _enter(self) -> ControlState:
        state = self._check()
        if state.latency > 0:
            await anyio.sleep(state.latency)
            state = self._check()
        if state.hang:
            state = await self._unhung()
        return state

    async def _unhung(self) -> ControlState:
        """Wait (cancellable) while the namespace hangs; raise if it goes down meanwhile."""
        pause = _FIRST_PAUSE
        while (state := self._check()).hang:
            await anyio.sleep(pause)
            pause = min(pause * 1.5, _MAX_PAUSE)
        return state

    async def _poll(self, max_wait: float, attempt: Callable[[], list[T]]) -> list[T]:
        deadline = time.monotonic() + max_wait
        pause = _FIRST_PAUSE
        while True:
            found = await self._run(attempt)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            await anyio.sleep(min(pause, remaining))
            pause = min(pause * 1.5, _MAX_PAUSE)
            # An outage during the wait raises: it must never look like an idle queue.
            # A hang holds the wait, past max_wait, and the queue is looked at again
            # once it is cleared.
            if self._check().hang:
                await self._unhung()

    # -- Transport --------------------------------------------------------------

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        """Send messages to a queue or a partitioned entity, all or none.

        While the namespace hangs the send waits before storing anything (see the
        module docstring): cancelled meanwhile, it never lands.

        Raises:
            NamespaceUnavailable: the namespace is down or its file is unusable.
            OperationTimeout: a lost reply was injected; the messages did land.
            MessageRejected: a message is too large, or there is no such entity.
        """
        state = await self._enter()
        if not messages:
            return
        entity = canonical_entity(entity)
        await self._run(self._store.send, entity, list(messages), self._clock())
        if state.lost_replies and self._rng.random() < state.lost_replies:
            raise OperationTimeout(
                f"send to {entity!r} on local://{self.namespace} lost its reply (injected "
                "fault); the messages landed: a replay may deliver duplicates",
                namespace=self.namespace,
            )

    async def receive(self, entity: str, *, max_messages: int = 1, max_wait: float = 0.0,
                      mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> list[ReceivedMessage]:
        """Receive up to ``max_messages``, polling for up to ``max_wait`` seconds.

        ``entity`` is a queue or a topic's subscription, ``"TOPIC/Subscriptions/SUB"``
        (the ``Subscriptions`` segment in any case); add ``"/$DeadLetterQueue"`` to
        receive dead letters.

        Returns:
            The messages; an empty list only when none is available.

        Raises:
            NamespaceUnavailable: the namespace is down (also while waiting).
            MessageRejected: no such queue, or the entity is partitioned.
        """
        if max_messages < 1:
            raise ConfigError(f"max_messages must be at least 1, got {max_messages}")
        await self._enter()
        entity = canonical_entity(entity)
        return await self._poll(max_wait, lambda: self._store.receive(
            entity, max_messages=max_messages, mode=mode, now=self._clock()))

    async def complete(self, received: ReceivedMessage) -> None:
        """Remove a peek-locked message from its queue.

        Raises:
            MessageRejected: the lock is lost (expired or settled); do not retry.
            NamespaceUnavailable: the namespace is down.
        """
        await self._enter()
        await self._run(self._store.settle, received, "complete", self._clock())

    async def complete_many(self, received: Sequence[ReceivedMessage]
                            ) -> list[MessageRejected | None]:
        """Complete peek-locked messages in one transaction (one write, one worker hop).

        Returns, for each message, None when it was completed, or the
        ``MessageRejected`` that :meth:`complete` would have raised for it (its lock is
        lost); the others are completed all the same.

        Raises:
            NamespaceUnavailable: the namespace is down (nothing is completed).
        """
        await self._enter()
        if not received:
            return []
        return await self._run(self._store.complete_many, list(received), self._clock())

    async def abandon(self, received: ReceivedMessage) -> None:
        """Release the lock so the message is delivered again.

        On its last allowed delivery the message moves to the dead-letter
        sub-queue with reason ``MaxDeliveryCountExceeded``, as on Service Bus.

        Raises:
            MessageRejected: the lock is lost (expired or settled); do not retry.
            NamespaceUnavailable: the namespace is down.
        """
        await self._enter()
        await self._run(self._store.settle, received, "abandon", self._clock())

    async def dead_letter(self, received: ReceivedMessage, *, reason: str,
                          description: str = "") -> None:
        """Move the message to ``QUEUE/$DeadLetterQueue``.

        The reason and description are added to its properties as
        ``DeadLetterReason`` and ``DeadLetterErrorDescription``.

        Raises:
            MessageRejected: the lock is lost, or the message is a dead letter already.
            NamespaceUnavailable: the namespace is down.
        """
        await self._enter()
        settle = functools.partial(self._store.settle, reason=reason, description=description)
        await self._run(settle, received, "dead_letter", self._clock())

    async def defer(self, received: ReceivedMessage) -> None:
        """Set a peek-locked message aside until :meth:`receive_deferred` asks for it.

        Raises:
            MessageRejected: the lock is lost (expired or settled); do not retry.
            NamespaceUnavailable: the namespace is down.
        """
        await self._enter()
        await self._run(self._store.settle, received, "defer", self._clock())

    async def receive_deferred(self, entity: str,
                               sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        """Deferred messages of a queue by sequence number, peek-locked, in that order.

        Raises:
            MessageRejected: a number names no deferred message free to receive (nothing
                is received), or the queue is session-enabled (use the session's
                receiver).
            NamespaceUnavailable: the namespace is down.
        """
        await self._enter()
        got = await self._run(lambda: self._store.sessions.receive_deferred(
            entity, sequence_numbers, mode=ReceiveMode.PEEK_LOCK, now=self._clock()))
        return [r for r, _ in got]

    async def accept_session(self, entity: str, session_id: str | None = None, *,
                             max_wait: float = 0.0) -> LocalSessionReceiver | None:
        """Lock a session of a session-enabled queue (see ``Transport.accept_session``),
        polling up to ``max_wait`` seconds for it (or any session) to be free.

        Raises:
            MessageRejected: no such queue, or it is not session-enabled.
            NamespaceUnavailable: the namespace is down (also while waiting).
        """
        return await accept_session(self._store.sessions, entity, session_id,
                                    max_wait=max_wait, enter=self._enter, run=self._run,
                                    poll=self._poll, clock=self._clock)

    async def get_partition_ids(self, entity: str) -> list[str]:
        """The partition ids ("0", "1", ...) of a partitioned entity.

        Raises:
            MessageRejected: no such partitioned entity.
            NamespaceUnavailable: the namespace is down.
        """
        await self._enter()
        return await self._run(self._store.partition_ids, entity)

    async def read_partition(self, entity: str, partition_id: str, *, position: EventPosition,
                             max_events: int = 100, max_wait: float = 0.0,
                             owner_level: int | None = None,
                             consumer_group: str = "$Default") -> list[PartitionEvent]:
        """Read events of one partition after ``position``, polling up to ``max_wait``.

        ``EventPosition.earliest()`` reads from the first event; ``latest=True``
        only events sent after the first such call starts (asked again with the same
        ``owner_level``, it goes on where that read stands: no event sent between
        two reads is skipped); ``offset``, ``sequence_number``
        and ``enqueued_time`` read after that value (from it with ``inclusive``).
        ``owner_level=None`` reads without fencing. As on Event Hubs, a reader with
        an equal or higher owner level takes the partition over, and only open
        readers fence: a level is held while this transport keeps reading with it,
        and released when the transport closes, when its process dies, or after
        30 s without a read.

        Raises:
            OwnershipLost: an open reader with a higher owner level holds the
                partition, or another reader took it over from this one.
            MessageRejected: no such partitioned entity or partition.
            NamespaceUnavailable: the namespace is down (also while waiting).
        """
        if max_events < 1:
            raise ConfigError(f"max_events must be at least 1, got {max_events}")
        await self._enter()
        key = (entity.lower(), consumer_group, str(partition_id))
        asked_latest = position.latest
        if asked_latest:
            standing = self._latest.get(key)
            if standing is not None and standing[0] == owner_level:
                position = standing[1]
            else:
                # Resolve "latest" once, so that events sent while we wait are returned.
                latest = await self._run(self._store.latest, entity, partition_id)
                position = EventPosition(sequence_number=latest, inclusive=True)
                self._latest[key] = (owner_level, position)
        elif key in self._latest:
            del self._latest[key]  # the reader moved on to a position of its own
        events = await self._poll(max_wait, functools.partial(
            self._store.read, entity, partition_id, position=position, max_events=max_events,
            owner_level=owner_level, consumer_group=consumer_group))
        if asked_latest and events:
            self._latest[key] = (owner_level, EventPosition(
                sequence_number=events[-1].sequence_number))
        return events

    async def probe(self) -> None:
        """Return when the namespace answers.

        Raises:
            NamespaceUnavailable: it is down, or its file is corrupt or unreadable.
        """
        await self._enter()
        await self._run(self._store.ping)

    async def aclose(self) -> None:
        """Close the namespace file; a later call opens it again. Safe to call twice."""
        await self._run(self._store.close)
