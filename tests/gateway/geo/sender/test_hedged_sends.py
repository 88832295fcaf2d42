"""A hung namespace is an outage too: sends past their deadline are hedged (passive) or
their copy buffered (active), never awaited for ever, and nothing whose send returned
is lost.

The namespaces are real local ones behind ``FaultyTransport``; ``hang()`` makes every
operation wait until ``unhang()`` (a cancelled wait never reaches the namespace, so a
copy that lands after ``unhang()`` proves its attempt was not cancelled). Each send runs
under ``anyio.fail_after``: without deadlines, a send to a hung namespace never returns.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anyio
import pytest

from durable_queue import DurableQueue
from gateway.transports import FaultyTransport
from replication import (
    DeadlinePolicy,
    Message,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    ReplicationPolicy,
)
from tests.gateway.conftest import (
    ENTITY,
    Namespaces,
    ReceiverFactory,
    Recorder,
    SenderFactory,
    wait_for,
)

pytestmark = pytest.mark.anyio

#: Short deadlines, so that each hang costs a fraction of a second.
FAST = ReplicationPolicy(deadlines=DeadlinePolicy(floor=0.2, ceiling=0.4, initial=0.4))
#: Every deadline 1 s, for a test that acts between the deadline and the next one.
SLOW = ReplicationPolicy(deadlines=DeadlinePolicy(floor=1.0, ceiling=1.0, initial=1.0))
#: Far beyond any deadline: a send still running then would never have returned.
BOUND = 10.0


@pytest.fixture
def queue(tmp_path: Path):
    q = DurableQueue(tmp_path / "buffer.db")
    yield q
    q.close()


async def delivered_once(make_receiver: ReceiverFactory, expected: set[str]) -> list[str]:
    """Receive from both namespaces until ``expected`` came; every id delivered."""
    receiver = await make_receiver()
    ids: list[str] = []
    with anyio.fail_after(BOUND):
        while not expected <= set(ids):
            for message in await receiver.receive(max_messages=10, max_wait=0.2):
                ids.append(message.message_id)
                await receiver.complete(message)
    # Whatever else is left are second copies: suppressed, never delivered
    ids += [m.message_id for m in await receiver.receive(max_messages=10, max_wait=0.3)]
    return ids


# -- passive: hedged sends ------------------------------------------------------------


async def test_a_send_the_hung_active_namespace_does_not_answer_is_hedged_to_the_other(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport, hooks: Recorder
) -> None:
    # Given a passive sender that has sent once, and then its primary hangs
    sender = make_sender(policy=FAST, hooks=hooks)
    assert (await sender.send(Message("warm", message_id="m0"))).namespaces == ("primary",)
    primary.hang()
    # When it sends
    with anyio.fail_after(BOUND):
        result = await sender.send(Message("a", message_id="m1"))
    # Then the secondary took the same message, and the result says it was hedged
    assert result.namespaces == ("secondary",)
    assert result.hedged and result.failed_over
    assert result.unanswered == ("primary",) and result.buffered == ()
    assert await ns.drain_ids("secondary") == ["m1"]
    # And the hung primary is treated as failing: down first, then the roles swap
    assert sender.roles.active == "secondary" and "primary" in sender.down
    names = [name for name, _ in hooks.events]
    assert names == ["on_namespace_down", "on_failover"]
    [down] = hooks.named("on_namespace_down")
    assert down["namespace"] == "primary" and isinstance(down["error"], OperationTimeout)
    # And the first attempt was not cancelled: once the primary answers, m1 lands there too
    assert ns.count("primary") == 1
    primary.unhang()
    await wait_for(lambda: ns.count("primary") == 2)
    assert await ns.drain_ids("primary") == ["m0", "m1"]


async def test_the_receivers_deliver_a_hedged_message_once(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, ns: Namespaces,
    primary: FaultyTransport
) -> None:
    # Given a send hedged from the hung primary, whose first attempt lands later
    sender = make_sender(policy=FAST)
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    with anyio.fail_after(BOUND):
        assert (await sender.send(Message("a", message_id="m1"))).hedged
    primary.unhang()
    await wait_for(lambda: ns.count("primary") == 2)
    # When a receiver reads both namespaces / Then each id is delivered once
    assert sorted(await delivered_once(make_receiver, {"m0", "m1"})) == ["m0", "m1"]


async def test_a_first_attempt_that_answers_after_its_deadline_still_wins(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, hooks: Recorder
) -> None:
    # Given both namespaces hang, and a send was hedged to the secondary
    sender = make_sender(policy=SLOW, hooks=hooks)
    primary.hang()
    secondary.hang()
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            results = []

            async def send() -> None:
                results.append(await sender.send(Message("a", message_id="m1")))

            tg.start_soon(send)
            await wait_for(lambda: "send" in secondary.calls)
            # When the primary answers before the hedge's deadline
            primary.unhang()
    # Then the primary took it: hedged, but no failover, and nobody marked down
    [result] = results
    assert result.namespaces == ("primary",) and result.hedged
    assert not result.failed_over and result.unanswered == ()
    assert sender.roles.active == "primary" and sender.down == frozenset()
    assert hooks.events == []
    assert await ns.drain_ids("primary") == ["m1"]
    secondary.unhang()


async def test_a_refusal_from_the_slow_namespace_waits_for_the_hedge_on_its_way(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport
) -> None:
    # Given both namespaces hang, and a send was hedged to the secondary
    sender = make_sender(policy=SLOW)
    primary.hang()
    secondary.hang()
    primary.fail_next(1, MessageRejected("refused for good (injected)"))
    results = []
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:

            async def send() -> None:
                results.append(await sender.send(Message("a", message_id="m1")))

            tg.start_soon(send)
            await wait_for(lambda: "send" in secondary.calls)
            # When the primary refuses it for good, and then the secondary takes it
            primary.unhang()
            await wait_for(lambda: primary.hung is False and "send" in primary.calls)
            secondary.unhang()
    # Then the send returns what happened to the message: the secondary took it
    [result] = results
    assert result.namespaces == ("secondary",) and result.hedged
    assert await ns.drain_ids("secondary") == ["m1"]
    assert ns.count("primary") == 0


async def test_a_refusal_is_raised_when_the_hedge_gets_no_answer_either(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport
) -> None:
    # Given both hang, the send was hedged, and the primary then refuses it for good
    sender = make_sender(policy=SLOW)
    primary.hang()
    secondary.hang()
    primary.fail_next(1, MessageRejected("refused for good (injected)"))

    async def unhang_primary_once_hedged() -> None:
        await wait_for(lambda: "send" in secondary.calls)
        primary.unhang()

    helper = asyncio.get_running_loop().create_task(unhang_primary_once_hedged())
    # When the secondary does not answer within its deadline either
    # Then the refusal is raised (and it was not buffered or sent a third time)
    with anyio.fail_after(BOUND), pytest.raises(MessageRejected, match="injected"):
        await sender.send(Message("a", message_id="m1"))
    await helper
    assert secondary.calls.count("send") == 1 and primary.calls.count("send") == 1
    secondary.unhang()


async def test_a_namespace_that_fails_fast_is_failed_over_without_a_hedge(
    make_sender: SenderFactory, primary: FaultyTransport
) -> None:
    sender = make_sender(policy=FAST)
    primary.go_down()
    result = await sender.send(Message("a", message_id="m1"))
    assert result.namespaces == ("secondary",) and result.failed_over
    assert not result.hedged and result.unanswered == ()


async def test_when_both_hang_the_durable_queue_takes_the_batch(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, ns: Namespaces,
    primary: FaultyTransport, secondary: FaultyTransport, queue: DurableQueue
) -> None:
    # Given a passive sender with a durable queue, and both namespaces hang
    sender = make_sender(policy=FAST, durable_queue=queue)
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    secondary.hang()
    # When it sends
    with anyio.fail_after(BOUND):
        result = await sender.send_batch([Message("a", message_id="m1"),
                                          Message("b", message_id="m2")])
    # Then the batch is on disk for whichever namespace comes back first
    assert result.namespaces == () and result.buffered == (f"*/{ENTITY}",)
    assert result.hedged and set(result.unanswered) == {"primary", "secondary"}
    assert sender.down == {"primary", "secondary"}
    assert queue.count(f"*/{ENTITY}") == 2
    # And once both answer again and the queue is replayed, nothing is lost and each id
    # is delivered once (the late attempts land too: their copies are suppressed)
    primary.unhang()
    secondary.unhang()
    with anyio.fail_after(BOUND):
        while sender.backlog:
            await sender.replay()
    ids = await delivered_once(make_receiver, {"m0", "m1", "m2"})
    assert sorted(ids) == ["m0", "m1", "m2"]


async def test_when_both_hang_without_a_durable_queue_the_error_says_so(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport
) -> None:
    sender = make_sender(policy=FAST)
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    secondary.hang()
    with anyio.fail_after(BOUND), pytest.raises(NamespaceUnavailable) as info:
        await sender.send(Message("a", message_id="m1"))
    # The cause is the unknown outcome: the message may still land
    assert isinstance(info.value.__cause__, OperationTimeout)
    assert "no durable queue" in str(info.value)
    primary.unhang()
    secondary.unhang()


# -- active ---------------------------------------------------------------------------


async def test_active_mode_buffers_the_copy_the_hung_namespace_did_not_answer(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, ns: Namespaces,
    primary: FaultyTransport, queue: DurableQueue, hooks: Recorder
) -> None:
    # Given an active sender whose primary hangs
    sender = make_sender(policy=FAST, mode="active", durable_queue=queue, hooks=hooks)
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    # When it sends
    with anyio.fail_after(BOUND):
        result = await sender.send(Message("a", message_id="m1"))
    # Then it returned with the secondary's copy taken and the primary's on disk for it
    assert result.namespaces == ("secondary",)
    assert result.buffered == (f"primary/{ENTITY}",)
    assert result.unanswered == ("primary",) and not result.hedged
    assert queue.count(f"primary/{ENTITY}") == 1
    assert "primary" in sender.down and hooks.named("on_failover") == []
    # And once the primary answers, the replay delivers its copy; each id delivered once
    primary.unhang()
    with anyio.fail_after(BOUND):
        while sender.backlog:
            await sender.replay()
    ids = await delivered_once(make_receiver, {"m0", "m1"})
    assert sorted(ids) == ["m0", "m1"]


async def test_an_active_sender_started_while_a_namespace_hangs_returns_within_a_second(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, primary: FaultyTransport,
    queue: DurableQueue
) -> None:
    # Given an active sender with the default deadlines, started while its primary hangs
    # (no latency known yet: the primary's deadline is the 2 s made for opening)
    primary.hang()
    sender = make_sender(mode="active", durable_queue=queue)
    # When it sends its first message
    began = anyio.current_time()
    with anyio.fail_after(BOUND):
        result = await sender.send(Message("a", message_id="m1"))
    # Then it returned within a second: the secondary took it at once, and the primary's
    # copy is on disk for it
    assert anyio.current_time() - began < 1.0
    assert result.namespaces == ("secondary",) and result.unanswered == ("primary",)
    assert result.buffered == (f"primary/{ENTITY}",)
    # And once the primary answers, nothing is lost and the id is delivered once
    primary.unhang()
    with anyio.fail_after(BOUND):
        while sender.backlog:
            await sender.replay()
    assert sorted(await delivered_once(make_receiver, {"m1"})) == ["m1"]


async def test_active_mode_without_a_queue_returns_and_says_the_copy_was_not_buffered(
    make_sender: SenderFactory, primary: FaultyTransport, caplog: pytest.LogCaptureFixture
) -> None:
    sender = make_sender(policy=FAST, mode="active")
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    with caplog.at_level(logging.WARNING, "geogateway"), anyio.fail_after(BOUND):
        result = await sender.send(Message("a", message_id="m1"))
    assert result.namespaces == ("secondary",) and result.buffered == ()
    assert result.unanswered == ("primary",)
    assert f"copy for primary/{ENTITY} not buffered" in caplog.text
    primary.unhang()


# -- recovery -------------------------------------------------------------------------


async def test_a_replay_while_a_namespace_hangs_returns_and_leaves_it_down(
    make_sender: SenderFactory, primary: FaultyTransport, queue: DurableQueue
) -> None:
    # Given an active sender that buffered a copy for its hung primary
    sender = make_sender(policy=FAST, mode="active", durable_queue=queue)
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    with anyio.fail_after(BOUND):
        await sender.send(Message("a", message_id="m1"))
    # When it replays while the primary still hangs (its probe gets no answer)
    with anyio.fail_after(BOUND):
        replayed = await sender.replay()
    # Then the replay returns: nothing sent, the copy still waits, the primary still down
    assert replayed == 0
    assert queue.count(f"primary/{ENTITY}") == 1
    assert "primary" in sender.down
    primary.unhang()


async def test_sends_after_a_hedge_go_to_the_new_active_namespace_at_once(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport
) -> None:
    sender = make_sender(policy=FAST)
    await sender.send(Message("warm", message_id="m0"))
    primary.hang()
    with anyio.fail_after(BOUND):
        await sender.send(Message("a", message_id="m1"))
        again = await sender.send(Message("b", message_id="m2"))
    # The hung primary is skipped until a probe finds it answering: no second hedge
    assert again.namespaces == ("secondary",)
    assert not again.hedged and not again.failed_over
    assert primary.calls.count("send") == 2  # the warm-up, and the hung attempt
    primary.unhang()
