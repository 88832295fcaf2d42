"""Handing a held session's messages over (a mixin of ``AsyncGeoSessionReceiver``).

The heads of consecutive positions are handed over as a run: their ids checked in one
look at the dedup store, the handler called on each in turn, then the done marks and
the position reached written together (off the event loop), and every copy settled
beside the next hand-over. A message without a position, or of a gap already given up
on (late), is handed over on its own. A gap given up on is reported here.

A :class:`RunHandler` (the proxy's session link) takes a whole run at once, so that
its client holds many messages while it settles them; what it accepted after one it
declined stays done (its copies are settled as duplicates when their turn comes).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

import anyio
import anyio.to_thread

from gateway._support.handlers import is_async_callable
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo.receiver import Handler
from gateway.geo.sessions._links import NamespaceSession
from gateway.stores import SqliteSessionStore
from gateway.transports.base import ReceivedMessage
from replication import Deduplicator, ReorderBuffer, SessionGap, Verdict, session_position

__all__ = ["Copy", "HandOver", "RunHandler", "call"]

logger = logging.getLogger("geogateway")

Copy = tuple[NamespaceSession, ReceivedMessage]
#: Settlements let run beside the hand-overs at most.
_MAX_SETTLING = 256


@runtime_checkable
class RunHandler(Protocol):
    """A handler that takes a session's messages a run at a time."""

    async def handle_run(self, messages: list[ReceivedMessage]) -> list[bool]:
        """Handle ``messages`` (in order); for each, whether it was handled. A shorter
        list: the messages after it were not handed over (they wait for the next run)."""
        ...


class HandOver:
    """What ``AsyncGeoSessionReceiver`` does with the copies its pumps received."""

    entity: str
    session_id: str | None
    _buffer: ReorderBuffer[Copy] | None
    _unordered: deque[tuple[Copy, bool]]
    _dedup: Deduplicator
    _cursors: SqliteSessionStore
    _hooks: list[GatewayHooks]
    _counts: dict[str, int]
    _settling: set[asyncio.Task[None]]
    _room: asyncio.Event
    _poll_wait: float
    _clock: Callable[[], float]
    #: Threads of the dedup store's and cursors' calls: never anyio's default ones,
    #: which plain handlers (this receiver's and others' in the process) fill.
    _store_limiter: anyio.CapacityLimiter

    def _duplicate(self, copy: Copy) -> None:
        self._counts["duplicates_suppressed"] += 1
        emit(self._hooks, "on_duplicate", message_id=copy[1].message_id,
             namespace=copy[0].namespace)
        task = asyncio.get_running_loop().create_task(copy[0].settle(copy[1], "complete"))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settled(self) -> None:
        if self._settling:
            await asyncio.gather(*list(self._settling), return_exceptions=True)

    # -- handing over ----------------------------------------------------------------

    async def _hand_over_run(self, handler: Handler | RunHandler, run: list[Copy]) -> None:
        """Hand over the heads of consecutive positions, one after the other: their ids
        checked in one look at the dedup store, and the done marks and the position
        reached written together once the run ends (a handler that fails ends it)."""
        buffer = self._buffer
        assert buffer is not None
        verdicts = await anyio.to_thread.run_sync(
            self._dedup.check_many, [r.message_id for _, r in run], limiter=self._store_limiter)
        done: list[str] = []
        settle: list[Copy] = []
        unclaim: list[str] = []  # claimed but not handed over: released for later
        results = await _run_results(handler, run, verdicts)
        for index, (copy, verdict) in enumerate(zip(run, verdicts, strict=True)):
            link, r = copy
            if verdict is Verdict.HOLD:  # another process handles this id right now
                unclaim = _to_deliver(run[index:], verdicts[index:])
                await anyio.sleep(self._poll_wait)
                break
            ok: bool | None = True
            if verdict is Verdict.DELIVER:
                ok = await call(handler, r) if results is None else next(results, None)
                if ok is None:  # not handed over: it waits in the buffer for the next run
                    unclaim = _to_deliver(run[index:], verdicts[index:])
                    break
            if not ok:
                unclaim = [r.message_id]
                for message_id in _to_deliver(run[index + 1:], verdicts[index + 1:]):
                    # Handled after the one declined (a run handler's client settles
                    # each on its own): done, its copies settled when their turn comes.
                    (done if results is not None and next(results, None) else
                     unclaim).append(message_id)
                buffer.failed(self._clock())
                self._counts["abandoned"] += 1
                await link.settle(r, "abandon")
                break
            if verdict is Verdict.DUPLICATE:
                self._counts["duplicates_suppressed"] += 1
                emit(self._hooks, "on_duplicate", message_id=r.message_id,
                     namespace=link.namespace)
            else:
                self._counts["delivered"] += 1
                done.append(r.message_id)
            others = buffer.done(r.message_id, self._clock())
            self._counts["duplicates_suppressed"] += len(others)
            settle += [copy, *others]
        await anyio.to_thread.run_sync(self._record, done, unclaim, limiter=self._store_limiter)
        self._settle(settle)
        if len(self._settling) >= _MAX_SETTLING:
            await self._settled()

    def _record(self, done: list[str], unclaim: list[str]) -> None:
        """The done marks, then the position reached (blocking: run off the loop)."""
        if done:
            self._dedup.succeeded_many(done)
        for message_id in unclaim:
            self._dedup.failed(message_id)
        if self._buffer is not None and self.session_id is not None:
            self._cursors.advance(self.entity, self.session_id, self._buffer.next_position)

    async def _hand_over(self, handler: Handler | RunHandler, copy: Copy, *, late: bool) -> None:
        """Run ``handler`` on a copy without a position, or of a gap given up on
        (``late``), unless its id is done."""
        link, r = copy
        [verdict] = await anyio.to_thread.run_sync(self._dedup.check_many, [r.message_id],
                                                   limiter=self._store_limiter)
        if verdict is Verdict.HOLD:  # another process handles this id right now
            self._unordered.append((copy, late))
            await anyio.sleep(self._poll_wait)
            return
        if verdict is Verdict.DUPLICATE:
            self._counts["duplicates_suppressed"] += 1
            emit(self._hooks, "on_duplicate", message_id=r.message_id, namespace=link.namespace)
            self._settle([copy])
            return
        if not await call(handler, r):
            await anyio.to_thread.run_sync(self._dedup.failed, r.message_id,
                                           limiter=self._store_limiter)
            self._counts["abandoned"] += 1
            await link.settle(r, "abandon")
            return
        await anyio.to_thread.run_sync(self._dedup.succeeded, r.message_id,
                                       limiter=self._store_limiter)
        self._counts["delivered"] += 1
        if late:
            self._counts["late"] += 1
            position = session_position(r.message.properties)
            logger.warning("session %r of %r: message %s (position %s) came after that "
                           "position was passed (a gap given up on, or a holder of the session "
                           "with another dedup store): handed over late", self.session_id,
                           self.entity, r.message_id, position)
            emit(self._hooks, "on_session_late", entity=self.entity,
                 session_id=self.session_id, position=position, message_id=r.message_id)
        self._settle([copy])

    def _settle(self, copies: list[Copy]) -> None:
        """Complete ``copies`` (handed over, or duplicates) beside the next hand-over:
        an SDK receiver sends a settlement only between two of its receives. Late is
        safe: the ids are done and their positions passed, so a copy that comes back
        meanwhile is settled as a duplicate."""
        for link, r in copies:
            task = asyncio.get_running_loop().create_task(link.settle(r, "complete"))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
        self._room.set()

    def _report(self, gap: SessionGap) -> None:
        self._counts["gaps"] += 1
        self._counts["missing"] += gap.missing
        logger.warning("session %r of %r: positions %d to %d did not come within %.1f s "
                       "(a namespace down, a sender's durable queue, or lost): going on "
                       "without them", gap.session_id, self.entity, gap.first, gap.last,
                       gap.waited)
        emit(self._hooks, "on_session_gap", entity=self.entity, session_id=gap.session_id,
             first=gap.first, last=gap.last, waited=gap.waited)


def _to_deliver(run: list[Copy], verdicts: list[Verdict]) -> list[str]:
    return [c[1].message_id for c, v in zip(run, verdicts, strict=True)
            if v is Verdict.DELIVER]


async def _run_results(handler: Handler | RunHandler, run: list[Copy],
                       verdicts: list[Verdict]) -> Iterator[bool] | None:
    """A run handler's answers for the messages of ``run`` to deliver (up to the first
    one another process holds); ``None`` for a plain handler (called one by one)."""
    if not isinstance(handler, RunHandler):
        return None
    deliver: list[ReceivedMessage] = []
    for (_, r), verdict in zip(run, verdicts, strict=True):
        if verdict is Verdict.HOLD:
            break
        if verdict is Verdict.DELIVER:
            deliver.append(r)
    return iter(await handler.handle_run(deliver) if deliver else [])


async def call(handler: Handler | RunHandler, message: ReceivedMessage) -> bool:
    """Run the handler; False (logged) when it raised."""
    if isinstance(handler, RunHandler):
        return bool((await handler.handle_run([message]) or [False])[0])
    try:
        if is_async_callable(handler):
            await handler(message)
        else:
            result = await anyio.to_thread.run_sync(handler, message)
            if inspect.isawaitable(result):
                await result
    except Exception:
        logger.exception("handler failed for message %s", message.message_id)
        return False
    return True

