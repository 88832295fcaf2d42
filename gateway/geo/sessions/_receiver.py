"""The geo session receiver (async): a session's messages in the sender's order, from
both namespaces. ``GeoSessionReceiver`` in ``gateway.geo.sessions._sync`` drives it.

It locks one session in both namespaces (``_session_accept``), keeps a pump per
namespace receiving that session's messages (``_session_links``) into a
:class:`replication.ReorderBuffer`, and hands the handler the message whose position
comes next, whichever namespace its copy came from. Each message is de-duplicated by
``MessageId`` (the dedup store, as ``AsyncGeoReceiver`` does): its other copies are
completed once it is done. A position that does not come within ``gap_timeout`` is
reported (``on_session_gap`` and a warning) and skipped; a message of such a gap that
comes later is handed over late (``on_session_late``). The first position not handed
over yet is kept between runs in ``state_dir`` and in the session's state in both
namespaces (``_session_state``), so the next holder of the session starts there.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.to_thread

from gateway.geo._factory import NamespaceLike, check_entity, default_state_dir, open_transport
from gateway.geo._hooks import GatewayHooks
from gateway.geo._store_watch import STORE_THREADS
from gateway.geo.receiver import Handler, StopFlag
from gateway.geo.sessions._accept import accept_both
from gateway.geo.sessions._handover import Copy, HandOver, RunHandler
from gateway.geo.sessions._links import NamespaceSession
from gateway.geo.sessions._state import SessionState, newest
from gateway.stores import SqliteDedupStore, SqliteSessionStore
from gateway.transports.base import ReceivedMessage, Transport
from replication import (
    RECEIVE_DEADLINES,
    DeadlineEstimator,
    DeadlinePolicy,
    Deduplicator,
    DedupStore,
    DedupWindow,
    NamespaceUnavailable,
    ReorderBuffer,
    SessionOffer,
    session_position,
)

__all__ = ["AsyncGeoSessionReceiver", "SessionReceiverStats"]

logger = logging.getLogger("geogateway")



@dataclass(frozen=True, kw_only=True)
class SessionReceiverStats:
    """Counters since the receiver started. ``missing`` counts the positions of the
    ``gaps`` reported; ``late`` the messages of a gap handed over after it."""

    sessions: int
    delivered: int
    duplicates_suppressed: int
    abandoned: int
    gaps: int
    missing: int
    late: int


class AsyncGeoSessionReceiver(HandOver):
    """Receives a session at a time from both namespaces, in the sender's order.

    Args:
        primary: the primary namespace (``local://NAME``, a connection string, a
            ``NamespaceConfig`` or a ``Transport``); the queue must be session-enabled
            in both.
        secondary: the secondary namespace, given the same way.
        entity: the queue.
        dedup_store: a path (a persistent SQLite window) or a ``DedupStore``.
        session_id: the one session to receive; ``None``: the next available one,
            then the next, ...
        gap_timeout: seconds a missing position is waited for before it is reported
            and skipped (make it longer than the outages it should ride out).
        state_dir: where the first position not handed over of each session is kept
            (``session-cursors-PRIMARY-SECONDARY.db``); default ``$GEOGATEWAY_STATE_DIR``.
        prefetch: messages each namespace's pump receives at a time.
        max_buffered: messages held for their turn before the pumps wait.
        hooks: ``on_session_gap``, ``on_session_late``, ``on_namespace_down`` ...
        deadlines: how long a call on a namespace may take beyond its own wait
            (default ``replication.RECEIVE_DEADLINES``).
    """

    def __init__(self, *, primary: NamespaceLike, secondary: NamespaceLike, entity: str,
                 dedup_store: str | os.PathLike[str] | DedupStore, session_id: str | None = None,
                 gap_timeout: float = 30.0, state_dir: str | os.PathLike[str] | None = None,
                 dedup_window: DedupWindow | None = None, prefetch: int = 100,
                 max_buffered: int = 10_000, hooks: GatewayHooks | Iterable[GatewayHooks] = (),
                 data_dir: str | os.PathLike[str] | None = None, poll_wait: float = 0.25,
                 deadlines: DeadlinePolicy | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if prefetch < 1 or max_buffered < 1 or not gap_timeout >= 0:
            raise ValueError("prefetch and max_buffered must be >= 1, gap_timeout >= 0")
        self.entity = check_entity(entity)
        self._wanted = session_id
        self._gap_timeout, self._prefetch, self._max_buffered = gap_timeout, prefetch, max_buffered
        self._poll_wait, self._clock = poll_wait, clock
        self._hooks = [hooks] if isinstance(hooks, GatewayHooks) else list(hooks)
        self._transports: list[Transport] = []
        self._owned: list[Transport] = []
        for ns in (primary, secondary):
            transport, owned = open_transport(ns, data_dir=data_dir)
            self._transports.append(transport)
            if owned:
                self._owned.append(transport)
        store = dedup_store if isinstance(dedup_store, DedupStore) else SqliteDedupStore(
            dedup_store, window=dedup_window or DedupWindow())
        self._dedup = Deduplicator(store, window=dedup_window, clock=clock)
        names = [t.namespace for t in self._transports]
        self._cursors = SqliteSessionStore(
            Path(state_dir or default_state_dir()) / f"session-cursors-{names[0]}-{names[1]}.db",
            synchronous="NORMAL")
        self._store_limiter = anyio.CapacityLimiter(STORE_THREADS)
        self._estimator = DeadlineEstimator(deadlines or RECEIVE_DEADLINES)
        self._links: list[NamespaceSession] = []
        self._buffer: ReorderBuffer[Copy] | None = None
        self._unordered: deque[tuple[Copy, bool]] = deque()
        self._state = SessionState()
        self._arrived, self._room = asyncio.Event(), asyncio.Event()
        self._last_arrival = 0.0
        self._settling: set[asyncio.Task[None]] = set()
        # Accepts given up on and locks being given back, still ending (awaited on close).
        self._background: set[asyncio.Task[Any]] = set()
        self._counts = dict.fromkeys(("sessions", "delivered", "duplicates_suppressed",
                                      "abandoned", "gaps", "missing", "late"), 0)
        self.session_id: str | None = None
        self._closed = False

    @property
    def stats(self) -> SessionReceiverStats:
        return SessionReceiverStats(**self._counts)

    async def __aenter__(self) -> AsyncGeoSessionReceiver:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None = None,
                        exc_value: BaseException | None = None,
                        traceback: TracebackType | None = None) -> None:
        await self.aclose()

    # -- the session ---------------------------------------------------------------

    async def accept_session(self, *, max_wait: float = 5.0) -> str | None:
        """Lock the session (the one given, or the next available) in both namespaces.

        A namespace that is down, hangs, or where another receiver still holds the
        session is locked later by its pump. Returns at once when a session is held.

        Returns:
            The session id; ``None`` when none was free within ``max_wait`` seconds.

        Raises:
            NamespaceUnavailable: both namespaces are down.
            MessageRejected: both refused the queue (no such queue, not session-enabled).
        """
        if self.session_id is not None:
            return self.session_id
        deadline = time.monotonic() + max_wait
        while True:
            # Short rounds: each namespace waits a little, so a session one of them has
            # is taken at once even while the other one has none to give.
            left = deadline - time.monotonic()
            accepted = await accept_both(self._transports, self.entity, self._wanted,
                                         max_wait=max(0.0, min(self._poll_wait, left)),
                                         estimator=self._estimator, background=self._background)
            if accepted is not None:
                break
            if deadline - time.monotonic() <= 0:
                return None
        sid = accepted.session_id
        now = time.monotonic()
        self._links = [NamespaceSession(
            t, entity=self.entity, session_id=sid, receiver=accepted.held.get(t.namespace),
            prefetch=self._prefetch, poll_wait=self._poll_wait, estimator=self._estimator,
            hooks=self._hooks, on_received=self._received, on_lost=self._lost,
            has_room=self._has_room, room=self._room) for t in self._transports]
        for link in self._links:
            link.down = link.namespace in accepted.down
            link.busy_since = now if link.namespace in accepted.busy else None
        read = await asyncio.gather(*(link.read_state() for link in self._links))
        states = [s for s in read if s is not None]
        self._state = newest(states)
        cursor = await anyio.to_thread.run_sync(self._cursors.next, self.entity, sid,
                                            limiter=self._store_limiter)
        start = max(cursor or 0, self._state.next_position or 0)
        self._buffer = ReorderBuffer(sid, next_position=start, gap_timeout=self._gap_timeout)
        self.session_id = sid
        self._counts["sessions"] += 1
        self._last_arrival = time.monotonic()
        for link in self._links:
            link.start()
        return sid

    async def release_session(self) -> None:
        """Give the session up in both namespaces (what was not handed over comes back
        to its next holder), recording how far it was handed over in its state."""
        await self._release()
        await asyncio.gather(*list(self._background), return_exceptions=True)

    async def _release(self) -> None:
        """:meth:`release_session`, the locks given back in the background (``run``
        goes on to the next session meanwhile)."""
        if self.session_id is None:
            return
        assert self._buffer is not None
        # The pumps first: an SDK receiver answers other calls only between its receives.
        await asyncio.gather(*(link.stop() for link in self._links))
        if self._state.next_position != self._buffer.next_position:
            await self._write_state(self._state.state)
        else:  # a namespace that missed the last write (it was down) gets it now
            await asyncio.gather(*(link.write_state(link.pending_state) for link in self._links
                                   if link.pending_state is not None))
        await self._settled()
        # Closing an SDK receiver takes a few round trips: the next session need not wait.
        for link in self._links:
            task = asyncio.get_running_loop().create_task(link.close())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        self._links, self._buffer, self.session_id = [], None, None
        self._unordered.clear()

    async def get_state(self) -> bytes | None:
        """The held session's state (the newest of both namespaces' at accept, and the
        writes since)."""
        self._require_session()
        return self._state.state

    async def set_state(self, state: bytes | None) -> None:
        """Write the held session's state to both namespaces (one that is down, or not
        locked yet, takes it as soon as it is); ``None`` clears it."""
        self._require_session()
        if state is not None and not isinstance(state, bytes | bytearray):
            raise TypeError(f"a session state is bytes or None, not {type(state).__name__}")
        await self._write_state(None if state is None else bytes(state))

    def _require_session(self) -> None:
        if self.session_id is None:
            raise RuntimeError("no session is held: call accept_session() or run() first")

    async def _write_state(self, state: bytes | None) -> None:
        assert self._buffer is not None
        self._state = SessionState(state=state, version=self._state.version + 1,
                                   next_position=self._buffer.next_position)
        await asyncio.gather(*(link.write_state(self._state) for link in self._links))

    # -- receiving -------------------------------------------------------------------

    def _has_room(self, link: NamespaceSession) -> bool:
        buffer = self._buffer
        if buffer is None or len(buffer) + len(self._unordered) >= self._max_buffered:
            return False
        # Copies of this namespace about to be handed over: receive after them (what a
        # gap holds back does not count, so the other namespace's pump never waits for it).
        return not any(c[0] is link for c in buffer.ready(self._prefetch))

    def _received(self, link: NamespaceSession, got: list[ReceivedMessage]) -> None:
        buffer = self._buffer
        if buffer is None or link not in self._links:
            return
        now = self._clock()
        for r in got:
            position = session_position(r.message.properties)
            outcome = buffer.offer((link, r), message_id=r.message_id, position=position,
                                   now=now)
            if outcome is SessionOffer.DUPLICATE:
                self._duplicate((link, r))
            elif outcome in (SessionOffer.LATE, SessionOffer.UNORDERED):
                self._unordered.append(((link, r), outcome is SessionOffer.LATE))
        self._last_arrival = time.monotonic()
        self._arrived.set()

    def _lost(self, link: NamespaceSession) -> None:
        # What that namespace delivered comes again, to whoever locks the session there.
        if self._buffer is not None:
            now = self._clock()
            for copy in [c for c in self._buffer.items() if c[0] is link]:
                self._buffer.remove(copy, now)
        self._unordered = deque(u for u in self._unordered if u[0][0] is not link)
        self._room.set()

    async def run(self, handler: Handler, *, stop: StopFlag | None = None,
                  idle_timeout: float | None = None,
                  session_idle_timeout: float = 1.0) -> None:
        """Handle sessions until ``stop`` is set or no session came for ``idle_timeout``.

        Holds one session at a time: hands its messages to ``handler`` in the
        sender's order until nothing came for ``session_idle_timeout`` seconds and
        nothing waits for a missing position, then gives it up and takes the next
        (the same one again, when ``session_id`` was given). A handler that returns
        completes its message; one that raises abandons it (it comes back, first).
        ``handler`` may be a coroutine function or a plain one (run in a worker
        thread). Outages of both namespaces are waited out (logged).
        """
        idle_since = time.monotonic()
        while not _stopped(stop):
            try:
                sid = await self.accept_session(max_wait=self._poll_wait)
            except NamespaceUnavailable as exc:
                logger.warning("accepting a session: %s; retrying", exc)
                await anyio.sleep(self._poll_wait)
                idle_since = time.monotonic()
                continue
            if sid is None:
                if idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                    return
                continue
            try:
                await self._run_session(handler, stop, session_idle_timeout)
            finally:
                await self._release()
            idle_since = time.monotonic()

    async def receive_session(self, handler: Handler | RunHandler, *,
                              stop: StopFlag) -> bool:
        """Hand the held session's messages over, in the sender's order, until ``stop`` is
        set; the session stays held (give it up with :meth:`release_session`).

        ``handler`` is called as :meth:`run` calls it, or, a :class:`RunHandler`
        (``handle_run``), with runs of consecutive messages.

        Returns:
            False when the session was lost first (another receiver holds it in the
            primary, or everywhere); True when ``stop`` ended it.
        """
        self._require_session()
        await self._run_session(handler, stop, math.inf)
        return _stopped(stop)

    @property
    def lock_duration(self) -> float:
        """How long the held session's locks last in its namespaces (the longest, in
        seconds; they are renewed while it is held); 60 s before a lock is known."""
        return max((link.lock_duration for link in self._links if link.held), default=60.0)

    async def _run_session(self, handler: Handler | RunHandler, stop: StopFlag | None,
                           idle_after: float) -> None:
        buffer = self._buffer
        assert buffer is not None
        waiting = False
        while not _stopped(stop):
            allowed = self._may_hand_over()
            if allowed is None:
                return  # another receiver holds the session in the primary: it is theirs
            if not allowed:
                waiting = True
                await self._wait(None)
                continue
            if waiting:  # the other holder gave the session up: go on from where it was
                waiting = False
                await self._catch_up()
            if self._unordered:
                copy, late = self._unordered.popleft()
                await self._hand_over(handler, copy, late=late)
                continue
            run = buffer.ready(self._prefetch)
            if run:
                await self._hand_over_run(handler, run)
                continue
            gap = buffer.expire_gap(self._clock())
            if gap is not None:
                self._report(gap)
                continue
            if not any(link.held or link.down for link in self._links):
                return  # another receiver took the session everywhere
            quiet = self._quiet()
            if len(buffer) == 0 and quiet is not None and quiet >= idle_after:
                return
            idle_left = None if len(buffer) or quiet is None else max(0.0, idle_after - quiet)
            await self._wait(idle_left)

    def _quiet(self) -> float | None:
        """Seconds nothing came, counted once every namespace holding the session has
        asked for more since its last delivery, with that delivery settled
        (``NamespaceSession.quiet_since``): slow settlements or a slow first receive
        would otherwise give a busy session up between two of its batches."""
        held = [link for link in self._links if link.held]
        marks = [link.quiet_since() for link in held]
        if not held or None in marks:
            return None
        return time.monotonic() - max(self._last_arrival, *(m or 0.0 for m in marks))

    def _may_hand_over(self) -> bool | None:
        """Whether messages may be handed over now: only while no other receiver holds
        the session in a namespace that is up (a secondary's holder gives it up, as
        ``_session_accept`` says; a holder that never does is waited for
        ``gap_timeout``). ``None``: another receiver holds it in the primary."""
        primary, *others = self._links
        if primary.busy:
            return None
        deadline = time.monotonic() - self._gap_timeout
        return not any(link.busy and (link.busy_since or 0.0) > deadline for link in others)

    async def _catch_up(self) -> None:
        buffer = self._buffer
        assert buffer is not None and self.session_id is not None
        cursor = await anyio.to_thread.run_sync(self._cursors.next, self.entity,
                                                self.session_id, limiter=self._store_limiter)
        for copy in buffer.skip_to(cursor or 0):
            self._unordered.append((copy, True))

    async def _wait(self, idle_left: float | None) -> None:
        """Until something arrives, the gap deadline, ``idle_left`` or a poll interval."""
        wait = self._poll_wait if idle_left is None else min(self._poll_wait, idle_left)
        deadline = self._buffer.gap_deadline() if self._buffer is not None else None
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - self._clock()))
        self._arrived.clear()
        with anyio.move_on_after(max(wait, 0.001)):
            await self._arrived.wait()

    async def aclose(self) -> None:
        """Give the session up, close what was opened. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.release_session()
        except Exception:  # the locks expire by themselves; close the rest anyway
            logger.exception("giving up session %r failed", self.session_id)
        await asyncio.gather(*list(self._background), return_exceptions=True)
        for transport in self._owned:
            await transport.aclose()
        await anyio.to_thread.run_sync(self._dedup.close)
        self._cursors.close()


def _stopped(stop: StopFlag | None) -> bool:
    return stop is not None and stop.is_set()
