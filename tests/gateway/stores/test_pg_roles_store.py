"""PostgresRoleStore on a real server: persisted roles, compare-and-swap on the
generation (concurrent changes make one, a stale one never rolls the roles back),
the same swap on the file RoleStore, and errors without the password."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from gateway.stores import PostgresRoleStore, RoleStore
from replication import ConfigError, RoleState
from tests.postgres import Pg

INITIAL = RoleState.initial("east", "west")


@pytest.fixture
def store(pg: Pg):
    made = PostgresRoleStore(pg.dsn, schema=pg.schema)
    yield made
    made.close()


def _rows(pg: Pg) -> list[tuple[object, ...]]:
    with psycopg.connect(pg.dsn) as conn:
        return conn.execute(f"SELECT preferred, standby_preferred, active, generation "
                            f"FROM {pg.schema}.sender_roles ORDER BY 1").fetchall()


def test_without_a_row_the_primary_is_active_and_nothing_is_written(pg: Pg, store):
    assert store.load("east", "west") == INITIAL
    assert _rows(pg) == []


def test_a_change_survives_a_new_store(pg: Pg, store):
    # Given a failover stored by one store
    swapped = INITIAL.swap(123.5)
    assert store.swap(INITIAL, swapped) == swapped
    # When another store (a restarted sender, another machine) loads the pair
    other = PostgresRoleStore(pg.dsn, schema=pg.schema)
    try:
        # Then it sees the secondary active, with the generation and time
        assert other.load("east", "west") == swapped
    finally:
        other.close()
    # And another pair is not affected
    assert store.load("north", "south") == RoleState.initial("north", "south")


def test_concurrent_failovers_from_one_state_make_one_change(pg: Pg):
    # Given eight senders (each with its own pool) that all read the initial state
    stores = [PostgresRoleStore(pg.dsn, schema=pg.schema) for _ in range(8)]
    start = threading.Barrier(len(stores))

    def fail_over(i: int) -> tuple[RoleState, RoleState]:
        mine = INITIAL.swap(float(i + 1))  # each its own changed_at
        start.wait()
        return mine, stores[i].swap(INITIAL, mine)

    try:
        # When they all fail over at the same instant
        with ThreadPoolExecutor(len(stores)) as pool:
            results = list(pool.map(fail_over, range(len(stores))))
    finally:
        for s in stores:
            s.close()
    # Then exactly one change was stored, and every sender got that one back
    winners = [mine for mine, got in results if got == mine]
    assert len(winners) == 1
    assert {got for _, got in results} == {winners[0]}
    assert _rows(pg) == [("east", "west", "west", 1)]


def test_a_stale_change_does_not_roll_the_roles_back(store):
    # Given a failover and a failback stored (generation 2, the primary active)
    failed_over = INITIAL.swap(1.0)
    store.swap(INITIAL, failed_over)
    back = failed_over.fail_back(2.0)
    assert store.swap(failed_over, back) == back
    # When a sender that still holds the initial state fails over
    got = store.swap(INITIAL, INITIAL.swap(3.0))
    # Then its change is refused and it gets the stored state to adopt
    assert got == back and (got.active, got.generation) == ("east", 2)
    assert store.load("east", "west") == back


def test_save_overwrites_whatever_is_stored(store):
    store.swap(INITIAL, INITIAL.swap(1.0))
    forced = RoleState(preferred="east", standby_preferred="west", active="east",
                       generation=7, changed_at=9.0)
    store.save(forced)
    assert store.load("east", "west") == forced


def test_a_row_naming_an_unknown_namespace_is_one_clear_error(pg: Pg, store):
    store.swap(INITIAL, INITIAL.swap(1.0))
    with psycopg.connect(pg.dsn) as conn:
        conn.execute(f"UPDATE {pg.schema}.sender_roles SET active = 'north'")
    with pytest.raises(ConfigError, match="delete the row") as caught:
        store.load("east", "west")
    assert "\n" not in str(caught.value)


def test_the_file_store_refuses_a_stale_change_too(tmp_path):
    store = RoleStore(tmp_path / "roles.json")
    failed_over = INITIAL.swap(1.0)
    assert store.swap(INITIAL, failed_over) == failed_over
    assert store.swap(INITIAL, INITIAL.swap(2.0)) == failed_over
    assert store.load("east", "west") == failed_over


def test_errors_and_repr_never_show_the_password(pg: Pg, store):
    password = pg.dsn.split(":")[2].split("@")[0]
    assert password not in repr(store) and "sender_roles" in repr(store)
    with pytest.raises(ConfigError) as caught:
        PostgresRoleStore(pg.dsn.replace(password, "wrong-pw"), schema=pg.schema)
    assert "refused the credentials" in str(caught.value)
    assert password not in str(caught.value) and "wrong-pw" not in str(caught.value)


def test_a_closed_store_says_so(pg: Pg):
    store = PostgresRoleStore(pg.dsn, schema=pg.schema)
    store.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.load("east", "west")
