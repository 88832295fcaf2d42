"""``GeoPartitionReceiver``: the sync driver of the geo partition receiver."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gateway._support.portal import PortalDriver, twin_arguments
from gateway.consumer import BalanceSettings, CheckpointStore, ProcessorSettings, StartingPosition
from gateway.geo._factory import NamespaceLike
from gateway.geo._hooks import GatewayHooks
from gateway.geo.partitions._outages import ErrorCallback
from gateway.geo.partitions._receiver import (
    DEFAULT_HANDLER_RETRY,
    AsyncGeoPartitionReceiver,
    InboxHandler,
)
from gateway.stores import DedupTarget
from gateway.transports.base import PartitionEvent
from replication import DedupStats, DedupWindow, RetryPolicy

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["GeoPartitionReceiver"]


async def _open(kwargs: dict[str, Any]) -> AsyncGeoPartitionReceiver:
    return AsyncGeoPartitionReceiver(**kwargs)


class GeoPartitionReceiver(PortalDriver):
    """Sync twin of :class:`AsyncGeoPartitionReceiver`.

    The processors run on the receiver's own event loop thread, and a plain handler
    runs in a worker thread (``on_error`` stays an async function: it is called on
    that loop). Use as a context manager or call :meth:`close`.

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
            window for a fleet), or a ``DedupStore``; closed by :meth:`close`.
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
        kwargs = twin_arguments(AsyncGeoPartitionReceiver, locals())
        super().__init__()
        try:
            self._core = self._call(_open, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def owned(self) -> dict[str, frozenset[str]]:
        """The partitions read here now, by namespace."""
        return self._call(self._owned)

    @property
    def dedup_stats(self) -> DedupStats:
        return self._core.dedup_stats

    def start(self, handler: Callable[[PartitionEvent], None] | InboxHandler, *,
              transactional: bool = False, concurrency: int | None = None) -> None:
        """Handle events in the background; see :meth:`AsyncGeoPartitionReceiver.start`."""
        self._call(functools.partial(self._core.start, handler, transactional=transactional,
                                     concurrency=concurrency))

    def stop(self, *, handover_timeout: float | None = None) -> None:
        """Leave both groups gracefully (hand over: checkpoint, release); :meth:`start`
        may follow. See :meth:`AsyncGeoPartitionReceiver.stop`."""
        self._call(functools.partial(self._core.stop, handover_timeout=handover_timeout))

    def run(
        self,
        handler: Callable[[PartitionEvent], None] | InboxHandler,
        *,
        stop: threading.Event | None = None,
        idle_timeout: float | None = None,
        transactional: bool = False,
        concurrency: int | None = None,
    ) -> None:
        """Handle events until ``stop`` is set or none came for ``idle_timeout`` seconds.

        The handler runs in a worker thread, one event per partition at a time (at most
        ``concurrency`` in all); see :meth:`AsyncGeoPartitionReceiver.run`.
        """
        self._call(self._run, handler, stop, idle_timeout, transactional, concurrency)

    async def _run(self, handler: Callable[[PartitionEvent], None] | InboxHandler,
                   stop: threading.Event | None, idle_timeout: float | None,
                   transactional: bool, concurrency: int | None) -> None:
        await self._core.run(handler, stop=stop, idle_timeout=idle_timeout,
                             transactional=transactional, concurrency=concurrency)

    async def _owned(self) -> dict[str, frozenset[str]]:
        return self._core.owned

    def close(self) -> None:
        self._close_portal(self._core.aclose)


async def _noop() -> None:
    return None
