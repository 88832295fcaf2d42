"""PostgresCheckpointStore on a real server, beyond the contract it shares with the
SQLite store and the in-memory twin (``test_sqlite_store``): concurrent claimers on
separate connection pools, the checkpoint fence racing a takeover, per-namespace
records, the server's clock, read-only inspection, reopening, a pool passed in, a
server restart, and errors that never show the password."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import psycopg
import pytest

from gateway.consumer import (
    Checkpoint,
    ConsumerGroupRef,
    Heartbeat,
    Ownership,
    PostgresCheckpointStore,
)
from replication import ConfigError, GatewayError, OwnershipLost, StoreUnavailable
from tests.conftest import FakeClock
from tests.postgres import Pg

from .conftest import GROUP

pytestmark = pytest.mark.anyio

OTHER_NAMESPACE = replace(GROUP, fully_qualified_namespace="geo-ns-2.servicebus.windows.net")


def claim(partition: str, owner: str, etag: str | None = None,
          group: ConsumerGroupRef = GROUP) -> Ownership:
    return Ownership(**vars(group), partition_id=partition, owner_id=owner, etag=etag)


def checkpoint(partition: str, sequence: int, group: ConsumerGroupRef = GROUP) -> Checkpoint:
    return Checkpoint(**vars(group), partition_id=partition, offset=str(sequence * 100),
                      sequence_number=sequence)


@pytest.fixture
async def store(pg: Pg, clock: FakeClock) -> AsyncIterator[PostgresCheckpointStore]:
    async with PostgresCheckpointStore(pg.dsn, schema=pg.schema, clock=clock) as made:
        yield made


async def test_concurrent_claimers_on_separate_pools_win_each_partition_once(pg: Pg):
    # Given two instances, each with its own store (its own pool, as on two machines)
    a = PostgresCheckpointStore(pg.dsn, schema=pg.schema)
    b = PostgresCheckpointStore(pg.dsn, schema=pg.schema)
    partitions = [str(p) for p in range(16)]
    try:
        # When both claim every new partition at once, in opposite orders
        won_a, won_b = await asyncio.gather(
            a.claim_ownership([claim(p, "a") for p in partitions]),
            b.claim_ownership([claim(p, "b") for p in reversed(partitions)]))
        # Then every partition was won exactly once
        assert sorted([o.partition_id for o in won_a + won_b], key=int) == partitions
        # When both take over everything they listed, with the etags read, at once
        seen = await a.list_ownership(GROUP)
        over_a, over_b = await asyncio.gather(
            a.claim_ownership([o.claimed_by("a") for o in seen]),
            b.claim_ownership([o.claimed_by("b") for o in reversed(seen)]))
        # Then again each partition went to one of them only, and the records say so
        assert sorted([o.partition_id for o in over_a + over_b], key=int) == partitions
        listed = {o.partition_id: o.owner_id for o in await b.list_ownership(GROUP)}
        assert listed == {o.partition_id: o.owner_id for o in over_a + over_b}
    finally:
        await a.aclose()
        await b.aclose()


async def _blocked_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                           "WHERE wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


async def test_a_checkpoint_racing_a_takeover_is_refused_once_the_takeover_commits(
    pg: Pg, store: PostgresCheckpointStore,
):
    # Given a owns partition 0 and checkpointed at 10
    [mine] = await store.claim_ownership([claim("0", "a")])
    await store.update_checkpoint(checkpoint("0", 10), owner_id="a")
    # And b's takeover is under way: its transaction changed the record, not committed
    with psycopg.connect(pg.dsn) as takeover:
        takeover.execute(
            f"UPDATE {pg.schema}.consumer_ownership SET owner_id = 'b', etag = 'b-etag' "
            "WHERE partition_id = '0'")
        # When a (stale now) writes an older checkpoint meanwhile
        write = asyncio.ensure_future(store.update_checkpoint(checkpoint("0", 5), owner_id="a"))
        deadline = time.monotonic() + 10
        while not await _blocked_on_a_lock(pg.dsn):
            assert time.monotonic() < deadline and not write.done(), "the write did not wait"
            await asyncio.sleep(0.02)
        # (it waits for the takeover) and b commits, then checkpoints at 20
        takeover.commit()
        # Then a's write is refused: it saw the new owner once the lock was released
        with pytest.raises(OwnershipLost, match="a does not own partition 0"):
            await write
    await store.update_checkpoint(checkpoint("0", 20), owner_id="b")
    with pytest.raises(OwnershipLost):
        await store.update_checkpoint(checkpoint("0", 15), owner_id="a")
    assert await store.list_checkpoints(GROUP) == [checkpoint("0", 20)]
    assert mine.etag != "b-etag"


async def test_records_are_kept_per_namespace(store: PostgresCheckpointStore):
    # Given the same partition claimed and checkpointed in two namespaces
    await store.claim_ownership([claim("0", "a"), claim("0", "b", group=OTHER_NAMESPACE)])
    await store.update_checkpoint(checkpoint("0", 3), owner_id="a")
    await store.update_checkpoint(checkpoint("0", 7, group=OTHER_NAMESPACE), owner_id="b")
    # Then each namespace has its own owner and checkpoint, and fences its own
    assert [o.owner_id for o in await store.list_ownership(GROUP)] == ["a"]
    assert [o.owner_id for o in await store.list_ownership(OTHER_NAMESPACE)] == ["b"]
    assert await store.list_checkpoints(OTHER_NAMESPACE) == [checkpoint("0", 7, OTHER_NAMESPACE)]
    with pytest.raises(OwnershipLost):
        await store.update_checkpoint(checkpoint("0", 9, group=OTHER_NAMESPACE), owner_id="a")


async def test_times_come_from_the_servers_clock_by_default(pg: Pg):
    async with PostgresCheckpointStore(pg.dsn, schema=pg.schema) as store:
        [won] = await store.claim_ownership([claim("0", "a")])
        beat = await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
        with psycopg.connect(pg.dsn) as conn:
            row = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
        assert row is not None
        # The server runs on this machine: its clock is this one's
        assert won.last_modified_time is not None and beat.last_modified_time is not None
        assert abs(won.last_modified_time - row[0]) < 60
        assert beat.last_modified_time >= won.last_modified_time


async def test_everything_survives_a_reopen(pg: Pg, clock: FakeClock):
    async with PostgresCheckpointStore(pg.dsn, schema=pg.schema, clock=clock) as first:
        [owned] = await first.claim_ownership([claim("0", "a")])
        await first.update_checkpoint(checkpoint("0", 42), owner_id="a")
        beat = await first.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
    async with PostgresCheckpointStore(pg.dsn, schema=pg.schema, clock=clock) as second:
        assert await second.list_ownership(GROUP) == [owned]
        assert await second.list_checkpoints(GROUP) == [checkpoint("0", 42)]
        assert await second.list_heartbeats(GROUP) == [replace(beat, woken=False)]
        assert await second.claim_ownership([claim("0", "b")]) == []
        assert len(await second.claim_ownership([owned.claimed_by("b")])) == 1


async def test_read_only_reads_everything_and_writes_nothing(pg: Pg, store):
    await store.claim_ownership([claim("0", "a")])
    await store.update_checkpoint(checkpoint("0", 4), owner_id="a")
    async with PostgresCheckpointStore(pg.dsn, schema=pg.schema, read_only=True) as reader:
        assert [o.owner_id for o in await reader.list_ownership(GROUP)] == ["a"]
        assert await reader.list_checkpoints(GROUP) == [checkpoint("0", 4)]
        with pytest.raises(GatewayError, match="read-only transaction"):
            await reader.heartbeat(Heartbeat(**vars(GROUP), instance_id="x"))
    assert await store.list_heartbeats(GROUP) == []


def test_read_only_on_a_schema_without_a_store_creates_nothing(pg: Pg):
    with pytest.raises(ConfigError, match=f"no checkpoint store in schema '{pg.schema}'"):
        PostgresCheckpointStore(pg.dsn, schema=pg.schema, read_only=True)
    with psycopg.connect(pg.dsn) as conn:
        found = conn.execute("SELECT count(*) FROM information_schema.schemata "
                             "WHERE schema_name = %s", (pg.schema,)).fetchone()
    assert found == (0,)


async def test_a_pool_passed_in_is_used_and_left_open(pg: Pg):
    from psycopg_pool import ConnectionPool

    with ConnectionPool(pg.dsn, min_size=1, max_size=2) as pool:
        async with PostgresCheckpointStore(pool, schema=pg.schema) as store:
            assert len(await store.claim_ownership([claim("0", "a")])) == 1
        with pool.connection() as conn:  # still open after the store closed
            row = conn.execute(f"SELECT owner_id FROM {pg.schema}.consumer_ownership"
                               ).fetchone()
        assert row == ("a",)


async def test_a_closed_store_says_so(pg: Pg):
    store = PostgresCheckpointStore(pg.dsn, schema=pg.schema)
    await store.aclose()
    await store.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await store.list_ownership(GROUP)


async def test_a_restarted_server_is_unavailable_meanwhile_then_serves_again(
    pg_server_factory,
):
    # Given a store on a server of this test's own, with a record
    server = pg_server_factory()
    store = PostgresCheckpointStore(server.dsn, connect_timeout=1)
    try:
        [owned] = await store.claim_ownership([claim("0", "a")])
        # When the server stops (fast: the test server does not flush its commits,
        # an immediate stop would lose them)
        server.stop(mode="fast")
        # Then calls fail with StoreUnavailable naming the server, never the password
        with pytest.raises(StoreUnavailable) as caught:
            await store.list_ownership(GROUP)
        password = server.dsn.split(":")[2].split("@")[0]
        assert "127.0.0.1" in str(caught.value) and password not in str(caught.value)
        with pytest.raises(StoreUnavailable):
            await store.update_checkpoint(checkpoint("0", 1), owner_id="a")
        # And once it is back, the same store serves again, the record intact
        server.start()
        assert await store.list_ownership(GROUP) == [owned]
        await store.update_checkpoint(checkpoint("0", 2), owner_id="a")
        assert await store.list_checkpoints(GROUP) == [checkpoint("0", 2)]
    finally:
        await store.aclose()


def test_errors_and_repr_never_show_the_password(pg: Pg):
    password = pg.dsn.split(":")[2].split("@")[0]
    store = PostgresCheckpointStore(pg.dsn, schema=pg.schema)
    try:
        assert password not in repr(store) and "127.0.0.1" in repr(store)
    finally:
        import anyio

        anyio.run(store.aclose)
    with pytest.raises(ConfigError) as caught:
        PostgresCheckpointStore(pg.dsn.replace(password, "wrong-pw"), schema=pg.schema)
    assert "refused the credentials" in str(caught.value)
    assert password not in str(caught.value) and "wrong-pw" not in str(caught.value)


def test_a_schema_newer_than_this_code_is_refused(pg: Pg):
    import anyio

    anyio.run(PostgresCheckpointStore(pg.dsn, schema=pg.schema).aclose)
    with psycopg.connect(pg.dsn) as conn:
        conn.execute(f"UPDATE {pg.schema}.geogateway_schema SET version = 99 "
                     "WHERE component = 'consumer'")
    with pytest.raises(ConfigError, match="version 99, newer than this geogateway"):
        PostgresCheckpointStore(pg.dsn, schema=pg.schema)
