"""The durable client-side queue: buffers messages on disk while namespaces are down.

A SQLite file in WAL mode, FIFO per destination, shared safely by threads (with
group commit) and by processes; a ``Replayer`` drains one destination at a time
under a lease, at-least-once, dead-lettering what a namespace rejects for good. A
damaged file is never written to; ``salvage`` copies what can still be read of one.
No azure import, no gateway import.
"""

from durable_queue._queue import DurableQueue
from durable_queue._readonly import read_stats, why_not_writable
from durable_queue._records import (
    DeadLetteredMessage,
    DestinationStats,
    QueueStats,
    ReplayResult,
    SalvagedDestination,
    SalvageReport,
    StoredMessage,
    UnreadableRows,
)
from durable_queue._replayer import Replayer
from durable_queue._salvage import salvage
from durable_queue._sqlite import open_private_store
from durable_queue._sqlite_tx import busy_retrying, is_busy, transaction

__all__ = [
    "DeadLetteredMessage",
    "DestinationStats",
    "DurableQueue",
    "QueueStats",
    "ReplayResult",
    "Replayer",
    "SalvageReport",
    "SalvagedDestination",
    "StoredMessage",
    "UnreadableRows",
    "busy_retrying",
    "is_busy",
    "open_private_store",
    "read_stats",
    "salvage",
    "transaction",
    "why_not_writable",
]
