"""FaultyTransport.prepare_send: the wrapped transport's links are opened ahead of sends
(so a failover or a hedge to it does not wait for them), but not while a fault says
the namespace cannot be reached."""

from __future__ import annotations

import pytest

from gateway.transports import FaultyTransport
from gateway.transports.base import Transport

pytestmark = pytest.mark.anyio


class Preparing(Transport):
    """Records the entities it was asked to prepare."""

    namespace = "primary"

    def __init__(self) -> None:
        self.prepared: list[str] = []

    async def prepare_send(self, entity: str) -> None:
        self.prepared.append(entity)


async def test_prepare_send_reaches_the_wrapped_transport_unless_down_or_hung() -> None:
    inner = Preparing()
    faulty = FaultyTransport(inner)
    # When it is up / Then the wrapped transport opens its link, and no call is recorded
    await faulty.prepare_send("orders")
    assert inner.prepared == ["orders"] and faulty.calls == []
    # When it is down, or hangs / Then nothing is opened (and nothing waits)
    faulty.go_down()
    await faulty.prepare_send("orders")
    faulty.come_up()
    faulty.hang()
    await faulty.prepare_send("orders")
    assert inner.prepared == ["orders"]
    faulty.unhang()
