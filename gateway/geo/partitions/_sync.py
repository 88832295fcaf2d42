"""``GeoPartitionReceiver``: the sync driver of the geo partition receiver."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from gateway._support.portal import PortalDriver
from gateway.geo.partitions._receiver import AsyncGeoPartitionReceiver, InboxHandler
from gateway.transports.base import PartitionEvent
from replication import DedupStats

__all__ = ["GeoPartitionReceiver"]


async def _open(kwargs: dict[str, Any]) -> AsyncGeoPartitionReceiver:
    return AsyncGeoPartitionReceiver(**kwargs)


class GeoPartitionReceiver(PortalDriver):
    """Sync twin; takes the same arguments as :class:`AsyncGeoPartitionReceiver`.

    The processors run on the receiver's own event loop thread, and a plain handler
    runs in a worker thread. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        try:
            self._core = self._call(_open, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def owned(self) -> dict[str, frozenset[str]]:
        """The partitions read here now, by namespace."""
        return self._call(self._owned)

    @property
    def dedup_stats(self) -> DedupStats:
        return self._core.dedup_stats

    def start(self, handler: Callable[[PartitionEvent], None] | InboxHandler, *,
              transactional: bool = False, concurrency: int | None = None) -> None:
        """Handle events in the background; see :meth:`AsyncGeoPartitionReceiver.start`."""
        self._call(functools.partial(self._core.start, handler, transactional=transactional,
                                     concurrency=concurrency))

    def stop(self, *, handover_timeout: float | None = None) -> None:
        """Leave both groups gracefully (hand over: checkpoint, release); :meth:`start`
        may follow. See :meth:`AsyncGeoPartitionReceiver.stop`."""
        self._call(functools.partial(self._core.stop, handover_timeout=handover_timeout))

    def run(
        self,
        handler: Callable[[PartitionEvent], None] | InboxHandler,
        *,
        stop: threading.Event | None = None,
        idle_timeout: float | None = None,
        transactional: bool = False,
        concurrency: int | None = None,
    ) -> None:
        """Handle events until ``stop`` is set or none came for ``idle_timeout`` seconds.

        The handler runs in a worker thread, one event per partition at a time (at most
        ``concurrency`` in all); see :meth:`AsyncGeoPartitionReceiver.run`.
        """
        self._call(self._run, handler, stop, idle_timeout, transactional, concurrency)

    async def _run(self, handler: Callable[[PartitionEvent], None] | InboxHandler,
                   stop: threading.Event | None, idle_timeout: float | None,
                   transactional: bool, concurrency: int | None) -> None:
        await self._core.run(handler, stop=stop, idle_timeout=idle_timeout,
                             transactional=transactional, concurrency=concurrency)

    async def _owned(self) -> dict[str, frozenset[str]]:
        return self._core.owned

    def close(self) -> None:
        self._close_portal(self._core.aclose)


async def _noop() -> None:
    return None
