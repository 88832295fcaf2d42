"""Delivering one event of the geo partition receiver once across both namespaces:
the de-duplicator's verdict, waiting on a held copy, the retried handler, the inbox.

Every store call goes through the receiver's :class:`~gateway.geo._store_watch.StoreWatch`:
an outage of a shared store is waited out where it is met (a check, a done mark, an
inbox transaction), reported once, and never counted as a failure of the handler."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import anyio.to_thread
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._store_watch import StoreWatch
from gateway.geo._tracing import MessageTracer
from gateway.transports.base import PartitionEvent
from replication import Deduplicator, RetryPolicy, StoreUnavailable, Verdict

__all__ = ["DedupDelivery", "InboxHandler", "PartitionHandler"]

logger = logging.getLogger("geogateway.consumer")

#: A handler of one event: a coroutine function, or a plain one (run in a thread).
PartitionHandler = Callable[[PartitionEvent], Awaitable[None] | None]
#: An inbox handler (``transactional=True``): a plain function of the event and the
#: dedup store's connection (``psycopg.Connection`` on PostgreSQL, ``sqlite3.Connection``
#: on SQLite), run in a worker thread inside the transaction that marks the event's id
#: done; it writes its effect through ``conn`` and must not commit.
InboxHandler = Callable[[PartitionEvent, Any], None]

_FIRST_HOLD_PAUSE = 0.02
_MAX_HOLD_PAUSE = 0.5


class _HoldAbandoned(asyncio.CancelledError):
    """Raised from the handler of a held copy when the receiver stops.

    A cancellation, not an error: the processor lets it end the reader without
    counting the event as handled, so the hand-over checkpoint stays before it and
    the next owner reads it again.
    """


class DedupDelivery:
    """Runs the handler of ``AsyncGeoPartitionReceiver`` at most once per ``MessageId``
    (see that module's docstring for DELIVER, DUPLICATE and HOLD).

    Args:
        dedup: the de-duplicator both namespaces' processors share.
        handler_retry: attempts and backoff of a failing handler.
        hooks: ``on_duplicate`` is called for each copy skipped.
        stopping: set when the receiver stops: a held copy is then abandoned.
        watch: waits out and reports the dedup store's outages.
        tracer: traces each delivery and each copy skipped (None: no tracing).
        entity: the entity, and ``systems`` each namespace's ``messaging.system``,
            ``consumer_group`` the consumer group, for the traces.
    """

    def __init__(
        self,
        dedup: Deduplicator,
        *,
        handler_retry: RetryPolicy,
        hooks: Sequence[GatewayHooks],
        stopping: asyncio.Event,
        watch: StoreWatch,
        tracer: MessageTracer | None = None,
        entity: str = "",
        systems: dict[str, str] | None = None,
        consumer_group: str | None = None,
    ) -> None:
        self._dedup = dedup
        self._watch = watch
        self._slots: asyncio.Semaphore | None = None
        self._hooks = hooks
        self._tracer = tracer
        self._entity = entity
        self._systems = systems or {}
        self._group = consumer_group
        self._stopping = stopping
        self._retrying = AsyncRetrying(
            stop=stop_after_attempt(handler_retry.attempts)
            | stop_after_delay(handler_retry.max_delay),
            wait=wait_random_exponential(multiplier=handler_retry.initial_backoff,
                                         max=handler_retry.max_backoff),
            retry=retry_if_exception_type(Exception),
            reraise=True,
            before_sleep=_log_retry,
        )
        self._handler: PartitionHandler | InboxHandler | None = None
        self._transactional = False

    def use(self, handler: PartitionHandler | InboxHandler, *, transactional: bool,
            concurrency: int | None = None) -> None:
        """Deliver to ``handler`` from now on (an inbox handler when ``transactional``),
        at most ``concurrency`` calls at once (None: one per partition)."""
        self._handler = handler
        self._transactional = transactional
        self._slots = None if concurrency is None else asyncio.Semaphore(concurrency)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield

    async def deliver(self, event: PartitionEvent) -> None:
        """Handle ``event`` unless its ``MessageId`` is done; wait while it is held.

        Raises:
            Exception: the handler's error after every attempt failed; the claim was
                released, so the other namespace's copy may be delivered.
        """
        message_id = event.message.message_id
        verdict = await self._wait_turn(message_id)
        if verdict is Verdict.DUPLICATE:
            self._skipped(event)
            return
        ran = True
        try:
            async with self._slot():
                if self._tracer is None:
                    ran = await self._attempts(event)
                else:
                    with self._tracer.process(system=self._systems.get(event.namespace, ""),
                                              entity=self._entity, message=event,
                                              consumer_group=self._group):
                        ran = await self._attempts(event)
        except Exception:
            # Release the claim: the copy in the other namespace may be delivered (with
            # the store away, once the claim's lease ran out).
            with contextlib.suppress(StoreUnavailable):
                await self._watch.once("releasing a claim", self._dedup.failed, message_id,
                                       timed="release")
            raise  # to the processor: on_error, then the event is offered again
        if not self._transactional:
            # The handler ran: wait for the mark rather than run it again.
            await self._watch.call("marking done", self._dedup.succeeded, message_id,
                                   timed="done")
        elif not ran:  # the other copy's effect committed first (e.g. after a lease ran out)
            self._skipped(event)

    async def _attempts(self, event: PartitionEvent) -> bool:
        # The handler with its retries; False when an inbox handler found the id done.
        if self._transactional:
            return await self._retrying(self._call_inbox, event)
        await self._retrying(self._call_handler, event)
        return True

    def _skipped(self, event: PartitionEvent) -> None:
        emit(self._hooks, "on_duplicate", message_id=event.message.message_id,
             namespace=event.namespace)
        if self._tracer is not None:
            self._tracer.skipped(system=self._systems.get(event.namespace, ""),
                                 entity=self._entity, event=event, consumer_group=self._group)

    async def _call_inbox(self, event: PartitionEvent) -> bool:
        handler = cast(InboxHandler, self._handler)
        effect = functools.partial(handler, event)
        # An outage is waited out here, the effect tried again on a new transaction:
        # it is not one of the handler's attempts.
        return await self._watch.call("the inbox", self._dedup.succeeded_with,
                                      event.message.message_id, effect, handler_work=True)

    async def _wait_turn(self, message_id: str) -> Verdict:
        pause = _FIRST_HOLD_PAUSE
        while True:
            try:
                verdict = await self._watch.call("checking ids", self._dedup.check,
                                                 message_id, timed="check")
            except StoreUnavailable as exc:  # still away, and the receiver stops
                raise _HoldAbandoned(f"stopped while the dedup store was away ({exc})"
                                     ) from exc
            if verdict is not Verdict.HOLD:
                return verdict
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), pause)
            if self._stopping.is_set():
                raise _HoldAbandoned(f"stopped while {message_id} was held")
            pause = min(pause * 1.5, _MAX_HOLD_PAUSE)

    async def _call_handler(self, event: PartitionEvent) -> None:
        handler = cast(PartitionHandler, self._handler)
        assert handler is not None
        if inspect.iscoroutinefunction(handler):
            await handler(event)
            return
        result = await anyio.to_thread.run_sync(handler, event)
        if inspect.isawaitable(result):
            await result


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    logger.warning("handler failed (attempt %d): %s; retrying", state.attempt_number, exc)
