"""PortalDriver: the sync drivers' loop thread, and lending the caller's thread."""

from __future__ import annotations

import threading
from typing import Any

import anyio.to_thread
import pytest

from gateway._support.portal import CallerThread, PortalDriver


class Driver(PortalDriver):
    def close(self) -> None:
        self._close_portal(_nothing)


async def _nothing() -> None:
    return None


async def _worker_thread() -> threading.Thread:
    return await anyio.to_thread.run_sync(threading.current_thread)


@pytest.fixture
def driver() -> Any:
    made = Driver()
    yield made
    made.close()


def test_a_worker_thread_outlives_the_call_that_started_it(driver: Driver) -> None:
    # When two calls in a row each hand work to a worker thread
    first = driver._call(_worker_thread)
    second = driver._call(_worker_thread)
    # Then the second reuses the first one's thread: the worker belongs to the loop's
    # root task, not to the call's task (one thread start per call otherwise)
    assert first is second and first.is_alive()


def test_a_lent_caller_thread_runs_the_work_and_raises_its_errors(driver: Driver) -> None:
    # Given a call that hands two pieces of work to the caller's thread, one failing
    async def call(caller: CallerThread) -> tuple[str, str]:
        name = await caller.run_sync(lambda: threading.current_thread().name)
        try:
            await caller.run_sync(_fail)
        except ValueError as exc:
            return name, str(exc)
        raise AssertionError("the error did not reach the call")

    # When the call runs, Then both ran in this thread and the error reached the call
    assert driver._lend(call) == (threading.current_thread().name, "bad input")


def _fail() -> None:
    raise ValueError("bad input")
