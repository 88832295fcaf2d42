"""One namespace's part of a geo session: its lock, what it receives, its renewals.

:class:`NamespaceSession` belongs to an ``AsyncGeoSessionReceiver`` while it holds a
session. Its pump keeps the lock on the session in its namespace and hands what it
receives to the receiver's reorder buffer: it (re)locks the session when it does not
hold it (the namespace was down, or another receiver held the session, at accept;
the lock was lost), renews the lock at half its duration, writes a session state
this namespace missed, and receives while the buffer has room. Every call has a
deadline (``replication.RECEIVE_DEADLINES``), so a hung namespace is taken for down
and holds up neither the other namespace nor the handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio

from gateway._support.deadlines import within_deadline
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo.sessions._state import SessionState
from gateway.transports.base import ReceivedMessage, SessionReceiver, Transport
from replication import (
    DeadlineEstimator,
    GatewayError,
    MessageRejected,
    Operation,
    OperationTimeout,
    SessionLockLost,
    TransportError,
)

__all__ = ["NamespaceSession", "accept_in"]

logger = logging.getLogger("geogateway")


async def accept_in(transport: Transport, entity: str, session_id: str | None, *,
                    max_wait: float, estimator: DeadlineEstimator) -> SessionReceiver | None:
    """``transport.accept_session`` within its deadline.

    Raises:
        TransportError: the namespace is down or did not answer in time.
        MessageRejected: the entity is refused (no such queue, not session-enabled).
    """
    return await within_deadline(
        estimator, transport.namespace, Operation.RECEIVE,
        lambda: transport.accept_session(entity, session_id, max_wait=max_wait),
        what=f"accept a session of {entity!r}", wait=max_wait)


class NamespaceSession:
    """The lock on one session in one namespace, and its pump (see the module docstring).

    Args:
        transport: the namespace.
        receiver: the lock, when it was taken at accept; ``None`` to take it in the pump.
        on_received: called with the messages the pump received.
        on_lost: called when the lock is lost (what it received comes again).
        has_room: whether the receiver's buffer takes more from this namespace now (it
            has room, and what this namespace delivered last is handed over, so that a
            receive never holds up the settlements of the messages before it).
    """

    def __init__(self, transport: Transport, *, entity: str, session_id: str,
                 receiver: SessionReceiver | None, prefetch: int, poll_wait: float,
                 estimator: DeadlineEstimator, hooks: list[GatewayHooks],
                 on_received: Callable[[NamespaceSession, list[ReceivedMessage]], None],
                 on_lost: Callable[[NamespaceSession], None],
                 has_room: Callable[[NamespaceSession], bool], room: asyncio.Event) -> None:
        self.transport = transport
        self.namespace = transport.namespace
        self.entity = entity
        self.session_id = session_id
        self.receiver = receiver
        #: A state write this namespace has not taken yet (it was down, or not locked).
        self.pending_state: SessionState | None = None
        self.down = False
        #: When a receive here first answered (None: none has yet), monotonic.
        self.answered: float | None = None
        # Since when the pump has been asking for messages without getting any (None:
        # it has not asked since its last delivery), and when its settlements last
        # ended: the session is idle only once both are old enough (``quiet_since``).
        self._asking: float | None = None
        self._settled_at = 0.0
        #: Since when another receiver holds the session here (None: it does not).
        self.busy_since: float | None = None
        self._prefetch, self._poll_wait = prefetch, poll_wait
        self._estimator, self._hooks = estimator, hooks
        self._on_received, self._on_lost = on_received, on_lost
        self._has_room, self._room = has_room, room
        self._duration = self._lock_duration(receiver)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Settlements under way: the pump receives once they are done (an SDK receiver
        # sends a settlement only between two of its reads, so a receive under way would
        # hold each one up for a read timeout).
        self._settling = 0
        self._settled = asyncio.Event()

    @staticmethod
    def _lock_duration(receiver: SessionReceiver | None) -> float:
        return max(1.0, receiver.locked_until - time.time()) if receiver is not None else 1.0

    @property
    def lock_duration(self) -> float:
        """Seconds this namespace's lock on the session lasts (1 s before it is held)."""
        return self._duration

    @property
    def held(self) -> bool:
        return self.receiver is not None

    def quiet_since(self) -> float | None:
        """Since when this namespace has had nothing to give (monotonic): its pump has
        asked for messages since its last delivery and its settlements are over (an SDK
        receiver's next receive waits for them, so their time is no sign of an idle
        session). ``None`` while that is not so, or before a first receive answered (a
        first receive can take longer than the idle time)."""
        if self.answered is None or self._settling or self._asking is None:
            return None
        return max(self._asking, self._settled_at)

    @property
    def busy(self) -> bool:
        """Another receiver holds the session in this namespace."""
        return self.receiver is None and self.busy_since is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _call(self, what: str, operation: Operation, call: Callable[[], Any],
                    wait: float = 0.0) -> Any:
        return await within_deadline(self._estimator, self.namespace, operation, call,
                                     what=f"{what} of session {self.session_id!r}", wait=wait)

    async def _pump(self) -> None:
        while not self._closed:
            try:
                await self._turn()
            except SessionLockLost as exc:
                await self._drop(exc)
            except TransportError as exc:
                # A call given up on at its deadline may have taken messages that nobody
                # will see: they stay locked as long as the session. Give that lock up,
                # so that they come back when it is taken again. After a plain outage
                # the lock is kept (an SDK session receiver re-attaches to its session).
                self._mark_down(exc)
                if isinstance(exc, OperationTimeout):
                    await self._drop(exc)
                await anyio.sleep(self._poll_wait)
            except MessageRejected as exc:
                # Refused for good here (the entity went away, access was revoked): the
                # other namespace goes on; the gaps that leaves are reported as such.
                logger.warning("session %r of %r in %s refused: %s", self.session_id,
                               self.entity, self.namespace, exc)
                await self._drop(exc)
                await anyio.sleep(self._poll_wait)

    async def _turn(self) -> None:
        receiver = self.receiver
        if receiver is None:
            got = await accept_in(self.transport, self.entity, self.session_id,
                                  max_wait=self._poll_wait, estimator=self._estimator)
            self._mark_up()
            if got is None:  # another receiver holds it here: try again
                if self.busy_since is None:
                    self.busy_since = time.monotonic()
                await anyio.sleep(self._poll_wait)
                return
            self.receiver, self._duration = got, self._lock_duration(got)
            self.busy_since = None
            return
        if receiver.locked_until - time.time() < self._duration / 2:
            await self._call("renew the lock", Operation.SETTLE, receiver.renew_lock)
        if self.pending_state is not None:
            state = self.pending_state
            await self._call("write the state", Operation.SETTLE,
                             lambda: receiver.set_state(state.encode()))
            if self.pending_state is state:
                self.pending_state = None
        if not self._has_room(self):
            self._room.clear()
            with anyio.move_on_after(self._poll_wait):
                await self._room.wait()
            return
        if self._settling:
            self._settled.clear()
            with anyio.move_on_after(self._poll_wait):
                await self._settled.wait()
        if self._asking is None:
            self._asking = time.monotonic()
        got = await self._call("receive", Operation.RECEIVE, lambda: receiver.receive(
            max_messages=self._prefetch, max_wait=self._poll_wait), wait=self._poll_wait)
        if self.answered is None:
            self.answered = time.monotonic()
        self._mark_up()
        if got:
            self._asking = None
            self._on_received(self, got)

    async def _drop(self, exc: GatewayError) -> None:
        """Stop using the lock (lost, or its namespace failed): the copies it delivered
        leave the buffer, and it is given up (bounded; a namespace that is down lets it
        expire), to be taken again by the next turn."""
        receiver, self.receiver = self.receiver, None
        if receiver is None:
            return
        logger.info("session %r in %s: giving the lock up (%s)", self.session_id,
                    self.namespace, exc)
        self._on_lost(self)
        with contextlib.suppress(GatewayError), anyio.move_on_after(2.0):
            await receiver.aclose()

    def _mark_down(self, exc: GatewayError) -> None:
        if not self.down:
            self.down = True
            logger.warning("session %r: namespace %s is down: %s", self.session_id,
                           self.namespace, exc)
            emit(self._hooks, "on_namespace_down", namespace=self.namespace, error=exc)

    def _mark_up(self) -> None:
        if self.down:
            self.down = False
            emit(self._hooks, "on_namespace_up", namespace=self.namespace)

    async def settle(self, received: ReceivedMessage, action: str) -> None:
        """Complete or abandon a copy this namespace delivered; a failure is logged (the
        copy comes back, and is then settled as the duplicate it is)."""
        transport = self.transport
        call = transport.complete if action == "complete" else transport.abandon
        self._settling += 1
        try:
            await self._call(f"{action} {received.message_id!r}", Operation.SETTLE,
                             lambda: call(received))
        except GatewayError as exc:
            logger.info("%s of %r in %s failed: %s", action, received.message_id,
                        self.namespace, exc)
        finally:
            self._settling -= 1
            if not self._settling:
                self._settled_at = time.monotonic()
                self._settled.set()

    async def read_state(self) -> SessionState | None:
        """This namespace's session state; ``None`` when it cannot be read now."""
        receiver = self.receiver
        if receiver is None:
            return None
        try:
            raw = await self._call("read the state", Operation.SETTLE, receiver.get_state)
        except GatewayError as exc:
            logger.info("reading the state of session %r in %s failed: %s", self.session_id,
                        self.namespace, exc)
            return None
        return SessionState.decode(raw)

    async def write_state(self, state: SessionState) -> bool:
        """Write ``state``; when that fails it is written by the pump later."""
        receiver = self.receiver
        if receiver is not None:
            try:
                await self._call("write the state", Operation.SETTLE,
                                 lambda: receiver.set_state(state.encode()))
                self.pending_state = None
                return True
            except GatewayError as exc:
                logger.info("writing the state of session %r in %s failed (written later): "
                            "%s", self.session_id, self.namespace, exc)
        self.pending_state = state
        return False

    async def stop(self) -> None:
        """Stop the pump (the lock is kept until :meth:`close`)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self) -> None:
        """Stop the pump and give the session up here."""
        await self.stop()
        receiver, self.receiver = self.receiver, None
        if receiver is not None:
            with contextlib.suppress(GatewayError), anyio.move_on_after(2.0):
                await receiver.aclose()
