"""Live Azure tests: they run only when these variables name real namespaces.

- ``GEOGATEWAY_LIVE_SERVICEBUS``: a Service Bus connection string;
  ``GEOGATEWAY_LIVE_QUEUE``: a queue in it that the tests may fill and drain.
- ``GEOGATEWAY_LIVE_EVENTHUBS``: an Event Hubs connection string;
  ``GEOGATEWAY_LIVE_EVENTHUB``: an event hub in it that the tests may write to and
  read with owner levels (consumer group ``$Default``).
- ``GEOGATEWAY_LIVE_RELAY`` (and the variables the relay tests name): Azure Relay
  hybrid connections for the relay client and listener (test_relay_*_live.py).

Use dedicated entities: the tests settle and fence what they find there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.transports.eventhubs import EventHubsTransport
from gateway.transports.servicebus import ServiceBusTransport


def _require(*names: str) -> list[str]:
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        pytest.skip(f"live Azure test: set {' and '.join(missing)} to run it")
    return [os.environ[name] for name in names]


@pytest.fixture
def run_id() -> str:
    """A prefix that marks this run's messages among others in a shared entity."""
    return f"geogateway-live-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def servicebus_settings() -> tuple[str, str]:
    conn_str, queue = _require("GEOGATEWAY_LIVE_SERVICEBUS", "GEOGATEWAY_LIVE_QUEUE")
    return conn_str, queue


@pytest.fixture
def eventhubs_settings() -> tuple[str, str]:
    conn_str, hub = _require("GEOGATEWAY_LIVE_EVENTHUBS", "GEOGATEWAY_LIVE_EVENTHUB")
    return conn_str, hub


@pytest.fixture
async def servicebus(servicebus_settings: tuple[str, str]) -> AsyncIterator[ServiceBusTransport]:
    # Real namespaces are further away than the emulator: allow slower answers.
    async with ServiceBusTransport.from_connection_string(
            servicebus_settings[0], name="live", operation_timeout=10.0,
            probe_timeout=10.0) as transport:
        yield transport


@pytest.fixture
async def eventhubs(eventhubs_settings: tuple[str, str]) -> AsyncIterator[EventHubsTransport]:
    async with EventHubsTransport.from_connection_string(
            eventhubs_settings[0], name="live", operation_timeout=10.0,
            probe_timeout=10.0) as transport:
        yield transport
