"""The outbox dispatcher over real local namespaces and real outboxes (SQLite file,
PostgreSQL): committed rows sent in order and deleted once sent, a failed send keeps its
rows, a crash between send and delete sends them again (same MessageIds), dispatchers
sharing an outbox never send a row twice nor reorder a destination."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from durable_queue import DurableQueue
from gateway import GeoSender, OutboxDispatcher
from gateway.aio import AsyncOutboxDispatcher
from gateway.stores import PostgresOutbox
from gateway.transports import FaultyTransport
from replication import ConfigError, Message
from tests.gateway.conftest import ENTITY, Namespaces, SenderFactory, wait_for, wait_for_sync
from tests.gateway.stores.outbox_support import App
from tests.postgres import Pg

pytestmark = pytest.mark.anyio


def add_orders(app: App, ids: list[str], entity: str = ENTITY) -> None:
    for i in ids:
        app.order(i, Message(f"body of {i}", message_id=i), entity=entity)


async def test_committed_rows_are_sent_in_order_and_deleted(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    # Given committed orders and one rolled back
    add_orders(outbox_app, [f"m{i}" for i in range(7)])
    with pytest.raises(RuntimeError), outbox_app.transaction() as conn:
        outbox_app.outbox.add(conn, Message("no", message_id="rolled"), entity=ENTITY)
        raise RuntimeError
    # When a dispatcher sends batches of 3 (full batches go on in the same round)
    async with AsyncOutboxDispatcher(outbox_app.outbox, make_sender(), batch_size=3) as d:
        rounds = [await d.dispatch_once() for _ in range(2)]
    # Then every committed row went out, once, in order, and the outbox is empty
    assert rounds == [7, 0]
    assert await ns.drain_ids("primary") == [f"m{i}" for i in range(7)]
    assert outbox_app.outbox.stats().waiting == 0
    assert d.stats.sent == 7 and d.stats.batches == 3


async def test_a_round_gives_each_destination_ten_batches_at_most(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    # Given a long backlog for one destination and one row for another
    for namespace in (ns.primary, ns.secondary):
        namespace.create_queue("other")
    with outbox_app.transaction() as conn:
        outbox_app.outbox.add_many(conn, [Message("x", message_id=f"m{i:03d}")
                                          for i in range(25)], entity=ENTITY)
    outbox_app.order("o", Message("y", message_id="other-1"), entity="other")
    async with AsyncOutboxDispatcher(
            outbox_app.outbox, [make_sender(), make_sender(entity="other")], batch_size=2,
            concurrency=1) as dispatcher:
        # Then the first round sends 10 batches of the backlog and the other's row
        assert await dispatcher.dispatch_once() == 21
        assert await dispatcher.dispatch_once() == 5
    assert await ns.drain_ids("primary") == [f"m{i:03d}" for i in range(25)]
    assert await ns.drain_ids("primary", "other") == ["other-1"]


async def test_a_factory_makes_one_sender_per_destination_and_closes_them(
        outbox_app: App, ns: Namespaces, data_dir: Path, state_dir: Path):
    for name in (ns.primary, ns.secondary):
        name.create_queue("payments")
    add_orders(outbox_app, ["o1", "o2"], entity=ENTITY)
    add_orders(outbox_app, ["p1"], entity="payments")
    made: list[Any] = []

    def factory(entity: str) -> Any:
        from gateway.aio import AsyncGeoSender

        made.append(AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                                   entity=entity, data_dir=data_dir, state_dir=state_dir))
        return made[-1]

    dispatcher = AsyncOutboxDispatcher(outbox_app.outbox, factory)
    assert await dispatcher.dispatch_once() == 3
    await dispatcher.aclose()
    assert sorted(s.entity for s in made) == [ENTITY, "payments"]
    assert all(s._closed for s in made)
    assert await ns.drain_ids("primary") == ["o1", "o2"]
    assert await ns.drain_ids("primary", "payments") == ["p1"]


async def test_only_the_senders_destinations_are_dispatched(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    add_orders(outbox_app, ["o1"], entity=ENTITY)
    add_orders(outbox_app, ["x1"], entity="elsewhere")
    async with AsyncOutboxDispatcher(outbox_app.outbox, [make_sender()]) as dispatcher:
        assert await dispatcher.dispatch_once() == 1
    assert outbox_app.outbox.stats().destinations.keys() == {"elsewhere"}


async def test_a_failed_send_keeps_its_rows_for_later_in_order(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces,
        primary: FaultyTransport, secondary: FaultyTransport):
    # Given both namespaces down and no durable queue
    add_orders(outbox_app, ["m1", "m2"])
    primary.go_down()
    secondary.go_down()
    errors: list[tuple[str, BaseException]] = []
    sender = make_sender()
    dispatcher = AsyncOutboxDispatcher(outbox_app.outbox, sender, retry_interval=0.05,
                                       on_error=lambda e, exc: errors.append((e, exc)))
    # When a round fails, then the namespaces come back and more rows were added
    assert await dispatcher.dispatch_once() == 0
    assert errors and errors[0][0] == ENTITY and outbox_app.outbox.stats().waiting == 2
    primary.come_up()
    secondary.come_up()
    await sender.replay()  # its probe finds them up (the background task is off here)
    add_orders(outbox_app, ["m3"])
    await anyio.sleep(0.06)  # the destination's back-off
    # Then the next round sends all of them, in the order they were added
    assert await dispatcher.dispatch_once() == 3
    assert await ns.drain_ids("primary") == ["m1", "m2", "m3"]
    assert dispatcher.stats.send_errors == 1


class _FailsOnce:
    """A sender whose ``fail_on``-th ``send_batch`` fails (before sending anything)."""

    def __init__(self, sender: Any, fail_on: int) -> None:
        self._sender, self._fail_on, self.calls = sender, fail_on, 0
        self.entity = sender.entity

    async def send_batch(self, messages: Any) -> Any:
        self.calls += 1
        if self.calls == self._fail_on:
            raise ConnectionError("the link dropped")
        return await self._sender.send_batch(messages)


async def test_a_failure_within_a_read_deletes_the_batches_sent_before_it(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    # Given 7 rows, read several batches at a time, and a sender whose 2nd send fails
    add_orders(outbox_app, [f"m{i}" for i in range(7)])
    errors: list[str] = []
    sender = _FailsOnce(make_sender(), fail_on=2)
    dispatcher = AsyncOutboxDispatcher(outbox_app.outbox, sender, batch_size=2,
                                       retry_interval=0.5,
                                       on_error=lambda e, exc: errors.append(e))
    # When a round sends the first batch and fails on the second
    assert await dispatcher.dispatch_once() == 2
    # Then the first batch is deleted, the rest waits, and the destination backs off
    assert outbox_app.outbox.stats().waiting == 5 and errors == [ENTITY]
    assert dispatcher.stats.send_errors == 1 and dispatcher.stats.batches == 1
    assert await dispatcher.dispatch_once() == 0  # backing off (0.5 s): not tried
    await anyio.sleep(0.55)
    assert await dispatcher.dispatch_once() == 5
    assert await ns.drain_ids("primary") == [f"m{i}" for i in range(7)]
    assert dispatcher.stats.batches == 4


async def test_a_message_refused_after_a_batch_of_the_same_read_keeps_that_batch_sent(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    for namespace in (ns.primary, ns.secondary):
        namespace.create_queue("small", max_message_size=200)
    for i, (mid, body) in enumerate([("ok1", "ok"), ("huge", "x" * 500), ("ok2", "ok")]):
        outbox_app.order(str(i), Message(body, message_id=mid), entity="small")
    # When batches of one row are read together and the second is refused for good
    async with AsyncOutboxDispatcher(outbox_app.outbox, make_sender(entity="small"),
                                     batch_size=1) as d:
        sent = [await d.dispatch_once(), await d.dispatch_once()]
    # Then the first is sent and deleted, the refused one moved aside, the last sent next
    assert sent == [1, 1] and d.stats.dead == 1
    assert await ns.drain_ids("primary", "small") == ["ok1", "ok2"]
    stats = outbox_app.outbox.stats()
    assert stats.waiting == 0 and stats.dead == 1


async def test_rows_buffered_by_the_sender_count_as_sent(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces, tmp_path: Path,
        primary: FaultyTransport, secondary: FaultyTransport):
    # Given both namespaces down and a durable queue
    add_orders(outbox_app, ["m1", "m2"])
    primary.go_down()
    secondary.go_down()
    queue = DurableQueue(tmp_path / "buffer.db")
    sender = make_sender(durable_queue=queue)
    # When the dispatcher sends: the sender returns once the rows are on disk
    async with AsyncOutboxDispatcher(outbox_app.outbox, sender) as dispatcher:
        assert await dispatcher.dispatch_once() == 2
    # Then the outbox is empty, and the replay delivers them in order
    assert outbox_app.outbox.stats().waiting == 0
    primary.come_up()
    secondary.come_up()
    await sender.replay()
    assert await ns.drain_ids("primary") == ["m1", "m2"]
    queue.close()


async def test_a_message_refused_for_good_is_moved_aside_and_the_rest_go_on(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    for namespace in (ns.primary, ns.secondary):
        namespace.create_queue("small", max_message_size=200)
    outbox_app.order("a", Message("ok", message_id="ok1"), entity="small")
    outbox_app.order("b", Message("x" * 500, message_id="huge"), entity="small")
    outbox_app.order("c", Message("ok", message_id="ok2"), entity="small")
    async with AsyncOutboxDispatcher(outbox_app.outbox, make_sender(entity="small")) as d:
        sent = [await d.dispatch_once(), await d.dispatch_once()]
    # (the sender refuses the batch before sending any of it: the first round moves the
    # large one aside, the next sends the others)
    assert sent == [0, 2] and d.stats.dead == 1
    assert await ns.drain_ids("primary", "small") == ["ok1", "ok2"]
    stats = outbox_app.outbox.stats()
    assert stats.waiting == 0 and stats.dead == 1


async def test_rows_sent_but_not_deleted_are_sent_again_and_received_once(
        pg: Pg, make_sender: SenderFactory, ns: Namespaces, make_receiver: Any):
    # Given a PostgreSQL outbox whose claim's connection dies right after the send
    app = App("postgres", pg=pg)
    add_orders(app, ["m1", "m2"])

    class CutAfterSend(PostgresOutbox):
        cut = 1

        def finish(self, claim: Any, sent: int, dead: Any = (), *, keep: bool = False) -> None:
            if self.cut:
                self.cut -= 1
                with psycopg.connect(pg.dsn, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)",
                                  (claim.handle.conn.info.backend_pid,))
            super().finish(claim, sent, dead, keep=keep)

    outbox = CutAfterSend(pg.dsn, schema=pg.schema)
    try:
        async with AsyncOutboxDispatcher(outbox, make_sender(), retry_interval=0.01) as d:
            assert await d.dispatch_once() == 0  # sent, but the delete was lost
            await anyio.sleep(0.02)
            assert await d.dispatch_once() == 2
        assert d.stats.store_errors == 1
        # Then the namespace got both twice, with the same ids; the receiver delivers once
        receiver = await make_receiver()
        got: list[str] = []
        await wait_for_messages(receiver, got, 2)
        assert sorted(got) == ["m1", "m2"] and receiver.stats.duplicates_suppressed == 2
    finally:
        outbox.close()
        app.close()


async def wait_for_messages(receiver: Any, got: list[str], count: int) -> None:
    stop = anyio.Event()

    async def handle(message: Any) -> None:
        got.append(message.message_id)

    async def until_done() -> None:
        await wait_for(lambda: len(got) >= count and receiver.stats.duplicates_suppressed >= 2)
        stop.set()

    async with anyio.create_task_group() as group:
        group.start_soon(until_done)
        await receiver.run(handle, stop=stop)


async def test_dispatchers_sharing_an_outbox_send_each_row_once_in_order(
        outbox_app: App, make_sender: SenderFactory, ns: Namespaces):
    # Given rows for two destinations, still being added while three dispatchers run
    for namespace in (ns.primary, ns.secondary):
        namespace.create_queue("second")
    stop = anyio.Event()
    dispatchers = [AsyncOutboxDispatcher(outbox_app.new_outbox(),
                                         [make_sender(), make_sender(entity="second")],
                                         batch_size=5, concurrency=2, poll_interval=0.05)
                   for _ in range(3)]
    expected = {ENTITY: [f"a{i:03d}" for i in range(60)],
                "second": [f"b{i:03d}" for i in range(60)]}

    def application() -> None:
        conn = outbox_app.connect()
        for a, b in zip(expected[ENTITY], expected["second"], strict=True):
            outbox_app.order(a, Message(a, message_id=a), entity=ENTITY, conn=conn)
            outbox_app.order(b, Message(b, message_id=b), entity="second", conn=conn)

    async with anyio.create_task_group() as group:
        for dispatcher in dispatchers:
            group.start_soon(lambda d=dispatcher: d.run(stop=stop))
        await anyio.to_thread.run_sync(application)
        await wait_for(lambda: sum(d.stats.sent for d in dispatchers) >= 120, within=30)
        stop.set()
    # Then each destination got every row once, in the order added
    assert await ns.drain_ids("primary") == expected[ENTITY]
    assert await ns.drain_ids("primary", "second") == expected["second"]
    assert sum(d.stats.sent for d in dispatchers) == 120


def test_the_sync_dispatcher_sends_through_a_geo_sender(
        outbox_app: App, ns: Namespaces, data_dir: Path, state_dir: Path):
    add_orders(outbox_app, ["m1", "m2", "m3"])
    with GeoSender(primary="local://primary", secondary="local://secondary", entity=ENTITY,
                   data_dir=data_dir, state_dir=state_dir) as sender, \
            OutboxDispatcher(outbox_app.outbox, sender, poll_interval=0.05) as dispatcher:
        stop = threading.Event()
        runner = threading.Thread(target=dispatcher.run, kwargs={"stop": stop})
        runner.start()
        try:
            add_orders(outbox_app, ["m4"])  # added while it runs: it wakes for it
            wait_for_sync(lambda: dispatcher.stats.sent == 4)
        finally:
            stop.set()
            runner.join(timeout=10)
        assert dispatcher.stats.sent == 4 and not runner.is_alive()
    assert anyio.run(ns.drain_ids, "primary") == ["m1", "m2", "m3", "m4"]


def test_bad_dispatcher_options_are_refused(outbox_app: App, data_dir: Path, state_dir: Path):
    with pytest.raises(ConfigError, match="batch_size"):
        AsyncOutboxDispatcher(outbox_app.outbox, lambda e: None, batch_size=0)
    with pytest.raises(ConfigError, match="sender"):
        AsyncOutboxDispatcher(outbox_app.outbox, [])
    with GeoSender(primary="local://primary", secondary="local://secondary", entity=ENTITY,
                   data_dir=data_dir, state_dir=state_dir) as sync_sender, \
            pytest.raises(ConfigError, match="use OutboxDispatcher"):
        AsyncOutboxDispatcher(outbox_app.outbox, sync_sender)  # type: ignore[arg-type]


async def test_a_postgres_restart_is_reported_and_waited_out(
        pg_server_factory: Any, make_sender: SenderFactory, ns: Namespaces):
    # Given a dispatcher running on a server of this test's own, through the
    # application's pool (which waits 2 s for a connection, not 10)
    from psycopg_pool import ConnectionPool

    server = pg_server_factory()
    app = App("postgres", pg=Pg(server, server.dsn, "restart"))
    pool = ConnectionPool(server.dsn, min_size=1, max_size=4, timeout=2.0, open=True)
    outbox = PostgresOutbox(pool, schema="restart")
    app.opened[:0] = [pool, outbox]  # closed last
    errors: list[tuple[str, BaseException]] = []
    dispatcher = AsyncOutboxDispatcher(outbox, make_sender(), retry_interval=0.05,
                                       on_error=lambda e, exc: errors.append((e, exc)))
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: dispatcher.run(stop=stop))
            add_orders(app, ["m1"])
            await wait_for(lambda: dispatcher.stats.sent == 1)
            # When the server stops, and comes back
            await anyio.to_thread.run_sync(lambda: server.stop(mode="fast"))
            await wait_for(lambda: bool(errors), within=20)
            await anyio.to_thread.run_sync(server.start)
            app.order("o2", Message("after", message_id="m2"), conn=app.connect())
            # Then the dispatcher goes on with the rows added after
            await wait_for(lambda: dispatcher.stats.sent == 2, within=20)
            stop.set()
    finally:
        app.close()
    # And the outage was reported in one line naming the server, never its password
    message = str(errors[0][1])
    password = server.dsn.split(":")[2].split("@")[0]
    assert "127.0.0.1" in message and password not in message and "\n" not in message
    assert await ns.drain_ids("primary") == ["m1", "m2"]
