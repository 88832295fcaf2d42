"""The geo partition receiver with its checkpoints and ownership on PostgreSQL: two
receivers (as on two machines, each with its own SQLite de-dup file) given only the
DSN share the partitions of both namespaces, and checkpoint each namespace apart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import ConsumerGroupRef, PostgresCheckpointStore
from gateway.transports import LocalNamespace
from tests.gateway.conftest import wait_for
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
