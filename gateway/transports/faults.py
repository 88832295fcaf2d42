"""A wrapper that injects outages, failures, latency and lost replies into a Transport.

All of its state is on the instance, so two wrapped namespaces in one test never
affect each other::

    primary = FaultyTransport(LocalTransport("primary", data_dir=tmp_path))
    primary.go_down()                  # every operation raises NamespaceRefused
    primary.fail_next(2, OperationTimeout)
    primary.lose_replies(1)            # the next send lands, then raises OperationTimeout
    primary.latency = 0.2
    primary.hang()                     # every operation waits (cancellable) until unhang()
    assert primary.calls == ["send", "receive"]
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from gateway.transports.base import (
    EventPosition,
    PartitionEvent,
    ReceivedMessage,
    ReceiveMode,
    SessionReceiver,
    Transport,
)
from replication import (
    ConfigError,
    Message,
    NamespaceRefused,
    NamespaceUnavailable,
    OperationTimeout,
)

__all__ = ["FaultyTransport"]

T = TypeVar("T")


class FaultyTransport(Transport):
    """Wraps ``inner`` and injects faults before (or after) its operations.

    Faults apply in this order: ``latency``, then a hang, then down, then
    ``fail_next``. A receive or read that is waiting when :meth:`go_down` is called
    raises ``NamespaceUnavailable`` at once. While :meth:`hang` is in effect every
    operation waits, without failing, until :meth:`unhang` (a caller's deadline or
    cancellation abandons the wait at once; an abandoned send never reaches ``inner``).
    ``aclose`` is recorded but never fails.

    Args:
        inner: the real transport.
        clock: timestamps :attr:`down_since`.
        sleep: how ``latency`` is waited (tests may pass a recorder).

    Attributes:
        latency: seconds added before each operation.
        calls: the names of the operations called, in order.
        down_since: the clock reading of the last :meth:`go_down`; None when up.
    """

    def __init__(self, inner: Transport, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = anyio.sleep) -> None:
        self.inner = inner
        self.namespace = inner.namespace
        self.max_message_size = inner.max_message_size
        self.latency = 0.0
        self.calls: list[str] = []
        self.down_since: float | None = None
        self._clock = clock
        self._sleep = sleep
        self._failures: deque[Exception | type[Exception]] = deque()
        self._lost_replies = 0
        self._down_event: anyio.Event | None = None
        self._unhung: anyio.Event | None = None

    @property
    def identity(self) -> str:
        """The wrapped namespace's."""
        return self.inner.identity

    async def __aenter__(self) -> FaultyTransport:
        # Narrows Transport.__aenter__'s return type for `async with ... as t`.
        return self

    # -- fault controls ---------------------------------------------------------

    def go_down(self) -> None:
        """Make every operation raise ``NamespaceRefused`` (a ``NamespaceUnavailable``)
        until :meth:`come_up`, as a namespace that is down does."""
        self.down_since = self._clock()
        if self._down_event is not None:
            self._down_event.set()

    def come_up(self) -> None:
        """End the outage started by :meth:`go_down`."""
        self.down_since = None
        self._down_event = None

    def hang(self) -> None:
        """Make every operation wait, without failing, until :meth:`unhang`."""
        if self._unhung is None:
            self._unhung = anyio.Event()

    def unhang(self) -> None:
        """Release the operations waiting since :meth:`hang`."""
        unhung, self._unhung = self._unhung, None
        if unhung is not None:
            unhung.set()

    @property
    def hung(self) -> bool:
        """Whether :meth:`hang` is in effect."""
        return self._unhung is not None

    @property
    def is_down(self) -> bool:
        """Whether :meth:`go_down` is in effect."""
        return self.down_since is not None

    def fail_next(self, n: int,
                  exc: Exception | type[Exception] = NamespaceUnavailable) -> None:
        """Make the next ``n`` operations raise ``exc`` (queued after earlier calls).

        Args:
            n: how many operations fail.
            exc: an exception instance, or a class; a ``TransportError`` class is
                given this transport's namespace.

        Raises:
            ConfigError: ``n`` is negative.
        """
        if n < 0:
            raise ConfigError(f"fail_next needs n >= 0, got {n}")
        self._failures.extend([exc] * n)

    def lose_replies(self, n: int) -> None:
        """Make the next ``n`` sends land on ``inner``, then raise ``OperationTimeout``.

        Raises:
            ConfigError: ``n`` is negative.
        """
        if n < 0:
            raise ConfigError(f"lose_replies needs n >= 0, got {n}")
        self._lost_replies += n

    # -- plumbing ---------------------------------------------------------------

    def _down_error(self) -> NamespaceRefused:
        return NamespaceRefused(
            f"namespace {self.namespace!r} is down (injected by FaultyTransport.go_down); "
            "call come_up() to restore it",
            namespace=self.namespace,
        )

    def _failure(self, exc: Exception | type[Exception], name: str) -> Exception:
        if isinstance(exc, Exception):
            return exc
        message = f"{name} on namespace {self.namespace!r} failed (injected by fail_next)"
        try:
            return exc(message, namespace=self.namespace)  # type: ignore[call-arg]
        except TypeError:
            return exc(message)

    async def _before(self, name: str) -> None:
        self.calls.append(name)
        if self.latency > 0:
            await self._sleep(self.latency)
        while self._unhung is not None:
            await self._unhung.wait()
        if self.is_down:
            raise self._down_error()
        if self._failures:
            raise self._failure(self._failures.popleft(), name)

    async def _until_down(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``, but raise ``NamespaceRefused`` as soon as we go down."""
        if self._down_event is None:
            self._down_event = anyio.Event()
        down = self._down_event
        outcome: list[T] = []
        errors: list[Exception] = []

        async def run() -> None:
            # Keep errors out of the task group: it would wrap them in an
            # ExceptionGroup, and callers expect the plain error tree.
            try:
                outcome.append(await op())
            except Exception as exc:
                errors.append(exc)
            tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await down.wait()
            tg.cancel_scope.cancel()
        if errors:
            raise errors[0]
        if not outcome:
            raise self._down_error()
        return outcome[0]

    # -- Transport --------------------------------------------------------------

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        """Send through ``inner``, with injected faults (see the class docstring)."""
        await self._before("send")
        await self.inner.send(entity, messages)
        if self._lost_replies > 0:
            self._lost_replies -= 1
            raise OperationTimeout(
                f"send to {entity!r} on namespace {self.namespace!r} lost its reply "
                "(injected by lose_replies); the messages landed",
                namespace=self.namespace,
            )

    async def receive(self, entity: str, *, max_messages: int = 1, max_wait: float = 0.0,
                      mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> list[ReceivedMessage]:
        """Receive through ``inner``; going down while it waits raises at once."""
        await self._before("receive")
        return await self._until_down(lambda: self.inner.receive(
            entity, max_messages=max_messages, max_wait=max_wait, mode=mode))

    async def complete(self, received: ReceivedMessage) -> None:
        """Complete through ``inner``, with injected faults."""
        await self._before("complete")
        await self.inner.complete(received)

    async def abandon(self, received: ReceivedMessage) -> None:
        """Abandon through ``inner``, with injected faults."""
        await self._before("abandon")
        await self.inner.abandon(received)

    async def dead_letter(self, received: ReceivedMessage, *, reason: str,
                          description: str = "") -> None:
        """Dead-letter through ``inner``, with injected faults."""
        await self._before("dead_letter")
        await self.inner.dead_letter(received, reason=reason, description=description)

    async def defer(self, received: ReceivedMessage) -> None:
        """Defer through ``inner``, with injected faults."""
        await self._before("defer")
        await self.inner.defer(received)

    async def receive_deferred(self, entity: str,
                               sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        """Deferred messages from ``inner``, with injected faults."""
        await self._before("receive_deferred")
        return await self.inner.receive_deferred(entity, sequence_numbers)

    async def accept_session(self, entity: str, session_id: str | None = None, *,
                             max_wait: float = 0.0) -> SessionReceiver | None:
        """A session of ``inner``, with injected faults before it is locked (the session
        receiver's own operations go to ``inner`` unchanged)."""
        await self._before("accept_session")
        return await self._until_down(lambda: self.inner.accept_session(
            entity, session_id, max_wait=max_wait))

    async def get_partition_ids(self, entity: str) -> list[str]:
        """Partition ids from ``inner``, with injected faults."""
        await self._before("get_partition_ids")
        return await self.inner.get_partition_ids(entity)

    async def read_partition(self, entity: str, partition_id: str, *, position: EventPosition,
                             max_events: int = 100, max_wait: float = 0.0,
                             owner_level: int | None = None,
                             consumer_group: str = "$Default") -> list[PartitionEvent]:
        """Read through ``inner``; going down while it waits raises at once."""
        await self._before("read_partition")
        return await self._until_down(lambda: self.inner.read_partition(
            entity, partition_id, position=position, max_events=max_events,
            max_wait=max_wait, owner_level=owner_level, consumer_group=consumer_group))

    async def prepare_send(self, entity: str) -> None:
        """Open ``inner``'s link ahead of sends (not recorded in :attr:`calls`); nothing
        while down or hung: it is best effort, and a send finds the fault out."""
        if not self.is_down and not self.hung:
            await self.inner.prepare_send(entity)

    async def probe(self) -> None:
        """Probe ``inner``, with injected faults."""
        await self._before("probe")
        await self.inner.probe()

    async def aclose(self) -> None:
        """Close ``inner`` (recorded in :attr:`calls`, never failed)."""
        self.calls.append("aclose")
        await self.inner.aclose()
