"""A graceful stop of the partition processor ends within its bound, whatever the
processor was doing when it was asked to stop: handing a partition over, or backing
off after a handler failure.

Logic tests on virtual time (``run_virtual``): an in-memory store and an in-memory
partitioned entity, so that a stop that never ends shows up as a virtual-time
timeout, at once and deterministically."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from gateway.consumer._balance import BalanceSettings
from gateway.consumer._partition import PartitionContext, ProcessorSettings
from gateway.consumer._processor import AsyncPartitionProcessor
from gateway.consumer._store import InMemoryCheckpointStore
from gateway.consumer._virtual import run_virtual
from gateway.transports.base import EventPosition, PartitionEvent, Transport
from replication import Message

HUB = "hub"
PIDS = ["0", "1", "2", "3"]
BALANCE = BalanceSettings(interval=0.2, idle_interval=0.5, heartbeat_interval=0.5,
                          heartbeat_expiry=2.0, fence_margin=0.3, settle_cycles=2,
                          handover_timeout=30.0)
SETTINGS = ProcessorSettings(max_batch_size=1, poll_wait=0.1, checkpoint_every_events=1,
                             checkpoint_every_seconds=None, handler_backoff=0.5,
                             max_handler_backoff=5.0)
#: Far beyond any bound below: a stop still running then never ends.
NEVER = 600.0

Handler = Callable[[PartitionContext, PartitionEvent | None], Awaitable[None]]


class MemoryHub(Transport):
    """An in-memory partitioned entity: ``per_partition`` events in each partition."""

    namespace = "memory"

    def __init__(self, per_partition: int) -> None:
        self.per_partition = per_partition

    async def get_partition_ids(self, entity: str) -> list[str]:
        return list(PIDS)

    async def read_partition(
        self, entity: str, partition_id: str, *, position: EventPosition,
        max_events: int = 100, max_wait: float = 0.0, owner_level: int | None = None,
        consumer_group: str = "$Default",
    ) -> list[PartitionEvent]:
        first = 0 if position.sequence_number is None else position.sequence_number + 1
        events = [
            PartitionEvent(message=Message(b"x", message_id=f"{partition_id}-{n}"),
                           namespace=self.namespace, entity=entity,
                           partition_id=partition_id, sequence_number=n, offset=n,
                           enqueued_time=0.0)
            for n in range(max(first, 0), min(first + max_events, self.per_partition))
        ]
        if not events:
            await asyncio.sleep(max_wait)
        return events


def processor(store: InMemoryCheckpointStore, hub: MemoryHub, name: str,
              handler: Handler, errors: list[BaseException] | None = None
              ) -> AsyncPartitionProcessor:
    loop = asyncio.get_running_loop()

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        if errors is not None:
            errors.append(exc)

    return AsyncPartitionProcessor(
        transport=hub, entity=HUB, store=store, on_event=handler, on_error=on_error,
        instance_id=name, balance=BALANCE, settings=SETTINGS, clock=loop.time,
        rng=random.Random(name),
    )


async def until(check: Callable[[], bool], limit: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not check():
        assert loop.time() < deadline, "condition not reached (virtual time)"
        await asyncio.sleep(0.01)


async def timed_stop(proc: AsyncPartitionProcessor) -> float:
    """How long ``proc.stop()`` took, in virtual seconds (NEVER if it did not end)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        await asyncio.wait_for(proc.stop(), NEVER)
    except asyncio.TimeoutError:
        return NEVER
    return loop.time() - began


def virtual(test: Coroutine[Any, Any, None]) -> None:
    run_virtual(test, start=1_000.0)


def test_a_stop_while_a_partition_is_being_handed_over_ends_and_hands_everything_over():
    async def main() -> None:
        store = InMemoryCheckpointStore(clock=asyncio.get_running_loop().time)
        hub = MemoryHub(per_partition=1_000)
        handled: dict[str, list[str]] = {}

        def slow(name: str) -> Handler:
            async def handle(ctx: PartitionContext, event: PartitionEvent | None) -> None:
                await asyncio.sleep(0.3)  # a handler that takes a while
                assert event is not None
                handled.setdefault(name, []).append(event.message.message_id)
            return handle

        # Given "a" reading every partition with a slow handler
        a = processor(store, hub, "a", slow("a"))
        await a.start()
        await until(lambda: len(a.owned) == 4, 10)
        # When "b" joins, and "a" is asked to stop while it waits for its handler
        # to finish before handing a partition over to "b"
        b = processor(store, hub, "b", slow("b"))
        await b.start()
        await until(lambda: any(r.stopping for r in a._readers.values()), 10)
        took = await timed_stop(a)
        # Then the stop ends, well within the handover timeout ("b" takes over)
        assert took < BALANCE.handover_timeout, took
        # And every partition of "a" was checkpointed and released: "b" reads them all
        assert not a.owned
        await until(lambda: len(b.owned) == 4, 10)
        checkpoints = {c.partition_id: c.sequence_number
                       for c in await store.list_checkpoints(a.group)}
        for pid in PIDS:
            done = [m for m in handled.get("a", []) if m.startswith(f"{pid}-")]
            if done:  # a checkpoint at the last event "a" handled there
                assert checkpoints[pid] == int(done[-1].split("-")[1]), (pid, checkpoints)
        await b.stop()
    virtual(main())


def test_a_stop_during_a_handler_backoff_with_nobody_to_take_over_ends_at_once():
    async def main() -> None:
        store = InMemoryCheckpointStore(clock=asyncio.get_running_loop().time)
        hub = MemoryHub(per_partition=3)
        errors: list[BaseException] = []

        async def failing(ctx: PartitionContext, event: PartitionEvent | None) -> None:
            assert event is not None
            if event.sequence_number == 1:
                raise ValueError("cannot handle it")

        # Given "b", which left, and "a" alone, whose handler keeps failing on the
        # 2nd event of each partition: it backs off up to max_handler_backoff
        b = processor(store, hub, "b", failing)
        await b.start()
        a = processor(store, hub, "a", failing, errors)
        await a.start()
        await until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 10)
        await b.stop()
        await until(lambda: len(a.owned) == 4, 10)
        await until(lambda: len(errors) >= 4 * 4, 60)  # backing off on every partition
        # When "a" stops
        took = await timed_stop(a)
        # Then it ends within one balancing interval: no wait for a taker (there is
        # none), nor for the end of a handler backoff
        assert took < BALANCE.interval, took
        assert took < SETTINGS.max_handler_backoff
        # And the failed event stays unhandled for the next owner: every checkpoint
        # is the event before it
        checkpoints = {c.partition_id: c.sequence_number
                       for c in await store.list_checkpoints(a.group)}
        assert checkpoints == dict.fromkeys(PIDS, 0)
        assert all(o.owner_id == "" for o in await store.list_ownership(a.group))
    virtual(main())
