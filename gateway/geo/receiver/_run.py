"""``AsyncGeoReceiver.run``: handling messages in a loop, one at a time or several at
once, with plain handlers or inbox handlers (see :class:`Runner`).

A plain (sync) handler, one at a time, is given a whole received batch per thread
hand-over: a worker thread by default, the thread blocked on ``GeoReceiver.run`` for
the sync driver (:func:`handlers_in`). Handing each message to a thread and back cost
more than the rest of the receive path. The outcomes come back to the loop in groups
(:class:`gateway._support.mailbox.Mailbox`) while the batch is still being handled, so a
message's done mark and settlement still run beside the next handler calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.to_thread

from gateway._support.mailbox import Mailbox
from gateway.geo._hooks import GatewayHooks
from gateway.geo._store_watch import StoreWatch
from gateway.geo._tracing import MessageTracer
from gateway.geo.receiver._deliveries import Deliveries
from gateway.geo.receiver._marks import DoneMarks
from gateway.transports.base import ReceivedMessage
from replication import ConfigError, Deduplicator, NamespaceUnavailable, StoreUnavailable

__all__ = [
    "Handler",
    "HandlerThread",
    "MessageInboxHandler",
    "Runner",
    "StopFlag",
    "check_inbox",
    "handlers_in",
]

T = TypeVar("T")

logger = logging.getLogger("geogateway")

#: A handler of one message: a coroutine function, or a plain one (run in a thread).
Handler = Callable[[ReceivedMessage], Awaitable[None] | None]
#: An inbox handler (``run(..., transactional=True)``): a plain function of the message
#: and the dedup store's connection (``sqlite3.Connection`` or ``psycopg.Connection``),
#: run in a worker thread inside the transaction that marks the id done.
MessageInboxHandler = Callable[[ReceivedMessage, Any], None]

_Call = Callable[[ReceivedMessage], Coroutine[Any, Any, None]]

# Completions run() lets wait for their marks at most, and how long run() and
# aclose() wait for the marks and settlements still in flight.
MAX_SETTLING = 256
SETTLE_TIMEOUT = 10.0


class StopFlag(Protocol):
    """What ``run(stop=...)`` polls: ``asyncio.Event`` and ``threading.Event`` both fit."""

    def is_set(self) -> bool: ...


class HandlerThread(Protocol):
    """Where ``run`` calls a plain handler: the loop hands it a batch at a time."""

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the thread; awaited on the loop."""
        ...

    def wait_for(self, awaitable: Awaitable[T]) -> T:
        """From the thread, inside ``run_sync``: await ``awaitable`` on the loop."""
        ...


class _WorkerThreads:
    """The default: anyio's worker threads."""

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args)

    def wait_for(self, awaitable: Awaitable[T]) -> T:
        return anyio.from_thread.run(_awaited, awaitable)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


_WORKER_THREADS = _WorkerThreads()
_HANDLER_THREAD: ContextVar[HandlerThread | None] = ContextVar(
    "geogateway_handler_thread", default=None)


@contextlib.contextmanager
def handlers_in(thread: HandlerThread) -> Iterator[None]:
    """Within this block, ``run`` calls plain handlers (one at a time) in ``thread``."""
    token = _HANDLER_THREAD.set(thread)
    try:
        yield
    finally:
        _HANDLER_THREAD.reset(token)


class Runner:
    """The ``run`` loop of ``AsyncGeoReceiver`` (a mixin over its state)."""

    _dedup: Deduplicator
    _watch: StoreWatch
    _hooks: list[GatewayHooks]
    _marks: DoneMarks[tuple[ReceivedMessage, bool]]
    _deliveries: Deliveries
    _counts: dict[str, int]
    _poll_wait: float
    _tracer: MessageTracer | None
    _systems: dict[str, str]
    entity: str

    if TYPE_CHECKING:  # provided by AsyncGeoReceiver and its other mixins
        async def receive(self, max_messages: int = 10, max_wait: float = 5.0
                          ) -> list[ReceivedMessage]: ...
        async def abandon(self, message: ReceivedMessage) -> None: ...
        def _queue_done(self, message: ReceivedMessage, *, settle: bool,
                        marked: bool = False) -> asyncio.Future[None]: ...
        async def _on_marked(self, items: list[tuple[ReceivedMessage, bool]],
                             error: Exception | None) -> None: ...
        async def _settle_duplicates(self, copies: list[ReceivedMessage]) -> None: ...
        def _raise_mark_error(self) -> None: ...

    async def run(
        self,
        handler: Handler | MessageInboxHandler,
        *,
        max_messages: int = 10,
        stop: StopFlag | None = None,
        idle_timeout: float | None = None,
        transactional: bool = False,
        concurrency: int = 1,
    ) -> None:
        """Receive and handle messages until ``stop`` is set or nothing came for
        ``idle_timeout`` seconds. A handler that raises abandons its message.

        Args:
            handler: a coroutine function or a plain one (run in a worker thread) of the
                message; with ``transactional``, a plain inbox handler
                ``(message, conn)``.
            max_messages: how many messages one receive takes at most.
            stop: anything with ``is_set()``: an ``asyncio.Event``, a ``threading.Event``.
            idle_timeout: return after this many seconds without a message.
            transactional: run the handler inside the dedup store's transaction that
                marks the id done (``conn`` is that transaction's connection: a
                ``psycopg.Connection`` on PostgreSQL, a ``sqlite3.Connection`` on
                SQLite): the application's writes through ``conn`` and the mark commit
                together, so they happen exactly once. Of two copies whose handlers race
                (across machines), one commits; the other rolls back and is settled as a
                duplicate.
            concurrency: handlers running at once (each message still once); a
                received batch (its ids claimed in one store round trip) is handed to
                them as they free up, and handled before ``run`` returns. On
                PostgreSQL each inbox handler has its own pooled connection and
                transaction; a SQLite store's inbox runs one at a time whatever this is.

        Outages of both namespaces, and of the dedup store, are waited out (logged and
        reported to the hooks), never raised.

        Raises:
            ConfigError: ``transactional`` with a coroutine handler or a store without
                ``finish_with_effect``; ``concurrency`` < 1; a pool of the application's
                too small for ``concurrency`` inbox handlers.
            Exception: a pump stopped on an error outside the gateway's error tree
                (a bug, logged once); ``run`` does not idle on as if the queue were empty.
        """
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, not {concurrency}")
        if transactional:
            check_inbox(handler, self._dedup)
            reserve = getattr(self._dedup.store, "reserve", None)
            if reserve is not None:
                await anyio.to_thread.run_sync(reserve, concurrency)
        stopped: Callable[[], bool] = (lambda: False) if stop is None else stop.is_set
        call: _Call = (
            functools.partial(self._handle_inbox, handler, stopped) if transactional
            else functools.partial(self._handle, handler))
        handle_batch: _Batch | None = None
        if not transactional and concurrency == 1 and not inspect.iscoroutinefunction(handler):
            thread = _HANDLER_THREAD.get() or _WORKER_THREADS
            handle_batch = functools.partial(self._handle_batch, cast(Handler, handler),
                                             thread, _Outcomes(self._handled))
        try:
            await self._run(call, max_messages, stop, idle_timeout, concurrency, handle_batch)
        finally:
            # Return with this run's marks and settlements done (or given up on).
            with anyio.move_on_after(SETTLE_TIMEOUT):
                await self._marks.wait()
        self._raise_mark_error()

    async def _run(self, call: _Call,
                   max_messages: int, stop: StopFlag | None, idle_timeout: float | None,
                   concurrency: int, handle_batch: _Batch | None) -> None:
        # A batch is received whole (its ids claimed in one store round trip) and handed
        # to the handlers as they free up; the next one is received once it is all
        # handed out. A batch received is handled before run() returns, as with one
        # handler at a time. (Receiving only as many as there were free handlers cost
        # a claim round trip per one or two messages.)
        idle_since = time.monotonic()
        running: set[asyncio.Task[None]] = set()
        ready: deque[ReceivedMessage] = deque()
        loop = asyncio.get_running_loop()
        try:
            while ready or not (stop is not None and stop.is_set()):
                if ready:
                    if handle_batch is not None:
                        messages = list(ready)
                        ready.clear()
                        await handle_batch(messages)
                    elif concurrency == 1:
                        await call(ready.popleft())
                    elif len(running) < concurrency:
                        task = loop.create_task(call(ready.popleft()))
                        running.add(task)
                        task.add_done_callback(running.discard)
                    else:
                        await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    batch = await self.receive(max_messages=max_messages,
                                               max_wait=self._poll_wait)
                except (NamespaceUnavailable, StoreUnavailable) as exc:
                    if isinstance(exc, NamespaceUnavailable):
                        logger.warning("receive: %s; retrying", exc)
                    await anyio.sleep(self._poll_wait)
                    idle_since = time.monotonic()  # an outage is not an idle queue
                    continue
                if not batch:
                    if running:
                        idle_since = time.monotonic()
                    elif (idle_timeout is not None
                          and time.monotonic() - idle_since >= idle_timeout):
                        return
                    continue
                idle_since = time.monotonic()
                ready.extend(batch)
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _handle(self, handler: Handler | MessageInboxHandler,
                      message: ReceivedMessage) -> None:
        handler = cast(Handler, handler)
        try:
            with self._span(message):
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
            # The mark and the settlement run beside the next handler call, the marks
            # of a batch in one transaction. An SDK connection writes a settlement only
            # between two of its receiver's socket reads, so waiting for each one would
            # cost a read timeout per message. Settling late loses nothing: a copy
            # redelivered meanwhile is held, then settled as a duplicate.
            self._counts["completed"] += 1
            self._queue_done(message, settle=True)
            if self._deliveries.completing >= MAX_SETTLING:
                await self._marks.wait()

    async def _handle_batch(self, handler: Handler, thread: HandlerThread,
                            outcomes: _Outcomes, batch: list[ReceivedMessage]) -> None:
        # As _handle for each message in turn, the handler calls in one hand-over to
        # the handler thread; the outcomes come back in groups (see _Outcomes).
        try:
            await thread.run_sync(self._call_each, handler, thread, outcomes, batch)
        finally:
            # Also when the hand-over was cancelled or a handler raised a BaseException:
            # the messages handled so far are settled as they would have been.
            outcomes.mailbox.flush()
            for message in outcomes.take_failed():
                await self.abandon(message)
        if self._deliveries.completing >= MAX_SETTLING:
            await self._marks.wait()

    def _call_each(self, handler: Handler, thread: HandlerThread, outcomes: _Outcomes,
                   batch: list[ReceivedMessage]) -> None:
        # In the handler thread.
        for message in batch:
            try:
                with self._span(message):
                    result = handler(message)
                    if inspect.isawaitable(result):
                        thread.wait_for(result)
            except Exception:
                logger.exception("handler failed for message %s", message.message_id)
                outcomes.mailbox.put((message, False))
            else:
                outcomes.mailbox.put((message, True))

    def _handled(self, message: ReceivedMessage) -> None:
        # A plain handler returned (on the loop): as in _handle.
        self._counts["completed"] += 1
        self._queue_done(message, settle=True)

    def _span(self, message: ReceivedMessage) -> AbstractContextManager[object]:
        # The handling of one message, traced when a hook traces.
        if self._tracer is None:
            return contextlib.nullcontext()
        return self._tracer.process(system=self._systems[message.namespace],
                                    entity=self.entity, message=message)

    async def _handle_inbox(self, handler: Handler | MessageInboxHandler,
                            stopped: Callable[[], bool], message: ReceivedMessage) -> None:
        effect = functools.partial(handler, message)
        try:
            # An outage of the store is waited out here (the effect is tried again on
            # a new transaction) until run() is told to stop; then, as after the
            # handler's own failure, nothing was kept and the message is abandoned.
            with self._span(message):
                ran = await self._watch.call("the inbox", self._dedup.succeeded_with,
                                             message.message_id, effect, give_up=stopped,
                                             handler_work=True)
        except Exception:
            logger.exception("inbox handler failed for message %s", message.message_id)
            await self.abandon(message)
            return
        self._counts["completed"] += 1
        if ran:
            # The mark committed with the effect. As for a plain handler, the copies are
            # settled beside the next handler call (with the others marked meanwhile,
            # at once), not before it.
            self._queue_done(message, settle=True, marked=True)
            if self._deliveries.completing >= MAX_SETTLING:
                await self._marks.wait()
        else:
            # The other copy's effect committed first: this one is a duplicate.
            await self._settle_duplicates(
                [message, *self._deliveries.done(message.message_id)])


class _Outcomes:
    """A run's handler outcomes on their way from the handler thread to the loop: a
    success is queued done when its group arrives (beside the next handler calls); a
    failure is abandoned once its batch's hand-over returned."""

    def __init__(self, handled: Callable[[ReceivedMessage], None]) -> None:
        self._handled = handled
        self._failed: list[ReceivedMessage] = []
        self.mailbox: Mailbox[tuple[ReceivedMessage, bool]] = Mailbox(
            asyncio.get_running_loop(), self._arrived)

    def _arrived(self, outcomes: list[tuple[ReceivedMessage, bool]]) -> None:
        for message, succeeded in outcomes:
            if succeeded:
                self._handled(message)
            else:
                self._failed.append(message)

    def take_failed(self) -> list[ReceivedMessage]:
        failed, self._failed = self._failed, []
        return failed


_Batch = Callable[[list[ReceivedMessage]], Coroutine[Any, Any, None]]


def check_inbox(handler: object, dedup: Deduplicator, *, what: str = "message") -> None:
    """Refuse what cannot be an inbox: a coroutine handler, a store without one.

    Raises:
        ConfigError: either.
    """
    if inspect.iscoroutinefunction(handler):
        raise ConfigError("an inbox handler (transactional=True) is a plain function "
                          f"({what}, conn): it runs in a worker thread")
    if not dedup.transactional:
        raise ConfigError("transactional=True needs a dedup store with finish_with_effect, "
                          "such as PostgresDedupStore or SqliteDedupStore")
