"""GeoRelayListener against the relay emulator, with httpx as the HTTP sender."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from gateway.errors import NamespaceUnavailable
from gateway.geo._hooks import GatewayHooks
from gateway.relay import (
    Accept,
    GeoRelayListener,
    ProtocolError,
    RelayEmulator,
    RelayEndpoint,
    RelayRequest,
    RelayResponse,
)
from gateway.transports.local._control import ControlFile, namespace_files

from .conftest import HC

pytestmark = pytest.mark.anyio
FAST = (0.0, 0.1, 0.2)


async def echo(request: RelayRequest) -> RelayResponse:
    return RelayResponse(status=200, headers={"X-Method": request.method,
                                              "X-Target": request.target},
                         body=request.body or f"from {request.namespace}".encode())


def endpoints(emu: RelayEmulator) -> list[RelayEndpoint]:
    return [emu.endpoint(name, HC) for name in emu.namespaces]


async def send(ep: RelayEndpoint, method: str = "GET", target: str = "",
               body: bytes = b"", timeout: float = 10.0) -> httpx.Response:
    async with httpx.AsyncClient(timeout=timeout) as client:
        return await client.request(method, ep.http_url(target), content=body,
                                    headers={"ServiceBusAuthorization": ep.token()})


@pytest.fixture
async def listening(emulator: RelayEmulator) -> AsyncIterator[GeoRelayListener]:
    async with GeoRelayListener(endpoints(emulator), echo, backoff=FAST) as listener:
        await listener.wait_connected()
        yield listener


async def test_both_namespaces_are_served_inline(emulator: RelayEmulator,
                                                 listening: GeoRelayListener) -> None:
    for ep in endpoints(emulator):
        r = await send(ep, "PUT", "/items/1?x=y", b"payload")
        assert (r.status_code, r.content) == (200, b"payload")
        assert r.headers["x-method"] == "PUT" and r.headers["x-target"] == f"/{HC}/items/1?x=y"
        assert "via" in r.headers
    assert sorted(listening.connected) == sorted(e.namespace for e in endpoints(emulator))


async def test_large_bodies_go_through_rendezvous_both_ways(
        emulator: RelayEmulator, listening: GeoRelayListener) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    r = await send(endpoints(emulator)[0], "POST", body=big)
    assert r.status_code == 200 and r.content == big and "via" in r.headers


async def test_handler_error_gives_500_and_is_reported(emulator: RelayEmulator) -> None:
    errors: list[BaseException] = []

    async def broken(request: RelayRequest) -> RelayResponse:
        raise KeyError("boom")

    async with GeoRelayListener(endpoints(emulator), broken, on_error=errors.append) as lst:
        await lst.wait_connected()
        r = await send(endpoints(emulator)[0])
    assert r.status_code == 500 and "via" in r.headers
    assert any(isinstance(e, KeyError) for e in errors)


async def test_no_handler_gives_501(emulator: RelayEmulator) -> None:
    async with GeoRelayListener(endpoints(emulator)) as lst:
        await lst.wait_connected()
        r = await send(endpoints(emulator)[1])
    assert r.status_code == 501 and "via" in r.headers


async def test_tokens_are_renewed_before_they_expire(emulator: RelayEmulator) -> None:
    downs: list[str] = []

    class Hooks(GatewayHooks):
        def on_namespace_down(self, *, namespace: str, error: BaseException) -> None:
            downs.append(namespace)

    async with GeoRelayListener(endpoints(emulator), echo, token_ttl=2.0,
                                hooks=[Hooks()]) as lst:
        await lst.wait_connected()
        await asyncio.sleep(3.5)  # the first token expired 1.5 s ago
        r = await send(endpoints(emulator)[0])
    assert r.status_code == 200 and downs == []


async def test_namespace_down_closes_the_channel_and_it_reconnects_after_up(
        emulator: RelayEmulator, listening: GeoRelayListener, tmp_path: Path) -> None:
    control = ControlFile(namespace_files("primary", tmp_path)[1])
    control.update(down=True)
    for _ in range(50):
        await asyncio.sleep(0.1)
        if f"127.0.0.1:{emulator.port('primary')}" not in listening.connected:
            break
    else:
        pytest.fail("the listener did not see the outage")
    r = await send(endpoints(emulator)[1])  # the other namespace still serves
    assert r.status_code == 200
    control.update(down=False)
    await listening.wait_connected(timeout=10)
    assert (await send(endpoints(emulator)[0])).status_code == 200


async def test_a_missing_hybrid_connection_makes_the_listener_give_up(
        emulator: RelayEmulator) -> None:
    ep = emulator.endpoint("primary", HC)
    wrong = RelayEndpoint(namespace=ep.namespace, path="missing", key_name=ep.key_name,
                          key=ep.key, plain=True)
    errors: list[BaseException] = []
    listener = GeoRelayListener([wrong], echo, on_error=errors.append)
    with pytest.raises(NamespaceUnavailable, match="404"):
        await asyncio.wait_for(listener.serve_forever(), 10)
    assert "does not exist" in str(errors[0])


async def test_asgi_app_serves_requests(emulator: RelayEmulator) -> None:
    from gateway.relay import asgi_handler

    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send_: Any) -> None:
        seen.append(dict(scope))
        event = await receive()
        await send_({"type": "http.response.start", "status": 201,
                     "headers": [(b"content-type", b"text/plain")]})
        await send_({"type": "http.response.body", "body": b"got ", "more_body": True})
        await send_({"type": "http.response.body", "body": event["body"]})

    async with GeoRelayListener(endpoints(emulator), asgi_handler(app)) as lst:
        await lst.wait_connected()
        r = await send(endpoints(emulator)[0], "POST", "/api/x?q=1", b"body")
    assert (r.status_code, r.content) == (201, b"got body")
    assert r.headers["content-type"] == "text/plain"
    scope = seen[0]
    assert (scope["type"], scope["method"], scope["path"], scope["root_path"],
            scope["query_string"]) == ("http", "POST", f"/{HC}/api/x", f"/{HC}", b"q=1")


async def test_asgi_app_that_sends_no_response_gives_500(emulator: RelayEmulator) -> None:
    from gateway.relay import asgi_handler

    async def silent(scope: Any, receive: Any, send_: Any) -> None:
        return None

    async with GeoRelayListener(endpoints(emulator), asgi_handler(silent)) as lst:
        await lst.wait_connected()
        r = await send(endpoints(emulator)[0])
    assert r.status_code == 500


async def test_websocket_senders_reach_the_websocket_handler(emulator: RelayEmulator) -> None:
    accepted: list[Accept] = []

    async def ws_echo(accept: Accept, ws: Any) -> None:
        accepted.append(accept)
        async for msg in ws:
            await ws.send_str("echo:" + msg.data)

    ep = endpoints(emulator)[0]
    async with GeoRelayListener([ep], echo, websocket_handler=ws_echo) as lst, \
            aiohttp.ClientSession() as session:
        await lst.wait_connected()
        async with session.ws_connect(ep.connect_url(token=ep.token()),
                                      headers={"X-Hello": "1"}) as ws:
            await ws.send_str("ping")
            reply = await asyncio.wait_for(ws.receive(), 5)
    assert reply.data == "echo:ping"
    assert accepted[0].connect_headers.get("X-Hello") == "1"


async def test_websocket_senders_are_rejected_without_a_handler(
        emulator: RelayEmulator) -> None:
    ep = endpoints(emulator)[0]
    async with GeoRelayListener([ep], echo) as lst, aiohttp.ClientSession() as session:
        await lst.wait_connected()
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await session.ws_connect(ep.connect_url(token=ep.token()))
    assert info.value.status == 501


async def test_a_malformed_frame_from_the_relay_is_a_clear_reported_error() -> None:
    async def garbage(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str('{"request": {"id": 5}}')
        await ws.receive()
        return ws

    app = web.Application()
    app.router.add_get("/{tail:.*}", garbage)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    errors: list[BaseException] = []
    ep = RelayEndpoint(namespace=f"127.0.0.1:{port}", path=HC, key_name="k", key="k",
                       plain=True)
    try:
        async with GeoRelayListener([ep], echo, on_error=errors.append, backoff=(5.0,)):
            for _ in range(50):
                await asyncio.sleep(0.1)
                if any(isinstance(e, ProtocolError) for e in errors):
                    break
    finally:
        await runner.cleanup()
    found = [e for e in errors if isinstance(e, ProtocolError)]
    assert found and "'id' must be a string" in str(found[0])


async def test_a_large_response_to_a_small_request_goes_by_rendezvous(
        emulator: RelayEmulator) -> None:
    big = b"r" * (200 * 1024)

    async def large(request: RelayRequest) -> RelayResponse:
        return RelayResponse(body=big, headers={"Content-Type": "application/octet-stream"})

    async with GeoRelayListener(endpoints(emulator), large) as lst:
        await lst.wait_connected()
        r = await send(endpoints(emulator)[1])
    assert r.status_code == 200 and r.content == big and "via" in r.headers


async def test_large_request_headers_go_by_rendezvous(emulator: RelayEmulator) -> None:
    seen: list[RelayRequest] = []

    async def record(request: RelayRequest) -> RelayResponse:
        seen.append(request)
        return RelayResponse(status=204)

    ep = endpoints(emulator)[0]
    headers = {f"X-Big-{i}": "h" * 1000 for i in range(40)}  # 40 KB of headers
    async with GeoRelayListener([ep], record) as lst, httpx.AsyncClient(timeout=10) as client:
        await lst.wait_connected()
        r = await client.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token(),
                                                     **headers})
    assert r.status_code == 204 and "via" in r.headers
    assert seen[0].header("x-big-39") == "h" * 1000
    assert seen[0].header("ServiceBusAuthorization") is None  # the relay's token stays there


async def test_a_bad_key_is_reported_once_and_retried_with_backoff(
        emulator: RelayEmulator) -> None:
    ep = emulator.endpoint("primary", HC)
    wrong = RelayEndpoint(namespace=ep.namespace, path=HC, key_name=ep.key_name,
                          key="d3Jvbmcta2V5", plain=True)
    errors: list[BaseException] = []
    async with GeoRelayListener([wrong], echo, on_error=errors.append, backoff=FAST) as lst:
        await asyncio.sleep(1.0)  # 0 + 0.1 + 0.2 + 0.2 ... : several attempts
        assert lst.connected == []
    assert len(errors) == 1 and "401" in str(errors[0])


async def test_a_channel_closed_for_an_expired_token_reconnects_with_a_fresh_one(
        tmp_path: Path) -> None:
    skew = [0.0]
    errors: list[BaseException] = []
    async with RelayEmulator({"primary": 0}, [HC], data_dir=tmp_path,  # noqa: SIM117
                             clock=lambda: time.time() + skew[0]) as emu:
        async with GeoRelayListener(endpoints(emu), echo, on_error=errors.append,
                                    backoff=FAST) as lst:
            await lst.wait_connected()
            await asyncio.sleep(1.1)  # a working channel: the backoff starts over after it
            skew[0] = 7200.0  # the relay's clock passes the token's expiry
            for _ in range(50):
                await asyncio.sleep(0.05)
                if errors:
                    break
            skew[0] = 0.0
            await lst.wait_connected(timeout=5)
            r = await send(endpoints(emu)[0])
    assert r.status_code == 200
    assert "1008" in str(errors[0]) and "token expired" in str(errors[0])


async def test_a_streaming_asgi_app_that_listens_for_disconnect_sends_everything(
        emulator: RelayEmulator) -> None:
    from gateway.relay import asgi_handler

    async def streaming(scope: Any, receive: Any, send_: Any) -> None:
        await receive()
        gone = asyncio.Event()

        async def watch() -> None:  # as starlette's StreamingResponse does
            if (await receive())["type"] == "http.disconnect":
                gone.set()

        watcher = asyncio.create_task(watch())
        await send_({"type": "http.response.start", "status": 200, "headers": []})
        for chunk in (b"a", b"b", b"c"):
            await asyncio.sleep(0.01)
            if gone.is_set():
                break
            await send_({"type": "http.response.body", "body": chunk, "more_body": True})
        await send_({"type": "http.response.body", "body": b""})
        await watcher

    async with GeoRelayListener(endpoints(emulator), asgi_handler(streaming)) as lst:
        await lst.wait_connected()
        r = await send(endpoints(emulator)[0])
    assert (r.status_code, r.content) == (200, b"abc")


async def test_no_key_or_token_reaches_the_logs_or_the_errors(
        emulator: RelayEmulator, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ep = emulator.endpoint("primary", HC)
    wrong = RelayEndpoint(namespace=ep.namespace, path=HC, key_name=ep.key_name,
                          key="d3Jvbmcta2V5", plain=True)
    errors: list[BaseException] = []
    async with GeoRelayListener([wrong], echo, on_error=errors.append, backoff=FAST), \
            GeoRelayListener([ep], echo, token_ttl=2.0) as good:
        await good.wait_connected()
        assert (await send(ep)).status_code == 200
        await asyncio.sleep(1.0)  # a renewal, and a few refused attempts
    text = caplog.text + " ".join(map(str, errors)) + repr(good) + repr(ep)
    assert errors and "sig=" not in text and ep.key not in text and wrong.key not in text


async def test_reconnects_follow_the_backoff_table_and_stay_at_its_last_step() -> None:
    attempts: list[float] = []
    loop = asyncio.get_running_loop()

    async def unavailable(request: web.Request) -> web.Response:
        attempts.append(loop.time())
        return web.Response(status=503)

    app = web.Application()
    app.router.add_get("/{tail:.*}", unavailable)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    ep = RelayEndpoint(namespace=f"127.0.0.1:{runner.addresses[0][1]}", path=HC, key_name="k",
                       key="k", plain=True)
    try:
        async with GeoRelayListener([ep], echo, backoff=(0.0, 0.2, 0.4)):
            for _ in range(100):
                await asyncio.sleep(0.05)
                if len(attempts) >= 5:
                    break
    finally:
        await runner.cleanup()
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(gaps) >= 4
    for gap, expected in zip(gaps[:4], (0.0, 0.2, 0.4, 0.4), strict=True):
        assert gap >= expected - 0.02, gaps


async def test_concurrent_requests_are_served_concurrently(emulator: RelayEmulator) -> None:
    count = 30
    arrived: list[int] = []
    everyone = asyncio.Event()

    async def gather_all(request: RelayRequest) -> RelayResponse:
        arrived.append(1)
        if len(arrived) == count:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 10)  # only if all are in flight at once
        return RelayResponse(body=request.body)

    ep = endpoints(emulator)[0]
    async with GeoRelayListener([ep], gather_all) as lst, \
            httpx.AsyncClient(timeout=20) as client:
        await lst.wait_connected()
        replies = await asyncio.gather(*(
            client.post(ep.http_url(), content=str(i).encode(),
                        headers={"ServiceBusAuthorization": ep.token()}) for i in range(count)))
    assert [(r.status_code, r.content) for r in replies] == [
        (200, str(i).encode()) for i in range(count)]


async def test_a_failing_websocket_handler_closes_with_1011_and_is_reported(
        emulator: RelayEmulator) -> None:
    errors: list[BaseException] = []

    async def broken(accept: Accept, ws: Any) -> None:
        await ws.receive()
        raise ValueError("handler bug")

    ep = endpoints(emulator)[0]
    async with GeoRelayListener([ep], echo, websocket_handler=broken,
                                on_error=errors.append) as lst, \
            aiohttp.ClientSession() as session:
        await lst.wait_connected()
        async with session.ws_connect(ep.connect_url(token=ep.token())) as ws:
            await ws.send_str("hello")
            msg = await asyncio.wait_for(ws.receive(), 5)
    assert msg.type == aiohttp.WSMsgType.CLOSE and ws.close_code == 1011
    assert any(isinstance(e, ValueError) for e in errors)


async def test_first_attempts_tell_a_refused_token_and_a_missing_hybrid_connection(
        emulator: RelayEmulator) -> None:
    from gateway.errors import ConfigError, MessageRejected

    primary, secondary = endpoints(emulator)
    wrong_key = RelayEndpoint(namespace=primary.namespace, path=HC, key_name=primary.key_name,
                              key="d3Jvbmcta2V5", plain=True)
    missing = RelayEndpoint(namespace=secondary.namespace, path="missing",
                            key_name=secondary.key_name, key=secondary.key, plain=True)
    async with GeoRelayListener([wrong_key, missing], echo, backoff=FAST) as lst:
        await lst.wait_attempted(timeout=10)
        refused = lst.refused
    assert set(refused) == {primary.namespace, secondary.namespace}
    assert isinstance(refused[primary.namespace], MessageRejected)
    assert "check the shared access key name and key" in str(refused[primary.namespace])
    assert isinstance(refused[secondary.namespace], ConfigError)
    assert "'missing' does not exist" in str(refused[secondary.namespace])
    assert "d3Jvbmcta2V5" not in " ".join(map(str, refused.values()))
