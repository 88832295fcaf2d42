"""What the partition processor's handlers see: a partition's context, the reason it
closed, and the settings and starting position the processor reads it with."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.consumer._records import ConsumerGroupRef
from gateway.transports.base import EventPosition, PartitionEvent
from replication import RECEIVE_DEADLINES, ConfigError, DeadlinePolicy

__all__ = [
    "BatchHandler",
    "Checkpointer",
    "CloseReason",
    "EventHandler",
    "PartitionContext",
    "PartitionProgress",
    "ProcessorSettings",
    "StartingPosition",
]

StartingPosition = EventPosition | Callable[[str], EventPosition]
"""Where a partition with no checkpoint starts: an ``EventPosition``, or a function of the
partition id that returns one."""


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
        deadlines: how long a partition read (beyond ``poll_wait``), a checkpoint
            write or read, or a partition-id lookup may take before it is given up
            with ``OperationTimeout`` (reported to ``on_error`` and retried), so that a
            hung namespace or store holds up neither the other partitions nor a stop
            (``replication.RECEIVE_DEADLINES``: 1 to 3 s).
    """

    max_batch_size: int = 100
    max_wait_time: float | None = None
    prefetch: int = 300
    checkpoint_every_events: int | None = 100
    checkpoint_every_seconds: float | None = 5.0
    poll_wait: float = 0.5
    handler_backoff: float = 0.1
    max_handler_backoff: float = 5.0
    deadlines: DeadlinePolicy = RECEIVE_DEADLINES

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
        if not isinstance(self.deadlines, DeadlinePolicy):
            raise ConfigError(
                f"deadlines must be a DeadlinePolicy, not {type(self.deadlines).__name__}")


@dataclass(frozen=True, kw_only=True)
class PartitionProgress:
    """Where one partition read by this instance stands, for ``on_progress``.

    Args:
        group: the namespace, entity and consumer group.
        partition_id: the partition.
        owned: read here now; False once it was handed over or lost.
        lag_events: events read past its last checkpoint (a new owner would read
            them again).
        oldest_unsaved_at: the enqueued time (Unix) of the oldest of them; None
            when there are none.
    """

    group: ConsumerGroupRef
    partition_id: str
    owned: bool
    lag_events: int
    oldest_unsaved_at: float | None


class Checkpointer(Protocol):
    """What a ``PartitionContext`` needs of its processor (``AsyncPartitionProcessor``):
    the consumer group it reads for, and a fenced checkpoint write."""

    @property
    def group(self) -> ConsumerGroupRef: ...

    async def checkpoint(self, partition_id: str, event: PartitionEvent) -> None: ...


class PartitionContext:
    """What a handler knows about its partition, and how it checkpoints."""

    def __init__(self, processor: Checkpointer, partition_id: str) -> None:
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
