"""``OutboxDispatcher``: the sync driver of :class:`AsyncOutboxDispatcher`.

The same core runs on the driver's own event loop thread; each sync ``GeoSender`` is
called from a worker thread of that loop (a ``GeoSender`` blocks on its own loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import anyio.to_thread

from gateway._support.portal import PortalDriver
from gateway.geo._client import GeoSender
from gateway.geo.outbox._dispatcher import AsyncOutboxDispatcher, DispatcherStats
from gateway.geo.receiver import StopFlag
from gateway.geo.sender import SendResult
from gateway.stores import Outbox
from replication import Message

__all__ = ["OutboxDispatcher"]


class _Threaded:
    """A sync ``GeoSender`` seen by the async core: each call in a worker thread."""

    def __init__(self, sender: GeoSender, *, owned: bool) -> None:
        self._sender = sender
        self._owned = owned

    @property
    def entity(self) -> str:
        return self._sender.entity

    async def send_batch(self, messages: Sequence[Message]) -> SendResult:
        return await anyio.to_thread.run_sync(self._sender.send_batch, messages)

    async def aclose(self) -> None:
        if self._owned:
            await anyio.to_thread.run_sync(self._sender.close)


class OutboxDispatcher(PortalDriver):
    """Sends an outbox's committed rows through sync ``GeoSender`` s, in order per
    destination; takes the arguments of :class:`gateway.aio.AsyncOutboxDispatcher`,
    with ``GeoSender`` s (or a factory of them) for ``senders``.

    Use as a context manager or call :meth:`close` (it closes the senders the factory
    made; senders passed in are the caller's).
    """

    def __init__(self, outbox: Outbox,
                 senders: GeoSender | Iterable[GeoSender] | Callable[[str], GeoSender],
                 **options: Any) -> None:
        super().__init__()
        wrapped: Any
        if isinstance(senders, GeoSender):
            wrapped = _Threaded(senders, owned=False)
        elif callable(senders):
            factory = senders

            async def make(entity: str) -> _Threaded:
                return _Threaded(await anyio.to_thread.run_sync(factory, entity), owned=True)

            wrapped = make
        else:
            wrapped = [_Threaded(s, owned=False) for s in senders]
        try:
            self._core: AsyncOutboxDispatcher = self._call(_open, outbox, wrapped, options)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def stats(self) -> DispatcherStats:
        return self._core.stats

    def run(self, *, stop: StopFlag | None = None) -> None:
        """Dispatch until ``stop`` (a ``threading.Event``) is set; see
        :meth:`AsyncOutboxDispatcher.run`."""
        self._call(self._run, stop)

    async def _run(self, stop: StopFlag | None) -> None:
        await self._core.run(stop=stop)

    def dispatch_once(self) -> int:
        """One round; see :meth:`AsyncOutboxDispatcher.dispatch_once`."""
        return self._call(self._core.dispatch_once)

    def close(self) -> None:
        self._close_portal(self._core.aclose)


async def _open(outbox: Outbox, senders: Any, options: dict[str, Any]) -> AsyncOutboxDispatcher:
    return AsyncOutboxDispatcher(outbox, senders, **options)


async def _noop() -> None:
    return None
