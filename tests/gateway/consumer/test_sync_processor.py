"""PartitionProcessor: the sync driver of AsyncPartitionProcessor, with plain handlers."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gateway.consumer import (
    BalanceSettings,
    CloseReason,
    PartitionProcessor,
    ProcessorSettings,
    SqliteCheckpointStore,
    SyncPartitionContext,
)
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import PartitionEvent
from replication import ConfigError, Message, OperationTimeout
from tests.gateway.conftest import wait_for_sync

from .test_handler_errors import FlakyStore

HUB = "telemetry"
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)
# Checkpoints only when the handler asks for them (and at hand-over).
SETTINGS = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=None,
                             checkpoint_every_seconds=None)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LocalTransport]:
    with LocalNamespace("primary", data_dir=tmp_path) as admin:
        admin.create_partitioned(HUB, partitions=4)
    transport = LocalTransport("primary", data_dir=tmp_path)
    yield transport
    asyncio.run(transport.aclose())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteCheckpointStore]:
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    yield store
    asyncio.run(store.aclose())


def send(tmp_path: Path, count: int) -> list[str]:
    ids = [f"e{i:03d}" for i in range(count)]

    async def go() -> None:
        async with LocalTransport("primary", data_dir=tmp_path) as transport:
            await transport.send(HUB, [Message(i, message_id=i, partition_key=f"k{i[-1]}")
                                       for i in ids])

    asyncio.run(go())
    return ids


class Recorder:
    """Plain handlers that record what they saw, and in which thread."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.last: dict[str, int] = {}
        self.threads: set[str] = set()
        self.closed: list[tuple[str, CloseReason]] = []
        self.errors: list[BaseException] = []
        self.batches: list[int] = []

    def on_event(self, ctx: SyncPartitionContext, event: PartitionEvent | None) -> None:
        assert event is not None
        self.threads.add(threading.current_thread().name)
        self.seen[event.message.message_id] += 1
        self.last[ctx.partition_id] = event.sequence_number
        # A blocking checkpoint from the handler's own thread, every other event.
        if event.sequence_number % 2:
            ctx.update_checkpoint(event)

    def on_batch(self, ctx: SyncPartitionContext, events: list[PartitionEvent]) -> None:
        self.batches.append(len(events))
        for event in events:
            self.on_event(ctx, event)
        ctx.update_checkpoint(events[-1])

    def on_close(self, ctx: SyncPartitionContext, reason: CloseReason) -> None:
        self.closed.append((ctx.partition_id, reason))

    def on_error(self, ctx: SyncPartitionContext | None, exc: BaseException) -> None:
        self.errors.append(exc)


def checkpoints(store: SqliteCheckpointStore, processor: PartitionProcessor) -> dict[str, int]:
    """The checkpoints in ``store``'s file, read as another process would: the store
    object itself belongs to the processor's event loop."""

    async def read() -> dict[str, int]:
        async with SqliteCheckpointStore(store.path) as reader:
            found = await reader.list_checkpoints(processor.group)
        return {c.partition_id: c.sequence_number for c in found
                if c.sequence_number is not None}

    return asyncio.run(read())


def test_sync_handlers_process_every_partition_and_checkpoint_from_their_thread(
    tmp_path: Path, hub: LocalTransport, store: SqliteCheckpointStore
) -> None:
    # Given 40 events on 4 partitions and a sync processor used as a context manager
    ids = send(tmp_path, 40)
    recorder = Recorder()
    with PartitionProcessor(transport=hub, entity=HUB, store=store, instance_id="a",
                            on_event=recorder.on_event, on_partition_close=recorder.on_close,
                            settings=SETTINGS, balance=FAST) as processor:
        # When it runs until every event was handled
        wait_for_sync(lambda: set(recorder.seen) == set(ids))
        assert processor.owned == {"0", "1", "2", "3"}
        # Then the handler's own checkpoints (odd sequence numbers) are written
        written = checkpoints(store, processor)
        assert written and all(seq % 2 for seq in written.values())
    # And each event was handled once, in worker threads (not this one, not the loop's)
    assert all(recorder.seen[i] == 1 for i in ids)
    assert threading.current_thread().name not in recorder.threads
    assert not any(name.startswith("geogateway-") for name in recorder.threads)
    # And leaving the block checkpointed each partition at its last event, then closed it
    assert checkpoints(store, processor) == recorder.last
    assert sorted(recorder.closed) == [(p, CloseReason.SHUTDOWN) for p in "0123"]


def test_run_forever_with_batches_and_a_restart_resumes(
    tmp_path: Path, hub: LocalTransport, store: SqliteCheckpointStore
) -> None:
    # Given events and a batch processor run until a threading.Event is set
    ids = send(tmp_path, 30)
    recorder = Recorder()
    stop = threading.Event()
    processor = PartitionProcessor(transport=hub, entity=HUB, store=store,
                                   on_event_batch=recorder.on_batch, settings=SETTINGS,
                                   balance=FAST)
    runner = threading.Thread(target=processor.run_forever, args=(stop,))
    runner.start()
    # When every event was handled and the event is set
    wait_for_sync(lambda: set(recorder.seen) == set(ids))
    stop.set()
    runner.join(10)
    # Then run_forever returned after a graceful stop, and the processor is closed
    assert not runner.is_alive()
    assert checkpoints(store, processor) == recorder.last
    with pytest.raises(RuntimeError, match="closed"):
        processor.start()
    # When a new processor runs on the same store after more events came
    more = [f"x{i}" for i in range(8)]
    asyncio.run(_send_ids(tmp_path, more))
    resumed: Counter[str] = Counter()

    def count(ctx: SyncPartitionContext, event: PartitionEvent | None) -> None:
        assert event is not None
        resumed[event.message.message_id] += 1
        recorder.seen[event.message.message_id] += 1

    with PartitionProcessor(transport=hub, entity=HUB, store=store, on_event=count,
                            settings=SETTINGS, balance=FAST):
        wait_for_sync(lambda: set(resumed) >= set(more))
    # Then it started from the checkpoints: only the new events were handled
    assert set(resumed) == set(more)
    assert all(recorder.seen[i] == 1 for i in ids + more)
    assert sum(recorder.batches) == 30


async def _send_ids(tmp_path: Path, ids: list[str]) -> None:
    async with LocalTransport("primary", data_dir=tmp_path) as transport:
        await transport.send(HUB, [Message(i, message_id=i) for i in ids])


def test_a_failing_sync_handler_goes_to_the_sync_on_error_and_is_called_again(
    tmp_path: Path, hub: LocalTransport, store: SqliteCheckpointStore
) -> None:
    # Given a handler that raises twice for one event, then handles it
    ids = send(tmp_path, 8)
    recorder = Recorder()
    failures = []

    def handle(ctx: SyncPartitionContext, event: PartitionEvent | None) -> None:
        assert event is not None
        if event.message.message_id == "e003" and len(failures) < 2:
            failures.append(event.sequence_number)
            raise ValueError("boom")
        recorder.on_event(ctx, event)

    # When it runs
    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                                 checkpoint_every_seconds=None, handler_backoff=0.01)
    with PartitionProcessor(transport=hub, entity=HUB, store=store, on_event=handle,
                            on_error=recorder.on_error, settings=settings, balance=FAST):
        wait_for_sync(lambda: set(recorder.seen) == set(ids))
    # Then on_error got each failure, and every event was handled, e003 included
    assert [str(e) for e in recorder.errors] == ["boom", "boom"]
    assert recorder.seen["e003"] == 1


def test_exactly_one_handler_is_required(hub: LocalTransport,
                                         store: SqliteCheckpointStore) -> None:
    # Given neither handler / Then the constructor refuses, before starting a thread
    before = threading.active_count()
    with pytest.raises(ConfigError, match="exactly one"):
        PartitionProcessor(transport=hub, entity=HUB, store=store)
    assert threading.active_count() == before


def test_store_errors_reach_the_sync_on_error_with_no_context(tmp_path: Path,
                                                              hub: LocalTransport) -> None:
    # Given a store whose first two claims fail
    ids = send(tmp_path, 4)
    store = FlakyStore(tmp_path / "flaky.db", claim=2)
    recorder = Recorder()
    contexts: list[object] = []

    def on_error(ctx: SyncPartitionContext | None, exc: BaseException) -> None:
        contexts.append(ctx)
        recorder.on_error(ctx, exc)

    # When it runs
    with PartitionProcessor(transport=hub, entity=HUB, store=store, on_event=recorder.on_event,
                            on_error=on_error, settings=SETTINGS, balance=FAST):
        wait_for_sync(lambda: set(recorder.seen) == set(ids))
    # Then both failures reached on_error(None, err), and every event was handled after
    # (a partition's read given up past its deadline on a loaded machine is reported
    # with the partition's context, and retried: nothing else reached on_error)
    reported = list(zip(contexts, recorder.errors, strict=True))
    assert [str(e) for ctx, e in reported if ctx is None] == [
        "claim failed: the store is unavailable"] * 2
    assert all(isinstance(e, OperationTimeout) for ctx, e in reported if ctx is not None), \
        reported
    anyio.run(store.aclose)
