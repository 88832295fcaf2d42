"""ServiceBusTransport on topics, against the emulator: send to ``TOPIC``, receive and
settle on ``TOPIC/Subscriptions/SUB`` and its dead-letter queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.emulator import Emulator, SubscriptionSpec, TopicSpec
from gateway.transports import Rule, SqlFilter
from gateway.transports.servicebus import ServiceBusTransport
from replication import Message, MessageRejected

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sb(tmp_path: Path) -> AsyncIterator[ServiceBusTransport]:
    topic = TopicSpec(name="orders", subscriptions=(
        SubscriptionSpec(name="all"),
        SubscriptionSpec(name="big", rules=(Rule(name="big", filter=SqlFilter("n >= 10")),))))
    async with Emulator({"primary": 0}, data_dir=tmp_path, topics=[topic]) as emu, \
            ServiceBusTransport.from_connection_string(
                emu.connection_string("primary"), name="primary") as transport:
        yield transport


async def test_send_to_a_topic_and_settle_on_its_subscriptions(sb: ServiceBusTransport) -> None:
    # Given messages sent to the topic
    await sb.send("orders", [Message(b"a", message_id="a", properties={"n": 1}),
                             Message(b"b", message_id="b", properties={"n": 12})])
    # When each subscription is read (the path's segment in any case)
    every = await sb.receive("orders/subscriptions/all", max_messages=5, max_wait=2)
    [big] = await sb.receive("orders/Subscriptions/big", max_messages=5, max_wait=2)
    # Then each holds its copies, settled on their own
    assert [r.message_id for r in every] == ["a", "b"]
    assert big.message_id == "b" and dict(big.message.properties) == {"n": 12}
    await sb.complete(every[0])
    await sb.abandon(every[1])
    [again] = await sb.receive("orders/subscriptions/all", max_wait=2)
    assert (again.message_id, again.delivery_count) == ("b", 2)
    await sb.dead_letter(big, reason="too-big")
    [dead] = await sb.receive("orders/Subscriptions/big/$DeadLetterQueue", max_wait=2)
    assert dead.message.properties["DeadLetterReason"] == "too-big"
    for r in (again, dead):
        await sb.complete(r)
    assert await sb.receive("orders/Subscriptions/all", max_wait=0.3) == []


async def test_a_subscription_that_does_not_exist_is_rejected(sb: ServiceBusTransport) -> None:
    with pytest.raises(MessageRejected, match="none"):
        await sb.receive("orders/Subscriptions/none", max_wait=0.5)
