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


@pytest.mark.parametrize(("method", "executions", "outcome"), [
    ("POST", ["child POST"], "OperationTimeout"),  # at most once: not sent again
    ("PUT", ["child PUT", "secondary PUT"], "secondary"),  # idempotent: fails over
])
async def test_a_listener_killed_mid_request_executes_a_post_once_and_fails_over_a_put(
        emulator: RelayEmulator, tmp_path: Path, method: str, executions: list[str],
        outcome: str) -> None:
    from gateway.errors import OperationTimeout
    from gateway.relay import AsyncGeoRelayClient

    executed = tmp_path / "executed"  # one line per execution, by either listener

    async def secondary(request: RelayRequest) -> RelayResponse:
        with executed.open("a") as f:
            f.write(f"secondary {request.method} {request.target}\n")
        return RelayResponse(body=b"secondary")

    def lines() -> list[str]:
        text = executed.read_text() if executed.exists() else ""
        return [" ".join(line.split()[:2]) for line in text.splitlines()]

    # Given the primary served by a listener process, the secondary by one here
    child = subprocess.Popen([sys.executable, str(CHILD), str(executed),  # noqa: ASYNC220
                              emulator.connection_string("primary", HC)])
    primary, other = emulator.endpoint("primary", HC), emulator.endpoint("secondary", HC)
    try:
        async with GeoRelayListener([other], secondary), \
                AsyncGeoRelayClient(primary, other, randomize=False) as client:
            await wait_for(lambda: emulator.listener_count("primary", HC) == 1
                           and emulator.listener_count("secondary", HC) == 1)
            # When the request is at the primary's listener, and that process is SIGKILLed
            sending = asyncio.ensure_future(client.request(method, "/slow", content=b"pay"))
            # (an idempotent PUT may be hedged to the secondary first, on a loaded machine)
            await wait_for(lambda: "child " + method in lines() or sending.done())
            os.kill(child.pid, signal.SIGKILL)
            try:
                answer = (await sending).text
            except OperationTimeout as exc:
                answer = type(exc).__name__
                assert "outcome unknown" in str(exc)
    finally:
        child.kill()
        child.wait()
    # Then a POST was executed exactly once (its outcome is unknown to the client), and
    # a PUT was sent again to the secondary (a resend is over before the call returns:
    # the secondary's listener writes its line before it answers); a PUT hedged to the
    # secondary before the child had it may not reach the child at all
    done = lines()
    if method == "PUT" and "child PUT" not in done:
        executions = [e for e in executions if e != "child PUT"]
    assert (answer, sorted(done)) == (outcome, sorted(executions))
