"""The frozen records the durable queue hands out."""

from __future__ import annotations

from dataclasses import dataclass

from replication import Message

__all__ = [
    "DeadLetteredMessage",
    "DestinationStats",
    "QueueStats",
    "ReplayResult",
    "SalvageReport",
    "SalvagedDestination",
    "StoredMessage",
    "UnreadableRows",
]


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """A message waiting in the durable queue.

    Args:
        id: the row id; increases with every put and is never reused, so it is
            both the FIFO order and a safe handle for ``ack``/``nack``.
        destination: the destination (entity) the message is buffered for.
        message: the message as it was put.
        enqueued_at: when it was put (seconds since the epoch).
        attempts: how many delivery attempts failed so far (``nack``).
        size: the size counted against ``max_bytes`` (``Message.size``).
    """

    id: int
    destination: str
    message: Message
    enqueued_at: float
    attempts: int
    size: int


@dataclass(frozen=True, kw_only=True)
class DeadLetteredMessage:
    """A message moved out of the queue because its destination rejected it for good.

    Args:
        id: the row id it had while waiting.
        destination: the destination that rejected it.
        message: the message as it was put.
        enqueued_at: when it was put (seconds since the epoch).
        dead_lettered_at: when it was dead-lettered (seconds since the epoch).
        attempts: failed delivery attempts before it was dead-lettered.
        size: its size in bytes (``Message.size``).
        reason: why it was rejected (the ``MessageRejected`` text).
    """

    id: int
    destination: str
    message: Message
    enqueued_at: float
    dead_lettered_at: float
    attempts: int
    size: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class DestinationStats:
    """What waits for one destination.

    Args:
        destination: the destination name.
        count: messages waiting.
        bytes: their total size (``Message.size``).
        oldest_enqueued_at: when the oldest waiting message was put, or ``None``.
        dead_letters: messages dead-lettered for this destination.
        owner: whose messages they are, as recorded by ``DurableQueue.bind`` (the
            sender records its namespaces and entity); ``None``: not recorded.
    """

    destination: str
    count: int
    bytes: int
    oldest_enqueued_at: float | None
    dead_letters: int
    owner: str | None = None


@dataclass(frozen=True, kw_only=True)
class QueueStats:
    """A snapshot of a whole queue file.

    Args:
        path: the queue file.
        destinations: one entry per destination with waiting or dead-lettered messages.
        count: messages waiting, over all destinations.
        bytes: their total size.
        dead_letters: dead-lettered messages, over all destinations.
        max_messages: the message cap of this handle (``None``: no cap).
        max_bytes: the byte cap of this handle (``None``: no cap).
        file_bytes: the size on disk: the database file plus its ``-wal`` file.
        commits: write transactions this handle committed for puts; with group
            commit it is lower than the number of puts under concurrency.
    """

    path: str
    destinations: tuple[DestinationStats, ...]
    count: int
    bytes: int
    dead_letters: int
    max_messages: int | None
    max_bytes: int | None
    file_bytes: int
    commits: int


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """What one ``Replayer.drain`` did.

    Args:
        replayed: messages sent and acknowledged.
        dead_lettered: messages rejected for good and moved to the dead-letter table.
        remaining: messages still waiting for the destination when the drain ended.
        stopped_by: the error that stopped the drain early (a ``TransportError``,
            or a ``DurableQueueError`` when the lease was lost), else ``None``.
            An error reading the queue itself (``QueueCorrupt``) is raised, not
            stored here.
        seconds: how long the drain took.
        reason: why messages still wait (``remaining > 0``), else ``""``.
    """

    replayed: int
    dead_lettered: int
    remaining: int
    stopped_by: BaseException | None
    seconds: float
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class UnreadableRows:
    """Rows of a damaged queue file that ``salvage`` could not read.

    Args:
        table: ``"messages"`` (waiting), ``"dead_letters"`` or ``"bindings"``.
        first_id: the first row id of the range.
        last_id: the last row id of the range (``None``: to the end of the table).
        count: how many rows the range held, when the table's index still says
            (``None``: unknown; the range may hold rows deleted long ago too).
        destinations: whose messages they were, when the index still says.
    """

    table: str
    first_id: int
    last_id: int | None
    count: int | None
    destinations: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SalvagedDestination:
    """What ``salvage`` copied for one destination.

    Args:
        destination: the destination name.
        messages: waiting messages copied, in their order.
        dead_letters: dead-lettered messages copied.
        unreadable: waiting messages known to be lost (from the index; ``None``:
            unknown, see ``SalvageReport.unreadable``).
    """

    destination: str
    messages: int
    dead_letters: int
    unreadable: int | None


@dataclass(frozen=True, kw_only=True)
class SalvageReport:
    """What ``salvage`` copied from a damaged queue file, and what it could not read.

    Args:
        source: the damaged file (only read).
        target: the new queue file.
        messages: waiting messages copied, with their ids, order and attempts.
        dead_letters: dead-lettered messages copied.
        bindings: destination bindings copied (whose messages they are).
        destinations: per destination, what was copied and lost.
        unreadable: the ranges of rows that could not be read.
        damaged_pages: the damaged pages SQLite can name (``()``: none found, or
            this SQLite build cannot tell).
    """

    source: str
    target: str
    messages: int
    dead_letters: int
    bindings: int
    destinations: tuple[SalvagedDestination, ...]
    unreadable: tuple[UnreadableRows, ...]
    damaged_pages: tuple[int, ...]

    @property
    def complete(self) -> bool:
        """Whether every row could be read."""
        return not self.unreadable
