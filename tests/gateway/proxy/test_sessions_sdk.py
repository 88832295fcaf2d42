"""Message sessions through the proxy with the unmodified azure-servicebus SDK: a session
receiver gets its session's messages once each, in the sender's order, from whichever
namespace holds each copy; session state and lock renewal go through ``$management``."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.exceptions import OperationTimeoutError, ServiceBusError

from gateway.geo import AsyncGeoSender, GatewayConfig
from gateway.proxy import Proxy
from gateway.transports import LocalNamespace, LocalTransport
from replication import Message, Mode
from tests.gateway.proxy.conftest import client, local_config

pytestmark = pytest.mark.anyio

SESSIONS = "workflows"


@pytest.fixture
def config(tmp_path: Path, data_dir: Path) -> GatewayConfig:
    """Two embedded local namespaces with a session-enabled queue, passive."""
    for name in ("primary", "secondary"):
        LocalNamespace(name, data_dir=data_dir).create_queue(
            SESSIONS, requires_session=True, lock_duration=5.0)
    return local_config(tmp_path, data_dir, SESSIONS)


@pytest.fixture
async def proxy(config: GatewayConfig) -> AsyncIterator[Proxy]:
    async with Proxy(config, recovery=False, session_gap_timeout=5.0) as p:
        yield p


def msg(session: str, n: int) -> ServiceBusMessage:
    return ServiceBusMessage(f"{session}-{n}", message_id=f"{session}-{n}", session_id=session)


async def send_through(proxy: Proxy, *messages: ServiceBusMessage) -> None:
    async with client(proxy.connection_string()) as c, \
            c.get_queue_sender(SESSIONS) as sender:
        await sender.send_messages(list(messages))


async def receive_session(proxy: Proxy, session_id: str | None = NEXT_AVAILABLE_SESSION
                          ) -> tuple[str, list[str]]:
    """Take a session through the proxy; its id and the MessageIds received (completed)."""
    got: list[str] = []
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(SESSIONS, session_id=session_id, max_wait_time=5) as r:
        sid = r.session.session_id
        while batch := await r.receive_messages(max_message_count=10, max_wait_time=1):
            for m in batch:
                assert m.session_id == sid
                got.append(str(m.message_id))
                await r.complete_message(m)
    return sid, got


async def test_a_session_sent_through_the_proxy_comes_back_in_order(proxy: Proxy) -> None:
    # Given two sessions' messages, interleaved, sent through the proxy
    await send_through(proxy, msg("a", 0), msg("b", 0), msg("a", 1), msg("b", 1),
                       msg("a", 2))
    # When two session receivers take the next available sessions
    first = await receive_session(proxy)
    second = await receive_session(proxy)
    # Then each got its session's messages once, in the sender's order
    assert sorted([first, second]) == [("a", ["a-0", "a-1", "a-2"]), ("b", ["b-0", "b-1"])]


async def test_copies_in_both_namespaces_come_once_in_the_senders_order(
        proxy: Proxy, data_dir: Path, tmp_path: Path) -> None:
    # Given a session whose messages an active geo sender put in both namespaces
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity=SESSIONS, mode=Mode.ACTIVE, data_dir=data_dir,
                              state_dir=tmp_path / "state") as sender:
        for n in range(6):
            await sender.send(Message(f"s-{n}", message_id=f"s-{n}", session_id="s"))
    # When a client receives the session through the proxy
    sid, got = await receive_session(proxy, "s")
    # Then it got each message once, in order, and no copy is left in either namespace
    assert (sid, got) == ("s", [f"s-{n}" for n in range(6)])
    for name in ("primary", "secondary"):
        async with LocalTransport(name, data_dir=data_dir) as local:
            held = await local.accept_session(SESSIONS, "s", max_wait=0.5)
            assert held is not None
            assert await held.receive(max_messages=10, max_wait=0.3) == []
            await held.aclose()


async def test_the_session_state_and_lock_go_through_management(proxy: Proxy) -> None:
    await send_through(proxy, msg("a", 0))
    async with client(proxy.connection_string()) as c:
        async with c.get_queue_receiver(SESSIONS, session_id="a", max_wait_time=5) as r:
            session = r.session
            assert session.locked_until_utc is not None
            assert session.locked_until_utc > datetime.datetime.now(UTC)
            assert await session.get_state() is None
            await session.set_state("step 1")
            assert await session.get_state() == b"step 1"
            first = session.locked_until_utc
            await asyncio.sleep(0.01)
            renewed = await session.renew_lock()
            assert renewed > first and session.locked_until_utc == renewed
            # an abandoned message comes again, first
            [m] = await r.receive_messages(max_message_count=5, max_wait_time=2)
            await r.abandon_message(m)
            [again] = await r.receive_messages(max_message_count=5, max_wait_time=2)
            assert again.message_id == "a-0"
            await r.complete_message(again)
        # The state stays with the session for its next holder
        await send_through(proxy, msg("a", 1))
        async with c.get_queue_receiver(SESSIONS, session_id="a", max_wait_time=5) as r:
            assert await r.session.get_state() == b"step 1"
            [m] = await r.receive_messages(max_message_count=5, max_wait_time=2)
            assert m.message_id == "a-1"
            await r.complete_message(m)


async def test_next_available_with_no_session_times_out(proxy: Proxy) -> None:
    async with client(proxy.connection_string()) as c:
        with pytest.raises(OperationTimeoutError):
            async with c.get_queue_receiver(SESSIONS, session_id=NEXT_AVAILABLE_SESSION,
                                            max_wait_time=0.5) as r:
                await r.receive_messages(max_wait_time=0.5)


async def test_dead_lettering_a_session_message_is_refused_and_it_comes_again(
        proxy: Proxy) -> None:
    await send_through(proxy, msg("a", 0))
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(SESSIONS, session_id="a", max_wait_time=5) as r:
        [m] = await r.receive_messages(max_message_count=5, max_wait_time=2)
        with pytest.raises(ServiceBusError, match="not carried"):
            await r.dead_letter_message(m, reason="bad")
    # The message was abandoned, not lost
    assert await receive_session(proxy, "a") == ("a", ["a-0"])


async def test_a_session_id_that_is_not_a_string_is_refused(proxy: Proxy) -> None:
    await send_through(proxy, msg("1", 0))
    async with client(proxy.connection_string()) as c:
        receiver = c.get_queue_receiver(SESSIONS, session_id=1)  # type: ignore[arg-type]
        with pytest.raises(ServiceBusError, match="session"):
            async with receiver:
                await receiver.receive_messages(max_wait_time=1)
