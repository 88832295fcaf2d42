"""An asyncio event loop on virtual time, for tests and benchmarks of timed loops.

``loop.time()`` is a number that only moves when every task is waiting: instead of
blocking in ``select()``, the loop jumps straight to its next timer. So
``asyncio.sleep(30)`` returns at once in wall time, and ``loop.time()`` reads 30 s
later; code that takes ``clock=loop.time`` and ``sleep=asyncio.sleep`` runs
unchanged. Nothing here does real I/O: a task waiting on a socket would never wake.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class _JumpingSelector(selectors.SelectSelector):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(
        self, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            # Nothing ready and no timer: in wall time this would hang for ever.
            raise RuntimeError("virtual-time loop is idle with no timer: deadlock")
        self.now += max(0.0, timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock jumps to the next timer when idle."""

    def __init__(self, start: float = 0.0) -> None:
        self._jumper = _JumpingSelector()
        self._jumper.now = start
        super().__init__(selector=self._jumper)
        # Timers within this much of "now" fire together; 0 keeps order exact.
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._jumper.now


def run_virtual(main: Coroutine[Any, Any, T], *, start: float = 0.0) -> T:
    """Run ``main`` to completion on a fresh ``VirtualTimeLoop`` and close it."""
    loop = VirtualTimeLoop(start)
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
