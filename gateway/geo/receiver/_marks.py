"""Group commit of the receiver's done marks, off the event loop.

Marking an id done is one SQLite transaction of the de-duplicator's store. Done
one per message on the event loop, it doubled the cost of receiving. Here every id
completed while a transaction runs waits for the next one, so a received batch
completed in a row costs one or two transactions; and the transaction runs in a
worker thread, so the loop keeps pumping and settling meanwhile.

Nothing is settled before its mark committed (see :class:`DoneMarks`): a copy that
comes back after a crash is then either a known duplicate or, when the crash came
before the commit, delivered again (at-least-once), never lost. A shared store that
does not answer (``StoreUnavailable``) is waited for: the group is written again until
it is back (its copies stay unsettled meanwhile), unless the receiver is closing.

An inbox handler's mark commits in its own transaction, with the handler's effect; its
id joins the next group only to be settled with the others, so the next handler does
not wait for the settlements of the one before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from gateway.geo._store_watch import StoreWatch
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
        watch: StoreWatch,
    ) -> None:
        self._dedup = dedup
        self._on_marked = on_marked
        self._watch = watch
        self._queue: list[tuple[str, T, bool]] = []
        self._group: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def add(self, message_id: str, item: T, *, marked: bool = False) -> asyncio.Future[None]:
        """Queue ``message_id``; the future resolves once it is marked and handled.

        ``marked``: its mark is already committed (an inbox transaction wrote it with
        the handler's effect): nothing is written for it, ``on_marked`` runs for it
        with the next group.
        """
        loop = asyncio.get_running_loop()
        if self._group is None:
            self._group = loop.create_future()
        group = self._group
        self._queue.append((message_id, item, marked))
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

    async def _write_group(self, queued: list[tuple[str, T, bool]],
                           group: asyncio.Future[None]) -> None:
        ids = [message_id for message_id, _, marked in queued if not marked]
        error: Exception | None = None
        if ids:
            try:
                await self._watch.call("marking done", self._dedup.succeeded_many, ids,
                                       timed="done", count=len(ids))
            except Exception as exc:
                logger.error("could not mark %d message id(s) done: %s; their messages "
                             "stay unsettled and come back when their locks expire",
                             len(ids), exc)
                if self.error is None:
                    self.error = exc
                error = exc
        try:
            if error is None:
                await self._on_marked([item for _, item, _ in queued], None)
            else:
                marked = [item for _, item, was in queued if was]
                if marked:  # committed by their inbox transactions: settled all the same
                    await self._on_marked(marked, None)
                await self._on_marked([item for _, item, was in queued if not was], error)
        finally:
            if group.done():
                pass
            elif error is not None:
                group.set_exception(error)
                group.exception()  # retrieved here: no caller may be waiting
            else:
                group.set_result(None)
