"""The relay emulator holds to the Hybrid Connections protocol the way the service does:
the frames it sends are the ones the official listeners expect, what the official
listeners send is taken, and a listener that breaks a MUST is refused loudly (its
control channel closed with a close code that says why, and a log line).

Each test speaks the raw protocol (aiohttp WebSockets as the listener, httpx as the
sender), sending exactly what the .NET / Node listeners send."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import aiohttp
import httpx
import pytest

from gateway.emulator.relay._emulator import RelayEmulator
from gateway.relay import GeoRelayListener, RelayRequest, RelayResponse, create_token
from gateway.relay.protocol import INLINE_BODY_LIMIT, RenewToken, Request, decode, encode

from .conftest import HC

pytestmark = pytest.mark.anyio
EMULATOR_LOG = "gateway.relay.emulator"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def auth(emulator: RelayEmulator) -> dict[str, str]:
    return {"ServiceBusAuthorization": emulator.endpoint("primary", HC).token()}


async def listen(emulator: RelayEmulator,
                 session: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse[bool]:
    ep = emulator.endpoint("primary", HC)
    return await session.ws_connect(ep.listen_url(token=ep.token()))


async def next_frame(ws: aiohttp.ClientWebSocketResponse[bool]) -> dict[str, dict[str, object]]:
    msg = await asyncio.wait_for(ws.receive(), 10)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    frame: dict[str, dict[str, object]] = json.loads(msg.data)
    return frame


async def closed_with(ws: aiohttp.ClientWebSocketResponse[bool]) -> int | None:
    msg = await asyncio.wait_for(ws.receive(), 10)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
    return ws.close_code


async def test_a_rendezvous_request_frame_carries_only_address_and_id(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    # Given a raw listener, and a request whose body is over the inline limit
    ws = await listen(emulator, session)
    big = b"b" * (INLINE_BODY_LIMIT + 1)
    async with httpx.AsyncClient(timeout=10) as client:
        sending = asyncio.ensure_future(client.post(emulator.endpoint("primary", HC).http_url(),
                                                    content=big, headers=auth(emulator)))
        # When the relay tells the listener about it
        frame = await next_frame(ws)
        # Then the control frame is {"request": {"address", "id"}}, nothing more (no
        # "body": the .NET listener takes a request with "body" for an inline one)
        assert set(frame) == {"request"} and set(frame["request"]) == {"address", "id"}
        # ... and the request itself comes over the rendezvous socket
        async with session.ws_connect(str(frame["request"]["address"])) as rz:
            request = decode((await rz.receive()).data)
            assert isinstance(request, Request) and request.method == "POST" and request.body
            assert (await rz.receive()).data == big
            await rz.send_str(json.dumps({"response": {"requestId": request.id,
                                                       "statusCode": 201}}))
        r = await sending
    await ws.close()
    assert r.status_code == 201 and "via" in r.headers


async def test_a_status_code_sent_as_a_string_is_taken_and_the_channel_stays(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ws = await listen(emulator, session)
    url = emulator.endpoint("primary", HC).http_url()
    async with httpx.AsyncClient(timeout=10) as client:
        for n in range(2):  # the second request proves the channel is still open
            sending = asyncio.ensure_future(client.get(url, headers=auth(emulator)))
            request = (await next_frame(ws))["request"]
            # The protocol article's own example writes the status code as a string
            await ws.send_str(json.dumps({"response": {
                "requestId": request["id"], "statusCode": "200", "statusDescription": "OK",
                "responseHeaders": {"Content-Type": "text/plain"}, "body": True}}))
            await ws.send_bytes(f"answer {n}".encode())
            r = await sending
            assert (r.status_code, r.text, "via" in r.headers) == (200, f"answer {n}", True)
    assert not ws.closed
    await ws.close()


@pytest.mark.parametrize("oversize", ["body", "headers"])
async def test_an_inline_response_over_the_limits_closes_the_channel_with_1009(
        emulator: RelayEmulator, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture, oversize: str) -> None:
    caplog.set_level(logging.WARNING, logger=EMULATOR_LOG)
    ws = await listen(emulator, session)
    async with httpx.AsyncClient(timeout=10) as client:
        sending = asyncio.ensure_future(client.post(emulator.endpoint("primary", HC).http_url(),
                                                    content=b"x", headers=auth(emulator)))
        request = (await next_frame(ws))["request"]
        await ws.receive()  # the request's body frame
        # When the listener answers inline with what the protocol sends by rendezvous
        headers = {f"X-H{i}": "h" * 1000 for i in range(40)} if oversize == "headers" else {}
        await ws.send_str(json.dumps({"response": {
            "requestId": request["id"], "statusCode": 200, "responseHeaders": headers,
            "body": True}}))
        await ws.send_bytes(b"r" * (INLINE_BODY_LIMIT + 1 if oversize == "body" else 10))
        # Then its control channel is closed with 1009 (message too big) and a log line
        assert await closed_with(ws) == 1009
        # ... and the sender gets 504: the request had reached the listener
        r = await sending
    assert r.status_code == 504 and "via" not in r.headers
    assert any("rendezvous" in rec.getMessage() and "1009" in rec.getMessage()
               for rec in caplog.records if rec.name == EMULATOR_LOG)
    assert emulator.listener_count("primary", HC) == 0


async def test_a_response_of_exactly_64_kb_may_go_inline(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ws = await listen(emulator, session)
    async with httpx.AsyncClient(timeout=10) as client:
        sending = asyncio.ensure_future(client.get(emulator.endpoint("primary", HC).http_url(),
                                                   headers=auth(emulator)))
        request = (await next_frame(ws))["request"]
        await ws.send_str(json.dumps({"response": {"requestId": request["id"],
                                                   "statusCode": 200, "body": True}}))
        await ws.send_bytes(b"r" * INLINE_BODY_LIMIT)
        r = await sending
    assert r.status_code == 200 and len(r.content) == INLINE_BODY_LIMIT and not ws.closed
    await ws.close()


async def test_a_binary_frame_where_a_control_message_belongs_closes_with_1002_and_a_log(
        emulator: RelayEmulator, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=EMULATOR_LOG)
    ws = await listen(emulator, session)
    await ws.send_bytes(b"\x00")
    assert await closed_with(ws) == 1002
    assert any("1002" in rec.getMessage() and "binary" in rec.getMessage()
               for rec in caplog.records if rec.name == EMULATOR_LOG)


async def test_every_sb_hc_query_parameter_is_stripped_from_the_request_target(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ws = await listen(emulator, session)
    ep = emulator.endpoint("primary", HC)
    query = {"sb-hc-token": ep.token(), "keep": "1", "sb-hc-action": "request",
             "SB-HC-ID": "x", "sb-hc-statusCode": "200", "also": "two words"}
    async with httpx.AsyncClient(timeout=10) as client:
        sending = asyncio.ensure_future(client.get(ep.http_url("/a/b"), params=query))
        request = (await next_frame(ws))["request"]
        await ws.send_str(encode_response(str(request["id"])))
        r = await sending
    await ws.close()
    assert r.status_code == 204
    assert request["requestTarget"] == f"/{HC}/a/b?keep=1&also=two+words"


def encode_response(request_id: str) -> str:
    return json.dumps({"response": {"requestId": request_id, "statusCode": 204,
                                    "body": False}})


async def test_a_token_signed_for_another_host_is_refused_with_401(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    ep = emulator.endpoint("primary", HC)
    # Signed with the right key and key name, for the right hybrid connection, but for
    # another namespace's host
    foreign = create_token(f"http://other.servicebus.windows.net/{HC}/", key_name=ep.key_name,
                           key=ep.key)
    ws = await listen(emulator, session)  # a listener, so that a bad token is the only fault
    async with httpx.AsyncClient(timeout=10) as client:
        refused = await client.get(ep.http_url(), headers={"ServiceBusAuthorization": foreign})
    assert refused.status_code == 401 and "via" not in refused.headers
    assert "another host" in refused.text
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(ep.listen_url(token=foreign))
    assert info.value.status == 401
    # ... and a renewal with such a token closes the channel (1008, policy violation)
    await ws.send_str(encode(RenewToken(token=foreign)))
    assert await closed_with(ws) == 1008


async def test_the_geo_listener_still_interoperates_big_answers_by_rendezvous(
        emulator: RelayEmulator) -> None:
    # GeoRelayListener sends a response over 64 KB (or with headers over 32 KB) by
    # rendezvous, so the stricter relay serves it, and its channel stays open.
    big = b"r" * (INLINE_BODY_LIMIT + 1)

    async def handler(request: RelayRequest) -> RelayResponse:
        headers = {f"X-H{i}": "h" * 1000 for i in range(40)} if "headers" in request.target \
            else {}
        return RelayResponse(status=200, body=big if "body" in request.target else b"ok",
                             headers=headers)

    ep = emulator.endpoint("primary", HC)
    async with GeoRelayListener([ep], handler) as listener, \
            httpx.AsyncClient(timeout=10) as client:
        await listener.wait_connected()
        answers = [await client.post(ep.http_url(target), content=body, headers=auth(emulator))
                   for target, body in (("/body", b"x"), ("/headers", b"x"),
                                        ("/small", b"y" * (INLINE_BODY_LIMIT + 1)))]
        assert listener.connected == [ep.namespace]
    assert [(r.status_code, len(r.content)) for r in answers] == [
        (200, len(big)), (200, 2), (200, 2)]
    assert answers[1].headers["x-h39"] == "h" * 1000


async def test_a_listener_gone_after_its_request_reached_it_gives_504_before_502(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    # The protocol article: 502 "couldn't be routed to any listener", 504 "routed to a
    # listener, but the listener didn't acknowledge receipt in the required time".
    url = emulator.endpoint("primary", HC).http_url()
    async with httpx.AsyncClient(timeout=10) as client:
        # Given a listener that got an inline request, then went away
        ws = await listen(emulator, session)
        sending = asyncio.ensure_future(client.post(url, content=b"x", headers=auth(emulator)))
        assert "method" in (await next_frame(ws))["request"]
        await ws.close()
        # Then the sender gets 504 at once (not after the answer timeout): outcome unknown
        routed = await sending
        # Given a listener told of a rendezvous request that went away before opening it
        ws = await listen(emulator, session)
        sending = asyncio.ensure_future(client.post(url, content=b"y" * (INLINE_BODY_LIMIT + 1),
                                                    headers=auth(emulator)))
        assert set((await next_frame(ws))["request"]) == {"address", "id"}
        await ws.close()
        # Then the sender gets 502: the request never reached a listener
        not_routed = await sending
    assert (routed.status_code, not_routed.status_code) == (504, 502)
    assert "after the request reached it" in routed.text
    assert "before the request reached it" in not_routed.text
    assert not {"via"} & (set(routed.headers) | set(not_routed.headers))


async def test_a_listener_closing_between_a_response_and_its_body_is_gone_not_at_fault(
        emulator: RelayEmulator, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=EMULATOR_LOG)
    ws = await listen(emulator, session)
    async with httpx.AsyncClient(timeout=10) as client:
        sending = asyncio.ensure_future(client.get(emulator.endpoint("primary", HC).http_url(),
                                                   headers=auth(emulator)))
        request = (await next_frame(ws))["request"]
        await ws.send_str(json.dumps({"response": {"requestId": request["id"],
                                                   "statusCode": 200, "body": True}}))
        await ws.close()  # before the body frame
        r = await sending
    assert r.status_code == 504  # it had the request: the outcome is unknown
    assert not [rec for rec in caplog.records if rec.name == EMULATOR_LOG]


async def test_a_request_counts_as_delivered_once_its_write_begins() -> None:
    # A write to a listener can fail after its bytes reached the listener (it read the
    # request and went away): the request must then count as delivered (504, outcome
    # unknown), never as not delivered (502: a client may send a POST again to the
    # other namespace, and it would run twice).
    from gateway.emulator.relay._control import Listener

    class GoneAfterReading:
        def __init__(self) -> None:
            self.written: list[str] = []

        async def send_str(self, data: str) -> None:
            self.written.append(data)
            raise ConnectionResetError("the listener went away")

    ws = GoneAfterReading()
    listener = Listener(ws=ws, path="hc", host="h", expires=0.0)  # type: ignore[arg-type]
    delivered: list[bool] = []
    request = Request(address="sb://h/hc", id="1", request_target="/", method="POST",
                      request_headers={}, remote_endpoint=None, body=False)
    with pytest.raises(ConnectionResetError):
        await listener.send(request, sent=lambda: delivered.append(True))
    assert ws.written and delivered == [True]
