"""Senders sharing their roles on PostgreSQL: a fleet fails over together once, a stale
sender never rolls the roles back, one sender's failover is followed by the others,
and a roles store that is down never fails a send (the change is saved once it is
back). Each sender has its own transports and its own pool, as on its own machine."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.aio import AsyncGeoSender
from gateway.geo import GatewayConfig
from gateway.stores import PostgresRoleStore
from gateway.transports import FaultyTransport, LocalNamespace, LocalTransport
from replication import ConfigError, Message, ReplicationPolicy, RetryPolicy
from tests.gateway.conftest import ENTITY, Namespaces, Recorder, fast_sleep, wait_for
from tests.postgres import Pg

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(attempts=2, initial_backoff=0.001, max_backoff=0.005, max_delay=0.5)


class Fleet:
    """Senders, each with its own transports to the two local namespaces and its own
    PostgreSQL role store (closed at the end)."""

    def __init__(self, data_dir: Path, pg: Pg) -> None:
        self.data_dir, self.pg = data_dir, pg
        self.closing: list[Any] = []

    def store(self, **kw: Any) -> PostgresRoleStore:
        made = PostgresRoleStore(self.pg.dsn, schema=self.pg.schema, **kw)
        self.closing.append(made)
        return made

    async def sender(self, hooks: Recorder | None = None, *, refresh: float = 1.0,
                     **kw: Any) -> tuple[AsyncGeoSender, FaultyTransport]:
        primary = FaultyTransport(LocalTransport("primary", data_dir=self.data_dir))
        secondary = FaultyTransport(LocalTransport("secondary", data_dir=self.data_dir))
        kw.setdefault("roles_store", self.store(refresh_interval=refresh))
        kw.setdefault("recovery", False)
        sender = AsyncGeoSender(primary=primary, secondary=secondary, entity=ENTITY,
                                policy=ReplicationPolicy(retry=QUICK, probe_interval=0.02,
                                                         failback=kw.pop("failback", False)),
                                hooks=hooks or (), sleep=fast_sleep, **kw)
        self.closing += [sender, primary, secondary]
        return sender, primary

    async def close(self) -> None:
        for item in reversed(self.closing):
            result = item.aclose() if hasattr(item, "aclose") else item.close()
            if asyncio.iscoroutine(result):
                await result


@pytest.fixture
async def fleet(data_dir: Path, ns: Namespaces, pg: Pg) -> AsyncIterator[Fleet]:
    made = Fleet(data_dir, pg)
    yield made
    await made.close()


def failovers(hooks: Recorder) -> list[tuple[str, str]]:
    return [(e["from_namespace"], e["to_namespace"]) for e in hooks.named("on_failover")]


async def test_senders_failing_over_together_make_one_change(fleet: Fleet) -> None:
    # Given three senders that all find the primary down
    hooks = [Recorder() for _ in range(3)]
    made = [await fleet.sender(h) for h in hooks]
    for sender, _ in made:
        await sender.start()  # each reads generation 0 first (a late first read would
        # adopt another's change without failing over itself)
    for _, primary in made:
        primary.go_down()
    # When they send at the same time
    results = await asyncio.gather(*(s.send(Message(f"m{i}")) for i, (s, _) in
                                      enumerate(made)))
    # Then every message landed on the secondary, every sender has it active, and the
    # store holds one change (generation 1), which each sender reported once
    assert all(r.namespaces == ("secondary",) for r in results)
    assert all(s.roles.active == "secondary" for s, _ in made)
    stored = fleet.store().load("primary", "secondary")
    assert (stored.active, stored.generation) == ("secondary", 1)
    assert [failovers(h) for h in hooks] == [[("primary", "secondary")]] * 3


async def test_a_stale_sender_does_not_roll_the_roles_back(fleet: Fleet) -> None:
    # Given sender a failed over and failed back (generation 2, the primary active)
    a, a_primary = await fleet.sender(failback=True)
    b_hooks = Recorder()
    b, b_primary = await fleet.sender(b_hooks)
    await b.start()  # read generation 0 (the roles are read at start), never refreshes
    a_primary.go_down()
    assert (await a.send(Message("a1"))).failed_over
    a_primary.come_up()
    await a.replay()  # a recovery round: the primary is back, fail back
    assert (a.roles.active, a.roles.generation) == ("primary", 2)
    # When b, still at generation 0, finds the primary down and fails over
    b_primary.go_down()
    result = await b.send(Message("b1"))
    # Then its message went to the secondary (elsewhere than the active primary: it
    # failed over), but its change was refused: the store keeps generation 2, and b
    # adopted it instead of undoing a's failback
    assert result.namespaces == ("secondary",) and result.failed_over
    stored = fleet.store().load("primary", "secondary")
    assert (stored.active, stored.generation) == ("primary", 2)
    assert b.roles == stored
    assert failovers(b_hooks) == []


async def test_a_failover_by_one_sender_is_followed_by_the_others(fleet: Fleet) -> None:
    # Given a sender whose recovery task re-reads the shared roles every 0.05 s
    follower_hooks = Recorder()
    follower, _ = await fleet.sender(follower_hooks, refresh=0.05, recovery=True)
    await follower.start()
    leader, leader_primary = await fleet.sender()
    # When another sender fails over
    leader_primary.go_down()
    assert (await leader.send(Message("m1"))).failed_over
    # Then the follower makes the secondary active too, and says so
    await wait_for(lambda: follower.roles.active == "secondary")
    assert follower.roles.generation == 1
    assert failovers(follower_hooks) == [("primary", "secondary")]
    assert (await follower.send(Message("m2"))).namespaces == ("secondary",)


async def test_a_roles_store_that_is_down_never_fails_a_send(
    data_dir: Path, ns: Namespaces, pg_server_factory: Callable[[], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a sender whose roles live on a server of this test's own
    server = pg_server_factory()
    store = PostgresRoleStore(server.dsn, connect_timeout=1)
    primary = FaultyTransport(LocalTransport("primary", data_dir=data_dir))
    secondary = FaultyTransport(LocalTransport("secondary", data_dir=data_dir))
    sender = AsyncGeoSender(primary=primary, secondary=secondary, entity=ENTITY,
                            policy=ReplicationPolicy(retry=QUICK), roles_store=store,
                            recovery=False, sleep=fast_sleep)
    try:
        # When the server stops and the primary goes down
        server.stop(mode="fast")
        primary.go_down()
        with caplog.at_level(logging.WARNING, logger="geogateway"):
            result = await sender.send(Message("m1"))
        # Then the send fails over all the same, and the log says the change is not saved
        assert result.namespaces == ("secondary",) and result.failed_over
        assert sender.roles.active == "secondary"
        assert any("roles store unavailable" in r.getMessage() for r in caplog.records)
        assert any("not saved yet" in r.getMessage() for r in caplog.records)
        # When the server is back and a recovery round runs
        server.start()
        await sender.replay()
        # Then the change is in the store
        stored = store.load("primary", "secondary")
        assert (stored.active, stored.generation) == ("secondary", 1)
    finally:
        await sender.aclose()
        await primary.aclose()
        await secondary.aclose()
        store.close()


async def test_a_dsn_in_the_config_keeps_the_roles_in_postgres(
    tmp_path: Path, pg: Pg, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a pair of namespaces of this test's own, and the DSN in the environment
    names = [f"n{uuid.uuid4().hex[:10]}" for _ in range(2)]
    admin = [LocalNamespace(n, data_dir=tmp_path) for n in names]
    for namespace in admin:
        namespace.create_queue(ENTITY)
    monkeypatch.setenv("GEOGATEWAY_ROLES_STORE", pg.dsn)
    config = GatewayConfig.load(overrides={"primary": f"local://{names[0]}",
                                           "secondary": f"local://{names[1]}",
                                           "entity": ENTITY})
    password = pg.dsn.split(":")[2].split("@")[0]
    assert config.roles_store == pg.dsn and password not in repr(config)
    # When a sender made from it fails over
    async with AsyncGeoSender(primary=config.primary, secondary=config.secondary,
                              entity=ENTITY, data_dir=tmp_path, roles_store=config.roles_store,
                              policy=ReplicationPolicy(retry=QUICK), recovery=False) as sender:
        admin[0].down()
        assert (await sender.send(Message("m1"))).failed_over
    # Then the roles are in the server's geogateway schema, where the next sender reads them
    store = PostgresRoleStore(pg.dsn)
    try:
        assert store.load(names[0], names[1]).active == names[1]
    finally:
        store.close()
        for namespace in admin:
            namespace.close()


def test_the_config_file_takes_a_dsn_and_refuses_anything_else(tmp_path: Path) -> None:
    path = tmp_path / "geogateway.toml"
    dsn = "postgresql://app:s3cret-pw@db.example.com:5432/orders"
    path.write_text(f'entity = "orders"\nprimary = "local://a"\nsecondary = "local://b"\n'
                    f'roles_store = "{dsn}"\n')
    config = GatewayConfig.load(path, env={})
    assert config.roles_store == dsn and "s3cret-pw" not in repr(config)
    path.write_text('entity = "orders"\nprimary = "local://a"\nsecondary = "local://b"\n'
                    'roles_store = "roles.json"\n')
    with pytest.raises(ConfigError, match=r"roles_store in .* must be a PostgreSQL DSN"):
        GatewayConfig.load(path, env={})


async def test_a_roles_store_that_is_no_store_is_refused(data_dir: Path, ns: Namespaces) -> None:
    for bad, words in (("roles.json", "a file goes in state_dir"), (42, "not int")):
        with pytest.raises(ConfigError, match=words):
            AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                           entity=ENTITY, data_dir=data_dir, roles_store=bad)
