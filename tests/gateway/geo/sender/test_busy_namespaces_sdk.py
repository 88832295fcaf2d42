"""A busy namespace is not a hung one, over the Service Bus SDK transport against the
emulator: 60 concurrent sends queue behind the transport's per-entity send lock, and
none is hedged, nothing is marked down and the roles never change.

Each send is answered 50 ms late (the emulator's injected latency), so the last send
waits 3 s behind the others, past deadlines of 2-2.5 s: with the default deadlines
(0.3-0.75 s) a test process starved of CPU (ten test processes on two cores) was
late on its very first send."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoSender
from gateway.emulator import Emulator
from gateway.transports import LocalNamespace
from gateway.transports.servicebus import ServiceBusTransport
from replication import DeadlinePolicy, Message, ReplicationPolicy
from tests.gateway.conftest import Recorder

pytestmark = pytest.mark.anyio

QUEUE = "orders"
#: Longer than a starved machine's stalls, shorter than the queue of 60 sends.
PATIENT = ReplicationPolicy(deadlines=DeadlinePolicy(floor=2.0, ceiling=2.5, initial=2.5))


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=tmp_path / "data",
                        queues=[QUEUE]) as emu:
        with LocalNamespace("primary", data_dir=tmp_path / "data") as primary:
            primary.set_faults(latency=0.05)
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
                                  policy=PATIENT, recovery=False) as sender:
            # Given a passive sender that has sent a few messages to a primary that
            # answers each send 50 ms late
            for i in range(3):
                await sender.send(Message("warm", message_id=f"w{i}"))
            # When 60 sends go at once (each waits for the send lock of the ones before)
            began = time.monotonic()
            with anyio.fail_after(20):
                results = await asyncio.gather(*(
                    sender.send(Message("x", message_id=f"m{i}")) for i in range(60)))
            # Then the last waited past the longest deadline (the sends queued)...
            assert time.monotonic() - began > PATIENT.deadlines.ceiling
            # ...and none was hedged, nothing was marked down, the roles never changed
            assert [r for r in results if r.hedged or r.namespaces != ("primary",)] == []
            assert sender.down == frozenset() and hooks.events == []
            assert sender.roles.active == "primary"
    finally:
        for transport in opened:
            await transport.aclose()
