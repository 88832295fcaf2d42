"""The sync drivers: ``GeoSender`` and ``GeoReceiver`` run the async core on a
private event loop thread (an anyio blocking portal) and block on each call.

There is one implementation of every decision, in the async core; these classes
only carry calls across the thread boundary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar, cast

from anyio.from_thread import BlockingPortal, start_blocking_portal

__all__ = ["PortalDriver"]

T = TypeVar("T")


class PortalDriver:
    """Owns one event loop thread; subclasses call the async core through it."""

    def __init__(self) -> None:
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] = (
            start_blocking_portal(backend="asyncio")
        )
        self._portal = self._portal_cm.__enter__()
        self._portal_closed = False

    def _call(self, func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        if self._portal_closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        return cast(T, self._portal.call(func, *args))

    def _close_portal(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._portal_closed:
            return
        try:
            self._portal.call(aclose)
        finally:
            self._portal_closed = True
            self._portal_cm.__exit__(None, None, None)

    def __enter__(self: T) -> T:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError()
