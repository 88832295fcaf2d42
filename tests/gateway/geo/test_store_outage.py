"""A dedup store that goes away: PostgreSQL restarted under running receivers (they stop
settling, say so, and go on when it is back: nothing lost, no duplicate effect), and a
store that stays away (the receiver waits, or falls back to its local window when
told to, and says so)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
import psycopg
import pytest

from gateway import FallbackDedupStore, PostgresDedupStore
from gateway.stores import EmbeddedPostgres
from gateway.transports import ReceivedMessage
from replication import Message, StoreUnavailable, Verdict
from tests.gateway.conftest import Namespaces, ReceiverFactory, Recorder, wait_for

pytestmark = pytest.mark.anyio


async def send_to_both(ns: Namespaces, ids: list[str]) -> None:
    for name in ("primary", "secondary"):
        await ns.put(name, *(Message(i, message_id=i) for i in ids))


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT message_id, count(*) FROM public.effects"
                                 " GROUP BY message_id").fetchall())


async def stop_server(server: EmbeddedPostgres) -> None:
    await anyio.to_thread.run_sync(functools.partial(server.stop, mode="fast"))


async def test_a_restarted_server_pauses_the_inbox_and_nothing_is_lost_or_done_twice(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces,
    make_receiver: ReceiverFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a receiver running inbox handlers, four at once, on a server of its own
    server = pg_server_factory()
    dsn = server.dsn
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE public.effects (message_id text NOT NULL)")
    ids = [f"m{i:02d}" for i in range(40)]
    await send_to_both(ns, ids)
    hooks = Recorder()
    receiver = await make_receiver(
        dedup_store=PostgresDedupStore(dsn, connect_timeout=2), hooks=hooks)

    def inbox(message: ReceivedMessage, conn: psycopg.Connection[Any]) -> None:
        conn.execute("INSERT INTO public.effects VALUES (%s)", (message.message_id,))
        time.sleep(0.02)

    stop = asyncio.Event()
    caplog.set_level(logging.WARNING, logger="geogateway")
    task = asyncio.create_task(receiver.run(inbox, stop=stop, transactional=True,
                                            concurrency=4))
    try:
        await wait_for(lambda: len(counts(dsn)) >= 8, within=20)
        # When the server restarts in the middle (its open transactions roll back)
        await stop_server(server)
        await wait_for(lambda: bool(hooks.named("on_store_down")), within=30)
        completed = receiver.stats.completed
        await anyio.to_thread.run_sync(server.start)
        # Then the receiver goes on by itself until every message is handled
        await wait_for(lambda: len(counts(dsn)) == 40 and ns.count("primary") == 0
                       and ns.count("secondary") == 0, within=60)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    # And each effect committed exactly once, nothing lost
    assert counts(dsn) == dict.fromkeys(ids, 1)
    assert completed < 40  # the outage came in the middle of the run
    # And the outage was reported once, then its end, by hooks and log lines
    [down] = hooks.named("on_store_down")
    assert isinstance(down["error"], StoreUnavailable)
    assert "127.0.0.1" in down["store"] and server.dsn.split(":")[2].split("@")[0] \
        not in down["store"]
    assert len(hooks.named("on_store_up")) == 1
    lines = [r.getMessage() for r in caplog.records]
    assert any("is unavailable" in line and "nothing is settled" in line for line in lines)
    assert any(line.endswith("is back") for line in lines)


async def test_a_store_that_stays_away_is_waited_for(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces,
    make_receiver: ReceiverFactory,
) -> None:
    # Given a receiver on a server that then stops, and a message in both namespaces
    server = pg_server_factory()
    hooks = Recorder()
    receiver = await make_receiver(
        dedup_store=PostgresDedupStore(server.dsn, connect_timeout=1, call_timeout=1.5),
        hooks=hooks)
    await stop_server(server)
    await send_to_both(ns, ["m1"])
    delivered: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(lambda m: delivered.append(m.message_id),
                                            stop=stop))
    try:
        # When the store stays away, Then nothing is delivered and nothing settled
        await wait_for(lambda: bool(hooks.named("on_store_down")), within=20)
        assert delivered == [] and ns.count("primary") == ns.count("secondary") == 1
        # And once it is back, the message is delivered once and both copies settled
        await anyio.to_thread.run_sync(server.start)
        await wait_for(lambda: ns.count("primary") == ns.count("secondary") == 0, within=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert delivered == ["m1"]


async def test_the_opt_in_fallback_uses_the_local_window_and_hands_it_back(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces, tmp_path: Path,
    make_receiver: ReceiverFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a receiver whose store falls back at once to a local file, on a stopped server
    server = pg_server_factory()
    shared = PostgresDedupStore(server.dsn, connect_timeout=1)
    store = FallbackDedupStore(shared, tmp_path / "local.db", after=0, probe_every=0.1)
    hooks = Recorder()
    receiver = await make_receiver(dedup_store=store, hooks=hooks)
    await stop_server(server)
    await send_to_both(ns, ["m1", "m2"])
    delivered: list[str] = []
    caplog.set_level(logging.WARNING, logger="geogateway")
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(lambda m: delivered.append(m.message_id),
                                            stop=stop))
    try:
        # When it runs while the store is away, Then it delivers from the local window
        await wait_for(lambda: ns.count("primary") == ns.count("secondary") == 0, within=30)
        assert sorted(delivered) == ["m1", "m2"]
        assert [e["active"] for e in hooks.named("on_dedup_fallback")] == [True]
        # And when the store is back, the receiver returns to it with the local marks
        await anyio.to_thread.run_sync(server.start)
        await wait_for(lambda: len(hooks.named("on_dedup_fallback")) == 2, within=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert [e["active"] for e in hooks.named("on_dedup_fallback")] == [True, False]
    assert hooks.named("on_dedup_fallback")[0]["fallback"] == str(tmp_path / "local.db")
    check = PostgresDedupStore(server.dsn)
    try:
        assert check.peek("m1", now=time.time()) is Verdict.DUPLICATE
    finally:
        check.close()
    lines = [r.getMessage() for r in caplog.records]
    assert any("using the local window" in line and "more than once" in line
               for line in lines)
    assert any("is back: 2 done mark(s)" in line for line in lines)


async def test_run_stops_when_told_while_the_store_is_away(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces,
    make_receiver: ReceiverFactory,
) -> None:
    # Given an inbox run on a store that went away after its first claim
    server = pg_server_factory()
    hooks = Recorder()
    receiver = await make_receiver(
        dedup_store=PostgresDedupStore(server.dsn, connect_timeout=1, call_timeout=1.5),
        hooks=hooks)
    await send_to_both(ns, ["m1"])
    claimed = asyncio.Event()

    def inbox(message: ReceivedMessage, conn: Any) -> None:
        raise AssertionError("the store is away: the inbox cannot have run")

    real = receiver._dedup.succeeded_with

    def away_first(*args: Any) -> bool:
        if not claimed.is_set():
            claimed.set()
            server.stop(mode="fast")
        return real(*args)

    receiver._dedup.succeeded_with = away_first  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(inbox, stop=stop, transactional=True))
    # When run() is told to stop during the outage
    await wait_for(lambda: bool(hooks.named("on_store_down")), within=20)
    stop.set()
    # Then it returns, the message abandoned, not lost (both copies still queued)
    await asyncio.wait_for(task, 20)
    assert receiver.stats.abandoned == 1 and receiver.stats.completed == 0
    assert ns.count("primary") == ns.count("secondary") == 1


async def test_a_restart_is_one_warning_when_away_and_one_when_back(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces,
    make_receiver: ReceiverFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a receiver on a server of its own (the default timeouts), messages flowing
    server = pg_server_factory()
    hooks = Recorder()
    receiver = await make_receiver(dedup_store=PostgresDedupStore(server.dsn), hooks=hooks)
    ids = [f"m{i:02d}" for i in range(30)]
    await send_to_both(ns, ids[:10])
    delivered: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(lambda m: delivered.append(m.message_id),
                                            stop=stop))
    try:
        await wait_for(lambda: len(delivered) == 10, within=20)
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        # When the server restarts, away for 2 s, while messages keep coming
        await stop_server(server)
        await send_to_both(ns, ids[10:20])
        await wait_for(lambda: bool(hooks.named("on_store_down")), within=20)
        await asyncio.sleep(2)
        await anyio.to_thread.run_sync(server.start)
        await send_to_both(ns, ids[20:])
        # Then every message is delivered once
        await wait_for(lambda: len(delivered) == 30 and ns.count("primary") == 0
                       and ns.count("secondary") == 0, within=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert sorted(delivered) == ids
    # And the outage was two warnings, one when away and one when back: no traceback,
    # nothing from the pool
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 2, [r.getMessage() for r in loud]
    assert "is unavailable" in loud[0].getMessage()
    assert loud[1].getMessage().endswith("is back")
    assert not any(r.exc_info for r in loud)


async def test_a_frozen_server_is_reported_down_and_waited_for(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces,
    make_receiver: ReceiverFactory,
    freeze: Callable[[EmbeddedPostgres], Callable[[], None]],
) -> None:
    # Given a receiver whose store calls end within 1 s, on a server then frozen (its
    # processes stopped: connections open, nothing answers)
    server = pg_server_factory()
    hooks = Recorder()
    receiver = await make_receiver(
        dedup_store=PostgresDedupStore(server.dsn, call_timeout=1), hooks=hooks)
    thaw = freeze(server)
    await send_to_both(ns, ["m1"])
    delivered: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(lambda m: delivered.append(m.message_id),
                                            stop=stop))
    try:
        # When it runs, Then the store is reported down, and nothing is delivered
        await wait_for(lambda: bool(hooks.named("on_store_down")), within=20)
        assert delivered == [] and ns.count("primary") == ns.count("secondary") == 1
        # And once the server goes on, the message is delivered once
        thaw()
        await wait_for(lambda: ns.count("primary") == ns.count("secondary") == 0, within=30)
        assert len(hooks.named("on_store_up")) == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert delivered == ["m1"]


async def test_a_frozen_server_starts_the_declared_fallback(
    pg_server_factory: Callable[[], EmbeddedPostgres], ns: Namespaces, tmp_path: Path,
    make_receiver: ReceiverFactory,
    freeze: Callable[[EmbeddedPostgres], Callable[[], None]],
) -> None:
    # Given a receiver that falls back to a local file at once, on a frozen server
    server = pg_server_factory()
    shared = PostgresDedupStore(server.dsn, call_timeout=1)
    store = FallbackDedupStore(shared, tmp_path / "local.db", after=0, probe_every=0.2)
    hooks = Recorder()
    receiver = await make_receiver(dedup_store=store, hooks=hooks)
    freeze(server)
    await send_to_both(ns, ["m1", "m2"])
    delivered: list[str] = []
    stop = asyncio.Event()
    task = asyncio.create_task(receiver.run(lambda m: delivered.append(m.message_id),
                                            stop=stop))
    try:
        # When it runs, Then it delivers from the local window, having said so
        await wait_for(lambda: ns.count("primary") == ns.count("secondary") == 0, within=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert sorted(delivered) == ["m1", "m2"]
    assert [e["active"] for e in hooks.named("on_dedup_fallback")] == [True]
