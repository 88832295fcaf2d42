"""Shared access policies with Listen, Send and Manage rights, seen from the unmodified SDKs."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.exceptions import AuthenticationError, ConnectionLostError
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

from gateway.emulator import Emulator, parse_policy
from tests.gateway.emulator.conftest import HUB, QUEUE

pytestmark = pytest.mark.anyio

OTHER = "invoices"
KEY = "cG9saWN5IGtleQ=="  # base64, with the "=" padding a key may end with
POLICIES = [
    parse_policy(f"listener={KEY}:Listen"),
    parse_policy(f"sender={KEY}:Send"),
    parse_policy(f"admin={KEY}:Manage"),
    parse_policy(f"{QUEUE}/ordersonly={KEY}:Listen,Send"),
    parse_policy(f"{HUB}/hubonly={KEY}:Send"),
]


@pytest.fixture
async def emu(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE, OTHER],
                        event_hubs={HUB: 2, "other-hub": 1}, policies=POLICIES) as emu:
        yield emu


def sb(conn_str: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0, socket_timeout=0.05)


async def send(conn_str: str, queue: str = QUEUE) -> None:
    async with sb(conn_str) as c, c.get_queue_sender(queue, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("m"))


async def receive(conn_str: str, queue: str = QUEUE) -> list[str]:
    async with sb(conn_str) as c, c.get_queue_receiver(queue, max_wait_time=0.5) as r:
        got = await r.receive_messages(max_wait_time=0.5)
        for m in got:
            await r.complete_message(m)
    return [str(m) for m in got]


async def hub_send(conn_str: str, hub: str = HUB) -> None:
    async with EventHubProducerClient.from_connection_string(
            conn_str, eventhub_name=hub, retry_total=0) as producer:
        await producer.send_batch([EventData("e")], partition_id="0")


async def hub_properties(conn_str: str, hub: str = HUB) -> list[str]:
    async with EventHubConsumerClient.from_connection_string(
            conn_str, "$Default", eventhub_name=hub, retry_total=0) as consumer:
        return list(await consumer.get_partition_ids())


def refusal(exc: pytest.ExceptionInfo[ServiceBusAuthenticationError]) -> tuple[int, str]:
    """The status code and description of the $cbs refusal the SDK raised."""
    inner = exc.value.inner_exception
    return inner.status_code, str(inner.status_description)


def without_entity_path(conn_str: str) -> str:
    return ";".join(p for p in conn_str.split(";") if not p.startswith("EntityPath="))


async def test_a_listen_only_key_receives_but_cannot_send(emu: Emulator) -> None:
    await send(emu.connection_string("primary"))
    listener = emu.connection_string("primary", policy="listener")
    assert await receive(listener) == ["m"]
    # The service refuses the sender's attach: the SDK raises its authorization error.
    with pytest.raises(ServiceBusAuthorizationError, match="'Send' claim"):
        await send(listener)


async def test_a_send_only_key_sends_but_cannot_receive(emu: Emulator) -> None:
    sender = emu.connection_string("primary", policy="sender")
    await send(sender)
    # Scheduling (a $management operation) needs Send only.
    async with sb(sender) as c, c.get_queue_sender(QUEUE, keep_alive=None) as s:
        [seq] = await s.schedule_messages(ServiceBusMessage("later"), datetime.datetime.now(
            datetime.timezone.utc) + datetime.timedelta(hours=1))
        await s.cancel_scheduled_messages(seq)
    with pytest.raises(ServiceBusAuthorizationError, match="'Listen' claim"):
        await receive(sender)
    assert await receive(emu.connection_string("primary")) == ["m"]


async def test_a_manage_key_sends_and_receives(emu: Emulator) -> None:
    admin = emu.connection_string("primary", policy="admin")
    await send(admin)
    assert await receive(admin) == ["m"]
    await hub_send(admin)
    assert await hub_properties(admin) == ["0", "1"]


async def test_an_entity_level_key_opens_its_entity_only(emu: Emulator) -> None:
    orders = emu.connection_string("primary", policy="ordersonly")
    assert "EntityPath=orders" in orders
    await send(orders)
    assert await receive(orders) == ["m"]
    # Used for another queue (or an event hub), the service refuses the token itself.
    with pytest.raises(ServiceBusAuthenticationError) as info:
        await send(without_entity_path(orders), OTHER)
    assert refusal(info)[0] == 401
    with pytest.raises(AuthenticationError):
        await hub_send(without_entity_path(orders))


async def test_event_hubs_keys_are_checked_as_well(emu: Emulator) -> None:
    hub_only = without_entity_path(emu.connection_string("primary", policy="hubonly"))
    await hub_send(hub_only)
    with pytest.raises(AuthenticationError):
        await hub_send(hub_only, "other-hub")
    # A send-only key cannot read, a listen-only key cannot send.
    listener = emu.connection_string("primary", policy="listener")
    # (the SDK maps the refused attach, amqp:unauthorized-access, to ConnectionLostError)
    with pytest.raises(ConnectionLostError, match="'Send' claim"):
        await hub_send(listener)


async def test_the_default_key_keeps_every_right(emu: Emulator) -> None:
    root = emu.connection_string("primary")
    await send(root)
    assert await receive(root) == ["m"]
    await hub_send(root)
