"""Topics and subscriptions, served to the unmodified azure-servicebus SDK: fan-out,
correlation and SQL filters, actions, and each subscription's peek-lock and dead letters."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    ServiceBusAuthenticationError,
    ServiceBusError,
)

from gateway.emulator import Emulator, SubscriptionSpec, TopicSpec
from gateway.transports import (
    CorrelationFilter,
    LocalTransport,
    Rule,
    SqlFilter,
    SqlRuleAction,
)
from replication import Message

pytestmark = pytest.mark.anyio

TOPIC = "orders"
RULES = {
    "all": (),
    "red": (Rule(name="red", filter=SqlFilter(
        "color = 'red' AND (quantity > 10 OR sys.Label LIKE 'rush%') AND region NOT IN ('x')"),
        action=SqlRuleAction("SET sys.To = 'red-desk'; SET handled = TRUE; REMOVE region")),),
    "corr": (Rule(name="corr", filter=CorrelationFilter(
        correlation_id="c1", content_type="application/json", properties={"tenant": "a"})),),
}


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    topic = TopicSpec(name=TOPIC, subscriptions=tuple(
        SubscriptionSpec(name=name, rules=rules, lock_duration=5, max_delivery_count=2)
        for name, rules in RULES.items()))
    async with Emulator({"primary": 0}, data_dir=tmp_path / "data", topics=[topic]) as emu:
        yield emu


def client(emulator: Emulator) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(
        emulator.connection_string("primary"), retry_total=0, socket_timeout=0.05)


async def send(emulator: Emulator, *messages: ServiceBusMessage) -> None:
    async with client(emulator) as c, c.get_topic_sender(TOPIC, keep_alive=None) as sender:
        await sender.send_messages(list(messages))


async def drain(emulator: Emulator, subscription: str, count: int) -> list:
    """Receive and complete ``count`` messages (or what came within 3 s)."""
    async with client(emulator) as c, c.get_subscription_receiver(
            TOPIC, subscription, max_wait_time=3) as r:
        got: list = []
        while len(got) < count:
            more = await r.receive_messages(max_message_count=count - len(got),
                                            max_wait_time=3)
            if not more:
                break
            got += more
        for m in got:
            await r.complete_message(m)
    return got


async def test_the_sdk_sends_to_a_topic_and_each_subscription_gets_what_its_rules_select(
        emulator: Emulator) -> None:
    # Given a topic with a subscription for all, one with a SQL rule and action, and
    # one with a correlation filter
    # When the SDK sends four messages to the topic
    await send(
        emulator,
        ServiceBusMessage("1", message_id="m1", subject="rush order",
                          application_properties={"color": "red", "quantity": 2,
                                                  "region": "eu"}),
        ServiceBusMessage("2", message_id="m2", application_properties={
            "color": "red", "quantity": 5}),
        ServiceBusMessage("3", message_id="m3", correlation_id="c1",
                          content_type="application/json", application_properties={
                              "tenant": "a"}),
        ServiceBusMessage("4", message_id="m4", correlation_id="c1",
                          content_type="application/json", application_properties={
                              "tenant": "b"}),
    )
    # Then each subscription's receiver gets its own copies, in order
    assert [m.message_id for m in await drain(emulator, "all", 4)] == ["m1", "m2", "m3", "m4"]
    [red] = await drain(emulator, "red", 1)
    assert (red.message_id, red.to, red.subject) == ("m1", "red-desk", "rush order")
    assert red.application_properties == {b"color": b"red", b"quantity": 2,
                                          b"handled": True, b"RuleName": b"red"}
    [corr] = await drain(emulator, "corr", 1)
    assert (corr.message_id, corr.correlation_id, corr.content_type) == (
        "m3", "c1", "application/json")
    assert corr.application_properties == {b"tenant": b"a"}  # no action: as sent


async def test_a_subscription_has_its_own_locks_and_dead_letter_queue(
        emulator: Emulator) -> None:
    await send(emulator, ServiceBusMessage("x", message_id="m1"))
    async with client(emulator) as c:
        async with c.get_subscription_receiver(TOPIC, "all", max_wait_time=1) as r:
            # The first delivery is abandoned, the second renewed then dead-lettered
            [first] = await r.receive_messages(max_wait_time=1)
            await r.abandon_message(first)
            [second] = await r.receive_messages(max_wait_time=1)
            assert second.delivery_count == 1
            assert await r.renew_message_lock(second) > datetime.datetime.now(
                datetime.timezone.utc)
            await r.dead_letter_message(second, reason="Bad", error_description="no order")
            with pytest.raises(MessageAlreadySettled):
                await r.complete_message(second)
        async with c.get_subscription_receiver(
                TOPIC, "all", sub_queue=ServiceBusSubQueue.DEAD_LETTER, max_wait_time=1) as dlq:
            [dead] = await dlq.receive_messages(max_wait_time=1)
            assert (dead.message_id, dead.dead_letter_reason) == ("m1", "Bad")
            assert dead.dead_letter_source == f"{TOPIC}/Subscriptions/all"
            await dlq.complete_message(dead)
        async with c.get_subscription_receiver(TOPIC, "red", max_wait_time=1) as other:
            assert await other.peek_messages(5) == []  # no rule of "red" selected it


async def test_local_and_sdk_share_a_topic(emulator: Emulator, tmp_path: Path) -> None:
    # A message sent through local:// is read by the SDK, and one the SDK sent by local://
    async with LocalTransport("primary", data_dir=tmp_path / "data") as local:
        await local.send(TOPIC, [Message(b"from local", message_id="l1",
                                         properties={"color": "red", "quantity": 50,
                                                     "region": "us"})])
        await send(emulator, ServiceBusMessage("from sdk", message_id="s1"))
        got = await local.receive(f"{TOPIC}/Subscriptions/all", max_messages=5)
        assert [r.message_id for r in got] == ["l1", "s1"]
        for r in got:
            await local.complete(r)
    [red] = await drain(emulator, "red", 1)
    assert (red.message_id, str(red)) == ("l1", "from local")
    assert red.application_properties[b"handled"] is True


async def test_what_a_topic_cannot_do_is_refused(emulator: Emulator) -> None:
    async with client(emulator) as c:
        # A missing subscription: the service refuses the token for it (404).
        with pytest.raises(ServiceBusAuthenticationError) as info:
            async with c.get_subscription_receiver(TOPIC, "nope", max_wait_time=0.5) as r:
                await r.receive_messages(max_wait_time=0.5)
        assert info.value.inner_exception.status_code == 404
        with pytest.raises(ServiceBusError, match="is a topic: receive from one of its"):
            async with c.get_queue_receiver(TOPIC, max_wait_time=0.5) as r:
                await r.receive_messages(max_wait_time=0.5)
        with pytest.raises(ServiceBusError, match="is a subscription: send to its topic"):
            async with c.get_queue_sender(f"{TOPIC}/Subscriptions/all") as s:
                await s.send_messages(ServiceBusMessage("x"))
        with pytest.raises(ServiceBusError, match="scheduled_enqueue_time_utc"):
            async with c.get_topic_sender(TOPIC) as s:
                await s.schedule_messages(ServiceBusMessage("x"), datetime.datetime.now(
                    datetime.timezone.utc) + datetime.timedelta(minutes=1))


async def test_a_scheduled_message_waits_in_every_subscription(emulator: Emulator) -> None:
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    await send(emulator, ServiceBusMessage("x", message_id="later",
                                           scheduled_enqueue_time_utc=later))
    async with client(emulator) as c, c.get_subscription_receiver(
            TOPIC, "all", max_wait_time=0.3) as r:
        assert await r.receive_messages(max_wait_time=0.3) == []
        [peeked] = await r.peek_messages(5)
        assert peeked.message_id == "later"
        assert abs((peeked.scheduled_enqueue_time_utc - later).total_seconds()) < 1
