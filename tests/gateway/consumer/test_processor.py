from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.consumer import InMemoryCheckpointStore, SqliteCheckpointStore
from gateway.consumer._balance import BalanceSettings
from gateway.consumer._partition import CloseReason, PartitionContext, ProcessorSettings
from gateway.consumer._processor import AsyncPartitionProcessor
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import EventPosition, PartitionEvent
from replication import ConfigError, Message, OwnershipLost

pytestmark = pytest.mark.anyio

HUB = "telemetry"
#: Claims that expire within 0.6 s, for the tests of a crash (a survivor takes over).
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=0.6, fence_margin=0.1, settle_cycles=2)
#: FAST, but claims kept 10 s: no claim moves but by a hand-over, even when a loaded
#: machine holds a heartbeat back past 0.6 s. (A lone processor's claim taken again
#: starts at the latest position, and a partition one of two dropped is read again from
#: its checkpoint by the other: at-least-once, where these tests claim exactly once.)
STEADY = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                        heartbeat_expiry=10.0, fence_margin=0.1, settle_cycles=2)


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[LocalTransport]:
    LocalNamespace("primary", data_dir=tmp_path).create_partitioned(HUB, partitions=4)
    transport = LocalTransport("primary", data_dir=tmp_path)
    yield transport
    await transport.aclose()


async def send(hub: LocalTransport, start: int, count: int) -> list[str]:
    ids = [f"e{i:05d}" for i in range(start, start + count)]
    for i in ids:
        await hub.send(HUB, [Message(i, message_id=i, partition_key=f"k{int(i[1:]) % 7}")])
    return ids


class Recorder:
    """Handles events, remembering which instance saw which id, in which order."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.order: dict[str, list[int]] = defaultdict(list)
        self.closed: list[tuple[str, CloseReason]] = []
        self.by: dict[str, set[str]] = defaultdict(set)

    def handler(self, name: str) -> Callable[[PartitionContext, PartitionEvent | None], object]:
        async def on_event(ctx: PartitionContext, event: PartitionEvent | None) -> None:
            assert event is not None
            self.seen[event.message.message_id] += 1
            self.order[ctx.partition_id].append(event.sequence_number)
            self.by[name].add(ctx.partition_id)
        return on_event

    async def on_close(self, ctx: PartitionContext, reason: CloseReason) -> None:
        self.closed.append((ctx.partition_id, reason))


def processor(hub: LocalTransport, store, recorder: Recorder, name: str,
              **kw) -> AsyncPartitionProcessor:
    kw.setdefault("settings", ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                                                checkpoint_every_seconds=None))
    kw.setdefault("balance", STEADY)
    return AsyncPartitionProcessor(
        transport=hub, entity=HUB, store=store, on_event=recorder.handler(name),
        on_partition_close=recorder.on_close, instance_id=name, **kw,
    )


async def until(predicate: Callable[[], bool], within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_one_instance_processes_every_partition_in_order_and_checkpoints(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given 60 events spread over 4 partitions
    ids = await send(hub, 0, 60)
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    recorder = Recorder()
    # When one processor runs until all are seen, then stops
    async with processor(hub, store, recorder, "a") as proc:
        await until(lambda: set(recorder.seen) == set(ids))
        assert proc.owned == {"0", "1", "2", "3"}
    # Then each event was handled once, in sequence order within its partition
    assert all(recorder.seen[i] == 1 for i in ids)
    for sequence in recorder.order.values():
        assert sequence == sorted(sequence)
    # And stop checkpointed every partition at its last event and closed it as SHUTDOWN
    checkpoints = {c.partition_id: c for c in await store.list_checkpoints(proc.group)}
    assert {p: c.sequence_number for p, c in checkpoints.items()} == {
        p: seq[-1] for p, seq in recorder.order.items()}
    assert sorted(recorder.closed) == [(p, CloseReason.SHUTDOWN) for p in "0123"]
    await store.aclose()


async def test_two_instances_share_partitions_and_a_restart_resumes_from_checkpoints(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given events and two processors sharing one SQLite store
    ids = await send(hub, 0, 40)
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    recorder = Recorder()
    a = processor(hub, store, recorder, "a")
    b = processor(hub, store, recorder, "b")
    await a.start()
    await b.start()
    # When both run until everything is seen
    await until(lambda: set(recorder.seen) == set(ids))
    await until(lambda: len(a.owned) == len(b.owned) == 2)
    # Then each partition is read by exactly one of them
    assert a.owned.isdisjoint(b.owned) and a.owned | b.owned == {"0", "1", "2", "3"}
    await a.stop()
    await b.stop()
    # When more events arrive and a new instance starts on the same store
    more = await send(hub, 40, 20)
    async with processor(hub, store, recorder, "c"):
        await until(lambda: set(recorder.seen) >= set(more))
    # Then it started from the checkpoints: nothing was handled twice
    assert all(recorder.seen[i] == 1 for i in ids + more)
    await store.aclose()


async def test_graceful_hand_over_to_a_newcomer_processes_nothing_twice(
    hub: LocalTransport,
) -> None:
    # Given one instance that owns every partition and is processing
    store = InMemoryCheckpointStore()
    recorder = Recorder()
    first = processor(hub, store, recorder, "a")
    await first.start()
    ids = await send(hub, 0, 40)
    await until(lambda: set(recorder.seen) == set(ids))
    # When a second instance joins while events keep coming
    second = processor(hub, store, recorder, "b")
    await second.start()
    ids += await send(hub, 40, 40)
    await until(lambda: len(second.owned) == 2 and len(first.owned) == 2)
    ids += await send(hub, 80, 20)
    await until(lambda: set(recorder.seen) == set(ids))
    await first.stop()
    await second.stop()
    # Then the partitions moved with a checkpoint first: every event handled exactly once
    assert [i for i in ids if recorder.seen[i] != 1] == []
    assert recorder.by["b"]  # and the newcomer really processed some


async def test_a_crashed_instance_loses_nothing(hub: LocalTransport) -> None:
    # Given an instance that processed some events and then dies without stopping
    store = InMemoryCheckpointStore()
    recorder = Recorder()
    doomed = processor(hub, store, recorder, "a", balance=FAST)  # its claims expire
    await doomed.start()
    ids = await send(hub, 0, 30)
    await until(lambda: set(recorder.seen) == set(ids))
    assert doomed._task is not None
    doomed._task.cancel()  # a crash: no hand-over, its records go stale
    for reader in list(doomed._readers.values()):
        reader.stopping = True
    # When a survivor runs
    ids += await send(hub, 30, 20)
    async with processor(hub, store, recorder, "b", balance=FAST) as survivor:
        await until(lambda: set(recorder.seen) == set(ids))
        # Then it took over every partition and nothing was lost (at-least-once)
        assert survivor.owned == {"0", "1", "2", "3"}
    assert all(recorder.seen[i] >= 1 for i in ids)


async def test_checkpoint_after_losing_ownership_is_fenced(hub: LocalTransport) -> None:
    # Given an instance that owned partitions and was replaced in the store
    store = InMemoryCheckpointStore()
    recorder = Recorder()
    contexts: list[PartitionContext] = []

    async def keep(ctx: PartitionContext, event: PartitionEvent | None) -> None:
        contexts.append(ctx)

    old = AsyncPartitionProcessor(transport=hub, entity=HUB, store=store, on_event=keep,
                                  instance_id="old", balance=FAST,
                                  settings=ProcessorSettings(poll_wait=0.05))
    await old.start()
    await send(hub, 0, 4)
    await until(lambda: bool(contexts))
    event = contexts[0].last_event
    records = await store.list_ownership(old.group)
    await store.claim_ownership([r.claimed_by("thief") for r in records])
    # When the old owner tries to checkpoint / Then the store refuses it
    with pytest.raises(OwnershipLost):
        await old.checkpoint(contexts[0].partition_id, event or PartitionEvent(
            message=Message("x"), namespace="primary", entity=HUB,
            partition_id=contexts[0].partition_id, sequence_number=0, offset=0,
            enqueued_time=0.0))
    old._task.cancel()  # type: ignore[union-attr]
    assert recorder.seen == Counter()


async def test_a_higher_owner_level_detaches_the_old_reader(hub: LocalTransport) -> None:
    # Given a processor reading every partition
    store = InMemoryCheckpointStore()
    recorder = Recorder()
    async with processor(hub, store, recorder, "a") as proc:
        await until(lambda: proc.owned == {"0", "1", "2", "3"})
        # When another reader opens partition 0 with a higher owner level
        await hub.read_partition(HUB, "0", position=EventPosition(latest=True),
                                 owner_level=int(time.time() * 1000) + 10_000)
        # Then the processor's reader of partition 0 stops with OWNERSHIP_LOST
        await until(lambda: ("0", CloseReason.OWNERSHIP_LOST) in recorder.closed)
        assert "0" not in proc.owned


async def test_idle_calls_batches_and_starting_position(hub: LocalTransport) -> None:
    # Given events already in the hub before the processor starts
    await send(hub, 0, 12)
    store = InMemoryCheckpointStore()
    batches: list[int] = []
    idle: list[str] = []

    async def on_batch(ctx: PartitionContext, events: list[PartitionEvent]) -> None:
        if events:
            batches.append(len(events))
        else:
            idle.append(ctx.partition_id)

    # When it starts at the latest position with batches and an idle timeout
    async with AsyncPartitionProcessor(
        transport=hub, entity=HUB, store=store, on_event_batch=on_batch, balance=STEADY,
        starting_position=lambda pid: EventPosition(latest=True),
        settings=ProcessorSettings(max_batch_size=3, max_wait_time=0.1, poll_wait=0.05),
    ) as proc:
        await until(lambda: proc.owned == {"0", "1", "2", "3"})
        await until(lambda: len(set(idle)) == 4)
        await send(hub, 12, 12)
        await until(lambda: sum(batches) == 12)
    # Then old events were skipped, new ones came in batches of at most 3,
    # and idle partitions were called with an empty batch
    assert max(batches) <= 3


def test_exactly_one_handler_is_required(tmp_path: Path) -> None:
    transport = LocalTransport("primary", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="exactly one"):
        AsyncPartitionProcessor(transport=transport, entity=HUB,
                                store=InMemoryCheckpointStore())
    with pytest.raises(ConfigError, match="max_batch_size"):
        ProcessorSettings(max_batch_size=0)
