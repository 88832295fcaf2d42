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
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.consumer._balance import BalanceSettings
from gateway.consumer._ownership import OwnershipManager
from gateway.consumer._records import Checkpoint, ConsumerGroupRef
from gateway.consumer._store import CheckpointStore
from gateway.transports.base import EventPosition, PartitionEvent, Transport
from replication import ConfigError, GatewayError, OwnershipLost

__all__ = [
    "AsyncPartitionProcessor",
    "CloseReason",
    "PartitionContext",
    "ProcessorSettings",
]

logger = logging.getLogger("geogateway.consumer")

StartingPosition = EventPosition | Callable[[str], EventPosition]


class CloseReason(enum.Enum):
    """Why a partition stopped being processed here."""

    SHUTDOWN = "shutdown"  # stop() handed it over (after a checkpoint)
    OWNERSHIP_LOST = "ownership_lost"  # another instance took it over


@dataclass(frozen=True, kw_only=True)
class ProcessorSettings:
    """How partitions are read and checkpointed.

    Args:
        max_batch_size: events per ``on_event_batch`` call (and per read).
        max_wait_time: when set, the handler is also called when no event came for
            this many seconds (``on_event(ctx, None)`` / ``on_event_batch(ctx, [])``).
        prefetch: events read ahead per partition.
        checkpoint_every_events: checkpoint after this many events (None: never by count).
        checkpoint_every_seconds: checkpoint when the last one is this old (None: never).
        poll_wait: how long one read waits for events.
        handler_backoff: the first pause before a failed event (or batch) is handed
            to the handler again; it doubles on each failure in a row.
        max_handler_backoff: the longest such pause.
    """

    max_batch_size: int = 100
    max_wait_time: float | None = None
    prefetch: int = 300
    checkpoint_every_events: int | None = 100
    checkpoint_every_seconds: float | None = 5.0
    poll_wait: float = 0.5
    handler_backoff: float = 0.1
    max_handler_backoff: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "prefetch", "checkpoint_every_events"):
            value = getattr(self, name)
            if value is None and name == "checkpoint_every_events":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, not {value!r}")
        for name in ("max_wait_time", "checkpoint_every_seconds", "poll_wait",
                     "handler_backoff", "max_handler_backoff"):
            value = getattr(self, name)
            if value is None and name in ("max_wait_time", "checkpoint_every_seconds"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name} must be a number of seconds > 0, not {value!r}")


class PartitionContext:
    """What a handler knows about its partition, and how it checkpoints."""

    def __init__(self, processor: AsyncPartitionProcessor, partition_id: str) -> None:
        self._processor = processor
        self.partition_id = partition_id
        self.fully_qualified_namespace = processor.group.fully_qualified_namespace
        self.eventhub_name = processor.group.eventhub_name
        self.consumer_group = processor.group.consumer_group
        self.last_event: PartitionEvent | None = None

    async def update_checkpoint(self, event: PartitionEvent | None = None) -> None:
        """Checkpoint at ``event`` (default: the last event handled), fenced.

        Raises:
            OwnershipLost: this instance does not own the partition any more.
        """
        event = event or self.last_event
        if event is not None:
            await self._processor.checkpoint(self.partition_id, event)

    def __repr__(self) -> str:
        return (f"PartitionContext({self.fully_qualified_namespace}/{self.eventhub_name}/"
                f"{self.consumer_group}/{self.partition_id})")


EventHandler = Callable[[PartitionContext, PartitionEvent | None], Awaitable[None]]
BatchHandler = Callable[[PartitionContext, list[PartitionEvent]], Awaitable[None]]


class _Reader:
    """The state of one owned partition."""

    def __init__(self, context: PartitionContext) -> None:
        self.context = context
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.since_checkpoint = 0
        self.checkpointed_at = 0.0
        self.checkpointed: PartitionEvent | None = None
        self.closed = False
        self.halted = asyncio.Event()  # set with stopping: ends a pause at once


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
        on_partition_initialize / on_partition_close / on_error: lifecycle callbacks.
        starting_position: where a partition with no checkpoint starts: an
            ``EventPosition`` or a function of the partition id.
        settings: batch size, idle calls, prefetch, checkpoint cadence.
        instance_id: a stable id (static membership); random when omitted.
        balance: how the ownership manager balances (intervals, expiries).
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
        self._on_event = on_event
        self._on_batch = on_event_batch
        self._on_init = on_partition_initialize
        self._on_close = on_partition_close
        self._on_error = on_error
        self._start: StartingPosition = starting_position or EventPosition.earliest()
        self._clock = clock
        self._readers: dict[str, _Reader] = {}
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
        """
        checkpoint = Checkpoint(
            fully_qualified_namespace=self.group.fully_qualified_namespace,
            eventhub_name=self.entity,
            consumer_group=self.group.consumer_group,
            partition_id=partition_id,
            offset=str(event.offset),
            sequence_number=event.sequence_number,
        )
        await self.store.update_checkpoint(checkpoint, owner_id=self.instance_id)
        reader = self._readers.get(partition_id)
        if reader is not None:
            reader.since_checkpoint, reader.checkpointed_at = 0, self._clock()
            reader.checkpointed = event

    # -- ownership callbacks --------------------------------------------------------

    async def _partition_ids(self) -> Sequence[str]:
        return await self.transport.get_partition_ids(self.entity)

    async def _start_partition(self, partition_id: str) -> None:
        reader = _Reader(PartitionContext(self, partition_id))
        reader.checkpointed_at = self._clock()
        self._readers[partition_id] = reader
        position = await self._position(partition_id)
        owner_level = await self._owner_level(partition_id)
        reader.task = asyncio.get_running_loop().create_task(
            self._read(reader, position, owner_level)
        )

    async def _owner_level(self, partition_id: str) -> int:
        # The time of our claim on the checkpoint store's one clock (Blob Storage's,
        # or the one machine's of a SQLite store), never this machine's: claims of a
        # partition are serialised by its etag, so a later owner reads with a higher
        # level and detaches a stale reader even if the records disagree for a while,
        # whatever the clocks of the machines involved. A level only fences while
        # its reader is open, so a later reader with a lower one (say, the SDK's
        # EventHubConsumerClient taking the consumer group over) is not blocked.
        for record in await self.store.list_ownership(self.group):
            if (record.partition_id == partition_id and record.owner_id == self.instance_id
                    and record.last_modified_time is not None):
                return int(record.last_modified_time * 1000)
        return 0  # no longer ours: the read is refused or taken over at once

    async def _hand_over(self, partition_id: str) -> None:
        reader = self._readers.get(partition_id)
        if reader is None:
            return
        await self._halt(reader)
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
            await self._halt(reader)
            await self._close(reader, CloseReason.OWNERSHIP_LOST)

    # -- reading --------------------------------------------------------------------

    async def _position(self, partition_id: str) -> EventPosition | None:
        """Where to read from; None when the store failed (the reader asks again)."""
        try:
            checkpoints = await self.store.list_checkpoints(self.group)
        except Exception as exc:
            reader = self._readers.get(partition_id)
            await self._error(reader.context if reader is not None else None, exc)
            return None
        for checkpoint in checkpoints:
            if checkpoint.partition_id == partition_id and checkpoint.sequence_number is not None:
                return EventPosition(sequence_number=checkpoint.sequence_number)
        start = self._start
        return start(partition_id) if callable(start) else start

    async def _read(
        self, reader: _Reader, position: EventPosition | None, owner_level: int
    ) -> None:
        ctx = reader.context
        settings = self.settings
        while position is None:
            # The checkpoint could not be read: never guess, ask the store again.
            if not await self._pause(reader, settings.poll_wait):
                return
            position = await self._position(ctx.partition_id)
        if self._on_init is not None:
            await self._guard(ctx, self._on_init(ctx))
        idle_since = self._clock()
        try:
            while not reader.stopping:
                wait = settings.poll_wait
                if settings.max_wait_time is not None:
                    wait = min(wait, settings.max_wait_time)
                try:
                    events = await self.transport.read_partition(
                        self.entity, ctx.partition_id, position=position,
                        max_events=max(settings.prefetch, settings.max_batch_size),
                        max_wait=wait, owner_level=owner_level,
                        consumer_group=self.group.consumer_group,
                    )
                except (OwnershipLost, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    # An outage (TransportError) or any other read error: reported,
                    # then read again; a reader never dies silently.
                    await self._error(ctx, exc)
                    await asyncio.sleep(settings.poll_wait)
                    continue
                if events:
                    idle_since = self._clock()
                    position = EventPosition(sequence_number=events[-1].sequence_number)
                    await self._dispatch(reader, events)
                elif (settings.max_wait_time is not None
                      and self._clock() - idle_since >= settings.max_wait_time):
                    idle_since = self._clock()
                    await self._dispatch(reader, [])
        except OwnershipLost:
            # A reader with a higher owner level took the partition: stop here.
            await self._close(reader, CloseReason.OWNERSHIP_LOST)

    async def _dispatch(self, reader: _Reader, events: list[PartitionEvent]) -> None:
        ctx, settings = reader.context, self.settings
        if not events:
            await self._guard(ctx, self._call(ctx, None, []))
            return
        step = settings.max_batch_size if self._on_batch is not None else 1
        for start in range(0, len(events), step):
            chunk = events[start:start + step]
            if not await self._handle(reader, chunk):
                return  # the rest is read again by the next owner, from the checkpoint
            ctx.last_event = chunk[-1]
            reader.since_checkpoint += len(chunk)
            if self._checkpoint_due(reader):
                await self._checkpoint_now(ctx, chunk[-1])

    async def _handle(self, reader: _Reader, chunk: list[PartitionEvent]) -> bool:
        """Call the handler with ``chunk`` until it succeeds (at-least-once).

        Returns:
            True once handled; False if the partition stops first (the chunk is
            then not handled, and not checkpointed).
        """
        ctx, settings = reader.context, self.settings
        pause = min(settings.handler_backoff, settings.max_handler_backoff)
        while not reader.stopping:
            try:
                await self._call(ctx, chunk[0], chunk)
                return True
            except (OwnershipLost, asyncio.CancelledError):
                raise
            except Exception as exc:
                await self._error(ctx, exc)
            if not await self._pause(reader, pause):
                break
            pause = min(pause * 2, settings.max_handler_backoff)
        return False

    async def _checkpoint_now(self, ctx: PartitionContext, event: PartitionEvent) -> None:
        try:
            await self.checkpoint(ctx.partition_id, event)
        except (OwnershipLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            # Not written: the count goes on, so the next event tries again.
            await self._error(ctx, exc)

    async def _pause(self, reader: _Reader, seconds: float) -> bool:
        """Wait ``seconds`` unless the reader is halted; False if it was."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(reader.halted.wait(), seconds)
        return not reader.stopping

    def _call(
        self, ctx: PartitionContext, event: PartitionEvent | None, chunk: list[PartitionEvent]
    ) -> Awaitable[None]:
        if self._on_batch is not None:
            return self._on_batch(ctx, chunk)
        assert self._on_event is not None
        return self._on_event(ctx, event)

    def _checkpoint_due(self, reader: _Reader) -> bool:
        every_n = self.settings.checkpoint_every_events
        every_t = self.settings.checkpoint_every_seconds
        return (every_n is not None and reader.since_checkpoint >= every_n) or (
            every_t is not None and self._clock() - reader.checkpointed_at >= every_t
        )

    async def _guard(self, ctx: PartitionContext, call: Awaitable[Any]) -> None:
        try:
            await call
        except (OwnershipLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            # A failing init, close or idle call does not stop the partition (nor is
            # there an event to retry): on_error hears of it, as in the SDK.
            await self._error(ctx, exc)

    async def _store_error(self, exc: BaseException) -> None:
        await self._error(None, exc)

    async def _error(self, ctx: PartitionContext | None, exc: BaseException) -> None:
        if self._on_error is None:
            logger.warning("partition %s: %s", ctx.partition_id if ctx else "-", exc)
            return
        try:
            await self._on_error(ctx, exc)
        except Exception:
            logger.exception("on_error failed")

    async def _halt(self, reader: _Reader) -> None:
        reader.stopping = True
        reader.halted.set()
        if reader.task is not None and reader.task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError, GatewayError):
                await reader.task

    async def _close(self, reader: _Reader, reason: CloseReason) -> None:
        if reader.closed:
            return
        reader.closed = True
        self._readers.pop(reader.context.partition_id, None)
        if self._on_close is not None:
            await self._guard(reader.context, self._on_close(reader.context, reason))
