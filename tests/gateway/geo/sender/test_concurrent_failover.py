"""Concurrent passive sends never undo each other's failover: a role change is made
from the roles a send was planned with, so a slow send that still lands on the old
primary after another send failed over leaves the roles alone (one change, p -> s,
never back while the primary is marked down), with a roles file and on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoSender
from gateway.stores import PostgresRoleStore
from gateway.transports import FaultyTransport, LocalTransport
from replication import DeadlinePolicy, Message, NamespaceRefused, ReplicationPolicy
from tests.gateway.conftest import Namespaces, Recorder, SenderFactory, wait_for
from tests.postgres import Pg

pytestmark = pytest.mark.anyio

#: Deadlines far longer than the test: the slow send is slow, not hung (never hedged).
PATIENT = ReplicationPolicy(deadlines=DeadlinePolicy(floor=5.0, ceiling=5.0, initial=5.0))


class Gated(FaultyTransport):
    """A faulty transport whose send of a batch led by a gated message id waits for its
    gate, then lands (the injected faults apply after the wait)."""

    def __init__(self, inner: LocalTransport) -> None:
        super().__init__(inner)
        self.gates: dict[str, anyio.Event] = {}
        self.held: set[str] = set()

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        gate = self.gates.get(messages[0].message_id)
        if gate is not None:
            self.held.add(messages[0].message_id)
            await gate.wait()
        await super().send(entity, messages)


class ActiveNeverDown(Recorder):
    """Records the hooks, and the namespaces made active while marked down."""

    def __init__(self) -> None:
        super().__init__()
        self.sender: AsyncGeoSender | None = None
        self.active_while_down: list[str] = []

    def on_failover(self, **kw: object) -> None:
        super().on_failover(**kw)
        assert self.sender is not None
        if kw["to_namespace"] in self.sender.down:
            self.active_while_down.append(str(kw["to_namespace"]))


async def slow_send_lands_after_a_failover(
    sender: AsyncGeoSender, primary: Gated, ns: Namespaces
) -> tuple[bool, bool]:
    """Send "slow" (held on the primary), then "fast" that fails on the primary and
    fails over; then let "slow" land on the primary. Their ``failed_over``."""
    gate = primary.gates["slow"] = anyio.Event()
    slow = asyncio.ensure_future(sender.send(Message("s", message_id="slow")))
    await wait_for(lambda: "slow" in primary.held, within=2)
    primary.fail_next(1, NamespaceRefused)
    fast = await sender.send(Message("f", message_id="fast"))
    assert fast.namespaces == ("secondary",) and fast.failed_over
    gate.set()
    with anyio.fail_after(3):
        landed = await slow
    assert landed.namespaces == ("primary",)
    assert await ns.drain_ids("primary") == ["slow"]
    assert await ns.drain_ids("secondary") == ["fast"]
    return fast.failed_over, landed.failed_over


async def test_a_slow_send_landing_on_the_old_primary_does_not_swap_the_roles_back(
    make_sender: SenderFactory, data_dir: Path, ns: Namespaces
) -> None:
    # Given a passive sender whose send of "slow" to the primary is held up
    async with Gated(LocalTransport("primary", data_dir=data_dir)) as primary:
        hooks = ActiveNeverDown()
        sender = make_sender(primary=primary, policy=PATIENT, hooks=hooks)
        hooks.sender = sender
        # When another send fails on the primary and fails over, and then "slow" lands
        # on the primary
        _, slow_failed_over = await slow_send_lands_after_a_failover(sender, primary, ns)
        # Then the roles changed once, p -> s, and stay there while the primary is down
        assert not slow_failed_over
        assert [(e["from_namespace"], e["to_namespace"])
                for e in hooks.named("on_failover")] == [("primary", "secondary")]
        assert (sender.roles.active, sender.roles.generation) == ("secondary", 1)
        assert "primary" in sender.down and hooks.active_while_down == []
        # And the next send goes to the secondary
        assert (await sender.send(Message("n"))).namespaces == ("secondary",)


async def test_with_roles_on_postgres_the_fleet_keeps_one_failover(
    make_sender: SenderFactory, data_dir: Path, ns: Namespaces, pg: Pg
) -> None:
    # Given a passive sender keeping its roles on PostgreSQL, and another sender of the
    # fleet reading them
    store = PostgresRoleStore(pg.dsn, schema=pg.schema, refresh_interval=1.0)
    try:
        async with Gated(LocalTransport("primary", data_dir=data_dir)) as primary:
            hooks = ActiveNeverDown()
            sender = make_sender(primary=primary, policy=PATIENT, hooks=hooks,
                                 roles_store=store)
            hooks.sender = sender
            # When a send fails over while a slow one is held, then the slow one lands
            _, slow_failed_over = await slow_send_lands_after_a_failover(sender, primary, ns)
            # Then the store holds one change, p -> s, made once
            assert not slow_failed_over
            stored = store.load("primary", "secondary")
            assert (stored.active, stored.generation) == ("secondary", 1)
            assert [(e["from_namespace"], e["to_namespace"])
                    for e in hooks.named("on_failover")] == [("primary", "secondary")]
            assert hooks.active_while_down == []
    finally:
        store.close()
