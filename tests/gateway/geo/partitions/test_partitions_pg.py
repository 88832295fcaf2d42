"""The geo partition receiver with its checkpoints and ownership on PostgreSQL: two
receivers (as on two machines, each with its own SQLite de-dup file) given only the
DSN share the partitions of both namespaces, and checkpoint each namespace apart."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio.to_thread
import pytest

from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import ConsumerGroupRef, PostgresCheckpointStore
from gateway.stores import EmbeddedPostgres
from gateway.transports import LocalNamespace
from replication import StoreUnavailable
from tests.gateway.conftest import Recorder, wait_for
from tests.postgres import Pg

from .test_partitions import (
    FAST,
    HUB,
    NAMESPACES,
    QUICK,
    SETTINGS,
    Handled,
    Running,
    ids,
    last_sequences,
    send,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[dict[str, LocalNamespace]]:
    admin = {name: LocalNamespace(name, data_dir=tmp_path) for name in NAMESPACES}
    for namespace in admin.values():
        namespace.create_partitioned(HUB, partitions=4)
    yield admin
    for namespace in admin.values():
        namespace.close()


async def test_two_receivers_given_a_dsn_share_partitions_and_checkpoint_per_namespace(
    tmp_path: Path, hubs: dict[str, LocalNamespace], pg: Pg,
) -> None:
    # Given messages in both namespaces, and a consumer group of this test's own (the
    # DSN's store is the server's shared "geogateway" schema)
    sent = ids(0, 40)
    await send(tmp_path, sent)
    consumer_group = f"cg-{uuid.uuid4().hex[:8]}"
    handled = Handled()
    receivers = [
        AsyncGeoPartitionReceiver(
            primary="local://primary", secondary="local://secondary", entity=HUB,
            data_dir=tmp_path, balance=FAST, handler_retry=QUICK, settings=SETTINGS,
            checkpoint_store=pg.dsn, dedup_store=tmp_path / f"dedup-{name}.db",
            consumer_group=consumer_group, instance_id=name)
        for name in ("x", "y")]
    # When both run until every id was handled and the partitions are shared
    running = [Running(r, handled.handler(name)) for r, name in zip(receivers, "xy",
                                                                     strict=True)]
    await wait_for(lambda: set(handled.seen) == set(sent))
    await wait_for(lambda: all(len(r.owned.get(ns, ())) == 2
                               for r in receivers for ns in NAMESPACES))
    # Then each partition of each namespace is read by one of them
    for ns in NAMESPACES:
        x, y = (r.owned[ns] for r in receivers)
        assert x.isdisjoint(y) and x | y == {"0", "1", "2", "3"}
    for run in running:
        await run.finish()
    for r in receivers:
        await r.aclose()
    # And each namespace has its own checkpoints in PostgreSQL, at its partitions' ends
    async with PostgresCheckpointStore(pg.dsn, read_only=True) as store:
        for ns in NAMESPACES:
            group = ConsumerGroupRef(fully_qualified_namespace=ns, eventhub_name=HUB,
                                     consumer_group=consumer_group)
            marks = {c.partition_id: c.sequence_number
                     for c in await store.list_checkpoints(group)}
            assert marks == await last_sequences(tmp_path, ns)


async def test_a_checkpoint_store_outage_is_reported_once_by_hooks(
    tmp_path: Path, hubs: dict[str, LocalNamespace],
    pg_server_factory: Callable[[], EmbeddedPostgres],
) -> None:
    # Given a partition receiver whose checkpoints are on a server of its own, reading
    server = pg_server_factory()
    sent = ids(0, 20)
    await send(tmp_path, sent)
    handled = Handled()
    hooks = Recorder()
    receiver = AsyncGeoPartitionReceiver(
        primary="local://primary", secondary="local://secondary", entity=HUB,
        data_dir=tmp_path, balance=FAST, handler_retry=QUICK, settings=SETTINGS,
        checkpoint_store=server.dsn, dedup_store=tmp_path / "dedup.db", hooks=hooks)
    running = Running(receiver, handled.handler("x"))
    try:
        await wait_for(lambda: set(handled.seen) == set(sent))
        # When the server restarts
        await anyio.to_thread.run_sync(lambda: server.stop(mode="fast"))
        await wait_for(lambda: bool(hooks.named("on_store_down")), within=20)
        await anyio.to_thread.run_sync(server.start)
        await wait_for(lambda: bool(hooks.named("on_store_up")), within=20)
    finally:
        await running.finish()
        await receiver.aclose()
    # Then it was one on_store_down, naming the checkpoint store without the password,
    # and one on_store_up
    [down] = hooks.named("on_store_down")
    assert down["store"].startswith("checkpoint store at 127.0.0.1:")
    assert server.dsn.split(":")[2].split("@")[0] not in down["store"]
    assert isinstance(down["error"], StoreUnavailable)
    assert len(hooks.named("on_store_up")) == 1
