"""The administration API, seen from the unmodified async ``ServiceBusAdministrationClient``
(``azure.servicebus.aio.management``, over aiohttp)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.aio.management import ServiceBusAdministrationClient
from azure.servicebus.management import SqlRuleFilter

from gateway.emulator import Emulator, parse_policy

pytestmark = pytest.mark.anyio

QUEUE = "orders"
KEY = "cG9saWN5IGtleQ=="
SECONDS = datetime.timedelta(seconds=1)


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE],
                        policies=[parse_policy(f"sender={KEY}:Send")]) as emu:
        yield emu


def admin(emu: Emulator, policy: str | None = None) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        emu.connection_string("primary", policy=policy), connection_verify=emu.certificate,
        retry_total=0)


async def names(pages) -> list[str]:
    return [item.name async for item in pages]


async def test_each_kind_is_created_read_updated_listed_and_deleted(emu):
    async with admin(emu) as client:
        # Given a queue, a topic, a subscription and a rule created
        await client.create_queue("invoices", max_delivery_count=3)
        await client.create_topic("events")
        await client.create_subscription("events", "all", lock_duration=10 * SECONDS)
        await client.create_rule("events", "all", "red", filter=SqlRuleFilter("color = 'red'"))
        # Then they are read and listed
        assert (await client.get_queue("invoices")).max_delivery_count == 3
        assert await names(client.list_queues()) == ["invoices", QUEUE]
        assert await names(client.list_topics()) == ["events"]
        assert await names(client.list_subscriptions("events")) == ["all"]
        assert await names(client.list_rules("events", "all")) == ["$Default", "red"]
        # When each is updated
        q = await client.get_queue("invoices")
        q.max_delivery_count = 8
        await client.update_queue(q)
        t = await client.get_topic("events")
        t.default_message_time_to_live = 30 * SECONDS
        await client.update_topic(t)
        s = await client.get_subscription("events", "all")
        s.lock_duration = 20 * SECONDS
        await client.update_subscription("events", s)
        r = await client.get_rule("events", "all", "red")
        r.filter = SqlRuleFilter("color = 'blue'")
        await client.update_rule("events", "all", r)
        # Then the changes read back
        assert (await client.get_queue("invoices")).max_delivery_count == 8
        assert (await client.get_topic("events")).default_message_time_to_live == 30 * SECONDS
        assert (await client.get_subscription("events", "all")).lock_duration == 20 * SECONDS
        assert (await client.get_rule("events", "all", "red")).filter.sql_expression == (
            "color = 'blue'")
        # When each is deleted, it is gone
        await client.delete_rule("events", "all", "red")
        await client.delete_subscription("events", "all")
        await client.delete_topic("events")
        await client.delete_queue("invoices")
        assert await names(client.list_queues()) == [QUEUE]
        assert await names(client.list_topics()) == []
        with pytest.raises(ResourceNotFoundError):
            await client.get_queue("invoices")


async def test_runtime_properties_and_errors(emu):
    async with admin(emu) as client:
        await client.create_queue("fresh")
        # A queue created is used over AMQP at once, and its counts follow
        async with ServiceBusClient.from_connection_string(
                emu.connection_string("primary")) as sb, sb.get_queue_sender("fresh") as s:
            await s.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        props = await client.get_queue_runtime_properties("fresh")
        assert (props.active_message_count, props.total_message_count) == (2, 2)
        # 409, 404
        with pytest.raises(ResourceExistsError):
            await client.create_queue("fresh")
        with pytest.raises(ResourceNotFoundError):
            await client.delete_topic("nothing")
    # 401: a policy without Manage
    async with admin(emu, policy="sender") as client:
        with pytest.raises(ClientAuthenticationError):
            await client.get_queue(QUEUE)
