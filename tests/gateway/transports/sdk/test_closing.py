"""Closing what an SDK transport drops: a close that runs because its caller was
cancelled still runs (bounded by its own timeout), so no connection is left open.

The namespaces' senders here are twins that record their close: what is checked is the
transport's own logic (a cancelled probe closes the link it opened), whichever SDK is
behind it.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.transports.servicebus import ServiceBusTransport
from tests.gateway.emulator.conftest import QUEUE

pytestmark = pytest.mark.anyio

CONN = ("Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true")


class HungSender:
    """A sender whose link never opens (a hung namespace), and which records its close."""

    def __init__(self, closes: list[str], close_takes: float = 0.0) -> None:
        self.closes = closes
        self.close_takes = close_takes

    async def __aenter__(self) -> HungSender:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        await anyio.sleep(self.close_takes)
        self.closes.append("closed")


class HungClient:
    def __init__(self, closes: list[str], close_takes: float = 0.0) -> None:
        self.closes = closes
        self.close_takes = close_takes

    def get_queue_sender(self, entity: str, **_: Any) -> HungSender:
        return HungSender(self.closes, self.close_takes)

    async def close(self) -> None:
        pass


async def test_a_probe_given_up_by_its_caller_closes_the_link_it_opened():
    # Given a Service Bus transport whose namespace hangs
    closes: list[str] = []
    async with ServiceBusTransport.from_connection_string(
            CONN, name="primary", probe_entity=QUEUE) as transport:
        transport._client = HungClient(closes, close_takes=0.01)
        # When the caller gives the probe up at its own deadline, three times
        for _ in range(3):
            with anyio.move_on_after(0.05):
                await transport.probe()
        # Then each new link the probes opened was closed all the same
        assert closes == ["closed"] * 3


async def test_a_close_that_does_not_finish_is_given_up_at_its_own_timeout(monkeypatch):
    # Given a link whose close never finishes, and a short close timeout
    from gateway.transports.sdk import _transport as sdk_transport

    monkeypatch.setattr(sdk_transport, "CLOSE_TIMEOUT", 0.05)
    closes: list[str] = []
    async with ServiceBusTransport.from_connection_string(
            CONN, name="primary", probe_entity=QUEUE) as transport:
        transport._client = HungClient(closes, close_takes=3600)
        # When a cancelled probe closes it
        with anyio.fail_after(2):  # the shielded close does not outlive its own timeout
            with anyio.move_on_after(0.05):
                await transport.probe()
        # Then the close was given up (it never finished) and the probe returned
        assert closes == []
