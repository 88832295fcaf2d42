"""Coroutine handlers are told from plain ones without calling them."""

from __future__ import annotations

import functools

from gateway._support.handlers import is_async_callable


async def coro(message: object) -> None:
    return None


def plain(message: object) -> None:
    return None


class AsyncCall:
    async def __call__(self, message: object) -> None:
        return None

    async def method(self, message: object) -> None:
        return None


class PlainCall:
    def __call__(self, message: object) -> None:
        return None


def test_coroutine_handlers_in_every_form_are_async() -> None:
    for fn in (coro, AsyncCall(), AsyncCall().method, functools.partial(coro),
               functools.partial(functools.partial(AsyncCall()))):
        assert is_async_callable(fn), fn


def test_plain_handlers_and_classes_are_not() -> None:
    for fn in (plain, PlainCall(), functools.partial(plain), AsyncCall, print, None):
        assert not is_async_callable(fn), fn
