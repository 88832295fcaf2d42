"""The rights the roles and checkpoint stores need (as docs/guides/fleet.md lists them): once an
administrator created the tables, a user with USAGE on the schema and SELECT, INSERT,
UPDATE, DELETE on its tables runs both; inspecting needs SELECT only; less is one
clear error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import psycopg
import pytest

from gateway.consumer import (
    ConsumerGroupRef,
    Heartbeat,
    Ownership,
    PostgresCheckpointStore,
)
from gateway.stores import PostgresRoleStore
from replication import ConfigError, RoleState
from tests.postgres import Pg

GROUP = ConsumerGroupRef(fully_qualified_namespace="ns", eventhub_name="hub")


@pytest.fixture
def user(pg: Pg) -> Iterator[tuple[str, str]]:
    """A login role of this test's own (name, DSN), with no rights on anything yet."""
    name = f"app_{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
    owner = pg.dsn.split("//", 1)[1].split("@", 1)[0]
    yield name, pg.dsn.replace(owner, f"{name}:{password}")
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def _migrated_by_the_administrator(pg: Pg) -> None:
    anyio.run(PostgresCheckpointStore(pg.dsn, schema=pg.schema).aclose)
    PostgresRoleStore(pg.dsn, schema=pg.schema).close()


def _grant(pg: Pg, name: str, rights: str) -> None:
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA {pg.schema} TO {name}")
        conn.execute(f"GRANT {rights} ON ALL TABLES IN SCHEMA {pg.schema} TO {name}")


def test_table_rights_are_enough_to_run_once_the_tables_exist(pg: Pg, user):
    # Given the tables made by an administrator, and a user with DML rights on them only
    name, dsn = user
    _migrated_by_the_administrator(pg)
    _grant(pg, name, "SELECT, INSERT, UPDATE, DELETE")

    async def consume() -> bool:
        async with PostgresCheckpointStore(dsn, schema=pg.schema) as store:
            await store.claim_ownership([Ownership(**vars(GROUP), partition_id="0",
                                                   owner_id="a")])
            await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
            await store.wake(await store.list_heartbeats(GROUP))
            return (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))).woken

    # When the user runs a consumer's store and a sender's roles
    assert anyio.run(consume)
    roles = PostgresRoleStore(dsn, schema=pg.schema)
    try:
        initial = RoleState.initial("east", "west")
        assert roles.swap(initial, initial.swap(1.0)).active == "west"
    finally:
        roles.close()


def test_select_is_enough_to_inspect(pg: Pg, user):
    name, dsn = user
    _migrated_by_the_administrator(pg)
    _grant(pg, name, "SELECT")

    async def inspect() -> list[Ownership]:
        async with PostgresCheckpointStore(dsn, schema=pg.schema, read_only=True) as store:
            return await store.list_ownership(GROUP)

    assert anyio.run(inspect) == []


def test_without_rights_the_store_says_which_permission_is_missing(pg: Pg, user):
    # Given a user that may neither create the schema nor use existing tables
    _, dsn = user
    # Then opening a store is one ConfigError naming the missing permission
    for make in (lambda: PostgresRoleStore(dsn, schema=pg.schema),
                 lambda: PostgresCheckpointStore(dsn, schema=pg.schema)):
        with pytest.raises(ConfigError, match="permission denied") as caught:
            make()
        assert "\n" not in str(caught.value)
    _migrated_by_the_administrator(pg)
    with pytest.raises(ConfigError, match="permission denied for schema"):
        PostgresRoleStore(dsn, schema=pg.schema)
