"""Topics and subscriptions of the local namespace: fan-out, rules, and each subscription
working as a queue (peek-lock, lock expiry, delivery count, dead letters)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.transports import (
    CorrelationFilter,
    EntityKind,
    FalseFilter,
    LocalNamespace,
    LocalTransport,
    Rule,
    SqlFilter,
    SqlRuleAction,
)
from replication import ConfigError, Message, MessageRejected
from tests.conftest import FakeClock

pytestmark = pytest.mark.anyio

AUDIT, BILLING = "orders/Subscriptions/audit", "orders/Subscriptions/billing"


@pytest.fixture
def topic(namespace: LocalNamespace) -> LocalNamespace:
    namespace.create_topic("orders")
    namespace.create_subscription("orders", "audit", lock_duration=10, max_delivery_count=2)
    namespace.create_subscription("orders", "billing", rules=[
        Rule(name="paid", filter=SqlFilter("amount > 0 AND sys.MessageId LIKE 'o-%'"))])
    return namespace


async def received(transport: LocalTransport, entity: str) -> list[str]:
    got = await transport.receive(entity, max_messages=100)
    for r in got:
        await transport.complete(r)
    return [r.message_id for r in got]


async def test_a_message_sent_to_a_topic_reaches_every_subscription_that_selects_it(
        topic: LocalNamespace, transport: LocalTransport) -> None:
    # Given a topic with a subscription for everything and one for paid orders
    # When three messages are sent to the topic
    await transport.send("orders", [
        Message(b"1", message_id="o-1", properties={"amount": 5}),
        Message(b"2", message_id="o-2", properties={"amount": 0}),
        Message(b"3", message_id="x-3", properties={"amount": 7}),
    ])
    # Then each subscription has its own copy of what its rules select, in order
    assert await received(transport, AUDIT) == ["o-1", "o-2", "x-3"]
    assert await received(transport, BILLING) == ["o-1"]
    assert await received(transport, AUDIT) == []
    kinds = {i.name: i.kind for i in topic.entities()}
    assert kinds == {"orders": EntityKind.TOPIC, AUDIT: EntityKind.SUBSCRIPTION,
                     BILLING: EntityKind.SUBSCRIPTION}


async def test_each_subscription_is_a_queue_of_its_own(
        topic: LocalNamespace, transport: LocalTransport, clock: FakeClock) -> None:
    # Given one message in both subscriptions
    await transport.send("orders", [Message(b"1", message_id="o-1", properties={"amount": 1})])
    [a] = await transport.receive(AUDIT)
    [b] = await transport.receive(BILLING)
    assert (a.entity, b.entity) == (AUDIT, BILLING)

    # When audit's lock expires and billing's copy is completed
    await transport.complete(b)
    clock.advance(11)

    # Then audit's copy comes back with a higher delivery count, and its old lock is lost
    [again] = await transport.receive(AUDIT)
    assert (again.message_id, again.delivery_count) == ("o-1", 2)
    with pytest.raises(MessageRejected, match="lock lost"):
        await transport.complete(a)
    # And its last allowed delivery abandoned moves it to audit's own dead-letter queue
    await transport.abandon(again)
    assert await transport.receive(AUDIT) == []
    [dead] = await transport.receive(AUDIT + "/$DeadLetterQueue")
    assert dead.message.properties["DeadLetterReason"] == "MaxDeliveryCountExceeded"
    assert await transport.receive(BILLING + "/$DeadLetterQueue") == []
    counts = {i.name: (i.active_count, i.dead_letter_count) for i in topic.entities()}
    assert counts[AUDIT] == (0, 1) and counts[BILLING] == (0, 0)


async def test_a_subscription_dead_letters_on_request(
        topic: LocalNamespace, transport: LocalTransport) -> None:
    await transport.send("orders", [Message(b"1", message_id="o-1", properties={"amount": 1})])
    [r] = await transport.receive("orders/subscriptions/billing")  # any case of the segment
    await transport.dead_letter(r, reason="Bad", description="no customer")
    [dead] = await transport.receive("orders/subscriptions/billing/$deadletterqueue")
    assert dead.entity == BILLING + "/$DeadLetterQueue"
    assert dead.message.properties["DeadLetterReason"] == "Bad"


async def test_actions_change_their_copy_only(namespace: LocalNamespace,
                                              transport: LocalTransport) -> None:
    # Given a subscription whose rule doubles a property and tags the copy
    namespace.create_topic("t")
    namespace.create_subscription("t", "plain")
    namespace.create_subscription("t", "tagged", rules=[
        Rule(name="vip", filter=CorrelationFilter(properties={"tier": "gold"}),
             action=SqlRuleAction("SET n = n * 2; SET sys.PartitionKey = 'p'; REMOVE tier"))])
    # When a matching and a non-matching message are sent
    await transport.send("t", [Message(b"1", message_id="m1", properties={"tier": "gold", "n": 2}),
                               Message(b"2", message_id="m2", properties={"tier": "tin"})])
    # Then the tagged copy is changed and named by its rule; the plain one is as sent
    [tagged] = await transport.receive("t/Subscriptions/tagged", max_messages=5)
    assert tagged.message_id == "m1" and tagged.message.partition_key == "p"
    assert dict(tagged.message.properties) == {"n": 4, "RuleName": "vip"}
    plain = await transport.receive("t/Subscriptions/plain", max_messages=5)
    assert [dict(r.message.properties) for r in plain] == [{"tier": "gold", "n": 2},
                                                           {"tier": "tin"}]


async def test_a_system_property_set_on_a_local_message_is_logged(
        namespace: LocalNamespace, transport: LocalTransport,
        caplog: pytest.LogCaptureFixture) -> None:
    namespace.create_topic("t")
    namespace.create_subscription("t", "s", rules=[
        Rule(name="to", action=SqlRuleAction("SET sys.To = 'x'"))])
    await transport.send("t", [Message(b"1"), Message(b"2")])
    assert len(await transport.receive("t/Subscriptions/s", max_messages=5)) == 2
    warnings = [r for r in caplog.records if "sets sys.To" in r.getMessage()]
    assert len(warnings) == 1  # once per rule, not per message


async def test_a_topic_without_a_matching_subscription_drops_the_message(
        namespace: LocalNamespace, transport: LocalTransport) -> None:
    namespace.create_topic("t")
    await transport.send("t", [Message(b"nobody listens")])
    namespace.create_subscription("t", "never", rules=[Rule(name="no", filter=FalseFilter())])
    namespace.create_subscription("t", "late")
    await transport.send("t", [Message(b"x", message_id="after")])
    assert await received(transport, "t/Subscriptions/never") == []
    # A subscription made later (by any process) gets what is sent after it.
    assert await received(transport, "t/Subscriptions/late") == ["after"]


async def test_default_time_to_live_of_a_topic_and_a_subscription(
        namespace: LocalNamespace, transport: LocalTransport, clock: FakeClock) -> None:
    namespace.create_topic("t", default_message_time_to_live=60)
    namespace.create_subscription("t", "keep")
    namespace.create_subscription("t", "short", default_message_time_to_live=10,
                                  dead_lettering_on_message_expiration=True)
    await transport.send("t", [Message(b"1", message_id="m")])
    clock.advance(11)
    assert await received(transport, "t/Subscriptions/short") == []
    [dead] = await transport.receive("t/Subscriptions/short/$DeadLetterQueue")
    assert dead.message.properties["DeadLetterReason"] == "TTLExpiredException"
    assert await received(transport, "t/Subscriptions/keep") == ["m"]
    await transport.send("t", [Message(b"2", message_id="n")])
    clock.advance(61)
    assert await received(transport, "t/Subscriptions/keep") == []


async def test_forwarding_from_a_subscription_and_a_queue(
        namespace: LocalNamespace, transport: LocalTransport) -> None:
    namespace.create_queue("archive")
    namespace.create_queue("inbox", forward_to="t")
    namespace.create_topic("t")
    namespace.create_subscription("t", "fwd", forward_to="archive")
    await transport.send("inbox", [Message(b"1", message_id="m")])
    assert await received(transport, "t/Subscriptions/fwd") == []
    assert await received(transport, "inbox") == []
    assert await received(transport, "archive") == ["m"]


async def test_mistakes_are_named(namespace: LocalNamespace, transport: LocalTransport) -> None:
    namespace.create_topic("t")
    namespace.create_subscription("t", "s")
    with pytest.raises(ConfigError, match="no topic 'nope'"):
        namespace.create_subscription("nope", "s")
    with pytest.raises(ConfigError, match="other options"):
        namespace.create_subscription("t", "s", rules=[Rule(name="r", filter=FalseFilter())])
    with pytest.raises(ConfigError, match="other settings"):
        namespace.create_subscription("t", "s", lock_duration=5)
    with pytest.raises(ConfigError, match=r"rule 'r': SQL filter: .* character 4"):
        namespace.create_subscription("t", "bad", rules=[Rule(name="r", filter=SqlFilter("a ="))])
    with pytest.raises(ConfigError, match="two rules of one name"):
        namespace.create_subscription("t", "two", rules=[Rule(name="r"), Rule(name="r")])
    with pytest.raises(MessageRejected, match="send to its topic 't'"):
        await transport.send("t/subscriptions/s", [Message(b"x")])
    with pytest.raises(MessageRejected, match="is a topic: receive from one of its"):
        await transport.receive("t")
    # A subscription is never made on first use, as a queue is.
    with pytest.raises(MessageRejected, match="no such entity 't/Subscriptions/other'"):
        await transport.receive("t/Subscriptions/other")
    assert namespace.rules("t/subscriptions/s") == (Rule(),)


async def test_an_older_namespace_file_gets_the_new_table(tmp_path: Path) -> None:
    # Given a namespace file of the schema before topics
    ns = LocalNamespace("old", data_dir=tmp_path)
    ns.create_queue("q")
    ns.close()
    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute("DROP TABLE entity_options")
        conn.execute("PRAGMA user_version=2")
    # When it is opened again, a topic can be made in it
    ns = LocalNamespace("old", data_dir=tmp_path)
    ns.create_topic("t")
    assert {i.name for i in ns.entities()} == {"q", "t"}
    ns.close()


async def test_duplicate_detection_drops_an_id_taken_within_the_window(
        namespace: LocalNamespace, transport: LocalTransport, clock: FakeClock) -> None:
    # Given a queue and a topic that detect duplicates over 60 s
    namespace.create_queue("q", duplicate_detection_window=60)
    namespace.create_topic("t", duplicate_detection_window=60)
    namespace.create_subscription("t", "s")
    for entity, source in (("q", "q"), ("t", "t/Subscriptions/s")):
        # When an id is sent again within the window (also twice in one batch), and
        # once more after it
        first = [Message(b"1", message_id="a"), Message(b"2", message_id="b")]
        again = [Message(b"3", message_id="a"), Message(b"4", message_id="c"),
                 Message(b"5", message_id="c")]
        await transport.send(entity, first)
        await transport.send(entity, again)
        clock.advance(61)
        await transport.send(entity, [Message(b"6", message_id="a")])
        # Then only the first copy within the window is kept, and the send succeeds
        got = await transport.receive(source, max_messages=10)
        assert [r.body for r in got] == [b"1", b"2", b"4", b"6"]
        for r in got:
            await transport.complete(r)
