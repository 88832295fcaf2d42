"""The proxy's shared access policies (Listen, Send, Manage; on the proxy or one queue),
checked as the emulator and the service check them, seen from the unmodified SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
)

from gateway.amqp.server import parse_policy
from gateway.geo import GatewayConfig
from gateway.proxy import Proxy
from replication import ConfigError
from tests.gateway.proxy.conftest import QUEUE, client, drain_local

pytestmark = pytest.mark.anyio

OTHER = "invoices"
KEY = "cHJveHkgcG9saWN5IGtleQ=="  # base64, with the "=" padding a key may end with
POLICIES = [
    parse_policy(f"listener={KEY}:Listen"),
    parse_policy(f"sender={KEY}:Send"),
    parse_policy(f"admin={KEY}:Manage"),
    parse_policy(f"{QUEUE}/ordersonly={KEY}:Listen,Send"),
]


@pytest.fixture
async def proxy(config: GatewayConfig) -> AsyncIterator[Proxy]:
    async with Proxy(config, recovery=False, policies=POLICIES) as p:
        yield p


async def send(conn_str: str, queue: str = QUEUE, mid: str = "m") -> None:
    async with client(conn_str) as c, c.get_queue_sender(queue, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage(mid, message_id=mid))


async def receive(conn_str: str) -> list[str]:
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE, max_wait_time=1) as r:
        got = await r.receive_messages(max_wait_time=1)
        for m in got:
            await r.complete_message(m)
    return [str(m) for m in got]


def without_entity_path(conn_str: str) -> str:
    return ";".join(p for p in conn_str.split(";") if not p.startswith("EntityPath="))


async def test_a_listen_only_key_receives_but_cannot_send(proxy: Proxy) -> None:
    await send(proxy.connection_string())
    listener = proxy.connection_string(policy="listener")
    assert await receive(listener) == ["m"]
    # The sender's attach is refused as the service refuses it.
    with pytest.raises(ServiceBusAuthorizationError, match="'Send' claim"):
        await send(listener, mid="refused")


async def test_a_send_only_key_sends_but_cannot_receive(proxy: Proxy, data_dir: Path) -> None:
    await send(proxy.connection_string(policy="sender"))
    with pytest.raises(ServiceBusAuthorizationError, match="'Listen' claim"):
        await receive(proxy.connection_string(policy="sender"))
    assert await drain_local(data_dir, "primary") == ["m"]


async def test_a_manage_key_sends_and_receives(proxy: Proxy) -> None:
    admin = proxy.connection_string(policy="admin")
    await send(admin)
    assert await receive(admin) == ["m"]


async def test_an_entity_level_key_opens_its_queue_only(proxy: Proxy, data_dir: Path) -> None:
    orders = proxy.connection_string(policy="ordersonly")
    assert "EntityPath=orders" in orders
    await send(orders)
    assert await receive(orders) == ["m"]
    # Used for another queue, the token itself is refused on $cbs.
    with pytest.raises(ServiceBusAuthenticationError):
        await send(without_entity_path(orders), OTHER)
    assert await drain_local(data_dir, "primary", OTHER) == []


async def test_two_policies_of_one_name_on_one_scope_are_refused(
        config: GatewayConfig) -> None:
    with pytest.raises(ConfigError, match="two policies of one name"):
        Proxy(config, recovery=False, policies=[parse_policy(f"a={KEY}:Send"),
                                                parse_policy(f"a={KEY}:Listen")])
