"""AsyncGeoPartitionReceiver / GeoPartitionReceiver: one processor per namespace over a
partitioned entity, de-duplicated across both by MessageId."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import GeoPartitionReceiver, RetryPolicy, SqliteDedupStore
from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import (
    BalanceSettings,
    ConsumerGroupRef,
    PartitionContext,
    ProcessorSettings,
    SqliteCheckpointStore,
)
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import EventPosition, PartitionEvent
from replication import Message, NamespaceUnavailable
from replication._dedup import Deduplicator
from tests.gateway.conftest import Recorder, wait_for, wait_for_sync

pytestmark = pytest.mark.anyio

HUB = "telemetry"
NAMESPACES = ("primary", "secondary")
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)
SETTINGS = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                             checkpoint_every_seconds=None)
QUICK = RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.005, max_delay=2.0)


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[dict[str, LocalNamespace]]:
    admin = {name: LocalNamespace(name, data_dir=tmp_path) for name in NAMESPACES}
    for namespace in admin.values():
        namespace.create_partitioned(HUB, partitions=4)
    yield admin
    for namespace in admin.values():
        namespace.close()


def ids(start: int, count: int) -> list[str]:
    return [f"m{i:04d}" for i in range(start, start + count)]


async def send(tmp_path: Path, message_ids: list[str], to: tuple[str, ...] = NAMESPACES) -> None:
    """Send the same MessageIds to each namespace, as active replication does."""
    for name in to:
        async with LocalTransport(name, data_dir=tmp_path) as transport:
            await transport.send(HUB, [Message(i, message_id=i, partition_key=f"k{i[-1]}")
                                       for i in message_ids])


def receiver(tmp_path: Path, **kw: Any) -> AsyncGeoPartitionReceiver:
    kw.setdefault("checkpoint_store", tmp_path / "cp.db")
    kw.setdefault("dedup_store", tmp_path / "dedup.db")
    kw.setdefault("settings", SETTINGS)
    return AsyncGeoPartitionReceiver(
        primary="local://primary", secondary="local://secondary", entity=HUB,
        data_dir=tmp_path, balance=FAST, handler_retry=QUICK, **kw)


class Handled:
    """A handler that counts deliveries per MessageId (and who delivered them)."""

    def __init__(self, name: str = "") -> None:
        self.seen: Counter[str] = Counter()
        self.by: dict[str, str] = {}
        self.name = name

    def handler(self, name: str = "") -> Any:
        async def handle(event: PartitionEvent) -> None:
            self.seen[event.message.message_id] += 1
            self.by[event.message.message_id] = name
        return handle


class Running:
    """``run()`` in a background task, stopped by an event."""

    def __init__(self, geo: AsyncGeoPartitionReceiver, handler: Any) -> None:
        self.stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(geo.run(handler, stop=self.stop))

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 10)


async def last_sequences(tmp_path: Path, namespace: str) -> dict[str, int]:
    async with LocalTransport(namespace, data_dir=tmp_path) as transport:
        last = {}
        for pid in await transport.get_partition_ids(HUB):
            events = await transport.read_partition(HUB, pid, position=EventPosition.earliest(),
                                                    max_events=1000)
            if events:
                last[pid] = events[-1].sequence_number
        return last


def group(namespace: str) -> ConsumerGroupRef:
    return ConsumerGroupRef(fully_qualified_namespace=namespace, eventhub_name=HUB,
                            consumer_group="$Default")


def duplicates(hooks: Recorder, namespace: str | None = None) -> int:
    return len([kw for kw in hooks.named("on_duplicate")
                if namespace is None or kw["namespace"] == namespace])


async def test_copies_in_both_namespaces_are_delivered_once_and_checkpointed_per_namespace(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given 40 messages sent with the same MessageIds to both namespaces
    sent = ids(0, 40)
    await send(tmp_path, sent)
    hooks, handled = Recorder(), Handled()
    # When one geo receiver runs until every id was handled and every copy seen
    async with receiver(tmp_path, hooks=hooks, instance_id="geo") as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: set(handled.seen) == set(sent) and duplicates(hooks) == 40)
        assert geo.owned == {"primary": {"0", "1", "2", "3"},
                             "secondary": {"0", "1", "2", "3"}}
        await running.finish()
        assert geo.owned == {}
    # Then each id was delivered exactly once, and the other 40 copies suppressed
    assert all(handled.seen[i] == 1 for i in sent)
    assert geo.dedup_stats.delivered == 40 and geo.dedup_stats.duplicates >= 40
    # And each namespace has its own checkpoints, at the end of each of its partitions
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    for namespace in NAMESPACES:
        checkpoints = await store.list_checkpoints(group(namespace))
        assert {c.partition_id: c.sequence_number for c in checkpoints} == (
            await last_sequences(tmp_path, namespace))
        ownerships = await store.list_ownership(group(namespace))
        assert {o.owner_id for o in ownerships} <= {"", f"geo@{namespace}"}
    await store.aclose()


async def test_a_copy_in_flight_holds_the_other_until_it_is_done(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given one message in both namespaces, and a handler that does not finish until
    # the other copy has been seen and held
    await send(tmp_path, ["slow"])
    hooks, calls = Recorder(), []
    async with receiver(tmp_path, hooks=hooks) as geo:

        async def handle(event: PartitionEvent) -> None:
            calls.append(event.namespace)
            await wait_for(lambda: geo.dedup_stats.held >= 1)

        # When it runs until the held copy is resolved
        running = Running(geo, handle)
        await wait_for(lambda: duplicates(hooks) == 1)
        await running.finish()
    # Then the handler ran once; the held copy became a duplicate
    assert len(calls) == 1
    assert hooks.named("on_duplicate")[0]["namespace"] != calls[0]


async def test_a_namespace_going_down_does_not_stop_the_other_and_nothing_is_delivered_twice(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given a receiver that handled a first batch from both namespaces
    first, second = ids(0, 20), ids(20, 20)
    await send(tmp_path, first)
    hooks, handled = Recorder(), Handled()
    async with receiver(tmp_path, hooks=hooks) as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: set(handled.seen) == set(first) and duplicates(hooks) == 20)
        # When the secondary goes down and the next batch reaches the primary only
        hubs["secondary"].down()
        await send(tmp_path, second, to=("primary",))
        # Then the primary's events are still delivered while the secondary's
        # readers fail, report it and keep retrying
        await wait_for(lambda: set(handled.seen) == set(first + second))
        await wait_for(lambda: geo.down == {"secondary"})
        assert [kw["namespace"] for kw in hooks.named("on_namespace_down")] == ["secondary"]
        assert isinstance(hooks.named("on_namespace_down")[0]["error"], NamespaceUnavailable)
        # When it comes back and the buffered copies are replayed to it
        hubs["secondary"].up()
        await send(tmp_path, second, to=("secondary",))
        # Then they are all suppressed: nothing is delivered twice
        await wait_for(lambda: duplicates(hooks) == 40)
        await running.finish()
    assert all(handled.seen[i] == 1 for i in first + second)
    assert geo.down == frozenset()
    assert [kw["namespace"] for kw in hooks.named("on_namespace_up")] == ["secondary"]


async def test_a_namespace_down_from_the_start_does_not_stop_the_other(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given the primary down before the receiver starts, and messages on the secondary
    first = ids(0, 10)
    await send(tmp_path, first)
    hubs["primary"].down()
    hooks, handled = Recorder(), Handled()
    async with receiver(tmp_path, hooks=hooks) as geo:
        # When the receiver runs
        running = Running(geo, handled.handler())
        # Then the secondary's copies are delivered
        await wait_for(lambda: set(handled.seen) == set(first))
        assert geo.owned["primary"] == frozenset()
        # And when the primary comes back, its copies are all suppressed
        hubs["primary"].up()
        await wait_for(lambda: duplicates(hooks, "primary") == 10)
        await running.finish()
    assert all(handled.seen[i] == 1 for i in first)


async def test_two_geo_receivers_split_the_partitions_and_deliver_each_id_once(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given two geo receivers (two instances) sharing the checkpoint and dedup stores
    handled, hooks = Handled(), Recorder()
    async with receiver(tmp_path, instance_id="a", hooks=hooks) as a, \
            receiver(tmp_path, instance_id="b", hooks=hooks) as b:
        run_a, run_b = Running(a, handled.handler("a")), Running(b, handled.handler("b"))
        # When messages arrive on both namespaces while they balance
        sent = ids(0, 40)
        await send(tmp_path, sent[:20])
        await wait_for(lambda: all(len(r.owned.get(ns, ())) == 2
                                   for r in (a, b) for ns in NAMESPACES))
        await send(tmp_path, sent[20:])
        await wait_for(lambda: set(handled.seen) == set(sent) and duplicates(hooks) == 40)
        # Then each namespace's partitions are split between them
        for namespace in NAMESPACES:
            assert a.owned[namespace].isdisjoint(b.owned[namespace])
            assert a.owned[namespace] | b.owned[namespace] == {"0", "1", "2", "3"}
        await run_a.finish()
        await run_b.finish()
    # And each id was delivered exactly once, by one of them
    assert all(handled.seen[i] == 1 for i in sent)
    assert set(handled.by.values()) == {"a", "b"}


async def test_a_restart_with_the_same_stores_delivers_nothing_again(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given a receiver that handled everything and stopped
    sent = ids(0, 30)
    await send(tmp_path, sent)
    handled, hooks = Handled(), Recorder()
    async with receiver(tmp_path, hooks=hooks) as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: set(handled.seen) == set(sent) and duplicates(hooks) == 30)
        await running.finish()
    # When a new receiver starts on the same stores
    async with receiver(tmp_path, hooks=hooks) as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: all(len(geo.owned.get(ns, ())) == 4 for ns in NAMESPACES))
        await asyncio.sleep(0.5)
        await running.finish()
    # Then it resumed from the checkpoints: nothing was read or delivered again
    assert duplicates(hooks) == 30 and all(handled.seen[i] == 1 for i in sent)
    # When a receiver starts with the checkpoints lost but the same dedup store
    async with receiver(tmp_path, hooks=hooks, checkpoint_store=tmp_path / "new.db") as geo:
        running = Running(geo, handled.handler())
        # Then it reads every copy again, and suppresses all of them
        await wait_for(lambda: duplicates(hooks) == 30 + 60)
        await running.finish()
    assert all(handled.seen[i] == 1 for i in sent)


async def test_a_failing_handler_is_retried_and_delivered_once(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given a handler that fails the first attempt of every id, and "bad" 7 times:
    # more than two rounds of handler_retry's 3 attempts
    sent = ids(0, 10)
    await send(tmp_path, [*sent, "bad"])
    attempts: Counter[str] = Counter()
    succeeded: Counter[str] = Counter()
    errors: list[tuple[str, BaseException]] = []
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    checkpoint_while_failing: list[tuple[int | None, int]] = []

    async def handle(event: PartitionEvent) -> None:
        message_id = event.message.message_id
        attempts[message_id] += 1
        if message_id == "bad" and attempts[message_id] <= 7:
            found = {c.partition_id: c.sequence_number
                     for c in await store.list_checkpoints(group(event.namespace))}
            checkpoint_while_failing.append((found.get(event.partition_id),
                                             event.sequence_number))
            raise ValueError(f"boom {message_id}")
        if attempts[message_id] == 1:
            raise ValueError(f"boom {message_id}")
        succeeded[message_id] += 1

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        assert ctx is not None
        errors.append((ctx.fully_qualified_namespace, exc))

    hooks = Recorder()
    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=1,
                                 checkpoint_every_seconds=None, handler_backoff=0.01)
    # When the receiver runs until every copy was dealt with
    async with receiver(tmp_path, hooks=hooks, on_error=on_error, settings=settings) as geo:
        running = Running(geo, handle)
        await wait_for(lambda: set(succeeded) == {*sent, "bad"} and duplicates(hooks) == 11)
        await running.finish()
    # Then every id succeeded exactly once, "bad" on its 8th attempt (third round)
    assert all(succeeded[i] == 1 and attempts[i] == 2 for i in sent)
    assert succeeded["bad"] == 1 and attempts["bad"] == 8
    # And each round that failed whole reached on_error (its claim released, so the
    # copy in either namespace could be tried next), never skipped
    assert len(errors) == 2 and all(isinstance(exc, ValueError) for _, exc in errors)
    # And no checkpoint passed "bad" while it failed
    assert all(cp is None or cp < seq for cp, seq in checkpoint_while_failing)
    await store.aclose()


async def test_an_event_that_keeps_failing_is_never_checkpointed_past(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given "bad" then "after" in one partition, and a handler that always fails "bad"
    await send(tmp_path, ["bad0", "after0"])
    handled: list[str] = []
    errors: list[BaseException] = []

    async def handle(event: PartitionEvent) -> None:
        if event.message.message_id == "bad0":
            raise ValueError("bad0 cannot be handled")
        handled.append(event.message.message_id)

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        errors.append(exc)

    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=1,
                                 checkpoint_every_seconds=None, handler_backoff=0.01)
    # When the receiver runs a while and stops
    async with receiver(tmp_path, on_error=on_error, settings=settings) as geo:
        running = Running(geo, handle)
        await wait_for(lambda: len(errors) >= 4)
        await running.finish()
    # Then "after" waited behind "bad" in both namespaces, and no checkpoint was written
    assert handled == []
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    for namespace in NAMESPACES:
        assert await store.list_checkpoints(group(namespace)) == []
    await store.aclose()
    # When the handler is fixed, a new receiver delivers both, once
    fixed = Handled()
    async with receiver(tmp_path, settings=settings) as geo:
        running = Running(geo, fixed.handler())
        await wait_for(lambda: set(fixed.seen) == {"bad0", "after0"})
        await running.finish()
    assert fixed.seen == Counter({"bad0": 1, "after0": 1})


async def test_run_is_not_idle_while_an_event_waits_for_its_next_attempt(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given a handler that fails "slow" for its first 9 attempts (3 rounds of 3), and
    # pauses between rounds longer than the idle timeout
    await send(tmp_path, ["slow"])
    attempts: Counter[str] = Counter()
    handled = Handled()
    ok = handled.handler()

    async def handle(event: PartitionEvent) -> None:
        attempts[event.message.message_id] += 1
        if attempts[event.message.message_id] <= 9:
            raise ValueError("not yet")
        await ok(event)

    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=1,
                                 checkpoint_every_seconds=None, handler_backoff=0.4,
                                 max_handler_backoff=0.4)
    # When run() waits for 0.3 s without events
    async with receiver(tmp_path, settings=settings) as geo:
        await asyncio.wait_for(geo.run(handle, idle_timeout=0.3), 20)
    # Then it returned only after "slow" was handled
    assert handled.seen == Counter({"slow": 1})


async def test_stopping_while_a_copy_is_held_leaves_it_for_the_next_owner(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given another process that holds the claim of "x" (its handler is running)
    other = Deduplicator(SqliteDedupStore(tmp_path / "dedup.db"), lease=60)
    assert other.check("x").name == "DELIVER"
    await send(tmp_path, ["x"])
    handled = Handled()
    # When a receiver reads both copies of "x", holds them, and is stopped
    async with receiver(tmp_path) as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: geo.dedup_stats.held >= 2)
        started = time.monotonic()
        await running.finish()
        # Then it stops at once, without delivering or checkpointing past "x"
        assert time.monotonic() - started < 2.0
    assert handled.seen == Counter()
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    for namespace in NAMESPACES:
        assert await store.list_checkpoints(group(namespace)) == []
    await store.aclose()
    # When the other process fails and releases "x", a new receiver delivers it once
    other.failed("x")
    other.close()
    async with receiver(tmp_path) as geo:
        running = Running(geo, handled.handler())
        await wait_for(lambda: handled.seen["x"] == 1)
        await asyncio.sleep(0.3)
        await running.finish()
    assert handled.seen == Counter({"x": 1})


def test_the_sync_twin_delivers_once_and_returns_when_idle(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given messages in both namespaces and a sync geo receiver
    sent = ids(0, 20)
    asyncio.run(send(tmp_path, sent))
    seen: Counter[str] = Counter()
    threads: set[str] = set()
    stop = threading.Event()

    def handle(event: PartitionEvent) -> None:
        seen[event.message.message_id] += 1
        threads.add(threading.current_thread().name)
        if set(seen) == set(sent):
            stop.set()

    kw: dict[str, Any] = {
        "primary": "local://primary", "secondary": "local://secondary", "entity": HUB,
        "data_dir": tmp_path, "checkpoint_store": tmp_path / "cp.db",
        "dedup_store": tmp_path / "dedup.db", "settings": SETTINGS, "balance": FAST,
    }
    # When it runs a plain handler until the handler sets the stop event
    with GeoPartitionReceiver(**kw) as geo:
        geo.run(handle, stop=stop)
    # Then each id was delivered once, in worker threads, not the caller's
    assert all(seen[i] == 1 for i in sent)
    assert threading.current_thread().name not in threads
    # When it starts again on the same stores with an idle timeout
    with GeoPartitionReceiver(**kw) as geo:
        started = time.monotonic()
        geo.run(handle, idle_timeout=1.0)
        # Then it returns by itself, having delivered nothing again
        assert time.monotonic() - started >= 1.0
        # And start() / stop() work as well
        geo.start(handle)
        wait_for_sync(lambda: all(len(geo.owned.get(ns, ())) == 4 for ns in NAMESPACES))
        geo.stop()
        assert geo.owned == {}
    assert all(seen[i] == 1 for i in sent)


async def test_a_stop_during_a_handler_backoff_or_retry_round_ends_after_that_round(
    tmp_path: Path, hubs: dict[str, LocalNamespace]
) -> None:
    # Given a handler that always fails "bad0": rounds of 3 attempts (QUICK), and a
    # pause of 30 s between rounds (far beyond the 10 s that finish() waits)
    await send(tmp_path, ["bad0"], to=("primary",))
    attempts: list[float] = []
    errors: list[BaseException] = []
    in_round = asyncio.Event()
    go_on = asyncio.Event()

    async def handle(event: PartitionEvent) -> None:
        attempts.append(time.monotonic())
        if len(attempts) == 4:  # the first attempt of the second round waits
            in_round.set()
            await go_on.wait()
        raise ValueError("bad0 cannot be handled")

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        errors.append(exc)

    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=1,
                                 checkpoint_every_seconds=None, handler_backoff=30.0,
                                 max_handler_backoff=30.0)
    async with receiver(tmp_path, on_error=on_error, settings=settings) as geo:
        # When the first round failed and the partition pauses before the next one,
        # and the receiver is stopped
        running = Running(geo, handle)
        await wait_for(lambda: len(errors) == 1)
        await running.finish()
        # Then the stop ended the pause: no new round began
        assert len(attempts) == QUICK.attempts
    # Given the same, but stopped while an attempt of a round runs
    attempts.clear()
    errors.clear()
    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=1,
                                 checkpoint_every_seconds=None, handler_backoff=0.01,
                                 max_handler_backoff=0.01)
    async with receiver(tmp_path, on_error=on_error, settings=settings) as geo:
        running = Running(geo, handle)
        await asyncio.wait_for(in_round.wait(), 10)
        stopping = asyncio.get_running_loop().create_task(running.finish())
        await asyncio.sleep(0.2)
        go_on.set()
        await stopping
        # Then that round's attempts ran out, and no other round began
        assert len(attempts) == 2 * QUICK.attempts
        assert len(errors) == 2
