"""Partition processors on a PostgreSQL checkpoint store: a real server shared by two
instances, and that server restarted mid-run (the store errors reach ``on_error``,
partitions are kept only while the ownership is valid, and everything resumes)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from gateway.consumer import (
    AsyncPartitionProcessor,
    BalanceSettings,
    CloseReason,
    PostgresCheckpointStore,
    ProcessorSettings,
)
from gateway.consumer._partition import PartitionContext
from gateway.transports import LocalNamespace, LocalTransport
from replication import StoreUnavailable
from tests.postgres import Pg

from .test_processor import HUB, Recorder, processor, send, until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[LocalTransport]:
    LocalNamespace("primary", data_dir=tmp_path).create_partitioned(HUB, partitions=4)
    transport = LocalTransport("primary", data_dir=tmp_path)
    yield transport
    await transport.aclose()


async def test_two_instances_share_the_partitions_through_postgres(hub: LocalTransport, pg: Pg):
    # Given events and two processors, each with its own pool on the same database
    ids = await send(hub, 0, 40)
    stores = [PostgresCheckpointStore(pg.dsn, schema=pg.schema) for _ in range(2)]
    recorder = Recorder()
    a, b = (processor(hub, s, recorder, n) for s, n in zip(stores, "ab", strict=True))
    try:
        await a.start()
        await b.start()
        # When both run until every event is handled and the group is balanced
        await until(lambda: set(recorder.seen) == set(ids))
        await until(lambda: len(a.owned) == len(b.owned) == 2)
        # Then each partition is read by exactly one of them
        assert a.owned.isdisjoint(b.owned) and a.owned | b.owned == {"0", "1", "2", "3"}
        await a.stop()
        await b.stop()
        # And the checkpoints are where the handlers got to
        marks = {c.partition_id: c.sequence_number
                 for c in await stores[0].list_checkpoints(a.group)}
        assert marks == {p: seq[-1] for p, seq in recorder.order.items()}
    finally:
        for store in stores:
            await store.aclose()


async def test_a_server_restart_reaches_on_error_drops_partitions_and_resumes(
    hub: LocalTransport, pg_server_factory,
):
    # Given a processor on a PostgreSQL server of this test's own, reading everything
    server = pg_server_factory()
    store = PostgresCheckpointStore(server.dsn, connect_timeout=1)
    errors: list[tuple[str | None, BaseException]] = []

    async def on_error(ctx: PartitionContext | None, exc: BaseException) -> None:
        errors.append((ctx.partition_id if ctx else None, exc))

    recorder = Recorder()
    proc = processor(hub, store, recorder, "a", on_error=on_error)
    first = await send(hub, 0, 20)
    await proc.start()
    try:
        await until(lambda: set(recorder.seen) >= set(first) and len(proc.owned) == 4)
        # When the server stops (its connections are cut) while events keep coming
        server.stop(mode="fast")
        during = await send(hub, 20, 10)
        # Then the store's errors reach on_error as StoreUnavailable, and the
        # processor gives its partitions up once its heartbeat could have expired
        await until(lambda: any(isinstance(e, StoreUnavailable) for _, e in errors))
        await until(lambda: not proc.owned)
        assert all("127.0.0.1" in str(e) for _, e in errors if isinstance(e, StoreUnavailable))
        # When the server is back
        server.start()
        after = await send(hub, 30, 10)
        # Then the processor claims its partitions again and handles every event (those
        # after the last checkpoint perhaps twice: at-least-once)
        await until(lambda: len(proc.owned) == 4, within=30)
        await until(lambda: set(recorder.seen) >= set(first + during + after), within=30)
        await proc.stop()
        proc_marks = {c.partition_id: c.sequence_number
                      for c in await store.list_checkpoints(proc.group)}
        assert proc_marks == {p: max(seq) for p, seq in recorder.order.items()}
    finally:
        await asyncio.shield(store.aclose())


async def test_a_short_restart_keeps_every_partition_and_is_two_log_lines(
    hub: LocalTransport, pg_server_factory, caplog: pytest.LogCaptureFixture,
):
    # Given a processor with the default balancing on a server of its own, owning all
    server = pg_server_factory()
    store = PostgresCheckpointStore(server.dsn)
    recorder = Recorder()
    proc = AsyncPartitionProcessor(
        transport=hub, entity=HUB, store=store, on_event=recorder.handler("a"),
        on_partition_close=recorder.on_close, instance_id="a",
        settings=ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                                   checkpoint_every_seconds=None))
    first = await send(hub, 0, 20)
    await proc.start()
    fewest = [4]

    async def watch_owned() -> None:
        while True:
            fewest[0] = min(fewest[0], len(proc.owned))
            await asyncio.sleep(0.05)

    try:
        await until(lambda: set(recorder.seen) >= set(first) and len(proc.owned) == 4,
                    within=30)
        await until(lambda: proc.manager.idle, within=30)
        watcher = asyncio.get_running_loop().create_task(watch_owned())
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        # When the server restarts, away for 2.5 s (shorter than the heartbeat window),
        # while events keep coming
        await anyio.to_thread.run_sync(lambda: server.stop(mode="fast"))
        during = await send(hub, 20, 10)
        await asyncio.sleep(2.5)
        await anyio.to_thread.run_sync(server.start)
        after = await send(hub, 30, 10)
        # Then every event is handled, and the processor kept every partition throughout
        # (no ownership lost, none read again from an older checkpoint)
        await until(lambda: set(recorder.seen) >= set(first + during + after), within=30)
        await asyncio.sleep(BalanceSettings().heartbeat_expiry)
        watcher.cancel()
        assert fewest[0] == 4
        assert not any(reason is CloseReason.OWNERSHIP_LOST for _, reason in recorder.closed)
        # And the outage was one warning when the store went away and one when it was
        # back: no traceback, nothing from the pool
        loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage().split(" (")[0] for r in loud] == [
            f"checkpoint store at {store.where} is unavailable",
            f"checkpoint store at {store.where} is back"], [r.getMessage() for r in loud]
        assert not any(r.exc_info for r in loud)
    finally:
        await proc.stop()
        await asyncio.shield(store.aclose())
