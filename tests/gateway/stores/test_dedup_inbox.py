"""The transactional inbox: a handler's writes and the de-dup "done" mark in one transaction.

``SqliteDedupStore.finish_with_effect``, ``Deduplicator.succeeded_with`` and
``AsyncGeoPartitionReceiver.run(..., transactional=True)``, down to a receiver process
SIGKILLed inside its handler: its effect is lost with its mark, and the message is
delivered again, exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import psycopg
import pytest

from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import BalanceSettings, ProcessorSettings
from gateway.stores import EmbeddedPostgres, PostgresDedupStore, SqliteDedupStore
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import PartitionEvent
from replication import ConfigError, GatewayError, Message
from replication._dedup import Deduplicator, DedupWindow, InMemoryDedupStore, Verdict
from tests.gateway.conftest import Recorder, wait_for
from tests.postgres import Pg

pytestmark = pytest.mark.anyio

WINDOW = DedupWindow(seconds=60, count=100)
HUB = "inbox"
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)
SETTINGS = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=5,
                             checkpoint_every_seconds=None)
PROJECT = Path(__file__).resolve().parents[3]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "dedup.db"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteDedupStore]:
    store = SqliteDedupStore(path, window=WINDOW)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE effects (message_id TEXT PRIMARY KEY, count INTEGER)")
        conn.commit()
    yield store
    store.close()


def effects(path: Path) -> dict[str, int]:
    """The application's rows, read through a connection of its own."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT message_id, count FROM effects"))


def record(message_id: str) -> object:
    def effect(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO effects VALUES (?, 1) ON CONFLICT (message_id)"
                     " DO UPDATE SET count = count + 1", (message_id,))
    return effect


# -- the store -------------------------------------------------------------------------


def test_effect_and_mark_commit_together(store: SqliteDedupStore, path: Path) -> None:
    # Given m1 claimed by "a"
    assert store.claim(["m1"], owner="a", now=0, lease=10) == [Verdict.DELIVER]
    # When "a" finishes it with an effect
    ran = store.finish_with_effect("m1", owner="a", now=1, effect=record("m1"))  # type: ignore[arg-type]
    # Then the effect's row and the done mark are both there, and the claim is gone
    assert ran is True
    assert effects(path) == {"m1": 1}
    assert store.peek("m1", now=2) is Verdict.DUPLICATE
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM claims").fetchone()[0] == 0


def test_an_effect_that_raises_keeps_neither_its_rows_nor_the_mark(
    store: SqliteDedupStore, path: Path
) -> None:
    # Given m1 claimed by "a", and an effect that writes its row, then fails
    store.claim(["m1"], owner="a", now=0, lease=10)

    def failing(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO effects VALUES ('m1', 1)")
        raise ValueError("the handler failed after writing")

    # When it runs in finish_with_effect
    with pytest.raises(ValueError, match="after writing"):
        store.finish_with_effect("m1", owner="a", now=1, effect=failing)
    # Then the row was rolled back with the mark: m1 is not done, still claimed by "a"
    assert effects(path) == {}
    assert store.peek("m1", now=2) is Verdict.HOLD
    # And once released, m1 can be delivered and its effect committed
    store.finish("m1", owner="a", succeeded=False, now=2)
    assert store.claim(["m1"], owner="b", now=3, lease=10) == [Verdict.DELIVER]
    assert store.finish_with_effect("m1", owner="b", now=4, effect=record("m1"))  # type: ignore[arg-type]
    assert effects(path) == {"m1": 1}


def test_a_sqlite_error_in_the_effect_rolls_back_and_is_a_gateway_error(
    store: SqliteDedupStore, path: Path
) -> None:
    store.claim(["m1"], owner="a", now=0, lease=10)

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO effects VALUES ('m1', 1)")
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(GatewayError):
        store.finish_with_effect("m1", owner="a", now=1, effect=broken)
    assert effects(path) == {}
    assert store.peek("m1", now=2) is Verdict.HOLD


def test_an_id_already_done_skips_the_effect(store: SqliteDedupStore, path: Path) -> None:
    # Given m1 done by "a" (its lease had run out and "b" claimed the other copy)
    store.claim(["m1"], owner="a", now=0, lease=1)
    assert store.claim(["m1"], owner="b", now=2, lease=10) == [Verdict.DELIVER]
    assert store.finish_with_effect("m1", owner="b", now=3, effect=record("m1"))  # type: ignore[arg-type]
    # When the late "a" finishes its copy with an effect
    ran = store.finish_with_effect("m1", owner="a", now=4, effect=record("m1"))  # type: ignore[arg-type]
    # Then the effect is skipped: one row, counted once
    assert ran is False
    assert effects(path) == {"m1": 1}


def test_an_effect_must_not_end_the_transaction(store: SqliteDedupStore) -> None:
    store.claim(["m1"], owner="a", now=0, lease=10)
    with pytest.raises(ConfigError, match="must not commit"):
        store.finish_with_effect("m1", owner="a", now=1,
                                 effect=lambda conn: conn.execute("COMMIT"))


# -- the deduplicator --------------------------------------------------------------------


def test_succeeded_with_marks_done_and_keeps_the_front_in_sync(path: Path) -> None:
    store = SqliteDedupStore(path, window=WINDOW)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE effects (message_id TEXT PRIMARY KEY, count INTEGER)")
        conn.commit()
    with Deduplicator(store) as dedup:
        assert dedup.transactional
        assert dedup.check("m1") is Verdict.DELIVER
        assert dedup.succeeded_with("m1", record("m1")) is True  # type: ignore[arg-type]
        assert dedup.check("m1") is Verdict.DUPLICATE
        assert dedup.is_done("m1")
        assert dedup.stats.delivered == 1 and dedup.stats.duplicates == 1
    assert effects(path) == {"m1": 1}


def test_succeeded_with_needs_a_transactional_store() -> None:
    dedup = Deduplicator(InMemoryDedupStore())
    assert not dedup.transactional
    assert dedup.check("m1") is Verdict.DELIVER
    with pytest.raises(ConfigError, match="finish_with_effect"):
        dedup.succeeded_with("m1", lambda conn: None)


# -- the receiver ------------------------------------------------------------------------


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[None]:
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=tmp_path) as namespace:
            namespace.create_partitioned(HUB, partitions=2)
    yield


async def send(tmp_path: Path, ids: list[str]) -> None:
    for name in ("primary", "secondary"):
        async with LocalTransport(name, data_dir=tmp_path) as transport:
            await transport.send(HUB, [Message(i, message_id=i, partition_key=i) for i in ids])


def receiver(tmp_path: Path, **kw: object) -> AsyncGeoPartitionReceiver:
    kw.setdefault("dedup_store", tmp_path / "dedup.db")
    return AsyncGeoPartitionReceiver(
        primary="local://primary", secondary="local://secondary", entity=HUB,
        data_dir=tmp_path, checkpoint_store=tmp_path / "cp.db", settings=SETTINGS,
        balance=FAST, dedup_lease=1.0, **kw)  # type: ignore[arg-type]


def create_effects(path: Path) -> None:
    SqliteDedupStore(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS effects"
                     " (message_id TEXT PRIMARY KEY, count INTEGER)")
        conn.commit()


def inbox(event: PartitionEvent, conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO effects VALUES (?, 1) ON CONFLICT (message_id)"
                 " DO UPDATE SET count = count + 1", (event.message.message_id,))


async def test_transactional_receiver_writes_each_effect_once(tmp_path: Path, hubs: None) -> None:
    # Given 30 ids sent to both namespaces, and the application's table in the dedup file
    ids = [f"m{i:03d}" for i in range(30)]
    await send(tmp_path, ids)
    create_effects(tmp_path / "dedup.db")
    hooks = Recorder()
    # When a receiver runs the inbox handler until every effect is written
    async with receiver(tmp_path, hooks=hooks) as geo:
        stop = asyncio.Event()
        task = asyncio.create_task(geo.run(inbox, stop=stop, transactional=True))
        await wait_for(lambda: len(effects(tmp_path / "dedup.db")) == 30
                       and len(hooks.named("on_duplicate")) == 30)
        stop.set()
        await asyncio.wait_for(task, 10)
    # Then each id's effect was written exactly once, and every other copy suppressed
    assert effects(tmp_path / "dedup.db") == dict.fromkeys(ids, 1)


async def test_transactional_needs_a_plain_handler_and_a_transactional_store(
    tmp_path: Path, hubs: None
) -> None:
    async def coroutine(event: PartitionEvent, conn: sqlite3.Connection) -> None:
        return None

    async with receiver(tmp_path) as geo:
        with pytest.raises(ConfigError, match="plain"):
            await geo.start(coroutine, transactional=True)  # type: ignore[arg-type]
    async with receiver(tmp_path, dedup_store=InMemoryDedupStore()) as geo:
        with pytest.raises(ConfigError, match="finish_with_effect"):
            await geo.start(inbox, transactional=True)


WORKER = """
import asyncio, sys, time
from pathlib import Path
from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import BalanceSettings, ProcessorSettings

root = Path(sys.argv[1])

def slow_inbox(event, conn):
    conn.execute("INSERT INTO effects VALUES (?, 1)", (event.message.message_id,))
    (root / "in-handler").write_text(event.message.message_id)
    time.sleep(60)  # SIGKILLed here: the row above is written, not committed

async def main():
    geo = AsyncGeoPartitionReceiver(
        primary="local://primary", secondary="local://secondary", entity="inbox",
        data_dir=root, checkpoint_store=root / "cp.db", dedup_store=root / "dedup.db",
        instance_id="doomed", dedup_lease=1.0,
        settings=ProcessorSettings(poll_wait=0.05),
        balance=BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                                heartbeat_expiry=0.6, fence_margin=0.1, settle_cycles=2))
    async with geo:
        await geo.run(slow_inbox, transactional=True)

asyncio.run(main())
"""


def spawn(script: Path, root: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get(
        "PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(script), str(root)], env=env,
                            stderr=subprocess.PIPE)


async def test_a_process_killed_inside_its_inbox_handler_loses_the_effect_and_the_mark(
    tmp_path: Path, hubs: None
) -> None:
    # Given one message in both namespaces, and a receiver process whose inbox handler
    # has written its row and is sleeping inside the transaction
    await send(tmp_path, ["only"])
    dedup = tmp_path / "dedup.db"
    create_effects(dedup)
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    process = spawn(script, tmp_path)
    try:
        await wait_for(lambda: (tmp_path / "in-handler").exists()
                       or process.poll() is not None, within=20)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
    finally:
        # When it is SIGKILLed there
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        if process.stderr:
            process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    # Then neither its row nor the done mark survived
    assert effects(dedup) == {}
    check = SqliteDedupStore(dedup)
    try:
        assert check.peek("only", now=time.time()) is not Verdict.DUPLICATE
    finally:
        check.close()
    # When another receiver takes over (after the dead one's heartbeat and lease ran out)
    hooks = Recorder()
    async with receiver(tmp_path, hooks=hooks, instance_id="survivor") as geo:
        stop = asyncio.Event()
        task = asyncio.create_task(geo.run(inbox, stop=stop, transactional=True))
        await wait_for(lambda: effects(dedup) == {"only": 1}
                       and len(hooks.named("on_duplicate")) >= 1, within=20)
        stop.set()
        await asyncio.wait_for(task, 10)
    # Then the message was delivered again, exactly once (its other copy suppressed)
    assert effects(dedup) == {"only": 1}
    check = SqliteDedupStore(dedup)
    try:
        assert check.peek("only", now=time.time()) is Verdict.DUPLICATE
    finally:
        check.close()


async def test_transactional_partition_receiver_on_postgres_writes_each_effect_once(
    tmp_path: Path, hubs: None, pg: Pg
) -> None:
    # Given 30 ids sent to both namespaces, and the application's table in PostgreSQL
    ids = [f"m{i:03d}" for i in range(30)]
    await send(tmp_path, ids)
    store = PostgresDedupStore(pg.dsn, schema=pg.schema)
    table = f"{pg.schema}.effects"
    with psycopg.connect(pg.dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (message_id text NOT NULL)")

    def counts() -> dict[str, int]:
        with psycopg.connect(pg.dsn) as conn:
            return dict(conn.execute(f"SELECT message_id, count(*) FROM {table}"
                                     " GROUP BY message_id").fetchall())

    inside: set[int] = set()
    most = 0
    lock = threading.Lock()

    def pg_inbox(event: PartitionEvent, conn: psycopg.Connection[Any]) -> None:
        nonlocal most
        with lock:
            inside.add(threading.get_ident())
            most = max(most, len(inside))
        conn.execute(f"INSERT INTO {table} VALUES (%s)", (event.message.message_id,))
        time.sleep(0.02)  # long enough for the partitions' handlers to overlap
        with lock:
            inside.discard(threading.get_ident())

    hooks = Recorder()
    # When a receiver on PostgreSQL runs the inbox handler, two at a time at most
    async with receiver(tmp_path, hooks=hooks, dedup_store=store) as geo:
        stop = asyncio.Event()
        task = asyncio.create_task(geo.run(pg_inbox, stop=stop, transactional=True,
                                           concurrency=2))
        await wait_for(lambda: len(counts()) == 30
                       and len(hooks.named("on_duplicate")) == 30, within=20)
        stop.set()
        await asyncio.wait_for(task, 10)
    # Then each effect committed once, and the handlers of different partitions overlapped
    assert counts() == dict.fromkeys(ids, 1)
    assert most == 2


async def test_a_restarted_server_pauses_the_partition_inbox_without_loss_or_repeat(
    tmp_path: Path, hubs: None, pg_server_factory: Callable[[], EmbeddedPostgres]
) -> None:
    # Given a partition receiver's inbox on a server of its own, 30 ids in both namespaces
    server = pg_server_factory()
    dsn = server.dsn
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE public.effects (message_id text NOT NULL)")

    def counts() -> dict[str, int]:
        with psycopg.connect(dsn) as conn:
            return dict(conn.execute("SELECT message_id, count(*) FROM public.effects"
                                     " GROUP BY message_id").fetchall())

    def pg_inbox(event: PartitionEvent, conn: psycopg.Connection[Any]) -> None:
        conn.execute("INSERT INTO public.effects VALUES (%s)", (event.message.message_id,))
        time.sleep(0.05)

    ids = [f"m{i:03d}" for i in range(30)]
    await send(tmp_path, ids)
    hooks = Recorder()
    errors: list[BaseException] = []

    async def on_error(ctx: object, exc: BaseException) -> None:
        errors.append(exc)

    store = PostgresDedupStore(dsn, connect_timeout=2)
    async with receiver(tmp_path, hooks=hooks, dedup_store=store, on_error=on_error) as geo:
        stop = asyncio.Event()
        task = asyncio.create_task(geo.run(pg_inbox, stop=stop, transactional=True))
        try:
            await wait_for(lambda: len(counts()) >= 5, within=20)
            before = len(counts())
            # When the server restarts in the middle of the run
            await anyio.to_thread.run_sync(functools.partial(server.stop, mode="fast"))
            await wait_for(lambda: bool(hooks.named("on_store_down")), within=30)
            await anyio.to_thread.run_sync(server.start)
            # Then the receiver goes on by itself
            await wait_for(lambda: len(counts()) == 30
                           and len(hooks.named("on_duplicate")) >= 30, within=60)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    # And every effect committed once; the outage went to on_error once, and its end
    assert before < 30
    assert counts() == dict.fromkeys(ids, 1)
    assert [type(e).__name__ for e in errors] == ["StoreUnavailable"]
    assert len(hooks.named("on_store_up")) == 1
