"""The relay emulator spoken to in raw protocol: aiohttp WebSockets as the listener,
httpx as the HTTP sender."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from gateway.emulator.relay._emulator import RelayEmulator
from gateway.relay import RenewToken, Request, Response
from gateway.relay.protocol import decode, encode
from gateway.transports.local._control import ControlFile, namespace_files

from .conftest import HC

pytestmark = pytest.mark.anyio


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def echo_listener(ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
    """Answers every inline request with 200 and the body it got."""
    async for msg in ws:
        request = decode(msg.data)
        assert isinstance(request, Request)
        body = (await ws.receive()).data if request.body else b""
        await ws.send_str(encode(Response(request_id=request.id, body=True,
                                          response_headers={"X-Target": request.request_target
                                                            or ""})))
        await ws.send_bytes(b"echo:" + body)


async def test_inline_request_reaches_the_listener_and_the_answer_carries_via(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("primary", HC)
    ws = await session.ws_connect(ep.listen_url(token=ep.token()))
    task = asyncio.create_task(echo_listener(ws))
    async with httpx.AsyncClient() as client:
        r = await client.post(ep.http_url("/a?b=1"), content=b"hi",
                              headers={"ServiceBusAuthorization": ep.token()})
    task.cancel()
    assert (r.status_code, r.content) == (200, b"echo:hi")
    assert r.headers["via"] and r.headers["x-target"] == f"/{HC}/a?b=1"


async def test_relay_made_errors_have_no_via(emulator: RelayEmulator, tmp_path: Path) -> None:
    ep = emulator.endpoint("primary", HC)
    async with httpx.AsyncClient() as client:
        no_listener = await client.get(ep.http_url(), headers={"ServiceBusAuthorization":
                                                                ep.token()})
        bad_key = await client.get(ep.http_url(), headers={
            "ServiceBusAuthorization": ep.token().replace("sig=", "sig=A")})
        no_token = await client.get(ep.http_url())
        unknown = await client.get(ep.http_url().replace(HC, "nope"),
                                   headers={"ServiceBusAuthorization": ep.token()})
    assert [no_listener.status_code, bad_key.status_code, no_token.status_code,
            unknown.status_code] == [502, 401, 401, 404]
    assert not any("via" in r.headers for r in (no_listener, bad_key, no_token, unknown))


async def test_listen_with_a_bad_token_or_path_is_refused(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("primary", HC)
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(ep.listen_url(token=ep.token(ttl=-10)))
    assert info.value.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(ep.listen_url(token=ep.token()).replace(HC, "nope"))
    assert info.value.status == 404


async def test_no_answer_in_time_gives_504(tmp_path: Path,
                                           session: aiohttp.ClientSession) -> None:
    async with RelayEmulator({"primary": 0}, [HC], data_dir=tmp_path,
                             answer_timeout=0.3) as emu:
        ep = emu.endpoint("primary", HC)
        ws = await session.ws_connect(ep.listen_url(token=ep.token()))  # never answers
        async with httpx.AsyncClient() as client:
            r = await client.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()})
        await ws.close()
    assert r.status_code == 504 and "via" not in r.headers


async def test_a_malformed_control_frame_closes_the_listener_with_a_reason(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("primary", HC)
    ws = await session.ws_connect(ep.listen_url(token=ep.token()))
    await ws.send_str('{"response": {"statusCode": 200}}')
    msg = await ws.receive()
    assert msg.type == aiohttp.WSMsgType.CLOSE
    assert ws.close_code == 1002 and "lacks 'requestId'" in str(msg.extra)


async def test_listener_token_expiry_closes_with_1008_unless_renewed(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("primary", HC)
    expiring = await session.ws_connect(ep.listen_url(token=ep.token(ttl=1.5)))
    renewed = await session.ws_connect(ep.listen_url(token=ep.token(ttl=1.5)))
    await renewed.send_str(encode(RenewToken(token=ep.token(ttl=60))))
    msg = await asyncio.wait_for(expiring.receive(), 10)
    assert msg.type == aiohttp.WSMsgType.CLOSE and expiring.close_code == 1008
    assert emulator.listener_count("primary", HC) == 1 and not renewed.closed
    await renewed.close()


async def test_namespace_down_closes_listeners_and_refuses_until_up(
        emulator: RelayEmulator, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    ep = emulator.endpoint("primary", HC)
    ws = await session.ws_connect(ep.listen_url(token=ep.token()))
    control = ControlFile(namespace_files("primary", tmp_path)[1])
    control.update(down=True)
    msg = await asyncio.wait_for(ws.receive(), 5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()})
        control.update(down=False)
        for _ in range(50):
            await asyncio.sleep(0.1)
            try:
                r = await client.get(ep.http_url(),
                                     headers={"ServiceBusAuthorization": ep.token()})
                break
            except httpx.ConnectError:
                continue
    assert r.status_code == 502  # up again, and no listener yet


async def test_an_inline_request_may_be_answered_over_its_rendezvous_address(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    # As the Node client does: every response goes over the request's address.
    ep = emulator.endpoint("primary", HC)
    ws = await session.ws_connect(ep.listen_url(token=ep.token()))

    async def answer_by_rendezvous() -> None:
        request = decode((await ws.receive()).data)
        assert isinstance(request, Request) and not request.rendezvous and not request.body
        async with session.ws_connect(request.address) as rz:
            await rz.send_str(encode(Response(request_id=request.id, status_code=202,
                                              body=True)))
            await rz.send_bytes(b"by rendezvous")

    task = asyncio.create_task(answer_by_rendezvous())
    async with httpx.AsyncClient() as client:
        r = await client.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()})
    await task
    assert (r.status_code, r.content) == (202, b"by rendezvous") and "via" in r.headers


async def test_at_most_25_listeners_per_hybrid_connection(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("secondary", HC)
    sockets = [await session.ws_connect(ep.listen_url(token=ep.token())) for _ in range(25)]
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(ep.listen_url(token=ep.token()))
    assert info.value.status == 403
    for ws in sockets:
        await ws.close()


async def test_websocket_sender_without_listener_gets_404(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("primary", HC)
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(ep.connect_url(token=ep.token()))
    assert info.value.status == 404


async def test_injected_latency_delays_every_request(
        emulator: RelayEmulator, tmp_path: Path) -> None:
    ep = emulator.endpoint("primary", HC)
    ControlFile(namespace_files("primary", tmp_path)[1]).update(latency=0.5)
    await asyncio.sleep(0.3)  # the control file is polled every 0.1 s
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient() as client:
        started = loop.time()
        r = await client.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()})
        took = loop.time() - started
    assert r.status_code == 502 and took >= 0.45


async def test_a_token_for_another_hybrid_connection_is_refused(
        emulator: RelayEmulator) -> None:
    from gateway.relay import create_token

    ep = emulator.endpoint("primary", HC)
    other = create_token("http://127.0.0.1/other/", key_name=ep.key_name, key=ep.key)
    namespace_wide = create_token("http://127.0.0.1/", key_name=ep.key_name, key=ep.key)
    async with httpx.AsyncClient() as client:
        refused = await client.get(ep.http_url(), headers={"Authorization": other})
        allowed = await client.get(ep.http_url(), params={"sb-hc-token": namespace_wide})
    assert refused.status_code == 401 and allowed.status_code == 502


async def test_lost_replies_leave_the_sender_with_a_relay_made_504(
        tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with RelayEmulator({"primary": 0}, [HC], data_dir=tmp_path,
                             answer_timeout=0.3) as emu:
        ep = emu.endpoint("primary", HC)
        ControlFile(namespace_files("primary", tmp_path)[1]).update(lost_replies=1.0)
        await asyncio.sleep(0.3)  # the control file is polled every 0.1 s
        ws = await session.ws_connect(ep.listen_url(token=ep.token()))
        task = asyncio.create_task(echo_listener(ws))
        async with httpx.AsyncClient() as client:
            r = await client.post(ep.http_url(), content=b"x",
                                  headers={"ServiceBusAuthorization": ep.token()})
        task.cancel()
        await ws.close()
    assert r.status_code == 504 and "via" not in r.headers


async def test_a_hung_namespace_accepts_connections_and_answers_nothing_until_cleared(
        emulator: RelayEmulator, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    ep = emulator.endpoint("primary", HC)
    # Given a listener connected before the hang (its pings answered by the relay itself)
    ws = await session.ws_connect(ep.listen_url(token=ep.token()), autoping=False)
    await ws.ping(b"before")
    assert (await asyncio.wait_for(ws.receive(), 5)).type == aiohttp.WSMsgType.PONG
    listener = asyncio.create_task(echo_listener(ws))
    # When the namespace hangs
    control = ControlFile(namespace_files("primary", tmp_path)[1])
    control.update(hang=True)
    await applied(emulator, hang=True)
    listener.cancel()
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        # Then a request gets a connection but no answer, nor does a listener's ping
        sending = asyncio.create_task(client.post(ep.http_url("/during"), content=b"held",
                                                  headers={"ServiceBusAuthorization":
                                                           ep.token()}))
        await ws.ping(b"during")
        first = asyncio.ensure_future(ws.receive())
        done, _ = await asyncio.wait([sending, first], timeout=1.0)
        assert not done
        # When the hang is lifted, both are answered
        control.update(hang=False)
        # the pong, the request and its body: the pong may come before, between or after
        frames = [await asyncio.wait_for(first, 5)]
        for _ in range(2):
            frames.append(await asyncio.wait_for(ws.receive(), 5))
        assert (aiohttp.WSMsgType.PONG, b"during") in [(f.type, f.data) for f in frames]
        request = next(decode(f.data) for f in frames if f.type == aiohttp.WSMsgType.TEXT)
        assert isinstance(request, Request)
        body = next(f.data for f in frames if f.type == aiohttp.WSMsgType.BINARY)
        await ws.send_str(encode(Response(request_id=request.id, body=True)))
        await ws.send_bytes(b"echo:" + body)
        r = await asyncio.wait_for(sending, 10)
    await ws.close()
    assert (r.status_code, r.content) == (200, b"echo:held")


async def applied(emulator: RelayEmulator, *, hang: bool, name: str = "primary") -> None:
    """Wait until the emulator obeys its control file's ``hang`` (it polls every 0.1 s)."""
    for _ in range(500):  # 10 s
        if emulator.control_state(name).hang == hang:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"the emulator did not apply hang={hang}")
