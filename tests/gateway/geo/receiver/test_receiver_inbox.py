"""The queue receiver's transactional inbox and concurrent handlers, on SQLite and on
PostgreSQL (a DSN, the application's pool, a store), over real local namespaces."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from gateway import GeoReceiver, PostgresDedupStore, SqliteDedupStore
from gateway.transports import ReceivedMessage
from replication import ConfigError, InMemoryDedupStore, Message
from tests.gateway.conftest import Namespaces, ReceiverFactory, Recorder, wait_for
from tests.postgres import Pg

pytestmark = pytest.mark.anyio


async def send_to_both(ns: Namespaces, ids: list[str]) -> None:
    for name in ("primary", "secondary"):
        await ns.put(name, *(Message(i, message_id=i) for i in ids))


@pytest.fixture
def pg_effects(pg: Pg) -> str:
    """The application's table in the test's schema (a log: one row per effect)."""
    with psycopg.connect(pg.dsn) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {pg.schema}")
        conn.execute(f"CREATE TABLE {pg.schema}.effects (message_id text NOT NULL)")
    return f"{pg.schema}.effects"


def pg_counts(pg: Pg, table: str) -> dict[str, int]:
    with psycopg.connect(pg.dsn) as conn:
        return dict(conn.execute(f"SELECT message_id, count(*) FROM {table}"
                                 " GROUP BY message_id").fetchall())


async def run_until(receiver: Any, handler: Any, done: Any, **kw: Any) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(handler, stop=stop, **kw))
    try:
        await wait_for(lambda: done() or task.done(), within=20)
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_concurrent_inbox_handlers_on_postgres_write_each_effect_once(
    pg: Pg, pg_effects: str, ns: Namespaces, make_receiver: ReceiverFactory, hooks: Recorder
) -> None:
    # Given 24 messages in both namespaces and a receiver on PostgreSQL
    ids = [f"m{i:02d}" for i in range(24)]
    await send_to_both(ns, ids)
    store = PostgresDedupStore(pg.dsn, schema=pg.schema)
    receiver = await make_receiver(dedup_store=store, hooks=hooks)
    four_in = threading.Barrier(4, timeout=10)
    met = threading.Event()

    def inbox(message: ReceivedMessage, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"INSERT INTO {pg_effects} VALUES (%s)", (message.message_id,))
        if not met.is_set():
            four_in.wait()  # four transactions open at once, or this breaks
            met.set()

    # When it runs the inbox with four handlers at once
    await run_until(receiver, inbox, lambda: len(pg_counts(pg, pg_effects)) == 24
                    and receiver.stats.duplicates_suppressed == 24,
                    transactional=True, concurrency=4)
    # Then four ran together, each effect committed once, every other copy suppressed
    assert met.is_set()
    assert pg_counts(pg, pg_effects) == dict.fromkeys(ids, 1)
    assert sorted(e["message_id"] for e in hooks.named("on_duplicate")) == ids
    assert ns.count("primary") == ns.count("secondary") == 0


async def test_a_failing_inbox_handler_keeps_nothing_and_is_delivered_again(
    pg: Pg, pg_effects: str, ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    await send_to_both(ns, ["only"])
    receiver = await make_receiver(dedup_store=PostgresDedupStore(pg.dsn, schema=pg.schema))
    calls: list[str] = []

    def inbox(message: ReceivedMessage, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"INSERT INTO {pg_effects} VALUES (%s)", (message.message_id,))
        calls.append(message.message_id)
        if len(calls) == 1:
            raise RuntimeError("the first attempt fails after writing")

    await run_until(receiver, inbox, lambda: receiver.stats.duplicates_suppressed == 1,
                    transactional=True)
    # The failed attempt's row was rolled back; the second one committed
    assert len(calls) == 2
    assert pg_counts(pg, pg_effects) == {"only": 1}
    assert receiver.stats.abandoned == 1


async def test_the_sqlite_inbox_on_the_queue_receiver(
    tmp_path: Path, ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given the application's table in the dedup file
    path = tmp_path / "inbox.db"
    SqliteDedupStore(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE effects (message_id TEXT NOT NULL)")
        conn.commit()
    ids = [f"m{i}" for i in range(10)]
    await send_to_both(ns, ids)
    receiver = await make_receiver(dedup_store=path)

    def inbox(message: ReceivedMessage, conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO effects VALUES (?)", (message.message_id,))

    def counts() -> dict[str, int]:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return dict(conn.execute("SELECT message_id, count(*) FROM effects"
                                     " GROUP BY message_id"))

    # When it runs (four at once asked: SQLite's inbox takes them one by one)
    await run_until(receiver, inbox, lambda: receiver.stats.duplicates_suppressed == 10,
                    transactional=True, concurrency=4)
    # Then each effect is in the file once
    assert counts() == dict.fromkeys(ids, 1)


async def test_plain_handlers_run_concurrently(ns: Namespaces,
                                               make_receiver: ReceiverFactory) -> None:
    ids = [f"m{i:02d}" for i in range(12)]
    await send_to_both(ns, ids)
    receiver = await make_receiver()
    inside = 0
    most = 0
    delivered: list[str] = []

    async def handler(message: ReceivedMessage) -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.05)
        inside -= 1
        delivered.append(message.message_id)

    await run_until(receiver, handler, lambda: receiver.stats.duplicates_suppressed == 12,
                    concurrency=3)
    assert sorted(delivered) == ids
    assert most == 3


async def test_inbox_misuse_is_refused(ns: Namespaces, make_receiver: ReceiverFactory) -> None:
    async def coroutine(message: ReceivedMessage, conn: Any) -> None:
        return None

    receiver = await make_receiver()
    with pytest.raises(ConfigError, match="plain function"):
        await receiver.run(coroutine, transactional=True)
    with pytest.raises(ConfigError, match="concurrency"):
        await receiver.run(lambda m: None, concurrency=0)
    memory = await make_receiver(dedup_store=InMemoryDedupStore())
    with pytest.raises(ConfigError, match="finish_with_effect"):
        await memory.run(lambda m, c: None, transactional=True)


async def test_a_dsn_or_the_applications_pool_is_a_postgres_store(
    pg: Pg, ns: Namespaces, make_receiver: ReceiverFactory
) -> None:
    # Given a message in both namespaces, and a receiver given the DSN (schema geogateway)
    mid = f"dsn-{uuid.uuid4().hex}"
    await send_to_both(ns, [mid])
    by_dsn = await make_receiver(dedup_store=pg.dsn)
    [got] = await by_dsn.receive(max_messages=10, max_wait=5)
    await by_dsn.complete(got)
    # Then the mark is in PostgreSQL, where a receiver on the application's pool finds it
    with ConnectionPool(pg.dsn, min_size=1, max_size=3, open=True) as pool:
        by_pool = await make_receiver(dedup_store=pool)
        assert by_pool._dedup.is_done(mid)
        await by_pool.aclose()
        # And the application's pool is left open
        assert not pool.closed
    assert got.message_id == mid
    # And the DSN was not taken for a file name
    assert isinstance(by_dsn._dedup.store, PostgresDedupStore)


async def test_an_async_pool_or_another_type_is_refused(make_receiver: ReceiverFactory,
                                                        pg: Pg) -> None:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(pg.dsn, open=False)
    with pytest.raises(ConfigError, match="AsyncConnectionPool"):
        await make_receiver(dedup_store=pool)
    with pytest.raises(ConfigError, match="dedup_store must be"):
        await make_receiver(dedup_store=42)


def test_the_sync_receiver_runs_the_inbox(pg: Pg, pg_effects: str, ns: Namespaces,
                                          data_dir: Path) -> None:
    # Given five messages in both namespaces
    ids = [f"m{i}" for i in range(5)]
    anyio.run(send_to_both, ns, ids)

    def inbox(message: ReceivedMessage, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"INSERT INTO {pg_effects} VALUES (%s)", (message.message_id,))

    # When a GeoReceiver runs it, two at a time, until idle
    with GeoReceiver(primary="local://primary", secondary="local://secondary",
                     entity="orders", data_dir=data_dir, poll_wait=0.05,
                     dedup_store=PostgresDedupStore(pg.dsn, schema=pg.schema)) as receiver:
        receiver.run(inbox, transactional=True, concurrency=2, idle_timeout=1.5)
        stats = receiver.stats
    # Then each effect committed once and every copy was settled
    assert pg_counts(pg, pg_effects) == dict.fromkeys(ids, 1)
    assert (stats.completed, stats.duplicates_suppressed) == (5, 5)
    assert ns.count("primary") == ns.count("secondary") == 0
