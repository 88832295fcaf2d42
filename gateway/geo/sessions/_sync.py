"""``GeoSessionReceiver``: the sync driver of :class:`AsyncGeoSessionReceiver`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from gateway._support.portal import PortalDriver, twin_arguments
from gateway.geo._factory import NamespaceLike
from gateway.geo._hooks import GatewayHooks
from gateway.geo.receiver import StopFlag
from gateway.geo.sessions._receiver import AsyncGeoSessionReceiver, SessionReceiverStats
from gateway.transports.base import ReceivedMessage
from replication import DeadlinePolicy, DedupStore, DedupWindow

__all__ = ["GeoSessionReceiver"]


async def _open(kwargs: dict[str, Any]) -> AsyncGeoSessionReceiver:
    return AsyncGeoSessionReceiver(**kwargs)


async def _noop() -> None:
    return None


class GeoSessionReceiver(PortalDriver):
    """Sync session receiver: :class:`gateway.aio.AsyncGeoSessionReceiver` driven
    from a thread of its own.

    The handler of :meth:`run` runs in a worker thread and may call :meth:`get_state`
    and :meth:`set_state` for the session it is handling.

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
        kwargs = twin_arguments(AsyncGeoSessionReceiver, locals())
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
