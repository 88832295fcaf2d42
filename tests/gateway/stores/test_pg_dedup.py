"""The PostgreSQL de-duplication store and inbox, on a real server: one statement per
batch, first writer wins among many connections, exactly one effect of two racing
copies, bounded pruning, the application's pool, no password anywhere.

The window's semantics shared with SQLite are in ``test_dedup_store.py`` (run on both).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from gateway.stores import PostgresDedupStore
from replication import (
    ConfigError,
    Deduplicator,
    DedupWindow,
    GatewayError,
    StoreUnavailable,
    Verdict,
)
from tests.postgres import Pg

DELIVER, DUPLICATE, HOLD = Verdict.DELIVER, Verdict.DUPLICATE, Verdict.HOLD
WINDOW = DedupWindow(seconds=60, count=100_000)


@pytest.fixture
def store(pg: Pg) -> Iterator[PostgresDedupStore]:
    store = PostgresDedupStore(pg.dsn, schema=pg.schema, window=WINDOW)
    yield store
    store.close()


@pytest.fixture
def effects(pg: Pg, store: PostgresDedupStore) -> str:
    """The application's table, next to the store's, in the same database: a log of
    effects (no key, so that two copies' writes never wait for each other)."""
    table = f"{pg.schema}.effects"
    with psycopg.connect(pg.dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (message_id text NOT NULL)")
    return table


def rows(pg: Pg, table: str) -> dict[str, int]:
    """How many effects committed, by id."""
    with psycopg.connect(pg.dsn) as conn:
        return dict(conn.execute(f"SELECT message_id, count(*) FROM {table}"
                                 " GROUP BY message_id").fetchall())


def record(table: str, message_id: str) -> Any:
    def effect(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"INSERT INTO {table} VALUES (%s)", (message_id,))
    return effect


def round_trips(trace: Path) -> int:
    """Requests the client sent that wait for the server: extended-protocol Syncs and
    simple queries (BEGIN, COMMIT), read from a libpq trace."""
    lines = trace.read_text().splitlines()
    return sum(1 for line in lines if "\tF\t" in line
               and line.split("\t")[3].split()[0] in ("Sync", "Query"))


def test_a_batch_costs_one_round_trip(pg: Pg, tmp_path: Path) -> None:
    # Given a store on a pool of one connection, traced
    pool: ConnectionPool[Any] = ConnectionPool(pg.dsn, min_size=1, max_size=1, open=True)
    store = PostgresDedupStore(pool, schema=pg.schema, window=WINDOW)
    trace = tmp_path / "trace"
    ids = [f"m{i:03d}" for i in range(100)]
    try:
        with trace.open("w") as out:
            with pool.connection() as conn:
                conn.pgconn.trace(out.fileno())
            # When 100 ids are claimed, then marked done
            verdicts = store.claim(ids, owner="a", now=0, lease=10)
            store.finish_many(ids, owner="a", succeeded=True, now=1)
            with pool.connection() as conn:
                conn.pgconn.untrace()
        # Then each took one request to the server
        assert verdicts == [DELIVER] * 100
        assert round_trips(trace) == 2
        assert store.claim(ids, owner="b", now=2, lease=10) == [DUPLICATE] * 100
    finally:
        store.close()
        # And the application's pool is the application's to close
        assert not pool.closed
        pool.close()


def test_first_writer_wins_among_many_connections(pg: Pg) -> None:
    # Given eight stores (eight pools, as eight machines would have) and 300 ids
    stores = [PostgresDedupStore(pg.dsn, schema=pg.schema, window=WINDOW, max_connections=2)
              for _ in range(8)]
    ids = [f"id{i}" for i in range(300)]
    won: list[list[str]] = [[] for _ in stores]
    start = threading.Barrier(len(stores))

    def race(k: int) -> None:
        start.wait()
        mine = ids[k * 37 % 300:] + ids[:k * 37 % 300]  # each in its own order
        for lo in range(0, len(mine), 25):
            batch = mine[lo:lo + 25]
            verdicts = stores[k].claim(batch, owner=f"o{k}", now=0, lease=60)
            won[k].extend(m for m, v in zip(batch, verdicts, strict=True) if v is DELIVER)

    threads = [threading.Thread(target=race, args=(k,)) for k in range(len(stores))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for store in stores:
            store.close()
    # Then each id was claimed exactly once, and not all by one of them
    assert sorted(m for mine in won for m in mine) == sorted(ids)
    assert sum(1 for mine in won if mine) > 1


def test_effect_and_mark_commit_together(store: PostgresDedupStore, effects: str,
                                         pg: Pg) -> None:
    assert store.claim(["m1"], owner="a", now=0, lease=10) == [DELIVER]
    assert store.finish_with_effect("m1", owner="a", now=1, effect=record(effects, "m1"))
    assert rows(pg, effects) == {"m1": 1}
    assert store.peek("m1", now=2) is DUPLICATE
    # A copy whose id is done: the effect does not run
    assert not store.finish_with_effect("m1", owner="b", now=3, effect=record(effects, "m1"))
    assert rows(pg, effects) == {"m1": 1}


def test_an_effect_that_raises_keeps_nothing(store: PostgresDedupStore, effects: str,
                                             pg: Pg) -> None:
    store.claim(["m1"], owner="a", now=0, lease=10)

    def failing(conn: psycopg.Connection[Any]) -> None:
        record(effects, "m1")(conn)
        raise ValueError("the handler failed after writing")

    with pytest.raises(ValueError, match="after writing"):
        store.finish_with_effect("m1", owner="a", now=1, effect=failing)
    assert rows(pg, effects) == {}
    assert store.peek("m1", now=2) is HOLD  # still claimed by "a"

    def broken(conn: psycopg.Connection[Any]) -> None:
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(GatewayError, match="no_such_table"):
        store.finish_with_effect("m1", owner="a", now=1, effect=broken)
    with pytest.raises(ConfigError, match="must not commit"):
        store.finish_with_effect("m1", owner="a", now=1,
                                 effect=lambda conn: conn.execute("COMMIT"))
    assert rows(pg, effects) == {}


def test_two_racing_copies_commit_exactly_one_effect(store: PostgresDedupStore, effects: str,
                                                     pg: Pg) -> None:
    # Given two holders of "m1" (the first's lease ran out before it finished)
    assert store.claim(["m1"], owner="a", now=0, lease=1) == [DELIVER]
    assert store.claim(["m1"], owner="b", now=2, lease=10) == [DELIVER]
    both_in = threading.Barrier(2, timeout=10)
    results: dict[str, bool] = {}

    def handle(owner: str) -> None:
        def effect(conn: psycopg.Connection[Any]) -> None:
            record(effects, "m1")(conn)
            both_in.wait()  # both effects written, neither committed

        results[owner] = store.finish_with_effect("m1", owner=owner, now=3, effect=effect)

    # When both run their inbox transaction at the same moment
    threads = [threading.Thread(target=handle, args=(o,)) for o in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one committed its effect; the other's mark conflicted and rolled back
    assert sorted(results.values()) == [False, True]
    assert rows(pg, effects) == {"m1": 1}


def test_inbox_handlers_run_concurrently(store: PostgresDedupStore, effects: str,
                                         pg: Pg) -> None:
    # Given four ids claimed, and effects that only finish when all four are inside
    ids = ["m1", "m2", "m3", "m4"]
    assert store.claim(ids, owner="a", now=0, lease=10) == [DELIVER] * 4
    store.reserve(4)
    all_in = threading.Barrier(4, timeout=10)

    def handle(message_id: str) -> None:
        def effect(conn: psycopg.Connection[Any]) -> None:
            record(effects, message_id)(conn)
            all_in.wait()  # breaks (and fails the test) if the transactions ran one by one

        assert store.finish_with_effect(message_id, owner="a", now=1, effect=effect)

    threads = [threading.Thread(target=handle, args=(m,)) for m in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert rows(pg, effects) == dict.fromkeys(ids, 1)


def test_reserve_grows_its_own_pool_and_refuses_a_small_one_of_the_application(
    store: PostgresDedupStore, pg: Pg
) -> None:
    store.reserve(16)
    assert store._live().pool.max_size == 18
    pool: ConnectionPool[Any] = ConnectionPool(pg.dsn, min_size=1, max_size=4, open=True)
    theirs = PostgresDedupStore(pool, schema=pg.schema)
    try:
        theirs.reserve(2)
        with pytest.raises(ConfigError, match="max_size 4; 8 concurrent handlers need 10"):
            theirs.reserve(8)
    finally:
        theirs.close()
        pool.close()


def test_pruning_is_bounded_and_done_by_one_instance_at_a_time(
    store: PostgresDedupStore, pg: Pg
) -> None:
    # Given 50 done ids out of the window and a store that prunes 20 rows at a time
    ids = [f"m{i}" for i in range(50)]
    store.finish_many(ids, owner="a", succeeded=True, now=0)
    small = PostgresDedupStore(pg.dsn, schema=pg.schema, window=WINDOW, prune_batch=20)
    try:
        # When another instance holds the pruning lock, Then this one skips
        with psycopg.connect(pg.dsn) as other:
            other.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                          (f"geogateway:{pg.schema}.dedup:prune",))
            assert small.prune(now=100, window=WINDOW) == 0
        # And each prune removes at most its batch
        assert [small.prune(now=100, window=WINDOW) for _ in range(4)] == [20, 20, 10, 0]
    finally:
        small.close()


def test_the_password_is_never_shown(pg: Pg, store: PostgresDedupStore) -> None:
    password = pg.dsn.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert password not in repr(store) and password not in store.where
    assert "127.0.0.1" in store.where


def test_a_deduplicator_over_the_store(store: PostgresDedupStore) -> None:
    with Deduplicator(store) as dedup:
        assert dedup.transactional
        assert dedup.check_many(["a", "b", "a"]) == [DELIVER, DELIVER, HOLD]
        dedup.succeeded_many(["a", "b"])
        assert dedup.is_done("a") and dedup.is_done("b")


def test_the_rights_the_store_needs(pg: Pg) -> None:
    # Given a user that may connect to the database but not create schemas in it
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'app-pw'")
        conn.execute(f"GRANT CONNECT ON DATABASE geogateway TO {role}")
    app = pg.dsn.replace(pg.dsn.split("://", 1)[1].split("@", 1)[0], f"{role}:app-pw")
    # Then it cannot create the tables: one line naming the database and what to do
    with pytest.raises(ConfigError, match="permission denied for database") as caught:
        PostgresDedupStore(app, schema=pg.schema)
    assert "app-pw" not in str(caught.value)
    # When the owner migrates the schema once and grants it the tables' rows
    PostgresDedupStore(pg.dsn, schema=pg.schema).close()
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA {pg.schema} TO {role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
                     f"{pg.schema} TO {role}")
        # Or creates a schema it owns
        conn.execute(f"CREATE SCHEMA {pg.schema}_own AUTHORIZATION {role}")
    # Then the user runs the store in either
    for schema in (pg.schema, f"{pg.schema}_own"):
        store = PostgresDedupStore(app, schema=schema)
        try:
            assert store.claim(["m1"], owner="a", now=0, lease=10) == [DELIVER]
        finally:
            store.close()


def test_a_claim_whose_answer_was_lost_is_taken_again_by_its_receiver(
        store: PostgresDedupStore) -> None:
    # Given a receiver whose claim of m1 committed but whose answer was lost (the
    # connection broke on the way back), so the receiver has no record of it
    lost = True
    real = store.claim

    def claim_then_break(ids: Any, **kwargs: Any) -> list[Verdict]:
        nonlocal lost
        verdicts = real(ids, **kwargs)
        if lost:
            lost = False
            raise StoreUnavailable("the connection broke after the commit")
        return verdicts

    store.claim = claim_then_break  # type: ignore[method-assign]
    dedup = Deduplicator(store, lease=60)
    with pytest.raises(StoreUnavailable):
        dedup.check_many(["m1"])
    # When it asks again for the same copy, Then it is delivered now, not after the lease
    assert dedup.check_many(["m1"]) == [DELIVER]
    # And another receiver is still held by that claim
    assert Deduplicator(store, lease=60).check_many(["m1"]) == [HOLD]
