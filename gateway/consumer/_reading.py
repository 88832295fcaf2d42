"""One owned partition of the processor: its reader, which reads the partition in order
and hands the events to the handler until the partition is halted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway._support.deadlines import within_deadline
from gateway.consumer._partition import (
    BatchHandler,
    CloseReason,
    EventHandler,
    PartitionContext,
    ProcessorSettings,
)
from gateway.transports.base import EventPosition, PartitionEvent, Transport
from replication import DeadlineEstimator, GatewayError, Operation, OwnershipLost

__all__ = ["ErrorReport", "PartitionReader", "ReadingSetup", "guard"]

#: Reports an error to the processor's ``on_error`` (``ctx`` None: not a partition's).
ErrorReport = Callable[[PartitionContext | None, BaseException], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ReadingSetup:
    """What every reader of one processor reads with and calls.

    Exactly one of ``on_event`` and ``on_batch`` is set.
    """

    transport: Transport
    entity: str
    consumer_group: str
    settings: ProcessorSettings
    clock: Callable[[], float]
    on_event: EventHandler | None
    on_batch: BatchHandler | None
    on_init: Callable[[PartitionContext], Awaitable[None]] | None
    report: ErrorReport
    #: The processor's fenced checkpoint write (it also resets the reader's counts).
    checkpoint: Callable[[str, PartitionEvent], Awaitable[None]]
    #: The deadlines of the reads (and the processor's store calls).
    estimator: DeadlineEstimator
    #: Called with the reader after each batch it read (None: nobody asks).
    progress: Callable[[PartitionReader], None] | None = None


async def guard(report: ErrorReport, ctx: PartitionContext, call: Awaitable[Any]) -> None:
    """Await a lifecycle or idle call; report its error instead of raising it."""
    try:
        await call
    except (OwnershipLost, asyncio.CancelledError):
        raise
    except Exception as exc:
        # A failing init, close or idle call does not stop the partition (nor is
        # there an event to retry): on_error hears of it, as in the SDK.
        await report(ctx, exc)


class PartitionReader:
    """The state and the reading loop of one owned partition.

    ``read`` runs as the partition's task (``task``): from ``position`` with
    ``owner_level``, one event (or batch) at a time, retrying a failing handler
    (at-least-once) and checkpointing by count and age. ``halt`` ends it.

    Args:
        context: the partition's context, given to the handler.
        setup: what the processor's readers share.
        position: where to read from now (``None``: the store failed; ask again).
        close: closes the partition (``OWNERSHIP_LOST`` when another reader took it).
    """

    def __init__(
        self,
        context: PartitionContext,
        setup: ReadingSetup,
        *,
        position: Callable[[str], Awaitable[EventPosition | None]],
        close: Callable[[PartitionReader, CloseReason], Awaitable[None]],
    ) -> None:
        self.context = context
        self._setup = setup
        self._position = position
        self._close = close
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.since_checkpoint = 0
        self.checkpointed_at = setup.clock()
        self.checkpointed: PartitionEvent | None = None
        #: The batch read last, the events read past the last checkpoint, and the
        #: enqueued time of the oldest of them (None: none).
        self.batch: list[PartitionEvent] = []
        self.unsaved = 0
        self.unsaved_at: float | None = None
        self.closed = False
        self.halted = asyncio.Event()  # set with stopping: ends a pause at once

    async def read(self, position: EventPosition | None, owner_level: int) -> None:
        """Read and handle events until halted, or until the partition is lost."""
        ctx, setup = self.context, self._setup
        settings = setup.settings
        while position is None:
            # The checkpoint could not be read: never guess, ask the store again.
            if not await self._pause(settings.poll_wait):
                return
            position = await self._position(ctx.partition_id)
        if setup.on_init is not None:
            await guard(setup.report, ctx, setup.on_init(ctx))
        idle_since = setup.clock()
        try:
            while not self.stopping:
                wait = settings.poll_wait
                if settings.max_wait_time is not None:
                    wait = min(wait, settings.max_wait_time)
                try:
                    events = await self._read(position, wait, owner_level)
                except (OwnershipLost, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    # An outage (TransportError; OperationTimeout when the namespace
                    # hangs) or any other read error: reported, then read again; a
                    # reader never dies silently.
                    await setup.report(ctx, exc)
                    await asyncio.sleep(settings.poll_wait)
                    continue
                if events:
                    idle_since = setup.clock()
                    position = EventPosition(sequence_number=events[-1].sequence_number)
                    self._took(events)
                    await self._dispatch(events)
                elif (settings.max_wait_time is not None
                      and setup.clock() - idle_since >= settings.max_wait_time):
                    idle_since = setup.clock()
                    await self._dispatch([])
        except OwnershipLost:
            # A reader with a higher owner level took the partition: stop here.
            await self._close(self, CloseReason.OWNERSHIP_LOST)

    def _took(self, events: list[PartitionEvent]) -> None:
        self.batch = events
        if not self.unsaved:
            self.unsaved_at = events[0].enqueued_time
        self.unsaved += len(events)
        if self._setup.progress is not None:
            self._setup.progress(self)

    def saved(self, event: PartitionEvent) -> None:
        """A checkpoint at ``event`` was written: what was read past it is unsaved."""
        self.since_checkpoint, self.checkpointed_at = 0, self._setup.clock()
        self.checkpointed = event
        # Every batch before the last one was handled before it was read, so what is
        # unsaved now is in the last batch (at most a prefetch of events to look at).
        after = [e for e in self.batch if e.sequence_number > event.sequence_number]
        self.unsaved = len(after)
        self.unsaved_at = after[0].enqueued_time if after else None

    async def _read(self, position: EventPosition, wait: float,
                    owner_level: int) -> list[PartitionEvent]:
        # Within the read's own wait plus the namespace's deadline: a read that hangs
        # is given up (OperationTimeout), so that halt() and a stop never wait on it.
        setup, settings = self._setup, self._setup.settings
        transport = setup.transport
        return await within_deadline(
            setup.estimator, transport.namespace, Operation.READ,
            lambda: transport.read_partition(
                setup.entity, self.context.partition_id, position=position,
                max_events=max(settings.prefetch, settings.max_batch_size),
                max_wait=wait, owner_level=owner_level, consumer_group=setup.consumer_group),
            what=f"read partition {self.context.partition_id} of {setup.entity!r}", wait=wait)

    async def halt(self) -> None:
        """Stop the reader and wait until it has ended (its handler call finished).

        Waiting does not tie the reader's fate to the caller's: when the caller (the
        ownership loop) is cancelled meanwhile, as ``stop()`` does, the reader is not
        cancelled with it, and the cancellation reaches the caller, so the loop ends
        and ``stop()`` hands the partition over once the reader is done.
        """
        self.stopping = True
        self.halted.set()
        task = self.task
        if task is None or task is asyncio.current_task():
            return
        if not task.done():
            await asyncio.wait((task,))
        if not task.cancelled():
            error = task.exception()
            if error is not None and not isinstance(error, GatewayError):
                raise error

    async def _dispatch(self, events: list[PartitionEvent]) -> None:
        ctx, setup = self.context, self._setup
        if not events:
            await guard(setup.report, ctx, self._call(None, []))
            return
        step = setup.settings.max_batch_size if setup.on_batch is not None else 1
        for start in range(0, len(events), step):
            chunk = events[start:start + step]
            if not await self._handle(chunk):
                return  # the rest is read again by the next owner, from the checkpoint
            ctx.last_event = chunk[-1]
            self.since_checkpoint += len(chunk)
            if self._checkpoint_due():
                await self._checkpoint_now(chunk[-1])

    async def _handle(self, chunk: list[PartitionEvent]) -> bool:
        """Call the handler with ``chunk`` until it succeeds (at-least-once).

        Returns:
            True once handled; False if the partition stops first (the chunk is
            then not handled, and not checkpointed).
        """
        settings = self._setup.settings
        pause = min(settings.handler_backoff, settings.max_handler_backoff)
        while not self.stopping:
            try:
                await self._call(chunk[0], chunk)
                return True
            except (OwnershipLost, asyncio.CancelledError):
                raise
            except Exception as exc:
                await self._setup.report(self.context, exc)
            if not await self._pause(pause):
                break
            pause = min(pause * 2, settings.max_handler_backoff)
        return False

    async def _checkpoint_now(self, event: PartitionEvent) -> None:
        try:
            await self._setup.checkpoint(self.context.partition_id, event)
        except (OwnershipLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            # Not written: the count goes on, so the next event tries again.
            await self._setup.report(self.context, exc)

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` unless the reader is halted; False if it was."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.halted.wait(), seconds)
        return not self.stopping

    def _call(
        self, event: PartitionEvent | None, chunk: list[PartitionEvent]
    ) -> Awaitable[None]:
        setup = self._setup
        if setup.on_batch is not None:
            return setup.on_batch(self.context, chunk)
        assert setup.on_event is not None
        return setup.on_event(self.context, event)

    def _checkpoint_due(self) -> bool:
        settings = self._setup.settings
        every_n = settings.checkpoint_every_events
        every_t = settings.checkpoint_every_seconds
        return (every_n is not None and self.since_checkpoint >= every_n) or (
            every_t is not None and self._setup.clock() - self.checkpointed_at >= every_t
        )
