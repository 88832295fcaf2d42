"""A proxy that stops answers the sends it accepted before it closes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from gateway.geo import GatewayConfig
from gateway.proxy import Proxy
from gateway.transports import LocalNamespace
from tests.gateway.proxy.conftest import QUEUE, client, drain_local

pytestmark = pytest.mark.anyio


async def test_stop_finishes_a_send_under_way(config: GatewayConfig, data_dir: Path) -> None:
    # Given a primary that takes half a second to answer
    LocalNamespace("primary", data_dir=data_dir).set_faults(latency=0.5)
    proxy = Proxy(config, recovery=False)
    await proxy.start()
    try:
        async with client(proxy.connection_string()) as c, \
                c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            sending = asyncio.create_task(
                sender.send_messages(ServiceBusMessage("slow", message_id="slow")))
            await asyncio.sleep(0.25)  # the delivery is with the geo sender now
            # When the proxy is stopped meanwhile
            await proxy.stop()
            # Then the send is answered (accepted: it is in the namespace), not cut off
            await asyncio.wait_for(sending, 5)
    finally:
        await proxy.aclose()
    LocalNamespace("primary", data_dir=data_dir).set_faults()
    assert await drain_local(data_dir, "primary") == ["slow"]
