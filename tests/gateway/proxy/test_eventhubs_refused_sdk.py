"""An Event Hubs consumer through the proxy is refused at attach, with a description that
says why and what to use instead (the unmodified azure-eventhub SDK)."""

from __future__ import annotations

import asyncio
import contextlib

import anyio
import pytest
from azure.eventhub.aio import EventHubConsumerClient

from gateway.proxy import Proxy

pytestmark = pytest.mark.anyio


async def test_an_event_hubs_consumer_is_refused_with_the_reason_and_the_way_instead(
        proxy: Proxy) -> None:
    # Given the azure-eventhub consumer of partition 0 of a hub, pointed at the proxy
    errors: list[Exception] = []
    refused = asyncio.Event()

    async def on_event(partition_context: object, event: object) -> None:
        raise AssertionError("the proxy must not deliver events")

    async def on_error(partition_context: object, error: Exception) -> None:
        errors.append(error)
        refused.set()

    consumer = EventHubConsumerClient.from_connection_string(
        proxy.connection_string(), consumer_group="$Default", eventhub_name="telemetry",
        retry_total=0)
    # When it receives
    task = asyncio.create_task(consumer.receive(on_event, partition_id="0",
                                                starting_position="-1", on_error=on_error))
    try:
        with anyio.fail_after(20):
            await refused.wait()
    finally:
        await consumer.close()
        task.cancel()  # its processor sleeps out a load-balancing interval after close()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Then it is refused (at its first $management request for the hub's partitions, and a
    # partition link at attach): why (positions do not survive a failover), and what to use
    text = str(errors[0])
    assert "does not serve Event Hubs consumers" in text, text
    assert "AsyncGeoPartitionReceiver" in text, text
