"""AsyncGeoSender: passive and active replication, retries, buffering, replay, failback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_queue import DurableQueue
from gateway.aio import AsyncGeoSender
from gateway.transports import FaultyTransport, LocalNamespace
from replication import (
    Message,
    MessageRejected,
    NamespaceUnavailable,
    QueueFull,
    ReplicationPolicy,
    RetryPolicy,
)
from tests.gateway.conftest import (
    ENTITY,
    Exploding,
    Namespaces,
    ReceiverFactory,
    Recorder,
    SenderFactory,
    wait_for,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def queue(tmp_path: Path):
    q = DurableQueue(tmp_path / "buffer.db")
    yield q
    q.close()


# -- passive ------------------------------------------------------------------------


async def test_passive_sends_go_to_the_primary(
    make_sender: SenderFactory, ns: Namespaces, secondary: FaultyTransport
) -> None:
    # Given a passive sender with both namespaces up
    sender = make_sender()
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then the primary took it, and only the primary was tried
    assert result.namespaces == ("primary",)
    assert result.buffered == () and not result.failed_over
    assert await ns.drain_ids("primary") == ["m1"]
    assert await ns.drain_ids("secondary") == []
    assert "send" not in secondary.calls


async def test_passive_failover_when_the_primary_is_down(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport, hooks: Recorder
) -> None:
    # Given a passive sender whose primary goes down
    sender = make_sender(hooks=hooks)
    primary.go_down()
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then the message lands on the secondary, roles swap and on_failover fires
    assert result.namespaces == ("secondary",)
    assert result.failed_over and result.buffered == ()
    assert sender.roles.active == "secondary"
    assert "primary" in sender.down
    assert await ns.drain_ids("secondary") == ["m1"]
    assert ns.count("primary") == 0
    [event] = hooks.named("on_failover")
    assert (event["from_namespace"], event["to_namespace"]) == ("primary", "secondary")
    assert [e["namespace"] for e in hooks.named("on_namespace_down")] == ["primary"]
    # And the primary, which refused (it is down), was not retried before failing over
    assert primary.calls.count("send") == 1
    # And the next send goes straight to the secondary, without a new failover
    again = await sender.send(Message("b", message_id="m2"))
    assert again.namespaces == ("secondary",) and not again.failed_over
    assert len(hooks.named("on_failover")) == 1


async def test_namespace_taken_down_from_another_process_fails_over_within_a_second(
    data_dir: Path, state_dir: Path, ns: Namespaces, hooks: Recorder
) -> None:
    # Given a passive sender on local namespaces (default policy, real retry waits)
    async with AsyncGeoSender(
        primary="local://primary", secondary="local://secondary", entity=ENTITY,
        data_dir=data_dir, state_dir=state_dir, hooks=hooks, recovery=False,
    ) as sender:
        assert (await sender.send(Message("warm", message_id="m0"))).namespaces == ("primary",)
        # When another process takes the primary down (blocking on purpose: the
        # sender is idle, and the clock starts the moment the process has returned)
        subprocess.run(  # noqa: ASYNC221
            [sys.executable, "-c",
             "from gateway.transports import LocalNamespace; "
             f"LocalNamespace('primary', data_dir={str(data_dir)!r}).down()"],
            check=True, timeout=60,
        )
        downed = time.monotonic()
        result = await sender.send(Message("a", message_id="m1"))
        elapsed = time.monotonic() - downed
        # Then the very next send fails over and lands on the secondary within 1 s
        assert result.namespaces == ("secondary",) and result.failed_over
        assert elapsed < 1.0, f"failover took {elapsed:.3f} s"
        assert sender.roles.active == "secondary"
        assert len(hooks.named("on_failover")) == 1
    assert not ns.primary.status().up
    assert await ns.drain_ids("secondary") == ["m1"]
    assert ns.count("primary") == 1  # only the warm-up message


async def test_role_state_survives_a_restart(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport, state_dir: Path
) -> None:
    # Given a sender that failed over to the secondary, then closed
    first = make_sender()
    primary.go_down()
    assert (await first.send(Message("a", message_id="m1"))).failed_over
    await first.aclose()
    primary.come_up()
    # When a new sender starts with the same state_dir (primary healthy again)
    second = make_sender()
    # Then it starts with the secondary active and sends there, without a failover
    assert second.roles.active == "secondary"
    assert second.roles.preferred == "primary"
    result = await second.send(Message("b", message_id="m2"))
    assert result.namespaces == ("secondary",) and not result.failed_over
    assert await ns.drain_ids("secondary") == ["m1", "m2"]
    assert ns.count("primary") == 0
    # And a sender with another state_dir starts from the primary
    other = make_sender(state_dir=state_dir.parent / "elsewhere")
    assert other.roles.active == "primary"


async def test_failback_makes_the_primary_active_again_after_it_comes_back(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport, hooks: Recorder
) -> None:
    # Given a failback sender that failed over while the primary was down
    sender = make_sender(failback=True, hooks=hooks)
    primary.go_down()
    assert (await sender.send(Message("a", message_id="m1"))).failed_over
    # When a recovery round runs while the primary is still down
    await sender.replay()
    # Then nothing changes
    assert sender.roles.active == "secondary" and "primary" in sender.down
    # When the primary comes back and recovery runs
    primary.come_up()
    await sender.replay()
    # Then the primary is active again and takes the next send
    assert sender.roles.active == "primary"
    assert sender.down == frozenset()
    assert [(e["from_namespace"], e["to_namespace"]) for e in hooks.named("on_failover")] == [
        ("primary", "secondary"), ("secondary", "primary")]
    assert [e["namespace"] for e in hooks.named("on_namespace_up")] == ["primary"]
    result = await sender.send(Message("b", message_id="m2"))
    assert result.namespaces == ("primary",) and not result.failed_over
    assert await ns.drain_ids("primary") == ["m2"]


async def test_without_failback_the_secondary_stays_active(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport
) -> None:
    # Given a sender without failback that failed over
    sender = make_sender()
    primary.go_down()
    await sender.send(Message("a"))
    # When the primary comes back and recovery runs
    primary.come_up()
    await sender.replay()
    # Then the primary is healthy again but the secondary stays active
    assert sender.down == frozenset()
    assert sender.roles.active == "secondary"
    assert (await sender.send(Message("b"))).namespaces == ("secondary",)


async def test_background_recovery_fails_back(
    primary: FaultyTransport, secondary: FaultyTransport, state_dir: Path, ns: Namespaces
) -> None:
    # Given a started sender with failback and a short probe interval
    policy = ReplicationPolicy(failback=True, probe_interval=0.02,
                              retry=RetryPolicy(initial_backoff=0.001, max_backoff=0.005))
    async with AsyncGeoSender(primary=primary, secondary=secondary, entity=ENTITY,
                              policy=policy, state_dir=state_dir) as sender:
        primary.go_down()
        assert (await sender.send(Message("a"))).failed_over
        # When the primary comes back (and nobody calls replay)
        primary.come_up()
        # Then the background loop probes it and makes it active again
        await wait_for(lambda: sender.roles.active == "primary", within=10)
        assert (await sender.send(Message("b"))).namespaces == ("primary",)


# -- both down: the durable queue ----------------------------------------------------


async def test_passive_both_down_buffers_then_replays_in_order(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, queue: DurableQueue, hooks: Recorder,
) -> None:
    # Given a passive sender with a durable queue and both namespaces down
    sender = make_sender(durable_queue=queue, hooks=hooks)
    primary.go_down()
    secondary.go_down()
    # When it sends
    first = await sender.send(Message("1", message_id="m1"))
    # Then the message is buffered under "*/entity", and on_buffered fires
    assert first.buffered == ("*/orders",) and first.namespaces == ()
    assert sender.backlog == frozenset({"*/orders"})
    assert hooks.named("on_buffered") == [{"destination": "*/orders", "count": 1}]
    # When both come back but the backlog is not replayed yet, further sends join it
    primary.come_up()
    secondary.come_up()
    sends_before = primary.calls.count("send") + secondary.calls.count("send")
    second = await sender.send(Message("2", message_id="m2"))
    third = await sender.send_batch([Message("3", message_id="m3"),
                                     Message("4", message_id="m4")])
    assert second.buffered == third.buffered == ("*/orders",)
    assert primary.calls.count("send") + secondary.calls.count("send") == sends_before
    assert queue.count("*/orders") == 4
    assert ns.count("primary") == ns.count("secondary") == 0
    # When recovery replays, reporting progress
    seen: list[tuple[str, int]] = []
    replayed = await sender.replay(progress=lambda dest, n: seen.append((dest, n)))
    # Then everything lands in order on the active namespace and the backlog clears
    assert replayed == 4
    assert seen and seen[-1] == ("*/orders", 4)
    assert await ns.drain_ids("primary") == ["m1", "m2", "m3", "m4"]
    assert await ns.drain_ids("secondary") == []
    assert sender.backlog == frozenset()
    assert queue.count() == 0
    assert sum(e["count"] for e in hooks.named("on_replayed")) == 4
    # And the next send goes direct again
    direct = await sender.send(Message("5", message_id="m5"))
    assert direct.namespaces == ("primary",) and direct.buffered == ()


async def test_passive_both_down_without_queue_raises(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport,
) -> None:
    # Given a passive sender without a durable queue, both namespaces down
    sender = make_sender()
    primary.go_down()
    secondary.go_down()
    # When it sends, Then NamespaceUnavailable is raised (twice: also once marked down)
    with pytest.raises(NamespaceUnavailable):
        await sender.send(Message("a"))
    with pytest.raises(NamespaceUnavailable):
        await sender.send(Message("b"))
    assert sender.backlog == frozenset()


async def test_queue_full_is_raised_and_does_not_wedge_later_sends(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, tmp_path: Path,
) -> None:
    # Given both namespaces down and a durable queue that holds one message
    small = DurableQueue(tmp_path / "small.db", max_messages=1)
    try:
        sender = make_sender(durable_queue=small)
        primary.go_down()
        secondary.go_down()
        # When a batch of two must be buffered, Then QueueFull is raised, nothing stored
        with pytest.raises(QueueFull):
            await sender.send_batch([Message("a"), Message("b")])
        assert small.count() == 0
        # When a single message follows (both still marked down, no backlog yet)
        # Then it is buffered (this used to spin forever, replanning the same send)
        result = await sender.send(Message("c", message_id="c"))
        assert result.buffered == ("*/orders",)
        assert [m.message.message_id for m in small.peek()] == ["c"]
    finally:
        small.close()


# -- active ---------------------------------------------------------------------------


async def test_active_sends_the_same_message_id_to_both(
    make_sender: SenderFactory, ns: Namespaces
) -> None:
    # Given an active sender with both namespaces up
    sender = make_sender(mode="active")
    # When it sends two messages
    r1 = await sender.send(Message("a", message_id="m1"))
    r2 = await sender.send(Message("b", message_id="m2"))
    # Then both namespaces took both, with the same message ids
    assert sorted(r1.namespaces) == sorted(r2.namespaces) == ["primary", "secondary"]
    assert r1.buffered == () and not r1.failed_over
    assert await ns.drain_ids("primary") == ["m1", "m2"]
    assert await ns.drain_ids("secondary") == ["m1", "m2"]


async def test_active_one_down_buffers_its_copy_and_replays_it_later(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    queue: DurableQueue, hooks: Recorder,
) -> None:
    # Given an active sender with a durable queue and the primary down
    sender = make_sender(mode="active", durable_queue=queue, hooks=hooks)
    primary.go_down()
    # When it sends
    r1 = await sender.send(Message("a", message_id="m1"))
    r2 = await sender.send(Message("b", message_id="m2"))
    # Then the secondary accepted them and the primary's copies are buffered for it
    assert r1.namespaces == r2.namespaces == ("secondary",)
    assert r1.buffered == r2.buffered == ("primary/orders",)
    assert not r1.failed_over and sender.roles.active == "primary"
    assert queue.count("primary/orders") == 2
    assert sender.backlog == frozenset({"primary/orders"})
    assert [e["destination"] for e in hooks.named("on_buffered")] == ["primary/orders"] * 2
    # And the second send did not try the primary (known down), nor the first one
    # again after its refusal
    assert primary.calls.count("send") == 1
    assert await ns.drain_ids("secondary") == ["m1", "m2"]
    # When the primary comes back and recovery replays
    primary.come_up()
    assert await sender.replay() == 2
    # Then the primary gets its copies in order, and the backlog clears
    assert await ns.drain_ids("primary") == ["m1", "m2"]
    assert ns.count("secondary") == 0  # nothing replayed to the other namespace
    assert sender.backlog == frozenset() and queue.count() == 0
    # And new sends go to both directly
    r3 = await sender.send(Message("c", message_id="m3"))
    assert sorted(r3.namespaces) == ["primary", "secondary"] and r3.buffered == ()


async def test_active_both_down_without_queue_raises(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport,
) -> None:
    sender = make_sender(mode="active")
    primary.go_down()
    secondary.go_down()
    with pytest.raises(NamespaceUnavailable):
        await sender.send(Message("a"))


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_message_rejected_is_raised_not_buffered_no_failover(
    mode: str, make_sender: SenderFactory, data_dir: Path, primary: FaultyTransport,
    secondary: FaultyTransport, queue: DurableQueue, hooks: Recorder,
) -> None:
    # Given queues with a small maximum message size on both namespaces
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data_dir) as admin:
            admin.create_queue("small", max_message_size=100)
    sender = make_sender(mode=mode, entity="small", durable_queue=queue, hooks=hooks)
    # When an oversized message is sent
    with pytest.raises(MessageRejected):
        await sender.send(Message(b"x" * 1000))
    # Then it was not retried, not buffered, and no namespace was failed over or marked down
    assert primary.calls.count("send") == 1
    assert secondary.calls.count("send") == (1 if mode == "active" else 0)
    assert queue.count() == 0 and sender.backlog == frozenset()
    assert sender.down == frozenset() and sender.roles.active == "primary"
    assert hooks.named("on_failover") == hooks.named("on_buffered") == []
    # And a message that fits still goes where it should
    result = await sender.send(Message(b"ok"))
    assert result.namespaces[0] == "primary" and not result.failed_over


# -- lost replies -------------------------------------------------------------------


async def test_lost_reply_is_retried_and_the_duplicate_is_delivered_once(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, ns: Namespaces,
    primary: FaultyTransport,
) -> None:
    # Given a primary that loses the reply to the next send (the message lands)
    sender = make_sender()
    primary.lose_replies(1)
    # When the sender sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then tenacity retried on the same namespace: no failover, two copies landed
    assert result.namespaces == ("primary",) and not result.failed_over
    assert primary.calls.count("send") == 2
    assert ns.count("primary") == 2
    # And a receiver delivers the id once and settles the duplicate
    receiver = await make_receiver()
    delivered = []
    for _ in range(20):
        for r in await receiver.receive(max_messages=10, max_wait=0.2):
            delivered.append(r.message_id)
            await receiver.complete(r)
        if receiver.stats.duplicates_suppressed == 1:
            break
    assert delivered == ["m1"]
    assert receiver.stats.duplicates_suppressed == 1
    assert ns.count("primary") == 0


async def test_namespace_losing_every_reply_fails_over_and_receiver_dedups(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, ns: Namespaces,
) -> None:
    # Given a primary that loses every send reply (set in its control file)
    ns.primary.set_faults(lost_replies=1.0)
    sender = make_sender()
    # When a message is sent
    result = await sender.send(Message("a", message_id="m1"))
    # Then every retry landed a copy on the primary, and the sender failed over
    assert result.namespaces == ("secondary",) and result.failed_over
    assert ns.count("primary") == 3 and ns.count("secondary") == 1
    # And the receiver delivers the id exactly once out of four copies
    receiver = await make_receiver()
    delivered = []
    for _ in range(40):
        for r in await receiver.receive(max_messages=10, max_wait=0.2):
            delivered.append(r.message_id)
            await receiver.complete(r)
        if receiver.stats.duplicates_suppressed == 3:
            break
    assert delivered == ["m1"]
    assert receiver.stats.duplicates_suppressed == 3
    assert ns.count("primary") == ns.count("secondary") == 0


# -- hooks ----------------------------------------------------------------------------


async def test_a_raising_hook_does_not_break_sends(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, queue: DurableQueue, hooks: Recorder,
) -> None:
    # Given a sender whose first hook raises in every callback
    sender = make_sender(durable_queue=queue, hooks=[Exploding(), hooks])
    # When it fails over, buffers and replays
    primary.go_down()
    failover = await sender.send(Message("a", message_id="m1"))
    secondary.go_down()
    buffered = await sender.send(Message("b", message_id="m2"))
    secondary.come_up()
    replayed = await sender.replay()
    # Then every send still succeeded, and later hooks were still called
    assert failover.failed_over and failover.namespaces == ("secondary",)
    assert buffered.buffered == ("*/orders",)
    assert replayed == 1
    assert await ns.drain_ids("secondary") == ["m1", "m2"]
    names = [name for name, _ in hooks.events]
    for name in ("on_failover", "on_namespace_down", "on_buffered", "on_namespace_up",
                 "on_replayed"):
        assert name in names


async def test_send_after_close_raises(make_sender: SenderFactory) -> None:
    sender = make_sender()
    await sender.aclose()
    await sender.aclose()  # twice is fine
    with pytest.raises(RuntimeError):
        await sender.send(Message("a"))


# -- opening ahead of a failover ------------------------------------------------------


class Preparing(FaultyTransport):
    """Records prepare_send; refuses it while down, as an SDK transport would."""

    def __init__(self, inner, **kw):
        super().__init__(inner, **kw)
        self.prepared: list[str] = []

    async def prepare_send(self, entity: str) -> None:
        if self.is_down:
            raise self._down_error()
        self.prepared.append(entity)


async def test_start_opens_both_namespaces_and_a_namespace_back_again(
    data_dir: Path, state_dir: Path, ns: Namespaces, caplog: pytest.LogCaptureFixture
) -> None:
    from gateway.transports import LocalTransport

    primary = Preparing(LocalTransport("primary", data_dir=data_dir))
    secondary = Preparing(LocalTransport("secondary", data_dir=data_dir))
    # Given a standby that is down when the sender starts
    secondary.go_down()
    caplog.set_level("INFO")
    policy = ReplicationPolicy(probe_interval=0.02)
    async with primary, secondary, AsyncGeoSender(
        primary=primary, secondary=secondary, entity=ENTITY, state_dir=state_dir,
        policy=policy,
    ) as sender:
        # Then the primary is opened ahead of any send, and the standby's refusal is
        # only logged: nothing is marked down, nothing raised
        await wait_for(lambda: primary.prepared == [ENTITY])
        await wait_for(lambda: "could not open secondary" in caplog.text)
        assert sender.down == frozenset() and secondary.prepared == []
        # When a failover marks the primary down and it comes back, it is opened again
        await sender.send(Message("a"))  # the primary takes it
        primary.go_down()
        secondary.come_up()
        assert (await sender.send(Message("b"))).namespaces == ("secondary",)
        primary.come_up()
        await wait_for(lambda: primary.prepared == [ENTITY, ENTITY])
        assert sender.down == frozenset()
