"""The receiver core (async). ``GeoReceiver`` in ``gateway._client`` drives it.

One pump task per namespace keeps up to ``prefetch`` messages received (peek-locked);
``receive()`` runs them through the de-duplicator:

- DELIVER: the first copy of a ``MessageId``; returned to the caller.
- DUPLICATE: the id is done; the copy is completed without being delivered.
- HOLD: the other copy is in flight; this one waits, still locked. When the first
  copy completes, the held one is completed as a duplicate; when it is abandoned,
  the held one goes back to the inbox and may be delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import anyio

from gateway._dedup_store import SqliteDedupStore
from gateway._factory import NamespaceLike, check_entity, open_transport
from gateway._hooks import GatewayHooks, emit
from gateway.transports.base import ReceivedMessage, Transport
from replication import GatewayError, MessageRejected, NamespaceUnavailable, TransportError
from replication._dedup import Deduplicator, DedupStore, DedupWindow, Verdict

__all__ = ["AsyncGeoReceiver", "Handler", "ReceiverStats"]

logger = logging.getLogger("geogateway")

Handler = Callable[[ReceivedMessage], Awaitable[None] | None]


_RECHECK_SECONDS = 1.0
# Completions run() keeps in flight at most, and how long aclose() waits for them.
_MAX_SETTLING = 256
_SETTLE_TIMEOUT = 10.0


class StopFlag(Protocol):
    """What ``run(stop=...)`` polls: ``asyncio.Event`` and ``threading.Event`` both fit."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True, kw_only=True)
class ReceiverStats:
    """Counters since the receiver started."""

    received: int
    delivered: int
    duplicates_suppressed: int
    held: int
    completed: int
    abandoned: int


class AsyncGeoReceiver:
    """Receives from both namespaces and delivers each ``MessageId`` once.

    Args:
        primary: ``local://NAME``, a connection string, a ``NamespaceConfig`` or a
            ``Transport``.
        secondary: the same for the secondary namespace.
        entity: the queue to receive from.
        dedup_store: a path (a persistent SQLite window, shareable between processes)
            or a ``DedupStore``.
        dedup_window: how long and how many ids are remembered (default 10 min, 1M).
        prefetch: messages each namespace's pump keeps received ahead of the caller.
        hooks: observability callbacks (``on_duplicate``, ``on_namespace_down`` ...).
        data_dir: the directory of local namespaces.
    """

    def __init__(
        self,
        *,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        entity: str,
        dedup_store: str | os.PathLike[str] | DedupStore,
        dedup_window: DedupWindow | None = None,
        prefetch: int = 100,
        hooks: GatewayHooks | Iterable[GatewayHooks] = (),
        data_dir: str | os.PathLike[str] | None = None,
        poll_wait: float = 0.25,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        self.entity = check_entity(entity)
        self._hooks = [hooks] if isinstance(hooks, GatewayHooks) else list(hooks)
        self._prefetch = prefetch
        self._poll_wait = poll_wait
        self._transports: dict[str, Transport] = {}
        self._owned: list[Transport] = []
        for ns in (primary, secondary):
            transport, owned = open_transport(ns, data_dir=data_dir)
            self._transports[transport.namespace] = transport
            if owned:
                self._owned.append(transport)
        store = (
            dedup_store
            if isinstance(dedup_store, DedupStore)
            else SqliteDedupStore(dedup_store, window=dedup_window or DedupWindow())
        )
        self._dedup = Deduplicator(store, window=dedup_window, clock=clock)
        self._inbox: deque[ReceivedMessage] = deque()
        self._held: dict[str, list[ReceivedMessage]] = {}
        self._in_flight: set[str] = set()  # delivered by this receiver, not yet settled
        self._last_recheck = 0.0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._down: set[str] = set()
        self._fatal: GatewayError | None = None
        self._pumps: list[asyncio.Task[None]] = []
        self._settling: set[asyncio.Task[None]] = set()  # run()'s completions in flight
        self._closing = False
        self._counts = dict.fromkeys(
            ("received", "delivered", "duplicates_suppressed", "completed", "abandoned"), 0
        )

    @property
    def stats(self) -> ReceiverStats:
        return ReceiverStats(held=sum(len(v) for v in self._held.values()), **self._counts)

    @property
    def down(self) -> frozenset[str]:
        """Namespaces whose last receive failed."""
        return frozenset(self._down)

    async def __aenter__(self) -> AsyncGeoReceiver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

    # -- receiving ------------------------------------------------------------------

    async def receive(
        self, max_messages: int = 10, max_wait: float = 5.0
    ) -> list[ReceivedMessage]:
        """Return up to ``max_messages`` first copies, waiting up to ``max_wait`` seconds.

        Settle each with :meth:`complete` or :meth:`abandon`.

        Raises:
            NamespaceUnavailable: both namespaces are down (an outage is never
                reported as an empty queue).
            MessageRejected: the entity does not exist on a namespace.
        """
        self._start_pumps()
        # Yield at least once per call: a caller that retries at once after
        # NamespaceUnavailable must not starve the pumps that notice the recovery.
        await anyio.lowlevel.checkpoint()
        deadline = time.monotonic() + max_wait
        out: list[ReceivedMessage] = []
        while True:
            if self._fatal is not None:
                raise self._fatal
            await self._sort_inbox(out, max_messages)
            if out:
                return out
            if len(self._down) == len(self._transports):
                raise NamespaceUnavailable(
                    "both namespaces are unavailable", namespace=",".join(sorted(self._down))
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            self._arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(remaining, self._poll_wait))

    async def _sort_inbox(self, out: list[ReceivedMessage], max_messages: int) -> None:
        self._recheck_foreign_holds()
        while self._inbox and len(out) < max_messages:
            # Take no more than there is room for: a claimed copy that did not fit
            # would be pushed back to the front, reversing the order of the rest.
            room = max_messages - len(out)
            take = [self._inbox.popleft() for _ in range(min(len(self._inbox), room))]
            self._room.set()
            verdicts = self._dedup.check_many([m.message_id for m in take])
            for received, verdict in zip(take, verdicts, strict=True):
                if verdict is Verdict.DELIVER and len(out) < max_messages:
                    out.append(received)
                    self._in_flight.add(received.message_id)
                    self._counts["delivered"] += 1
                elif verdict is Verdict.DELIVER:
                    # Claimed but no room: give the claim back and keep it for later.
                    self._dedup.failed(received.message_id)
                    self._inbox.appendleft(received)
                elif verdict is Verdict.DUPLICATE:
                    await self._settle_duplicate(received)
                else:
                    self._held.setdefault(received.message_id, []).append(received)

    def _recheck_foreign_holds(self) -> None:
        # A copy held because another *process* is handling its id is settled by
        # nothing here; look at it again now and then (the other process may have
        # finished, or died and let its claim expire).
        now = time.monotonic()
        if now - self._last_recheck < _RECHECK_SECONDS:
            return
        self._last_recheck = now
        for message_id in [i for i in self._held if i not in self._in_flight]:
            self._inbox.extendleft(reversed(self._held.pop(message_id)))

    async def complete(self, message: ReceivedMessage) -> None:
        """The handler succeeded: record the id as done and settle every copy.

        The id is recorded done before settling, so even if settling fails (the
        namespace went down, the lock expired) the redelivered copy is suppressed.
        """
        await self._settle_done(self._mark_done(message))

    def _mark_done(self, message: ReceivedMessage) -> list[ReceivedMessage]:
        # The bookkeeping of complete(), without waiting: returns the copies to settle.
        self._dedup.succeeded(message.message_id)
        self._in_flight.discard(message.message_id)
        self._counts["completed"] += 1
        return [message, *self._held.pop(message.message_id, [])]

    async def _settle_done(self, copies: list[ReceivedMessage]) -> None:
        first, *duplicates = copies
        await self._settle(first, "complete")
        for held in duplicates:
            await self._settle_duplicate(held)

    async def abandon(self, message: ReceivedMessage) -> None:
        """The handler failed: release the id so a copy may be delivered again."""
        self._dedup.failed(message.message_id)
        self._in_flight.discard(message.message_id)
        self._counts["abandoned"] += 1
        await self._settle(message, "abandon")
        for held in reversed(self._held.pop(message.message_id, [])):
            self._inbox.appendleft(held)
        self._arrived.set()

    async def dead_letter(
        self, message: ReceivedMessage, *, reason: str, description: str = ""
    ) -> None:
        """Move the message to its namespace's dead-letter sub-queue; the id counts as done."""
        self._dedup.succeeded(message.message_id)
        self._in_flight.discard(message.message_id)
        transport = self._transports[message.namespace]
        await transport.dead_letter(message, reason=reason, description=description)
        for held in self._held.pop(message.message_id, []):
            await self._settle_duplicate(held)

    async def run(
        self,
        handler: Handler,
        *,
        max_messages: int = 10,
        stop: StopFlag | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        """Receive and handle messages until ``stop`` is set or nothing came for
        ``idle_timeout`` seconds. A handler that raises abandons its message.

        ``handler`` may be a coroutine function or a plain one (run in a worker
        thread). ``stop`` is anything with ``is_set()``: an ``asyncio.Event`` or a
        ``threading.Event``. Outages of both namespaces are waited out (logged).
        """
        try:
            await self._run(handler, max_messages, stop, idle_timeout)
        finally:
            # Return with this run's settlements done (or given up on), not in flight.
            if self._settling:
                await asyncio.wait(self._settling, timeout=_SETTLE_TIMEOUT)

    async def _run(self, handler: Handler, max_messages: int, stop: StopFlag | None,
                   idle_timeout: float | None) -> None:
        idle_since = time.monotonic()
        while not (stop is not None and stop.is_set()):
            try:
                batch = await self.receive(max_messages=max_messages, max_wait=self._poll_wait)
            except NamespaceUnavailable as exc:
                logger.warning("receive: %s; retrying", exc)
                await anyio.sleep(self._poll_wait)
                idle_since = time.monotonic()  # an outage is not an idle queue
                continue
            if not batch:
                if idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                    return
                continue
            idle_since = time.monotonic()
            for message in batch:
                await self._handle(handler, message)

    async def _handle(self, handler: Handler, message: ReceivedMessage) -> None:
        try:
            if inspect.iscoroutinefunction(handler):
                await handler(message)
            else:
                result = await anyio.to_thread.run_sync(handler, message)
                if inspect.isawaitable(result):
                    await result
        except Exception:
            logger.exception("handler failed for message %s", message.message_id)
            await self.abandon(message)
        else:
            # The id is done at once; the settlement runs beside the next handler call.
            # An SDK connection writes a settlement only between two of its receiver's
            # socket reads, so waiting for each one would cost a read timeout per message.
            # Settling late loses nothing: a copy redelivered meanwhile is a duplicate.
            while len(self._settling) >= _MAX_SETTLING:
                await asyncio.wait(self._settling, return_when=asyncio.FIRST_COMPLETED)
            task = asyncio.get_running_loop().create_task(
                self._settle_done(self._mark_done(message)))
            self._settling.add(task)
            task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._settling.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.warning("settling a completed message failed: %s", exc)

    async def aclose(self) -> None:
        """Stop the pumps, give back every message not delivered, close what was opened."""
        if self._closing:
            return
        self._closing = True
        self._room.set()
        if self._settling:
            await asyncio.wait(self._settling, timeout=_SETTLE_TIMEOUT)
        if self._pumps:
            _, pending = await asyncio.wait(self._pumps, timeout=self._poll_wait + 2.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        leftovers = list(self._inbox) + [m for ms in self._held.values() for m in ms]
        self._inbox.clear()
        self._held.clear()
        for received in leftovers:
            await self._settle(received, "abandon")
        for transport in self._owned:
            await transport.aclose()
        self._dedup.close()

    # -- internals ------------------------------------------------------------------

    def _start_pumps(self) -> None:
        if not self._pumps and not self._closing:
            loop = asyncio.get_running_loop()
            self._pumps = [loop.create_task(self._pump(ns)) for ns in self._transports]

    async def _pump(self, namespace: str) -> None:
        transport = self._transports[namespace]
        while not self._closing:
            room = self._prefetch - len(self._inbox)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                batch = await transport.receive(
                    self.entity, max_messages=min(room, 100), max_wait=self._poll_wait
                )
            except TransportError as exc:
                if namespace not in self._down:
                    self._down.add(namespace)
                    emit(self._hooks, "on_namespace_down", namespace=namespace, error=exc)
                await anyio.sleep(self._poll_wait)
                continue
            except MessageRejected as exc:
                self._fatal = exc
                self._arrived.set()
                return
            if namespace in self._down:
                self._down.discard(namespace)
                emit(self._hooks, "on_namespace_up", namespace=namespace)
            if batch:
                self._counts["received"] += len(batch)
                self._inbox.extend(batch)
                self._arrived.set()

    async def _settle_duplicate(self, received: ReceivedMessage) -> None:
        self._counts["duplicates_suppressed"] += 1
        emit(self._hooks, "on_duplicate", message_id=received.message_id,
             namespace=received.namespace)
        await self._settle(received, "complete")

    async def _settle(self, received: ReceivedMessage, how: str) -> None:
        transport = self._transports[received.namespace]
        try:
            if how == "complete":
                await transport.complete(received)
            else:
                await transport.abandon(received)
        except (TransportError, MessageRejected) as exc:
            # The lock expires by itself and the copy comes back; a done id is then
            # suppressed, an undone one delivered. Nothing is lost by not settling.
            logger.info("could not %s %s on %s: %s", how, received.message_id,
                        received.namespace, exc)
