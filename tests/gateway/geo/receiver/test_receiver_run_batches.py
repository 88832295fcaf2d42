"""AsyncGeoReceiver.run: concurrent handlers take whole batches (one claim round trip
each), and an inbox handler's settlements run beside the next handler call."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from gateway import SqliteDedupStore
from gateway.transports import FaultyTransport, LocalTransport, ReceivedMessage
from replication import Message
from tests.gateway.conftest import Namespaces, ReceiverFactory

pytestmark = pytest.mark.anyio


class CountingStore(SqliteDedupStore):
    """A SQLite dedup store that counts its claim round trips."""

    claims = 0

    def claim(self, message_ids: Any, **kw: Any) -> Any:
        self.claims += 1
        return super().claim(message_ids, **kw)


async def test_concurrent_handlers_claim_a_whole_batch_at_once(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given 40 messages waiting, and a receiver over a store that counts its claims
    ids = [f"m{i:02d}" for i in range(40)]
    await ns.put("primary", *(Message("x", message_id=i) for i in ids))
    store = CountingStore(tmp_path / "counted.db")
    receiver = await make_receiver(dedup_store=store)
    handled: list[str] = []
    running = peak = 0

    async def handler(message: ReceivedMessage) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        handled.append(message.message_id)
        running -= 1

    # When run() handles them with 4 handlers at once
    await receiver.run(handler, max_messages=40, concurrency=4, idle_timeout=0.5)
    # Then each was handled once, at most 4 (and at some point 4) at a time
    assert sorted(handled) == ids and peak == 4
    # And the ids were claimed in a few round trips, not one per free handler
    assert store.claims <= 3, store.claims
    assert ns.count("primary") == 0


async def test_a_batch_received_is_handled_before_run_returns(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given 30 messages waiting
    await ns.put("primary", *(Message("x", message_id=f"m{i:02d}") for i in range(30)))
    receiver = await make_receiver()
    stop = asyncio.Event()
    handled: list[str] = []

    async def handler(message: ReceivedMessage) -> None:
        handled.append(message.message_id)
        stop.set()  # told to stop at the first message
        await anyio.sleep(0.005)

    # When run() with 4 handlers is told to stop by the first handler call
    await receiver.run(handler, max_messages=30, concurrency=4, stop=stop)
    # Then every message it had received (claimed) was handled and completed: none
    # is left delivered and unsettled
    stats = receiver.stats
    assert stats.delivered == len(handled) == stats.completed >= 1
    assert ns.count("primary") == 30 - len(handled)


async def test_an_inbox_handler_does_not_wait_for_the_last_settlement(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path, tmp_path: Path
) -> None:
    # Given three messages, the application's table in the SQLite inbox, and a
    # namespace whose completion of m0 waits until the handler of a later message ran
    for i in range(3):
        await ns.put("primary", Message("x", message_id=f"m{i}"))
    path = tmp_path / "inbox.db"
    SqliteDedupStore(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE effects (message_id TEXT PRIMARY KEY)")
        conn.commit()
    later_ran = anyio.Event()
    events: list[str] = []

    class Gated(FaultyTransport):
        async def complete(self, received: ReceivedMessage) -> None:
            if received.message_id == "m0":
                with anyio.move_on_after(5):
                    await later_ran.wait()
            events.append(f"settled {received.message_id}")
            await super().complete(received)

    def inbox(message: ReceivedMessage, conn: sqlite3.Connection) -> None:
        # A plain handler, in a worker thread of the receiver's loop.
        conn.execute("INSERT INTO effects VALUES (?)", (message.message_id,))
        events.append(f"handled {message.message_id}")
        if message.message_id != "m0":
            anyio.from_thread.run_sync(later_ran.set)

    async with Gated(LocalTransport("primary", data_dir=data_dir)) as primary:
        receiver = await make_receiver(primary=primary, dedup_store=path)
        # When run() hands them, one at a time, to the inbox handler
        await receiver.run(inbox, transactional=True, idle_timeout=0.3)
        # Then the next handler call ran before m0 was settled (its mark had committed
        # with its effect), and run() returned with every copy settled
        assert events.index("handled m1") < events.index("settled m0"), events
        assert receiver.stats.completed == 3 and receiver.stats.unsettled == 0
        assert ns.count("primary") == 0
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT message_id FROM effects")) == [
            "m0", "m1", "m2"]


def _count_hand_overs(monkeypatch: pytest.MonkeyPatch) -> threading.local:
    """Number every hand-over to a worker thread; in the worker, ``tag.n`` says which."""
    tag = threading.local()
    counter = itertools.count()
    original = anyio.to_thread.run_sync

    async def run_sync(fn: Any, *args: Any, **kw: Any) -> Any:
        n = next(counter)

        def tagged(*a: Any) -> Any:
            tag.n = n
            try:
                return fn(*a)
            finally:
                tag.n = None

        return await original(tagged, *args, **kw)

    monkeypatch.setattr(anyio.to_thread, "run_sync", run_sync)
    return tag


async def test_a_sync_handler_is_handed_a_batch_per_thread_hand_over(
    ns: Namespaces, make_receiver: ReceiverFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 300 messages in both namespaces, and every hand-over to a worker thread
    # numbered
    ids = [f"m{i:03d}" for i in range(300)]
    for name in ("primary", "secondary"):
        await ns.put(name, *(Message("x", message_id=i) for i in ids))
    tag = _count_hand_overs(monkeypatch)
    receiver = await make_receiver()
    hand_overs: list[int] = []
    batches: list[int] = []
    receive = receiver.receive

    async def counted_receive(*args: Any, **kw: Any) -> list[ReceivedMessage]:
        got = await receive(*args, **kw)
        if got:
            batches.append(len(got))
        return got

    monkeypatch.setattr(receiver, "receive", counted_receive)

    def handler(message: ReceivedMessage) -> None:  # a plain (sync) handler
        hand_overs.append(tag.n)

    class AllDone:
        def is_set(self) -> bool:
            stats = receiver.stats
            return stats.completed == stats.duplicates_suppressed == 300

    # When run() handles them, receiving up to 100 at a time
    await receiver.run(handler, max_messages=100, stop=AllDone(), idle_timeout=30)
    # Then each id was handled once, and the handler calls of a received batch shared
    # one hand-over to a thread: not one each
    assert len(hand_overs) == 300 and None not in hand_overs
    assert len(set(hand_overs)) <= len(batches), (len(set(hand_overs)), batches)
    # And every id was completed and every copy settled (the second as a duplicate),
    # but those whose settlement timed out on a busy machine (they come back, counted)
    stats = receiver.stats
    assert (stats.completed, stats.duplicates_suppressed, stats.abandoned) == (300, 300, 0)
    assert ns.count("primary") + ns.count("secondary") == stats.unsettled


async def test_a_sync_handler_that_fails_abandons_only_its_message(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given five messages, and a plain handler that fails once on m2 and returns an
    # awaitable for m3 (awaited on the loop, as a coroutine handler's would be)
    ids = [f"m{i}" for i in range(5)]
    await ns.put("primary", *(Message("x", message_id=i) for i in ids))
    calls: list[str] = []
    awaited: list[str] = []

    async def later(message_id: str) -> None:
        await anyio.sleep(0.001)
        awaited.append(message_id)

    def handler(message: ReceivedMessage) -> Any:
        calls.append(message.message_id)
        if message.message_id == "m2" and calls.count("m2") == 1:
            raise RuntimeError("fails once")
        if message.message_id == "m3":
            return later("m3")
        return None

    receiver = await make_receiver()
    # When run() handles them in one batch
    await receiver.run(handler, max_messages=10, idle_timeout=0.5)
    # Then m2 was abandoned and handled again, the others once, m3's awaitable awaited
    assert sorted(calls) == sorted([*ids, "m2"]) and awaited == ["m3"]
    stats = receiver.stats
    assert (stats.completed, stats.abandoned) == (5, 1)
    assert ns.count("primary") == 0
