"""A listener process SIGKILLed: its requests in flight get 504 (they had reached it:
the outcome is unknown), later ones go to the other listener."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gateway.relay import GeoRelayListener, RelayEmulator, RelayRequest, RelayResponse

from .conftest import HC

pytestmark = pytest.mark.anyio
CHILD = Path(__file__).with_name("listener_child.py")


async def parent(request: RelayRequest) -> RelayResponse:
    return RelayResponse(body=b"parent")


async def wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    pytest.fail("timed out")


async def test_sigkilled_listener_loses_only_its_requests_in_flight(
        emulator: RelayEmulator, tmp_path: Path) -> None:
    marker = tmp_path / "child-has-it"
    ep = emulator.endpoint("primary", HC)
    child = subprocess.Popen([sys.executable, str(CHILD), str(marker),  # noqa: ASYNC220
                              emulator.connection_string("primary", HC)])
    try:
        async with GeoRelayListener([ep], parent), httpx.AsyncClient(timeout=30) as client:
            await wait_for(lambda: emulator.listener_count("primary", HC) == 2)
            auth = {"ServiceBusAuthorization": ep.token()}
            # Given a request in flight at the child listener
            for _ in range(60):
                task = asyncio.ensure_future(client.get(ep.http_url("/slow"), headers=auth))

                def answered_or_at_child(t: asyncio.Future[httpx.Response] = task) -> bool:
                    return t.done() or marker.exists()

                await wait_for(answered_or_at_child)
                if marker.exists():
                    break
                assert task.result().content == b"parent"
            else:
                pytest.fail("the child listener was never chosen")
            # When the child is SIGKILLed
            os.kill(child.pid, signal.SIGKILL)
            in_flight = await task
            # Then that request gets a relay-made 504 (it had reached the listener, which
            # may have acted on it) and later ones the other listener
            assert in_flight.status_code == 504 and "via" not in in_flight.headers
            await wait_for(lambda: emulator.listener_count("primary", HC) == 1)
            later = [await client.get(ep.http_url(), headers=auth) for _ in range(10)]
            assert {(r.status_code, r.content) for r in later} == {(200, b"parent")}
    finally:
        child.kill()
        child.wait()
