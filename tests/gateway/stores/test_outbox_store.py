"""The outbox stores on a real SQLite file and a real PostgreSQL server: rows exist only
once the application's transaction commits, in order per destination, each claimed by
one dispatcher at a time, deleted only when finished."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import psycopg
import pytest

from gateway.stores import DeadRow, PostgresOutbox, SqliteOutbox
from replication import ConfigError, Message
from tests.conftest import FakeClock
from tests.gateway.conftest import wait_for_sync
from tests.gateway.stores.outbox_support import App
from tests.postgres import Pg

PROJECT = Path(__file__).resolve().parents[3]


def ids(claim) -> list[str]:
    return [row.message.message_id for row in claim.rows]


def test_only_committed_rows_exist_in_the_order_they_were_added(outbox_app: App):
    # Given three committed orders, and one whose transaction fails after its add
    for i in range(3):
        outbox_app.order(f"o{i}", Message(f"order {i}", message_id=f"m{i}"))
    with pytest.raises(RuntimeError), outbox_app.transaction() as conn:
        outbox_app.outbox.add(conn, Message("never", message_id="rolled"), entity="orders")
        raise RuntimeError("the application changes its mind")
    # When a dispatcher claims the destination
    store = outbox_app.outbox
    claim = store.claim("orders", 10, owner="test")
    # Then it reads the committed rows, oldest first, and nothing of the rolled-back one
    assert claim is not None and ids(claim) == ["m0", "m1", "m2"]
    assert [r.seq for r in claim.rows] == sorted(r.seq for r in claim.rows)
    store.release(claim)
    assert store.stats().waiting == 3 and store.destinations() == ["orders"]


def test_the_message_id_is_fixed_when_added_and_the_message_kept_whole(outbox_app: App):
    # Given a message with properties and a key, and a bare body
    given = Message(b"\x00body", message_id="given-id", partition_key="k1",
                    properties={"n": 3, "s": "x", "f": 1.5, "b": True, "none": None})
    with outbox_app.transaction() as conn:
        first = outbox_app.outbox.add(conn, given, entity="orders")
        second = outbox_app.outbox.add(conn, "just a body", entity="orders")
    # Then the given id is kept, one is generated for the other, and the rows read back equal
    claim = outbox_app.outbox.claim("orders", 10, owner="test")
    assert first == "given-id" and len(second) == 32 and ids(claim) == [first, second]
    assert claim.rows[0].message == given and claim.rows[0].message.properties == given.properties
    assert claim.rows[1].message.body == b"just a body"
    outbox_app.outbox.release(claim)


def test_a_session_message_keeps_its_session_id(outbox_app: App):
    # Given messages of a session, one with properties, added to the outbox
    plain = Message(b"first", message_id="s1", session_id="order-7")
    stamped = Message(b"second", message_id="s2", session_id="order-7", properties={"n": 1})
    with outbox_app.transaction() as conn:
        outbox_app.outbox.add_many(conn, [plain, stamped], entity="orders")
    # When a dispatcher reads them back
    claim = outbox_app.outbox.claim("orders", 10, owner="test")
    # Then each is whole, its session id included (else a session queue refuses it), and
    # the session id is not one of its application properties
    assert [row.message for row in claim.rows] == [plain, stamped]
    assert [row.message.session_id for row in claim.rows] == ["order-7", "order-7"]
    assert dict(claim.rows[1].message.properties) == {"n": 1}
    outbox_app.outbox.release(claim)


def test_rows_are_rebuilt_without_checking_again_while_message_keeps_its_shape():
    # The dispatcher's per-row cost: a field added to Message must be added to the
    # outbox's rows too, or they fall back to the checking constructor (and lose it).
    from gateway.stores import _outbox_core

    assert _outbox_core._FAST


def test_a_claimed_destination_is_not_claimed_by_another_dispatcher(outbox_app: App):
    # Given rows for two destinations, and a second dispatcher's store on the same tables
    outbox_app.order("a", "for a", entity="dest-a")
    outbox_app.order("b", "for b", entity="dest-b")
    other = outbox_app.new_outbox()
    # When the first claims dest-a
    claim = outbox_app.outbox.claim("dest-a", 10, owner="first")
    # Then the second cannot take dest-a, only dest-b; once released, dest-a is free
    assert other.claim("dest-a", 10, owner="second") is None
    theirs = other.claim("dest-b", 10, owner="second")
    assert theirs is not None and ids(theirs) == [theirs.rows[0].message.message_id]
    outbox_app.outbox.release(claim)
    again = other.claim("dest-a", 10, owner="second")
    assert again is not None and len(again.rows) == 1
    other.release(again)
    other.release(theirs)


def test_finish_deletes_the_rows_sent_and_moves_dead_ones_aside(outbox_app: App):
    # Given four rows
    for i in range(4):
        outbox_app.order(f"o{i}", Message("x", message_id=f"m{i}"))
    store = outbox_app.outbox
    claim = store.claim("orders", 10, owner="test")
    # When the first was sent, the second was refused for good, the rest not sent
    store.finish(claim, 1, [DeadRow(claim.rows[1].seq, "too large")])
    # Then the next claim starts at the third, and one row is dead
    after = store.claim("orders", 10, owner="test")
    assert ids(after) == ["m2", "m3"]
    store.finish(after, 2)
    stats = store.stats()
    assert stats.waiting == 0 and stats.dead == 1 and store.destinations() == []
    assert store.claim("orders", 10, owner="test") is None


def test_a_claim_reads_at_most_its_limit_of_rows(outbox_app: App):
    with outbox_app.transaction() as conn:
        outbox_app.outbox.add_many(conn, [Message("x", message_id=f"m{i}") for i in range(5)],
                                   entity="orders")
    claim = outbox_app.outbox.claim("orders", 2, owner="test")
    assert ids(claim) == ["m0", "m1"]
    outbox_app.outbox.finish(claim, 2)
    assert outbox_app.outbox.stats().destinations["orders"].waiting == 3


def test_a_row_needs_a_destination_and_the_outbox_database(outbox_app: App, tmp_path: Path,
                                                           pg: Pg):
    # Given an outbox without a default destination
    with pytest.raises(ConfigError, match="destination"), outbox_app.transaction() as conn:
        outbox_app.outbox.add(conn, "where to?")
    # And a connection to a database that has no outbox table
    if outbox_app.kind == "sqlite":
        elsewhere = sqlite3.connect(tmp_path / "other.db")
    else:
        elsewhere = psycopg.connect(pg.dsn.rsplit("/", 1)[0] + "/postgres")
    with elsewhere, pytest.raises(ConfigError, match=r"no .*outbox"):
        outbox_app.outbox.add(elsewhere, "lost?", entity="orders")
    elsewhere.close()


def test_a_waiting_dispatcher_wakes_on_a_commit_not_on_a_rollback(outbox_app: App):
    store = outbox_app.outbox
    store.destinations()  # the dispatcher's last look

    async def main() -> tuple[bool, bool]:
        # When another connection rolls an add back, the wait times out
        def rolled_back() -> None:
            with pytest.raises(RuntimeError), outbox_app.transaction() as conn:
                outbox_app.outbox.add(conn, "no", entity="orders")
                raise RuntimeError
        await anyio.to_thread.run_sync(rolled_back)
        quiet = await store.wait(0.3)
        # And a commit wakes it
        timer = threading.Timer(0.1, outbox_app.order, ("o1", "yes"))
        timer.start()
        woken = await store.wait(10.0)
        timer.join()
        return quiet, woken

    quiet, woken = anyio.run(main)
    assert quiet is False and woken is True


def test_the_sqlite_outbox_lives_in_the_applications_file_mode_0600(tmp_path: Path):
    # Given the application's existing file with its own table, readable by others
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    os.chmod(path, 0o644)
    # When the outbox opens it
    SqliteOutbox(path).close()
    # Then its tables sit beside the application's, and the file is the owner's only
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"customers", "geogateway_outbox", "geogateway_outbox_leases"} <= names
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # And a new file is created 0600 too; a file that is not a database is refused
    SqliteOutbox(tmp_path / "new.db").close()
    assert stat.S_IMODE(os.stat(tmp_path / "new.db").st_mode) == 0o600
    (tmp_path / "text.db").write_text("not a database at all" * 100)
    with pytest.raises(ConfigError, match=r"text\.db"):
        SqliteOutbox(tmp_path / "text.db")


def test_a_sqlite_lease_expires_so_a_dead_dispatchers_destination_is_taken_over(
        tmp_path: Path, clock: FakeClock):
    # Given a row claimed by a dispatcher that then vanished (its lease never given back)
    app = App("sqlite", path=tmp_path / "app.db", lease=5.0, clock=clock)
    try:
        app.order("o1", Message("x", message_id="m1"))
        assert app.outbox.claim("orders", 10, owner="vanished") is not None
        other = app.new_outbox()
        # Then another cannot take it while the lease runs, and takes it after
        assert other.claim("orders", 10, owner="next") is None
        clock.advance(5.1)
        claim = other.claim("orders", 10, owner="next")
        assert claim is not None and ids(claim) == ["m1"]
        other.finish(claim, 1)
    finally:
        app.close()


def test_postgres_deletes_what_it_sent_not_rows_committed_meanwhile(pg: Pg):
    # Given a transaction that added a row (an earlier seq) and has not committed yet
    app = App("postgres", pg=pg)
    try:
        slow = app.connect()
        slow_tx = slow.transaction()
        slow_tx.__enter__()
        app.outbox.add(slow, Message("slow", message_id="slow"), entity="orders")
        app.order("o1", Message("fast", message_id="fast"))
        # When a dispatcher sends what it sees and finishes
        claim = app.outbox.claim("orders", 10, owner="test")
        assert ids(claim) == ["fast"]
        slow_tx.__exit__(None, None, None)  # commits the earlier row meanwhile
        app.outbox.finish(claim, 1)
        # Then the row committed late is still there, and sent next
        after = app.outbox.claim("orders", 10, owner="test")
        assert ids(after) == ["slow"]
        app.outbox.release(after)
    finally:
        app.close()


def test_postgres_adds_in_an_async_transaction(pg: Pg):
    outbox = PostgresOutbox(pg.dsn, schema=pg.schema, entity="orders")

    async def main() -> list[str]:
        async with await psycopg.AsyncConnection.connect(pg.dsn) as conn:
            async with conn.transaction():
                first = await outbox.add(conn, Message("a", message_id="a1"))
                more = await outbox.add_many(conn, ["b", "c"])
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await outbox.add(conn, "rolled back")
                    raise RuntimeError
        return [first, *more]

    try:
        added = anyio.run(main)
        claim = outbox.claim("orders", 10, owner="test")
        assert ids(claim) == added and added[0] == "a1"
        outbox.release(claim)
    finally:
        outbox.close()


_HOLDER = textwrap.dedent("""
    import os, sys, time
    from gateway.stores import PostgresOutbox, SqliteOutbox
    target, schema = os.environ["OUTBOX"], os.environ.get("SCHEMA")
    store = PostgresOutbox(target, schema=schema) if schema else SqliteOutbox(target, lease=1.0)
    claim = store.claim("orders", 10, owner="doomed")
    print("claimed" if claim else "nothing", flush=True)
    time.sleep(60)
""")


def test_a_killed_dispatchers_claim_ends_and_its_rows_are_claimed_again(outbox_app: App):
    # Given a row claimed by a dispatcher process (sent, say, but not yet deleted)
    outbox_app.order("o1", Message("x", message_id="m1"))
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "OUTBOX": outbox_app.target}
    if outbox_app.kind == "postgres":
        env["SCHEMA"] = outbox_app.pg.schema
    with subprocess.Popen([sys.executable, "-c", _HOLDER], env=env, stdout=subprocess.PIPE,
                          text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
            assert outbox_app.outbox.claim("orders", 10, owner="next") is None
        finally:
            # When it is SIGKILLed
            holder.kill()
    # Then the rows are claimed again, whole: PostgreSQL at once (the server ends the
    # dead session's transaction), SQLite once the lease (1 s here) ran out
    claims = []
    wait_for_sync(lambda: claims.append(outbox_app.outbox.claim("orders", 10, owner="next"))
                  or claims[-1] is not None)
    assert ids(claims[-1]) == ["m1"]
    outbox_app.outbox.finish(claims[-1], 1)


def test_a_postgres_claim_gives_the_applications_pool_its_connection_back_clean(pg: Pg):
    # Given the application's own pool of one connection, shared with the outbox
    from psycopg_pool import ConnectionPool

    with ConnectionPool(pg.dsn, min_size=1, max_size=1, open=True) as pool:
        outbox = PostgresOutbox(pool, schema=pg.schema, entity="orders")
        with pool.connection() as conn:
            outbox.add_many(conn, [Message("x", message_id=f"m{i}") for i in range(3)])
        # When a claim goes through batches and ends, and another is released
        claim = outbox.claim("orders", 2, owner="test")
        ahead = outbox.read_ahead(claim, 2)
        outbox.finish(claim, 2, keep=True)
        outbox.finish(ahead, 1)
        # Then the connection is back with no lock held and the session's own settings
        with pool.connection() as conn:
            locks = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                 " AND pid = pg_backend_pid()").fetchone()
            setting = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert locks == (0,) and setting == ("0",)
        assert outbox.stats().waiting == 0
        outbox.close()
