"""``OutboxDispatcher``: the sync driver of :class:`AsyncOutboxDispatcher`.

The same core runs on the driver's own event loop thread; each sync ``GeoSender`` is
called from a worker thread of that loop (a ``GeoSender`` blocks on its own loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import anyio.to_thread

from gateway._support.portal import PortalDriver, twin_arguments
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
    destination: :class:`gateway.aio.AsyncOutboxDispatcher` driven from a thread of
    its own.

    Use as a context manager or call :meth:`close` (it closes the senders the factory
    made; senders passed in are the caller's).

    Args:
        outbox: a :class:`~gateway.stores.PostgresOutbox` or
            :class:`~gateway.stores.SqliteOutbox` (closed by its owner, not here).
        senders: a ``GeoSender``, several (one per entity: only their entities are
            dispatched), or ``factory(entity)`` returning one (every destination is
            dispatched; the senders made are closed by :meth:`close`).
        batch_size: rows per ``send_batch``, per destination and round.
        concurrency: destinations sent at the same time.
        poll_interval: the longest wait for new rows between rounds (default: the
            outbox's own, 1 s with PostgreSQL notifications, 0.5 s for SQLite).
        retry_interval: the first wait before a destination whose send failed is tried
            again (doubling, up to 30 s).
        name: this dispatcher's name in leases and logs (default: host, pid, random).
        on_error: called as ``on_error(entity, error)`` when a send or the store fails
            (``entity`` is ``"*"`` when the outbox itself could not be read).
    """

    def __init__(
        self, outbox: Outbox,
        senders: GeoSender | Iterable[GeoSender] | Callable[[str], GeoSender], *,
        batch_size: int = 100, concurrency: int = 4, poll_interval: float | None = None,
        retry_interval: float = 1.0, name: str | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        kwargs = twin_arguments(AsyncOutboxDispatcher, locals())
        super().__init__()
        kwargs["senders"] = _threaded(senders)
        try:
            self._core: AsyncOutboxDispatcher = self._call(_open, kwargs)
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


def _threaded(senders: GeoSender | Iterable[GeoSender] | Callable[[str], GeoSender]) -> Any:
    """The senders as the async core takes them: each call in a worker thread."""
    if isinstance(senders, GeoSender):
        return _Threaded(senders, owned=False)
    if callable(senders):
        factory = senders

        async def make(entity: str) -> _Threaded:
            return _Threaded(await anyio.to_thread.run_sync(factory, entity), owned=True)

        return make
    return [_Threaded(s, owned=False) for s in senders]


async def _open(kwargs: dict[str, Any]) -> AsyncOutboxDispatcher:
    return AsyncOutboxDispatcher(**kwargs)


async def _noop() -> None:
    return None
