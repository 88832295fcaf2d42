"""``GeoSender`` and ``GeoReceiver``: the sync drivers of the async core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway._support.portal import PortalDriver
from gateway.geo.receiver import AsyncGeoReceiver, MessageInboxHandler, ReceiverStats, StopFlag
from gateway.geo.sender import AsyncGeoSender, MessageLike, ReplayReport, SendResult
from gateway.transports.base import ReceivedMessage
from replication import MessageRejected, RoleState

__all__ = ["GeoReceiver", "GeoSender"]


async def _open_sender(kwargs: dict[str, Any]) -> AsyncGeoSender:
    sender = AsyncGeoSender(**kwargs)
    await sender.start()
    return sender


async def _open_receiver(kwargs: dict[str, Any]) -> AsyncGeoReceiver:
    return AsyncGeoReceiver(**kwargs)


class GeoSender(PortalDriver):
    """Sync sender; takes the same arguments as :class:`gateway.aio.AsyncGeoSender`.

    Use as a context manager or call :meth:`close`. The background recovery (probe,
    replay, failback) runs on the sender's own event loop thread between calls.
    Safe to share between threads.
    """

    # Its loop only serves the callers it blocks: local namespaces' SQLite work runs
    # on it directly (two thread switches fewer per send; see gateway._support.blocking).
    _inline_io = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        try:
            self._core = self._call(_open_sender, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def entity(self) -> str:
        """The queue or partitioned entity this sender sends to."""
        return self._core.entity

    @property
    def roles(self) -> RoleState:
        return self._core.roles

    @property
    def backlog(self) -> frozenset[str]:
        return self._core.backlog

    def send(self, message: MessageLike) -> SendResult:
        """Send one message; see :meth:`AsyncGeoSender.send_batch` for what it raises."""
        return self._call(self._core.send, message)

    def send_batch(self, messages: Sequence[MessageLike]) -> SendResult:
        """Send messages as one batch; see :meth:`AsyncGeoSender.send_batch`."""
        return self._call(self._core.send_batch, messages)

    def replay(self) -> ReplayReport:
        """Probe and replay buffered messages now; see :meth:`AsyncGeoSender.replay`."""
        return self._call(self._core.replay)

    def close(self) -> None:
        self._close_portal(self._core.aclose)


class GeoReceiver(PortalDriver):
    """Sync receiver; takes the same arguments as :class:`gateway.aio.AsyncGeoReceiver`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        try:
            self._core = self._call(_open_receiver, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def stats(self) -> ReceiverStats:
        return self._core.stats

    @property
    def down(self) -> frozenset[str]:
        """Namespaces whose last receive failed; see :attr:`AsyncGeoReceiver.down`."""
        return self._core.down

    @property
    def refused(self) -> dict[str, MessageRejected]:
        """Namespaces that refused to be read for good; see :attr:`AsyncGeoReceiver.refused`."""
        return self._core.refused

    def receive(self, max_messages: int = 10, max_wait: float = 5.0) -> list[ReceivedMessage]:
        """First copies only; see :meth:`AsyncGeoReceiver.receive`."""
        return self._call(self._core.receive, max_messages, max_wait)

    def complete(self, message: ReceivedMessage) -> None:
        self._call(self._core.complete, message)

    def abandon(self, message: ReceivedMessage) -> None:
        self._call(self._core.abandon, message)

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str = "") -> None:
        self._call(self._dead_letter, message, reason, description)

    async def _dead_letter(self, message: ReceivedMessage, reason: str, description: str) -> None:
        await self._core.dead_letter(message, reason=reason, description=description)

    def run(
        self,
        handler: Callable[[ReceivedMessage], None] | MessageInboxHandler,
        *,
        max_messages: int = 10,
        stop: StopFlag | None = None,
        idle_timeout: float | None = None,
        transactional: bool = False,
        concurrency: int = 1,
    ) -> None:
        """Handle messages until ``stop`` is set or nothing came for ``idle_timeout`` s.

        ``stop`` is a ``threading.Event`` or anything with ``is_set()``.

        The handler runs in a worker thread, ``concurrency`` messages at a time (one by
        default); one that returns completes its message, one that raises abandons it
        (delivered again). With ``transactional`` it is an inbox handler
        ``(message, conn)`` whose writes through ``conn`` commit with the done mark.
        Outages of both namespaces, and of the dedup store, are waited out, not raised.
        See :meth:`AsyncGeoReceiver.run`.
        """
        self._call(self._run, handler, max_messages, stop, idle_timeout, transactional,
                   concurrency)

    async def _run(
        self,
        handler: Callable[[ReceivedMessage], None] | MessageInboxHandler,
        max_messages: int,
        stop: StopFlag | None,
        idle_timeout: float | None,
        transactional: bool,
        concurrency: int,
    ) -> None:
        await self._core.run(
            handler, max_messages=max_messages, stop=stop, idle_timeout=idle_timeout,
            transactional=transactional, concurrency=concurrency,
        )

    def close(self) -> None:
        self._close_portal(self._core.aclose)


async def _noop() -> None:
    return None
