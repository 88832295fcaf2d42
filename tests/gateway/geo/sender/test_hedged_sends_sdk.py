"""Hedged sends over the real Azure SDK transports, against the emulator: the primary's
``ServiceBusTransport`` / ``EventHubsTransport`` hangs (``FaultyTransport.hang()``, an
asyncio-level freeze in front of the unmodified SDK client), the send is hedged to the
secondary at its deadline, and the first attempt, never cancelled, lands on the primary
once it answers. (``benchmarks/bench_hang.py`` freezes the emulator process itself.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoSender
from gateway.emulator import Emulator, EventHubSpec
from gateway.transports import EventPosition, FaultyTransport, LocalTransport
from gateway.transports.base import Transport
from gateway.transports.eventhubs import EventHubsTransport
from gateway.transports.servicebus import ServiceBusTransport
from replication import DeadlinePolicy, Message, ReplicationPolicy

pytestmark = pytest.mark.anyio

QUEUE, HUB = "orders", "telemetry"
FAST = ReplicationPolicy(deadlines=DeadlinePolicy(floor=0.3, ceiling=0.6, initial=3.0))


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=tmp_path / "data",
                        queues=[QUEUE], event_hubs=[EventHubSpec(name=HUB, partitions=2)]
                        ) as emu:
        yield emu


async def ids_in(data_dir: Path, namespace: str, kind: str) -> list[str]:
    """The message ids an emulated namespace holds (it serves the local namespaces)."""
    async with LocalTransport(namespace, data_dir=data_dir) as local:
        if kind == "servicebus":
            return [m.message_id for m in await local.receive(QUEUE, max_messages=100)]
        found = []
        for pid in await local.get_partition_ids(HUB):
            events = await local.read_partition(HUB, pid, position=EventPosition.earliest())
            found += [e.message.message_id for e in events]
        return found


@pytest.mark.parametrize("kind", ["servicebus", "eventhubs"])
async def test_a_send_to_a_hung_sdk_namespace_is_hedged_and_the_first_attempt_lands_later(
    emulator: Emulator, tmp_path: Path, kind: str
) -> None:
    cls: type[ServiceBusTransport] | type[EventHubsTransport] = (
        ServiceBusTransport if kind == "servicebus" else EventHubsTransport)
    entity = QUEUE if kind == "servicebus" else HUB
    opened: list[Transport] = [
        cls.from_connection_string(emulator.connection_string(name), name=name)
        for name in ("primary", "secondary")]
    primary = FaultyTransport(opened[0])
    try:
        async with AsyncGeoSender(primary=primary, secondary=opened[1], entity=entity,
                                  policy=FAST, state_dir=tmp_path / "state") as sender:
            # Given a sender that has sent a few messages to the primary, which then hangs
            for i in range(3):
                await sender.send(Message("warm", message_id=f"w{i}"))
            primary.hang()
            # When it sends
            with anyio.fail_after(10):
                result = await sender.send(Message("a", message_id="m1"))
            # Then the secondary took it through its SDK client, hedged, and roles swapped
            assert result.namespaces == ("secondary",) and result.hedged
            assert result.failed_over and sender.roles.active == "secondary"
            data = tmp_path / "data"
            assert await ids_in(data, "secondary", kind) == ["m1"]
            # And once the primary answers, the first attempt lands there through the SDK
            primary.unhang()
            with anyio.fail_after(10):
                landed = await ids_in(data, "primary", kind)
                while "m1" not in landed:
                    await anyio.sleep(0.05)
                    landed = await ids_in(data, "primary", kind)
    finally:
        for transport in opened:
            await transport.aclose()
