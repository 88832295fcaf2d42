"""``on_progress``: where each owned partition stands against its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.consumer import (
    AsyncPartitionProcessor,
    BalanceSettings,
    InMemoryCheckpointStore,
    PartitionContext,
    PartitionProgress,
    ProcessorSettings,
)
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import EventPosition, PartitionEvent
from replication import Message
from tests.gateway.conftest import wait_for

pytestmark = pytest.mark.anyio

HUB = "telemetry"
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)


async def test_progress_reports_what_was_read_past_the_checkpoint(tmp_path: Path) -> None:
    # Given twelve events in a one-partition entity, checkpointed every five
    with LocalNamespace("primary", data_dir=tmp_path) as admin:
        admin.create_partitioned(HUB, partitions=1)
    reports: list[PartitionProgress] = []
    handled: list[str] = []

    async def on_event(ctx: PartitionContext, event: PartitionEvent | None) -> None:
        assert event is not None
        handled.append(event.message.message_id)

    async with LocalTransport("primary", data_dir=tmp_path) as hub:
        await hub.send(HUB, [Message(f"e{i}", message_id=f"e{i}") for i in range(12)])
        events = await hub.read_partition(HUB, "0", position=EventPosition.earliest(),
                                          max_events=100)
        processor = AsyncPartitionProcessor(
            transport=hub, entity=HUB, store=InMemoryCheckpointStore(), on_event=on_event,
            balance=FAST, on_progress=reports.append,
            settings=ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                                       checkpoint_every_seconds=None))
        # When it has handled them all, then stops (a last checkpoint, a hand-over)
        await processor.start()
        await wait_for(lambda: len(handled) == 12 and reports[-1].lag_events == 2)
        await processor.stop(handover_timeout=0)
    # Then the partition was reported claimed, read, checkpointed and handed over
    assert reports[0].owned and reports[0].lag_events == 0
    assert {r.partition_id for r in reports} == {"0"}
    assert reports[0].group.eventhub_name == HUB
    assert max(r.lag_events for r in reports) >= 5
    # After the checkpoint at e9: e10 and e11 wait, the oldest enqueued as e10 was
    last_owned = [r for r in reports if r.owned]
    lagging = [r for r in last_owned if r.lag_events == 2]
    assert lagging and lagging[-1].oldest_unsaved_at == events[10].enqueued_time
    # and the hand-over checkpoint left nothing unsaved before it was let go
    assert last_owned[-1].lag_events == 0 and last_owned[-1].oldest_unsaved_at is None
    assert not reports[-1].owned
