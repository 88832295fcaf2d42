"""``GeoSessionReceiver``: the sync driver of :class:`AsyncGeoSessionReceiver`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway._support.portal import PortalDriver
from gateway.geo.receiver import StopFlag
from gateway.geo.sessions._receiver import AsyncGeoSessionReceiver, SessionReceiverStats
from gateway.transports.base import ReceivedMessage

__all__ = ["GeoSessionReceiver"]


async def _open(kwargs: dict[str, Any]) -> AsyncGeoSessionReceiver:
    return AsyncGeoSessionReceiver(**kwargs)


async def _noop() -> None:
    return None


class GeoSessionReceiver(PortalDriver):
    """Sync session receiver; takes the same arguments as
    :class:`gateway.aio.AsyncGeoSessionReceiver`.

    The handler of :meth:`run` runs in a worker thread and may call :meth:`get_state`
    and :meth:`set_state` for the session it is handling.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        try:
            self._core = self._call(_open, kwargs)
        except BaseException:
            self._close_portal(_noop)
            raise

    @property
    def session_id(self) -> str | None:
        """The session held now, if any."""
        return self._core.session_id

    @property
    def stats(self) -> SessionReceiverStats:
        return self._core.stats

    def accept_session(self, *, max_wait: float = 5.0) -> str | None:
        """Lock a session in both namespaces; see :meth:`AsyncGeoSessionReceiver.accept_session`."""
        return self._call(self._accept, max_wait)

    async def _accept(self, max_wait: float) -> str | None:
        return await self._core.accept_session(max_wait=max_wait)

    def release_session(self) -> None:
        """Give the held session up; see :meth:`AsyncGeoSessionReceiver.release_session`."""
        self._call(self._core.release_session)

    def get_state(self) -> bytes | None:
        """The held session's state."""
        return self._call(self._core.get_state)

    def set_state(self, state: bytes | None) -> None:
        """Write the held session's state to both namespaces."""
        self._call(self._core.set_state, state)

    def run(self, handler: Callable[[ReceivedMessage], None], *, stop: StopFlag | None = None,
            idle_timeout: float | None = None, session_idle_timeout: float = 1.0) -> None:
        """Handle sessions, each in the sender's order, until ``stop`` is set or no
        session came for ``idle_timeout`` seconds; see :meth:`AsyncGeoSessionReceiver.run`.

        ``stop`` is a ``threading.Event`` or anything with ``is_set()``. The handler
        runs in a worker thread, one message at a time; one that returns completes its
        message, one that raises abandons it (delivered again).
        """
        self._call(self._run, handler, stop, idle_timeout, session_idle_timeout)

    async def _run(self, handler: Callable[[ReceivedMessage], None], stop: StopFlag | None,
                   idle_timeout: float | None, session_idle_timeout: float) -> None:
        await self._core.run(handler, stop=stop, idle_timeout=idle_timeout,
                             session_idle_timeout=session_idle_timeout)

    def close(self) -> None:
        self._close_portal(self._core.aclose)
