"""GeoRelayClient and AsyncGeoRelayClient against the real relay emulator, with real
listeners on the control channel (aiohttp WebSockets speaking the protocol)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway import GatewayHooks
from gateway.emulator.relay._emulator import RelayEmulator
from gateway.errors import MessageRejected, OperationTimeout
from gateway.relay import AsyncGeoRelayClient, GeoRelayClient, RelayEndpoint, Request, Response
from gateway.relay.protocol import decode, encode
from gateway.transports.local._control import ControlFile, namespace_files

from .conftest import HC

pytestmark = pytest.mark.anyio


class Listener:
    """A listener on one namespace: answers each request with the namespace's name
    (or never, when ``answer`` is False) and records what it got."""

    def __init__(self, endpoint: RelayEndpoint, name: str, *, answer: bool = True) -> None:
        self.endpoint, self.name, self.answer = endpoint, name, answer
        self.requests: list[tuple[str, bytes]] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self, session: aiohttp.ClientSession) -> Listener:
        ws = await session.ws_connect(self.endpoint.listen_url(token=self.endpoint.token()))
        self.task = asyncio.create_task(self._serve(ws))
        return self

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
        async for msg in ws:
            request = decode(msg.data)
            if not isinstance(request, Request):
                continue
            body = (await ws.receive()).data if request.body else b""
            self.requests.append((request.method or "", body))
            if self.answer:
                await ws.send_str(encode(Response(request_id=request.id, body=True)))
                await ws.send_bytes(self.name.encode())


class Failovers(GatewayHooks):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.calls.append((from_namespace, to_namespace))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def listeners(emu: RelayEmulator, session: aiohttp.ClientSession, *,
                    primary_answers: bool = True) -> tuple[Listener, Listener]:
    return (await Listener(emu.endpoint("primary", HC), "primary",
                           answer=primary_answers).start(session),
            await Listener(emu.endpoint("secondary", HC), "secondary").start(session))


async def take_down(emu: RelayEmulator, data_dir: Path, listener: Listener) -> None:
    """``geogateway namespace down primary``, and wait until the emulator obeyed."""
    ControlFile(namespace_files("primary", data_dir)[1]).update(down=True)
    assert listener.task is not None
    with anyio.fail_after(5):
        with contextlib.suppress(Exception):
            await listener.task  # the emulator closes the control channel when down


def pair(emu: RelayEmulator) -> tuple[RelayEndpoint, RelayEndpoint]:
    return emu.endpoint("primary", HC), emu.endpoint("secondary", HC)


async def test_primary_namespace_down_is_served_by_the_secondary_and_roles_swap(
        emulator: RelayEmulator, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    from gateway.relay import RelayClientPolicy

    primary_listener, secondary_listener = await listeners(emulator, session)
    hooks = Failovers()
    primary, secondary = pair(emulator)
    state = tmp_path / "state"
    # (answers are waited for 5 s before a GET is hedged: on a loaded machine the first
    # GET, opening its connection, took longer than the default 0.5 s and was hedged)
    patient = RelayClientPolicy(answer_deadline=5.0)
    async with AsyncGeoRelayClient(primary, secondary, randomize=False, hooks=[hooks],
                                   state_dir=state, policy=patient) as client:
        before = await client.get("/status")
        await take_down(emulator, tmp_path, primary_listener)
        # Its pooled connection to the primary may be reset under this request: a GET
        # may go again whatever the stage it failed at.
        during = await client.get("/status")
        after = await client.post("/orders", content=b"order-1")
        active = client.roles.active
    assert (before.text, during.text, after.text) == ("primary", "secondary", "secondary")
    assert during.status_code == 200 and "via" in during.headers
    assert active == secondary.namespace
    assert hooks.calls == [(primary.namespace, secondary.namespace)]
    assert secondary_listener.requests == [("GET", b""), ("POST", b"order-1")]
    # A client started now keeps the roles; one without them fails a POST over, as
    # its connection to the primary is refused (nothing was sent).
    async with AsyncGeoRelayClient(primary, secondary, randomize=False,
                                   state_dir=state) as restarted:
        assert restarted.roles.active == secondary.namespace
    async with AsyncGeoRelayClient(primary, secondary, randomize=False) as fresh:
        assert (await fresh.post(content=b"order-2")).text == "secondary"
        assert fresh.roles.active == secondary.namespace


async def test_no_listener_on_the_primary_fails_over(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    secondary_listener = await Listener(emulator.endpoint("secondary", HC),
                                        "secondary").start(session)
    async with AsyncGeoRelayClient(*pair(emulator), randomize=False) as client:
        r = await client.post(content=b"x")  # the relay's 502: nothing was delivered
    assert r.text == "secondary" and secondary_listener.requests == [("POST", b"x")]


async def test_a_bad_key_is_rejected_and_not_failed_over(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    primary_listener, secondary_listener = await listeners(emulator, session)
    primary, secondary = (replace(ep, key="d3Jvbmcta2V5") for ep in pair(emulator))
    async with AsyncGeoRelayClient(primary, secondary, randomize=False) as client:
        with pytest.raises(MessageRejected, match="401"):
            await client.get()
        assert client.roles.active == primary.namespace
    assert primary_listener.requests == secondary_listener.requests == []


async def test_post_whose_answer_times_out_is_not_sent_twice(
        tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with RelayEmulator({"primary": 0, "secondary": 0}, [HC], data_dir=tmp_path,
                             answer_timeout=0.3) as emu:
        primary_listener, secondary_listener = await listeners(emu, session,
                                                               primary_answers=False)
        async with AsyncGeoRelayClient(*pair(emu), randomize=False) as client:
            with pytest.raises(OperationTimeout, match="not idempotent"):
                await client.post("/pay", content=b"pay-1")
            assert primary_listener.requests == [("POST", b"pay-1")]
            assert secondary_listener.requests == []
            # The same 504 on an idempotent request goes to the other namespace.
            r = await client.put("/pay", content=b"pay-2")
    assert r.text == "secondary" and secondary_listener.requests == [("PUT", b"pay-2")]


async def test_sync_client_fails_over_when_the_primary_goes_down(
        emulator: RelayEmulator, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    primary_listener, secondary_listener = await listeners(emulator, session)
    hooks = Failovers()
    primary, secondary = pair(emulator)
    # The blocking client runs in a worker thread; the emulator on this event loop.
    client = GeoRelayClient(primary, secondary, randomize=False, hooks=[hooks])
    with client:
        before = await anyio.to_thread.run_sync(client.get)
        await take_down(emulator, tmp_path, primary_listener)
        during = await anyio.to_thread.run_sync(lambda: client.delete("/s"))
    assert (before.text, during.text) == ("primary", "secondary")
    assert client.roles.active == secondary.namespace
    assert hooks.calls == [(primary.namespace, secondary.namespace)]
    assert secondary_listener.requests == [("DELETE", b"")]


async def test_sync_post_whose_answer_times_out_is_not_sent_twice(
        tmp_path: Path, session: aiohttp.ClientSession) -> None:
    async with RelayEmulator({"primary": 0, "secondary": 0}, [HC], data_dir=tmp_path,
                             answer_timeout=0.3) as emu:
        primary_listener, secondary_listener = await listeners(emu, session,
                                                               primary_answers=False)
        with GeoRelayClient(*pair(emu), randomize=False) as client, \
                pytest.raises(OperationTimeout, match="not idempotent"):
            await anyio.to_thread.run_sync(lambda: client.post(content=b"pay"))
    assert primary_listener.requests == [("POST", b"pay")]
    assert secondary_listener.requests == []


async def test_with_the_geo_listener_large_bodies_go_through_and_failover_keeps_serving(
        emulator: RelayEmulator, tmp_path: Path) -> None:
    from gateway.relay import GeoRelayListener, RelayRequest, RelayResponse

    async def echo(request: RelayRequest) -> RelayResponse:
        return RelayResponse(headers={"X-Namespace": request.namespace},
                             body=request.body[::-1])

    primary, secondary = pair(emulator)
    body = bytes(range(256)) * 1024  # 256 KB: over 64 KB, so through a rendezvous
    async with GeoRelayListener([primary, secondary], echo) as listener, \
            AsyncGeoRelayClient(primary, secondary, randomize=False) as client:
        await listener.wait_connected()
        big = await client.put("/blob", content=body)
        ControlFile(namespace_files("primary", tmp_path)[1]).update(down=True)
        for _ in range(50):  # until the emulator obeyed (it polls the control file)
            await asyncio.sleep(0.05)
            if emulator.listener_count("primary", HC) == 0:
                break
        after = await client.put("/blob", content=b"abc")
    assert big.status_code == 200 and big.content == body[::-1]
    assert big.headers["x-namespace"] == primary.namespace
    assert after.content == b"cba" and after.headers["x-namespace"] == secondary.namespace
    assert client.roles.active == secondary.namespace


async def test_tokens_are_renewed_before_the_relay_would_refuse_them(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    from gateway.relay import RelayClientPolicy

    await listeners(emulator, session)
    renewing = RelayClientPolicy(token_ttl=2.0, token_renew_before=1.0)
    async with AsyncGeoRelayClient(*pair(emulator), randomize=False,
                                   policy=renewing) as client:
        first = await client.get()
        await asyncio.sleep(1.2)  # less than 1 s left on the first token: a new one
        second = await client.get()
        await asyncio.sleep(1.2)
        third = await client.get()
    assert [r.text for r in (first, second, third)] == ["primary"] * 3
    # The check can fail: a token kept past its expiry is refused, and not failed over.
    late = RelayClientPolicy(token_ttl=1.0, token_renew_before=0.0)
    async with AsyncGeoRelayClient(*pair(emulator), randomize=False, policy=late,
                                   clock=lambda: 0.0) as stale:
        with pytest.raises(MessageRejected, match="401"):
            await stale.get()


async def test_sync_client_a_bad_key_is_rejected_and_not_failed_over(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    primary_listener, secondary_listener = await listeners(emulator, session)
    primary, secondary = (replace(ep, key="d3Jvbmcta2V5") for ep in pair(emulator))
    with GeoRelayClient(primary, secondary, randomize=False) as client, \
            pytest.raises(MessageRejected, match="401"):
        await anyio.to_thread.run_sync(client.get)
    assert client.roles.active == primary.namespace
    assert primary_listener.requests == secondary_listener.requests == []


async def test_a_tls_failure_fails_over_even_a_post(
        emulator: RelayEmulator, session: aiohttp.ClientSession) -> None:
    _, secondary_listener = await listeners(emulator, session)
    primary, secondary = pair(emulator)
    # https to the emulator's plain port: the TLS handshake fails before anything is sent.
    tls_primary = replace(primary, plain=False)
    async with AsyncGeoRelayClient(tls_primary, secondary, randomize=False) as client:
        r = await client.post(content=b"once")
        assert client.roles.active == secondary.namespace
    assert r.text == "secondary" and secondary_listener.requests == [("POST", b"once")]
