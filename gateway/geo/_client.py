"""``GeoSender`` and ``GeoReceiver``: the sync drivers of the async core."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from durable_queue import DurableQueue
from gateway._support.mailbox import Mailbox
from gateway._support.portal import CallerThread, PortalDriver, twin_arguments
from gateway.geo._factory import NamespaceLike
from gateway.geo._hooks import GatewayHooks
from gateway.geo.receiver import (
    AsyncGeoReceiver,
    MessageInboxHandler,
    ReceiverStats,
    StopFlag,
    handlers_in,
)
from gateway.geo.sender import (
    AsyncGeoSender,
    MessageLike,
    ReplayReport,
    RolesTarget,
    SendResult,
)
from gateway.stores import DedupTarget
from gateway.transports.base import ReceivedMessage
from replication import (
    DeadlinePolicy,
    DedupWindow,
    MessageRejected,
    Mode,
    NamespaceMisconfigured,
    ReplicationPolicy,
    RoleState,
)

__all__ = ["GeoReceiver", "GeoSender"]


async def _open_sender(kwargs: dict[str, Any]) -> AsyncGeoSender:
    sender = AsyncGeoSender(**kwargs)
    try:
        await sender.start()  # a PostgreSQL roles store: connected here, off the loop
    except BaseException:
        await sender.aclose()
        raise
    return sender


async def _open_receiver(kwargs: dict[str, Any]) -> AsyncGeoReceiver:
    receiver = AsyncGeoReceiver(**kwargs)
    try:
        await receiver.open()  # a PostgreSQL store: connected here, off the loop
    except BaseException:
        await receiver.aclose()
        raise
    return receiver


class GeoSender(PortalDriver):
    """Sync sender: :class:`gateway.aio.AsyncGeoSender` driven from a thread of its own.

    Use as a context manager or call :meth:`close`. The background recovery (probe,
    replay, failback) runs on the sender's own event loop thread between calls.
    Safe to share between threads.

    Args:
        primary: ``local://NAME``, a connection string, a ``NamespaceConfig`` or a
            ``Transport``.
        secondary: the same for the secondary namespace.
        entity: the queue or partitioned entity to send to.
        mode: ``"passive"`` (send to the active one, fail over) or ``"active"`` (both).
        durable_queue: a path or a ``DurableQueue``: where messages wait while the
            namespaces they belong to are down. ``None``: raise instead.
        policy: retry bounds, failback, probe interval and the per-operation
            deadlines after which a send is hedged (``mode`` and ``failback`` given
            here override it).
        hooks: observability callbacks (``on_sent``, ``on_failover``, ``on_buffered``
            ...); a hook that traces (``gateway.observability.Tracing``) traces each
            send and replay.
        data_dir: the directory of local namespaces (default ``$GEOGATEWAY_DATA_DIR``).
        state_dir: where role state and the sessions' next positions are persisted
            (default ``$GEOGATEWAY_STATE_DIR``).
        roles_store: keep the roles on PostgreSQL instead, shared by every sender of a
            fleet configured with the same pair: a DSN, a ``psycopg_pool.ConnectionPool``
            or a ``PostgresRoleStore`` (the caller closes a store or pool it passed).
            Role changes are compare-and-swaps, and the recovery task reads the roles
            again every ``refresh_interval`` (1 s), so a failover made by one sender is
            followed by all.
        recovery: run the background probe/replay/failback task.
    """

    # Local namespaces' SQLite work runs in worker threads, not inline on the loop
    # thread (gateway._support.blocking): a namespace file another process holds
    # locked, or a stalled disk, would stop the loop, and with it the deadline that
    # hedges the send to the other namespace.
    _inline_io = False

    def __init__(
        self,
        *,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        entity: str,
        mode: Mode | str | None = None,
        durable_queue: str | os.PathLike[str] | DurableQueue | None = None,
        policy: ReplicationPolicy | None = None,
        failback: bool | None = None,
        hooks: GatewayHooks | Iterable[GatewayHooks] = (),
        data_dir: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        roles_store: RolesTarget | None = None,
        recovery: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        kwargs = twin_arguments(AsyncGeoSender, locals())
        super().__init__()
        try:
            self._core = self._call(_open_sender, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def entity(self) -> str:
        """The queue or partitioned entity this sender sends to."""
        return self._core.entity

    @property
    def roles(self) -> RoleState:
        return self._core.roles

    @property
    def backlog(self) -> frozenset[str]:
        return self._core.backlog

    def send(self, message: MessageLike) -> SendResult:
        """Send one message; see :meth:`AsyncGeoSender.send_batch` for what it raises."""
        return self._call(self._core.send, message)

    def send_batch(self, messages: Sequence[MessageLike]) -> SendResult:
        """Send messages as one batch; see :meth:`AsyncGeoSender.send_batch`."""
        return self._call(self._core.send_batch, messages)

    def replay(self) -> ReplayReport:
        """Probe and replay buffered messages now; see :meth:`AsyncGeoSender.replay`."""
        return self._call(self._core.replay)

    def close(self) -> None:
        self._close_portal(self._core.aclose)


class GeoReceiver(PortalDriver):
    """Sync receiver: :class:`gateway.aio.AsyncGeoReceiver` driven from a thread of its own.

    Use as a context manager or call :meth:`close`.

    Args:
        primary: ``local://NAME``, a connection string, a ``NamespaceConfig`` or a
            ``Transport``.
        secondary: the same for the secondary namespace.
        entity: the queue to receive from, or a topic's subscription,
            ``"TOPIC/Subscriptions/SUB"`` (its ids are de-duplicated within that
            subscription: see ``replication.scoped``).
        dedup_store: a path (a persistent SQLite window, shared by the processes of
            one machine), a PostgreSQL DSN (``postgresql://...``) or a
            ``psycopg_pool.ConnectionPool`` (one window for a fleet of machines, schema
            ``geogateway``), or a ``DedupStore`` (e.g. a ``PostgresDedupStore`` with a
            schema of its own). Closed by :meth:`close`.
        dedup_fallback: a SQLite file this receiver de-duplicates against while a
            shared store stays unreachable (``FallbackDedupStore``: at-least-once
            across machines meanwhile); None (the default): wait for the store.
        dedup_window: how long and how many ids are remembered (default 10 min, 1M).
        dedup_lease: seconds a delivered copy's claim holds the other copy back; a
            receiver that crashed with the copy leaves it to the others after this.
        prefetch: messages each namespace's pump keeps received ahead of the caller.
        hooks: observability callbacks (``on_duplicate``, ``on_namespace_down`` ...);
            a hook that traces (``gateway.observability.Tracing``) traces receives,
            ``run()``'s handler calls and settlements.
        data_dir: the directory of local namespaces.
        deadlines: how long a settlement, or a receive beyond its own wait, may take
            on a namespace before it counts as not answering (a hung namespace is
            then reported down; the other is still read). Default
            ``replication.RECEIVE_DEADLINES`` (1 to 3 s).
    """

    def __init__(
        self,
        *,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        entity: str,
        dedup_store: DedupTarget,
        dedup_window: DedupWindow | None = None,
        dedup_fallback: str | os.PathLike[str] | None = None,
        dedup_lease: float = 60.0,
        prefetch: int = 100,
        hooks: GatewayHooks | Iterable[GatewayHooks] = (),
        data_dir: str | os.PathLike[str] | None = None,
        poll_wait: float = 0.25,
        clock: Callable[[], float] = time.time,
        deadlines: DeadlinePolicy | None = None,
    ) -> None:
        kwargs = twin_arguments(AsyncGeoReceiver, locals())
        super().__init__()
        try:
            self._core = self._call(_open_receiver, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    # Made on first use, under _MADE (the receiver may be shared by threads).
    _completions_made: _Completions | None = None

    def _completions(self) -> _Completions:
        made = self._completions_made
        if made is None:
            with _MADE:
                made = self._completions_made
                if made is None:
                    made = _Completions(self._core, self._loop_thread.loop)
                    self._completions_made = made
        return made

    @property
    def stats(self) -> ReceiverStats:
        made = self._completions_made
        return self._core.stats if made is None else made.stats()

    @property
    def down(self) -> frozenset[str]:
        """Namespaces whose last receive failed; see :attr:`AsyncGeoReceiver.down`."""
        return self._core.down

    @property
    def refused(self) -> dict[str, MessageRejected | NamespaceMisconfigured]:
        """Namespaces that refused to be read for good; see :attr:`AsyncGeoReceiver.refused`."""
        return self._core.refused

    def receive(self, max_messages: int = 10, max_wait: float = 5.0) -> list[ReceivedMessage]:
        """First copies only; see :meth:`AsyncGeoReceiver.receive`."""
        return self._call(self._receive, self._completions(), max_messages, max_wait)

    async def _receive(self, completions: _Completions, max_messages: int, max_wait: float
                       ) -> list[ReceivedMessage]:
        completions.mailbox.flush()
        got = await self._core.receive(max_messages, max_wait)
        completions.delivered(got)
        return got

    def complete(self, message: ReceivedMessage) -> None:
        """The handler succeeded; see :meth:`AsyncGeoReceiver.complete`.

        While the caller holds other messages of its receives, the completion is
        handed to the receiver's loop with the others completed in the next few
        milliseconds (or with the next call), and this returns at once, as the async
        ``complete`` does then; completing the last message held returns once every
        mark is written and every copy settled. A mark that could not be written is
        raised by that call or the next ``receive``.

        Raises:
            GatewayError: the dedup store failed to record this or an earlier completion.
            RuntimeError: the receiver is closed.
        """
        completions = self._completions()
        # Closed: no queueing, the call below says so.
        if self._portal_closed or not completions.later(message):
            self._call(self._complete, completions, message)

    async def _complete(self, completions: _Completions, message: ReceivedMessage) -> None:
        completions.mailbox.flush()
        await self._core.complete(message)

    def abandon(self, message: ReceivedMessage) -> None:
        """The handler failed; see :meth:`AsyncGeoReceiver.abandon`."""
        completions = self._completions()
        completions.settled(message)
        self._call(self._abandon, completions, message)

    async def _abandon(self, completions: _Completions, message: ReceivedMessage) -> None:
        completions.mailbox.flush()
        await self._core.abandon(message)

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str = "") -> None:
        """Dead-letter the message; see :meth:`AsyncGeoReceiver.dead_letter`."""
        completions = self._completions()
        completions.settled(message)
        self._call(self._dead_letter, completions, message, reason, description)

    async def _dead_letter(self, completions: _Completions, message: ReceivedMessage,
                           reason: str, description: str) -> None:
        completions.mailbox.flush()
        await self._core.dead_letter(message, reason=reason, description=description)

    def run(
        self,
        handler: Callable[[ReceivedMessage], None] | MessageInboxHandler,
        *,
        max_messages: int = 10,
        stop: StopFlag | None = None,
        idle_timeout: float | None = None,
        transactional: bool = False,
        concurrency: int = 1,
    ) -> None:
        """Handle messages until ``stop`` is set or nothing came for ``idle_timeout`` s.

        ``stop`` is a ``threading.Event`` or anything with ``is_set()``.

        One at a time (the default), the handler runs in this thread, a received batch
        per hand-over from the receiver's loop; with ``concurrency`` > 1, in worker
        threads, that many messages at a time. A call that returns completes its
        message, one that raises abandons it (delivered again). With ``transactional``
        it is an inbox handler ``(message, conn)``, run in a worker thread, whose writes
        through ``conn`` commit with the done mark.
        Outages of both namespaces, and of the dedup store, are waited out, not raised.
        See :meth:`AsyncGeoReceiver.run`.
        """
        self._lend(self._run, self._completions(), handler, max_messages, stop, idle_timeout,
                   transactional, concurrency)

    async def _run(
        self,
        caller: CallerThread,
        completions: _Completions,
        handler: Callable[[ReceivedMessage], None] | MessageInboxHandler,
        max_messages: int,
        stop: StopFlag | None,
        idle_timeout: float | None,
        transactional: bool,
        concurrency: int,
    ) -> None:
        completions.mailbox.flush()
        with handlers_in(caller):
            await self._core.run(
                handler, max_messages=max_messages, stop=stop, idle_timeout=idle_timeout,
                transactional=transactional, concurrency=concurrency,
            )

    def close(self) -> None:
        self._close_portal(self._aclose)

    async def _aclose(self) -> None:
        made = self._completions_made
        if made is not None:
            made.mailbox.flush()
        await self._core.aclose()


async def _noop() -> None:
    return None


_MADE = threading.Lock()


class _Completions:
    """The sync receiver's completions on their way to its loop.

    A completion while the caller holds other messages of its receives does not wait
    for its mark (see :meth:`AsyncGeoReceiver.complete`), so it need not cross to the
    loop by itself: it is queued (:class:`Mailbox`) and handed over with the others of
    the next few milliseconds, or first thing in the next call that crosses. Which
    messages the caller holds is kept here, in the caller's terms.
    """

    def __init__(self, core: AsyncGeoReceiver, loop: Any) -> None:
        self._core = core
        self._lock = threading.Lock()
        self._held: set[str] = set()  # ids delivered by receive() and not settled since
        self._queued = 0
        self.mailbox: Mailbox[ReceivedMessage] = Mailbox(loop, self._deliver)

    def delivered(self, messages: list[ReceivedMessage]) -> None:
        with self._lock:
            self._held.update(m.message_id for m in messages)

    def settled(self, message: ReceivedMessage) -> None:
        with self._lock:
            self._held.discard(message.message_id)

    def later(self, message: ReceivedMessage) -> bool:
        """Queue the completion if the caller holds other messages; else False."""
        with self._lock:
            queue = message.message_id in self._held and len(self._held) > 1
            self._held.discard(message.message_id)
            if queue:
                self._queued += 1
                self.mailbox.put(message)
            return queue

    def stats(self) -> ReceiverStats:
        with self._lock:  # not while a group is being handed over
            stats = self._core.stats
            return dataclasses.replace(stats, completed=stats.completed + self._queued)

    def _deliver(self, messages: list[ReceivedMessage]) -> None:
        # On the loop: as the async complete() of each, which would not wait.
        with self._lock:
            for message in messages:
                self._core.complete_nowait(message)
            self._queued -= len(messages)
