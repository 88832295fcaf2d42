"""The tasks a server owns: each kept until it ends, a failure logged with its traceback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any

__all__ = ["OwnedTasks"]


class OwnedTasks:
    """A set of tasks that :meth:`spawn` started and that have not ended yet.

    Args:
        log: where a task that failed is reported.
        failed: the message of that report.
    """

    def __init__(self, log: logging.Logger, failed: str) -> None:
        self._log = log
        self._failed = failed
        self._tasks: set[asyncio.Task[Any]] = set()

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this set, on the running loop."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("%s", self._failed, exc_info=task.exception())
