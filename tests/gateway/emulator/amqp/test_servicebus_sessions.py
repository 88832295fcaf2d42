"""The unmodified azure-servicebus SDK on session-enabled queues and deferred messages."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    MessageNotFoundError,
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from gateway.emulator import Emulator, QueueSpec
from gateway.transports import LocalNamespace

pytestmark = pytest.mark.anyio

SESSIONS = "workflows"  # requires_session, lock 30 s
BRIEF = "brief-locks"  # requires_session, lock 0.5 s
PLAIN = "plain"
UTC = datetime.timezone.utc


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    emu = Emulator({"primary": 0}, data_dir=tmp_path / "data", queues=[
        QueueSpec(name=SESSIONS, requires_session=True),
        QueueSpec(name=BRIEF, requires_session=True, lock_duration=0.5), PLAIN])
    async with emu:
        yield emu


@pytest.fixture
def conn_str(emulator: Emulator) -> str:
    return emulator.connection_string("primary")


def client(conn_str: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0, socket_timeout=0.05)


def msg(session: str | None, n: int) -> ServiceBusMessage:
    return ServiceBusMessage(f"{session}-{n}", message_id=f"{session}-{n}", session_id=session)


async def send(conn_str: str, queue: str, *messages: ServiceBusMessage) -> None:
    async with client(conn_str) as c, c.get_queue_sender(queue, keep_alive=None) as sender:
        await sender.send_messages(list(messages))


async def test_next_available_session_gets_one_session_in_order(conn_str: str) -> None:
    # Given two sessions' messages, interleaved
    await send(conn_str, SESSIONS, msg("a", 0), msg("b", 0), msg("a", 1), msg("b", 1),
               msg("a", 2))
    async with client(conn_str) as c:
        # When a receiver takes the next available session
        async with c.get_queue_receiver(SESSIONS, session_id=NEXT_AVAILABLE_SESSION,
                                        max_wait_time=5) as r:
            # Then it is the oldest message's session, with its lock's expiry
            session = r.session
            assert session.session_id == "a"
            assert session.locked_until_utc is not None
            assert session.locked_until_utc > datetime.datetime.now(UTC)
            got = await r.receive_messages(max_message_count=10, max_wait_time=1)
            # and it gets that session's messages only, in order
            assert [m.message_id for m in got] == ["a-0", "a-1", "a-2"]
            assert {m.session_id for m in got} == {"a"}
            for m in got:
                await r.complete_message(m)
        # And the next receiver gets the other session
        async with c.get_queue_receiver(SESSIONS, session_id=NEXT_AVAILABLE_SESSION,
                                        max_wait_time=5) as r:
            assert r.session.session_id == "b"
            got = await r.receive_messages(max_message_count=10, max_wait_time=1)
            assert [m.message_id for m in got] == ["b-0", "b-1"]
            for m in got:
                await r.complete_message(m)


async def test_a_locked_session_cannot_be_taken_and_none_left_times_out(conn_str: str) -> None:
    await send(conn_str, SESSIONS, msg("a", 0))
    async with client(conn_str) as c, c.get_queue_receiver(SESSIONS, session_id="a") as held:
        assert held.session.session_id == "a"
        async with client(conn_str) as other:
            # Another receiver of the same session is refused
            with pytest.raises(SessionCannotBeLockedError):
                async with other.get_queue_receiver(SESSIONS, session_id="a") as r:
                    await r.receive_messages(max_wait_time=0.5)
            # and with no other session holding a message, next-available times out
            with pytest.raises(OperationTimeoutError):
                async with other.get_queue_receiver(SESSIONS, session_id=NEXT_AVAILABLE_SESSION,
                                                    max_wait_time=0.5) as r:
                    await r.receive_messages(max_wait_time=0.5)


async def test_next_available_waits_for_a_session_to_get_a_message(conn_str: str) -> None:
    async with client(conn_str) as c:
        # Given a receiver waiting for the next available session of an empty queue
        receiver = c.get_queue_receiver(SESSIONS, session_id=NEXT_AVAILABLE_SESSION,
                                        max_wait_time=10)
        opening = asyncio.create_task(receiver.__aenter__())
        await asyncio.sleep(0.3)
        assert not opening.done()
        # When a message of a session arrives
        await send(conn_str, SESSIONS, msg("late", 0), msg("b", 0))
        # Then the receiver gets that session
        await opening
        async with receiver:
            assert receiver.session.session_id == "late"
            [m] = await receiver.receive_messages(max_message_count=5, max_wait_time=1)
            assert m.message_id == "late-0"
            # and a peek sees that session's messages only
            assert [p.message_id for p in await receiver.peek_messages(
                max_message_count=5, sequence_number=1)] == ["late-0"]
            await receiver.complete_message(m)


async def test_session_state_and_renewal(conn_str: str) -> None:
    await send(conn_str, SESSIONS, msg("a", 0))
    async with client(conn_str) as c:
        async with c.get_queue_receiver(SESSIONS, session_id="a") as r:
            session = r.session
            assert await session.get_state() is None
            await session.set_state("step 1")
            assert await session.get_state() == b"step 1"
            first = session.locked_until_utc
            assert first is not None
            await asyncio.sleep(0.01)
            renewed = await session.renew_lock()
            assert renewed > first and session.locked_until_utc == renewed
        # The state stays with the session for its next holder; None clears it
        async with c.get_queue_receiver(SESSIONS, session_id="a") as r:
            assert await r.session.get_state() == b"step 1"
            await r.session.set_state(None)
            assert await r.session.get_state() is None


async def test_an_expired_session_lock_lets_another_receiver_take_the_session(
        conn_str: str) -> None:
    await send(conn_str, BRIEF, msg("a", 0), msg("a", 1))
    async with client(conn_str) as c, client(conn_str) as c2:
        first = c.get_queue_receiver(BRIEF, session_id="a")
        async with first:
            [m0, _] = await first.receive_messages(max_message_count=2, max_wait_time=1)
            # Given the first holder lets its 0.5 s lock expire
            await asyncio.sleep(0.6)
            # When another receiver takes the session
            async with c2.get_queue_receiver(BRIEF, session_id="a") as second:
                got = await second.receive_messages(max_message_count=10, max_wait_time=1)
                # Then it gets both messages again, in order
                assert [(m.message_id, m.delivery_count) for m in got] == [
                    ("a-0", 1), ("a-1", 1)]
                # And the first holder's lock is lost
                with pytest.raises(SessionLockLostError):
                    await first.session.renew_lock()
                with pytest.raises(ServiceBusError):
                    await first.complete_message(m0)
                for m in got:
                    await second.complete_message(m)


async def test_session_rules_are_enforced(conn_str: str) -> None:
    async with client(conn_str) as c:
        # A message without a session id cannot go to a session queue
        with pytest.raises(ServiceBusError):
            async with c.get_queue_sender(SESSIONS, keep_alive=None) as sender:
                await sender.send_messages(ServiceBusMessage("x"))
        # A plain receiver cannot read a session queue, nor a session receiver a plain one
        with pytest.raises(ServiceBusError, match="requires sessions"):
            async with c.get_queue_receiver(SESSIONS) as r:
                await r.receive_messages(max_wait_time=0.5)
        with pytest.raises(ServiceBusError, match="not session-enabled"):
            async with c.get_queue_receiver(PLAIN, session_id="a") as r:
                await r.receive_messages(max_wait_time=0.5)


async def test_a_deferred_message_is_received_by_its_sequence_number(conn_str: str) -> None:
    await send(conn_str, PLAIN, msg(None, 1), msg(None, 2))
    async with client(conn_str) as c, c.get_queue_receiver(PLAIN) as r:
        # Given the first message deferred
        first, second = await r.receive_messages(max_message_count=2, max_wait_time=1)
        await r.defer_message(first)
        await r.complete_message(second)
        # Then a receive does not get it, a peek still shows it
        assert await r.receive_messages(max_wait_time=0.3) == []
        peeked = await r.peek_messages(max_message_count=5, sequence_number=first.sequence_number)
        assert [m.message_id for m in peeked] == ["None-1"]
        # And receive_deferred_messages does, locked; settled through the management link
        seq = first.sequence_number
        assert seq is not None
        [again] = await r.receive_deferred_messages([seq])
        assert (again.message_id, again.lock_token is not None) == ("None-1", True)
        await r.complete_message(again)
        with pytest.raises(MessageNotFoundError):
            await r.receive_deferred_messages([seq])


async def test_deferral_in_a_session(conn_str: str, tmp_path: Path) -> None:
    await send(conn_str, SESSIONS, msg("a", 0), msg("a", 1))
    async with client(conn_str) as c, c.get_queue_receiver(SESSIONS, session_id="a") as r:
        m0, m1 = await r.receive_messages(max_message_count=2, max_wait_time=1)
        await r.defer_message(m0)
        await r.complete_message(m1)
        [again] = await r.receive_deferred_messages([m0.sequence_number or 0])
        assert again.message_id == "a-0" and again.session_id == "a"
        await r.dead_letter_message(again, reason="later")
    ns = LocalNamespace("primary", data_dir=tmp_path / "data")
    [info] = [e for e in ns.entities() if e.name == SESSIONS]
    ns.close()
    assert (info.active_count, info.dead_letter_count) == (0, 1)


async def test_the_async_client_receives_several_deferred_messages_at_once(
        conn_str: str) -> None:
    # Given five deferred messages (issue 23, item 8: a reply the async client read as
    # amqp:decode-error for several sequence numbers)
    await send(conn_str, PLAIN, *(msg(None, n) for n in range(5)))
    async with client(conn_str) as c, c.get_queue_receiver(PLAIN) as r:
        got = await r.receive_messages(max_message_count=5, max_wait_time=1)
        for m in got:
            await r.defer_message(m)
        # When all are received by their sequence numbers in one request
        again = await r.receive_deferred_messages([m.sequence_number or 0 for m in got])
        # Then each comes back, locked
        assert sorted(m.message_id for m in again) == [f"None-{n}" for n in range(5)]
        for m in again:
            await r.complete_message(m)


async def test_a_next_available_receiver_waits_as_long_as_it_asked(conn_str: str) -> None:
    # Given a receiver waiting 9 s for the next available session (issue 23, item 10: the
    # SDK sends its max_wait_time as the link's com.microsoft:timeout, and the service
    # waits that long; a wait cut at 5 s would miss the session)
    async def later() -> None:
        await asyncio.sleep(5.5)
        await send(conn_str, SESSIONS, msg("late", 0))

    task = asyncio.create_task(later())
    async with client(conn_str) as c, c.get_queue_receiver(
            SESSIONS, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=9) as r:
        # When a session gets a message after 5.5 s / Then the receiver gets that session
        assert r.session.session_id == "late"
    await task
