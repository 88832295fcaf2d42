"""The partition processor while one partition's read, or its checkpoint, hangs: the
other partitions are read, handled and checkpointed, the hung call is given up at its
deadline with ``OperationTimeout`` (reported to ``on_error``), and a stop ends.

Logic tests on virtual time (``run_virtual``), as in ``test_processor_stop``: a hang
that is never given up shows as a stop that never ends (``NEVER``). The hung partition
read goes through ``FaultyTransport.hang()`` over the in-memory hub.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from gateway.consumer._partition import PartitionContext, ProcessorSettings
from gateway.consumer._processor import AsyncPartitionProcessor
from gateway.consumer._records import Checkpoint
from gateway.consumer._store import InMemoryCheckpointStore
from gateway.transports import FaultyTransport
from gateway.transports.base import EventPosition, PartitionEvent, Transport
from replication import DeadlinePolicy, OperationTimeout
from tests.gateway.consumer.test_processor_stop import (
    BALANCE,
    HUB,
    NEVER,
    PIDS,
    MemoryHub,
    timed_stop,
    until,
    virtual,
)

EVENTS = 20
SETTINGS = ProcessorSettings(max_batch_size=1, poll_wait=0.1, checkpoint_every_events=1,
                             checkpoint_every_seconds=None,
                             deadlines=DeadlinePolicy(floor=1.0, ceiling=2.0, initial=2.0))


class OnePartitionHangs(Transport):
    """The hub, with the reads of partition ``hung`` going through a hung FaultyTransport."""

    namespace = "memory"

    def __init__(self, hub: MemoryHub, hung: str) -> None:
        self.hub = hub
        self.hung_id = hung
        self.hung = FaultyTransport(hub)
        self.hung.hang()

    async def get_partition_ids(self, entity: str) -> list[str]:
        return await self.hub.get_partition_ids(entity)

    async def read_partition(
        self, entity: str, partition_id: str, *, position: EventPosition,
        max_events: int = 100, max_wait: float = 0.0, owner_level: int | None = None,
        consumer_group: str = "$Default",
    ) -> list[PartitionEvent]:
        source: Transport = self.hung if partition_id == self.hung_id else self.hub
        return await source.read_partition(
            entity, partition_id, position=position, max_events=max_events,
            max_wait=max_wait, owner_level=owner_level, consumer_group=consumer_group)


class CheckpointHangs(InMemoryCheckpointStore):
    """A store whose checkpoint writes of one partition never answer (a hung blob)."""

    def __init__(self, hung: str, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.hung_id = hung

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        if checkpoint.partition_id == self.hung_id:
            await asyncio.Event().wait()
        await super().update_checkpoint(checkpoint, owner_id=owner_id)


def processor(store: InMemoryCheckpointStore, transport: Transport,
              handled: dict[str, list[int]], errors: list[tuple[str | None, BaseException]]
              ) -> AsyncPartitionProcessor:
    loop = asyncio.get_running_loop()

    async def on_event(ctx: PartitionContext, event: PartitionEvent | None) -> None:
        assert event is not None
        handled.setdefault(ctx.partition_id, []).append(event.sequence_number)

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        errors.append((ctx.partition_id if ctx else None, exc))

    return AsyncPartitionProcessor(
        transport=transport, entity=HUB, store=store, on_event=on_event, on_error=on_error,
        instance_id="a", balance=BALANCE, settings=SETTINGS, clock=loop.time,
        rng=random.Random("a"))


def all_read(handled: dict[str, list[int]], pids: Sequence[str]) -> bool:
    return all(len(handled.get(pid, [])) == EVENTS for pid in pids)


async def checkpoints(store: InMemoryCheckpointStore, proc: AsyncPartitionProcessor
                      ) -> dict[str, int | None]:
    return {c.partition_id: c.sequence_number for c in await store.list_checkpoints(proc.group)}


def test_a_hung_partition_read_stalls_neither_the_other_partitions_nor_a_stop() -> None:
    async def main() -> None:
        store = InMemoryCheckpointStore(clock=asyncio.get_running_loop().time)
        transport = OnePartitionHangs(MemoryHub(per_partition=EVENTS), hung="0")
        handled: dict[str, list[int]] = {}
        errors: list[tuple[str | None, BaseException]] = []
        # Given a processor owning every partition, whose reads of partition 0 hang
        proc = processor(store, transport, handled, errors)
        await proc.start()
        await until(lambda: len(proc.owned) == 4, 10)
        # Then the other partitions are read and handled to the end
        others = [pid for pid in PIDS if pid != "0"]
        await until(lambda: all_read(handled, others), 60)
        # And the hung read is given up at its deadline and reported, again and again
        await until(lambda: sum(1 for pid, _ in errors if pid == "0") >= 2, 60)
        assert all(pid == "0" and isinstance(exc, OperationTimeout) and "partition 0" in str(exc)
                   for pid, exc in errors), errors
        # When it stops / Then the stop ends, and the others were checkpointed at their end
        took = await timed_stop(proc)
        assert took < NEVER and took < BALANCE.handover_timeout, took
        assert await checkpoints(store, proc) == dict.fromkeys(others, EVENTS - 1)
        assert "0" not in handled
    virtual(main())


def test_a_hung_checkpoint_write_stalls_neither_the_other_partitions_nor_a_stop() -> None:
    async def main() -> None:
        store = CheckpointHangs("2", clock=asyncio.get_running_loop().time)
        handled: dict[str, list[int]] = {}
        errors: list[tuple[str | None, BaseException]] = []
        # Given a processor whose checkpoint writes of partition 2 never answer
        proc = processor(store, MemoryHub(per_partition=EVENTS), handled, errors)
        await proc.start()
        # Then every partition is read and handled to the end, partition 2 included
        await until(lambda: all_read(handled, PIDS), 120)
        # And each hung checkpoint write was given up and reported
        assert errors and all(pid == "2" and isinstance(exc, OperationTimeout)
                              for pid, exc in errors), errors
        # When it stops / Then the stop ends (the hand-over checkpoint of partition 2
        # is given up too), and the other partitions were checkpointed at their end
        took = await timed_stop(proc)
        assert took < NEVER, took
        others = [pid for pid in PIDS if pid != "2"]
        assert await checkpoints(store, proc) == dict.fromkeys(others, EVENTS - 1)
    virtual(main())
