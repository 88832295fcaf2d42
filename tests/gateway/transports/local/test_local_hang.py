"""A hung local namespace: every operation waits, cancellable, until the hang is cleared."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from gateway.transports import EventPosition, LocalNamespace, LocalTransport
from replication import Message, NamespaceUnavailable

pytestmark = pytest.mark.anyio

#: How long a test lets an operation on a hung namespace wait before it looks. The
#: operations take milliseconds on a namespace that answers, so one still waiting
#: after this was held (a slower machine only makes the check weaker, never wrong).
HELD = 0.3

Op = Callable[[LocalTransport], Awaitable[object]]


async def _prepared(namespace: LocalNamespace, transport: LocalTransport) -> dict[str, object]:
    """A queue with a peek-locked message for each settlement, and a partitioned entity."""
    namespace.create_partitioned("telemetry", partitions=2)
    await transport.send("orders", [Message(f"m{i}".encode(), message_id=f"m{i}")
                                    for i in range(3)])
    await transport.send("telemetry", [Message(b"e", partition_key="k")])
    locked = await transport.receive("orders", max_messages=3)
    return {"complete": locked[0], "abandon": locked[1], "dead_letter": locked[2]}


OPS: dict[str, Callable[[dict[str, object]], Op]] = {
    "send": lambda _: lambda t: t.send("orders", [Message(b"late", message_id="late")]),
    "receive": lambda _: lambda t: t.receive("orders", max_wait=0.05),
    "complete": lambda m: lambda t: t.complete(m["complete"]),  # type: ignore[arg-type]
    "abandon": lambda m: lambda t: t.abandon(m["abandon"]),  # type: ignore[arg-type]
    "dead_letter": lambda m: lambda t: t.dead_letter(m["dead_letter"],  # type: ignore[arg-type]
                                                     reason="test"),
    "get_partition_ids": lambda _: lambda t: t.get_partition_ids("telemetry"),
    "read_partition": lambda _: lambda t: t.read_partition(
        "telemetry", "0", position=EventPosition.earliest(), max_wait=0.05),
    "probe": lambda _: lambda t: t.probe(),
}


@pytest.mark.parametrize("name", list(OPS))
async def test_every_operation_waits_while_hung_and_proceeds_when_cleared(
        name: str, namespace: LocalNamespace, transport: LocalTransport) -> None:
    # Given a namespace with something to settle and read, then hung
    op = OPS[name](await _prepared(namespace, transport))
    namespace.hang()
    assert namespace.status().hang and namespace.status().up
    outcome: list[object] = []

    async def run() -> None:
        outcome.append(await op(transport))

    async with anyio.create_task_group() as tg:
        # When the operation is called, it neither answers nor fails while hung
        tg.start_soon(run)
        await anyio.sleep(HELD)
        assert outcome == []
        # When the hang is cleared, it completes
        namespace.unhang()
    assert len(outcome) == 1
    if name == "get_partition_ids":
        assert outcome[0] == ["0", "1"]
    if name == "read_partition":
        assert [e.message.body for e in outcome[0]] in ([b"e"], [])  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(OPS))
async def test_a_deadline_abandons_every_operation_at_once(
        name: str, namespace: LocalNamespace, transport: LocalTransport) -> None:
    op = OPS[name](await _prepared(namespace, transport))
    namespace.hang()
    # When a caller's deadline passes on a hung namespace, the operation is abandoned
    with anyio.move_on_after(0.1) as scope:
        await op(transport)
    assert scope.cancelled_caught


async def test_an_abandoned_send_never_lands(namespace: LocalNamespace,
                                             transport: LocalTransport) -> None:
    # Given a hung namespace, and a send abandoned on it by a deadline
    namespace.hang()
    with anyio.move_on_after(0.1):
        await transport.send("orders", [Message(b"abandoned", message_id="abandoned")])
    # When the hang is cleared and a later send goes through
    namespace.unhang()
    await transport.send("orders", [Message(b"after", message_id="after")])
    # Then only the later one is in the queue, now and later
    assert [r.body for r in await transport.receive("orders", max_messages=5)] == [b"after"]
    await anyio.sleep(0.1)
    assert await transport.receive("orders", max_messages=5) == []


async def test_a_waiting_receive_is_held_past_its_max_wait(
        namespace: LocalNamespace, transport: LocalTransport) -> None:
    # Given a receive waiting on an empty queue for up to 1 s (long enough that a
    # loaded machine still hangs the namespace while it waits)
    returned: list[object] = []

    async def receive() -> None:
        returned.append(await transport.receive("orders", max_wait=1.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(receive)
        await anyio.sleep(0.02)
        # When the namespace hangs meanwhile, the receive does not answer "no messages",
        # even past its wait
        namespace.hang()
        await anyio.sleep(1.0 + HELD)
        assert returned == []
        namespace.unhang()
    # Then, once cleared, it answers what the queue holds (nothing)
    assert returned == [[]]


async def test_going_down_while_hung_fails_the_waiting_operations(
        namespace: LocalNamespace, transport: LocalTransport) -> None:
    namespace.hang()
    errors: list[Exception] = []

    async def send() -> None:
        try:
            await transport.send("orders", [Message(b"x")])
        except NamespaceUnavailable as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        await anyio.sleep(0.1)
        assert errors == []
        # When the hung namespace goes down, the waiting send fails fast, as down does
        namespace.down()
    assert len(errors) == 1 and "is down" in str(errors[0])
    # And `up` clears both: the namespace answers again
    namespace.up()
    assert not namespace.status().hang
    await transport.probe()
    assert await transport.receive("orders") == []  # the failed send never landed


async def test_a_hang_from_another_process_holds_this_one(
        namespace: LocalNamespace, transport: LocalTransport, tmp_path: Path) -> None:
    async def other_process(call: str) -> None:
        await anyio.run_process([sys.executable, "-c", textwrap.dedent(f"""
            from gateway.transports import LocalNamespace
            LocalNamespace('primary', data_dir={str(tmp_path)!r}).{call}()
        """)])

    # Given a namespace hung by another process
    await other_process("hang")
    sent: list[bool] = []

    async def send() -> None:
        await transport.send("orders", [Message(b"held", message_id="held")])
        sent.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send)
        await anyio.sleep(HELD)
        assert sent == []
        # When that process clears the hang, the waiting send lands
        await other_process("unhang")
    assert sent == [True]
    assert [r.body for r in await transport.receive("orders")] == [b"held"]


def test_faults_and_down_keep_the_hang_and_up_clears_it(namespace: LocalNamespace) -> None:
    namespace.hang()
    namespace.set_faults(latency=0.01)
    namespace.down()
    status = namespace.status()
    assert (status.hang, status.up, status.latency) == (True, False, 0.01)
    namespace.up()
    status = namespace.status()
    assert (status.hang, status.up, status.latency) == (False, True, 0.01)
