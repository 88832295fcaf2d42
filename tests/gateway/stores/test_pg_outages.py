"""A PostgreSQL store whose server restarts, freezes or holds a lock: a call waiting
through a restart is served once the server is back, and a call to a server that does
not answer gives up within the store's deadline as ``StoreUnavailable``.

Real servers, really restarted (``pg_ctl stop``/``start``) and frozen (SIGSTOP of
every process of the server); how fast the store is back is measured in
``benchmarks/bench_pg_restart.py``, not asserted here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from gateway.stores import EmbeddedPostgres, PostgresDedupStore
from replication import StoreUnavailable, Verdict
from tests.postgres import Pg


@pytest.fixture
def server(pg_server_factory: Callable[[], EmbeddedPostgres]) -> EmbeddedPostgres:
    return pg_server_factory()


@pytest.fixture
def store(server: EmbeddedPostgres) -> Iterator[PostgresDedupStore]:
    store = PostgresDedupStore(server.dsn, call_timeout=1.0)
    yield store
    store.close()


def in_thread(call: Callable[[], object], within: float) -> tuple[object, float]:
    """``call()`` in a thread: what it returned or raised, and how long it took; fails
    the test when it has not returned ``within`` seconds (it would hang forever)."""
    result: list[object] = []

    def run() -> None:
        began = time.monotonic()
        try:
            outcome: object = call()
        except Exception as exc:
            outcome = exc
        result.append((outcome, time.monotonic() - began))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert result, f"the store call did not return within {within} s"
    outcome, took = result[0]  # type: ignore[misc]
    return outcome, took


def test_a_call_waiting_through_a_restart_is_served_once_the_server_is_back(
        server: EmbeddedPostgres) -> None:
    # Given a store with the default timeouts, and a caller calling it in a loop
    store = PostgresDedupStore(server.dsn)
    answered: list[float] = []
    stop = threading.Event()

    def caller() -> None:
        while not stop.is_set():
            try:
                store.ping()
            except StoreUnavailable:
                time.sleep(0.05)
                continue
            answered.append(time.monotonic())
            time.sleep(0.02)

    thread = threading.Thread(target=caller, daemon=True)
    thread.start()
    try:
        # When the server restarts, away for 1.5 s
        server.stop(mode="fast")
        time.sleep(1.5)
        server.start()
        back = time.monotonic()
        # Then the caller is served soon after it is back, not after a connect timeout
        deadline = back + 10
        while not any(t > back for t in answered) and time.monotonic() < deadline:
            time.sleep(0.02)
        first = min(t for t in answered if t > back) - back
        assert first < 3.0, f"first answer {first:.2f} s after the server was back"
    finally:
        stop.set()
        thread.join(15)
        store.close()


def test_a_frozen_server_is_given_up_within_the_call_deadline(
        server: EmbeddedPostgres, store: PostgresDedupStore,
        freeze: Callable[[EmbeddedPostgres], Callable[[], None]]) -> None:
    # Given a store with a 1 s deadline per call, used once (a pooled connection)
    store.ping()
    # When every process of the server is stopped (there, but not answering)
    thaw = freeze(server)
    # Then a claim gives up in about its deadline: StoreUnavailable, naming the server
    outcome, took = in_thread(
        lambda: store.claim(["m1"], owner="a", now=time.time(), lease=60), within=10)
    assert isinstance(outcome, StoreUnavailable), outcome
    assert took < 4.0
    assert "127.0.0.1" in str(outcome)
    assert server.dsn.split(":")[2].split("@")[0] not in str(outcome)
    # And so does a call that needs a new connection
    outcome, took = in_thread(store.ping, within=10)
    assert isinstance(outcome, StoreUnavailable), outcome
    # And once the server goes on, the store answers again
    thaw()
    outcome, _ = in_thread(
        lambda: store.claim(["m2"], owner="a", now=time.time(), lease=60), within=10)
    assert outcome == [Verdict.DELIVER]


def test_a_row_locked_by_another_transaction_is_given_up_within_the_deadline(
        pg: Pg) -> None:
    # Given a store with a 1 s deadline, and an id whose row another transaction locks
    store = PostgresDedupStore(pg.dsn, schema=pg.schema, call_timeout=1.0)
    try:
        store.claim(["m1"], owner="a", now=0, lease=10)
        with psycopg.connect(pg.dsn) as other:
            other.execute(f"SELECT 1 FROM {pg.schema}.dedup WHERE message_id = 'm1' "
                          "FOR UPDATE")
            # When the store claims that id (its lease ran out) while the lock is held
            outcome, took = in_thread(
                lambda: store.claim(["m1"], owner="b", now=20, lease=10), within=10)
            other.rollback()
        # Then it gives up in about its deadline: the store is unavailable for it
        assert isinstance(outcome, StoreUnavailable), outcome
        assert took < 4.0
        # And the connection is sound: the next call works
        assert store.claim(["m1"], owner="b", now=20, lease=10) == [Verdict.DELIVER]
    finally:
        store.close()


def test_an_inbox_effect_on_a_server_that_freezes_is_given_up(
        server: EmbeddedPostgres, store: PostgresDedupStore,
        freeze: Callable[[EmbeddedPostgres], Callable[[], None]]) -> None:
    # Given an inbox effect during which the server freezes (its statement unanswered)
    store.ping()
    thaws: list[Callable[[], None]] = []

    def effect(conn: psycopg.Connection[object]) -> None:
        if not thaws:
            thaws.append(freeze(server))
        conn.execute("SELECT 1")

    # When the inbox runs it, Then the call gives up in about its deadline
    outcome, took = in_thread(lambda: store.finish_with_effect(
        "m1", owner="a", now=time.time(), effect=effect), within=10)
    assert isinstance(outcome, StoreUnavailable), outcome
    assert took < 4.0
    # And once the server goes on, the inbox commits the effect
    thaws[0]()
    outcome, _ = in_thread(lambda: store.finish_with_effect(
        "m1", owner="a", now=time.time(), effect=effect), within=10)
    assert outcome is True
