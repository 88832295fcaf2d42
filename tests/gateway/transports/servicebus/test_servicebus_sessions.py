"""Sessions and deferral through ServiceBusTransport (azure-servicebus on the emulator)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.emulator import Emulator, QueueSpec
from gateway.transports.servicebus import ServiceBusTransport
from replication import Message, MessageRejected, SessionLockLost

pytestmark = pytest.mark.anyio

Q = "flows"


@pytest.fixture
async def sb(tmp_path: Path) -> AsyncIterator[ServiceBusTransport]:
    queues = [QueueSpec(name=Q, requires_session=True), "plain"]
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=queues) as emu, \
            ServiceBusTransport.from_connection_string(
                emu.connection_string("primary"), name="primary") as transport:
        yield transport


def m(session: str, n: int) -> Message:
    return Message(f"{session}-{n}".encode(), message_id=f"{session}-{n}", session_id=session,
                   properties={"n": n})


async def test_a_session_through_the_transport(sb: ServiceBusTransport, tmp_path: Path) -> None:
    # Given two sessions' messages sent with their session ids
    await sb.send(Q, [m("a", 0), m("b", 0), m("a", 1)])
    # When the next available session is accepted
    s = await sb.accept_session(Q, max_wait=2)
    assert s is not None and s.session_id == "a" and s.locked_until > 0
    # Then its messages come in order, with their session id, settled through the transport
    got = await s.receive(max_messages=10, max_wait=1)
    assert [(r.message_id, r.message.session_id) for r in got] == [("a-0", "a"), ("a-1", "a")]
    # (a receive in between keeps them settleable: they are locked as long as the session)
    assert await s.receive(max_messages=1, max_wait=0.3) == []
    # and its state and lock can be used
    await s.set_state(b"half way")
    assert await s.get_state() == b"half way"
    before = s.locked_until
    assert await s.renew_lock() >= before
    # And the same session cannot be taken twice; the other can
    assert await sb.accept_session(Q, "a", max_wait=0.3) is None
    other = await sb.accept_session(Q, max_wait=2)
    assert other is not None and other.session_id == "b"
    await other.aclose()
    for r in got:
        await sb.complete(r)
    await s.aclose()
    # And once no session has a message, next available finds none
    b = await sb.accept_session(Q, "b", max_wait=2)
    assert b is not None
    for r in await b.receive(max_messages=10, max_wait=1):
        await sb.complete(r)
    await b.aclose()
    assert await sb.accept_session(Q, max_wait=0.3) is None


async def test_a_lost_session_lock_is_session_lock_lost(tmp_path: Path) -> None:
    queues = [QueueSpec(name=Q, requires_session=True, lock_duration=0.3)]
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=queues) as emu, \
            ServiceBusTransport.from_connection_string(
                emu.connection_string("primary"), name="primary") as sb, \
            ServiceBusTransport.from_connection_string(
                emu.connection_string("primary"), name="primary") as sb2:
        await sb.send(Q, [m("a", 0)])
        s = await sb.accept_session(Q, "a", max_wait=1)
        assert s is not None
        # Given the lock expires and another receiver takes the session
        s2 = None
        while s2 is None:
            s2 = await sb2.accept_session(Q, "a", max_wait=0.5)
        # Then the first holder's renewal raises SessionLockLost
        with pytest.raises(SessionLockLost):
            await s.renew_lock()
        await s.aclose()
        await s2.aclose()


async def test_defer_and_receive_deferred(sb: ServiceBusTransport) -> None:
    await sb.send("plain", [Message(b"1", message_id="one"), Message(b"2", message_id="two")])
    first, second = await sb.receive("plain", max_messages=2, max_wait=1)
    await sb.defer(first)
    await sb.complete(second)
    assert await sb.receive("plain", max_wait=0.3) == []
    [again] = await sb.receive_deferred("plain", [first.sequence_number])
    assert again.message_id == "one" and again.lock_token is not None
    await sb.complete(again)
    with pytest.raises(MessageRejected):
        await sb.receive_deferred("plain", [first.sequence_number])
