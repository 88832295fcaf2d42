"""Partitioned entities of the local namespace: routing, positions, owner-level fencing."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from gateway.transports import EventPosition, LocalNamespace, LocalTransport
from gateway.transports.local._events import partition_for
from replication import Message, MessageRejected, OwnershipLost
from tests.conftest import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def hub(namespace: LocalNamespace) -> str:
    namespace.create_partitioned("hub", partitions=4)
    return "hub"


async def read_all(t: LocalTransport, entity: str) -> dict[str, list[Message]]:
    out = {}
    for pid in await t.get_partition_ids(entity):
        events = await t.read_partition(entity, pid, position=EventPosition.earliest())
        out[pid] = [e.message for e in events]
    return out


def test_partition_for_is_stable() -> None:
    # blake2b, not hash(): the same in every process and every run.
    assert [partition_for(k, 4) for k in ("a", "b", "c", "device-17")] == [
        partition_for(k, 4) for k in ("a", "b", "c", "device-17")
    ]
    assert partition_for("device-17", 4) == 1
    assert {partition_for(str(i), 4) for i in range(100)} == {0, 1, 2, 3}


async def test_same_key_goes_to_same_partition(hub: str, transport: LocalTransport) -> None:
    await transport.send(hub, [Message(str(i).encode(), partition_key="device-17")
                               for i in range(5)])
    await transport.send(hub, [Message(b"x", partition_key="device-17")])
    parts = await read_all(transport, hub)
    assert {pid: len(ms) for pid, ms in parts.items() if ms} == {"1": 6}
    assert [m.body for m in parts["1"]] == [b"0", b"1", b"2", b"3", b"4", b"x"]


async def test_without_key_spreads_over_partitions(hub: str, transport: LocalTransport) -> None:
    await transport.send(hub, [Message(f"{i}".encode()) for i in range(8)])
    parts = await read_all(transport, hub)
    assert sorted(parts) == ["0", "1", "2", "3"]
    assert [len(ms) for ms in parts.values()] == [2, 2, 2, 2]


async def test_sequence_numbers_and_offsets(hub: str, transport: LocalTransport,
                                            clock: FakeClock) -> None:
    await transport.send(hub, [Message(b"x" * 10, partition_key="k") for _ in range(3)])
    await transport.send(hub, [Message(b"", partition_key="k")])
    await transport.send(hub, [Message(b"y", partition_key="k")])
    pid = str(partition_for("k", 4))
    events = await transport.read_partition(hub, pid, position=EventPosition.earliest())
    assert [e.sequence_number for e in events] == [0, 1, 2, 3, 4]
    assert [e.offset for e in events] == [0, 10, 20, 30, 31]
    assert all(e.partition_id == pid and e.enqueued_time == clock.now for e in events)
    assert all(e.namespace == "primary" and e.entity == hub for e in events)


async def test_read_from_each_position_kind(hub: str, transport: LocalTransport,
                                            clock: FakeClock) -> None:
    # Given five events on one partition, enqueued one second apart
    for i in range(5):
        await transport.send(hub, [Message(f"{i}".encode(), partition_key="k")])
        clock.advance(1)
    pid = str(partition_for("k", 4))
    events = await transport.read_partition(hub, pid, position=EventPosition.earliest())

    async def seqs(position: EventPosition, max_events: int = 100) -> list[int]:
        got = await transport.read_partition(hub, pid, position=position, max_events=max_events)
        return [e.sequence_number for e in got]

    # Then each kind of position starts where it says
    assert await seqs(EventPosition.earliest(), max_events=2) == [0, 1]
    assert await seqs(EventPosition(sequence_number=2)) == [3, 4]
    assert await seqs(EventPosition(sequence_number=2, inclusive=True)) == [2, 3, 4]
    assert await seqs(EventPosition(offset=events[1].offset)) == [2, 3, 4]
    assert await seqs(EventPosition(offset=events[1].offset, inclusive=True)) == [1, 2, 3, 4]
    assert await seqs(EventPosition(enqueued_time=events[3].enqueued_time)) == [4]
    assert await seqs(EventPosition(enqueued_time=events[3].enqueued_time,
                                    inclusive=True)) == [3, 4]
    assert await seqs(EventPosition(latest=True)) == []
    assert await seqs(EventPosition(sequence_number=4)) == []


async def test_enqueued_times_compare_to_the_millisecond(hub: str, transport: LocalTransport,
                                                         clock: FakeClock) -> None:
    # Given events enqueued at sub-millisecond times: 0.3 ms, 0.7 ms (reported, as on
    # Event Hubs, as 0 ms and 1 ms) and 2.6 ms
    for i, at in enumerate((0.0003, 0.0007, 0.0026)):
        clock.now = 1_000_000.0 + at
        await transport.send(hub, [Message(f"{i}".encode(), partition_key="k")])
    pid = str(partition_for("k", 4))

    async def seqs(seconds: float, inclusive: bool) -> list[int]:
        got = await transport.read_partition(hub, pid, position=EventPosition(
            enqueued_time=seconds, inclusive=inclusive))
        return [e.sequence_number for e in got]

    # When reading from each event's reported millisecond / Then it starts at that event
    assert await seqs(1_000_000.001, inclusive=True) == [1, 2]
    assert await seqs(1_000_000.001, inclusive=False) == [2]
    assert await seqs(1_000_000.003, inclusive=True) == [2]
    assert await seqs(1_000_000.0, inclusive=False) == [1, 2]


async def test_latest_returns_events_sent_while_waiting(hub: str, transport: LocalTransport,
                                                       tmp_path: Path) -> None:
    await transport.send(hub, [Message(b"old", partition_key="k")])
    pid = str(partition_for("k", 4))

    async def send_later() -> None:
        await anyio.sleep(0.2)
        async with LocalTransport("primary", data_dir=tmp_path) as other:
            await other.send(hub, [Message(b"new", partition_key="k")])

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_later)
        start = time.monotonic()
        got = await transport.read_partition(hub, pid, position=EventPosition(latest=True),
                                             max_wait=5)
    assert [e.message.body for e in got] == [b"new"]
    assert time.monotonic() - start < 2


async def test_latest_asked_again_goes_on_from_where_the_last_read_stood(
        hub: str, transport: LocalTransport) -> None:
    # Given a reader that asked for the latest events and got none
    await transport.send(hub, [Message(b"old", partition_key="k")])
    pid = str(partition_for("k", 4))
    latest = EventPosition(latest=True)
    assert await transport.read_partition(hub, pid, position=latest, owner_level=7) == []
    # When events are sent before it asks again
    await transport.send(hub, [Message(f"new {i}".encode(), partition_key="k")
                               for i in range(3)])
    # Then the next "latest" read returns them, and the one after returns only what
    # came after them
    got = await transport.read_partition(hub, pid, position=latest, owner_level=7)
    assert [e.message.body for e in got] == [b"new 0", b"new 1", b"new 2"]
    await transport.send(hub, [Message(b"newer", partition_key="k")])
    got = await transport.read_partition(hub, pid, position=latest, owner_level=7)
    assert [e.message.body for e in got] == [b"newer"]
    # while another owner level (a new claim of the partition) starts at the end
    assert await transport.read_partition(hub, pid, position=latest, owner_level=8) == []


async def test_owner_level_fencing(hub: str, transport: LocalTransport, tmp_path: Path) -> None:
    start = EventPosition.earliest()
    async with LocalTransport("primary", data_dir=tmp_path) as other:
        # Given a reader with owner level 1
        assert await transport.read_partition(hub, "0", position=start, owner_level=1) == []
        # A lower level is refused
        with pytest.raises(OwnershipLost, match="owner level 1"):
            await other.read_partition(hub, "0", position=start, owner_level=0)
        # When another process reads with a higher level, the first one is fenced off
        await other.read_partition(hub, "0", position=start, owner_level=2)
        with pytest.raises(OwnershipLost, match="taken over by a reader with owner level 2"):
            await transport.read_partition(hub, "0", position=start, owner_level=1)
        # Other partitions and consumer groups are independent
        await transport.read_partition(hub, "1", position=start, owner_level=1)
        await transport.read_partition(hub, "0", position=start, owner_level=1,
                                       consumer_group="audit")
        # The owner keeps reading; no owner level means no fencing
        await other.read_partition(hub, "0", position=start, owner_level=2)
        await transport.read_partition(hub, "0", position=start)


async def test_partition_errors(hub: str, namespace: LocalNamespace,
                                transport: LocalTransport) -> None:
    namespace.create_queue("orders")
    with pytest.raises(MessageRejected, match="no partition '4'"):
        await transport.read_partition(hub, "4", position=EventPosition.earliest())
    with pytest.raises(MessageRejected, match="no partitioned entity 'orders'"):
        await transport.get_partition_ids("orders")
    with pytest.raises(MessageRejected, match="no partitioned entity 'nope'"):
        await transport.read_partition("nope", "0", position=EventPosition.earliest())
    assert await transport.get_partition_ids(hub) == ["0", "1", "2", "3"]
    [info] = [e for e in namespace.entities() if e.name == hub]
    assert info.partitions == 4


async def test_oversized_event_is_rejected(namespace: LocalNamespace,
                                           transport: LocalTransport) -> None:
    namespace.create_partitioned("small", partitions=2, max_message_size=64)
    with pytest.raises(MessageRejected, match="over the 64-byte limit"):
        await transport.send("small", [Message(b"ok"), Message(b"x" * 100)])
    assert (await read_all(transport, "small")) == {"0": [], "1": []}
