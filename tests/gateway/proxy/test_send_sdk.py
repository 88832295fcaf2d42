"""Sends through the proxy with the unmodified azure-servicebus SDK: each goes through
the geo sender, and is accepted only once a namespace (or the durable queue) took it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
    ServiceBusServerBusyError,
)

from durable_queue import DurableQueue
from gateway.geo import GatewayConfig, GatewayHooks
from gateway.proxy import Proxy
from gateway.transports import LocalNamespace
from replication import ConfigError
from tests.gateway.proxy.conftest import QUEUE, client, drain_local

pytestmark = pytest.mark.anyio


async def test_sends_land_on_primary_then_secondary_when_primary_goes_down(
        proxy: Proxy, data_dir: Path) -> None:
    # Given a client of the proxy, which sends single messages and a batch
    async with client(proxy.connection_string()) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        for i in range(5):
            await sender.send_messages(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
        # When the primary namespace goes down midway
        LocalNamespace("primary", data_dir=data_dir).down()
        for i in range(5, 10):
            await sender.send_messages(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
        batch = await sender.create_message_batch()
        for i in range(10, 15):
            batch.add_message(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
        await sender.send_messages(batch)
    # Then every message arrived, with its MessageId: the first ones on the primary,
    # the rest on the secondary (the geo sender failed over)
    LocalNamespace("primary", data_dir=data_dir).up()
    primary = await drain_local(data_dir, "primary")
    secondary = await drain_local(data_dir, "secondary")
    assert primary == [f"m{i}" for i in range(5)]
    assert secondary == [f"m{i}" for i in range(5, 15)]


async def test_a_message_sent_without_an_id_gets_one(proxy: Proxy, data_dir: Path) -> None:
    async with client(proxy.connection_string()) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("no id"))
    [mid] = await drain_local(data_dir, "primary")
    assert len(mid) >= 32


async def test_a_message_too_large_for_both_namespaces_raises_what_azure_raises(
        proxy: Proxy, data_dir: Path) -> None:
    # Given a queue that takes 2000 bytes at most in both namespaces
    for name in ("primary", "secondary"):
        LocalNamespace(name, data_dir=data_dir).create_queue("small", max_message_size=2000)
    async with client(proxy.connection_string()) as c, \
            c.get_queue_sender("small", keep_alive=None) as sender:
        # When a larger message is sent, then the SDK raises as against Azure
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * 5000))
        # and the link still sends what fits
        await sender.send_messages(ServiceBusMessage("fits", message_id="ok"))
    assert await drain_local(data_dir, "primary", "small") == ["ok"]


async def test_a_client_with_the_namespaces_key_is_refused(proxy: Proxy) -> None:
    # The proxy's key is its own: a connection string with another key gets nowhere.
    wrong = proxy.connection_string().replace(
        proxy.connection_string().split("SharedAccessKey=")[1].split(";")[0], "not-the-key")
    with pytest.raises(ServiceBusAuthenticationError):
        async with client(wrong) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(ServiceBusMessage("x"))


async def test_a_send_neither_namespace_nor_a_durable_queue_took_is_not_accepted(
        config: GatewayConfig, data_dir: Path) -> None:
    # Given a proxy without a durable queue, and both namespaces down
    bare = dataclasses.replace(config, durable_queue=None)
    for name in ("primary", "secondary"):
        LocalNamespace(name, data_dir=data_dir).down()
    async with Proxy(bare, recovery=False) as proxy, client(proxy.connection_string()) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        # When a message is sent, then the SDK hears that it was not taken (server busy:
        # it may retry), not that it was accepted
        with pytest.raises(ServiceBusServerBusyError):
            await sender.send_messages(ServiceBusMessage("lost?", message_id="x"))


async def test_a_send_buffered_while_both_namespaces_are_down_is_accepted(
        proxy: Proxy, data_dir: Path, tmp_path: Path) -> None:
    # Given both namespaces down, and the durable queue of the configuration
    for name in ("primary", "secondary"):
        LocalNamespace(name, data_dir=data_dir).down()
    async with client(proxy.connection_string()) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        # When a message is sent, then it is accepted: it is on disk
        await sender.send_messages(ServiceBusMessage("later", message_id="later"))
    with DurableQueue(tmp_path / "buffer.db") as queue:
        assert [s.message.message_id for s in queue.peek(limit=10)] == ["later"]


def test_the_proxy_refuses_a_non_loopback_address_unless_insecure(config: GatewayConfig) -> None:
    with pytest.raises(ConfigError, match="--insecure"):
        Proxy(config, host="0.0.0.0")
    Proxy(config, host="0.0.0.0", insecure=True)
    Proxy(config, host="::1")


class Failovers(GatewayHooks):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.seen.append((from_namespace, to_namespace))


async def test_the_proxys_senders_report_to_its_hooks(
        config: GatewayConfig, data_dir: Path) -> None:
    hooks = Failovers()
    LocalNamespace("primary", data_dir=data_dir).down()
    async with Proxy(config, recovery=False, hooks=[hooks]) as proxy, \
            client(proxy.connection_string()) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("x", message_id="x"))
    assert hooks.seen == [("primary", "secondary")]
