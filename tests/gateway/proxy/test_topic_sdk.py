"""A topic and its subscription through the proxy with the unmodified azure-servicebus
SDK: sends to the topic go through the geo sender, receives from
``topic/Subscriptions/sub`` through a de-duplicating geo receiver."""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from gateway.proxy import Proxy
from gateway.transports import LocalNamespace
from tests.gateway.proxy.conftest import client

pytestmark = pytest.mark.anyio

TOPIC, SUB = "events", "audit"


async def test_a_subscription_receives_each_topic_send_once(proxy: Proxy, data_dir: Path) -> None:
    # Given a topic with one subscription in both namespaces
    for name in ("primary", "secondary"):
        ns = LocalNamespace(name, data_dir=data_dir)
        ns.create_topic(TOPIC)
        ns.create_subscription(TOPIC, SUB)
    ids = [f"m{i}" for i in range(5)]
    async with client(proxy.connection_string()) as c:
        # When the SDK sends to the topic through the proxy
        async with c.get_topic_sender(TOPIC) as sender:
            await sender.send_messages([ServiceBusMessage("x", message_id=i) for i in ids])
        # Then its subscription, received through the proxy, has each message once
        got: list[str] = []
        async with c.get_subscription_receiver(TOPIC, SUB, max_wait_time=1) as receiver:
            while batch := await receiver.receive_messages(max_message_count=10,
                                                           max_wait_time=0.5):
                for m in batch:
                    got.append(str(m.message_id))
                    await receiver.complete_message(m)
    assert sorted(got) == ids
