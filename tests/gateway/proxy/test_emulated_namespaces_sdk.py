"""The proxy in front of emulated namespaces: its geo sender and receivers use the
Service Bus SDK transport behind it, as they would in front of Azure."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from gateway.emulator import Emulator
from gateway.geo import GatewayConfig
from gateway.proxy import Proxy
from gateway.transports import LocalNamespace, LocalTransport
from replication import Message
from tests.gateway.proxy.conftest import QUEUE, client, drain_local

pytestmark = pytest.mark.anyio


@pytest.fixture
async def emulated(data_dir: Path, tmp_path: Path) -> AsyncIterator[GatewayConfig]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=data_dir,
                        queues=[QUEUE]) as emu:
        yield GatewayConfig.load(env={}, overrides={
            "primary": emu.connection_string("primary"),
            "secondary": emu.connection_string("secondary"), "entity": QUEUE,
            "data_dir": str(data_dir), "state_dir": str(tmp_path / "state"),
            "durable_queue": {"path": str(tmp_path / "buffer.db")},
        })


async def test_sends_fail_over_between_emulated_namespaces(
        emulated: GatewayConfig, data_dir: Path) -> None:
    async with Proxy(emulated, recovery=False) as proxy, \
            client(proxy.connection_string()) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        # Given sends through the proxy to the emulated primary
        for i in range(3):
            await sender.send_messages(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
        # When the primary goes down (the emulator closes its connections)
        LocalNamespace("primary", data_dir=data_dir).down()
        await asyncio.sleep(0.3)  # the emulator looks at the control file every 0.1 s
        for i in range(3, 6):
            await sender.send_messages(ServiceBusMessage(f"m{i}", message_id=f"m{i}"))
    # Then nothing is lost: the first ones are on the primary, the rest on the secondary
    LocalNamespace("primary", data_dir=data_dir).up()
    primary = await drain_local(data_dir, "primary")
    secondary = await drain_local(data_dir, "secondary")
    assert primary == ["m0", "m1", "m2"]
    assert secondary == ["m3", "m4", "m5"]


async def test_copies_in_both_emulated_namespaces_are_received_once(
        emulated: GatewayConfig, data_dir: Path) -> None:
    # Given three messages, each in both namespaces with the same id
    for name in ("primary", "secondary"):
        async with LocalTransport(name, data_dir=data_dir) as local:
            await local.send(QUEUE, [Message(f"b{i}", message_id=f"m{i}") for i in range(3)])
    # When a client receives through the proxy (the SDK transport reads the emulator)
    got: list[str] = []
    async with Proxy(emulated, recovery=False) as proxy, \
            client(proxy.connection_string()) as c, \
            c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
        # (the first receive waits while the geo receiver opens its SDK connections)
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            for m in await receiver.receive_messages(max_message_count=10, max_wait_time=0.5):
                got.append(m.message_id)
                await receiver.complete_message(m)
        # and one more look finds no second copy
        extra = await receiver.receive_messages(max_message_count=10, max_wait_time=0.5)
    # Then each came once
    assert sorted(got) == ["m0", "m1", "m2"] and extra == []
