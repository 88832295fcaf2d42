"""AsyncGeoReceiver: a pump per namespace, MessageId de-dup (DELIVER / DUPLICATE / HOLD)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway import GatewayError, SqliteDedupStore
from gateway.aio import AsyncGeoSender
from gateway.transports import LocalTransport, ReceivedMessage
from replication import Message, MessageRejected, NamespaceUnavailable
from tests.gateway.conftest import ENTITY, Namespaces, ReceiverFactory, Recorder, wait_for

pytestmark = pytest.mark.anyio


async def send_to_both(ns: Namespaces, *messages: Message) -> None:
    await ns.put("primary", *messages)
    await ns.put("secondary", *messages)


async def receive_until(receiver, predicate, *, within: float = 10.0, settle: bool = True,
                        max_messages: int = 10) -> list[ReceivedMessage]:
    """Receive (and complete) until ``predicate()``; returns what was delivered."""
    delivered: list[ReceivedMessage] = []
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "receiver did not get there in time"
        for r in await receiver.receive(max_messages=max_messages, max_wait=0.1):
            delivered.append(r)
            if settle:
                await receiver.complete(r)
    return delivered


async def test_copies_in_both_namespaces_are_delivered_once(
    data_dir: Path, state_dir: Path, ns: Namespaces, make_receiver: ReceiverFactory,
    hooks: Recorder,
) -> None:
    # Given five messages sent in active mode (a copy in each namespace)
    ids = [f"m{i}" for i in range(5)]
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity=ENTITY, mode="active", data_dir=data_dir,
                              state_dir=state_dir, recovery=False) as sender:
        for i in ids:
            await sender.send(Message(i, message_id=i))
    assert ns.count("primary") == ns.count("secondary") == 5
    # When a receiver receives and completes until every copy is accounted for
    receiver = await make_receiver(hooks=hooks)
    delivered = await receive_until(
        receiver, lambda: receiver.stats.duplicates_suppressed == 5)
    # Then each id was delivered once, the duplicates were completed (queues empty)
    assert sorted(r.message_id for r in delivered) == ids
    assert ns.count("primary") == ns.count("secondary") == 0
    # And on_duplicate fired once per id, and the stats add up
    assert sorted(e["message_id"] for e in hooks.named("on_duplicate")) == ids
    stats = receiver.stats
    assert (stats.received, stats.delivered, stats.duplicates_suppressed, stats.completed,
            stats.held, stats.abandoned) == (10, 5, 5, 5, 0, 0)


async def hold_second_copy(receiver) -> ReceivedMessage:
    """Deliver the first copy and wait until the second one is held (never delivered)."""
    [first] = await receiver.receive(max_messages=10, max_wait=5)
    deadline = time.monotonic() + 10
    while receiver.stats.held < 1:
        assert time.monotonic() < deadline, "second copy never held"
        assert await receiver.receive(max_messages=10, max_wait=0.1) == []
    # Still not delivered while the first copy is unsettled
    assert await receiver.receive(max_messages=10, max_wait=0.2) == []
    return first


async def test_held_copy_is_delivered_after_the_first_is_abandoned(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given a message in both namespaces, the first copy delivered, the second held
    await send_to_both(ns, Message("a", message_id="m1"))
    receiver = await make_receiver()
    first = await hold_second_copy(receiver)
    # When the first copy is abandoned
    await receiver.abandon(first)
    # Then the held copy (from the other namespace) is delivered next
    [second] = await receiver.receive(max_messages=10, max_wait=5)
    assert second.message_id == "m1"
    assert second.namespace != first.namespace
    # And once it completes, the redelivered first copy is settled as a duplicate
    await receiver.complete(second)
    await receive_until(receiver, lambda: receiver.stats.duplicates_suppressed == 1,
                        settle=False)
    assert ns.count("primary") == ns.count("secondary") == 0
    assert receiver.stats.delivered == 2 and receiver.stats.abandoned == 1


async def test_held_copy_is_settled_as_duplicate_when_the_first_completes(
    ns: Namespaces, make_receiver: ReceiverFactory, hooks: Recorder
) -> None:
    # Given a message in both namespaces, the first copy delivered, the second held
    await send_to_both(ns, Message("a", message_id="m1"))
    receiver = await make_receiver(hooks=hooks)
    first = await hold_second_copy(receiver)
    # When the first copy is completed
    await receiver.complete(first)
    # Then the held copy is completed as a duplicate at once: both queues are empty
    assert receiver.stats.held == 0
    assert receiver.stats.duplicates_suppressed == 1
    [event] = hooks.named("on_duplicate")
    assert event["message_id"] == "m1" and event["namespace"] != first.namespace
    assert ns.count("primary") == ns.count("secondary") == 0
    assert await receiver.receive(max_messages=10, max_wait=0.3) == []


async def test_completed_id_is_not_redelivered_after_a_restart(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given a receiver that completed m1 and closed
    store = tmp_path / "persistent-dedup.db"
    await ns.put("primary", Message("a", message_id="m1"))
    first = await make_receiver(dedup_store=store)
    [r] = await first.receive(max_messages=10, max_wait=5)
    await first.complete(r)
    await first.aclose()
    # When copies of m1 arrive later (a replay) along with a new message
    await ns.put("secondary", Message("a", message_id="m1"))
    await ns.put("primary", Message("a", message_id="m1"), Message("b", message_id="m2"))
    # Then a new receiver on the same dedup store delivers only the new message
    second = await make_receiver(dedup_store=store)
    delivered = await receive_until(
        second, lambda: second.stats.duplicates_suppressed == 2 and second.stats.completed == 1)
    assert [d.message_id for d in delivered] == ["m2"]
    assert ns.count("primary") == ns.count("secondary") == 0


async def test_one_namespace_down_still_receives_from_the_other(
    ns: Namespaces, make_receiver: ReceiverFactory, hooks: Recorder
) -> None:
    # Given the primary down and a message in the secondary
    ns.primary.down()
    await ns.put("secondary", Message("a", message_id="m1"))
    receiver = await make_receiver(hooks=hooks)
    # When the receiver receives, Then it gets the message from the secondary
    [r] = await receiver.receive(max_messages=10, max_wait=5)
    assert (r.message_id, r.namespace) == ("m1", "secondary")
    await receiver.complete(r)
    assert receiver.down == frozenset({"primary"})
    assert [e["namespace"] for e in hooks.named("on_namespace_down")] == ["primary"]
    # And an empty secondary with the primary down is just an empty queue
    assert await receiver.receive(max_messages=10, max_wait=0.3) == []
    # And when the primary comes back its messages are received too
    ns.primary.up()
    await ns.put("primary", Message("b", message_id="m2"))
    [r2] = await receiver.receive(max_messages=10, max_wait=5)
    assert (r2.message_id, r2.namespace) == ("m2", "primary")
    await receiver.complete(r2)
    await wait_for(lambda: receiver.down == frozenset())


async def test_both_down_raises_instead_of_returning_empty(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given a receiver that is running, and then both namespaces go down
    await ns.put("primary", Message("a", message_id="m1"))
    receiver = await make_receiver()
    [r] = await receiver.receive(max_messages=10, max_wait=5)
    await receiver.complete(r)
    ns.primary.down()
    ns.secondary.down()
    # When it receives with a long max_wait
    started = time.monotonic()
    with pytest.raises(NamespaceUnavailable):
        await receiver.receive(max_messages=10, max_wait=30)
    # Then the outage is raised (well before max_wait), never reported as []
    assert time.monotonic() - started < 10
    # And after they come back, receiving works again
    ns.primary.up()
    ns.secondary.up()
    await ns.put("secondary", Message("b", message_id="m2"))
    deadline = time.monotonic() + 10
    got: list[ReceivedMessage] = []
    while not got:
        assert time.monotonic() < deadline
        try:
            got = await receiver.receive(max_messages=10, max_wait=0.2)
        except NamespaceUnavailable:
            # The pumps have not noticed yet; retrying at once must not starve them.
            continue
    assert [g.message_id for g in got] == ["m2"]


async def test_both_down_from_the_start_raises(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    ns.primary.down()
    ns.secondary.down()
    receiver = await make_receiver()
    with pytest.raises(NamespaceUnavailable):
        await receiver.receive(max_messages=10, max_wait=30)


async def test_run_redelivers_after_a_handler_failure_and_completes(
    ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given three messages in both namespaces and a handler that fails once on m1
    ids = ["m0", "m1", "m2"]
    await send_to_both(ns, *(Message(i, message_id=i) for i in ids))
    calls: list[str] = []
    handled: list[str] = []

    async def handler(message: ReceivedMessage) -> None:
        calls.append(message.message_id)
        if message.message_id == "m1" and calls.count("m1") == 1:
            raise RuntimeError("transient handler failure")
        handled.append(message.message_id)

    receiver = await make_receiver()
    # When run() handles messages until idle
    await receiver.run(handler, idle_timeout=1.0)
    # Then m1 was redelivered once and every id was handled successfully exactly once
    assert calls.count("m1") == 2
    assert sorted(handled) == ids
    assert receiver.stats.abandoned == 1 and receiver.stats.completed == 3
    # And every copy was settled: nothing is left in either namespace
    assert ns.count("primary") == ns.count("secondary") == 0


async def test_run_with_a_sync_handler(ns: Namespaces, make_receiver: ReceiverFactory) -> None:
    await ns.put("primary", Message("a", message_id="m1"))
    seen: list[str] = []
    receiver = await make_receiver()
    await receiver.run(lambda m: seen.append(m.message_id), idle_timeout=0.5)
    assert seen == ["m1"]
    assert ns.count("primary") == 0


async def test_aclose_gives_back_prefetched_messages_at_once(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path
) -> None:
    # Given five messages with a long lock, one delivered and four prefetched
    ids = [f"m{i}" for i in range(5)]
    await ns.put("primary", *(Message(i, message_id=i) for i in ids))
    receiver = await make_receiver()
    [first] = await receiver.receive(max_messages=1, max_wait=5)
    await receiver.complete(first)
    await wait_for(lambda: receiver.stats.received == 5)
    # When the receiver closes
    await receiver.aclose()
    # Then the prefetched messages are receivable right away (abandoned, not left locked)
    async with LocalTransport("primary", data_dir=data_dir) as t:
        again = await t.receive(ENTITY, max_messages=10, max_wait=1.0)
        assert [r.message_id for r in again] == ids[1:]
        for r in again:
            await t.complete(r)


async def test_delivery_order_is_kept_across_receives(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given an id done before, and then a batch with its copy in the middle
    store = tmp_path / "order-dedup.db"
    await ns.put("primary", Message("x", message_id="x"))
    earlier = await make_receiver(dedup_store=store)
    [x] = await earlier.receive(max_messages=1, max_wait=5)
    await earlier.complete(x)
    await earlier.aclose()
    order = ["a", "b", "x", "c", "d", "e"]
    await ns.put("primary", *(Message(i, message_id=i) for i in order))
    # When a receiver takes them three at a time
    receiver = await make_receiver(dedup_store=store)
    delivered = await receive_until(receiver, lambda: receiver.stats.completed == 5,
                                    max_messages=3)
    # Then the first copies come in the order they were sent
    assert [d.message_id for d in delivered] == ["a", "b", "c", "d", "e"]



async def test_a_copy_held_for_another_receiver_is_settled_once_that_one_completes(
    data_dir: Path, state_dir: Path, ns: Namespaces, make_receiver: ReceiverFactory,
) -> None:
    # Given one message with a copy in each namespace, and two receivers sharing one
    # dedup store (two processes would), each reading only one namespace's copy first
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity=ENTITY, mode="active", data_dir=data_dir,
                              state_dir=state_dir, recovery=False) as sender:
        await sender.send(Message(b"once", message_id="only"))
    first = await make_receiver(secondary="local://spare1")  # reads only primary's copy
    [delivered] = await first.receive(max_messages=1, max_wait=5)
    second = await make_receiver(primary="local://spare2")  # reads only secondary's copy
    got = await second.receive(max_messages=1, max_wait=0.5)
    # Then the second receiver holds its copy while the first one handles the id
    assert got == []
    await wait_for_held(second)
    # When the first receiver completes it
    await first.complete(delivered)
    # Then the second one, looking again, settles its copy as a duplicate: not delivered,
    # not held forever, and both queues end empty
    deadline = time.monotonic() + 10
    while second.stats.duplicates_suppressed < 1 and time.monotonic() < deadline:
        assert await second.receive(max_messages=1, max_wait=0.2) == []
    assert (second.stats.duplicates_suppressed, second.stats.held) == (1, 0)
    assert ns.count("primary") + ns.count("secondary") == 0


async def wait_for_held(receiver) -> None:
    deadline = time.monotonic() + 10
    while receiver.stats.held < 1:
        assert time.monotonic() < deadline, "the second copy was never held"
        assert await receiver.receive(max_messages=1, max_wait=0.1) == []


async def test_run_settles_beside_the_next_handler_call_and_returns_settled(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path
) -> None:
    from gateway.transports import FaultyTransport, LocalTransport

    class SlowSettling(FaultyTransport):
        settling = 0

        async def complete(self, received: ReceivedMessage) -> None:
            SlowSettling.settling += 1
            await anyio.sleep(0.05)
            await super().complete(received)
            SlowSettling.settling -= 1

    # Given three messages on a namespace whose settlements are slow
    for i in range(3):
        await ns.put("primary", Message("x", message_id=f"m{i}"))
    seen_settling: list[int] = []
    async with SlowSettling(LocalTransport("primary", data_dir=data_dir)) as primary:
        receiver = await make_receiver(primary=primary)
        # When run() handles them, each handler call taking a moment (the marks of
        # a batch are written before its first settlement starts)
        # (the third call stops the run: an idle timeout short enough to keep the test
        # quick ran out before the first batch on a loaded machine)
        done = threading.Event()

        def handler(message: ReceivedMessage) -> None:
            time.sleep(0.02)
            seen_settling.append(SlowSettling.settling)
            if len(seen_settling) == 3:
                done.set()

        await receiver.run(handler, stop=done, idle_timeout=30)
        # Then a handler call ran while an earlier message was still being settled
        assert len(seen_settling) == 3 and max(seen_settling) >= 1
        # And run() returned only once every settlement was done
        assert SlowSettling.settling == 0 and ns.count("primary") == 0
        assert receiver.stats.completed == 3


class WatchedStore(SqliteDedupStore):
    """A SQLite dedup store that records the thread and size of every write."""

    def __init__(self, path: Path, *, fail_marks: bool = False) -> None:
        super().__init__(path)
        self.threads: set[int] = set()
        self.marks: list[int] = []  # ids per finish_many(succeeded=True)
        self.claims = 0
        self.fail_marks = fail_marks

    def claim(self, message_ids: Any, **kw: Any) -> Any:
        self.threads.add(threading.get_ident())
        self.claims += 1
        return super().claim(message_ids, **kw)

    def finish_many(self, message_ids: Any, **kw: Any) -> None:
        self.threads.add(threading.get_ident())
        if kw["succeeded"]:
            if self.fail_marks:
                raise GatewayError(f"dedup store {self.path} failed: disk I/O error")
            self.marks.append(len(message_ids))
        super().finish_many(message_ids, **kw)


async def test_dedup_writes_run_off_the_event_loop_one_mark_per_batch(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given 50 messages and a receiver over a watched SQLite dedup store
    await ns.put("primary", *(Message("x", message_id=f"m{i:02d}") for i in range(50)))
    store = WatchedStore(tmp_path / "watched.db")
    receiver = await make_receiver(dedup_store=store)
    # When one receive() gets all of them (one pump read) and the caller completes
    # them in a row
    batch = await receiver.receive(max_messages=50, max_wait=5)
    assert len(batch) == 50
    for received in batch:
        await receiver.complete(received)
    # Then the ids were claimed in one transaction and marked done in one
    assert store.claims == 1 and store.marks == [50]
    # And no dedup transaction ran on the event loop's thread
    assert threading.get_ident() not in store.threads
    # And every message was settled by the time the last complete() returned
    assert ns.count("primary") == 0 and receiver.stats.completed == 50


async def test_run_marks_a_batch_in_few_transactions_and_settles_after_the_marks(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given 30 messages in both namespaces, and a watched dedup store
    await send_to_both(ns, *(Message("x", message_id=f"m{i:02d}") for i in range(30)))
    store = WatchedStore(tmp_path / "watched.db")
    receiver = await make_receiver(dedup_store=store)
    handled: list[str] = []

    async def handler(message: ReceivedMessage) -> None:
        handled.append(message.message_id)

    # When run() handles everything
    await receiver.run(handler, max_messages=30, idle_timeout=0.5)
    # Then each id was handled once, marked done in a few transactions, not 30
    assert sorted(handled) == [f"m{i:02d}" for i in range(30)]
    assert sum(store.marks) == 30 and len(store.marks) <= 6
    assert threading.get_ident() not in store.threads
    # And every copy was settled (the second copies as duplicates)
    assert ns.count("primary") == ns.count("secondary") == 0
    assert receiver.stats.duplicates_suppressed == 30


async def test_a_failed_mark_reaches_the_caller_and_settles_nothing(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a receiver whose dedup store cannot record done ids
    await ns.put("primary", Message("a", message_id="m1"), Message("b", message_id="m2"))
    store = WatchedStore(tmp_path / "failing.db", fail_marks=True)
    receiver = await make_receiver(dedup_store=store)
    first, second = await receiver.receive(max_messages=2, max_wait=5)
    # When both are completed, Then the error reaches the caller of the last one
    await receiver.complete(first)
    with pytest.raises(GatewayError, match="disk I/O error"):
        await receiver.complete(second)
    # And it is logged, and nothing was settled: both come back when their locks expire
    assert "could not mark 2 message id(s) done" in caplog.text
    assert ns.count("primary") == 2
    # And it is reported once, not again by the next receive()
    assert await receiver.receive(max_messages=2, max_wait=0.1) == []


async def test_run_raises_a_failed_mark(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given run() over a dedup store that cannot record done ids
    await ns.put("primary", Message("a", message_id="m1"))
    receiver = await make_receiver(dedup_store=WatchedStore(tmp_path / "f.db", fail_marks=True))
    # When the handler succeeds, Then run() raises the store's error instead of
    # going on as if the message were done
    with pytest.raises(GatewayError, match="disk I/O error"):
        await receiver.run(lambda m: None, idle_timeout=2.0)
    assert ns.count("primary") == 1


async def test_aclose_raises_a_failed_mark_that_no_call_waited_for(
    ns: Namespaces, tmp_path: Path, data_dir: Path
) -> None:
    from gateway.aio import AsyncGeoReceiver

    # Given two delivered messages, one completed while the caller still holds the other
    await ns.put("primary", Message("a", message_id="m1"), Message("b", message_id="m2"))
    receiver = AsyncGeoReceiver(
        primary="local://primary", secondary="local://secondary", entity=ENTITY,
        data_dir=data_dir, poll_wait=0.05,
        dedup_store=WatchedStore(tmp_path / "f.db", fail_marks=True))
    first, _second = await receiver.receive(max_messages=2, max_wait=5)
    await receiver.complete(first)  # returns at once: its mark is written behind
    # When the receiver closes and the mark fails, Then aclose() raises it
    with pytest.raises(GatewayError, match="disk I/O error"):
        await receiver.aclose()


async def test_no_copy_is_settled_before_its_mark_committed(
    ns: Namespaces, make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    # Given a message in both namespaces and a dedup store whose done marks are slow
    await send_to_both(ns, Message("a", message_id="m1"))
    gate = threading.Event()

    class SlowMarks(WatchedStore):
        def finish_many(self, message_ids: Any, **kw: Any) -> None:
            if kw["succeeded"]:
                gate.wait(10)
            super().finish_many(message_ids, **kw)

    receiver = await make_receiver(dedup_store=SlowMarks(tmp_path / "slow.db"))
    [first] = await receiver.receive(max_messages=1, max_wait=5)
    async with anyio.create_task_group() as tg:
        # When it is completed and its mark is still being written
        tg.start_soon(receiver.complete, first)
        started = time.monotonic()
        await anyio.sleep(0.3)
        # Then the event loop is not blocked meanwhile (the mark waits 10 s at most),
        # and neither copy is settled yet
        assert time.monotonic() - started < 5
        assert ns.count("primary") == ns.count("secondary") == 1
        gate.set()
    # And once the mark committed, the first copy is settled, and the other one is
    # settled as a duplicate when the receiver gets to it
    assert ns.count(first.namespace) == 0
    await receive_until(receiver, lambda: receiver.stats.duplicates_suppressed == 1)
    assert ns.count("primary") + ns.count("secondary") == 0


def strict(name: str, data_dir: Path) -> LocalTransport:
    """A local namespace that refuses unknown queues, as Azure does."""
    return LocalTransport(name, data_dir=data_dir, auto_create=False)


async def test_a_namespace_without_the_queue_is_reported_and_the_other_read(
        ns: Namespaces, data_dir: Path, make_receiver: ReceiverFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    # Given a queue that exists on the primary only, with a message
    ns.primary.create_queue("only-primary")
    await ns.put("primary", Message("x", message_id="m1"), entity="only-primary")
    hooks = Recorder()
    async with strict("primary", data_dir) as p, strict("secondary", data_dir) as s:
        receiver = await make_receiver(entity="only-primary", hooks=hooks, primary=p,
                                       secondary=s)
        await expect_refused_secondary(receiver, hooks, caplog)


async def expect_refused_secondary(receiver: Any, hooks: Recorder,
                            caplog: pytest.LogCaptureFixture) -> None:
    # When it receives
    got: list[ReceivedMessage] = []
    while not got:
        got = await receiver.receive(max_wait=5)
    await receiver.complete(got[0])
    await wait_for(lambda: bool(receiver.refused))
    # Then the message is delivered, and the secondary is reported: hook, property, log
    assert [m.message_id for m in got] == ["m1"]
    assert set(receiver.refused) == {"secondary"}
    assert [d["namespace"] for d in hooks.named("on_namespace_down")] == ["secondary"]
    assert any("secondary" in r.getMessage() and "refused" in r.getMessage()
               for r in caplog.records if r.levelno >= logging.WARNING)
    # And later receives go on (no exception)
    assert await receiver.receive(max_wait=0.1) == []
    await receiver.aclose()


async def test_run_raises_when_both_namespaces_refuse(
        data_dir: Path, make_receiver: ReceiverFactory) -> None:
    # Given a queue that exists on neither namespace
    async with strict("primary", data_dir) as p, strict("secondary", data_dir) as s:
        receiver = await make_receiver(entity="nowhere", primary=p, secondary=s)
        # When run() handles messages / Then the refusal reaches the caller
        with pytest.raises(MessageRejected, match="both namespaces refused"):
            await receiver.run(lambda m: None, idle_timeout=5)
        assert set(receiver.refused) == {"primary", "secondary"}
        await receiver.aclose()


class CountingLocal(LocalTransport):
    """A local transport that counts its settlement calls."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.calls: list[tuple[str, int]] = []

    async def complete(self, received: ReceivedMessage) -> None:
        self.calls.append(("complete", 1))
        await super().complete(received)

    async def complete_many(self, received: Any) -> Any:
        self.calls.append(("complete_many", len(received)))
        return await super().complete_many(received)


async def test_completions_held_together_are_one_call_on_a_local_namespace(
    ns: Namespaces, make_receiver: ReceiverFactory, data_dir: Path
) -> None:
    # Given six messages in the primary, one of them completed behind the receiver's back
    await ns.put("primary", *(Message("x", message_id=f"m{i}") for i in range(6)))
    primary = CountingLocal("primary", data_dir=data_dir)
    receiver = await make_receiver(primary=primary)
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + 10
    while len(got) < 6 and time.monotonic() < deadline:
        got += await receiver.receive(max_messages=6 - len(got), max_wait=0.1)
    assert len(got) == 6
    async with LocalTransport("primary", data_dir=data_dir) as other:
        await other.complete(got[2])

    # When the caller completes all six (the first five do not wait for their marks)
    for received in got:
        await receiver.complete(received)

    # Then the namespace was asked once for the group (not once per message), the
    # lost lock is counted as unsettled, and the queue is empty
    assert primary.calls == [("complete_many", 6)]
    assert receiver.stats.completed == 6 and receiver.stats.unsettled == 1
    assert ns.count("primary") == 0
    await primary.aclose()
