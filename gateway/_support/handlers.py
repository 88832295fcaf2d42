"""Telling a coroutine handler from a plain one.

A handler is awaited on the loop when calling it gives a coroutine: an ``async def``
function or method, a ``functools.partial`` of one, or an object whose ``__call__`` is
``async def``. A plain one runs in a worker thread. ``inspect.iscoroutinefunction``
alone misses the last two, and their calls would take a worker thread to make a
coroutine that is then awaited on the loop anyway.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard

__all__ = ["is_async_callable"]


def is_async_callable(fn: Any) -> TypeGuard[Callable[..., Awaitable[Any]]]:
    """Whether calling ``fn`` gives a coroutine (without calling it)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or (
        callable(fn) and not inspect.isroutine(fn) and not inspect.isclass(fn)
        and inspect.iscoroutinefunction(getattr(fn, "__call__", None)))  # noqa: B004
