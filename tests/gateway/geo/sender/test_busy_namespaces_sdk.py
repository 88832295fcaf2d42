"""A busy namespace is not a hung one, over the Service Bus SDK transport against the
emulator: 60 concurrent sends queue behind the transport's per-entity send lock, and
none is hedged, nothing is marked down and the roles never change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoSender
from gateway.emulator import Emulator
from gateway.transports.servicebus import ServiceBusTransport
from replication import Message
from tests.gateway.conftest import Recorder

pytestmark = pytest.mark.anyio

QUEUE = "orders"


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=tmp_path / "data",
                        queues=[QUEUE]) as emu:
        yield emu


async def test_60_concurrent_sends_over_the_sdk_are_not_hedged(
    emulator: Emulator, tmp_path: Path
) -> None:
    opened = [ServiceBusTransport.from_connection_string(emulator.connection_string(name),
                                                         name=name)
              for name in ("primary", "secondary")]
    hooks = Recorder()
    try:
        async with AsyncGeoSender(primary=opened[0], secondary=opened[1], entity=QUEUE,
                                  hooks=hooks, state_dir=tmp_path / "state",
                                  recovery=False) as sender:
            # Given a passive sender (default deadlines) that has sent a few messages
            for i in range(3):
                await sender.send(Message("warm", message_id=f"w{i}"))
            # When 60 sends go at once (each waits for the send lock of the ones before)
            with anyio.fail_after(10):
                results = await asyncio.gather(*(
                    sender.send(Message("x", message_id=f"m{i}")) for i in range(60)))
            # Then none was hedged, nothing was marked down, the roles never changed
            assert [r for r in results if r.hedged or r.namespaces != ("primary",)] == []
            assert sender.down == frozenset() and hooks.events == []
            assert sender.roles.active == "primary"
    finally:
        for transport in opened:
            await transport.aclose()
