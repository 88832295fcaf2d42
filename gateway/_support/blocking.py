"""Blocking work from async code: in a worker thread, or inline on a sync driver's loop.

Async code runs blocking calls (SQLite) in a worker thread so that its event loop
stays free. A sync driver (``GeoSender``) owns a private loop whose only job is to
run the calls its blocked callers hand it: there a worker thread adds two thread
switches per call (loop -> worker -> loop) on top of the caller's own hop and
frees the loop for nothing in particular. Such a loop thread is a
:class:`DriverThread` with ``inline_io`` set, and :func:`run_blocking` then runs
the call on the loop thread itself, still one at a time under the caller's limiter.

The cost: while a call blocks (e.g. SQLite waits for another process's write
lock, or a stalled disk's fsync), that driver's other calls, its background tasks
and its deadlines wait too. ``GeoSender`` does not run inline for that reason: a
send stalled on one namespace's file must still be hedged to the other at its
deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

__all__ = ["DriverThread", "run_blocking"]

T = TypeVar("T")


class DriverThread(threading.Thread):
    """The loop thread of a sync driver; ``inline_io``: run blocking calls on it."""

    inline_io = False


async def run_blocking(fn: Callable[[], T], limiter: anyio.CapacityLimiter) -> T:
    """Run ``fn()`` holding ``limiter``: inline on an ``inline_io`` driver thread,
    otherwise in a worker thread."""
    thread = threading.current_thread()
    if isinstance(thread, DriverThread) and thread.inline_io:
        async with limiter:
            return fn()
    return await anyio.to_thread.run_sync(fn, limiter=limiter)
