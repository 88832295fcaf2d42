"""Group commit of the receiver's done marks, off the event loop.

Marking an id done is one SQLite transaction of the de-duplicator's store. Done
one per message on the event loop, it doubled the cost of receiving. Here every id
completed while a transaction runs waits for the next one, so a received batch
completed in a row costs one or two transactions; and the transaction runs in a
worker thread, so the loop keeps pumping and settling meanwhile.

Nothing is settled before its mark committed (see :class:`DoneMarks`): a copy that
comes back after a crash is then either a known duplicate or, when the crash came
before the commit, delivered again (at-least-once), never lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from gateway.geo._hooks import GatewayHooks, dedup_call
from replication import Deduplicator

__all__ = ["DoneMarks"]

logger = logging.getLogger("geogateway")

T = TypeVar("T")


class DoneMarks(Generic[T]):
    """Marks ids done in groups: the ids queued while one transaction runs form the next.

    ``add(message_id, item)`` queues an id; after the group's transaction,
    ``on_marked(items, error)`` runs on the loop (bookkeeping, then the settlements;
    ``error`` is None when the marks committed), and then the group's future
    resolves. A failed transaction fails its group's future, is logged, and is kept
    in :attr:`error` until the receiver reports it.
    """

    def __init__(
        self, dedup: Deduplicator,
        on_marked: Callable[[list[T], Exception | None], Awaitable[None]],
        *, hooks: Sequence[GatewayHooks] = (),
    ) -> None:
        self._dedup = dedup
        self._hooks = hooks
        self._on_marked = on_marked
        self._queue: list[tuple[str, T]] = []
        self._group: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def add(self, message_id: str, item: T) -> asyncio.Future[None]:
        """Queue ``message_id``; the future resolves once it is marked and handled."""
        loop = asyncio.get_running_loop()
        if self._group is None:
            self._group = loop.create_future()
        group = self._group
        self._queue.append((message_id, item))
        if self._task is None:
            self._task = loop.create_task(self._write())
        return group

    async def wait(self) -> None:
        """Wait until every queued mark is written and handled (or failed)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    def take_error(self) -> BaseException | None:
        """The first failure not reported yet, once."""
        error, self.error = self.error, None
        return error

    async def _write(self) -> None:
        group: asyncio.Future[None] | None = None
        try:
            while self._queue:
                queued, group = self._queue, self._group
                self._queue, self._group = [], None
                assert group is not None
                await self._write_group(queued, group)
        finally:
            self._task = None
            for pending in (group, self._group):
                if pending is not None and not pending.done():
                    pending.cancel()

    async def _write_group(self, queued: list[tuple[str, T]], group: asyncio.Future[None]
                           ) -> None:
        ids = [message_id for message_id, _ in queued]
        error: Exception | None = None
        try:
            await dedup_call(self._hooks, "done", len(ids), self._dedup.succeeded_many, ids)
        except Exception as exc:
            logger.error("could not mark %d message id(s) done: %s; their messages stay "
                         "unsettled and come back when their locks expire", len(ids), exc)
            if self.error is None:
                self.error = exc
            error = exc
        try:
            await self._on_marked([item for _, item in queued], error)
        finally:
            if group.done():
                pass
            elif error is not None:
                group.set_exception(error)
                group.exception()  # retrieved here: no caller may be waiting
            else:
                group.set_result(None)
