"""The receiver while one namespace hangs: it keeps delivering from the other, reports
the hung one down, bounds settlements there by their deadline, and takes two hung
namespaces for an outage, never for an empty queue.

The hung namespace is a real local one behind ``FaultyTransport.hang()``. Calls that
would wait on it for ever run under ``anyio.fail_after``.
"""

from __future__ import annotations

import logging

import anyio
import pytest

from gateway.transports import FaultyTransport
from replication import DeadlinePolicy, Message, NamespaceUnavailable, OperationTimeout
from tests.gateway.conftest import Namespaces, ReceiverFactory, Recorder, wait_for

pytestmark = pytest.mark.anyio

FAST = DeadlinePolicy(floor=0.2, ceiling=0.4, initial=0.4)
BOUND = 10.0


async def receive_ids(receiver, want: set[str]) -> list:
    """Receive (without settling) until the ids of ``want`` came; the messages."""
    got: list = []
    with anyio.fail_after(BOUND):
        while not want <= {m.message_id for m in got}:
            got += await receiver.receive(max_messages=10, max_wait=0.1)
    return got


async def test_a_hung_namespace_is_reported_down_and_the_other_still_delivers(
    make_receiver: ReceiverFactory, ns: Namespaces, primary: FaultyTransport,
    hooks: Recorder
) -> None:
    # Given a message in each namespace, and a primary that hangs
    await ns.put("primary", Message("p", message_id="m-primary"))
    await ns.put("secondary", Message("s", message_id="m-secondary"))
    primary.hang()
    receiver = await make_receiver(primary=primary, deadlines=FAST, hooks=hooks)
    # When the receiver reads / Then the secondary's message is delivered
    [got] = await receive_ids(receiver, {"m-secondary"})
    with anyio.fail_after(BOUND):
        await receiver.complete(got)
    # And the hung primary is reported down, with the unknown outcome as its error
    await wait_for(lambda: "primary" in receiver.down)
    [down] = hooks.named("on_namespace_down")
    assert down["namespace"] == "primary" and isinstance(down["error"], OperationTimeout)
    # When the primary answers again / Then it is up, and its message is delivered
    primary.unhang()
    [late] = await receive_ids(receiver, {"m-primary"})
    assert late.namespace == "primary"
    assert "primary" not in receiver.down
    assert [e["namespace"] for e in hooks.named("on_namespace_up")] == ["primary"]


async def test_a_settlement_on_a_hung_namespace_is_bounded_and_reported(
    make_receiver: ReceiverFactory, ns: Namespaces, primary: FaultyTransport,
    caplog: pytest.LogCaptureFixture
) -> None:
    # Given a message received from the primary, which then hangs
    await ns.put("primary", Message("p", message_id="m1"))
    receiver = await make_receiver(primary=primary, deadlines=FAST)
    [first] = await receive_ids(receiver, {"m1"})
    primary.hang()
    await ns.put("secondary", Message("s", message_id="m2"))
    # When the caller completes it
    with caplog.at_level(logging.WARNING, "geogateway"), anyio.fail_after(BOUND):
        await receiver.complete(first)
    # Then complete() returned: the settlement is given up at its deadline and reported
    assert receiver.stats.unsettled == 1
    assert "could not complete m1 on primary" in caplog.text
    # And the secondary's messages are still delivered and settled
    [second] = await receive_ids(receiver, {"m2"})
    with anyio.fail_after(BOUND):
        await receiver.complete(second)
    assert receiver.stats.completed == 2
    primary.unhang()


async def test_a_dead_letter_on_a_hung_namespace_raises_operation_timeout(
    make_receiver: ReceiverFactory, ns: Namespaces, primary: FaultyTransport
) -> None:
    await ns.put("primary", Message("p", message_id="m1"))
    receiver = await make_receiver(primary=primary, deadlines=FAST)
    [message] = await receive_ids(receiver, {"m1"})
    primary.hang()
    with anyio.fail_after(BOUND), pytest.raises(OperationTimeout, match="primary"):
        await receiver.dead_letter(message, reason="bad")
    primary.unhang()


async def test_two_hung_namespaces_are_an_outage_not_an_empty_queue(
    make_receiver: ReceiverFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport
) -> None:
    # Given both namespaces hang
    primary.hang()
    secondary.hang()
    receiver = await make_receiver(primary=primary, secondary=secondary, deadlines=FAST)
    # When the receiver is asked for messages / Then it raises, once both deadlines passed
    with anyio.fail_after(BOUND), pytest.raises(NamespaceUnavailable):
        while True:
            assert await receiver.receive(max_wait=0.1) == []
    assert receiver.down == {"primary", "secondary"}
    primary.unhang()
    secondary.unhang()
