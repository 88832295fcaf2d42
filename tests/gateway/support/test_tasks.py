"""OwnedTasks: the tasks a server started, until they end; a failure is logged."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway._support.tasks import OwnedTasks

pytestmark = pytest.mark.anyio


async def test_a_task_is_kept_until_it_ends_and_a_failure_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    tasks = OwnedTasks(logging.getLogger("gateway.test"), "worker failed in namespace a%b")
    release = asyncio.Event()

    async def waits() -> None:
        await release.wait()

    async def fails() -> None:
        raise RuntimeError("boom")

    # Given a task that waits, one that fails and one that is cancelled
    waiting = tasks.spawn(waits())
    cancelled = tasks.spawn(asyncio.sleep(10))
    with caplog.at_level(logging.ERROR, logger="gateway.test"):
        failing = tasks.spawn(fails())
        assert len(tasks) == 3 and set(tasks) == {waiting, cancelled, failing}
        cancelled.cancel()
        await asyncio.gather(failing, cancelled, return_exceptions=True)
        await asyncio.sleep(0)  # the done callbacks run
    # Then only the waiting one is kept, and only the failure is logged, with its cause
    assert list(tasks) == [waiting]
    assert [r.getMessage() for r in caplog.records] == ["worker failed in namespace a%b"]
    assert caplog.records[0].exc_info is not None
    assert isinstance(caplog.records[0].exc_info[1], RuntimeError)
    release.set()
    await waiting
    assert len(tasks) == 0
