"""Room on the disk: a put that would leave less than ``RESERVE`` free is refused.

SQLite answers a full disk with SQLITE_FULL, but at that point the queue is stuck: a
replay cannot remove delivered messages either, since a delete also writes (WAL frames,
then a checkpoint that may grow the file). So puts stop first, with ``QueueFull``
naming the free space needed, while ``RESERVE`` bytes are still free for the drain
(measured on a 2 MiB tmpfs: a queue filled up to the reserve drains to empty).

Checking costs one ``statvfs`` (about 1.5 µs); while plenty is free (``_RELAXED``) it
is done at most every ``_RECHECK_SECONDS``. Another process filling the disk can still
beat us to it: then SQLite's SQLITE_FULL becomes the same ``QueueFull``. The free space
measured also sizes the write-ahead log (``_sqlite.wal_pages``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from durable_queue._sqlite_tx import free_bytes
from replication import QueueFull

__all__ = ["RESERVE", "DiskRoom"]

#: Free bytes a put must leave on the disk, for a drain to remove what it delivered.
RESERVE = 512 << 10
# Stored per row besides ``Message.size`` (ids, times, counters, the index entry),
# rounded up: a 1 KiB message takes about 1.35 KiB of the file.
_ROW_OVERHEAD = 512
# With this much free, a put does not ask the file system again for a while: the
# queue cannot write that much in RECHECK_SECONDS.
_RELAXED = 256 << 20
_RECHECK_SECONDS = 0.25


class DiskRoom:
    """Whether the disk holding a queue file has room for a put and the reserve.

    Args:
        path: the queue file.
        reserve: bytes to leave free (default ``RESERVE``).
        free: measures the free bytes (for tests: a fake file system).
        clock: a monotonic clock.
    """

    def __init__(
        self,
        path: Path,
        *,
        reserve: int | None = None,
        free: Callable[[Path], int] = free_bytes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.reserve = RESERVE if reserve is None else reserve
        self._free = free
        self._clock = clock
        self._relaxed_until = 0.0

    def needed(self, payload: int, rows: int) -> int:
        """Free bytes a put of ``rows`` messages of ``payload`` bytes in all needs,
        the reserve included."""
        return payload + rows * _ROW_OVERHEAD + self.reserve

    def free_now(self) -> int | None:
        """The free bytes, or ``None`` when plenty is free (it was a moment ago)."""
        now = self._clock()
        if now < self._relaxed_until:
            return None
        free = self._free(self.path)
        if free >= _RELAXED:
            self._relaxed_until = now + _RECHECK_SECONDS
            return None
        return free

    def check(self, payload: int, rows: int, free: int | None) -> None:
        """Raise ``QueueFull`` unless ``rows`` messages of ``payload`` bytes in all fit
        with ``reserve`` bytes to spare, ``free`` bytes being free (from ``free_now``).

        Raises:
            QueueFull: naming the free space and how much more is needed.
        """
        if free is None:
            return
        needed = self.needed(payload, rows)
        if free < needed:
            raise QueueFull(
                f"queue file {self.path}: the disk is nearly full ({free:,} bytes free in "
                f"{self.path.absolute().parent}); the message was not stored: free at "
                f"least {needed - free:,} more bytes there (the queue keeps "
                f"{self.reserve:,} bytes free so that it can still be replayed), or move "
                f"the queue to a larger disk"
            )
