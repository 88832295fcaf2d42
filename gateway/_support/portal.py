"""The sync drivers' engine: ``GeoSender`` and ``GeoReceiver`` run the async core on
a private event loop thread and block on each call.

There is one implementation of every decision, in the async core; these classes
only carry calls across the thread boundary. A call is handed over with
``call_soon_threadsafe`` and waited for on a plain lock: no concurrent future, no
portal task group. A driver whose loop only serves its callers can also run the
local namespaces' SQLite work on that loop thread (``inline_io``, see
:mod:`gateway._support.blocking`), which saves two more thread switches per call.

A call can also lend the blocked caller's thread to the loop (:class:`CallerThread`):
``GeoReceiver.run`` runs its plain handler there, a received batch per hand-over,
instead of sending each message to a worker thread and back.

The loop thread is a daemon, and a driver that was never closed is closed at
interpreter exit (``atexit``), so forgetting ``close()`` cannot hang the program.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import inspect
import queue
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, Generic, TypeVar

from gateway._support.blocking import DriverThread

__all__ = ["CallerThread", "PortalDriver", "twin_arguments"]

T = TypeVar("T")
D = TypeVar("D", bound="PortalDriver")


class _LoopThread:
    """An asyncio event loop running in a daemon thread until stopped."""

    def __init__(self, name: str, *, inline_io: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self._stopping: asyncio.Future[None] = self.loop.create_future()
        self._thread = DriverThread(target=self._run, name=name, daemon=True)
        self._thread.inline_io = inline_io
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            # A root task for the loop's life, not run_forever(): anyio's worker
            # threads belong to the root task, which it finds (and then remembers)
            # only under run_until_complete; without one it searched every task of
            # the loop on each hand-over to a worker thread.
            self.loop.run_until_complete(self._main())
        finally:
            # Calls of other threads still running when the driver was closed end
            # with an error instead of blocking their callers forever.
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def call(self, func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync gateway call cannot be made from its own loop thread")
        return _Handoff(self.loop, func(*args)).result()

    def lend(self, func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        # As call(), with the caller's thread lent to the call: func(caller, *args).
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync gateway call cannot be made from its own loop thread")
        caller = CallerThread(self.loop)
        handoff = _Handoff(self.loop, func(caller, *args), on_end=caller.end)
        caller.serve(handoff.cancel)
        return handoff.result()

    async def _main(self) -> None:
        await self._stopping

    def _stop(self) -> None:
        if not self._stopping.done():
            self._stopping.set_result(None)

    def stop(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self.loop.close()


class _Handoff(Generic[T]):
    """One call: started as a task on the loop, waited for on a lock by the caller."""

    __slots__ = ("_coro", "_done", "_loop", "_on_end", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], *,
                 on_end: Callable[[], None] | None = None) -> None:
        self._coro = coro
        self._loop = loop
        self._on_end = on_end
        self._task: asyncio.Task[T] | None = None
        self._done = threading.Lock()
        self._done.acquire()
        try:
            loop.call_soon_threadsafe(self._start, loop)
        except BaseException:
            coro.close()  # never started: no "never awaited" warning
            raise

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._task = loop.create_task(self._coro)
        except BaseException:
            self._coro.close()
            self._finished(None)
            raise
        self._task.add_done_callback(self._finished)

    def _finished(self, _task: asyncio.Task[T] | None) -> None:
        self._done.release()
        if self._on_end is not None:
            self._on_end()

    def cancel(self) -> None:
        """Cancel the call (from any thread); result() then raises."""
        def cancel() -> None:
            if self._task is not None:
                self._task.cancel()
        with contextlib.suppress(RuntimeError):  # a closed loop: the call has ended
            self._loop.call_soon_threadsafe(cancel)

    def result(self) -> T:
        self._done.acquire()
        if self._task is None:
            raise RuntimeError("the sync driver's loop could not start the call")
        if self._task.cancelled():
            raise RuntimeError("the sync driver was closed while this call was running")
        return self._task.result()


_Work = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


class CallerThread:
    """The thread blocked on a driver call, lent to that call: the call's coroutine
    hands it blocking work (:meth:`run_sync`), which it runs while it waits.

    One hand-over each way per piece of work: the work is queued for the caller, the
    result comes back with ``call_soon_threadsafe``. An exception of the work is
    raised to the coroutine; a ``KeyboardInterrupt`` (or another ``BaseException``)
    in the caller's thread cancels the call, waits for it to end, and is raised to the
    caller.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the caller's thread (awaited on the loop)."""
        future: asyncio.Future[T] = self._loop.create_future()
        self._work.put((fn, args, future))
        return await future

    def wait_for(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` on the loop, from the caller's thread (inside run_sync)."""
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop).result()

    def end(self) -> None:
        """The call ended (on the loop): serve() returns."""
        self._work.put(None)

    def serve(self, cancel: Callable[[], None]) -> None:
        """Run the work handed over until the call ends (in the caller's thread)."""
        interrupted: BaseException | None = None
        while True:
            try:
                item = self._work.get()
                if item is None:
                    break
                fn, args, future = item
                if interrupted is not None:
                    self._post(future.cancel)  # the call is being cancelled
                    continue
                try:
                    result = fn(*args)
                except Exception as exc:
                    self._reply(future, None, exc)
                else:
                    self._reply(future, result, None)
            except BaseException as exc:
                # Ctrl-C while the handler ran (or while waiting): stop the call, and
                # let it end (its finally clauses run on the loop) before raising.
                if interrupted is not None:
                    raise
                interrupted = exc
                cancel()
        if interrupted is not None:
            raise interrupted

    def _reply(self, future: asyncio.Future[Any], result: Any,
               error: Exception | None) -> None:
        def reply() -> None:
            if future.done():  # cancelled meanwhile
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
        self._post(reply)

    def _post(self, callback: Callable[[], object]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the call has ended
            self._loop.call_soon_threadsafe(callback)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class PortalDriver:
    """Owns one event loop thread; subclasses call the async core through it."""

    # Run the local namespaces' blocking work on the loop thread (see gateway._support.blocking).
    _inline_io = False

    def __init__(self) -> None:
        self._loop_thread = _LoopThread(
            f"geogateway-{type(self).__name__}", inline_io=self._inline_io
        )
        self._portal_closed = False
        self._closer: Callable[[], Coroutine[Any, Any, None]] | None = None
        # Close at interpreter exit if the user did not; a weak reference so that
        # the registration does not keep the driver alive.
        ref = weakref.ref(self)
        self._atexit = lambda: _close_if_alive(ref)
        atexit.register(self._atexit)

    def _call(self, func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        if self._portal_closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        return self._loop_thread.call(func, *args)

    def _lend(self, func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        # As _call, lending the caller's thread to func(caller, *args) (CallerThread).
        if self._portal_closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        return self._loop_thread.lend(func, *args)

    def _close_portal(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self._portal_closed:
            return
        self._portal_closed = True
        atexit.unregister(self._atexit)
        try:
            self._loop_thread.call(aclose)
        finally:
            self._loop_thread.stop()

    def __enter__(self: D) -> D:
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


def twin_arguments(twin: Callable[..., Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``twin`` (an async class) taken by name from ``values``.

    A sync driver spells out its async twin's parameters (so that editors and mypy
    check them) and passes its ``locals()`` here: every parameter of the twin is
    forwarded by name, and none can be left behind by a hand-written list.

    Raises:
        KeyError: ``values`` lacks one of the twin's parameters.
    """
    return {name: values[name] for name in _parameter_names(twin)}


@functools.cache
def _parameter_names(twin: Callable[..., Any]) -> tuple[str, ...]:
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return tuple(p.name for p in inspect.signature(twin).parameters.values()
                 if p.kind not in variadic)


def _close_if_alive(ref: weakref.ref[PortalDriver]) -> None:
    driver = ref()
    if driver is not None:
        driver.close()
