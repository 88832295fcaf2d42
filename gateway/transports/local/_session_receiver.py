"""The session receiver of a local namespace (``LocalTransport.accept_session``)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio

from gateway.transports.base import ReceivedMessage, ReceiveMode, SessionReceiver
from gateway.transports.local._session_store import SessionStore
from replication import ConfigError, GatewayError

__all__ = ["LocalSessionReceiver", "accept_session"]

T = TypeVar("T")

#: What the receiver uses of its transport: the outage and hang checks, the worker
#: thread, the polling wait, the wall clock.
Enter = Callable[[], Awaitable[Any]]
Run = Callable[..., Awaitable[Any]]
Poll = Callable[[float, Callable[[], list[Any]]], Awaitable[list[Any]]]


class LocalSessionReceiver(SessionReceiver):
    """The lock on one session of a local namespace's queue (see :class:`SessionReceiver`).

    Every operation checks the namespace first, as the transport's do: down raises
    ``NamespaceUnavailable``, a hang waits.
    """

    def __init__(self, *, store: SessionStore, entity: str, session_id: str, token: str,
                 locked_until: float, enter: Enter, run: Run, poll: Poll,
                 clock: Callable[[], float]) -> None:
        self.namespace = store.namespace
        self.entity = entity
        self.session_id = session_id
        self.locked_until = locked_until
        self._store = store
        self._token = token
        self._enter, self._run, self._poll, self._clock = enter, run, poll, clock
        self._closed = False

    def __repr__(self) -> str:
        return (f"LocalSessionReceiver(namespace={self.namespace!r}, entity={self.entity!r}, "
                f"session_id={self.session_id!r})")

    async def receive(self, *, max_messages: int = 1,
                      max_wait: float = 0.0) -> list[ReceivedMessage]:
        """The session's messages, oldest first, peek-locked as long as the session.

        Raises:
            SessionLockLost: the lock expired or another receiver took the session.
            NamespaceUnavailable: the namespace is down (also while waiting).
        """
        if max_messages < 1:
            raise ConfigError(f"max_messages must be at least 1, got {max_messages}")
        await self._enter()

        def attempt() -> list[ReceivedMessage]:
            got = self._store.receive(self.entity, self.session_id, self._token,
                                      max_messages=max_messages, mode=ReceiveMode.PEEK_LOCK,
                                      now=self._clock())
            return [r for r, _ in got]

        return await self._poll(max_wait, attempt)

    async def renew_lock(self) -> float:
        await self._enter()
        self.locked_until = await self._run(self._store.renew, self.entity, self.session_id,
                                            self._token, self._clock())
        return self.locked_until

    async def get_state(self) -> bytes | None:
        await self._enter()
        state: bytes | None = await self._run(self._store.get_state, self.entity,
                                              self.session_id, self._token, self._clock())
        return state

    async def set_state(self, state: bytes | None) -> None:
        if state is not None and not isinstance(state, bytes | bytearray):
            raise TypeError(f"a session state is bytes or None, not {type(state).__name__}")
        await self._enter()
        await self._run(self._store.set_state, self.entity, self.session_id, self._token,
                        None if state is None else bytes(state), self._clock())

    async def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[ReceivedMessage]:
        await self._enter()
        got = await self._run(lambda: self._store.receive_deferred(
            self.entity, sequence_numbers, mode=ReceiveMode.PEEK_LOCK, now=self._clock(),
            session=(self.session_id, self._token)))
        return [r for r, _ in got]

    async def aclose(self) -> None:
        """Give the session up (its unsettled messages come back). Safe to call twice;
        a namespace that is down keeps the lock until it expires."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(GatewayError):  # else the lock expires by itself
            await self._run(self._store.release, self.entity, self.session_id, self._token,
                            self._clock())


async def accept_session(store: SessionStore, entity: str, session_id: str | None, *,
                         max_wait: float, enter: Enter, run: Run, poll: Poll,
                         clock: Callable[[], float]) -> LocalSessionReceiver | None:
    """Lock a session (see ``Transport.accept_session``), polling up to ``max_wait``."""
    await enter()
    token = uuid.uuid4().hex
    taken: list[tuple[str, float]] = []
    # A caller's cancel does not stop an attempt already in its worker thread: whichever
    # of the two comes second (under ``guard``) gives back the lock the attempt took.
    guard = threading.Lock()
    abandoned = False

    def attempt() -> list[tuple[str, float]]:
        got = store.accept(entity, session_id, token=token, now=clock())
        with guard:
            if got is not None and abandoned:
                with contextlib.suppress(GatewayError):
                    store.release(entity, got[0], token, clock())
                return []
            taken.extend([] if got is None else [got])
            return list(taken)

    try:
        found = await poll(max_wait, attempt)
    except BaseException:
        with guard:
            abandoned = True
            held = list(taken)
        if held:
            with anyio.CancelScope(shield=True), contextlib.suppress(GatewayError):
                await run(store.release, entity, held[0][0], token, clock())
        raise
    if not found:
        return None
    [(sid, until)] = found
    return LocalSessionReceiver(store=store, entity=entity, session_id=sid, token=token,
                                locked_until=until, enter=enter, run=run, poll=poll,
                                clock=clock)
