"""The administration API, seen from the unmodified ``ServiceBusAdministrationClient``
(sync): entities created, read, updated, listed and deleted, runtime properties, errors
as the service gives them, and what it creates served over AMQP and kept on restart."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)

from gateway.emulator import Emulator, EmulatorThread, parse_policy

QUEUE = "orders"
HUB = "telemetry"
KEY = "cG9saWN5IGtleQ=="
POLICIES = [
    parse_policy(f"listener={KEY}:Listen,Send"),
    parse_policy(f"admin={KEY}:Manage"),
    parse_policy(f"{QUEUE}/ordersadmin={KEY}:Manage"),
]
SECONDS = datetime.timedelta(seconds=1)


def start(data_dir: Path) -> EmulatorThread:
    return EmulatorThread(Emulator({"primary": 0}, data_dir=data_dir, queues=[QUEUE],
                                   event_hubs={HUB: 2}, policies=POLICIES))


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Emulator]:
    with start(tmp_path) as emu:
        yield emu


def admin(emu: Emulator, policy: str | None = None, conn_str: str | None = None,
          **options: float) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        conn_str or emu.connection_string("primary", policy=policy),
        connection_verify=emu.certificate, retry_total=0, **options)


def send(emu: Emulator, entity: str, *bodies: str) -> None:
    with ServiceBusClient.from_connection_string(emu.connection_string("primary")) as sb, \
            sb.get_queue_sender(entity) as sender:  # a topic's sender is the same link
        sender.send_messages([ServiceBusMessage(b, message_id=b) for b in bodies])


def receive(emu: Emulator, entity: str, subscription: str | None = None) -> list[str]:
    with ServiceBusClient.from_connection_string(emu.connection_string("primary")) as sb:
        receiver = (sb.get_subscription_receiver(entity, subscription, max_wait_time=1)
                    if subscription else sb.get_queue_receiver(entity, max_wait_time=1))
        with receiver:
            got = receiver.receive_messages(max_message_count=10, max_wait_time=1)
            for m in got:
                receiver.complete_message(m)
    return sorted(str(m) for m in got)


def test_a_queue_is_created_read_updated_listed_and_deleted(emu):
    with admin(emu) as client:
        # When a queue is created with settings
        created = client.create_queue("invoices", lock_duration=5 * SECONDS,
                                      max_delivery_count=3,
                                      dead_lettering_on_message_expiration=True,
                                      default_message_time_to_live=3600 * SECONDS,
                                      user_metadata="billing")
        # Then the create's answer, a get and the list show them
        for q in (created, client.get_queue("invoices")):
            assert (q.name, q.lock_duration, q.max_delivery_count) == (
                "invoices", 5 * SECONDS, 3)
            assert q.dead_lettering_on_message_expiration is True
            assert q.default_message_time_to_live == 3600 * SECONDS
            assert q.user_metadata == "billing"
            assert q.requires_session is False
        assert [q.name for q in client.list_queues()] == ["invoices", QUEUE]
        # When it is updated
        q = client.get_queue("invoices")
        q.max_delivery_count, q.lock_duration, q.user_metadata = 7, 20 * SECONDS, "changed"
        client.update_queue(q)
        # Then a get shows the new settings
        again = client.get_queue("invoices")
        assert (again.max_delivery_count, again.lock_duration, again.user_metadata) == (
            7, 20 * SECONDS, "changed")
        # When it is deleted, it is gone
        client.delete_queue("invoices")
        with pytest.raises(ResourceNotFoundError):
            client.get_queue("invoices")
        assert [q.name for q in client.list_queues()] == [QUEUE]


def test_topics_subscriptions_and_rules_are_created_updated_listed_and_deleted(emu):
    with admin(emu) as client:
        # Given a topic with two subscriptions
        client.create_topic("events", default_message_time_to_live=600 * SECONDS)
        client.create_subscription("events", "all", max_delivery_count=4)
        client.create_subscription("events", "red")
        assert client.get_topic("events").default_message_time_to_live == 600 * SECONDS
        assert [t.name for t in client.list_topics()] == ["events"]
        assert [s.name for s in client.list_subscriptions("events")] == ["all", "red"]
        assert client.get_subscription("events", "all").max_delivery_count == 4
        # When "red" gets rules instead of its default one
        client.delete_rule("events", "red", "$Default")
        client.create_rule("events", "red", "colour", filter=SqlRuleFilter("color = 'red'"),
                           action=SqlRuleAction("SET seen = 1"))
        client.create_rule("events", "red", "by-id",
                           filter=CorrelationRuleFilter(correlation_id="c1",
                                                        properties={"n": 2, "s": "x"}))
        # Then the rules read back as created
        rules = {r.name: r for r in client.list_rules("events", "red")}
        assert sorted(rules) == ["by-id", "colour"]
        assert rules["colour"].filter.sql_expression == "color = 'red'"
        assert rules["colour"].action.sql_expression == "SET seen = 1"
        by_id = client.get_rule("events", "red", "by-id").filter
        assert (by_id.correlation_id, dict(by_id.properties)) == ("c1", {"n": 2, "s": "x"})
        # When a rule, a subscription and a topic are updated
        rule = client.get_rule("events", "red", "colour")
        rule.filter = SqlRuleFilter("color = 'crimson'")
        client.update_rule("events", "red", rule)
        sub = client.get_subscription("events", "all")
        sub.max_delivery_count = 9
        client.update_subscription("events", sub)
        topic = client.get_topic("events")
        topic.default_message_time_to_live = 60 * SECONDS
        client.update_topic(topic)
        # Then they read back changed
        assert client.get_rule("events", "red", "colour").filter.sql_expression == (
            "color = 'crimson'")
        assert client.get_subscription("events", "all").max_delivery_count == 9
        assert client.get_topic("events").default_message_time_to_live == 60 * SECONDS
        # When they are deleted, they are gone
        client.delete_rule("events", "red", "by-id")
        assert [r.name for r in client.list_rules("events", "red")] == ["colour"]
        client.delete_subscription("events", "red")
        assert [s.name for s in client.list_subscriptions("events")] == ["all"]
        client.delete_topic("events")
        assert list(client.list_topics()) == []
        with pytest.raises(ResourceNotFoundError):
            client.get_subscription("events", "all")


def test_runtime_properties_count_the_messages_sent(emu):
    with admin(emu) as client:
        client.create_topic("events")
        client.create_subscription("events", "all")
        before = client.get_queue_runtime_properties(QUEUE)
        assert (before.active_message_count, before.total_message_count) == (0, 0)
        # Given three messages sent, one scheduled and one of them dead-lettered
        send(emu, QUEUE, "a", "b", "c")
        with ServiceBusClient.from_connection_string(emu.connection_string("primary")) as sb:
            with sb.get_queue_sender(QUEUE) as sender:
                later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                    hours=1)
                sender.schedule_messages(ServiceBusMessage("later"), later)
            with sb.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
                [first] = receiver.receive_messages(max_message_count=1, max_wait_time=1)
                receiver.dead_letter_message(first, reason="bad")
        send(emu, "events", "x", "y")
        # When the runtime properties are read
        q = client.get_queue_runtime_properties(QUEUE)
        # Then they count each kind of message
        assert (q.active_message_count, q.dead_letter_message_count,
                q.scheduled_message_count, q.total_message_count) == (2, 1, 1, 4)
        assert q.size_in_bytes > 0
        assert q.created_at_utc <= q.updated_at_utc <= q.accessed_at_utc
        assert [r.active_message_count for r in client.list_queues_runtime_properties()] == [2]
        sub = client.get_subscription_runtime_properties("events", "all")
        assert (sub.active_message_count, sub.total_message_count) == (2, 2)
        topic = client.get_topic_runtime_properties("events")
        assert (topic.subscription_count, topic.size_in_bytes > 0) == (1, True)
        ns = client.get_namespace_properties()
        assert (ns.name, ns.messaging_sku) == ("primary", "Standard")


def test_errors_are_the_services(emu):
    with admin(emu) as client:
        # A create of what exists: 409
        with pytest.raises(ResourceExistsError):
            client.create_queue(QUEUE)
        # A delete or update of what does not exist: 404
        with pytest.raises(ResourceNotFoundError):
            client.delete_queue("nothing")
        with pytest.raises(ResourceNotFoundError):
            client.delete_subscription("nothing", "sub")
        with pytest.raises(ResourceNotFoundError):
            client.delete_queue(HUB)  # an event hub is not the API's to delete
        q = client.get_queue(QUEUE)
        q.name = "nothing"
        with pytest.raises(ResourceNotFoundError):
            client.update_queue(q)
        with pytest.raises(ResourceNotFoundError):
            client.create_subscription("no-topic", "sub")
        # A change Service Bus refuses: 400
        q = client.get_queue(QUEUE)
        q.requires_session = True
        with pytest.raises(HttpResponseError) as refused:
            client.update_queue(q)
        assert refused.value.status_code == 400
    # Without the namespace's key, or without Manage: 401
    wrong = emu.connection_string("primary").replace("SAS_KEY_VALUE", "d3Jvbmc=")
    for client in (admin(emu, conn_str=wrong), admin(emu, policy="listener")):
        with client, pytest.raises(ClientAuthenticationError):
            client.get_queue(QUEUE)
    # A policy with Manage on one entity manages that entity only
    with admin(emu, policy="ordersadmin") as client:
        assert client.get_queue(QUEUE).name == QUEUE
        with pytest.raises(ClientAuthenticationError):
            client.create_queue("other")
    # A policy with Manage on the namespace manages it all
    with admin(emu, policy="admin") as client:
        assert client.create_queue("other").name == "other"


def test_a_created_queue_is_served_over_amqp_at_once(emu):
    with admin(emu) as client:
        # When a queue and a topic with a filtered subscription are created
        client.create_queue("fresh")
        client.create_topic("news")
        client.create_subscription("news", "odd")
        client.delete_rule("news", "odd", "$Default")
        client.create_rule("news", "odd", "odd",
                           filter=SqlRuleFilter("sys.MessageId IN ('1', '3')"))
    # Then the SDK sends to and receives from them right away
    send(emu, "fresh", "m1", "m2")
    assert receive(emu, "fresh") == ["m1", "m2"]
    send(emu, "news", "1", "2", "3")
    assert receive(emu, "news", "odd") == ["1", "3"]


def test_deleting_a_queue_deletes_its_messages(emu):
    with admin(emu) as client:
        client.create_queue("doomed")
        send(emu, "doomed", "m1")
        client.delete_queue("doomed")
        client.create_queue("doomed")
        assert client.get_queue_runtime_properties("doomed").total_message_count == 0
    assert receive(emu, "doomed") == []


def test_created_and_changed_entities_survive_a_restart(tmp_path):
    # Given entities created, changed and deleted through the API, and a message kept
    with start(tmp_path) as emu, admin(emu) as client:
        client.create_queue("kept", max_delivery_count=5)
        q = client.get_queue(QUEUE)
        q.max_delivery_count = 2
        client.update_queue(q)
        client.create_topic("news")
        client.create_subscription("news", "all")
        client.create_queue("dropped")
        client.delete_queue("dropped")
        send(emu, "kept", "m1")
        created = client.get_queue_runtime_properties("kept").created_at_utc
    # When the emulator is started again on the same data directory
    with start(tmp_path) as emu, admin(emu) as client:
        # Then they are as they were left, and served
        assert [q.name for q in client.list_queues()] == ["kept", QUEUE]
        assert client.get_queue("kept").max_delivery_count == 5
        assert client.get_queue(QUEUE).max_delivery_count == 2
        assert [s.name for s in client.list_subscriptions("news")] == ["all"]
        props = client.get_queue_runtime_properties("kept")
        assert props.active_message_count == 1
        assert props.created_at_utc == created
        assert receive(emu, "kept") == ["m1"]


def test_plain_http_reaches_the_api_on_the_amqp_port(emu):
    # A request without TLS (as .NET's client sends to an emulator) is answered too
    port = emu.port("primary")
    answer = httpx.get(f"http://127.0.0.1:{port}/$Resources/queues?api-version=2021-05")
    assert answer.status_code == 401
    assert "Error" in answer.text


def test_a_namespace_down_or_hung_does_not_answer_the_api(emu, tmp_path):
    from azure.core.exceptions import ServiceRequestError, ServiceResponseError

    from gateway.transports import LocalNamespace

    namespace = LocalNamespace("primary", data_dir=tmp_path)
    timeouts = {"connection_timeout": 2, "read_timeout": 1}
    with admin(emu, **timeouts) as client:
        assert client.get_queue(QUEUE).name == QUEUE
        # When it hangs, a request on the open connection and on a new one is not answered
        namespace.hang()
        time.sleep(0.3)
        with pytest.raises(ServiceResponseError):
            client.get_queue(QUEUE)
        with admin(emu, **timeouts) as other, pytest.raises(ServiceResponseError):
            other.get_queue(QUEUE)
        # When the hang is over, it answers again
        namespace.up()
        time.sleep(0.3)
        assert client.get_queue(QUEUE).name == QUEUE
        # When it is down, requests fail at once
        namespace.down()
        time.sleep(0.3)
        with pytest.raises((ServiceRequestError, ServiceResponseError)):
            client.get_queue(QUEUE)
        namespace.up()
        time.sleep(0.3)
        assert client.get_queue(QUEUE).name == QUEUE
    namespace.close()


def test_an_update_applies_to_the_messages_served_at_once(emu):
    with admin(emu) as client:
        # Given a queue used over AMQP with 5 deliveries, then updated to 1
        client.create_queue("strict", max_delivery_count=5)
        send(emu, "strict", "warm-up")
        assert receive(emu, "strict") == ["warm-up"]
        q = client.get_queue("strict")
        q.max_delivery_count = 1
        client.update_queue(q)
        # When a message is abandoned once
        send(emu, "strict", "m1")
        with ServiceBusClient.from_connection_string(emu.connection_string("primary")) as sb, \
                sb.get_queue_receiver("strict", max_wait_time=1) as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=1)
            receiver.abandon_message(m)
        # Then it is dead-lettered, as the new setting says
        props = client.get_queue_runtime_properties("strict")
        assert (props.active_message_count, props.dead_letter_message_count) == (0, 1)
