"""The geo partition receiver while one namespace hangs: the other namespace's events are
all delivered, the hung one is reported down, and ``run()`` (its stop) returns."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import ProcessorSettings
from gateway.transports import FaultyTransport, LocalTransport
from gateway.transports.base import PartitionEvent
from replication import DeadlinePolicy, OperationTimeout
from tests.gateway.conftest import Recorder
from tests.gateway.geo.partitions.test_partitions import FAST, HUB, QUICK, hubs, ids, send

__all__ = ["hubs"]  # the fixture, used by name

pytestmark = pytest.mark.anyio

SETTINGS = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                             checkpoint_every_seconds=None,
                             deadlines=DeadlinePolicy(floor=0.2, ceiling=0.4, initial=0.4))


async def test_a_hung_namespace_holds_up_neither_the_other_nor_the_stop(
    tmp_path: Path, hubs: object
) -> None:
    # Given 20 events in both namespaces, and a primary that hangs
    await send(tmp_path, ids(0, 20))
    seen: Counter[str] = Counter()
    hooks = Recorder()

    async def handle(event: PartitionEvent) -> None:
        assert event.namespace == "secondary"
        seen[event.message.message_id] += 1

    async with FaultyTransport(LocalTransport("primary", data_dir=tmp_path)) as primary:
        primary.hang()
        async with AsyncGeoPartitionReceiver(
            primary=primary, secondary="local://secondary", entity=HUB, data_dir=tmp_path,
            checkpoint_store=tmp_path / "cp.db", dedup_store=tmp_path / "dedup.db",
            balance=FAST, handler_retry=QUICK, settings=SETTINGS, hooks=hooks,
        ) as geo:
            # When it runs until idle
            with anyio.fail_after(30):
                await geo.run(handle, idle_timeout=1.0)
            # Then every event was delivered once, from the secondary, and run() returned
            assert seen == Counter(dict.fromkeys(ids(0, 20), 1))
            # And the hung primary was reported down with the unknown outcome
            assert "primary" in geo.down
            down = hooks.named("on_namespace_down")
            assert down and down[0]["namespace"] == "primary"
            assert isinstance(down[0]["error"], OperationTimeout)
        primary.unhang()
