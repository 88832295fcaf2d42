"""ServiceBusTransport against a real Service Bus namespace (see conftest for the variables)."""

from __future__ import annotations

import re
import time

import pytest

from gateway.transports import ReceivedMessage
from gateway.transports.servicebus import ServiceBusTransport
from replication import Message, MessageRejected

pytestmark = [pytest.mark.azure, pytest.mark.anyio]


async def _collect(sb: ServiceBusTransport, entity: str, ids: set[str], *,
                   timeout: float = 30.0) -> dict[str, ReceivedMessage]:
    """Receive until every id in ``ids`` came; others' messages are abandoned."""
    found: dict[str, ReceivedMessage] = {}
    deadline = time.monotonic() + timeout
    while set(found) != ids and time.monotonic() < deadline:
        for received in await sb.receive(entity, max_messages=20, max_wait=2):
            if received.message_id in ids:
                found[received.message_id] = received
            else:
                await sb.abandon(received)
    assert set(found) == ids, f"missing {sorted(ids - set(found))}"
    return found


async def test_send_receive_complete(servicebus: ServiceBusTransport,
                                     servicebus_settings: tuple[str, str], run_id: str) -> None:
    queue = servicebus_settings[1]
    sent = [Message(f"body {i}".encode(), message_id=f"{run_id}-{i}",
                    properties={"i": i, "big": 2**40, "run": run_id}) for i in range(3)]
    await servicebus.send(queue, sent)
    found = await _collect(servicebus, queue, {m.message_id for m in sent})
    for message in sent:
        received = found[message.message_id]
        assert received.message == message
        assert received.delivery_count == 1 and received.lock_token
        await servicebus.complete(received)


async def test_abandon_and_dead_letter(servicebus: ServiceBusTransport,
                                       servicebus_settings: tuple[str, str], run_id: str) -> None:
    queue = servicebus_settings[1]
    await servicebus.send(queue, [Message(b"x", message_id=run_id)])
    first = (await _collect(servicebus, queue, {run_id}))[run_id]
    await servicebus.abandon(first)
    second = (await _collect(servicebus, queue, {run_id}))[run_id]
    assert second.delivery_count == 2
    await servicebus.dead_letter(second, reason="live-test", description="dead-lettered")
    dead = (await _collect(servicebus, f"{queue}/$DeadLetterQueue", {run_id}))[run_id]
    assert dead.message.properties["DeadLetterReason"] == "live-test"
    await servicebus.complete(dead)


async def test_probe_and_refusals(servicebus: ServiceBusTransport,
                                  servicebus_settings: tuple[str, str]) -> None:
    await servicebus.probe()
    with pytest.raises(MessageRejected):
        await servicebus.send(f"geogateway-missing-{int(time.time())}", [Message(b"x")])
    # A wrong key is refused for good, and never quoted
    conn_str = servicebus_settings[0]
    wrong = re.sub(r"(?i)(SharedAccessKey=)[^;]+", r"\1d3Jvbmcta2V5LXdyb25nLWtleQ==", conn_str)
    key = re.search(r"(?i)SharedAccessKey=([^;]+)", conn_str)
    async with ServiceBusTransport.from_connection_string(wrong, name="live") as bad:
        with pytest.raises(MessageRejected) as info:
            await bad.send(servicebus_settings[1], [Message(b"x")])
    assert key is None or key.group(1) not in str(info.value)
