"""Services with a life cycle: ``async with`` them, or run one in a background thread.

The AMQP emulator, the relay emulator and the relay listener are *services*: an async
``start()`` that returns once they serve, and an async ``aclose()``. :class:`AsyncService`
gives them ``async with``; :class:`ServiceThread` runs one on its own event loop in a
background thread, for synchronous code and tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["AsyncService", "Service", "ServiceThread"]


class Service(Protocol):
    """What :class:`ServiceThread` runs."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


S = TypeVar("S", bound=Service)
_A = TypeVar("_A", bound="AsyncService")


class AsyncService:
    """Base of a service: ``async with service:`` starts it and closes it on leaving."""

    async def start(self) -> None:
        """Start serving; return once the service serves."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Stop serving. Safe to call twice."""
        raise NotImplementedError

    async def __aenter__(self: _A) -> _A:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None = None,
                        exc: BaseException | None = None,
                        tb: TracebackType | None = None) -> None:
        await self.aclose()


class ServiceThread(Generic[S]):
    """Runs a service on its own event loop in a background thread.

    ``with ServiceThread(service) as service:`` starts it and returns once it is
    started; leaving stops it.
    """

    #: The name of the background thread (subclasses name their own).
    thread_name = "geogateway-service"

    def __init__(self, service: S) -> None:
        self.service = service
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    def __enter__(self) -> S:
        self.start()
        return self.service

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Start the thread; return once the service is started.

        Raises:
            ConfigError: the service could not start (a port in use, ...).
        """
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(ready),),
                                        daemon=True, name=self.thread_name)
        self._thread.start()
        ready.result()

    def stop(self) -> None:
        """Stop the service and wait for the thread. Safe to call twice."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run coroutine ``coro`` on the service's loop and return its result."""
        if self._loop is None:
            raise RuntimeError(f"{type(self).__name__} is not started: call start() first")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _main(self, ready: Future[None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            await self.service.start()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await self.service.aclose()
