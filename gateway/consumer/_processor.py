"""The partition processor: reads the partitions this instance owns and calls handlers.

The :class:`~gateway.consumer._ownership.OwnershipManager` decides which partitions
are ours; for each one, a reader task reads from the last checkpoint (or the starting
position) with an owner level, so that a partition is never read by two instances
even while ownership records disagree, and calls the handler one event (or batch) at a
time, in order. Partitions run in parallel. Checkpoints are written every N events, T
seconds, or by the handler, and always before a partition is handed over.

Handler errors keep at-least-once: a handler that raises is reported to ``on_error``
(with the partition's context) and called again with the same event (or batch)
after a pause that doubles from ``handler_backoff`` up to ``max_handler_backoff``,
until it succeeds; nothing after that event is handled, and no checkpoint passes it,
meanwhile. When the partition is handed over or lost meanwhile, the checkpoint stays
before the event and the next owner reads it again. A handler that must give up on
an event does so itself (catch, record, return). Store errors of the balancing loop
(claims, heartbeats, listings) reach ``on_error(None, err)``, as in the Azure SDK;
a failed partition read, checkpoint write or checkpoint read reaches
``on_error(ctx, err)`` and is retried.

This module is the lifecycle: joining and leaving the group, starting, handing over
and losing partitions. Each owned partition's reading loop is in ``_reading``; the
settings and what handlers see (``PartitionContext``) are in ``_partition``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from gateway._support.deadlines import within_deadline
from gateway.consumer._balance import BalanceSettings
from gateway.consumer._ownership import OwnershipManager
from gateway.consumer._partition import (
    BatchHandler,
    CloseReason,
    EventHandler,
    PartitionContext,
    PartitionProgress,
    ProcessorSettings,
    StartingPosition,
)
from gateway.consumer._reading import PartitionReader, ReadingSetup, guard
from gateway.consumer._records import Checkpoint, ConsumerGroupRef
from gateway.consumer._store import CheckpointStore
from gateway.transports.base import EventPosition, PartitionEvent, Transport
from replication import ConfigError, DeadlineEstimator, Operation, StoreUnavailable

__all__ = ["AsyncPartitionProcessor"]

logger = logging.getLogger("geogateway.consumer")

T = TypeVar("T")

#: The estimator's key for the checkpoint store's calls.
_STORE = "checkpoint store"


class AsyncPartitionProcessor:
    """Shares an entity's partitions with other instances and processes the ones it owns.

    Args:
        transport: the namespace to read (one processor per namespace).
        entity: the partitioned entity (event hub).
        store: where ownership and checkpoints live (SQLite, Azure Blob, in memory).
        consumer_group: the consumer group.
        on_event: ``async (ctx, event)``; ``event`` is None on an idle call. Give this
            or ``on_event_batch``.
        on_event_batch: ``async (ctx, events)``.
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
        on_event: EventHandler | None = None,
        on_event_batch: BatchHandler | None = None,
        on_partition_initialize: Callable[[PartitionContext], Awaitable[None]] | None = None,
        on_partition_close: Callable[[PartitionContext, CloseReason], Awaitable[None]]
        | None = None,
        on_error: Callable[[PartitionContext | None, BaseException], Awaitable[None]]
        | None = None,
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
        self.transport = transport
        self.entity = entity
        self.store = store
        self.group = ConsumerGroupRef(
            fully_qualified_namespace=transport.namespace,
            eventhub_name=entity,
            consumer_group=consumer_group,
        )
        self.settings = settings or ProcessorSettings()
        self._on_close = on_partition_close
        self._on_error = on_error
        self._start: StartingPosition = starting_position or EventPosition.earliest()
        self._clock = clock
        # Reads, checkpoints and lookups within their deadlines: one that hangs is given
        # up, so it holds up neither the other partitions nor the balancing loop.
        self._estimator = DeadlineEstimator(self.settings.deadlines, clock=clock)
        self._reading = ReadingSetup(
            transport=transport, entity=entity, consumer_group=consumer_group,
            settings=self.settings, clock=clock, on_event=on_event, on_batch=on_event_batch,
            on_init=on_partition_initialize, report=self._error, checkpoint=self.checkpoint,
            estimator=self._estimator, progress=self._report if on_progress else None,
        )
        self._on_progress = on_progress
        self._readers: dict[str, PartitionReader] = {}
        self._checkpoints: dict[str, Checkpoint] = {}
        self.manager = OwnershipManager(
            store, self.group, self._partition_ids,
            instance_id=instance_id, settings=balance, clock=clock, sleep=sleep, rng=rng,
            on_claimed=self._start_partition, before_release=self._hand_over,
            on_lost=self._lose,
            on_error=self._store_error,
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def instance_id(self) -> str:
        return self.manager.instance_id

    @property
    def owned(self) -> frozenset[str]:
        """Partitions being read by this instance now."""
        return frozenset(p for p, r in self._readers.items() if not r.closed)

    async def __aenter__(self) -> AsyncPartitionProcessor:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Join the group: balance, claim partitions, read them (in the background)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.manager.run())

    async def stop(self, *, handover_timeout: float | None = None) -> None:
        """Leave gracefully: hand every owned partition over, so the next owner
        starts exactly where this one stopped.

        Partitions are read and handled until another instance is ready to take
        them; each is then checkpointed, closed (``SHUTDOWN``) and released. See
        ``OwnershipManager.stop``.

        Args:
            handover_timeout: the longest wait for takers (default
                ``BalanceSettings.handover_timeout``); 0 releases at once.
        """
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            await self.manager.stop(handover_timeout=handover_timeout)

    async def checkpoint(self, partition_id: str, event: PartitionEvent) -> None:
        """Write a fenced checkpoint at ``event``.

        Raises:
            OwnershipLost: another instance owns the partition now.
            OperationTimeout: the store did not answer within its deadline (the
                checkpoint may or may not be written).
        """
        checkpoint = Checkpoint(
            fully_qualified_namespace=self.group.fully_qualified_namespace,
            eventhub_name=self.entity,
            consumer_group=self.group.consumer_group,
            partition_id=partition_id,
            offset=str(event.offset),
            sequence_number=event.sequence_number,
        )
        await self._store_call(
            Operation.CHECKPOINT,
            lambda: self.store.update_checkpoint(checkpoint, owner_id=self.instance_id),
            f"checkpoint partition {partition_id}")
        reader = self._readers.get(partition_id)
        if reader is not None:
            reader.saved(event)
            self._report(reader)

    # -- ownership callbacks --------------------------------------------------------

    async def _partition_ids(self) -> Sequence[str]:
        return await within_deadline(
            self._estimator, self.transport.namespace, Operation.MANAGE,
            lambda: self.transport.get_partition_ids(self.entity),
            what=f"get the partition ids of {self.entity!r}")

    async def _store_call(self, operation: Operation, call: Callable[[], Awaitable[T]],
                          what: str) -> T:
        # The store is not a namespace, but it can hang too: its own deadline.
        return await within_deadline(self._estimator, self.group.fully_qualified_namespace,
                                     operation, call, what=f"{what} in the checkpoint store",
                                     key=_STORE)

    async def _start_partition(self, partition_id: str) -> None:
        reader = PartitionReader(PartitionContext(self, partition_id), self._reading,
                                 position=self._position, close=self._close)
        self._readers[partition_id] = reader
        self._report(reader)
        position = await self._position(partition_id)
        owner_level = await self._owner_level(partition_id)
        reader.task = asyncio.get_running_loop().create_task(reader.read(position, owner_level))

    async def _owner_level(self, partition_id: str) -> int:
        # The time of our claim on the checkpoint store's one clock (Blob Storage's,
        # or the one machine's of a SQLite store), never this machine's: claims of a
        # partition are serialised by its etag, so a later owner reads with a higher
        # level and detaches a stale reader even if the records disagree for a while,
        # whatever the clocks of the machines involved. A level only fences while
        # its reader is open, so a later reader with a lower one (say, the SDK's
        # EventHubConsumerClient taking the consumer group over) is not blocked.
        records = await self._store_call(
            Operation.CHECKPOINT, lambda: self.store.list_ownership(self.group),
            f"list the owners of partition {partition_id}")
        for record in records:
            if (record.partition_id == partition_id and record.owner_id == self.instance_id
                    and record.last_modified_time is not None):
                return int(record.last_modified_time * 1000)
        return 0  # no longer ours: the read is refused or taken over at once

    async def _hand_over(self, partition_id: str) -> None:
        reader = self._readers.get(partition_id)
        if reader is None:
            return
        await reader.halt()
        last = reader.context.last_event
        if last is not None and last is not reader.checkpointed:
            try:
                await self.checkpoint(partition_id, last)
            except Exception as exc:
                await self._error(reader.context, exc)
                raise  # the partition is kept, and handed over again later
        await self._close(reader, CloseReason.SHUTDOWN)

    async def _lose(self, partition_id: str) -> None:
        reader = self._readers.get(partition_id)
        if reader is not None:
            await reader.halt()
            await self._close(reader, CloseReason.OWNERSHIP_LOST)

    # -- where to read, errors, closing ---------------------------------------------

    async def _position(self, partition_id: str) -> EventPosition | None:
        """Where to read from; None when the store failed (the reader asks again)."""
        try:
            checkpoints = await self._store_call(
                Operation.CHECKPOINT, lambda: self.store.list_checkpoints(self.group),
                f"read the checkpoint of partition {partition_id}")
        except Exception as exc:
            reader = self._readers.get(partition_id)
            await self._error(reader.context if reader is not None else None, exc)
            return None
        for checkpoint in checkpoints:
            if checkpoint.partition_id == partition_id and checkpoint.sequence_number is not None:
                return EventPosition(sequence_number=checkpoint.sequence_number)
        start = self._start
        return start(partition_id) if callable(start) else start

    def _report(self, reader: PartitionReader) -> None:
        if self._on_progress is None:
            return
        progress = PartitionProgress(
            group=self.group, partition_id=reader.context.partition_id,
            owned=not reader.closed, lag_events=0 if reader.closed else reader.unsaved,
            oldest_unsaved_at=None if reader.closed else reader.unsaved_at)
        try:
            self._on_progress(progress)
        except Exception:  # observability never stops a partition
            logger.exception("on_progress failed")

    async def _store_error(self, exc: BaseException) -> None:
        await self._error(None, exc)

    async def _error(self, ctx: PartitionContext | None, exc: BaseException) -> None:
        if self._on_error is None:
            if not isinstance(exc, StoreUnavailable):  # the store says so, once
                logger.warning("partition %s: %s", ctx.partition_id if ctx else "-", exc)
            return
        try:
            await self._on_error(ctx, exc)
        except Exception:
            logger.exception("on_error failed")

    async def _close(self, reader: PartitionReader, reason: CloseReason) -> None:
        if reader.closed:
            return
        reader.closed = True
        self._readers.pop(reader.context.partition_id, None)
        self._report(reader)
        if self._on_close is not None:
            await guard(self._error, reader.context, self._on_close(reader.context, reason))
