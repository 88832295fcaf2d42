"""At-least-once through handler and store failures: a failing handler never lets the
checkpoint pass its event, and store errors reach ``on_error(None, err)``.

Real parts: the SQLite checkpoint store and the local transport."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from gateway.consumer import SqliteCheckpointStore
from gateway.consumer._balance import BalanceSettings
from gateway.consumer._partition import PartitionContext, ProcessorSettings
from gateway.consumer._processor import AsyncPartitionProcessor
from gateway.consumer._records import Checkpoint, Heartbeat, Ownership
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import PartitionEvent
from replication import GatewayError, Message

pytestmark = pytest.mark.anyio

HUB = "telemetry"
#: Claims kept 3 s: none expires when a loaded machine holds a heartbeat back (a
#: partition read again from its checkpoint would call the handler again).
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)
EVERY_EVENT = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=1,
                                checkpoint_every_seconds=None, handler_backoff=0.01,
                                max_handler_backoff=0.05)


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[LocalTransport]:
    LocalNamespace("primary", data_dir=tmp_path).create_partitioned(HUB, partitions=2)
    transport = LocalTransport("primary", data_dir=tmp_path)
    yield transport
    await transport.aclose()


async def send_one_partition(hub: LocalTransport, count: int) -> list[str]:
    ids = [f"e{i:03d}" for i in range(count)]
    await hub.send(HUB, [Message(i, message_id=i, partition_key="same") for i in ids])
    return ids


async def until(predicate: Callable[[], bool], within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def checkpointed(store: SqliteCheckpointStore, proc: AsyncPartitionProcessor
                       ) -> dict[str, int | None]:
    return {c.partition_id: c.sequence_number for c in await store.list_checkpoints(proc.group)}


class FailingOn:
    """A handler that fails ``times`` times on one message id, then handles it; it
    records, at each failure, the checkpoint the store holds for that partition."""

    def __init__(self, store: SqliteCheckpointStore, bad: str, times: int) -> None:
        self.store, self.bad, self.left = store, bad, times
        self.handled: list[str] = []
        self.calls: Counter[str] = Counter()
        self.bad_sequence: int | None = None
        self.checkpoints_while_failing: list[int | None] = []

    async def __call__(self, ctx: PartitionContext, event: PartitionEvent | None) -> None:
        assert event is not None
        message_id = event.message.message_id
        self.calls[message_id] += 1
        if message_id == self.bad and (self.left is None or self.left > 0):
            self.bad_sequence = event.sequence_number
            proc = ctx._processor  # the test reads the store directly
            found = await checkpointed(self.store, proc)
            self.checkpoints_while_failing.append(found.get(ctx.partition_id))
            if self.left is not None:
                self.left -= 1
            raise ValueError(f"cannot handle {message_id}")
        self.handled.append(message_id)


def make(hub: LocalTransport, store: object, handler: object, errors: list, name: str = "a",
         settings: ProcessorSettings = EVERY_EVENT) -> AsyncPartitionProcessor:
    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        errors.append((ctx, exc))

    return AsyncPartitionProcessor(
        transport=hub, entity=HUB, store=store, on_event=handler,  # type: ignore[arg-type]
        on_error=on_error, instance_id=name, balance=FAST, settings=settings,
    )


async def test_a_failing_event_is_retried_until_handled_and_never_checkpointed_past(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given 8 events in one partition and a handler that fails 4 times on the 4th
    ids = await send_one_partition(hub, 8)
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    handler = FailingOn(store, ids[3], times=4)
    errors: list[tuple[PartitionContext | None, BaseException]] = []
    # When the processor runs until every event is handled
    async with make(hub, store, handler, errors) as proc:
        await until(lambda: len(handler.handled) == len(ids))
    # Then the failing event was handled after its failures, in order, once each
    assert handler.handled == ids
    assert handler.calls[ids[3]] == 5
    # And each failure reached on_error with the partition's context
    assert len(errors) == 4
    assert all(ctx is not None and isinstance(exc, ValueError) for ctx, exc in errors)
    # And while it failed, the checkpoint stayed before it (at the event before)
    assert handler.bad_sequence is not None
    assert handler.checkpoints_while_failing == [handler.bad_sequence - 1] * 4
    # And the checkpoint reached the last event in the end
    (final,) = [v for v in (await checkpointed(store, proc)).values() if v is not None]
    assert final == handler.bad_sequence + 4
    await store.aclose()


async def test_stopping_while_an_event_fails_leaves_it_for_the_next_owner(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given a handler that always fails on the 3rd of 6 events
    ids = await send_one_partition(hub, 6)
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    always = FailingOn(store, ids[2], times=None)  # type: ignore[arg-type]
    errors: list[tuple[PartitionContext | None, BaseException]] = []
    # When it has failed a few times and the processor stops (hand-over)
    proc = make(hub, store, always, errors)
    await proc.start()
    await until(lambda: len(errors) >= 3)
    await proc.stop(handover_timeout=0)
    # Then nothing after the failing event was handled, and the hand-over checkpoint
    # is the event before it
    assert always.handled == ids[:2]
    assert always.bad_sequence is not None
    assert set((await checkpointed(store, proc)).values()) == {always.bad_sequence - 1}
    # When a new instance takes over with a handler that works
    healthy = FailingOn(store, "none", times=0)
    async with make(hub, store, healthy, [], name="b"):
        await until(lambda: len(healthy.handled) == 4)
    # Then it starts at the failed event: nothing is lost
    assert healthy.handled == ids[2:]
    await store.aclose()


async def test_a_failing_batch_is_retried_whole(hub: LocalTransport, tmp_path: Path) -> None:
    # Given a batch handler that fails twice on the batch holding e002
    ids = await send_one_partition(hub, 6)
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    batches: list[list[str]] = []
    failures = Counter[str]()

    async def on_batch(ctx: PartitionContext, events: list[PartitionEvent]) -> None:
        names = [e.message.message_id for e in events]
        if ids[2] in names and failures["x"] < 2:
            failures["x"] += 1
            raise ValueError("batch failed")
        batches.append(names)

    errors: list[tuple[PartitionContext | None, BaseException]] = []
    settings = ProcessorSettings(poll_wait=0.05, max_batch_size=3, checkpoint_every_events=1,
                                 checkpoint_every_seconds=None, handler_backoff=0.01)
    proc = AsyncPartitionProcessor(
        transport=hub, entity=HUB, store=store, on_event_batch=on_batch,
        on_error=lambda ctx, exc: _append(errors, ctx, exc), instance_id="a", balance=FAST,
        settings=settings)
    async with proc:
        await until(lambda: sum(len(b) for b in batches) == 6)
    # Then every event was handled once, in order, and the failures were reported
    assert [i for b in batches for i in b] == ids
    assert len(errors) == 2
    await store.aclose()


async def _append(errors: list, ctx: PartitionContext | None, exc: BaseException) -> None:
    errors.append((ctx, exc))


class FlakyStore(SqliteCheckpointStore):
    """The real SQLite store, with chosen operations failing a number of times."""

    def __init__(self, path: Path, **failures: int) -> None:
        super().__init__(path)
        self.failures = Counter(failures)

    def _maybe_fail(self, operation: str) -> None:
        if self.failures[operation] > 0:
            self.failures[operation] -= 1
            raise GatewayError(f"{operation} failed: the store is unavailable")

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        self._maybe_fail("claim")
        return await super().claim_ownership(claims)

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        self._maybe_fail("heartbeat")
        return await super().heartbeat(heartbeat)

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        self._maybe_fail("checkpoint")
        await super().update_checkpoint(checkpoint, owner_id=owner_id)

    async def list_checkpoints(self, group: object) -> list[Checkpoint]:  # type: ignore[override]
        self._maybe_fail("list_checkpoints")
        return await super().list_checkpoints(group)  # type: ignore[arg-type]


@pytest.mark.parametrize("operation", ["claim", "heartbeat"])
async def test_claim_and_heartbeat_errors_reach_on_error_with_no_context(
    hub: LocalTransport, tmp_path: Path, operation: str
) -> None:
    # Given a store whose claims (or heartbeats) fail twice, then work
    ids = await send_one_partition(hub, 3)
    store = FlakyStore(tmp_path / "cp.db", **{operation: 2})
    handler = FailingOn(store, "none", times=0)
    errors: list[tuple[PartitionContext | None, BaseException]] = []
    # When a processor runs
    async with make(hub, store, handler, errors):
        await until(lambda: len(handler.handled) == 3)
    # Then each failure reached on_error(None, err), and the events were handled after
    store_errors = [exc for ctx, exc in errors if ctx is None]
    assert len(store_errors) == 2
    assert all(f"{operation} failed" in str(exc) for exc in store_errors)
    assert handler.handled == ids
    await store.aclose()


async def test_checkpoint_and_position_errors_reach_on_error_and_the_partition_goes_on(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given a store whose first checkpoint write and first checkpoint list fail
    ids = await send_one_partition(hub, 4)
    store = FlakyStore(tmp_path / "cp.db", checkpoint=1, list_checkpoints=1)
    handler = FailingOn(store, "none", times=0)
    errors: list[tuple[PartitionContext | None, BaseException]] = []
    # When a processor runs
    async with make(hub, store, handler, errors) as proc:
        await until(lambda: len(handler.handled) == 4)
        # Then the partition was still read, and the later checkpoints were written
        await until(lambda: len(errors) == 2)
    assert handler.handled == ids
    assert "list_checkpoints failed" in " ".join(str(exc) for _, exc in errors)
    assert "checkpoint failed" in " ".join(str(exc) for _, exc in errors)
    assert max(v or 0 for v in (await checkpointed(store, proc)).values()) >= 3
    await store.aclose()


async def test_a_failed_hand_over_checkpoint_reaches_on_error(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given a processor that handled events but checkpoints only at hand-over, on a
    # store whose checkpoint writes fail
    ids = await send_one_partition(hub, 3)
    store = FlakyStore(tmp_path / "cp.db", checkpoint=1000)
    handler = FailingOn(store, "none", times=0)
    errors: list[tuple[PartitionContext | None, BaseException]] = []
    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=None,
                                 checkpoint_every_seconds=None)
    proc = make(hub, store, handler, errors, settings=settings)
    await proc.start()
    await until(lambda: handler.handled == ids)
    # When it stops
    await proc.stop(handover_timeout=0)
    # Then the failed hand-over checkpoint reached on_error with the partition
    assert errors and all(ctx is not None and "checkpoint failed" in str(exc)
                          for ctx, exc in errors)
    await store.aclose()


class FlakyReads(LocalTransport):
    """The local transport, whose first reads fail with an error that is not an outage."""

    def __init__(self, *args: object, failures: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.failures = failures

    async def read_partition(self, *args: object, **kwargs: object) -> list[PartitionEvent]:
        if self.failures > 0:
            self.failures -= 1
            raise GatewayError("the read failed for a reason that is not an outage")
        return await super().read_partition(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_read_error_that_is_not_an_outage_reaches_on_error_and_reading_goes_on(
    hub: LocalTransport, tmp_path: Path
) -> None:
    # Given a transport whose first two reads fail with a plain GatewayError
    ids = await send_one_partition(hub, 3)
    flaky = FlakyReads("primary", data_dir=tmp_path, failures=2)
    store = SqliteCheckpointStore(tmp_path / "cp.db")
    handler = FailingOn(store, "none", times=0)
    errors: list[tuple[PartitionContext | None, BaseException]] = []
    # When a processor reads with it
    async with make(flaky, store, handler, errors):
        await until(lambda: handler.handled == ids)
    # Then both failures reached on_error with the partition, and reading went on
    assert len(errors) == 2 and all(ctx is not None for ctx, _ in errors)
    await store.aclose()
    await flaky.aclose()
