"""The relay client's decisions driven through httpx.MockTransport (logic only; the
failover claims are tested against the relay emulator in test_client_emulator.py)."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from gateway import GatewayHooks
from gateway.errors import ConfigError, MessageRejected, NamespaceUnavailable, OperationTimeout
from gateway.relay import AsyncGeoRelayClient, GeoRelayClient, RelayClientPolicy, RelayEndpoint
from replication._policy import RetryPolicy

KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
A = RelayEndpoint(namespace="a.servicebus.windows.net", path="orders", key_name="send", key=KEY)
B = RelayEndpoint(namespace="b.servicebus.windows.net", path="orders", key_name="send", key=KEY)
Behaviour = Callable[[httpx.Request], httpx.Response]


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"Via": f"1.1 {request.url.host}"},
                          text=request.url.host)


def status(code: int, *, via: bool = False) -> Behaviour:
    return lambda request: httpx.Response(code, headers={"Via": "1.1 x"} if via else {})


def raises(exc: Exception) -> Behaviour:
    def behave(request: httpx.Request) -> httpx.Response:
        raise exc
    return behave


class Hosts:
    """A MockTransport whose answer depends on the host; it records every request."""

    def __init__(self, a: Behaviour, b: Behaviour) -> None:
        self.behaviour = {A.namespace: a, B.namespace: b}
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return self.behaviour[request.url.host](request)

    @property
    def hosts(self) -> list[str]:
        return [r.url.host for r in self.seen]


class Failovers(GatewayHooks):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.calls.append((from_namespace, to_namespace))


def client(hosts: Hosts, **kwargs: object) -> GeoRelayClient:
    kwargs.setdefault("randomize", False)
    return GeoRelayClient(A, B, transport=httpx.MockTransport(hosts), sleep=lambda s: None,
                          **kwargs)


def test_request_goes_to_the_primary_with_a_token_and_the_target() -> None:
    hosts = Hosts(ok, ok)
    with client(hosts) as c:
        r = c.post("/a/b?x=1", content=b"hi", headers={"X-Id": "7"})
    assert r.text == A.namespace and hosts.hosts == [A.namespace]
    sent = hosts.seen[0]
    assert str(sent.url) == "https://a.servicebus.windows.net/orders/a/b?x=1"
    assert sent.headers["ServiceBusAuthorization"].startswith("SharedAccessSignature sr=")
    assert sent.headers["x-id"] == "7" and sent.content == b"hi"


@pytest.mark.parametrize(
    "down",
    [status(503), status(500), status(502), status(404),
     raises(httpx.ConnectError("refused")), raises(httpx.ConnectTimeout("timed out"))],
)
def test_unavailable_primary_fails_over_and_swaps_roles(down: Behaviour) -> None:
    hosts, hooks = Hosts(down, ok), Failovers()
    with client(hosts, hooks=[hooks]) as c:
        first = c.post(content=b"1")
        second = c.post(content=b"2")
        assert c.roles.active == B.namespace
    assert (first.text, second.text) == (B.namespace, B.namespace)
    assert hosts.hosts == [A.namespace, B.namespace, B.namespace]
    assert hooks.calls == [(A.namespace, B.namespace)]


def test_a_listener_answer_with_via_is_returned_whatever_its_status() -> None:
    hosts = Hosts(status(503, via=True), ok)
    with client(hosts) as c:
        assert c.get().status_code == 503
    assert hosts.hosts == [A.namespace]


@pytest.mark.parametrize("code", [401, 403])
def test_unauthorized_is_rejected_and_never_failed_over(code: int) -> None:
    hosts = Hosts(status(code), ok)
    with client(hosts) as c, pytest.raises(MessageRejected, match=f"{code}.*key"):
        c.get()
    assert hosts.hosts == [A.namespace]


def test_post_with_unknown_outcome_is_not_sent_again() -> None:
    hosts = Hosts(status(504), ok)
    with client(hosts) as c, pytest.raises(OperationTimeout, match="idempotent=True"):
        c.post(content=b"pay")
    assert hosts.hosts == [A.namespace]


@pytest.mark.parametrize("down", [status(504), raises(httpx.ReadTimeout("timed out"))])
def test_idempotent_request_with_unknown_outcome_fails_over(down: Behaviour) -> None:
    hosts = Hosts(down, ok)
    with client(hosts) as c:
        assert c.put(content=b"x").text == B.namespace
        assert c.post(content=b"y", idempotent=True).text == B.namespace
    assert hosts.hosts == [A.namespace, B.namespace, B.namespace]


def test_both_down_is_namespace_unavailable_after_bounded_rounds() -> None:
    hosts = Hosts(status(503), raises(httpx.ConnectError("refused")))
    sleeps: list[float] = []
    policy = RelayClientPolicy(retry=RetryPolicy(attempts=3, initial_backoff=0.01,
                                                 max_backoff=0.05))
    c = GeoRelayClient(A, B, randomize=False, policy=policy, sleep=sleeps.append,
                       transport=httpx.MockTransport(hosts))
    with c, pytest.raises(NamespaceUnavailable, match="both namespaces") as info:
        c.get()
    assert hosts.hosts == [A.namespace, B.namespace] * 3
    # No wait before the other namespace, a backoff before each new round.
    assert len(sleeps) == 4 and sleeps[1] == sleeps[3] == 0.0
    assert all(0 <= s <= 0.05 for s in sleeps)
    assert "503" in str(info.value) and "refused" in str(info.value)
    assert c.roles.active == A.namespace  # nothing answered: no swap


def test_unknown_on_one_and_down_on_the_other_is_an_operation_timeout() -> None:
    hosts = Hosts(status(504), status(503))
    with client(hosts, policy=RelayClientPolicy(retry=RetryPolicy(attempts=1))) as c, \
            pytest.raises(OperationTimeout, match="outcome unknown"):
        c.get()
    assert hosts.hosts == [A.namespace, B.namespace]


def test_random_primary_is_seedable_and_spreads() -> None:
    def first(seed: int) -> str:
        return GeoRelayClient(A, B, rng=random.Random(seed)).roles.active

    assert first(1) == first(1)
    assert {first(seed) for seed in range(20)} == {A.namespace, B.namespace}


def test_roles_persist_across_restarts(tmp_path: Path) -> None:
    hosts = Hosts(status(503), ok)
    with client(hosts, state_dir=tmp_path) as c:
        c.get()
    with client(hosts, state_dir=tmp_path) as again:
        assert again.roles.active == B.namespace
        again.get()
    assert hosts.hosts == [A.namespace, B.namespace, B.namespace]
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    assert json.loads(files[0].read_text())["active"] == B.namespace


def test_a_failing_hook_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(GatewayHooks):
        def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
            raise RuntimeError("hook bug")

    with client(Hosts(status(503), ok), hooks=[Broken()]) as c:
        assert c.get().status_code == 200
    assert "hook Broken.on_failover failed" in caplog.text


def test_secrets_stay_out_of_repr_errors_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    hosts = Hosts(status(401), status(503))
    with client(hosts) as c:
        with pytest.raises(MessageRejected) as rejected:
            c.get()
        hosts.behaviour[A.namespace] = status(503)
        with pytest.raises(NamespaceUnavailable) as down:
            c.get()
        text = " ".join([repr(c), str(rejected.value), str(down.value), repr(A), caplog.text])
    token = hosts.seen[0].headers["ServiceBusAuthorization"]
    signature = token.split("sig=")[1].split("&")[0]
    assert KEY not in text and signature not in text and "SharedAccessSignature" not in text


@pytest.mark.parametrize(
    ("args", "match"),
    [((A, A), "both in namespace"), ((A, "Endpoint=sb://b/"), "must be a RelayEndpoint")],
)
def test_bad_endpoints_are_config_errors(args: tuple[object, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GeoRelayClient(*args)  # type: ignore[arg-type]


def test_a_streamed_body_is_refused_because_a_failover_resends_it() -> None:
    with client(Hosts(ok, ok)) as c, pytest.raises(TypeError, match="bytes or str"):
        c.post(content=iter([b"a"]))


@pytest.mark.anyio
async def test_async_client_fails_over_and_keeps_post_safe() -> None:
    hosts, hooks = Hosts(status(502), ok), Failovers()
    async with AsyncGeoRelayClient(A, B, randomize=False, hooks=[hooks],
                                   transport=httpx.MockTransport(hosts)) as c:
        assert (await c.get("/x")).text == B.namespace
        hosts.behaviour[B.namespace] = status(504)
        with pytest.raises(OperationTimeout):
            await c.post(content=b"pay")
    assert hosts.hosts == [A.namespace, B.namespace, B.namespace]
    assert hooks.calls == [(A.namespace, B.namespace)]


def test_clients_are_exported_and_loaded_on_first_use() -> None:
    import subprocess
    import sys

    import gateway.relay

    assert {"AsyncGeoRelayClient", "GeoRelayClient", "RelayClientPolicy"} <= set(
        gateway.relay.__all__)
    assert gateway.relay.GeoRelayClient is GeoRelayClient
    code = ("import sys, gateway.relay; assert 'httpx' not in sys.modules; "
            "gateway.relay.AsyncGeoRelayClient; assert 'httpx' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_tokens_are_cached_and_renewed_before_they_expire() -> None:
    now = [1_000_000.0]
    hosts = Hosts(ok, ok)
    policy = RelayClientPolicy(token_ttl=600, token_renew_before=60)
    with client(hosts, policy=policy, clock=lambda: now[0]) as c:
        c.get()
        c.get()
        now[0] += 539  # 61 s left: still good
        c.get()
        now[0] += 1  # 60 s left: renewed
        c.get()
    tokens = [r.headers["ServiceBusAuthorization"] for r in hosts.seen]
    assert tokens[0] == tokens[1] == tokens[2] != tokens[3]
    assert f"se={int(now[0]) + 600}" in tokens[3]


@pytest.mark.anyio
async def test_a_slow_answer_from_the_old_primary_does_not_swap_roles_back() -> None:
    import anyio

    release = anyio.Event()
    calls = [0]

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == B.namespace:
            return ok(request)
        calls[0] += 1
        if calls[0] == 1:  # the slow request: answered after the failover
            await release.wait()
            return ok(request)
        return httpx.Response(503)

    hooks = Failovers()
    async with AsyncGeoRelayClient(A, B, randomize=False, hooks=[hooks],
                                   transport=httpx.MockTransport(handler)) as c, \
            anyio.create_task_group() as tg:
        slow: list[httpx.Response] = []

        async def send_slow() -> None:
            slow.append(await c.get())

        tg.start_soon(send_slow)
        await anyio.sleep(0.01)
        assert (await c.get()).text == B.namespace  # A's 503: failed over
        release.set()
    assert slow[0].text == A.namespace
    assert c.roles.active == B.namespace and hooks.calls == [(A.namespace, B.namespace)]


def test_persisted_roles_hold_whichever_namespace_the_random_pick_makes_primary(
        tmp_path: Path) -> None:
    other = RelayEndpoint(namespace="b.servicebus.windows.net", path="orders-b",
                          key_name="send", key=KEY)
    hosts = Hosts(status(503), ok)
    with GeoRelayClient(A, other, randomize=False, state_dir=tmp_path, sleep=lambda s: None,
                        transport=httpx.MockTransport(hosts)) as c:
        c.get()  # A -> other
        hosts.behaviour = {A.namespace: ok, other.namespace: status(503)}
        c.get()  # other -> A
        assert c.roles.active == A.namespace and c.roles.generation == 2
    picks = set()
    for seed in range(8):  # both picks occur among these seeds
        restarted = GeoRelayClient(other, A, rng=random.Random(seed), state_dir=tmp_path)
        picks.add(restarted.roles.preferred)
        assert restarted.roles.active == A.namespace
        assert restarted.roles.generation == 2
    assert picks == {A.namespace, other.namespace}
    assert len(list(tmp_path.iterdir())) == 1


def test_a_hybrid_connection_missing_in_both_namespaces_is_rejected_naming_it() -> None:
    hosts = Hosts(status(404), status(404))
    with client(hosts) as c, pytest.raises(MessageRejected) as info:
        c.get()
    assert "hybrid connection 'orders' does not exist in" in str(info.value)
    assert A.namespace in str(info.value) and B.namespace in str(info.value)
    assert c.roles.active == A.namespace  # nothing answered: no swap
