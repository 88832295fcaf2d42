"""FaultyTransport: injected outages, failures, lost replies and latency."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway.transports import EventPosition, FaultyTransport, LocalNamespace, LocalTransport
from replication import (
    ConfigError,
    Message,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def faulty(tmp_path: Path) -> AsyncIterator[FaultyTransport]:
    async with FaultyTransport(LocalTransport("primary", data_dir=tmp_path)) as t:
        yield t


async def test_passes_through_and_records_calls(faulty: FaultyTransport, tmp_path: Path) -> None:
    LocalNamespace("primary", data_dir=tmp_path).create_partitioned("hub", partitions=2)
    await faulty.send("orders", [Message(b"a")])
    [r] = await faulty.receive("orders")
    await faulty.abandon(r)
    [r] = await faulty.receive("orders")
    await faulty.dead_letter(r, reason="bad")
    [r] = await faulty.receive("orders/$DeadLetterQueue")
    await faulty.complete(r)
    assert await faulty.get_partition_ids("hub") == ["0", "1"]
    assert await faulty.read_partition("hub", "0", position=EventPosition.earliest()) == []
    await faulty.probe()
    assert faulty.namespace == "primary"
    assert faulty.calls == ["send", "receive", "abandon", "receive", "dead_letter", "receive",
                            "complete", "get_partition_ids", "read_partition", "probe"]


async def test_go_down_and_come_up(faulty: FaultyTransport) -> None:
    faulty.go_down()
    assert faulty.is_down and faulty.down_since is not None
    with pytest.raises(NamespaceUnavailable, match="come_up") as info:
        await faulty.send("orders", [Message(b"a")])
    assert info.value.namespace == "primary"
    with pytest.raises(NamespaceUnavailable):
        await faulty.probe()
    faulty.come_up()
    assert not faulty.is_down
    await faulty.send("orders", [Message(b"b")])
    # Nothing was sent while down.
    assert [r.body for r in await faulty.receive("orders", max_messages=5)] == [b"b"]


async def test_go_down_interrupts_a_waiting_receive(faulty: FaultyTransport) -> None:
    async def take_down() -> None:
        await anyio.sleep(0.2)
        faulty.go_down()

    async with anyio.create_task_group() as tg:
        tg.start_soon(take_down)
        start = time.monotonic()
        with pytest.raises(NamespaceUnavailable):
            await faulty.receive("orders", max_wait=10)
    assert time.monotonic() - start < 2


async def test_inner_errors_pass_unwrapped(faulty: FaultyTransport) -> None:
    with pytest.raises(MessageRejected):
        await faulty.read_partition("nope", "0", position=EventPosition.earliest(), max_wait=1)


async def test_fail_next(faulty: FaultyTransport) -> None:
    faulty.fail_next(2, OperationTimeout)
    faulty.fail_next(1, MessageRejected("too big"))
    for _ in range(2):
        with pytest.raises(OperationTimeout) as info:
            await faulty.probe()
        assert info.value.namespace == "primary"
    with pytest.raises(MessageRejected, match="too big"):
        await faulty.send("orders", [Message(b"a")])
    await faulty.send("orders", [Message(b"b")])
    faulty.fail_next(1)
    with pytest.raises(NamespaceUnavailable, match="fail_next"):
        await faulty.receive("orders")
    assert [r.body for r in await faulty.receive("orders")] == [b"b"]
    with pytest.raises(ConfigError):
        faulty.fail_next(-1)


async def test_lose_replies(faulty: FaultyTransport) -> None:
    faulty.lose_replies(1)
    with pytest.raises(OperationTimeout, match="landed"):
        await faulty.send("orders", [Message(b"a", message_id="m1")])
    await faulty.send("orders", [Message(b"b", message_id="m2")])
    got = await faulty.receive("orders", max_messages=5)
    assert [r.message_id for r in got] == ["m1", "m2"]


async def test_latency_uses_the_injected_sleep(tmp_path: Path) -> None:
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    async with FaultyTransport(LocalTransport("primary", data_dir=tmp_path),
                               sleep=record) as faulty:
        faulty.latency = 0.5
        await faulty.probe()
        await faulty.send("orders", [Message(b"a")])
    assert sleeps == [0.5, 0.5]
    assert faulty.calls == ["probe", "send", "aclose"]


async def test_real_latency(faulty: FaultyTransport) -> None:
    faulty.latency = 0.2
    start = time.monotonic()
    await faulty.probe()
    assert time.monotonic() - start >= 0.2


async def test_faults_are_per_instance(tmp_path: Path) -> None:
    a = FaultyTransport(LocalTransport("a", data_dir=tmp_path))
    b = FaultyTransport(LocalTransport("b", data_dir=tmp_path))
    a.go_down()
    await b.probe()
    with pytest.raises(NamespaceUnavailable):
        await a.probe()
    await a.aclose()
    await b.aclose()


async def test_a_hung_namespace_answers_nothing_until_unhung(faulty: FaultyTransport) -> None:
    # Given a hung namespace
    faulty.hang()
    assert faulty.hung
    # When a send waits on it past a deadline, it is abandoned without failing or landing
    with anyio.move_on_after(0.2) as scope:
        await faulty.send("orders", [Message(b"abandoned")])
    assert scope.cancelled_caught
    # And a send made while hung completes once the namespace answers again
    async with anyio.create_task_group() as tg:
        tg.start_soon(faulty.send, "orders", [Message(b"late")])
        await anyio.sleep(0.05)
        assert faulty.hung
        faulty.unhang()
    assert not faulty.hung
    assert [r.body for r in await faulty.receive("orders", max_messages=5)] == [b"late"]


async def test_a_hang_holds_every_operation_and_an_abandoned_send_never_lands(
        faulty: FaultyTransport, tmp_path: Path) -> None:
    # Given a hung namespace with a partitioned entity and a locked message
    LocalNamespace("primary", data_dir=tmp_path).create_partitioned("hub", partitions=2)
    await faulty.send("orders", [Message(b"locked")])
    [locked] = await faulty.receive("orders")
    faulty.hang()
    ops = [
        lambda: faulty.send("orders", [Message(b"abandoned")]),
        lambda: faulty.receive("orders", max_wait=0.01),
        lambda: faulty.complete(locked),
        lambda: faulty.get_partition_ids("hub"),
        lambda: faulty.read_partition("hub", "0", position=EventPosition.earliest()),
        lambda: faulty.probe(),
    ]
    # Then each operation waits until a caller's deadline abandons it
    for op in ops:
        with anyio.move_on_after(0.05) as scope:
            await op()
        assert scope.cancelled_caught
    # And the flag is read-only: only unhang() clears it
    with pytest.raises(AttributeError):
        faulty.hung = False  # type: ignore[misc]
    faulty.unhang()
    faulty.unhang()  # twice is harmless
    # Then nothing abandoned happened: the message is still locked, no send landed
    assert await faulty.receive("orders", max_messages=5) == []
    await faulty.complete(locked)
