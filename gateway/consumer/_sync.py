"""``PartitionProcessor``: the sync driver of :class:`AsyncPartitionProcessor`.

The async processor runs on the driver's own event loop thread; each sync callback
runs in a worker thread (one at a time per partition, as in the async processor),
with a :class:`SyncPartitionContext` whose blocking :meth:`~SyncPartitionContext.
update_checkpoint` goes back through the driver's loop. Balancing, reading,
fencing and checkpointing are the async core's; nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import functools
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread

from gateway._support.portal import PortalDriver
from gateway.consumer._balance import BalanceSettings
from gateway.consumer._partition import (
    CloseReason,
    PartitionContext,
    PartitionProgress,
    ProcessorSettings,
    StartingPosition,
)
from gateway.consumer._processor import AsyncPartitionProcessor
from gateway.consumer._records import ConsumerGroupRef
from gateway.consumer._store import CheckpointStore
from gateway.transports.base import PartitionEvent, Transport
from replication import ConfigError

__all__ = ["PartitionProcessor", "SyncPartitionContext"]

_Portal = Callable[..., Any]


class SyncPartitionContext:
    """What a sync handler knows about its partition, and how it checkpoints.

    The sync view of :class:`PartitionContext`: same attributes, and a blocking
    :meth:`update_checkpoint` that may be called from the handler's thread.
    """

    def __init__(self, context: PartitionContext, portal: _Portal) -> None:
        self._context = context
        self._portal = portal
        self.partition_id = context.partition_id
        self.fully_qualified_namespace = context.fully_qualified_namespace
        self.eventhub_name = context.eventhub_name
        self.consumer_group = context.consumer_group

    @property
    def last_event(self) -> PartitionEvent | None:
        """The last event handled in this partition (None before the first)."""
        return self._context.last_event

    def update_checkpoint(self, event: PartitionEvent | None = None) -> None:
        """Checkpoint at ``event`` (default: the last event handled), fenced; blocks.

        Raises:
            OwnershipLost: this instance does not own the partition any more.
        """
        self._portal(self._context.update_checkpoint, event)

    def __repr__(self) -> str:
        return f"Sync{self._context!r}"


SyncEventHandler = Callable[[SyncPartitionContext, PartitionEvent | None], None]
SyncBatchHandler = Callable[[SyncPartitionContext, list[PartitionEvent]], None]


class PartitionProcessor(PortalDriver):
    """Sync twin of :class:`AsyncPartitionProcessor`, with plain-function callbacks.

    Takes the same arguments; ``on_event``, ``on_event_batch``,
    ``on_partition_initialize``, ``on_partition_close`` and ``on_error`` are plain
    functions, called in a worker thread with a :class:`SyncPartitionContext`.
    ``sleep`` (if given) is still an async function: it paces the core's loop.

    A processor runs once: :meth:`start`, then :meth:`stop` (also ``close()`` and
    leaving the ``with`` block, which starts it on entry). :meth:`run_forever`
    does all three around a ``threading.Event``.

    Args:
        transport: the namespace to read (one processor per namespace).
        entity: the partitioned entity (event hub).
        store: where ownership and checkpoints live (SQLite, Azure Blob, in memory).
        consumer_group: the consumer group.
        on_event: ``(ctx, event)``; ``event`` is None on an idle call. Give this or
            ``on_event_batch``.
        on_event_batch: ``(ctx, events)``.
        on_partition_initialize: called when a partition is claimed (lifecycle).
        on_partition_close: called when it is released, with the ``CloseReason``.
        on_error: called with each error (``ctx`` None for the balancing loop's).
        starting_position: where a partition with no checkpoint starts: an
            ``EventPosition`` or a function of the partition id.
        settings: batch size, idle calls, prefetch, checkpoint cadence.
        instance_id: a stable id (static membership); random when omitted.
        balance: how the ownership manager balances (intervals, expiries).
        on_progress: called (on the loop, keep it short) with a
            :class:`PartitionProgress` when a partition is claimed, after each batch
            read from it and each checkpoint, and when it is handed over or lost.
    """

    def __init__(
        self,
        *,
        transport: Transport,
        entity: str,
        store: CheckpointStore,
        consumer_group: str = "$Default",
        on_event: SyncEventHandler | None = None,
        on_event_batch: SyncBatchHandler | None = None,
        on_partition_initialize: Callable[[SyncPartitionContext], None] | None = None,
        on_partition_close: Callable[[SyncPartitionContext, CloseReason], None] | None = None,
        on_error: Callable[[SyncPartitionContext | None, BaseException], None] | None = None,
        starting_position: StartingPosition | None = None,
        settings: ProcessorSettings | None = None,
        instance_id: str | None = None,
        balance: BalanceSettings | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        on_progress: Callable[[PartitionProgress], None] | None = None,
    ) -> None:
        if (on_event is None) == (on_event_batch is None):
            raise ConfigError("give exactly one of on_event and on_event_batch")
        super().__init__()
        self._contexts: weakref.WeakKeyDictionary[PartitionContext, SyncPartitionContext] = (
            weakref.WeakKeyDictionary()
        )
        kwargs: dict[str, Any] = {
            "transport": transport, "entity": entity, "store": store,
            "consumer_group": consumer_group, "starting_position": starting_position,
            "settings": settings, "instance_id": instance_id, "balance": balance,
            "clock": clock, "sleep": sleep, "rng": rng, "on_progress": on_progress,
            "on_event": self._adapt(on_event),
            "on_event_batch": self._adapt(on_event_batch),
            "on_partition_initialize": self._adapt(on_partition_initialize),
            "on_partition_close": self._adapt(on_partition_close),
            "on_error": self._adapt(on_error),
        }
        try:
            self._core = self._call(_open, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def instance_id(self) -> str:
        return self._core.instance_id

    @property
    def group(self) -> ConsumerGroupRef:
        return self._core.group

    @property
    def owned(self) -> frozenset[str]:
        """Partitions being read by this instance now."""
        return self._call(self._owned)

    def __enter__(self) -> PartitionProcessor:
        self.start()
        return self

    def start(self) -> None:
        """Join the group and process owned partitions in the background."""
        self._call(self._core.start)

    def stop(self, *, handover_timeout: float | None = None) -> None:
        """Leave gracefully (hand every partition over: checkpoint, close, release),
        then shut down the driver's loop thread. Safe to call twice.

        Args:
            handover_timeout: the longest wait for another instance to take the partitions
                (default ``BalanceSettings.handover_timeout``); 0 releases at once.
        """
        self._close_portal(functools.partial(self._core.stop, handover_timeout=handover_timeout))

    def close(self) -> None:
        """The same as :meth:`stop`."""
        self.stop()

    def run_forever(self, stop_event: threading.Event) -> None:
        """Start, block until ``stop_event`` is set (or Ctrl-C), then :meth:`stop`."""
        self.start()
        try:
            stop_event.wait()
        finally:
            self.stop()

    # -- plumbing -------------------------------------------------------------------

    async def _owned(self) -> frozenset[str]:
        return self._core.owned

    def _context(self, context: PartitionContext | None) -> SyncPartitionContext | None:
        if context is None:
            return None
        sync = self._contexts.get(context)
        if sync is None:
            # Straight to the loop thread, not through _call(): a handler still
            # running while stop() hands its partition over may checkpoint too.
            sync = SyncPartitionContext(context, self._loop_thread.call)
            self._contexts[context] = sync
        return sync

    def _adapt(self, callback: Callable[..., None] | None) -> Callable[..., Any] | None:
        """An async callback for the core that runs ``callback`` in a worker thread."""
        if callback is None:
            return None

        async def call(context: PartitionContext | None, *args: Any) -> None:
            # Runs while the core awaits it, so the handler's update_checkpoint()
            # finds the loop free to do the write.
            await anyio.to_thread.run_sync(callback, self._context(context), *args)

        return call


async def _open(kwargs: dict[str, Any]) -> AsyncPartitionProcessor:
    return AsyncPartitionProcessor(**kwargs)


async def _noop() -> None:
    return None
