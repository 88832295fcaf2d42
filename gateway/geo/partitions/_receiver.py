"""Geo-redundant consumption of a partitioned entity: one processor per namespace.

:class:`AsyncGeoPartitionReceiver` runs an
:class:`~gateway.consumer.AsyncPartitionProcessor` on each namespace (each shares
that namespace's partitions with the other instances and checkpoints under its own
``fully_qualified_namespace``) and puts one :class:`~replication.Deduplicator` in
front of the handler, shared by both. For every event, by ``MessageId``:

- DELIVER: the first copy. The handler runs, retried up to ``handler_retry.attempts``
  times with a short random exponential backoff (tenacity). On success the id is
  marked done. When every attempt failed the claim is released (so the copy in the
  other namespace may be tried too), the error goes to ``on_error`` and is logged,
  and the processor offers the same event again after its own backoff
  (``ProcessorSettings.handler_backoff``, doubling up to ``max_handler_backoff``):
  a new round of attempts, or a DUPLICATE once the other copy succeeded. The
  partition waits on that event meanwhile and is never checkpointed past it
  (at-least-once); a receiver stopped meanwhile leaves it to the next owner.
- DUPLICATE: the id is done; the copy is skipped (``on_duplicate`` hook).
- HOLD: the other copy is in flight, in this process or another one sharing the
  dedup store. The partition waits, re-checking, until that copy is done (then
  this one is a duplicate) or released (then this one is delivered): both copies
  are never delivered. A crashed holder's claim expires after the dedup lease.

Effects and the done mark: at-least-once or exactly-once
---------------------------------------------------------
With a normal handler the id is marked done *after* the handler returned, in a
separate transaction: a process killed between the handler's side effect and the
mark re-delivers the message later (to this group, after the claim's lease), so the
effect is **at-least-once** and the handler should be idempotent.

With ``transactional=True`` (:meth:`AsyncGeoPartitionReceiver.start` / ``run``) the
handler is an *inbox handler* ``(event, conn) -> None``, run in a worker thread inside
the dedup store's transaction that marks the id done (``finish_with_effect``); it
writes its effect through ``conn``, so effect and mark commit together (**exactly-once**;
a copy whose id is done is skipped, and of two racing copies the second one's mark
conflicts and rolls back). On PostgreSQL ``conn`` is a pooled ``psycopg`` connection and
handlers run concurrently (``concurrency``, 8 by default) across partitions, processes
and machines; on SQLite it is the store's file, and SQLite's write lock serializes them.

A shared store that does not answer stops delivery at the store: checks, marks and
inbox transactions wait for it (a warning, ``on_store_down``, ``on_error(None, exc)``,
then ``on_store_up``); nothing is checkpointed past an event whose mark is not written.

A namespace that is down does not stop the other: its processor retries, every
failure goes to ``on_error``, and the outage is one warning naming the namespace and
what failed (listing the partitions, or reading one) and an ``on_namespace_down``
hook; it is probed (a partition listing every balance interval) until it answers,
then one "is back" warning and ``on_namespace_up``.
``GeoPartitionReceiver`` (``_partitions_sync``) is the sync twin, a thin driver over
the same core; ``_partitions_dedup`` delivers each event once, ``_partitions_outages``
reports and probes the namespaces that are down.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from gateway.consumer import (
    AsyncPartitionProcessor,
    BalanceSettings,
    CheckpointStore,
    PartitionContext,
    PartitionProgress,
    ProcessorSettings,
    SqliteCheckpointStore,
    StartingPosition,
)
from gateway.geo._factory import NamespaceLike, check_entity, open_transport
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._store_watch import StoreWatch
from gateway.geo._tracing import find_tracer, messaging_system
from gateway.geo.partitions._dedup import DedupDelivery, InboxHandler, PartitionHandler
from gateway.geo.partitions._outages import ErrorCallback, NamespaceOutages
from gateway.geo.receiver import StopFlag, check_inbox
from gateway.stores import DedupTarget, StoreOutages, is_dsn, open_dedup_store
from gateway.transports.base import PartitionEvent, Transport
from replication import (
    ConfigError,
    Deduplicator,
    DedupStats,
    DedupWindow,
    GatewayError,
    RetryPolicy,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = [
    "DEFAULT_HANDLER_RETRY",
    "AsyncGeoPartitionReceiver",
    "InboxHandler",
    "PartitionHandler",
]

logger = logging.getLogger("geogateway.consumer")

#: Three attempts, 0.1 s to 1 s apart, at most 5 s in all.
DEFAULT_HANDLER_RETRY = RetryPolicy(attempts=3, initial_backoff=0.1, max_backoff=1.0,
                                    max_delay=5.0)

_RUN_POLL = 0.05
#: Inbox handlers at once on a store with a pool (PostgreSQL) when run() does not say.
_INBOX_CONCURRENCY = 8


def _open_checkpoint_store(
    target: str | os.PathLike[str] | ConnectionPool[Any],
) -> CheckpointStore:
    """A PostgreSQL store for a DSN or a pool, a SQLite one for a path."""
    if isinstance(target, (str, os.PathLike)) and not is_dsn(target):
        return SqliteCheckpointStore(target)
    from gateway.consumer import PostgresCheckpointStore

    return PostgresCheckpointStore(target)  # type: ignore[arg-type]  # a DSN or a pool


class AsyncGeoPartitionReceiver(NamespaceOutages):
    """Reads a partitioned entity on both namespaces and delivers each ``MessageId`` once.

    Args:
        primary: ``local://NAME``, a connection string, a ``NamespaceConfig`` or a
            ``Transport``.
        secondary: the same for the secondary namespace (a different namespace).
        entity: the partitioned entity (event hub).
        checkpoint_store: a ``CheckpointStore`` (shared by the instances of the
            group; the caller closes it), the path of a SQLite one (one machine), or
            a PostgreSQL DSN or ``psycopg_pool.ConnectionPool`` (a fleet: a
            ``PostgresCheckpointStore``); a store opened here is closed here.
            Checkpoints and ownership are kept per namespace.
        dedup_store: a path (a persistent SQLite window, shared by the processes of
            one machine), a PostgreSQL DSN or a ``psycopg_pool.ConnectionPool`` (one
            window for a fleet), or a ``DedupStore``; closed by :meth:`aclose`.
        dedup_fallback: a SQLite file to de-duplicate against while a shared store
            stays unreachable (at-least-once meanwhile); None: wait for the store.
        consumer_group: the consumer group, the same on both namespaces.
        instance_id: a stable id; the processors use ``f"{instance_id}@{namespace}"``.
            Random when omitted.
        settings: batch, prefetch and checkpoint cadence of both processors.
        balance: how both ownership managers balance.
        starting_position: where a partition with no checkpoint starts.
        hooks: ``on_duplicate``, ``on_namespace_down``, ``on_namespace_up``,
            ``on_partition_progress``, ``on_dedup_store``; a hook that traces
            (``gateway.observability.Tracing``) traces each event handled or skipped.
        data_dir: the directory of local namespaces.
        dedup_window: how long and how many ids are remembered (default 10 min, 1M).
        handler_retry: attempts and backoff of a failing handler.
        dedup_lease: seconds a claim protects a copy in flight; a crashed process's
            messages are delivered again after this (keep it above the time a
            handler takes).
        on_error: ``async (ctx, exc)``, called for each round of attempts a handler
            failed (the event is offered again), for read and checkpoint errors
            (``ctx`` is that partition's context), for store errors of the
            balancing loop and once per outage of the dedup store (``ctx`` is None).

    Raises:
        ConfigError: both namespaces are the same, or a bad entity or option.
    """

    def __init__(
        self,
        *,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        entity: str,
        checkpoint_store: CheckpointStore | str | os.PathLike[str] | ConnectionPool[Any],
        dedup_store: DedupTarget,
        consumer_group: str = "$Default",
        instance_id: str | None = None,
        settings: ProcessorSettings | None = None,
        balance: BalanceSettings | None = None,
        starting_position: StartingPosition | None = None,
        hooks: GatewayHooks | Iterable[GatewayHooks] = (),
        data_dir: str | os.PathLike[str] | None = None,
        dedup_window: DedupWindow | None = None,
        handler_retry: RetryPolicy = DEFAULT_HANDLER_RETRY,
        on_error: ErrorCallback | None = None,
        dedup_lease: float = 60.0,
        dedup_fallback: str | os.PathLike[str] | None = None,
    ) -> None:
        self.entity = check_entity(entity)
        self._hooks = [hooks] if isinstance(hooks, GatewayHooks) else list(hooks)
        self._transports: list[Transport] = []
        self._owned: list[Transport | CheckpointStore] = []  # what aclose() closes
        for ns in (primary, secondary):
            transport, owned = open_transport(ns, data_dir=data_dir)
            self._transports.append(transport)
            if owned:
                self._owned.append(transport)
        if self._transports[0].namespace == self._transports[1].namespace:
            raise ConfigError(f"primary and secondary are the same namespace "
                              f"{self._transports[0].namespace!r}")
        if isinstance(checkpoint_store, CheckpointStore):
            self._store = checkpoint_store
        else:
            self._store = _open_checkpoint_store(checkpoint_store)
            self._owned.append(self._store)
        outages = getattr(self._store, "outages", None)
        if isinstance(outages, StoreOutages):  # a shared store's outages are hooks too
            outages.listen(functools.partial(self._checkpoint_store_outage, outages.name))
        dedup = open_dedup_store(dedup_store, window=dedup_window, fallback=dedup_fallback)
        self._dedup = Deduplicator(dedup, window=dedup_window, lease=dedup_lease)
        self.consumer_group = consumer_group
        self._settings = settings
        self._balance = balance
        self._starting_position = starting_position
        self._instance = instance_id if instance_id is not None else uuid.uuid4().hex[:12]
        self._on_error = on_error
        self._processors: list[AsyncPartitionProcessor] = []
        self._stopping = asyncio.Event()
        self._store_watch = StoreWatch(dedup, hooks=self._hooks, on_error=self._store_error,
                                       stopping=self._stopping.is_set)
        self._delivery = DedupDelivery(
            self._dedup, handler_retry=handler_retry, hooks=self._hooks,
            stopping=self._stopping, watch=self._store_watch,
            tracer=find_tracer(self._hooks), entity=self.entity,
            systems={t.namespace: messaging_system(t) for t in self._transports},
            consumer_group=consumer_group)
        self._down: set[str] = set()
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._busy = 0
        self._last_activity = time.monotonic()
        self._closed = False

    # -- public API -----------------------------------------------------------------

    @property
    def namespaces(self) -> tuple[str, str]:
        """The two namespaces, primary first."""
        return (self._transports[0].namespace, self._transports[1].namespace)

    @property
    def owned(self) -> dict[str, frozenset[str]]:
        """The partitions read here now, by namespace (empty while stopped)."""
        return {p.transport.namespace: p.owned for p in self._processors}

    @property
    def down(self) -> frozenset[str]:
        """Namespaces whose reads or partition listing failed, until they answer again
        (an event from them, or a listing of their partitions)."""
        return frozenset(self._down)

    @property
    def dedup_stats(self) -> DedupStats:
        """The de-duplicator's counters (checks, delivered, duplicates, held)."""
        return self._dedup.stats

    async def __aenter__(self) -> AsyncGeoPartitionReceiver:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(
        self, handler: PartitionHandler | InboxHandler, *, transactional: bool = False,
        concurrency: int | None = None,
    ) -> None:
        """Join the group on both namespaces and handle events in the background.

        Args:
            handler: ``async (event)`` or a plain function (run in a worker thread);
                with ``transactional``, an :data:`InboxHandler` ``(event, conn)``.
            transactional: run the handler inside the dedup store's transaction that
                marks the id done, so that its writes through ``conn`` and the mark
                commit together: exactly-once effects (see the module docstring).
            concurrency: handlers running at once across the partitions read here
                (each partition still one event at a time, in order). None: one per
                partition, and on PostgreSQL with ``transactional`` 8 (the pool grows
                to match).

        Raises:
            RuntimeError: already started, or closed.
            ConfigError: ``transactional`` with a coroutine handler, or with a dedup
                store that has no ``finish_with_effect``; ``concurrency`` < 1; a pool
                of the application's too small for ``concurrency`` inbox handlers.
        """
        if self._closed or self._processors:
            raise RuntimeError("this receiver is " + ("closed" if self._closed else "running"))
        if concurrency is not None and concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, not {concurrency}")
        if transactional:
            check_inbox(handler, self._dedup, what="event")
            reserve = getattr(self._dedup.store, "reserve", None)
            if reserve is not None:
                concurrency = concurrency or _INBOX_CONCURRENCY
                await anyio.to_thread.run_sync(reserve, concurrency)
        self._delivery.use(handler, transactional=transactional, concurrency=concurrency)
        self._stopping.clear()
        self._last_activity = time.monotonic()
        # A processor cannot be restarted after stop(): build new ones each time.
        self._processors = [self._processor(t) for t in self._transports]
        for processor in self._processors:
            await processor.start()

    async def stop(self, *, handover_timeout: float | None = None) -> None:
        """Leave both groups gracefully: hand every partition over (checkpoint, then
        release), handling events until another instance is ready to take each.
        ``handover_timeout`` bounds that wait (default ``BalanceSettings.handover_timeout``;
        0 releases at once).

        An event waiting on HOLD is left unhandled (and not checkpointed): the next
        owner reads it again, and handles or skips it by then. A handler that is
        running (or backing off between attempts) is waited for.
        """
        self._stopping.set()
        watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        processors, self._processors = self._processors, []
        results = await asyncio.gather(
            *(p.stop(handover_timeout=handover_timeout) for p in processors),
            return_exceptions=True)
        for processor, result in zip(processors, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("stopping the processor of %s failed: %s",
                               processor.transport.namespace, result)

    async def run(
        self,
        handler: PartitionHandler | InboxHandler,
        *,
        stop: StopFlag | None = None,
        idle_timeout: float | None = None,
        transactional: bool = False,
        concurrency: int | None = None,
    ) -> None:
        """Handle events until ``stop`` is set or none came for ``idle_timeout`` seconds.

        Starts, waits, then :meth:`stop` s (also when cancelled). An outage of both
        namespaces, or of the dedup store, does not count as idle.

        Args:
            handler: ``async (event)`` or a plain function (run in a worker thread).
            stop: anything with ``is_set()``: ``asyncio.Event``, ``threading.Event``.
            idle_timeout: return after this many seconds without an event.
            transactional: ``handler`` is an inbox handler; see :meth:`start`.
            concurrency: handlers at once; see :meth:`start`.
        """
        await self.start(handler, transactional=transactional, concurrency=concurrency)
        try:
            while not (stop is not None and stop.is_set()):
                if self._busy or len(self._down) == len(self._transports):
                    self._last_activity = time.monotonic()
                elif (idle_timeout is not None
                      and time.monotonic() - self._last_activity >= idle_timeout):
                    return
                await asyncio.sleep(_RUN_POLL)
        finally:
            await self.stop()

    async def aclose(self) -> None:
        """Stop, then close the de-duplicator and what this receiver opened."""
        if self._closed:
            return
        await self.stop()
        self._closed = True
        for resource in self._owned:
            await resource.aclose()
        try:
            await anyio.to_thread.run_sync(self._dedup.close)
        except GatewayError as exc:  # the claims could not be released: their leases run out
            logger.warning("closing the %s: %s", self._store_watch.store, exc)

    # -- processing -----------------------------------------------------------------

    def _checkpoint_store_outage(self, store: str, available: bool,
                                 error: BaseException | None) -> None:
        if available:
            emit(self._hooks, "on_store_up", store=store)
        else:
            emit(self._hooks, "on_store_down", store=store, error=error)

    async def _store_error(self, exc: BaseException) -> None:
        if self._on_error is not None:
            await self._on_error(None, exc)

    def _processor(self, transport: Transport) -> AsyncPartitionProcessor:
        namespace = transport.namespace

        async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
            await self._error(namespace, ctx, exc)

        return AsyncPartitionProcessor(
            transport=transport, entity=self.entity, store=self._store,
            on_event=self._on_event, on_error=on_error,
            consumer_group=self.consumer_group, settings=self._settings, balance=self._balance,
            starting_position=self._starting_position,
            instance_id=f"{self._instance}@{namespace}",
            on_progress=self._progress if self._hooks else None,
        )

    def _progress(self, progress: PartitionProgress) -> None:
        emit(self._hooks, "on_partition_progress",
             namespace=progress.group.fully_qualified_namespace,
             entity=progress.group.eventhub_name, consumer_group=progress.group.consumer_group,
             partition_id=progress.partition_id, owned=progress.owned,
             lag_events=progress.lag_events, oldest_unsaved_at=progress.oldest_unsaved_at)

    async def _on_event(self, ctx: PartitionContext, event: PartitionEvent | None) -> None:
        if event is None:
            return  # an idle call (settings.max_wait_time)
        self._busy += 1
        pause = 0.0
        try:
            self._back(event.namespace, f"reading {self.entity} again")
            await self._delivery.deliver(event)
        except Exception:
            # The processor offers the event again after its backoff: not idle.
            pause = (self._settings or ProcessorSettings()).max_handler_backoff
            raise
        finally:
            self._busy -= 1
            self._last_activity = time.monotonic() + pause
