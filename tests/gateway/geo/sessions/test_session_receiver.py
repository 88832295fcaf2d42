"""The geo session receiver: a session's messages in the sender's order from both
namespaces, on real local namespaces."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from gateway import GeoSessionReceiver
from gateway.aio import AsyncGeoReceiver, AsyncGeoSender, AsyncGeoSessionReceiver
from gateway.geo.sessions._state import SessionState
from gateway.transports import FaultyTransport, LocalNamespace, LocalTransport
from gateway.transports.base import ReceivedMessage
from replication import SESSION_POSITION, Message
from tests.gateway.conftest import Recorder, wait_for

pytestmark = pytest.mark.anyio

Q = "flows"


class Sessions:
    """Two local namespaces with the session-enabled queue ``flows``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ns = {n: LocalNamespace(n, data_dir=data_dir) for n in ("primary", "secondary")}
        for namespace in self.ns.values():
            namespace.create_queue(Q, lock_duration=5, requires_session=True)

    async def put(self, name: str, session: str, *positions: int) -> None:
        """Send stamped messages straight to one namespace, as a geo sender would have."""
        async with LocalTransport(name, data_dir=self.data_dir) as t:
            await t.send(Q, [stamped(session, p) for p in positions])

    async def raw_state(self, name: str, session: str) -> bytes | None:
        async with LocalTransport(name, data_dir=self.data_dir) as t:
            s = await t.accept_session(Q, session)
            assert s is not None
            try:
                return await s.get_state()
            finally:
                await s.aclose()


def stamped(session: str, position: int) -> Message:
    return Message(f"{session}:{position}".encode(), message_id=f"{session}-{position}",
                   session_id=session, properties={SESSION_POSITION: position})


@pytest.fixture
def sessions(tmp_path: Path) -> Sessions:
    return Sessions(tmp_path / "namespaces")


Factory = Callable[..., AsyncGeoSessionReceiver]


@pytest.fixture
async def make(sessions: Sessions, tmp_path: Path) -> AsyncIterator[Factory]:
    made: list[AsyncGeoSessionReceiver] = []

    def factory(**kw: Any) -> AsyncGeoSessionReceiver:
        kw.setdefault("primary", "local://primary")
        kw.setdefault("secondary", "local://secondary")
        kw.setdefault("entity", Q)
        kw.setdefault("data_dir", sessions.data_dir)
        kw.setdefault("dedup_store", tmp_path / "dedup.db")
        kw.setdefault("state_dir", tmp_path / "state")
        kw.setdefault("poll_wait", 0.05)
        r = AsyncGeoSessionReceiver(**kw)
        made.append(r)
        return r

    yield factory
    for r in made:
        await r.aclose()


class Handled:
    """A handler recording (session, position) in the order it was called."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    async def __call__(self, m: ReceivedMessage) -> None:
        self.seen.append((m.message.session_id or "", int(m.message.properties[SESSION_POSITION])))

    def of(self, session: str) -> list[int]:
        return [p for s, p in self.seen if s == session]


async def run_until(receiver: AsyncGeoSessionReceiver, handler: Any,
                    done: Callable[[], bool], **kw: Any) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(handler, stop=stop, **kw))
    try:
        await wait_for(done, within=15)
    finally:
        stop.set()
        await task


async def test_a_session_split_across_namespaces_comes_out_in_the_senders_order(
        sessions: Sessions, make: Factory) -> None:
    # Given a session whose later half landed in the secondary (a failover), the
    # secondary's copies sitting in front of the primary's
    await sessions.put("secondary", "a", 5, 6, 7, 8, 9)
    await sessions.put("primary", "a", 0, 1, 2, 3, 4)
    handled = Handled()
    # When the geo session receiver handles it
    receiver = make()
    await run_until(receiver, handled, lambda: len(handled.seen) == 10)
    # Then the handler saw the sender's order
    assert handled.of("a") == list(range(10))
    assert receiver.stats.delivered == 10 and receiver.stats.gaps == 0


async def test_a_plain_geo_receiver_does_not_keep_that_order(
        sessions: Sessions, tmp_path: Path) -> None:
    # Given the same split session in two plain queues, the primary down for a while
    for ns in sessions.ns.values():
        ns.create_queue("plain")
    for name, positions in (("secondary", range(5, 10)), ("primary", range(5))):
        async with LocalTransport(name, data_dir=sessions.data_dir) as t:
            await t.send("plain", [stamped("a", p) for p in positions])
    sessions.ns["primary"].down()
    handled = Handled()
    async with AsyncGeoReceiver(primary="local://primary", secondary="local://secondary",
                                entity="plain", data_dir=sessions.data_dir,
                                dedup_store=tmp_path / "plain-dedup.db",
                                poll_wait=0.05) as receiver:
        stop = asyncio.Event()
        task = asyncio.create_task(receiver.run(handled, stop=stop))  # type: ignore[arg-type]
        await wait_for(lambda: len(handled.seen) == 5)
        sessions.ns["primary"].up()
        await wait_for(lambda: len(handled.seen) == 10)
        stop.set()
        await task
    # Then it delivered every message once, but the secondary's before the primary's
    assert handled.of("a") == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4]


async def test_active_duplicates_are_handed_over_once(sessions: Sessions, make: Factory) -> None:
    await sessions.put("primary", "a", 0, 1, 2, 3)
    await sessions.put("secondary", "a", 0, 1, 2, 3)
    handled = Handled()
    receiver = make()
    await run_until(receiver, handled, lambda: receiver.stats.duplicates_suppressed == 4)
    assert handled.of("a") == [0, 1, 2, 3]
    assert sessions.ns["primary"].entities()[0].active_count == 0
    assert sessions.ns["secondary"].entities()[0].active_count == 0


async def test_positions_in_a_namespace_that_is_down_are_waited_for(
        sessions: Sessions, make: Factory) -> None:
    # Given the first half of a session in the primary, which is down
    await sessions.put("primary", "a", 0, 1, 2)
    await sessions.put("secondary", "a", 3, 4)
    sessions.ns["primary"].down()
    handled = Handled()
    receiver = make(gap_timeout=30)
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(handled, stop=stop))
    # When the receiver has held the secondary's messages for a while
    await wait_for(lambda: receiver.session_id == "a")
    await asyncio.sleep(0.3)
    assert handled.seen == []
    # Then once the primary is back, everything comes in order
    sessions.ns["primary"].up()
    await wait_for(lambda: len(handled.seen) == 5)
    stop.set()
    await task
    assert handled.of("a") == [0, 1, 2, 3, 4]


async def test_a_gap_is_reported_after_its_wait_and_its_message_is_late(
        sessions: Sessions, make: Factory) -> None:
    await sessions.put("primary", "a", 0, 2, 3)
    hooks = Recorder()
    hooks.on_session_gap = lambda **kw: hooks.events.append(("gap", kw))  # type: ignore[method-assign]
    hooks.on_session_late = lambda **kw: hooks.events.append(("late", kw))  # type: ignore[method-assign]
    handled = Handled()
    receiver = make(gap_timeout=0.3, hooks=hooks)
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(handled, stop=stop, session_idle_timeout=5))
    await wait_for(lambda: len(handled.seen) == 3)
    assert handled.of("a") == [0, 2, 3]
    [gap] = hooks.named("gap")
    assert (gap["session_id"], gap["first"], gap["last"], gap["entity"]) == ("a", 1, 1, Q)
    assert gap["waited"] >= 0.3
    # When the missing message arrives after all
    await sessions.put("secondary", "a", 1)
    await wait_for(lambda: len(handled.seen) == 4)
    stop.set()
    await task
    assert handled.of("a") == [0, 2, 3, 1]
    assert [e["position"] for e in hooks.named("late")] == [1]
    assert (receiver.stats.gaps, receiver.stats.missing, receiver.stats.late) == (1, 1, 1)


async def test_a_failed_handler_gets_the_same_message_again_before_the_next(
        sessions: Sessions, make: Factory) -> None:
    await sessions.put("primary", "a", 0, 1, 2)
    handled = Handled()
    failures = [1]

    async def flaky(m: ReceivedMessage) -> None:
        if m.message.properties[SESSION_POSITION] == 1 and failures:
            failures.pop()
            raise RuntimeError("try again")
        await handled(m)

    receiver = make()
    await run_until(receiver, flaky, lambda: len(handled.seen) == 3)
    assert handled.of("a") == [0, 1, 2] and receiver.stats.abandoned == 1


async def test_many_sessions_each_in_order_and_the_next_holder_continues(
        sessions: Sessions, make: Factory) -> None:
    for p in range(4):
        for s in ("a", "b", "c"):
            await sessions.put("primary" if p % 2 else "secondary", s, p)
    handled = Handled()
    first = make()
    await run_until(first, handled, lambda: len(handled.seen) == 12, session_idle_timeout=0.2)
    await first.aclose()
    assert {s: handled.of(s) for s in "abc"} == {s: [0, 1, 2, 3] for s in "abc"}
    # And a new receiver (a restart) takes each session up where it was
    await sessions.put("primary", "b", 4, 5)
    await sessions.put("secondary", "b", 3)  # a late copy of a handled message
    second = make(gap_timeout=30)
    await run_until(second, handled, lambda: len(handled.seen) == 14)
    assert handled.of("b") == [0, 1, 2, 3, 4, 5]


async def test_the_session_state_is_written_to_both_namespaces(
        sessions: Sessions, make: Factory) -> None:
    await sessions.put("primary", "a", 0)
    receiver = make()
    assert await receiver.accept_session(max_wait=1) == "a"
    assert await receiver.get_state() is None
    # Given the secondary is down when the state is written
    sessions.ns["secondary"].down()
    await receiver.set_state(b"step 1")
    assert await receiver.get_state() == b"step 1"
    sessions.ns["secondary"].up()
    await receiver.release_session()
    # Then both namespaces hold it (the secondary's written once it was back)
    for name in ("primary", "secondary"):
        state = SessionState.decode(await sessions.raw_state(name, "a"))
        assert state.state == b"step 1"
    # And the next holder reads it
    again = make()
    assert await again.accept_session(max_wait=1) == "a"
    assert await again.get_state() == b"step 1"


async def test_the_sync_receiver(sessions: Sessions, tmp_path: Path) -> None:
    await sessions.put("primary", "a", 1, 2)
    await sessions.put("secondary", "a", 0)
    seen: list[int] = []
    stop = threading.Event()

    with GeoSessionReceiver(primary="local://primary", secondary="local://secondary", entity=Q,
                            data_dir=sessions.data_dir, dedup_store=tmp_path / "d.db",
                            state_dir=tmp_path / "state", poll_wait=0.05) as receiver:
        def handler(m: ReceivedMessage) -> None:
            seen.append(int(m.message.properties[SESSION_POSITION]))
            receiver.set_state(str(len(seen)).encode())
            if len(seen) == 3:
                stop.set()

        await asyncio.to_thread(receiver.run, handler, stop=stop)
        assert receiver.stats.delivered == 3
    assert seen == [0, 1, 2]
    assert SessionState.decode(await sessions.raw_state("primary", "a")).state == b"3"


async def test_through_a_geo_sender_in_passive_mode_across_a_failover(
        sessions: Sessions, make: Factory, tmp_path: Path) -> None:
    # Given a passive geo sender that fails over in the middle of a session
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity=Q, data_dir=sessions.data_dir, state_dir=tmp_path / "s",
                              recovery=False) as sender:
        for i in range(6):
            if i == 3:
                sessions.ns["primary"].down()
            await sender.send(Message(f"{i}".encode(), message_id=f"m{i}", session_id="a"))
    sessions.ns["primary"].up()
    assert sessions.ns["secondary"].entities()[0].active_count == 3
    handled = Handled()
    receiver = make()
    await run_until(receiver, handled, lambda: len(handled.seen) == 6)
    assert handled.of("a") == [0, 1, 2, 3, 4, 5]


async def test_two_receivers_never_hand_one_session_over_side_by_side(
        sessions: Sessions, make: Factory) -> None:
    # Given the first receiver holds the session in both namespaces
    await sessions.put("primary", "a", 0)
    first, second = make(), make()
    assert await first.accept_session(max_wait=1) == "a"
    # Then the second cannot take it
    assert await second.accept_session(max_wait=0.1) is None
    await first.release_session()


async def test_the_primarys_holder_takes_the_session_over_from_the_secondarys(
        sessions: Sessions, make: Factory) -> None:
    # Given a receiver holding the session in the secondary only (the primary was down
    # for it), waiting for positions that are in the primary
    await sessions.put("primary", "a", 0, 1, 2)
    await sessions.put("secondary", "a", 3, 4, 5)
    cut_off = FaultyTransport(LocalTransport("primary", data_dir=sessions.data_dir))
    cut_off.go_down()
    first = make(primary=cut_off, gap_timeout=30)
    assert await first.accept_session(max_wait=1) == "a"
    handled = Handled()
    stop = asyncio.Event()
    first_run = asyncio.create_task(first.run(handled, stop=stop, session_idle_timeout=30))
    # When another receiver locks the session in the primary
    second = make(gap_timeout=30)
    assert await second.accept_session(max_wait=1) == "a"
    second_run = asyncio.create_task(second.run(handled, stop=stop))
    await asyncio.sleep(0.2)
    assert handled.seen == []  # the second waits for the secondary's lock
    cut_off.come_up()
    # Then the first gives the session up, and the second hands it all over, in order
    await wait_for(lambda: len(handled.seen) == 6)
    assert first.session_id is None
    stop.set()
    await asyncio.gather(first_run, second_run)
    assert handled.of("a") == [0, 1, 2, 3, 4, 5]
    await cut_off.aclose()


class OneLink(FaultyTransport):
    """A namespace whose session receiver does one thing at a time, as an SDK receiver
    does (a settlement and a receive take turns on its link), each settlement taking
    ``settle_delay`` seconds."""

    def __init__(self, inner: LocalTransport, settle_delay: float) -> None:
        super().__init__(inner)
        self.settle_delay = settle_delay
        self.link = asyncio.Lock()

    async def complete(self, received: ReceivedMessage) -> None:
        async with self.link:
            await asyncio.sleep(self.settle_delay)
            await super().complete(received)

    async def accept_session(self, entity: str, session_id: str | None = None, *,
                             max_wait: float = 0.0) -> Any:
        got = await super().accept_session(entity, session_id, max_wait=max_wait)
        if got is not None:
            receive, link = got.receive, self.link

            async def one_at_a_time(**kw: Any) -> list[ReceivedMessage]:
                async with link:
                    return await receive(**kw)

            got.receive = one_at_a_time  # type: ignore[method-assign]
        return got


async def test_a_session_is_not_given_up_while_its_settlements_hold_the_next_receive(
        sessions: Sessions, make: Factory) -> None:
    # Given a session of three batches, in a namespace whose settlements of one batch
    # take longer than the session's idle time and hold its next receive back
    await sessions.put("primary", "long", *range(15))
    primary = OneLink(LocalTransport("primary", data_dir=sessions.data_dir), 0.12)
    receiver = make(primary=primary, prefetch=5)
    handled = Handled()
    # When it is received with an idle time shorter than one batch's settlements
    await run_until(receiver, handled, lambda: len(handled.seen) == 15,
                    session_idle_timeout=0.3)
    # Then the session was held throughout: locked once, not given up between batches
    assert handled.of("long") == list(range(15))
    assert receiver.stats.sessions == 1
    await primary.aclose()


async def test_store_calls_do_not_wait_behind_slow_sync_handlers(
        sessions: Sessions, make: Factory) -> None:
    # Given anyio's default worker threads all taken by slow sync handlers (40 of them,
    # as other receivers' run(concurrency=40) in the same process would take them)
    await sessions.put("primary", "a", 0, 1, 2)
    handled = Handled()
    receiver = make()
    started, release = threading.Barrier(41), threading.Event()

    def slow_handler() -> None:
        started.wait(timeout=5)
        release.wait(timeout=5)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(anyio.to_thread.run_sync, slow_handler)
            await anyio.to_thread.run_sync(started.wait, 5, limiter=anyio.CapacityLimiter(1))
            # When the session receiver hands a session over with an async handler
            began = time.monotonic()
            await run_until(receiver, handled, lambda: len(handled.seen) == 3)
            took = time.monotonic() - began
            release.set()
    finally:
        release.set()
    # Then its dedup and cursor calls did not wait for those threads
    assert handled.of("a") == [0, 1, 2]
    assert took < 2.5, took
