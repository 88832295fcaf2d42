"""A namespace that takes requests and answers nothing (a hung front end).

An idempotent request is hedged to the other namespace once the hung one has not
answered within its deadline; a non-idempotent one probes the namespace and, when the
probe is not answered either, ends in ``OperationTimeout`` without being sent again.
The logic runs on ``httpx.MockTransport``; the claims are then checked against the
relay emulator hung through its control file (``hang``), with real listeners.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import pytest

from gateway import GatewayHooks
from gateway.emulator.relay._emulator import RelayEmulator
from gateway.errors import OperationTimeout
from gateway.relay import (
    AsyncGeoRelayClient,
    GeoRelayClient,
    GeoRelayListener,
    RelayClientPolicy,
    RelayEndpoint,
    RelayRequest,
    RelayResponse,
)
from gateway.relay._policy import AnswerTimer
from gateway.transports.local._control import ControlFile, namespace_files

from .conftest import HC

KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
A = RelayEndpoint(namespace="a.servicebus.windows.net", path="orders", key_name="send", key=KEY)
B = RelayEndpoint(namespace="b.servicebus.windows.net", path="orders", key_name="send", key=KEY)
FAST = RelayClientPolicy(answer_deadline=0.05, probe_timeout=0.05)
Behaviour = Callable[[httpx.Request], Awaitable[httpx.Response]]

pytestmark = pytest.mark.anyio


async def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"Via": f"1.1 {request.url.host}"},
                          text=request.url.host)


async def hung(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def slow(seconds: float) -> Behaviour:
    async def behave(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(seconds)
        return await ok(request)
    return behave


async def relay_itself(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, text="no such hybrid connection")  # what a probe gets


class Hosts:
    """An async MockTransport: a behaviour per host for requests, another for probes
    (requests to the namespace's root); it records (host, path) of each."""

    def __init__(self, a: Behaviour, b: Behaviour, *, probe_a: Behaviour = relay_itself,
                 probe_b: Behaviour = relay_itself) -> None:
        self.behaviour = {A.namespace: a, B.namespace: b}
        self.probes = {A.namespace: probe_a, B.namespace: probe_b}
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host[0], request.url.path))
        if request.url.path == "/":
            assert "ServiceBusAuthorization" not in request.headers  # a probe has no token
            return await self.probes[request.url.host](request)
        return await self.behaviour[request.url.host](request)


class Failovers(GatewayHooks):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.calls.append((from_namespace, to_namespace))


def client(hosts: Hosts, policy: RelayClientPolicy = FAST, **kwargs: object
           ) -> AsyncGeoRelayClient:
    return AsyncGeoRelayClient(A, B, randomize=False, policy=policy,
                               transport=httpx.MockTransport(hosts), **kwargs)  # type: ignore[arg-type]


async def test_an_idempotent_request_to_a_hung_namespace_is_hedged_and_roles_swap() -> None:
    hosts, hooks = Hosts(hung, ok), Failovers()
    async with client(hosts, hooks=[hooks]) as c:
        first = await c.get("/x")
        second = await c.put("/x", content=b"v")
    assert (first.text, second.text) == (B.namespace, B.namespace)
    assert hosts.seen == [("a", "/orders/x"), ("b", "/orders/x"), ("b", "/orders/x")]
    assert hooks.calls == [(A.namespace, B.namespace)]


async def test_a_post_to_a_hung_namespace_is_an_operation_timeout_never_resent() -> None:
    # Given a namespace that answers neither the request nor the probe
    hosts, hooks = Hosts(hung, ok, probe_a=hung), Failovers()
    async with client(hosts, hooks=[hooks]) as c:
        with pytest.raises(OperationTimeout, match=r"hangs.*not sent again"):
            await c.post("/pay", content=b"1")
        # Then it was not sent to the other namespace, but the next request goes there
        assert hosts.seen == [("a", "/orders/pay"), ("a", "/")]
        assert (await c.post("/pay", content=b"2")).text == B.namespace
    assert hooks.calls == [(A.namespace, B.namespace)]


async def test_a_post_to_a_slow_listener_waits_for_its_answer() -> None:
    # The relay answers the probe: the namespace is alive, its listener slow
    hosts, hooks = Hosts(slow(0.3), ok), Failovers()
    async with client(hosts, hooks=[hooks]) as c:
        r = await c.post("/pay", content=b"1")
    assert r.text == A.namespace and hooks.calls == []
    assert hosts.seen == [("a", "/orders/pay"), ("a", "/")]


async def test_a_hedged_request_takes_the_first_answer_and_keeps_roles_when_it_is_the_active(
        ) -> None:
    hosts, hooks = Hosts(slow(0.2), slow(2.0)), Failovers()
    async with client(hosts, hooks=[hooks]) as c:
        r = await c.get()
    assert r.text == A.namespace and hooks.calls == [] and c.roles.active == A.namespace
    assert hosts.seen == [("a", "/orders"), ("b", "/orders")]


async def test_the_deadline_grows_with_what_the_namespace_normally_takes() -> None:
    # Both namespaces take 0.2 s: the first request is hedged (nothing is known yet)
    # and A, asked first, answers first; after that A's deadline covers 0.2 s.
    hosts = Hosts(slow(0.2), slow(0.2))
    async with client(hosts) as c:
        await c.get()
        hedged = len(hosts.seen)
        for _ in range(3):
            await c.get()
    assert hedged == 2
    assert hosts.seen[hedged:] == [("a", "/orders")] * 3


async def test_a_won_hedge_leaves_the_callers_task_as_it_was() -> None:
    # The hedge's answer interrupts the caller's wait by cancelling its task, then takes
    # that cancellation back: the caller's own timeouts and cancellations still work.
    hosts = Hosts(hung, ok)
    async with client(hosts) as c:
        task = asyncio.current_task()
        assert task is not None
        if hasattr(asyncio, "timeout"):  # Python 3.11+: a timeout scope of the caller's
            async with asyncio.timeout(5):
                r = await c.get()  # in this very task
            assert task.cancelling() == 0
        else:  # pragma: no cover - Python 3.10
            r = await c.get()
        assert r.text == B.namespace
        await asyncio.sleep(0.01)  # no cancellation left pending


async def test_cancelling_a_hedged_request_cancels_both_attempts() -> None:
    hosts = Hosts(hung, hung)
    async with client(hosts) as c:
        before = asyncio.all_tasks()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.get(), 0.5)  # the hedge (at 0.05 s) hangs too
        await asyncio.sleep(0)
        assert asyncio.all_tasks() <= before  # the hedge's task is gone too
    assert [host for host, _ in hosts.seen][:1] == ["a"]


def test_answer_timer_is_rfc_6298_kept_between_floor_and_ceiling() -> None:
    timer = AnswerTimer()
    assert timer.deadline(0.5, 65) == 0.5  # nothing known: the floor
    timer.observe(0.002)
    assert timer.deadline(0.5, 65) == 0.5  # a fast namespace: the floor
    for _ in range(20):
        timer.observe(1.0)
    assert 1.0 < timer.deadline(0.5, 65) < 2.0
    for _ in range(20):
        timer.observe(100.0)
    assert timer.deadline(0.5, 65) == 65


@pytest.mark.parametrize("kwargs", [{"answer_deadline": 0}, {"probe_timeout": -1},
                                    {"answer_deadline": 70}])
def test_bad_deadlines_are_config_errors(kwargs: dict[str, float]) -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError, match="relay client"):
        RelayClientPolicy(**kwargs)


def test_the_sync_client_hedges_too() -> None:
    hosts = Hosts(hung, ok, probe_a=hung)
    with GeoRelayClient(A, B, randomize=False, policy=FAST,
                        transport=httpx.MockTransport(hosts)) as c:
        assert c.get().text == B.namespace
        c.roles  # noqa: B018 - readable from the caller's thread
    assert hosts.seen == [("a", "/orders"), ("b", "/orders")]


# -- against the relay emulator, hung through its control file ------------------------


async def hung_applied(emulator: RelayEmulator) -> None:
    """Wait until the emulator obeys the primary's ``hang`` (it polls every 0.1 s)."""
    for _ in range(500):  # 10 s
        if emulator.control_state("primary").hang:
            return
        await asyncio.sleep(0.02)
    pytest.fail("the emulator did not apply the hang")


async def test_a_hung_emulated_namespace_fails_over_gets_and_times_out_a_post_once(
        emulator: RelayEmulator, tmp_path: Path) -> None:
    executed: list[tuple[str, str]] = []

    async def service(request: RelayRequest) -> RelayResponse:
        executed.append((request.namespace.split(":")[1], request.method))
        return RelayResponse(body=request.namespace.encode())

    primary, secondary = emulator.endpoint("primary", HC), emulator.endpoint("secondary", HC)
    names = {primary.namespace: "primary", secondary.namespace: "secondary"}
    async with GeoRelayListener([primary, secondary], service) as listener:
        await listener.wait_connected()
        ControlFile(namespace_files("primary", tmp_path)[1]).update(hang=True)
        await hung_applied(emulator)
        # A POST first: the client (default policy) finds the primary hung
        async with AsyncGeoRelayClient(primary, secondary, randomize=False) as c:
            started = time.monotonic()
            with pytest.raises(OperationTimeout, match="hangs"):
                await c.post("/pay", content=b"1")
            post_took = time.monotonic() - started
        # A GET from a new client: hedged to the secondary
        async with AsyncGeoRelayClient(primary, secondary, randomize=False) as c:
            started = time.monotonic()
            r = await c.get("/item")
            get_took = time.monotonic() - started
            assert names[r.request.url.netloc.decode()] == "secondary"
            assert c.roles.active == secondary.namespace
    # Nothing reached a listener through the hung primary, and the POST was not resent;
    # both ended long before the 65 s read timeout (the drill measures the times)
    port = str(secondary.namespace.split(":")[1])
    assert executed == [(port, "GET")]
    assert post_took < 10 and get_took < 10


async def test_the_sync_client_against_a_hung_emulated_namespace(
        emulator: RelayEmulator, tmp_path: Path) -> None:
    async def service(request: RelayRequest) -> RelayResponse:
        return RelayResponse(body=b"answered")

    primary, secondary = emulator.endpoint("primary", HC), emulator.endpoint("secondary", HC)
    async with GeoRelayListener([primary, secondary], service) as listener:
        await listener.wait_connected()
        ControlFile(namespace_files("primary", tmp_path)[1]).update(hang=True)
        await hung_applied(emulator)
        with GeoRelayClient(primary, secondary, randomize=False) as c:
            r = await anyio.to_thread.run_sync(lambda: c.delete("/x"))
            with pytest.raises(OperationTimeout):  # the primary, tried first again
                c2 = GeoRelayClient(primary, secondary, randomize=False)
                try:
                    await anyio.to_thread.run_sync(lambda: c2.post(content=b"p"))
                finally:
                    c2.close()
    assert r.content == b"answered" and r.request.url.netloc.decode() == secondary.namespace
