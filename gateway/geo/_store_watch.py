"""A receiver's view of its de-duplication store's health: waiting out an outage of a
shared store (PostgreSQL restarted, failed over, unreachable), reported once.

While the store does not answer, a receiver settles nothing and delivers nothing new:
a done mark that cannot be written keeps its copy unsettled, so no copy is completed
without its mark. :meth:`StoreWatch.call` runs one store call in a worker thread and
tries it again (tenacity, random exponential backoff up to 2 s) for as long as it raises
:class:`~replication.StoreUnavailable`, unless the receiver is stopping. The outage is
one warning, an ``on_store_down`` hook and (partition receivers) one ``on_error`` call;
the first call that succeeds afterwards is one "is back" warning and ``on_store_up``. A
:class:`~gateway.stores.FallbackDedupStore` switching to its local window and back is a
warning of its own and ``on_dedup_fallback``. A call named by ``timed`` is timed in its
worker thread and reported as ``on_dedup_store`` (when there are hooks).

Store calls run under a thread limiter of their own, not anyio's default one that
sync handlers run on: 40 slow handlers (``run(concurrency=40)``) would otherwise hold
every worker thread, and the claims and done marks that settle messages would wait
behind them. An inbox call (``handler_work``) runs the handler inside the store's
transaction: it is a handler's work and takes a handler's thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential

from gateway.geo._hooks import GatewayHooks, dedup_call, emit
from gateway.stores import FallbackDedupStore, PostgresDedupStore, SqliteDedupStore
from replication import DedupStore, StoreUnavailable

__all__ = ["StoreWatch", "describe_store"]

logger = logging.getLogger("geogateway")

T = TypeVar("T")

#: Worker threads for one receiver's store calls (each holds a store connection at most).
STORE_THREADS = 8


def describe_store(store: DedupStore) -> str:
    """What logs and hooks call the store: the server or the file, never a password."""
    if isinstance(store, FallbackDedupStore):
        return describe_store(store.shared)
    if isinstance(store, PostgresDedupStore):
        return f"dedup store at {store.where}"
    if isinstance(store, SqliteDedupStore):
        return f"dedup store {store.path}"
    return f"dedup store {type(store).__name__}"


class StoreWatch:
    """Waits out, and reports, the outages of one receiver's dedup store.

    Args:
        store: the store (its fallback switches are reported too).
        hooks: ``on_store_down``, ``on_store_up``, ``on_dedup_fallback``.
        on_error: awaited with the error once per outage.
        stopping: true when the receiver stops: a waiting call then raises its error.
        max_backoff: the longest pause between two attempts.
    """

    def __init__(
        self,
        store: DedupStore,
        *,
        hooks: Sequence[GatewayHooks],
        on_error: Callable[[BaseException], Awaitable[None]] | None = None,
        stopping: Callable[[], bool] = lambda: False,
        max_backoff: float = 2.0,
    ) -> None:
        self.store = describe_store(store)
        self._hooks = hooks
        self._on_error = on_error
        self._stopping = stopping
        self._max_backoff = max_backoff
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limiter = anyio.CapacityLimiter(STORE_THREADS)
        self.down = False
        if isinstance(store, FallbackDedupStore):
            fallback = store.fallback_path
            store.listen(lambda active, _error: self._from_thread(
                "on_dedup_fallback", store=self.store, fallback=fallback, active=active))

    def _from_thread(self, hook: str, **kwargs: Any) -> None:
        # Store callbacks come from worker threads; hooks run on the receiver's loop.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(functools.partial(emit, self._hooks, hook, **kwargs))
        else:
            emit(self._hooks, hook, **kwargs)

    async def failed(self, exc: StoreUnavailable, doing: str) -> None:
        """Report an outage met while ``doing`` something (once per outage)."""
        if self.down:
            return
        self.down = True
        logger.warning("%s is unavailable (%s failed: %s); nothing is settled or delivered "
                       "past it until it is back", self.store, doing, exc)
        emit(self._hooks, "on_store_down", store=self.store, error=exc)
        if self._on_error is not None:
            try:
                await self._on_error(exc)
            except Exception:
                logger.exception("on_error failed")

    def answered(self) -> None:
        """A store call succeeded: report the end of an outage."""
        if self.down:
            self.down = False
            logger.warning("%s is back", self.store)
            emit(self._hooks, "on_store_up", store=self.store)

    async def once(self, doing: str, fn: Callable[..., T], *args: Any,
                   timed: str | None = None, count: int = 1) -> T:
        """``fn(*args)`` in a worker thread, once; an outage is reported and raised.
        ``timed``: the ``on_dedup_store`` operation it is (``count`` ids), or None."""
        self._loop = asyncio.get_running_loop()
        try:
            result = await self._run(timed, count, False, fn, *args)
        except StoreUnavailable as exc:
            await self.failed(exc, doing)
            raise
        self.answered()
        return result

    async def _run(self, timed: str | None, count: int, handler_work: bool,
                   fn: Callable[..., T], *args: Any) -> T:
        limiter = None if handler_work else self._limiter
        if timed is None:
            return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
        return await dedup_call(self._hooks, timed, count, fn, *args, limiter=limiter)

    async def call(self, doing: str, fn: Callable[..., T], *args: Any,
                   give_up: Callable[[], bool] = lambda: False, timed: str | None = None,
                   count: int = 1, handler_work: bool = False) -> T:
        """``fn(*args)`` in a worker thread, tried again while the store is unavailable
        (``timed`` and ``count``: as for :meth:`once`, each attempt that answered).
        ``handler_work``: ``fn`` runs a handler (an inbox call): on a handler's thread.

        Raises:
            StoreUnavailable: still unavailable when the receiver began to stop (or
                ``give_up()`` became true).
            Exception: whatever else ``fn`` raised.
        """
        self._loop = asyncio.get_running_loop()

        async def report(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, StoreUnavailable):
                await self.failed(error, doing)

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(StoreUnavailable),
            wait=wait_random_exponential(multiplier=0.05, max=self._max_backoff),
            stop=lambda _state: self._stopping() or give_up(),
            before_sleep=report,
            reraise=True,
        )
        try:
            result: T = await retrying(self._run, timed, count, handler_work, fn, *args)
        except StoreUnavailable as exc:
            await self.failed(exc, doing)
            raise
        self.answered()
        return result
