"""``RelayThread``: a relay emulator or listener on its own event loop, for sync code."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["RelayThread"]


class _Startable(Protocol):
    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


S = TypeVar("S", bound=_Startable)


class RelayThread(Generic[S]):
    """Runs a :class:`RelayEmulator` or a :class:`GeoRelayListener` in a background thread.

    ``with RelayThread(RelayEmulator(...)) as emu:`` starts it on the thread's own
    event loop and returns once it is started; leaving stops it.
    """

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
                                        daemon=True, name="geogateway-relay")
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

    def call(self, coro: Any, timeout: float | None = None) -> Any:
        """Run coroutine ``coro`` on the service's loop and return its result."""
        if self._loop is None:
            raise RuntimeError("the relay thread is not started")
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
