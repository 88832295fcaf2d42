"""The unmodified azure-eventhub SDK against the emulator."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.exceptions import AuthenticationError, EventHubError

from gateway.consumer import (
    AsyncPartitionProcessor,
    BalanceSettings,
    PartitionContext,
    ProcessorSettings,
)
from gateway.consumer._sqlite_store import SqliteCheckpointStore
from gateway.emulator import Emulator
from gateway.emulator.amqp import _eventhubs
from gateway.transports import EventPosition, LocalTransport, PartitionEvent
from gateway.transports.eventhubs import EventHubsTransport
from gateway.transports.local import _events as _local_events
from replication import Message, OwnershipLost
from tests.gateway.emulator.conftest import HUB

pytestmark = pytest.mark.anyio


@pytest.fixture
async def producer(conn_str: str) -> AsyncIterator[EventHubProducerClient]:
    client = EventHubProducerClient.from_connection_string(
        conn_str, eventhub_name=HUB, retry_total=0)
    async with client:
        yield client


def consumer(conn_str: str, **kwargs: Any) -> EventHubConsumerClient:
    return EventHubConsumerClient.from_connection_string(
        conn_str, consumer_group="$Default", eventhub_name=HUB, retry_total=0, **kwargs)


async def send(producer: EventHubProducerClient, bodies: list[str], *,
               partition_id: str | None = None, partition_key: str | None = None) -> None:
    batch = await producer.create_batch(partition_id=partition_id, partition_key=partition_key)
    for body in bodies:
        batch.add(EventData(body))
    await producer.send_batch(batch)


async def read(conn_str: str, partition_id: str, position: Any, *, expect: int,
               inclusive: bool = False, before: Any = None, within: float = 3.0
               ) -> list[Any]:
    """Receive from one partition until ``expect`` events arrived (or ``within`` s passed).

    ``before`` runs from the consumer's first idle callback until the read ends.
    """
    got: list[Any] = []
    done = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []

    async def on_event(context: Any, event: Any) -> None:
        if event is not None:
            got.append(event)
        elif before is not None and not tasks:
            tasks.append(asyncio.create_task(before()))
        if len(got) >= expect:
            done.set()

    async with consumer(conn_str) as c:
        task = asyncio.create_task(c.receive(
            on_event, partition_id=partition_id, starting_position=position,
            starting_position_inclusive=inclusive, max_wait_time=0.2))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), within)
        for t in (task, *tasks):
            t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.gather(*tasks, return_exceptions=True)
    return got


async def partition_of(data_dir: Path, body: bytes) -> str:
    """The partition holding the event ``body`` (looked up through local://primary)."""
    async with LocalTransport("primary", data_dir=data_dir) as local:
        for pid in await local.get_partition_ids(HUB):
            events = await local.read_partition(HUB, pid, position=EventPosition.earliest())
            if any(e.message.body == body for e in events):
                return pid
    raise AssertionError(f"no event {body!r}")


async def test_properties_and_where_events_go(data_dir: Path,
                                               producer: EventHubProducerClient) -> None:
    props = await producer.get_eventhub_properties()
    assert props["eventhub_name"] == HUB
    assert props["partition_ids"] == ["0", "1", "2", "3"]
    empty = await producer.get_partition_properties("1")
    assert (empty["is_empty"], empty["last_enqueued_sequence_number"]) == (True, -1)

    await send(producer, ["a", "bb"], partition_id="1")
    after = await producer.get_partition_properties("1")
    assert after["is_empty"] is False
    assert after["beginning_sequence_number"] == 0
    assert (after["last_enqueued_sequence_number"], after["last_enqueued_offset"]) == (1, "1")
    assert after["last_enqueued_time_utc"] > datetime.datetime(2020, 1, 1,
                                                               tzinfo=datetime.timezone.utc)

    # Batches sent with one partition key share a partition; "p" goes to partition 2
    await send(producer, ["k1", "k2"], partition_key="customer-7")
    await send(producer, ["k3"], partition_key="customer-7")
    await send(producer, ["p"], partition_id="2")
    async with LocalTransport("primary", data_dir=data_dir) as local:
        found: dict[str, list[bytes]] = {}
        for pid in await local.get_partition_ids(HUB):
            events = await local.read_partition(HUB, pid, position=EventPosition.earliest())
            found[pid] = [e.message.body for e in events]
    keyed = [pid for pid, bodies in found.items() if b"k1" in bodies]
    assert len(keyed) == 1
    assert [b for b in found[keyed[0]] if b.startswith(b"k")] == [b"k1", b"k2", b"k3"]
    assert b"p" in found["2"]


async def test_unknown_hub(conn_str: str) -> None:
    client = EventHubProducerClient.from_connection_string(conn_str, eventhub_name="nope",
                                                           retry_total=0)
    async with client:
        with pytest.raises(EventHubError):
            await client.get_eventhub_properties()
        # The service refuses the token for a missing hub (404): an AuthenticationError.
        with pytest.raises(AuthenticationError, match=r"(?s)404.*could not be found"):
            await client.send_batch([EventData("x")])


async def test_receive_from_each_starting_position(conn_str: str, data_dir: Path) -> None:
    # Given four events in partition 0 (sent through local://primary: quicker)
    async with LocalTransport("primary", data_dir=data_dir) as local:
        for body in (b"e0", b"e1", b"e2", b"e3"):
            await local.send(HUB, [Message(body, partition_key="fixed")])
        pid = await partition_of(data_dir, b"e0")
        e1 = (await local.read_partition(HUB, pid, position=EventPosition.earliest()))[1]

        async def more() -> None:
            # The consumer may still be attaching: send until one "new" arrives.
            while True:
                await local.send(HUB, [Message(b"new", partition_key="fixed")])
                await asyncio.sleep(0.2)

        # When they are read from each kind of starting position at once
        since = datetime.datetime.fromtimestamp(e1.enqueued_time - 60, datetime.timezone.utc)
        earliest, by_offset, by_offset_inclusive, by_sequence, by_time, latest = (
            await asyncio.gather(
                # (six consumers attach at once: on a loaded machine that takes a while)
                read(conn_str, pid, "-1", expect=4, within=10),
                read(conn_str, pid, str(e1.offset), expect=2, within=10),
                read(conn_str, pid, str(e1.offset), inclusive=True, expect=3, within=10),
                read(conn_str, pid, 2, inclusive=True, expect=2, within=10),
                read(conn_str, pid, since, expect=4, within=10),
                read(conn_str, pid, "@latest", expect=1, before=more, within=10),
            ))

    def bodies(events: list[Any], n: int) -> list[str]:
        # Each read may also see "new", sent while they run.
        return [e.body_as_str() for e in events][:n]

    assert bodies(earliest, 4) == ["e0", "e1", "e2", "e3"]
    assert [e.sequence_number for e in earliest][:4] == [0, 1, 2, 3]
    assert earliest[1].offset == str(e1.offset)
    assert bodies(by_offset, 2) == ["e2", "e3"]
    assert bodies(by_offset_inclusive, 3) == ["e1", "e2", "e3"]
    assert bodies(by_sequence, 2) == ["e2", "e3"]
    assert bodies(by_time, 4) == ["e0", "e1", "e2", "e3"]
    assert {e.body_as_str() for e in latest} == {"new"}


async def test_events_keep_properties_and_local_events_read_alike(
        conn_str: str, data_dir: Path, producer: EventHubProducerClient) -> None:
    # Given an event sent with the SDK and one through local://primary, with one key
    event = EventData("with props")
    event.properties = {"kind": "test", "n": 3}
    await producer.send_batch([event], partition_key="pk")
    async with LocalTransport("primary", data_dir=data_dir) as local:
        await local.send(HUB, [Message(b"local event", partition_key="pk")])
    # When their partition is read through the emulator
    got = await read(conn_str, await partition_of(data_dir, b"with props"), "-1", expect=2)
    # Then both are there, with their properties and key
    sdk, from_local = got
    assert (sdk.body_as_str(), sdk.properties) == ("with props", {b"kind": b"test", b"n": 3})
    assert (from_local.body_as_str(), from_local.properties) == ("local event", {})
    assert sdk.partition_key == from_local.partition_key == b"pk"


async def test_a_higher_owner_level_takes_the_partition(conn_str: str) -> None:
    started, failed = asyncio.Event(), asyncio.Event()
    errors: dict[int, Exception] = {}

    def reader(level: int) -> Any:
        async def on_event(context: Any, event: Any) -> None:
            started.set()  # the first idle callback: the link is attached

        async def on_error(context: Any, error: Exception) -> None:
            errors.setdefault(level, error)
            failed.set()

        c = consumer(conn_str)
        task = asyncio.create_task(c.receive(on_event, partition_id="3", owner_level=level,
                                             on_error=on_error, max_wait_time=0.2))
        return c, task

    # Given a reader with owner level 1
    first, t1 = reader(1)
    await asyncio.wait_for(started.wait(), 5)
    # When one with level 2 starts, the first loses the partition
    second, t2 = reader(2)
    await asyncio.wait_for(failed.wait(), 5)
    failed.clear()
    # and one with level 0 is refused
    third, t3 = reader(0)
    await asyncio.wait_for(failed.wait(), 5)
    for task in (t1, t2, t3):
        task.cancel()
    await asyncio.gather(t1, t2, t3, return_exceptions=True)
    for c in (first, second, third):
        await c.close()
    assert set(errors) == {1, 0}
    assert "amqp:link:stolen" in str(errors[1]) and "higher epoch of '2'" in str(errors[1])
    assert "amqp:link:stolen" in str(errors[0]) and "epoch '0'" in str(errors[0])


async def test_wrong_key(emulator: Emulator) -> None:
    good = emulator.connection_string("primary")
    key = good.split("SharedAccessKey=")[1].split(";")[0]
    bad = good.replace(key, "bm90IHRoZSBrZXk=")
    client = EventHubProducerClient.from_connection_string(bad, eventhub_name=HUB, retry_total=0)
    async with client:
        with pytest.raises(AuthenticationError) as info:
            await client.get_eventhub_properties()
    assert "bm90IHRoZSBrZXk=" not in str(info.value)


async def test_checkpoints_in_the_sqlite_store(conn_str: str, tmp_path: Path,
                                               data_dir: Path) -> None:
    async with LocalTransport("primary", data_dir=data_dir) as local:
        await local.send(HUB, [Message(b"c0", partition_key="c"),
                               Message(b"c1", partition_key="c")])
    pid = await partition_of(data_dir, b"c0")
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    got: list[Any] = []
    namespaces: set[str] = set()
    done = asyncio.Event()

    async def on_event(context: Any, event: Any) -> None:
        if event is None:
            return
        got.append(event)
        namespaces.add(context.fully_qualified_namespace)
        await context.update_checkpoint(event)
        if len(got) == 2:
            done.set()

    client = consumer(conn_str, checkpoint_store=store.sdk())
    async with client:
        task = asyncio.create_task(client.receive(on_event, partition_id=pid,
                                                  starting_position="-1", max_wait_time=0.2))
        await asyncio.wait_for(done.wait(), 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    [namespace] = namespaces
    checkpoints = await store.sdk().list_checkpoints(namespace, HUB, "$Default")
    assert [(c["partition_id"], c["sequence_number"]) for c in checkpoints] == [(pid, 1)]


async def finish(client: EventHubConsumerClient, task: asyncio.Task[Any]) -> None:
    """Stop a receive: close the client first (its connections end cleanly), then the
    receive task, which the SDK leaves sleeping in its load-balancing loop."""
    await client.close()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_last_enqueued_event_properties_are_tracked(conn_str: str,
                                                          producer: EventHubProducerClient) -> None:
    # Given three events in partition 2
    await send(producer, ["t0", "t1", "t2"], partition_id="2")
    expected = await producer.get_partition_properties("2")
    seen: list[Any] = []
    done = asyncio.Event()

    async def on_event(context: Any, event: Any) -> None:
        if event is not None:
            seen.append(context.last_enqueued_event_properties)
            if len(seen) == 3:
                done.set()

    # When a consumer tracks the last enqueued event while reading the first ones
    async with consumer(conn_str) as c:
        task = asyncio.create_task(c.receive(
            on_event, partition_id="2", starting_position="-1", max_wait_time=0.2,
            track_last_enqueued_event_properties=True))
        await asyncio.wait_for(done.wait(), 5)
        await finish(c, task)
    # Then every event carries the partition's last enqueued event, as on Event Hubs
    props = seen[0]
    assert props is not None
    assert props["sequence_number"] == expected["last_enqueued_sequence_number"] == 2
    assert props["offset"] == expected["last_enqueued_offset"]
    assert props["enqueued_time"] == expected["last_enqueued_time_utc"]
    now = datetime.datetime.now(datetime.timezone.utc)
    assert now - datetime.timedelta(seconds=10) < props["retrieval_time"] <= now


async def test_starting_at_an_events_own_enqueued_time_inclusive_returns_it(
        conn_str: str, data_dir: Path) -> None:
    # Given events sent a few at a time (several share no millisecond with the next)
    async with LocalTransport("primary", data_dir=data_dir) as local:
        for i in range(6):
            await local.send(HUB, [Message(f"w{i}".encode(), partition_key="when")])
            await asyncio.sleep(0.003)
    pid = await partition_of(data_dir, b"w0")
    everything = await read(conn_str, pid, "-1", expect=6)
    # When each one's enqueued time, as the SDK reports it, is the inclusive start
    # (every third event: each read costs the SDK's consumer a second to stop)
    for event in everything[1::3]:
        got = await read(conn_str, pid, event.enqueued_time, inclusive=True, expect=1)
        # Then the first event returned is that event (or one of its millisecond)
        same_ms = [e.sequence_number for e in everything if e.enqueued_time == event.enqueued_time]
        assert got and got[0].sequence_number == min(same_ms), (event.sequence_number, got)
        # and exclusive starts after it: with every later event, and nothing else
        later = [e.sequence_number for e in everything if e.enqueued_time > event.enqueued_time]
        after = await read(conn_str, pid, event.enqueued_time, expect=len(later) or 1,
                           within=3.0 if later else 0.5)
        assert [e.sequence_number for e in after] == later


FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=0.6, fence_margin=0.1, settle_cycles=2)


async def run_processor(transport: Any, store: SqliteCheckpointStore, expect: int) -> list[str]:
    """Run geogateway's processor until ``expect`` events were handled, then stop it."""
    handled: list[str] = []
    done = asyncio.Event()

    async def on_event(ctx: PartitionContext, event: PartitionEvent | None) -> None:
        if event is not None:
            handled.append(event.message.body.decode())
            await ctx.update_checkpoint(event)
            if len(handled) >= expect:
                done.set()

    processor = AsyncPartitionProcessor(
        transport=transport, entity=HUB, store=store, on_event=on_event, balance=FAST,
        settings=ProcessorSettings(poll_wait=0.1))
    async with transport:
        await processor.start()
        await asyncio.wait_for(done.wait(), 20)
        await processor.stop(handover_timeout=0)
    return handled


async def sdk_reads(conn_str: str, store: SqliteCheckpointStore, partition_id: str,
                    owner_level: int | None, expect: int) -> tuple[list[str], list[Exception]]:
    """Receive with the SDK's client and checkpoint store until ``expect`` events came."""
    got: list[str] = []
    errors: list[Exception] = []
    done = asyncio.Event()

    async def on_event(context: Any, event: Any) -> None:
        if event is not None:
            got.append(event.body_as_str())
            if len(got) >= expect:
                done.set()

    async def on_error(context: Any, error: Exception) -> None:
        errors.append(error)
        done.set()

    async with consumer(conn_str, checkpoint_store=store.sdk()) as c:
        task = asyncio.create_task(c.receive(
            on_event, partition_id=partition_id, owner_level=owner_level, on_error=on_error,
            starting_position="-1", max_wait_time=0.2))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), 10)
        await finish(c, task)
    return got, errors


@pytest.mark.parametrize("owner_level", [0, None])
async def test_a_consumer_group_moves_from_the_processor_to_the_sdk_client(
        conn_str: str, producer: EventHubProducerClient, tmp_path: Path,
        owner_level: int | None) -> None:
    # Given geogateway's processor that read partition 0 over the emulator, with
    # checkpoints in a SQLite store, and stopped
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    await send(producer, ["g0", "g1", "g2"], partition_id="0")
    transport = EventHubsTransport.from_connection_string(conn_str)
    assert await run_processor(transport, store, expect=3) == ["g0", "g1", "g2"]
    await send(producer, ["s0", "s1"], partition_id="0")
    # When the SDK's EventHubConsumerClient takes the consumer group over with a lower
    # owner level (or none), with the same checkpoint store
    got, errors = await sdk_reads(conn_str, store, "0", owner_level, expect=2)
    # Then it is not fenced, and continues from the processor's checkpoint
    assert errors == []
    assert got == ["s0", "s1"]


async def test_a_closed_local_reader_does_not_fence_the_sdk_client(
        conn_str: str, data_dir: Path, tmp_path: Path) -> None:
    # Given geogateway's processor that read local://primary (the emulator's data)
    # and stopped
    async with LocalTransport("primary", data_dir=data_dir) as local:
        await local.send(HUB, [Message(b"l0", partition_key="x")])
    pid = await partition_of(data_dir, b"l0")
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    local = LocalTransport("primary", data_dir=data_dir)
    assert await run_processor(local, store, expect=1) == ["l0"]
    # When the SDK's client reads that partition with a lower owner level
    got, errors = await sdk_reads(conn_str, store, pid, 0, expect=1)
    # Then it is not fenced
    assert (got, errors) == (["l0"], [])


async def test_an_open_local_reader_still_fences_the_sdk_client(
        conn_str: str, data_dir: Path, tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "checkpoints.db")
    async with LocalTransport("primary", data_dir=data_dir) as local:
        # Given a local:// reader of partition 2 with owner level 10, open
        await local.read_partition(HUB, "2", position=EventPosition.earliest(), owner_level=10)
        # When the SDK's client reads it with level 5 / Then it is refused (link stolen)
        got, errors = await sdk_reads(conn_str, store, "2", 5, expect=1)
        assert got == [] and len(errors) == 1
        assert "amqp:link:stolen" in str(errors[0]) and "owner level 10" in str(errors[0])
        # and while a reader with level 11 is open, the local reader is fenced off
        got_one = asyncio.Event()

        async def on_event(context: Any, event: Any) -> None:
            got_one.set()

        async with consumer(conn_str) as c:
            task = asyncio.create_task(c.receive(on_event, partition_id="2", owner_level=11,
                                                 max_wait_time=0.2))
            await asyncio.wait_for(got_one.wait(), 10)
            with pytest.raises(OwnershipLost, match="owner level 11"):
                for _ in range(50):  # the SDK may call on_event before its link reads
                    await local.read_partition(HUB, "2", position=EventPosition.earliest(),
                                               owner_level=10)
                    await asyncio.sleep(0.1)
            await finish(c, task)


async def test_an_open_reader_waiting_for_credit_keeps_its_owner_level(
        conn_str: str, data_dir: Path, producer: EventHubProducerClient,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given leases of one second, renewed every quarter of a second
    monkeypatch.setattr(_local_events, "LEASE", 1.0)
    monkeypatch.setattr(_eventhubs, "_RENEW", 0.25)
    await send(producer, ["slow0", "slow1", "slow2"], partition_id="3")
    busy, release = asyncio.Event(), asyncio.Event()

    async def on_event(context: Any, event: Any) -> None:
        if event is not None:
            busy.set()
            await release.wait()  # a slow handler: the link gets no more credit

    # When an SDK reader with owner level 5 is stuck in its handler for two leases
    async with consumer(conn_str) as c:
        task = asyncio.create_task(c.receive(on_event, partition_id="3", owner_level=5,
                                             prefetch=1, starting_position="-1"))
        await asyncio.wait_for(busy.wait(), 10)
        await asyncio.sleep(2.5)
        # Then its level still fences a local:// reader with a lower one
        async with LocalTransport("primary", data_dir=data_dir) as local:
            with pytest.raises(OwnershipLost, match="owner level 5"):
                await local.read_partition(HUB, "3", position=EventPosition.earliest(),
                                           owner_level=1)
        release.set()
        await finish(c, task)
