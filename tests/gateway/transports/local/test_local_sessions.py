"""Session-enabled queues and deferral in the local namespace."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.transports import LocalNamespace, LocalTransport
from replication import Message, MessageRejected, NamespaceUnavailable, SessionLockLost
from tests.conftest import FakeClock

pytestmark = pytest.mark.anyio

Q = "orders"


def m(session: str | None, n: int) -> Message:
    return Message(f"{session}-{n}".encode(), message_id=f"{session}-{n}", session_id=session)


@pytest.fixture
def sessions(namespace: LocalNamespace) -> LocalNamespace:
    namespace.create_queue(Q, lock_duration=10, requires_session=True)
    return namespace


async def test_a_session_is_received_in_order_by_the_one_holding_its_lock(
        sessions: LocalNamespace, transport: LocalTransport, tmp_path: Path,
        clock: FakeClock) -> None:
    # Given two sessions' messages interleaved
    await transport.send(Q, [m("a", 0), m("b", 0), m("a", 1), m("b", 1), m("a", 2)])
    # When a receiver takes the next available session
    a = await transport.accept_session(Q)
    assert a is not None and a.session_id == "a" and a.locked_until == clock.now + 10
    # Then it gets that session's messages only, in order, locked as long as the session
    got = await a.receive(max_messages=10)
    assert [r.message_id for r in got] == ["a-0", "a-1", "a-2"]
    assert {r.message.session_id for r in got} == {"a"}
    assert all(r.locked_until == a.locked_until for r in got)
    # And another receiver cannot take that session, only the next one
    async with LocalTransport("primary", data_dir=tmp_path, clock=clock) as other:
        assert await other.accept_session(Q, "a") is None
        b = await other.accept_session(Q)
        assert b is not None and b.session_id == "b"
        assert [r.message_id for r in await b.receive(max_messages=10)] == ["b-0", "b-1"]
        # nor is any session left
        assert await other.accept_session(Q) is None
        await b.aclose()
    for r in got:
        await transport.complete(r)
    await a.aclose()
    # Once released, the session of the unsettled messages can be taken again
    b2 = await transport.accept_session(Q)
    assert b2 is not None and b2.session_id == "b"
    assert [r.delivery_count for r in await b2.receive(max_messages=10)] == [2, 2]


async def test_an_expired_lock_lets_another_receiver_take_the_session(
        sessions: LocalNamespace, transport: LocalTransport, tmp_path: Path,
        clock: FakeClock) -> None:
    await transport.send(Q, [m("a", 0), m("a", 1)])
    first = await transport.accept_session(Q, "a")
    assert first is not None
    [r0, _] = await first.receive(max_messages=10)
    # Given the first holder renews once, then lets its lock expire
    clock.advance(8)
    assert await first.renew_lock() == clock.now + 10
    clock.advance(10.5)
    # When another receiver takes the session
    async with LocalTransport("primary", data_dir=tmp_path, clock=clock) as other:
        second = await other.accept_session(Q, "a")
        assert second is not None
        # Then it gets every unsettled message again, in order
        got = await second.receive(max_messages=10)
        assert [(r.message_id, r.delivery_count) for r in got] == [("a-0", 2), ("a-1", 2)]
        # And the first holder has lost the lock: renewing, state and settling fail
        with pytest.raises(SessionLockLost, match="accept it again"):
            await first.renew_lock()
        with pytest.raises(SessionLockLost):
            await first.get_state()
        with pytest.raises(MessageRejected, match="lock lost"):
            await transport.complete(r0)
        for r in got:
            await other.complete(r)
        await second.aclose()


async def test_session_state_is_kept_with_the_session(
        sessions: LocalNamespace, transport: LocalTransport) -> None:
    await transport.send(Q, [m("a", 0)])
    async with await transport.accept_session(Q, "a") as s:  # type: ignore[union-attr]
        assert await s.get_state() is None
        await s.set_state(b"step 2")
        assert await s.get_state() == b"step 2"
    # A later holder reads it; None clears it
    s2 = await transport.accept_session(Q, "a")
    assert s2 is not None
    assert await s2.get_state() == b"step 2"
    await s2.set_state(None)
    assert await s2.get_state() is None
    await s2.aclose()


async def test_a_session_queue_refuses_plain_receivers_and_messages_without_session(
        sessions: LocalNamespace, transport: LocalTransport) -> None:
    with pytest.raises(MessageRejected, match="has no session id"):
        await transport.send(Q, [Message(b"x")])
    with pytest.raises(MessageRejected, match="session-enabled"):
        await transport.receive(Q)
    sessions.create_queue("plain")
    await transport.send("plain", [m("a", 0)])  # a plain queue keeps the session id
    [r] = await transport.receive("plain")
    assert r.message.session_id == "a"
    with pytest.raises(MessageRejected, match="not session-enabled"):
        await transport.accept_session("plain")
    [info] = [e for e in sessions.entities() if e.name == Q]
    assert info.requires_session


async def test_accept_session_waits_for_a_message_and_an_outage_raises(
        sessions: LocalNamespace, transport: LocalTransport) -> None:
    assert await transport.accept_session(Q, max_wait=0.05) is None
    sessions.down()
    with pytest.raises(NamespaceUnavailable):
        await transport.accept_session(Q)
    sessions.up()


async def test_deferred_messages_come_back_only_by_sequence_number(
        namespace: LocalNamespace, transport: LocalTransport) -> None:
    # Given a plain queue, and its first message deferred
    namespace.create_queue("plain")
    await transport.send("plain", [Message(b"1", message_id="one"),
                                   Message(b"2", message_id="two")])
    first = (await transport.receive("plain"))[0]
    await transport.defer(first)
    # Then a receive skips it
    [second] = await transport.receive("plain", max_messages=10)
    assert second.message_id == "two"
    await transport.complete(second)
    assert await transport.receive("plain") == []
    # And only its sequence number brings it back, peek-locked; abandon keeps it deferred
    [again] = await transport.receive_deferred("plain", [first.sequence_number])
    assert (again.message_id, again.delivery_count) == ("one", 2)
    with pytest.raises(MessageRejected, match="no deferred message"):
        await transport.receive_deferred("plain", [first.sequence_number])  # locked now
    await transport.abandon(again)
    assert await transport.receive("plain") == []
    [third] = await transport.receive_deferred("plain", [first.sequence_number])
    await transport.complete(third)
    with pytest.raises(MessageRejected, match=str(first.sequence_number)):
        await transport.receive_deferred("plain", [first.sequence_number])


async def test_deferral_in_a_session(sessions: LocalNamespace,
                                     transport: LocalTransport) -> None:
    await transport.send(Q, [m("a", 0), m("a", 1), m("b", 0)])
    s = await transport.accept_session(Q, "a")
    assert s is not None
    [r0, r1] = await s.receive(max_messages=10)
    await transport.defer(r0)
    await transport.complete(r1)
    assert await s.receive(max_messages=10) == []
    # A plain receive_deferred is refused on a session queue; the session's receiver gets it
    with pytest.raises(MessageRejected, match="session receiver"):
        await transport.receive_deferred(Q, [r0.sequence_number])
    [again] = await s.receive_deferred([r0.sequence_number])
    assert again.message_id == "a-0"
    await transport.dead_letter(again, reason="done with it")
    await s.aclose()
    [dead] = await transport.receive(Q + "/$DeadLetterQueue")
    assert (dead.message_id, dead.message.properties["DeadLetterReason"]) == ("a-0",
                                                                              "done with it")


async def test_a_schema_3_file_with_topics_is_upgraded_for_sessions(tmp_path: Path) -> None:
    # Given a namespace file of schema 3 (topics, no sessions): a topic, a subscription,
    # and a message waiting in it
    ns = LocalNamespace("old", data_dir=tmp_path)
    ns.create_topic("t")
    ns.create_subscription("t", "s")
    ns.close()
    async with LocalTransport("old", data_dir=tmp_path) as transport:
        await transport.send("t", [Message(b"kept", message_id="kept")])
    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute("DROP TABLE sessions")
        conn.execute("DROP INDEX messages_by_session")
        conn.execute("ALTER TABLE messages DROP COLUMN session_id")
        conn.execute("ALTER TABLE messages DROP COLUMN deferred")
        conn.execute("ALTER TABLE entities DROP COLUMN requires_session")
        conn.execute("PRAGMA user_version=3")
    # When it is opened again
    ns = LocalNamespace("old", data_dir=tmp_path)
    ns.create_queue(Q, requires_session=True)
    async with LocalTransport("old", data_dir=tmp_path) as transport:
        # Then the subscription's message is still there, and a session-enabled queue works
        [kept] = await transport.receive("t/Subscriptions/s")
        assert kept.message_id == "kept"
        await transport.send(Q, [m("a", 0)])
        session = await transport.accept_session(Q)
        assert session is not None and session.session_id == "a"
        assert [r.message_id for r in await session.receive(max_messages=5)] == ["a-0"]
        await session.aclose()
    ns.close()
    with sqlite3.connect(tmp_path / "old.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (5,)


async def test_an_accept_cancelled_while_its_attempt_runs_gives_the_lock_back(
        sessions: LocalNamespace, transport: LocalTransport, tmp_path: Path) -> None:
    # Given an accept whose attempt runs in a worker thread that the caller's cancel does
    # not wait for (a cancel can land while the thread runs), on a slow disk
    import threading
    import time

    import anyio

    from gateway.transports.local._session_receiver import accept_session

    store = transport._store.sessions
    started, finished = threading.Event(), threading.Event()

    def slow_accept(*args: object, **kw: object) -> object:
        started.set()
        time.sleep(0.2)
        try:
            return store.accept(*args, **kw)  # type: ignore[arg-type]
        finally:
            finished.set()

    slow = type("SlowStore", (), {"accept": staticmethod(slow_accept),
                                  "release": staticmethod(store.release)})()

    async def enter() -> None:
        return None

    async def run(fn: object, *args: object) -> object:
        return await anyio.to_thread.run_sync(lambda: fn(*args))  # type: ignore[operator]

    async def poll(max_wait: float, attempt: object) -> object:
        return await anyio.to_thread.run_sync(attempt, abandon_on_cancel=True)  # type: ignore[arg-type]

    # When the caller gives up while the attempt is in its thread
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as tg:
            async def accept() -> None:
                await accept_session(slow, Q, "a", max_wait=0.0, enter=enter,  # type: ignore[arg-type]
                                     run=run, poll=poll, clock=time.time)  # type: ignore[arg-type]

            tg.start_soon(accept)
            await anyio.to_thread.run_sync(started.wait, 5)
            tg.cancel_scope.cancel()
    await anyio.to_thread.run_sync(finished.wait, 5)
    await anyio.sleep(0.05)
    # Then the lock the attempt took once the caller had gone is given back
    async with LocalTransport("primary", data_dir=tmp_path) as other:
        held = await other.accept_session(Q, "a")
        assert held is not None and held.session_id == "a"
        await held.aclose()
