"""Hand items from any thread to an event loop in groups, not one wake-up per item.

Waking a loop from another thread (``call_soon_threadsafe``) costs a system call and a
thread switch; paid per message it was most of what a sync caller cost the receiver.
A :class:`Mailbox` wakes the loop for the first item of a group only; the loop takes
the whole group ``delay`` seconds later, or earlier when its owner calls :meth:`flush`
there (as every call crossing to the loop does, before its own work, so that nothing
put before a call is handled after it).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Mailbox"]

T = TypeVar("T")

#: How long an item may wait for the rest of its group: short beside a lock's duration,
#: long beside a loop of handlers that do little.
GROUP_DELAY = 0.005


class Mailbox(Generic[T]):
    """Items put from any thread, delivered in order on ``loop`` by ``deliver(items)``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[list[T]], None],
                 *, delay: float = GROUP_DELAY) -> None:
        self._loop = loop
        self._deliver = deliver
        self._delay = delay
        self._lock = threading.Lock()
        self._items: list[T] = []
        self._waking = False  # a wake-up is on its way: the next items join its group

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        """Queue ``item`` (any thread); the loop delivers it within ``delay`` seconds.

        Raises:
            RuntimeError: the loop is closed.
        """
        with self._lock:
            self._items.append(item)
            if self._waking:
                return
            self._waking = True
        try:
            self._loop.call_soon_threadsafe(self._loop.call_later, self._delay, self._wake)
        except BaseException:
            with self._lock:
                self._waking = False
            raise

    def flush(self) -> None:
        """Deliver everything queued, now (on the loop's thread)."""
        with self._lock:
            items, self._items = self._items, []
        if items:
            self._deliver(items)

    def _wake(self) -> None:
        with self._lock:
            self._waking = False
        self.flush()
